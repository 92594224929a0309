internal import CSodium
import Foundation
import VaultProtocol

/// The primitives the age v1 format is made of, each a libsodium call: HMAC-SHA-256 and
/// HKDF-SHA-256 over it (`Sodium.hmacSHA256`, `Sodium.hkdfSHA256`), ChaCha20-Poly1305 with a 12-byte nonce (RFC 8439,
/// `crypto_aead_chacha20poly1305_ietf_*`), scrypt (`crypto_pwhash_scryptsalsa208sha256_ll`)
/// and X25519 (`crypto_scalarmult`).
enum AgePrimitives {
    static func hkdf(ikm: SecureBytes, salt: [UInt8], info: String, length: Int = 32) -> SecureBytes
    {
        ikm.withUnsafeBytes {
            Sodium.hkdfSHA256(ikm: $0, salt: salt, info: Array(info.utf8), length: length)
        }
    }

    static let aeadKeyLength = Int(crypto_aead_chacha20poly1305_ietf_KEYBYTES)
    static let aeadNonceLength = Int(crypto_aead_chacha20poly1305_ietf_NPUBBYTES)
    static let aeadTagLength = Int(crypto_aead_chacha20poly1305_ietf_ABYTES)

    /// ChaCha20-Poly1305 (RFC 8439) of `plaintext` under `key` and the 12-byte `nonce`, no
    /// associated data: ciphertext ‖ 16-byte tag, written to `out` (room for both).
    static func seal(
        _ plaintext: UnsafeRawBufferPointer, key: SecureBytes, nonce: [UInt8],
        into out: UnsafeMutableRawPointer
    ) {
        precondition(key.count == aeadKeyLength && nonce.count == aeadNonceLength)
        key.withUnsafeBytes { k in
            var clen: UInt64 = 0
            _ = crypto_aead_chacha20poly1305_ietf_encrypt(
                out.assumingMemoryBound(to: UInt8.self), &clen, Sodium.bytes(plaintext),
                UInt64(plaintext.count),
                nil, 0, nil, nonce, k.bindMemory(to: UInt8.self).baseAddress!)
        }
    }

    /// The inverse of `seal`: `box` (ciphertext ‖ tag) opened into `out` (room for
    /// `box.count - 16` bytes). False when it does not authenticate.
    static func open(
        _ box: UnsafeRawBufferPointer, key: SecureBytes, nonce: [UInt8],
        into out: UnsafeMutableRawPointer
    ) -> Bool {
        guard box.count >= aeadTagLength, key.count == aeadKeyLength, nonce.count == aeadNonceLength
        else { return false }
        return key.withUnsafeBytes { k in
            var mlen: UInt64 = 0
            return crypto_aead_chacha20poly1305_ietf_decrypt(
                out.assumingMemoryBound(to: UInt8.self), &mlen, nil, Sodium.bytes(box),
                UInt64(box.count),
                nil, 0, nonce, k.bindMemory(to: UInt8.self).baseAddress!) == 0
        }
    }

    /// `seal` of a whole secret: ciphertext ‖ tag as bytes (the file key wrapped in a stanza).
    static func seal(_ plaintext: SecureBytes, key: SecureBytes, nonce: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: plaintext.count + aeadTagLength)
        out.withUnsafeMutableBytes { o in
            plaintext.withUnsafeBytes { seal($0, key: key, nonce: nonce, into: o.baseAddress!) }
        }
        return out
    }

    /// `open` of a whole box into secure memory; nil when it does not authenticate.
    static func open(_ box: [UInt8], key: SecureBytes, nonce: [UInt8]) -> SecureBytes? {
        guard box.count >= aeadTagLength else { return nil }
        let out = SecureBytes(count: box.count - aeadTagLength)
        let ok = box.withUnsafeBytes { b in
            out.withUnsafeMutableBytes {
                open(
                    b, key: key, nonce: nonce,
                    into: $0.baseAddress ?? UnsafeMutableRawPointer(mutating: b.baseAddress!))
            }
        }
        return ok ? out : nil
    }

    /// scrypt with N = 2^`logN`, r = 8, p = 1 (age's parameters) to 32 bytes, one derivation
    /// at a time process-wide with Argon2id's (each takes 128 × r × N bytes: 256 MiB at
    /// logN 18). Throws InternalError when libsodium cannot allocate the memory.
    static func scrypt(passphrase: SecureBytes, salt: [UInt8], logN: Int) throws -> SecureBytes {
        Sodium.initialize()
        precondition(logN > 0 && logN < 64)
        let out = SecureBytes(count: 32)
        let rc = Sodium.derivationLock.withLock {
            out.withUnsafeMutableBytes { o in
                passphrase.withUnsafeBytes { p in
                    crypto_pwhash_scryptsalsa208sha256_ll(
                        Sodium.bytes(p), p.count, salt, salt.count, UInt64(1) << UInt64(logN), 8, 1,
                        o.bindMemory(to: UInt8.self).baseAddress!, 32)
                }
            }
        }
        guard rc == 0 else { throw VaultFailure(.internalError, "scrypt failed (out of memory?)") }
        return out
    }

    /// X25519's public key of a 32-byte secret scalar (`crypto_scalarmult_base`).
    static func x25519Public(of secret: SecureBytes) -> [UInt8] {
        Sodium.initialize()
        var out = [UInt8](repeating: 0, count: 32)
        secret.withUnsafeBytes {
            _ = crypto_scalarmult_base(&out, $0.bindMemory(to: UInt8.self).baseAddress!)
        }
        return out
    }

    /// X25519 of `secret` and `point`; nil when the result is all zeros (a low-order point,
    /// which age refuses).
    static func x25519(_ secret: SecureBytes, _ point: [UInt8]) -> SecureBytes? {
        Sodium.initialize()
        guard point.count == 32 else { return nil }
        let out = SecureBytes(count: 32)
        let rc = out.withUnsafeMutableBytes { o in
            secret.withUnsafeBytes { s in
                crypto_scalarmult(
                    o.bindMemory(to: UInt8.self).baseAddress!,
                    s.bindMemory(to: UInt8.self).baseAddress!, point)
            }
        }
        return rc == 0 ? out : nil
    }

    /// Compares in constant time (`sodium_memcmp`).
    static func equal(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
        a.count == b.count
            && (a.count == 0 || sodium_memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0)
    }
}

/// Bech32 (BIP 173) as age uses it for `age1…` recipients and `AGE-SECRET-KEY-1…` identities:
/// the original checksum constant (not bech32m), no 90-character limit, one case throughout.
enum Bech32 {
    private static let alphabet = Array("qpzry9x8gf2tvdw0s3jn54khce6mua7l".utf8)

    private static func polymod(_ values: [UInt8]) -> UInt32 {
        let generator: [UInt32] = [0x3b6a_57b2, 0x2650_8e6d, 0x1ea1_19fa, 0x3d42_33dd, 0x2a14_62b3]
        var chk: UInt32 = 1
        for v in values {
            let top = chk >> 25
            chk = (chk & 0x1ff_ffff) << 5 ^ UInt32(v)
            for i in 0..<5 where (top >> i) & 1 == 1 { chk ^= generator[i] }
        }
        return chk
    }

    private static func expand(_ hrp: [UInt8]) -> [UInt8] {
        hrp.map { $0 >> 5 } + [0] + hrp.map { $0 & 31 }
    }

    /// Regroups bits from groups of `from` to groups of `to`; nil when `pad` is false and the
    /// leftover bits are not zero padding of fewer than `from` bits.
    private static func convert(_ data: [UInt8], from: Int, to: Int, pad: Bool) -> [UInt8]? {
        var acc = 0
        var bits = 0
        var out: [UInt8] = []
        let maxv = (1 << to) - 1
        for v in data {
            acc = (acc << from) | Int(v)
            bits += from
            while bits >= to {
                bits -= to
                out.append(UInt8((acc >> bits) & maxv))
            }
        }
        if pad {
            if bits > 0 { out.append(UInt8((acc << (to - bits)) & maxv)) }
        } else if bits >= from || (acc << (to - bits)) & maxv != 0 {
            return nil
        }
        return out
    }

    /// `hrp` (lower case) and `data` as a bech32 string, lower case.
    static func encode(hrp: String, _ data: [UInt8]) -> String {
        let h = Array(hrp.utf8)
        let values = convert(data, from: 8, to: 5, pad: true)!
        let mod = polymod(expand(h) + values + [0, 0, 0, 0, 0, 0]) ^ 1
        let checksum = (0..<6).map { UInt8((mod >> (5 * (5 - $0))) & 31) }
        return String(
            decoding: h + [UInt8(ascii: "1")] + (values + checksum).map { alphabet[Int($0)] },
            as: UTF8.self)
    }

    /// The human-readable part (lower case) and data of a bech32 string; nil when it is not
    /// one (mixed case, a character outside the alphabet, a wrong checksum, bad padding).
    static func decode(_ text: [UInt8]) -> (hrp: String, data: [UInt8])? {
        let hasLower = text.contains { $0 >= 0x61 && $0 <= 0x7a }
        let hasUpper = text.contains { $0 >= 0x41 && $0 <= 0x5a }
        guard !(hasLower && hasUpper), text.allSatisfy({ $0 >= 33 && $0 <= 126 }) else {
            return nil
        }
        var lower = text.map { $0 >= 0x41 && $0 <= 0x5a ? $0 + 32 : $0 }
        defer { lower.wipe() }
        guard let sep = lower.lastIndex(of: UInt8(ascii: "1")), sep >= 1, lower.count - sep - 1 >= 6
        else { return nil }
        let hrp = Array(lower[..<sep])
        var values: [UInt8] = []
        defer { values.wipe() }
        for c in lower[(sep + 1)...] {
            guard let v = alphabet.firstIndex(of: c) else { return nil }
            values.append(UInt8(v))
        }
        guard polymod(expand(hrp) + values) == 1,
            let data = convert(Array(values.dropLast(6)), from: 5, to: 8, pad: false)
        else { return nil }
        return (String(decoding: hrp, as: UTF8.self), data)
    }
}
