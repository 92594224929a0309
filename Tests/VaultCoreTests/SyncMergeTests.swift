import Foundation
import TestSupport
import Testing
import VaultProtocol

@testable import VaultCore

/// The merge of synchronized items as a pure function: its laws over random histories, its
/// rules on chosen ones, and the segment files it reads.
@Suite struct SyncMergeTests {
    static let devices = (0..<3).map { i in
        SyncDeviceID(bytes: [UInt8](repeating: UInt8(i + 1), count: 16))!
    }
    static let keys = (0..<4).map { i in
        SyncItemKey(
            itemClass: i == 3 ? .internetPassword : .genericPassword, accessGroup: "group\(i % 2)",
            primaryKey: i == 3
                ? ["h.example", "https", "443", "", "a", "", ""] : ["svc\(i)", "acct"])
    }

    static func value(_ f: SyncField, _ n: Int) -> SyncValue {
        f == .secret
            ? .secret(SecureBytes(copying: Array("secret-\(n)".utf8))) : .bytes(Array("v\(n)".utf8))
    }

    /// A random history: each device makes `perDevice` changes with its own hybrid clock, wall
    /// clocks drawn from a narrow range so that equal milliseconds (and counters) occur; each
    /// device sometimes merges another's changes so far first, and its writes carry what it
    /// merged as their context (so some writes are concurrent: conflicts). Returned as
    /// segments of 1 to 4 changes, per device in order.
    static func history(seed: UInt64, perDevice: Int = 30) -> [SyncSegment] {
        var rng = SeededRandom(seed: seed)
        var clocks = devices.map { HybridClock(device: $0) }
        var made: [[SyncChange]] = devices.map { _ in [] }
        // What each device has merged.
        var views = devices.map { _ in SyncVault() }
        for step in 0..<(perDevice * devices.count) {
            let d = step % devices.count
            if Bool.random(using: &rng),
                let other = made.indices.filter({ $0 != d }).randomElement(using: &rng),
                let seen = made[other].last
            {
                clocks[d].observe(seen.timestamp, physical: UInt64.max / 2)
                views[d].apply(made[other])
            }
            let t = clocks[d].tick(physical: 1_000 + UInt64.random(in: 0...20, using: &rng))
            let key = keys.randomElement(using: &rng)!
            let kind: SyncChange.Kind
            if Int.random(in: 0..<5, using: &rng) == 0 {
                kind = .delete
            } else if Bool.random(using: &rng) {
                // An add: every field.
                var fields: [SyncField: SyncValue?] = [:]
                for f in SyncField.allCases {
                    fields[f] =
                        Bool.random(using: &rng) || f == .secret
                        ? value(f, Int.random(in: 0..<3, using: &rng)) : .some(nil)
                }
                kind = .write(fields)
            } else {
                var fields: [SyncField: SyncValue?] = [:]
                for f in SyncField.allCases where Int.random(in: 0..<3, using: &rng) == 0 {
                    fields[f] =
                        Int.random(in: 0..<4, using: &rng) == 0
                        ? .some(nil) : value(f, Int.random(in: 0..<3, using: &rng))
                }
                kind = .write(fields)
            }
            var change = SyncChange(key: key, timestamp: t, kind: kind)
            if case .write = kind {
                change.context = (views[d].items[key] ?? SyncItemState()).context(at: t)
            }
            views[d].apply(change)
            made[d].append(change)
        }
        var segments: [SyncSegment] = []
        for (d, changes) in made.enumerated() {
            var at = 0
            var seq: UInt64 = 1
            while at < changes.count {
                let n = min(Int.random(in: 1...4, using: &rng), changes.count - at)
                segments.append(
                    SyncSegment(
                        device: devices[d], sequence: seq, changes: Array(changes[at..<(at + n)])))
                at += n
                seq += 1
            }
        }
        return segments
    }

    static func merged(_ segments: [SyncSegment]) -> SyncVault {
        SyncVault.merge(segments.flatMap(\.changes))
    }

    @Test(arguments: 0..<40) func anyOrderOfTheSameSegmentsGivesTheSameVault(seed: UInt64) {
        let segments = Self.history(seed: seed)
        let reference = Self.merged(segments)
        var rng = SeededRandom(seed: seed &+ 1000)
        // The histories are not trivial: something is live and something was deleted.
        #expect(!reference.liveItems.isEmpty)
        #expect(reference.items.values.contains { $0.tombstone != nil })
        // The conflicts kept are part of the vault compared below; the same whatever the order.
        let conflicts = reference.conflicts.map(\.id)
        for _ in 0..<10 {
            let shuffled = segments.shuffled(using: &rng)
            let v = Self.merged(shuffled)
            #expect(v == reference)
            #expect(v.liveItems == reference.liveItems)
            #expect(v.conflicts.map(\.id) == conflicts)
        }
    }

    @Test(arguments: 0..<40) func mergingTwiceChangesNothing(seed: UInt64) {
        let segments = Self.history(seed: seed)
        let once = Self.merged(segments)
        var twice = once
        twice.apply(segments.flatMap(\.changes))
        #expect(twice == once)
        // Some segments again, in another order, as a device that re-reads the folder would.
        var rng = SeededRandom(seed: seed)
        var again = once
        again.apply(segments.shuffled(using: &rng).prefix(segments.count / 2).flatMap(\.changes))
        #expect(again == once)
    }

    /// Two devices that have each seen some segments converge once each has seen all:
    /// merging partial views and then the rest gives the whole.
    @Test(arguments: 0..<20) func partialViewsConvergeOnceEverySegmentIsSeen(seed: UInt64) {
        let segments = Self.history(seed: seed)
        var rng = SeededRandom(seed: seed ^ 0xABCD)
        let split = Int.random(in: 0...segments.count, using: &rng)
        let shuffled = segments.shuffled(using: &rng)
        var a = Self.merged(Array(shuffled[..<split]))
        var b = Self.merged(Array(shuffled[split...]))
        a.apply(shuffled[split...].flatMap(\.changes))
        b.apply(shuffled[..<split].flatMap(\.changes))
        #expect(a == b)
        #expect(a == Self.merged(segments))
    }

    func stamp(_ wall: UInt64, _ counter: UInt32 = 0, _ device: Int) -> SyncTimestamp {
        SyncTimestamp(wall: wall, counter: counter, device: Self.devices[device])
    }

    func add(_ key: SyncItemKey, _ t: SyncTimestamp, label: String, secret: String) -> SyncChange {
        var fields: [SyncField: SyncValue?] = [:]
        for f in SyncField.allCases { fields[f] = .some(nil) }
        fields[.label] = .bytes(Array(label.utf8))
        fields[.secret] = .secret(SecureBytes(copying: Array(secret.utf8)))
        return SyncChange(key: key, timestamp: t, kind: .write(fields))
    }

    func label(_ v: SyncVault, _ k: SyncItemKey) -> String? {
        guard case .bytes(let b)? = v.liveItems[k]?[.label] else { return nil }
        return String(decoding: b, as: UTF8.self)
    }

    @Test func lastWriterWinsPerFieldWithTheDeviceAsTieBreak() {
        let k = Self.keys[0]
        let base = add(k, stamp(10, 0, 0), label: "first", secret: "s")
        let labelByB = SyncChange(
            key: k, timestamp: stamp(20, 0, 1), kind: .write([.label: .bytes(Array("by B".utf8))]))
        let commentByC = SyncChange(
            key: k, timestamp: stamp(15, 0, 2), kind: .write([.comment: .bytes(Array("by C".utf8))])
        )
        // An older label write loses to B's; C's comment, another field, is kept beside it.
        let olderLabel = SyncChange(
            key: k, timestamp: stamp(18, 5, 2), kind: .write([.label: .bytes(Array("older".utf8))]))
        for order in [
            [base, labelByB, commentByC, olderLabel], [olderLabel, commentByC, labelByB, base],
        ] {
            let v = SyncVault.merge(order)
            #expect(label(v, k) == "by B")
            #expect(v.liveItems[k]?[.comment] == .bytes(Array("by C".utf8)))
        }
        // The same wall clock and counter: the larger device ID wins, on every side.
        let tieA = SyncChange(
            key: k, timestamp: stamp(30, 1, 0), kind: .write([.label: .bytes(Array("A".utf8))]))
        let tieC = SyncChange(
            key: k, timestamp: stamp(30, 1, 2), kind: .write([.label: .bytes(Array("C".utf8))]))
        #expect(label(SyncVault.merge([base, tieA, tieC]), k) == "C")
        #expect(label(SyncVault.merge([base, tieC, tieA]), k) == "C")
        // A removed attribute (nil) is a write like any other.
        let removed = SyncChange(
            key: k, timestamp: stamp(40, 0, 0), kind: .write([SyncField.label: SyncValue?.none]))
        let v = SyncVault.merge([base, labelByB, removed])
        #expect(v.liveItems[k] != nil && v.liveItems[k]?[SyncField.label] == nil)
    }

    @Test func aDeletionWinsOverOlderWritesAndALaterAddBringsTheItemBack() {
        let k = Self.keys[1]
        let added = add(k, stamp(10, 0, 0), label: "x", secret: "s")
        let deleted = SyncChange(key: k, timestamp: stamp(20, 0, 1), kind: .delete)
        // A change made without having seen the deletion (stamped before it) loses to it.
        let concurrentEdit = SyncChange(
            key: k, timestamp: stamp(19, 0, 2), kind: .write([.label: .bytes(Array("edit".utf8))]))
        #expect(SyncVault.merge([added, deleted, concurrentEdit]).liveItems[k] == nil)
        #expect(SyncVault.merge([concurrentEdit, deleted, added]).liveItems[k] == nil)
        // An attribute change after the deletion alone does not bring it back (no secret)...
        let lateEdit = SyncChange(
            key: k, timestamp: stamp(25, 0, 2), kind: .write([.label: .bytes(Array("late".utf8))]))
        #expect(SyncVault.merge([added, deleted, lateEdit]).liveItems[k] == nil)
        // ...an add after it does, with only what was written after the deletion.
        let readded = add(k, stamp(30, 0, 0), label: "again", secret: "s2")
        let v = SyncVault.merge([readded, lateEdit, deleted, added])
        #expect(label(v, k) == "again")
        #expect(v.liveItems[k]?[.secret] == .secret(SecureBytes(copying: Array("s2".utf8))))
        // The tombstone is kept, so a write older than it arriving late still loses.
        #expect(v.items[k]?.tombstone == stamp(20, 0, 1))
    }

    @Test func twoDevicesAddingTheSamePrimaryKeyConvergeToOneItem() {
        let k = Self.keys[3]
        let onA = add(k, stamp(100, 0, 0), label: "from A", secret: "a")
        let onB = add(k, stamp(101, 0, 1), label: "from B", secret: "b")
        for v in [SyncVault.merge([onA, onB]), SyncVault.merge([onB, onA])] {
            #expect(v.liveItems.count == 1)
            #expect(label(v, k) == "from B")
            #expect(v.liveItems[k]?[.secret] == .secret(SecureBytes(copying: Array("b".utf8))))
        }
    }

    @Test func theHybridClockOrdersAChangeAfterWhatItSaw() {
        var a = HybridClock(device: Self.devices[0])
        var b = HybridClock(device: Self.devices[1])
        let t1 = a.tick(physical: 5_000)
        let t2 = a.tick(physical: 4_000)  // the wall clock went back
        #expect(t1 < t2 && t2.wall == 5_000 && t2.counter == 1)
        // B's wall clock is behind; having seen A's change, its next one still comes after.
        let observed = b.observe(t2, physical: 1_000)
        #expect(observed)
        let t3 = b.tick(physical: 1_000)
        #expect(t2 < t3 && t3.device == Self.devices[1])
        // A reading more than a day ahead is not taken in.
        let far = SyncTimestamp(
            wall: 1_000 + HybridClock.maximumDrift + 1, counter: 0, device: Self.devices[2])
        let tookFar = b.observe(far, physical: 1_000)
        #expect(!tookFar)
        let t4 = b.tick(physical: 1_000)
        #expect(t4 < far)
    }

    // MARK: segments

    static let groupKey = SecureBytes(copying: [UInt8](repeating: 7, count: 32))
    static let keyID = SyncKeyID(generation: 1, rotator: devices[0])
    static let signing = SyncSigning.keyPair()

    @Test(arguments: 0..<5) func aSegmentOpensToWhatWasSealed(seed: UInt64) throws {
        for s in Self.history(seed: seed, perDevice: 8) {
            let file = s.sealed(
                key: Self.groupKey, keyID: Self.keyID, signingKey: Self.signing.secretKey)
            #expect(
                try SyncSegment.open(
                    file, key: Self.groupKey, device: s.device, sequence: s.sequence,
                    verifyKey: Self.signing.publicKey) == s)
        }
    }

    @Test func nothingOfAnItemIsInTheSegmentsBytes() {
        let k = SyncItemKey(
            itemClass: .genericPassword, accessGroup: "com.example.group",
            primaryKey: ["api.example.com", "alice"])
        let s = SyncSegment(
            device: Self.devices[0], sequence: 1,
            changes: [add(k, stamp(1, 0, 0), label: "Alice's key", secret: "hunter2-secret")])
        let file = s.sealed(
            key: Self.groupKey, keyID: Self.keyID, signingKey: Self.signing.secretKey)
        for needle in [
            "com.example.group", "api.example.com", "alice", "Alice's key", "hunter2-secret",
        ] {
            #expect(file.firstRange(of: Array(needle.utf8)) == nil, "\(needle) is in the segment")
        }
    }

    /// Records are padded: secrets of 1 and 100 bytes make segments of one size.
    @Test func aSegmentsSizeTellsAnItemsSizeOnlyToTheBlock() throws {
        let k = Self.keys[0]
        let small = SyncSegment(
            device: Self.devices[0], sequence: 1,
            changes: [add(k, stamp(1, 0, 0), label: "a", secret: "x")])
        let large = SyncSegment(
            device: Self.devices[0], sequence: 1,
            changes: [
                add(k, stamp(1, 0, 0), label: "a", secret: String(repeating: "y", count: 100))
            ])
        #expect(
            small.sealed(key: Self.groupKey, keyID: Self.keyID, signingKey: Self.signing.secretKey)
                .count
                == large.sealed(
                    key: Self.groupKey, keyID: Self.keyID, signingKey: Self.signing.secretKey
                ).count)
        #expect(
            try SyncSegment.open(
                large.sealed(
                    key: Self.groupKey, keyID: Self.keyID, signingKey: Self.signing.secretKey),
                key: Self.groupKey, device: Self.devices[0], sequence: 1,
                verifyKey: Self.signing.publicKey) == large)
    }

    @Test func anAlteredCutRenamedOrForeignSegmentOpensAsNothing() {
        let s = Self.history(seed: 9, perDevice: 6)[0]
        let file = s.sealed(
            key: Self.groupKey, keyID: Self.keyID, signingKey: Self.signing.secretKey)
        var rng = SeededRandom(seed: 1)
        for _ in 0..<50 {
            var bad = file
            let i = Int.random(in: 0..<bad.count, using: &rng)
            bad[i] ^= UInt8.random(in: 1...255, using: &rng)
            #expect(throws: SyncFormatError.self) {
                try SyncSegment.open(
                    bad, key: Self.groupKey, device: s.device, sequence: s.sequence,
                    verifyKey: Self.signing.publicKey)
            }
        }
        for cut in [0, 8, 40, file.count - 1] {
            #expect(throws: SyncFormatError.self) {
                try SyncSegment.open(
                    Array(file.prefix(cut)), key: Self.groupKey, device: s.device,
                    sequence: s.sequence, verifyKey: Self.signing.publicKey)
            }
        }
        #expect(throws: SyncFormatError.self) {
            try SyncSegment.open(
                file + [0], key: Self.groupKey, device: s.device, sequence: s.sequence,
                verifyKey: Self.signing.publicKey)
        }
        #expect(throws: SyncFormatError.self) {
            try SyncSegment.open(
                file, key: Self.groupKey, device: Self.devices[2], sequence: s.sequence,
                verifyKey: Self.signing.publicKey)
        }
        #expect(throws: SyncFormatError.self) {
            try SyncSegment.open(
                file, key: Self.groupKey, device: s.device, sequence: s.sequence + 1,
                verifyKey: Self.signing.publicKey)
        }
        let other = SecureBytes(copying: [UInt8](repeating: 8, count: 32))
        #expect(throws: SyncFormatError.self) {
            try SyncSegment.open(
                file, key: other, device: s.device, sequence: s.sequence,
                verifyKey: Self.signing.publicKey)
        }
        // A length prefix claiming more than a record may be is refused before anything is allocated.
        var huge = file
        let at = SyncSegment.magic.count + SyncSegment.headerBytes
        huge.replaceSubrange(at..<(at + 4), with: [0xFF, 0xFF, 0xFF, 0x7F])
        #expect(throws: SyncFormatError.self) {
            try SyncSegment.open(
                huge, key: Self.groupKey, device: s.device, sequence: s.sequence,
                verifyKey: Self.signing.publicKey)
        }
    }

    @Test func segmentFileNamesCarryOnlyTheSequence() {
        #expect(SyncSegment.fileName(0x1f) == "000000000000001f.seg")
        #expect(SyncSegment.sequence(ofFileName: "000000000000001f.seg") == 0x1f)
        // Sequences run from 1 to 2⁶²: a name outside (0, or one a writer would need 2⁶² segments to
        // reach) is no segment's, so nothing read from a name overflows when counted on from.
        #expect(
            SyncSegment.sequence(ofFileName: "4000000000000000.seg") == SyncSegment.maximumSequence)
        for bad in [
            "00000000000001F.seg", "000000000000001F.seg", ".syncthing.000000000000001f.seg.tmp",
            "x.seg", "000000000000001f.seg~",
            "0000000000000000.seg", "4000000000000001.seg", "7fffffffffffffff.seg",
            "ffffffffffffffff.seg", "-000000000000001.seg", "+00000000000001f.seg",
        ] {
            #expect(SyncSegment.sequence(ofFileName: bad) == nil, "\(bad)")
        }
        let d = SyncDeviceID(bytes: [UInt8](repeating: 0xab, count: 16))!
        #expect(d.description == String(repeating: "ab", count: 16))
        #expect(SyncDeviceID(hex: d.description) == d)
        #expect(SyncDeviceID(hex: d.description.uppercased()) == nil)
        #expect(SyncDeviceID(hex: String(repeating: "ab", count: 15)) == nil)
    }

    @Test func aGrantOpensOnlyWithTheJoinersKey() throws {
        let (pk, sk) = SyncPairing.keyPair()
        #expect(SyncPairing.publicKey(of: sk) == pk)
        var ring = SyncKeyring()
        ring.keys[Self.keyID] = Self.groupKey
        var view = SyncMembership()
        view.members[Self.devices[1]] = SyncMember(
            device: Self.devices[1], boxKey: pk, signKey: Self.signing.publicKey)
        view.removed[Self.devices[2]] = 4
        view.keys[Self.keyID] = [Self.devices[2]]
        let grant = SyncPairing.grantFile(keyring: ring, membership: view, to: pk)
        let opened = try #require(SyncPairing.openGrant(grant, publicKey: pk, secretKey: sk))
        #expect(opened.0.keys[Self.keyID]?.constantTimeEquals(Self.groupKey) == true)
        #expect(opened.1 == view)
        let (pk2, sk2) = SyncPairing.keyPair()
        #expect(SyncPairing.openGrant(grant, publicKey: pk2, secretKey: sk2) == nil)
        #expect(grant.firstRange(of: Array(repeating: 7, count: 8)) == nil)
    }

    /// A segment signed with another device's key (a member forging another's segment, with
    /// the group key) opens as nothing; the group records come back as written.
    @Test func aSegmentSignedByAnotherDeviceOpensAsNothing() throws {
        let s = Self.history(seed: 3, perDevice: 4)[0]
        let forger = SyncSigning.keyPair()
        let forged = s.sealed(key: Self.groupKey, keyID: Self.keyID, signingKey: forger.secretKey)
        #expect(throws: SyncFormatError.self) {
            try SyncSegment.open(
                forged, key: Self.groupKey, device: s.device, sequence: s.sequence,
                verifyKey: Self.signing.publicKey)
        }
        #expect(SyncSigning.publicKey(of: forger.secretKey) == forger.publicKey)
        let (box, _) = SyncPairing.keyPair()
        let control: [SyncControl] = [
            .member(SyncMember(device: Self.devices[1], boxKey: box, signKey: forger.publicKey)),
            .remove(Self.devices[2], cutoff: 9, pins: [3: [UInt8](repeating: 1, count: 16)]),
            .rotate(
                generation: 2, excludes: [Self.devices[2]],
                boxes: [Self.devices[1]: SyncPairing.seal(Self.groupKey, to: box)]),
            .snapshot,
        ]
        let c = SyncSegment(
            device: Self.devices[0], sequence: 5, control: control, changes: s.changes)
        let file = c.sealed(
            key: Self.groupKey, keyID: Self.keyID, signingKey: Self.signing.secretKey)
        #expect(SyncSegment.keyID(of: file) == Self.keyID)
        #expect(
            try SyncSegment.open(
                file, key: Self.groupKey, device: Self.devices[0], sequence: 5,
                verifyKey: Self.signing.publicKey) == c)
    }

    // MARK: compaction

    /// Equal as far as any later change can tell: the same live items, now and after the same
    /// later changes (stamped after everything in the history, as changes made by a device
    /// that has merged it are).
    func expectSameMerge(_ a: SyncVault, _ b: SyncVault, later: [SyncChange], _ note: String) {
        #expect(a.liveItems == b.liveItems, "\(note)")
        var a2 = a
        var b2 = b
        a2.apply(later)
        b2.apply(later)
        #expect(a2.liveItems == b2.liveItems, "\(note): after later changes")
        // Whatever an item's state keeps, it keeps the same but for deletions dropped.
        for (k, s) in a.items where b.items[k] != s {
            #expect((b.items[k]?.fields ?? [:]) == s.fields, "\(note): \(k)")
        }
        #expect(Set(b.items.keys).isSubset(of: a.items.keys), "\(note)")
    }

    /// Later changes: every key written or deleted, stamped after the history.
    static func later(seed: UInt64) -> [SyncChange] {
        var rng = SeededRandom(seed: seed ^ 0x5555)
        var clock = HybridClock(device: devices[1], last: (10_000, 0))
        return keys.map { k in
            let t = clock.tick(physical: 10_000)
            if Bool.random(using: &rng) { return SyncChange(key: k, timestamp: t, kind: .delete) }
            var fields: [SyncField: SyncValue?] = [:]
            for f in SyncField.allCases where Bool.random(using: &rng) || f == .label {
                fields[f] = value(f, 7)
            }
            return SyncChange(key: k, timestamp: t, kind: .write(fields))
        }
    }

    /// Compaction never changes the merge: any device's segments replaced by its snapshot
    /// (deletions dropped or not), then the same for the next device on what is left, give the
    /// vault of the whole history; a snapshot's changes merge back to the snapshot, and
    /// compacting again changes nothing.
    @Test(arguments: 0..<40) func compactionNeverChangesTheMerge(seed: UInt64) {
        let segments = Self.history(seed: seed)
        let reference = Self.merged(segments)
        var rng = SeededRandom(seed: seed &+ 77)
        var own: [SyncDeviceID: SyncVault] = [:]
        for s in segments { own[s.device, default: SyncVault()].apply(s.changes) }
        var dropped = 0
        for d in Self.devices.shuffled(using: &rng) {
            let drop = Bool.random(using: &rng)
            let others = own.filter { $0.key != d }.map(\.value)
            let snap = SyncCompaction.snapshot(
                own: own[d]!, others: others, dropTombstones: drop, now: .max)
            #expect(SyncVault.merge(snap.changes) == snap)
            #expect(
                SyncCompaction.snapshot(own: snap, others: others, dropTombstones: drop, now: .max)
                    == snap)
            dropped += own[d]!.items.count - snap.items.count
            own[d] = snap
            var v = SyncVault()
            for o in own.values { v.join(o) }
            expectSameMerge(reference, v, later: Self.later(seed: seed), "seed \(seed), after \(d)")
        }
        // A snapshot merged with segments in any order is the same vault as joined.
        var joined = SyncVault()
        for o in own.values { joined.join(o) }
        #expect(SyncVault.merge(own.values.flatMap(\.changes).shuffled(using: &rng)) == joined)
        _ = dropped
    }

    /// A deletion every device has merged, whose item nobody wrote before it but its own
    /// device, is dropped with the item; one that another device's older write still needs
    /// stays; one stamped in the future stays.
    @Test func aDeletionIsDroppedOnlyWhenNothingItCoversIsLeft() {
        let k = Self.keys[0]
        let k2 = Self.keys[1]
        var a = SyncVault()
        a.apply(add(k, stamp(10, 0, 0), label: "x", secret: "s"))
        a.apply(SyncChange(key: k, timestamp: stamp(20, 0, 0), kind: .delete))
        a.apply(SyncChange(key: k2, timestamp: stamp(30, 0, 0), kind: .delete))
        var b = SyncVault()
        b.apply(add(k2, stamp(25, 0, 1), label: "y", secret: "s"))
        let snap = SyncCompaction.snapshot(own: a, others: [b], dropTombstones: true, now: 1_000)
        #expect(snap.items[k] == nil)
        #expect(snap.items[k2]?.tombstone == stamp(30, 0, 0))
        #expect(
            SyncCompaction.snapshot(own: a, others: [b], dropTombstones: false, now: 1_000).items[
                k]?.tombstone == stamp(20, 0, 0))
        #expect(
            SyncCompaction.snapshot(own: a, others: [b], dropTombstones: true, now: 15).items[k]?
                .tombstone == stamp(20, 0, 0))
    }
}
