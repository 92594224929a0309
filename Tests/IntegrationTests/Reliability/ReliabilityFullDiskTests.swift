import Foundation
import TestSupport
import Testing
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Full disk: the data directory on a small tmpfs in a private mount namespace
/// (vaultd started inside it; its socket stays outside, on the normal filesystem). Writes
/// that do not fit fail with io.vaultd.Vault.StorageFull and leave nothing behind; what was
/// stored before stays intact, also across a SIGKILL and a restart on the full disk; once
/// space is freed, writes work again without a restart.
@Suite(.tags(.system)) struct ReliabilityFullDiskTests {
    static let available: Bool = {
        guard getuid() == 0 else { return false }
        let r = try? ChildProcess.run(
            "unshare", ["-m", "true"], environment: ProcessInfo.processInfo.environment, timeout: 10
        )
        return r?.status == 0
    }()

    static let storageFull = "io.vaultd.Vault.StorageFull"

    /// Mounts a 16 MiB tmpfs on $1, puts fillers of 4 and 3 MiB in it (the space to free
    /// later), starts a
    /// `sleep` that keeps the namespace (and the tmpfs) alive across vaultd restarts, and
    /// becomes vaultd.
    static let script = """
        d=$1; shift
        mount -t tmpfs -o size=16m,mode=0700 tmpfs "$d" || exit 90
        head -c 4194304 /dev/zero > "$d/filler1" || exit 91
        head -c 3145728 /dev/zero > "$d/filler2" || exit 91
        sleep 600 & echo $! > "$d.holder"
        exec "$@"
        """

    /// What the test knows about the vault's content.
    /// `@unchecked Sendable`: its state is read and written under `lock`.
    final class Model: @unchecked Sendable {
        private let lock = NSLock()
        var items: [String: [UInt8]] = [:]
        /// Adds that failed with StorageFull: they must not exist.
        var refused: Set<String> = []
        var values: JSONObject = [:]
        var acknowledged = 0
        var storageFullErrors = 0
        var problems: [String] = []

        func withLock<T>(_ body: (Model) -> T) -> T { lock.withLock { body(self) } }

        /// Records the outcome of an Add; false when it was refused for lack of space.
        func add(_ account: String, _ secret: [UInt8], _ outcome: ExactClient.Outcome) -> Bool {
            withLock { m in
                switch outcome {
                case .ok:
                    m.items[account] = secret
                    m.acknowledged += 1
                    return true
                case .error(Self.storageFullName, let p):
                    m.refused.insert(account)
                    m.storageFullErrors += 1
                    if (p["message"]?.stringValue ?? "").isEmpty {
                        m.problems.append("StorageFull without a message")
                    }
                    return false
                default:
                    m.problems.append("Add \(account): \(outcome)")
                    return false
                }
            }
        }
        static let storageFullName = ReliabilityFullDiskTests.storageFull
    }

    static func add(_ c: ExactClient, _ account: String, _ secret: [UInt8]) -> ExactClient.Outcome {
        c.call(
            "io.vaultd.Keychain.Add",
            [
                "class": "genericPassword",
                "attributes": ["service": "disk", "account": .string(account)],
                "data": Wire.base64(secret),
            ])
    }

    /// Everything acknowledged is there, byte for byte; nothing refused is.
    static func verify(_ c: ExactClient, _ m: Model, _ when: String) throws {
        let stored = Dictionary(
            uniqueKeysWithValues: try Wire.allGenericPasswords(c).map { ($0.account, $0.secret) })
        var problems: [String] = []
        for (a, s) in m.items where stored[a] != s {
            problems.append(
                "\(a): acknowledged \(s.count) B, found \(stored[a]?.count.description ?? "nothing")"
            )
        }
        for a in m.refused where stored[a] != nil && m.items[a] == nil {
            problems.append("\(a): refused with StorageFull, yet stored")
        }
        for a in stored.keys where m.items[a] == nil && !m.refused.contains(a) {
            problems.append("\(a): stored, never written")
        }
        let values = try Wire.domain(c, "com.example.disk")
        if values != m.values {
            problems.append(
                "preferences: expected \(JSON.object(m.values).text.prefix(300)), found \(JSON.object(values).text.prefix(300))"
            )
        }
        for p in problems.prefix(10) { Issue.record("\(when): \(p)") }
    }

    /// vaultd started in a mount namespace of its own on a small tmpfs (`script`): the test's
    /// directory, the tmpfs's mount point, the daemon, and the pid that holds the namespace
    /// (for `nsenter`). The caller kills both.
    static func startOnSmallDisk() throws -> (
        root: String, disk: String, daemon: CustomDaemon, holder: pid_t
    ) {
        let root = try TemporaryDirectory.make(prefix: "vaultd-disk")
        let disk = root + "/disk"
        mkdir(disk, 0o700)
        let d = try CustomDaemon(dataDirectory: disk + "/data", root: root)
        do {
            try Self.script.write(toFile: root + "/ns.sh", atomically: true, encoding: .utf8)
            try d.start(wrapper: ["unshare", "-m", "sh", root + "/ns.sh", disk])
            let holder = (try? String(contentsOfFile: disk + ".holder", encoding: .utf8)).flatMap {
                pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines))
            }
            return (root, disk, d, try #require(holder, "the namespace holder did not start"))
        } catch {
            d.kill()
            d.close()
            throw error
        }
    }

    @Test(
        .enabled(if: available, "needs root and mount namespaces (unshare -m)"),
        .timeLimit(.minutes(3)))
    func writesThatDoNotFitFailCleanlyAndWorkAgainOnceSpaceIsFreed() throws {
        let (root, disk, d, namespaceHolder) = try Self.startOnSmallDisk()
        defer {
            d.kill()
            kill(namespaceHolder, SIGKILL)
            d.close()
        }
        // The tmpfs is vaultd's alone: the host sees an empty directory.
        #expect((try? FileManager.default.contentsOfDirectory(atPath: disk))?.isEmpty == true)

        let m = Model()
        var random = SeededRandom(seed: Stress.seed())
        let c = try d.connect()
        try Wire.initWithoutPassphrase(c)
        // Before: a few small items and preferences.
        for i in 0..<5 {
            let s = random.bytes(100)
            let ok = m.add("small-\(i)", s, Self.add(c, "small-\(i)", s))
            try #require(ok, "a small write failed on an empty disk")
            let v: JSON = ["string": .string("value \(i)")]
            try #require(
                c.call(
                    "io.vaultd.Preferences.Set",
                    ["domain": "com.example.disk", "key": .string("k\(i)"), "value": v]
                ).parameters != nil)
            m.values["k\(i)"] = v
        }
        // Fill it, from four clients at once (writes meet in group commits at the edge), each
        // until it was refused three times in a row.
        let path = d.socketPath
        onThreads(4) { t in
            guard let c = try? ExactClient(path: path) else { return }
            var rng = SeededRandom(seed: UInt64(t + 1) * 7_777)
            var refusedInARow = 0
            var n = 0
            while refusedInARow < 3 && n < 1000 {
                let s = rng.bytes(Int.random(in: 8_192...65_536, using: &rng))
                if m.add("fill-\(t)-\(n)", s, Self.add(c, "fill-\(t)-\(n)", s)) {
                    refusedInARow = 0
                } else {
                    refusedInARow += 1
                }
                n += 1
            }
        }
        let filled = m.withLock { ($0.acknowledged, $0.storageFullErrors) }
        #expect(filled.1 >= 12, "the disk never filled: \(filled)")

        // At the edge: small writes of every kind either succeed or fail with StorageFull.
        for i in 0..<10 {
            let s = random.bytes(i * 50)
            _ = m.add("edge-\(i)", s, Self.add(c, "edge-\(i)", s))
            let v: JSON = ["integer": JSON(i)]
            switch c.call(
                "io.vaultd.Preferences.Set",
                ["domain": "com.example.disk", "key": .string("edge\(i)"), "value": v])
            {
            case .ok: m.values["edge\(i)"] = v
            case .error(Self.storageFull, _): m.storageFullErrors += 1
            case let other: Issue.record("Preferences.Set at a full disk: \(other)")
            }
        }
        for p in m.problems.prefix(10) { Issue.record("\(p)") }
        m.problems.removeAll()
        #expect(d.isRunning, "vaultd died on a full disk; log:\n\(d.log)")
        #expect(c.call("io.vaultd.Vault.Status").parameters != nil)
        try Self.verify(c, m, "at a full disk")

        // A SIGKILL on the full disk, and a restart inside the same namespace.
        c.close()
        d.kill()
        try d.start(wrapper: ["nsenter", "--mount=/proc/\(namespaceHolder)/ns/mnt"])
        let c2 = try d.connect()
        try Self.verify(c2, m, "after a SIGKILL and a restart on the full disk")

        // Free 4 MiB (from inside the namespace): writes work again, no restart. (Freed
        // space goes first to the checkpoint the full disk held up: vault.sqlite takes in
        // the WAL's pages, up to its ~4 MB auto-checkpoint size, before the WAL is reused.)
        func free(_ filler: String) throws {
            let rm = try ChildProcess.run(
                "nsenter", ["--mount=/proc/\(namespaceHolder)/ns/mnt", "rm", disk + "/" + filler],
                environment: ProcessInfo.processInfo.environment, timeout: 20)
            try #require(rm.status == 0, "\(rm)")
        }
        try free("filler1")
        let pid = try #require(d.pid)
        for i in 0..<3 {
            let s = random.bytes(65_536)
            let ok = m.add("after-\(i)", s, Self.add(c2, "after-\(i)", s))
            #expect(ok, "a write after space was freed failed")
            let v: JSON = ["string": "after"]
            #expect(
                c2.call(
                    "io.vaultd.Preferences.Set",
                    ["domain": "com.example.disk", "key": .string("after\(i)"), "value": v]
                ).parameters != nil)
            m.values["after\(i)"] = v
        }
        for p in m.problems.prefix(10) { Issue.record("\(p)") }
        try Self.verify(c2, m, "after space was freed")

        // Free 3 MiB more and fill it with secrets of the largest size (1 MiB), four clients
        // at once: a group commit of several such writes outgrows SQLite's page cache, so
        // the disk can run out in the middle of a group, not only at its COMMIT.
        try free("filler2")
        let before = m.withLock { ($0.acknowledged, $0.storageFullErrors) }
        for round in 0..<4 {
            onThreads(4) { t in
                guard let c = try? ExactClient(path: path) else { return }
                var rng = SeededRandom(seed: UInt64(round * 4 + t + 99))
                let s = rng.bytes(1 << 20)
                _ = m.add("big-\(round)-\(t)", s, Self.add(c, "big-\(round)-\(t)", s))
            }
        }
        let big = m.withLock { ($0.acknowledged - before.0, $0.storageFullErrors - before.1) }
        #expect(
            big.0 >= 1 && big.1 >= 1,
            "1 MiB writes into 3 MiB: \(big.0) acknowledged, \(big.1) refused")
        for p in m.problems.prefix(10) { Issue.record("\(p)") }
        try Self.verify(c2, m, "after 1 MiB writes at the edge")
        #expect(d.pid == pid, "vaultd restarted")

        // And the database on the tmpfs is sound. vaultd holds the store exclusively while it
        // runs (SQLite's unix-excl VFS) and a reader needs room for a WAL index, which the full
        // tmpfs has not: so after vaultd, on a copy outside it.
        d.kill()
        let copy = root + "/integrity"
        mkdir(copy, 0o700)
        let check = try ChildProcess.run(
            "nsenter",
            [
                "--mount=/proc/\(namespaceHolder)/ns/mnt", "sh", "-c",
                "cp \"$1\"/vault.sqlite* \"$2\"/ && sqlite3 \"$2\"/vault.sqlite 'PRAGMA integrity_check;'",
                "sh", d.dataDirectory, copy,
            ],
            environment: ProcessInfo.processInfo.environment, timeout: 60)
        #expect(
            check.status == 0
                && check.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines) == "ok",
            "\(check)")
        ReliabilityReport.record(
            "full disk (16 MiB tmpfs): \(filled.0) writes acknowledged while filling, \(m.storageFullErrors) refused with StorageFull in all; all acknowledged intact after a SIGKILL + restart on the full disk; writes worked again once 4 MiB were freed; 1 MiB secrets into 3 MiB freed: \(big.0) acknowledged, \(big.1) refused"
        )
    }
    /// vaultctl against `d` (its socket is outside the tmpfs, so vaultctl runs on the host).
    static func ctl(_ d: CustomDaemon, _ arguments: [String], stdin: Data? = nil) throws
        -> ProcessResult
    {
        var env = isolatedEnvironment(root: d.root, socket: d.socketPath)
        env["VAULTD_SOCKET"] = d.socketPath
        return try ChildProcess.run(
            Paths.tool("vaultctl"), arguments, environment: env, stdin: stdin, timeout: 60)
    }

    /// The size in bytes of the blocks `path` (in the namespace of `holder`) holds.
    static func allocated(_ path: String, holder: pid_t) throws -> Int? {
        let r = try ChildProcess.run(
            "nsenter", ["--mount=/proc/\(holder)/ns/mnt", "stat", "-c", "%b %B", path],
            environment: ProcessInfo.processInfo.environment, timeout: 20)
        let parts = r.stdoutText.split(separator: " ").compactMap {
            Int($0.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        return parts.count == 2 ? parts[0] * parts[1] : nil
    }

    /// On a disk so full that an Add is refused, deleting still works, item by item, and so do
    /// removing preference keys and a domain, uninstalling an app and locking: vaultd gives its
    /// space reserve (`space.reserve`, 1 MiB) back for them. Once space is freed, a periodic
    /// pass fills the reserve again.
    @Test(
        .enabled(if: available, "needs root and mount namespaces (unshare -m)"),
        .timeLimit(.minutes(3)))
    func deletingAndLockingWorkOnAFullDisk() throws {
        let (root, disk, d, namespaceHolder) = try Self.startOnSmallDisk()
        defer {
            d.kill()
            kill(namespaceHolder, SIGKILL)
            d.close()
        }
        let reservePath = d.dataDirectory + "/space.reserve"
        #expect(
            try Self.allocated(reservePath, holder: namespaceHolder) ?? 0 >= 1 << 20,
            "the reserve at start")

        let initialized = try Self.ctl(
            d, ["init", "--passphrase-fd", "0"], stdin: Data("correct horse\n".utf8))
        try #require(initialized.status == 0, "\(initialized)")
        let c = try d.connect()
        for i in 0..<3 {
            let v: JSON = ["string": .string("value \(i)")]
            try #require(
                c.call(
                    "io.vaultd.Preferences.Set",
                    ["domain": "com.example.disk", "key": .string("k\(i)"), "value": v]
                ).parameters != nil)
            try #require(
                c.call(
                    "io.vaultd.Preferences.Set",
                    ["domain": "com.example.gone", "key": .string("k\(i)"), "value": v]
                ).parameters != nil)
        }
        let install = try Self.ctl(
            d, ["app", "install", "org.example.Gone", "--exe", "/usr/bin/true"])
        try #require(install.status == 0, "\(install)")
        // Fill it with large items until three Adds in a row are refused, then with tiny ones
        // until three are: the pages a large one could not have may still hold a small one.
        var random = SeededRandom(seed: Stress.seed())
        var stored: [String] = []
        var attempts = 0
        for size in [32_768, 3] {
            var refusedInARow = 0
            while refusedInARow < 3 && stored.count < 2000 {
                let account = "fill-\(attempts)"
                attempts += 1
                switch Self.add(c, account, random.bytes(size)) {
                case .ok:
                    stored.append(account)
                    refusedInARow = 0
                case .error(Self.storageFull, _): refusedInARow += 1
                case let other: Issue.record("Add while filling: \(other)")
                }
            }
            try #require(
                refusedInARow == 3 && stored.count > 10,
                "the disk never filled with \(size)-byte items: \(stored.count) stored")
        }

        // Deletes, one item at a time through vaultctl, then the other removals, then Lock.
        for account in stored.prefix(5) {
            let delete = try Self.ctl(
                d, ["item", "delete", "--service", "disk", "--account", account])
            #expect(
                delete.status == 0 && delete.stdoutText.contains("deleted 1 item(s)"),
                "item delete on a full disk: \(delete)")
        }
        #expect(
            d.log.contains("the disk is full: gave the space reserve (1048576 bytes"),
            "log:\n\(d.log)")
        let removeKey = try Self.ctl(d, ["defaults", "delete", "com.example.disk", "k0"])
        #expect(removeKey.status == 0, "defaults delete KEY on a full disk: \(removeKey)")
        let removeDomain = try Self.ctl(d, ["defaults", "delete", "com.example.gone"])
        #expect(removeDomain.status == 0, "defaults delete DOMAIN on a full disk: \(removeDomain)")
        let uninstall = try Self.ctl(d, ["app", "uninstall", "org.example.Gone"])
        #expect(uninstall.status == 0, "app uninstall on a full disk: \(uninstall)")
        // What was deleted is gone; what was not is there.
        let accounts = Set(try Wire.allGenericPasswords(c).map(\.account))
        #expect(
            accounts == Set(stored.dropFirst(5)),
            "\(accounts.count) items, \(stored.count - 5) expected")
        #expect(try Wire.domain(c, "com.example.disk").keys.sorted() == ["k1", "k2"])
        #expect(try Wire.domain(c, "com.example.gone").isEmpty)
        let lock = try Self.ctl(d, ["lock"])
        #expect(lock.status == 0, "lock on a full disk: \(lock)")
        let status = try Self.ctl(d, ["status"])
        #expect(status.stdoutText.contains("state: locked"), "\(status)")

        // Room again (4 MiB freed): the next periodic pass fills the reserve.
        let rm = try ChildProcess.run(
            "nsenter", ["--mount=/proc/\(namespaceHolder)/ns/mnt", "rm", disk + "/filler1"],
            environment: ProcessInfo.processInfo.environment, timeout: 20)
        try #require(rm.status == 0, "\(rm)")
        try Daemon.tick(d.pid, log: { d.log })
        #expect(
            try Self.allocated(reservePath, holder: namespaceHolder) ?? 0 >= 1 << 20,
            "the reserve after space was freed")
        #expect(d.isRunning)
        ReliabilityReport.record(
            "full disk: \(stored.count) items filled it; 5 item deletes, a key, a domain, an uninstall and a lock worked on it; the 1 MiB reserve came back once 4 MiB were freed"
        )
    }
}
