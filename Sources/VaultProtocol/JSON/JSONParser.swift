/// Why a byte sequence is not an acceptable JSON document.
public struct JSONSyntaxError: Error, Equatable, CustomStringConvertible, Sendable {
    /// Byte offset of the problem.
    public var offset: Int
    public var reason: String
    public var description: String { "invalid JSON at byte \(offset): \(reason)" }
}

extension JSON {
    /// Nesting deeper than this is refused (a 10,000-deep document must not exhaust the stack).
    /// Deep enough for the deepest property-list value the engine accepts (each plist level
    /// takes two JSON levels, `{"array": [...]}`) inside a varlink message (a few levels more).
    public static let maximumDepth = 2 * PlistValue.maximumDepth + 16

    /// Parses one complete JSON document (RFC 8259, strict: no trailing commas, no comments,
    /// no NUL or other control characters unescaped in strings, valid UTF-8 only, no duplicate
    /// object keys). Throws `JSONSyntaxError`.
    public static func parse<C: Collection>(_ bytes: C) throws -> JSON where C.Element == UInt8 {
        try parse(Array(bytes))
    }

    /// `parse` for the common case, without generic dispatch (from another module an
    /// unspecialized generic call looks its metadata up at run time on every message).
    public static func parse(_ bytes: [UInt8]) throws -> JSON {
        try bytes.withUnsafeBufferPointer { buffer in
            var parser = Parser(bytes: buffer)
            parser.skipWhitespace()
            let value = try parser.parseValue(depth: 0)
            parser.skipWhitespace()
            guard parser.index == buffer.count else {
                throw parser.error("trailing bytes after the value")
            }
            return value
        }
    }

    public static func parse(_ string: String) throws -> JSON { try parse(Array(string.utf8)) }

    /// Parses one complete JSON document that must be an object, handing each member to
    /// `body` (key, value) in document order instead of building the object: for a caller
    /// that makes a value of its own from the members, as the engine does with every
    /// candidate item's stored attributes on each lookup. As strict as `parse`,
    /// except that refusing a repeated key is left to `body`. Throws `JSONSyntaxError` (a
    /// document that is not an object too) or what `body` throws.
    public static func parseMembers(_ bytes: [UInt8], _ body: (String, JSON) throws -> Void) throws
    {
        try bytes.withUnsafeBufferPointer { buffer in
            var parser = Parser(bytes: buffer)
            parser.skipWhitespace()
            guard parser.index < buffer.count, buffer[parser.index] == UInt8(ascii: "{") else {
                throw parser.error("expected an object")
            }
            try parser.parseMembers(depth: 0) { key, _, value in try body(key, value) }
            parser.skipWhitespace()
            guard parser.index == buffer.count else {
                throw parser.error("trailing bytes after the value")
            }
        }
    }
}

extension JSON {
    /// Objects this shallow (the message, its parameters) are allocated with room for 12
    /// members at once.
    static let reservedObjectDepth = 1

    private static func isNumberByte(_ b: UInt8) -> Bool {
        (b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9")) || b == UInt8(ascii: ".")
            || b == UInt8(ascii: "e")
            || b == UInt8(ascii: "E") || b == UInt8(ascii: "+") || b == UInt8(ascii: "-")
    }

    /// Bytes of memory, at most, that `parse(bytes)` allocates for the tree it builds (or
    /// for the part it builds before it finds an error): one pass over the bytes, so a caller
    /// can count the tree against a budget before building it. A tree costs far more than
    /// its text for many small values (a `{}` of 3 bytes is a 24-byte array element; a
    /// member is a hash-table bucket of 40 bytes at a load of at most 3/4, in a table that
    /// doubles), so the text's size alone does not bound it.
    /// The figures are upper bounds of Swift's layouts on 64-bit Linux, malloc's rounding
    /// and the slack of doubling growth included. (It allocates nothing of the message's
    /// size: a flag per nesting level.)
    public static func estimatedTreeBytes(_ bytes: [UInt8]) -> Int {
        // Per array element: 24-byte stride, up to twice that after doubling growth.
        let elementBytes = 48
        // Per object member: a 40-byte entry (`ExactDictionary`'s array, three at the first)
        // or bucket (its table past 8, at most 3/4 full), up to twice after doubling.
        let memberBytes = 112
        // A non-empty array or object: its heap header and malloc's rounding.
        let containerBytes = 80
        // A reserved object (`reservedObjectDepth`): 16 buckets at once.
        let reservedObjectBytes = 80 + 16 * 40
        // A string or number over 15 UTF-8 bytes (shorter ones are stored inline): its
        // bytes, a 32-byte header and malloc's rounding. Its text's length bounds it.
        let stringOverhead = 48
        return bytes.withUnsafeBufferPointer { b -> Int in
            var total = 0
            var i = 0
            let n = b.count
            // Open containers: whether each is an object (a bit per level, as deep as the
            // parser goes: past that it stops, and so does this).
            var isObject = [Bool](repeating: false, count: maximumDepth + 1)
            var depth = 0
            // Starts a value's container; false past the parser's depth limit.
            func open(_ object: Bool, at index: Int) -> Bool {
                guard depth < maximumDepth else { return false }
                isObject[depth] = object
                var j = index + 1
                while j < n, b[j] == 0x20 || b[j] == 0x09 || b[j] == 0x0A || b[j] == 0x0D { j += 1 }
                let empty = j < n && b[j] == (object ? UInt8(ascii: "}") : UInt8(ascii: "]"))
                if !empty {
                    total +=
                        object && depth <= reservedObjectDepth
                        ? reservedObjectBytes : containerBytes
                    total += object ? memberBytes : elementBytes
                }
                depth += 1
                return true
            }
            while i < n {
                let c = b[i]
                switch c {
                case UInt8(ascii: "\""):
                    let start = i
                    i += 1
                    while i < n, b[i] != UInt8(ascii: "\"") {
                        i += b[i] == UInt8(ascii: "\\") ? 2 : 1
                    }
                    if i - start - 1 > 15 { total += i - start - 1 + stringOverhead }
                case UInt8(ascii: "{"), UInt8(ascii: "["):
                    guard open(c == UInt8(ascii: "{"), at: i) else { return total }
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    if depth > 0 { depth -= 1 }
                case UInt8(ascii: ","):
                    if depth > 0 { total += isObject[depth - 1] ? memberBytes : elementBytes }
                case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                    let start = i
                    while i + 1 < n, Self.isNumberByte(b[i + 1]) { i += 1 }
                    if i - start + 1 > 15 { total += i - start + 1 + stringOverhead }
                default: break
                }
                i += 1
            }
            return total
        }
    }
}

/// A string member of a varlink call's `parameters` left in the message's bytes
/// (`JSON.parseCall`): its name, and where its text is (between its quotes, escapes as sent).
public struct RawStringMember: Sendable, Equatable {
    public var name: String
    /// Byte offsets of the text in the message.
    public var range: Range<Int>
    /// Whether the text has escapes (`JSON.unescape` turns it into the string's UTF-8).
    public var escaped: Bool
}

extension JSON {
    /// Parses a varlink call's message as `parse` does (as strictly), except that every string
    /// member of its top-level `parameters` object named in `rawMembers` is left out of the
    /// tree and returned as where its text is in `bytes` instead: a secret is then never copied
    /// into a `String` (whose storage is freed without being wiped). vaultd decodes such a
    /// member from `bytes` straight into secure memory and then wipes `bytes`. Members of
    /// other types stay in the tree. Throws `JSONSyntaxError`.
    public static func parseCall(_ bytes: UnsafeBufferPointer<UInt8>, rawMembers: Set<String>)
        throws -> (JSON, [RawStringMember])
    {
        var parser = Parser(bytes: bytes)
        parser.rawMembers = rawMembers
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        guard parser.index == bytes.count else {
            throw parser.error("trailing bytes after the value")
        }
        return (value, parser.raws)
    }

    /// Writes the UTF-8 of the JSON string whose text (between its quotes) is `text`, which
    /// `parseCall` validated, to `out`, which has room for `text.count` bytes (a string is
    /// never longer than its text). Returns the bytes written. Nothing is allocated.
    public static func unescape(
        _ text: UnsafeBufferPointer<UInt8>, into out: UnsafeMutablePointer<UInt8>
    ) -> Int {
        var i = 0
        var n = 0
        func hex4(_ at: Int) -> UInt32 {
            var v: UInt32 = 0
            for k in 0..<4 {
                let b = text[at + k]
                let d: UInt32 =
                    switch b {
                    case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt32(b - UInt8(ascii: "0"))
                    case UInt8(ascii: "a")...UInt8(ascii: "f"): UInt32(b - UInt8(ascii: "a") + 10)
                    default: UInt32(b - UInt8(ascii: "A") + 10)
                    }
                v = v << 4 | d
            }
            return v
        }
        while i < text.count {
            let b = text[i]
            guard b == UInt8(ascii: "\\"), i + 1 < text.count else {
                out[n] = b
                n += 1
                i += 1
                continue
            }
            let e = text[i + 1]
            i += 2
            let simple: UInt8? =
                switch e {
                case UInt8(ascii: "b"): 0x08
                case UInt8(ascii: "f"): 0x0C
                case UInt8(ascii: "n"): 0x0A
                case UInt8(ascii: "r"): 0x0D
                case UInt8(ascii: "t"): 0x09
                case UInt8(ascii: "u"): nil
                default: e  // " \\ /
                }
            if let simple {
                out[n] = simple
                n += 1
                continue
            }
            var scalar = hex4(i)
            i += 4
            if scalar >= 0xD800, scalar < 0xDC00, i + 6 <= text.count {
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (hex4(i + 2) - 0xDC00)
                i += 6
            }
            guard let u = Unicode.Scalar(scalar), let utf8 = UTF8.encode(u) else { continue }
            for c in utf8 {
                out[n] = c
                n += 1
            }
        }
        return n
    }
}

private struct Parser {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0
    /// `JSON.parseCall`: the members of the top-level `parameters` object to leave in the
    /// bytes (nil: none), and those left so far.
    var rawMembers: Set<String>?
    var raws: [RawStringMember] = []

    init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    func error(_ reason: String) -> JSONSyntaxError {
        JSONSyntaxError(offset: index, reason: reason)
    }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    mutating func expect(_ literal: StaticString) throws {
        let count = literal.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw error("truncated literal") }
        let p = literal.utf8Start
        for i in 0..<count where bytes[index + i] != p[i] { throw error("unknown literal") }
        index += count
    }

    mutating func parseValue(depth: Int) throws -> JSON {
        guard depth < JSON.maximumDepth else {
            throw error("nesting deeper than \(JSON.maximumDepth)")
        }
        guard index < bytes.count else { throw error("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth)
        case UInt8(ascii: "["): return try parseArray(depth: depth)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"):
            try expect("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expect("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expect("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return .number(try parseNumber())
        default: throw error("unexpected character")
        }
    }

    mutating func parseObject(depth: Int, capturing: Bool = false) throws -> JSON {
        // A message and its parameters get room for a typical object at once (the most an
        // `ExactDictionary` keeps in its array: growing from empty reallocated it); deeper
        // objects grow as they fill, and an empty one allocates nothing, so a message of many
        // small objects costs what `estimatedTreeBytes` says (12 buckets each made
        // `[{},{},…]` cost 230 times its size).
        // Keyed by bytes: RFC 8259 names are distinct when their code points are, so
        // "caf\u00e9" and "cafe\u0301" are two members, not a duplicate (nor one lost).
        var result =
            depth <= JSON.reservedObjectDepth ? JSONObject(minimumCapacity: 8) : JSONObject()
        // Members left in the bytes (`capturing`), for the duplicate check.
        var left: Set<String> = []
        try parseMembers(depth: depth, capturing: capturing) { key, keyOffset, value in
            guard let value else {
                if !left.insert(key).inserted || result[key] != nil {
                    throw JSONSyntaxError(offset: keyOffset, reason: "duplicate key")
                }
                return
            }
            if (!left.isEmpty && left.contains(key))
                || result.updateValue(value, forKey: key) != nil
            {
                throw JSONSyntaxError(offset: keyOffset, reason: "duplicate key")
            }
        }
        return .object(result)
    }

    mutating func parseMembers(depth: Int, _ body: (String, Int, JSON) throws -> Void) throws {
        try parseMembers(depth: depth, capturing: false) { key, offset, value in
            if let value { try body(key, offset, value) }
        }
    }

    /// Reads an object (at its "{"), handing each member to `body`: its key, the key's
    /// offset and its value; nil for a string member left in the bytes (`capturing`: this is
    /// the call's `parameters`, and `rawMembers` names the member; recorded in `raws`).
    mutating func parseMembers(
        depth: Int, capturing: Bool, _ body: (String, Int, JSON?) throws -> Void
    ) throws {
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                throw error("expected a key")
            }
            let keyOffset = index
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else {
                throw error("expected ':'")
            }
            index += 1
            skipWhitespace()
            if let rawMembers, index < bytes.count {
                if capturing, bytes[index] == UInt8(ascii: "\""), rawMembers.contains(key) {
                    let (range, escaped) = try scanString()
                    raws.append(RawStringMember(name: key, range: range, escaped: escaped))
                    try body(key, keyOffset, nil)
                    if try endOfObject() { return }
                    continue
                }
                if depth == 0, !capturing, key == "parameters", bytes[index] == UInt8(ascii: "{") {
                    guard depth + 1 < JSON.maximumDepth else {
                        throw error("nesting deeper than \(JSON.maximumDepth)")
                    }
                    try body(key, keyOffset, try parseObject(depth: depth + 1, capturing: true))
                    if try endOfObject() { return }
                    continue
                }
            }
            try body(key, keyOffset, try parseValue(depth: depth + 1))
            if try endOfObject() { return }
        }
    }

    /// After an object's member: true at its "}" (the object ended), false at a "," (another
    /// member follows); either is consumed.
    @inline(__always)
    private mutating func endOfObject() throws -> Bool {
        skipWhitespace()
        guard index < bytes.count else { throw error("unexpected end of input in object") }
        if bytes[index] == UInt8(ascii: ",") {
            index += 1
            return false
        }
        if bytes[index] == UInt8(ascii: "}") {
            index += 1
            return true
        }
        throw error("expected ',' or '}'")
    }

    mutating func parseArray(depth: Int) throws -> JSON {
        index += 1
        var result: [JSON] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(result)
        }
        while true {
            skipWhitespace()
            result.append(try parseValue(depth: depth + 1))
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of input in array") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            if bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(result)
            }
            throw error("expected ',' or ']'")
        }
    }

    mutating func parseNumber() throws -> String {
        let start = index
        func isDigit(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count, isDigit(bytes[index]) else { throw error("digit expected") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else {
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else {
                throw error("digit expected after '.'")
            }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count,
            bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E")
        {
            index += 1
            if index < bytes.count,
                bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-")
            {
                index += 1
            }
            guard index < bytes.count, isDigit(bytes[index]) else {
                throw error("digit expected in exponent")
            }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        guard index - start <= 512 else {
            throw JSONSyntaxError(offset: start, reason: "number too long")
        }
        return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
    }

    mutating func parseHex4() throws -> UInt32 {
        guard index + 4 <= bytes.count else { throw error("truncated \\u escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let b = bytes[index]
            let d: UInt32
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(b - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(b - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(b - UInt8(ascii: "A") + 10)
            default: throw error("bad hex digit in \\u escape")
            }
            v = v << 4 | d
            index += 1
        }
        return v
    }

    /// Checks a string (at its opening quote) as `parseString` does, without making it: its
    /// text's range (between the quotes) and whether it has escapes.
    mutating func scanString() throws -> (Range<Int>, Bool) {
        index += 1  // opening quote
        let start = index
        var escaped = false
        var seen: UInt8 = 0  // every byte so far, or-ed: below 0x80 while all are ASCII
        while index < bytes.count {
            let b = bytes[index]
            seen |= b
            if b == UInt8(ascii: "\""), seen < 0x80 {
                index += 1
                return (start..<(index - 1), escaped)
            }
            if b == UInt8(ascii: "\"") {
                let range = start..<index
                var iterator = UnsafeBufferPointer(rebasing: bytes[range]).makeIterator()
                var utf8 = Unicode.UTF8.ForwardParser()
                while true {
                    switch utf8.parseScalar(from: &iterator) {
                    case .valid: continue
                    case .emptyInput: break
                    case .error:
                        throw JSONSyntaxError(offset: start, reason: "invalid UTF-8 in string")
                    }
                    break
                }
                index += 1
                return (range, escaped)
            }
            if b < 0x20 { throw error("control character in string") }
            index += 1
            guard b == UInt8(ascii: "\\") else { continue }
            escaped = true
            guard index < bytes.count else { break }
            let e = bytes[index]
            index += 1
            switch e {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"),
                UInt8(ascii: "f"), UInt8(ascii: "n"),
                UInt8(ascii: "r"), UInt8(ascii: "t"):
                continue
            case UInt8(ascii: "u"):
                _ = try parseUnicodeEscape()
            default:
                throw error("unknown escape")
            }
        }
        throw error("unterminated string")
    }

    /// The code point of a `\u` escape whose `u` was just read: four hex digits, or a
    /// surrogate pair of two such escapes (RFC 8259 §7); a lone surrogate is an error.
    mutating func parseUnicodeEscape() throws -> UInt32 {
        let scalar = try parseHex4()
        if scalar >= 0xD800, scalar < 0xDC00 {
            guard index + 2 <= bytes.count, bytes[index] == UInt8(ascii: "\\"),
                bytes[index + 1] == UInt8(ascii: "u")
            else { throw error("unpaired surrogate") }
            index += 2
            let low = try parseHex4()
            guard low >= 0xDC00, low < 0xE000 else { throw error("unpaired surrogate") }
            return 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
        }
        if scalar >= 0xDC00, scalar < 0xE000 { throw error("unpaired surrogate") }
        return scalar
    }

    mutating func parseString() throws -> String {
        index += 1  // opening quote
        let start = index
        // Fast path: no escapes.
        var seen: UInt8 = 0  // every byte so far, or-ed: below 0x80 while all are ASCII
        while index < bytes.count {
            let b = bytes[index]
            if b == UInt8(ascii: "\"") {
                let slice = UnsafeBufferPointer(rebasing: bytes[start..<index])
                // ASCII is valid UTF-8 as it is, and String(decoding:) takes it without the
                // generic validation (String(validating:) costs runtime metadata lookups,
                // on every string of every candidate item a lookup parses).
                let s: String
                if seen < 0x80 {
                    s = String(decoding: slice, as: UTF8.self)
                } else {
                    guard let valid = String(validating: slice, as: UTF8.self) else {
                        throw JSONSyntaxError(offset: start, reason: "invalid UTF-8 in string")
                    }
                    s = valid
                }
                index += 1
                return s
            }
            seen |= b
            if b == UInt8(ascii: "\\") { break }
            if b < 0x20 { throw error("control character in string") }
            index += 1
        }
        var out = [UInt8](UnsafeBufferPointer(rebasing: bytes[start..<index]))
        while index < bytes.count {
            let b = bytes[index]
            if b == UInt8(ascii: "\"") {
                index += 1
                guard let s = String(validating: out, as: UTF8.self) else {
                    throw JSONSyntaxError(offset: start, reason: "invalid UTF-8 in string")
                }
                return s
            }
            if b < 0x20 { throw error("control character in string") }
            if b != UInt8(ascii: "\\") {
                out.append(b)
                index += 1
                continue
            }
            index += 1
            guard index < bytes.count else { break }
            let e = bytes[index]
            index += 1
            switch e {
            case UInt8(ascii: "\""): out.append(0x22)
            case UInt8(ascii: "\\"): out.append(0x5C)
            case UInt8(ascii: "/"): out.append(0x2F)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                guard let u = Unicode.Scalar(try parseUnicodeEscape()) else {
                    throw error("invalid \\u escape")
                }
                out.append(contentsOf: UTF8.encode(u)!)
            default:
                throw error("unknown escape")
            }
        }
        throw error("unterminated string")
    }
}
