internal import CSodium

/// Key material in `sodium_malloc` memory: guarded pages, locked against swap, wiped
/// (`sodium_free` zeroes) on release. Compared in constant time; prints as `[REDACTED]`;
/// its bytes are reachable only through `withUnsafeBytes`.
public final class SecureBytes: @unchecked Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    private let pointer: UnsafeMutableRawPointer
    /// Length in bytes.
    public let count: Int

    /// `count` bytes of zeros. Traps when libsodium cannot allocate (out of memory).
    public init(count: Int) {
        Sodium.initialize()
        guard let p = sodium_malloc(max(count, 1)) else { fatalError("sodium_malloc failed: out of memory") }
        pointer = p
        self.count = count
        sodium_memzero(p, max(count, 1))
    }

    /// Fresh random bytes (`randombytes_buf`).
    public static func random(count: Int) -> SecureBytes {
        let s = SecureBytes(count: count)
        randombytes_buf(s.pointer, count)
        return s
    }

    /// Copies `bytes` in. The caller should wipe its own copy when it is secret.
    public convenience init<C: Collection>(copying bytes: C) where C.Element == UInt8 {
        self.init(count: bytes.count)
        let p = pointer.assumingMemoryBound(to: UInt8.self)
        for (i, b) in bytes.enumerated() { p[i] = b }
    }

    deinit { sodium_free(pointer) }

    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: pointer, count: count))
    }

    func withUnsafeMutableBytes<R>(_ body: (UnsafeMutableRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeMutableRawBufferPointer(start: pointer, count: count))
    }

    /// Constant-time comparison (`sodium_memcmp`).
    public func constantTimeEquals(_ other: SecureBytes) -> Bool {
        count == other.count && sodium_memcmp(pointer, other.pointer, count) == 0
    }

    public var description: String { "[REDACTED]" }
    public var debugDescription: String { "[REDACTED]" }
}

extension Array where Element == UInt8 {
    /// Overwrites the array's storage with zeros (`sodium_memzero`).
    mutating func wipe() {
        withUnsafeMutableBytes { b in if let p = b.baseAddress { sodium_memzero(p, b.count) } }
    }
}
