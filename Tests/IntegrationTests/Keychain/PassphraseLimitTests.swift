import Foundation
import TestSupport
import Testing
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// The passphrase-guess limit on a full disk: the data directory on a tmpfs in a private
/// mount namespace, filled, so that vaultd cannot store the failure count. Guesses are rate
/// limited exactly as on a disk with room (the count is kept in memory too), and the right
/// passphrase afterwards waits its turn. The waits are the real ones (1 s doubling after three
/// failures, at most 15 min), waited out on vaultd's test clock: each refusal moves it on by the
/// `retryAfter` it gave (`CustomDaemon.advanceClock`), and the next guess is sent once vaultd
/// has taken the new time.
@Suite(.tags(.system)) struct PassphraseLimitTests {
    static let rateLimited = "io.vaultd.Vault.RateLimited"
    static let authFailed = "io.vaultd.Vault.AuthFailed"

    /// The documented wait after `n` failures (as `Vault.unlockWait`).
    static func wait(_ n: Int) -> Double { n >= 3 ? min(pow(2.0, Double(n - 3)), 900) : 0 }

    /// What 30 wrong guesses and then the right passphrase met.
    struct Run {
        /// Per guess: how many times it was refused (RateLimited) before it was checked.
        var refusals: [Int] = []
        /// Per guess: the `retryAfter` Status reported right after it failed.
        var retryAfter: [Double] = []
        /// The right passphrase's refusals before it unlocked, and the first one's retryAfter.
        var rightRefusals = 0
        var rightFirstRetryAfter = 0.0
        /// The seconds vaultd's clock was moved on, and those the run took.
        var waited = 0.0
        var seconds = 0.0
        var problems: [String] = []
    }

    /// Sends `Unlock(passphrase)` until it is checked: each RateLimited reply is waited out
    /// on vaultd's clock, moved on by the `retryAfter` it gives (`advance`). Returns the
    /// outcome and the refusals.
    static func unlockInTurn(
        _ c: ExactClient, _ passphrase: String, firstRetryAfter: inout Double, waited: inout Double,
        advance: (Double) throws -> Void
    ) throws -> (ExactClient.Outcome, Int) {
        var refusals = 0
        while true {
            let outcome = c.call("io.vaultd.Vault.Unlock", ["passphrase": .string(passphrase)])
            guard case .error(Self.rateLimited, let p) = outcome, refusals < 1000 else {
                return (outcome, refusals)
            }
            let r = p["retryAfter"]?.doubleValue ?? 0
            if refusals == 0 { firstRetryAfter = r }
            refusals += 1
            try advance(max(0, r) + 0.001)
            waited += max(0, r) + 0.001
        }
    }

    static func guessThirtyThenTheRightOne(
        _ c: ExactClient, right: String, advance: (Double) throws -> Void
    ) throws -> Run {
        var run = Run()
        let start = Date()
        for n in 1...30 {
            var first = 0.0
            let (outcome, refusals) = try unlockInTurn(
                c, "wrong guess \(n)", firstRetryAfter: &first, waited: &run.waited,
                advance: advance)
            run.refusals.append(refusals)
            guard case .error(Self.authFailed, _) = outcome else {
                run.problems.append("guess \(n): \(outcome)")
                break
            }
            run.retryAfter.append(
                c.call("io.vaultd.Vault.Status").parameters?["retryAfter"]?.doubleValue ?? -1)
        }
        var first = 0.0
        let (outcome, refusals) = try unlockInTurn(
            c, right, firstRetryAfter: &first, waited: &run.waited, advance: advance)
        run.rightRefusals = refusals
        run.rightFirstRetryAfter = first
        if outcome.parameters?["lock"]?["state"] != "unlocked" {
            run.problems.append("the right passphrase: \(outcome)")
        }
        run.seconds = Date().timeIntervalSince(start)
        return run
    }

    /// What both disks must show: every guess checked and refused, the first three at once;
    /// after each failure a wait of the documented length (never longer; shorter only by the
    /// time the Status call took), each guess after the third refused until it is waited out;
    /// the right passphrase refused while the last wait lasted.
    static func expectTheSchedule(_ run: Run, _ disk: String) {
        for p in run.problems { Issue.record("\(disk): \(p)") }
        #expect(
            run.refusals.count == 30 && run.retryAfter.count == 30,
            "\(disk): \(run.refusals.count) guesses checked")
        #expect(
            run.refusals.prefix(3).allSatisfy { $0 == 0 },
            "\(disk): the first three guesses were refused: \(run.refusals)")
        for (i, r) in run.retryAfter.enumerated() {
            let n = i + 1
            #expect(
                r <= Self.wait(n) + 1e-9 && r >= Self.wait(n) - 0.25,
                "\(disk): retryAfter \(r) s after \(n) failures; expected \(Self.wait(n))")
        }
        // Each wait (1 s and more) is met by the next guess: only the test's clock ends it.
        for n in 3...29 {
            #expect(
                run.refusals[n] >= 1,
                "\(disk): guess \(n + 1) was not refused during the wait of \(Self.wait(n)) s")
        }
        #expect(run.rightRefusals >= 1, "\(disk): the right passphrase did not wait its turn")
        #expect(
            run.rightFirstRetryAfter > 899 && run.rightFirstRetryAfter <= 900,
            "\(disk): the right passphrase's first retryAfter \(run.rightFirstRetryAfter)")
        // The clock was moved on by the waits, and no more: the documented schedule's sum.
        let schedule = (3...30).map(Self.wait).reduce(0, +)
        #expect(
            run.waited <= schedule + 1 && run.waited >= schedule - 30,
            "\(disk): waited \(run.waited) s on vaultd's clock; the schedule's waits add up to \(schedule) s"
        )
    }

    static let script = """
        d=$1; shift
        mount -t tmpfs -o size=8m,mode=0700 tmpfs "$d" || exit 90
        sleep 600 & echo $! > "$d.holder"
        exec "$@"
        """

    @Test(
        .enabled(
            if: ReliabilityFullDiskTests.available, "needs root and mount namespaces (unshare -m)"),
        .timeLimit(.minutes(3)))
    func thirtyWrongPassphrasesOnAFullDiskAreRateLimitedAsOnADiskWithRoom() throws {
        let right = "the right passphrase"

        // A disk with room.
        let roomy = try CustomDaemon()
        defer { roomy.close() }
        try roomy.start()
        let rc = try roomy.connect()
        try #require(
            rc.call("io.vaultd.Vault.Init", ["passphrase": .string(right)]).parameters != nil)
        try #require(rc.call("io.vaultd.Vault.Lock").parameters != nil)
        let withRoom = try Self.guessThirtyThenTheRightOne(rc, right: right) {
            try roomy.advanceClock(by: $0)
        }
        Self.expectTheSchedule(withRoom, "disk with room")

        // A full one.
        let root = try TemporaryDirectory.make(prefix: "vaultd-guess")
        let disk = root + "/disk"
        mkdir(disk, 0o700)
        let d = try CustomDaemon(dataDirectory: disk + "/data", root: root)
        var holder: pid_t?
        defer {
            d.kill()
            if let h = holder { kill(h, SIGKILL) }
            d.close()
        }
        try Self.script.write(toFile: root + "/ns.sh", atomically: true, encoding: .utf8)
        try d.start(wrapper: ["unshare", "-m", "sh", root + "/ns.sh", disk])
        holder = (try? String(contentsOfFile: disk + ".holder", encoding: .utf8)).flatMap {
            pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        let namespaceHolder = try #require(holder, "the namespace holder did not start")
        let c = try d.connect()
        try #require(
            c.call("io.vaultd.Vault.Init", ["passphrase": .string(right)]).parameters != nil)
        try #require(c.call("io.vaultd.Vault.Lock").parameters != nil)
        // Fill it: a file takes what is left, then preference writes until three in a row
        // are refused (the store's own files have no room left to grow either).
        let fill = try ChildProcess.run(
            "nsenter",
            [
                "--mount=/proc/\(namespaceHolder)/ns/mnt", "sh", "-c",
                "cat /dev/zero > \"$1\"/filler; true", "sh", disk,
            ],
            environment: ProcessInfo.processInfo.environment, timeout: 30)
        try #require(fill.status == 0, "\(fill)")
        var refusedInARow = 0
        var n = 0
        while refusedInARow < 3 && n < 2000 {
            let v: JSON = ["string": .string(String(repeating: "x", count: 4000))]
            let outcome = c.call(
                "io.vaultd.Preferences.Set",
                ["domain": "com.example.fill", "key": .string("k\(n)"), "value": v])
            refusedInARow =
                outcome.errorName == ReliabilityFullDiskTests.storageFull ? refusedInARow + 1 : 0
            n += 1
        }
        try #require(refusedInARow == 3, "the disk did not fill")
        let full = try Self.guessThirtyThenTheRightOne(c, right: right) {
            try d.advanceClock(by: $0)
        }
        Self.expectTheSchedule(full, "full disk")
        #expect(d.isRunning)
        let log = d.log
        let inMemoryOnly = log.components(separatedBy: "counted in memory only").count - 1
        for n in 1...30 {
            #expect(
                log.contains("(\(n) failed in a row"),
                "the full disk's log does not count failure \(n)")
        }
        #expect(
            inMemoryOnly >= 1,
            "every failure was stored on the full disk: the test did not test the full disk")
        func f(_ x: Double) -> String { String(format: "%.3f", x) }
        ReliabilityReport.record(
            "wrong passphrases (the real waits, on vaultd's test clock: \(f(withRoom.waited)) s with room, \(f(full.waited)) s on the full disk): 30 guesses then the right one took \(f(withRoom.seconds)) s with room and \(f(full.seconds)) s on the full disk (\(inMemoryOnly) of 30 failures counted in memory only, the store full); refusals per guess with room \(withRoom.refusals), full \(full.refusals); the right one was refused \(withRoom.rightRefusals) and \(full.rightRefusals) times, first retryAfter \(f(withRoom.rightFirstRetryAfter)) and \(f(full.rightFirstRetryAfter)) s"
        )
    }
}
