#if canImport(Glibc)
import Glibc
#endif

extension String {
    /// Whether `other` is the same UTF-8 bytes: how item attributes, access groups, app
    /// groups and domains are compared, as the store compares them. Swift's `==`
    /// (and `Set`, `contains`) compares by canonical equivalence: precomposed `é` equals
    /// `e` + U+0301, and the Kelvin sign U+212A equals `K`.
    public func sameBytes(_ other: String) -> Bool {
        let a = utf8
        let b = other.utf8
        guard a.count == b.count else { return false }
        // Both contiguous (native strings are): one memcmp, where `elementsEqual` would go
        // byte by byte through the generic iterator (two comparisons per candidate item of
        // every lookup).
        let same = a.withContiguousStorageIfAvailable { pa in
            b.withContiguousStorageIfAvailable { pb in
                pa.isEmpty || memcmp(pa.baseAddress!, pb.baseAddress!, pa.count) == 0
            }
        }
        return (same ?? nil) ?? a.elementsEqual(b)
    }
}

extension String {
    /// Whether this string's UTF-8 bytes come before `other`'s (lexicographically, a prefix
    /// first): code point order, a total order on distinct byte strings.
    public func bytesPrecede(_ other: String) -> Bool {
        let a = utf8
        let b = other.utf8
        let order = a.withContiguousStorageIfAvailable { pa in
            b.withContiguousStorageIfAvailable { pb -> Bool in
                let common = Swift.min(pa.count, pb.count)
                let c = common == 0 ? 0 : memcmp(pa.baseAddress!, pb.baseAddress!, common)
                return c != 0 ? c < 0 : pa.count < pb.count
            }
        }
        return (order ?? nil) ?? a.lexicographicallyPrecedes(b)
    }
}

extension Sequence where Element == String {
    /// Whether an element is the same UTF-8 bytes as `s` (`String.sameBytes`).
    public func containsBytes(_ s: String) -> Bool { contains { $0.sameBytes(s) } }
}

extension String {
    /// `bytes` as lowercase hexadecimal, two digits a byte (as `sodium_bin2hex`): written in
    /// one pass into the string's own storage, without Foundation's formatter, so it may
    /// stand on a per-call path.
    public init(lowercaseHex bytes: UnsafeRawBufferPointer) {
        self.init(unsafeUninitializedCapacity: bytes.count * 2) { out in
            var i = 0
            for b in bytes {
                out[i] = hexDigit(b >> 4)
                out[i + 1] = hexDigit(b & 15)
                i += 2
            }
            return i
        }
    }

    public init(lowercaseHex bytes: [UInt8]) {
        self = bytes.withUnsafeBytes { String(lowercaseHex: $0) }
    }

    public init(lowercaseHex bytes: ArraySlice<UInt8>) {
        self = bytes.withUnsafeBytes { String(lowercaseHex: $0) }
    }
}

/// The lowercase hexadecimal digit of `v` (0...15).
@inline(__always) private func hexDigit(_ v: UInt8) -> UInt8 { v < 10 ? 0x30 + v : 0x57 + v }
