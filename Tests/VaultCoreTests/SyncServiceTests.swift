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
    static func withPair(_ body: (Vault, SyncService, Vault, SyncService, String) throws -> Void) throws {
        try withTemporaryDirectory { tmp in
            let folder = tmp + "/folder"
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            let a = try Vault(dataDirectory: tmp + "/a", passphrasePolicy: .tests)
            let b = try Vault(dataDirectory: tmp + "/b", passphrasePolicy: .tests)
            defer {
                a.close()
                b.close()
            }
            for v in [a, b] { _ = try v.initialize(passphrase: nil, caller: .owner) }
            let sa = SyncService(vault: a), sb = SyncService(vault: b)
            _ = try sa.initialize(folder: folder, caller: .owner)
            let code = try #require(try sb.join(folder: folder, caller: .owner)["code"]?.stringValue)
            _ = try sa.approve(code: code, caller: .owner)
            try sb.passNow()
            #expect(try sb.status(caller: .owner)["state"]?.stringValue == "member")
            try body(a, sa, b, sb, folder)
        }
    }

    static func add(_ v: Vault, service: String, secret s: String, sync: Bool = true) throws {
        _ = try v.addItem(.genericPassword, attributes: ItemAttributes(service: service, account: "acct", synchronizable: sync), secret: secret(s), caller: .owner)
    }

    static func secretOf(_ v: Vault, service: String) -> String? {
        guard let found = try? v.copyMatching(ItemQuery(itemClass: .genericPassword, attributes: ItemAttributes(service: service)), returnData: true, caller: .owner),
            let d = found.first?.data
        else { return nil }
        return d.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }
    }

    static func rejected(_ s: SyncService, _ device: SyncDeviceID) throws -> Int? {
        try s.status(caller: .owner)["devices"]?.arrayValue?.first { $0["deviceID"]?.stringValue == device.description }?["rejected"]?.intValue
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
            _ = try b.deleteItems(ItemQuery(itemClass: .genericPassword, attributes: ItemAttributes(service: "shared")), caller: .owner)
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
            for name in FileManager.default.subpaths(atPath: folder) ?? [] where name.hasSuffix(".seg") {
                try FileManager.default.removeItem(atPath: folder + "/" + name)
            }
            // New services: a vaultd started again reads the folder anew.
            let sa2 = SyncService(vault: a), sb2 = SyncService(vault: b)
            try sb2.passNow()
            try sa2.passNow()
            try sb2.passNow()
            #expect(Self.secretOf(a, service: "precious") == "keep me")
            #expect(Self.secretOf(b, service: "precious") == "keep me")
            #expect((FileManager.default.subpaths(atPath: folder) ?? []).contains { $0.hasSuffix(".seg") })
            #expect(try sa2.status(caller: .owner)["items"]?.intValue == 1)
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
            let q = ItemQuery(itemClass: .genericPassword, attributes: ItemAttributes(service: "svc"))
            _ = try a.updateItems(q, changes: ItemAttributes(label: "newer"), secret: nil, caller: .owner)
            try sa.passNow()
            try sb.passNow()
            func label(_ v: Vault) -> String? { try? v.copyMatching(q, returnData: false, caller: .owner).first?.attributes.label }
            #expect(label(b) == "newer")
            let aID = try #require(SyncDeviceID(hex: try sa.status(caller: .owner)["deviceID"]?.stringValue ?? ""))
            let dir = folder + "/devices/" + aID.description
            let latest = try #require(try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasSuffix(".seg") }.sorted().last)
            try FileManager.default.removeItem(atPath: dir + "/" + latest)
            let sa2 = SyncService(vault: a), sb2 = SyncService(vault: b)
            try sa2.passNow()
            try sb2.passNow()
            try sa2.passNow()
            #expect(label(a) == "newer")
            #expect(label(b) == "newer")
        }
    }

    /// A segment sealed under the group key by a device of the group that holds an item this
    /// keychain must not store (a ThisDeviceOnly accessibility) beside a good one: the good
    /// one is stored, the other is not, and the log says so without its content.
    @Test func aPeersUnstorableItemIsLeftOutAndTheRestApplied() throws {
        try Self.withPair { _, _, b, sb, folder in
            let key = try #require(try b.syncSecret("groupKey"))
            let peer = SyncDeviceID.random()
            let f = SyncFolder(root: folder)
            try f.makeDeviceDirectory(peer)
            func write(_ service: String, accessible: String, secret s: String, wall: UInt64) -> SyncChange {
                var fields: [SyncField: SyncValue?] = [:]
                for field in SyncField.allCases { fields[field] = .some(nil) }
                fields[.accessible] = .bytes(Array(accessible.utf8))
                fields[.secret] = .secret(secret(s))
                let k = SyncItemKey(itemClass: .genericPassword, accessGroup: Caller.ownerAccessGroup, primaryKey: [service, "acct"])
                return SyncChange(key: k, timestamp: SyncTimestamp(wall: wall, counter: 0, device: peer), kind: .write(fields))
            }
            let segment = SyncSegment(device: peer, sequence: 1, changes: [
                write("bound", accessible: "whenUnlockedThisDeviceOnly", secret: "x", wall: 1),
                write("fine", accessible: "afterFirstUnlock", secret: "ok", wall: 2),
            ])
            try f.writeFile(segment.sealed(key: key), device: peer, name: SyncSegment.fileName(1))
            try sb.passNow()
            #expect(Self.secretOf(b, service: "fine") == "ok")
            #expect(Self.secretOf(b, service: "bound") == nil)
            #expect(try Self.rejected(sb, peer) == 0)
        }
    }

    /// A segment file over the size bound is refused before a byte of it is read (a sparse
    /// file: its size is all there is), counted, and tried again only once its size changes.
    @Test func aSegmentOverItsBoundIsRefusedUnread() throws {
        try Self.withPair { _, _, _, sb, folder in
            let peer = SyncDeviceID.random()
            let f = SyncFolder(root: folder)
            try f.makeDeviceDirectory(peer)
            let path = f.directory(peer) + "/" + SyncSegment.fileName(1)
            let fd = open(path, O_WRONLY | O_CREAT, 0o600)
            try #require(fd >= 0)
            #expect(ftruncate(fd, off_t(SyncSegment.maximumFileBytes + 1)) == 0)
            close(fd)
            #expect(throws: SyncFormatError.self) { _ = try f.readSegment(device: peer, sequence: 1) }
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
            try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
            let peer = SyncDeviceID.random()
            #expect(symlink(elsewhere, folder + "/devices/" + peer.description) == 0)
            let key = try #require(try b.syncSecret("groupKey"))
            var fields: [SyncField: SyncValue?] = [:]
            for field in SyncField.allCases { fields[field] = .some(nil) }
            fields[.secret] = .secret(secret("linked"))
            let k = SyncItemKey(itemClass: .genericPassword, accessGroup: Caller.ownerAccessGroup, primaryKey: ["linked", "acct"])
            let s = SyncSegment(device: peer, sequence: 1, changes: [SyncChange(key: k, timestamp: SyncTimestamp(wall: 5, counter: 0, device: peer), kind: .write(fields))])
            try Data(s.sealed(key: key)).write(to: URL(fileURLWithPath: elsewhere + "/" + SyncSegment.fileName(1)))
            try sb.passNow()
            #expect(Self.secretOf(b, service: "linked") == nil)
            #expect(try SyncFolder(root: folder).list()[peer]?.segments.isEmpty == true)

            // A's own directory replaced by a link: A's next export refuses to write through it.
            let aID = try #require(SyncDeviceID(hex: try sa.status(caller: .owner)["deviceID"]?.stringValue ?? ""))
            let own = folder + "/devices/" + aID.description
            try FileManager.default.moveItem(atPath: own, toPath: own + ".moved")
            #expect(symlink(elsewhere, own) == 0)
            try Self.add(a, service: "after", secret: "s")
            #expect(throws: VaultError.self) { try sa.passNow() }
            #expect(try FileManager.default.contentsOfDirectory(atPath: elsewhere) == [SyncSegment.fileName(1)])
        }
    }
}
