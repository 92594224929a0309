import Foundation
import VaultProtocol

// The conflict-free model of synchronized keychain items (docs/sync.md): every device appends
// changes, each stamped with a hybrid logical clock; the vault all devices agree on is a pure
// function of the set of changes, whatever order they arrive in and however often.

/// A device of a sync group: 16 random bytes, written as 32 lowercase hex digits (the name
/// of its directory in the sync folder).
public struct SyncDeviceID: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let bytes: [UInt8]

    /// Exactly 16 bytes; nil otherwise.
    public init?(bytes: [UInt8]) {
        guard bytes.count == 16 else { return nil }
        self.bytes = bytes
    }

    /// Parses 32 lowercase hex digits (the only spelling a directory name may have); nil otherwise.
    public init?(hex: String) {
        guard let b = SyncHex.decode(hex), b.count == 16, SyncHex.encode(b) == hex else {
            return nil
        }
        bytes = b
    }

    public static func random() -> SyncDeviceID { SyncDeviceID(bytes: Sodium.randomBytes(16))! }

    public var description: String { SyncHex.encode(bytes) }

    public static func < (a: SyncDeviceID, b: SyncDeviceID) -> Bool {
        a.bytes.lexicographicallyPrecedes(b.bytes)
    }
}

/// Lowercase hex, for device IDs, sequence numbers and pairing codes.
enum SyncHex {
    static func encode(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 15)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Hex digits (either case) to bytes; nil for an odd length or another character.
    static func decode(_ text: String) -> [UInt8]? {
        let chars = Array(text)
        // isHexDigit first: UInt8(_:radix:) alone takes a sign ("+f" is 15).
        guard chars.count % 2 == 0, chars.allSatisfy(\.isHexDigit) else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(chars.count / 2)
        for i in stride(from: 0, to: chars.count, by: 2) {
            guard let b = UInt8(String(chars[i...i + 1]), radix: 16) else { return nil }
            out.append(b)
        }
        return out
    }
}

/// A hybrid logical clock reading (Kulkarni et al., "Logical Physical Clocks", 2014): wall-clock
/// milliseconds since 1970, a counter that orders events within one millisecond (or while the
/// wall clock lags a time already seen), and the device that made it, which breaks the last
/// ties. Ordered by (wall, counter, device): a total order, the same on every device.
public struct SyncTimestamp: Hashable, Comparable, Sendable {
    public var wall: UInt64
    public var counter: UInt32
    public var device: SyncDeviceID

    public init(wall: UInt64, counter: UInt32, device: SyncDeviceID) {
        self.wall = wall
        self.counter = counter
        self.device = device
    }

    public static func < (a: SyncTimestamp, b: SyncTimestamp) -> Bool {
        if a.wall != b.wall { return a.wall < b.wall }
        if a.counter != b.counter { return a.counter < b.counter }
        return a.device < b.device
    }
}

/// One device's hybrid logical clock: each local change reads it (`tick`), each change read
/// from another device advances it (`observe`), so a change made after seeing another is
/// ordered after it even when this device's wall clock is behind.
public struct HybridClock: Sendable {
    public let device: SyncDeviceID
    /// The latest reading made or observed.
    public private(set) var last: (wall: UInt64, counter: UInt32)
    /// How far ahead of the local wall clock a peer's reading may pull this clock (one day, in
    /// milliseconds): a device whose clock is years ahead would otherwise make every later
    /// local change lose to its writes for as long.
    public static let maximumDrift: UInt64 = 86_400_000

    public init(device: SyncDeviceID, last: (wall: UInt64, counter: UInt32) = (0, 0)) {
        self.device = device
        self.last = last
    }

    /// The wall clock in milliseconds since 1970 (0 before 1970).
    public static func now() -> UInt64 {
        var t = timespec()
        clock_gettime(CLOCK_REALTIME, &t)
        return t.tv_sec < 0 ? 0 : UInt64(t.tv_sec) * 1000 + UInt64(t.tv_nsec / 1_000_000)
    }

    /// The reading for a local change at wall-clock time `physical` (ms): later than every
    /// reading made or observed before.
    public mutating func tick(physical: UInt64 = HybridClock.now()) -> SyncTimestamp {
        if physical > last.wall {
            last = (physical, 0)
        } else if last.counter == UInt32.max {
            last = (last.wall + 1, 0)
        } else {
            last.counter += 1
        }
        return SyncTimestamp(wall: last.wall, counter: last.counter, device: device)
    }

    /// Takes in a reading from another device. A reading more than `maximumDrift` ahead of
    /// `physical` is not taken in (returns false): the change still merges, by its reading.
    @discardableResult
    public mutating func observe(_ t: SyncTimestamp, physical: UInt64 = HybridClock.now()) -> Bool {
        guard t.wall <= physical &+ Self.maximumDrift else { return false }
        if t.wall > last.wall || (t.wall == last.wall && t.counter > last.counter) {
            last = (t.wall, t.counter)
        }
        return true
    }
}

/// What identifies a synchronized item on every device: its class, access group and the
/// primary-key attributes of its class (as `SecItemAdd`'s uniqueness: class, group,
/// synchronizable, primary key; synchronizable is always true here). Two devices adding an
/// item with one identity add one item.
public struct SyncItemKey: Hashable, Comparable, Sendable {
    public var itemClass: ItemClass
    public var accessGroup: String
    /// The class's primary-key attributes in `KeychainStore`'s fixed order (a generic password:
    /// service, account; an internet password: server, protocol, port in decimal, path, account,
    /// authenticationType, securityDomain), absent ones as "".
    public var primaryKey: [String]

    public init(itemClass: ItemClass, accessGroup: String, primaryKey: [String]) {
        self.itemClass = itemClass
        self.accessGroup = accessGroup
        self.primaryKey = primaryKey
    }

    /// The number of primary-key attributes of each class.
    static func primaryKeyCount(_ c: ItemClass) -> Int { c == .genericPassword ? 2 : 7 }

    /// The key of an item with attributes `a` (normalized, as stored).
    public init(itemClass c: ItemClass, attributes a: ItemAttributes) {
        itemClass = c
        accessGroup = a.accessGroup ?? ""
        switch c {
        case .genericPassword:
            primaryKey = [a.service ?? "", a.account ?? ""]
        case .internetPassword:
            primaryKey = [
                a.server ?? "", a.protocol ?? "", String(a.port ?? 0), a.path ?? "",
                a.account ?? "", a.authenticationType ?? "",
                a.securityDomain ?? "",
            ]
        }
    }

    /// The identity's attributes (synchronizable true), onto which the fields are set.
    public var attributes: ItemAttributes {
        var a = ItemAttributes(accessGroup: accessGroup, synchronizable: true)
        switch itemClass {
        case .genericPassword:
            a.service = primaryKey[0]
            a.account = primaryKey[1]
        case .internetPassword:
            a.server = primaryKey[0]
            a.protocol = primaryKey[1]
            a.port = Int(primaryKey[2]) ?? 0
            a.path = primaryKey[3]
            a.account = primaryKey[4]
            a.authenticationType = primaryKey[5]
            a.securityDomain = primaryKey[6]
        }
        return a
    }

    /// Bytes naming the key uniquely (each part length-prefixed), for hashing and ordering.
    var canonicalBytes: [UInt8] {
        var out: [UInt8] = []
        SyncWire.appendBytes(Array(itemClass.rawValue.utf8), to: &out)
        SyncWire.appendBytes(Array(accessGroup.utf8), to: &out)
        for p in primaryKey { SyncWire.appendBytes(Array(p.utf8), to: &out) }
        return out
    }

    public static func < (a: SyncItemKey, b: SyncItemKey) -> Bool {
        a.canonicalBytes.lexicographicallyPrecedes(b.canonicalBytes)
    }
}

/// The parts of a synchronized item that change, each merged on its own (last writer wins per
/// field): the attributes outside its identity, and the secret. The raw value is the wire tag.
public enum SyncField: UInt8, CaseIterable, Sendable, Comparable {
    case label = 1
    case comment, description, generic, accessible, creationDate, modificationDate, secret

    public static func < (a: SyncField, b: SyncField) -> Bool { a.rawValue < b.rawValue }
}

/// A field's value: plain bytes (an attribute: UTF-8 text, `generic`'s raw bytes, a date in
/// ISO 8601 as stored), or the secret, held in secure memory.
public enum SyncValue: Equatable, Sendable {
    case bytes([UInt8])
    case secret(SecureBytes)

    /// The value's bytes, in a closure (a secret's are not copied out).
    func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        switch self {
        case .bytes(let b): return try b.withUnsafeBytes(body)
        case .secret(let s): return try s.withUnsafeBytes(body)
        }
    }

    /// Equal bytes (two secrets compared in constant time); the kind (plain or secret) does
    /// not count.
    public static func == (a: SyncValue, b: SyncValue) -> Bool {
        if case .secret(let x) = a, case .secret(let y) = b { return x.constantTimeEquals(y) }
        return a.withBytes { x in
            b.withBytes { y in
                x.count == y.count
                    && (x.count == 0 || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0)
            }
        }
    }

    /// A total order on values, by bytes: it decides between two writes of one field with one
    /// timestamp (only a device that reuses a reading makes those), the same way everywhere.
    static func precedes(_ a: SyncValue?, _ b: SyncValue?) -> Bool {
        switch (a, b) {
        case (nil, nil), (_?, nil): return false
        case (nil, _?): return true
        case (let x?, let y?):
            return x.withBytes { p in y.withBytes { q in p.lexicographicallyPrecedes(q) } }
        }
    }
}

/// One change one device made to one item: fields written (a value, or nil: the attribute
/// removed) or the item deleted. An add, and any change exported when the other devices had
/// no live copy of the item, writes every field (`isComplete`).
public struct SyncChange: Equatable, Sendable {
    public enum Kind: Equatable, Sendable {
        case write([SyncField: SyncValue?])
        case delete
    }

    public var key: SyncItemKey
    public var timestamp: SyncTimestamp
    public var kind: Kind
    /// What its device had merged of the item when it wrote it (`SyncItemState.seen`): for
    /// each device, the latest of its timestamps (writes, deletion) it knew. A write knows
    /// the writes this covers, and replaces them knowingly; one it does not know and beats
    /// was made concurrently, and is kept as a conflict. Empty in a deletion, and in records
    /// written before conflicts were kept (they are taken as knowing every older write).
    public var context: [SyncDeviceID: SyncTimestamp]

    public init(
        key: SyncItemKey, timestamp: SyncTimestamp, kind: Kind,
        context: [SyncDeviceID: SyncTimestamp] = [:]
    ) {
        self.key = key
        self.timestamp = timestamp
        self.kind = kind
        self.context = context
    }
}

/// A field's merged value, the timestamp of the write it came from and that write's context.
public struct SyncStamped: Equatable, Sendable {
    public var timestamp: SyncTimestamp
    public var value: SyncValue?
    /// The write's `SyncChange.context`.
    public var context: [SyncDeviceID: SyncTimestamp] = [:]

    public init(
        timestamp: SyncTimestamp, value: SyncValue?, context: [SyncDeviceID: SyncTimestamp] = [:]
    ) {
        self.timestamp = timestamp
        self.value = value
        self.context = context
    }

    /// Whether this write wins over `other`: the later timestamp; on one timestamp, the larger value.
    func wins(over other: SyncStamped) -> Bool {
        if timestamp != other.timestamp { return other.timestamp < timestamp }
        return SyncValue.precedes(other.value, value)
    }

    /// Whether this write replaces `other` knowingly: it wins over it, and its device wrote
    /// both or had merged `other` (its context covers it) when it wrote. A record without a
    /// context (written before conflicts were kept) knows every write it wins over. A
    /// device's own writes are ordered, so of one device's writes of a field one at most
    /// is not dominated. Transitive for honest writers: a device that merged a write
    /// merged its context too (`SyncItemState.seen` joins them).
    func dominates(_ other: SyncStamped) -> Bool {
        guard wins(over: other) else { return false }
        if context.isEmpty || timestamp.device == other.timestamp.device { return true }
        return context[other.timestamp.device].map { other.timestamp <= $0 } ?? false
    }
}

/// One item's merged history: the winning write of each field and the latest deletion. A
/// join-semilattice (each part is a maximum), so merging is commutative, associative and
/// idempotent.
public struct SyncItemState: Equatable, Sendable {
    public var fields: [SyncField: SyncStamped] = [:]
    /// Per field, the writes that lose to `fields` without being dominated by any write
    /// merged (`SyncStamped.dominates`): values written concurrently with the winner, kept
    /// as conflicts (docs/sync.md). At most one per device and field.
    public var losers: [SyncField: [SyncStamped]] = [:]
    /// The latest deletion: writes stamped before it no longer count.
    public var tombstone: SyncTimestamp?

    public init() {}

    /// Merges one change in. A write stamped before the latest deletion is not kept (it can
    /// never count again), so the state is the same whatever order the changes come in.
    public mutating func apply(_ change: SyncChange) {
        switch change.kind {
        case .delete:
            setTombstone(change.timestamp)
        case .write(let written):
            for (field, value) in written {
                put(
                    field,
                    SyncStamped(timestamp: change.timestamp, value: value, context: change.context))
            }
        }
    }

    mutating func setTombstone(_ t: SyncTimestamp) {
        guard tombstone.map({ $0 < t }) ?? true else { return }
        tombstone = t
        fields = fields.filter { t < $0.value.timestamp }
        losers = losers.compactMapValues { l in
            let kept = l.filter { t < $0.timestamp }
            return kept.isEmpty ? nil : kept
        }
    }

    /// Takes in one write of `field`: the field's writes then are the maximal ones (none
    /// dominated by another) of those it had and this one, the winner among them in
    /// `fields`, the others in `losers`. The maximal elements of a union are those of the
    /// maximal elements of its parts, so the result does not depend on the order.
    mutating func put(_ field: SyncField, _ stamped: SyncStamped) {
        if let t = tombstone, !(t < stamped.timestamp) { return }
        var all = losers[field] ?? []
        if let w = fields[field] { all.append(w) }
        if all.contains(where: { $0 == stamped || $0.dominates(stamped) }) { return }
        all.removeAll { stamped.dominates($0) }
        all.append(stamped)
        let winner = all.reduce(all[0]) { $1.wins(over: $0) ? $1 : $0 }
        fields[field] = winner
        let rest = all.filter { $0.timestamp != winner.timestamp }.sorted {
            $0.timestamp < $1.timestamp
        }
        losers[field] = rest.isEmpty ? nil : rest
    }

    /// The join of two histories (each part its maximum): what merging both sets of changes gives.
    public mutating func join(_ other: SyncItemState) {
        if let t = other.tombstone { setTombstone(t) }
        for (f, s) in other.fields { put(f, s) }
        for (f, l) in other.losers { for s in l { put(f, s) } }
    }

    /// The context of a write this device makes at `t` on top of this history: `seen`, and
    /// `t` itself (so it is never empty), the latest `SyncWire.maximumContext` timestamps
    /// kept when more devices wrote the item (a write that names fewer knows less: it
    /// keeps more conflicts, never fewer).
    public func context(at t: SyncTimestamp) -> [SyncDeviceID: SyncTimestamp] {
        var c = seen
        c[t.device] = t
        guard c.count > SyncWire.maximumContext else { return c }
        c[t.device] = nil
        let kept = c.values.sorted().suffix(SyncWire.maximumContext - 1)
        var out = Dictionary(uniqueKeysWithValues: kept.map { ($0.device, $0) })
        out[t.device] = t
        return out
    }

    /// What merging this item's history tells of each device: the latest timestamp of its
    /// that this history holds or that a write held knew (the context a write made on top
    /// of it carries). A pure function of the state, so the same on every device that
    /// merged the same changes.
    public var seen: [SyncDeviceID: SyncTimestamp] {
        var out: [SyncDeviceID: SyncTimestamp] = [:]
        func note(_ t: SyncTimestamp) {
            if out[t.device].map({ $0 < t }) ?? true { out[t.device] = t }
        }
        if let t = tombstone { note(t) }
        for s in Array(fields.values) + losers.values.joined() {
            note(s.timestamp)
            for t in s.context.values { note(t) }
        }
        return out
    }

    /// The item as the merge leaves it: nil when deleted, else each field written after the
    /// latest deletion. An item is live only while its secret was written after the latest
    /// deletion: an attribute change made without having seen a deletion (concurrently, or
    /// earlier) does not bring the item back, and an add after it (which writes every field)
    /// does.
    public var live: [SyncField: SyncValue]? {
        func counts(_ s: SyncStamped) -> Bool { tombstone.map { $0 < s.timestamp } ?? true }
        guard let secret = fields[.secret], counts(secret), secret.value != nil else { return nil }
        var out: [SyncField: SyncValue] = [:]
        for (f, s) in fields where counts(s) {
            if let v = s.value { out[f] = v }
        }
        return out
    }

    /// The latest timestamp this item's history holds (nil: none).
    var latest: SyncTimestamp? {
        ([tombstone].compactMap { $0 } + fields.values.map(\.timestamp)).max()
    }
}

/// The merged vault of a sync group: each item's merged history. `merge` is the pure
/// function the engine and the property tests share.
public struct SyncVault: Equatable, Sendable {
    public var items: [SyncItemKey: SyncItemState] = [:]

    public init() {}

    public mutating func apply(_ change: SyncChange) {
        items[change.key, default: SyncItemState()].apply(change)
    }

    public mutating func apply<S: Sequence>(_ changes: S) where S.Element == SyncChange {
        for c in changes { apply(c) }
    }

    /// The vault the changes make, in whatever order they come.
    public static func merge<S: Sequence>(_ changes: S) -> SyncVault where S.Element == SyncChange {
        var v = SyncVault()
        v.apply(changes)
        return v
    }

    /// The join of two merged vaults: the vault of both sets of changes.
    public mutating func join(_ other: SyncVault) {
        for (k, s) in other.items { items[k, default: SyncItemState()].join(s) }
    }

    /// The changes that make this vault (`merge(changes) == self`): per item its deletion,
    /// then one write per timestamp with the fields it won (items in no particular order:
    /// the merge does not depend on it).
    public var changes: [SyncChange] {
        var out: [SyncChange] = []
        out.reserveCapacity(items.count)
        for (k, s) in items {
            if let t = s.tombstone { out.append(SyncChange(key: k, timestamp: t, kind: .delete)) }
            var byStamp: [SyncTimestamp: [SyncField: SyncValue?]] = [:]
            var contexts: [SyncTimestamp: [SyncDeviceID: SyncTimestamp]] = [:]
            let kept =
                s.fields.map { ($0.key, $0.value) }
                + s.losers.flatMap { f, l in l.map { (f, $0) } }
            for (f, v) in kept {
                byStamp[v.timestamp, default: [:]][f] = .some(v.value)
                contexts[v.timestamp] = v.context
            }
            for t in byStamp.keys.sorted() {
                out.append(
                    SyncChange(
                        key: k, timestamp: t, kind: .write(byStamp[t]!), context: contexts[t]!))
            }
        }
        return out
    }

    /// Every live item and its fields (what each device's keychain converges to).
    public var liveItems: [SyncItemKey: [SyncField: SyncValue]] {
        var out: [SyncItemKey: [SyncField: SyncValue]] = [:]
        for (k, s) in items {
            if let l = s.live { out[k] = l }
        }
        return out
    }
}

/// Compaction of one device's changes (docs/sync.md): the snapshot that replaces its segments.
public enum SyncCompaction {
    /// The vault a device's snapshot holds, from `own` (the merge of its own current
    /// segments) and `others` (each other device's, as far as read). Merging the snapshot with
    /// `others` gives the same live items as merging `own` with them, whatever other changes
    /// come later, stamped after what is there (a device that has merged a deletion stamps
    /// its later changes after it):
    ///
    /// - a write or deletion of `own` that a later deletion of the group covers is left out
    ///   (it can never count again);
    /// - with `dropTombstones` (every member has merged every segment of this device), a
    ///   deletion of `own` that is the item's latest and that no other device's changes
    ///   predate, stamped at most `now` (ms), is left out too, with the item: nothing it
    ///   could still cover is left anywhere.
    public static func snapshot(
        own: SyncVault, others: [SyncVault], dropTombstones: Bool, now: UInt64
    ) -> SyncVault {
        var all = own
        for o in others { all.join(o) }
        var out = SyncVault()
        for (k, mine) in own.items {
            let group = all.items[k]!
            var s = SyncItemState()
            if let t = mine.tombstone, t == group.tombstone {
                // Writes of other devices stamped before it, which it must go on covering.
                let covers = others.contains { o in
                    guard let theirs = o.items[k] else { return false }
                    return theirs.fields.values.contains { $0.timestamp < t }
                }
                if !dropTombstones || covers || t.wall > now { s.tombstone = t }
            }
            for (f, v) in mine.fields where group.tombstone.map({ $0 < v.timestamp }) ?? true {
                s.fields[f] = v
            }
            if s.tombstone != nil || !s.fields.isEmpty { out.items[k] = s }
        }
        return out
    }
}
