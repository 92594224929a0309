import Foundation

extension PropertyListCodec {
    /// Refuses a binary plist whose tree, every reference followed, would pass
    /// `maximumExpandedSize` or `PlistValue.maximumDepth`, or that refers to itself, before
    /// Foundation reads it: `PropertyListSerialization` builds a separate copy for each
    /// reference (a file of a few hundred bytes can expand to gigabytes). It reads only the
    /// file's trailer, offset table, object markers and references (the format's public
    /// layout), counting each object once. Whatever it cannot read this way (an integer
    /// wider than 8 bytes, which Foundation would still take, an offset or reference out of
    /// the file) is refused too: what this check cannot see through must not reach Foundation.
    static func checkBinaryReferences(_ data: Data) throws {
        let b = [UInt8](data)
        guard b.count >= 8, b.starts(with: Array("bplist0".utf8)) else { return }
        var check = try BinaryReferenceCheck(b)
        if try check.expanded(check.top, 0) > maximumExpandedSize { throw tooLargeExpanded }
    }
}

/// `PropertyListCodec.checkBinaryReferences`'s walk of one file: its layout, read from the
/// trailer, and each object's expanded size once counted.
private struct BinaryReferenceCheck {
    let b: [UInt8]
    /// Where the 32-byte trailer starts.
    let trailer: Int
    let offsetSize: Int
    let refSize: Int
    /// The number of objects, the top object, and where the offset table starts.
    var count = 0
    var top = 0
    var table = 0
    /// Each object's expanded size in bytes: -1 not counted yet, -2 being counted.
    var sizes: [Int] = []
    let unreadable = VaultError(
        .invalidPropertyList,
        "not a binary property list vaultd can read safely (widths, offsets or references out of range)"
    )

    init(_ b: [UInt8]) throws {
        self.b = b
        guard b.count >= 40 else { throw unreadable }
        trailer = b.count - 32
        offsetSize = Int(b[trailer + 6])
        refSize = Int(b[trailer + 7])
        count = try uint(trailer + 8, 8)
        top = try uint(trailer + 16, 8)
        table = try uint(trailer + 24, 8)
        sizes = [Int](repeating: -1, count: count)
    }

    /// The unsigned big-endian integer of `n` bytes (1 to 8) at `at`: a count, offset or
    /// reference, all below the file's size.
    func uint(_ at: Int, _ n: Int) throws -> Int {
        guard (1...8).contains(n), at >= 0, at <= b.count - n else { throw unreadable }
        var v: UInt64 = 0
        for i in 0..<n { v = v << 8 | UInt64(b[at + i]) }
        guard v <= UInt64(b.count) else { throw unreadable }
        return Int(v)
    }

    /// Refuses a dictionary whose keys (the `n` references at `at`) hold two that
    /// differ only in Unicode normalisation (`normalisationTwin`).
    func checkKeys(_ at: Int, _ n: Int) throws {
        guard n > 1 else { return }
        var keys: [String] = []
        keys.reserveCapacity(n)
        var plain = true  // ASCII keys only: no twins possible
        for r in 0..<n {
            let off = try uint(
                table + (try uint(at + r * refSize, refSize)) * offsetSize, offsetSize)
            guard off >= 8, off < trailer else { throw unreadable }
            let kind = b[off] >> 4
            // not a string key: Foundation refuses it
            guard kind == 0x5 || kind == 0x6 else { return }
            var len = Int(b[off] & 0x0F)
            var start = off + 1
            if len == 0x0F {
                guard start < b.count, b[start] >> 4 == 0x1 else { throw unreadable }
                let width = 1 << Int(b[start] & 0x0F)
                len = try uint(start + 1, width)
                start += 1 + width
            }
            let bytes = len * (kind == 0x6 ? 2 : 1)
            guard start + bytes <= trailer else { throw unreadable }
            if kind == 0x5 {
                keys.append(String(decoding: b[start..<(start + bytes)], as: UTF8.self))
            } else {
                plain = false
                let units = stride(from: start, to: start + bytes, by: 2).map {
                    UInt16(b[$0]) << 8 | UInt16(b[$0 + 1])
                }
                keys.append(String(decoding: units, as: UTF16.self))
            }
        }
        if !plain, let twin = PropertyListCodec.normalisationTwin(keys) {
            throw VaultError(
                .invalidPropertyList,
                PropertyListCodec.twinsMessage(twin, PropertyListCodec.importTwins))
        }
    }

    /// Object `i`'s size with everything it refers to (`value(from:)`'s count: 16 bytes an
    /// object, plus its bytes), at `depth` containers deep; throws once past
    /// `maximumExpandedSize`.
    mutating func expanded(_ i: Int, _ depth: Int) throws -> Int {
        guard depth < PlistValue.maximumDepth else {
            throw VaultError(
                .invalidPropertyList,
                "property list nested deeper than \(PlistValue.maximumDepth)")
        }
        guard i < count else { throw unreadable }
        let off = try uint(table + i * offsetSize, offsetSize)
        guard off >= 8, off < trailer else { throw unreadable }
        if sizes[i] >= 0 { return sizes[i] }
        if sizes[i] == -2 {
            throw VaultError(.invalidPropertyList, "the property list contains itself")
        }
        let kind = b[off] >> 4
        // Only the kinds a preference value can be: booleans (0x08, 0x09), integers,
        // reals, dates, data, strings, arrays, dictionaries. Anything else (null, fill,
        // UIDs, sets: Foundation's bridging of a set crashed vaultd) is refused here.
        guard
            [0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0xA, 0xD].contains(kind) || b[off] == 0x08
                || b[off] == 0x09
        else {
            throw VaultError(
                .invalidPropertyList,
                String(
                    format:
                        "the property list holds an object of a kind preferences do not take (marker 0x%02X)",
                    b[off]))
        }
        var n = Int(b[off] & 0x0F)
        var at = off + 1
        if n == 0x0F && [0x4, 0x5, 0x6, 0xA, 0xD].contains(kind) {
            guard at < b.count, b[at] >> 4 == 0x1 else { throw unreadable }
            let width = 1 << Int(b[at] & 0x0F)
            n = try uint(at + 1, width)
            at += 1 + width
        }
        var total = 16
        switch kind {
        case 0x4, 0x5: total += n
        case 0x6: total += 2 * n
        case 0xA, 0xD:
            sizes[i] = -2
            if kind == 0xD { try checkKeys(at, n) }
            for r in 0..<(kind == 0xD ? 2 * n : n) {
                // A dictionary's keys (its first n references) count their bytes only, as
                // `value(from:)` counts them.
                let isKey = kind == 0xD && r < n
                total +=
                    try expanded(try uint(at + r * refSize, refSize), depth + 1)
                    - (isKey ? 16 : 0)
                if total > PropertyListCodec.maximumExpandedSize {
                    throw PropertyListCodec.tooLargeExpanded
                }
            }
        default: break
        }
        sizes[i] = total
        return total
    }
}
