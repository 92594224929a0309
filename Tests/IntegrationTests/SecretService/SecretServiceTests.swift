import Foundation
import TestSupport
import Testing
import VaultCore
import vaultd

#if canImport(Glibc)
import Glibc
#endif

/// vaultd as the desktop's Secret Service, on a private bus with no other provider, through
/// unchanged clients: libsecret's `secret-tool` (copied to act as two registered apps),
/// python's `keyring`, and GDBus's own introspection.
@Suite(.tags(.system)) struct SecretServiceTests {
    static let passphrase = "correct horse"
    static var passphraseFD: [Int32: Data] { [3: Data((passphrase + "\n").utf8)] }

    /// A private bus with vaultd serving the Secret Service on it, its vault initialised
    /// (with `passphrase`, or without one).
    static func fixture(passphrase: Bool = false, config: [String: Any]? = nil) throws
        -> KeyringFixture
    {
        let k = try KeyringFixture(keyring: false)
        do {
            var arguments = ["--secret-service"]
            if let config {
                let path = k.root + "/config.plist"
                try PropertyListSerialization.data(
                    fromPropertyList: config, format: .xml, options: 0
                ).write(to: URL(fileURLWithPath: path))
                arguments += ["--config", path]
            }
            try k.startVaultd(arguments: arguments)
            #expect(
                k.log.contains(
                    "secret service: serving org.freedesktop.secrets on the session bus"),
                "\(k.log)")
            let r =
                passphrase
                ? k.ctl(["init", "--passphrase-fd", "3"], fds: passphraseFD)
                : k.ctl(["init", "--no-passphrase"])
            guard r.status == 0 else { throw HarnessError("vaultctl init: \(r)") }
        } catch {
            k.close()
            throw error
        }
        return k
    }

    /// The vault's Secret Service items as `vaultctl item list --json` shows them (the owner's view).
    static func items(_ k: KeyringFixture) throws -> [[String: Any]] {
        let r = k.ctl(["item", "list", "--service", Vault.secretServiceService, "--json"])
        if r.status != 0 && r.stderr.contains("ItemNotFound") { return [] }
        try #require(r.status == 0, "\(r)")
        return try #require(try JSONSerialization.jsonObject(with: r.stdout) as? [[String: Any]])
    }

    /// `secret-tool` (or a copy at `tool`) with the secret on stdin for `store`.
    static func secretTool(
        _ k: KeyringFixture, tool: String = "secret-tool", _ arguments: [String],
        stdin: String? = nil
    ) -> ProcessResult {
        k.run(tool, arguments, stdin: stdin.map { Data($0.utf8) }, timeout: 30)
    }

    @Test func secretToolStoresLooksUpSearchesAndClearsInTheVault() throws {
        let k = try Self.fixture()
        defer { k.close() }
        var r = Self.secretTool(
            k, ["store", "--label=Example login", "service", "example.com", "user", "alice"],
            stdin: "s3cret")
        try #require(r.status == 0, "\(r)")
        r = Self.secretTool(k, ["lookup", "service", "example.com", "user", "alice"])
        #expect(r.status == 0 && r.stdoutText == "s3cret", "\(r)")
        // Exact matches only: a value that is a prefix, or another attribute, finds nothing.
        r = Self.secretTool(k, ["lookup", "service", "example", "user", "alice"])
        #expect(r.status == 1 && r.stdout.isEmpty, "\(r)")

        // A real vault item: the owner's vaultctl lists it, with its lookup attributes.
        let stored = try Self.items(k)
        try #require(stored.count == 1, "\(stored)")
        #expect(stored[0]["label"] as? String == "Example login")
        #expect(stored[0]["accessGroup"] as? String == Caller.ownerAccessGroup)
        #expect(
            stored[0]["lookupAttributes"] as? [String: String] == [
                "service": "example.com", "user": "alice",
            ])

        // libsecret stores with replace: the same attributes again replace the secret.
        r = Self.secretTool(
            k, ["store", "--label=Example login", "service", "example.com", "user", "alice"],
            stdin: "n3w")
        try #require(r.status == 0, "\(r)")
        #expect(try Self.items(k).count == 1)
        #expect(
            Self.secretTool(k, ["lookup", "service", "example.com", "user", "alice"]).stdoutText
                == "n3w")
        r = Self.secretTool(
            k, ["store", "--label=Bob", "service", "example.com", "user", "bob"], stdin: "b0b")
        try #require(r.status == 0, "\(r)")

        // secret-tool prints each item's path, label and secret on stdout, its dates and
        // attributes on stderr.
        r = Self.secretTool(k, ["search", "--all", "service", "example.com"])
        #expect(r.status == 0, "\(r)")
        let shown = r.stdoutText + r.stderr
        #expect(shown.components(separatedBy: "label = ").count - 1 == 2, "\(shown)")
        #expect(
            shown.contains("secret = n3w") && shown.contains("secret = b0b")
                && shown.contains("attribute.user = bob"), "\(shown)")

        r = Self.secretTool(k, ["clear", "service", "example.com", "user", "alice"])
        #expect(r.status == 0, "\(r)")
        #expect(
            Self.secretTool(k, ["lookup", "service", "example.com", "user", "alice"]).status == 1)
        #expect(
            Self.secretTool(k, ["lookup", "service", "example.com", "user", "bob"]).stdoutText
                == "b0b")
        #expect(try Self.items(k).map { $0["label"] as? String } == ["Bob"])
    }

    /// libsecret's C password API with a schema, as apps link it (a small client built here
    /// from Tests/Fixtures/libsecret): store, look up, clear; the schema's name is stored as
    /// the `xdg:schema` attribute and an integer attribute as its decimal text.
    @Test func libsecretsPasswordAPIStoresLooksUpAndClears() throws {
        let k = try Self.fixture()
        defer { k.close() }
        let client = k.root + "/password-client"
        let flags = try #require(
            try? ChildProcess.run(
                "pkg-config", ["--cflags", "--libs", "libsecret-1"],
                environment: ProcessInfo.processInfo.environment))
        var r = try ChildProcess.run(
            "cc",
            [
                "-o", client,
                Paths.fixtures.appendingPathComponent("libsecret/password-client.c").path,
            ]
                + flags.stdoutText.split(whereSeparator: \.isWhitespace).map(String.init),
            environment: ProcessInfo.processInfo.environment)
        try #require(r.status == 0, "\(r)")
        r = k.run(client, ["store", "imap.example", "993"], stdin: Data("c-secret".utf8))
        #expect(r.stdoutText == "stored\n", "\(r)")
        r = k.run(client, ["lookup", "imap.example", "993"])
        #expect(r.stdoutText == "c-secret\n", "\(r)")
        #expect(k.run(client, ["lookup", "imap.example", "994"]).stdoutText == "none\n")
        let stored = try Self.items(k)
        #expect(
            stored.first?["lookupAttributes"] as? [String: String] == [
                "xdg:schema": "org.example.Password", "server": "imap.example", "port": "993",
            ], "\(stored)")
        #expect(k.run(client, ["clear", "imap.example", "993"]).stdoutText == "cleared\n")
        #expect(k.run(client, ["lookup", "imap.example", "993"]).stdoutText == "none\n")
        #expect(try Self.items(k).isEmpty)
    }

    /// Two copies of secret-tool registered as two apps: what one stores, the other can
    /// neither look up, search nor clear; the owner's secret-tool (unregistered) sees both.
    @Test func twoRegisteredSecretToolsCannotSeeEachOthersSecrets() throws {
        let k = try Self.fixture()
        defer { k.close() }
        let a = k.root + "/a/secret-tool"
        let b = k.root + "/b/secret-tool"
        for path in [a, b] {
            mkdir((path as NSString).deletingLastPathComponent, 0o755)
            try FileManager.default.copyItem(atPath: "/usr/bin/secret-tool", toPath: path)
        }
        for (id, exe) in [("com.example.A", a), ("com.example.B", b)] {
            let r = k.ctl(["app", "install", id, "--exe", exe])
            try #require(r.status == 0, "\(r)")
        }
        var r = Self.secretTool(
            k, tool: a, ["store", "--label=A's token", "service", "shared.example", "user", "me"],
            stdin: "a-secret")
        try #require(r.status == 0, "\(r)")
        #expect(
            Self.secretTool(k, tool: a, ["lookup", "service", "shared.example", "user", "me"])
                .stdoutText == "a-secret")

        // B: nothing to look up, search or clear, and A's item survives B's clear.
        r = Self.secretTool(k, tool: b, ["lookup", "service", "shared.example", "user", "me"])
        #expect(r.status == 1 && r.stdout.isEmpty, "\(r)")
        r = Self.secretTool(k, tool: b, ["search", "--all", "service", "shared.example"])
        #expect(
            !(r.stdoutText + r.stderr).contains("a-secret")
                && !(r.stdoutText + r.stderr).contains("label"), "\(r)")
        _ = Self.secretTool(k, tool: b, ["clear", "service", "shared.example"])
        #expect(
            Self.secretTool(k, tool: a, ["lookup", "service", "shared.example", "user", "me"])
                .stdoutText == "a-secret")

        // B stores under the same attributes: its own item, in its own group.
        r = Self.secretTool(
            k, tool: b, ["store", "--label=B's token", "service", "shared.example", "user", "me"],
            stdin: "b-secret")
        try #require(r.status == 0, "\(r)")
        #expect(
            Self.secretTool(k, tool: b, ["lookup", "service", "shared.example", "user", "me"])
                .stdoutText == "b-secret")
        #expect(
            Self.secretTool(k, tool: a, ["lookup", "service", "shared.example", "user", "me"])
                .stdoutText == "a-secret")
        r = Self.secretTool(k, tool: a, ["search", "--all", "service", "shared.example"])
        #expect(r.stdoutText.contains("a-secret") && !r.stdoutText.contains("b-secret"), "\(r)")

        // The owner's secret-tool sees both; vaultctl shows each in its app's group.
        r = Self.secretTool(k, ["search", "--all", "service", "shared.example"])
        #expect(
            r.stdoutText.contains("secret = a-secret")
                && r.stdoutText.contains("secret = b-secret"), "\(r)")
        let groups = try Self.items(k).compactMap { $0["accessGroup"] as? String }.sorted()
        #expect(groups == ["com.example.A", "com.example.B"], "\(groups)")

        // B clearing its own leaves A's.
        r = Self.secretTool(k, tool: b, ["clear", "service", "shared.example", "user", "me"])
        #expect(r.status == 0, "\(r)")
        #expect(try Self.items(k).compactMap { $0["accessGroup"] as? String } == ["com.example.A"])
    }

    /// python's keyring, with its SecretService backend (secretstorage, in an encrypted
    /// session): set, get, delete.
    @Test func pythonKeyringSetsGetsAndDeletes() throws {
        let k = try Self.fixture()
        defer { k.close() }
        let script = """
            import keyring, secretstorage.util, sys
            kr = keyring.get_keyring()
            print(type(kr).__module__ + "." + type(kr).__name__)
            # secretstorage's own DH session: vaultd's dh-ietf1024-sha256-aes128-cbc-pkcs7.
            print(secretstorage.util.open_session(secretstorage.dbus_init()).encrypted)
            keyring.set_password("svc.example", "carol", sys.stdin.read())
            print(keyring.get_password("svc.example", "carol"))
            keyring.delete_password("svc.example", "carol")
            print(keyring.get_password("svc.example", "carol"))
            """
        let r = k.run("python3", ["-c", script], stdin: Data("pa55".utf8), timeout: 60)
        #expect(r.status == 0, "\(r)")
        #expect(
            r.stdoutText == "keyring.backends.SecretService.Keyring\nTrue\npa55\nNone\n", "\(r)")
        #expect(try Self.items(k).isEmpty)
        // One process storing many: secretstorage opens a session for each item and closes
        // none; past vaultd's 64 per connection the oldest are closed, and every store works.
        let many = """
            import keyring
            for i in range(100): keyring.set_password("many.example", "user%d" % i, "pw%d" % i)
            print(sum(keyring.get_password("many.example", "user%d" % i) == "pw%d" % i for i in range(100)))
            """
        let m = k.run("python3", ["-c", many], timeout: 120)
        #expect(m.status == 0 && m.stdoutText == "100\n", "\(m)")
        #expect(try Self.items(k).count == 100)
    }

    /// A bus client vaultd cannot identify (in a sandbox of its own root, without a Flatpak
    /// record) is refused, never served as the owner: the owner's secret stays unseen.
    @Test func aClientVaultdCannotIdentifyIsRefused() throws {
        let k = try Self.fixture()
        defer { k.close() }
        var r = Self.secretTool(
            k, ["store", "--label=owner's", "service", "owner.example"], stdin: "owner-secret")
        try #require(r.status == 0, "\(r)")
        r = k.run(
            "bwrap",
            [
                "--tmpfs", "/", "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib",
                "--symlink", "usr/lib64", "/lib64",
                "--symlink", "usr/bin", "/bin", "--ro-bind", "/etc", "/etc", "--bind", k.root,
                k.root, "--dev", "/dev", "--proc", "/proc",
                "--setenv", "DBUS_SESSION_BUS_ADDRESS", k.busAddress, "/usr/bin/secret-tool",
                "lookup", "service", "owner.example",
            ])
        #expect(r.status != 0 && !r.stdoutText.contains("owner-secret"), "\(r)")
        #expect(r.stderr.contains("vaultd does not serve this process"), "\(r)")
        #expect(k.log.contains("a sandbox vaultd cannot name"), "\(k.log)")
    }

    /// python keyring's own tests of its SecretService backend, from the source distribution
    /// of the installed version (scripts/install-deps puts it in
    /// `~/.cache/vaultd-tests/`), run with pytest against vaultd.
    @Test func pythonKeyringsOwnSecretServiceTestsPass() throws {
        let version = try #require(
            try? ChildProcess.run(
                "python3", ["-c", "import importlib.metadata as m; print(m.version('keyring'))"],
                environment: ProcessInfo.processInfo.environment
            )
            .stdoutText.trimmingCharacters(in: .whitespacesAndNewlines))
        let home =
            ProcessInfo.processInfo.environment["XDG_CACHE_HOME"]
            ?? ((ProcessInfo.processInfo.environment["HOME"] ?? "") + "/.cache")
        let sdist = home + "/vaultd-tests/keyring-\(version).tar.gz"
        try #require(
            FileManager.default.fileExists(atPath: sdist),
            "\(sdist) is missing: run scripts/install-deps")
        let k = try Self.fixture()
        defer { k.close() }
        var r = k.run("tar", ["xzf", sdist, "-C", k.root])
        try #require(r.status == 0, "\(r)")
        let source = k.root + "/keyring-\(version)"
        // The sdist's own pytest.ini asks for plugins it does not ship: none is read.
        r = k.run(
            "python3",
            [
                "-m", "pytest", "-p", "no:cacheprovider", "-c", "/dev/null", "--rootdir", source,
                source + "/tests/backends/test_SecretService.py", "-q",
            ], timeout: 300)
        #expect(r.status == 0, "\(r)")
        let summary = r.stdoutText.split(separator: "\n").last.map(String.init) ?? ""
        #expect(
            summary.contains(" passed") && !summary.contains("failed")
                && !summary.contains("skipped") && !summary.contains("error"), "\(r)")
        // The suite stores in the session collection, which is memory only: nothing in the store.
        #expect(try Self.items(k).isEmpty)
    }

    /// The in-memory `session` collection: items made there are found and read like any
    /// other, are not in the store, and are gone when vaultd restarts.
    @Test func theSessionCollectionLivesInMemoryOnly() throws {
        let k = try Self.fixture()
        defer { k.close() }
        let script = """
            import secretstorage, sys
            conn = secretstorage.dbus_init()
            if sys.argv[1] == "create":
                c = secretstorage.Collection(conn, "/org/freedesktop/secrets/collection/session")
                item = c.create_item("temporary", {"k": "session-v"}, b"in-memory")
                print(item.item_path.startswith("/org/freedesktop/secrets/collection/session/"), item.get_secret().decode())
            found = list(secretstorage.search_items(conn, {"k": "session-v"}))
            print(len(found), [i.get_secret().decode() for i in found])
            """
        var r = k.run("python3", ["-c", script, "create"])
        #expect(r.stdoutText == "True in-memory\n1 ['in-memory']\n", "\(r)")
        #expect(try Self.items(k).isEmpty)
        k.stopVaultd()
        try k.startVaultd(arguments: ["--secret-service"])
        r = k.run("python3", ["-c", script, "search"])
        #expect(r.stdoutText == "0 []\n", "\(r)")
    }

    /// A locked vault: a lookup gets a prompt that is dismissed after the configured timeout
    /// (secret-tool ends without a secret, never hangs); a lookup waiting on a prompt gets
    /// the secret once `vaultctl unlock` unlocks the vault.
    @Test func aLockedVaultPromptsAndALookupSucceedsAfterUnlock() throws {
        let k = try Self.fixture(passphrase: true, config: ["SecretServicePromptTimeoutSeconds": 2])
        defer { k.close() }
        var r = Self.secretTool(
            k, ["store", "--label=L", "service", "locked.example"], stdin: "behind-the-lock")
        try #require(r.status == 0, "\(r)")
        try #require(k.ctl(["lock"]).status == 0)

        r = Self.secretTool(k, ["lookup", "service", "locked.example"])
        #expect(r.status != 0 && r.stdout.isEmpty && !r.timedOut, "\(r)")
        #expect(k.log.contains("secret service: a prompt waits for the vault's unlock"), "\(k.log)")

        // Again, unlocking while the prompt waits.
        let out = k.root + "/lookup.out"
        let pid = try ChildProcess.spawn(
            "secret-tool", ["lookup", "service", "locked.example"], environment: k.environment,
            inputs: [:],
            stdout: .file(out, append: false), stderr: .file(out + ".err", append: false))
        defer { kill(pid, SIGKILL) }
        let before = k.log.components(separatedBy: "a prompt waits").count
        let deadline = Date().addingTimeInterval(20)
        while k.log.components(separatedBy: "a prompt waits").count == before && Date() < deadline {
            usleep(10_000)
        }
        r = k.ctl(["unlock", "--passphrase-fd", "3"], fds: Self.passphraseFD)
        try #require(r.status == 0, "\(r)")
        #expect(ChildProcess.wait(pid, timeout: 20) == 0)
        #expect((try? String(contentsOfFile: out, encoding: .utf8)) == "behind-the-lock")
    }

    /// A prompter agent in python (jeepney, which secretstorage brings): it registers itself
    /// with vaultd (printing "registered", or "refused NAME"), then answers each
    /// AskPassphrase with the next line of its stdin as the passphrase, and dismisses once
    /// they run out (with the argument `silent`, it never answers); it prints "asked ATTEMPT
    /// WARNING" for each question, "cancelled" for each Cancel.
    static let prompterScript = """
        import sys
        from jeepney import DBusAddress, HeaderFields, MessageType, new_method_call, new_method_return, new_error
        from jeepney.io.blocking import open_dbus_connection
        silent = sys.argv[1:] == ["silent"]
        answers = [] if silent else sys.stdin.read().splitlines()
        conn = open_dbus_connection(bus="SESSION")
        service = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets", interface="io.vaultd.Secret.Prompting")
        reply = conn.send_and_get_reply(new_method_call(service, "RegisterPrompter", "o", ("/org/example/Prompter",)), timeout=10)
        if reply.header.message_type == MessageType.error:
            print("refused", reply.header.fields.get(HeaderFields.error_name), flush=True)
            sys.exit(3)
        print("registered", flush=True)
        while True:
            msg = conn.receive()
            if msg.header.message_type != MessageType.method_call: continue
            member = msg.header.fields.get(HeaderFields.member)
            if member == "AskPassphrase":
                prompt, window, details = msg.body
                print("asked", details["attempt"][1], details.get("warning", ("s", "-"))[1], flush=True)
                if silent: pass
                elif answers: conn.send(new_method_return(msg, "bay", (False, answers.pop(0).encode())))
                else: conn.send(new_method_return(msg, "bay", (True, b"")))
            elif member == "Cancel":
                print("cancelled", flush=True)
            else:
                conn.send(new_error(msg, "org.freedesktop.DBus.Error.UnknownMethod"))
        """

    /// A running prompter (`prompterScript`) with `answers` on its stdin; its stdout file.
    static func startPrompter(
        _ k: KeyringFixture, answers: [String], name: String, silent: Bool = false
    ) throws -> (pid: pid_t, out: String) {
        let script = k.root + "/prompter.py"
        let out = k.root + "/\(name).out"
        try prompterScript.write(toFile: script, atomically: true, encoding: .utf8)
        let pid = try ChildProcess.spawn(
            Paths.tool("python3"), [script] + (silent ? ["silent"] : []),
            environment: k.environment, inputs: [0: Data(answers.map { $0 + "\n" }.joined().utf8)],
            stdout: .file(out, append: false), stderr: .file(out + ".err", append: false))
        let deadline = Date().addingTimeInterval(20)
        while !text(out).contains("registered") && Date() < deadline { usleep(10_000) }
        #expect(text(out) == "registered\n", "\(text(out)) \(text(out + ".err"))")
        return (pid, out)
    }

    static func text(_ path: String) -> String {
        (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }

    static func stopPrompter(_ k: KeyringFixture, _ pid: pid_t) {
        kill(pid, SIGTERM)
        _ = ChildProcess.wait(pid, timeout: 10)
    }

    /// A registered prompter agent unlocks a locked vault for `secret-tool lookup`: asked for
    /// the passphrase, a wrong one is asked for again with a warning, the right one unlocks
    /// and the lookup gets its secret; a prompter that dismisses ends the lookup at once (not
    /// at the prompt's timeout) with the vault still locked; three wrong passphrases dismiss
    /// it too. An app (a registered copy of gdbus) may not register as the prompter.
    @Test func aPrompterAgentUnlocksForALookupOrDismisses() throws {
        let k = try Self.fixture(
            passphrase: true, config: ["SecretServicePromptTimeoutSeconds": 60])
        defer { k.close() }
        var r = Self.secretTool(
            k, ["store", "--label=P", "service", "prompted.example"], stdin: "behind-the-prompt")
        try #require(r.status == 0, "\(r)")

        // An app may not be the prompter.
        let gdbus = k.root + "/app/gdbus"
        mkdir(k.root + "/app", 0o755)
        try FileManager.default.copyItem(atPath: "/usr/bin/gdbus", toPath: gdbus)
        try #require(k.ctl(["app", "install", "com.example.Prompter", "--exe", gdbus]).status == 0)
        r = k.run(
            gdbus,
            [
                "call", "--session", "--dest", "org.freedesktop.secrets", "--object-path",
                "/org/freedesktop/secrets", "--method",
                "io.vaultd.Secret.Prompting.RegisterPrompter", "/org/example/Prompter",
            ])
        #expect(
            r.status != 0 && r.stderr.contains("org.freedesktop.DBus.Error.AccessDenied"), "\(r)")

        // A wrong passphrase, then the right one.
        try #require(k.ctl(["lock"]).status == 0)
        var p = try Self.startPrompter(k, answers: ["wrong horse", Self.passphrase], name: "right")
        r = Self.secretTool(k, ["lookup", "service", "prompted.example"])
        #expect(r.status == 0 && r.stdoutText == "behind-the-prompt", "\(r) \(k.log)")
        #expect(
            Self.text(p.out)
                == "registered\nasked 1 -\nasked 2 The passphrase was wrong (attempt 2 of 3)\n",
            "\(Self.text(p.out))")
        #expect(k.state() == "unlocked")
        #expect(k.log.contains("the vault was unlocked with the prompter's passphrase"), "\(k.log)")
        Self.stopPrompter(k, p.pid)
        #expect(k.waitForLog("the prompter left the bus", timeout: 10), "\(k.log)")

        // Dismissed: the lookup ends well before the prompt's 60 s timeout.
        try #require(k.ctl(["lock"]).status == 0)
        p = try Self.startPrompter(k, answers: [], name: "dismiss")
        var started = Date()
        r = Self.secretTool(k, ["lookup", "service", "prompted.example"])
        #expect(r.status != 0 && r.stdout.isEmpty && Date().timeIntervalSince(started) < 30, "\(r)")
        #expect(Self.text(p.out) == "registered\nasked 1 -\n", "\(Self.text(p.out))")
        #expect(k.state() == "locked")
        Self.stopPrompter(k, p.pid)
        #expect(k.waitForLog("the prompter left the bus", timeout: 10), "\(k.log)")

        // Three wrong passphrases: dismissed, still locked.
        p = try Self.startPrompter(k, answers: ["w1", "w2", "w3", Self.passphrase], name: "wrong")
        started = Date()
        r = Self.secretTool(k, ["lookup", "service", "prompted.example"])
        #expect(r.status != 0 && r.stdout.isEmpty && Date().timeIntervalSince(started) < 30, "\(r)")
        #expect(
            Self.text(p.out).components(separatedBy: "asked ").count - 1 == 3, "\(Self.text(p.out))"
        )
        #expect(k.state() == "locked")
        Self.stopPrompter(k, p.pid)
    }

    /// A prompt the vault's unlock completes while the prompter is asked: the prompter is
    /// told to close its dialog (Cancel), and the lookup gets its secret.
    @Test func anUnlockWhileThePrompterAsksCancelsItsQuestion() throws {
        let k = try Self.fixture(
            passphrase: true, config: ["SecretServicePromptTimeoutSeconds": 60])
        defer { k.close() }
        var r = Self.secretTool(
            k, ["store", "--label=C", "service", "cancelled.example"], stdin: "after-cancel")
        try #require(r.status == 0, "\(r)")
        try #require(k.ctl(["lock"]).status == 0)
        let (pid, out) = try Self.startPrompter(k, answers: [], name: "silent", silent: true)
        defer { Self.stopPrompter(k, pid) }
        let lookup = k.root + "/lookup.out"
        let client = try ChildProcess.spawn(
            "secret-tool", ["lookup", "service", "cancelled.example"], environment: k.environment,
            inputs: [:],
            stdout: .file(lookup, append: false), stderr: .file(lookup + ".err", append: false))
        defer { kill(client, SIGKILL) }
        var deadline = Date().addingTimeInterval(20)
        while !Self.text(out).contains("asked 1") && Date() < deadline { usleep(10_000) }
        r = k.ctl(["unlock", "--passphrase-fd", "3"], fds: Self.passphraseFD)
        try #require(r.status == 0, "\(r)")
        #expect(ChildProcess.wait(client, timeout: 20) == 0)
        #expect(Self.text(lookup) == "after-cancel")
        deadline = Date().addingTimeInterval(10)
        while !Self.text(out).contains("cancelled") && Date() < deadline { usleep(10_000) }
        #expect(Self.text(out) == "registered\nasked 1 -\ncancelled\n", "\(Self.text(out))")
    }

    /// The start of a raw client's script (jeepney): its connection to the session bus, the
    /// service's and the default collection's addresses, and a plain session (`session`).
    static let jeepneyClient = """
        from jeepney import DBusAddress, HeaderFields, MessageType, new_method_call
        from jeepney.io.blocking import open_dbus_connection
        conn = open_dbus_connection(bus="SESSION")
        service = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Service")
        default = DBusAddress("/org/freedesktop/secrets/aliases/default", bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Collection")
        session = conn.send_and_get_reply(new_method_call(service, "OpenSession", "sv", ("plain", ("s", ""))), timeout=10).body[1]
        def create_then_search(label, secret):
            # A CreateItem and a SearchItems of its attributes, sent at once: both replies.
            attributes = {"pipelined": label}
            properties = {"org.freedesktop.Secret.Item.Label": ("s", label), "org.freedesktop.Secret.Item.Attributes": ("a{ss}", attributes)}
            create = new_method_call(default, "CreateItem", "a{sv}(oayays)b", (properties, (session, b"", secret, "text/plain"), True))
            search = new_method_call(service, "SearchItems", "a{ss}", (attributes,))
            serials = [next(conn.outgoing_serial), next(conn.outgoing_serial)]
            conn.send(create, serial=serials[0])
            conn.send(search, serial=serials[1])
            replies = {}
            while len(replies) < 2:
                m = conn.receive(timeout=20)
                if m.header.message_type in (MessageType.method_return, MessageType.error):
                    replies[m.header.fields[HeaderFields.reply_serial]] = m
            return replies[serials[0]], replies[serials[1]]

        """

    /// A client that sends its calls without waiting for each reply (jeepney, raw) gets them
    /// answered in the order it sent them: a SearchItems sent right behind a CreateItem (which
    /// waits for its commit off the bus thread, while searches may be answered on the bus
    /// relay's) finds the item just made, every time.
    @Test func pipelinedCallsOfOneClientAreAnsweredInOrder() throws {
        let k = try Self.fixture()
        defer { k.close() }
        let script =
            Self.jeepneyClient + """
                found = 0
                for i in range(20):
                    made, search = create_then_search("p%d" % i, b"v%d" % i)
                    found += search.body[0] == [made.body[0]]
                print(found)
                """
        let r = k.run("python3", ["-c", script], timeout: 120)
        #expect(r.status == 0 && r.stdoutText == "20\n", "\(r)")
    }

    /// A store's CreateItem and the reads of a lookup are answered by the bus relay
    /// (`InlineReads.swift`), whose replies carry serials from the top half
    /// (`BusRelay.ownSerials`): a CreateItem, a SearchItems and a GetSecrets of an identified
    /// connection with nothing pending are answered there, with the item and its secret, and
    /// the connection hears ItemCreated after the CreateItem's reply; so are an Item.SetSecret,
    /// an Item.GetSecret that reads the new secret and an Item.Delete; a SearchItems sent right
    /// behind a CreateItem goes to GDBus (a serial of its own, below 2³¹), waits for the write
    /// and finds the item; an Introspect never goes to the relay; a search that wants no reply
    /// gets none, and the connection's next search is GDBus's.
    @Test func theRelayAnswersStoresAndLookupsAndNothingOutOfOrder() throws {
        let k = try Self.fixture()
        defer { k.close() }
        let script =
            Self.jeepneyClient + """
                def call(m):
                    r = conn.send_and_get_reply(m, timeout=10)
                    return r, "relay" if r.header.serial >= 2**31 else "gdbus"
                attributes = {"relayed": "r1"}
                properties = {"org.freedesktop.Secret.Item.Label": ("s", "r1"), "org.freedesktop.Secret.Item.Attributes": ("a{ss}", attributes)}
                create = new_method_call(default, "CreateItem", "a{sv}(oayays)b", (properties, (session, b"", b"relayed-secret", "text/plain"), True))
                serial = next(conn.outgoing_serial)
                conn.send(create, serial=serial)
                seen = []
                while "ItemCreated" not in seen:
                    m = conn.receive(timeout=20)
                    if m.header.message_type == MessageType.method_return and m.header.fields[HeaderFields.reply_serial] == serial:
                        made, by = m, "relay" if m.header.serial >= 2**31 else "gdbus"
                        seen.append("reply")
                    elif m.header.message_type == MessageType.signal and m.header.fields[HeaderFields.member] == "ItemCreated":
                        seen.append("ItemCreated")
                print(" ".join(seen))
                item = made.body[0]
                found, by_search = call(new_method_call(service, "SearchItems", "a{ss}", (attributes,)))
                secrets, by_secrets = call(new_method_call(service, "GetSecrets", "aoo", ([item], session)))
                intro, by_intro = call(new_method_call(DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets", interface="org.freedesktop.DBus.Introspectable"), "Introspect"))
                print(by, by_search, found.body[0] == [item], by_secrets, bytes(secrets.body[0][item][2]).decode(), by_intro)
                at_item = DBusAddress(item, bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Item")
                _, by_set = call(new_method_call(at_item, "SetSecret", "(oayays)", ((session, b"", b"second", "text/plain"),)))
                got, by_get = call(new_method_call(at_item, "GetSecret", "o", (session,)))
                deleted, by_delete = call(new_method_call(at_item, "Delete"))
                gone, _ = call(new_method_call(service, "SearchItems", "a{ss}", (attributes,)))
                print(by_set, by_get, bytes(got.body[0][2]).decode(), by_delete, deleted.body[0], gone.body)
                made, behind = create_then_search("r2", b"v")
                print("relay" if behind.header.serial >= 2**31 else "gdbus", behind.body[0] == [made.body[0]])
                # A search that wants no reply gets none; the connection's next search is answered
                # by GDBus (it never comes back to the relay).
                from jeepney.low_level import MessageFlag
                quiet = new_method_call(service, "SearchItems", "a{ss}", (attributes,))
                quiet.header.flags |= MessageFlag.no_reply_expected
                conn.send(quiet, serial=next(conn.outgoing_serial))
                loud = new_method_call(service, "SearchItems", "a{ss}", (attributes,))
                serial = next(conn.outgoing_serial)
                conn.send(loud, serial=serial)
                while True:
                    m = conn.receive(timeout=20)
                    if m.header.message_type in (MessageType.method_return, MessageType.error):
                        break
                print(m.header.fields[HeaderFields.reply_serial] == serial, "relay" if m.header.serial >= 2**31 else "gdbus")
                """
        let r = k.run("python3", ["-c", script], timeout: 60)
        #expect(
            r.status == 0
                && r.stdoutText
                    == "reply ItemCreated\nrelay relay True relay relayed-secret gdbus\n"
                    + "relay relay second relay / ([], [])\ngdbus True\nTrue gdbus\n",
            "\(r)")
    }

    /// Writes are answered off the bus thread (`SecretService+Writes.swift`), and several
    /// clients' writes run at once: eight clients, each pipelining a CreateItem, a SearchItems
    /// and an Item.Delete of the item made, twenty times, all at once, each get every reply in
    /// order (the search finds the item just made, the delete takes it), and nothing is left.
    @Test func concurrentClientsWritesKeepEachClientsOrder() throws {
        let k = try Self.fixture()
        defer { k.close() }
        let script = """
            import sys
            from multiprocessing import Pool
            def client(c):
                from jeepney import DBusAddress, HeaderFields, MessageType, new_method_call
                from jeepney.io.blocking import open_dbus_connection
                conn = open_dbus_connection(bus="SESSION")
                service = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Service")
                default = DBusAddress("/org/freedesktop/secrets/aliases/default", bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Collection")
                session = conn.send_and_get_reply(new_method_call(service, "OpenSession", "sv", ("plain", ("s", ""))), timeout=10).body[1]
                def replies(serials):
                    got = {}
                    while len(got) < len(serials):
                        m = conn.receive(timeout=30)
                        if m.header.message_type in (MessageType.method_return, MessageType.error):
                            got[m.header.fields[HeaderFields.reply_serial]] = m
                    return [got[s] for s in serials]
                good = 0
                for i in range(20):
                    attributes = {"concurrent": "c%d-%d" % (c, i)}
                    properties = {"org.freedesktop.Secret.Item.Label": ("s", "c%d-%d" % (c, i)), "org.freedesktop.Secret.Item.Attributes": ("a{ss}", attributes)}
                    create = new_method_call(default, "CreateItem", "a{sv}(oayays)b", (properties, (session, b"", b"v", "text/plain"), True))
                    search = new_method_call(service, "SearchItems", "a{ss}", (attributes,))
                    serials = [next(conn.outgoing_serial), next(conn.outgoing_serial)]
                    conn.send(create, serial=serials[0])
                    conn.send(search, serial=serials[1])
                    made, found = replies(serials)
                    item = made.body[0]
                    delete = new_method_call(DBusAddress(item, bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Item"), "Delete")
                    again = new_method_call(service, "SearchItems", "a{ss}", (attributes,))
                    serials = [next(conn.outgoing_serial), next(conn.outgoing_serial)]
                    conn.send(delete, serial=serials[0])
                    conn.send(again, serial=serials[1])
                    deleted, after = replies(serials)
                    good += (found.body[0] == [item] and deleted.header.message_type == MessageType.method_return and after.body == ([], []))
                return good
            with Pool(8) as p:
                print(sum(p.map(client, range(8))))
            """
        let r = k.run("python3", ["-c", script], timeout: 300)
        #expect(r.status == 0 && r.stdoutText == "160\n", "\(r)")
        // Nothing is left of them.
        let left = k.run(
            "python3",
            [
                "-c",
                """
                import secretstorage
                c = secretstorage.dbus_init()
                print(sum(1 for i in secretstorage.search_items(c, {}) if "concurrent" in i.get_attributes()))
                """,
            ], timeout: 60)
        #expect(left.stdoutText == "0\n", "\(left)")
    }

    /// The item signals: a client that has called vaultd gets ItemCreated from the collection
    /// and both aliases of its default group, after the reply to the CreateItem that made the
    /// item; an app (a registered copy of python) gets none for the owner's item.
    @Test func itemSignalsFollowTheReplyAndReachOnlyWhoSeesTheItem() throws {
        let k = try Self.fixture()
        defer { k.close() }
        // jeepney for the app's python, whose own library has none: its directory alone.
        let found = k.run(
            "python3", ["-c", "import jeepney, os; print(os.path.dirname(jeepney.__file__))"])
        let jeepney = found.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        try #require(found.status == 0 && !jeepney.isEmpty, "\(found)")
        let lib = k.root + "/pylib"
        mkdir(lib, 0o755)
        try FileManager.default.createSymbolicLink(
            atPath: lib + "/jeepney", withDestinationPath: jeepney)
        let app = k.root + "/app/python3"
        mkdir(k.root + "/app", 0o755)
        try FileManager.default.copyItem(
            atPath: URL(fileURLWithPath: "/usr/bin/python3").resolvingSymlinksInPath().path,
            toPath: app)
        try #require(k.ctl(["app", "install", "com.example.Listener", "--exe", app]).status == 0)
        let script = """
            import sys
            from jeepney import DBusAddress, HeaderFields, MessageType, MatchRule, message_bus, new_method_call
            from jeepney.io.blocking import open_dbus_connection, Proxy
            conn = open_dbus_connection(bus="SESSION")
            Proxy(message_bus, conn).AddMatch(MatchRule(type="signal", interface="org.freedesktop.Secret.Collection"))
            service = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Service")
            session = conn.send_and_get_reply(new_method_call(service, "OpenSession", "sv", ("plain", ("s", ""))), timeout=10).body[1]
            if sys.argv[1] == "listen":
                print("ready", flush=True)
                seen = []
                try:
                    while True:
                        m = conn.receive(timeout=float(sys.argv[2]))
                        if m.header.message_type == MessageType.signal:
                            print(m.header.fields[HeaderFields.member], m.header.fields[HeaderFields.path], m.body[0], flush=True)
                except TimeoutError:
                    pass
            else:
                default = DBusAddress("/org/freedesktop/secrets/aliases/default", bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Collection")
                properties = {"org.freedesktop.Secret.Item.Label": ("s", "signalled"), "org.freedesktop.Secret.Item.Attributes": ("a{ss}", {"sig": "1"})}
                conn.send(new_method_call(default, "CreateItem", "a{sv}(oayays)b", (properties, (session, b"", b"v", "text/plain"), True)))
                order = []
                while len(order) < 4:
                    m = conn.receive(timeout=10)
                    if m.header.message_type == MessageType.method_return: order.append("reply " + m.body[0])
                    elif m.header.message_type == MessageType.signal and m.header.fields[HeaderFields.member] == "ItemCreated":
                        order.append("ItemCreated " + m.header.fields[HeaderFields.path] + " " + m.body[0])
                print("\\n".join(order))
            """
        let listenerOut = k.root + "/listener.out"
        var env = k.environment
        env["PYTHONPATH"] = lib
        let listener = try ChildProcess.spawn(
            app, ["-c", script, "listen", "8"], environment: env, inputs: [:],
            stdout: .file(listenerOut, append: false),
            stderr: .file(listenerOut + ".err", append: false))
        defer { kill(listener, SIGKILL) }
        let deadline = Date().addingTimeInterval(20)
        while !Self.text(listenerOut).contains("ready") && Date() < deadline { usleep(10_000) }
        try #require(
            Self.text(listenerOut) == "ready\n",
            "\(Self.text(listenerOut)) \(Self.text(listenerOut + ".err"))")

        let r = k.run("python3", ["-c", script, "create"], timeout: 60)
        try #require(r.status == 0, "\(r)")
        let lines = r.stdoutText.split(separator: "\n").map(String.init)
        let item = try #require(lines.first?.dropFirst("reply ".count)).description
        #expect(
            lines.first?.hasPrefix("reply /org/freedesktop/secrets/collection/user/") == true,
            "\(lines)")
        #expect(
            Set(lines.dropFirst())
                == Set(
                    ["collection/user", "aliases/default", "aliases/login"].map {
                        "ItemCreated /org/freedesktop/secrets/\($0) \(item)"
                    }),
            "\(lines)")
        // The app's connection saw nothing of the owner's item.
        #expect(ChildProcess.wait(listener, timeout: 20) == 0)
        #expect(Self.text(listenerOut) == "ready\n", "\(Self.text(listenerOut))")
    }

    /// Once vaultd is the keyring, keeping its passphrase in the login keyring would lock it
    /// inside itself: `unlock --remember` is refused saying why, nothing is stored, and vaultd
    /// does not ask itself for the passphrase at start.
    @Test func rememberingThePassphraseInItselfIsRefused() throws {
        let k = try Self.fixture(passphrase: true)
        defer { k.close() }
        let r = k.ctl(["unlock", "--remember", "--passphrase-fd", "3"], fds: Self.passphraseFD)
        #expect(
            r.status != 0 && r.stderr.contains("vaultd is this session's Secret Service"), "\(r)")
        #expect(try Self.items(k).isEmpty)
        // Nor does a locked vaultd look for its passphrase in itself at start.
        k.stopVaultd()
        try k.startVaultd(arguments: ["--secret-service"])
        #expect(
            k.waitForLog("locked; vaultd is this session's Secret Service", timeout: 10), "\(k.log)"
        )
    }

    /// Another provider owns the name: vaultd says which process and serves its socket
    /// alone; with --replace it stops that provider and takes the name over.
    @Test func anotherProviderIsReportedAndReplaceTakesTheNameOver() throws {
        let k = try KeyringFixture()
        defer { k.close() }
        let keyring = try #require(k.keyringPID)
        try k.startVaultd(arguments: ["--secret-service"])
        #expect(
            k.log.contains(
                "org.freedesktop.secrets is already provided by pid \(keyring) (\"/usr/bin/gnome-keyring-daemon\")"
            ), "\(k.log)")
        #expect(k.ctl(["init", "--no-passphrase"]).status == 0)
        k.stopVaultd()

        try k.startVaultd(arguments: ["--secret-service", "--replace"])
        #expect(k.log.contains("taken over from pid \(keyring)"), "\(k.log)")
        let r = Self.secretTool(
            k, ["store", "--label=after replace", "service", "replaced.example"], stdin: "mine")
        #expect(r.status == 0, "\(r)")
        #expect(try Self.items(k).map { $0["label"] as? String } == ["after replace"])
    }

    /// The switch-over: gnome-keyring's items imported as Secret Service items (idempotent),
    /// then vaultd replacing it: the same lookups find the same secrets.
    @Test func keyringItemsImportedAsSecretServiceItemsAreFoundAfterTheSwitch() throws {
        let k = try KeyringFixture()
        defer { k.close() }
        var r = Self.secretTool(
            k, ["store", "--label=Mail", "service", "mail.example", "user", "dora"],
            stdin: "imap-pw")
        try #require(r.status == 0, "\(r)")
        try k.startVaultd()
        try #require(k.ctl(["init", "--no-passphrase"]).status == 0)
        r = k.ctl([
            "keyring", "import", "--access-group", Caller.ownerAccessGroup, "--secret-service",
        ])
        #expect(r.status == 0 && r.stdoutText.contains("add Secret Service item \"Mail\""), "\(r)")
        r = k.ctl([
            "keyring", "import", "--access-group", Caller.ownerAccessGroup, "--secret-service",
        ])
        #expect(
            r.status == 0 && r.stdoutText.contains("unchanged Secret Service item \"Mail\"")
                && r.stdoutText.contains("0 added"), "\(r)")

        k.stopVaultd()
        try k.startVaultd(arguments: ["--secret-service", "--replace"])
        #expect(k.log.contains("taken over from pid"), "\(k.log)")
        r = Self.secretTool(k, ["lookup", "service", "mail.example", "user", "dora"])
        #expect(r.status == 0 && r.stdoutText == "imap-pw", "\(r)")
        let stored = try Self.items(k)
        #expect(stored.count == 1 && stored.first?["label"] as? String == "Mail", "\(stored)")

        // And back: an item stored through vaultd goes to a new gnome-keyring with its own
        // attributes, where the same lookup finds it.
        r = Self.secretTool(
            k, ["store", "--label=New", "service", "new.example", "user", "dora"],
            stdin: "made-in-vaultd")
        try #require(r.status == 0, "\(r)")
        k.stopVaultd()
        let keyring = try ChildProcess.spawn(
            "gnome-keyring-daemon", ["--foreground", "--unlock", "--components=secrets"],
            environment: k.environment,
            inputs: [0: Data(KeyringFixture.keyringPassword.utf8)],
            stdout: .file(k.root + "/keyring2.log", append: true),
            stderr: .file(k.root + "/keyring2.log", append: true))
        defer {
            kill(keyring, SIGTERM)
            _ = ChildProcess.wait(keyring, timeout: 10)
        }
        let deadline = Date().addingTimeInterval(15)
        while !k.run(
            "dbus-send",
            [
                "--session", "--print-reply", "--dest=org.freedesktop.DBus",
                "/org/freedesktop/DBus", "org.freedesktop.DBus.NameHasOwner",
                "string:org.freedesktop.secrets",
            ]
        ).stdoutText.contains("boolean true"), Date() < deadline {
            usleep(50_000)
        }
        try k.startVaultd()
        r = k.ctl(["keyring", "export", "--service", Vault.secretServiceService])
        // "Mail" is still in gnome-keyring's file, as it was imported: the same item, unchanged.
        #expect(r.status == 0 && r.stdoutText.contains("1 added, 0 updated, 1 unchanged"), "\(r)")
        r = Self.secretTool(k, ["lookup", "service", "new.example", "user", "dora"])
        #expect(r.status == 0 && r.stdoutText == "made-in-vaultd", "\(r)")
    }

    /// Bytes of one item's attributes and of another's secret zeroed on disk, vaultd stopped
    /// (as DamagedStoreTests does), then started again: each damaged item is listed among the
    /// locked results (the one whose ID does not read at `damaged_itemROW`), shown locked
    /// with a label naming it, and reading its secret is io.vaultd.Keychain.ItemDamaged
    /// naming it by row id and uuid; every other item is found and read (a GetSecrets of
    /// them all returns the readable ones), and each damaged one is deleted by Item.Delete.
    @Test func aDamagedItemIsReportedAndKeepsNoOtherFromBeingRead() throws {
        let k = try Self.fixture()
        defer { k.close() }
        for (n, secret) in [("1", "one"), ("2", "two"), ("3", "three"), ("4", "four")] {
            let r = Self.secretTool(
                k, ["store", "--label=Item \(n)", "set", "g", "n", n], stdin: secret)
            try #require(r.status == 0, "\(r)")
        }
        #expect(k.stopVaultd() == 0)
        let store = k.dataDirectory + "/vault.sqlite"
        func sqlite(_ sql: String) -> String {
            k.run("sqlite3", [store, sql]).stdoutText.trimmingCharacters(
                in: .whitespacesAndNewlines)
        }
        let uuid2 = sqlite("SELECT lower(hex(uuid)) FROM items WHERE id = 2")
        let uuid3 = sqlite("SELECT lower(hex(uuid)) FROM items WHERE id = 3")
        try #require(uuid2.count == 32 && uuid3.count == 32)
        // Item 2 (n=2): its attributes; item 3 (n=3): its secret.
        try DamagedStoreTests.damage(store: store, id: 2, column: "attributes", sqlite: sqlite)
        try DamagedStoreTests.damage(store: store, id: 3, column: "secret", sqlite: sqlite)
        try k.startVaultd(arguments: ["--secret-service"])
        let named2 =
            "item 2 (uuid \(uuid2), genericPassword in access group user): its attributes fail authentication"
        let named3 =
            "item 3 (uuid \(uuid3), genericPassword in access group user): its secret fails authentication"

        // secret-tool: the others read; a lookup of a damaged one fails naming it.
        #expect(Self.secretTool(k, ["lookup", "n", "1"]).stdoutText == "one")
        #expect(Self.secretTool(k, ["lookup", "n", "4"]).stdoutText == "four")
        var r = Self.secretTool(k, ["lookup", "n", "2"])
        #expect(r.status == 1 && r.stdout.isEmpty && r.stderr.contains(named2), "\(r)")
        r = Self.secretTool(k, ["lookup", "n", "3"])
        #expect(r.status == 1 && r.stdout.isEmpty && r.stderr.contains(named3), "\(r)")
        #expect(
            !r.stderr.contains("three") && !r.stderr.contains("two"), "no secret in the message")
        r = Self.secretTool(k, ["search", "--all", "set", "g"])
        let shown = r.stdoutText + r.stderr
        #expect(shown.contains("secret = one") && shown.contains("secret = four"), "\(r)")
        #expect(
            shown.contains("[/damaged_item2]") && shown.contains("label = damaged: \(named2)"),
            "\(r)")
        #expect(shown.contains(named3) && !shown.contains("secret = three"), "\(r)")

        // The calls themselves.
        let script = """
            import json
            from jeepney import DBusAddress, MessageType, HeaderFields, new_method_call
            from jeepney.io.blocking import open_dbus_connection
            conn = open_dbus_connection(bus="SESSION")
            root = "/org/freedesktop/secrets"
            service = DBusAddress(root, bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Service")
            def call(address, method, signature, body):
                m = conn.send_and_get_reply(new_method_call(address, method, signature, body), timeout=20)
                if m.header.message_type == MessageType.error:
                    return {"error": m.header.fields[HeaderFields.error_name], "message": m.body[0] if m.body else ""}
                return m.body
            def item(path, interface="org.freedesktop.Secret.Item"):
                return DBusAddress(path, bus_name="org.freedesktop.secrets", interface=interface)
            session = call(service, "OpenSession", "sv", ("plain", ("s", "")))[1]
            unlocked, locked = call(service, "SearchItems", "a{ss}", ({"set": "g"},))
            out = {"unlocked": len(unlocked), "locked": locked}
            damaged = locked[0]
            out["lockedProperty"] = call(item(damaged, "org.freedesktop.DBus.Properties"), "Get", "ss", ("org.freedesktop.Secret.Item", "Locked"))[0][1]
            everything = call(service, "GetSecrets", "aoo", (unlocked + locked, session))[0]
            out["read"] = sorted(v[2].decode() for v in everything.values())
            out["getSecretsOfDamaged"] = call(service, "GetSecrets", "aoo", ([damaged], session))
            out["getSecret"] = call(item(damaged), "GetSecret", "o", (session,))
            out["delete"] = call(item(damaged), "Delete", "", ())
            # The one whose secret is damaged, at its own path.
            hurt = [p for p in unlocked if p not in everything][0]
            out["getSecret3"] = call(item(hurt), "GetSecret", "o", (session,))
            out["delete3"] = call(item(hurt), "Delete", "", ())
            unlocked, locked = call(service, "SearchItems", "a{ss}", ({"set": "g"},))
            out["after"] = [len(unlocked), locked]
            out["deleteAgain"] = call(item(damaged), "Delete", "", ())
            print(json.dumps(out))
            """
        r = k.run("python3", ["-c", script], timeout: 60)
        try #require(r.status == 0, "\(r)")
        let out = try #require(
            try JSONSerialization.jsonObject(with: r.stdout) as? [String: Any], "\(r)")
        let damagedPath = "/org/freedesktop/secrets/collection/user/damaged_item2"
        #expect(
            out["unlocked"] as? Int == 3 && out["locked"] as? [String] == [damagedPath], "\(out)")
        #expect(out["lockedProperty"] as? Bool == true, "\(out)")
        #expect(out["read"] as? [String] == ["four", "one"], "\(out)")
        for key in ["getSecretsOfDamaged", "getSecret"] {
            let e = out[key] as? [String: Any]
            #expect(
                e?["error"] as? String == "io.vaultd.Keychain.ItemDamaged"
                    && (e?["message"] as? String)?.contains(named2) == true, "\(key): \(out)")
        }
        let e3 = out["getSecret3"] as? [String: Any]
        #expect(
            e3?["error"] as? String == "io.vaultd.Keychain.ItemDamaged"
                && (e3?["message"] as? String)?.contains(named3) == true, "\(out)")
        #expect(
            out["delete"] as? [String] == ["/"] && out["delete3"] as? [String] == ["/"], "\(out)")
        #expect(
            (out["after"] as? [Any])?.first as? Int == 2
                && (out["after"] as? [Any])?.last as? [String] == [], "\(out)")
        #expect(
            (out["deleteAgain"] as? [String: Any])?["error"] as? String
                == "org.freedesktop.Secret.Error.NoSuchObject", "\(out)")

        // Gone from the store; the others untouched.
        r = k.ctl(["doctor"])
        #expect(r.status == 0 && r.stdoutText.contains("items: 2 checked, 0 damaged"), "\(r)")
        #expect(Self.secretTool(k, ["lookup", "n", "1"]).stdoutText == "one")
        #expect(k.log.contains("keychain: deleted 1 damaged item(s): \(named2)"), "\(k.log)")
    }

    /// Every method and property interface vaultd's objects declare on the bus has a decision
    /// in the policy's Secret Service table, and the table names nothing they do not declare.
    @Test func everyMethodOnTheBusHasAPolicyDecision() throws {
        let k = try Self.fixture()
        defer { k.close() }
        var declared: Set<String> = []
        for path in [
            "/org/freedesktop/secrets", "/org/freedesktop/secrets/aliases/default",
            "/org/freedesktop/secrets/session/none", "/org/freedesktop/secrets/prompt/none",
        ] {
            let r = k.run(
                "gdbus",
                [
                    "introspect", "--session", "--dest", "org.freedesktop.secrets", "--object-path",
                    path, "--xml",
                ])
            try #require(r.status == 0, "\(r)")
            var interface = ""
            for line in r.stdoutText.split(separator: "\n") {
                if let name = Self.attribute(line, "interface name=") { interface = name }
                let served =
                    interface.hasPrefix("org.freedesktop.Secret.")
                    || interface.hasPrefix("io.vaultd.")
                if served, let m = Self.attribute(line, "method name=") {
                    declared.insert(interface + "." + m)
                }
                if served, line.contains("<property ") {
                    declared.insert(interface + ".Get")
                    if line.contains("readwrite") { declared.insert(interface + ".Set") }
                }
            }
        }
        // The item interface, from an item's own path.
        var r = Self.secretTool(k, ["store", "--label=x", "k", "v"], stdin: "x")
        try #require(r.status == 0, "\(r)")
        r = k.run(
            "gdbus",
            [
                "call", "--session", "--dest", "org.freedesktop.secrets", "--object-path",
                "/org/freedesktop/secrets", "--method",
                "org.freedesktop.Secret.Service.SearchItems", "{'k': 'v'}",
            ])
        let path = try #require(
            r.stdoutText.split(separator: "'").first(where: {
                $0.hasPrefix("/org/freedesktop/secrets/collection/")
            }), "\(r)")
        r = k.run(
            "gdbus",
            [
                "introspect", "--session", "--dest", "org.freedesktop.secrets", "--object-path",
                String(path), "--xml",
            ])
        #expect(r.stdoutText.contains("org.freedesktop.Secret.Item"), "\(r)")
        for m in ["Delete", "GetSecret", "SetSecret", "Get", "Set"] {
            declared.insert("org.freedesktop.Secret.Item." + m)
        }
        #expect(declared.count == 24, "\(declared.sorted())")
        for m in declared.sorted() {
            let dot = m.lastIndex(of: ".")!
            #expect(
                SecretServiceOperations.of(
                    String(m[..<dot]), String(m[m.index(after: dot)...])) != nil,
                "\(m) has no policy decision")
        }
        #expect(
            Set(SecretServiceOperations.byMember.keys) == declared,
            "\(Set(SecretServiceOperations.byMember.keys).symmetricDifference(declared).sorted())")
    }

    static func attribute(_ line: Substring, _ prefix: String) -> String? {
        guard let r = line.range(of: prefix + "\"") else { return nil }
        let rest = line[r.upperBound...]
        return rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
    }
}
