import Foundation
import TestSupport
import Testing
import VaultCore

#if canImport(Glibc)
import Glibc
#endif

/// vaultd's own dialogs for a locked vault (docs/secret-service.md#dialogs), on a private
/// bus: a libsecret client (`secret-tool lookup`) asks for a secret of the locked vault, and
/// the dialog the `Prompter` setting chooses asks the user for the passphrase: gcr's
/// `gcr-prompter` under Xvfb, typed into with xdotool; pinentry-curses on a tmux pane, typed
/// into with `tmux send-keys`; scripted pinentries for what goes wrong.
@Suite(.serialized, .tags(.system)) struct PromptDialogTests {
    static let item = ["dialog", "1"]

    /// A vaultd on a private bus with `config`, and the environment `prepare` gives it (run
    /// once the bus is up), its vault initialised, holding one item, and locked.
    static func lockedVault(
        config: [String: Any], prepare: (KeyringFixture) throws -> [String: String] = { _ in [:] }
    ) throws -> KeyringFixture {
        let k = try KeyringFixture(keyring: false)
        do {
            let path = k.root + "/config.plist"
            try PropertyListSerialization.data(fromPropertyList: config, format: .xml, options: 0)
                .write(to: URL(fileURLWithPath: path))
            try k.startVaultd(
                arguments: ["--secret-service", "--config", path], environment: try prepare(k))
            var r = k.ctl(["init", "--passphrase-fd", "3"], fds: SecretServiceTests.passphraseFD)
            guard r.status == 0 else { throw HarnessError("vaultctl init: \(r)") }
            r = SecretServiceTests.secretTool(
                k, ["store", "--label=behind the dialog"] + item, stdin: "the-secret")
            guard r.status == 0 else { throw HarnessError("secret-tool store: \(r)") }
            r = k.ctl(["lock"])
            guard r.status == 0 else { throw HarnessError("vaultctl lock: \(r)") }
        } catch {
            k.close()
            throw error
        }
        return k
    }

    /// `secret-tool lookup` of the item, in the background: its pid and output file.
    static func lookUp(_ k: KeyringFixture) throws -> (pid_t, String) {
        let out = k.root + "/lookup.out"
        let pid = try ChildProcess.spawn(
            "secret-tool", ["lookup"] + item, environment: k.environment, inputs: [:],
            stdout: .file(out, append: false), stderr: .file(k.root + "/lookup.err", append: false))
        return (pid, out)
    }

    static func text(_ path: String) -> String {
        (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }

    /// gcr's system prompter, started by the bus from Debian's activation file (`Prompter`
    /// auto, vaultd on a display): the dialog is on the screen (kept as
    /// `gcr-unlock-dialog.png` in the test's directory), the passphrase typed into it with
    /// xdotool unlocks the vault, and the lookup that asked gets the secret. Before that, a
    /// prompter killed while its dialog is shown dismisses its prompt at once (the lookup
    /// ends with nothing, long before the prompt's timeout), and the next lookup's prompt
    /// starts it again.
    @Test func gcrPrompterUnlocksTheVault() throws {
        for tool in ["/usr/libexec/gcr-prompter", "/usr/bin/xdotool", "/usr/bin/import"] {
            try #require(access(tool, X_OK) == 0, "\(tool) is missing: run scripts/install-deps")
        }
        var x: XvfbDisplay?
        let k = try Self.lockedVault(config: [:]) { k in
            let display = try XvfbDisplay.forBus(of: k)
            x = display
            return ["DISPLAY": display.display]
        }
        defer { k.close() }
        defer { withExtendedLifetime(x) {} }
        let env = try #require(x).environment(k.environment)
        func dialog() throws -> String {
            let r = try ChildProcess.run(
                "xdotool", ["search", "--sync", "--onlyvisible", "--name", "Unlock the vault"],
                environment: env, timeout: 30)
            try #require(r.status == 0, "\(r) \(k.log)")
            return try #require(r.stdoutText.split(separator: "\n").first.map(String.init))
        }

        // The prompter dies while it shows the dialog.
        let (first, firstOut) = try Self.lookUp(k)
        defer { kill(first, SIGKILL) }
        _ = try dialog()
        let owner = k.run(
            "gdbus",
            [
                "call", "--session", "--dest", "org.freedesktop.DBus", "--object-path",
                "/org/freedesktop/DBus", "--method",
                "org.freedesktop.DBus.GetConnectionUnixProcessID",
                "org.gnome.keyring.SystemPrompter",
            ], timeout: 20)
        let prompterPID = try #require(
            owner.stdoutText.split(whereSeparator: { !$0.isNumber }).compactMap { pid_t($0) }
                .last, "\(owner)")
        let killed = Date()
        try #require(kill(prompterPID, SIGKILL) == 0)
        #expect(ChildProcess.wait(first, timeout: 30).map { $0 != 0 } == true, "\(k.log)")
        #expect(Date().timeIntervalSince(killed) < 30, "dismissed at the timeout (60 s)")
        #expect(Self.text(firstOut).isEmpty)
        #expect(k.state() == "locked")

        let (pid, out) = try Self.lookUp(k)
        defer { kill(pid, SIGKILL) }
        let window = try dialog()
        var r = try ChildProcess.run(
            "import", ["-window", "root", k.root + "/gcr-unlock-dialog.png"], environment: env,
            timeout: 30)
        #expect(r.status == 0, "\(r)")
        r = try ChildProcess.run(
            "xdotool", ["windowfocus", "--sync", window], environment: env, timeout: 20)
        #expect(r.status == 0, "\(r)")
        r = try ChildProcess.run(
            "xdotool", ["type", "--delay", "20", SecretServiceTests.passphrase], environment: env,
            timeout: 30)
        #expect(r.status == 0, "\(r)")
        r = try ChildProcess.run("xdotool", ["key", "Return"], environment: env, timeout: 20)
        #expect(r.status == 0, "\(r)")
        #expect(ChildProcess.wait(pid, timeout: 30) == 0, "\(k.log)")
        #expect(Self.text(out) == "the-secret")
        #expect(
            k.log.contains(
                "prompt: the vault was unlocked with the passphrase typed into the dialog"))
        #expect(k.state() == "unlocked", "\(k.log)")
        #expect(!k.log.contains(SecretServiceTests.passphrase))
    }

    /// pinentry-curses on a tmux pane (vaultd's GPG_TTY, as gpg-agent's): the dialog is drawn
    /// there; a wrong passphrase typed with `tmux send-keys` is asked again with the warning
    /// (the rate limit counts it), and the right one unlocks the vault.
    @Test func pinentryCursesOnATerminalUnlocksTheVault() throws {
        for tool in ["/usr/bin/pinentry-curses", "/usr/bin/tmux"] {
            try #require(access(tool, X_OK) == 0, "\(tool) is missing: run scripts/install-deps")
        }
        var tmux: [String] = []
        let k = try Self.lockedVault(
            config: ["Prompter": "pinentry", "PinentryProgram": "/usr/bin/pinentry-curses"]
        ) { k in
            tmux = ["-S", k.root + "/tmux.sock"]
            var r = k.run(
                "tmux", tmux + ["new-session", "-d", "-x", "100", "-y", "30", "sleep 600"],
                timeout: 20)
            guard r.status == 0 else { throw HarnessError("tmux: \(r)") }
            r = k.run("tmux", tmux + ["display-message", "-p", "#{pane_tty}"], timeout: 20)
            let tty = r.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
            guard r.status == 0, tty.hasPrefix("/dev/") else { throw HarnessError("tmux: \(r)") }
            return ["GPG_TTY": tty, "TERM": "screen"]
        }
        defer {
            _ = k.run("tmux", tmux + ["kill-server"], timeout: 20)
            k.close()
        }
        let (pid, out) = try Self.lookUp(k)
        defer { kill(pid, SIGKILL) }
        // The dialog, once drawn on the pane.
        func screen() -> String {
            k.run("tmux", tmux + ["capture-pane", "-p"], timeout: 20).stdoutText
        }
        func waitFor(_ text: String) throws {
            let deadline = Date().addingTimeInterval(30)
            while !screen().contains(text) && Date() < deadline { usleep(50_000) }
            try #require(screen().contains(text), "\(screen()) \(k.log)")
        }
        try waitFor("Passphrase")
        #expect(screen().contains("A program wants to use the vault's secrets"), "\(screen())")
        _ = k.run("tmux", tmux + ["send-keys", "-l", "not the passphrase"], timeout: 20)
        _ = k.run("tmux", tmux + ["send-keys", "Enter"], timeout: 20)
        try waitFor("The passphrase was wrong (attempt 2 of 3)")
        #expect(k.log.contains("Unlock failed: wrong passphrase (1 failed in a row)"), "\(k.log)")
        var r = k.run(
            "tmux", tmux + ["send-keys", "-l", SecretServiceTests.passphrase], timeout: 20)
        #expect(r.status == 0, "\(r)")
        r = k.run("tmux", tmux + ["send-keys", "Enter"], timeout: 20)
        #expect(r.status == 0, "\(r)")
        #expect(ChildProcess.wait(pid, timeout: 30) == 0, "\(screen()) \(k.log)")
        #expect(Self.text(out) == "the-secret")
        #expect(k.state() == "unlocked", "\(k.log)")
    }

    /// A scripted pinentry as `PinentryProgram`: `getpin` is its answer to GETPIN; it writes
    /// its pid to `pid` in the test's directory.
    static func script(_ k: KeyringFixture, getpin: String) throws -> String {
        let path = k.root + "/pinentry.sh"
        let text = """
            #!/bin/sh
            echo $$ > "\(k.root)/pid"
            echo 'OK Pleased to meet you'
            while read -r cmd rest; do
              case "$cmd" in
                GETPIN) \(getpin) ;;
                BYE) echo OK; exit 0 ;;
                *) echo OK ;;
              esac
            done
            """
        guard writeExecutable(path, text) else { throw HarnessError("cannot write \(path)") }
        return path
    }

    /// A scripted pinentry through vaultd: its PIN unlocks; its Cancel ends the lookup at
    /// once (not at the prompt's timeout); one that hangs is ended at the prompt's timeout
    /// (2 s here) and is gone after; one that dies dismisses the prompt.
    @Test(arguments: ["unlock", "cancel", "hang", "die"])
    func scriptedPinentry(_ what: String) throws {
        let getpin: String
        switch what {
        case "unlock": getpin = "printf 'D %s\\nOK\\n' '\(SecretServiceTests.passphrase)'"
        case "cancel": getpin = "echo 'ERR 83886179 Operation cancelled <Pinentry>'"
        case "hang": getpin = "exec sleep 600"
        default: getpin = "exit 2"
        }
        var program = ""
        // 2 s for the one that hangs; the others end long before their timeout.
        let timeout = what == "hang" ? 2 : 30
        let k = try Self.lockedVault(
            config: ["Prompter": "pinentry", "SecretServicePromptTimeoutSeconds": timeout]
        ) { k in
            program = try Self.script(k, getpin: getpin)
            return [:]
        }
        defer { k.close() }
        // PinentryProgram is read at each prompt: set it now that the script exists.
        _ = program
        try PropertyListSerialization.data(
            fromPropertyList: [
                "Prompter": "pinentry", "SecretServicePromptTimeoutSeconds": timeout,
                "PinentryProgram": program,
            ], format: .xml, options: 0
        ).write(to: URL(fileURLWithPath: k.root + "/config.plist"))
        try #require(kill(try #require(k.vaultdPID), SIGHUP) == 0)
        #expect(k.waitForLog("SIGHUP: settings reloaded", timeout: 20), "\(k.log)")
        let started = Date()
        let (pid, out) = try Self.lookUp(k)
        defer { kill(pid, SIGKILL) }
        let status = ChildProcess.wait(pid, timeout: 30)
        let elapsed = Date().timeIntervalSince(started)
        switch what {
        case "unlock":
            #expect(status == 0, "\(k.log)")
            #expect(Self.text(out) == "the-secret")
            #expect(k.state() == "unlocked")
        case "cancel":
            #expect(status != 0 && Self.text(out).isEmpty)
            #expect(
                k.log.contains("the unlock dialog ended without a passphrase (cancelled)"),
                "\(k.log)")
            #expect(elapsed < 20, "dismissed at the timeout, not at the cancel")
        case "hang":
            #expect(status != 0 && Self.text(out).isEmpty)
            #expect(elapsed >= 1.5, "\(elapsed)")
            let child = pid_t(
                Self.text(k.root + "/pid").trimmingCharacters(in: .whitespacesAndNewlines))
            let gone = Date().addingTimeInterval(10)
            while let child, kill(child, 0) == 0 && Date() < gone { usleep(20_000) }
            #expect(child.map { kill($0, 0) != 0 } == true, "the hung pinentry still runs")
        default:
            #expect(status != 0 && Self.text(out).isEmpty)
            #expect(
                k.log.contains(
                    "the unlock dialog ended without a passphrase (the pinentry exited)"),
                "\(k.log)")
        }
        #expect(what == "unlock" || k.state() == "locked")
    }
}
