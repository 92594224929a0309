import Foundation

/// A string that is equal, hashed and ordered by its UTF-8 bytes.
///
/// Swift's `String` compares and hashes by Unicode canonical equivalence: precomposed `é`
/// (U+00E9) equals `e` + U+0301, and the Kelvin sign U+212A equals `K`. The kernel, SQLite,
/// JSON (RFC 8259 compares member names by code points) and Apple's CFString compare the
/// bytes, so to them those are two names. Where a dictionary key or a set member is a name
/// a user or an app gave (a preference key or domain, a plist or JSON member name), it must
/// be one of these, or two names become one and a value is lost or reaches the wrong one.
public struct ExactString: Hashable, Comparable, Sendable, ExpressibleByStringLiteral,
    CustomStringConvertible
{
    public var string: String

    @inlinable public init(_ string: String) { self.string = string }
    @inlinable public init(stringLiteral value: String) { self.string = value }

    public var description: String { string }

    @inlinable public static func == (a: ExactString, b: ExactString) -> Bool {
        a.string.sameBytes(b.string)
    }

    @inlinable public func hash(into hasher: inout Hasher) {
        let u = string.utf8
        if u.withContiguousStorageIfAvailable({ hasher.combine(bytes: UnsafeRawBufferPointer($0)) })
            == nil
        {
            for b in u { hasher.combine(b) }
        }
        hasher.combine(0xFF as UInt8)  // no UTF-8 byte: ends the string, as String's hash does
    }

    /// Byte order, which for UTF-8 is code-point order: total, where Swift's `<` leaves
    /// canonically equivalent strings unordered.
    @inlinable public static func < (a: ExactString, b: ExactString) -> Bool {
        a.string.bytesPrecede(b.string)
    }
}

/// A dictionary keyed by strings compared byte for byte (`ExactString`), with String's
/// face: subscripts, iteration and literals take and give `String`s. Two keys that differ
/// only in Unicode normalisation are two entries, as they are to SQLite, to JSON and to
/// CFDictionary; in a `[String: V]` the second would overwrite the first.
///
/// Up to `linearLimit` entries are kept in an array in the order they were first set and
/// found by comparing bytes; past it, in a hash table. Most dictionaries are small (a call's
/// parameters, an item's attributes, a JSON object on the wire), and a search of a few keys,
/// each compared by its length first, costs less than one SipHash of the key. Iteration
/// follows insertion order while the entries are few, the table's order after.
public struct ExactDictionary<Value>: Sequence, ExpressibleByDictionaryLiteral {
    public typealias Element = (key: String, value: Value)
    /// The entries while there are at most `linearLimit` (and `table` is nil).
    @usableFromInline var entries: [(key: ExactString, value: Value)]
    /// The entries once there were more than `linearLimit` (then `entries` is empty).
    @usableFromInline var table: [ExactString: Value]?

    /// The most entries kept in the array.
    @inlinable static var linearLimit: Int { 8 }
    /// The array's room at its first entry (`JSON.estimatedTreeBytes` counts on it: three
    /// 40-byte entries and the array's header stay within one member's estimate).
    @inlinable static var firstCapacity: Int { 3 }

    @inlinable public init() {
        entries = []
        table = nil
    }
    @inlinable public init(minimumCapacity: Int) {
        if minimumCapacity > Self.linearLimit {
            entries = []
            table = .init(minimumCapacity: minimumCapacity)
        } else {
            entries = []
            entries.reserveCapacity(minimumCapacity)
            table = nil
        }
    }
    /// From a Swift dictionary (whose keys are already distinct by canonical equivalence).
    @inlinable public init(_ d: [String: Value]) {
        self.init(minimumCapacity: d.count)
        for (k, v) in d { self[k] = v }
    }
    /// Later pairs replace earlier ones with the same bytes.
    @inlinable public init(dictionaryLiteral elements: (String, Value)...) {
        self.init(minimumCapacity: elements.count)
        for (k, v) in elements { self[k] = v }
    }

    /// The index in `entries` of the entry whose key is `key`'s bytes.
    @inlinable func index(of key: String) -> Int? {
        entries.firstIndex { $0.key.string.sameBytes(key) }
    }

    @inlinable public subscript(key: String) -> Value? {
        get {
            if let table { return table[ExactString(key)] }
            return index(of: key).map { entries[$0].value }
        }
        set {
            if let newValue {
                updateValue(newValue, forKey: key)
            } else {
                removeValue(forKey: key)
            }
        }
    }
    @inlinable public subscript(key: String, default value: @autoclosure () -> Value) -> Value {
        get { self[key] ?? value() }
        set { self[key] = newValue }
    }

    @inlinable public var count: Int { table?.count ?? entries.count }
    @inlinable public var isEmpty: Bool { count == 0 }
    @inlinable public var keys: [String] {
        table.map { $0.keys.map(\.string) } ?? entries.map(\.key.string)
    }
    @inlinable public var values: [Value] {
        table.map { Array($0.values) } ?? entries.map(\.value)
    }
    @inlinable public mutating func reserveCapacity(_ n: Int) {
        if table != nil {
            table!.reserveCapacity(n)
        } else if n <= Self.linearLimit {
            entries.reserveCapacity(n)
        }
    }

    @discardableResult @inlinable
    public mutating func updateValue(_ value: Value, forKey key: String) -> Value? {
        if table != nil { return table!.updateValue(value, forKey: ExactString(key)) }
        if let i = index(of: key) {
            let old = entries[i].value
            entries[i].value = value
            return old
        }
        if entries.count < Self.linearLimit {
            // Room for a few at the first: growing from one by doubling reallocated for
            // each of a small object's first members.
            if entries.capacity == 0 { entries.reserveCapacity(Self.firstCapacity) }
            entries.append((ExactString(key), value))
            return nil
        }
        var t = [ExactString: Value](minimumCapacity: entries.count * 2 + 2)
        for e in entries { t[e.key] = e.value }
        t[ExactString(key)] = value
        entries = []
        table = t
        return nil
    }
    @discardableResult @inlinable
    public mutating func removeValue(forKey key: String) -> Value? {
        if table != nil { return table!.removeValue(forKey: ExactString(key)) }
        guard let i = index(of: key) else { return nil }
        return entries.remove(at: i).value
    }

    @inlinable public func mapValues<T>(_ transform: (Value) throws -> T) rethrows
        -> ExactDictionary<T>
    {
        var out = ExactDictionary<T>()
        if let table {
            out.table = try table.mapValues(transform)
        } else {
            out.entries = try entries.map { ($0.key, try transform($0.value)) }
        }
        return out
    }
    @inlinable public func compactMapValues<T>(_ transform: (Value) throws -> T?) rethrows
        -> ExactDictionary<T>
    {
        var out = ExactDictionary<T>(minimumCapacity: count)
        for (k, v) in self { if let t = try transform(v) { out[k] = t } }
        return out
    }
    @inlinable public func filter(_ isIncluded: (Element) throws -> Bool) rethrows
        -> ExactDictionary
    {
        var out = ExactDictionary()
        for e in self where try isIncluded(e) { out[e.key] = e.value }
        return out
    }
    @inlinable public var first: Element? {
        if let table { return table.first.map { ($0.key.string, $0.value) } }
        return entries.first.map { ($0.key.string, $0.value) }
    }
    @inlinable public mutating func merge(
        _ other: ExactDictionary, uniquingKeysWith combine: (Value, Value) throws -> Value
    ) rethrows {
        for (k, v) in other { self[k] = try self[k].map { try combine($0, v) } ?? v }
    }
    @inlinable public func merging(
        _ other: ExactDictionary, uniquingKeysWith combine: (Value, Value) throws -> Value
    ) rethrows -> ExactDictionary {
        var out = self
        try out.merge(other, uniquingKeysWith: combine)
        return out
    }
    /// The entries in byte order of their keys.
    @inlinable public func sortedByKey() -> [Element] {
        if let table {
            return table.sorted { $0.key < $1.key }.map { ($0.key.string, $0.value) }
        }
        return entries.sorted { $0.key < $1.key }.map { ($0.key.string, $0.value) }
    }

    public struct Iterator: IteratorProtocol {
        @usableFromInline var table: Dictionary<ExactString, Value>.Iterator?
        @usableFromInline var entries: IndexingIterator<[(key: ExactString, value: Value)]>
        @inlinable init(_ d: ExactDictionary) {
            table = d.table?.makeIterator()
            entries = d.entries.makeIterator()
        }
        @inlinable public mutating func next() -> (key: String, value: Value)? {
            if table != nil { return table!.next().map { ($0.key.string, $0.value) } }
            return entries.next().map { ($0.key.string, $0.value) }
        }
    }
    @inlinable public func makeIterator() -> Iterator { Iterator(self) }
    @inlinable public var underestimatedCount: Int { count }
}

extension ExactDictionary: Equatable where Value: Equatable {
    /// The same keys (by their bytes) with equal values, in whatever order they were set.
    @inlinable public static func == (a: ExactDictionary, b: ExactDictionary) -> Bool {
        guard a.count == b.count else { return false }
        for (k, v) in a {
            guard let w = b[k], w == v else { return false }
        }
        return true
    }
}
extension ExactDictionary: Sendable where Value: Sendable {}

extension ExactDictionary: CustomStringConvertible {
    public var description: String {
        "["
            + sortedByKey().map { "\($0.key.debugDescription): \($0.value)" }.joined(
                separator: ", ") + "]"
    }
}

/// A JSON object's members: distinct member names are distinct bytes (RFC 8259).
public typealias JSONObject = ExactDictionary<JSON>
/// A property-list dictionary, or a preferences domain's values, by key (byte for byte, as
/// CFDictionary, SQLite and Apple's `defaults` keep them).
public typealias PlistDictionary = ExactDictionary<PlistValue>
/// A set of names compared byte for byte.
public typealias ExactSet = Set<ExactString>
