import Foundation
import TestSupport
import Testing
import VaultCore

#if canImport(Glibc)
import Glibc
#endif

/// What a long-lived Secret Service client sees of vaultd, on a private bus: a libsecret
/// client (python-gi, Debian's `gir1.2-secret-1`) that keeps a `SecretCollection` and follows
/// changes other processes make, content types and collection labels kept, every error with a
/// proper name, and nothing an app may not see told apart from what does not exist.
@Suite(.tags(.system)) struct SecretServiceClientTests {
    static func text(_ path: String) -> String {
        (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }

    /// Debian's python, which has python-gi (`python3-gi`); the one on PATH may be another.
    static let systemPython = "/usr/bin/python3"

    /// A libsecret client as seahorse is one: it loads the default collection with its items
    /// and waits on a GLib main loop, printing its view of them whenever libsecret tells it of
    /// a change (`notify` of the collection, of the service's collections or of an item):
    /// `locked=B label=L items=A,B*` (an item's label, `*` when locked, sorted). It ends,
    /// printing `exit`, at SIGTERM.
    static let libsecretClient = """
        import signal, sys
        import gi
        gi.require_version("Secret", "1")
        from gi.repository import GLib, Secret
        service = Secret.Service.get_sync(Secret.ServiceFlags.OPEN_SESSION | Secret.ServiceFlags.LOAD_COLLECTIONS, None)
        collection = Secret.Collection.for_alias_sync(service, "default", Secret.CollectionFlags.LOAD_ITEMS, None)
        watched = set()
        last = [None]
        def show(*_):
            for item in collection.get_items():
                if item.get_object_path() not in watched:
                    watched.add(item.get_object_path())
                    item.connect("notify", show)
            items = sorted(i.get_label() + ("*" if i.get_locked() else "") for i in collection.get_items())
            line = "locked=%s label=%s items=%s" % (collection.get_locked(), collection.get_label(), ",".join(items))
            if line != last[0]:
                last[0] = line
                print(line, flush=True)
        collection.connect("notify", show)
        service.connect("notify::collections", show)
        show()
        loop = GLib.MainLoop()
        GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGTERM, lambda: loop.quit() or False)
        loop.run()
        print("exit", flush=True)
        """

    /// Starts `libsecretClient` in `k`'s session; returns its pid and the file it prints to
    /// (its errors: that file with `.err`).
    static func startLibsecretClient(_ k: KeyringFixture) throws -> (pid_t, String) {
        let script = k.root + "/client.py"
        let out = k.root + "/client.out"
        try libsecretClient.write(toFile: script, atomically: true, encoding: .utf8)
        let client = try ChildProcess.spawn(
            systemPython, [script], environment: k.environment, inputs: [:],
            stdout: .file(out, append: false), stderr: .file(out + ".err", append: false))
        return (client, out)
    }

    /// Waits until `file` has, after its first `from` lines, the line `line`; returns the
    /// number of lines up to and including it, nil when it did not come within `timeout`.
    static func waitForLine(_ file: String, _ line: String, from: Int, timeout: Double = 20) -> Int?
    {
        let deadline = Date().addingTimeInterval(timeout)
        repeat {
            let lines = text(file).split(separator: "\n", omittingEmptySubsequences: false).map(
                String.init)
            if let i = lines.dropFirst(from).firstIndex(of: line) { return i + 1 }
            usleep(10_000)
        } while Date() < deadline
        return nil
    }

    /// The path of the one item whose attributes are `attributes` (gdbus SearchItems).
    static func itemPath(_ k: KeyringFixture, _ attributes: [String: String]) throws -> String {
        let dict =
            "{" + attributes.map { "'\($0.key)': '\($0.value)'" }.joined(separator: ", ") + "}"
        let r = k.run(
            "gdbus",
            [
                "call", "--session", "--dest", "org.freedesktop.secrets", "--object-path",
                "/org/freedesktop/secrets", "--method",
                "org.freedesktop.Secret.Service.SearchItems", dict,
            ])
        let paths = r.stdoutText.split(separator: "'").filter {
            $0.hasPrefix("/org/freedesktop/secrets/collection/")
        }
        try #require(paths.count == 1, "\(r)")
        return String(paths[0])
    }

    /// A property set as another program sets it: `gdbus call … Properties.Set`.
    static func setProperty(
        _ k: KeyringFixture, _ path: String, _ interface: String, _ name: String, _ value: String
    ) -> ProcessResult {
        k.run(
            "gdbus",
            [
                "call", "--session", "--dest", "org.freedesktop.secrets", "--object-path", path,
                "--method", "org.freedesktop.DBus.Properties.Set", interface, name, value,
            ])
    }

    /// A long-lived libsecret client follows 21 changes other processes make to its
    /// collection (secret-tool storing, replacing and clearing; gdbus setting an item's and
    /// the collection's label) and the vault's lock and unlock, without dying: after each, its
    /// view (from libsecret's cache, kept up to date by vaultd's signals alone) is exactly the
    /// collection's. vaultd sent PropertiesChanged with values: a property invalidated without
    /// one makes libsecret read a cache it just dropped (SIGSEGV at the second item made).
    @Test func aLongLivedLibsecretClientFollowsChangesAndLockState() throws {
        let k = try SecretServiceTests.fixture(passphrase: true)
        defer { k.close() }
        let (client, out) = try Self.startLibsecretClient(k)
        defer { kill(client, SIGKILL) }
        var seen = try #require(
            Self.waitForLine(out, "locked=False label=user items=", from: 0),
            "\(Self.text(out)) \(Self.text(out + ".err"))")

        // What the collection holds, by the attribute n: the label.
        var labels: [String: String] = [:]
        var locked = false
        var collectionLabel = "user"
        func expect(_ what: String) throws {
            let items = labels.values.map { $0 + (locked ? "*" : "") }.sorted().joined(
                separator: ",")
            let line = "locked=\(locked ? "True" : "False") label=\(collectionLabel) items=\(items)"
            let found = Self.waitForLine(out, line, from: seen)
            try #require(
                found != nil,
                "after \(what): no `\(line)`; the client printed:\n\(Self.text(out))\(Self.text(out + ".err"))\n\(k.log)"
            )
            seen = found!
        }
        func store(_ n: Int, _ label: String) throws {
            let r = SecretServiceTests.secretTool(
                k, ["store", "--label=\(label)", "test", "follow", "n", "\(n)"],
                stdin: "secret \(n)")
            try #require(r.status == 0, "\(r)")
            labels["\(n)"] = label
            try expect("storing \(label)")
        }
        for n in 0..<8 { try store(n, "item\(n)") }  // 8 made
        for n in 0..<4 { try store(n, "renamed\(n)") }  // 4 replaced (ItemChanged)
        for n in 4..<7 {  // 3 labels set by another program
            let r = Self.setProperty(
                k, try Self.itemPath(k, ["n": "\(n)"]), "org.freedesktop.Secret.Item", "Label",
                "<'set\(n)'>")
            try #require(r.status == 0, "\(r)")
            labels["\(n)"] = "set\(n)"
            try expect("setting the label of \(n)")
        }
        for n in 0..<4 {  // 4 deleted
            let r = SecretServiceTests.secretTool(k, ["clear", "test", "follow", "n", "\(n)"])
            try #require(r.status == 0, "\(r)")
            labels["\(n)"] = nil
            try expect("clearing \(n)")
        }
        try store(99, "last")  // 1 more made
        // The collection's own label, set by another program.
        var r = Self.setProperty(
            k, "/org/freedesktop/secrets/collection/user", "org.freedesktop.Secret.Collection",
            "Label", "<'Personal'>")
        try #require(r.status == 0, "\(r)")
        collectionLabel = "Personal"
        try expect("setting the collection's label")

        // Locked and unlocked by vaultctl: the collection and each item.
        try #require(k.ctl(["lock"]).status == 0)
        locked = true
        try expect("vaultctl lock")
        r = k.ctl(["unlock", "--passphrase-fd", "3"], fds: SecretServiceTests.passphraseFD)
        try #require(r.status == 0, "\(r)")
        locked = false
        try expect("vaultctl unlock")

        // Alive all along, and it ends as asked.
        #expect(kill(client, 0) == 0)
        kill(client, SIGTERM)
        #expect(ChildProcess.wait(client, timeout: 20) == 0, "\(Self.text(out + ".err"))")
        #expect(Self.text(out).hasSuffix("exit\n"), "\(Self.text(out))")
    }

    /// A libsecret client started while the vault has stayed locked since vaultd started
    /// (its items' IDs and its collection's label cannot be read yet) gets its collection,
    /// locked, without items and labelled with its group's name, and follows the unlock to
    /// the collection's items and label.
    @Test func aClientOfAVaultLockedSinceStartFollowsItsUnlock() throws {
        let k = try SecretServiceTests.fixture(passphrase: true)
        defer { k.close() }
        var r = SecretServiceTests.secretTool(
            k, ["store", "--label=kept", "kept", "1"], stdin: "k")
        try #require(r.status == 0, "\(r)")
        // A collection label, sealed under the metadata key: read as the group's name until
        // the unlock, whose signals carry it.
        r = Self.setProperty(
            k, "/org/freedesktop/secrets/collection/user", "org.freedesktop.Secret.Collection",
            "Label", "<'Kept'>")
        try #require(r.status == 0, "\(r)")
        k.stopVaultd()
        try k.startVaultd(arguments: ["--secret-service"])
        try #require(k.state() == "locked")
        let script = k.root + "/client.py"
        let out = k.root + "/client.out"
        try Self.libsecretClient.write(toFile: script, atomically: true, encoding: .utf8)
        let client = try ChildProcess.spawn(
            Self.systemPython, [script], environment: k.environment, inputs: [:],
            stdout: .file(out, append: false), stderr: .file(out + ".err", append: false))
        defer { kill(client, SIGKILL) }
        let seen = try #require(
            Self.waitForLine(out, "locked=True label=user items=", from: 0),
            "\(Self.text(out)) \(Self.text(out + ".err"))")
        try #require(
            k.ctl(["unlock", "--passphrase-fd", "3"], fds: SecretServiceTests.passphraseFD).status
                == 0)
        #expect(
            Self.waitForLine(out, "locked=False label=Kept items=kept", from: seen) != nil,
            "\(Self.text(out)) \(Self.text(out + ".err"))")
        #expect(kill(client, 0) == 0)
    }

    /// seahorse, under Xvfb, keeps vaultd's collections and items open while other programs
    /// make 20 changes (secret-tool storing, replacing and clearing) and the vault is locked
    /// and unlocked: after each, a call to seahorse's own application object (answered on its
    /// main loop, after the signals before it) shows it still serving, and at the end it is
    /// alive with no GLib critical (libsecret's, at a property it found no cached value of)
    /// in its output. Its window is kept as `seahorse.png` in the test's directory.
    @Test func seahorseFollowsChangesAndLockState() throws {
        for tool in ["/usr/bin/Xvfb", "/usr/bin/seahorse", "/usr/bin/xdotool"] {
            try #require(access(tool, X_OK) == 0, "\(tool) is missing: run scripts/install-deps")
        }
        let k = try SecretServiceTests.fixture(passphrase: true)
        defer { k.close() }
        var r = SecretServiceTests.secretTool(
            k, ["store", "--label=first", "seahorse", "0"], stdin: "s0")
        try #require(r.status == 0, "\(r)")
        // A display of its own.
        let xvfb = try XvfbDisplay(environment: k.environment, log: k.root + "/xvfb.log")
        defer { withExtendedLifetime(xvfb) {} }
        let env = xvfb.environment(k.environment)
        let out = k.root + "/seahorse.out"
        let seahorse = try ChildProcess.spawn(
            "/usr/bin/seahorse", [], environment: env, inputs: [:],
            stdout: .file(out, append: false), stderr: .file(out, append: false))
        defer { kill(seahorse, SIGKILL) }
        // Serving: its application object answers on the bus (its main loop runs). Asked only
        // once the name has an owner: a call to an unowned name makes the bus start another
        // seahorse from its activation file, which races the one under test for the name.
        func roundTrip() -> Bool {
            let owned = k.run(
                "gdbus",
                [
                    "call", "--session", "--dest", "org.freedesktop.DBus", "--object-path",
                    "/org/freedesktop/DBus",
                    "--method", "org.freedesktop.DBus.NameHasOwner",
                    "org.gnome.seahorse.Application",
                ], timeout: 20)
            guard owned.status == 0 && owned.stdoutText.contains("true") else { return false }
            let r = k.run(
                "gdbus",
                [
                    "call", "--session", "--dest", "org.gnome.seahorse.Application",
                    "--object-path", "/org/gnome/seahorse/Application", "--method",
                    "org.gtk.Actions.List",
                ], timeout: 20)
            return r.status == 0 && r.stdoutText.contains("[")
        }
        let deadline = Date().addingTimeInterval(30)
        while !roundTrip() && Date() < deadline { usleep(50_000) }
        try #require(roundTrip(), "seahorse did not start: \(Self.text(out))")
        // Its window, once mapped, with the collections listed.
        r = try ChildProcess.run(
            "xdotool", ["search", "--sync", "--onlyvisible", "--class", "seahorse"],
            environment: env, timeout: 30)
        try #require(r.status == 0, "\(r) \(Self.text(out))")

        func change(_ arguments: [String], stdin: String? = nil) throws {
            let r = SecretServiceTests.secretTool(k, arguments, stdin: stdin)
            try #require(r.status == 0, "\(arguments): \(r)")
            #expect(roundTrip(), "seahorse after \(arguments): \(Self.text(out))")
        }
        for n in 1...10 {
            try change(["store", "--label=item \(n)", "seahorse", "\(n)"], stdin: "s\(n)")
        }
        for n in 1...5 {
            try change(["store", "--label=renamed \(n)", "seahorse", "\(n)"], stdin: "t\(n)")
        }
        for n in 6...10 { try change(["clear", "seahorse", "\(n)"]) }
        try #require(k.ctl(["lock"]).status == 0)
        #expect(roundTrip(), "seahorse after the lock: \(Self.text(out))")
        r = k.ctl(["unlock", "--passphrase-fd", "3"], fds: SecretServiceTests.passphraseFD)
        try #require(r.status == 0, "\(r)")
        #expect(roundTrip(), "seahorse after the unlock: \(Self.text(out))")

        #expect(kill(seahorse, 0) == 0, "seahorse died: \(Self.text(out))")
        #expect(!Self.text(out).contains("CRITICAL"), "\(Self.text(out))")
        _ = try? ChildProcess.run(
            "import", ["-window", "root", k.root + "/seahorse.png"], environment: env, timeout: 20)
    }

    /// The signals and the values they carry, as a raw listener (jeepney) receives them: a
    /// new group's first item is CollectionCreated and Collections' new value, ItemCreated and
    /// the collection's new Items; SetSecret and a label set are ItemChanged with the item's
    /// new values; the last item's deletion is CollectionDeleted; a lock is Locked true on
    /// the collection and its item. No PropertiesChanged invalidates a property.
    @Test func signalsCarryTheNewValues() throws {
        let k = try SecretServiceTests.fixture(passphrase: true)
        defer { k.close() }
        let script = """
            import json, sys
            from jeepney import DBusAddress, HeaderFields, MessageType, MatchRule, message_bus, new_method_call
            from jeepney.io.blocking import open_dbus_connection, Proxy
            conn = open_dbus_connection(bus="SESSION")
            Proxy(message_bus, conn).AddMatch(MatchRule(type="signal", sender="org.freedesktop.secrets"))
            root = "/org/freedesktop/secrets"
            def call(path, interface, method, signature, body):
                m = conn.send_and_get_reply(new_method_call(DBusAddress(path, bus_name="org.freedesktop.secrets", interface=interface), method, signature, body), timeout=20)
                if m.header.message_type == MessageType.error: raise SystemExit("error %s %s" % (m.header.fields[HeaderFields.error_name], m.body))
                return m.body
            # As a client keeping them does: the service's collections, and the Items of the
            # collection about to be made (the owner's group "work", empty so far).
            call(root + "/collection/work", "org.freedesktop.DBus.Properties", "Get", "ss", ("org.freedesktop.Secret.Collection", "Items"))
            print(json.dumps(call(root, "org.freedesktop.DBus.Properties", "Get", "ss", ("org.freedesktop.Secret.Service", "Collections"))[0][1]), flush=True)
            def plain(v):
                if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str): return plain(v[1])
                if isinstance(v, dict): return {k: plain(x) for k, x in v.items()}
                if isinstance(v, list): return [plain(x) for x in v]
                return v
            while True:
                try: m = conn.receive(timeout=float(sys.argv[1]))
                except TimeoutError: break
                if m.header.message_type != MessageType.signal: continue
                f = m.header.fields
                print(json.dumps([f[HeaderFields.member], f[HeaderFields.path], plain(list(m.body))]), flush=True)
            """
        let out = k.root + "/signals.out"
        let listener = try ChildProcess.spawn(
            Paths.tool("python3"), ["-c", script, "3"], environment: k.environment, inputs: [:],
            stdout: .file(out, append: false),
            stderr: .file(out + ".err", append: false))
        defer { kill(listener, SIGKILL) }
        let deadline = Date().addingTimeInterval(20)
        while !Self.text(out).contains("\n") && Date() < deadline { usleep(10_000) }
        try #require(
            Self.text(out).hasPrefix(
                "[\"/org/freedesktop/secrets/collection/user\", \"/org/freedesktop/secrets/collection/session\"]"
            ), "\(Self.text(out)) \(Self.text(out + ".err"))")

        // The owner stores into a group of its choosing through CreateCollection's label.
        let maker = """
            import sys
            \(Self.jeepneySession)
            collection = call(root, "org.freedesktop.Secret.Service", "CreateCollection", "a{sv}s", ({"org.freedesktop.Secret.Collection.Label": ("s", "work")}, ""))[0]
            properties = {"org.freedesktop.Secret.Item.Label": ("s", "w1"), "org.freedesktop.Secret.Item.Attributes": ("a{ss}", {"w": "1"})}
            item = call(collection, "org.freedesktop.Secret.Collection", "CreateItem", "a{sv}(oayays)b", (properties, (session, b"", b"one", "text/plain"), False))[0]
            call(item, "org.freedesktop.Secret.Item", "SetSecret", "(oayays)", ((session, b"", b"two", "text/plain"),))
            call(item, "org.freedesktop.DBus.Properties", "Set", "ssv", ("org.freedesktop.Secret.Item", "Label", ("s", "w1 renamed")))
            print(item)
            """
        var r = k.run("python3", ["-c", maker], timeout: 60)
        try #require(r.status == 0, "\(r)")
        let item = r.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        try #require(k.ctl(["lock"]).status == 0)
        r = k.ctl(["unlock", "--passphrase-fd", "3"], fds: SecretServiceTests.passphraseFD)
        try #require(r.status == 0, "\(r)")
        r = k.run(
            "gdbus",
            [
                "call", "--session", "--dest", "org.freedesktop.secrets", "--object-path", item,
                "--method", "org.freedesktop.Secret.Item.Delete",
            ])
        try #require(r.status == 0, "\(r)")
        #expect(ChildProcess.wait(listener, timeout: 30) == 0)
        let lines = Self.text(out).split(separator: "\n").dropFirst().compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [Any]
        }
        let work = "/org/freedesktop/secrets/collection/work"
        func signal(_ member: String, _ path: String, where test: ([Any]) -> Bool = { _ in true })
            -> [Any]?
        {
            lines.first {
                ($0[0] as? String) == member && ($0[1] as? String) == path
                    && test($0[2] as? [Any] ?? [])
            }?[2] as? [Any]
        }
        func changed(_ path: String, _ interface: String, _ property: String) -> [Any] {
            lines.filter {
                ($0[0] as? String) == "PropertiesChanged" && ($0[1] as? String) == path
                    && (($0[2] as? [Any])?.first as? String) == interface
            }
            .compactMap { (($0[2] as? [Any])?[1] as? [String: Any])?[property] }
        }
        let all = Self.text(out)
        #expect(
            signal(
                "CollectionCreated", "/org/freedesktop/secrets",
                where: { ($0.first as? String) == work }) != nil, "\(all)")
        #expect(
            changed("/org/freedesktop/secrets", "org.freedesktop.Secret.Service", "Collections")
                .contains { ($0 as? [String])?.contains(work) == true }, "\(all)")
        #expect(
            signal("ItemCreated", work, where: { ($0.first as? String) == item }) != nil, "\(all)")
        #expect(
            changed(work, "org.freedesktop.Secret.Collection", "Items").contains {
                ($0 as? [String]) == [item]
            }, "\(all)")
        #expect(
            lines.filter { ($0[0] as? String) == "ItemChanged" && ($0[1] as? String) == work }.count
                == 2, "\(all)")
        #expect(
            changed(item, "org.freedesktop.Secret.Item", "Label").contains {
                ($0 as? String) == "w1 renamed"
            }, "\(all)")
        #expect(
            changed(item, "org.freedesktop.Secret.Item", "Attributes").contains {
                ($0 as? [String: String]) == ["w": "1"]
            }, "\(all)")
        // Its item's values (Locked false) came with each ItemChanged; then the lock and unlock.
        #expect(
            changed(item, "org.freedesktop.Secret.Item", "Locked").suffix(2).map { $0 as? Bool }
                == [true, false], "\(all)")
        #expect(
            changed(work, "org.freedesktop.Secret.Collection", "Locked").map { $0 as? Bool } == [
                true, false,
            ], "\(all)")
        #expect(
            signal(
                "CollectionChanged", "/org/freedesktop/secrets",
                where: { ($0.first as? String) == work }) != nil, "\(all)")
        #expect(
            signal("ItemDeleted", work, where: { ($0.first as? String) == item }) != nil, "\(all)")
        #expect(
            signal(
                "CollectionDeleted", "/org/freedesktop/secrets",
                where: { ($0.first as? String) == work }) != nil, "\(all)")
        #expect(
            changed(work, "org.freedesktop.Secret.Collection", "Items").last.map {
                ($0 as? [String]) == []
            } == true, "\(all)")
        // Never a property invalidated without its value.
        #expect(
            !lines.contains {
                ($0[0] as? String) == "PropertiesChanged"
                    && ((($0[2] as? [Any])?[2] as? [Any])?.isEmpty == false)
            }, "\(all)")
    }

    /// A secret's content type is kept and given back as stored (libsecret through python-gi
    /// reads it), `text/plain` for one stored without; a collection's label is read/write,
    /// kept across a restart, and its group keeps its name.
    @Test func contentTypesAndCollectionLabelsAreKept() throws {
        let k = try SecretServiceTests.fixture()
        defer { k.close() }
        for (label, type) in [
            ("octets", "application/octet-stream"), ("utf8", "text/plain; charset=utf8"),
            ("none", ""),
        ] {
            let r = k.secretStorageCreate(
                label: label, ["ct": label], secret: Data("v-\(label)".utf8), contentType: type)
            try #require(r.status == 0, "\(r)")
        }
        let reader = """
            import gi
            gi.require_version("Secret", "1")
            from gi.repository import Secret
            service = Secret.Service.get_sync(Secret.ServiceFlags.OPEN_SESSION, None)
            for label in ["octets", "utf8", "none"]:
                items = service.search_sync(None, {"ct": label}, Secret.SearchFlags.LOAD_SECRETS, None)
                value = items[0].get_secret()
                print(label, value.get_content_type(), value.get().decode())
            """
        var r = k.run(Self.systemPython, ["-c", reader])
        #expect(
            r.stdoutText
                == "octets application/octet-stream v-octets\nutf8 text/plain; charset=utf8 v-utf8\nnone text/plain v-none\n",
            "\(r)")
        let stored = try SecretServiceTests.items(k).reduce(into: [String: String]()) {
            $0[$1["label"] as? String ?? ""] = $1["contentType"] as? String ?? "-"
        }
        #expect(
            stored == [
                "octets": "application/octet-stream", "utf8": "text/plain; charset=utf8",
                "none": "-",
            ], "\(stored)")

        // The collection's label: its current value (the group's name) is accepted, then a
        // display name, which stays across a restart; the path still names the group.
        let path = "/org/freedesktop/secrets/collection/user"
        func label() -> String {
            k.run(
                "gdbus",
                [
                    "call", "--session", "--dest", "org.freedesktop.secrets", "--object-path", path,
                    "--method", "org.freedesktop.DBus.Properties.Get",
                    "org.freedesktop.Secret.Collection", "Label",
                ]
            ).stdoutText
        }
        r = Self.setProperty(k, path, "org.freedesktop.Secret.Collection", "Label", "<'user'>")
        #expect(r.status == 0, "\(r)")
        r = Self.setProperty(
            k, "/org/freedesktop/secrets/aliases/default", "org.freedesktop.Secret.Collection",
            "Label", "<'My secrets'>")
        #expect(r.status == 0, "\(r)")
        #expect(label() == "(<'My secrets'>,)\n")
        k.stopVaultd()
        try k.startVaultd(arguments: ["--secret-service"])
        #expect(label() == "(<'My secrets'>,)\n")
        #expect(
            SecretServiceTests.secretTool(k, ["lookup", "ct", "octets"]).stdoutText == "v-octets")
        r = Self.setProperty(k, path, "org.freedesktop.Secret.Collection", "Label", "<''>")
        #expect(
            r.status != 0 && r.stderr.contains("org.freedesktop.DBus.Error.InvalidArgs"), "\(r)")
        r = Self.setProperty(k, path, "org.freedesktop.Secret.Collection", "Label", "<'user'>")
        #expect(r.status == 0 && label() == "(<'user'>,)\n", "\(r)")
    }

    /// A collection's label is what a user typed, so, as an item's attributes
    /// (`KeychainTests.nothingTypedIsStoredInPlaintext`), it appears nowhere in the data
    /// directory's files (vault.sqlite, its WAL and shared memory), neither while vaultd runs
    /// nor after it stopped, nor a label it replaced. Sealed under the metadata key, it reads
    /// as the group's name while the vault has stayed locked since vaultd started, and cannot
    /// be set then (IsLocked); from the first unlock it reads as set, locked again or not.
    @Test func collectionLabelsAreNotStoredInPlaintext() throws {
        let k = try SecretServiceTests.fixture(passphrase: true)
        defer { k.close() }
        let path = "/org/freedesktop/secrets/collection/user"
        func label() -> ProcessResult {
            k.run(
                "gdbus",
                [
                    "call", "--session", "--dest", "org.freedesktop.secrets", "--object-path", path,
                    "--method", "org.freedesktop.DBus.Properties.Get",
                    "org.freedesktop.Secret.Collection", "Label",
                ])
        }
        let replaced = "Wombat-Collection-5519 first label"
        let kept = "Quokka-Collection-7731 label kept"
        // An item too, so the vault's files hold more than the label.
        var r = SecretServiceTests.secretTool(
            k, ["store", "--label=item", "scan", "1"], stdin: "s")
        try #require(r.status == 0, "\(r)")
        for value in [replaced, kept] {
            r = Self.setProperty(
                k, path, "org.freedesktop.Secret.Collection", "Label", "<'\(value)'>")
            try #require(r.status == 0, "\(r)")
        }
        #expect(label().stdoutText == "(<'\(kept)'>,)\n")

        let needles: [(String, Data)] = [
            ("the label", Data(kept.utf8)), ("the replaced label", Data(replaced.utf8)),
        ]
        // The scanner itself finds what is there.
        #expect(PlaintextScan.find(needles, in: Data("..\(kept)..".utf8)) == ["the label"])
        func scan(_ when: String) throws {
            let found = try PlaintextScan.scan(directory: k.dataDirectory, for: needles)
            #expect(
                found.files.contains("vault.sqlite") && found.bytesScanned > 0,
                "\(when): the data directory should hold the vault: \(found.files)")
            #expect(found.hits.isEmpty, "plaintext found \(when): \(found.hits) in \(found.files)")
        }
        try scan("while vaultd runs")
        #expect(k.stopVaultd() == 0)
        try scan("after vaultd stopped")

        // Locked since vaultd started: the group's name, and no label can be set.
        try k.startVaultd(arguments: ["--secret-service"])
        try #require(k.state() == "locked")
        #expect(label().stdoutText == "(<'user'>,)\n")
        r = Self.setProperty(
            k, path, "org.freedesktop.Secret.Collection", "Label", "<'Another label'>")
        #expect(r.status != 0 && r.stderr.contains("org.freedesktop.Secret.Error.IsLocked"), "\(r)")
        // From the first unlock, the label as set; locked again, still.
        r = k.ctl(["unlock", "--passphrase-fd", "3"], fds: SecretServiceTests.passphraseFD)
        try #require(r.status == 0, "\(r)")
        #expect(label().stdoutText == "(<'\(kept)'>,)\n")
        try #require(k.ctl(["lock"]).status == 0)
        #expect(label().stdoutText == "(<'\(kept)'>,)\n")
        try scan("after the restart")
        #expect(k.stopVaultd() == 0)
        try scan("at the end")
    }

    // MARK: an app, probing

    /// A registered app: a copy of Debian's python, given jeepney (pure python, from the
    /// python on PATH) through PYTHONPATH, installed as `appID`. Returns the copy and its
    /// environment.
    static func pythonApp(_ k: KeyringFixture, _ appID: String) throws -> (
        exe: String, env: [String: String]
    ) {
        let found = k.run(
            "python3", ["-c", "import jeepney, os; print(os.path.dirname(jeepney.__file__))"])
        let jeepney = found.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        try #require(found.status == 0 && !jeepney.isEmpty, "\(found)")
        let lib = k.root + "/pylib"
        if access(lib, F_OK) != 0 {
            mkdir(lib, 0o755)
            try FileManager.default.createSymbolicLink(
                atPath: lib + "/jeepney", withDestinationPath: jeepney)
        }
        let dir = k.root + "/" + appID
        mkdir(dir, 0o755)
        let exe = dir + "/python3"
        try FileManager.default.copyItem(
            atPath: URL(fileURLWithPath: systemPython).resolvingSymlinksInPath().path, toPath: exe)
        try #require(k.ctl(["app", "install", appID, "--exe", exe]).status == 0)
        var env = k.environment
        env["PYTHONPATH"] = lib
        return (exe, env)
    }

    /// Every call of a probe, on three objects each: another app's collection and item, and
    /// ones that do not exist. Prints, per call, the reply with the path replaced by `P`.
    /// The start of a python script speaking to vaultd's Secret Service through jeepney on the
    /// session bus: `call(path, interface, method, signature, body)` returns a reply's body,
    /// `root` is the service's path and `session` a plain session opened on it.
    static let jeepneySession = """
        from jeepney import DBusAddress, new_method_call
        from jeepney.io.blocking import open_dbus_connection
        conn = open_dbus_connection(bus="SESSION")
        def call(path, interface, method, signature, body):
            return conn.send_and_get_reply(new_method_call(DBusAddress(path, bus_name="org.freedesktop.secrets", interface=interface), method, signature, body), timeout=20).body
        root = "/org/freedesktop/secrets"
        session = call(root, "org.freedesktop.Secret.Service", "OpenSession", "sv", ("plain", ("s", "")))[1]
        """

    static let probeScript = """
        import json, sys
        from jeepney import DBusAddress, HeaderFields, MessageType, new_method_call
        from jeepney.io.blocking import open_dbus_connection
        conn = open_dbus_connection(bus="SESSION")
        root = "/org/freedesktop/secrets"
        def call(path, interface, method, signature="", body=()):
            m = conn.send_and_get_reply(new_method_call(DBusAddress(path, bus_name="org.freedesktop.secrets", interface=interface), method, signature, body), timeout=20)
            if m.header.message_type == MessageType.error:
                return ["error", m.header.fields[HeaderFields.error_name], list(m.body)]
            return ["reply", list(m.body)]
        session = call(root, "org.freedesktop.Secret.Service", "OpenSession", "sv", ("plain", ("s", "")))[1][1]
        secret = (session, b"", b"x", "text/plain")
        P = "org.freedesktop.DBus.Properties"
        C = "org.freedesktop.Secret.Collection"
        I = "org.freedesktop.Secret.Item"
        def collection_calls(c):
            return {
                "introspect": call(c, "org.freedesktop.DBus.Introspectable", "Introspect"),
                "get-label": call(c, P, "Get", "ss", (C, "Label")),
                "get-items": call(c, P, "Get", "ss", (C, "Items")),
                "get-locked": call(c, P, "Get", "ss", (C, "Locked")),
                "get-created": call(c, P, "Get", "ss", (C, "Created")),
                "getall": call(c, P, "GetAll", "s", (C,)),
                "set-label": call(c, P, "Set", "ssv", (C, "Label", ("s", "mine now"))),
                "search": call(c, C, "SearchItems", "a{ss}", ({},)),
                "create": call(c, C, "CreateItem", "a{sv}(oayays)b", ({"org.freedesktop.Secret.Item.Label": ("s", "probe")}, secret, True)),
                "delete": call(c, C, "Delete"),
            }
        def item_calls(i):
            return {
                "introspect": call(i, "org.freedesktop.DBus.Introspectable", "Introspect"),
                "get-label": call(i, P, "Get", "ss", (I, "Label")),
                "get-attributes": call(i, P, "Get", "ss", (I, "Attributes")),
                "getall": call(i, P, "GetAll", "s", (I,)),
                "set-label": call(i, P, "Set", "ssv", (I, "Label", ("s", "mine now"))),
                "set-attributes": call(i, P, "Set", "ssv", (I, "Attributes", ("a{ss}", {"a": "b"}))),
                "getsecret": call(i, I, "GetSecret", "o", (session,)),
                "setsecret": call(i, I, "SetSecret", "(oayays)", (secret,)),
                "getsecrets": call(root, "org.freedesktop.Secret.Service", "GetSecrets", "aoo", ([i], session)),
                "unlock": call(root, "org.freedesktop.Secret.Service", "Unlock", "ao", ([i],)),
                "delete": call(i, I, "Delete"),
            }
        out = {"collections": call(root, P, "Get", "ss", ("org.freedesktop.Secret.Service", "Collections")),
               "folder": call(root + "/collection", "org.freedesktop.DBus.Introspectable", "Introspect")}
        for name, c, i, group in json.loads(sys.argv[1]):
            calls = {"collection." + k: v for k, v in collection_calls(c).items()}
            calls.update({"item." + k: v for k, v in item_calls(i).items()})
            calls["createcollection"] = call(root, "org.freedesktop.Secret.Service", "CreateCollection", "a{sv}s", ({"org.freedesktop.Secret.Collection.Label": ("s", group)}, ""))
            out[name] = json.loads(json.dumps(calls, default=str).replace(i, "ITEM").replace(c, "COLLECTION"))
        print(json.dumps(out))
        """

    /// An app learns nothing of groups it may not see, by any call: on another app's
    /// collection and item, on a collection that does not exist, and on an item of its own
    /// group that does not exist, every call (Introspect, Properties Get, GetAll and Set,
    /// every Collection and Item method, GetSecrets, Unlock, CreateCollection) answers the
    /// same, error name and message alike, also once the owner has named the other app's
    /// collection; Introspect of the collections' folder lists its own group and `session`,
    /// once each, as Collections does. The other app's item is untouched.
    @Test func anAppLearnsNothingOfGroupsItMayNotSee() throws {
        let k = try SecretServiceTests.fixture()
        defer { k.close() }
        let (probe, env) = try Self.pythonApp(k, "com.example.Probe")
        _ = try Self.pythonApp(k, "com.example.Other")
        // The other app's item, stored by the owner in that app's group.
        let maker = """
            \(Self.jeepneySession)
            c = call(root, "org.freedesktop.Secret.Service", "CreateCollection", "a{sv}s", ({"org.freedesktop.Secret.Collection.Label": ("s", "com.example.Other")}, ""))[0]
            item = call(c, "org.freedesktop.Secret.Collection", "CreateItem", "a{sv}(oayays)b", ({"org.freedesktop.Secret.Item.Label": ("s", "theirs")}, (session, b"", b"their-secret", "text/plain"), False))[0]
            # The owner reads what it sees: every collection and item path named to it.
            call(root, "org.freedesktop.DBus.Properties", "Get", "ss", ("org.freedesktop.Secret.Service", "Collections"))
            call(c, "org.freedesktop.DBus.Properties", "GetAll", "s", ("org.freedesktop.Secret.Collection",))
            print(c, item)
            """
        var r = k.run("python3", ["-c", maker], timeout: 60)
        try #require(r.status == 0, "\(r)")
        let made = r.stdoutText.split(separator: " ").map {
            $0.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let (theirs, theirItem) = (made[0], made[1])
        let id = String(theirItem.split(separator: "/").last!)
        let root = "/org/freedesktop/secrets/collection/"
        let targets: [[String]] = [
            ["theirs", theirs, theirItem, "com.example.Other"],
            [
                "theirs-other-id", theirs, theirs + "/0123456789abcdef0123456789abcdef",
                "com.example.Other",
            ],
            [
                "absent", root + "com_2eexample_2eAbsent", root + "com_2eexample_2eAbsent/" + id,
                "com.example.Absent",
            ],
            [
                "own-absent-item", root + "com_2eexample_2eProbe_2eX",
                root + "com_2eexample_2eProbe/" + id, "com.example.Probe.X",
            ],
        ]
        let json = String(
            decoding: try JSONSerialization.data(withJSONObject: targets), as: UTF8.self)
        let script = k.root + "/probe.py"
        try Self.probeScript.write(toFile: script, atomically: true, encoding: .utf8)
        r = try ChildProcess.run(probe, [script, json], environment: env, timeout: 120)
        try #require(r.status == 0, "\(r)")
        let out = try #require(
            try JSONSerialization.jsonObject(with: r.stdout) as? [String: Any], "\(r)")
        // Its own group and the session collection, once each, in Collections and Introspect.
        let own = [
            "/org/freedesktop/secrets/collection/com_2eexample_2eProbe",
            "/org/freedesktop/secrets/collection/session",
        ]
        let collections =
            (((out["collections"] as? [Any])?.last as? [Any])?.first as? [Any])?.last as? [String]
        #expect(collections == own, "\(out["collections"]!)")
        let folder =
            (((out["folder"] as? [Any])?.last as? [Any])?.first as? String) ?? "\(out["folder"]!)"
        #expect(
            folder.components(separatedBy: "<node name=").count - 1 == 2
                && folder.contains("name=\"com_2eexample_2eProbe\"")
                && folder.contains("name=\"session\""), "\(folder)")
        #expect(!folder.contains("Other"), "\(folder)")
        // Every call answers alike on each target.
        let reference = try #require(out["absent"] as? [String: Any])
        for name in ["theirs", "theirs-other-id", "own-absent-item"] {
            let answers = try #require(out[name] as? [String: Any])
            for (call, answer) in reference.sorted(by: { $0.key < $1.key }) {
                #expect(
                    "\(answers[call] ?? "-")" == "\(answer)",
                    "\(name) \(call): \(answers[call] ?? "-") vs absent \(answer)")
            }
        }
        for (call, answer) in reference.sorted(by: { $0.key < $1.key })
        where call.contains(".get-") || call.hasSuffix(".getall") {
            #expect(
                "\(answer)".contains("org.freedesktop.Secret.Error.NoSuchObject"),
                "\(call): \(answer)")
        }
        // The other app's item is there, unchanged.
        r = k.ctl(["item", "get", "--service", Vault.secretServiceService, "--account", id])
        #expect(r.status == 0 && r.stdoutText == "their-secret", "\(r)")
        #expect(try SecretServiceTests.items(k).map { $0["label"] as? String } == ["theirs"])
    }

    /// Every error the front-end sends has a proper name (org.freedesktop.Secret.Error.* or
    /// org.freedesktop.DBus.Error.*; vaultd's own io.vaultd.Keychain.ItemDamaged for a
    /// damaged item, tested with damaged items), from method calls and property calls alike:
    /// each call here provokes one and names the one expected. GDBus's
    /// `org.gtk.GDBus.UnmappedGError…` is never sent.
    @Test func everyErrorCarriesAProperName() throws {
        let k = try SecretServiceTests.fixture(passphrase: true)
        defer { k.close() }
        var r = SecretServiceTests.secretTool(k, ["store", "--label=mine", "e", "1"], stdin: "v")
        try #require(r.status == 0, "\(r)")
        let script = """
            import json, sys
            from jeepney import DBusAddress, HeaderFields, MessageType, new_method_call
            from jeepney.io.blocking import open_dbus_connection
            conn = open_dbus_connection(bus="SESSION")
            root = "/org/freedesktop/secrets"
            S = "org.freedesktop.Secret.Service"; C = "org.freedesktop.Secret.Collection"; I = "org.freedesktop.Secret.Item"; P = "org.freedesktop.DBus.Properties"
            def call(path, interface, method, signature="", body=()):
                m = conn.send_and_get_reply(new_method_call(DBusAddress(path, bus_name="org.freedesktop.secrets", interface=interface), method, signature, body), timeout=20)
                return m.header.fields[HeaderFields.error_name] if m.header.message_type == MessageType.error else "ok"
            def body(path, interface, method, signature="", body=()):
                return conn.send_and_get_reply(new_method_call(DBusAddress(path, bus_name="org.freedesktop.secrets", interface=interface), method, signature, body), timeout=20).body
            session = body(root, S, "OpenSession", "sv", ("plain", ("s", "")))[1]
            item = sys.argv[2]
            user = root + "/collection/user"
            own = user if sys.argv[1] == "owner" else root + "/collection/com_2eexample_2eErrors"
            gone = body(own, C, "CreateItem", "a{sv}(oayays)b", ({}, (session, b"", b"x", "text/plain"), False))[0]
            body(gone, I, "Delete")
            out = {}
            if sys.argv[1] == "owner":
                out.update({
                  "get-deleted-item": call(gone, P, "Get", "ss", (I, "Label")),
                  "getall-deleted-item": call(gone, P, "GetAll", "s", (I,)),
                  "set-deleted-item": call(gone, P, "Set", "ssv", (I, "Label", ("s", "x"))),
                  "getsecret-deleted-item": call(gone, I, "GetSecret", "o", (session,)),
                  "delete-deleted-item": call(gone, I, "Delete"),
                  "get-unknown-property": call(item, P, "Get", "ss", (I, "Nope")),
                  "set-unknown-property": call(item, P, "Set", "ssv", (I, "Nope", ("s", "x"))),
                  "set-read-only": call(item, P, "Set", "ssv", (I, "Locked", ("b", True))),
                  "set-wrong-type": call(item, P, "Set", "ssv", (I, "Label", ("u", 3))),
                  "get-unknown-interface": call(item, P, "Get", "ss", ("org.example.Nope", "Label")),
                  "unknown-method": call(item, I, "Nope"),
                  "wrong-signature": call(item, I, "GetSecret", "s", ("x",)),
                  "getsecret-no-session": call(item, I, "GetSecret", "o", (root + "/session/s999",)),
                  "open-session-unknown": call(root, S, "OpenSession", "sv", ("nope", ("s", ""))),
                  "too-many-attributes": call(root, S, "SearchItems", "a{ss}", ({str(i): "v" for i in range(65)},)),
                  "plain-secret-with-parameters": call(user, C, "CreateItem", "a{sv}(oayays)b", ({}, (session, b"iv", b"x", "text/plain"), False)),
                  "content-type-too-long": call(user, C, "CreateItem", "a{sv}(oayays)b", ({}, (session, b"", b"x", "t" * 2000), False)),
                  "set-alias-elsewhere": call(root, S, "SetAlias", "so", ("default", root + "/collection/other")),
                  "dismiss-unknown-prompt": call(root + "/prompt/p999", "org.freedesktop.Secret.Prompt", "Dismiss"),
                  "close-unknown-session": call(root + "/session/s999", "org.freedesktop.Secret.Session", "Close"),
                  "collection-label-empty": call(user, P, "Set", "ssv", (C, "Label", ("s", ""))),
                  "collection-label-too-long": call(user, P, "Set", "ssv", (C, "Label", ("s", "l" * 5000))),
                  "session-label": call(root + "/collection/session", P, "Set", "ssv", (C, "Label", ("s", "mine"))),
                  "no-object": call(root + "/nothing/here", P, "Get", "ss", (I, "Label")),
                })
                body(root, S, "Lock", "ao", ([],))
                out["getsecret-locked"] = call(item, I, "GetSecret", "o", (session,))
            else:
                out.update({
                  "lock-as-app": call(root, S, "Lock", "ao", ([],)),
                  "register-prompter-as-app": call(root, "io.vaultd.Secret.Prompting", "RegisterPrompter", "o", ("/org/example/P",)),
                  "get-owners-item": call(item, P, "Get", "ss", (I, "Label")),
                  "getall-owners-collection": call(user, P, "GetAll", "s", (C,)),
                  "set-owners-collection-label": call(user, P, "Set", "ssv", (C, "Label", ("s", "x"))),
                })
            print(json.dumps(out))
            """
        // The app first: the owner's run ends by locking the vault. The app is handed the
        // owner's item path (it cannot search the owner's group).
        let (app, env) = try Self.pythonApp(k, "com.example.Errors")
        let itemPath = try Self.itemPath(k, ["e": "1"])
        r = try ChildProcess.run(
            app, ["-c", script, "app", itemPath], environment: env, timeout: 60)
        try #require(r.status == 0, "\(r)")
        var errors = try #require(
            try JSONSerialization.jsonObject(with: r.stdout) as? [String: String], "\(r)")
        r = k.run("python3", ["-c", script, "owner", itemPath], timeout: 60)
        try #require(r.status == 0, "\(r)")
        errors.merge(
            try #require(
                try JSONSerialization.jsonObject(with: r.stdout) as? [String: String], "\(r)")
        ) { $1 }

        let secret = "org.freedesktop.Secret.Error."
        let dbus = "org.freedesktop.DBus.Error."
        let expected: [String: String] = [
            "get-deleted-item": secret + "NoSuchObject",
            "getall-deleted-item": secret + "NoSuchObject",
            "set-deleted-item": secret + "NoSuchObject",
            "getsecret-deleted-item": secret + "NoSuchObject",
            "delete-deleted-item": secret + "NoSuchObject",
            "getsecret-no-session": secret + "NoSession",
            "dismiss-unknown-prompt": secret + "NoSuchObject",
            "close-unknown-session": secret + "NoSuchObject",
            "getsecret-locked": secret + "IsLocked",
            "open-session-unknown": dbus + "NotSupported",
            "set-alias-elsewhere": dbus + "NotSupported", "session-label": dbus + "NotSupported",
            "too-many-attributes": dbus + "InvalidArgs",
            "plain-secret-with-parameters": dbus + "InvalidArgs",
            "content-type-too-long": dbus + "InvalidArgs",
            "collection-label-empty": dbus + "InvalidArgs",
            "collection-label-too-long": dbus + "InvalidArgs",
            "wrong-signature": dbus + "InvalidArgs", "set-wrong-type": dbus + "InvalidArgs",
            "lock-as-app": dbus + "AccessDenied", "register-prompter-as-app": dbus + "AccessDenied",
            "get-owners-item": secret + "NoSuchObject",
            "getall-owners-collection": secret + "NoSuchObject",
            "set-owners-collection-label": secret + "NoSuchObject",
            "unknown-method": dbus + "UnknownMethod",
        ]
        for (call, name) in expected {
            #expect(errors[call] == name, "\(call): \(errors[call] ?? "none")")
        }
        // GDBus's own checks (an unknown property or interface, a read-only one, a path that
        // is no object) answer with names of org.freedesktop.DBus.Error too.
        for call in [
            "get-unknown-property", "set-unknown-property", "set-read-only",
            "get-unknown-interface", "no-object",
        ] {
            #expect(errors[call]?.hasPrefix(dbus) == true, "\(call): \(errors[call] ?? "none")")
        }
        #expect(errors.count == expected.count + 5, "\(errors.keys.sorted())")
        for (call, name) in errors {
            #expect(
                (name.hasPrefix(secret) || name.hasPrefix(dbus)) && !name.contains("Unmapped"),
                "\(call): \(name)")
        }
    }
}
