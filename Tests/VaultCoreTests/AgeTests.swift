import Foundation
import TestSupport
import Testing
import VaultProtocol

@testable import VaultCore

/// The age v1 encoder and decoder on their own: HKDF against RFC 5869's vectors, round trips
/// of every chunk shape, and the refusals (altered, truncated, wrong key, costly work
/// factor, malformed header). The real `age` tool reads and writes with it in
/// IntegrationTests (`AgeInteropTests`).
@Suite("age v1 format")
struct AgeTests {
    static func hex(_ s: String) -> [UInt8] { Hex.bytes(s) }

    /// RFC 5869 appendix A, test cases 1 to 3 (SHA-256).
    @Test func hkdfMatchesRFC5869() {
        let cases: [(ikm: [UInt8], salt: [UInt8], info: [UInt8], okm: String)] = [
            (
                [UInt8](repeating: 0x0b, count: 22), Self.hex("000102030405060708090a0b0c"),
                Self.hex("f0f1f2f3f4f5f6f7f8f9"),
                "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"
            ),
            (
                Array(0x00...0x4f), Array(0x60...0xaf), Array(0xb0...0xff),
                "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c59045a99cac7827271cb41c65e590e09da3275600c2f09b8367793a9aca3db71cc30c58179ec3e87c14c01d5c1f3434f1d87"
            ),
            (
                [UInt8](repeating: 0x0b, count: 22), [], [],
                "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"
            ),
        ]
        for c in cases {
            let okm = c.ikm.withUnsafeBytes {
                Sodium.hkdfSHA256(ikm: $0, salt: c.salt, info: c.info, length: c.okm.count / 2)
            }
            #expect(plain(okm) == Self.hex(c.okm))
        }
    }

    /// BIP 173's valid test strings decode; one changed character does not.
    @Test func bech32ChecksumsAreChecked() throws {
        for s in [
            "A12UEL5L", "a12uel5l", "abcdef1qpzry9x8gf2tvdw0s3jn54khce6mua7lmqqqxw",
            "split1checkupstagehandshakeupstreamerranterredcaperred2y9e3w",
        ] {
            #expect(Bech32.decode(Array(s.utf8)) != nil, "\(s)")
        }
        #expect(
            Bech32.decode(
                Array("split1checkupstagehandshakeupstreamerranterredcaperred2y9e2w".utf8)) == nil)
        #expect(Bech32.decode(Array("A12uEL5L".utf8)) == nil)
        let key = Sodium.randomBytes(32)
        let text = Age.recipientText(key)
        #expect(text.hasPrefix("age1"))
        #expect(try Age.parseRecipient(text) == key)
        #expect(throws: VaultFailure.self) { try Age.parseRecipient(text.uppercased()) }
        #expect(throws: VaultFailure.self) { try Age.parseRecipient("age1qqqq") }
    }

    static func identity() -> (SecureBytes, [UInt8]) {
        let s = SecureBytes.random(count: 32)
        return (s, AgePrimitives.x25519Public(of: s))
    }

    static func bytes(_ n: Int) -> [UInt8] {
        (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
    }

    /// Every chunk shape: empty, one byte, exactly one chunk, one more byte, several chunks.
    @Test func roundTripsEveryChunkShape() throws {
        let (secretKey, publicKey) = Self.identity()
        for n in [0, 1, 65535, 65536, 65537, 3 * 65536, 200_000] {
            let file = try Age.encrypt(secret(Self.bytes(n)), to: [.x25519(publicKey)])
            let chunks = max(1, (n + 65535) / 65536)
            #expect(file.count - (try Age.parseHeader(file).payload) == 16 + n + 16 * chunks)
            #expect(
                plain(try Age.decrypt(file, with: [.x25519(secretKey)])) == Self.bytes(n),
                "\(n) bytes")
        }
        let file = try Age.encrypt(secret("hello"), to: [.passphrase(secret("pw"), workFactor: 10)])
        #expect(
            String(decoding: file.prefix(40), as: UTF8.self).hasPrefix(
                "age-encryption.org/v1\n-> scrypt "))
        #expect(
            plain(try Age.decrypt(file, with: [.passphrase(secret("pw"))])) == Array("hello".utf8))
    }

    /// A source over `file` that gives at most `step` bytes a call.
    static func source(_ file: [UInt8], step: Int) -> Age.Source {
        var at = 0
        return { out in
            let n = min(out.count, step, file.count - at)
            file.withUnsafeBytes {
                out.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[at..<(at + n)]))
            }
            at += n
            return n
        }
    }

    /// The streaming writer and reader (what a backup and a restore use): plaintext written in
    /// pieces of growing sizes, read back through a source that gives 7 bytes at a time, is
    /// the same, in the same file format `decrypt` reads; a reader refuses a file cut at a
    /// chunk boundary only when it reaches the cut, having given the chunks before.
    @Test func streamsInPiecesOfAnySize() throws {
        let (secretKey, publicKey) = Self.identity()
        for n in [0, 1, 65536, 65537, 200_000] {
            var file: [UInt8] = []
            let writer = try Age.Writer(to: [.x25519(publicKey)]) { file += $0 }
            let data = Self.bytes(n)
            var at = 0
            var step = 1
            while at < n {
                let k = min(step, n - at)
                try data[at..<(at + k)].withUnsafeBytes { try writer.write($0) }
                at += k
                step = step * 3 + 1
            }
            try writer.finish()
            #expect(plain(try Age.decrypt(file, with: [.x25519(secretKey)])) == data, "\(n)")
            let reader = try Age.Reader(
                source: Self.source(file, step: 7), identities: [.x25519(secretKey)])
            var got: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 5000)
            while true {
                let k = try buffer.withUnsafeMutableBytes { try reader.read(into: $0) }
                if k == 0 { break }
                got += buffer[..<k]
            }
            #expect(got == data, "\(n) bytes streamed")
        }
        let file = try Age.encrypt(secret(Self.bytes(200_000)), to: [.x25519(publicKey)])
        let cut = try Age.parseHeader(file).payload + 16 + 2 * (65536 + 16)
        let reader = try Age.Reader(
            source: Self.source(Array(file[..<cut]), step: 1000), identities: [.x25519(secretKey)]
        )
        var buffer = [UInt8](repeating: 0, count: 65536)
        #expect(try buffer.withUnsafeMutableBytes { try reader.read(into: $0) } == 65536)
        Self.failure(.truncated) {
            while try buffer.withUnsafeMutableBytes({ try reader.read(into: $0) }) > 0 {}
        }
        #expect(reader.plaintextBytes == 65536)
    }

    static func failure(
        _ kind: Age.Failure.Kind, _ body: () throws -> Void,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        do {
            try body()
            Issue.record("expected \(kind), but it opened", sourceLocation: sourceLocation)
        } catch let f as Age.Failure {
            #expect(f.kind == kind, "\(f)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("expected \(kind), got \(error)", sourceLocation: sourceLocation)
        }
    }

    @Test func alteredAndTruncatedFilesAreRefused() throws {
        let (secretKey, publicKey) = Self.identity()
        let file = try Age.encrypt(secret(Self.bytes(150_000)), to: [.x25519(publicKey)])
        let header = try Age.parseHeader(file)
        let id: [Age.Identity] = [.x25519(secretKey)]
        // One byte of each part: the MAC line's base64, the payload nonce, a middle chunk, the last.
        for at in [
            header.macked + 5, header.payload + 3, header.payload + 16 + 70_000, file.count - 1,
        ] {
            var altered = file
            if at == header.macked + 5 {
                // Another base64 letter (a flipped bit may make a character that is not one:
                // malformed, not altered).
                altered[at] =
                    altered[at] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
            } else {
                altered[at] ^= 0x01
            }
            Self.failure(.altered) { _ = try Age.decrypt(altered, with: id) }
        }
        // The stanza's base64 body: its wrapped file key no longer opens.
        var body = file
        let bodyLine = file.firstIndex(of: 0x0A, after: file.firstIndex(of: 0x0A)!)! + 1
        body[bodyLine + 2] =
            body[bodyLine + 2] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        #expect(throws: Age.Failure.self) { _ = try Age.decrypt(body, with: id) }
        // Cut at a chunk boundary (a whole chunk left, not flagged last), inside a chunk,
        // inside the header, and a byte appended.
        let boundary = header.payload + 16 + 65536 + 16
        Self.failure(.truncated) { _ = try Age.decrypt(Array(file[..<boundary]), with: id) }
        Self.failure(.altered) { _ = try Age.decrypt(Array(file[..<(file.count - 1)]), with: id) }
        Self.failure(.malformed) {
            _ = try Age.decrypt(Array(file[..<(header.payload - 10)]), with: id)
        }
        Self.failure(.altered) { _ = try Age.decrypt(file + [0], with: id) }
        Self.failure(.truncated) {
            _ = try Age.decrypt(Array(file[..<(header.payload + 20)]), with: id)
        }
        // Another key, and a passphrase for a file made to a key.
        Self.failure(.noMatch) {
            _ = try Age.decrypt(file, with: [.x25519(SecureBytes.random(count: 32))])
        }
        Self.failure(.noMatch) { _ = try Age.decrypt(file, with: [.passphrase(secret("pw"))]) }
        Self.failure(.malformed) { _ = try Age.decrypt(Array("not age\n".utf8), with: id) }
    }

    @Test func wrongPassphraseAndCostlyWorkFactorAreRefused() throws {
        let file = try Age.encrypt(secret("x"), to: [.passphrase(secret("right"), workFactor: 10)])
        Self.failure(.noMatch) { _ = try Age.decrypt(file, with: [.passphrase(secret("wrong"))]) }
        Self.failure(.workFactorTooLarge) {
            _ = try Age.decrypt(file, with: [.passphrase(secret("right"), maximumWorkFactor: 9)])
        }
        // A hostile header asking for 2^40: refused before scrypt runs (this would take TiBs).
        var text = String(decoding: file, as: UTF8.self)
        text = text.replacingOccurrences(of: " 10\n", with: " 40\n")
        let start = ContinuousClock.now
        Self.failure(.workFactorTooLarge) {
            _ = try Age.decrypt(Array(text.utf8), with: [.passphrase(secret("right"))])
        }
        #expect(ContinuousClock.now - start < .seconds(5))
        // A work factor with a leading zero, a scrypt stanza beside another: malformed.
        Self.failure(.malformed) {
            _ = try Age.decrypt(
                Array(
                    String(decoding: file, as: UTF8.self).replacingOccurrences(
                        of: " 10\n", with: " 010\n"
                    ).utf8), with: [.passphrase(secret("right"))])
        }
        #expect(throws: VaultFailure.self) {
            _ = try Age.encrypt(
                secret("x"), to: [.passphrase(secret("a")), .x25519(Self.identity().1)])
        }
    }

    @Test func identityFilesAsAgeKeygenWritesThem() throws {
        let (secretKey, publicKey) = Self.identity()
        let text = Age.identityText(secretKey)
        let file =
            "# created: 2026-12-01T00:00:00Z\n# public key: \(Age.recipientText(publicKey))\n"
            + String(decoding: plain(text)!, as: UTF8.self) + "\n"
        let keys = try Age.parseIdentities(secret(file))
        #expect(keys.count == 1)
        #expect(keys[0].constantTimeEquals(secretKey))
        #expect(throws: VaultFailure.self) { _ = try Age.parseIdentities(secret("# nothing\n")) }
        #expect(throws: VaultFailure.self) {
            _ = try Age.parseIdentities(secret("AGE-SECRET-KEY-1QQQQ\n"))
        }
    }
}

extension Array where Element == UInt8 {
    func firstIndex(of byte: UInt8, after i: Int) -> Int? { self[(i + 1)...].firstIndex(of: byte) }
}
