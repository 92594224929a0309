import Foundation
import VaultClient
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// A cheap deterministic random index generator (no syscall per draw).
struct XorShift {
    var state: UInt64
    init(seed: UInt64) { state = seed &* 0x9E37_79B9_7F4A_7C15 | 1 }
    mutating func next(below n: Int) -> Int {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        return Int(state % UInt64(max(1, n)))
    }
}

/// One client's durable writes, by item index.
struct WriteClient {
    var add: (Int) throws -> Void
    var update: (Int) throws -> Void
    var delete: (Int) throws -> Void
}

protocol WriteStore {
    func client() throws -> WriteClient
}

/// Item indices the write workloads create: far above any stored count, distinct per cycle
/// and client, so adds are always new items.
private let nextCycle = LockedValue(0)

/// Durable writes as a `Series`: each repetition is one cycle — add new items for
/// `options.seconds`, update those items for as long, delete every one of them (so the
/// store is back to `items` afterwards); the warm-up is a cycle of `options.warmup`
/// seconds. The entries (add, update, delete, or the `names` given) hold the medians.
func writeSeries(
    system: String, items: Int, clients: Int, options: Options, store: WriteStore,
    server: pid_t? = nil,
    names: [(name: String, note: String)] = WriteNames.durable
) -> Series {
    final class Taken {
        var runs: [[Run]] = [[], [], []]
        var cpu: [[Double]] = [[], [], []]
        var machine: [[Double]] = [[], [], []]
    }
    let taken = Taken()
    func cycle(timed: Bool) throws {
        let seconds = timed ? options.seconds : options.warmup
        let cycleID: Int = {
            let v = nextCycle.value
            nextCycle.value = v + 1
            return v
        }()
        /// Runs `body`; when timed, keeps its run and the server's and the machine's CPU per
        /// operation in `slot`.
        func sampled(_ slot: Int, _ body: () throws -> Run) rethrows {
            let sample = CPUSample(server: server)
            let run = try body()
            guard timed else { return }
            taken.runs[slot].append(run)
            let spent = sample.perOperation(run)
            if let s = spent.server { taken.cpu[slot].append(s) }
            if let m = spent.machine { taken.machine[slot].append(m) }
        }
        /// `@unchecked Sendable`: each client's box is appended to by that client's thread alone,
        /// and read after the run.
        final class Added: @unchecked Sendable { var indices: [Int] = [] }
        let added = (0..<clients).map { _ in Added() }
        let writers = try (0..<clients).map { _ in try store.client() }
        try sampled(0) {
            try timedRun(clients: clients, seconds: seconds) { c in
                let w = writers[c]
                let box = added[c]
                let base = 1_000_000_000 + (cycleID * 256 + c) * 10_000_000
                return { k in
                    try w.add(base + k)
                    box.indices.append(base + k)
                    return true
                }
            }
        }
        try sampled(1) {
            try timedRun(clients: clients, seconds: seconds) { c in
                let w = writers[c]
                let list = added[c].indices
                return { k in
                    guard !list.isEmpty else { return false }
                    try w.update(list[k % list.count])
                    return true
                }
            }
        }
        try sampled(2) {
            try timedRun(clients: clients, seconds: .infinity) { c in
                let w = writers[c]
                let list = added[c].indices
                return { k in
                    guard k < list.count else { return false }
                    try w.delete(list[k])
                    return true
                }
            }
        }
    }
    return Series(
        warmUp: { if options.warmup > 0 { try cycle(timed: false) } },
        repetition: { try cycle(timed: true) },
        entries: {
            var entries = (0..<3).map { i in
                summarize(
                    names[i].name, system: system, items: items, clients: clients,
                    runs: taken.runs[i], note: names[i].note)
            }
            for i in 0..<3 where !taken.cpu[i].isEmpty {
                entries[i].server_cpu_us = median(taken.cpu[i])
            }
            for i in 0..<3 where !taken.machine[i].isEmpty {
                entries[i].machine_cpu_us = median(taken.machine[i])
            }
            return entries
        })
}

/// The entries' names and notes of `writeSeries`'s add, update and delete.
enum WriteNames {
    static let durable = [
        (name: "add", note: "durable add of a new item"),
        (name: "update", note: "durable update of an item's secret"),
        (name: "delete", note: "durable delete of one item"),
    ]
}

/// Times whole processes (`make` gives the executable and its arguments for each run):
/// two untimed runs, then `processRuns` timed ones, one at a time. Flushes earlier writes
/// first.
func processRuns(
    _ name: String, system: String, items: Int, options: Options, note: String,
    environment: [String: String] = ProcessInfo.processInfo.environment,
    make: () -> (String, [String])
) throws -> Entry {
    flushEarlierWrites()
    var latencies: [UInt64] = []
    var failures = 0
    var timedTotal: UInt64 = 0
    for r in 0..<(2 + options.processRuns) {
        let (path, args) = make()
        let start = now()
        let status = try Spawn.run(path, args, environment: environment)
        let end = now()
        if status != 0 { failures += 1 }
        if r >= 2 {
            latencies.append(end - start)
            timedTotal += end - start
        }
    }
    if failures > 0 { warn("\(name) on \(system): \(failures) runs exited non-zero") }
    latencies.sort()
    return summarize(
        name, system: system, items: items, clients: 1,
        runs: [Run(latencies: latencies, elapsed: timedTotal, failures: failures)], note: note)
}

/// Durable writes to vaultd through VaultClient.
struct VaultdStore: WriteStore {
    let instance: VaultdInstance
    let options: Options
    func client() throws -> WriteClient {
        let kc = try instance.connect().keychain
        let size = options.secretSize
        return WriteClient(
            add: { i in
                try kc.add(
                    attributes: BenchItem.attributes(i), data: BenchItem.secret(i, size: size))
            },
            update: { i in
                guard
                    try kc.update(BenchItem.query(i), data: BenchItem.secret(i + 1, size: size))
                        == 1
                else { throw BenchError("update changed nothing") }
            },
            delete: { i in
                guard try kc.delete(BenchItem.query(i)) == 1 else {
                    throw BenchError("delete removed nothing")
                }
            })
    }
}

/// vaultd's workloads at one item count.
struct VaultdWorkloads {
    let instance: VaultdInstance
    let items: Int
    let options: Options

    /// One lookup series per client count (`Keychain.copyMatching` of a random stored item,
    /// with its secret).
    func lookupSeries() -> [Series] {
        options.clients.map { c in
            series(
                "lookup", system: "vaultd", items: items, clients: c, options: options,
                note: "Keychain.copyMatching, returnData", server: instance.pid
            ) { client in
                let kc = try instance.connect().keychain
                var rng = XorShift(seed: UInt64(client + 1))
                let size = options.secretSize
                return { _ in
                    let i = rng.next(below: items)
                    let found = try kc.copyMatching(
                        BenchItem.query(i), returnData: true, returnAttributes: false)
                    guard found.first?.data?.count == size else {
                        throw BenchError("lookup of item \(i) returned no secret")
                    }
                    return true
                }
            }
        }
    }

    /// One durable-writes series per write-client count (`writeSeries`).
    func writeSeries() -> [Series] {
        let store = VaultdStore(instance: instance, options: options)
        return options.writeClients.map { c in
            vault_bench.writeSeries(
                system: "vaultd", items: items, clients: c, options: options, store: store,
                server: instance.pid)
        }
    }

    /// `vaultctl item get` as a whole process (found next to the bench, or --vaultctl).
    func itemGetProcess() throws -> Entry? {
        guard let ctl = options.vaultctlPath ?? Spawn.sibling("vaultctl") ?? Spawn.which("vaultctl")
        else {
            warn("no vaultctl next to vault-bench: item-get-process skipped")
            return nil
        }
        var env = instance.environment
        env["VAULTD_SOCKET"] = instance.socketPath
        // Check once that it prints the secret.
        let out = instance.root + "/vaultctl.out"
        let status = try Spawn.run(
            ctl,
            ["item", "get", "--service", BenchItem.service(0), "--account", BenchItem.account(0)],
            environment: env, stdout: .file(out))
        let printed = (try? Data(contentsOf: URL(fileURLWithPath: out))) ?? Data()
        guard status == 0, printed == BenchItem.secret(0, size: options.secretSize) else {
            throw BenchError(
                "vaultctl item get failed (exit \(status)): printed \(printed.count) bytes")
        }
        var rng = XorShift(seed: 99)
        return try processRuns(
            "item-get-process", system: "vaultd", items: items, options: options,
            note: "vaultctl item get", environment: env
        ) {
            let i = rng.next(below: items)
            return (
                ctl,
                [
                    "item", "get", "--service", BenchItem.service(i), "--account",
                    BenchItem.account(i),
                ]
            )
        }
    }

    /// Preferences: Get and Set through the socket, and `Defaults` reads from the client's
    /// in-process copy.
    func preferences() throws -> [Entry] {
        let domain = "io.vaultd.bench"
        var entries: [Entry] = []
        let setup = try instance.connect()
        try setup.preferences.set(.integer(42), domain: domain, key: "k")
        entries.append(
            try measure(
                "prefs-get", system: "vaultd", items: 0, clients: 1, options: options,
                note: "Preferences.Get through the socket", server: instance.pid
            ) { _ in
                let p = try instance.connect().preferences
                return { _ in
                    guard try p.value(domain: domain, key: "k") == .integer(42) else {
                        throw BenchError("prefs-get: wrong value")
                    }
                    return true
                }
            })
        entries.append(try defaultsRead(domain: domain))
        for c in options.writeClients {
            entries.append(
                try measure(
                    "prefs-set", system: "vaultd", items: 0, clients: c, options: options,
                    note: "durable Preferences.Set, one domain", server: instance.pid
                ) { client in
                    let p = try instance.connect().preferences
                    return { k in
                        try p.set(.integer(Int64(k)), domain: domain, key: "k\(client)")
                        return true
                    }
                })
        }
        return entries
    }

    /// `Defaults.object(forKey:)`: timed in batches of 1000 (a clock read costs about as much
    /// as the lookup); each batch's mean is one sample.
    func defaultsRead(domain: String) throws -> Entry {
        let defaults = try Defaults(vault: try instance.connect(), suiteName: domain, arguments: [])
        guard defaults.object(forKey: "k") == .integer(42) else {
            throw BenchError("Defaults does not see the value")
        }
        return try batchedReads(
            "defaults-read", system: "vaultd", options: options,
            note: "Defaults.object(forKey:), in-process copy"
        ) {
            defaults.object(forKey: "k") != nil
        }
    }
}

/// Times a very cheap read in batches of 1000; the p50/p99 are of the batch means. Flushes
/// earlier writes first.
func batchedReads(
    _ name: String, system: String, options: Options, note: String, read: @escaping () -> Bool
) throws -> Entry {
    flushEarlierWrites()
    let batch = 1000
    var runs: [Run] = []
    for rep in 0..<(1 + options.repetitions) {
        let seconds = rep == 0 ? max(0.05, options.warmup) : options.seconds
        var samples: [UInt64] = []
        var hits = 0
        let start = now()
        let deadline = start + UInt64(seconds * 1e9)
        var t = start
        while t < deadline {
            let t0 = now()
            for _ in 0..<batch where read() { hits += 1 }
            t = now()
            samples.append((t - t0) / UInt64(batch))
        }
        if hits != samples.count * batch { throw BenchError("\(name): a read found nothing") }
        if rep > 0 {
            samples.sort()
            // Every sample stands for `batch` reads: ops/s counts reads.
            runs.append(Run(latencies: samples, elapsed: t - start, failures: 0))
        }
    }
    return summarize(
        name, system: system, items: 0, clients: 1, runs: runs, note: note, opsPerSample: batch)
}
