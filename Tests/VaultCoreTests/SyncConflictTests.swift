import Foundation
import Testing
import VaultProtocol

@testable import VaultCore

/// Conflicts (values that lost to a concurrent write) in the merge and through two vaults'
/// passes, and rollback detection from the members' acknowledgements (docs/sync.md).
@Suite struct SyncConflictTests {
    static let devices = SyncMergeTests.devices
    static let key = SyncMergeTests.keys[0]

    func stamp(_ wall: UInt64, _ device: Int) -> SyncTimestamp {
        SyncTimestamp(wall: wall, counter: 0, device: Self.devices[device])
    }

    func text(_ s: String) -> SyncValue { .bytes(Array(s.utf8)) }

    /// A write of `fields` by `device` at `wall`, knowing what `knows` had merged.
    func write(
        _ fields: [SyncField: SyncValue?], _ wall: UInt64, by device: Int, knowing knows: SyncVault
    ) -> SyncChange {
        let t = stamp(wall, device)
        return SyncChange(
            key: Self.key, timestamp: t, kind: .write(fields),
            context: (knows.items[Self.key] ?? SyncItemState()).context(at: t))
    }

    func add(_ wall: UInt64, by device: Int, label: String) -> SyncChange {
        var fields: [SyncField: SyncValue?] = [:]
        for f in SyncField.allCases { fields[f] = .some(nil) }
        fields[.label] = text(label)
        fields[.secret] = .secret(SecureBytes(copying: Array("s".utf8)))
        return write(fields, wall, by: device, knowing: SyncVault())
    }

    /// Every order of `changes` merges to `expected`.
    func expectInEveryOrder(_ changes: [SyncChange], _ expected: SyncVault) {
        var order = changes
        for _ in 0..<changes.count {
            #expect(SyncVault.merge(order) == expected)
            #expect(SyncVault.merge(order.reversed()) == expected)
            order.append(order.removeFirst())
        }
    }

    @Test func aConcurrentEditKeepsTheLosingValueInEveryOrder() throws {
        let base = add(10, by: 0, label: "base")
        let known = SyncVault.merge([base])
        // A and B each change the label without having seen the other's change.
        let byA = write([.label: text("from A")], 20, by: 0, knowing: known)
        let byB = write([.label: text("from B")], 30, by: 1, knowing: known)
        let v = SyncVault.merge([base, byA, byB])
        #expect(v.liveItems[Self.key]?[.label] == text("from B"))
        let c = try #require(v.conflicts.first)
        #expect(v.conflicts.count == 1)
        #expect(c.values == [.label: .some(text("from A"))])
        #expect(c.current == [.label: .some(text("from B"))])
        #expect(c.timestamp == byA.timestamp && c.winner == Self.devices[1])
        #expect(c.id.count == 16)
        expectInEveryOrder([base, byA, byB], v)
    }

    @Test func anEditMadeKnowingTheOtherIsNoConflict() {
        let base = add(10, by: 0, label: "base")
        let byA = write([.label: text("from A")], 20, by: 0, knowing: SyncVault.merge([base]))
        // B merged A's change before its own.
        let byB = write([.label: text("from B")], 30, by: 1, knowing: SyncVault.merge([base, byA]))
        let v = SyncVault.merge([byB, byA, base])
        #expect(v.conflicts.isEmpty)
        #expect(v.items[Self.key]?.losers.isEmpty == true)
        expectInEveryOrder([base, byA, byB], v)
    }

    /// B changes the field twice while apart from A: A's value lost to B's first change, and
    /// B's second, made on top of its own, did not know A's either: still a conflict.
    @Test func twoEditsOnOneSideStillKeepTheOthersValue() throws {
        let base = add(10, by: 0, label: "base")
        let known = SyncVault.merge([base])
        let byA = write([.label: text("from A")], 20, by: 0, knowing: known)
        let firstB = write([.label: text("B1")], 30, by: 1, knowing: known)
        let secondB = write(
            [.label: text("B2")], 40, by: 1, knowing: SyncVault.merge([base, firstB]))
        let v = SyncVault.merge([base, byA, firstB, secondB])
        #expect(v.conflicts.map(\.values) == [[.label: .some(text("from A"))]])
        // B's first value is its own, replaced knowingly: no conflict.
        #expect(v.items[Self.key]?.losers[.label]?.count == 1)
        expectInEveryOrder([base, byA, firstB, secondB], v)
    }

    /// A write knowing both values (restore, dismiss, or an edit made after merging them)
    /// settles the conflict, on every side.
    @Test func aWriteThatKnowsTheLoserSettlesIt() {
        let base = add(10, by: 0, label: "base")
        let known = SyncVault.merge([base])
        let byA = write([.label: text("from A")], 20, by: 0, knowing: known)
        let byB = write([.label: text("from B")], 30, by: 1, knowing: known)
        let both = SyncVault.merge([base, byA, byB])
        let restore = write([.label: text("from A")], 40, by: 2, knowing: both)
        let v = SyncVault.merge([base, byA, byB, restore])
        #expect(v.conflicts.isEmpty)
        #expect(v.liveItems[Self.key]?[.label] == text("from A"))
        expectInEveryOrder([base, byA, byB, restore], v)
    }

    /// Records written before contexts existed (none) know every older write: upgrading
    /// lists no conflict for history already merged.
    @Test func recordsWithoutAContextMakeNoConflict() {
        var base = add(10, by: 0, label: "base")
        base.context = [:]
        let byA = SyncChange(
            key: Self.key, timestamp: stamp(20, 0), kind: .write([.label: text("A")]))
        let byB = SyncChange(
            key: Self.key, timestamp: stamp(30, 1), kind: .write([.label: text("B")]))
        #expect(SyncVault.merge([base, byA, byB]).conflicts.isEmpty)
    }

    /// A deletion after the conflict drops it with the item's older writes; the same value
    /// written on both sides is no conflict, nor are the dates every edit sets.
    @Test func deletionsEqualValuesAndDatesListNothing() {
        let base = add(10, by: 0, label: "base")
        let known = SyncVault.merge([base])
        let date: [SyncField: SyncValue?] = [.modificationDate: text("2026-12-07T04:00:00Z")]
        let byA = write(
            date.merging([.label: text("same")]) { a, _ in a }, 20, by: 0, knowing: known)
        let byB = write(
            [.label: text("same"), .modificationDate: text("2026-12-07T04:00:01Z")], 30, by: 1,
            knowing: known)
        #expect(SyncVault.merge([base, byA, byB]).conflicts.isEmpty)
        let byC = write([.label: text("C")], 25, by: 2, knowing: known)
        #expect(SyncVault.merge([base, byA, byB, byC]).conflicts.count == 1)
        let delete = SyncChange(key: Self.key, timestamp: stamp(50, 2), kind: .delete)
        let v = SyncVault.merge([base, byA, byB, byC, delete])
        #expect(v.conflicts.isEmpty && v.items[Self.key]?.losers.isEmpty == true)
    }

    /// The list is bounded: the newest `maximumConflictsPerItem` per item, the newest
    /// `maximumConflicts` in all. The merge keeps at most one value per device and field.
    @Test func theListIsBoundedNewestFirst() {
        let writers = (0..<40).map { i in
            SyncDeviceID(bytes: [UInt8](repeating: 0x40 + UInt8(i), count: 16))!
        }
        let base = add(10, by: 0, label: "base")
        let known = SyncVault.merge([base])
        var changes = [base]
        for (i, d) in writers.enumerated() {
            for n in 0..<3 {
                // Each device writes three times, the later ones knowing its own earlier ones.
                let t = SyncTimestamp(wall: 100 + UInt64(i) * 10 + UInt64(n), counter: 0, device: d)
                var ctx = known.items[Self.key]!.context(at: t)
                ctx[d] = t
                changes.append(
                    SyncChange(
                        key: Self.key, timestamp: t, kind: .write([.label: text("\(i).\(n)")]),
                        context: ctx))
            }
        }
        let v = SyncVault.merge(changes)
        #expect(v.items[Self.key]?.losers[.label]?.count == writers.count - 1)
        let listed = v.conflicts
        #expect(listed.count == SyncVault.maximumConflictsPerItem)
        // The newest losers: the devices just before the winner, each with its latest value.
        #expect(listed.first?.values[.label] == .some(text("38.2")))
        #expect(
            listed.last?.values[.label]
                == .some(text("\(39 - SyncVault.maximumConflictsPerItem).2")))
    }

    /// A write's context crosses a segment (and a record without one still opens).
    @Test func aContextSurvivesTheSegment() throws {
        let base = add(10, by: 0, label: "base")
        let byB = write([.label: text("B")], 30, by: 1, knowing: SyncVault.merge([base]))
        #expect(byB.context.count == 2)
        let key = SecureBytes.random(count: Sodium.keyLength)
        let (pk, sk) = SyncSigning.keyPair()
        let id = SyncKeyID(generation: 1, rotator: Self.devices[1])
        let file = SyncSegment(device: Self.devices[1], sequence: 1, changes: [byB]).sealed(
            key: key, keyID: id, signingKey: sk)
        let opened = try SyncSegment.open(
            file, key: key, device: Self.devices[1], sequence: 1, verifyKey: pk)
        #expect(opened.changes == [byB])
    }

    /// The random histories of `SyncMergeTests` (whose laws cover the conflicts kept) do
    /// hold conflicts: the laws are not checked on empty lists only.
    @Test func randomHistoriesHoldConflicts() {
        let counts = (0..<10).map {
            SyncMergeTests.merged(SyncMergeTests.history(seed: $0)).conflicts.count
        }
        #expect(counts.filter { $0 > 0 }.count >= 5, "\(counts)")
    }

    /// A context over its bound (1,024 devices) is refused with its segment, unread.
    @Test func aContextOverItsBoundIsRefused() throws {
        var big = add(10, by: 1, label: "x")
        for i in 0..<SyncWire.maximumContext {
            let d = SyncDeviceID(
                bytes: Array(
                    withUnsafeBytes(of: UInt64(i + 1)) { Array($0) }
                        + [UInt8](repeating: 7, count: 8)))!
            big.context[d] = SyncTimestamp(wall: 1, counter: 0, device: d)
        }
        #expect(big.context.count == SyncWire.maximumContext + 1)
        let key = SecureBytes.random(count: Sodium.keyLength)
        let (pk, sk) = SyncSigning.keyPair()
        let id = SyncKeyID(generation: 1, rotator: Self.devices[1])
        let file = SyncSegment(device: Self.devices[1], sequence: 1, changes: [big]).sealed(
            key: key, keyID: id, signingKey: sk)
        #expect(throws: SyncFormatError.self) {
            try SyncSegment.open(
                file, key: key, device: Self.devices[1], sequence: 1, verifyKey: pk)
        }
        // A writer keeps the latest 1,024 (its own among them).
        var state = SyncItemState()
        state.apply(big)
        let t = stamp(99, 2)
        let kept = state.context(at: t)
        #expect(kept.count == SyncWire.maximumContext && kept[t.device] == t)
    }

    // MARK: rollback

    @Test func aMemberBehindWhatAnotherAcknowledgedIsReported() {
        let (a, b, c) = (Self.devices[0], Self.devices[1], Self.devices[2])
        let members: Set = [a, b, c]
        // B acknowledged A's segments up to 7 and C's up to 3; the folder holds A's up to 5.
        let acks = [b: [a: 7, c: 3], c: [a: 6]] as [SyncDeviceID: [SyncDeviceID: UInt64]]
        let found = SyncRollback.find(members: members, acks: acks, present: [a: 5, c: 3, b: 9])
        #expect(
            found == [SyncRollback(device: a, acknowledged: 7, acknowledgedBy: b, present: 5)])
        // A's own ack says as much: B is named (A's ack was in the directory rolled back).
        var withOwn = acks
        withOwn[a] = [a: 7]
        #expect(
            SyncRollback.find(members: members, acks: withOwn, present: [a: 5, c: 3]).first?
                .acknowledgedBy == b)
        // Every segment there again: nothing to report. A device gone from the folder: 0.
        #expect(SyncRollback.find(members: members, acks: acks, present: [a: 7, c: 3]).isEmpty)
        #expect(
            SyncRollback.find(members: members, acks: acks, present: [a: 7]).map(\.present) == [0])
        // An acknowledgement by a device that is no member counts for nothing.
        let outsider = SyncDeviceID(bytes: [UInt8](repeating: 9, count: 16))!
        #expect(
            SyncRollback.find(members: members, acks: [outsider: [a: 99]], present: [a: 1])
                .isEmpty)
    }

    // MARK: through two vaults' passes

    static func setSecret(_ v: Vault, service: String, _ s: String) throws {
        _ = try v.session(for: .owner).updateItems(
            ItemQuery(itemClass: .genericPassword, attributes: ItemAttributes(service: service)),
            changes: ItemAttributes(), secret: SecureBytes(copying: Array(s.utf8)))
    }

    /// Both devices change one item's secret between passes: the later wins on both, the
    /// other is listed on both with its value; restoring it on B makes it current on both
    /// and settles the conflict.
    @Test(arguments: [true, false]) func aConflictIsListedAndSettledOnBothDevices(restore: Bool)
        throws
    {
        try SyncServiceTests.withPair { a, sa, b, sb, _ in
            try SyncServiceTests.add(a, service: "svc", secret: "original")
            try sa.passNow()
            try sb.passNow()
            try Self.setSecret(a, service: "svc", "from A")
            try Self.setSecret(b, service: "svc", "from B")
            try sa.passNow()
            try sb.passNow()
            try sa.passNow()
            #expect(SyncServiceTests.secretOf(a, service: "svc") == "from B")
            #expect(SyncServiceTests.secretOf(b, service: "svc") == "from B")
            let onA = try sa.conflicts(in: a.session(for: .owner))
            let onB = try sb.conflicts(in: b.session(for: .owner))
            let c = try #require(onA.first)
            #expect(onA.count == 1 && onB.map(\.id) == [c.id])
            #expect(c.timestamp.device == (try SyncServiceTests.deviceID(sa)))
            #expect(
                c.values == [.secret: .some(.secret(SecureBytes(copying: Array("from A".utf8))))])
            _ = try sb.settleConflict(id: c.id, restore: restore, in: b.session(for: .owner))
            try sa.passNow()
            let expected = restore ? "from A" : "from B"
            #expect(SyncServiceTests.secretOf(a, service: "svc") == expected)
            #expect(SyncServiceTests.secretOf(b, service: "svc") == expected)
            #expect(try sa.conflicts(in: a.session(for: .owner)).isEmpty)
            #expect(try sb.conflicts(in: b.session(for: .owner)).isEmpty)
            #expect(throws: VaultFailure.self) {
                try sb.settleConflict(id: c.id, restore: true, in: b.session(for: .owner))
            }
        }
    }

    /// A's directory put back to an older copy (its latest segment gone) after B merged it:
    /// B, started anew, reports A as rolled back from B's acknowledgement, and still syncs.
    @Test func aRolledBackDirectoryIsReportedAndSyncGoesOn() throws {
        try SyncServiceTests.withPair { a, sa, b, sb, folder in
            try SyncServiceTests.add(a, service: "one", secret: "1")
            try sa.passNow()
            try SyncServiceTests.add(a, service: "two", secret: "2")
            try sa.passNow()
            try sb.passNow()
            let aID = try SyncServiceTests.deviceID(sa)
            let latest = try #require(SyncServiceTests.segmentFiles(folder, aID).max())
            try FileManager.default.removeItem(
                atPath: folder + "/devices/\(aID)/" + SyncSegment.fileName(latest))
            let sb2 = SyncService(vault: b)
            try sb2.passNow()
            let status = try sb2.status(in: b.session(for: .owner))
            let r = try #require(status.rolledBack.first)
            #expect(status.rolledBack.count == 1)
            #expect(r.device == aID && r.acknowledged == latest && r.present == latest - 1)
            #expect(
                r.acknowledgedBy == (try SyncServiceTests.deviceID(sb)), "\(r) A \(aID) \(sb2.acks)"
            )
            // The rest syncs: a new item of B reaches A.
            try SyncServiceTests.add(b, service: "three", secret: "3")
            try sb2.passNow()
            try sa.passNow()
            #expect(SyncServiceTests.secretOf(a, service: "three") == "3")
        }
    }
}
