internal import CSodium

extension Array where Element == UInt8 {
    /// Overwrites the array's elements with zeros (`sodium_memzero`, which the compiler may
    /// not optimise away). For bytes that carried a secret, before the array is dropped.
    public mutating func wipe() {
        withUnsafeMutableBytes { b in if let p = b.baseAddress { sodium_memzero(p, b.count) } }
    }
}

extension UnsafeMutableRawBufferPointer {
    /// Overwrites the bytes with zeros (`sodium_memzero`).
    public func wipe() {
        if let p = baseAddress { sodium_memzero(p, count) }
    }
}
