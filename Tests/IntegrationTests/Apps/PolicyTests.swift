import Foundation
import Testing
import VaultCore
import VaultProtocol
import vaultd

#if canImport(Glibc)
import Glibc
#endif

/// The policy through the real socket, for every method of every interface (not a chosen
/// few): an app calling an owner-only method is refused with PermissionDenied, and a
/// connection made before its app's uninstall gets MissingEntitlement from every method that
/// touches the vault. What each method is comes from the policy's table, which
/// `PolicyTableTests` holds to the interface descriptions.
@Suite struct PolicyTests {
    static let app = "org.example.Raw"
    static let permissionDenied = "io.vaultd.Vault.PermissionDenied"
    static let missingEntitlement = "io.vaultd.Keychain.MissingEntitlement"

    /// Parameters that make each method a well-formed call by the app (so a refusal is the
    /// policy's, not the parameters'). A method missing here fails the test: a new method
    /// joins the loop when it joins an interface.
    static var parameters: [String: [String: Any]] {
        [
            "org.varlink.service.GetInfo": [:],
            "org.varlink.service.GetInterfaceDescription": ["interface": "io.vaultd.Vault"],
            "io.vaultd.Vault.Hello": [:],
            "io.vaultd.Vault.Status": [:],
            "io.vaultd.Vault.Init": ["passphrase": "guess"],
            "io.vaultd.Vault.Unlock": ["passphrase": "guess"],
            "io.vaultd.Vault.UnlockFromKeyring": [:],
            "io.vaultd.Vault.Lock": [:],
            "io.vaultd.Vault.ChangePassphrase": ["old": "guess", "new": "other"],
            "io.vaultd.Vault.CreateRecoveryKey": ["passphrase": "guess"],
            "io.vaultd.Vault.RemoveRecoveryKey": [:],
            "io.vaultd.Vault.UnlockWithRecoveryKey": ["recoveryKey": "guess"],
            "io.vaultd.Vault.ResetPassphrase": ["recoveryKey": "guess", "new": "other"],
            "io.vaultd.Vault.Observe": [:],
            "io.vaultd.Vault.Backup": [
                "path": "/tmp/policy-test-backup.age", "passphrase": "guess",
            ],
            "io.vaultd.Vault.Restore": [
                "path": "/tmp/policy-test-backup.age", "passphrase": "guess",
            ],
            "io.vaultd.Vault.Check": [:],
            "io.vaultd.Keychain.Add": [
                "class": "genericPassword", "attributes": ["service": "p", "account": "p"],
                "data": "eg==",
            ],
            "io.vaultd.Keychain.CopyMatching": [
                "class": "genericPassword", "query": ["service": "p"], "returnData": true,
            ],
            "io.vaultd.Keychain.Update": [
                "class": "genericPassword", "query": ["service": "p"], "attributes": ["label": "x"],
            ],
            "io.vaultd.Keychain.Delete": ["class": "genericPassword", "query": ["service": "p"]],
            "io.vaultd.Keychain.ListAccess": [:],
            "io.vaultd.Keychain.GrantAccess": [
                "program": "/usr/bin/true", "class": "genericPassword", "query": ["service": "p"],
            ],
            "io.vaultd.Keychain.RevokeAccess": [:],
            "io.vaultd.Preferences.Get": ["key": "k"],
            "io.vaultd.Preferences.Set": ["key": "k", "value": ["string": "v"]],
            "io.vaultd.Preferences.Remove": ["key": "k"],
            "io.vaultd.Preferences.Domain": [:],
            "io.vaultd.Preferences.Domains": [:],
            "io.vaultd.Preferences.Import": ["domain": app, "values": ["k": ["string": "v"]]],
            "io.vaultd.Preferences.Export": ["domain": app],
            "io.vaultd.Preferences.Observe": [:],
            "io.vaultd.Preferences.RemoveDomain": ["domain": app],
            "io.vaultd.Caches.Directory": [:],
            "io.vaultd.Caches.Usage": [:],
            "io.vaultd.Caches.Purge": [:],
            "io.vaultd.Caches.Observe": [:],
            "io.vaultd.Apps.Install": [
                "appID": "org.example.Other", "executable": "/usr/bin/true",
            ],
            "io.vaultd.Apps.Uninstall": ["appID": app],
            "io.vaultd.Apps.List": [:],
            "io.vaultd.Apps.Show": ["appID": app],
            "io.vaultd.Sync.Init": ["folder": "/tmp"],
            "io.vaultd.Sync.Join": ["folder": "/tmp"],
            "io.vaultd.Sync.Approve": ["code": "00"],
            "io.vaultd.Sync.Status": [:],
            "io.vaultd.Sync.Leave": [:],
            "io.vaultd.Sync.Remove": ["device": "00"],
            "io.vaultd.Sync.Conflicts": [:],
            "io.vaultd.Sync.RestoreConflict": ["id": "00"],
            "io.vaultd.Sync.DismissConflict": ["id": "00"],
        ]
    }

    /// Every declared method, in a fixed order, with its policy decision.
    static var methods: [(name: String, decision: MethodOperation?)] {
        VarlinkInterfaces.inputParameters.keys.sorted().map {
            ($0, VarlinkOperations.of($0))
        }
    }

    static func audience(_ d: MethodOperation?) -> VaultCore.Operation.Audience? {
        if case .operation(let k)? = d { return k.audience }
        return nil
    }

    /// A python app (a copy of python3 registered as `app`) that connects, says Hello and
    /// prints "ready"; once the file argv[2] exists it makes each call listed in argv[3] (a
    /// JSON file of [method, parameters, more]) on that one connection and prints
    /// {"method": …, "reply": …} for each reply.
    static let script = AppsTests.rawClientScript(
        imports: "json, os, socket, sys, time",
        """
        print(json.dumps(call("io.vaultd.Vault.Hello", {})), flush=True)
        print("ready", flush=True)
        while not os.path.exists(sys.argv[2]): time.sleep(0.02)
        for m, p, more in json.load(open(sys.argv[3])):
            msg = {"method": m, "parameters": p}
            if more: msg["more"] = True
            s.sendall(json.dumps(msg).encode() + b'\\0')
            while b'\\0' not in buf: buf += s.recv(65536)
            reply, _, buf = buf.partition(b'\\0')
            print(json.dumps({"method": m, "reply": json.loads(reply)}), flush=True)
        """)

    /// Runs `calls` as the app on a connection made before `before` runs; the replies by method.
    static func run(
        _ d: Daemon, python: String, _ name: String, _ calls: [(String, Bool)],
        before: () throws -> Void
    ) throws -> [String: [String: Any]] {
        let list = d.root + "/\(name).json"
        let out = d.root + "/\(name).out"
        let go = d.root + "/\(name).go"
        let json = calls.map { [$0.0, parameters[$0.0] ?? [:], $0.1] as [Any] }
        try JSONSerialization.data(withJSONObject: json).write(to: URL(fileURLWithPath: list))
        let pid = try ChildProcess.spawn(
            python, ["-c", script, d.socketPath, go, list], environment: d.environment, inputs: [:],
            stdout: .file(out, append: false),
            stderr: .file(out + ".err", append: false))
        let ready = eventually(timeout: 10) {
            (try? String(contentsOfFile: out, encoding: .utf8))?.contains("ready") == true
        }
        #expect(
            ready,
            "the app did not connect: \((try? String(contentsOfFile: out + ".err", encoding: .utf8)) ?? "")"
        )
        try before()
        _ = FileManager.default.createFile(atPath: go, contents: Data())
        if ChildProcess.wait(pid, timeout: 30) == nil {
            kill(pid, SIGKILL)
            _ = ChildProcess.wait(pid, timeout: 5)
        }
        let text = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        var replies: [String: [String: Any]] = [:]
        for line in text.split(separator: "\n").dropFirst(2) {
            guard
                let o = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                let m = o["method"] as? String,
                let r = o["reply"] as? [String: Any]
            else { continue }
            replies[m] = r
        }
        #expect(
            replies.count == calls.count,
            "\(name): \(text) \((try? String(contentsOfFile: out + ".err", encoding: .utf8)) ?? "")"
        )
        return replies
    }

    /// Whether `method` streams its replies (is called with `more`): the Observe methods.
    static func streams(_ method: String) -> Bool { method.hasSuffix(".Observe") }

    @Test func everyMethodHasSampleParameters() {
        for (m, _) in Self.methods {
            #expect(
                Self.parameters[m] != nil, "no sample parameters for \(m): add them to PolicyTests")
        }
    }

    /// An installed app calling each owner-only method gets PermissionDenied, and nothing
    /// happens (the vault stays without a passphrase, no app is registered).
    @Test func anAppCallingAnyOwnerOnlyMethodIsRefused() throws {
        let d = try AppsTests.daemon()
        defer { d.close() }
        let python = try AppsTests.rawPythonApp(d)
        try d.install(Self.app, exe: python)
        let ownerOnly = Self.methods.filter { Self.audience($0.decision) == .owner }.map(\.name)
        #expect(ownerOnly.count == 29, "\(ownerOnly)")
        let replies = try Self.run(d, python: python, "owner-only", ownerOnly.map { ($0, false) }) {
        }
        for m in ownerOnly {
            #expect(
                replies[m]?["error"] as? String == Self.permissionDenied,
                "\(m): \(replies[m] ?? [:])")
        }
        #expect(d.statusJSON()?["hasPassphrase"] as? Bool == false)
        #expect(d.appShow("org.example.Other") == nil)
    }

    /// A connection made before its app was uninstalled: every method but the service's own
    /// description is refused, MissingEntitlement for those that touch the vault (streaming
    /// ones included, before their first reply), PermissionDenied for the owner's.
    @Test func anEarlierInstallsConnectionIsRefusedEveryMethod() throws {
        let d = try AppsTests.daemon()
        defer { d.close() }
        let python = try AppsTests.rawPythonApp(d)
        try d.install(Self.app, exe: python)
        #expect(d.ctl(["defaults", "write", Self.app, "kept", "yes"]).status == 0)
        let calls = Self.methods.map { ($0.name, Self.streams($0.name)) }
        let replies = try Self.run(d, python: python, "stale", calls) {
            #expect(d.ctl(["app", "uninstall", Self.app]).status == 0)
        }
        var touched = 0
        for (m, decision) in Self.methods {
            let reply = replies[m] ?? [:]
            switch Self.audience(decision) {
            case .owner?:
                #expect(reply["error"] as? String == Self.permissionDenied, "\(m): \(reply)")
            case .admitted?:
                touched += 1
                #expect(reply["error"] as? String == Self.missingEntitlement, "\(m): \(reply)")
                #expect(reply["continues"] == nil, "\(m) streamed to an earlier install: \(reply)")
            case nil: #expect(reply["error"] == nil && reply["parameters"] != nil, "\(m): \(reply)")
            }
        }
        #expect(touched == 19, "methods that touch the vault: \(touched)")
        // Nothing came back to life: the uninstall removed the domain; no Set or Import re-made it.
        #expect(d.ctl(["defaults", "read", Self.app]).stdoutText.isEmpty)
    }
}
