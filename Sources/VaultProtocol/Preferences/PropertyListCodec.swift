import Foundation

/// Reads and writes property-list files as `PlistValue`s: XML through Foundation's
/// `PropertyListSerialization` (read) and `xml(_:)` (written), binary through
/// `BinaryPropertyList`.
public enum PropertyListCodec {
    public enum Format: String, Sendable {
        case xml, binary
    }

    /// Parses XML or binary plist bytes. Throws `VaultError` InvalidPropertyList, also for a
    /// date outside years 0 to 9999 (`PlistDate.supportedRange`).
    public static func decode(_ data: Data) throws -> PlistValue {
        try checkBinaryReferences(data)
        // A binary plist is read here (`BinaryPropertyList`: reals bit for bit), once the
        // check above has bounded it.
        if data.starts(with: Array("bplist00".utf8)) { return try BinaryPropertyList.decode(data) }
        try checkXMLKeys(data)
        let object: Any
        do {
            var format = PropertyListSerialization.PropertyListFormat.binary
            object = try PropertyListSerialization.propertyList(
                from: data, options: [], format: &format)
        } catch {
            throw VaultError(
                .invalidPropertyList,
                "not a property list (XML or binary): \(data.isEmpty ? "the data is empty" : reason(error))"
            )
        }
        return try value(from: object)
    }

    /// Why Foundation could not read a property list, and where: its parser's own message
    /// (`NSDebugDescription`, "Encountered empty <integer> on line 4"), without the input it
    /// quotes in some (an unknown tag's name, an unexpected character, the XML declaration's
    /// unknown encoding name: preference text must not reach error messages). Its generic
    /// description when it gives none.
    static func reason(_ error: Error) -> String {
        guard var text = (error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String,
            !text.isEmpty
        else {
            return error.localizedDescription
        }
        let quoting: [(String, String)] = [
            (#"character '.*?' \(0x[0-9A-Fa-f]+\)"#, "character"),  // Unknown character '%c' (0x%x)
            (#"character '0x[0-9A-Fa-f]+'"#, "character"),  // Unexpected character '0x%x'
            (#"\(invalid character 0x[0-9A-Fa-f]+\)"#, "(invalid character)"),
            // [Uu]nexpected character %c on line
            (#"(nexpected character) .{1,4}? ((at|on) line)"#, "$1 $2"),
            (#"unknown tag .*? on line"#, "unknown tag on line"),
            (#"open tag .*$"#, "its open tag"),  // Close tag on line %d does not match open tag %@
            // Encountered unknown encoding (%@): the XML declaration's
            (#"unknown encoding .*$"#, "unknown encoding"),
        ]
        for (pattern, replacement) in quoting {
            guard
                let re = try? NSRegularExpression(
                    pattern: pattern, options: [.dotMatchesLineSeparators])
            else { continue }
            text = re.stringByReplacingMatches(
                in: text, range: NSRange(text.startIndex..., in: text), withTemplate: replacement)
        }
        return text
    }

    /// Serializes `value` in `format`: binary through `BinaryPropertyList` (the same bytes for
    /// the same values, reals bit for bit), XML through `xml(_:)`. Throws `VaultError`
    /// InvalidPropertyList when it cannot be written: as XML, a key or string holding a
    /// character XML 1.0 cannot carry (e.g. U+0019; export as binary instead); as binary, a
    /// dictionary holding normalisation twins (Foundation, reading it, would merge them).
    public static func encode(_ value: PlistValue, format: Format) throws -> Data {
        if format == .xml, let bad = firstNonXMLCharacter(in: value) {
            throw VaultError(
                .invalidPropertyList,
                String(
                    format:
                        "a string holds U+%04X, which XML 1.0 cannot carry; export as binary instead",
                    bad.value))
        }
        if format == .xml { return xml(value) }
        if let key = firstNormalisationTwin(in: value) {
            throw VaultError(
                .invalidPropertyList,
                twinsMessage(
                    key,
                    "cannot be written as a binary property list here (Foundation would merge them); export as XML instead"
                ))
        }
        return BinaryPropertyList.encode(value)
    }

    /// An XML plist as Apple writes one, for a value whose strings XML 1.0 can carry.
    /// Foundation's XML writer (swift-corelibs) is not used: it writes -0.0 as `0.0` and a
    /// carriage return raw, which XML readers turn into a line feed. Here a real is its
    /// shortest round-trip decimal (`-0.0` included; `nan`, `+infinity`, `-infinity` as
    /// Apple writes them), a carriage return is `&#13;`, and a date is whole seconds
    /// (rounded down), the only form XML plist readers take.
    static func xml(_ value: PlistValue) -> Data {
        var out = """
            <?xml version="1.0" encoding="UTF-8"?>
            <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
            <plist version="1.0">

            """
        func escaped(_ s: String) -> String {
            var e = ""
            e.unicodeScalars.reserveCapacity(s.unicodeScalars.count)
            for c in s.unicodeScalars {
                switch c {
                case "&": e += "&amp;"
                case "<": e += "&lt;"
                case ">": e += "&gt;"
                case "\r": e += "&#13;"
                default: e.unicodeScalars.append(c)
                }
            }
            return e
        }
        func write(_ v: PlistValue, _ level: Int) {
            let pad = String(repeating: "\t", count: level)
            switch v {
            case .string(let s): out += pad + "<string>" + escaped(s) + "</string>\n"
            case .integer(let i): out += pad + "<integer>\(i)</integer>\n"
            case .unsignedInteger(let u): out += pad + "<integer>\(u)</integer>\n"
            case .real(let d):
                let text =
                    d.isNaN ? "nan" : d.isInfinite ? (d < 0 ? "-infinity" : "+infinity") : "\(d)"
                out += pad + "<real>" + text + "</real>\n"
            case .bool(let b): out += pad + (b ? "<true/>" : "<false/>") + "\n"
            case .date(let d):
                let whole = Date(
                    timeIntervalSinceReferenceDate: d.timeIntervalSinceReferenceDate.rounded(.down))
                out += pad + "<date>" + PlistDate.format(whole) + "</date>\n"
            case .data(let d): out += pad + "<data>" + d.base64EncodedString() + "</data>\n"
            case .array(let a):
                if a.isEmpty {
                    out += pad + "<array/>\n"
                    return
                }
                out += pad + "<array>\n"
                for x in a { write(x, level + 1) }
                out += pad + "</array>\n"
            case .dict(let d):
                if d.isEmpty {
                    out += pad + "<dict/>\n"
                    return
                }
                out += pad + "<dict>\n"
                for k in d.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
                    out += pad + "\t<key>" + escaped(k) + "</key>\n"
                    write(d[k]!, level + 1)
                }
                out += pad + "</dict>\n"
            }
        }
        write(value, 0)
        out += "</plist>\n"
        return Data(out.utf8)
    }

    /// The first character in a key or string of `value` outside XML 1.0's Char production.
    static func firstNonXMLCharacter(in value: PlistValue) -> Unicode.Scalar? {
        func bad(_ s: String) -> Unicode.Scalar? {
            s.unicodeScalars.first { c in
                switch c.value {
                case 0x9, 0xA, 0xD, 0x20...0xD7FF, 0xE000...0xFFFD, 0x10000...0x10FFFF: return false
                default: return true
                }
            }
        }
        switch value {
        case .string(let s): return bad(s)
        case .array(let a): return a.lazy.compactMap(firstNonXMLCharacter(in:)).first
        case .dict(let d):
            return d.lazy.compactMap { bad($0.key) ?? firstNonXMLCharacter(in: $0.value) }.first
        default: return nil
        }
    }

    /// Parses a value written as old-style (OpenStep) property-list text, as `defaults write`
    /// and `-key value` arguments take it: `(a, b)`, `{k = v;}`, `<68656c6c6f>`, `"text"`.
    /// Anything else, or anything that does not parse, is the plain string.
    ///
    /// Foundation parses the text into `[String: Any]`, whose keys compare by Swift's `==`
    /// (canonical equivalence), so `"caf\u{E9}"` and `"cafe\u{301}"` would become one key, as
    /// they never do in a `PlistDictionary` (nor in CFPropertyList, which compares UTF-16 code
    /// units). So the text goes through Foundation with every non-ASCII scalar carried as two
    /// supplementary private-use scalars (`OpaqueScalars`), which no normalisation relates,
    /// and each string of the result is turned back: twins stay two keys, and every string
    /// keeps its bytes.
    public static func parseText(_ text: String) -> PlistValue {
        var format = PropertyListSerialization.PropertyListFormat.openStep
        if let first = text.first, "({<\"".contains(first),
            let o = try? PropertyListSerialization.propertyList(
                from: Data(OpaqueScalars.hide(text).utf8), options: [], format: &format),
            let v = try? value(from: o)
        {
            return OpaqueScalars.reveal(v)
        }
        return .string(text)
    }

    /// Non-ASCII scalars carried through Foundation's old-style parser as pairs of private-use
    /// scalars: a scalar `v` (at most 0x10FFFF, 21 bits) becomes U+F0000 + `v >> 10` (at most
    /// U+F043F) and U+F1000 + `v & 0x3FF` (at most U+F13FF), both in Supplementary
    /// Private Use Area-A, which has no decompositions and no combining classes. Every
    /// non-ASCII scalar of the text is carried this way, private-use ones included, so the
    /// pairs read back unambiguously.
    enum OpaqueScalars {
        static let high: UInt32 = 0xF0000, low: UInt32 = 0xF1000

        static func hide(_ v: UInt32, into out: inout String.UnicodeScalarView) {
            out.append(Unicode.Scalar(high + (v >> 10))!)
            out.append(Unicode.Scalar(low + (v & 0x3FF))!)
        }

        /// The text with each non-ASCII scalar, and each `\U` escape of a quoted string that
        /// names one (CFPropertyList's `\U` and one to four hex digits), as a pair; every
        /// other escape is left for Foundation, so `\\U00E9` stays a backslash and text.
        static func hide(_ text: String) -> String {
            var out = String.UnicodeScalarView()
            let scalars = Array(text.unicodeScalars)
            var quote: Unicode.Scalar?
            var i = 0
            while i < scalars.count {
                let c = scalars[i]
                if quote != nil, c == "\\", i + 1 < scalars.count {
                    var j = i + 2
                    var v: UInt32 = 0
                    if scalars[i + 1] == "U" {
                        while j < scalars.count, j < i + 6, let d = hexValue(scalars[j]) {
                            v = v << 4 | d
                            j += 1
                        }
                    }
                    // A surrogate's escape is Foundation's to pair with the next one.
                    if j > i + 2, v >= 0x80, Unicode.Scalar(v) != nil {
                        hide(v, into: &out)
                        i = j
                    } else {
                        out.append(c)
                        let escaped = scalars[i + 1]
                        if escaped.isASCII {
                            out.append(escaped)
                        } else {
                            hide(escaped.value, into: &out)
                        }
                        i += 2
                    }
                    continue
                }
                if c == "\"" || c == "'" {
                    if quote == nil { quote = c } else if quote == c { quote = nil }
                }
                if c.isASCII { out.append(c) } else { hide(c.value, into: &out) }
                i += 1
            }
            return String(out)
        }

        static func hexValue(_ c: Unicode.Scalar) -> UInt32? {
            switch c.value {
            case 0x30...0x39: c.value - 0x30
            case 0x41...0x46: c.value - 0x41 + 10
            case 0x61...0x66: c.value - 0x61 + 10
            default: nil
            }
        }

        static func reveal(_ s: String) -> String {
            guard s.unicodeScalars.contains(where: { !$0.isASCII }) else { return s }
            var out = String.UnicodeScalarView()
            var pending: Unicode.Scalar?
            for c in s.unicodeScalars {
                if let h = pending {
                    pending = nil
                    if (low...(low + 0x3FF)).contains(c.value),
                        let r = Unicode.Scalar(((h.value - high) << 10) | (c.value - low))
                    {
                        out.append(r)
                        continue
                    }
                    out.append(h)  // not a pair: cannot come from `hide`, kept as it came
                }
                if (high...(high + 0x43F)).contains(c.value) { pending = c } else { out.append(c) }
            }
            if let h = pending { out.append(h) }
            return String(out)
        }

        static func reveal(_ v: PlistValue) -> PlistValue {
            switch v {
            case .string(let s): return .string(reveal(s))
            case .array(let a): return .array(a.map(reveal))
            case .dict(let d):
                var out = PlistDictionary(minimumCapacity: d.count)
                for (k, value) in d { out[reveal(k)] = reveal(value) }
                return .dict(out)
            default: return v
            }
        }
    }

    /// A key of `keys` (distinct byte strings) that another one equals under Swift's `==`
    /// (canonical equivalence: `é` and `e` + U+0301, the Kelvin sign and `K`), or nil.
    /// Foundation on Linux keeps a dictionary's keys as Swift strings, so it would merge the
    /// two: one value lost, the other under a key of the first's bytes.
    static func normalisationTwin<S: Sequence>(_ keys: S) -> String? where S.Element == String {
        var seen = Set<String>()
        for k in keys where !seen.insert(k).inserted { return k }
        return nil
    }

    /// The first key of a dictionary in `value` that has a normalisation twin there.
    static func firstNormalisationTwin(in value: PlistValue) -> String? {
        switch value {
        case .array(let a): return a.lazy.compactMap(firstNormalisationTwin(in:)).first
        case .dict(let d):
            if let k = normalisationTwin(d.keys) { return k }
            return d.values.lazy.compactMap(firstNormalisationTwin(in:)).first
        default: return nil
        }
    }

    static let importTwins =
        "cannot be imported here: Foundation would merge them into one, losing a value; nothing was written"

    /// The key is not quoted: preference text must not reach error messages.
    static func twinsMessage(_ key: String, _ what: String) -> String {
        "the property list has a dictionary holding two keys that differ only in Unicode normalisation (as precomposed U+00E9 and e followed by U+0301 do); they \(what)"
    }

    /// `checkBinaryReferences`' key check for an XML plist: refuses one with a `<dict>` whose
    /// `<key>`s hold normalisation twins (`normalisationTwin`). Runs only on text with a
    /// non-ASCII or NUL byte or a character reference (ASCII keys have no twins).
    ///
    /// One pass over the text, each byte looked at a bounded number of times: a regular
    /// expression with lazy `.*?` would try every unclosed `<key>` (or `<!--`) up to the end
    /// of the text, so a few MiB of them from any app would cost hours of vaultd's CPU. A key is
    /// read as Foundation reads it: character data, entity and character references
    /// replaced, CDATA sections taken as they are, comments left out. Text in UTF-16 or
    /// UTF-32 (a byte order mark or NULs) or in an 8-bit encoding its declaration names is
    /// read in it; in one vaultd cannot read, it is refused rather than imported unchecked.
    static func checkXMLKeys(_ data: Data) throws {
        guard !data.starts(with: Array("bplist".utf8)),
            data.contains(where: { $0 >= 0x80 || $0 == 0 })
                || data.range(of: Data("&#".utf8)) != nil
        else { return }
        guard let text = xmlString(data) else {
            throw VaultError(
                .invalidPropertyList,
                "the property list's text encoding is not one vaultd can check for dictionary keys that differ only in Unicode normalisation; convert it to UTF-8"
            )
        }
        let u = Array(text.utf8)
        func at(_ i: Int, _ s: StaticString) -> Bool {
            let n = s.utf8CodeUnitCount
            guard i + n <= u.count else { return false }
            for k in 0..<n where u[i + k] != s.utf8Start[k] { return false }
            return true
        }
        /// The index of the first `s` at or after `i`, or nil.
        func find(_ s: StaticString, from i: Int) -> Int? {
            var j = i
            while j < u.count {
                guard let lt = u[j...].firstIndex(of: s.utf8Start[0]) else { return nil }
                if at(lt, s) { return lt }
                j = lt + 1
            }
            return nil
        }
        func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D }
        var stack: [[String]] = []
        var i = 0
        while let lt = u[i...].firstIndex(of: UInt8(ascii: "<")) {
            if at(lt, "<!--") {
                guard let e = find("-->", from: lt + 4) else { return }
                i = e + 3
                continue
            }
            if at(lt, "<![CDATA[") {
                guard let e = find("]]>", from: lt + 9) else { return }
                i = e + 3
                continue
            }
            guard let gt = u[lt...].firstIndex(of: UInt8(ascii: ">")) else { return }
            i = gt + 1
            var n = lt + 1
            let closing = n < gt && u[n] == UInt8(ascii: "/")
            if closing { n += 1 }
            var nameEnd = n
            while nameEnd < gt, !isSpace(u[nameEnd]), u[nameEnd] != UInt8(ascii: "/") {
                nameEnd += 1
            }
            let name = u[n..<nameEnd]
            let selfClosing = u[gt - 1] == UInt8(ascii: "/")
            if name.elementsEqual("dict".utf8) {
                if closing {
                    if let keys = stack.popLast(), let twin = normalisationTwin(keys) {
                        throw VaultError(.invalidPropertyList, twinsMessage(twin, importTwins))
                    }
                } else if !selfClosing {
                    stack.append([])
                }
            } else if name.elementsEqual("key".utf8), !closing {
                var key = ""
                if !selfClosing {
                    // Up to `</key>`: text (references replaced), CDATA as it is, no comments.
                    var j = gt + 1
                    var textStart = j
                    while true {
                        guard let next = u[j...].firstIndex(of: UInt8(ascii: "<")) else { return }
                        key += xmlText(String(decoding: u[textStart..<next], as: UTF8.self))
                        if at(next, "<!--") {
                            guard let e = find("-->", from: next + 4) else { return }
                            j = e + 3
                        } else if at(next, "<![CDATA[") {
                            guard let e = find("]]>", from: next + 9) else { return }
                            key += String(decoding: u[(next + 9)..<e], as: UTF8.self)
                            j = e + 3
                        } else {
                            j = next
                            break
                        }
                        textStart = j
                    }
                    i = j  // at the `</key>` (or whatever Foundation will refuse)
                }
                if !stack.isEmpty { stack[stack.count - 1].append(key) }
            }
        }
    }

    /// The text of an XML property list, read in its encoding as Foundation reads it: UTF-8;
    /// UTF-32 or UTF-16 by a byte order mark or, without one, by the NULs of its first
    /// characters; else the 8-bit encoding its declaration names, when it is one of those
    /// property lists are found in. nil for another.
    static func xmlString(_ data: Data) -> String? {
        if let s = String(data: data, encoding: .utf8) { return s }
        let b = [UInt8](data.prefix(4))
        if b.starts(with: [0, 0, 0xFE, 0xFF]) || b.starts(with: [0xFF, 0xFE, 0, 0]) {
            return String(data: data, encoding: .utf32)
        }
        if b.starts(with: [0xFE, 0xFF]) || b.starts(with: [0xFF, 0xFE]) {
            return String(data: data, encoding: .utf16)
        }
        if b.count == 4 && b[0] == 0 && b[1] == 0 {
            return String(data: data, encoding: .utf32BigEndian)
        }
        if b.count == 4 && b[2] == 0 && b[3] == 0 && b[1] == 0 {
            return String(data: data, encoding: .utf32LittleEndian)
        }
        if b.count >= 2 && b[0] == 0 { return String(data: data, encoding: .utf16BigEndian) }
        if b.count >= 2 && b[1] == 0 { return String(data: data, encoding: .utf16LittleEndian) }
        // `<?xml … encoding="NAME"?>`, in ASCII.
        let head = String(decoding: data.prefix(200).prefix(while: { $0 < 0x80 }), as: UTF8.self)
        guard head.hasPrefix("<?xml"), let declEnd = head.range(of: "?>"),
            let e = head[..<declEnd.lowerBound].range(of: "encoding")
        else { return nil }
        let rest = head[e.upperBound..<declEnd.lowerBound].drop(while: {
            $0 == " " || $0 == "=" || $0 == "\"" || $0 == "'"
        })
        let name = rest.prefix(while: { $0 != "\"" && $0 != "'" && $0 != " " }).lowercased()
        let encodings: [String: String.Encoding] = [
            "iso-8859-1": .isoLatin1, "iso_8859-1": .isoLatin1, "latin1": .isoLatin1,
            "l1": .isoLatin1,
            "windows-1252": .windowsCP1252, "cp1252": .windowsCP1252,
            "macintosh": .macOSRoman, "macroman": .macOSRoman, "x-mac-roman": .macOSRoman,
        ]
        return encodings[name].flatMap { String(data: data, encoding: $0) }
    }

    /// XML character data with its entity and character references replaced.
    static func xmlText(_ raw: String) -> String {
        guard raw.contains("&") else { return raw }
        var out = ""
        var rest = Substring(raw)
        while let amp = rest.firstIndex(of: "&") {
            out += rest[..<amp]
            guard let semi = rest[amp...].firstIndex(of: ";") else {
                out += rest[amp...]
                return out
            }
            let name = rest[rest.index(after: amp)..<semi]
            switch name {
            case "amp": out += "&"
            case "lt": out += "<"
            case "gt": out += ">"
            case "quot": out += "\""
            case "apos": out += "'"
            default:
                var v: UInt32?
                if name.hasPrefix("#x") {
                    v = UInt32(name.dropFirst(2), radix: 16)
                } else if name.hasPrefix("#") {
                    v = UInt32(name.dropFirst(), radix: 10)
                }
                if let v, let u = Unicode.Scalar(v) {
                    out.unicodeScalars.append(u)
                } else {
                    out += rest[amp...semi]
                }
            }
            rest = rest[rest.index(after: semi)...]
        }
        return out + rest
    }

    /// The most a converted property list may take, counted as its keys', strings' and data's
    /// bytes plus 16 per value: 12 MiB, three times the 4 MiB a domain may hold, because a
    /// domain of the tiniest values (empty dictionaries or data, bools in an array: 12 to 14
    /// bytes on the wire, counted as 6 to 7) takes up to 2.7 times its size here, and every
    /// domain within the limit must import from its own export (8 MiB would refuse 300,000
    /// keys holding a bool, 3.9 MB as a domain). A binary plist can refer to one object many
    /// times: 40 levels of arrays holding the same array twice are 412 bytes on disk and
    /// 2^40 values as a tree.
    public static let maximumExpandedSize = 12 << 20

    /// What a property list past `maximumExpandedSize` gets: more than any domain of 4 MiB
    /// holds (or one object referred to many times).
    static var tooLargeExpanded: VaultError {
        VaultError(
            .invalidPropertyList,
            "the property list expands past \(maximumExpandedSize >> 20) MiB of values, more than a domain of \(DomainLimit.maximumBytes >> 20) MiB can hold (or it refers to one object many times); nothing was written"
        )
    }

    /// `object` (what `PropertyListSerialization` returns) as a `PlistValue`. Throws
    /// `VaultError` InvalidPropertyList for an unsupported object or date, nesting past
    /// `PlistValue.maximumDepth`, or a tree past `maximumExpandedSize`.
    public static func value(from object: Any) throws -> PlistValue {
        var budget = maximumExpandedSize
        return try value(from: object, depth: 0, budget: &budget)
    }

    private static func value(from object: Any, depth: Int, budget: inout Int) throws -> PlistValue
    {
        guard depth < PlistValue.maximumDepth else {
            throw VaultError(
                .invalidPropertyList, "property list nested deeper than \(PlistValue.maximumDepth)")
        }
        budget -= 16
        if let s = object as? String {
            budget -= s.utf8.count
        } else if let d = object as? Data {
            budget -= d.count
        }
        guard budget >= 0 else { throw tooLargeExpanded }
        switch object {
        case let b as Bool where type(of: object) == Bool.self:
            return .bool(b)
        case let s as String:
            return .string(s)
        case let n as NSNumber:
            switch String(cString: n.objCType) {
            case "d", "f": return .real(n.doubleValue)
            case "c", "B": return .bool(n.boolValue)
            case "Q", "L", "I", "S", "C":
                let u = n.uint64Value
                return u > UInt64(Int64.max) ? .unsignedInteger(u) : .integer(Int64(u))
            default: return .integer(n.int64Value)
            }
        case let d as Date:
            guard PlistDate.isSupported(d) else {
                throw VaultError(
                    .invalidPropertyList,
                    "a date of \(d.timeIntervalSinceReferenceDate) s since 2001-01-01 is outside years 0 to 9999"
                )
            }
            return .date(d)
        case let d as Data:
            return .data(d)
        case let a as [Any]:
            var out: [PlistValue] = []
            out.reserveCapacity(a.count)
            for x in a { out.append(try value(from: x, depth: depth + 1, budget: &budget)) }
            return .array(out)
        case let d as [String: Any]:
            var out: PlistDictionary = [:]
            out.reserveCapacity(d.count)
            for (k, x) in d {
                budget -= k.utf8.count
                out[k] = try value(from: x, depth: depth + 1, budget: &budget)
            }
            return .dict(out)
        default:
            throw VaultError(
                .invalidPropertyList, "unsupported property-list object \(type(of: object))")
        }
    }

    public static func object(from value: PlistValue) -> Any {
        switch value {
        case .string(let s): return s
        case .integer(let i): return NSNumber(value: i)
        case .unsignedInteger(let u): return NSNumber(value: u)
        case .real(let d): return NSNumber(value: d)
        case .bool(let b): return b
        case .date(let d): return d
        case .data(let d): return d
        case .array(let a): return a.map(object(from:))
        case .dict(let d):
            // Foundation takes Swift dictionaries; `encode` refuses normalisation twins first.
            var o: [String: Any] = [:]
            o.reserveCapacity(d.count)
            for (k, v) in d { o[k] = object(from: v) }
            return o
        }
    }
}
