import Testing
import VaultProtocol

@Suite("JSON")
struct JSONTests {
    // MARK: round trips

    @Test func nestedValueRoundTripsWithDeterministicText() throws {
        let value: JSON = [
            "a": [1, "x", nil, true, ["b": .number("-2.5e10"), "c": []]],
            "": [:],
            "z": ["nested": ["deeper": ["deepest": "é😀"]]],
            "f": false,
        ]
        let text = value.text
        // Keys are sorted, output is compact.
        #expect(
            text
                == #"{"":{},"a":[1,"x",null,true,{"b":-2.5e10,"c":[]}],"f":false,"z":{"nested":{"deeper":{"deepest":"é😀"}}}}"#
        )
        let parsed = try JSON.parse(value.serialized())
        #expect(parsed == value)
        #expect(parsed["a"]?.arrayValue?[0].intValue == 1)
        #expect(parsed["a"]?.arrayValue?[2].isNull == true)
        #expect(parsed["z"]?["nested"]?["deeper"]?["deepest"]?.stringValue == "é😀")
        // Serializing again gives the same bytes.
        #expect(parsed.serialized() == value.serialized())
    }

    /// Object keys come out in the order of their UTF-8 bytes: upper case before lower, a
    /// prefix before what extends it, and non-ASCII by code point.
    @Test func keysAreWrittenInByteOrder() throws {
        let o: JSON = [
            "b": 1, "\u{E9}": 2, "a": 3, "Z": 4, "ab": 5, "\u{1F600}": 6, "\u{FF}": 7, "": 8,
        ]
        #expect(
            o.text == #"{"":8,"Z":4,"a":3,"ab":5,"b":1,"\#u{E9}":2,"\#u{FF}":7,"\#u{1F600}":6}"#)
        #expect("a".bytesPrecede("ab") && !"ab".bytesPrecede("a") && !"a".bytesPrecede("a"))
        #expect("e\u{301}".bytesPrecede("\u{E9}") && !"\u{E9}".bytesPrecede("e\u{301}"))
    }

    @Test func whitespaceAroundTopLevelScalarsIsAccepted() throws {
        #expect(try JSON.parse(" \t\r\n42 \n") == .number("42"))
        #expect(try JSON.parse("\"x\"") == .string("x"))
        #expect(try JSON.parse("null") == .null)
        #expect(try JSON.parse("[ 1 , { \"k\" : false } ]") == [1, ["k": false]])
    }

    @Test(arguments: [
        ("-9223372036854775808", Int64.min),
        ("9223372036854775807", Int64.max),
        ("0", 0),
        ("-1", -1),
    ])
    func int64ExtremesKeepTheirExactText(text: String, expected: Int64) throws {
        let parsed = try JSON.parse(text)
        #expect(parsed == .number(text))
        #expect(parsed.int64Value == expected)
        #expect(String(decoding: parsed.serialized(), as: UTF8.self) == text)
        #expect(JSON(expected).text == text)
    }

    @Test func uint64MaxKeepsItsExactText() throws {
        let text = "18446744073709551615"
        let parsed = try JSON.parse(text)
        #expect(parsed == .number(text))
        #expect(parsed.uint64Value == UInt64.max)
        #expect(parsed.int64Value == nil)  // out of Int64 range: no silent wrap
        #expect(parsed.text == text)
        #expect(JSON(UInt64.max).text == text)
        // One above UInt64.max is still carried as text, just not convertible.
        let above = try JSON.parse("18446744073709551616")
        #expect(above.text == "18446744073709551616")
        #expect(above.uint64Value == nil)
    }

    @Test func numberLiteralTextIsNotRewritten() throws {
        for text in ["1.0E+2", "1e-7", "-0", "0.10", "123456789012345678901234567890"] {
            let parsed = try JSON.parse(text)
            #expect(parsed == .number(text))
            #expect(parsed.text == text)
        }
    }

    @Test(arguments: [
        0.1, .leastNonzeroMagnitude, -0.0, 0.0, 1.0, -1.5, 0.30000000000000004,
        Double.greatestFiniteMagnitude,
        -Double.greatestFiniteMagnitude, Double.leastNormalMagnitude, -Double.leastNonzeroMagnitude,
        1e300, 1e-300,
        // 2.2250738585072009e-308, the largest subnormal
        123456789.123456789, 9007199254740993.0, Double(bitPattern: 0x000F_FFFF_FFFF_FFFF),
    ])
    func doublesRoundTripBitExactly(value: Double) throws {
        let wire = JSON(value).serialized()
        let back = try JSON.parse(wire).doubleValue
        #expect(
            back?.bitPattern == value.bitPattern,
            "\(value) came back as \(String(describing: back))")
    }

    @Test func negativeZeroKeepsItsSign() throws {
        let back = try #require(try JSON.parse(JSON(-0.0).serialized()).doubleValue)
        #expect(back == 0)
        #expect(back.sign == .minus)
        #expect(JSON(Double.leastNonzeroMagnitude).text == "5e-324")
        #expect(JSON(0.1).text == "0.1")
    }

    // MARK: strict rejections

    @Test(arguments: [
        "[1,2,]", "{\"a\":1,}", "[,1]", "{,}",  // trailing / leading commas
        "{\"a\":1,\"a\":2}", "{\"a\":{\"b\":1,\"b\":1}}",  // duplicate keys
        "\"a\u{01}b\"", "\"tab\there\"", "\"new\nline\"", "[\"\u{1f}\"]",  // raw control chars
        // lone surrogates
        "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"\\ud800x\"", "\"\\udbff\\ud800\"",
        "{\"a\":", "[1,2", "\"abc", "tru", "fals", "nul", "{\"a\"", "{\"a\" 1}", "[1 2]",
        "\"\\u12\"", "\"\\",  // truncated
        "x{}", "#[]", "\u{feff}{}", "+1", ".5", "[1] [2]", "{} x", "1 2",  // garbage before / after
        "01", "1.", "-", "1e", "1e+", "-01", "NaN", "Infinity", "-Infinity", "0x10",  // numbers
        "", "   ", "[1]//c", "/*c*/[1]", "'a'", "{a:1}", "{\"a\":1 \"b\":2}", "\"\\x41\"",
        "\"\\U0041\"",  // misc
    ])
    func rejectsInvalidDocuments(text: String) {
        #expect(throws: JSONSyntaxError.self) { try JSON.parse(text) }
    }

    @Test func rejectsRawNULInsideAString() {
        #expect(throws: JSONSyntaxError.self) { try JSON.parse([0x22, 0x61, 0x00, 0x62, 0x22]) }
        // NUL after the value
        #expect(throws: JSONSyntaxError.self) { try JSON.parse([0x5B, 0x31, 0x5D, 0x00]) }
    }

    @Test(arguments: [
        [0xFF] as [UInt8],
        [0x22, 0xFF, 0x22],  // "\xff"
        [0x22, 0x61, 0xFE, 0x22],
        [0x22, 0xC0, 0x80, 0x22],  // overlong NUL
        [0x22, 0xE2, 0x82, 0x22],  // truncated 3-byte sequence
        [0x22, 0xED, 0xA0, 0x80, 0x22],  // UTF-8-encoded surrogate D800
        [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22],  // above U+10FFFF
        [0x22, 0x5C, 0x6E, 0xFF, 0x22],  // invalid byte after an escape (slow path)
        [0x7B, 0x22, 0xFF, 0x22, 0x3A, 0x31, 0x7D],  // invalid UTF-8 in a key
    ])
    func rejectsInvalidUTF8(input: [UInt8]) {
        #expect(throws: JSONSyntaxError.self) { try JSON.parse(input) }
    }

    @Test func duplicateKeyErrorNamesTheKeyOffset() throws {
        let error = try #require(throws: JSONSyntaxError.self) {
            try JSON.parse("{\"a\":1,\"a\":2}")
        }
        #expect(error.reason == "duplicate key")
        #expect(error.offset == 7)
    }

    @Test func tenThousandDeepNestingThrowsInsteadOfCrashing() {
        let open = [UInt8](repeating: UInt8(ascii: "["), count: 10_000)
        let close = [UInt8](repeating: UInt8(ascii: "]"), count: 10_000)
        #expect(throws: JSONSyntaxError.self) { try JSON.parse(open) }
        #expect(throws: JSONSyntaxError.self) { try JSON.parse(open + close) }
        let objects =
            String(repeating: "{\"a\":", count: 10_000) + "1"
            + String(repeating: "}", count: 10_000)
        #expect(throws: JSONSyntaxError.self) { try JSON.parse(objects) }
    }

    @Test func depthLimitIsExactlyMaximumDepth() throws {
        let n = JSON.maximumDepth
        let ok = String(repeating: "[", count: n) + String(repeating: "]", count: n)
        let tooDeep = String(repeating: "[", count: n + 1) + String(repeating: "]", count: n + 1)
        var value = try JSON.parse(ok)
        var depth = 0
        while let inner = value.arrayValue?.first {
            value = inner
            depth += 1
        }
        #expect(depth == n - 1)
        #expect(throws: JSONSyntaxError.self) { try JSON.parse(tooDeep) }
    }

    // MARK: accepted escapes

    @Test func acceptsEscapedNULAndKeepsIt() throws {
        let parsed = try JSON.parse(#""a\u0000b""#)
        let s = try #require(parsed.stringValue)
        #expect(Array(s.utf8) == [0x61, 0x00, 0x62])
        // And the writer escapes it again, so the frame never contains a raw NUL.
        #expect(parsed.text == #""a\u0000b""#)
        #expect(!parsed.serialized().contains(0))
    }

    @Test func acceptsSurrogatePairs() throws {
        #expect(try JSON.parse(#""\ud83d\ude00""#) == .string("😀"))
        #expect(try JSON.parse(#""\uD83D\uDE00x""#) == .string("😀x"))
        #expect(
            try JSON.parse(#""\udbff\udfff""#).stringValue?.unicodeScalars.first?.value == 0x10FFFF)
        #expect(try JSON.parse(#""\u00e9\u20AC""#) == .string("é€"))
    }

    @Test func acceptsEverySimpleEscape() throws {
        let parsed = try JSON.parse(#""\"\\\/\b\f\n\r\t""#)
        #expect(
            parsed.stringValue.map { Array($0.utf8) } == [
                0x22, 0x5C, 0x2F, 0x08, 0x0C, 0x0A, 0x0D, 0x09,
            ])
    }

    // MARK: writer

    @Test func writerEscapesEveryControlCharacter() throws {
        var s = ""
        for v in 0..<0x20 { s.unicodeScalars.append(Unicode.Scalar(UInt8(v))) }
        s += "\"\\/\u{7f}é😀\u{2028}"
        let wire = JSON.string(s).serialized()
        #expect(!wire.contains { $0 < 0x20 }, "no raw control byte on the wire")
        let back = try JSON.parse(wire)
        #expect(back.stringValue.map { Array($0.utf8) } == Array(s.utf8))
        #expect(
            JSON.string("\u{0}\n\u{1f}\"\\\t\r\u{8}").text == #""\u0000\n\u001f\"\\\t\r\u0008""#)
    }

    @Test func writerCopiesTheTextBetweenEscapesAndSortsKeys() {
        // Plain runs before, between and after escapes, multi-byte characters among them.
        #expect(JSON.string("ab\"cd\\é€\nxyz").text == #""ab\"cd\\é€\nxyz""#)
        #expect(JSON.string("").text == #""""#)
        #expect(JSON.string("plain text, no escape").text == #""plain text, no escape""#)
        let object: JSON = ["b": 1, "a": ["z": "1", "y": [true, nil]], "é": "\u{1}"]
        #expect(object.text == #"{"a":{"y":[true,null],"z":"1"},"b":1,"é":"\u0001"}"#)
    }

    @Test func writerOutputWithControlCharactersInKeysParses() throws {
        let value: JSON = ["k\u{1}\n": ["\u{0}": "v\u{1b}"]]
        let back = try JSON.parse(value.serialized())
        #expect(back == value)
    }

    @Test func unicodeStringsAreNotNormalised() throws {
        let precomposed = "\u{e9}"
        let decomposed = "e\u{301}"
        let a = try JSON.parse(JSON.string(precomposed).serialized())
        let b = try JSON.parse(JSON.string(decomposed).serialized())
        #expect(a.stringValue.map { Array($0.utf8) } == [0xC3, 0xA9])
        #expect(b.stringValue.map { Array($0.utf8) } == [0x65, 0xCC, 0x81])
    }

    /// Two keys that differ only in Unicode normalisation are different keys on the wire (and
    /// in UserDefaults): an object holding both must parse, keeping both.
    @Test func keysDifferingOnlyInNormalisationAreDistinct() throws {
        let text = "{\"\u{e9}\":1,\"e\u{301}\":2}"
        let parsed = try JSON.parse(text)
        #expect(parsed.objectValue?.count == 2)
    }
}

/// Member names and strings are compared byte for byte, as JSON (RFC 8259) and the store
/// compare them: Swift's `==` equates precomposed `é` (U+00E9) and `e` + U+0301, and the
/// Kelvin sign U+212A and `K`.
@Suite("JSON: names differing only in Unicode normalisation")
struct JSONNormalisationTests {
    static let nfc = "caf\u{E9}", nfd = "cafe\u{301}"

    @Test func twoNamesDifferingOnlyInNormalisationAreTwoMembersNotADuplicate() throws {
        let text = "{\"caf\u{E9}\":1,\"cafe\u{301}\":2,\"\u{212A}\":3,\"K\":4}"
        let parsed = try JSON.parse(text)
        let o = try #require(parsed.objectValue)
        #expect(o.count == 4)
        #expect(o[Self.nfc]?.intValue == 1 && o[Self.nfd]?.intValue == 2)
        #expect(o["\u{212A}"]?.intValue == 3 && o["K"]?.intValue == 4)
        // Written back: both, in byte order, and parsed again to the same object.
        #expect(parsed.text == "{\"K\":4,\"cafe\u{301}\":2,\"caf\u{E9}\":1,\"\u{212A}\":3}")
        #expect(try JSON.parse(parsed.serialized()) == parsed)
        // A real duplicate is still one.
        #expect(throws: JSONSyntaxError.self) {
            try JSON.parse("{\"caf\u{E9}\":1,\"caf\u{E9}\":2}")
        }
        var seen: [String] = []
        try JSON.parseMembers(Array(text.utf8)) { k, _ in seen.append(k) }
        #expect(
            seen.map { Array($0.utf8) }
                == ["caf\u{E9}", "cafe\u{301}", "\u{212A}", "K"].map { Array($0.utf8) })
    }

    @Test func stringsAndObjectsDifferingOnlyInNormalisationAreNotEqual() {
        #expect(JSON.string(Self.nfc) != JSON.string(Self.nfd))
        #expect(JSON.object([Self.nfc: 1]) != JSON.object([Self.nfd: 1]))
        let literal: JSON = [Self.nfc: 1, Self.nfd: 2]
        #expect(literal.objectValue?.count == 2)
    }
}
