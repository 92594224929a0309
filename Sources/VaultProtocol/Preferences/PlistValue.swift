import Foundation

/// A property-list value, as a preference holds it (docs/preferences.md).
///
/// On the wire each value is tagged JSON: `{"string": "x"}`, `{"integer": 5}`,
/// `{"real": 1.5}` (or `"inf"`, `"-inf"`, `"nan"`, `"-nan"`, `"nan(0x7ff8000000000001)"`: a
/// NaN's bits kept), `{"bool": true}`,
/// `{"date": "2001-01-01T00:00:00.5Z"}`, `{"data": "<base64>"}`, `{"array": […]}`,
/// `{"dict": {…}}`. Integers are exact over the full Int64 range; unsigned values above
/// Int64.max (which binary plists carry as 128-bit integers) are kept as `.unsignedInteger`,
/// never sign-flipped. Reals and dates round-trip bit-exactly (an XML export keeps a
/// date's whole seconds only, as Apple's writer). A date must lie in years 0 to 9999
/// (`PlistDate.supportedRange`).
public enum PlistValue: Equatable, Sendable {
    case string(String)
    case integer(Int64)
    /// Only for values above `Int64.max`; smaller values are always `.integer`.
    case unsignedInteger(UInt64)
    case real(Double)
    case bool(Bool)
    case date(Date)
    case data(Data)
    case array([PlistValue])
    case dict(PlistDictionary)

    /// The `defaults read-type` name of the value's type.
    public var typeName: String {
        switch self {
        case .string: "string"
        case .integer, .unsignedInteger: "integer"
        case .real: "float"
        case .bool: "boolean"
        case .date: "date"
        case .data: "data"
        case .array: "array"
        case .dict: "dictionary"
        }
    }

    /// Bit-exact equality: reals compare by bit pattern (so nan == nan, -0.0 != 0.0).
    public static func == (a: PlistValue, b: PlistValue) -> Bool {
        switch (a, b) {
        case (.string(let x), .string(let y)): x.sameBytes(y)
        case (.integer(let x), .integer(let y)): x == y
        case (.unsignedInteger(let x), .unsignedInteger(let y)): x == y
        case (.real(let x), .real(let y)): x.bitPattern == y.bitPattern || (x.isNaN && y.isNaN)
        case (.bool(let x), .bool(let y)): x == y
        case (.date(let x), .date(let y)):
            x.timeIntervalSinceReferenceDate.bitPattern
                == y.timeIntervalSinceReferenceDate.bitPattern
        case (.data(let x), .data(let y)): x == y
        case (.array(let x), .array(let y)): x == y
        case (.dict(let x), .dict(let y)):
            x.count == y.count && x.allSatisfy { k, v in y[k].map { $0 == v } ?? false }
        default: false
        }
    }
}

extension PlistValue {
    /// Levels of arrays and dictionaries a value may nest; deeper is InvalidValue in
    /// `init(tagged:)` (Set) and InvalidPropertyList in an imported plist.
    public static let maximumDepth = 64

    /// A NaN's tagged text, bit-exact: "nan" for Swift's `.nan` (0x7ff8000000000000),
    /// "-nan" for it with the sign bit (what 0.0/0.0 gives on x86-64), else "nan(0x" and the
    /// 16 hex digits of its bits ")", after C's `nan("n-char-sequence")`.
    static func nanText(_ d: Double) -> String {
        switch d.bitPattern {
        case Double.nan.bitPattern: return "nan"
        case (-Double.nan).bitPattern: return "-nan"
        default:
            let hex = String(d.bitPattern, radix: 16)
            return "nan(0x" + String(repeating: "0", count: 16 - hex.count) + hex + ")"
        }
    }

    /// The NaN `nanText` wrote as `text`; nil for any other text, or bits that are no NaN.
    static func nan(fromText text: String) -> Double? {
        switch text {
        case "nan": return .nan
        case "-nan": return -.nan
        default:
            guard text.hasPrefix("nan(0x"), text.hasSuffix(")"), text.utf8.count == 23 else {
                return nil
            }
            let hex = text.dropFirst(6).dropLast()
            guard hex.allSatisfy(\.isHexDigit), let bits = UInt64(hex, radix: 16) else {
                return nil
            }
            let d = Double(bitPattern: bits)
            return d.isNaN ? d : nil
        }
    }

    /// The tagged-JSON wire form.
    public var tagged: JSON {
        switch self {
        case .string(let s): ["string": .string(s)]
        case .integer(let i): ["integer": JSON(i)]
        case .unsignedInteger(let u): ["integer": JSON(u)]
        case .real(let d):
            if d.isNaN {
                ["real": .string(Self.nanText(d))]
            } else if d.isInfinite {
                ["real": .string(d < 0 ? "-inf" : "inf")]
            } else {
                ["real": JSON(d)]
            }
        case .bool(let b): ["bool": .bool(b)]
        case .date(let d): ["date": .string(PlistDate.format(d))]
        case .data(let d): ["data": .string(d.base64EncodedString())]
        case .array(let a): ["array": .array(a.map(\.tagged))]
        case .dict(let d): ["dict": .object(d.mapValues(\.tagged))]
        }
    }

    /// Decodes the tagged-JSON wire form. Throws `VaultError` `InvalidValue` naming what is wrong.
    public init(tagged json: JSON) throws {
        try self.init(tagged: json, depth: 0)
    }

    private init(tagged json: JSON, depth: Int) throws {
        func bad(_ why: String) -> VaultError {
            VaultError(.invalidValue, "invalid property-list value: \(why)")
        }
        guard depth < PlistValue.maximumDepth else {
            throw bad("nested deeper than \(PlistValue.maximumDepth)")
        }
        guard case .object(let o) = json, o.count == 1, let (tag, v) = o.first else {
            throw bad("expected an object with exactly one type tag")
        }
        switch (tag, v) {
        case ("string", .string(let s)): self = .string(s)
        case ("integer", .number(let n)):
            if let i = Int64(n) {
                self = .integer(i)
            } else if let u = UInt64(n) {
                self = .unsignedInteger(u)
            } else {
                throw bad("integer out of the range Int64.min...UInt64.max")
            }
        case ("real", .number(let n)):
            // A number beyond a double's range reads as infinity: refused, not stored as one
            // (infinity is the string "inf"; the JSON number meant something else).
            guard let d = Double(n), d.isFinite else {
                throw bad("a real must be a finite double (infinity is written \"inf\")")
            }
            self = .real(d)
        case ("real", .string(let s)):
            switch s {
            case "inf", "+inf": self = .real(.infinity)
            case "-inf": self = .real(-.infinity)
            default:
                guard let nan = Self.nan(fromText: s) else {
                    throw bad(
                        "a real as a string must be inf, -inf, nan, -nan or nan(0x and the 16 hex digits of a NaN's bits)"
                    )
                }
                self = .real(nan)
            }
        case ("bool", .bool(let b)): self = .bool(b)
        case ("date", .string(let s)):
            guard let d = PlistDate.parse(s) else {
                throw bad(
                    "date must be ISO 8601 UTC in years 0 to 9999, e.g. 2001-01-01T00:00:00.5Z")
            }
            self = .date(d)
        case ("data", .string(let s)):
            guard let d = Data(base64Encoded: s) else { throw bad("data must be base64") }
            self = .data(d)
        case ("array", .array(let a)):
            self = .array(try a.map { try PlistValue(tagged: $0, depth: depth + 1) })
        case ("dict", .object(let d)):
            self = .dict(try d.mapValues { try PlistValue(tagged: $0, depth: depth + 1) })
        default: throw bad("unknown tag '\(tag)' or wrong JSON type for it")
        }
    }
}

/// ISO 8601 UTC dates with exactly as many fractional digits as the Double needs.
///
/// A date is a Double of seconds since 2001-01-01 (as `CFAbsoluteTime` and binary plists).
/// `format` writes whole seconds as a proleptic-Gregorian calendar date and the fraction as
/// the shortest decimal that round-trips; `parse` adds them back, which is exact because the
/// true sum is representable. Years 0 to 9999 are supported (`supportedRange`).
public enum PlistDate {
    /// The dates a property-list value may hold, in seconds since 2001: from
    /// 0000-01-01T00:00:00Z up to, not including, 10000-01-01T00:00:00Z (year 0 holds
    /// Foundation's `Date.distantPast`, 0000-12-30, which apps store; Apple writes it so).
    /// `parse` returns only these; `PropertyListCodec.decode` refuses a plist holding any other.
    public static let supportedRange: Range<TimeInterval> = -63_145_526_400..<252_423_993_600

    public static func isSupported(_ date: Date) -> Bool {
        supportedRange.contains(date.timeIntervalSinceReferenceDate)
    }

    /// ISO 8601 text of a date in `supportedRange`. Any other date (nan and ±inf included) is
    /// written as text that names it and that `parse` refuses; never traps.
    public static func format(_ date: Date) -> String {
        let t = date.timeIntervalSinceReferenceDate
        guard supportedRange.contains(t) else {
            return "\(t) s since 2001-01-01, outside years 0 to 9999"
        }
        let whole = t.rounded(.down)
        let fraction = t - whole  // exact
        let (y, m, d, hh, mm, ss) = fields(Int64(whole))
        // Written as bytes, not built from Strings: every keychain item's two dates go
        // through here on each add and each reply.
        var text: [UInt8] = []
        text.reserveCapacity(48)
        appendDigits(y, width: 4, then: "-", to: &text)
        appendDigits(m, width: 2, then: "-", to: &text)
        appendDigits(d, width: 2, then: "T", to: &text)
        appendDigits(hh, width: 2, then: ":", to: &text)
        appendDigits(mm, width: 2, then: ":", to: &text)
        appendDigits(ss, width: 2, then: nil, to: &text)
        if t < 0 && t > -1 {
            // Within the second before 2001: 1 + t is not exact in binary (-1e-20 would round
            // to -1), so write 1 - |t| exactly in decimal; `parse` inverts it the same way.
            text.append(UInt8(ascii: "."))
            text += complement(fractionDigits(-t)).utf8
        } else if fraction != 0 {
            text.append(UInt8(ascii: "."))
            text += fractionDigits(fraction).utf8
        }
        text.append(UInt8(ascii: "Z"))
        return String(decoding: text, as: UTF8.self)
    }

    /// Appends a value in 0..<10_000 as exactly `width` decimal digits (zero-padded), then
    /// the separator.
    private static func appendDigits(
        _ value: Int64, width: Int, then separator: Unicode.Scalar?, to text: inout [UInt8]
    ) {
        var divisor: Int64 = 1
        for _ in 1..<width { divisor *= 10 }
        while divisor > 0 {
            text.append(UInt8(48 + (value / divisor) % 10))
            divisor /= 10
        }
        if let separator { text.append(UInt8(ascii: separator)) }
    }

    /// The proleptic-Gregorian UTC calendar fields of a date's whole second (rounded down),
    /// as `format` writes them; nil outside `supportedRange`. For text such as `defaults read`
    /// prints, which must agree with `format` (Foundation's calendars are Julian before 1582).
    public static func fields(of date: Date) -> (
        year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int
    )? {
        let t = date.timeIntervalSinceReferenceDate
        guard supportedRange.contains(t) else { return nil }
        let f = fields(Int64(t.rounded(.down)))
        return (Int(f.0), Int(f.1), Int(f.2), Int(f.3), Int(f.4), Int(f.5))
    }

    private static func fields(_ secondsSince2001: Int64) -> (
        Int64, Int64, Int64, Int64, Int64, Int64
    ) {
        // Days from 1970-01-01 to 2001-01-01: 11323.
        let (days, secondOfDay) = floorDivMod(secondsSince2001, 86_400)
        let (y, m, d) = civilFromDays(days + 11_323)
        return (y, m, d, secondOfDay / 3600, (secondOfDay % 3600) / 60, secondOfDay % 60)
    }

    public static func parse(_ s: String) -> Date? {
        // In place, without copying the text (every item's two dates are parsed per lookup).
        var s = s
        return s.withUTF8 { parse(utf8: $0) }
    }

    private static func parse(utf8 u: UnsafeBufferPointer<UInt8>) -> Date? {
        guard u.count >= 20, u.last == UInt8(ascii: "Z") else { return nil }
        func num(_ r: Range<Int>) -> Int64? {
            var v: Int64 = 0
            for i in r {
                guard u[i] >= 48, u[i] <= 57 else { return nil }
                v = v * 10 + Int64(u[i] - 48)
            }
            return v
        }
        guard u[4] == UInt8(ascii: "-"), u[7] == UInt8(ascii: "-"), u[10] == UInt8(ascii: "T"),
            u[13] == UInt8(ascii: ":"), u[16] == UInt8(ascii: ":"),
            let y = num(0..<4), let mo = num(5..<7), let d = num(8..<10),
            let h = num(11..<13), let mi = num(14..<16), let se = num(17..<19),
            (1...12).contains(mo), d >= 1, d <= daysInMonth(y, mo), h < 24, mi < 60, se < 60
        else { return nil }
        var fraction = 0.0
        let digits = u[min(20, u.count - 1)..<(u.count - 1)]
        if u.count > 20 {
            guard u[19] == UInt8(ascii: "."), u.count > 21, u.count - 21 <= maximumFractionDigits,
                digits.allSatisfy({ $0 >= 48 && $0 <= 57 }), let f = decimalFraction(digits)
            else { return nil }
            fraction = f
        }
        let days = daysFromCivil(y, mo, d) - 11_323
        let whole = days * 86_400 + h * 3600 + mi * 60 + se
        if whole == -1 && fraction != 0 {
            // -1 + 0.ddd = -(1 - 0.ddd), computed exactly in decimal and rounded once.
            guard let magnitude = Double("0." + complement(String(decoding: digits, as: UTF8.self)))
            else { return nil }
            return Date(timeIntervalSinceReferenceDate: -magnitude)
        }
        // Year 0, or a fraction rounding 9999-12-31T23:59:59.999… up to year 10000.
        let t = Double(whole) + fraction
        return supportedRange.contains(t) ? Date(timeIntervalSinceReferenceDate: t) : nil
    }

    /// The longest fraction `parse` accepts. `format` writes at most 340 digits (a fraction
    /// near the smallest subnormal: 323 zeros, then up to 17 significant digits).
    static let maximumFractionDigits = 350

    /// The digits of 1 - 0.`digits` (same count, trailing zeros dropped), for a non-zero fraction.
    private static func complement(_ digits: String) -> String {
        var d = Array(digits.utf8).map { Int($0) - 48 }
        guard let last = d.lastIndex(where: { $0 != 0 }) else { return digits }
        d.removeSubrange((last + 1)...)
        for i in 0..<last { d[i] = 9 - d[i] }
        d[last] = 10 - d[last]
        return String(decoding: d.map { UInt8($0 + 48) }, as: UTF8.self)
    }

    private static func floorDivMod(_ a: Int64, _ b: Int64) -> (Int64, Int64) {
        var q = a / b
        var r = a % b
        if r < 0 {
            q -= 1
            r += b
        }
        return (q, r)
    }

    private static func isLeap(_ y: Int64) -> Bool { (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 }
    private static func daysInMonth(_ y: Int64, _ m: Int64) -> Int64 {
        switch m {
        case 2: isLeap(y) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// The value of "0.`digits`" (ASCII digits), correctly rounded, as `Double("0." + digits)`
    /// gives it, without making the two Strings: every keychain item's two dates are parsed
    /// on each lookup. `strtod` reads the decimal point of the process's locale
    /// (an app linking VaultClient may set one whose point is a comma): when it stops before
    /// the end, `Double`, which reads in the C locale, is asked instead.
    private static func decimalFraction(_ digits: Slice<UnsafeBufferPointer<UInt8>>) -> Double? {
        let parsed = withUnsafeTemporaryAllocation(of: CChar.self, capacity: digits.count + 3) {
            b -> Double? in
            b[0] = CChar(UInt8(ascii: "0"))
            b[1] = CChar(UInt8(ascii: "."))
            var i = 2
            for c in digits {
                b[i] = CChar(bitPattern: c)
                i += 1
            }
            b[i] = 0
            var end: UnsafeMutablePointer<CChar>?
            let value = strtod(b.baseAddress!, &end)
            return end == b.baseAddress! + i ? value : nil
        }
        return parsed ?? Double("0." + String(decoding: digits, as: UTF8.self))
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
    static func daysFromCivil(_ y0: Int64, _ m: Int64, _ d: Int64) -> Int64 {
        let y = m <= 2 ? y0 - 1 : y0
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    static func civilFromDays(_ z0: Int64) -> (Int64, Int64, Int64) {
        let z = z0 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let y = yoe + era * 400
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (m <= 2 ? y + 1 : y, m, d)
    }

    /// Digits after "0." of a fraction in (0, 1), from its shortest round-trip decimal form.
    private static func fractionDigits(_ f: Double) -> String {
        let s = f.description  // "0.25" or "1e-05" or "1.5e-07"
        if let e = s.utf8.firstIndex(of: UInt8(ascii: "e")) {
            let mantissa = s[..<e].filter { $0 != "." }
            let exponent = Int(s[s.index(after: e)...])!  // negative
            return String(repeating: "0", count: -exponent - 1) + mantissa
        }
        return String(s.utf8.dropFirst(2))!
    }
}
