import DesktopKeyring
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The desktop keyring's side: gnome-keyring-daemon on a private `dbus-run-session` bus with
/// an unlocked login keyring (TEST-RECIPES), reached through libsecret as apps reach it.
///
/// The outer bench prepares a temporary HOME (with a cached keyring file when one exists),
/// then re-executes itself under `dbus-run-session` with `--inner-keyring FILE`; the inner
/// run fills the keyring if needed, measures, and writes its entries to FILE.
enum KeyringBench {
    static let format = "v1"
    static let password = "pw"

    static func cachePath(_ options: Options, items: Int) -> String {
        options.cacheRoot + "/keyring-\(format)-\(items)-s\(options.secretSize)"
    }

    static func attributes(_ i: Int) -> [String: String] {
        [
            "class": "genericPassword", "service": BenchItem.service(i),
            "account": BenchItem.account(i),
        ]
    }

    /// Why the keyring cannot be measured here, or nil when it can.
    static func missingTools() -> String? {
        let missing = ["dbus-run-session", "gnome-keyring-daemon", "secret-tool"].filter {
            Spawn.which($0) == nil
        }
        return missing.isEmpty
            ? nil
            : "missing \(missing.joined(separator: ", ")) (Debian: gnome-keyring libsecret-tools dbus)"
    }

    // MARK: outer

    /// Runs the keyring part in a private session; returns its entries.
    static func run(_ options: Options) throws -> [Entry] {
        if let why = missingTools() {
            warn("--compare-keyring: skipped, \(why)")
            return []
        }
        return try onPrivateBus(
            options, keyringItems: options.keyringItems, inner: ["--inner-keyring"])
    }

    /// Re-executes the bench with `inner` (its mode flag, followed by the results file) and
    /// `extra` on a private bus of `dbus-run-session`, in a temporary HOME; with
    /// `keyringItems`, gnome-keyring is unlocked on that bus first, its keyring holding up to
    /// that many items from the cache (`--keyring-have`). Returns the inner run's entries.
    /// Processes the inner run lists in its `--pid-file` that outlive the bus are stopped.
    static func onPrivateBus(
        _ options: Options, keyringItems: Int?, inner: [String], extra: [String] = []
    ) throws -> [Entry] {
        let root = try Temp.directory("vault-bench-bus")
        defer { Temp.remove(root) }
        let home = root + "/home"
        let runtime = root + "/run"
        for d in [home, runtime] { mkdir(d, 0o700) }
        var have = 0
        if let items = keyringItems {
            if options.useCache, let (n, dir) = bestCachedKeyring(options, items: items) {
                try copyDirectory(dir, to: home + "/.local/share/keyrings")
                have = n
            }
            if have < items {
                let perStore =
                    items > 2000
                    ? " (about 30 minutes for 10,000: each store rewrites the whole keyring file)"
                    : ""
                progress("the keyring holds \(have) items; filling it to \(items)\(perStore)")
            }
        }
        var env = ProcessInfo.processInfo.environment
        for k in [
            "DBUS_SESSION_BUS_ADDRESS", "GNOME_KEYRING_CONTROL", "SSH_AUTH_SOCK", "VAULTD_SOCKET",
            "DISPLAY", "WAYLAND_DISPLAY",
        ] { env[k] = nil }
        env["HOME"] = home
        env["XDG_RUNTIME_DIR"] = runtime
        env["XDG_DATA_HOME"] = home + "/.local/share"
        env["XDG_CONFIG_HOME"] = home + "/.config"
        env["XDG_CACHE_HOME"] = home + "/.cache"
        let results = root + "/results.json"
        let pids = root + "/pids"
        let unlock =
            keyringItems == nil
            ? ""
            : "echo -n \(password) | gnome-keyring-daemon --unlock --components=secrets >/dev/null 2>&1\n"
        let script = unlock + "exec \"$@\""
        let args =
            ["--", "sh", "-c", script, "sh", Spawn.selfPath] + inner + [
                results, "--keyring-have", String(have),
            ]
            + options.measurementArguments + extra + ["--pid-file", pids]
        let session = try Spawn.start(
            Spawn.which("dbus-run-session")!, args, environment: env, stdout: .devNull,
            stderr: .inherit)
        Children.add(session)
        let status = Spawn.wait(session) ?? -1
        Children.remove(session)
        // The services the private bus started should go with it; stop any that stayed.
        if let text = try? String(contentsOfFile: pids, encoding: .utf8) {
            for p in text.split(separator: "\n").compactMap({ pid_t($0) }) where kill(p, 0) == 0 {
                kill(p, SIGTERM)
            }
        }
        guard status == 0 else {
            throw BenchError(
                "the run on a private bus (\(inner.joined(separator: " "))) failed (exit \(status))"
            )
        }
        let data = try Data(contentsOf: URL(fileURLWithPath: results))
        return try JSONDecoder().decode([Entry].self, from: data)
    }

    /// The largest cached keyring with at most `items` items.
    static func bestCachedKeyring(_ options: Options, items: Int) -> (Int, String)? {
        let prefix = "keyring-\(format)-"
        let suffix = "-s\(options.secretSize)"
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: options.cacheRoot)
        else { return nil }
        var best: (Int, String)?
        for name in names where name.hasPrefix(prefix) && name.hasSuffix(suffix) {
            guard let n = Int(name.dropFirst(prefix.count).dropLast(suffix.count)), n <= items,
                FileManager.default.fileExists(
                    atPath: options.cacheRoot + "/" + name + "/login.keyring")
            else { continue }
            if n > (best?.0 ?? -1) { best = (n, options.cacheRoot + "/" + name) }
        }
        return best
    }

    // MARK: inner (on the private bus)

    static func inner(_ options: Options, results: String, pidFile: String?) throws {
        let n = options.keyringItems
        let keyring = try DesktopKeyring(timeout: nil)
        if let pidFile { recordServicePIDs(pidFile) }
        try fill(keyring, to: n, options: options)
        if let pidFile { recordServicePIDs(pidFile) }
        var entries: [Entry] = []

        // 1. lookups of a random existing item, with its secret.
        for c in options.clients {
            entries.append(
                try measure(
                    "lookup", system: "keyring", items: n, clients: c, options: options,
                    note: "secret_password_lookupv_sync"
                ) { client in
                    let k = try DesktopKeyring(timeout: nil)
                    var rng = XorShift(seed: UInt64(client + 1))
                    return { _ in
                        let i = rng.next(below: n)
                        guard let s = try k.lookup(.item, attributes(i)),
                            s.count == options.secretSize
                        else {
                            throw BenchError("keyring lookup of item \(i) found nothing")
                        }
                        return true
                    }
                })
        }

        // 2. durable writes: add new items, update them, delete them.
        let store = KeyringStore(options: options)
        for c in options.writeClients {
            entries += try interleave(
                [
                    writeSeries(
                        system: "keyring", items: n, clients: c, options: options, store: store)
                ], repetitions: options.repetitions)
        }

        // 3. whole processes: secret-tool lookup.
        if let tool = Spawn.which("secret-tool") {
            var rng = XorShift(seed: 99)
            entries.append(
                try processRuns(
                    "item-get-process", system: "keyring", items: n, options: options,
                    note: "secret-tool lookup"
                ) {
                    let i = rng.next(below: n)
                    return (
                        tool,
                        [
                            "lookup", "service", BenchItem.service(i), "account",
                            BenchItem.account(i),
                        ]
                    )
                })
        }

        // 4. dconf, the desktop's preferences store, when installed.
        entries += Dconf.measure(options)
        if let pidFile { recordServicePIDs(pidFile) }

        let data = try JSONEncoder().encode(entries)
        try data.write(to: URL(fileURLWithPath: results))
    }

    /// Fills the keyring (holding the cached items 0..<`keyringHave`, checked) to items
    /// 0..<`n` through libsecret, one store at a time, and caches the result.
    static func fill(_ keyring: DesktopKeyring, to n: Int, options: Options) throws {
        var have = options.keyringHave
        if have > 0, (try? keyring.lookup(.item, attributes(have - 1))).flatMap({ $0 }) == nil {
            warn("the cached keyring lacks its items; filling from scratch")
            have = 0
        }
        if have < n {
            let t0 = Date()
            for i in have..<n {
                try keyring.store(
                    .item, attributes(i), label: "vault-bench \(i)",
                    secret: Array(BenchItem.secret(i, size: options.secretSize)))
                if (i + 1) % 250 == 0 {
                    let rate = Double(i + 1 - have) / Date().timeIntervalSince(t0)
                    progress(
                        String(format: "  keyring: %d of %d items (%.1f stores/s)", i + 1, n, rate))
                }
            }
            progress(
                String(
                    format: "  keyring: filled %d items in %.0f s", n - have,
                    Date().timeIntervalSince(t0)))
            if options.useCache {
                let dir =
                    (ProcessInfo.processInfo.environment["XDG_DATA_HOME"] ?? NSHomeDirectory()
                        + "/.local/share") + "/keyrings"
                try publishDirectory(dir, as: cachePath(options, items: n))
            }
        }
    }

    /// Writes the pids owning the keyring and dconf names on this bus (to stop leftovers).
    static func recordServicePIDs(_ file: String) {
        var pids: [String] = []
        for name in ["org.freedesktop.secrets", "org.gnome.keyring", "ca.desrt.dconf"] {
            let out = file + ".q"
            guard let send = Spawn.which("dbus-send"),
                (try? Spawn.run(
                    send,
                    [
                        "--session", "--print-reply", "--dest=org.freedesktop.DBus", "/",
                        "org.freedesktop.DBus.GetConnectionUnixProcessID", "string:\(name)",
                    ],
                    environment: ProcessInfo.processInfo.environment, stdout: .file(out))) == 0,
                let text = try? String(contentsOfFile: out, encoding: .utf8)
            else { continue }
            try? FileManager.default.removeItem(atPath: out)
            if let last = text.split(separator: " ").last.map({
                $0.trimmingCharacters(in: .whitespacesAndNewlines)
            }), pid_t(last) != nil {
                pids.append(last)
            }
        }
        let old = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
        try? (old + pids.map { $0 + "\n" }.joined()).write(
            toFile: file, atomically: true, encoding: .utf8)
    }
}

/// Add / update / delete against the keyring through libsecret.
struct KeyringStore: WriteStore {
    let options: Options
    func client() throws -> WriteClient {
        let k = try DesktopKeyring(timeout: nil)
        let size = options.secretSize
        return WriteClient(
            add: { i in
                try k.store(
                    .item, KeyringBench.attributes(i), label: "vault-bench \(i)",
                    secret: Array(BenchItem.secret(i, size: size)))
            },
            update: { i in
                try k.store(
                    .item, KeyringBench.attributes(i), label: "vault-bench \(i)",
                    secret: Array(BenchItem.secret(i + 1, size: size)))
            },
            delete: { i in
                guard try k.clear(.item, KeyringBench.attributes(i)) else {
                    throw BenchError("keyring: item \(i) was not there to delete")
                }
            })
    }
}
