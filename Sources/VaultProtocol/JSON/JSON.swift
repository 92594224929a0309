/// A JSON value as varlink carries it (RFC 8259).
///
/// Numbers keep their literal text, so an integer of any size and a double with every bit
/// survive a round trip untouched; the accessors convert exactly or return `nil`.
public enum JSON: Equatable, Sendable {
    /// Strings and member names compare byte for byte (`ExactString`), as JSON does: under
    /// Swift's `==` `"caf\u00e9"` and `"cafe\u0301"` would be one string.
    case null
    case bool(Bool)
    /// The number's literal text as it appears on the wire (validated JSON number syntax).
    case number(String)
    case string(String)
    case array([JSON])
    case object(JSONObject)

    public init(_ value: Int) { self = .number(String(value)) }
    public init(_ value: Int64) { self = .number(String(value)) }
    public init(_ value: UInt64) { self = .number(String(value)) }
    /// A finite double, written in its shortest round-trip form. Precondition: `value.isFinite`.
    public init(_ value: Double) {
        precondition(value.isFinite, "JSON cannot carry inf or nan")
        self = .number(value.description)
    }
    public init(_ value: String) { self = .string(value) }
    public init(_ value: Bool) { self = .bool(value) }

    public subscript(key: String) -> JSON? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }
    public var boolValue: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }
    public var arrayValue: [JSON]? {
        if case .array(let a) = self { return a }
        return nil
    }
    public var objectValue: JSONObject? {
        if case .object(let o) = self { return o }
        return nil
    }
    public static func == (a: JSON, b: JSON) -> Bool {
        switch (a, b) {
        case (.null, .null): true
        case (.bool(let x), .bool(let y)): x == y
        case (.number(let x), .number(let y)): x.sameBytes(y)
        case (.string(let x), .string(let y)): x.sameBytes(y)
        case (.array(let x), .array(let y)): x == y
        case (.object(let x), .object(let y)): x == y
        default: false
        }
    }

    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    /// The number as an exact Int64, or nil when it is not an integer literal in range.
    public var int64Value: Int64? {
        if case .number(let n) = self { return Int64(n) }
        return nil
    }
    /// The number as an exact UInt64, or nil when it is not a non-negative integer literal in range.
    public var uint64Value: UInt64? {
        if case .number(let n) = self { return UInt64(n) }
        return nil
    }
    public var intValue: Int? {
        if case .number(let n) = self { return Int(n) }
        return nil
    }
    /// The number as the nearest Double (correctly rounded, as `strtod`).
    public var doubleValue: Double? {
        if case .number(let n) = self { return Double(n) }
        return nil
    }
}

extension JSON: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .number(String(value)) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSON...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSON)...) {
        var o = JSONObject(minimumCapacity: elements.count)
        for (k, v) in elements { o[k] = v }
        self = .object(o)
    }
    public init(nilLiteral: ()) { self = .null }
}
