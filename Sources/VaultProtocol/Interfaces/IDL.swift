/// The varlink interface definition language (https://varlink.org/Interface-Definition): the
/// parsed form of one `.varlink` file, and its parser. vaultd validates every call (and, in
/// debug builds, every reply) against these declarations (`VarlinkValidation`).
public enum VarlinkIDL {
    /// A field's type, as the grammar has it.
    public indirect enum FieldType: Equatable, Sendable, CustomStringConvertible {
        case bool, int, float, string
        /// `object`: any JSON object, not described further.
        case object
        /// A type the interface declares with `type Name (...)`.
        case named(String)
        /// `(a: T, b: U)`: a JSON object with exactly these fields (`?T` ones may be absent).
        case structure([Field])
        /// `(one, two)`: a string, one of these.
        case enumeration([String])
        /// `?T`: null, absent (as a field), or a T.
        case optional(FieldType)
        /// `[]T`: a JSON array of T.
        case array(FieldType)
        /// `[string]T`: a JSON object of T (`[string]()` is a set of strings).
        case map(FieldType)

        public var description: String {
            switch self {
            case .bool: "bool"
            case .int: "int"
            case .float: "float"
            case .string: "string"
            case .object: "object"
            case .named(let n): n
            case .structure(let fields):
                "(" + fields.map { "\($0.name): \($0.type)" }.joined(separator: ", ") + ")"
            case .enumeration(let names): "(" + names.joined(separator: ", ") + ")"
            case .optional(let t): "?\(t)"
            case .array(let t): "[]\(t)"
            case .map(let t): "[string]\(t)"
            }
        }
    }

    public struct Field: Equatable, Sendable {
        public let name: String
        public let type: FieldType

        public init(name: String, type: FieldType) {
            self.name = name
            self.type = type
        }
    }

    public struct Method: Equatable, Sendable {
        public let name: String
        public let input: [Field]
        public let output: [Field]
    }

    public struct ErrorDeclaration: Equatable, Sendable {
        public let name: String
        public let parameters: [Field]
    }

    /// One parsed interface description.
    public struct Interface: Sendable {
        /// e.g. `io.vaultd.Keychain`.
        public let name: String
        /// The text it was parsed from, byte for byte (what GetInterfaceDescription returns).
        public let text: String
        /// `type` declarations: each a `.structure` or an `.enumeration`.
        public let types: [String: FieldType]
        public let methods: [String: Method]
        public let errors: [String: ErrorDeclaration]
        /// Method names in the order the text declares them.
        public let methodOrder: [String]
    }

    /// Where and why a description does not parse.
    public struct ParseError: Error, Equatable, CustomStringConvertible, Sendable {
        public let line: Int
        public let column: Int
        public let reason: String

        public init(line: Int, column: Int, reason: String) {
            self.line = line
            self.column = column
            self.reason = reason
        }

        public var description: String { "line \(line), column \(column): \(reason)" }
    }

    /// Parses one interface description. Throws `ParseError` for text the grammar does not
    /// allow, a name declared twice (types, methods and errors share one namespace), and a
    /// type name used but not declared.
    public static func parse(_ text: String) throws -> Interface {
        var p = Parser(Array(text.utf8))
        return try p.interface(text: text)
    }

    /// A recursive-descent parser over the text's UTF-8 bytes. Whitespace and `#` comments
    /// (to the end of the line) may stand between any two tokens.
    struct Parser {
        let bytes: [UInt8]
        var i = 0
        /// How deep the type being parsed nests (`?`, `[]`, `[string]`, parentheses), at most
        /// `maximumDepth`: the parser recurses once per level.
        var depth = 0
        static let maximumDepth = 64

        init(_ bytes: [UInt8]) { self.bytes = bytes }

        func fail(_ reason: String) -> ParseError { fail(reason, at: i) }

        /// The error at byte `offset`: its line and column counted only now, when parsing
        /// has failed (counting them on the way would make the parse quadratic).
        func fail(_ reason: String, at offset: Int) -> ParseError {
            var line = 1
            var column = 1
            for b in bytes[..<min(offset, bytes.count)] {
                if b == UInt8(ascii: "\n") {
                    line += 1
                    column = 1
                } else {
                    column += 1
                }
            }
            return ParseError(line: line, column: column, reason: reason)
        }

        mutating func skipSpace() {
            while i < bytes.count {
                switch bytes[i] {
                case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"):
                    i += 1
                case UInt8(ascii: "#"):
                    while i < bytes.count, bytes[i] != UInt8(ascii: "\n") { i += 1 }
                default: return
                }
            }
        }

        var atEnd: Bool { i >= bytes.count }
        var next: UInt8? { i < bytes.count ? bytes[i] : nil }

        mutating func accept(_ token: String) -> Bool {
            skipSpace()
            let t = Array(token.utf8)
            guard i + t.count <= bytes.count, Array(bytes[i..<(i + t.count)]) == t else {
                return false
            }
            i += t.count
            return true
        }

        mutating func expect(_ token: String) throws {
            guard accept(token) else { throw fail("expected '\(token)'") }
        }

        static func isLetter(_ b: UInt8) -> Bool {
            (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
        }
        static func isDigit(_ b: UInt8) -> Bool { b >= 0x30 && b <= 0x39 }

        /// The longest run of letters, digits, `_`, `-` and `.` here (possibly empty).
        mutating func word() -> String {
            skipSpace()
            let start = i
            while let b = next,
                Self.isLetter(b) || Self.isDigit(b) || b == UInt8(ascii: "_")
                    || b == UInt8(ascii: "-") || b == UInt8(ascii: ".")
            {
                i += 1
            }
            return String(decoding: bytes[start..<i], as: UTF8.self)
        }

        /// `[A-Z][A-Za-z0-9]*`: a type, method or error name.
        mutating func memberName(_ what: String) throws -> String {
            let w = word()
            let b = Array(w.utf8)
            guard let first = b.first, first >= 0x41, first <= 0x5A,
                b.allSatisfy({ Self.isLetter($0) || Self.isDigit($0) })
            else {
                throw fail(
                    "expected a \(what) name (an uppercase letter, then letters and digits), found '\(w)'"
                )
            }
            return w
        }

        /// `[A-Za-z](_?[A-Za-z0-9])*`: a field or enum value name.
        static func isFieldName(_ w: String) -> Bool {
            let b = Array(w.utf8)
            guard let first = b.first, isLetter(first), b.last != UInt8(ascii: "_") else {
                return false
            }
            var previousUnderscore = false
            for c in b.dropFirst() {
                if c == UInt8(ascii: "_") {
                    if previousUnderscore { return false }
                    previousUnderscore = true
                } else if isLetter(c) || isDigit(c) {
                    previousUnderscore = false
                } else {
                    return false
                }
            }
            return true
        }

        /// Reverse-domain notation: two or more dot-separated parts of letters, digits and
        /// `-`, each starting with a letter.
        static func isInterfaceName(_ w: String) -> Bool {
            let parts = w.split(separator: ".", omittingEmptySubsequences: false)
            guard parts.count >= 2 else { return false }
            return parts.allSatisfy { p in
                let b = Array(p.utf8)
                guard let first = b.first, isLetter(first), b.last != UInt8(ascii: "-") else {
                    return false
                }
                return b.allSatisfy { isLetter($0) || isDigit($0) || $0 == UInt8(ascii: "-") }
            }
        }

        mutating func interface(text: String) throws -> Interface {
            guard accept("interface") else { throw fail("a description starts with 'interface'") }
            guard let b = next, b == UInt8(ascii: " ") || b == UInt8(ascii: "\t") else {
                throw fail("expected a space after 'interface'")
            }
            let name = word()
            guard Self.isInterfaceName(name) else {
                throw fail("'\(name)' is not an interface name in reverse-domain notation")
            }
            var types: [String: FieldType] = [:]
            var methods: [String: Method] = [:]
            var errors: [String: ErrorDeclaration] = [:]
            var order: [String] = []
            var declared: Set<String> = []
            var used: [(String, Int)] = []
            func declare(_ n: String, _ at: Int) throws {
                guard declared.insert(n).inserted else {
                    throw fail("'\(n)' is declared twice", at: at)
                }
            }
            while true {
                skipSpace()
                if atEnd { break }
                skipSpace()
                let here = i
                let keyword = word()
                switch keyword {
                case "type":
                    let n = try memberName("type")
                    try declare(n, here)
                    skipSpace()
                    guard next == UInt8(ascii: "(") else {
                        throw fail("a type is a struct or an enum in parentheses")
                    }
                    types[n] = try parenthesized(&used)
                case "method":
                    let n = try memberName("method")
                    try declare(n, here)
                    let input = try structure(&used)
                    try expect("->")
                    let output = try structure(&used)
                    methods[n] = Method(name: n, input: input, output: output)
                    order.append(n)
                case "error":
                    let n = try memberName("error")
                    try declare(n, here)
                    errors[n] = ErrorDeclaration(name: n, parameters: try structure(&used))
                default:
                    throw fail("expected 'type', 'method' or 'error', found '\(keyword)'")
                }
            }
            for (n, at) in used where types[n] == nil {
                throw fail("type '\(n)' is not declared", at: at)
            }
            return Interface(
                name: name, text: text, types: types, methods: methods, errors: errors,
                methodOrder: order)
        }

        /// A struct: `(` fields `)`; the empty struct `()` included.
        mutating func structure(_ used: inout [(String, Int)]) throws -> [Field] {
            skipSpace()
            guard next == UInt8(ascii: "(") else { throw fail("expected '('") }
            guard case .structure(let fields) = try parenthesized(&used) else {
                throw fail("expected a struct (name: type, ...), not an enum")
            }
            return fields
        }

        /// `(...)`: a struct when its first name is followed by ':', an enum otherwise; `()` is
        /// the empty struct.
        mutating func parenthesized(_ used: inout [(String, Int)]) throws -> FieldType {
            try expect("(")
            if accept(")") { return .structure([]) }
            var fields: [Field] = []
            var names: [String] = []
            var seen: Set<String> = []
            var isStruct: Bool?
            repeat {
                let n = word()
                guard Self.isFieldName(n) else { throw fail("'\(n)' is not a field name") }
                guard seen.insert(n).inserted else { throw fail("'\(n)' appears twice") }
                let colon = accept(":")
                if isStruct == nil { isStruct = colon }
                guard colon == isStruct else {
                    throw fail("a struct's fields all have types, an enum's names none")
                }
                if colon {
                    fields.append(Field(name: n, type: try type(&used)))
                } else {
                    names.append(n)
                }
            } while accept(",")
            try expect(")")
            return isStruct == true ? .structure(fields) : .enumeration(names)
        }

        mutating func type(_ used: inout [(String, Int)]) throws -> FieldType {
            depth += 1
            defer { depth -= 1 }
            guard depth <= Self.maximumDepth else {
                throw fail("types nest deeper than \(Self.maximumDepth) levels")
            }
            if accept("?") {
                skipSpace()
                if next == UInt8(ascii: "?") { throw fail("'??' is not a type") }
                return .optional(try type(&used))
            }
            if accept("[]") { return .array(try type(&used)) }
            if accept("[string]") { return .map(try type(&used)) }
            skipSpace()
            if next == UInt8(ascii: "(") { return try parenthesized(&used) }
            skipSpace()
            let here = i
            let w = word()
            switch w {
            case "bool": return .bool
            case "int": return .int
            case "float": return .float
            case "string": return .string
            case "object": return .object
            default:
                let b = Array(w.utf8)
                guard let first = b.first, first >= 0x41, first <= 0x5A,
                    b.allSatisfy({ Self.isLetter($0) || Self.isDigit($0) })
                else {
                    throw fail("expected a type, found '\(w)'")
                }
                used.append((w, here))
                return .named(w)
            }
        }
    }
}
