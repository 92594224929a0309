import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A vaultd whose cache root is on a small tmpfs of its own (TEST-RECIPES "A small full
/// disk"): `unshare -m` gives vaultd a private mount namespace, a tmpfs of `size` is mounted
/// on `volume` there, and the cache root is `volume/caches`. Only processes in that namespace
/// see the tmpfs, so apps and shell steps that touch the caches run inside it (`nsenter
/// --target PID --mount`); the socket and data directory are on the ordinary filesystem.
///
///     let v = try CacheVolume(settings: ["CacheFreeLowWaterBytes": 1 << 20])
///     v.inside(appPath, ["cache", "write", "f", "1000"])
///     v.sh("ls -la \"$1\"", v.cacheRoot)
///
/// `@unchecked Sendable`: the paths never change; `pid` changes only in start and close, on
/// the test's thread, and `children` under `lock`.
final class CacheVolume: @unchecked Sendable {
    let root: String
    let socketPath: String
    let dataDirectory: String
    /// The tmpfs mount point (inside vaultd's mount namespace).
    let volume: String
    /// vaultd's `--cache-dir`: `volume/caches`.
    let cacheRoot: String
    /// On the same tmpfs, outside the cache root: for files a purge must never touch.
    let outside: String
    let configPath: String
    let logPath: String
    private(set) var pid: pid_t?
    private var children: [pid_t] = []
    private let lock = NSLock()

    /// `settings`: the config.plist keys (Sources/vaultd/Settings.swift); `inodes`: the
    /// tmpfs's inode count (`nr_inodes`), when not its default.
    init(size: String = "4M", inodes: Int? = nil, settings: [String: Any]) throws {
        root = try TemporaryDirectory.make(prefix: "vaultd-cv")
        socketPath = root + "/run/vaultd.sock"
        dataDirectory = root + "/data"
        volume = root + "/vol"
        cacheRoot = volume + "/caches"
        outside = volume + "/outside"
        configPath = root + "/config.plist"
        logPath = root + "/vaultd.log"
        for d in ["home", "xdg-run", "vol"] { mkdir(root + "/" + d, 0o700) }
        do {
            let plist = try PropertyListSerialization.data(
                fromPropertyList: settings, format: .xml, options: 0)
            try plist.write(to: URL(fileURLWithPath: configPath))
            try start(options: "size=\(size),mode=0700" + (inodes.map { ",nr_inodes=\($0)" } ?? ""))
        } catch {
            close()
            throw error
        }
    }

    deinit { close() }

    var environment: [String: String] { isolatedEnvironment(root: root, socket: socketPath) }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Runs vaultd's periodic tasks once and waits until they ran (`Daemon.tick`).
    func tick() throws { try Daemon.tick(pid, log: { log }) }

    private func start(options: String) throws {
        // unshare execs sh, which execs vaultd: the pid we get is vaultd's.
        let script = """
            mount -t tmpfs -o "$1" tmpfs "$2" && mkdir -p "$2/outside" && exec "$3" --socket "$4" --data-dir "$5" --cache-dir "$6" --config "$7"
            """
        let p = try ChildProcess.spawn(
            "unshare",
            [
                "-m", "--propagation", "private", "sh", "-c", script, "sh", options, volume,
                Paths.tool("vaultd"), socketPath, dataDirectory, cacheRoot, configPath,
            ],
            environment: isolatedEnvironment(root: root, socket: nil), inputs: [:],
            stdout: .file(logPath, append: true),
            stderr: .file(logPath, append: true))
        pid = p
        try Daemon.waitUntilServing(
            p, socketPath: socketPath, timeout: 10, name: "vaultd (in its mount namespace)",
            log: { log }
        ) { _ in
            pid = nil
        }
    }

    /// Kills what was started here (by pid) and removes the directory.
    func close() {
        let started: [pid_t] = lock.withLock {
            defer { children.removeAll() }
            return children
        }
        for c in started {
            Glibc.kill(c, SIGKILL)
            _ = ChildProcess.wait(c, timeout: 10)
        }
        if let p = pid {
            Glibc.kill(p, SIGKILL)
            _ = ChildProcess.wait(p, timeout: 10)
            pid = nil
        }
        TemporaryDirectory.remove(root)
    }

    /// `vaultctl ARGS` (it needs no access to the tmpfs: it asks vaultd).
    func ctl(_ arguments: [String], stdin: Data? = nil, timeout: Double = 60) -> ProcessResult {
        run(Paths.tool("vaultctl"), arguments, stdin: stdin, timeout: timeout)
    }

    /// Runs a command on the ordinary filesystem, with VAULTD_SOCKET set.
    func run(_ executable: String, _ arguments: [String], stdin: Data? = nil, timeout: Double = 60)
        -> ProcessResult
    {
        do {
            return try ChildProcess.run(
                executable, arguments, environment: environment, stdin: stdin, timeout: timeout)
        } catch {
            return ProcessResult(status: -1, stdout: Data(), stderr: "harness: \(error)")
        }
    }

    /// Runs a command inside vaultd's mount namespace (where the tmpfs is), VAULTD_SOCKET set.
    func inside(
        _ executable: String, _ arguments: [String], stdin: Data? = nil, timeout: Double = 60
    ) -> ProcessResult {
        guard let p = pid else {
            return ProcessResult(
                status: -1, stdout: Data(), stderr: "harness: vaultd is not running")
        }
        return run(
            "nsenter", ["--target", String(p), "--mount", "--", executable] + arguments,
            stdin: stdin, timeout: timeout)
    }

    /// `path` inside vaultd's mount namespace as this process sees it: through
    /// `/proc/PID/root` (for the `…at` calls of `DeepTree`, which need no `nsenter`).
    /// The cache directory the app at `executable` gets (`vault-example cache path`, run
    /// inside the volume's mount namespace); nil when it got none.
    func cachePath(of executable: String) -> String? {
        inside(executable, ["cache", "path"]).stdoutText.split(separator: "\n").first.map(
            String.init)
    }

    func visible(_ path: String) throws -> String {
        guard let p = pid else { throw HarnessError("vaultd is not running") }
        return "/proc/\(p)/root" + path
    }

    /// `sh -c SCRIPT sh ARGS...` inside the namespace ($1... are `args`).
    func sh(_ script: String, _ args: String...) -> ProcessResult {
        inside("/bin/sh", ["-c", script, "sh"] + args)
    }

    /// Starts a long-running command inside the namespace (stdout to `output`); it is killed
    /// by `close()` or `stop(_:)`.
    func spawnInside(_ executable: String, _ arguments: [String], output: String) throws -> pid_t {
        guard let p = pid else { throw HarnessError("vaultd is not running") }
        let c = try ChildProcess.spawn(
            "nsenter", ["--target", String(p), "--mount", "--", executable] + arguments,
            environment: environment, inputs: [:],
            stdout: .file(output, append: false), stderr: .file(output + ".err", append: false))
        lock.withLock { children.append(c) }
        return c
    }

    /// Kills and reaps a child started by `spawnInside`.
    func stop(_ child: pid_t) {
        let mine = lock.withLock {
            guard let i = children.firstIndex(of: child) else { return false }
            children.remove(at: i)
            return true
        }
        guard mine else { return }
        Glibc.kill(child, SIGKILL)
        _ = ChildProcess.wait(child, timeout: 10)
    }

    /// Copies vault-example to `ROOT/apps/NAME/app` (on the ordinary filesystem, which the
    /// namespace sees too).
    func placeExample(_ name: String) throws -> String {
        try AppCopy.place(name, under: root + "/apps")
    }

    @discardableResult
    func install(_ appID: String, exe: String, _ extra: [String] = []) throws -> [String: Any] {
        let r = ctl(["app", "install", appID, "--exe", exe, "--json"] + extra)
        guard r.status == 0, let j = r.jsonObject else {
            throw HarnessError("app install \(appID) failed: \(r)")
        }
        return j
    }

    /// `vaultctl cache usage --json`.
    func usage() throws -> CacheUsageReport {
        let r = ctl(["cache", "usage", "--json"])
        guard r.status == 0, let j = r.jsonObject else {
            throw HarnessError("cache usage failed: \(r)")
        }
        return CacheUsageReport(j)
    }
}

/// `vaultctl cache usage --json`, parsed.
struct CacheUsageReport: CustomStringConvertible {
    var apps: [String: (bytes: Int64, files: Int)] = [:]
    var totalBytes: Int64
    var freeBytes: Int64
    var capacityBytes: Int64

    init(_ j: [String: Any]) {
        for a in j["apps"] as? [[String: Any]] ?? [] {
            guard let id = a["appID"] as? String else { continue }
            apps[id] = (
                (a["bytes"] as? NSNumber)?.int64Value ?? -1,
                (a["files"] as? NSNumber)?.intValue ?? -1
            )
        }
        totalBytes = (j["totalBytes"] as? NSNumber)?.int64Value ?? -1
        freeBytes = (j["freeBytes"] as? NSNumber)?.int64Value ?? -1
        capacityBytes = (j["capacityBytes"] as? NSNumber)?.int64Value ?? -1
    }

    func files(_ app: String) -> Int { apps[app]?.files ?? 0 }
    func bytes(_ app: String) -> Int64 { apps[app]?.bytes ?? 0 }

    var description: String {
        let list = apps.sorted { $0.key < $1.key }.map {
            "\($0.key): \($0.value.bytes) B in \($0.value.files) files"
        }
        return
            "\(list.joined(separator: "; ")); total \(totalBytes), free \(freeBytes) of \(capacityBytes)"
    }
}
