import Foundation
import VaultClient
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// The items every system stores: generic passwords with distinct service and account, and a
/// fixed-size secret derived from the index (so any run can check what it reads).
enum BenchItem {
    static func service(_ i: Int) -> String { "svc\(i).bench.example.com" }
    static func account(_ i: Int) -> String { "user\(i)@example.com" }
    static func secret(_ i: Int, size: Int) -> Data {
        var s = Array("s\(i)-".utf8)
        while s.count < size { s.append(UInt8(ascii: "a") + UInt8(s.count % 26)) }
        return Data(s.prefix(size))
    }
    static func attributes(_ i: Int) -> ItemAttributes {
        ItemAttributes(service: service(i), account: account(i))
    }
    static func query(_ i: Int) -> Query { Query(.genericPassword, attributes(i)) }
}

/// One vaultd of the bench: its own temporary directory (socket, HOME, XDG dirs) and a data
/// directory it may be pointed at.
///
/// `@unchecked Sendable`: everything but `pid` is set at init and never changes; `pid`
/// changes only in `start` and `stop`, which the bench's main thread calls while no client
/// thread is running.
final class VaultdInstance: @unchecked Sendable {
    let binary: String
    let root: String
    let socketPath: String
    let dataDirectory: String
    /// Flags given to vaultd after its socket and directories (`--secret-service`).
    let extraArguments: [String]
    /// Whether vaultd sees this process's session bus (`DBUS_SESSION_BUS_ADDRESS`): only the
    /// Secret Service workloads' vaultd, on the private bus they run on.
    let seesSessionBus: Bool
    private(set) var pid: pid_t?

    init(
        binary: String, root: String, dataDirectory: String, extraArguments: [String] = [],
        seesSessionBus: Bool = false
    ) {
        self.binary = binary
        self.root = root
        self.socketPath = root + "/run/vaultd.sock"
        self.dataDirectory = dataDirectory
        self.extraArguments = extraArguments
        self.seesSessionBus = seesSessionBus
        for d in ["run", "home", "xdg-run"] { mkdir(root + "/" + d, 0o700) }
    }

    var environment: [String: String] {
        var env = ProcessInfo.processInfo.environment
        for k in [
            "VAULTD_SOCKET", "VAULTD_DATA_DIR", "VAULTD_CACHE_DIR", "LISTEN_FDS", "LISTEN_PID",
            "LISTEN_FDNAMES",
        ] {
            env[k] = nil
        }
        if !seesSessionBus { env["DBUS_SESSION_BUS_ADDRESS"] = nil }
        env["HOME"] = root + "/home"
        env["XDG_RUNTIME_DIR"] = root + "/xdg-run"
        env["XDG_DATA_HOME"] = root + "/home/.local/share"
        env["XDG_CACHE_HOME"] = root + "/home/.cache"
        env["XDG_CONFIG_HOME"] = root + "/home/.config"
        return env
    }

    /// Spawns vaultd; returns the launch time (CLOCK_MONOTONIC ns). Does not wait.
    @discardableResult
    func launch() throws -> UInt64 {
        precondition(pid == nil)
        let t = now()
        let p = try Spawn.start(
            binary,
            ["--socket", socketPath, "--data-dir", dataDirectory, "--cache-dir", root + "/caches"]
                + extraArguments, environment: environment,
            stdout: .file(root + "/vaultd.log"), stderr: .file(root + "/vaultd.log"))
        pid = p
        Children.add(p)
        return t
    }

    /// Launches and waits until a Status call answers (up to `timeout` seconds).
    func start(timeout: Double = 60) throws {
        try launch()
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let p = pid, let status = Spawn.wait(p, timeout: 0) {
                Children.remove(p)
                pid = nil
                throw BenchError("vaultd exited (status \(status)) before serving; log:\n\(log)")
            }
            if let c = try? VaultConnection(socketPath: socketPath),
                (try? c.call(.vaultStatus)) != nil
            {
                return
            }
            usleep(5000)
        }
        throw BenchError("vaultd did not answer within \(Int(timeout)) s; log:\n\(log)")
    }

    var log: String { (try? String(contentsOfFile: root + "/vaultd.log", encoding: .utf8)) ?? "" }

    /// SIGTERM and wait (SIGKILL after `timeout`).
    func stop(timeout: Double = 60) {
        guard let p = pid else { return }
        kill(p, SIGTERM)
        if Spawn.wait(p, timeout: timeout) == nil {
            kill(p, SIGKILL)
            _ = Spawn.wait(p, timeout: 10)
        }
        Children.remove(p)
        pid = nil
    }

    func connect() throws -> Vault { try Vault.connect(socketPath: socketPath) }

    /// `io.vaultd.Vault.Init` without a passphrase (always unlocked); a vault that is
    /// initialised already is fine.
    func initialize() throws {
        let v = try connect()
        if try v.status().lock.state == .uninitialized { try v.initialize(passphrase: nil) }
    }

    func itemCount() throws -> Int { try connect().status().items }

    /// Adds items `from..<to` over `clients` connections (durable adds, group-committed).
    func fill(from: Int, to: Int, secretSize: Int, clients: Int = 32) throws {
        guard to > from else { return }
        let t0 = Date()
        let done = LockedValue(0)
        let failure = LockedValue<String?>(nil)
        let group = DispatchGroup()
        for c in 0..<clients {
            group.enter()
            let t = Thread { [self] in
                defer { group.leave() }
                do {
                    let kc = try connect().keychain
                    var i = from + c
                    while i < to {
                        do {
                            try kc.add(
                                attributes: BenchItem.attributes(i),
                                data: BenchItem.secret(i, size: secretSize))
                        } catch let e as VaultError where e.code == .duplicateItem {}
                        i += clients
                        let n = done.value + 1
                        done.value = n
                        if n % 20000 == 0 { progress("  filled \(from + n) of \(to) items") }
                    }
                } catch {
                    failure.value = "\(error)"
                }
            }
            t.start()
        }
        group.wait()
        if let f = failure.value { throw BenchError("filling the vault failed: \(f)") }
        progress(
            String(format: "  added %d items in %.1f s", to - from, Date().timeIntervalSince(t0)))
    }
}

/// Filled vaults, one data directory per item count, cached between runs and copied for
/// each use (the workloads change what they run on).
struct VaultCache {
    let options: Options
    let binary: String
    /// Bump when the stored items or the schema change shape: a cached vault of an older
    /// schema would be migrated at every start, and the start-up figure would time that.
    /// v2: items without the uuid index (migration 2026-11-30-items-uuid-unindexed).
    /// v3: one lookup index for service/server and account (2026-11-30-items-lookup-index).
    /// v4: that index in memory instead (2026-11-30-items-lookup-in-memory).
    static let format = "v4"

    /// A vault is vault-bench's own: vaultd records its items' creator, and a program the
    /// user may replace is its file (device and inode, `ProgramIdentity.matchKey`), so a
    /// rebuilt vault-bench reading a vault filled by the one before would be another program,
    /// asked for each secret. The cache is therefore kept per vault-bench file.
    func path(items: Int) -> String {
        options.cacheRoot + "/vault-\(Self.format)-\(items)-s\(options.secretSize)-"
            + Self.benchFile
    }

    /// This executable's file as `device.inode` (of /proc/self/exe).
    static let benchFile: String = {
        var st = stat()
        guard stat("/proc/self/exe", &st) == 0 else { return "unknown" }
        return "\(st.st_dev).\(st.st_ino)"
    }()

    /// A fresh data directory holding `items` items, in `workRoot`. Uses the cache when it can,
    /// else fills (from the largest smaller cached vault) and caches the result.
    func prepare(items: Int, workRoot: String) throws -> String {
        let data = workRoot + "/data-\(items)"
        Temp.remove(data)
        let cached = path(items: items)
        if options.useCache, FileManager.default.fileExists(atPath: cached + "/vault.sqlite") {
            try copyDirectory(cached, to: data)
            return data
        }
        // Start from the largest smaller cached vault, if any.
        var have = 0
        if options.useCache {
            for n in options.items.filter({ $0 < items }).sorted(by: >)
            where FileManager.default.fileExists(atPath: path(items: n) + "/vault.sqlite") {
                try copyDirectory(path(items: n), to: data)
                have = n
                break
            }
        }
        progress("filling a vault with \(items) items (from \(have))")
        let d = VaultdInstance(
            binary: binary, root: try Temp.directory("vault-bench-fill"), dataDirectory: data)
        defer { Temp.remove(d.root) }
        try d.start()
        try d.initialize()
        try d.fill(from: have, to: items, secretSize: options.secretSize)
        let count = try d.itemCount()
        d.stop()
        guard count == items else {
            throw BenchError("the filled vault holds \(count) items, not \(items)")
        }
        if options.useCache {
            try publishDirectory(data, as: cached)
        }
        return data
    }
}
