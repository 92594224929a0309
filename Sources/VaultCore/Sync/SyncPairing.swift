internal import CSodium
import Foundation
import VaultProtocol

/// The sealed boxes of pairing: a joining device's public keys, and the group's keys and
/// membership sealed to it (crypto_box_seal: only the holder of the secret key opens it; the
/// sender stays anonymous, which is why the pairing code binds the public keys).
public enum SyncPairing {
    static let joinMagic = Array("VDJOIN2\0".utf8)
    static let grantMagic = Array("VDGRNT2\0".utf8)
    static var publicKeyBytes: Int { Int(crypto_box_publickeybytes()) }
    static var secretKeyBytes: Int { Int(crypto_box_secretkeybytes()) }
    static var sealBytes: Int { Int(crypto_box_sealbytes()) }
    /// The largest grant read: every key and member of a group of `maximumDevices`.
    static let maximumGrantBytes = 256 << 10

    /// A new crypto_box key pair (the secret key in secure memory).
    static func keyPair() -> (publicKey: [UInt8], secretKey: SecureBytes) {
        Sodium.initialize()
        var pk = [UInt8](repeating: 0, count: publicKeyBytes)
        let sk = SecureBytes(count: secretKeyBytes)
        sk.withUnsafeMutableBytes { s in
            _ = crypto_box_keypair(&pk, s.bindMemory(to: UInt8.self).baseAddress!)
        }
        return (pk, sk)
    }

    /// The public key of a secret key (crypto_scalarmult_base, as crypto_box_keypair made it).
    static func publicKey(of sk: SecureBytes) -> [UInt8] {
        var pk = [UInt8](repeating: 0, count: publicKeyBytes)
        sk.withUnsafeBytes { s in
            _ = crypto_scalarmult_base(&pk, s.bindMemory(to: UInt8.self).baseAddress!)
        }
        return pk
    }

    /// The file a joining device writes: its crypto_box and crypto_sign public keys.
    static func joinFile(boxKey: [UInt8], signKey: [UInt8]) -> [UInt8] {
        joinMagic + boxKey + signKey
    }

    /// The public keys a join file holds; nil when it is not one.
    static func keys(ofJoinFile f: [UInt8]) -> (boxKey: [UInt8], signKey: [UInt8])? {
        guard f.count == joinMagic.count + publicKeyBytes + SyncSigning.publicKeyBytes,
            Array(f.prefix(joinMagic.count)) == joinMagic
        else { return nil }
        let keys = f.dropFirst(joinMagic.count)
        return (Array(keys.prefix(publicKeyBytes)), Array(keys.suffix(SyncSigning.publicKeyBytes)))
    }

    /// The 16 bytes of a device's public keys a pairing code carries (BLAKE2b, unkeyed).
    static func fingerprint(boxKey: [UInt8], signKey: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 16)
        let both = boxKey + signKey
        _ = crypto_generichash(&out, 16, both, UInt64(both.count), nil, 0)
        return out
    }

    /// `key` sealed to `publicKey` (crypto_box_seal).
    static func seal(_ key: SecureBytes, to publicKey: [UInt8]) -> [UInt8] {
        Sodium.initialize()
        var c = [UInt8](repeating: 0, count: key.count + sealBytes)
        key.withUnsafeBytes { k in
            _ = crypto_box_seal(
                &c, k.bindMemory(to: UInt8.self).baseAddress!, UInt64(k.count), publicKey)
        }
        return c
    }

    /// What a box sealed to the key pair holds; nil when it was not sealed to it.
    static func unseal(_ box: ArraySlice<UInt8>, publicKey: [UInt8], secretKey: SecureBytes)
        -> SecureBytes?
    {
        guard box.count >= sealBytes else { return nil }
        let out = SecureBytes(count: box.count - sealBytes)
        let b = Array(box)
        let rc = out.withUnsafeMutableBytes { o in
            secretKey.withUnsafeBytes { s in
                crypto_box_seal_open(
                    o.bindMemory(to: UInt8.self).baseAddress!, b, UInt64(b.count), publicKey,
                    s.bindMemory(to: UInt8.self).baseAddress!)
            }
        }
        return rc == 0 ? out : nil
    }

    /// The group's keys and membership sealed to `publicKey`, as a grant file: sealed
    /// u32 keyring length · keyring (`SyncKeyring.encode`) · membership (JSON).
    static func grantFile(keyring: SyncKeyring, membership: SyncMembership, to publicKey: [UInt8])
        -> [UInt8]
    {
        let ring = keyring.encoded()
        let view = membership.json.serialized()
        let payload = SecureBytes(count: 4 + ring.count + view.count)
        payload.withUnsafeMutableBytes { p in
            var n = UInt32(ring.count).littleEndian
            withUnsafeBytes(of: &n) { for i in 0..<4 { p[i] = $0[i] } }
            ring.withUnsafeBytes { r in for i in 0..<r.count { p[4 + i] = r[i] } }
            for (i, b) in view.enumerated() { p[4 + ring.count + i] = b }
        }
        return grantMagic + seal(payload, to: publicKey)
    }

    /// The keys and membership in a grant file sealed to the key pair; nil when it is not one
    /// or was not sealed to it.
    static func openGrant(_ f: [UInt8], publicKey: [UInt8], secretKey: SecureBytes) -> (
        SyncKeyring, SyncMembership
    )? {
        guard f.count <= maximumGrantBytes, f.count > grantMagic.count,
            Array(f.prefix(grantMagic.count)) == grantMagic,
            let payload = unseal(
                f.dropFirst(grantMagic.count), publicKey: publicKey, secretKey: secretKey)
        else { return nil }
        return payload.withUnsafeBytes { p -> (SyncKeyring, SyncMembership)? in
            guard p.count >= 4 else { return nil }
            let n = Int(UInt32(p[0]) | UInt32(p[1]) << 8 | UInt32(p[2]) << 16 | UInt32(p[3]) << 24)
            guard n <= p.count - 4,
                let ring = SyncKeyring(encoded: UnsafeRawBufferPointer(rebasing: p[4..<(4 + n)])),
                let json = try? JSON.parse(Array(p[(4 + n)...])), let view = SyncMembership(json)
            else { return nil }
            return (ring, view)
        }
    }

    /// The group's fingerprint, shown by `sync status` on every device so the owner can check
    /// two devices hold the same group key: 8 bytes of BLAKE2b keyed with it, in hex.
    public static func groupFingerprint(_ key: SecureBytes) -> String {
        SyncHex.encode(
            Sodium.keyedHash(Array("vaultd sync group fingerprint".utf8), key: key, length: 16)
                .prefix(8).map { $0 })
    }
}
