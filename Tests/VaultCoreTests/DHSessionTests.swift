import Foundation
import SecretSession
import TestSupport
import Testing
import VaultCore

/// The Secret Service's dh-ietf1024-sha256-aes128-cbc-pkcs7 session against published vectors
/// (AES-128-CBC: NIST SP 800-38A F.2.1; HKDF is tested against RFC 5869 with the age format)
/// and between two parties.
/// (libsecret's and python secretstorage's own implementations talk to it in SecretServiceTests.)
@Suite struct DHSessionTests {
    static func hex(_ s: String) -> [UInt8] { Hex.bytes(s) }

    static func bytes(_ s: SecureBytes) -> [UInt8] { s.withUnsafeBytes { Array($0) } }

    @Test func twoPartiesAgreeAndSecretsRoundTrip() throws {
        let a = Array(repeating: UInt8(0x11), count: 128)
        let b = Array(repeating: UInt8(0x22), count: 64)
        // Each side's public value, from a session with any valid peer.
        let aPublic = try DHSession(peerPublicKey: [3], privateKey: a).publicKey
        let bPublic = try DHSession(peerPublicKey: [3], privateKey: b).publicKey
        // 2^1 = 2: the generator.
        #expect(try DHSession(peerPublicKey: [3], privateKey: [1]).publicKey == [2])
        #expect(aPublic.count <= 128 && aPublic != bPublic)
        let alice = try DHSession(peerPublicKey: bPublic, privateKey: a)
        let bob = try DHSession(peerPublicKey: aPublic, privateKey: b)
        for size in [0, 1, 15, 16, 17, 1000] {
            let secret = SecureBytes(copying: (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7) })
            let (iv, sealed) = try alice.encrypt(secret)
            #expect(iv.count == 16 && sealed.count == (size / 16 + 1) * 16)
            #expect(Self.bytes(try bob.decrypt(iv: iv, ciphertext: sealed)) == Self.bytes(secret))
        }
        // Another key does not open it; a wrong IV length or a partial block is refused.
        let eve = try DHSession(peerPublicKey: aPublic, privateKey: [5])
        let (iv, sealed) = try alice.encrypt(SecureBytes(copying: Array("x".utf8)))
        // (Another key's output is noise whose padding may by chance look valid.)
        #expect((try? eve.decrypt(iv: iv, ciphertext: sealed)).map(Self.bytes) != Array("x".utf8))
        #expect(throws: DHSession.Failure.self) { _ = try bob.decrypt(iv: [0], ciphertext: sealed) }
        #expect(throws: DHSession.Failure.self) {
            _ = try bob.decrypt(iv: iv, ciphertext: Array(sealed.prefix(15)))
        }
    }

    @Test func aesCBCMatchesSP800_38A() throws {
        // F.2.1 CBC-AES128.Encrypt, first block: the session's cipher is AES-128-CBC; the
        // second block of its output is the PKCS7 padding's.
        let key = SecureBytes(copying: Self.hex("2b7e151628aed2a6abf7158809cf4f3c"))
        let out = try DHSessionTesting.encrypt(
            key: key, iv: Self.hex("000102030405060708090a0b0c0d0e0f"),
            Self.hex("6bc1bee22e409f96e93d7e117393172a"))
        #expect(Array(out.prefix(16)) == Self.hex("7649abac8119b246cee98e9b12e9197d"))
        #expect(out.count == 32)
    }

    @Test func publicValuesOutsideTheGroupAreRefused() {
        let p = Self.hex(
            "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E3404DD"
                + "EF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED"
                + "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE65381FFFFFFFFFFFFFFFF")
        var pMinus1 = p
        pMinus1[127] -= 1
        for bad in [[], [0], [1], pMinus1, p, [1] + p] {
            #expect(throws: DHSession.Failure.self) { _ = try DHSession(peerPublicKey: bad) }
        }
    }
}
