import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A private desktop keyring for one test, as TEST-RECIPES.md says: its own `dbus-daemon`
/// (session bus on a socket in a temporary directory) and `gnome-keyring-daemon --unlock
/// --components=secrets` on it, with HOME and the XDG directories in that directory; and a
/// vaultd that sees the bus (the shared `Daemon` helper starts vaultd without it, so this
/// fixture starts its own). Every process it starts is stopped by PID in `close()`.
final class KeyringFixture: @unchecked Sendable {
    let root: String
    let busAddress: String
    let socketPath: String
    let dataDirectory: String
    let vaultdLog: String
    static let keyringPassword = "login-pw"

    private(set) var busPID: pid_t?
    private(set) var keyringPID: pid_t?
    private var monitorPID: pid_t?
    private(set) var vaultdPID: pid_t?

    /// `keyring`: start gnome-keyring-daemon on the bus (false: the bus alone, for vaultd's
    /// own Secret Service).
    init(keyring: Bool = true) throws {
        root = try TemporaryDirectory.make(prefix: "vaultd-kr")
        busAddress = "unix:path=\(root)/bus"
        socketPath = root + "/run/vaultd.sock"
        dataDirectory = root + "/data"
        vaultdLog = root + "/vaultd.log"
        for d in ["home", "xdg-run"] { mkdir(root + "/" + d, 0o700) }
        do {
            try startBus()
            if keyring { try startKeyring() }
        } catch {
            close()
            throw error
        }
    }

    deinit { close() }

    /// The environment of every process of the test: isolated HOME and XDG dirs, the
    /// private bus, vaultd's socket, no display (so no unlock prompt can ever appear).
    var environment: [String: String] {
        var env = isolatedEnvironment(root: root, socket: socketPath)
        env["DBUS_SESSION_BUS_ADDRESS"] = busAddress
        env["PYTHON_KEYRING_BACKEND"] = "keyring.backends.SecretService.Keyring"
        for k in ["DISPLAY", "WAYLAND_DISPLAY", "GNOME_KEYRING_CONTROL", "SSH_AUTH_SOCK"] {
            env[k] = nil
        }
        return env
    }

    private func startBus() throws {
        busPID = try ChildProcess.spawn(
            "dbus-daemon", ["--session", "--nofork", "--nopidfile", "--address=\(busAddress)"],
            environment: environment,
            inputs: [:], stdout: .file(root + "/dbus.log", append: true),
            stderr: .file(root + "/dbus.log", append: true))
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if access(root + "/bus", F_OK) == 0 { return }
            usleep(10_000)
        }
        throw HarnessError(
            "dbus-daemon did not create its socket; log:\n\(text(root + "/dbus.log"))")
    }

    /// Starts gnome-keyring-daemon (a fixture made with `keyring: false` may start it later,
    /// e.g. once a test has put a keyring file in place). `password`: the login password it
    /// is given on stdin (`--unlock`), which a new login keyring is encrypted with; "" gives
    /// none, and a plain login keyring then stays plain.
    func startKeyring(password: String = keyringPassword) throws {
        precondition(keyringPID == nil)
        keyringPID = try ChildProcess.spawn(
            "gnome-keyring-daemon", ["--foreground", "--unlock", "--components=secrets"],
            environment: environment,
            inputs: [0: Data(password.utf8)],
            stdout: .file(root + "/keyring.log", append: true),
            stderr: .file(root + "/keyring.log", append: true))
        let deadline = Date().addingTimeInterval(15)
        while Date() < deadline {
            let r = run(
                "dbus-send",
                [
                    "--session", "--print-reply", "--dest=org.freedesktop.DBus",
                    "/org/freedesktop/DBus", "org.freedesktop.DBus.NameHasOwner",
                    "string:org.freedesktop.secrets",
                ],
                timeout: 5)
            if r.stdoutText.contains("boolean true") { return }
            usleep(50_000)
        }
        throw HarnessError(
            "gnome-keyring-daemon did not take org.freedesktop.secrets; log:\n\(text(root + "/keyring.log"))"
        )
    }

    /// Stops gnome-keyring-daemon (SIGTERM, waited for): its keyring files are then complete
    /// on disk, and no Secret Service answers on the bus.
    func stopKeyring() {
        guard let p = keyringPID else { return }
        keyringPID = nil
        _ = Self.stop(p)
    }

    /// The directory of gnome-keyring's keyring files in this fixture's home.
    var keyringsDirectory: String { root + "/home/.local/share/keyrings" }

    /// Locks the login collection (as the screen locker would).
    func lockKeyring() -> ProcessResult {
        run(
            "dbus-send",
            [
                "--session", "--print-reply", "--dest=org.freedesktop.secrets",
                "/org/freedesktop/secrets",
                "org.freedesktop.Secret.Service.Lock",
                "array:objpath:/org/freedesktop/secrets/collection/login",
            ])
    }

    /// Starts `dbus-monitor` on the private bus for `CreateItem` calls and returns once it
    /// monitors; `createdItems` reads what it saw. Stopped in `close()`.
    func monitorCreateItem() throws {
        precondition(monitorPID == nil)
        let out = root + "/monitor.log"
        monitorPID = try ChildProcess.spawn(
            "dbus-monitor",
            [
                "--address", busAddress,
                "interface=org.freedesktop.Secret.Collection,member=CreateItem",
            ], environment: environment,
            inputs: [:], stdout: .file(out, append: true), stderr: .file(out, append: true))
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if text(out).contains("member=NameLost") { return }  // it has become a monitor
            usleep(10_000)
        }
        throw HarnessError("dbus-monitor did not start; log:\n\(text(out))")
    }

    /// "LABEL CONTENT-TYPE" of each `CreateItem` call seen by `monitorCreateItem`, in order.
    /// The content type travels in clear beside the (encrypted) secret: this is what a client
    /// asked for, whatever the Secret Service keeps (gnome-keyring keeps none: it reports
    /// every secret as text/plain).
    func createdItems() -> [String] {
        text(root + "/monitor.log").components(separatedBy: "\nmethod call ").filter {
            $0.contains("member=CreateItem")
        }.map { call in
            let lines = call.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            func string(_ line: String) -> String {
                guard let r = line.range(of: "string \"") else { return "?" }
                return String(line[r.upperBound...].dropLast())
            }
            let label =
                lines.firstIndex(of: "string \"org.freedesktop.Secret.Item.Label\"").map {
                    string(lines[$0 + 1])
                } ?? "?"
            let type =
                lines.firstIndex(of: "struct {").flatMap { s in
                    lines[s...].first { $0.hasPrefix("string \"") }
                }.map(string) ?? "?"
            return "\(label) \(type)"
        }
    }

    // MARK: vaultd

    /// Starts vaultd on the private bus and waits until it answers. Returns the seconds it
    /// took to answer.
    @discardableResult
    func startVaultd(arguments: [String] = [], environment extra: [String: String] = [:]) throws
        -> Double
    {
        precondition(vaultdPID == nil)
        var env = environment.merging(extra) { $1 }
        env["VAULTD_SOCKET"] = nil
        let started = Date()
        let p = try ChildProcess.spawn(
            Paths.tool("vaultd"),
            ["--socket", socketPath, "--data-dir", dataDirectory] + arguments,
            environment: env.filter { !$0.value.isEmpty },
            inputs: [:], stdout: .file(vaultdLog, append: true),
            stderr: .file(vaultdLog, append: true))
        vaultdPID = p
        try Daemon.waitUntilServing(
            p, socketPath: socketPath, timeout: 15, interval: 10_000, log: { log }
        ) { _ in vaultdPID = nil }
        return Date().timeIntervalSince(started)
    }

    /// SIGTERM and wait; returns the exit status.
    @discardableResult
    func stopVaultd() -> Int32? {
        guard let p = vaultdPID else { return nil }
        vaultdPID = nil
        return Self.stop(p)
    }

    var log: String { text(vaultdLog) }

    /// Waits until vaultd's log contains `needle`; returns whether it did within `timeout`.
    func waitForLog(_ needle: String, timeout: Double) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        repeat {
            if log.contains(needle) { return true }
            usleep(10_000)
        } while Date() < deadline
        return false
    }

    /// `vaultctl status --json`'s state ("locked", ...), or nil.
    func state() -> String? {
        let r = ctl(["status", "--json"])
        guard r.status == 0,
            let o = try? JSONSerialization.jsonObject(with: r.stdout) as? [String: Any]
        else { return nil }
        return o["state"] as? String
    }

    // MARK: clients

    func run(
        _ tool: String, _ arguments: [String], stdin: Data? = nil, fds: [Int32: Data] = [:],
        timeout: Double = 60
    ) -> ProcessResult {
        do {
            return try ChildProcess.run(
                Paths.tool(tool), arguments, environment: environment, stdin: stdin, extraFDs: fds,
                timeout: timeout)
        } catch {
            return ProcessResult(status: -1, stdout: Data(), stderr: "harness: \(error)")
        }
    }

    func ctl(_ arguments: [String], stdin: Data? = nil, fds: [Int32: Data] = [:]) -> ProcessResult {
        run("vaultctl", arguments, stdin: stdin, fds: fds)
    }

    /// `secret-tool store --label=LABEL ATTRS...` with the secret on stdin.
    func secretToolStore(label: String, _ attributes: [String], secret: String) -> ProcessResult {
        run("secret-tool", ["store", "--label=\(label)"] + attributes, stdin: Data(secret.utf8))
    }

    /// An item made with python's secretstorage, the secret on stdin: secret-tool stores at
    /// most 8 KiB and every secret as text/plain.
    func secretStorageCreate(
        label: String, _ attributes: [String: String], secret: Data,
        contentType: String = "text/plain"
    ) -> ProcessResult {
        let script = """
            import json, sys, secretstorage
            c = secretstorage.get_default_collection(secretstorage.dbus_init())
            c.create_item(sys.argv[1], json.loads(sys.argv[2]), sys.stdin.buffer.read(), content_type=sys.argv[3])
            """
        let json = String(
            decoding: try! JSONSerialization.data(withJSONObject: attributes), as: UTF8.self)
        return run("python3", ["-c", script, label, json, contentType], stdin: secret)
    }

    // MARK: teardown

    private static func stop(_ pid: pid_t) -> Int32? {
        kill(pid, SIGTERM)
        if let s = ChildProcess.wait(pid, timeout: 10) { return s }
        kill(pid, SIGKILL)
        _ = ChildProcess.wait(pid, timeout: 5)
        return nil
    }

    /// Stops dbus-monitor, vaultd, the keyring and the bus (by PID, in that order) and removes the directory.
    func close() {
        for p in [monitorPID, vaultdPID, keyringPID, busPID].compactMap({ $0 }) { _ = Self.stop(p) }
        monitorPID = nil
        vaultdPID = nil
        keyringPID = nil
        busPID = nil
        TemporaryDirectory.remove(root)
    }

    private func text(_ path: String) -> String {
        (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }
}

extension XvfbDisplay {
    /// An X server for `k`'s private bus: its activation environment gets the display, so
    /// the bus starts gcr-prompter on it (with GSettings in memory, no accessibility bus).
    static func forBus(of k: KeyringFixture) throws -> XvfbDisplay {
        let display = try XvfbDisplay(environment: k.environment, log: k.root + "/xvfb.log")
        let r = k.run(
            "dbus-update-activation-environment",
            ["DISPLAY=\(display.display)", "GSETTINGS_BACKEND=memory", "NO_AT_BRIDGE=1"],
            timeout: 20)
        guard r.status == 0 else { throw HarnessError("\(r)") }
        return display
    }
}
