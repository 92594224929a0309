import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Argon2id at the real cost (libsodium's MODERATE: 3 passes, 256 MiB), on the real vaultd
/// (without the tests' VAULTD_ARGON2_TEST_COST): a vault made at a lower cost is re-wrapped at
/// its next unlock, and concurrent unlocks do not add up their 256 MiB.
@Suite struct PassphraseCostTests {
    static let realCost = ["VAULTD_ARGON2_TEST_COST": ""]

    /// The stored Argon2id parameters (read with sqlite3 while vaultd is stopped: it holds the
    /// store exclusively while it runs).
    static func storedKDF(_ d: Daemon) throws -> String {
        let r = try ChildProcess.run(
            "sqlite3",
            [
                d.dataDirectory + "/vault.sqlite",
                "SELECT CAST(value AS TEXT) FROM vault_meta WHERE key = 'kdf'",
            ],
            environment: ProcessInfo.processInfo.environment, timeout: 30)
        try #require(r.status == 0, "\(r)")
        return r.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test(.timeLimit(.minutes(3)))
    func aVaultMadeAtALowerCostIsRewrappedToModerateAtItsNextUnlock() throws {
        let d = try Daemon()
        defer { d.close() }
        let passphrase = Data("correct horse battery staple".utf8)
        try #require(d.ctl(["init", "--passphrase-fd", "3"], fds: [3: passphrase]).status == 0)
        try #require(
            d.ctl(
                ["item", "add", "--service", "cost", "--account", "a", "--secret-fd", "3"],
                fds: [3: Data("s3cret".utf8)]
            ).status == 0)
        d.stop()
        let before = try Self.storedKDF(d)
        #expect(
            before.contains("\"opsLimit\":1") && before.contains("\"memLimit\":8192"), "\(before)")

        try d.start(environment: Self.realCost)
        let pid = try #require(d.pid)
        var start = Date()
        let rewrapping = d.ctl(["unlock", "--passphrase-fd", "3"], fds: [3: passphrase])
        let rewrapSeconds = Date().timeIntervalSince(start)
        #expect(rewrapping.status == 0, "\(rewrapping)")
        #expect(
            d.log.contains("re-wrapped the vault's keys under Argon2id at 3 passes over 256 MiB"),
            "\(d.log)")
        #expect(
            d.ctl(["item", "get", "--service", "cost", "--account", "a"]).stdoutText == "s3cret")
        try #require(d.ctl(["lock"]).status == 0)
        start = Date()
        #expect(d.ctl(["unlock", "--passphrase-fd", "3"], fds: [3: passphrase]).status == 0)
        let unlockSeconds = Date().timeIntervalSince(start)
        #expect(
            d.ctl(["item", "get", "--service", "cost", "--account", "a"]).stdoutText == "s3cret")

        // Four unlocks at once (one lock apart): each derives with 256 MiB, one at a time.
        try #require(d.ctl(["lock"]).status == 0)
        let rssBefore = ProcStatus.rss(pid) ?? 0
        let results = LockedList()
        onThreads(4) { _ in
            let r = d.ctl(["unlock", "--passphrase-fd", "3"], fds: [3: passphrase])
            results.append(r.status == 0 ? "ok" : "\(r)")
        }
        let peak = ProcStatus.peakRSS(pid) ?? 0
        #expect(results.all.allSatisfy { $0 == "ok" }, "\(results.all)")
        // One derivation's 256 MiB on top of the rest, not four.
        #expect(
            peak < 2 * 256 * 1024,
            "vaultd's peak RSS \(peak >> 10) MiB with four concurrent unlocks")
        d.stop()
        let after = try Self.storedKDF(d)
        #expect(
            after.contains("\"opsLimit\":3") && after.contains("\"memLimit\":268435456"), "\(after)"
        )
        #expect(after.contains("argon2id13"))
        ReliabilityReport.record(
            String(
                format:
                    "Argon2id MODERATE (3 passes, 256 MiB): the unlock that re-wrapped a MIN-cost vault took %.2f s (vaultctl included), a later unlock %.2f s; four concurrent unlocks: vaultd peak RSS %d MiB (before them %d MiB)",
                rewrapSeconds, unlockSeconds, peak >> 10, rssBefore >> 10))
    }
}
