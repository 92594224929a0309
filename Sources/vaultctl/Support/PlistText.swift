import Foundation
import VaultProtocol

/// The old-style (OpenStep) property-list text that `defaults read` prints.
enum PlistText {
    /// `value` as `defaults read` prints it inside a domain, at nesting `level`: a string,
    /// number or date quoted unless it is ASCII letters and digits only ("com.apple.Safari",
    /// "_CFURLString", "0.5", "-1" are quoted, as defaults(1) quotes them); a container
    /// starting after its own level's indent (4 spaces a level), so one nested in a dictionary
    /// opens after ` = ` and that indent, and one in an array after the element's indent and
    /// its own (macOS's `defaults read com.apple.dock`).
    static func describe(_ value: PlistValue, level: Int = 0) -> String {
        let pad = String(repeating: "    ", count: level)
        let inner = String(repeating: "    ", count: level + 1)
        switch value {
        case .array(let a):
            if a.isEmpty { return pad + "(\n" + pad + ")" }
            return pad + "(\n"
                + a.map { inner + describe($0, level: level + 1) }.joined(separator: ",\n") + "\n"
                + pad + ")"
        case .dict(let d):
            if d.isEmpty { return pad + "{\n" + pad + "}" }
            var s = pad + "{\n"
            for k in d.keys.sorted(by: { $0.bytesPrecede($1) }) {
                s += inner + quote(k) + " = " + describe(d[k]!, level: level + 1) + ";\n"
            }
            return s + pad + "}"
        case .data, .bool: return leaf(value)
        default: return quote(leaf(value))
        }
    }

    /// A value as `defaults read DOMAIN KEY` prints it: a string, number or date bare, a
    /// container as in a domain.
    static func describeTop(_ value: PlistValue) -> String {
        switch value {
        case .array, .dict: describe(value)
        default: leaf(value)
        }
    }

    /// The text of a value that holds no other, unquoted.
    private static func leaf(_ value: PlistValue) -> String {
        switch value {
        case .string(let s): return s
        case .integer(let i): return String(i)
        case .unsignedInteger(let u): return String(u)
        case .real(let d):
            return d.isNaN ? "nan" : d.isInfinite ? (d < 0 ? "-inf" : "inf") : formatReal(d)
        case .bool(let b): return b ? "1" : "0"
        case .date(let d): return dateText(d)
        case .data(let d): return dataText(d)
        case .array, .dict: return describe(value)
        }
    }

    /// Data as `defaults read` prints it since macOS 10.15 (CFData's description): up to 24
    /// bytes whole (`{length = 3, bytes = 0x0102ff}`); longer, the first 16 and the last 8 in
    /// groups of four (`{length = 32, bytes = 0x00010203 04050607 08090a0b 0c0d0e0f ...
    /// 18191a1b 1c1d1e1f }`). `defaults export` writes every byte.
    static func dataText(_ d: Data) -> String {
        let b = [UInt8](d)
        func hex(_ s: ArraySlice<UInt8>) -> String { String(lowercaseHex: s) }
        guard b.count > 24 else { return "{length = \(b.count), bytes = 0x\(hex(b[...]))}" }
        func groups(_ range: Range<Int>) -> String {
            stride(from: range.lowerBound, to: range.upperBound, by: 4).map {
                hex(b[$0..<($0 + 4)]) + " "
            }.joined()
        }
        return
            "{length = \(b.count), bytes = 0x\(groups(0..<16))... \(groups((b.count - 8)..<b.count))}"
    }

    /// A finite real as `NSNumber.stringValue` writes it (and `Defaults.string(forKey:)`
    /// returns it): the shortest digits that read back as the same Double, a whole number
    /// without a fraction ("3", "-0", "1000000000000000", "0.1", "1e+20"). Whole reals from
    /// 1e15 up to 2^53 included (never "1000000000000000.0"), and -0.0 as "-0", not "0".
    static func formatReal(_ d: Double) -> String {
        let s = "\(d)"
        return s.hasSuffix(".0") ? String(s.dropLast(2)) : s
    }

    /// `yyyy-MM-dd HH:mm:ss +0000` in the proleptic Gregorian calendar, as `PlistDate` (and so
    /// export and the wire) count days; not DateFormatter, whose calendar is Julian before 1582.
    static func dateText(_ d: Date) -> String {
        guard let f = PlistDate.fields(of: d) else { return PlistDate.format(d) }
        return String(
            format: "%04d-%02d-%02d %02d:%02d:%02d +0000", f.year, f.month, f.day, f.hour, f.minute,
            f.second)
    }

    /// Quotes unless the string is ASCII letters and digits only, as defaults(1) does.
    static func quote(_ s: String) -> String {
        let bare =
            !s.isEmpty
            && s.unicodeScalars.allSatisfy { c in
                c.isASCII && CharacterSet.alphanumerics.contains(c)
            }
        if bare { return s }
        var out = "\""
        for c in s.unicodeScalars {
            switch c {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            default:
                if c.value < 0x20 || c.value > 0x7E {
                    if c.value > 0xFFFF {
                        for u in String(c).utf16 { out += String(format: "\\U%04x", u) }
                    } else {
                        out += String(format: "\\U%04x", c.value)
                    }
                } else {
                    out.unicodeScalars.append(c)
                }
            }
        }
        return out + "\""
    }
}
