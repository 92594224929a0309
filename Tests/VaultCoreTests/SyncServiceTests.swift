import Foundation
import Testing
import VaultProtocol

@testable import VaultCore

#if canImport(Glibc)
import Glibc
#endif

/// The sync passes in-process, on two vaults sharing one folder, for what a peer controls:
/// segments sealed under the group key but holding what this keychain must not store, files
/// over their bound, links in the folder.
@Suite struct SyncServiceTests {
    /// Two initialised vaults paired through `folder`, with their services (no watcher: each
    /// test runs the passes itself).
    static func withPair(_ body: (Vault, SyncService, Vault, SyncService, String) throws -> Void)
        throws
    {
        try withTemporaryDirectory { tmp in
            let folder = tmp + "/folder"
            try FileManager.default.createDirectory(
                atPath: folder, withIntermediateDirectories: true)
            let a = try Vault(dataDirectory: tmp + "/a", passphrasePolicy: .tests)
            let b = try Vault(dataDirectory: tmp + "/b", passphrasePolicy: .tests)
            defer {
                a.close()
                b.close()
            }
            for v in [a, b] { _ = try v.session(for: .owner).initialize(passphrase: nil) }
            let sa = SyncService(vault: a)
            let sb = SyncService(vault: b)
            _ = try sa.initialize(folder: folder, in: sa.vault.session(for: .owner))
            let code = try #require(
                try sb.join(folder: folder, in: sb.vault.session(for: .owner)).code)
            _ = try sa.approve(code: code, in: sa.vault.session(for: .owner))
            try sb.passNow()
            #expect(try sb.status(in: sb.vault.session(for: .owner)).state == "member")
            try body(a, sa, b, sb, folder)
        }
    }

    /// Three vaults in one group: A made it, B and C joined through it.
    static func withTrio(
        _ body: (Vault, SyncService, Vault, SyncService, Vault, SyncService, String) throws -> Void
    ) throws {
        try withPair { a, sa, b, sb, folder in
            try withTemporaryDirectory { tmp in
                let c = try Vault(dataDirectory: tmp + "/c", passphrasePolicy: .tests)
                defer { c.close() }
                _ = try c.session(for: .owner).initialize(passphrase: nil)
                let sc = SyncService(vault: c)
                let code = try #require(
                    try sc.join(folder: folder, in: sc.vault.session(for: .owner)).code)
                _ = try sa.approve(code: code, in: sa.vault.session(for: .owner))
                try sc.passNow()
                try sb.passNow()
                #expect(try sc.status(in: sc.vault.session(for: .owner)).state == "member")
                try body(a, sa, b, sb, c, sc, folder)
            }
        }
    }

    static func deviceID(_ s: SyncService) throws -> SyncDeviceID {
        try #require(
            SyncDeviceID(hex: try s.status(in: s.vault.session(for: .owner)).deviceID ?? ""))
    }

    /// The group keys a vault holds, and its signing key.
    static func keys(_ v: Vault) throws -> (SyncKeyring, SecureBytes) {
        let ring = try #require(try v.syncSecret("keyring").flatMap { SyncKeyring(encoded: $0) })
        return (ring, try #require(try v.syncSecret("signSecret")))
    }

    /// A segment of `changes` written in the folder as device `device`'s sequence `seq`,
    /// sealed under `v`'s current key and signed with `v`'s signing key.
    static func write(
        _ changes: [SyncChange], as device: SyncDeviceID, seq: UInt64, with v: Vault, folder: String
    ) throws {
        let (ring, sign) = try keys(v)
        let (id, key) = try #require(ring.current)
        let f = SyncFolder(root: folder)
        try f.makeDeviceDirectory(device)
        try f.writeFile(
            SyncSegment(device: device, sequence: seq, changes: changes).sealed(
                key: key, keyID: id, signingKey: sign), device: device,
            name: SyncSegment.fileName(seq))
    }

    static func addChange(
        _ service: String, secret s: String, device: SyncDeviceID, wall: UInt64 = HybridClock.now(),
        accessible: String? = nil
    ) -> SyncChange {
        var fields: [SyncField: SyncValue?] = [:]
        for field in SyncField.allCases { fields[field] = .some(nil) }
        if let accessible { fields[.accessible] = .bytes(Array(accessible.utf8)) }
        fields[.secret] = .secret(secret(s))
        let k = SyncItemKey(
            itemClass: .genericPassword, accessGroup: Caller.ownerAccessGroup,
            primaryKey: [service, "acct"])
        return SyncChange(
            key: k, timestamp: SyncTimestamp(wall: wall, counter: 0, device: device),
            kind: .write(fields))
    }

    static func add(_ v: Vault, service: String, secret s: String, sync: Bool = true) throws {
        _ = try v.session(for: .owner).addItem(
            .genericPassword,
            attributes: ItemAttributes(service: service, account: "acct", synchronizable: sync),
            secret: secret(s))
    }

    static func secretOf(_ v: Vault, service: String) -> String? {
        guard
            let found = try? v.session(for: .owner).copyMatching(
                ItemQuery(
                    itemClass: .genericPassword, attributes: ItemAttributes(service: service)),
                returnData: true),
            let d = found.first?.data
        else { return nil }
        return d.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }
    }

    static func rejected(_ s: SyncService, _ device: SyncDeviceID) throws -> Int? {
        try s.status(in: s.vault.session(for: .owner)).devices.first {
            $0.deviceID == device.description
        }?.rejected
    }

    @Test func itemsCrossAndTheLocalOnlyOnesStay() throws {
        try Self.withPair { a, sa, b, sb, _ in
            try Self.add(a, service: "shared", secret: "one")
            try Self.add(a, service: "mine", secret: "two", sync: false)
            try sa.passNow()
            try sb.passNow()
            #expect(Self.secretOf(b, service: "shared") == "one")
            #expect(Self.secretOf(b, service: "mine") == nil)
            // Deleted on B: gone from A after the passes.
            _ = try b.session(for: .owner).deleteItems(
                ItemQuery(
                    itemClass: .genericPassword, attributes: ItemAttributes(service: "shared")))
            try sb.passNow()
            try sa.passNow()
            #expect(Self.secretOf(a, service: "shared") == nil)
            #expect(Self.secretOf(a, service: "mine") == "two")
        }
    }

    /// The folder's segments lost (emptied, or a new copy of it), both devices restarted: no
    /// item is taken for deleted (only a deletion deletes); each is written to the folder again.
    @Test func aFolderThatLostItsSegmentsDeletesNothing() throws {
        try Self.withPair { a, sa, b, sb, folder in
            try Self.add(a, service: "precious", secret: "keep me")
            try sa.passNow()
            try sb.passNow()
            #expect(Self.secretOf(b, service: "precious") == "keep me")
            for name in FileManager.default.subpaths(atPath: folder) ?? []
            where name.hasSuffix(".seg") {
                try FileManager.default.removeItem(atPath: folder + "/" + name)
            }
            // New services: a vaultd started again reads the folder anew.
            let sa2 = SyncService(vault: a)
            let sb2 = SyncService(vault: b)
            try sb2.passNow()
            try sa2.passNow()
            try sb2.passNow()
            #expect(Self.secretOf(a, service: "precious") == "keep me")
            #expect(Self.secretOf(b, service: "precious") == "keep me")
            #expect(
                (FileManager.default.subpaths(atPath: folder) ?? []).contains {
                    $0.hasSuffix(".seg")
                })
            #expect(try sa2.status(in: sa2.vault.session(for: .owner)).items == 1)
        }
    }

    /// The folder lost A's latest segment (a label change) but kept the older ones: A still
    /// holds the change, sees the folder no longer does, and writes it again; B, which had
    /// reverted to nothing newer, gets it back. Nothing reverts.
    @Test func aLostLatestSegmentIsWrittenAgainNotReverted() throws {
        try Self.withPair { a, sa, b, sb, folder in
            try Self.add(a, service: "svc", secret: "s")
            try sa.passNow()
            try sb.passNow()
            let q = ItemQuery(
                itemClass: .genericPassword, attributes: ItemAttributes(service: "svc"))
            _ = try a.session(for: .owner).updateItems(
                q, changes: ItemAttributes(label: "newer"), secret: nil)
            try sa.passNow()
            try sb.passNow()
            func label(_ v: Vault) -> String? {
                try? v.session(for: .owner).copyMatching(q, returnData: false).first?.attributes
                    .label
            }
            #expect(label(b) == "newer")
            let aID = try #require(
                SyncDeviceID(hex: try sa.status(in: sa.vault.session(for: .owner)).deviceID ?? ""))
            let dir = folder + "/devices/" + aID.description
            let latest = try #require(
                try FileManager.default.contentsOfDirectory(atPath: dir).filter {
                    $0.hasSuffix(".seg")
                }.sorted().last)
            try FileManager.default.removeItem(atPath: dir + "/" + latest)
            let sa2 = SyncService(vault: a)
            let sb2 = SyncService(vault: b)
            try sa2.passNow()
            try sb2.passNow()
            try sa2.passNow()
            #expect(label(a) == "newer")
            #expect(label(b) == "newer")
        }
    }

    /// A segment of a member (A's signing key, A's name) that holds an item this keychain
    /// must not store (a ThisDeviceOnly accessibility) beside a good one: the good one is
    /// stored, the other is not, and the log says so without its content.
    /// A's copy of a synced item damaged (8 bytes of its attributes or its secret zeroed in
    /// the store, as on disk), then A's sync started again (a pass that reads every item):
    /// the pass does not fail; the item is held (no deletion of it is exported, B's change
    /// of it is not written over it) and named in the status; every other item syncs both
    /// ways; deleted on A, it takes the group's copy back.
    @Test(arguments: ["attributes", "secret"])
    func aDamagedItemIsHeldReportedAndTheOthersSync(_ column: String) throws {
        try Self.withPair { a, sa, b, sb, _ in
            try Self.add(a, service: "hurt", secret: "h")
            try Self.add(a, service: "fine", secret: "f")
            try sa.passNow()
            try sb.passNow()
            #expect(Self.secretOf(b, service: "hurt") == "h")
            let (id, uuid, value): (Int64, String, [UInt8]) = try a.read { db in
                let r = try #require(
                    try db.row(
                        "SELECT id, lower(hex(uuid)), \(column) FROM items ORDER BY id LIMIT 1"))
                return (try #require(r[0].int64), try #require(r[1].text), try #require(r[2].blob))
            }
            var altered = value
            altered.replaceSubrange(
                value.count / 2..<value.count / 2 + 8, with: [UInt8](repeating: 0, count: 8))
            _ = try a.write { db in
                try db.run(
                    "UPDATE items SET \(column) = ? WHERE id = ?", [.blob(altered), .integer(id)])
            }

            let sa2 = SyncService(vault: a)
            try sa2.passNow()
            let named = try sa2.status(in: sa2.vault.session(for: .owner)).damaged
            #expect(named.map(\.id) == [Int64(id)], "\(named)")
            #expect(named.first?.uuid == uuid && named.first?.part.rawValue == column, "\(named)")
            #expect(
                named.first?.accessGroup == Caller.ownerAccessGroup
                    && named.first?.itemClass == "genericPassword")
            try sb.passNow()
            #expect(
                Self.secretOf(b, service: "hurt") == "h",
                "no deletion of the damaged item reached B")
            #expect(try sb.status(in: sb.vault.session(for: .owner)).damaged.isEmpty)

            // The others sync both ways; B's change of the damaged item is not written over it.
            try Self.add(b, service: "from-b", secret: "b")
            _ = try b.session(for: .owner).updateItems(
                ItemQuery(itemClass: .genericPassword, attributes: ItemAttributes(service: "hurt")),
                changes: ItemAttributes(), secret: secret("h2"))
            try sb.passNow()
            try sa2.passNow()
            #expect(Self.secretOf(a, service: "from-b") == "b")
            #expect(Self.secretOf(a, service: "fine") == "f")
            try Self.add(a, service: "from-a", secret: "a")
            try sa2.passNow()
            try sb.passNow()
            #expect(Self.secretOf(b, service: "from-a") == "a")
            #expect(try sa2.status(in: sa2.vault.session(for: .owner)).damaged.count == 1)
            #expect(
                try a.session(for: .owner).checkStore().damaged.map(\.id) == [id],
                "the damaged row is left as it was")

            // Deleted on A (a Delete naming its service), it comes back from the group.
            #expect(
                try a.session(for: .owner).deleteItems(
                    ItemQuery(
                        itemClass: .genericPassword, attributes: ItemAttributes(service: "hurt")))
                    == 1)
            try sa2.passNow()
            #expect(Self.secretOf(a, service: "hurt") == "h2")
            #expect(try sa2.status(in: sa2.vault.session(for: .owner)).damaged.isEmpty)
            try sb.passNow()
            #expect(Self.secretOf(b, service: "hurt") == "h2")
        }
    }

    @Test func aPeersUnstorableItemIsLeftOutAndTheRestApplied() throws {
        try Self.withPair { a, sa, b, sb, folder in
            let aID = try Self.deviceID(sa)
            try Self.write(
                [
                    Self.addChange(
                        "bound", secret: "x", device: aID, wall: 1,
                        accessible: "whenUnlockedThisDeviceOnly"),
                    Self.addChange(
                        "fine", secret: "ok", device: aID, wall: 2, accessible: "afterFirstUnlock"),
                ], as: aID, seq: 1000, with: a, folder: folder)
            try sb.passNow()
            #expect(Self.secretOf(b, service: "fine") == "ok")
            #expect(Self.secretOf(b, service: "bound") == nil)
            #expect(try Self.rejected(sb, aID) == 0)
        }
    }

    /// A segment file over the size bound is refused before a byte of it is read (a sparse
    /// file: its size is all there is), counted, and tried again only once its size changes.
    @Test func aSegmentOverItsBoundIsRefusedUnread() throws {
        try Self.withPair { _, sa, _, sb, folder in
            let peer = try Self.deviceID(sa)
            let f = SyncFolder(root: folder)
            let path = f.directory(peer) + "/" + SyncSegment.fileName(1000)
            let fd = open(path, O_WRONLY | O_CREAT, 0o600)
            try #require(fd >= 0)
            #expect(ftruncate(fd, off_t(SyncSegment.maximumFileBytes + 1)) == 0)
            close(fd)
            #expect(throws: SyncFormatError.self) {
                _ = try f.readSegment(device: peer, sequence: 1000)
            }
            try sb.passNow()
            try sb.passNow()
            #expect(try Self.rejected(sb, peer) == 1)
        }
    }

    /// A link in the place of a device directory (an engine carries links) is not followed:
    /// what it points at is not read, and this device refuses to write through one.
    @Test func linksInTheFolderAreNotFollowed() throws {
        try Self.withPair { a, sa, b, sb, folder in
            let elsewhere = folder + "/../elsewhere"
            try FileManager.default.createDirectory(
                atPath: elsewhere, withIntermediateDirectories: true)
            let peer = SyncDeviceID.random()
            #expect(symlink(elsewhere, folder + "/devices/" + peer.description) == 0)
            let (ring, sign) = try Self.keys(b)
            let (id, key) = try #require(ring.current)
            let s = SyncSegment(
                device: peer, sequence: 1,
                changes: [Self.addChange("linked", secret: "linked", device: peer, wall: 5)])
            try Data(s.sealed(key: key, keyID: id, signingKey: sign)).write(
                to: URL(fileURLWithPath: elsewhere + "/" + SyncSegment.fileName(1)))
            try sb.passNow()
            #expect(Self.secretOf(b, service: "linked") == nil)
            #expect(try SyncFolder(root: folder).scan().links == [peer])
            #expect(try SyncFolder(root: folder).list()[peer] == nil)

            // A's own directory replaced by a link: A's next export refuses to write through it.
            let aID = try #require(
                SyncDeviceID(hex: try sa.status(in: sa.vault.session(for: .owner)).deviceID ?? ""))
            let own = folder + "/devices/" + aID.description
            try FileManager.default.moveItem(atPath: own, toPath: own + ".moved")
            #expect(symlink(elsewhere, own) == 0)
            try Self.add(a, service: "after", secret: "s")
            #expect(throws: VaultFailure.self) { try sa.passNow() }
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: elsewhere) == [
                    SyncSegment.fileName(1)
                ])
        }
    }

    static func segmentFiles(_ folder: String, _ d: SyncDeviceID) -> [UInt64] {
        ((try? FileManager.default.contentsOfDirectory(atPath: folder + "/devices/" + d.description))
            ?? []).compactMap(SyncSegment.sequence(ofFileName:)).sorted()
    }

    static func member(_ s: SyncService, _ d: SyncDeviceID) throws -> String? {
        try s.status(in: s.vault.session(for: .owner)).devices.first {
            $0.deviceID == d.description
        }?.membership
    }

    /// A removes C: the removal and a new key (generation 2, sealed to A and B) go into the
    /// folder; B follows the removal. What A writes after it opens under no key C's data
    /// directory holds; C's later writes in its own name (signed by it, under the old key)
    /// and its writes in B's name (under the old key, signed by C) are applied by no one.
    @Test func aRemovedDeviceOpensNothingWrittenAfterAndItsWritesAreNotApplied() throws {
        try Self.withTrio { a, sa, b, sb, c, sc, folder in
            try Self.add(c, service: "before", secret: "from C")
            try sc.passNow()
            try sa.passNow()
            try sb.passNow()
            #expect(Self.secretOf(b, service: "before") == "from C")
            let aID = try Self.deviceID(sa)
            let bID = try Self.deviceID(sb)
            let cID = try Self.deviceID(sc)
            let removed = try sa.remove(device: cID.description, in: sa.vault.session(for: .owner))
            #expect(removed.keyGeneration == 2)
            let removalSeq = try #require(Self.segmentFiles(folder, aID).last)
            try Self.add(a, service: "after", secret: "not for C")
            try sa.passNow()
            try sb.passNow()
            try sc.passNow()
            #expect(Self.secretOf(b, service: "after") == "not for C")
            #expect(Self.secretOf(c, service: "after") == nil)
            #expect(Self.secretOf(b, service: "before") == "from C")
            // Membership converged: both remaining devices see C removed, hold one key.
            for s in [sa, sb] {
                #expect(try Self.member(s, cID) == "removed")
                #expect(try s.status(in: s.vault.session(for: .owner)).keyGeneration == 2)
            }
            #expect(try sc.status(in: sc.vault.session(for: .owner)).state == "removed")

            // C's keys, from its own data directory, open nothing A wrote after the removal.
            let (cRing, cSign) = try Self.keys(c)
            #expect(cRing.keys.keys.map(\.generation) == [1])
            let later = Self.segmentFiles(folder, aID).filter { $0 > removalSeq }
            #expect(!later.isEmpty)
            let f = SyncFolder(root: folder)
            for seq in later {
                let bytes = try f.readSegment(device: aID, sequence: seq)
                #expect(SyncSegment.keyID(of: bytes)?.generation == 2)
                for (id, key) in cRing.keys {
                    #expect(throws: SyncFormatError.self) {
                        _ = try SyncSegment.open(
                            bytes, key: key, device: aID, sequence: seq,
                            verifyKey: SyncSigning.publicKey(of: try Self.keys(a).1))
                    }
                    _ = id
                }
            }

            // C writes on: its own name, a later sequence, under the key it holds.
            let cNext = (Self.segmentFiles(folder, cID).last ?? 0) + 1
            try Self.write(
                [Self.addChange("evil", secret: "from removed C", device: cID)], as: cID,
                seq: cNext, with: c, folder: folder)
            // And in B's name (B's directory and a sequence B has not used), signed by C.
            let bNext = (Self.segmentFiles(folder, bID).last ?? 0) + 50
            try Self.write(
                [Self.addChange("forged", secret: "not B's", device: bID)], as: bID, seq: bNext,
                with: c, folder: folder)
            _ = cSign
            for (v, s) in [(a, sa), (b, sb)] {
                try s.passNow()
                #expect(Self.secretOf(v, service: "evil") == nil)
                #expect(Self.secretOf(v, service: "forged") == nil)
                #expect(try Self.rejected(s, cID) == 1)
                #expect(try Self.rejected(s, bID) == 1)
            }
            // C puts another version of its segment from before the removal in place (signed
            // by it, under the old key): no one applies it, even reading the folder anew.
            let cFirst = try #require(
                Self.segmentFiles(folder, cID).first { seq in
                    (try? SyncFolder(root: folder).readSegment(device: cID, sequence: seq)).map {
                        _ in true
                    } ?? false
                })
            try FileManager.default.removeItem(
                atPath: folder + "/devices/" + cID.description + "/" + SyncSegment.fileName(cFirst))
            try Self.write(
                [Self.addChange("before", secret: "rewritten by C", device: cID, wall: 1)], as: cID,
                seq: cFirst, with: c, folder: folder)
            // A new service (vaultd started again) reads the folder anew to the same result.
            let sb2 = SyncService(vault: b)
            try sb2.passNow()
            #expect(Self.secretOf(b, service: "evil") == nil)
            // C took its own change out of the folder (as any device may withhold its files):
            // its other version is not applied in its place.
            #expect(Self.secretOf(b, service: "before") != "rewritten by C")
            #expect(Self.secretOf(b, service: "after") == "not for C")
            #expect(try Self.rejected(sb2, cID) == 2)
        }
    }

    /// C leaves: its leaving is recorded, signed, and the next device to write makes a new key
    /// without it first; what C's old keys hold opens nothing written after.
    @Test func aDeviceThatLeftCannotReadWhatIsWrittenAfter() throws {
        try Self.withTrio { a, sa, b, sb, c, sc, folder in
            let aID = try Self.deviceID(sa)
            let cID = try Self.deviceID(sc)
            let (cRing, _) = try Self.keys(c)
            try sc.leave(in: sc.vault.session(for: .owner))
            try sa.passNow()
            // Left, not removed, and its leaving segment read, not refused.
            #expect(try Self.member(sa, cID) == "left")
            #expect(try Self.rejected(sa, cID) == 0)
            let before = Self.segmentFiles(folder, aID).last ?? 0
            try Self.add(a, service: "after leave", secret: "s")
            try sa.passNow()
            try sb.passNow()
            #expect(Self.secretOf(b, service: "after leave") == "s")
            #expect(try sa.status(in: sa.vault.session(for: .owner)).keyGeneration == 2)
            #expect(try sb.status(in: sb.vault.session(for: .owner)).keyGeneration == 2)
            let f = SyncFolder(root: folder)
            for seq in Self.segmentFiles(folder, aID) where seq > before {
                let bytes = try f.readSegment(device: aID, sequence: seq)
                let id = try #require(SyncSegment.keyID(of: bytes))
                // The rotation's own record is under the old key; everything after, under the new one.
                if id.generation == 2 { #expect(cRing.keys[id] == nil) }
            }
            #expect(
                Self.segmentFiles(folder, aID).contains { seq in
                    (try? f.readSegment(device: aID, sequence: seq)).flatMap(
                        SyncSegment.keyID(of:))?.generation == 2
                })
            // Read anew (a vaultd started again): still left, its leaving not refused.
            let again = SyncService(vault: a)
            try again.passNow()
            #expect(try Self.member(again, cID) == "left")
            #expect(try Self.rejected(again, cID) == 0)
            #expect(
                try again.status(in: again.vault.session(for: .owner)).devices.first {
                    $0.deviceID == cID.description
                }?
                .pending == 0)
        }
    }

    /// With a low threshold, A's segments are replaced by one snapshot once B has
    /// acknowledged them; a deletion both merged goes with it; B and a device joining
    /// afterwards see the same items; an old segment put back in the folder changes nothing.
    @Test func compactionReplacesSegmentsWithoutChangingTheMerge() throws {
        try Self.withPair { a, sa, b, sb, folder in
            sa.compactionThreshold = 4
            let aID = try Self.deviceID(sa)
            for i in 0..<3 {
                try Self.add(a, service: "keep\(i)", secret: "k\(i)")
                try Self.add(a, service: "drop\(i)", secret: "d\(i)")
                try sa.passNow()
                try sb.passNow()
            }
            let q = ItemQuery(
                itemClass: .genericPassword, attributes: ItemAttributes(service: "drop1"))
            _ = try a.session(for: .owner).deleteItems(q)
            try sa.passNow()
            try sb.passNow()
            #expect(Self.secretOf(b, service: "drop1") == nil)
            let old = Self.segmentFiles(folder, aID)
            #expect(old.count >= 4)
            let saved = try SyncFolder(root: folder).readSegment(device: aID, sequence: old[0])
            // B's acknowledgement is in; A's next pass compacts.
            try sa.passNow()
            let now = Self.segmentFiles(folder, aID)
            #expect(now.count == 1 && now[0] > old.last!, "\(now)")
            try sb.passNow()
            for (v, name) in [(a, "A"), (b, "B")] {
                for i in 0..<3 {
                    #expect(Self.secretOf(v, service: "keep\(i)") == "k\(i)", "\(name)")
                }
                #expect(Self.secretOf(v, service: "drop1") == nil, "\(name)")
                #expect(Self.secretOf(v, service: "drop0") == "d0", "\(name)")
            }
            // The replayed old segment (its add of drop1 included) changes nothing, for B and
            // for a reader starting over.
            try SyncFolder(root: folder).writeFile(
                saved, device: aID, name: SyncSegment.fileName(old[0]))
            try sb.passNow()
            let sb2 = SyncService(vault: b)
            try sb2.passNow()
            #expect(Self.secretOf(b, service: "drop1") == nil)
            #expect(try sb2.status(in: sb2.vault.session(for: .owner)).items == 5)
            // A later change still crosses.
            try Self.add(a, service: "later", secret: "l")
            try sa.passNow()
            try sb2.passNow()
            #expect(Self.secretOf(b, service: "later") == "l")
        }
    }

    /// A device approved while another made a new key (C left; B rotated before its next
    /// write; A, not having read that yet, approved D with the old key only): B shares its key
    /// with D once it reads D's approval, and D reads what B wrote under it.
    @Test func aDeviceApprovedDuringARotationGetsTheNewKey() throws {
        try Self.withTrio { a, sa, b, sb, c, sc, folder in
            try sc.leave(in: sc.vault.session(for: .owner))
            try sb.passNow()
            try Self.add(b, service: "under the new key", secret: "gen 2")
            try sb.passNow()
            #expect(try sb.status(in: sb.vault.session(for: .owner)).keyGeneration == 2)
            try withTemporaryDirectory { tmp in
                let d = try Vault(dataDirectory: tmp + "/d", passphrasePolicy: .tests)
                defer { d.close() }
                _ = try d.session(for: .owner).initialize(passphrase: nil)
                let sd = SyncService(vault: d)
                let code = try #require(
                    try sd.join(folder: folder, in: sd.vault.session(for: .owner)).code)
                // A approves from what it had read: the first key only.
                _ = try sa.approve(code: code, in: sa.vault.session(for: .owner))
                try sd.passNow()
                #expect(try sd.status(in: sd.vault.session(for: .owner)).state == "member")
                #expect(Self.secretOf(d, service: "under the new key") == nil)
                try sb.passNow()
                try sd.passNow()
                #expect(Self.secretOf(d, service: "under the new key") == "gen 2")
                #expect(
                    try sd.status(in: sd.vault.session(for: .owner)).devices.reduce(0) {
                        $0 + $1.pending
                    } == 0)
                _ = (a, c)
            }
        }
    }

    /// An acknowledgement is taken in only signed by its device, and only as it grows: an
    /// older one put back, or one signed by another device, changes nothing.
    @Test func anOlderOrForgedAckChangesNothing() throws {
        try Self.withPair { a, sa, b, sb, folder in
            let aID = try Self.deviceID(sa)
            let bID = try Self.deviceID(sb)
            try Self.add(a, service: "one", secret: "1")
            try sa.passNow()
            try sb.passNow()
            let f = SyncFolder(root: folder)
            let old = try #require(
                f.readSmallFile(device: bID, name: SyncAck.name, limit: SyncAck.maximumBytes))
            try Self.add(a, service: "two", secret: "2")
            try sa.passNow()
            try sb.passNow()
            try sa.passNow()
            let newer = try #require(sa.acks[bID]?[aID])
            #expect(newer >= 2)
            try f.writeFile(old, device: bID, name: SyncAck.name)
            try sa.passNow()
            #expect(sa.acks[bID]?[aID] == newer)
            let (_, aSign) = try Self.keys(a)
            try f.writeFile(
                SyncAck.file([aID: 999], device: bID, signingKey: aSign), device: bID,
                name: SyncAck.name)
            let sa2 = SyncService(vault: a)
            try sa2.passNow()
            #expect(sa2.acks[bID]?[aID] == nil)
        }
    }
}
