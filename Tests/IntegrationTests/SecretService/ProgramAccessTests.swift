import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Per-program access to secrets (issue 40 §2, docs/access.md), through real programs: two
/// copies of `secret-tool` at different paths on a private bus with vaultd as the Secret
/// Service, and two copies of `vaultctl` on the socket. The vault is new, so `SecretAccess` is
/// the real default, `confirm` (the harness's `VAULTD_TEST_SECRET_ACCESS` is removed). The
/// prompter is a scripted pinentry (`PinentryProgram`) whose answer to each CONFIRM comes
/// from a file the test writes, and which records every question it is asked.
@Suite(.serialized, .tags(.system)) struct ProgramAccessTests {
    static let attributes = ["service", "github.com", "user", "carol"]

    /// A vault on a private bus (Secret Service and socket), made new with the real default,
    /// with the scripted pinentry as the prompter; `writer` and `reader`: copies of `tool`.
    struct Setup {
        let k: KeyringFixture
        let writer: String
        let reader: String
        let config: String

        init(
            tool: String, timeout: Int = 20, prompter: String = "pinentry",
            prepare: (KeyringFixture) throws -> [String: String] = { _ in [:] }
        ) throws {
            k = try KeyringFixture(keyring: false)
            do {
                let bin = k.root + "/bin"
                try FileManager.default.createDirectory(
                    atPath: bin + "/a", withIntermediateDirectories: true)
                try FileManager.default.createDirectory(
                    atPath: bin + "/b", withIntermediateDirectories: true)
                let source = tool.hasPrefix("/") ? tool : "/usr/bin/" + tool
                writer = bin + "/a/" + (tool as NSString).lastPathComponent
                reader = bin + "/b/" + (tool as NSString).lastPathComponent
                try FileManager.default.copyItem(atPath: source, toPath: writer)
                try FileManager.default.copyItem(atPath: source, toPath: reader)
                config = k.root + "/config.plist"
                try Self.writeConfig(config, prompter: prompter, k: k, timeout: timeout)
                try k.startVaultd(
                    arguments: ["--secret-service", "--config", config],
                    environment: try prepare(k).merging(["VAULTD_TEST_SECRET_ACCESS": ""]) {
                        $1
                    })
                let r = k.ctl(["init", "--no-passphrase"])
                guard r.status == 0 else { throw HarnessError("vaultctl init: \(r)") }
            } catch {
                k.close()
                throw error
            }
        }

        static func writeConfig(_ path: String, prompter: String, k: KeyringFixture, timeout: Int)
            throws
        {
            let script = k.root + "/pinentry.sh"
            // CONFIRM: the first asks Allow or Deny, the second Always or Only this time
            // (Pinentry.confirm); the answer file says "deny", "once" or "always".
            let text = """
                #!/bin/sh
                echo 'OK Pleased to meet you'
                n=0
                while read -r cmd rest; do
                  case "$cmd" in
                    SETDESC) echo "$rest" >> "\(k.root)/questions"; echo OK ;;
                    CONFIRM)
                      n=$((n + 1)); a=$(cat "\(k.root)/answer")
                      if [ "$n" = 1 ] && [ "$a" != deny ]; then echo OK
                      elif [ "$n" = 2 ] && [ "$a" = always ]; then echo OK
                      else echo 'ERR 83886179 Operation cancelled <Pinentry>'; fi ;;
                    BYE) echo OK; exit 0 ;;
                    *) echo OK ;;
                  esac
                done
                """
            guard writeExecutable(script, text) else { throw HarnessError("cannot write") }
            try PropertyListSerialization.data(
                fromPropertyList: [
                    "Prompter": prompter, "PinentryProgram": script,
                    "SecretServicePromptTimeoutSeconds": timeout,
                ], format: .xml, options: 0
            ).write(to: URL(fileURLWithPath: path))
        }

        func answer(_ a: String) throws {
            try Data(a.utf8).write(to: URL(fileURLWithPath: k.root + "/answer"))
        }

        /// The questions asked so far: each SETDESC of a first CONFIRM (an allowed one's
        /// second, Always or Only this time, says "without asking again").
        var questions: [String] {
            ((try? String(contentsOfFile: k.root + "/questions", encoding: .utf8)) ?? "")
                .split(separator: "\n").map(String.init).filter {
                    $0.hasPrefix("Allow") && !$0.contains("without asking again")
                }
        }

        func run(
            _ program: String, _ arguments: [String], stdin: String? = nil,
            environment extra: [String: String] = [:]
        ) -> ProcessResult {
            do {
                // No loader variable of the test runner's: each would make the program one
                // that could pass for another (refused), but where a test sets one.
                let env = k.environment.filter { !$0.key.hasPrefix("LD_") }
                return try ChildProcess.run(
                    program, arguments, environment: env.merging(extra) { $1 },
                    stdin: stdin.map { Data($0.utf8) }, timeout: 60)
            } catch {
                return ProcessResult(status: -1, stdout: Data(), stderr: "harness: \(error)")
            }
        }
    }

    /// The Secret Service: the first copy of secret-tool stores; the second's lookup asks.
    /// Deny: nothing, and no second question for a minute. Always allow: the secret, and
    /// again without a question after vaultd restarts. A reader with LD_PRELOAD is refused
    /// without a question even so. Revoke: asked again. No prompter: a bounded failure.
    @Test func secretToolCopiesOnTheBus() throws {
        let s = try Setup(tool: "secret-tool")
        defer { s.k.close() }
        let k = s.k
        var r = k.ctl(["status", "--json"])
        let status = try JSONSerialization.jsonObject(with: r.stdout) as? [String: Any]
        #expect(status?["secretAccess"] as? String == "confirm", "\(r)")
        #expect(status?["secretAccessSource"] as? String == "vault", "\(r)")

        r = s.run(s.writer, ["store", "--label=GitHub token"] + Self.attributes, stdin: "s3cret")
        try #require(r.status == 0, "\(r) \(k.log)")
        // The creator reads its own item without a question.
        r = s.run(s.writer, ["lookup"] + Self.attributes)
        #expect(r.status == 0 && r.stdoutText == "s3cret", "\(r) \(k.log)")
        #expect(s.questions.isEmpty)

        // Deny: nothing returned; the question named both programs and the item.
        try s.answer("deny")
        r = s.run(s.reader, ["lookup"] + Self.attributes)
        #expect(r.status != 0 && r.stdoutText.isEmpty, "\(r)")
        #expect(s.questions.count == 1, "\(s.questions)")
        let q = s.questions.first ?? ""
        #expect(q.contains(s.reader) && q.contains("GitHub token") && q.contains(s.writer), "\(q)")
        // Denied a moment ago: refused at once, not asked again.
        r = s.run(s.reader, ["lookup"] + Self.attributes)
        #expect(r.status != 0 && r.stdoutText.isEmpty, "\(r)")
        #expect(s.questions.count == 1)
        #expect(k.log.contains("access: the user denied"), "\(k.log)")

        // Always allow (the owner's revoke forgets the recent denial).
        r = k.ctl(["access", "revoke"])
        #expect(r.status == 0, "\(r)")
        try s.answer("always")
        r = s.run(s.reader, ["lookup"] + Self.attributes)
        #expect(r.status == 0 && r.stdoutText == "s3cret", "\(r) \(k.log)")
        #expect(s.questions.count == 2)
        r = k.ctl(["access", "list", "--json"])
        #expect(r.status == 0 && r.stdoutText.contains(s.reader), "\(r)")

        // Remembered across a restart: no question.
        #expect(k.stopVaultd() == 0)
        try k.startVaultd(
            arguments: ["--secret-service", "--config", s.config],
            environment: ["VAULTD_TEST_SECRET_ACCESS": ""])
        r = s.run(s.reader, ["lookup"] + Self.attributes)
        #expect(r.status == 0 && r.stdoutText == "s3cret", "\(r) \(k.log)")
        #expect(s.questions.count == 2)

        // The same program with a loader variable could be anything: refused, not asked.
        r = s.run(
            s.reader, ["lookup"] + Self.attributes,
            environment: ["LD_PRELOAD": "/lib/x86_64-linux-gnu/libc.so.6"])
        #expect(r.status != 0 && r.stdoutText.isEmpty, "\(r)")
        #expect(r.stderr.contains("LD_PRELOAD"), "\(r)")
        #expect(s.questions.count == 2)

        // Revoked: asked again.
        r = k.ctl(["access", "revoke", "--program", s.reader])
        #expect(r.status == 0 && r.stdoutText.contains("revoked 1"), "\(r)")
        try s.answer("once")
        r = s.run(s.reader, ["lookup"] + Self.attributes)
        #expect(r.status == 0 && r.stdoutText == "s3cret", "\(r) \(k.log)")
        #expect(s.questions.count == 3)
        // Allow once is not remembered.
        r = s.run(s.reader, ["lookup"] + Self.attributes)
        #expect(s.questions.count == 4, "\(r)")

        // No prompter: a named error at once, well within the timeout.
        try Setup.writeConfig(s.config, prompter: "none", k: k, timeout: 20)
        try #require(kill(try #require(k.vaultdPID), SIGHUP) == 0)
        #expect(k.waitForLog("SIGHUP: settings reloaded", timeout: 20), "\(k.log)")
        let started = Date()
        r = s.run(s.reader, ["lookup"] + Self.attributes)
        #expect(r.status != 0 && r.stdoutText.isEmpty, "\(r)")
        #expect(Date().timeIntervalSince(started) < 10)
        #expect(r.stderr.contains("no prompter"), "\(r)")
        #expect(s.questions.count == 4)
    }

    /// The socket: two copies of vaultctl, CopyMatching with returnData. The second asks;
    /// Deny: AuthFailed and no secret; Always allow: the secret, then without a question.
    @Test func vaultctlCopiesOnTheSocket() throws {
        let s = try Setup(tool: Paths.tool("vaultctl"))
        defer { s.k.close() }
        var r = s.run(
            s.writer, ["item", "add", "--service", "svc", "--account", "acc", "--label", "Token"],
            stdin: "pw-1")
        try #require(r.status == 0, "\(r) \(s.k.log)")
        r = s.run(s.writer, ["item", "get", "--service", "svc", "--account", "acc"])
        #expect(r.status == 0 && r.stdoutText == "pw-1", "\(r)")
        #expect(s.questions.isEmpty)

        try s.answer("deny")
        r = s.run(s.reader, ["item", "get", "--service", "svc", "--account", "acc"])
        #expect(r.status != 0 && r.stdoutText.isEmpty, "\(r)")
        #expect(r.stderr.contains("AuthFailed"), "\(r)")
        #expect(s.questions.count == 1)
        // Attributes stay readable: searching is not gated.
        r = s.run(s.reader, ["item", "list", "--service", "svc"])
        #expect(r.status == 0 && r.stdoutText.contains("svc"), "\(r)")

        r = s.k.ctl(["access", "revoke"])
        try s.answer("always")
        r = s.run(s.reader, ["item", "get", "--service", "svc", "--account", "acc"])
        #expect(r.status == 0 && r.stdoutText == "pw-1", "\(r) \(s.k.log)")
        r = s.run(s.reader, ["item", "get", "--service", "svc", "--account", "acc"])
        #expect(r.status == 0 && r.stdoutText == "pw-1", "\(r)")
        #expect(s.questions.count == 2)

        // Passing for the allowed program, as on the bus: a loader variable, or a tracer
        // (strace, ptrace-attached for the whole run), is refused without a question.
        r = s.run(
            s.reader, ["item", "get", "--service", "svc", "--account", "acc"],
            environment: ["LD_AUDIT": "/lib/x86_64-linux-gnu/libc.so.6"])
        #expect(r.status != 0 && r.stdoutText.isEmpty, "\(r)")
        #expect(r.stderr.contains("LD_AUDIT"), "\(r)")
        r = s.run(
            "/usr/bin/strace",
            [
                "-f", "-o", "/dev/null", s.reader, "item", "get", "--service", "svc", "--account",
                "acc",
            ])
        #expect(r.status != 0 && r.stdoutText.isEmpty, "\(r)")
        #expect(r.stderr.contains("traced by process"), "\(r)")
        #expect(s.questions.count == 2)
        // The creator with a loader variable is refused too: it could be anything.
        r = s.run(
            s.writer, ["item", "get", "--service", "svc", "--account", "acc"],
            environment: ["LD_PRELOAD": "/lib/x86_64-linux-gnu/libc.so.6"])
        #expect(r.status != 0 && r.stdoutText.isEmpty, "\(r)")
        r = s.k.ctl(["access", "list", "--json"])
        #expect(r.status == 0 && r.stdoutText.contains(s.reader), "\(r)")
    }

    /// The session collection (memory only) is gated as the store: a python script creates
    /// an item there; a copy of secret-tool is asked, and an Always allow holds while vaultd
    /// runs.
    @Test func theSessionCollectionIsGatedToo() throws {
        let s = try Setup(tool: "secret-tool")
        defer { s.k.close() }
        let script = """
            import secretstorage
            conn = secretstorage.dbus_init()
            c = secretstorage.Collection(conn, "/org/freedesktop/secrets/collection/session")
            print(c.create_item("Session token", {"k": "session-v"}, b"in-memory").get_secret().decode())
            """
        var r = s.run("/usr/bin/python3", ["-c", script])
        #expect(r.stdoutText == "in-memory\n", "\(r) \(s.k.log)")
        try s.answer("deny")
        r = s.run(s.reader, ["lookup", "k", "session-v"])
        #expect(r.status != 0 && r.stdoutText.isEmpty, "\(r)")
        #expect(s.questions.count == 1)
        #expect(s.questions.first?.contains("Session token") == true, "\(s.questions)")
        #expect(s.questions.first?.contains("/usr/bin/python3") == true, "\(s.questions)")
        _ = s.k.ctl(["access", "revoke"])
        try s.answer("always")
        r = s.run(s.reader, ["lookup", "k", "session-v"])
        #expect(r.status == 0 && r.stdoutText == "in-memory", "\(r) \(s.k.log)")
        r = s.run(s.reader, ["lookup", "k", "session-v"])
        #expect(r.status == 0 && r.stdoutText == "in-memory", "\(r)")
        #expect(s.questions.count == 2)
    }

    /// gcr's system prompter under Xvfb shows the question (kept as `gcr-access-dialog.png`
    /// in the test's directory); Return (Allow, the check box left unticked) lets the second
    /// secret-tool have the secret once.
    @Test func gcrAsksOnADisplay() throws {
        for tool in ["/usr/libexec/gcr-prompter", "/usr/bin/xdotool", "/usr/bin/import"] {
            try #require(access(tool, X_OK) == 0, "\(tool) is missing: run scripts/install-deps")
        }
        var x: XvfbDisplay?
        let s = try Setup(tool: "secret-tool", timeout: 60, prompter: "gcr") { k in
            let display = try XvfbDisplay.forBus(of: k)
            x = display
            return ["DISPLAY": display.display]
        }
        defer { s.k.close() }
        defer { withExtendedLifetime(x) {} }
        let env = try #require(x).environment(s.k.environment)
        var r = s.run(
            s.writer, ["store", "--label=GitHub token"] + Self.attributes, stdin: "s3cret")
        try #require(r.status == 0, "\(r) \(s.k.log)")
        let out = s.k.root + "/lookup.out"
        let pid = try ChildProcess.spawn(
            s.reader, ["lookup"] + Self.attributes,
            environment: s.k.environment.filter { !$0.key.hasPrefix("LD_") }, inputs: [:],
            stdout: .file(out, append: false),
            stderr: .file(s.k.root + "/lookup.err", append: false))
        defer { kill(pid, SIGKILL) }
        r = try ChildProcess.run(
            "xdotool", ["search", "--sync", "--onlyvisible", "--name", "Allow access"],
            environment: env, timeout: 30)
        let window = try #require(
            r.stdoutText.split(separator: "\n").first.map(String.init), "\(r) \(s.k.log)")
        r = try ChildProcess.run(
            "import", ["-window", "root", s.k.root + "/gcr-access-dialog.png"], environment: env,
            timeout: 30)
        #expect(r.status == 0, "\(r)")
        r = try ChildProcess.run(
            "xdotool", ["windowfocus", "--sync", window], environment: env, timeout: 20)
        r = try ChildProcess.run("xdotool", ["key", "Return"], environment: env, timeout: 20)
        #expect(r.status == 0, "\(r)")
        #expect(ChildProcess.wait(pid, timeout: 30) == 0, "\(s.k.log)")
        #expect(((try? String(contentsOfFile: out, encoding: .utf8)) ?? "") == "s3cret")
        #expect(s.k.log.contains("access: the user allowed"), "\(s.k.log)")
        if let keep = ProcessInfo.processInfo.environment["VAULTD_KEEP_SCREENSHOT"] {
            try? FileManager.default.copyItem(
                atPath: s.k.root + "/gcr-access-dialog.png", toPath: keep)
        }
    }
}
