import Foundation
import Testing
import VaultClient
import VaultProtocol

/// The recovery key (docs/keychain.md "The recovery key"): `vaultctl recovery-key create`
/// shows it once, it unlocks (`unlock --recovery-key-fd`) and resets a forgotten passphrase
/// (`passphrase reset --recovery-key-fd`), counted and rate-limited with the passphrase,
/// and `recovery-key remove` ends it. Through the real vaultd and vaultctl.
@Suite struct RecoveryKeyTests {
    /// Makes a recovery key with the passphrase and returns its text as printed.
    static func create(_ d: Daemon, passphrase: String = Daemon.passphrase) throws -> String {
        let r = d.ctl(
            ["recovery-key", "create", "--passphrase-fd", "3"], fds: [3: Data(passphrase.utf8)])
        try #require(r.status == 0, "\(r)")
        let groups = "[cbdefghijklnrtuv]{8}"
        let pattern = try Regex("\(groups)(-\(groups)){7}")
        let match = try #require(r.stdoutText.firstMatch(of: pattern), "\(r)")
        return String(r.stdoutText[match.range])
    }

    static func unlock(_ d: Daemon, recoveryKey: String) -> ProcessResult {
        d.ctl(["unlock", "--recovery-key-fd", "3"], fds: [3: Data((recoveryKey + "\n").utf8)])
    }

    @Test func aRecoveryKeyUnlocksAndIsShownInGroups() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        #expect(d.ctl(["status"]).stdoutText.contains("recovery key: none"))
        let key = try Self.create(d)
        #expect(key.count == 71)
        #expect(d.ctl(["status"]).stdoutText.contains("recovery key: set"))
        #expect(!d.log.contains(key), "the key is never logged")
        let secret = d.ctl(
            ["item", "add", "--service", "s", "--account", "a", "--secret-fd", "3"],
            fds: [3: Data("secret".utf8)])
        try #require(secret.status == 0)

        // Across a restart; typed in capitals, without dashes, it is the same key.
        try #require(try d.restart() == 0)
        let typed = key.uppercased().replacingOccurrences(of: "-", with: " ")
        let unlocked = Self.unlock(d, recoveryKey: typed)
        #expect(unlocked.status == 0 && unlocked.stdoutText.contains("unlocked"), "\(unlocked)")
        #expect(d.ctl(["item", "get", "--service", "s"]).stdoutText == "secret")
        // The passphrase still works beside it.
        #expect(d.ctl(["lock"]).status == 0)
        #expect(d.unlock().status == 0)
    }

    @Test func makingOneNeedsThePassphrase() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        let r = d.ctl(
            ["recovery-key", "create", "--passphrase-fd", "3"], fds: [3: Data("wrong".utf8)])
        #expect(r.status != 0 && r.stderr.contains("AuthFailed"), "\(r)")
        #expect(d.ctl(["status"]).stdoutText.contains("recovery key: none"))

        // A vault without a passphrase has nothing to recover.
        let open = try Daemon()
        defer { open.close() }
        try #require(open.ctl(["init", "--no-passphrase"]).status == 0)
        let none = open.ctl(
            ["recovery-key", "create", "--passphrase-fd", "3"], fds: [3: Data("x".utf8)])
        #expect(none.status != 0 && none.stderr.contains("NoPassphrase"), "\(none)")
    }

    @Test func wrongRecoveryKeysAreCountedWithThePassphraseAndRateLimited() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        let key = try Self.create(d)
        #expect(d.ctl(["lock"]).status == 0)
        // Not a recovery key's text: refused as such, not counted.
        let malformed = Self.unlock(d, recoveryKey: "not-a-key")
        #expect(
            malformed.status != 0 && malformed.stderr.contains("not a recovery key"), "\(malformed)"
        )
        let wrong = String(repeating: "cccccccc-", count: 7) + "cccccccc"
        for _ in 0..<3 {
            let r = Self.unlock(d, recoveryKey: wrong)
            #expect(r.status != 0 && r.stderr.contains("AuthFailed"), "\(r)")
        }
        #expect(d.log.contains("wrong recovery key (3 failed in a row"), "\(d.log)")
        // The wait the passphrase's failures impose holds for the right key too, and for the
        // passphrase: one count.
        let limited = Self.unlock(d, recoveryKey: key)
        #expect(limited.status != 0 && limited.stderr.contains("RateLimited"), "\(limited)")
        let passphrase = d.unlock()
        #expect(
            passphrase.status != 0 && passphrase.stderr.contains("RateLimited"), "\(passphrase)")
        try d.advanceClock(by: 2)
        #expect(Self.unlock(d, recoveryKey: key).status == 0)
    }

    @Test func aForgottenPassphraseIsResetWithTheRecoveryKey() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        let key = try Self.create(d)
        let add = d.ctl(
            [
                "item", "add", "--service", "s", "--account", "a", "--accessible",
                "whenPasscodeSetThisDeviceOnly", "--secret-fd", "3",
            ], fds: [3: Data("kept".utf8)])
        try #require(add.status == 0, "\(add)")
        #expect(d.ctl(["lock"]).status == 0)

        let reset = d.ctl(
            ["passphrase", "reset", "--recovery-key-fd", "3", "--new-passphrase-fd", "4"],
            fds: [3: Data(key.utf8), 4: Data("new passphrase".utf8)])
        #expect(reset.status == 0, "\(reset)")
        #expect(d.ctl(["item", "get", "--service", "s"]).stdoutText == "kept")
        #expect(d.ctl(["lock"]).status == 0)
        #expect(d.unlock().status != 0, "the old passphrase no longer opens")
        #expect(d.unlock(passphrase: "new passphrase").status == 0)
        // The recovery key keeps working after the reset, and after a plain change.
        let change = d.ctl(
            ["passphrase", "change", "--passphrase-fd", "3", "--new-passphrase-fd", "4"],
            fds: [3: Data("new passphrase".utf8), 4: Data("third".utf8)])
        #expect(change.status == 0, "\(change)")
        #expect(d.ctl(["lock"]).status == 0)
        #expect(Self.unlock(d, recoveryKey: key).status == 0)
        #expect(d.ctl(["item", "get", "--service", "s"]).stdoutText == "kept")

        // A wrong recovery key resets nothing.
        #expect(d.ctl(["lock"]).status == 0)
        let wrong = d.ctl(
            ["passphrase", "reset", "--recovery-key-fd", "3", "--new-passphrase-fd", "4"],
            fds: [
                3: Data((String(repeating: "cccccccc-", count: 7) + "cccccccc").utf8),
                4: Data("fourth".utf8),
            ])
        #expect(wrong.status != 0 && wrong.stderr.contains("AuthFailed"), "\(wrong)")
        #expect(d.unlock(passphrase: "third").status == 0)
    }

    @Test func aRemovedRecoveryKeyNoLongerOpens() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        let key = try Self.create(d)
        let replaced = try Self.create(d)
        #expect(d.ctl(["lock"]).status == 0)
        #expect(Self.unlock(d, recoveryKey: key).status != 0, "a new one replaces the old")
        #expect(Self.unlock(d, recoveryKey: replaced).status == 0)
        #expect(d.ctl(["recovery-key", "remove"]).status == 0)
        #expect(d.ctl(["status"]).stdoutText.contains("recovery key: none"))
        #expect(d.ctl(["lock"]).status == 0)
        let r = Self.unlock(d, recoveryKey: replaced)
        #expect(r.status != 0 && r.stderr.contains("AuthFailed"), "\(r)")
        // Removing a passphrase drops the recovery key with it.
        _ = try Self.create(d)
        let remove = d.ctl(
            ["passphrase", "remove", "--passphrase-fd", "3"], fds: [3: Data(Daemon.passphrase.utf8)]
        )
        #expect(remove.status == 0, "\(remove)")
        #expect(d.ctl(["status"]).stdoutText.contains("recovery key: none"))
    }
}
