import Foundation
import VaultProtocol

/// The old-style (OpenStep) property-list text that `defaults read` prints.
enum PlistText {
    static func describe(_ value: PlistValue, level: Int = 0) -> String {
        let pad = String(repeating: "    ", count: level)
        let inner = String(repeating: "    ", count: level + 1)
        switch value {
        case .string(let s): return quote(s)
        case .integer(let i): return String(i)
        case .unsignedInteger(let u): return String(u)
        case .real(let d): return d.isNaN ? "nan" : d.isInfinite ? (d < 0 ? "-inf" : "inf") : formatReal(d)
        case .bool(let b): return b ? "1" : "0"
        case .date(let d): return quote(dateText(d))
        case .data(let d): return "{length = \(d.count), bytes = 0x\(d.map { String(format: "%02x", $0) }.joined())}"
        case .array(let a):
            if a.isEmpty { return "(\n\(pad))" }
            return "(\n" + a.map { inner + describe($0, level: level + 1) }.joined(separator: ",\n") + "\n\(pad))"
        case .dict(let d):
            if d.isEmpty { return "{\n\(pad)}" }
            var s = "{\n"
            for k in d.keys.sorted() {
                let v = d[k]!
                let sep: String
                switch v {
                case .array, .dict: sep = " =     "
                default: sep = " = "
                }
                s += inner + quote(k) + sep + describe(v, level: level + 1) + ";\n"
            }
            return s + pad + "}"
        }
    }

    /// A value as `defaults read DOMAIN KEY` prints it: strings bare, the rest as text.
    static func describeTop(_ value: PlistValue) -> String {
        if case .string(let s) = value { return s }
        if case .date(let d) = value { return dateText(d) }
        return describe(value)
    }

    static func formatReal(_ d: Double) -> String {
        if d == d.rounded(), abs(d) < 1e15 { return String(Int64(d)) }
        return "\(d)"
    }

    /// `yyyy-MM-dd HH:mm:ss +0000` in the proleptic Gregorian calendar, as `PlistDate` (and so
    /// export and the wire) count days; not DateFormatter, whose calendar is Julian before 1582.
    static func dateText(_ d: Date) -> String {
        guard let f = PlistDate.fields(of: d) else { return PlistDate.format(d) }
        return String(format: "%04d-%02d-%02d %02d:%02d:%02d +0000", f.year, f.month, f.day, f.hour, f.minute, f.second)
    }

    /// Quotes unless the string is a bare word (letters, digits, '.', '_', '/', '$').
    static func quote(_ s: String) -> String {
        let bare = !s.isEmpty && s.unicodeScalars.allSatisfy { c in
            c.isASCII && (CharacterSet.alphanumerics.contains(c) || ".$/_".unicodeScalars.contains(c))
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
