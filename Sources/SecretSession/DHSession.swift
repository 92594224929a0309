import CGcrypt
import CSodium
import VaultCore

/// The Secret Service's `dh-ietf1024-sha256-aes128-cbc-pkcs7` session, as the specification
/// defines it and gnome-keyring and libsecret implement it: a Diffie-Hellman exchange in the
/// 1024-bit MODP group of RFC 2409 (the Second Oakley Group, generator 2), the shared secret
/// (big-endian, padded to 128 bytes) through HKDF-SHA256 (RFC 5869; no salt, no info) to a
/// 16-byte AES-128 key, and each secret AES-128-CBC encrypted with PKCS7 padding under a
/// fresh 16-byte IV (the secret's `parameters`). libgcrypt gives the modular arithmetic and
/// AES (libsodium has neither 1024-bit DH nor AES-CBC), libsodium the HMAC-SHA256 and the
/// randomness.
///
/// The same construction in RFC 3526's 1536-bit MODP group (`Group.modp1536`) is gcr's secret
/// exchange (`sx-aes-1`, gcr/gcr-secret-exchange.c), with which gnome-keyring and vaultd
/// take a passphrase from the system prompter.
public final class DHSession {
    /// A MODP group, generator 2.
    public enum Group: Sendable {
        /// RFC 2409 section 6.2, the Second Oakley Group (the Secret Service's).
        case ietf1024
        /// RFC 3526 section 2 (gcr's "ietf-ike-grp-modp-1536").
        case modp1536

        var primeHex: String {
            switch self {
            case .ietf1024: DHSession.primeHex
            case .modp1536: DHSession.prime1536Hex
            }
        }
        /// The prime's length in bytes, to which the shared secret is padded.
        var bytes: Int {
            switch self {
            case .ietf1024: 128
            case .modp1536: 192
            }
        }
    }

    /// The algorithm's name in OpenSession.
    public static let algorithm = "dh-ietf1024-sha256-aes128-cbc-pkcs7"

    /// RFC 2409 section 6.2: 2^1024 - 2^960 - 1 + 2^64 * ( [2^894 pi] + 129093 ).
    static let primeHex =
        "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E3404DD"
        + "EF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED"
        + "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE65381FFFFFFFFFFFFFFFF"
    /// RFC 3526 section 2: 2^1536 - 2^1472 - 1 + 2^64 * ( [2^1406 pi] + 741804 ).
    static let prime1536Hex =
        "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E3404DD"
        + "EF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED"
        + "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF0598DA48361C55D39A69163FA8FD24CF5F"
        + "83655D23DCA3AD961C62F356208552BB9ED529077096966D670C354E4ABC9804F1746C08CA237327FFFFFFFFFFFFFFFF"
    public static let keyLength = 16
    public static let blockLength = 16

    /// vaultd's public value, big-endian without leading zeros (as libsecret sends its own).
    public let publicKey: [UInt8]
    /// The AES key.
    private let key: SecureBytes

    public enum Failure: Error, CustomStringConvertible {
        case unavailable
        case badPublicKey
        case badCiphertext
        public var description: String {
            switch self {
            case .unavailable: "libgcrypt cannot be initialised"
            case .badPublicKey: "the peer's public key is not a value of the group (1 < y < p - 1)"
            case .badCiphertext:
                "the secret is not AES-128-CBC with PKCS7 padding under this session's key"
            }
        }
    }

    /// The session for a peer's public value (big-endian, at most the prime's length: 128
    /// bytes, 192 in `modp1536`): a fresh key pair, the shared secret, the AES key. Throws
    /// `badPublicKey` for a value outside 2...p-2 (1 and p-1 would make the secret known).
    public convenience init(peerPublicKey peer: [UInt8], group: Group = .ietf1024) throws {
        var x = Sodium.randomBytes(group.bytes)
        // Below 2^(bits-1), so below p; never 0 or 1.
        x[0] &= 0x7f
        x[group.bytes - 1] |= 2
        defer { sodium_memzero(&x, x.count) }
        try self.init(peerPublicKey: peer, privateKey: x, group: group)
    }

    /// As `init(peerPublicKey:group:)` with a given private exponent (big-endian): for tests.
    public init(peerPublicKey peer: [UInt8], privateKey x: [UInt8], group: Group = .ietf1024)
        throws
    {
        guard cg_gcrypt_init() == 1 else { throw Failure.unavailable }
        let p = try Self.mpi(hex: group.primeHex)
        defer { gcry_mpi_release(p) }
        let g = gcry_mpi_set_ui(nil, 2)
        defer { gcry_mpi_release(g) }
        let priv = try Self.mpi(bytes: x)
        defer { gcry_mpi_release(priv) }
        guard peer.count <= group.bytes, !peer.isEmpty else { throw Failure.badPublicKey }
        let y = try Self.mpi(bytes: peer)
        defer { gcry_mpi_release(y) }
        let pMinus1 = gcry_mpi_new(0)
        defer { gcry_mpi_release(pMinus1) }
        gcry_mpi_sub_ui(pMinus1, p, 1)
        guard gcry_mpi_cmp_ui(y, 1) > 0, gcry_mpi_cmp(y, pMinus1) < 0 else {
            throw Failure.badPublicKey
        }

        let pub = gcry_mpi_new(0)
        defer { gcry_mpi_release(pub) }
        gcry_mpi_powm(pub, g, priv, p)
        publicKey = try Self.bytes(pub, length: group.bytes, padded: false)

        let shared = gcry_mpi_new(0)
        defer { gcry_mpi_release(shared) }
        gcry_mpi_powm(shared, y, priv, p)
        var ikm = try Self.bytes(shared, length: group.bytes, padded: true)
        defer { sodium_memzero(&ikm, ikm.count) }
        key = ikm.withUnsafeBytes {
            Sodium.hkdfSHA256(ikm: $0, salt: [], info: [], length: Self.keyLength)
        }
    }

    // MARK: secrets

    /// A secret sealed for the peer: a fresh IV (the `parameters`) and the ciphertext.
    public func encrypt(_ secret: SecureBytes) throws -> (iv: [UInt8], ciphertext: [UInt8]) {
        let iv = Sodium.randomBytes(Self.blockLength)
        return (iv, try Self.aesCBC(encrypt: true, key: key, iv: iv, secret))
    }

    /// A secret the peer sealed (`iv`: its parameters); the padding checked. Throws
    /// `badCiphertext`.
    public func decrypt(iv: [UInt8], ciphertext: [UInt8]) throws -> SecureBytes {
        guard iv.count == Self.blockLength, !ciphertext.isEmpty,
            ciphertext.count % Self.blockLength == 0
        else { throw Failure.badCiphertext }
        let padded = try Self.aesCBC(decrypt: key, iv: iv, ciphertext)
        let n = padded.withUnsafeBytes { b -> Int? in
            let pad = Int(b[b.count - 1])
            guard pad >= 1, pad <= Self.blockLength, b.suffix(pad).allSatisfy({ Int($0) == pad })
            else { return nil }
            return b.count - pad
        }
        guard let n else { throw Failure.badCiphertext }
        let out = SecureBytes(count: n)
        out.withUnsafeMutableBytes { dst in
            padded.withUnsafeBytes { src in
                dst.copyMemory(from: UnsafeRawBufferPointer(rebasing: src.prefix(n)))
            }
        }
        return out
    }

    // MARK: primitives

    /// AES-128-CBC of `input` with PKCS7 padding added (encrypt), in sodium memory.
    static func aesCBC(encrypt: Bool, key: SecureBytes, iv: [UInt8], _ input: SecureBytes) throws
        -> [UInt8]
    {
        let pad = blockLength - input.count % blockLength
        var buffer = [UInt8](repeating: UInt8(pad), count: input.count + pad)
        input.withUnsafeBytes { src in buffer.withUnsafeMutableBytes { $0.copyMemory(from: src) } }
        defer { sodium_memzero(&buffer, buffer.count) }
        try cipher(key: key, iv: iv) { h in gcry_cipher_encrypt(h, &buffer, buffer.count, nil, 0) }
        return buffer
    }

    /// AES-128-CBC decryption of whole blocks, into sodium memory (padding left on).
    static func aesCBC(decrypt key: SecureBytes, iv: [UInt8], _ ciphertext: [UInt8]) throws
        -> SecureBytes
    {
        let out = SecureBytes(copying: ciphertext)
        try out.withUnsafeMutableBytes { b in
            try cipher(key: key, iv: iv) { h in
                gcry_cipher_decrypt(h, b.baseAddress, b.count, nil, 0)
            }
        }
        return out
    }

    /// Runs `body` with an AES-128-CBC handle keyed with `key` and `iv` (closed, which wipes
    /// its key schedule, after).
    private static func cipher(
        key: SecureBytes, iv: [UInt8], _ body: (gcry_cipher_hd_t?) -> gcry_error_t
    ) throws {
        guard cg_gcrypt_init() == 1 else { throw Failure.unavailable }
        var h: gcry_cipher_hd_t?
        guard
            gcry_cipher_open(
                &h, Int32(GCRY_CIPHER_AES.rawValue), Int32(GCRY_CIPHER_MODE_CBC.rawValue), 0) == 0
        else { throw Failure.unavailable }
        defer { gcry_cipher_close(h) }
        let keyed = key.withUnsafeBytes { gcry_cipher_setkey(h, $0.baseAddress, $0.count) }
        guard keyed == 0, gcry_cipher_setiv(h, iv, iv.count) == 0, body(h) == 0 else {
            throw Failure.badCiphertext
        }
    }

    private static func mpi(hex: String) throws -> gcry_mpi_t? {
        var m: gcry_mpi_t?
        guard gcry_mpi_scan(&m, GCRYMPI_FMT_HEX, hex, 0, nil) == 0 else {
            throw Failure.unavailable
        }
        return m
    }

    private static func mpi(bytes: [UInt8]) throws -> gcry_mpi_t? {
        var m: gcry_mpi_t?
        guard gcry_mpi_scan(&m, GCRYMPI_FMT_USG, bytes, bytes.count, nil) == 0 else {
            throw Failure.badPublicKey
        }
        return m
    }

    /// An MPI below the prime big-endian: minimal, or left-padded with zeros to `length`
    /// bytes (the prime's).
    private static func bytes(_ m: gcry_mpi_t?, length: Int, padded: Bool) throws -> [UInt8] {
        var n = 0
        var out = [UInt8](repeating: 0, count: length)
        guard gcry_mpi_print(GCRYMPI_FMT_USG, &out, out.count, &n, m) == 0 else {
            throw Failure.unavailable
        }
        if padded {
            // Right-align the n bytes written.
            let value = Array(out[0..<n])
            out = [UInt8](repeating: 0, count: length - n) + value
            return out
        }
        return Array(out[0..<n])
    }
}

/// The cipher alone, for the known-answer test of AES-128-CBC.
public enum DHSessionTesting {
    /// AES-128-CBC of `plaintext` with PKCS7 padding.
    public static func encrypt(key: SecureBytes, iv: [UInt8], _ plaintext: [UInt8]) throws
        -> [UInt8]
    {
        try DHSession.aesCBC(encrypt: true, key: key, iv: iv, SecureBytes(copying: plaintext))
    }
}
