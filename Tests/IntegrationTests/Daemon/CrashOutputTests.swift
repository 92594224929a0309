import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Secrets stay off the disk; vaultd marks itself non-dumpable. The clients hold
/// secrets too (git-credential-vault the password git gave it, vaultctl a passphrase), so a
/// client killed by a signal while holding one must not leave a core file with it in
/// plaintext. The clients cannot be non-dumpable (vaultd identifies a peer through its
/// /proc/PID/exe and root, which a non-dumpable process hides from a non-root vaultd), so
/// they allow no core file instead. Nor may any of them print memory in a crash report
/// (`CrashOutput.keepSecretsOut`).
@Suite struct CrashOutputTests {
    /// Core files land in the dying process's working directory only with a plain
    /// `core_pattern` (no pipe to a handler, no directory of its own).
    static let coresInWorkingDirectory: Bool = {
        guard let p = try? String(contentsOfFile: "/proc/sys/kernel/core_pattern", encoding: .utf8)
        else { return false }
        let pattern = p.trimmingCharacters(in: .whitespacesAndNewlines)
        return !pattern.isEmpty && !pattern.hasPrefix("|") && !pattern.contains("/")
    }()

    /// Runs `command` in a new directory under `root` with core files allowed (`ulimit -c
    /// unlimited`) and Swift's crash handler off, lets it run `settle` seconds, kills it with
    /// SIGABRT (whose default action dumps core) and returns the core files it left.
    static func coresAfterAbort(
        _ command: [String], root: String, name: String, environment: [String: String],
        inputs: [Int32: Data], settle: Double = 1.5
    ) throws -> [(name: String, data: Data)] {
        let dir = root + "/" + name
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        var env = environment
        env["SWIFT_BACKTRACE"] = "enable=no"
        let pid = try ChildProcess.spawn(
            "/bin/sh",
            ["-c", #"ulimit -c unlimited && cd "$1" && shift && exec "$@""#, "sh", dir] + command,
            environment: env,
            inputs: inputs, stdout: .devNull,
            stderr: .file(root + "/" + name + ".err", append: false))
        usleep(useconds_t(settle * 1_000_000))
        Glibc.kill(pid, SIGABRT)
        let status = ChildProcess.wait(pid, timeout: 10)
        if status == nil {
            Glibc.kill(pid, SIGKILL)
            _ = ChildProcess.wait(pid, timeout: 10)
        }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
        return names.filter { $0.hasPrefix("core") }.map {
            ($0, FileManager.default.contents(atPath: dir + "/" + $0) ?? Data())
        }
    }

    @Test(
        .enabled(
            if: coresInWorkingDirectory,
            "needs core files written to the working directory (kernel.core_pattern)"))
    func aClientKilledWhileHoldingASecretLeavesNoCoreFileWithIt() throws {
        let d = try Daemon()
        defer { d.close() }
        let pid = try #require(d.pid)
        // A stopped vaultd accepts connections but never answers: each client waits, secret in hand.
        Glibc.kill(pid, SIGSTOP)
        defer { Glibc.kill(pid, SIGCONT) }

        // The control: a program that does nothing about cores leaves one here.
        let control = try Self.coresAfterAbort(
            ["sleep", "30"], root: d.root, name: "control", environment: d.environment, inputs: [:])
        guard !control.isEmpty else {
            // This machine writes no core files at all (a hard limit of 0, say): nothing to check.
            return
        }

        let password = "Core-Dump-Password-4471"
        let passphrase = "Core-Dump-Passphrase-9052"
        let cases: [(name: String, command: [String], inputs: [Int32: Data], secret: String)] = [
            (
                "git-credential-vault", [Paths.tool("git-credential-vault"), "store"],
                [
                    0: Data(
                        "protocol=https\nhost=example.org\nusername=bob\npassword=\(password)\n\n"
                            .utf8)
                ], password
            ),
            (
                "vaultctl", [Paths.tool("vaultctl"), "unlock", "--passphrase-fd", "3"],
                [3: Data((passphrase + "\n").utf8)], passphrase
            ),
        ]
        for c in cases {
            let cores = try Self.coresAfterAbort(
                c.command, root: d.root, name: c.name, environment: d.environment, inputs: c.inputs)
            let holding = cores.filter { $0.data.range(of: Data(c.secret.utf8)) != nil }.map(\.name)
            #expect(holding.isEmpty, "\(c.name): its secret is in plaintext in \(holding)")
            #expect(
                cores.isEmpty,
                "\(c.name) left core files: \(cores.map { "\($0.name) (\($0.data.count) B)" })")
        }
    }

    /// Runs `command` with `environment` (with or without `SWIFT_BACKTRACE`), lets it run
    /// `settle` seconds, sends it SIGSEGV, gives it `grace` seconds to die (then SIGKILL: Swift's
    /// crash reporter returns from a SIGSEGV that was sent rather than faulted, and the process
    /// goes on) and returns its exit status and stderr.
    static func stderrAfterSegv(
        _ command: [String], root: String, name: String, environment: [String: String],
        inputs: [Int32: Data],
        settle: Double = 1.5, grace: Double = 10
    ) throws -> (status: Int32?, stderr: String) {
        let errPath = root + "/" + name + ".err"
        let pid = try ChildProcess.spawn(
            command[0], Array(command.dropFirst()), environment: environment, inputs: inputs,
            stdout: .devNull, stderr: .file(errPath, append: false))
        usleep(useconds_t(settle * 1_000_000))
        Glibc.kill(pid, SIGSEGV)
        var status = ChildProcess.wait(pid, timeout: grace)
        if status == nil {
            Glibc.kill(pid, SIGKILL)
            status = ChildProcess.wait(pid, timeout: 10)
        }
        return (status, (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? "")
    }

    /// Swift's crash reporter prints the 16 bytes each register points at ("rip 0x… 48 3d 00
    /// …"; a vaultd run as root, SIGSEGVed, printed its memory so): vaultd, vaultctl holding a
    /// passphrase and git-credential-vault holding a password die of a crash signal without a
    /// report, unless `SWIFT_BACKTRACE` asks for one.
    @Test func aCrashWhileHoldingASecretPrintsNoMemory() throws {
        let d = try Daemon()
        defer { d.close() }
        let pid = try #require(d.pid)
        // A stopped vaultd accepts connections but never answers: each client waits, secret in hand.
        Glibc.kill(pid, SIGSTOP)
        defer { Glibc.kill(pid, SIGCONT) }
        var env = d.environment
        env["SWIFT_BACKTRACE"] = nil
        let passphrase = "Crash-Report-Passphrase-3318"
        let password = "Crash-Report-Password-7720"
        let unlock = [Paths.tool("vaultctl"), "unlock", "--passphrase-fd", "3"]
        let unlockInput: [Int32: Data] = [3: Data((passphrase + "\n").utf8)]

        // The control: asked for, the report comes, with the memory at each register.
        var asked = env
        asked["SWIFT_BACKTRACE"] = "enable=yes,interactive=no"
        let control = try Self.stderrAfterSegv(
            unlock, root: d.root, name: "control", environment: asked, inputs: unlockInput, grace: 5
        )
        guard control.stderr.contains("Backtracing") else {
            // No crash reporter on this machine (a toolchain without swift-backtrace): nothing to check.
            return
        }
        #expect(
            control.stderr.contains("rip 0x"),
            "the control's report shows no registers:\n\(control.stderr)")

        let cases: [(name: String, command: [String], inputs: [Int32: Data])] = [
            ("vaultctl", unlock, unlockInput),
            (
                "git-credential-vault", [Paths.tool("git-credential-vault"), "store"],
                [
                    0: Data(
                        "protocol=https\nhost=example.org\nusername=bob\npassword=\(password)\n\n"
                            .utf8)
                ]
            ),
            (
                "vaultd",
                [
                    Paths.tool("vaultd"), "--socket", d.root + "/crashing.sock", "--data-dir",
                    d.root + "/crashing-vaultd",
                ], [:]
            ),
        ]
        for c in cases {
            let r = try Self.stderrAfterSegv(
                c.command, root: d.root, name: c.name, environment: env, inputs: c.inputs)
            #expect(
                r.status == 128 + SIGSEGV,
                "\(c.name) exit status \(r.status.map(String.init) ?? "?"); stderr:\n\(r.stderr)")
            #expect(
                !r.stderr.contains("Backtracing") && !r.stderr.contains("rip 0x"),
                "\(c.name) printed a crash report:\n\(r.stderr)")
            #expect(
                !r.stderr.contains(passphrase) && !r.stderr.contains(password),
                "\(c.name) printed the secret")
        }
    }
}
