import Foundation
import TestSupport
import Testing
import VaultProtocol

/// Encodes `value` the way it travels (tagged JSON, serialized) and decodes it back.
private func overTheWire(_ value: PlistValue) throws -> PlistValue {
    try PlistValue(tagged: try JSON.parse(value.tagged.serialized()))
}

private func date(_ t: TimeInterval) -> Date { Date(timeIntervalSinceReferenceDate: t) }

@Suite("PlistValue tagged JSON")
struct PlistValueTests {
    static let values: [PlistValue] = [
        .string(""), .string("plain"), .string("a\u{0}b"), .string("\u{1}\u{1f}\n\t\"\\"),
        .string("é😀👨‍👩‍👧"),
        .string("e\u{301}"), .string("\u{e9}"),
        .integer(0), .integer(-1), .integer(Int64.min), .integer(Int64.max),
        .unsignedInteger(1 << 63), .unsignedInteger(UInt64.max),
        .real(0), .real(-0.0), .real(0.1), .real(1.0 / 3.0), .real(.leastNonzeroMagnitude),
        .real(-.leastNonzeroMagnitude), .real(.infinity),
        .real(-.infinity), .real(.nan), .real(.greatestFiniteMagnitude), .real(535),
        .real(0.13229149580001831),
        .bool(true), .bool(false),
        .date(date(-63_113_904_000)), .date(date(1_169_176_448)), .date(date(63_113_817_600)),
        .date(date(0.123456789)), .date(date(0)), .date(Date()),
        .data(Data()), .data(Data([0, 0x41, 0, 0xFF])), .data(Data(repeating: 0, count: 1000)),
        .array([]), .dict([:]),
        .array([.array([]), .dict([:]), .array([.dict(["k": .array([])])])]),
        .dict([
            "": .string(""), " ": .integer(1), "a.b": .integer(2), "a/b": .integer(3),
            "com.example.app/x.y": .bool(true),
            "\u{e9}": .string("precomposed"), "🔑": .dict(["nested.key/with": .data(Data([0]))]),
        ]),
        .array([
            .string("mixed"), .integer(-5), .real(2.5), .bool(false), .date(date(86_400.5)),
            .data(Data([1, 2])),
        ]),
    ]

    @Test(arguments: values)
    func roundTripsThroughTaggedJSON(value: PlistValue) throws {
        #expect(try PlistValue(tagged: value.tagged) == value)
        #expect(try overTheWire(value) == value)
    }

    @Test func integersUseFullInt64AndUnsignedAboveIt() throws {
        #expect(PlistValue.integer(.min).tagged.text == #"{"integer":-9223372036854775808}"#)
        #expect(PlistValue.integer(.max).tagged.text == #"{"integer":9223372036854775807}"#)
        #expect(
            PlistValue.unsignedInteger(1 << 63).tagged.text == #"{"integer":9223372036854775808}"#)
        #expect(
            try PlistValue(tagged: try JSON.parse(#"{"integer":9223372036854775807}"#))
                == .integer(.max))
        #expect(
            try PlistValue(tagged: try JSON.parse(#"{"integer":9223372036854775808}"#))
                == .unsignedInteger(1 << 63))
        #expect(
            try PlistValue(tagged: try JSON.parse(#"{"integer":18446744073709551615}"#))
                == .unsignedInteger(.max))
        #expect(
            try PlistValue(tagged: try JSON.parse(#"{"integer":-9223372036854775808}"#))
                == .integer(.min))
        // Never sign-flipped: 2^63 is not Int64.min.
        #expect(PlistValue.unsignedInteger(1 << 63) != .integer(.min))
        #expect(PlistValue.unsignedInteger(1 << 63).typeName == "integer")
    }

    @Test func realsAreBitExactIncludingSpecials() throws {
        #expect(PlistValue.real(.infinity).tagged == ["real": "inf"])
        #expect(PlistValue.real(-.infinity).tagged == ["real": "-inf"])
        #expect(PlistValue.real(.nan).tagged == ["real": "nan"])
        #expect(PlistValue.real(-0.0).tagged.text == #"{"real":-0.0}"#)
        #expect(PlistValue.real(.leastNonzeroMagnitude).tagged.text == #"{"real":5e-324}"#)

        guard case .real(let nz) = try overTheWire(.real(-0.0)) else {
            Issue.record("not a real")
            return
        }
        #expect(nz.bitPattern == (-0.0).bitPattern)
        guard case .real(let sub) = try overTheWire(.real(.leastNonzeroMagnitude)) else {
            Issue.record("not a real")
            return
        }
        #expect(sub.bitPattern == 1)
        guard case .real(let n) = try overTheWire(.real(.nan)) else {
            Issue.record("not a real")
            return
        }
        #expect(n.bitPattern == Double.nan.bitPattern)
        // A NaN keeps its sign and payload (0.0/0.0 on x86-64 has the sign bit; "nan" lost it).
        for bits: UInt64 in [
            0xfff8_0000_0000_0000, 0x7ff8_0000_0000_0001, 0x7ff0_0000_0000_0001,
            0xffff_ffff_ffff_ffff,
        ] {
            guard case .real(let back) = try overTheWire(.real(Double(bitPattern: bits))) else {
                Issue.record("not a real")
                return
            }
            #expect(
                back.bitPattern == bits,
                "\(String(bits, radix: 16)) came back as \(String(back.bitPattern, radix: 16))")
        }
        #expect(
            PlistValue.real(Double(bitPattern: 0xfff8_0000_0000_0000)).tagged == ["real": "-nan"])
        #expect(
            PlistValue.real(Double(bitPattern: 0x7ff8_0000_0000_0001)).tagged == [
                "real": "nan(0x7ff8000000000001)"
            ])
        guard case .real(let inf) = try overTheWire(.real(-.infinity)) else {
            Issue.record("not a real")
            return
        }
        #expect(inf == -.infinity)
        // Equality is by bit pattern.
        #expect(PlistValue.real(-0.0) != .real(0.0))
        #expect(PlistValue.real(.nan) == .real(.nan))
    }

    @Test func dataKeepsNULBytes() throws {
        let value = PlistValue.data(Data([0, 0x41, 0, 0xFF]))
        #expect(value.tagged == ["data": "AEEA/w=="])
        guard case .data(let d) = try overTheWire(value) else {
            Issue.record("not data")
            return
        }
        #expect(Array(d) == [0, 0x41, 0, 0xFF])
    }

    @Test func stringsAreNotNormalised() throws {
        let pre = PlistValue.string("\u{e9}")
        let de = PlistValue.string("e\u{301}")
        #expect(pre != de)
        guard case .string(let s) = try overTheWire(de) else {
            Issue.record("not a string")
            return
        }
        #expect(Array(s.utf8) == [0x65, 0xCC, 0x81])
    }

    /// "é" precomposed and decomposed are two different preference keys (as in UserDefaults).
    @Test func dictKeysDifferingOnlyInNormalisationStayDistinct() throws {
        let text = "{\"dict\":{\"\u{e9}\":{\"integer\":1},\"e\u{301}\":{\"integer\":2}}}"
        let value = try PlistValue(tagged: try JSON.parse(text))
        guard case .dict(let d) = value else {
            Issue.record("not a dict")
            return
        }
        #expect(d.count == 2)
        #expect(Set(d.keys.map { Array($0.utf8) }) == [[0xC3, 0xA9], [0x65, 0xCC, 0x81]])
    }

    @Test func emptyKeyAndKeysWithDotsAndSlashes() throws {
        let value = PlistValue.dict([
            "": .integer(1), "a.b.c": .integer(2), "a/b/c": .integer(3), "./..": .integer(4),
        ])
        guard case .dict(let d) = try overTheWire(value) else {
            Issue.record("not a dict")
            return
        }
        #expect(d[""] == .integer(1))
        #expect(d["a.b.c"] == .integer(2))
        #expect(d["a/b/c"] == .integer(3))
        #expect(d["./.."] == .integer(4))
        #expect(d.count == 4)
    }

    static func nestedArrays(_ levels: Int) -> PlistValue {
        var v = PlistValue.array([])
        for _ in 1..<levels { v = .array([v]) }
        return v
    }

    @Test func deepestAllowedValueRoundTripsAndOneMoreIsRefused() throws {
        let deepest = Self.nestedArrays(PlistValue.maximumDepth)
        #expect(try PlistValue(tagged: deepest.tagged) == deepest)
        #expect(try overTheWire(deepest) == deepest)
        expectVaultError(.invalidValue) {
            _ = try PlistValue(tagged: Self.nestedArrays(PlistValue.maximumDepth + 1).tagged)
        }
    }

    /// Whatever the engine accepts must also travel in a varlink reply: io.vaultd.Preferences.Domain
    /// carries each value three levels down (`{"parameters":{"values":{key: value}}}`).
    @Test func deepestAllowedValueFitsInAVarlinkReply() throws {
        let deepest = Self.nestedArrays(PlistValue.maximumDepth)
        let reply = VarlinkReply(parameters: ["values": .object(["k": deepest.tagged])])
        let back = try VarlinkReply(json: try JSON.parse(reply.json.serialized()))
        let tagged = try #require(back.parameters["values"]?["k"])
        #expect(try PlistValue(tagged: tagged) == deepest)
    }

    @Test(arguments: [
        "{}", #"{"string":"a","integer":1}"#, #""x""#, #"[{"string":"a"}]"#, "null", "5",
        #"{"strin":"x"}"#, #"{"String":"x"}"#, #"{"string":5}"#, #"{"string":null}"#,
        #"{"integer":"5"}"#, #"{"integer":1.5}"#, #"{"integer":1e3}"#,
        #"{"integer":18446744073709551616}"#,
        #"{"integer":-9223372036854775809}"#, #"{"integer":true}"#,
        #"{"real":"Infinity"}"#, #"{"real":"NaN"}"#, #"{"real":"1.5"}"#, #"{"real":true}"#,
        #"{"real":1e400}"#, #"{"real":-1e309}"#,
        #"{"real":"nan(0x0000000000000001)"}"#, #"{"real":"nan(0x7ff8)"}"#,
        #"{"real":"nan(0x7ff800000000000g)"}"#, #"{"real":"+nan"}"#,
        #"{"bool":"true"}"#, #"{"bool":1}"#,
        #"{"date":"2001-01-01"}"#, #"{"date":"2001-02-29T00:00:00Z"}"#,
        #"{"date":"2001-01-01T00:00:00+01:00"}"#,
        #"{"date":5}"#, #"{"data":"!!"}"#, #"{"data":5}"#,
        #"{"array":{}}"#, #"{"array":[1]}"#, #"{"array":[{"string":"ok"},{"nope":1}]}"#,
        #"{"dict":[]}"#, #"{"dict":{"k":5}}"#, #"{"dict":{"k":{"bogus":1}}}"#,
    ])
    func badTagsAreInvalidValue(text: String) throws {
        let json = try JSON.parse(text)
        let e = expectVaultError(.invalidValue) { _ = try PlistValue(tagged: json) }
        #expect(e?.name == "io.vaultd.Preferences.InvalidValue")
    }

    @Test func typeNamesAreThoseOfDefaults() {
        #expect(PlistValue.string("").typeName == "string")
        #expect(PlistValue.integer(1).typeName == "integer")
        #expect(PlistValue.real(1).typeName == "float")
        #expect(PlistValue.bool(true).typeName == "boolean")
        #expect(PlistValue.date(Date()).typeName == "date")
        #expect(PlistValue.data(Data()).typeName == "data")
        #expect(PlistValue.array([]).typeName == "array")
        #expect(PlistValue.dict([:]).typeName == "dictionary")
    }
}

@Suite("PlistDate")
struct PlistDateTests {
    @Test(
        arguments: [
            (-63_113_904_000.0, "0001-01-01T00:00:00Z"),
            (1_169_176_448, "2038-01-19T03:14:08Z"),
            (63_113_817_600, "4000-12-31T00:00:00Z"),
            (252_423_993_599, "9999-12-31T23:59:59Z"),
            (-978_307_200, "1970-01-01T00:00:00Z"),
            (-12_649_262_400, "1600-02-29T12:00:00Z"),
            (0, "2001-01-01T00:00:00Z"),
            (0.5, "2001-01-01T00:00:00.5Z"),
            (0.123456789, "2001-01-01T00:00:00.123456789Z"),
            (1e-5, "2001-01-01T00:00:00.00001Z"),
            (1.5e-7, "2001-01-01T00:00:00.00000015Z"),
            (-0.5, "2000-12-31T23:59:59.5Z"),
            (-0.1, "2000-12-31T23:59:59.9Z"),
            (-1.25, "2000-12-31T23:59:58.75Z"),
            (-63_113_904_000 + 0.25, "0001-01-01T00:00:00.25Z"),
        ] as [(Double, String)])
    func formatsExactly(t: Double, text: String) throws {
        #expect(PlistDate.format(date(t)) == text)
        let parsed = try #require(PlistDate.parse(text))
        #expect(parsed.timeIntervalSinceReferenceDate.bitPattern == t.bitPattern)
        #expect(PlistValue.date(date(t)).tagged == ["date": .string(text)])
    }

    @Test(arguments: [
        .leastNonzeroMagnitude, -.leastNonzeroMagnitude, 1e-30, -1e-30, -1e-20, 1e-20,
        -(0.0).nextUp, -0.9999999999999999, -1.0000000000000002,
        -1234.56789, 1234.56789, 0.1, 0.3, -0.3, -63_113_904_000 + 0.1, 252_423_993_599.99997,
        86_399.999999,
        789_912_345.678_901_2, -0.000_123,
    ])
    func roundTripsBitExactly(t: Double) throws {
        let text = PlistDate.format(date(t))
        let back = try #require(PlistDate.parse(text), "\(t) formatted as \(text) does not parse")
        #expect(
            back.timeIntervalSinceReferenceDate.bitPattern == t.bitPattern,
            "\(t) -> \(text) -> \(back.timeIntervalSinceReferenceDate)")
        #expect(try PlistValue(tagged: PlistValue.date(date(t)).tagged) == .date(date(t)))
    }

    @Test func subnormalFractionIsWrittenInFull() {
        let text = PlistDate.format(date(.leastNonzeroMagnitude))
        #expect(text == "2001-01-01T00:00:00." + String(repeating: "0", count: 323) + "5Z")
    }

    @Test func currentTimeRoundTripsBitExactly() throws {
        let now = Date()
        let back = try #require(PlistDate.parse(PlistDate.format(now)))
        #expect(
            back.timeIntervalSinceReferenceDate.bitPattern
                == now.timeIntervalSinceReferenceDate.bitPattern)
    }

    /// Every Double in years 0...9999, and every tiny one around 2001-01-01, round-trips.
    @Test func randomDatesRoundTripBitExactly() throws {
        var rng = SeededRandom(seed: 0x5EED_0F_DA7E5)
        let low = -63_145_526_400.0
        let high = 252_423_993_600.0
        var failures: [Double] = []
        for i in 0..<20_000 {
            let t: Double
            if i % 2 == 0 {
                t = Double.random(in: low..<high, using: &rng)
            } else {
                // Random bit patterns of magnitude below 2 (exponent chosen uniformly), either sign.
                let exponent = UInt64.random(in: 0...1023, using: &rng)
                let bits =
                    (UInt64.random(in: 0...1, using: &rng) << 63) | (exponent << 52)
                    | (rng.next() & ((1 << 52) - 1))
                t = Double(bitPattern: bits)
            }
            let back = PlistDate.parse(PlistDate.format(date(t)))?.timeIntervalSinceReferenceDate
            if back?.bitPattern != t.bitPattern { failures.append(t) }
        }
        #expect(failures.count == 0, "dates that did not round-trip, e.g. \(failures.prefix(5))")
    }

    /// Fractions `format` would not write (any digits, up to the longest accepted) read as
    /// `Double` reads "0.digits": `parse` reads them with `strtod` in place.
    @Test func anyFractionDigitsReadAsDoubleReadsThem() throws {
        var rng = SeededRandom(seed: 0xF4AC_7105)
        for _ in 0..<5_000 {
            let count = Int.random(in: 1...(Bool.random(using: &rng) ? 20 : 350), using: &rng)
            let digits = String(
                (0..<count).map { _ in Character(String(Int.random(in: 0...9, using: &rng))) })
            let whole = Int64.random(in: 0..<3_000_000_000, using: &rng)
            let text = PlistDate.format(date(Double(whole))).dropLast() + "." + digits + "Z"
            let parsed = try #require(PlistDate.parse(String(text)), "\(text)")
            let expected = Double(whole) + Double("0." + digits)!
            #expect(
                parsed.timeIntervalSinceReferenceDate.bitPattern == expected.bitPattern, "\(text)")
        }
    }

    /// Month lengths, leap years by the Gregorian rule.
    @Test(arguments: [
        ("2000-02-29T00:00:00Z", true), ("2004-02-29T00:00:00Z", true),
        ("2100-02-29T00:00:00Z", false),
        ("2001-04-30T00:00:00Z", true), ("2001-06-31T00:00:00Z", false),
        ("2001-09-31T00:00:00Z", false),
        ("2001-11-31T00:00:00Z", false), ("2001-12-31T23:59:59Z", true),
        ("2001-07-31T00:00:00Z", true),
        ("2001-08-31T00:00:00Z", true), ("2001-02-28T00:00:00Z", true),
    ])
    func knowsMonthLengths(text: String, valid: Bool) {
        #expect((PlistDate.parse(text) != nil) == valid, "\(text)")
    }

    @Test(arguments: [
        "2001-01-01", "2001-01-01T00:00:00", "2001-01-01 00:00:00Z", "2001-01-01T00:00:00+00:00",
        "2001-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2001-13-01T00:00:00Z",
        "2001-00-01T00:00:00Z",
        "2001-01-00T00:00:00Z", "2001-04-31T00:00:00Z", "2001-01-01T24:00:00Z",
        "2001-01-01T00:60:00Z",
        "2001-01-01T00:00:60Z", "2001-1-01T00:00:00Z", "2001-01-01T00:00:00.Z",
        "2001-01-01T00:00:00.5",
        "2001-01-01T00:00:00.-5Z", "2001-01-01T00:00:00,5Z", "2001-01-01T00:00:00.5zZ",
        "x001-01-01T00:00:00Z",
        "", "Z",
    ])
    func rejectsMalformedDates(text: String) {
        #expect(PlistDate.parse(text) == nil)
    }

    /// Dates outside years 0 to 9999 (as a binary plist can hold) are formatted without
    /// trapping, as text that `parse` and the wire refuse.
    @Test(arguments: [
        1e300, -1e300, 252_423_993_600, -63_145_526_400 - 0.5, -63_200_000_000, .infinity,
        -.infinity, .nan,
    ])
    func formatNeverTrapsAndOutOfRangeDatesAreRefused(t: Double) throws {
        let text = PlistDate.format(date(t))
        #expect(PlistDate.parse(text) == nil, "\(t) formatted as \(text)")
        #expect(throws: VaultError.self) { try PlistValue(tagged: PlistValue.date(date(t)).tagged) }
    }

    /// A fraction that rounds up to year 10000 is past the range.
    @Test func parseRefusesYearTenThousand() {
        #expect(PlistDate.parse("9999-12-31T23:59:59.99999999Z") == nil)
        #expect(throws: VaultError.self) {
            try PlistValue(tagged: ["date": .string("9999-12-31T23:59:59.99999999Z")])
        }
    }

    /// Foundation's `Date.distantPast` (0000-12-30) and `distantFuture` (4001-01-01), which
    /// apps store as sentinels, and the first second of year 0 round-trip.
    @Test(arguments: [Date.distantPast, Date.distantFuture, date(-63_145_526_400)])
    func distantPastAndFutureRoundTrip(d: Date) throws {
        let text = PlistDate.format(d)
        #expect(try #require(PlistDate.parse(text)) == d, "\(text)")
        #expect(try PlistValue(tagged: PlistValue.date(d).tagged) == .date(d))
    }

    @Test func acceptsLeapDaysAndExtraFractionDigits() throws {
        #expect(PlistDate.parse("2000-02-29T00:00:00Z") != nil)
        #expect(PlistDate.parse("2004-02-29T23:59:59Z") != nil)
        let t = try #require(PlistDate.parse("2001-01-01T00:00:01.500Z"))
            .timeIntervalSinceReferenceDate
        #expect(t == 1.5)
    }
}

@Suite("PropertyListCodec limits")
struct PropertyListCodecLimitTests {
    /// A binary plist whose root {a: A1} has A_i = [A_{i+1}, A_{i+1}]: the same object twice
    /// at every level, `levels` deep (412 bytes at 40 levels; 2^40 values as a tree).
    /// `wideCounts`: each array's count written as a 16-byte integer (Foundation takes it);
    /// `offsetSize`: bytes per offset-table entry (Foundation takes 9 too).
    static func sharedReferenceBomb(levels: Int, wideCounts: Bool = false, offsetSize: Int = 4)
        -> Data
    {
        var objects: [[UInt8]] = [[0xD1, 0, 1, 0, 2], [0x51, 0x61]]
        for i in 0..<levels {
            if i < levels - 1 {
                let r = UInt16(objects.count + 1)
                let head: [UInt8] =
                    wideCounts ? [0xAF, 0x14] + [UInt8](repeating: 0, count: 15) + [2] : [0xA2]
                objects.append(
                    head + [UInt8(r >> 8), UInt8(r & 0xFF), UInt8(r >> 8), UInt8(r & 0xFF)])
            } else {
                objects.append([0x51, 0x78])
            }
        }
        var out = Array("bplist00".utf8)
        var offsets: [Int] = []
        for o in objects {
            offsets.append(out.count)
            out += o
        }
        let tableAt = out.count
        func bigEndian<T: FixedWidthInteger>(_ v: T) -> [UInt8] {
            withUnsafeBytes(of: v.bigEndian) { Array($0) }
        }
        for off in offsets {
            out +=
                [UInt8](repeating: 0, count: max(0, offsetSize - 8))
                + bigEndian(UInt64(off)).suffix(min(8, offsetSize))
        }
        out +=
            [0, 0, 0, 0, 0, 0, UInt8(offsetSize), 2] + bigEndian(UInt64(objects.count))
            + bigEndian(UInt64(0)) + bigEndian(UInt64(tableAt))
        return Data(out)
    }

    /// A file that is not a property list is refused saying why and where, as Foundation's
    /// parser found it ("Encountered empty <integer> on line 5"), and an empty file says it is
    /// empty: the message was only "The operation could not be completed. The data is not in
    /// the correct format." Input the parser quotes (an unknown tag's name, an unexpected
    /// character) is left out: preference text must not reach error messages.
    @Test(arguments: [
        ("", "the data is empty", "\u{0}"),
        (
            "<dict>\n<key>k</key>\n<integer></integer>\n</dict>",
            "Encountered empty <integer> on line 5", "\u{0}"
        ),
        (
            "<dict>\n<key>k</key>\n<date>2001-01-01T00:00:00.5Z</date>\n</dict>",
            "Could not interpret <date> at line 5", "\u{0}"
        ),
        (
            "<dict>\n<key>k</key>\n<s3cretTag>v</s3cretTag>\n</dict>", "unknown tag on line 5",
            "s3cretTag"
        ),
        ("<dict>\n<key>k</key>\n<string>v</strung>\n</dict>", "on line 5", "strung"),
        ("<dict>\n<key>k</key>\n<integer>12Q</integer>\n</dict>", "in <integer> on line 5", "Q"),
        (
            "<dict>\n<key>k</key>\n<data>AA\u{e9}A</data>\n</dict>",
            "Could not interpret <data> on line 5 (invalid character)", "0xC3"
        ),
    ])
    func notAPropertyListSaysWhyAndWhereWithoutTheInput(
        body: String, reason: String, hidden: String
    ) throws {
        let text =
            body.isEmpty
            ? ""
            : "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<plist version=\"1.0\">\n" + body
                + "\n</plist>\n"
        do {
            _ = try PropertyListCodec.decode(Data(text.utf8))
            Issue.record("accepted")
        } catch let e as VaultError {
            #expect(
                e.code == .invalidPropertyList
                    && e.message.hasPrefix("not a property list (XML or binary): "), "\(e)")
            #expect(e.message.contains(reason), "\(e.message)")
            #expect(!e.message.contains(hidden), "\(e.message)")
        }
    }

    /// The XML declaration's encoding name is input too: Foundation quotes an unknown one
    /// ("Encountered unknown encoding (%@)"), which reached the message.
    @Test func anUnknownEncodingIsNamedWithoutQuotingIt() throws {
        let text =
            "<?xml version=\"1.0\" encoding=\"s3cret-Enc\"?>\n<plist version=\"1.0\">\n<dict/>\n</plist>\n"
        do {
            _ = try PropertyListCodec.decode(Data(text.utf8))
            Issue.record("accepted")
        } catch let e as VaultError {
            #expect(
                e.code == .invalidPropertyList
                    && e.message.hasPrefix("not a property list (XML or binary): "), "\(e)")
            #expect(e.message.contains("unknown encoding"), "\(e.message)")
            #expect(!e.message.contains("s3cret"), "\(e.message)")
        }
    }

    @Test func aPlistReferringToOneObjectManyTimesIsRefusedNotExpanded() throws {
        // Small enough to expand: read whole, each copy the same.
        let small = try PropertyListCodec.decode(Self.sharedReferenceBomb(levels: 4))
        #expect(
            small
                == .dict([
                    "a": .array(
                        Array(
                            repeating: .array(
                                Array(repeating: .array([.string("x"), .string("x")]), count: 2)),
                            count: 2))
                ]))
        // 2^40 values: refused at the budget, at once.
        let bomb = Self.sharedReferenceBomb(levels: 40)
        #expect(bomb.count < 500)
        do {
            _ = try PropertyListCodec.decode(bomb)
            Issue.record("a 2^40-value tree was accepted")
        } catch let e as VaultError {
            #expect(e.code == .invalidPropertyList && e.message.contains("expands past"), "\(e)")
        }
    }

    /// A bplist of `objects` (each one's bytes), root object 0, 1-byte refs and offsets.
    static func bplist(_ objects: [[UInt8]]) -> Data {
        var out = Array("bplist00".utf8)
        var offsets: [UInt8] = []
        for o in objects {
            offsets.append(UInt8(out.count))
            out += o
        }
        let tableAt = out.count
        func bigEndian(_ v: UInt64) -> [UInt8] { withUnsafeBytes(of: v.bigEndian) { Array($0) } }
        out +=
            offsets + [0, 0, 0, 0, 0, 0, 1, 1] + bigEndian(UInt64(objects.count)) + bigEndian(0)
            + bigEndian(UInt64(tableAt))
        return Data(out)
    }

    /// Objects a preference value cannot be are refused before Foundation reads them: a set
    /// (Foundation's bridging of one crashed vaultd: SIGSEGV), a UID, a null.
    @Test(arguments: [[0xC1, 3] as [UInt8], [0x80, 1], [0x00]])
    func objectsPreferencesDoNotTakeAreRefused(inner: [UInt8]) throws {
        // {a: X}, X holding (for the set) the integer 1.
        let plist = Self.bplist([[0xD1, 1, 2], [0x51, 0x61], inner, [0x10, 0x01]])
        do {
            _ = try PropertyListCodec.decode(plist)
            Issue.record("accepted")
        } catch let e as VaultError {
            #expect(e.code == .invalidPropertyList && e.message.contains("kind"), "\(e)")
        }
        // The same file with an integer there reads.
        #expect(
            try PropertyListCodec.decode(
                Self.bplist([[0xD1, 1, 2], [0x51, 0x61], [0x10, 0x07], [0x10, 0x01]]))
                == .dict(["a": .integer(7)]))
    }

    /// Layouts the check cannot read integer by integer (a count 16 bytes wide, offsets 9
    /// bytes wide, which Foundation still takes) are refused, not handed to Foundation.
    @Test(arguments: [(true, 4), (false, 9), (false, 16)])
    func aBombInAnOddLayoutIsRefusedToo(wideCounts: Bool, offsetSize: Int) throws {
        let bomb = Self.sharedReferenceBomb(
            levels: 40, wideCounts: wideCounts, offsetSize: offsetSize)
        do {
            _ = try PropertyListCodec.decode(bomb)
            Issue.record("accepted")
        } catch let e as VaultError {
            #expect(e.code == .invalidPropertyList, "\(e)")
        }
    }
}

/// Dictionary keys that differ only in Unicode normalisation (`é` U+00E9, `e` + U+0301) are
/// two keys, as CFDictionary and the store keep them: a `[String: …]` merged them, keeping
/// one value, sometimes under the other key's bytes.
@Suite("Property lists: keys differing only in Unicode normalisation")
struct PlistNormalisationTests {
    static let nfc = "caf\u{E9}", nfd = "cafe\u{301}"
    static let twins = PlistValue.dict([
        nfc: .string("a"), nfd: .dict([nfc: .integer(1), nfd: .integer(2)]),
    ])

    @Test func aDictionaryKeepsBothKeysOverTheWire() throws {
        guard case .dict(let d) = Self.twins else { return }
        #expect(d.count == 2 && d[Self.nfc] == .string("a"))
        let back = try overTheWire(Self.twins)
        #expect(back == Self.twins)
        guard case .dict(let b) = back, case .dict(let inner)? = b[Self.nfd] else {
            Issue.record("\(back)")
            return
        }
        #expect(inner[Self.nfc] == .integer(1) && inner[Self.nfd] == .integer(2))
        #expect(PlistValue.dict([Self.nfc: .integer(1)]) != .dict([Self.nfd: .integer(1)]))
        #expect(PlistValue.string(Self.nfc) != .string(Self.nfd))
    }

    @Test func xmlExportWritesBothKeys() throws {
        let xml = String(
            decoding: try PropertyListCodec.encode(Self.twins, format: .xml), as: UTF8.self)
        #expect(xml.components(separatedBy: "<key>").count == 5, "\(xml)")
        #expect(Array(xml.utf8).firstRange(of: Array("<key>cafe\u{301}</key>".utf8)) != nil)
        #expect(Array(xml.utf8).firstRange(of: Array("<key>caf\u{E9}</key>".utf8)) != nil)
    }

    /// Foundation (swift-corelibs) reads and writes dictionaries as Swift dictionaries, which
    /// would merge the two keys: refused with a clear error rather than a value lost.
    @Test func whatFoundationWouldMergeIsRefusedNotMerged() throws {
        #expect(throws: VaultError.self) {
            _ = try PropertyListCodec.encode(Self.twins, format: .binary)
        }
        let xml = try PropertyListCodec.encode(Self.twins, format: .xml)
        let binary = Data(
            base64Encoded:
                "YnBsaXN0MDDSAQIDBGUAYwBhAGYAZQMBZABjAGEAZgDpUWJRYQgNGCEjAAAAAAAAAQEAAAAAAAAABQAAAAAAAAAAAAAAAAAAACU="
        )!
        for data in [xml, binary] {
            do {
                let v = try PropertyListCodec.decode(data)
                Issue.record("accepted as \(v)")
            } catch let e as VaultError {
                #expect(
                    e.code == .invalidPropertyList && e.message.contains("Unicode normalisation"),
                    "\(e)")
                #expect(!e.message.contains("caf"), "\(e.message)")
            }
        }
        // Keys in two different dictionaries are no twins.
        let apart = PlistValue.dict([
            "a": .dict([Self.nfc: .integer(1)]), "b": .dict([Self.nfd: .integer(2)]),
        ])
        #expect(
            try PropertyListCodec.decode(try PropertyListCodec.encode(apart, format: .xml)) == apart
        )
        #expect(
            try PropertyListCodec.decode(try PropertyListCodec.encode(apart, format: .binary))
                == apart)
    }
}
