import Foundation
import Testing
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// How hard the reliability suite pushes. CI runs the defaults (the suite's minimums);
/// `VAULTD_STRESS=1` (or a larger factor) multiplies counts and time limits for
/// longer local runs.
enum Stress {
    static let factor: Int = {
        guard let v = ProcessInfo.processInfo.environment["VAULTD_STRESS"], let n = Int(v), n > 0
        else { return 0 }
        return n
    }()

    /// `base` in CI; `base * 5 * factor` under VAULTD_STRESS.
    static func count(_ base: Int) -> Int { factor == 0 ? base : base * 5 * factor }
    static func seconds(_ base: Double) -> Double { factor == 0 ? base : base * 5 * Double(factor) }

    /// The random seed: VAULTD_SEED when set (to replay a failure), else a fresh one that the
    /// tests print.
    static func seed() -> UInt64 {
        if let v = ProcessInfo.processInfo.environment["VAULTD_SEED"], let s = UInt64(v) {
            return s
        }
        return UInt64.random(in: 1...UInt64.max)
    }
}

/// Figures the reliability tests report (printed at the end of each test, and appended to
/// `$VAULTD_RELIABILITY_REPORT` when set, so `.ci/run` can show them together).
enum ReliabilityReport {
    static func record(_ line: String) {
        print("reliability: \(line)")
        guard let path = ProcessInfo.processInfo.environment["VAULTD_RELIABILITY_REPORT"],
            !path.isEmpty
        else { return }
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        guard fd >= 0 else { return }
        let bytes = Array((line + "\n").utf8)
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
    }
}

/// A blocking varlink client for the reliability tests: VarlinkConnection (the harness's raw
/// socket) for connecting, sending and reading messages, and replies decoded with
/// VaultProtocol's exact JSON (numbers keep their literal text), so values can be compared
/// with `==`.
///
/// `@unchecked Sendable` without a lock: a test hands a client to the one thread that calls
/// through it (a connection carries one call at a time).
final class ExactClient: @unchecked Sendable {
    let connection: VarlinkConnection

    enum Outcome: CustomStringConvertible {
        /// A reply without error: its parameters.
        case ok(JSONObject)
        /// A varlink error reply: its name and parameters.
        case error(String, JSONObject)
        /// A NUL-terminated message that is not a JSON object.
        case garbage([UInt8])
        /// EOF, ECONNRESET or EPIPE.
        case closed
        case timedOut

        var description: String {
            switch self {
            case .ok(let p): return "ok \(JSON.object(p).text.prefix(300))"
            case .error(let n, let p): return "error \(n) \(JSON.object(p).text.prefix(300))"
            case .garbage(let g): return "garbage \(String(decoding: g.prefix(200), as: UTF8.self))"
            case .closed: return "closed"
            case .timedOut: return "timed out"
            }
        }

        var parameters: JSONObject? {
            if case .ok(let p) = self { return p }
            return nil
        }
        var errorName: String? {
            if case .error(let n, _) = self { return n }
            return nil
        }
        var isClosed: Bool {
            if case .closed = self { return true }
            return false
        }
    }

    /// Connects; a send that blocks for `sendTimeout` seconds (vaultd not reading) fails.
    init(path: String, sendTimeout: Int = 30) throws {
        connection = try VarlinkConnection(path: path)
        var tv = timeval(tv_sec: sendTimeout, tv_usec: 0)
        setsockopt(
            connection.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    var fd: Int32 { connection.fd }
    func close() { connection.close() }

    /// Bytes sent that the peer has not read yet (SIOCOUTQ, 0x5411 in linux/sockios.h: for a
    /// Unix socket, what its queue still holds for the peer); -1 when the kernel does not say.
    var unreadBytes: Int {
        var n: Int32 = 0
        return ioctl(fd, 0x5411, &n) == 0 ? Int(n) : -1
    }

    /// Waits until the peer has read every byte sent (true), or `timeout` seconds pass.
    func waitUntilRead(timeout: Double = 20) -> Bool {
        eventually(timeout: timeout) { unreadBytes == 0 }
    }

    /// Sends raw bytes; false when the peer had closed.
    @discardableResult
    func send(_ bytes: [UInt8]) -> Bool { (try? connection.send(bytes)) ?? false }

    func call(_ method: String, _ parameters: JSONObject = [:], timeout: Double = 30) -> Outcome {
        var message: JSONObject = ["method": .string(method)]
        if !parameters.isEmpty { message["parameters"] = .object(parameters) }
        guard send(JSON.object(message).serialized() + [0]) else { return .closed }
        return receive(timeout: timeout)
    }

    /// The next message, decoded.
    func receive(timeout: Double = 30) -> Outcome {
        switch connection.receiveFrame(timeout: timeout) {
        case .frame(let frame):
            guard let json = try? JSON.parse(frame), case .object(let o) = json else {
                return .garbage(frame)
            }
            let parameters = o["parameters"]?.objectValue ?? [:]
            if let e = o["error"]?.stringValue { return .error(e, parameters) }
            return .ok(parameters)
        case .closed: return .closed
        case .timedOut: return .timedOut
        }
    }

    /// True when the peer closes the connection within `timeout` without sending anything
    /// more than a message or two (those are discarded).
    func closes(within timeout: Double) -> Bool { connection.waitForClose(timeout: timeout) }
}

/// Helpers over the io.vaultd interfaces, in the wire's terms.
enum Wire {
    static func base64(_ bytes: [UInt8]) -> JSON { .string(Data(bytes).base64EncodedString()) }

    /// Init without a passphrase: the vault is then always unlocked (restarts need no unlock).
    static func initWithoutPassphrase(_ c: ExactClient) throws {
        let r = c.call("io.vaultd.Vault.Init")
        guard r.parameters != nil else { throw HarnessError("Init: \(r)") }
    }

    /// Every generic password (owner's view): account → (service, secret, label).
    struct StoredItem: Equatable, CustomStringConvertible {
        var service: String
        var account: String
        var secret: [UInt8]
        var label: String?
        var description: String {
            "\(service)/\(account) label=\(label ?? "-") secret=\(secret.count) B \(secret.prefix(8))"
        }
    }

    /// Every generic password with its secret: the list first (attributes only), then each
    /// secret on its own (the secrets of all items at once can pass the 8 MiB reply limit).
    static func allGenericPasswords(_ c: ExactClient, timeout: Double = 60) throws -> [StoredItem] {
        let r = c.call(
            "io.vaultd.Keychain.CopyMatching",
            [
                "class": "genericPassword", "matchLimit": "all", "returnData": false,
                "returnAttributes": true,
            ], timeout: timeout)
        if r.errorName == "io.vaultd.Keychain.ItemNotFound" { return [] }
        guard let items = r.parameters?["items"]?.arrayValue else {
            throw HarnessError("CopyMatching all: \(r)")
        }
        return try items.map { item in
            guard let a = item["attributes"]?.objectValue else {
                throw HarnessError("CopyMatching: malformed item \(item.text.prefix(300))")
            }
            let service = a["service"]?.stringValue ?? ""
            let account = a["account"]?.stringValue ?? ""
            let one = c.call(
                "io.vaultd.Keychain.CopyMatching",
                [
                    "class": "genericPassword",
                    "query": ["service": .string(service), "account": .string(account)],
                    "returnData": true,
                ], timeout: timeout)
            guard let data = one.parameters?["items"]?.arrayValue?.first?["data"]?.stringValue,
                let secret = Data(base64Encoded: data)
            else {
                throw HarnessError("CopyMatching \(service)/\(account): \(one)")
            }
            return StoredItem(
                service: service, account: account, secret: Array(secret),
                label: a["label"]?.stringValue)
        }
    }

    static func domain(_ c: ExactClient, _ name: String, timeout: Double = 60) throws -> JSONObject
    {
        let r = c.call("io.vaultd.Preferences.Domain", ["domain": .string(name)], timeout: timeout)
        guard let values = r.parameters?["values"]?.objectValue else {
            throw HarnessError("Domain \(name): \(r)")
        }
        return values
    }
}

/// A vaultd started by the reliability tests where the harness's `Daemon` does not reach:
/// with extra environment (VAULTD_MAX_CONNECTIONS, ...) or inside a wrapper command (a mount
/// namespace). It reuses the harness's process and environment helpers.
///
/// `@unchecked Sendable`: the paths never change; `pid` changes only in start and stop, on
/// the test's thread, while the threads it hands the daemon to only connect to it.
final class CustomDaemon: @unchecked Sendable {
    let root: String
    let socketPath: String
    let dataDirectory: String
    let logPath: String
    private(set) var pid: pid_t?

    init(dataDirectory: String? = nil, root: String? = nil) throws {
        self.root = try root ?? TemporaryDirectory.make(prefix: "vaultd-rel")
        socketPath = self.root + "/run/vaultd.sock"
        self.dataDirectory = dataDirectory ?? self.root + "/data"
        logPath = self.root + "/vaultd.log"
        for d in ["home", "xdg-run"] { mkdir(self.root + "/" + d, 0o700) }
    }

    deinit { close() }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
    var isRunning: Bool { pid.map(ChildProcess.isAlive) ?? false }

    /// The vaultd command line (for a wrapper such as `sh -c '… exec "$@"' sh VAULTD…`).
    var command: [String] {
        [Paths.tool("vaultd"), "--socket", socketPath, "--data-dir", dataDirectory]
    }

    /// Starts `wrapper + command` (or the command alone) with `environment` added, and waits
    /// until Status answers. Its clock is the test clock in `root` (`TestClock`).
    func start(
        environment extra: [String: String] = [:], wrapper: [String] = [], timeout: Double = 15
    ) throws {
        precondition(pid == nil, "vaultd is already running")
        let env = isolatedEnvironment(root: root, socket: nil).merging(
            TestClock.environment(root: root)
        ) { $1 }.merging(extra) { $1 }
        let argv = wrapper + command
        let p = try ChildProcess.spawn(
            argv[0], Array(argv.dropFirst()), environment: env, inputs: [:],
            stdout: .file(logPath, append: true),
            stderr: .file(logPath, append: true))
        pid = p
        try Daemon.waitUntilServing(p, socketPath: socketPath, timeout: timeout, log: { log }) {
            _ in pid = nil
        }
    }

    /// Moves vaultd's clock `seconds` ahead and waits for its periodic tasks (`Daemon.advanceClock`).
    func advanceClock(by seconds: Double, timeout: Double = 20) throws {
        try TestClock.advance(root: root, by: seconds)
        try Daemon.tick(pid, log: { log }, timeout: timeout)
    }

    func kill() {
        guard let p = pid else { return }
        Glibc.kill(p, SIGKILL)
        _ = ChildProcess.wait(p, timeout: 10)
        pid = nil
    }

    /// Kills vaultd and removes the directory (kept, and named, when VAULTD_KEEP_TEST_DIRS is
    /// set: for looking at a failure).
    func close() {
        kill()
        if ProcessInfo.processInfo.environment["VAULTD_KEEP_TEST_DIRS"] != nil {
            print("reliability: kept \(root)")
        } else {
            TemporaryDirectory.remove(root)
        }
    }

    func connect() throws -> ExactClient { try ExactClient(path: socketPath) }
}

/// /proc/PID/status figures, in KiB.
enum ProcStatus {
    static func kib(_ field: String, pid: pid_t) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else {
            return nil
        }
        for line in text.split(separator: "\n") where line.hasPrefix(field + ":") {
            return Int(
                line.dropFirst(field.count + 1).split(whereSeparator: { $0 == " " || $0 == "\t" })
                    .first ?? "")
        }
        return nil
    }

    /// Peak resident set size (VmHWM).
    static func peakRSS(_ pid: pid_t) -> Int? { kib("VmHWM", pid: pid) }
    static func rss(_ pid: pid_t) -> Int? { kib("VmRSS", pid: pid) }
    static func threads(_ pid: pid_t) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else {
            return nil
        }
        for line in text.split(separator: "\n") where line.hasPrefix("Threads:") {
            return Int(line.dropFirst(8).trimmingCharacters(in: .whitespaces))
        }
        return nil
    }
}

/// `PRAGMA integrity_check` with the sqlite3 CLI on a copy of a stopped vault's database and
/// WAL (a copy, so vaultd's own recovery is what the next start exercises). Returns the
/// CLI's output ("ok" when sound).
func integrityCheck(dataDirectory: String) throws -> String {
    // On /dev/shm when there is one: the CLI checkpoints the WAL on close, and its fsyncs
    // would otherwise dominate the crash test's time.
    var copy = ""
    if access("/dev/shm", W_OK) == 0 {
        var template = Array("/dev/shm/vaultd-icheck.XXXXXX".utf8CString)
        if let p = mkdtemp(&template) { copy = String(cString: p) }
    }
    if copy.isEmpty { copy = try TemporaryDirectory.make(prefix: "vaultd-icheck") }
    defer { TemporaryDirectory.remove(copy) }
    let fm = FileManager.default
    for suffix in ["", "-wal"] where fm.fileExists(atPath: dataDirectory + "/vault.sqlite" + suffix)
    {
        try fm.copyItem(
            atPath: dataDirectory + "/vault.sqlite" + suffix,
            toPath: copy + "/vault.sqlite" + suffix)
    }
    let r = try ChildProcess.run(
        "sqlite3", [copy + "/vault.sqlite", "PRAGMA synchronous=OFF; PRAGMA integrity_check;"],
        environment: ProcessInfo.processInfo.environment,
        timeout: 60)
    guard r.status == 0 else { throw HarnessError("sqlite3 integrity_check failed: \(r)") }
    return r.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
}

/// Strings collected from several threads.
final class LockedList: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [String] = []
    func append(_ s: String) { lock.withLock { items.append(s) } }
    var all: [String] { lock.withLock { items } }
}

/// A value shared with other threads, behind a lock.
final class Locked<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: T
    init(_ value: T) { self.value = value }
    func withLock<R>(_ body: (inout T) -> R) -> R { lock.withLock { body(&value) } }
    var get: T { lock.withLock { value } }
}

/// Runs `body(i)` on `n` threads and waits for all of them.
func onThreads(_ n: Int, stackSize: Int = 1 << 20, _ body: @escaping @Sendable (Int) -> Void) {
    let group = DispatchGroup()
    for i in 0..<n {
        group.enter()
        let t = Thread {
            body(i)
            group.leave()
        }
        t.stackSize = stackSize
        t.start()
    }
    group.wait()
}
