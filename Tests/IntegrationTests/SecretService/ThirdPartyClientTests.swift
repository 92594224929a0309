import Foundation
import Testing

/// The reference third-party client (`python3 -m varlink.cli`, the `varlink` Python package)
/// against vaultd. Its CLI exits 0 even when the reply is an error, so the output is checked.
@Suite struct ThirdPartyClientTests {
    static let interfaces = [
        "org.varlink.service", "io.vaultd.Vault", "io.vaultd.Keychain", "io.vaultd.Preferences",
        "io.vaultd.Caches", "io.vaultd.Apps", "io.vaultd.Sync",
    ]

    @Test func infoListsTheInterfaces() throws {
        let d = try Daemon()
        defer { d.close() }
        let r = d.run("python3", ["-m", "varlink.cli", "info", "unix:" + d.socketPath])
        #expect(r.status == 0, "\(r)")
        #expect(!r.stderr.contains("Traceback"), "\(r)")
        let listed = Set(
            r.stdoutText.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) })
        for name in Self.interfaces {
            #expect(listed.contains(name), "info does not list \(name): \(r.stdoutText)")
        }
        #expect(r.stdoutText.contains("Vendor: vaultd"), "\(r)")
    }

    @Test func statusAnswersWithALockObject() throws {
        let d = try Daemon()
        defer { d.close() }
        let before = try statusLock(d)
        #expect(before?["state"] as? String == "uninitialized")
        #expect(before?["hasPassphrase"] as? Bool == false)

        try #require(d.initialize().status == 0)
        let after = try statusLock(d)
        #expect(after?["state"] as? String == "unlocked")
        #expect(after?["hasPassphrase"] as? Bool == true)
        #expect(after?["unlockedSinceStart"] as? Bool == true)
    }

    /// `python3 -m varlink.cli call unix:SOCK/io.vaultd.Vault.Status '{}'` → the `lock` object.
    private func statusLock(_ d: Daemon) throws -> [String: Any]? {
        let r = d.run(
            "python3",
            ["-m", "varlink.cli", "call", "unix:\(d.socketPath)/io.vaultd.Vault.Status", "{}"])
        #expect(r.status == 0, "\(r)")
        #expect(!r.stderr.contains("Traceback") && !r.stderr.contains("Error"), "\(r)")
        let json = try? JSONSerialization.jsonObject(with: r.stdout) as? [String: Any]
        #expect(json != nil, "Status output is not a JSON object: \(r)")
        #expect(json?["error"] == nil, "\(r)")
        let lock = json?["lock"] as? [String: Any]
        #expect(lock != nil, "no lock object in \(r.stdoutText)")
        return lock
    }

    /// `varlink.cli help` fetches each interface's description and parses it with the
    /// package's IDL parser (a parse error is a traceback and a non-zero exit).
    @Test(arguments: interfaces) func helpParsesTheInterface(_ name: String) throws {
        let d = try Daemon()
        defer { d.close() }
        let r = d.run("python3", ["-m", "varlink.cli", "help", "unix:\(d.socketPath)/\(name)"])
        #expect(r.status == 0, "\(r)")
        #expect(!r.stderr.contains("Traceback"), "\(r)")
        #expect(r.stdoutText.contains("interface \(name)"), "\(r)")
    }

    /// python varlink's typed client calls a method through the parsed interface, which
    /// keeps types and methods in one namespace: a type named like a method (Caches had
    /// `type Usage` and `method Usage`) made the call fail.
    @Test func theTypedClientCallsMethodsOfEveryInterface() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        let script = """
            import sys, varlink
            client = varlink.Client.new_with_address(sys.argv[1])
            with client.open("io.vaultd.Caches") as c: print("caches", len(c.Usage()["apps"]))
            with client.open("io.vaultd.Vault") as v: print("vault", v.Status()["lock"]["state"])
            with client.open("io.vaultd.Apps") as a: print("apps", len(a.List()["apps"]))
            with client.open("io.vaultd.Preferences") as p: print("domains", len(p.Domains()["domains"]))
            """
        let r = d.run("python3", ["-c", script, "unix:" + d.socketPath])
        #expect(r.status == 0 && !r.stderr.contains("Traceback"), "\(r)")
        #expect(r.stdoutText == "caches 0\nvault unlocked\napps 0\ndomains 0\n", "\(r)")
    }

    /// Every error reply carries exactly the parameters its interface declares, as python
    /// varlink parses the interface vaultd serves: no undeclared field, every non-optional
    /// one present. org.varlink.service's errors are the standard ones (`ExpectedMore ()`,
    /// `InvalidParameter (parameter: string)`, ...): vaultd sent its human `message` inside
    /// their parameters, which a typed client built from the standard interface cannot take
    /// (ExpectedMore has none). What vaultd adds beyond the declaration travels as a vendor
    /// extension of the reply (`"io.vaultd": {"message": ...}`, varlink.org/Method-Call).
    @Test func errorRepliesCarryTheirDeclaredParameters() throws {
        let d = try Daemon()
        defer { d.close() }
        let script = #"""
            import json, socket, sys, varlink
            from varlink.scanner import _Struct, _Maybe, _Error
            s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.settimeout(10)
            buf = b""
            def call(method, parameters=None, **flags):
                global buf
                m = dict(method=method, **flags)
                if parameters is not None: m["parameters"] = parameters
                s.sendall(json.dumps(m).encode() + b"\0")
                while b"\0" not in buf:
                    chunk = s.recv(65536)
                    if not chunk: raise SystemExit("closed after " + method)
                    buf += chunk
                frame, _, buf = buf.partition(b"\0")
                return json.loads(frame)
            interfaces = {}
            for name in call("org.varlink.service.GetInfo")["parameters"]["interfaces"]:
                text = call("org.varlink.service.GetInterfaceDescription", {"interface": name})["parameters"]["description"]
                interfaces[name] = varlink.Interface(text)
            calls = [
                ("io.vaultd.NoSuch.Status", {}, {}), ("io.vaultd.Vault.NoSuch", {}, {}),
                ("io.vaultd.Vault.Status", {"bogus": 1}, {}), ("org.varlink.service.GetInterfaceDescription", {}, {}),
                ("org.varlink.service.GetInterfaceDescription", {"interface": "io.vaultd.NoSuch"}, {}),
                ("io.vaultd.Preferences.Get", {"domain": "com.example.a", "key": 5}, {}),
                ("io.vaultd.Preferences.Observe", {}, {}), ("io.vaultd.Vault.Observe", {}, {}),
                ("io.vaultd.Preferences.Observe", {"domains": [5]}, {"more": True}),
                ("io.vaultd.Keychain.Add", {"class": "genericPassword", "attributes": {"account": "a"}, "data": "eA=="}, {}),
                ("io.vaultd.Vault.Lock", {}, {}), ("io.vaultd.Apps.Show", {"appID": "org.example.None"}, {}),
                ("io.vaultd.Preferences.Set", {"domain": "", "key": "k", "value": {"integer": 1}}, {}),
                ("io.vaultd.Keychain.CopyMatching", {"matchLimit": "two"}, {}),
            ]
            for method, parameters, flags in calls:
                r = call(method, parameters, **flags)
                error = r.get("error")
                if not error:
                    print("no error:", method, r); continue
                interface, _, member = error.rpartition(".")
                declared = interfaces.get(interface) and interfaces[interface].members.get(member)
                if not isinstance(declared, _Error):
                    print("undeclared error", error, "for", method); continue
                fields = declared.type.fields if isinstance(declared.type, _Struct) else {}
                got = r.get("parameters") or {}
                extra = sorted(set(got) - set(fields))
                missing = sorted(k for k, t in fields.items() if not isinstance(t, _Maybe) and got.get(k) is None)
                if extra or missing:
                    print(error, "for", method, "undeclared:", extra, "missing:", missing)
                if not (r.get("io.vaultd") or got).get("message"):
                    print(error, "for", method, "without a message")
            print("checked", len(calls))
            """#
        let r = d.run("python3", ["-c", script, d.socketPath])
        #expect(r.status == 0 && !r.stderr.contains("Traceback"), "\(r)")
        #expect(r.stdoutText == "checked 14\n", "\(r.stdoutText)")
    }

    /// The parsed interfaces hold the members docs/protocol.md names (so the whole text
    /// parsed, not just its first line).
    @Test func parsedInterfacesHaveTheirMembers() throws {
        let d = try Daemon()
        defer { d.close() }
        let script = """
            import sys, varlink
            client = varlink.Client.new_with_address(sys.argv[1])
            for name in sys.argv[2:]:
                interface = client.get_interface(name)
                print(interface.name + ":" + ",".join(interface.members))
            """
        let r = d.run("python3", ["-c", script, "unix:" + d.socketPath] + Self.interfaces)
        #expect(r.status == 0, "\(r)")
        var members: [String: Set<String>] = [:]
        for line in r.stdoutText.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 1).map(String.init)
            if parts.count == 2 {
                members[parts[0]] = Set(parts[1].split(separator: ",").map(String.init))
            }
        }
        let expected: [String: [String]] = [
            "org.varlink.service": [
                "GetInfo", "GetInterfaceDescription", "MethodNotFound", "InterfaceNotFound",
                "InvalidParameter",
            ],
            "io.vaultd.Vault": [
                "Hello", "Status", "Init", "Unlock", "Lock", "ChangePassphrase", "Observe",
                "LockState", "AuthFailed",
            ],
            "io.vaultd.Keychain": [
                "Add", "CopyMatching", "Update", "Delete", "DuplicateItem", "ItemNotFound",
                "InteractionNotAllowed",
            ],
            "io.vaultd.Preferences": [
                "Get", "Set", "Remove", "Domain", "Domains", "Import", "Export",
                "InvalidPropertyList",
            ],
            "io.vaultd.Caches": ["Directory", "Usage", "Purge", "Observe", "AppUsage"],
            "io.vaultd.Apps": ["Install", "Uninstall", "List", "Show"],
            "io.vaultd.Sync": ["Init", "Join", "Approve", "Status", "Leave", "SyncDevice"],
        ]
        for (interface, names) in expected {
            let have = members[interface] ?? []
            for n in names {
                #expect(
                    have.contains(n),
                    "\(interface) lacks \(n) as parsed by python varlink: \(r.stdoutText)")
            }
        }
    }
}
