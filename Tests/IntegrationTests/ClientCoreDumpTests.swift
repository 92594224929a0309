import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// DESIGN §4 keeps secrets off the disk; vaultd marks itself non-dumpable. The clients hold
/// secrets too (git-credential-vault the password git gave it, vaultctl a passphrase), so a
/// client killed by a signal while holding one must not leave a core file with it in
/// plaintext. The clients cannot be non-dumpable (vaultd identifies a peer through its
/// /proc/PID/exe and root, which a non-dumpable process hides from a non-root vaultd), so
/// they allow no core file instead.
@Suite struct ClientCoreDumpTests {
    /// Core files land in the dying process's working directory only with a plain
    /// `core_pattern` (no pipe to a handler, no directory of its own).
    static let coresInWorkingDirectory: Bool = {
        guard let p = try? String(contentsOfFile: "/proc/sys/kernel/core_pattern", encoding: .utf8) else { return false }
        let pattern = p.trimmingCharacters(in: .whitespacesAndNewlines)
        return !pattern.isEmpty && !pattern.hasPrefix("|") && !pattern.contains("/")
    }()

    /// Runs `command` in a new directory under `root` with core files allowed (`ulimit -c
    /// unlimited`) and Swift's crash handler off, lets it run `settle` seconds, kills it with
    /// SIGABRT (whose default action dumps core) and returns the core files it left.
    static func coresAfterAbort(
        _ command: [String], root: String, name: String, environment: [String: String], inputs: [Int32: Data], settle: Double = 1.5
    ) throws -> [(name: String, data: Data)] {
        let dir = root + "/" + name
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        var env = environment
        env["SWIFT_BACKTRACE"] = "enable=no"
        let pid = try ChildProcess.spawn(
            "/bin/sh", ["-c", #"ulimit -c unlimited && cd "$1" && shift && exec "$@""#, "sh", dir] + command, environment: env,
            inputs: inputs, stdout: .devNull, stderr: .file(root + "/" + name + ".err", append: false))
        usleep(useconds_t(settle * 1_000_000))
        Glibc.kill(pid, SIGABRT)
        let status = ChildProcess.wait(pid, timeout: 10)
        if status == nil {
            Glibc.kill(pid, SIGKILL)
            _ = ChildProcess.wait(pid, timeout: 10)
        }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
        return names.filter { $0.hasPrefix("core") }.map { ($0, FileManager.default.contents(atPath: dir + "/" + $0) ?? Data()) }
    }

    @Test(.enabled(if: coresInWorkingDirectory, "needs core files written to the working directory (kernel.core_pattern)"))
    func aClientKilledWhileHoldingASecretLeavesNoCoreFileWithIt() throws {
        let d = try Daemon()
        defer { d.close() }
        let pid = try #require(d.pid)
        // A stopped vaultd accepts connections but never answers: each client waits, secret in hand.
        Glibc.kill(pid, SIGSTOP)
        defer { Glibc.kill(pid, SIGCONT) }

        // The control: a program that does nothing about cores leaves one here.
        let control = try Self.coresAfterAbort(["sleep", "30"], root: d.root, name: "control", environment: d.environment, inputs: [:])
        guard !control.isEmpty else {
            // This machine writes no core files at all (a hard limit of 0, say): nothing to check.
            return
        }

        let password = "Core-Dump-Password-4471"
        let passphrase = "Core-Dump-Passphrase-9052"
        let cases: [(name: String, command: [String], inputs: [Int32: Data], secret: String)] = [
            (
                "git-credential-vault", [Paths.tool("git-credential-vault"), "store"],
                [0: Data("protocol=https\nhost=example.org\nusername=bob\npassword=\(password)\n\n".utf8)], password
            ),
            ("vaultctl", [Paths.tool("vaultctl"), "unlock", "--passphrase-fd", "3"], [3: Data((passphrase + "\n").utf8)], passphrase),
        ]
        for c in cases {
            let cores = try Self.coresAfterAbort(c.command, root: d.root, name: c.name, environment: d.environment, inputs: c.inputs)
            let holding = cores.filter { $0.data.range(of: Data(c.secret.utf8)) != nil }.map(\.name)
            #expect(holding.isEmpty, "\(c.name): its secret is in plaintext in \(holding)")
            #expect(cores.isEmpty, "\(c.name) left core files: \(cores.map { "\($0.name) (\($0.data.count) B)" })")
        }
    }
}
