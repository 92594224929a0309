internal import CSodium

/// HMAC-SHA-256 and HKDF-SHA-256 (RFC 5869) on libsodium's HMAC: libsodium 1.0.18 has no HKDF,
/// and libgcrypt's arrives after Debian 12's 1.10. The age v1 format (backups) and the Secret
/// Service's dh-ietf1024-sha256-aes128-cbc-pkcs7 sessions derive their keys with it.
extension Sodium {
    /// What libsodium is pointed at for an empty buffer (it takes no null pointer, and reads
    /// nothing there): a static string's storage, never written.
    private static let nothing: StaticString = ""

    /// `b`'s bytes, or `nothing` for an empty `b`: for libsodium's inputs.
    static func bytes(_ b: UnsafeRawBufferPointer) -> UnsafePointer<UInt8> {
        b.bindMemory(to: UInt8.self).baseAddress ?? nothing.utf8Start
    }

    /// HMAC-SHA-256 of the concatenation of `message`'s parts, keyed with `key` (any length).
    public static func hmacSHA256(key: UnsafeRawBufferPointer, _ message: [UnsafeRawBufferPointer])
        -> SecureBytes
    {
        Sodium.initialize()
        var state = crypto_auth_hmacsha256_state()
        defer { withUnsafeMutableBytes(of: &state) { $0.wipe() } }
        _ = crypto_auth_hmacsha256_init(&state, Self.bytes(key), key.count)
        for part in message where part.count > 0 {
            _ = crypto_auth_hmacsha256_update(&state, Self.bytes(part), UInt64(part.count))
        }
        let out = SecureBytes(count: Int(crypto_auth_hmacsha256_BYTES))
        out.withUnsafeMutableBytes {
            _ = crypto_auth_hmacsha256_final(&state, $0.bindMemory(to: UInt8.self).baseAddress!)
        }
        return out
    }

    /// HKDF-SHA-256 (RFC 5869): extract with `salt` (empty: 32 zero bytes, as the RFC says),
    /// then expand with `info` to `length` bytes (at most 255 × 32).
    public static func hkdfSHA256(
        ikm: UnsafeRawBufferPointer, salt: [UInt8], info: [UInt8], length: Int
    ) -> SecureBytes {
        precondition(length > 0 && length <= 255 * 32)
        let saltKey = salt.isEmpty ? [UInt8](repeating: 0, count: 32) : salt
        let prk = saltKey.withUnsafeBytes { s in hmacSHA256(key: s, [ikm]) }
        let out = SecureBytes(count: length)
        var previous = SecureBytes(count: 0)
        var filled = 0
        var counter: UInt8 = 1
        while filled < length {
            let t = prk.withUnsafeBytes { k in
                previous.withUnsafeBytes { p in
                    info.withUnsafeBytes { i in
                        withUnsafeBytes(of: counter) { c in hmacSHA256(key: k, [p, i, c]) }
                    }
                }
            }
            let n = min(32, length - filled)
            out.withUnsafeMutableBytes { o in
                t.withUnsafeBytes {
                    o.baseAddress!.advanced(by: filled).copyMemory(
                        from: $0.baseAddress!, byteCount: n)
                }
            }
            filled += n
            previous = t
            counter &+= 1
        }
        return out
    }
}
