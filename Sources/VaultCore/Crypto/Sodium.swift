internal import CSodium
import Foundation
import VaultProtocol

/// The libsodium primitives vaultd uses, and nothing home-made: XChaCha20-Poly1305-IETF
/// (AEAD), Argon2id (passphrase KDF), BLAKE2b (keyed hash), `randombytes_buf`.
public enum Sodium {
    private static let initialized: Bool = sodium_init() >= 0

    /// Calls `sodium_init` once. Traps if libsodium cannot initialise (no entropy source).
    static func initialize() {
        precondition(initialized, "sodium_init failed")
    }

    /// Length of every symmetric key vaultd uses (32 bytes).
    public static let keyLength = Int(crypto_aead_xchacha20poly1305_ietf_KEYBYTES)
    static let nonceLength = Int(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES)
    static let tagLength = Int(crypto_aead_xchacha20poly1305_ietf_ABYTES)

    public static func randomBytes(_ count: Int) -> [UInt8] {
        initialize()
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, count) }
        return out
    }

    /// Encrypts with XChaCha20-Poly1305-IETF under `key` (32 bytes) and a random 24-byte
    /// nonce. Returns nonce ‖ ciphertext ‖ 16-byte tag. `associatedData` is authenticated,
    /// not encrypted (vaultd binds ciphertexts to their row's identity with it).
    public static func seal<P: ContiguousBytes>(
        _ plaintext: P, key: SecureBytes, associatedData: [UInt8]
    ) -> [UInt8] {
        initialize()
        return seal(
            plaintext, key: key, associatedData: associatedData, nonce: randomBytes(nonceLength))
    }

    /// `seal` with the given 24-byte nonce: for the known-answer tests only (a nonce must
    /// never repeat under one key; `seal` draws a random one).
    static func seal<P: ContiguousBytes>(
        _ plaintext: P, key: SecureBytes, associatedData: [UInt8], nonce: [UInt8]
    ) -> [UInt8] {
        initialize()
        precondition(key.count == keyLength && nonce.count == nonceLength)
        return plaintext.withUnsafeBytes { pt in
            var out = [UInt8](repeating: 0, count: nonceLength + pt.count + tagLength)
            out.withUnsafeMutableBufferPointer { o in
                for i in 0..<nonceLength { o[i] = nonce[i] }
                key.withUnsafeBytes { k in
                    var clen: UInt64 = 0
                    _ = crypto_aead_xchacha20poly1305_ietf_encrypt(
                        o.baseAddress! + nonceLength, &clen,
                        pt.bindMemory(to: UInt8.self).baseAddress, UInt64(pt.count),
                        associatedData, UInt64(associatedData.count), nil,
                        nonce, k.bindMemory(to: UInt8.self).baseAddress!)
                }
            }
            return out
        }
    }

    /// Decrypts what `seal` produced into secure memory. Returns nil when the key, the
    /// associated data or the ciphertext is wrong (authentication failure).
    public static func open(_ box: [UInt8], key: SecureBytes, associatedData: [UInt8])
        -> SecureBytes?
    {
        initialize()
        guard box.count >= nonceLength + tagLength, key.count == keyLength else { return nil }
        let out = SecureBytes(count: box.count - nonceLength - tagLength)
        let rc = box.withUnsafeBufferPointer { b in
            out.withUnsafeMutableBytes { o in
                key.withUnsafeBytes { k in
                    var mlen: UInt64 = 0
                    return crypto_aead_xchacha20poly1305_ietf_decrypt(
                        o.bindMemory(to: UInt8.self).baseAddress, &mlen, nil,
                        b.baseAddress! + nonceLength, UInt64(b.count - nonceLength),
                        associatedData, UInt64(associatedData.count),
                        b.baseAddress!, k.bindMemory(to: UInt8.self).baseAddress!)
                }
            }
        }
        return rc == 0 ? out : nil
    }

    /// `open` for non-secret payloads (attribute blobs), returned as plain bytes.
    public static func openBytes(_ box: [UInt8], key: SecureBytes, associatedData: [UInt8])
        -> [UInt8]?
    {
        open(box, key: key, associatedData: associatedData)?.withUnsafeBytes { Array($0) }
    }

    /// How costly a new passphrase's Argon2id is.
    public enum KDFCost: String, Sendable {
        /// libsodium's MODERATE limits: 3 passes over 256 MiB (about 0.5 to 1 s on a laptop
        /// core). The cost of every vault vaultd creates, and the least it keeps: a vault
        /// stored with less is re-wrapped at this cost at its next unlock.
        case moderate
        /// libsodium's MIN limits (1 pass, 8 KiB): for tests only (`VAULTD_ARGON2_TEST_COST=min`),
        /// which init and unlock many vaults and check nothing of the cost.
        case minimum

        /// (passes, bytes) of this cost.
        public var limits: (opsLimit: UInt64, memLimit: UInt64) {
            switch self {
            case .moderate:
                (
                    UInt64(crypto_pwhash_opslimit_moderate()),
                    UInt64(crypto_pwhash_memlimit_moderate())
                )
            case .minimum:
                (UInt64(crypto_pwhash_opslimit_min()), UInt64(crypto_pwhash_memlimit_min()))
            }
        }
    }

    /// Argon2id parameters, stored with the vault so they can be raised later.
    public struct KDFParameters: Equatable, Sendable {
        /// Passes (crypto_pwhash opslimit).
        public var opsLimit: UInt64
        /// Memory in bytes (crypto_pwhash memlimit).
        public var memLimit: UInt64
        public var salt: [UInt8]

        public init(opsLimit: UInt64, memLimit: UInt64, salt: [UInt8]) {
            self.opsLimit = opsLimit
            self.memLimit = memLimit
            self.salt = salt
        }

        /// `cost`'s limits with a fresh 16-byte salt (`crypto_pwhash_SALTBYTES`).
        public static func fresh(_ cost: KDFCost) -> KDFParameters {
            initialize()
            let (ops, mem) = cost.limits
            return KDFParameters(
                opsLimit: ops, memLimit: mem, salt: randomBytes(Int(crypto_pwhash_SALTBYTES)))
        }

        /// Whether these parameters cost less than `cost` in passes or in memory (a KEK
        /// derived with them is cheaper to guess than one derived at `cost`).
        public func isWeaker(than cost: KDFCost) -> Bool {
            let (ops, mem) = cost.limits
            return opsLimit < ops || memLimit < mem
        }
    }

    /// One Argon2id (or scrypt) derivation at a time, process-wide: each takes its `memLimit` (256 MiB at
    /// MODERATE) for as long as it runs, so concurrent Init, Unlock and ChangePassphrase calls
    /// must not add those up.
    static let derivationLock = NSLock()

    /// Derives a 32-byte key from a passphrase with Argon2id (`crypto_pwhash`, ALG_ARGON2ID13),
    /// waiting for any derivation already running (`derivationLock`). Throws `VaultFailure`
    /// InternalError when libsodium cannot allocate the memory.
    public static func argon2id(passphrase: SecureBytes, parameters: KDFParameters) throws
        -> SecureBytes
    {
        initialize()
        let out = SecureBytes(count: keyLength)
        let rc = derivationLock.withLock {
            out.withUnsafeMutableBytes { o in
                passphrase.withUnsafeBytes { p in
                    crypto_pwhash(
                        o.bindMemory(to: UInt8.self).baseAddress!, UInt64(keyLength),
                        p.bindMemory(to: CChar.self).baseAddress!, UInt64(p.count),
                        parameters.salt, parameters.opsLimit, Int(parameters.memLimit),
                        crypto_pwhash_ALG_ARGON2ID13)
                }
            }
        }
        guard rc == 0 else {
            throw VaultFailure(.internalError, "Argon2id failed (out of memory?)")
        }
        return out
    }

    /// BLAKE2b (`crypto_generichash`) of `message` keyed with `key`, `length` bytes (16...64).
    public static func keyedHash(_ message: [UInt8], key: SecureBytes, length: Int = 32) -> [UInt8]
    {
        initialize()
        var out = [UInt8](repeating: 0, count: length)
        key.withUnsafeBytes { k in
            _ = crypto_generichash(
                &out, length, message, UInt64(message.count),
                k.bindMemory(to: UInt8.self).baseAddress, k.count)
        }
        return out
    }

    /// SHA-256 (`crypto_hash_sha256`) of `message`.
    public static func sha256(_ message: [UInt8]) -> [UInt8] {
        initialize()
        var out = [UInt8](repeating: 0, count: Int(crypto_hash_sha256_BYTES))
        _ = crypto_hash_sha256(&out, message, UInt64(message.count))
        return out
    }

    /// A key derived from two keys: BLAKE2b of `input` keyed with `key`, in secure memory.
    /// Binds ThisDeviceOnly class keys to both the passphrase KEK and the device key.
    public static func combine(_ input: SecureBytes, key: SecureBytes, context: String)
        -> SecureBytes
    {
        initialize()
        let out = SecureBytes(count: keyLength)
        var message = Array(context.utf8)
        input.withUnsafeBytes { message.append(contentsOf: $0) }
        defer { message.wipe() }
        out.withUnsafeMutableBytes { o in
            key.withUnsafeBytes { k in
                _ = crypto_generichash(
                    o.bindMemory(to: UInt8.self).baseAddress!, keyLength, message,
                    UInt64(message.count),
                    k.bindMemory(to: UInt8.self).baseAddress, k.count)
            }
        }
        return out
    }
}

extension SecureBytes: ContiguousBytes {}
