import Foundation

/// Binary property lists (`bplist00`), written and read here rather than by Foundation, for
/// two things Foundation's codec on Linux does not do:
///
/// - **The same bytes for the same values.** Dictionary keys are written sorted by their UTF-8
///   bytes and objects numbered in one fixed order (depth first, a container before its
///   contents, a dictionary's keys before its values; equal strings written once, where they
///   first occur), so exporting an unchanged domain twice gives identical files. Foundation
///   walked a Swift dictionary, whose order changes from process to process.
/// - **Reals bit for bit.** A real is its 8 bytes, big-endian, as the format stores it: a
///   NaN keeps its sign and payload (CFNumber made every NaN the one quiet NaN, when
///   writing and when reading), and -0.0 stays -0.0.
///
/// The layout: the `bplist00` header, the objects, the offset table (each object's offset,
/// in the fewest bytes that hold the largest), and a 32-byte trailer (offset width, reference
/// width, object count, top object, the table's offset). Markers: 0x08/0x09 false/true,
/// 0x1n an integer of 2^n bytes (1, 2 and 4 unsigned, 8 signed, 16 for values above
/// Int64.max), 0x23 a real of 8 bytes (0x22: 4), 0x33 a date (seconds since 2001 as a real),
/// 0x4n data, 0x5n an ASCII string, 0x6n a UTF-16BE one, 0xAn an array, 0xDn a dictionary
/// (n the count, or 0xF followed by an integer object holding it).
enum BinaryPropertyList {
    /// One object of the flattened tree; containers hold their children's object numbers.
    private enum Object {
        case bool(Bool)
        case integer(Int64)
        case unsigned(UInt64)
        case real(UInt64)
        case date(UInt64)
        case data(Data)
        case string([UInt8])
        case array([Int])
        case dict(keys: [Int], values: [Int])
    }

    static func encode(_ value: PlistValue) -> Data {
        let objects = flatten(value)
        let refSize = objects.count < 1 << 8 ? 1 : objects.count < 1 << 16 ? 2 : 4
        var writer = Writer()
        var offsets: [Int] = []
        offsets.reserveCapacity(objects.count)
        for o in objects {
            offsets.append(writer.out.count)
            writer.write(o, refSize: refSize)
        }
        let tableOffset = writer.out.count
        let offsetSize =
            tableOffset < 1 << 8 ? 1 : tableOffset < 1 << 16 ? 2 : tableOffset < 1 << 32 ? 4 : 8
        for o in offsets { writer.bigEndian(UInt64(o), offsetSize) }
        writer.out += [0, 0, 0, 0, 0, 0, UInt8(offsetSize), UInt8(refSize)]
        writer.bigEndian(UInt64(objects.count), 8)
        writer.bigEndian(0, 8)  // the top object is the first
        writer.bigEndian(UInt64(tableOffset), 8)
        return Data(writer.out)
    }

    /// `value`'s tree as objects in the order they are written: depth first, a container
    /// before its contents, a dictionary's keys (sorted by their UTF-8 bytes) before its
    /// values; equal strings (the same bytes) are one object, as Apple's writer makes them.
    private static func flatten(_ value: PlistValue) -> [Object] {
        var objects: [Object] = []
        var strings: [[UInt8]: Int] = [:]
        func add(_ v: PlistValue) -> Int {
            switch v {
            case .string(let s):
                let bytes = Array(s.utf8)
                if let i = strings[bytes] { return i }
                objects.append(.string(bytes))
                strings[bytes] = objects.count - 1
                return objects.count - 1
            case .integer(let i): objects.append(.integer(i))
            case .unsignedInteger(let u):
                objects.append(u > UInt64(Int64.max) ? .unsigned(u) : .integer(Int64(u)))
            case .real(let d): objects.append(.real(d.bitPattern))
            case .bool(let b): objects.append(.bool(b))
            case .date(let d): objects.append(.date(d.timeIntervalSinceReferenceDate.bitPattern))
            case .data(let d): objects.append(.data(d))
            case .array(let a):
                let me = objects.count
                objects.append(.array([]))
                let children = a.map(add)
                objects[me] = .array(children)
                return me
            case .dict(let d):
                let me = objects.count
                objects.append(.dict(keys: [], values: []))
                let sorted = d.sortedByKey()  // by UTF-8 bytes
                let keys = sorted.map { add(.string($0.key)) }
                let values = sorted.map { add($0.value) }
                objects[me] = .dict(keys: keys, values: values)
                return me
            }
            return objects.count - 1
        }
        _ = add(value)
        return objects
    }

    /// The file's bytes as they are written: the header, then objects in the format's
    /// encodings.
    private struct Writer {
        var out: [UInt8] = Array("bplist00".utf8)

        /// `v`'s low `width` bytes, most significant first.
        mutating func bigEndian(_ v: UInt64, _ width: Int) {
            for i in stride(from: width - 1, through: 0, by: -1) {
                out.append(UInt8(truncatingIfNeeded: v >> (8 * UInt64(i))))
            }
        }

        mutating func integer(_ v: Int64) {
            // Apple's widths: a non-negative value in the fewest of 1, 2 or 4 bytes, read as
            // unsigned; anything else in 8, read as signed.
            if v >= 0 && v <= 0xFF {
                out.append(0x10)
                bigEndian(UInt64(v), 1)
            } else if v >= 0 && v <= 0xFFFF {
                out.append(0x11)
                bigEndian(UInt64(v), 2)
            } else if v >= 0 && v <= 0xFFFF_FFFF {
                out.append(0x12)
                bigEndian(UInt64(v), 4)
            } else {
                out.append(0x13)
                bigEndian(UInt64(bitPattern: v), 8)
            }
        }

        /// A marker of `kind` with `count` in its low nibble, or 0xF and an integer object.
        mutating func header(_ kind: UInt8, _ count: Int) {
            if count < 15 {
                out.append(kind << 4 | UInt8(count))
            } else {
                out.append(kind << 4 | 0x0F)
                integer(Int64(count))
            }
        }

        /// One object; its references (object numbers) in `refSize` bytes each.
        mutating func write(_ o: Object, refSize: Int) {
            switch o {
            case .bool(let b): out.append(b ? 0x09 : 0x08)
            case .integer(let i): integer(i)
            case .unsigned(let u):
                out.append(0x14)
                bigEndian(0, 8)
                bigEndian(u, 8)
            case .real(let bits):
                out.append(0x23)
                bigEndian(bits, 8)
            case .date(let bits):
                out.append(0x33)
                bigEndian(bits, 8)
            case .data(let d):
                header(0x4, d.count)
                out += d
            case .string(let bytes):
                if bytes.allSatisfy({ $0 < 0x80 }) {
                    header(0x5, bytes.count)
                    out += bytes
                } else {
                    let units = Array(String(decoding: bytes, as: UTF8.self).utf16)
                    header(0x6, units.count)
                    for u in units { bigEndian(UInt64(u), 2) }
                }
            case .array(let refs):
                header(0xA, refs.count)
                for r in refs { bigEndian(UInt64(r), refSize) }
            case .dict(let keys, let values):
                header(0xD, keys.count)
                for r in keys + values { bigEndian(UInt64(r), refSize) }
            }
        }
    }

    /// Reads a binary property list that `PropertyListCodec.checkBinaryReferences` has
    /// accepted (its widths, offsets and references in range, its depth and expanded size
    /// bounded, no object containing itself, only the kinds preferences take). Still checks
    /// every read against the file's end. Throws InvalidPropertyList for what a preference
    /// cannot be: a dictionary key that is not a string, an ASCII string with a byte above
    /// 0x7F, an integer beyond 64 bits, a date outside years 0 to 9999.
    static func decode(_ data: Data) throws -> PlistValue {
        let file = try BinaryPropertyListLayout([UInt8](data))
        return try file.object(file.top, 0)
    }
}

/// A binary property list's layout, from its trailer: the widths of its offsets and
/// references, its object count, top object and offset table; and its big-endian integers,
/// every read checked against the file's end. What `BinaryPropertyList.decode` and
/// `PropertyListCodec.checkBinaryReferences` read a file by.
struct BinaryPropertyListLayout {
    let b: [UInt8]
    /// Where the 32-byte trailer starts.
    let trailer: Int
    let offsetSize: Int
    let refSize: Int
    /// The number of objects, the top object, and where the offset table starts.
    let count: Int
    let top: Int
    let table: Int
    static let unreadable = VaultError(
        .invalidPropertyList,
        "not a binary property list vaultd can read safely (widths, offsets or references out of range)"
    )
    var unreadable: VaultError { Self.unreadable }

    init(_ b: [UInt8]) throws {
        guard b.count >= 40 else { throw Self.unreadable }
        self.b = b
        trailer = b.count - 32
        offsetSize = Int(b[trailer + 6])
        refSize = Int(b[trailer + 7])
        count = try Self.int(b, trailer + 8, 8)
        top = try Self.int(b, trailer + 16, 8)
        table = try Self.int(b, trailer + 24, 8)
    }

    /// The unsigned big-endian integer of `n` bytes (1 to 8) at `at`.
    static func uint(_ b: [UInt8], _ at: Int, _ n: Int) throws -> UInt64 {
        guard (1...8).contains(n), at >= 0, at <= b.count - n else { throw unreadable }
        var v: UInt64 = 0
        for i in 0..<n { v = v << 8 | UInt64(b[at + i]) }
        return v
    }

    /// As `uint`, for a count, offset or reference: at most the file's size.
    static func int(_ b: [UInt8], _ at: Int, _ n: Int) throws -> Int {
        let v = try uint(b, at, n)
        guard v <= UInt64(b.count) else { throw unreadable }
        return Int(v)
    }

    func uint(_ at: Int, _ n: Int) throws -> UInt64 { try Self.uint(b, at, n) }
    func int(_ at: Int, _ n: Int) throws -> Int { try Self.int(b, at, n) }
}

/// `BinaryPropertyList.decode`'s reading of objects.
extension BinaryPropertyListLayout {
    /// Object `i` and what it contains, at `depth` containers deep.
    fileprivate func object(_ i: Int, _ depth: Int) throws -> PlistValue {
        guard i < count, depth < PlistValue.maximumDepth else { throw unreadable }
        let off = try int(table + i * offsetSize, offsetSize)
        guard off >= 8, off < trailer else { throw unreadable }
        let marker = b[off]
        let kind = marker >> 4
        var n = Int(marker & 0x0F)
        var at = off + 1
        if n == 0x0F && [0x4, 0x5, 0x6, 0xA, 0xD].contains(kind) {
            guard at < trailer, b[at] >> 4 == 0x1 else { throw unreadable }
            let width = 1 << Int(b[at] & 0x0F)
            n = try int(at + 1, width)
            at += 1 + width
        }
        switch kind {
        case 0xA:
            _ = try bytes(at, n * refSize)
            var out: [PlistValue] = []
            out.reserveCapacity(n)
            for r in 0..<n {
                out.append(try object(try int(at + r * refSize, refSize), depth + 1))
            }
            return .array(out)
        case 0xD:
            _ = try bytes(at, 2 * n * refSize)
            var out = PlistDictionary(minimumCapacity: n)
            for r in 0..<n {
                guard
                    case .string(let key) = try object(
                        try int(at + r * refSize, refSize), depth + 1)
                else {
                    throw VaultError(
                        .invalidPropertyList,
                        "a dictionary of the property list has a key that is not a string")
                }
                out[key] = try object(try int(at + (n + r) * refSize, refSize), depth + 1)
            }
            return .dict(out)
        default:
            if let value = try scalar(marker, n, at) { return value }
        }
        throw VaultError(
            .invalidPropertyList,
            String(
                format:
                    "the property list holds an object of a kind preferences do not take (marker 0x%02X)",
                marker))
    }

    /// The `length` bytes at `at`, before the trailer.
    fileprivate func bytes(_ at: Int, _ length: Int) throws -> ArraySlice<UInt8> {
        guard length >= 0, at + length <= trailer else { throw unreadable }
        return b[at..<(at + length)]
    }

    /// The object of `marker` that is not a container, its count or size `n`, its
    /// contents at `at`; nil for a kind preferences do not take.
    fileprivate func scalar(_ marker: UInt8, _ n: Int, _ at: Int) throws -> PlistValue? {
        switch marker >> 4 {
        case 0x0:
            guard marker == 0x08 || marker == 0x09 else { return nil }
            return .bool(marker == 0x09)
        case 0x1:
            switch n {
            case 0, 1, 2: return .integer(Int64(try uint(at, 1 << n)))
            case 3: return .integer(Int64(bitPattern: try uint(at, 8)))
            case 4:
                // 128 bits, signed: what fits 64 bits, as Int64, or as UInt64 above Int64.max.
                let high = try uint(at, 8)
                let low = try uint(at + 8, 8)
                if high == 0 {
                    return low > UInt64(Int64.max)
                        ? .unsignedInteger(low) : .integer(Int64(low))
                }
                if high == UInt64.max && low > UInt64(Int64.max) {
                    return .integer(Int64(bitPattern: low))
                }
                throw VaultError(
                    .invalidPropertyList, "the property list holds an integer beyond 64 bits")
            default: throw unreadable
            }
        case 0x2:
            if n == 2 { return .real(Double(Float(bitPattern: UInt32(try uint(at, 4))))) }
            if n == 3 { return .real(Double(bitPattern: try uint(at, 8))) }
            throw unreadable
        case 0x3:
            guard marker == 0x33 else { throw unreadable }
            let d = Date(timeIntervalSinceReferenceDate: Double(bitPattern: try uint(at, 8)))
            guard PlistDate.isSupported(d) else {
                throw VaultError(
                    .invalidPropertyList,
                    "a date of \(d.timeIntervalSinceReferenceDate) s since 2001-01-01 is outside years 0 to 9999"
                )
            }
            return .date(d)
        case 0x4:
            return .data(Data(try bytes(at, n)))
        case 0x5:
            let s = try bytes(at, n)
            guard s.allSatisfy({ $0 < 0x80 }) else {
                throw VaultError(
                    .invalidPropertyList,
                    "an ASCII string of the property list holds a byte above 0x7F")
            }
            return .string(String(decoding: s, as: UTF8.self))
        case 0x6:
            let s = try bytes(at, 2 * n)
            let units = stride(from: s.startIndex, to: s.endIndex, by: 2).map {
                UInt16(b[$0]) << 8 | UInt16(b[$0 + 1])
            }
            return .string(String(decoding: units, as: UTF16.self))
        default:
            return nil
        }
    }
}
