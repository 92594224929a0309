import Foundation
import Testing
import VaultProtocol

@testable import VaultCore

/// The passphrase's Argon2id cost, its re-wrap to a higher one, and the failed-unlock limit
/// when the store cannot count.
@Suite("Passphrase cost and guess limit")
struct PassphraseTests {
    /// The wait schedule of real vaults: none for the first three failures, then 1 s doubling
    /// with each failure, never more than 15 min; the default policy is libsodium's MODERATE
    /// Argon2id cost, and the environment can only lower it to MIN (the retired
    /// VAULTD_UNLOCK_DELAY_TEST_SCALE is ignored: no environment shortens the waits).
    @Test func theUnlockWaitScheduleIsTheDocumentedOne() throws {
        let expected: [Double] = [0, 0, 0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 900, 900, 900]
        for (n, wait) in expected.enumerated() {
            #expect(Vault.unlockWait(afterFailures: n) == wait, "after \(n) failures")
        }
        #expect(Vault.unlockWait(afterFailures: 30) == 900)
        #expect(Vault.unlockWait(afterFailures: Int.max) == 900)
        let real = PassphrasePolicy()
        #expect(real.kdfCost == .moderate)
        #expect(try PassphrasePolicy.fromEnvironment([:]).kdfCost == .moderate)
        #expect(
            try PassphrasePolicy.fromEnvironment(["VAULTD_ARGON2_TEST_COST": "min"]).kdfCost
                == .minimum)
        #expect(throws: VaultFailure.self) {
            try PassphrasePolicy.fromEnvironment(["VAULTD_ARGON2_TEST_COST": "0"])
        }
        #expect(throws: VaultFailure.self) {
            try PassphrasePolicy.fromEnvironment(["VAULTD_ARGON2_TEST_COST": "interactive"])
        }
        #expect(
            try PassphrasePolicy.fromEnvironment(["VAULTD_UNLOCK_DELAY_TEST_SCALE": "0.001"])
                .kdfCost == .moderate)
    }

    /// MODERATE is libsodium's: 3 passes over 256 MiB. The tests' cost is libsodium's MIN,
    /// never less. INTERACTIVE (2 passes, 64 MiB: what vaults were made with before) is weaker.
    @Test func theCostsAreLibsodiums() {
        #expect(Sodium.KDFCost.moderate.limits.opsLimit == 3)
        #expect(Sodium.KDFCost.moderate.limits.memLimit == 256 << 20)
        #expect(Sodium.KDFCost.minimum.limits.opsLimit == 1)
        #expect(Sodium.KDFCost.minimum.limits.memLimit == 8 << 10)
        let interactive = Sodium.KDFParameters(opsLimit: 2, memLimit: 64 << 20, salt: [])
        #expect(interactive.isWeaker(than: .moderate))
        #expect(
            !Sodium.KDFParameters(opsLimit: 3, memLimit: 256 << 20, salt: []).isWeaker(
                than: .moderate))
        #expect(
            !Sodium.KDFParameters(opsLimit: 4, memLimit: 1 << 30, salt: []).isWeaker(
                than: .moderate))
        #expect(
            Sodium.KDFParameters(opsLimit: 4, memLimit: 128 << 20, salt: []).isWeaker(
                than: .moderate))
    }

    static func storedKDF(_ vault: Vault) throws -> JSON {
        let raw = try #require(
            try vault.read { try $0.row("SELECT value FROM vault_meta WHERE key = 'kdf'") }?[0].blob
        )
        return try JSON.parse(raw)
    }

    /// A vault whose keys are wrapped under a KEK of a lower cost (made before the cost was
    /// raised) is re-wrapped at the policy's cost at its next successful unlock: new salt and
    /// parameters stored with the re-wrapped keys, every item still readable, the passphrase
    /// still the same; a wrong passphrase re-wraps nothing.
    @Test func aVaultStoredAtALowerCostIsRewrappedAtItsNextUnlock() throws {
        try withTemporaryDirectory { tmp in
            let dir = tmp + "/data"
            do {
                let old = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
                defer { old.close() }
                _ = try old.initialize(passphrase: secret("right"), caller: .owner)
                try LockTests.addOnePerClass(old)
                let kdf = try Self.storedKDF(old)
                #expect(kdf["opsLimit"] == 1 && kdf["memLimit"] == JSON(8 << 10))
            }
            let vault = try Vault(dataDirectory: dir, passphrasePolicy: PassphrasePolicy())
            defer { vault.close() }
            let before = try Self.storedKDF(vault)
            expectFailure(.wrongPassphrase) {
                _ = try vault.unlock(passphrase: secret("wrong"), caller: .owner)
            }
            #expect(try Self.storedKDF(vault) == before, "a wrong passphrase re-wrapped the keys")
            let start = Date()
            _ = try vault.unlock(passphrase: secret("right"), caller: .owner)
            let took = Date().timeIntervalSince(start)
            let after = try Self.storedKDF(vault)
            #expect(after["opsLimit"] == 3 && after["memLimit"] == JSON(256 << 20), "\(after.text)")
            #expect(after["salt"] != before["salt"])
            for a in Accessibility.allCases { LockTests.expectReadable(vault, a) }
            _ = try vault.lockVault(caller: .owner)
            let unlockStart = Date()
            _ = try vault.unlock(passphrase: secret("right"), caller: .owner)
            let unlockTook = Date().timeIntervalSince(unlockStart)
            #expect(try Self.storedKDF(vault) == after, "re-wrapped a second time")
            for a in Accessibility.allCases { LockTests.expectReadable(vault, a) }
            print(
                "argon2id: unlock with re-wrap to MODERATE \(String(format: "%.2f", took)) s; unlock at MODERATE \(String(format: "%.2f", unlockTook)) s"
            )
        }
    }

    /// A failed check that the store cannot take (every write fails, as on a full disk) still
    /// counts: the checks are refused with RateLimited after three, as with a store that takes
    /// them, and a failure is AuthFailed, not a storage error that hides the count.
    @Test func failuresTheStoreCannotTakeStillCount() throws {
        try withVault(initialize: false) { vault, _ in
            _ = try vault.initialize(passphrase: secret("right"), caller: .owner)
            _ = try vault.lockVault(caller: .owner)
            _ = try vault.exclusive { try $0.db.execute("PRAGMA query_only=ON") }
            defer { _ = try? vault.exclusive { try $0.db.execute("PRAGMA query_only=OFF") } }
            for guess in ["guess1", "guess2", "guess3"] {
                expectFailure(.wrongPassphrase) {
                    _ = try vault.unlock(passphrase: secret(guess), caller: .owner)
                }
            }
            let limited = expectFailure(.rateLimited) {
                _ = try vault.unlock(passphrase: secret("guess4"), caller: .owner)
            }
            let wait = limited?.details.retryAfter ?? 0
            #expect(wait > 0.5 && wait <= 1, "retryAfter \(wait)")
            expectFailure(.rateLimited) {
                _ = try vault.unlock(passphrase: secret("right"), caller: .owner)
            }
            #expect(vault.lockState.state == .locked)
            // Nothing of it reached the store.
            #expect(
                try vault.read {
                    try $0.row("SELECT 1 FROM vault_meta WHERE key = 'unlock.failures'")
                } == nil)
        }
    }
}

/// Base64 straight into secure memory (`sodium_base642bin`), and back (`sodium_bin2base64`).
@Suite("SecureBytes base64")
struct SecureBase64Tests {
    static func decode(_ text: String) -> [UInt8]? {
        let bytes = Array(text.utf8)
        return bytes.withUnsafeBufferPointer { SecureBytes.decodingBase64($0) }.map { plain($0)! }
    }

    @Test func decodesWhatFoundationEncodesAndRefusesTheRest() {
        var random = SystemRandomNumberGenerator()
        for n in [0, 1, 2, 3, 4, 31, 32, 33, 1024, 1025, 70_000] {
            let data = (0..<n).map { _ in UInt8.random(in: 0...255, using: &random) }
            let text = Data(data).base64EncodedString()
            #expect(Self.decode(text) == data, "\(n) bytes")
            let s = SecureBytes(copying: data)
            var out = [UInt8](repeating: 0, count: SecureBytes.base64Length(of: n))
            out.withUnsafeMutableBytes { s.writeBase64(to: $0.baseAddress!) }
            #expect(String(decoding: out, as: UTF8.self) == text, "\(n) bytes back")
        }
        for bad in [
            "c2VjcmV0\n", "c2VjcmV", "c2Vjc mV0", "c2VjcmV0=", "====", "c2Vj*mV0", "QR==",
            "c2VjcmV0c2Vj\u{e9}",
        ] {
            #expect(Self.decode(bad) == nil, "\(bad)")
        }
    }

    @Test func aJSONStringIsUnescapedIntoSecureMemory() {
        let text = Array(#"p\u00e4ss\"word\\"#.utf8)
        let s = text.withUnsafeBufferPointer { SecureBytes.unescapingJSONString($0) }
        #expect(plain(s) == Array("p\u{e4}ss\"word\\".utf8))
    }
}
