import Foundation
import Testing

/// The reference third-party client (`python3 -m varlink.cli`, the `varlink` Python package)
/// against vaultd. Its CLI exits 0 even when the reply is an error, so the output is checked.
@Suite struct ThirdPartyClientTests {
    static let interfaces = ["org.varlink.service", "io.vaultd.Vault", "io.vaultd.Keychain", "io.vaultd.Preferences", "io.vaultd.Caches", "io.vaultd.Apps"]

    @Test func infoListsTheInterfaces() throws {
        let d = try Daemon()
        defer { d.close() }
        let r = d.run("python3", ["-m", "varlink.cli", "info", "unix:" + d.socketPath])
        #expect(r.status == 0, "\(r)")
        #expect(!r.stderr.contains("Traceback"), "\(r)")
        let listed = Set(r.stdoutText.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) })
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
        let r = d.run("python3", ["-m", "varlink.cli", "call", "unix:\(d.socketPath)/io.vaultd.Vault.Status", "{}"])
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

    /// The parsed interfaces hold the members DESIGN §3 names (so the whole text parsed, not
    /// just its first line).
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
            if parts.count == 2 { members[parts[0]] = Set(parts[1].split(separator: ",").map(String.init)) }
        }
        let expected: [String: [String]] = [
            "org.varlink.service": ["GetInfo", "GetInterfaceDescription", "MethodNotFound", "InterfaceNotFound", "InvalidParameter"],
            "io.vaultd.Vault": ["Hello", "Status", "Init", "Unlock", "Lock", "ChangePassphrase", "Observe", "LockState", "AuthFailed"],
            "io.vaultd.Keychain": ["Add", "CopyMatching", "Update", "Delete", "DuplicateItem", "ItemNotFound", "InteractionNotAllowed"],
            "io.vaultd.Preferences": ["Get", "Set", "Remove", "Domain", "Domains", "Import", "Export", "InvalidPropertyList"],
            "io.vaultd.Caches": ["Directory", "Usage", "Purge", "Observe", "AppUsage"],
            "io.vaultd.Apps": ["Install", "Uninstall", "List", "Show"],
        ]
        for (interface, names) in expected {
            let have = members[interface] ?? []
            for n in names { #expect(have.contains(n), "\(interface) lacks \(n) as parsed by python varlink: \(r.stdoutText)") }
        }
    }
}
