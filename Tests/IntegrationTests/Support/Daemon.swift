import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Where the tests find the repository, its fixtures and the built executables.
enum Paths {
    /// The repository root, from this file's path (Tests/IntegrationTests/Support/Daemon.swift).
    static let repoRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// `Tests/Fixtures`: the plist corpus (`plist/`, with its MANIFEST.tsv) and other test data.
    static let fixtures: URL = repoRoot.appendingPathComponent("Tests/Fixtures")

    /// The directory holding `vaultd` and `vaultctl`: the build directory the running test
    /// bundle lives in (found by walking up from it), else `<repo>/.build/debug`.
    static let binaries: String = {
        let fm = FileManager.default
        var starts = [
            Bundle.main.bundleURL, Bundle.main.executableURL,
            URL(fileURLWithPath: CommandLine.arguments[0]),
        ]
        .compactMap { $0?.standardizedFileURL }
        starts += Bundle.allBundles.map(\.bundleURL)
        for start in starts {
            var dir = start
            for _ in 0..<6 {
                if fm.isExecutableFile(atPath: dir.appendingPathComponent("vaultd").path)
                    && fm.isExecutableFile(atPath: dir.appendingPathComponent("vaultctl").path)
                {
                    return dir.path
                }
                dir = dir.deletingLastPathComponent()
            }
        }
        return repoRoot.appendingPathComponent(".build/debug").path
    }()

    /// A tool's path: our executables from the build directory, anything else by name (PATH).
    static func tool(_ name: String) -> String {
        ["vaultd", "vaultctl", "git-credential-vault", "vault-example"].contains(name)
            ? binaries + "/" + name : name
    }
}

/// The environment children get: the test's own, without anything that could point them at
/// a real vault, with HOME and the XDG directories inside `root`.
func isolatedEnvironment(root: String, socket: String?) -> [String: String] {
    var env = ProcessInfo.processInfo.environment
    // Nothing of the developer's own session: no vaultd settings, no systemd sockets, no
    // session bus (a test that wants a keyring starts its own), no display or terminal for
    // vaultd's dialogs (a test that wants one starts Xvfb or tmux).
    for k in [
        "VAULTD_SOCKET", "VAULTD_DATA_DIR", "VAULTD_CACHE_DIR", "LISTEN_FDS", "LISTEN_PID",
        "LISTEN_FDNAMES", "DBUS_SESSION_BUS_ADDRESS", "DISPLAY", "WAYLAND_DISPLAY", "GPG_TTY",
    ] {
        env[k] = nil
    }
    // Python children (the varlink reference client) write replies to files as they come,
    // whatever the developer's shell sets.
    env["PYTHONUNBUFFERED"] = "1"
    env["HOME"] = root + "/home"
    env["XDG_RUNTIME_DIR"] = root + "/xdg-run"
    env["XDG_DATA_HOME"] = root + "/home/.local/share"
    env["XDG_CACHE_HOME"] = root + "/home/.cache"
    env["XDG_CONFIG_HOME"] = root + "/home/.config"
    env["LC_ALL"] = "C.UTF-8"
    // Argon2id at libsodium's MIN cost (for tests only): the suite inits and unlocks hundreds
    // of vaults, each at MODERATE a second and 256 MiB. The tests of the cost itself and of
    // the re-wrap to it set it to "" (the real cost) for their vaultd.
    env["VAULTD_ARGON2_TEST_COST"] = "min"
    // Per-program access (docs/access.md) as a vault made before it: the suite stores with
    // one program and reads with another (vaultctl, secret-tool, git, the example app) in
    // tests about something else. The tests of access itself remove it (ProgramAccessTests),
    // so they run the real default, `confirm`.
    env["VAULTD_TEST_SECRET_ACCESS"] = "open"
    if let socket { env["VAULTD_SOCKET"] = socket }
    return env
}

/// One vaultd for one test: its own temporary directory, socket and data directory.
///
///     let d = try Daemon()                  // started and answering
///     let r = d.ctl(["status"])             // vaultctl against it
///     try d.restart()                       // SIGTERM, then start on the same data dir
///
/// The daemon is SIGKILLed (if still running) and the directory removed on `close()` or deinit.
///
/// `@unchecked Sendable`: the paths never change; `pid` changes only in start, stop, kill and
/// close, on the test's thread, while the threads it hands the daemon to only call it.
final class Daemon: @unchecked Sendable {
    let root: String
    let socketPath: String
    let dataDirectory: String
    /// vaultd's stderr, appended across restarts.
    let logPath: String
    private(set) var pid: pid_t?
    /// Exit status of the last run that ended (stop or kill).
    private(set) var lastExitStatus: Int32?

    init(start: Bool = true) throws {
        root = try TemporaryDirectory.make(prefix: "vaultd-it")
        socketPath = root + "/run/vaultd.sock"
        dataDirectory = root + "/data"
        logPath = root + "/vaultd.log"
        for d in ["home", "xdg-run"] { mkdir(root + "/" + d, 0o700) }
        if start {
            do { try self.start() } catch {
                close()
                throw error
            }
        }
    }

    deinit { close() }

    /// The environment vaultctl and other clients get (VAULTD_SOCKET set).
    var environment: [String: String] { isolatedEnvironment(root: root, socket: socketPath) }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    var isRunning: Bool { pid.map(ChildProcess.isAlive) ?? false }

    /// Spawns vaultd with `--socket` and `--data-dir` (and `extraArguments`) and waits until
    /// a Status call on the socket answers (up to `timeout` seconds). Its clock is the test
    /// clock in `root` (`TestClock`), which `advanceClock` moves.
    /// `environment` is added to vaultd's (e.g. `VAULTD_ARGON2_TEST_COST: ""` for the real cost).
    /// `wrapper`: a program and its arguments that run vaultd (`strace … -o FILE`); `pid` is
    /// then the wrapper's, and `wrappedPid` vaultd's.
    func start(
        extraArguments: [String] = [], environment extra: [String: String] = [:],
        timeout: Double = 10, wrapper: [String] = []
    ) throws {
        precondition(pid == nil, "vaultd is already running")
        let env = isolatedEnvironment(root: root, socket: nil).merging(
            TestClock.environment(root: root)
        ) { $1 }.merging(extra) { $1 }
        let vaultd = [Paths.tool("vaultd"), "--socket", socketPath, "--data-dir", dataDirectory]
        let command = wrapper + vaultd + extraArguments
        let p = try ChildProcess.spawn(
            command[0], Array(command.dropFirst()),
            environment: env, inputs: [:], stdout: .file(logPath, append: true),
            stderr: .file(logPath, append: true))
        pid = p
        try Daemon.waitUntilServing(p, socketPath: socketPath, timeout: timeout, log: { log }) {
            status in
            lastExitStatus = status
            pid = nil
        }
    }

    /// Waits until the vaultd just spawned as `p` answers a Status call on `socketPath` (up
    /// to `timeout` seconds, polling every `interval` µs), else throws with `log()`. When it
    /// exits first it is reaped and `exited` gets its status (so the caller forgets the pid).
    /// `name` says which vaultd in the error.
    static func waitUntilServing(
        _ p: pid_t, socketPath: String, timeout: Double, interval: useconds_t = 20_000,
        name: String = "vaultd",
        log: () -> String, exited: (Int32?) -> Void
    ) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if !ChildProcess.isAlive(p) {
                let status = ChildProcess.wait(p, timeout: 1)
                exited(status)
                throw HarnessError(
                    "\(name) exited (status \(status.map(String.init) ?? "?")) before serving; log:\n\(log())"
                )
            }
            if answers(socketPath) { return }
            usleep(interval)
        }
        throw HarnessError(
            "\(name) did not answer on \(socketPath) within \(timeout) s; log:\n\(log())")
    }

    /// True when a Status call on a new connection to `path` gets a non-error reply.
    static func answers(_ path: String) -> Bool {
        guard let c = try? VarlinkConnection(path: path),
            case .reply(let r)? = try? c.call("io.vaultd.Vault.Status", timeout: 2)
        else { return false }
        return r["error"] == nil && r["parameters"] != nil
    }

    /// Runs vaultd's periodic tasks once (SIGUSR1: the executable scan, the cache policy, the
    /// idle-lock check) and waits until its log says they ran: a test waits for this event,
    /// not for the timers. Throws when vaultd does not report within `timeout` seconds.
    func tick(timeout: Double = 20) throws {
        try Daemon.tick(pid, log: { log }, timeout: timeout)
    }

    static func tick(_ pid: pid_t?, log: () -> String, timeout: Double = 20) throws {
        guard let pid else { throw HarnessError("vaultd is not running") }
        let mark = "SIGUSR1: periodic tasks ran ("
        let before = log().components(separatedBy: mark).count
        Glibc.kill(pid, SIGUSR1)
        // Sent once: vaultd handles SIGUSR1 from before it answers, so a signal lost is a bug
        // this wait shows.
        let deadline = Date().addingTimeInterval(timeout)
        while log().components(separatedBy: mark).count == before {
            if Date() > deadline {
                throw HarnessError(
                    "vaultd did not run its periodic tasks within \(timeout) s; log:\n\(log())")
            }
            usleep(5_000)
        }
    }

    /// Moves vaultd's clock `seconds` ahead (`TestClock`) and waits until its periodic tasks
    /// ran at the new time (`tick`): the idle auto-lock, the executable scan's grace period and
    /// the failed-unlock waits have then moved on by that much.
    func advanceClock(by seconds: Double, timeout: Double = 20) throws {
        try TestClock.advance(root: root, by: seconds)
        try tick(timeout: timeout)
    }

    /// The pid of vaultd started under a wrapper: the wrapper's child (nil when none).
    var wrappedPid: pid_t? {
        guard let p = pid,
            let children = try? String(
                contentsOfFile: "/proc/\(p)/task/\(p)/children", encoding: .utf8)
        else { return nil }
        return children.split(separator: " ").first.flatMap { pid_t($0) }
    }

    /// SIGTERM, then waits for the exit. Returns the exit status (nil when it did not exit
    /// within `timeout`; it is then SIGKILLed).
    @discardableResult
    func stop(timeout: Double = 20) -> Int32? {
        guard let p = pid else { return lastExitStatus }
        Glibc.kill(p, SIGTERM)
        var status = ChildProcess.wait(p, timeout: timeout)
        if status == nil {
            Glibc.kill(p, SIGKILL)
            _ = ChildProcess.wait(p, timeout: 10)
            status = nil
        }
        pid = nil
        lastExitStatus = status
        return status
    }

    /// SIGKILL (leaves the socket file behind, as a crash would).
    func kill() {
        guard let p = pid else { return }
        Glibc.kill(p, SIGKILL)
        lastExitStatus = ChildProcess.wait(p, timeout: 10)
        pid = nil
    }

    /// Stops with SIGTERM and starts again on the same socket and data directory. Returns
    /// the exit status of the stopped run.
    @discardableResult
    func restart() throws -> Int32? {
        let status = stop()
        try start()
        return status
    }

    /// Kills a running vaultd and removes the temporary directory.
    func close() {
        kill()
        TemporaryDirectory.remove(root)
    }

    // MARK: Clients

    /// Runs `vaultctl ARGS` against this daemon. `fds` maps child fds (3, 4, ...) to bytes
    /// fed through pipes, e.g. `[3: passphrase]` for `--passphrase-fd 3`.
    func ctl(
        _ arguments: [String], stdin: Data? = nil, fds: [Int32: Data] = [:], timeout: Double = 60
    ) -> ProcessResult {
        run("vaultctl", arguments, stdin: stdin, extraFDs: fds, timeout: timeout)
    }

    /// Runs any tool (ours by name, or one from PATH) with VAULTD_SOCKET set to this daemon.
    func run(
        _ tool: String, _ arguments: [String], stdin: Data? = nil, extraFDs: [Int32: Data] = [:],
        environment extra: [String: String] = [:], timeout: Double = 60
    ) -> ProcessResult {
        let env = environment.merging(extra) { $1 }
        do {
            return try ChildProcess.run(
                Paths.tool(tool), arguments, environment: env, stdin: stdin, extraFDs: extraFDs,
                timeout: timeout)
        } catch {
            return ProcessResult(status: -1, stdout: Data(), stderr: "harness: \(error)")
        }
    }

    // MARK: Common steps

    static let passphrase = "correct horse"

    /// `vaultctl init --passphrase-fd 3 3<<<'correct horse'`.
    func initialize(passphrase: String = Daemon.passphrase) -> ProcessResult {
        ctl(["init", "--passphrase-fd", "3"], fds: [3: Data((passphrase + "\n").utf8)])
    }

    /// `vaultctl unlock --passphrase-fd 3` with the passphrase on fd 3.
    func unlock(passphrase: String = Daemon.passphrase) -> ProcessResult {
        ctl(["unlock", "--passphrase-fd", "3"], fds: [3: Data((passphrase + "\n").utf8)])
    }

    /// A raw varlink connection to this daemon.
    func connect() throws -> VarlinkConnection { try VarlinkConnection(path: socketPath) }
}

/// vaultd's test clock (`VAULTD_TEST_CLOCK_FILE`, which debug builds of vaultd honour): the
/// file `test-clock` in a test's directory holds how many seconds vaultd's clock runs ahead
/// of the system's. vaultd reads it at start and at each SIGUSR1, and it only grows, so it
/// holds across restarts of the same test's vaultd (stored times, such as the last failed
/// unlock, stay in its past).
enum TestClock {
    static func path(root: String) -> String { root + "/test-clock" }

    /// What a vaultd started in `root` gets in its environment.
    static func environment(root: String) -> [String: String] {
        ["VAULTD_TEST_CLOCK_FILE": path(root: root)]
    }

    /// The offset the file holds now (0 when absent).
    static func offset(root: String) -> Double {
        (try? String(contentsOfFile: path(root: root), encoding: .utf8)).flatMap {
            Double($0.trimmingCharacters(in: .whitespacesAndNewlines))
        } ?? 0
    }

    /// Writes an offset `seconds` larger (whole, by a rename, so vaultd never reads half a
    /// number). vaultd takes it at its next SIGUSR1 (`Daemon.tick`).
    static func advance(root: String, by seconds: Double) throws {
        let file = path(root: root)
        try Data("\(offset(root: root) + seconds)\n".utf8).write(
            to: URL(fileURLWithPath: file), options: .atomic)
    }
}
