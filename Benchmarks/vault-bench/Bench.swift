import Foundation
import VaultClient
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// vault-bench: vaultd against the desktop keyring (gnome-keyring through libsecret), dconf
/// and the bare AF_UNIX round trip, on this machine, in one run (docs/benchmarks.md).
enum Bench {
    nonisolated(unsafe) static var verbose = true

    static func main(_ arguments: [String]) -> Int32 {
        let options: Options
        do {
            options = try Options.parse(arguments)
        } catch let e as Options.UsageError {
            if e.description.isEmpty {
                print(Options.usage)
                return 0
            }
            warn("\(e.description)\n\(Options.usage)")
            return 64
        } catch {
            return 64
        }
        verbose = options.verbose
        signal(SIGPIPE, SIG_IGN)
        if let e = options.echoServer {
            Floor.serve(path: e.path, request: e.request, reply: e.reply)
        }
        do {
            if let results = options.innerKeyringResults {
                try KeyringBench.inner(options, results: results, pidFile: options.pidFile)
                return 0
            }
            if let results = options.innerSecretServiceResults {
                // This run starts vaultd: it goes if the run is interrupted.
                Children.stopOnSignals()
                try SecretServiceBench.inner(options, results: results)
                return 0
            }
            Children.stopOnSignals()
            let report = try run(options)
            if options.json {
                FileHandle.standardOutput.write(report.jsonData)
                FileHandle.standardOutput.write(Data("\n".utf8))
            } else {
                print(report.text, terminator: "")
            }
            return 0
        } catch {
            warn("\(error)")
            return 1
        }
    }

    static func run(_ options: Options) throws -> Report {
        guard let vaultd = options.vaultdPath ?? Spawn.sibling("vaultd") ?? Spawn.which("vaultd")
        else {
            throw BenchError(
                "no vaultd next to vault-bench or in PATH; build it (swift build -c release) or give --vaultd PATH"
            )
        }
        let started = Date()
        let loadBefore = loadAverage()
        let root = try Temp.directory("vault-bench")
        defer { Temp.remove(root) }
        let cache = VaultCache(options: options, binary: vaultd)
        var entries: [Entry] = []
        var rss: Int?
        var startup: Double?
        let largest = options.items.max()!
        // The whole-process comparison runs where the keyring's item count is (or the nearest).
        let processLevel = options.items.min {
            abs($0 - options.keyringItems) < abs($1 - options.keyringItems)
        }!
        // Every item count's vaultd runs at once: the timed workloads take their repetitions
        // in turns across item counts and client counts (`interleave`), so that a slow spell
        // of the machine does not fall on every repetition of one of them.
        final class Level {
            let items: Int
            let vault: VaultdInstance
            let data: String
            var echo: (pid: pid_t, path: String)?
            init(items: Int, vault: VaultdInstance, data: String) {
                self.items = items
                self.vault = vault
                self.data = data
            }
            func stopEcho() {
                guard let echo else { return }
                kill(echo.pid, SIGTERM)
                _ = Spawn.wait(echo.pid, timeout: 5)
                Children.remove(echo.pid)
                self.echo = nil
            }
        }
        var levels: [Level] = []
        defer {
            for l in levels {
                l.stopEcho()
                l.vault.stop()
                Temp.remove(l.data)
            }
        }
        // The socket's vaultds, unless only the parts that start their own run.
        let socketParts = ["lookup", "writes", "prefs", "process", "startup", "floor"]
        for n in options.items where socketParts.contains(where: options.runs) {
            let data = try cache.prepare(items: n, workRoot: root)
            let instanceRoot = root + "/vaultd-\(n)"
            mkdir(instanceRoot, 0o700)
            let level = Level(
                items: n,
                vault: VaultdInstance(binary: vaultd, root: instanceRoot, dataDirectory: data),
                data: data)
            levels.append(level)
            try level.vault.start()
            let count = try level.vault.itemCount()
            guard count == n else { throw BenchError("the vault for \(n) items holds \(count)") }
            progress("vaultd with \(n) items")
        }
        var reads: [Series] = []
        var writes: [Series] = []
        for l in levels {
            let w = VaultdWorkloads(instance: l.vault, items: l.items, options: options)
            // 5. the floor: the same bytes as a lookup, over a bare socket to another process,
            // each repetition taken right before the lookups' of the same item and client
            // count (a VM's wake-up latency drifts with the machine's load, so the ratio
            // compares neighbours).
            var floors: [Series] = []
            if options.runs("floor") {
                let sizes = try Floor.lookupSizes(
                    socketPath: l.vault.socketPath, index: 0, options: options)
                let echo = try Floor.start(
                    root: root + "/vaultd-\(l.items)", request: sizes.request, reply: sizes.reply)
                l.echo = echo
                floors = options.clients.map { c in
                    Floor.roundTripSeries(
                        path: echo.path, request: sizes.request, reply: sizes.reply, clients: c,
                        items: l.items, options: options)
                }
            }
            // 1. lookups.
            let lookups = options.runs("lookup") ? w.lookupSeries() : []
            for i in options.clients.indices {
                if i < floors.count { reads.append(floors[i]) }
                if i < lookups.count { reads.append(lookups[i]) }
            }
            // 2. durable writes, each repetition after the disk's own floor (fdatasync).
            if options.runs("writes") {
                writes +=
                    [Floor.fdatasyncSeries(directory: l.data, items: l.items, options: options)]
                    + w.writeSeries()
            }
        }
        // Every lookup on a store no write has touched yet (a write cycle leaves frames in the
        // WAL that later reads look through, and maybe a checkpoint still running).
        entries += try interleave(reads, repetitions: options.repetitions)
        for l in levels { l.stopEcho() }
        entries += try interleave(writes, repetitions: options.repetitions)
        for (index, l) in levels.enumerated() {
            let n = l.items
            let w = VaultdWorkloads(instance: l.vault, items: n, options: options)
            // 3. preferences (independent of the item count: measured once).
            if index == 0 && options.runs("prefs") { entries += try w.preferences() }
            if n == processLevel && options.runs("process"), let e = try w.itemGetProcess() {
                entries.append(e)
            }
            if n == largest { rss = l.vault.pid.flatMap(residentBytes) }
            l.vault.stop()
            if n == largest && options.runs("startup") {
                // 4. start-up: launch to the first answered lookup.
                startup = try measureStartup(l.vault, items: n, runs: options.startupRuns)
            }
            Temp.remove(l.data)
        }
        // 6. the Secret Service workloads, each system on a private bus of its own.
        if options.runs("ss") { entries += try SecretServiceBench.run(options, vaultd: vaultd) }
        if options.compareKeyring && options.runs("keyring") {
            do {
                entries += try KeyringBench.run(options)
            } catch {
                warn("the keyring comparison failed: \(error)")
            }
        }
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.dateFormat = "yyyy-MM-dd HH:mm"
        f.timeZone = TimeZone(identifier: "UTC")
        var report = Report(
            date: f.string(from: started) + " UTC", machine: Report.machineDescription(),
            settings: [
                "items": options.items.map(String.init).joined(separator: ","),
                "clients": options.clients.map(String.init).joined(separator: ","),
                "write-clients": options.writeClients.map(String.init).joined(separator: ","),
                "seconds": String(options.seconds),
                "reps": String(options.repetitions), "warmup": String(options.warmup),
                "secret-size": String(options.secretSize),
                "keyring-items": options.compareKeyring ? String(options.keyringItems) : "-",
                "ss-items": options.runs("ss")
                    ? options.ssItems.map(String.init).joined(separator: ",") : "-",
                "duration-s": String(format: "%.0f", Date().timeIntervalSince(started)),
                "load-avg": "\(loadBefore) -> \(loadAverage())",
            ],
            workloads: entries, rss_bytes: rss, rss_items: largest, startup_ms: startup, targets: []
        )
        report.judge()
        return report
    }

    /// The 1-minute load average (other work on the machine skews every number).
    static func loadAverage() -> String {
        (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8))?.split(separator: " ").first
            .map(String.init) ?? "?"
    }

    /// Launch to the first answered lookup (a random item, with its secret), in ms; median
    /// of `runs` starts on the same data directory.
    static func measureStartup(_ vault: VaultdInstance, items: Int, runs: Int) throws -> Double {
        var times: [Double] = []
        var rng = XorShift(seed: 7)
        for _ in 0..<runs {
            let i = rng.next(below: items)
            let t0 = try vault.launch()
            var answered: UInt64?
            let deadline = t0 + 60_000_000_000
            while answered == nil && now() < deadline {
                if let c = try? VaultConnection(socketPath: vault.socketPath) {
                    let q = Query(.genericPassword, BenchItem.attributes(i))
                    if let r = try? keychainCopy(c, q), r {
                        answered = now()
                        break
                    }
                }
                if let p = vault.pid, let status = Spawn.wait(p, timeout: 0) {
                    throw BenchError(
                        "vaultd exited (status \(status)) during start-up; log:\n\(vault.log)")
                }
                usleep(200)
            }
            vault.stop()
            guard let a = answered else {
                throw BenchError("vaultd did not answer within 60 s of its launch")
            }
            times.append(Double(a - t0) / 1e6)
        }
        let m = median(times)
        progress(String(format: "start-up with %d items: %.0f ms (median of %d)", items, m, runs))
        return m
    }

    /// One CopyMatching with data on a bare connection (no Hello): true when the secret came.
    private static func keychainCopy(_ c: VaultConnection, _ q: Query) throws -> Bool {
        let r = try c.call(
            .keychainCopyMatching,
            [
                "class": "genericPassword", "query": q.attributes.json, "matchLimit": "one",
                "returnData": true, "returnAttributes": false,
            ])
        return r["items"]?.arrayValue?.first?["data"]?.stringValue != nil
    }
}
