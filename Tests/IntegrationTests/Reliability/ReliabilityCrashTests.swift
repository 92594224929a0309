import Foundation
import TestSupport
import Testing
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Crash harness: clients write keychain items and preferences and record every
/// acknowledgement; vaultd is SIGKILLed at random moments and restarted (over the stale
/// socket the kill leaves); every acknowledged write must be there and readable, and
/// `PRAGMA integrity_check` passes on the database as the kill left it.
@Suite struct ReliabilityCrashTests {
    static let service = "crash"
    static let domain = "com.example.crash"
    static let clients = 4
    static let accountsPerClient = 40
    static let keysPerClient = 20

    /// One writer. It owns its accounts and keys (so its own view of them is exact); at a kill
    /// it has at most one write in flight, whose effect is unknown until the restart.
    ///
    /// `@unchecked Sendable`: each writer is run by one thread, and read by the test once that
    /// thread has stopped.
    final class Writer: @unchecked Sendable {
        enum Write {
            case add(String, [UInt8])
            case update(String, [UInt8])
            case delete(String)
            case set(String, JSON)
            case remove(String)
        }

        let id: Int
        var random: SeededRandom
        /// Acknowledged state: account → secret, key → value.
        var items: [String: [UInt8]] = [:]
        var values: JSONObject = [:]
        /// The write sent when the connection died, if any.
        var inFlight: Write?
        var acknowledged = 0
        var failures: [String] = []
        var sequence = 0

        init(id: Int, seed: UInt64) {
            self.id = id
            random = SeededRandom(seed: seed &+ UInt64(id) &* 7919)
        }

        var accounts: [String] {
            (0..<ReliabilityCrashTests.accountsPerClient).map { "c\(id)-a\($0)" }
        }
        var keys: [String] { (0..<ReliabilityCrashTests.keysPerClient).map { "c\(id)-k\($0)" } }

        func secret() -> [UInt8] {
            sequence += 1
            // Mostly small; sometimes 16-96 KiB, so a write spans many pages and WAL frames.
            let size =
                Int.random(in: 0..<20, using: &random) == 0
                ? Int.random(in: 16_384...98_304, using: &random)
                : Int.random(in: 1...600, using: &random)
            var s = random.bytes(size)
            s.replaceSubrange(
                0..<min(4, s.count),
                with: withUnsafeBytes(of: UInt32(sequence).bigEndian, Array.init).prefix(s.count))
            return s
        }

        func nextWrite() -> Write {
            sequence += 1
            let present = accounts.filter { items[$0] != nil }
            let absent = accounts.filter { items[$0] == nil }
            switch Int.random(in: 0..<100, using: &random) {
            case 0..<35 where !absent.isEmpty:
                return .add(absent.randomElement(using: &random)!, secret())
            case 35..<55 where !present.isEmpty:
                return .update(present.randomElement(using: &random)!, secret())
            case 55..<65 where !present.isEmpty:
                return .delete(present.randomElement(using: &random)!)
            case 65..<95:
                let v: JSON =
                    Bool.random(using: &random)
                    ? ["integer": JSON(Int64.random(in: Int64.min...Int64.max, using: &random))]
                    : [
                        "string": .string(
                            "c\(id) write \(sequence) "
                                + String(
                                    repeating: "x", count: Int.random(in: 0...300, using: &random)))
                    ]
                return .set(keys.randomElement(using: &random)!, v)
            default:
                if !absent.isEmpty && Bool.random(using: &random) {
                    return .add(absent.randomElement(using: &random)!, secret())
                }
                return .remove(keys.randomElement(using: &random)!)
            }
        }

        static func call(for w: Write) -> (String, JSONObject) {
            switch w {
            case .add(let a, let s):
                return (
                    "io.vaultd.Keychain.Add",
                    [
                        "class": "genericPassword",
                        "attributes": ["service": .string(service), "account": .string(a)],
                        "data": Wire.base64(s),
                    ]
                )
            case .update(let a, let s):
                return (
                    "io.vaultd.Keychain.Update",
                    [
                        "class": "genericPassword",
                        "query": ["service": .string(service), "account": .string(a)],
                        "data": Wire.base64(s),
                    ]
                )
            case .delete(let a):
                return (
                    "io.vaultd.Keychain.Delete",
                    [
                        "class": "genericPassword",
                        "query": ["service": .string(service), "account": .string(a)],
                    ]
                )
            case .set(let k, let v):
                return (
                    "io.vaultd.Preferences.Set",
                    ["domain": .string(domain), "key": .string(k), "value": v]
                )
            case .remove(let k):
                return (
                    "io.vaultd.Preferences.Remove", ["domain": .string(domain), "key": .string(k)]
                )
            }
        }

        func apply(_ w: Write) {
            switch w {
            case .add(let a, let s), .update(let a, let s): items[a] = s
            case .delete(let a): items[a] = nil
            case .set(let k, let v): values[k] = v
            case .remove(let k): values[k] = nil
            }
        }

        /// Writes until the connection dies (vaultd killed).
        func run(socket: String) {
            guard let c = try? ExactClient(path: socket) else { return }
            defer { c.close() }
            while true {
                let w = nextWrite()
                let (method, parameters) = Self.call(for: w)
                switch c.call(method, parameters, timeout: 60) {
                case .ok:
                    apply(w)
                    acknowledged += 1
                case .closed, .timedOut:
                    inFlight = w
                    return
                case let other:
                    // Not acknowledged: nothing may have been written.
                    failures.append("\(method) \(w): \(other)")
                    inFlight = w
                    if failures.count > 5 { return }
                }
            }
        }

        /// Checks this writer's accounts and keys against what vaultd holds after a restart:
        /// exactly the acknowledged state, except that the write in flight at the kill may
        /// or may not have happened. Returns problems, and the number of entries checked.
        func verify(items stored: [String: [UInt8]], values storedValues: JSONObject) -> (
            [String], Int
        ) {
            if let w = inFlight {
                let tookEffect: Bool
                switch w {
                case .add(let a, let s), .update(let a, let s):
                    tookEffect = stored[a] == s && items[a] != s
                case .delete(let a): tookEffect = stored[a] == nil && items[a] != nil
                case .set(let k, let v): tookEffect = storedValues[k] == v && values[k] != v
                case .remove(let k): tookEffect = storedValues[k] == nil && values[k] != nil
                }
                if tookEffect { apply(w) }
                inFlight = nil
            }
            var problems: [String] = []
            for a in accounts where stored[a] != items[a] {
                problems.append(
                    "item \(a): expected \(items[a].map { "\($0.count) B \(Array($0.prefix(6)))" } ?? "absent"), found \(stored[a].map { "\($0.count) B \(Array($0.prefix(6)))" } ?? "absent")"
                )
            }
            for k in keys where storedValues[k] != values[k] {
                problems.append(
                    "key \(k): expected \(values[k]?.text ?? "absent"), found \(storedValues[k]?.text ?? "absent")"
                )
            }
            return (problems, accounts.count + keys.count)
        }
    }

    /// Sustained writes with reads in between: the WAL is checkpointed and stays near its
    /// auto-checkpoint size (a read left on a row once pinned it, and it grew without end).
    @Test func walStaysBoundedUnderSustainedWrites() throws {
        let d = try Daemon()
        defer { d.close() }
        let c = try ExactClient(path: d.socketPath)
        try Wire.initWithoutPassphrase(c)
        let writes = 800
        for i in 0..<writes {
            let account: JSON = .string("w\(i % 100)")
            let secret = Wire.base64([UInt8](repeating: UInt8(i & 0xFF), count: 32_768))
            let r =
                i < 100
                ? c.call(
                    "io.vaultd.Keychain.Add",
                    [
                        "class": "genericPassword",
                        "attributes": ["service": "wal", "account": account], "data": secret,
                    ])
                : c.call(
                    "io.vaultd.Keychain.Update",
                    [
                        "class": "genericPassword",
                        "query": ["service": "wal", "account": account], "data": secret,
                    ])
            try #require(r.parameters != nil, "write \(i): \(r)")
            if i % 10 == 0 {
                _ = c.call("io.vaultd.Vault.Status")
                _ = c.call(
                    "io.vaultd.Keychain.CopyMatching",
                    ["query": ["service": "wal", "account": account], "returnData": true])
                _ = c.call(
                    "io.vaultd.Preferences.Set",
                    ["domain": "com.example.wal", "key": "n", "value": ["integer": JSON(i)]])
            }
        }
        func size(_ f: String) -> Int {
            var st = stat()
            return stat(d.dataDirectory + "/" + f, &st) == 0 ? Int(st.st_size) : -1
        }
        let wal = size("vault.sqlite-wal")
        let db = size("vault.sqlite")
        #expect(
            wal >= 0 && wal < 12 << 20,
            "the WAL is \(wal >> 20) MiB after \(writes) writes of 32 KiB (database \(db >> 10) KiB)"
        )
        #expect(db > 1 << 20, "the database file never received a checkpoint: \(db) bytes")
        ReliabilityReport.record(
            "WAL: \(wal >> 10) KiB after \(writes) writes of 32 KiB (database \(db >> 10) KiB)")
    }

    @Test(.timeLimit(.minutes(10))) func acknowledgedWritesSurviveSIGKILL() throws {
        let kills = Stress.count(60)
        let seed = Stress.seed()
        var random = SeededRandom(seed: seed)
        let d = try Daemon()
        defer { d.close() }
        do {
            let c = try ExactClient(path: d.socketPath)
            try Wire.initWithoutPassphrase(c)
            c.close()
        }
        let writers = (0..<Self.clients).map { Writer(id: $0, seed: seed) }
        var survived = 0
        var entriesChecked = 0
        var integrityChecks = 0
        var startupKills = 0
        let started = Date()
        var phase: [String: Double] = [:]
        func timed<T>(_ name: String, _ body: () throws -> T) rethrows -> T {
            let t0 = Date()
            defer { phase[name, default: 0] += Date().timeIntervalSince(t0) }
            return try body()
        }
        for round in 1...kills {
            // Writers hammer vaultd until the kill, which comes 0-400 ms after the restart
            // (now and then at once, before a writer got through).
            let delay =
                Int.random(in: 0..<10, using: &random) == 0
                ? 0 : Int.random(in: 1...400_000, using: &random)
            let socket = d.socketPath
            let group = DispatchGroup()
            for w in writers {
                group.enter()
                Thread {
                    w.run(socket: socket)
                    group.leave()
                }.start()
            }
            timed("writing") { _ = usleep(useconds_t(delay)) }
            timed("kill") { d.kill() }
            try #require(
                d.lastExitStatus == 128 + SIGKILL,
                "round \(round): vaultd had already exited (\(d.lastExitStatus.map(String.init) ?? "?")); log:\n\(d.log)"
            )
            try timed("join") {
                try #require(
                    group.wait(timeout: .now() + 60) == .success,
                    "round \(round): a writer is stuck after the kill")
            }
            survived += 1

            let integrity = try timed("integrity") {
                try integrityCheck(dataDirectory: d.dataDirectory)
            }
            integrityChecks += 1
            try #require(
                integrity == "ok",
                "round \(round) (seed \(seed)): integrity_check after SIGKILL: \(integrity)")

            // The kill left the socket file behind: the restart must get past it.
            var st = stat()
            #expect(
                lstat(d.socketPath, &st) == 0 && st.st_mode & S_IFMT == S_IFSOCK,
                "round \(round): no stale socket left")
            // Now and then a vaultd is also killed while it starts (opening the store,
            // recovering the WAL, binding the socket).
            if Int.random(in: 0..<4, using: &random) == 0 {
                let p = try ChildProcess.spawn(
                    Paths.tool("vaultd"),
                    ["--socket", d.socketPath, "--data-dir", d.dataDirectory],
                    environment: isolatedEnvironment(root: d.root, socket: nil), inputs: [:],
                    stdout: .devNull, stderr: .devNull)
                usleep(useconds_t(Int.random(in: 0...60_000, using: &random)))
                kill(p, SIGKILL)
                _ = ChildProcess.wait(p, timeout: 10)
                startupKills += 1
            }
            try timed("restart") { try d.start() }

            let c = try ExactClient(path: d.socketPath)
            defer { c.close() }
            let stored = try timed("read items") { try Wire.allGenericPasswords(c) }
            var items: [String: [UInt8]] = [:]
            for item in stored {
                #expect(item.service == Self.service, "unexpected item \(item)")
                #expect(items[item.account] == nil, "round \(round): two items for \(item.account)")
                items[item.account] = item.secret
            }
            let values = try timed("read values") { try Wire.domain(c, Self.domain) }
            var problems: [String] = []
            for w in writers {
                problems += w.failures.map { "writer \(w.id): \($0)" }
                w.failures.removeAll()
                let (p, n) = w.verify(items: items, values: values)
                problems += p.map { "writer \(w.id): \($0)" }
                entriesChecked += n
            }
            let owned = Set(writers.flatMap { $0.accounts + $0.keys })
            problems += items.keys.filter { !owned.contains($0) }.map { "item nobody wrote: \($0)" }
            problems += values.keys.filter { !owned.contains($0) }.map { "key nobody wrote: \($0)" }
            if !problems.isEmpty {
                let listing = problems.prefix(20).joined(separator: "\n")
                Issue.record(
                    "round \(round) (seed \(seed), kill after \(delay / 1000) ms):\n\(listing)")
                break
            }
        }
        // A last clean stop: the database as vaultd leaves it is sound too.
        #expect(d.stop() == 0)
        let final = try integrityCheck(dataDirectory: d.dataDirectory)
        #expect(final == "ok", "integrity_check after the last stop: \(final)")
        let acknowledged = writers.reduce(0) { $0 + $1.acknowledged }
        #expect(survived >= min(kills, 50))
        #expect(
            acknowledged > kills, "too few writes got through to mean anything: \(acknowledged)")
        ReliabilityReport.record(
            "crash: \(survived) SIGKILLs survived (+\(startupKills) during startup), \(acknowledged) acknowledged writes (\(entriesChecked) item/key checks after restarts), "
                + "\(integrityChecks + 1) integrity checks ok, \(String(format: "%.1f", Date().timeIntervalSince(started))) s ("
                + phase.sorted { $0.key < $1.key }.map {
                    "\($0.key) \(String(format: "%.1f", $0.value)) s"
                }.joined(separator: ", ") + "), seed \(seed)")
    }
}
