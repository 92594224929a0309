extension JSON {
    /// The compact UTF-8 serialization (object keys sorted, so output is deterministic).
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        write(into: &out)
        return out
    }

    /// The compact serialization as a String.
    public var text: String { String(decoding: serialized(), as: UTF8.self) }

    public func write(into out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .number(let n): out.append(contentsOf: n.utf8)
        case .string(let s): JSON.writeString(s, into: &out)
        case .array(let a):
            out.append(UInt8(ascii: "["))
            for (i, v) in a.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                v.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let o):
            out.append(UInt8(ascii: "{"))
            // Keys in the order of their UTF-8 bytes (code point order), so equal objects
            // serialize alike (the pairs sorted, not the keys: a key's value is not hashed
            // for again). Not String's `<`, whose Unicode comparison (by canonical
            // equivalence) costs far more, on every object an add or a reply writes.
            // An object of one member (a reply's `parameters`, say) has nothing to sort.
            if o.count == 1, let member = o.first {
                JSON.writeString(member.key, into: &out)
                out.append(UInt8(ascii: ":"))
                member.value.write(into: &out)
            } else {
                // `ExactString`'s `<` is this byte order; it is total, where Swift's `<` leaves
                // two keys differing only in Unicode normalisation unordered.
                for (i, member) in o.sortedByKey().enumerated() {
                    if i > 0 { out.append(UInt8(ascii: ",")) }
                    JSON.writeString(member.key, into: &out)
                    out.append(UInt8(ascii: ":"))
                    member.value.write(into: &out)
                }
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// `s` as a JSON string: quotes, backslashes and control characters escaped, every
    /// other byte as it is (UTF-8). Runs of bytes that need no escape are copied at once.
    static func writeString(_ s: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var s = s
        s.withUTF8 { bytes in
            guard let base = bytes.baseAddress else { return }
            // By index through the base pointer: `enumerated()` with a `where` clause costs
            // many times more a byte, and a client's request is a dozen strings.
            var start = 0
            for i in 0..<bytes.count {
                let b = base[i]
                guard b < 0x20 || b == 0x22 || b == 0x5C else { continue }
                out.append(contentsOf: UnsafeBufferPointer(start: base + start, count: i - start))
                start = i + 1
                switch b {
                case 0x22, 0x5C:
                    out.append(0x5C)
                    out.append(b)
                case 0x0A:
                    out.append(0x5C)
                    out.append(UInt8(ascii: "n"))
                case 0x0D:
                    out.append(0x5C)
                    out.append(UInt8(ascii: "r"))
                case 0x09:
                    out.append(0x5C)
                    out.append(UInt8(ascii: "t"))
                default:
                    out.append(contentsOf: "\\u00".utf8)
                    out.append(hexDigit(b >> 4))
                    out.append(hexDigit(b & 0xF))
                }
            }
            out.append(
                contentsOf: UnsafeBufferPointer(start: base + start, count: bytes.count - start))
        }
        out.append(UInt8(ascii: "\""))
    }

    private static func hexDigit(_ v: UInt8) -> UInt8 { v < 10 ? 0x30 + v : 0x57 + v }
}
