import Foundation
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// CLOCK_MONOTONIC in nanoseconds.
@inline(__always)
func now() -> UInt64 { MonotonicClock.nanoseconds() }

/// One row of the results: a workload on one system at one size.
struct Entry: Codable {
    var name: String
    /// "vaultd", "keyring", "floor" or "dconf".
    var system: String
    var items: Int
    var clients: Int
    // swift-format-ignore: AlwaysUseLowerCamelCase
    var p50_us: Double
    // swift-format-ignore: AlwaysUseLowerCamelCase
    var p99_us: Double
    // swift-format-ignore: AlwaysUseLowerCamelCase
    var ops_per_s: Double
    /// Operations timed, over all repetitions.
    var ops: Int
    /// What was measured, in words (for the table's notes).
    var note: String?
    /// The server's CPU time (user + system, all threads) per operation, in µs, when the
    /// server is a process of the bench (vaultd): robust where wall-clock rates are noisy.
    // swift-format-ignore: AlwaysUseLowerCamelCase
    var server_cpu_us: Double?
    /// The whole machine's busy CPU time (every core, every process: the bench's clients, the
    /// server, the bus daemon) per operation, in µs: the cores' time divided by it bounds the
    /// operations per second any number of clients can reach on this machine.
    // swift-format-ignore: AlwaysUseLowerCamelCase
    var machine_cpu_us: Double?
}

/// The CPU time spent from its start: the server's (when a process of the bench) and the
/// whole machine's, each per operation of a run.
struct CPUSample {
    private let server: pid_t?
    private let serverStart: Double?
    private let machineStart: Double?

    init(server: pid_t?) {
        self.server = server
        serverStart = server.flatMap(cpuMicroseconds)
        machineStart = machineBusyMicroseconds()
    }

    /// The server's and the machine's CPU µs per operation of `run`, since the start (nil
    /// where not read, or for a run of no operations).
    func perOperation(_ run: Run) -> (server: Double?, machine: Double?) {
        let n = Double(run.latencies.count)
        guard n > 0 else { return (nil, nil) }
        let s = serverStart.flatMap { b in server.flatMap(cpuMicroseconds).map { ($0 - b) / n } }
        let m = machineStart.flatMap { b in machineBusyMicroseconds().map { ($0 - b) / n } }
        return (s, m)
    }
}

/// The machine's busy CPU time so far (all cores: user, nice, system, irq, softirq and
/// steal; not idle or iowait), in µs, from the first line of /proc/stat.
func machineBusyMicroseconds() -> Double? {
    guard let s = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
        let line = s.split(separator: "\n").first, line.hasPrefix("cpu ")
    else { return nil }
    let v = line.split(separator: " ").dropFirst().compactMap { Double($0) }
    guard v.count >= 8 else { return nil }
    let busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
    return busy * 1e6 / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// A process's CPU time (user + system, all its threads), in µs, from /proc/PID/stat.
func cpuMicroseconds(_ pid: pid_t) -> Double? {
    guard let s = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = s.lastIndex(of: ")")
    else { return nil }
    let fields = s[s.index(after: close)...].split(separator: " ")
    // After the command: state is field 3, utime 14, stime 15 (1-based in proc(5)).
    guard fields.count > 12, let u = Double(fields[11]), let k = Double(fields[12]) else {
        return nil
    }
    return (u + k) * 1e6 / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// One timed run: every operation's latency, and the wall time from the common start to
/// the last client's end.
struct Run {
    var latencies: [UInt64]
    var elapsed: UInt64
    var failures: Int

    var p50: Double { percentile(0.50) }
    var p99: Double { percentile(0.99) }
    var opsPerSecond: Double {
        elapsed == 0 ? 0 : Double(latencies.count) / (Double(elapsed) / 1e9)
    }

    /// Microseconds at the given fraction of the sorted latencies (nearest rank).
    func percentile(_ q: Double) -> Double {
        guard !latencies.isEmpty else { return 0 }
        let i = min(
            latencies.count - 1, max(0, Int((q * Double(latencies.count)).rounded(.up)) - 1))
        return Double(latencies[i]) / 1000
    }
}

func median(_ values: [Double]) -> Double {
    guard !values.isEmpty else { return 0 }
    let s = values.sorted()
    return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
}

/// A client's operation: called with the iteration number; returns false when the client
/// has nothing left to do (e.g. every item it added is deleted).
typealias Operation = (Int) throws -> Bool

/// Runs `clients` threads, each with the operation `make(client)` built before the clock
/// starts, all released together; each stops at the deadline (`seconds` after the start;
/// infinity: when its operation returns false). Latencies are sorted on return.
func timedRun(clients: Int, seconds: Double, make: (Int) throws -> Operation) throws -> Run {
    let operations = try (0..<clients).map { try make($0) }
    final class Slot: @unchecked Sendable {
        var latencies: [UInt64] = []
        var end: UInt64 = 0
        var failures = 0
        var firstError: String?
    }
    let slots = (0..<clients).map { _ in Slot() }
    let ready = DispatchSemaphore(value: 0)
    let go = DispatchSemaphore(value: 0)
    let done = DispatchGroup()
    let start = LockedValue<UInt64>(0)
    let budget: UInt64 = seconds.isFinite ? UInt64(seconds * 1e9) : UInt64.max
    for c in 0..<clients {
        done.enter()
        let handoff = Handoff(value: operations[c])
        let slot = slots[c]
        let t = Thread {
            let op = handoff.value
            slot.latencies.reserveCapacity(
                seconds.isFinite ? min(2_000_000, Int(seconds * 200_000) + 16) : 1024)
            ready.signal()
            go.wait()
            let deadline = budget == .max ? UInt64.max : start.value + budget
            var i = 0
            while true {
                let t0 = now()
                let more: Bool
                do {
                    more = try op(i)
                } catch {
                    slot.failures += 1
                    if slot.firstError == nil { slot.firstError = "\(error)" }
                    if slot.failures > 10 { break }
                    i += 1
                    continue
                }
                let t1 = now()
                if !more {
                    slot.end = t0
                    break
                }
                slot.latencies.append(t1 - t0)
                i += 1
                if t1 >= deadline {
                    slot.end = t1
                    break
                }
            }
            if slot.end == 0 { slot.end = now() }
            done.leave()
        }
        t.stackSize = 1 << 20
        t.start()
    }
    for _ in 0..<clients { ready.wait() }
    start.value = now()
    for _ in 0..<clients { go.signal() }
    done.wait()
    let s = start.value
    var all: [UInt64] = []
    all.reserveCapacity(slots.reduce(0) { $0 + $1.latencies.count })
    var failures = 0
    for slot in slots {
        all += slot.latencies
        failures += slot.failures
        if let e = slot.firstError { warn("an operation failed: \(e)") }
    }
    all.sort()
    let end = slots.map(\.end).max() ?? s
    return Run(latencies: all, elapsed: end > s ? end - s : 0, failures: failures)
}

/// Flushes what earlier parts left for the disk (`sync`), before a workload is measured:
/// durable writes and the copies of cached vaults leave up to hundreds of MB dirty, which
/// the kernel writes back up to 30 s later, in the middle of whatever is measured then (the
/// copy of a large cached vault would be written back during its own lookups).
func flushEarlierWrites() { sync() }

/// A measurement made of repetitions, which `interleave` runs in turn with other series'
/// repetitions: on a shared VM the CPU time per operation rises for seconds at a time, and
/// back-to-back repetitions would all fall into such a spell together, spoiling a whole
/// series; taken in turns, a spell spoils one repetition of several series, and each median
/// leaves it out.
struct Series {
    /// Untimed: run before the series' first repetition, and again whenever another series'
    /// repetition ran in between (another vaultd's, with its own caches).
    var warmUp: () throws -> Void
    /// One timed repetition; the series keeps what it measured.
    var repetition: () throws -> Void
    /// The entries, from every repetition taken.
    var entries: () -> [Entry]
}

/// Runs `repetitions` rounds; each round takes one repetition of every series, in order,
/// after flushing earlier writes (and warming the series up, see `Series.warmUp`).
/// Returns every series' entries, in order.
func interleave(_ series: [Series], repetitions: Int) throws -> [Entry] {
    var previous: Int?
    for _ in 0..<repetitions {
        for (i, s) in series.enumerated() {
            flushEarlierWrites()
            if previous != i { try s.warmUp() }
            try s.repetition()
            previous = i
        }
    }
    return series.flatMap { $0.entries() }
}

/// Timed runs of `make`'s operations as a `Series` (see `timedRun`): each repetition runs
/// for `options.seconds`, the warm-up for `options.warmup`; its entry holds the median p50,
/// p99 and ops/s of the repetitions (and the median CPU time `server` spent per operation,
/// when given).
func series(
    _ name: String, system: String, items: Int, clients: Int, options: Options, note: String? = nil,
    server: pid_t? = nil,
    make: @escaping (Int) throws -> Operation
) -> Series {
    final class Taken {
        var runs: [Run] = []
        var cpu: [Double] = []
        var machine: [Double] = []
    }
    let taken = Taken()
    return Series(
        warmUp: {
            if options.warmup > 0 {
                _ = try timedRun(clients: clients, seconds: options.warmup, make: make)
            }
        },
        repetition: {
            let sample = CPUSample(server: server)
            let run = try timedRun(clients: clients, seconds: options.seconds, make: make)
            let spent = sample.perOperation(run)
            if let s = spent.server { taken.cpu.append(s) }
            if let m = spent.machine { taken.machine.append(m) }
            taken.runs.append(run)
        },
        entries: {
            var e = summarize(
                name, system: system, items: items, clients: clients, runs: taken.runs, note: note)
            if !taken.cpu.isEmpty { e.server_cpu_us = median(taken.cpu) }
            if !taken.machine.isEmpty { e.machine_cpu_us = median(taken.machine) }
            return [e]
        })
}

/// One `series`, measured alone: warm-up, then `options.repetitions` timed runs, each after
/// flushing earlier writes.
func measure(
    _ name: String, system: String, items: Int, clients: Int, options: Options, note: String? = nil,
    server: pid_t? = nil,
    make: @escaping (Int) throws -> Operation
) throws -> Entry {
    try interleave(
        [
            series(
                name, system: system, items: items, clients: clients, options: options, note: note,
                server: server, make: make)
        ],
        repetitions: options.repetitions)[0]
}

func summarize(
    _ name: String, system: String, items: Int, clients: Int, runs: [Run], note: String? = nil,
    opsPerSample: Int = 1
) -> Entry {
    let failures = runs.reduce(0) { $0 + $1.failures }
    if failures > 0 {
        warn(
            "\(name) on \(system) (\(items) items, \(clients) clients): \(failures) operations failed"
        )
    }
    let e = Entry(
        name: name, system: system, items: items, clients: clients, p50_us: median(runs.map(\.p50)),
        p99_us: median(runs.map(\.p99)),
        ops_per_s: median(runs.map(\.opsPerSecond)) * Double(opsPerSample),
        ops: runs.reduce(0) { $0 + $1.latencies.count } * opsPerSample, note: note)
    progress(
        String(
            format: "%@ %@ items=%d clients=%d: p50 %.1f µs, p99 %.1f µs, %.0f ops/s", name, system,
            items, clients, e.p50_us, e.p99_us, e.ops_per_s))
    return e
}

/// A value handed to the one thread that uses it from then on (a client's operation and
/// connection): `@unchecked Sendable` because the thread that made it never touches it again.
struct Handoff<T>: @unchecked Sendable {
    let value: T
}

/// A value shared between the bench's threads. `@unchecked Sendable`: `stored` is only read
/// and written under `lock`.
final class LockedValue<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: T
    init(_ v: T) { stored = v }
    var value: T {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}
