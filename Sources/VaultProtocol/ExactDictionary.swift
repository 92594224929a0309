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
public struct ExactDictionary<Value>: Sequence, ExpressibleByDictionaryLiteral {
    public typealias Element = (key: String, value: Value)
    public var storage: [ExactString: Value]

    @inlinable public init() { storage = [:] }
    @inlinable public init(minimumCapacity: Int) {
        storage = .init(minimumCapacity: minimumCapacity)
    }
    @inlinable public init(storage: [ExactString: Value]) { self.storage = storage }
    /// From a Swift dictionary (whose keys are already distinct by canonical equivalence).
    @inlinable public init(_ d: [String: Value]) {
        storage = .init(minimumCapacity: d.count)
        for (k, v) in d { storage[ExactString(k)] = v }
    }
    /// Later pairs replace earlier ones with the same bytes.
    @inlinable public init(dictionaryLiteral elements: (String, Value)...) {
        storage = .init(minimumCapacity: elements.count)
        for (k, v) in elements { storage[ExactString(k)] = v }
    }

    @inlinable public subscript(key: String) -> Value? {
        get { storage[ExactString(key)] }
        set { storage[ExactString(key)] = newValue }
    }
    @inlinable public subscript(key: String, default value: @autoclosure () -> Value) -> Value {
        get { storage[ExactString(key), default: value()] }
        set { storage[ExactString(key), default: value()] = newValue }
    }

    @inlinable public var count: Int { storage.count }
    @inlinable public var isEmpty: Bool { storage.isEmpty }
    @inlinable public var keys: [String] { storage.keys.map(\.string) }
    @inlinable public var values: Dictionary<ExactString, Value>.Values { storage.values }
    @inlinable public mutating func reserveCapacity(_ n: Int) { storage.reserveCapacity(n) }

    @discardableResult @inlinable
    public mutating func updateValue(_ value: Value, forKey key: String) -> Value? {
        storage.updateValue(value, forKey: ExactString(key))
    }
    @discardableResult @inlinable
    public mutating func removeValue(forKey key: String) -> Value? {
        storage.removeValue(forKey: ExactString(key))
    }

    @inlinable public func mapValues<T>(_ transform: (Value) throws -> T) rethrows
        -> ExactDictionary<T>
    {
        ExactDictionary<T>(storage: try storage.mapValues(transform))
    }
    @inlinable public func compactMapValues<T>(_ transform: (Value) throws -> T?) rethrows
        -> ExactDictionary<T>
    {
        ExactDictionary<T>(storage: try storage.compactMapValues(transform))
    }
    @inlinable public func filter(_ isIncluded: (Element) throws -> Bool) rethrows
        -> ExactDictionary
    {
        ExactDictionary(storage: try storage.filter { try isIncluded(($0.key.string, $0.value)) })
    }
    @inlinable public var first: Element? { storage.first.map { ($0.key.string, $0.value) } }
    @inlinable public mutating func merge(
        _ other: ExactDictionary, uniquingKeysWith combine: (Value, Value) throws -> Value
    ) rethrows {
        try storage.merge(other.storage, uniquingKeysWith: combine)
    }
    @inlinable public func merging(
        _ other: ExactDictionary, uniquingKeysWith combine: (Value, Value) throws -> Value
    ) rethrows -> ExactDictionary {
        ExactDictionary(storage: try storage.merging(other.storage, uniquingKeysWith: combine))
    }
    /// The entries in byte order of their keys.
    @inlinable public func sortedByKey() -> [Element] {
        storage.sorted { $0.key < $1.key }.map { ($0.key.string, $0.value) }
    }

    public struct Iterator: IteratorProtocol {
        @usableFromInline var base: Dictionary<ExactString, Value>.Iterator
        @inlinable init(_ base: Dictionary<ExactString, Value>.Iterator) { self.base = base }
        @inlinable public mutating func next() -> (key: String, value: Value)? {
            base.next().map { ($0.key.string, $0.value) }
        }
    }
    @inlinable public func makeIterator() -> Iterator { Iterator(storage.makeIterator()) }
    @inlinable public var underestimatedCount: Int { storage.count }
}

extension ExactDictionary: Equatable where Value: Equatable {}
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
