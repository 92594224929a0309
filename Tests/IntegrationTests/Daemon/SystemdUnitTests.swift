import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// dist/systemd/vaultd.service: its sandbox as `systemd-analyze security` rates it, and vaultd
/// serving under that sandbox.
@Suite struct SystemdUnitTests {
    static let unit = Paths.repoRoot.appendingPathComponent("dist/systemd/vaultd.service").path
    static let env = ["PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"]

    /// systemd's own review of the unit file (offline, as for a unit not installed): an overall
    /// exposure of 2.0 or less ("OK"; the unit without its sandbox was 8.7, "EXPOSED"), with
    /// the settings that matter most each marked as in effect.
    @Test func systemdRatesTheUnitsSandboxOK() throws {
        let r = try ChildProcess.run(
            "/usr/bin/systemd-analyze",
            ["security", "--offline=true", "--threshold=20", Self.unit], environment: Self.env)
        let text = r.stdoutText + r.stderr
        let level = text.firstMatch(of: #/Overall exposure level for vaultd\.service: (\d+\.\d)/#)
            .flatMap { Double($0.1) }
        print("systemd-unit: systemd-analyze security: exposure \(level.map { String($0) } ?? "?")")
        #expect(r.status == 0 && level != nil && level! <= 2.0, "\(r)")
        for setting in [
            "NoNewPrivileges=", "ProtectSystem=", "PrivateNetwork=", "PrivateDevices=",
            "ProtectKernelTunables=", "ProtectKernelModules=",
            "ProtectControlGroups=", "MemoryDenyWriteExecute=", "LockPersonality=",
            "RestrictNamespaces=", "SystemCallArchitectures=",
            "SystemCallFilter=~@privileged", "RestrictAddressFamilies=~AF_(INET|INET6)",
        ] {
            #expect(
                text.split(separator: "\n").contains { $0.hasPrefix("✓ " + setting) },
                "\(setting) not in effect:\n\(text)")
        }
    }

    /// vaultd started under the unit's sandbox, applied by Tests/Fixtures/systemd/run-under-unit.py
    /// with the kernel mechanisms systemd uses (no service manager runs here): a read-only file
    /// system but for the unit's ReadWritePaths, no network, no new privileges, the kernel's
    /// memory-deny-write-execute, and the @system-service syscall filter with AF_UNIX sockets
    /// only. Every setting of the unit is either applied or named as not applied (never
    /// unknown). vaultd starts, is initialised, stores and returns an item and a preference,
    /// writes a backup into a writable path (~/VaultSync), runs its periodic tasks, and stops
    /// cleanly on SIGTERM; a backup outside the writable paths fails as read-only, and its kernel state
    /// shows the restrictions (NoNewPrivs, a seccomp filter, another network namespace).
    @Test(.tags(.system), .enabled(if: getuid() == 0, "namespaces and mounts need root"))
    func vaultdServesUnderTheUnitsSandbox() throws {
        let root = try TemporaryDirectory.make(prefix: "vaultd-unit")
        defer { TemporaryDirectory.remove(root) }
        let home = root + "/home"
        let runtime = root + "/xdg-run"
        // ~/VaultSync is writable when it exists (`ReadWritePaths=-%h/VaultSync`).
        for d in [home, home + "/VaultSync", runtime, runtime + "/vaultd"] { mkdir(d, 0o700) }
        let socket = runtime + "/vaultd/vaultd.sock"  // the socket unit's %t/vaultd/vaultd.sock
        var env = isolatedEnvironment(root: root, socket: nil).merging(
            TestClock.environment(root: root)
        ) { $1 }
        env["HOME"] = home
        env["XDG_RUNTIME_DIR"] = runtime
        let log = root + "/vaultd.log"
        let wrapper = Paths.repoRoot.appendingPathComponent(
            "Tests/Fixtures/systemd/run-under-unit.py"
        ).path
        let pid = try ChildProcess.spawn(
            "/usr/bin/python3",
            [wrapper, Self.unit, "--", Paths.tool("vaultd"), "--socket", socket], environment: env,
            inputs: [:],
            stdout: .file(log, append: true), stderr: .file(log, append: true))
        var running = true
        defer {
            if running {
                kill(pid, SIGKILL)
                _ = ChildProcess.wait(pid, timeout: 10)
            }
        }
        func logText() -> String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
        try Daemon.waitUntilServing(pid, socketPath: socket, timeout: 30, log: logText) { _ in
            running = false
        }

        let setup = logText().split(separator: "\n").filter { $0.hasPrefix("run-under-unit: ") }
        print(setup.joined(separator: "\n"))
        #expect(
            !setup.contains { $0.hasPrefix("run-under-unit: unknown") },
            "settings the test does not know: \(setup)")
        for setting in [
            "ProtectSystem=strict", "ReadWritePaths", "PrivateNetwork=yes", "PrivateDevices=yes",
            "NoNewPrivileges=yes", "MemoryDenyWriteExecute=yes",
            "SystemCallFilter", "RestrictAddressFamilies=AF_UNIX", "ProtectKernelTunables=yes",
            "UMask=0077",
        ] {
            #expect(
                setup.contains { $0.hasPrefix("run-under-unit: applied: " + setting) },
                "\(setting) not applied: \(setup)")
        }
        // The kernel's view of vaultd: no new privileges, a seccomp filter, its own network.
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        #expect(status.contains("NoNewPrivs:\t1") && status.contains("Seccomp:\t2"), "\(status)")
        let ownNet = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/ns/net")
        let itsNet = try FileManager.default.destinationOfSymbolicLink(
            atPath: "/proc/\(pid)/ns/net")
        #expect(ownNet != itsNet, "vaultd shares the test's network namespace")

        var ctlEnv = isolatedEnvironment(root: root, socket: socket)
        ctlEnv["HOME"] = home
        func ctl(_ args: [String], stdin: Data? = nil) throws -> ProcessResult {
            try ChildProcess.run(Paths.tool("vaultctl"), args, environment: ctlEnv, stdin: stdin)
        }
        let initialised = try ctl(
            ["init", "--passphrase-fd", "0"], stdin: Data("correct horse\n".utf8))
        #expect(initialised.status == 0, "\(initialised)\n\(logText())")
        #expect(
            try ctl(
                ["item", "add", "--service", "unit.example", "--account", "a"],
                stdin: Data("s3cret".utf8)
            ).status == 0)
        let secret = try ctl(["item", "get", "--service", "unit.example", "--account", "a"])
        #expect(secret.status == 0 && secret.stdoutText == "s3cret", "\(secret)")
        #expect(
            try ctl(["defaults", "write", "com.example.unit", "Volume", "-float", "0.5"]).status
                == 0)
        let read = try ctl(["defaults", "read", "com.example.unit", "Volume"])
        #expect(read.stdoutText == "0.5\n", "\(read)")
        // vaultd writes a backup where the unit lets it, not elsewhere.
        let inside = home + "/VaultSync/backup.age"
        let backup = try ctl(
            ["backup", inside, "--passphrase-fd", "0"], stdin: Data("backup pass\n".utf8))
        #expect(
            backup.status == 0 && FileManager.default.fileExists(atPath: inside),
            "\(backup)\n\(logText())")
        let outside = try ctl(
            ["backup", root + "/outside.age", "--passphrase-fd", "0"],
            stdin: Data("backup pass\n".utf8))
        #expect(
            outside.status != 0 && outside.stderr.contains("Read-only file system"), "\(outside)")
        #expect(!FileManager.default.fileExists(atPath: root + "/outside.age"))
        // The periodic tasks (the executable scan, the cache policy) run in the sandbox too.
        try Daemon.tick(pid, log: logText, timeout: 20)
        #expect(try ctl(["status"]).status == 0)

        kill(pid, SIGTERM)
        let exit = ChildProcess.wait(pid, timeout: 20)
        running = exit == nil
        #expect(
            exit == 0,
            "vaultd's exit status under the sandbox: \(String(describing: exit))\n\(logText())")
    }
}
