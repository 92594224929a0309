/// The framing of a D-Bus message as the specification defines it ("Message Format"): a fixed
/// 16-byte start (endianness `l` or `B`, type, flags, protocol version 1, body length,
/// serial, header fields' array length), the header fields (an array of `(yv)`, each 8-aligned),
/// padding to 8, then the body. `BusRelay` reads it to know a message's size before its body
/// and to cut an oversized one; only the header, bounded by `maximumHeader`, is ever held.
struct BusHeader {
    /// The bytes of the 16-byte start and of the header fields, with the padding after them.
    static let fixedSize = 16
    /// The largest header vaultd reads (bytes, with the fixed start and padding). The bus lets
    /// through only the fields the specification names, and each but the path is at most 255
    /// bytes; a path of vaultd's is a few hundred. A longer header is no call of a client's.
    static let maximumHeader = 64 << 10

    enum MessageType: UInt8 {
        case methodCall = 1
        case methodReturn = 2
        case error = 3
        case signal = 4
    }

    /// Header field codes (the specification's table).
    enum Field: UInt8 {
        case path = 1
        case interface, member, errorName, replySerial, destination, sender, signature,
            unixFDs
    }

    /// NO_REPLY_EXPECTED, in the flags byte.
    static let noReplyExpected: UInt8 = 0x1

    let bytes: [UInt8]
    let littleEndian: Bool
    let type: UInt8
    let flags: UInt8
    let bodyLength: Int
    let serial: UInt32
    /// The header fields vaultd reads: code → (the field's bytes in `bytes`, its value).
    private(set) var fields: [UInt8: (range: Range<Int>, value: Value)] = [:]

    enum Value {
        case string(String)
        case uint32(UInt32)
    }

    /// The start of a message: its header's whole length (with padding) and body length, or
    /// nil when `start` (at least `fixedSize` bytes) is no D-Bus message start.
    static func lengths(_ start: ArraySlice<UInt8>) -> (header: Int, body: Int)? {
        guard start.count >= fixedSize else { return nil }
        let b = Array(start.prefix(fixedSize))
        guard b[0] == UInt8(ascii: "l") || b[0] == UInt8(ascii: "B"), b[3] == 1 else { return nil }
        let little = b[0] == UInt8(ascii: "l")
        let fields = Int(uint32(b, 12, little: little))
        return (align(fixedSize + fields, 8), Int(uint32(b, 4, little: little)))
    }

    /// Reads a whole header (`lengths(...).header` bytes); nil when its fields do not parse.
    init?(_ bytes: [UInt8]) {
        guard let (headerLength, body) = Self.lengths(bytes[...]), headerLength == bytes.count
        else { return nil }
        self.bytes = bytes
        littleEndian = bytes[0] == UInt8(ascii: "l")
        type = bytes[1]
        flags = bytes[2]
        bodyLength = body
        serial = Self.uint32(bytes, 8, little: littleEndian)
        let end = Self.fixedSize + Int(Self.uint32(bytes, 12, little: littleEndian))
        var i = Self.fixedSize
        while i < end {
            i = Self.align(i, 8)
            let start = i
            guard let (value, next) = field(at: i, end: end) else { return nil }
            fields[bytes[start]] = (start..<next, value)
            i = next
        }
    }

    /// The field at `i` (8-aligned): its value and where it ends. Only the types the
    /// specification gives its fields are read (o, s, g, u); any other fails the header.
    private func field(at start: Int, end: Int) -> (Value, Int)? {
        var i = start + 1
        guard i < end else { return nil }
        let signatureLength = Int(bytes[i])
        i += 1
        guard signatureLength == 1, i + 2 <= end, bytes[i + 1] == 0 else { return nil }
        let signature = bytes[i]
        i += 2
        switch signature {
        case UInt8(ascii: "o"), UInt8(ascii: "s"):
            i = Self.align(i, 4)
            guard i + 4 <= end else { return nil }
            let n = Int(Self.uint32(bytes, i, little: littleEndian))
            i += 4
            guard n < end, i + n + 1 <= end else { return nil }
            return (.string(String(decoding: bytes[i..<i + n], as: UTF8.self)), i + n + 1)
        case UInt8(ascii: "g"):
            let n = Int(bytes[i])
            guard i + 1 + n + 1 <= end else { return nil }
            return (.string(String(decoding: bytes[i + 1..<i + 1 + n], as: UTF8.self)), i + n + 2)
        case UInt8(ascii: "u"):
            i = Self.align(i, 4)
            guard i + 4 <= end else { return nil }
            return (.uint32(Self.uint32(bytes, i, little: littleEndian)), i + 4)
        default:
            return nil
        }
    }

    func string(_ f: Field) -> String? {
        if case .string(let s)? = fields[f.rawValue]?.value { return s }
        return nil
    }

    func uint32(_ f: Field) -> UInt32? {
        if case .uint32(let u)? = fields[f.rawValue]?.value { return u }
        return nil
    }

    /// The same header for a message without a body: body length 0, and neither SIGNATURE
    /// nor UNIX_FDS (no descriptors go with it). Each kept field is copied whole to an
    /// 8-aligned place, so what it holds stays aligned as it was.
    func withoutBody() -> [UInt8] {
        var out = Array(bytes[0..<Self.fixedSize])
        for (code, f) in fields.sorted(by: { $0.value.range.lowerBound < $1.value.range.lowerBound }
        )
        where code != Field.signature.rawValue && code != Field.unixFDs.rawValue {
            while out.count % 8 != 0 { out.append(0) }
            out += bytes[f.range]
        }
        let fieldsLength = out.count - Self.fixedSize
        while out.count % 8 != 0 { out.append(0) }
        Self.put(0, &out, 4, little: littleEndian)
        Self.put(UInt32(fieldsLength), &out, 12, little: littleEndian)
        return out
    }

    /// The signature of the body ("" for none).
    var signature: String { string(.signature) ?? "" }

    static func align(_ n: Int, _ to: Int) -> Int { (n + to - 1) / to * to }

    static func uint32(_ b: [UInt8], _ at: Int, little: Bool) -> UInt32 {
        let v = (0..<4).reduce(UInt32(0)) { $0 | UInt32(b[at + $1]) << (8 * UInt32($1)) }
        return little ? v : v.byteSwapped
    }

    static func put(_ v: UInt32, _ b: inout [UInt8], _ at: Int, little: Bool) {
        let w = little ? v : v.byteSwapped
        for k in 0..<4 { b[at + k] = UInt8(truncatingIfNeeded: w >> (8 * UInt32(k))) }
    }
}
