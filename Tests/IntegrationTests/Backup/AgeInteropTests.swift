import Foundation
import Testing
import VaultCore
import VaultProtocol

/// vaultd's age v1 encoder and decoder against the real `age` and `age-keygen` (Debian's
/// age package), both ways: a passphrase typed at age's prompt on a pseudo-terminal (age
/// reads it from /dev/tty only), a key pair made by age-keygen.
@Suite("age interoperability", .serialized)
struct AgeInteropTests {
    /// Runs `age ARGS` on a terminal of its own, typing `passphrase` at each of its prompts.
    static func age(_ d: Daemon, _ arguments: [String], passphrase: String?, prompts: Int = 1)
        -> ProcessResult
    {
        guard let passphrase else { return d.run("age", arguments) }
        return PseudoTerminal.run(
            d, "age", arguments,
            answers: Array(repeating: ("passphrase", passphrase), count: prompts))
    }

    static func payload(_ n: Int) -> [UInt8] {
        (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ $0 >> 9) }
    }

    static func bytes(_ s: SecureBytes) -> [UInt8] { s.withUnsafeBytes { Array($0) } }

    @Test func ourPassphraseFileOpensWithAgeAndAgesWithOurs() throws {
        let d = try Daemon(start: false)
        let data = Self.payload(150_000)  // three chunks, the last partial
        let ours = try Age.encrypt(
            SecureBytes(copying: data),
            to: [.passphrase(SecureBytes(copying: Array("tr0ub4dor & 3".utf8)))])
        try Data(ours).write(to: URL(fileURLWithPath: d.root + "/ours.age"))
        let r = Self.age(
            d, ["-d", "-o", d.root + "/ours.out", d.root + "/ours.age"], passphrase: "tr0ub4dor & 3"
        )
        #expect(r.status == 0, "\(r)")
        #expect(
            FileManager.default.contents(atPath: d.root + "/ours.out").map { [UInt8]($0) } == data)
        // The wrong passphrase: age refuses it too.
        let wrong = Self.age(
            d, ["-d", "-o", d.root + "/wrong.out", d.root + "/ours.age"],
            passphrase: "tr0ub4dor & 4", prompts: 3)
        #expect(wrong.status != 0)
        #expect(wrong.stdoutText.contains("incorrect passphrase"), "\(wrong)")

        try Data(data).write(to: URL(fileURLWithPath: d.root + "/plain"))
        let enc = Self.age(
            d, ["-p", "-o", d.root + "/theirs.age", d.root + "/plain"], passphrase: "correct horse",
            prompts: 2)
        #expect(enc.status == 0, "\(enc)")
        let theirs = try [UInt8](Data(contentsOf: URL(fileURLWithPath: d.root + "/theirs.age")))
        #expect(
            Self.bytes(
                try Age.decrypt(
                    theirs, with: [.passphrase(SecureBytes(copying: Array("correct horse".utf8)))]))
                == data)
        #expect(throws: Age.Failure.self) {
            _ = try Age.decrypt(
                theirs, with: [.passphrase(SecureBytes(copying: Array("correct horsf".utf8)))])
        }
    }

    @Test func ourKeyFileOpensWithAgeAndAgesWithOurs() throws {
        let d = try Daemon(start: false)
        let keygen = d.run("age-keygen", ["-o", d.root + "/key.txt"])
        #expect(keygen.status == 0, "\(keygen)")
        let publicKey = try #require(
            keygen.stderr.split(separator: "\n").first { $0.hasPrefix("Public key: ") }
        ).dropFirst(12)
        let identities = try Age.parseIdentities(
            SecureBytes(
                copying: [UInt8](try Data(contentsOf: URL(fileURLWithPath: d.root + "/key.txt")))))
        #expect(identities.count == 1)
        // Our bech32 and X25519 give age-keygen's public key from its secret key.
        let recipient = try Age.parseRecipient(String(publicKey))
        #expect(Age.recipientText(recipient) == String(publicKey))

        let data = Self.payload(65536 * 2)  // exactly two full chunks
        try Data(try Age.encrypt(SecureBytes(copying: data), to: [.x25519(recipient)])).write(
            to: URL(fileURLWithPath: d.root + "/ours.age"))
        let r = d.run(
            "age",
            ["-d", "-i", d.root + "/key.txt", "-o", d.root + "/ours.out", d.root + "/ours.age"])
        #expect(r.status == 0, "\(r)")
        #expect(
            FileManager.default.contents(atPath: d.root + "/ours.out").map { [UInt8]($0) } == data)

        try Data(data).write(to: URL(fileURLWithPath: d.root + "/plain"))
        let enc = d.run(
            "age", ["-r", String(publicKey), "-o", d.root + "/theirs.age", d.root + "/plain"])
        #expect(enc.status == 0, "\(enc)")
        let theirs = try [UInt8](Data(contentsOf: URL(fileURLWithPath: d.root + "/theirs.age")))
        #expect(Self.bytes(try Age.decrypt(theirs, with: identities.map { .x25519($0) })) == data)
        // age's armored (PEM) output is not what vaultd reads: refused as malformed, not misread.
        let armored = d.run(
            "age", ["-a", "-r", String(publicKey), "-o", d.root + "/theirs.pem", d.root + "/plain"])
        #expect(armored.status == 0)
        let pem = try [UInt8](Data(contentsOf: URL(fileURLWithPath: d.root + "/theirs.pem")))
        #expect(throws: Age.Failure.self) {
            _ = try Age.decrypt(pem, with: identities.map { .x25519($0) })
        }
    }
}
