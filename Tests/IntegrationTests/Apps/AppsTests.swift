import Foundation
import TestSupport
import Testing
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Apps, identity and install state (docs/apps.md), through the real socket: copies of
/// vault-example at different paths are different apps; a sandbox (bubblewrap with a
/// `/.flatpak-info`) is identified by its Flatpak ID; a peer of another uid is refused.
@Suite struct AppsTests {
    static let appA = "org.example.A"
    static let appB = "org.example.B"
    static let appC = "org.example.C"
    static let tokenFilter = ["--service", "token", "--account", "token"]
    static let missingEntitlement = "io.vaultd.Keychain.MissingEntitlement"

    /// A daemon with a vault (no passphrase: always unlocked), started with `config` as its
    /// config.plist when given.
    static func daemon(config: [String: Any]? = nil) throws -> Daemon {
        let d = try Daemon(start: false)
        do { try d.start(config: config) } catch {
            d.close()
            throw error
        }
        let i = d.ctl(["init", "--no-passphrase"])
        guard i.status == 0 else {
            d.close()
            throw HarnessError("init failed: \(i)")
        }
        return d
    }

    /// Asserts that an app's command was refused with MissingEntitlement (-34018).
    static func expectMissingEntitlement(
        _ r: ProcessResult, _ what: String, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(r.status == 77, "\(what): \(r)", sourceLocation: sourceLocation)
        #expect(
            r.stderr.contains(missingEntitlement), "\(what): \(r)", sourceLocation: sourceLocation)
        #expect(r.stderr.contains("-34018"), "\(what): \(r)", sourceLocation: sourceLocation)
        #expect(r.stdout.isEmpty, "\(what) printed something: \(r)", sourceLocation: sourceLocation)
    }

    /// A copy of python3 at `apps/raw/python3` under the daemon's root: an executable of its
    /// own, to register as an app and run a raw varlink client with.
    static func rawPythonApp(_ d: Daemon) throws -> String {
        let dir = d.root + "/apps/raw"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let python = dir + "/python3"
        try FileManager.default.copyItem(
            atPath: URL(fileURLWithPath: "/usr/bin/python3").resolvingSymlinksInPath().path,
            toPath: python)
        return python
    }

    /// A raw varlink client in python: `import IMPORTS`, a connection to argv[1] and
    /// `call(method, params)` (send one message, return the next reply), then `body`.
    static func rawClientScript(imports: String, _ body: String) -> String {
        let prelude = """
            import \(imports)
            s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); buf = b''
            def call(method, params):
                global buf
                s.sendall(json.dumps({"method": method, "parameters": params}).encode() + b'\\0')
                while b'\\0' not in buf: buf += s.recv(65536)
                msg, _, buf = buf.partition(b'\\0')
                return json.loads(msg)
            """
        return prelude + "\n" + body
    }

    // MARK: Identity by executable path

    @Test func anotherAppCannotReadUpdateDeleteOrListAnAppsToken() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        let b = try d.placeExample("b")
        try d.install(Self.appA, exe: a)
        try d.install(Self.appB, exe: b)
        #expect(try d.launch(a).appID == Self.appA)
        #expect(
            try d.launch(b).appID == Self.appB, "the same binary at another path is another app")

        let set = d.app(a, ["token", "set"], stdin: Data("token-of-A".utf8))
        try #require(set.status == 0, "\(set)")
        #expect(d.app(a, ["token", "get"]).stdoutText == "token-of-A")

        let group = ["--access-group", Self.appA] + Self.tokenFilter
        Self.expectMissingEntitlement(d.app(b, ["item", "get"] + group), "B reads A's token")
        Self.expectMissingEntitlement(
            d.app(b, ["item", "update"] + group, stdin: Data("hijacked".utf8)),
            "B updates A's token")
        Self.expectMissingEntitlement(d.app(b, ["item", "delete"] + group), "B deletes A's token")
        Self.expectMissingEntitlement(
            d.app(b, ["item", "list", "--access-group", Self.appA]), "B lists A's group")
        Self.expectMissingEntitlement(
            d.app(
                b,
                [
                    "item", "add", "--access-group", Self.appA, "--service", "planted", "--account",
                    "x",
                ], stdin: Data("p".utf8)),
            "B adds into A's group")

        // Without naming a group, B sees only its own groups: nothing of A's.
        let list = d.app(b, ["item", "list"])
        #expect(
            !list.stdoutText.contains(Self.appA) && !list.stdoutText.contains("token"), "\(list)")
        let own = d.app(b, ["token", "get"])
        #expect(
            own.status == 44 && own.stderr.contains("io.vaultd.Keychain.ItemNotFound"), "\(own)")
        #expect(!own.stdoutText.contains("token-of-A"))

        // A's token is unchanged, and nothing was planted in A's group.
        #expect(d.app(a, ["token", "get"]).stdoutText == "token-of-A")
        let owner = d.ctl(["item", "list", "--access-group", Self.appA])
        #expect(owner.status == 0, "\(owner)")
        #expect(owner.stdoutText.split(separator: "\n").count == 1, "\(owner)")
        #expect(!owner.stdoutText.contains("planted"), "\(owner)")
    }

    @Test func aSharedAccessGroupOrAppGroupIsReadableByBothMembersOnly() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        let b = try d.placeExample("b")
        let c = try d.placeExample("c")
        let shared = [
            "--access-group", "com.example.shared", "--app-group", "group.org.example.suite",
        ]
        try d.install(Self.appA, exe: a, shared)
        try d.install(Self.appB, exe: b, shared)
        try d.install(Self.appC, exe: c)

        for group in ["com.example.shared", "group.org.example.suite"] {
            let item = ["--access-group", group, "--service", "svc", "--account", "acct"]
            let add = d.app(a, ["item", "add"] + item, stdin: Data("shared in \(group)".utf8))
            try #require(add.status == 0, "\(add)")
            let byB = d.app(b, ["item", "get"] + item)
            #expect(byB.status == 0, "\(byB)")
            #expect(byB.stdoutText == "shared in \(group)")
            let byA = d.app(a, ["item", "get"] + item)
            #expect(byA.stdoutText == "shared in \(group)")
            Self.expectMissingEntitlement(
                d.app(c, ["item", "get"] + item), "C (not a member) reads \(group)")
        }
        // B may update the shared item, and A sees the change.
        let item = [
            "--access-group", "com.example.shared", "--service", "svc", "--account", "acct",
        ]
        #expect(d.app(b, ["item", "update"] + item, stdin: Data("updated by B".utf8)).status == 0)
        #expect(d.app(a, ["item", "get"] + item).stdoutText == "updated by B")
    }

    @Test func anUnregisteredProcessGetsNoAppIdentityWhateverItSends() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        let unregistered = try d.placeExample("unregistered")  // the same bytes as A, another path
        try d.install(Self.appA, exe: a)
        #expect(d.app(a, ["token", "set"], stdin: Data("A".utf8)).status == 0)
        #expect(d.app(a, ["defaults", "set", "colour", "blue"]).status == 0)

        let launch = try d.launch(unregistered)
        #expect(launch.appID == nil, "\(launch)")
        #expect(launch.generation == nil && !launch.firstLaunch && launch.wiped == 0, "\(launch)")
        // It has no app tier: no cache directory or preferences domain of its own.
        let cache = d.app(unregistered, ["cache", "path"])
        #expect(cache.status != 0 && !cache.stdoutText.contains(Self.appA), "\(cache)")
        let prefs = d.app(unregistered, ["defaults", "get", "colour"])
        #expect(prefs.status != 0 && !prefs.stdoutText.contains("blue"), "\(prefs)")

        // Nothing it sends makes it an app: Hello takes no parameters, and a claimed app ID
        // changes nothing on the connection.
        let c = try d.connect()
        for params: [String: Any] in [
            ["appID": Self.appA], ["appID": Self.appA, "generation": "x", "executable": a],
            ["flatpak": Self.appA],
        ] {
            let claim = try c.call("io.vaultd.Vault.Hello", params)
            #expect(
                claim.errorName == "org.varlink.service.InvalidParameter"
                    || claim.parameters?["appID"] is NSNull, "\(claim)")
        }
        let hello = try c.call("io.vaultd.Vault.Hello", [:])
        #expect(hello.errorName == nil, "\(hello)")
        #expect(hello.parameters?["appID"] is NSNull, "\(hello)")
        #expect(hello.parameters?["firstLaunch"] as? Bool == false, "\(hello)")
        let dir = try c.call("io.vaultd.Caches.Directory", [:])
        #expect(dir.errorName != nil, "the owner must name an app: \(dir)")
        let get = try c.call("io.vaultd.Preferences.Get", ["key": "colour"])
        #expect(get.errorName != nil, "the owner must name a domain: \(get)")
        // An Add without a group goes to the owner's group `user`, never to A's.
        let add = try c.call(
            "io.vaultd.Keychain.Add",
            [
                "class": "genericPassword", "attributes": ["service": "s", "account": "u"],
                "data": Data("x".utf8).base64EncodedString(),
            ])
        #expect(
            (add.parameters?["attributes"] as? [String: Any])?["accessGroup"] as? String == "user",
            "\(add)")

        // After uninstall, A's own executable is unidentified as well.
        #expect(d.ctl(["app", "uninstall", Self.appA]).status == 0)
        #expect(try d.launch(a).appID == nil)
    }

    // MARK: Install state

    @Test func reinstallWipesLeftoverCredentialsOnItsFirstLaunch() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        let installed = try d.install(Self.appA, exe: a)
        let first = try d.launch(a)
        #expect(first.appID == Self.appA && first.firstLaunch && first.wiped == 0, "\(first)")
        #expect(first.generation == installed["generation"] as? String)
        #expect(try d.launch(a).firstLaunch == false)

        #expect(d.app(a, ["token", "set"], stdin: Data("tok-1".utf8)).status == 0)
        #expect(d.app(a, ["defaults", "set", "colour", "blue"]).status == 0)
        let cachePath = d.app(a, ["cache", "path"]).stdoutText.trimmingCharacters(in: .newlines)
        #expect(d.app(a, ["cache", "write", "blob", "4096"]).status == 0)
        #expect(FileManager.default.fileExists(atPath: cachePath + "/blob"), "\(cachePath)")
        #expect(d.ctl(["defaults", "read", Self.appA, "colour"]).stdoutText == "blue\n")

        let uninstall = d.ctl(["app", "uninstall", Self.appA])
        #expect(uninstall.status == 0, "\(uninstall)")
        #expect(d.appShow(Self.appA)?["installed"] as? Bool == false)
        // Preferences and cache are gone; the token row stays.
        let prefs = d.ctl(["defaults", "read", Self.appA, "colour"])
        #expect(prefs.status != 0 && !prefs.stdoutText.contains("blue"), "\(prefs)")
        #expect(
            !FileManager.default.fileExists(atPath: cachePath),
            "the cache directory survived the uninstall")
        let kept = d.ctl(["item", "list", "--access-group", Self.appA])
        #expect(kept.status == 0 && kept.stdoutText.contains("service=\"token\""), "\(kept)")

        let reinstalled = try d.install(Self.appA, exe: a)
        #expect(reinstalled["generation"] as? String != installed["generation"] as? String)
        let again = try d.launch(a)
        #expect(again.appID == Self.appA && again.firstLaunch && again.wiped == 1, "\(again)")
        #expect(again.generation == reinstalled["generation"] as? String)
        let gone = d.app(a, ["token", "get"])
        #expect(
            gone.status == 44 && gone.stderr.contains("io.vaultd.Keychain.ItemNotFound"), "\(gone)")
        #expect(d.ctl(["item", "list", "--access-group", Self.appA]).stdoutText.isEmpty)
        let second = try d.launch(a)
        #expect(!second.firstLaunch && second.wiped == 0, "\(second)")

        // A token stored under the new generation survives later launches.
        #expect(d.app(a, ["token", "set"], stdin: Data("tok-2".utf8)).status == 0)
        #expect(try d.launch(a).wiped == 0)
        #expect(d.app(a, ["token", "get"]).stdoutText == "tok-2")
    }

    /// `app install` of an installed app is a reinstall, and vaultctl says so and what its
    /// first launch does (it printed "installed", as for a new app).
    @Test func installingAnInstalledAppSaysItIsAReinstall() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        let first = d.ctl(["app", "install", Self.appA, "--exe", a])
        #expect(
            first.status == 0 && first.stdoutText.hasPrefix("installed \(Self.appA) (generation "),
            "\(first)")
        let again = d.ctl(["app", "install", Self.appA, "--exe", a])
        #expect(
            again.status == 0
                && again.stdoutText.hasPrefix("reinstalled \(Self.appA) (new generation "),
            "\(again)")
        #expect(again.stdoutText.contains("wipes the credentials of earlier installs"), "\(again)")
        #expect(d.ctl(["app", "uninstall", Self.appA]).status == 0)
        let back = d.ctl(["app", "install", Self.appA, "--exe", a])
        #expect(
            back.status == 0 && back.stdoutText.hasPrefix("installed \(Self.appA) (generation "),
            "after an uninstall: \(back)")
    }

    /// vault-example's `--help` and an unknown command print the usage without connecting:
    /// a connection says Hello, which would be the reinstall's first launch (it wiped the
    /// token, and the app's real first launch then reported none).
    @Test func theExamplesHelpIsNotTheFirstLaunchOfAReinstall() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        try d.install(Self.appA, exe: a)
        #expect(d.app(a, ["token", "set"], stdin: Data("tok-1".utf8)).status == 0)
        try d.install(Self.appA, exe: a)
        let help = d.app(a, ["--help"])
        #expect(help.status == 0 && help.stdoutText.hasPrefix("usage: vault-example"), "\(help)")
        let unknown = d.app(a, ["bogus"])
        #expect(
            unknown.status == 64 && unknown.stderr.contains("unknown command 'bogus'"), "\(unknown)"
        )
        // A known command with no verb, or one it does not have, is a usage error too, and
        // no connection either (it connected, then said so).
        for args in [
            ["token"], ["token", "frob"], ["item", "frob"], ["defaults"], ["cache", "frob"],
            ["wait"], ["wait", "soon"],
        ] {
            let r = d.app(a, args)
            #expect(r.status == 64 && r.stderr.hasPrefix("vault-example: "), "\(args): \(r)")
        }
        let launch = try d.launch(a)
        #expect(launch.firstLaunch && launch.wiped == 1, "\(launch)")
    }

    /// An uninstall removes the app's cache directory however deep the app made it: here on
    /// the ordinary filesystem (ext4 on our machines; the Caches tests use a tmpfs), a tree of
    /// 3000 directories, more than any full path can name, with files at depths 300 and 3000
    /// and a second branch from depth 1000. Usage counts them all first.
    @Test func uninstallRemovesACacheTreeDeeperThanAnyPath() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        try d.install(Self.appA, exe: a)
        let cachePath = d.app(a, ["cache", "path"]).stdoutText.trimmingCharacters(in: .newlines)
        try #require(cachePath.hasPrefix(d.root + "/"), "\(cachePath)")
        // Should the uninstall leave it, the tree goes with rm (which handles any depth), not
        // with the temporary directory (FileManager cannot remove what no path can name).
        defer {
            _ = try? ChildProcess.run(
                "rm", ["-rf", "--", cachePath], environment: d.environment, stdin: nil, timeout: 120
            )
        }
        let top = try DeepTree.open(cachePath)
        defer { close(top) }
        let at300 = try DeepTree.chain(in: top, depth: 300)
        try DeepTree.write(in: at300, "at-300", size: 1)
        let at1000 = try DeepTree.chain(in: at300, depth: 700)
        close(at300)
        for branch in ["x", "y"] {
            let bottom = try DeepTree.chain(in: at1000, name: branch, depth: 2000)
            try DeepTree.write(in: bottom, "bottom", size: 5000)
            close(bottom)
        }
        close(at1000)

        let usage = d.ctl(["cache", "usage", "--json"])
        let report = CacheUsageReport(try #require(usage.jsonObject, "\(usage)"))
        #expect(report.files(Self.appA) == 3, "\(report)")

        let uninstall = d.ctl(["app", "uninstall", Self.appA])
        #expect(uninstall.status == 0, "\(uninstall)")
        #expect(
            access(cachePath, F_OK) != 0,
            "the cache directory survived the uninstall: \(DeepTree.names(in: top))")
        #expect(d.ctl(["status"]).status == 0, "vaultd died: \(d.log)")
    }

    @Test func keepCredentialsOnReinstallKeepsTheToken() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        try d.install(Self.appA, exe: a, ["--keep-credentials-on-reinstall"])
        #expect(d.app(a, ["token", "set"], stdin: Data("kept".utf8)).status == 0)
        #expect(d.ctl(["app", "uninstall", Self.appA]).status == 0)
        let reinstalled = try d.install(Self.appA, exe: a, ["--keep-credentials-on-reinstall"])
        #expect(reinstalled["keepCredentialsOnReinstall"] as? Bool == true)
        let launch = try d.launch(a)
        #expect(launch.firstLaunch && launch.wiped == 0, "\(launch)")
        #expect(d.app(a, ["token", "get"]).stdoutText == "kept")
    }

    @Test func reinstallLeavesAnItemOfAGroupSharedWithAnotherInstalledApp() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        let b = try d.placeExample("b")
        for (id, exe) in [(Self.appA, a), (Self.appB, b)] {
            try d.install(
                id, exe: exe,
                ["--access-group", "com.example.shared", "--app-group", "group.org.example.suite"])
        }
        let shared = [
            "--access-group", "com.example.shared", "--service", "svc", "--account", "acct",
        ]
        let suite = [
            "--access-group", "group.org.example.suite", "--service", "svc", "--account", "acct",
        ]
        #expect(d.app(a, ["item", "add"] + shared, stdin: Data("shared".utf8)).status == 0)
        #expect(d.app(a, ["item", "add"] + suite, stdin: Data("suite".utf8)).status == 0)
        #expect(d.app(a, ["token", "set"], stdin: Data("own".utf8)).status == 0)

        #expect(d.ctl(["app", "uninstall", Self.appA]).status == 0)
        try d.install(
            Self.appA, exe: a,
            ["--access-group", "com.example.shared", "--app-group", "group.org.example.suite"])
        let launch = try d.launch(a)
        #expect(launch.firstLaunch && launch.wiped == 1, "only A's own token goes: \(launch)")
        #expect(d.app(b, ["item", "get"] + shared).stdoutText == "shared")
        #expect(d.app(b, ["item", "get"] + suite).stdoutText == "suite")
        #expect(d.app(a, ["item", "get"] + shared).stdoutText == "shared")
        #expect(d.app(a, ["token", "get"]).status == 44, "the wiped token is not found")
    }

    /// B, uninstalled, shared a group with A: A's reinstall wipes A's own leftovers there,
    /// not B's (those are for B's next first launch).
    @Test func reinstallLeavesAnUninstalledAppsItemsInAGroupTheyShared() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        let b = try d.placeExample("b")
        for (id, exe) in [(Self.appA, a), (Self.appB, b)] {
            try d.install(id, exe: exe, ["--app-group", "group.org.example.suite"])
        }
        let inSuite = ["--access-group", "group.org.example.suite", "--account", "acct"]
        #expect(
            d.app(a, ["item", "add", "--service", "of-a"] + inSuite, stdin: Data("a".utf8)).status
                == 0)
        #expect(
            d.app(b, ["item", "add", "--service", "of-b"] + inSuite, stdin: Data("b".utf8)).status
                == 0)
        #expect(d.ctl(["app", "uninstall", Self.appB]).status == 0)
        #expect(d.ctl(["app", "uninstall", Self.appA]).status == 0)
        try d.install(Self.appA, exe: a, ["--app-group", "group.org.example.suite"])
        let launch = try d.launch(a)
        #expect(launch.firstLaunch && launch.wiped == 1, "only A's own item goes: \(launch)")
        let left = d.ctl(["item", "list", "--access-group", "group.org.example.suite"]).stdoutText
        #expect(left.contains("service=\"of-b\"") && !left.contains("service=\"of-a\""), "\(left)")
    }

    /// A reinstall with other groups: the earlier install's items in the group the app no
    /// longer has are its leftovers too, wiped on the first launch (no installed app shares
    /// that group); an item another app made there stays.
    @Test func reinstallWipesLeftoversInAGroupTheAppNoLongerHas() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        try d.install(Self.appA, exe: a, ["--access-group", "old"])
        #expect(try d.launch(a).firstLaunch)
        #expect(
            d.app(
                a, ["item", "add", "--access-group", "old", "--service", "s", "--account", "1"],
                stdin: Data("left".utf8)
            ).status == 0)
        #expect(
            d.ctl(
                ["item", "add", "--access-group", "old", "--service", "owner", "--account", "1"],
                stdin: Data("mine".utf8)
            ).status == 0)
        #expect(d.ctl(["app", "uninstall", Self.appA]).status == 0)
        try d.install(Self.appA, exe: a, ["--access-group", "new"])
        let launch = try d.launch(a)
        #expect(launch.firstLaunch && launch.wiped == 1, "\(launch)")
        let old = d.ctl(["item", "list", "--access-group", "old"]).stdoutText
        #expect(!old.contains("service=\"s\"") && old.contains("service=\"owner\""), "\(old)")
    }

    /// An app is registered with an executable that is there: not a missing file, a
    /// directory or a file that is not a program.
    /// A script (`#!`) runs as its interpreter: `/proc/PID/exe` is `/usr/bin/python3` or
    /// `/bin/sh`, never the script, so an app registered by its script was never identified
    /// and ran as the owner, with the admin surface, while `app show` said it was installed.
    /// The install is refused, saying why.
    @Test func installRefusesAScriptWhichRunsAsItsInterpreter() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let example = try d.placeExample("a")
        let script = d.root + "/apps/a/run-app"
        try Data("#!/bin/sh\nexec '\(example)' \"$@\"\n".utf8).write(
            to: URL(fileURLWithPath: script))
        chmod(script, 0o755)
        let r = d.ctl(["app", "install", Self.appA, "--exe", script])
        #expect(
            r.status == 65 && r.stderr.contains("is a script") && r.stderr.contains("interpreter"),
            "\(r)")
        #expect(d.ctl(["app", "list", "--json"]).jsonArray?.isEmpty == true)
        // The program itself is fine.
        try d.install(Self.appA, exe: example)
        #expect(try d.launch(script).appID == Self.appA)
    }

    @Test func installRefusesAnExecutableThatIsNotThere() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let notProgram = d.root + "/not-a-program"
        try Data("x".utf8).write(to: URL(fileURLWithPath: notProgram))
        for exe in [d.root + "/missing", d.root, notProgram] {
            let r = d.ctl(["app", "install", Self.appA, "--exe", exe])
            #expect(
                r.status == 65 && r.stderr.contains("not an existing executable file"),
                "\(exe): \(r)")
        }
        #expect(d.ctl(["app", "list", "--json"]).jsonArray?.isEmpty == true)
    }

    /// A path with a NUL byte names no file (argv cannot carry one, the wire can): it is
    /// refused, not cut at the NUL by the C calls and registered as the program before it.
    @Test func installRefusesAnExecutablePathWithANulByte() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        let c = try d.connect()
        defer { c.close() }
        for exe in [a + "\u{0}", a + "\u{0}/../other", "\u{0}" + a] {
            let r = try c.call("io.vaultd.Apps.Install", ["appID": Self.appA, "executable": exe])
            #expect(
                r.errorName == "org.varlink.service.InvalidParameter",
                "\(exe.debugDescription): \(r)")
            #expect(
                r.parameters?["parameter"] as? String == "executable",
                "\(exe.debugDescription): \(r)")
        }
        #expect(d.ctl(["app", "list", "--json"]).jsonArray?.isEmpty == true)
    }

    /// Deleted for good (past the grace period, none here: UninstallGraceSeconds 0), the app is
    /// uninstalled; its executable's return is a reinstall, a new generation.
    @Test func aDeletedExecutableIsUninstalledAndItsReturnIsANewGeneration() throws {
        let d = try Self.daemon(config: ["UninstallGraceSeconds": 0])
        defer { d.close() }
        let a = try d.placeExample("a")
        try d.install(Self.appA, exe: a)
        let g1 = try d.launch(a).generation
        #expect(d.app(a, ["defaults", "set", "colour", "blue"]).status == 0)
        #expect(d.app(a, ["token", "set"], stdin: Data("t".utf8)).status == 0)

        let aside = a + ".moved-away"
        try #require(rename(a, aside) == 0)
        // vaultd scans every second; each poll here starts a vaultctl, which on a loaded
        // machine takes a while: 10 s is still far from never.
        let start = Date()
        let gone = eventually(timeout: 10) { d.appShow(Self.appA)?["installed"] as? Bool == false }
        #expect(
            gone,
            "still installed \(Date().timeIntervalSince(start)) s after its executable was deleted: \(d.appShow(Self.appA) ?? [:])"
        )
        // An uninstall: the preferences went; the token row stays until a first launch.
        #expect(d.ctl(["defaults", "read", Self.appA, "colour"]).status != 0)
        #expect(d.ctl(["item", "list", "--access-group", Self.appA]).stdoutText.contains("token"))

        try #require(rename(aside, a) == 0)
        let back = eventually(timeout: 10) { d.appShow(Self.appA)?["installed"] as? Bool == true }
        #expect(
            back, "not reinstalled when its executable came back: \(d.appShow(Self.appA) ?? [:])")
        let shown = d.appShow(Self.appA)
        let g2 = shown?["generation"] as? String
        #expect(g2 != nil && g2 != g1, "generation \(g1 ?? "nil") → \(g2 ?? "nil")")
        let launch = try d.launch(a)
        #expect(
            launch.appID == Self.appA && launch.generation == g2 && launch.firstLaunch
                && launch.wiped == 1, "\(launch)")
    }

    /// vaultd matches `/proc/PID/exe`, which has every symlink resolved: an app registered
    /// through a symlinked path is still recognised (else it would run as the owner).
    @Test func anAppRegisteredThroughASymlinkedPathIsRecognised() throws {
        let d = try Self.daemon(config: ["UninstallGraceSeconds": 0])
        defer { d.close() }
        let real = try d.placeExample("real")
        let linkDir = d.root + "/apps/current"
        try FileManager.default.createSymbolicLink(
            atPath: linkDir, withDestinationPath: d.root + "/apps/real")
        let viaLink = linkDir + "/app"
        try d.install(Self.appA, exe: viaLink)
        #expect(try d.launch(viaLink).appID == Self.appA)
        #expect(try d.launch(real).appID == Self.appA)
        // Still noticed when it disappears.
        try FileManager.default.removeItem(atPath: real)
        #expect(
            eventually(timeout: 10) { d.appShow(Self.appA)?["installed"] as? Bool == false },
            "\(d.appShow(Self.appA) ?? [:])")
    }

    /// An app registered through a symlink that an upgrade repoints (`/opt/notes/current`,
    /// update-alternatives, a Nix or Homebrew profile) is the program the link leads to now:
    /// the upgrade is not an uninstall (iOS keeps everything over an update). Were only the
    /// path the link led to at install kept, the old version's removal would uninstall the
    /// app (its preferences deleted) and the new version would run unidentified, as the owner.
    @Test func anAppUpgradedByRepointingItsSymlinkIsStillThatApp() throws {
        let d = try Self.daemon(config: ["UninstallGraceSeconds": 0])
        defer { d.close() }
        let v1 = try d.placeExample("notes-1.0")
        let v2 = try d.placeExample("notes-1.1")
        let current = d.root + "/apps/current"
        try FileManager.default.createSymbolicLink(
            atPath: current, withDestinationPath: "notes-1.0")
        let viaLink = current + "/app"
        let installed = try d.install(Self.appA, exe: viaLink)
        #expect(installed["executable"] as? String == viaLink, "\(installed)")
        let first = try d.launch(viaLink)
        #expect(first.appID == Self.appA && first.firstLaunch, "\(first)")
        #expect(d.app(viaLink, ["token", "set"], stdin: Data("t1".utf8)).status == 0)
        #expect(d.app(viaLink, ["defaults", "set", "colour", "blue"]).status == 0)

        // The upgrade: the link is replaced (atomically) to lead to 1.1, and 1.0 goes.
        try FileManager.default.createSymbolicLink(
            atPath: current + ".new", withDestinationPath: "notes-1.1")
        try #require(rename(current + ".new", current) == 0)
        try FileManager.default.removeItem(atPath: (v1 as NSString).deletingLastPathComponent)
        for _ in 0..<3 { try d.tick() }  // three of vaultd's scans

        let shown = d.appShow(Self.appA)
        #expect(
            shown?["installed"] as? Bool == true
                && shown?["generation"] as? String == first.generation, "\(shown ?? [:])")
        let again = try d.launch(viaLink)
        #expect(
            again.appID == Self.appA && again.generation == first.generation && !again.firstLaunch,
            "\(again)")
        #expect(try d.launch(v2).appID == Self.appA)
        let token = d.app(viaLink, ["token", "get"])
        #expect(token.status == 0 && token.stdoutText == "t1", "\(token)")
        #expect(d.app(viaLink, ["defaults", "get", "colour"]).stdoutText == "blue\n")

        // What the link leads to going is an uninstall still.
        try FileManager.default.removeItem(atPath: v2)
        #expect(
            eventually(timeout: 10) { d.appShow(Self.appA)?["installed"] as? Bool == false },
            "\(d.appShow(Self.appA) ?? [:])")
    }

    /// The kernel marks a deleted executable by adding " (deleted)" to `/proc/PID/exe`; a file
    /// whose name really ends so is not deleted. vaultd cut the suffix from every such name:
    /// an app registered at `…/app (deleted)` ran unidentified (as the owner), and another
    /// program at `…/b/app (deleted)` was taken for B.
    @Test func aFileNamedLikeADeletedExecutableIsItself() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a") + " (deleted)"
        try FileManager.default.copyItem(atPath: Paths.tool("vault-example"), toPath: a)
        try d.install(Self.appA, exe: a)
        let launchA = try d.launch(a)
        #expect(launchA.appID == Self.appA && launchA.firstLaunch, "\(launchA)")

        let b = try d.placeExample("b")
        try d.install(Self.appB, exe: b)
        #expect(d.app(b, ["token", "set"], stdin: Data("token-of-B".utf8)).status == 0)
        let impostor = b + " (deleted)"
        try FileManager.default.copyItem(atPath: b, toPath: impostor)
        #expect(try d.launch(impostor).appID == nil)
        let read = d.app(impostor, ["token", "get"])
        #expect(read.status != 0 && !read.stdoutText.contains("token-of-B"), "\(read)")
    }

    /// The first-launch wipe does not depend on the client saying Hello: a reinstalled app
    /// that goes straight to CopyMatching (a raw varlink client, here a copied python3
    /// registered as the app) finds no leftover of the earlier install.
    @Test func aReinstalledAppThatSkipsHelloStillFindsNoLeftovers() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let python = try Self.rawPythonApp(d)
        let script = Self.rawClientScript(
            imports: "json, socket, sys",
            """
            q = {"class": "genericPassword", "query": {"service": "token", "account": "token"}, "returnData": True}
            for step in sys.argv[2:]:
                if step == "hello": print(json.dumps(call("io.vaultd.Vault.Hello", {})))
                if step == "add": print(json.dumps(call("io.vaultd.Keychain.Add", {"class": "genericPassword", "attributes": {"service": "token", "account": "token", "accessGroup": "org.example.Raw"}, "data": "bGVmdG92ZXI="})))
                if step == "get": print(json.dumps(call("io.vaultd.Keychain.CopyMatching", q)))
            """)
        try #require(d.install("org.example.Raw", exe: python)["executable"] as? String == python)
        let first = d.app(python, ["-c", script, d.socketPath, "hello", "add", "get"])
        #expect(
            first.stdoutText.contains("\"appID\": \"org.example.Raw\"")
                && first.stdoutText.contains("bGVmdG92ZXI="), "\(first)")
        #expect(d.ctl(["app", "uninstall", "org.example.Raw"]).status == 0)
        try d.install("org.example.Raw", exe: python)

        let skipping = d.app(python, ["-c", script, d.socketPath, "get", "hello"])
        #expect(
            !skipping.stdoutText.contains("bGVmdG92ZXI="),
            "a leftover of the earlier install was read: \(skipping)")
        #expect(skipping.stdoutText.contains("io.vaultd.Keychain.ItemNotFound"), "\(skipping)")
        #expect(d.ctl(["item", "list", "--access-group", "org.example.Raw"]).stdoutText.isEmpty)
        // The Hello after that call still reports the first launch and what it wiped; the
        // next Hello does not.
        let helloLine = skipping.stdoutText.split(separator: "\n").last.map(String.init) ?? ""
        #expect(
            helloLine.contains("\"firstLaunch\": true")
                && helloLine.contains("\"wipedCredentials\": 1"), "\(skipping)")
        let again = d.app(python, ["-c", script, d.socketPath, "hello"])
        #expect(
            again.stdoutText.contains("\"firstLaunch\": false")
                && again.stdoutText.contains("\"wipedCredentials\": 0"), "\(again)")
    }

    /// An app instance that was connected before its app was uninstalled (or reinstalled)
    /// keeps no app tier: its calls are refused, so it cannot re-create the preferences and
    /// cache the uninstall removed, nor carry them into the next install.
    /// The figures an app may ask for (Status, Preferences.Domains, Caches.Usage) are refused
    /// to a connection made before an uninstall, like every other call: it kept watching its
    /// groups' item count and which suites exist. And a reinstall whose first call is Status
    /// gets the first launch there (its leftovers wiped), so it does not count them either.
    /// io.vaultd.Vault.Observe refuses a connection an app made before an uninstall, as Status
    /// does: else its first reply would give such a connection the vault's lock state (what
    /// Status does not give it) before the stream's once-a-second check closes it.
    @Test func anEarlierInstallsConnectionCannotObserveTheLockState() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let python = try Self.rawPythonApp(d)
        try d.install("org.example.Raw", exe: python)
        let script = Self.rawClientScript(
            imports: "json, os, socket, sys, time",
            """
            print(json.dumps(call("io.vaultd.Vault.Hello", {})), flush=True)
            print("ready", flush=True)
            while not os.path.exists(sys.argv[2]): time.sleep(0.02)
            s.sendall(json.dumps({"method": "io.vaultd.Vault.Observe", "parameters": {}, "more": True}).encode() + b'\\0')
            while b'\\0' not in buf: buf += s.recv(65536)
            print(buf.partition(b'\\0')[0].decode(), flush=True)
            """)
        let out = d.root + "/observe.out"
        let go = d.root + "/observe.go"
        let pid = try ChildProcess.spawn(
            python, ["-c", script, d.socketPath, go], environment: d.environment, inputs: [:],
            stdout: .file(out, append: false),
            stderr: .file(out + ".err", append: false))
        #expect(
            eventually(timeout: 10) {
                (try? String(contentsOfFile: out, encoding: .utf8))?.contains("ready") == true
            })
        #expect(d.ctl(["app", "uninstall", "org.example.Raw"]).status == 0)
        try #require(FileManager.default.createFile(atPath: go, contents: Data()))
        if ChildProcess.wait(pid, timeout: 20) == nil {
            kill(pid, SIGKILL)
            _ = ChildProcess.wait(pid, timeout: 5)
        }
        let lines = ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").split(
            separator: "\n"
        ).map(String.init)
        #expect(lines.count == 3, "\(lines)")
        let reply = lines.last ?? ""
        #expect(
            reply.contains("io.vaultd.Keychain.MissingEntitlement") && !reply.contains("\"lock\""),
            "\(reply)")
    }

    @Test func anEarlierInstallsConnectionGetsNoFiguresAndAReinstallCountsNoLeftovers() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let python = try Self.rawPythonApp(d)
        let b = try d.placeExample("b")
        try d.install("org.example.Raw", exe: python, ["--app-group", "group.org.example.suite"])
        try d.install(Self.appB, exe: b, ["--app-group", "group.org.example.suite"])
        #expect(
            d.app(
                b,
                [
                    "item", "add", "--access-group", "group.org.example.suite", "--service", "s",
                    "--account", "a",
                ], stdin: Data("x".utf8)
            ).status == 0)
        #expect(
            d.app(b, ["defaults", "set", "colour", "blue", "--suite", "group.org.example.suite"])
                .status == 0)
        let script = Self.rawClientScript(
            imports: "json, os, socket, sys, time",
            """
            if sys.argv[3] == "hello": print(json.dumps(call("io.vaultd.Vault.Hello", {})), flush=True)
            print("ready", flush=True)
            while not os.path.exists(sys.argv[2]): time.sleep(0.02)
            for m in ["io.vaultd.Vault.Status", "io.vaultd.Preferences.Domains", "io.vaultd.Caches.Usage", "io.vaultd.Vault.Hello"]:
                print(json.dumps(call(m, {})), flush=True)
            """)
        func run(_ first: String, before: () throws -> Void) throws -> [String] {
            let out = d.root + "/\(first).out"
            let go = d.root + "/\(first).go"
            let pid = try ChildProcess.spawn(
                python, ["-c", script, d.socketPath, go, first], environment: d.environment,
                inputs: [:], stdout: .file(out, append: false),
                stderr: .file(out + ".err", append: false))
            #expect(
                eventually(timeout: 10) {
                    (try? String(contentsOfFile: out, encoding: .utf8))?.contains("ready") == true
                })
            try before()
            _ = FileManager.default.createFile(atPath: go, contents: Data())
            if ChildProcess.wait(pid, timeout: 20) == nil {
                kill(pid, SIGKILL)
                _ = ChildProcess.wait(pid, timeout: 5)
            }
            let text = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").map(String.init).filter { $0 != "ready" }
        }

        // Connected, then uninstalled: every call is refused.
        let old = try run("hello") {
            #expect(d.ctl(["app", "uninstall", "org.example.Raw"]).status == 0)
        }
        #expect(old.count == 5, "\(old)")
        for r in old.dropFirst() {
            #expect(r.contains("io.vaultd.Keychain.MissingEntitlement"), "\(r)")
        }

        // A reinstall whose first call is Status: the token the earlier install added is a
        // leftover, wiped by that first call.
        try d.install("org.example.Raw", exe: python, ["--app-group", "group.org.example.suite"])
        let adder = Self.rawClientScript(
            imports: "json, socket, sys",
            """
            print(json.dumps(call("io.vaultd.Keychain.Add", {"class": "genericPassword", "attributes": {"service": "z", "account": "z"}, "data": "eg=="})))
            """)
        let added = d.app(python, ["-c", adder, d.socketPath])
        #expect(
            added.status == 0 && added.stdoutText.contains("parameters")
                && !added.stdoutText.contains("error"), "\(added)")
        try d.install("org.example.Raw", exe: python, ["--app-group", "group.org.example.suite"])
        let fresh = try run("status") {}
        #expect(fresh.count == 4, "\(fresh)")
        let status =
            try? JSONSerialization.jsonObject(with: Data((fresh.first ?? "").utf8))
            as? [String: Any]
        let figures = status?["parameters"] as? [String: Any]
        // B's item in the suite it shares; the earlier install's token is gone.
        #expect(figures?["items"] as? Int == 1 && figures?["domains"] as? Int == 1, "\(fresh)")
        #expect(
            fresh.last?.contains("\"firstLaunch\": true") == true
                && fresh.last?.contains("\"wipedCredentials\": 1") == true, "\(fresh)")
    }

    @Test func aConnectionMadeBeforeAnUninstallLosesTheAppTier() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let python = try Self.rawPythonApp(d)
        // Connects and says Hello, prints "ready", waits for the go file, then calls on the same connection.
        let script = Self.rawClientScript(
            imports: "json, os, socket, sys, time",
            """
            print(json.dumps(call("io.vaultd.Vault.Hello", {})), flush=True)
            print("ready", flush=True)
            while not os.path.exists(sys.argv[2]): time.sleep(0.02)
            print(json.dumps(call("io.vaultd.Preferences.Set", {"key": "zombie", "value": {"string": "yes"}})))
            print(json.dumps(call("io.vaultd.Caches.Directory", {})))
            print(json.dumps(call("io.vaultd.Keychain.Add", {"class": "genericPassword", "attributes": {"service": "z", "account": "z"}, "data": "eg=="})))
            print(json.dumps(call("io.vaultd.Keychain.CopyMatching", {"class": "genericPassword", "query": {"service": "token"}, "returnData": True})))
            """)
        try d.install("org.example.Raw", exe: python)
        let seed = d.ctl(
            [
                "item", "add", "--access-group", "org.example.Raw", "--service", "token",
                "--account", "t",
            ], stdin: Data("seed".utf8))
        #expect(seed.status == 0, "\(seed)")

        func start(_ name: String) throws -> (pid: pid_t, out: String, go: String) {
            let out = d.root + "/\(name).out"
            let go = d.root + "/\(name).go"
            let pid = try ChildProcess.spawn(
                python, ["-c", script, d.socketPath, go], environment: d.environment, inputs: [:],
                stdout: .file(out, append: false),
                stderr: .file(out + ".err", append: false))
            let ready = eventually(timeout: 10) {
                (try? String(contentsOfFile: out, encoding: .utf8))?.contains("ready") == true
            }
            #expect(
                ready,
                "\(name) did not connect: \((try? String(contentsOfFile: out + ".err", encoding: .utf8)) ?? "")"
            )
            return (pid, out, go)
        }
        func finish(_ p: (pid: pid_t, out: String, go: String)) -> String {
            _ = FileManager.default.createFile(atPath: p.go, contents: Data())
            if ChildProcess.wait(p.pid, timeout: 20) == nil {
                kill(p.pid, SIGKILL)
                _ = ChildProcess.wait(p.pid, timeout: 5)
            }
            return (try? String(contentsOfFile: p.out, encoding: .utf8)) ?? ""
        }
        func expectRefused(_ output: String, _ when: String) {
            let replies = output.split(separator: "\n").dropFirst(2)
            #expect(replies.count == 4, "\(when): \(output)")
            for r in replies {
                #expect(r.contains("io.vaultd.Keychain.MissingEntitlement"), "\(when): \(r)")
            }
            #expect(!output.contains("c2VlZA=="), "\(when): the seed token was read: \(output)")
        }

        let p1 = try start("p1")
        let p2 = try start("p2")
        #expect(d.ctl(["app", "uninstall", "org.example.Raw"]).status == 0)
        expectRefused(finish(p1), "after the uninstall")
        try d.install("org.example.Raw", exe: python)
        expectRefused(finish(p2), "after a reinstall")

        // Nothing came back to life: no preferences, no cache directory, no new item.
        #expect(d.ctl(["defaults", "read", "org.example.Raw"]).stdoutText.isEmpty)
        #expect(
            !FileManager.default.fileExists(atPath: d.root + "/home/.cache/vaultd/org.example.Raw"))
        let items = d.ctl(["item", "list", "--access-group", "org.example.Raw"]).stdoutText
        #expect(!items.contains("service=\"z\""), "\(items)")
    }

    // MARK: Sandboxed apps (Flatpak identity)

    /// How a test sandbox is built.
    enum SandboxRoot {
        /// A tmpfs root with `/usr`, `/etc`, `/opt` and the socket's directory bound, and a
        /// `/.flatpak-info` naming the app (or holding `infoText`): a Flatpak app.
        case flatpak
        /// The same tmpfs root without `/.flatpak-info`: a bubblewrap sandbox with no name.
        case unnamed
        /// The host's `/` bound as the root (same file), the executable mounted over `inside`.
        case host
    }

    /// Where a test sandbox's `/.flatpak-info` comes from.
    enum InfoSource {
        /// As Flatpak makes it: written on the host as the instance's record,
        /// `$XDG_RUNTIME_DIR/.flatpak/INSTANCE/info` (vaultd's runtime directory), its bytes
        /// copied to `/.flatpak-info` (`bwrap --ro-bind-data`), and the sandbox's first
        /// process recorded in `bwrapinfo.json` beside it (`bwrap --info-fd`).
        case flatpakInstance
        /// Written by the sandbox itself: no host record has its instance ID.
        case selfWritten
        /// Written by the sandbox itself, its instance ID naming instance `id` (another app's).
        case claimingInstance(String)
        /// A byte-identical copy of instance `id`'s host record, in a sandbox of its own.
        case copyOfInstance(String)
        /// Instance `id`'s host record itself, bound read-only into a sandbox of its own.
        case recordOfInstance(String)
    }

    /// Writes a Flatpak instance's host record for `appID` (as `flatpak run` does) and
    /// returns its instance ID and the record's path.
    static func flatpakInstance(_ d: Daemon, appID: String, infoText: String? = nil) throws -> (
        id: String, info: String
    ) {
        let id = String(UInt32.random(in: 1...UInt32.max))
        let dir = d.root + "/xdg-run/.flatpak/" + id
        try FileManager.default.createDirectory(
            atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        let info = dir + "/info"
        let text =
            infoText
            ?? "[Application]\nname=\(appID)\nruntime=runtime/org.example.Platform/x86_64/1\n\n[Instance]\ninstance-id=\(id)\n"
        try Data(text.utf8).write(to: URL(fileURLWithPath: info))
        return (id, info)
    }

    /// Runs `app ARGS` in a bubblewrap sandbox (`root`), the executable mounted at `inside`
    /// (default `/app/bin/app`), the socket reachable; a `.flatpak` root gets its
    /// `/.flatpak-info` from `info` (by default a Flatpak instance's host record).
    static func sandboxed(
        _ d: Daemon, _ app: String, _ arguments: [String],
        flatpakID: String = "org.example.Sandboxed", inside: String = "/app/bin/app",
        infoText: String? = nil, info source: InfoSource = .flatpakInstance,
        root: SandboxRoot = .flatpak, stdin: Data? = nil,
        extraBwrap: [String] = []
    ) throws -> ProcessResult {
        var bwrap: [String]
        if root == .host {
            bwrap = ["--bind", "/", "/"]
        } else {
            let socketDir = (d.socketPath as NSString).deletingLastPathComponent
            bwrap = [
                "--tmpfs", "/", "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib",
                "--symlink", "usr/lib64", "/lib64",
                "--symlink", "usr/bin", "/bin", "--ro-bind", "/etc", "/etc", "--ro-bind", "/opt",
                "/opt", "--bind", socketDir, socketDir,
            ]
            if root == .flatpak {
                switch source {
                case .flatpakInstance:
                    let instance = try Self.flatpakInstance(d, appID: flatpakID, infoText: infoText)
                    bwrap += ["--ro-bind-data", "4", "/.flatpak-info"]
                    return Self.runAsFlatpak(
                        d, instance, bwrap + extraBwrap + Self.tail(d, app, inside) + arguments,
                        stdin: stdin)
                case .selfWritten, .claimingInstance:
                    var instance = "1"
                    if case .claimingInstance(let id) = source { instance = id }
                    let info = d.root + "/flatpak-info-\(UUID().uuidString)"
                    let text =
                        infoText
                        ?? "[Application]\nname=\(flatpakID)\nruntime=runtime/org.example.Platform/x86_64/1\n\n[Instance]\ninstance-id=\(instance)\n"
                    try Data(text.utf8).write(to: URL(fileURLWithPath: info))
                    bwrap += ["--ro-bind", info, "/.flatpak-info"]
                case .copyOfInstance(let id):
                    let copy = d.root + "/flatpak-info-\(UUID().uuidString)"
                    try FileManager.default.copyItem(
                        atPath: Self.instanceDirectory(d, id) + "/info", toPath: copy)
                    bwrap += ["--ro-bind", copy, "/.flatpak-info"]
                case .recordOfInstance(let id):
                    bwrap += [
                        "--ro-bind", Self.instanceDirectory(d, id) + "/info", "/.flatpak-info",
                    ]
                }
            }
        }
        bwrap += extraBwrap + Self.tail(d, app, inside)
        return d.run("bwrap", bwrap + arguments, stdin: stdin)
    }

    /// The end of a test sandbox's bwrap arguments: the executable at `inside`, /dev, /proc,
    /// the socket's path in the environment, and the command.
    static func tail(_ d: Daemon, _ app: String, _ inside: String) -> [String] {
        [
            "--ro-bind", app, inside, "--dev", "/dev", "--proc", "/proc", "--setenv",
            "VAULTD_SOCKET", d.socketPath,
            "--setenv", "HOME", "/tmp", inside,
        ]
    }

    /// `$XDG_RUNTIME_DIR/.flatpak/ID` of `d`'s vaultd.
    static func instanceDirectory(_ d: Daemon, _ id: String) -> String {
        d.root + "/xdg-run/.flatpak/" + id
    }

    /// bwrap `arguments` as `flatpak run` runs it for `instance`: fd 3 writes the sandbox's
    /// `bwrapinfo.json` in the instance's directory (`--info-fd 3`, its first process as
    /// `child-pid`), fd 4 reads the instance's record (for `--ro-bind-data 4 /.flatpak-info`).
    static func runAsFlatpak(
        _ d: Daemon, _ instance: (id: String, info: String), _ arguments: [String],
        stdin: Data? = nil
    ) -> ProcessResult {
        let wrapper = #"i=$1; r=$2; shift 2; exec bwrap --info-fd 3 "$@" 3>"$i" 4<"$r""#
        return d.run(
            "sh",
            [
                "-c", wrapper, "sh", instanceDirectory(d, instance.id) + "/bwrapinfo.json",
                instance.info,
            ] + arguments, stdin: stdin)
    }

    /// App A installed with its token ("token-of-A"), and an owner item (owner-svc/me, "owner
    /// secret") beside it: what a sandbox must not reach. Returns A's executable.
    static func appAWithTokenBesideAnOwnerItem(_ d: Daemon) throws -> String {
        let a = try d.placeExample("a")
        try d.install(Self.appA, exe: a)
        #expect(d.app(a, ["token", "set"], stdin: Data("token-of-A".utf8)).status == 0)
        #expect(
            d.ctl(
                ["item", "add", "--service", "owner-svc", "--account", "me"],
                stdin: Data("owner secret".utf8)
            ).status == 0)
        return a
    }

    @Test(.tags(.system)) func aSandboxedAppIsIdentifiedByItsFlatpakIDAndKeptToItsOwnGroup() throws
    {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try Self.appAWithTokenBesideAnOwnerItem(d)
        #expect(d.ctl(["defaults", "write", Self.appA, "colour", "blue"]).status == 0)
        let sandboxedApp = try d.placeExample("sandboxed")

        let launch = try Self.sandboxed(d, sandboxedApp, ["launch"])
        try #require(launch.status == 0, "\(launch)")
        let info = Launch(launch.jsonObject ?? [:])
        #expect(info.appID == "org.example.Sandboxed" && info.firstLaunch, "\(info)")

        // Registered on first contact, as a Flatpak app, with its own group only.
        let shown = try #require(d.appShow("org.example.Sandboxed"), "not registered")
        #expect(
            shown["flatpak"] as? Bool == true && shown["installed"] as? Bool == true, "\(shown)")
        #expect(shown["keychainAccessGroups"] as? [String] == ["org.example.Sandboxed"], "\(shown)")
        #expect(shown["appGroups"] as? [String] == [], "\(shown)")

        Self.expectMissingEntitlement(
            try Self.sandboxed(
                d, sandboxedApp,
                [
                    "item", "get", "--access-group", "user", "--service", "owner-svc", "--account",
                    "me",
                ]),
            "the sandbox reads the owner's item")
        Self.expectMissingEntitlement(
            try Self.sandboxed(
                d, sandboxedApp, ["item", "get", "--access-group", Self.appA] + Self.tokenFilter),
            "the sandbox reads A's token")
        Self.expectMissingEntitlement(
            try Self.sandboxed(d, sandboxedApp, ["item", "list", "--access-group", Self.appA]),
            "the sandbox lists A's group")
        let listed = try Self.sandboxed(d, sandboxedApp, ["item", "list"])
        #expect(
            !listed.stdoutText.contains("owner-svc") && !listed.stdoutText.contains(Self.appA),
            "\(listed)")
        let prefs = try Self.sandboxed(
            d, sandboxedApp, ["defaults", "get", "colour", "--suite", Self.appA])
        #expect(prefs.status == 77 && prefs.stderr.contains(Self.missingEntitlement), "\(prefs)")
        // It is an app, not the owner: owner-only calls are refused.
        let cache = try Self.sandboxed(d, sandboxedApp, ["cache", "path"])
        #expect(
            cache.status == 0 && cache.stdoutText.contains("/org.example.Sandboxed"), "\(cache)")

        let set = try Self.sandboxed(
            d, sandboxedApp, ["token", "set"], stdin: Data("sandbox token".utf8))
        #expect(set.status == 0, "\(set)")
        let get = try Self.sandboxed(d, sandboxedApp, ["token", "get"])
        #expect(get.status == 0 && get.stdoutText == "sandbox token", "\(get)")
        #expect(
            d.ctl(["item", "list", "--access-group", "org.example.Sandboxed"]).stdoutText.contains(
                "service=\"token\""))
        #expect(d.app(a, ["token", "get"]).stdoutText == "token-of-A", "A's token is untouched")
    }

    /// The Flatpak identity comes first: a sandbox running A's very executable at A's own path
    /// is the sandboxed app, not A; and a sandbox cannot take over a registered app's ID.
    @Test(.tags(.system)) func aSandboxCannotPassForARegisteredApp() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        let installedA = try d.install(Self.appA, exe: a)
        #expect(d.app(a, ["token", "set"], stdin: Data("token-of-A".utf8)).status == 0)

        let atAsPath = try Self.sandboxed(d, a, ["launch"], inside: a)
        #expect(Launch(atAsPath.jsonObject ?? [:]).appID == "org.example.Sandboxed", "\(atAsPath)")
        Self.expectMissingEntitlement(
            try Self.sandboxed(
                d, a, ["item", "get", "--access-group", Self.appA] + Self.tokenFilter, inside: a),
            "a sandbox at A's path reads A's token")

        // A .flatpak-info naming A's app ID: refused or kept away from A's items, and A's
        // registration (executable, generation) is unchanged.
        let claim = try Self.sandboxed(
            d, a, ["item", "get", "--access-group", Self.appA] + Self.tokenFilter,
            flatpakID: Self.appA)
        #expect(claim.status != 0 && !claim.stdoutText.contains("token-of-A"), "\(claim)")
        let after = d.appShow(Self.appA)
        #expect(
            after?["executable"] as? String == a && after?["flatpak"] as? Bool == false,
            "\(after ?? [:])")
        #expect(
            after?["generation"] as? String == installedA["generation"] as? String,
            "\(after ?? [:])")
        #expect(d.app(a, ["token", "get"]).stdoutText == "token-of-A")

        // Uninstalled too: a sandbox naming A cannot take the ID over (its first launch would
        // wipe what A keeps for its reinstall); A's record stays A's.
        #expect(d.ctl(["app", "uninstall", Self.appA]).status == 0)
        let takeover = try Self.sandboxed(d, a, ["launch"], flatpakID: Self.appA)
        #expect(takeover.status != 0, "\(takeover)")
        let kept = d.appShow(Self.appA)
        #expect(
            kept?["flatpak"] as? Bool == false && kept?["installed"] as? Bool == false,
            "\(kept ?? [:])")
        #expect(
            d.ctl(["item", "list", "--access-group", Self.appA]).stdoutText.contains(
                "service=\"token\""))
    }

    /// A sandbox writes its own `/.flatpak-info`, so the name it gives must not be one of the
    /// groups it would then be in: an app group (`group.*`, the app-group namespace) or
    /// another app's access group. It named itself `group.org.example.suite` and read A's
    /// shared item and the suite, or `team.example.shared` and read A's team item. Refused,
    /// also when the group was registered after the sandbox first came.
    @Test(.tags(.system)) func aSandboxCannotNameItselfAfterAnotherAppsGroup() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let sandboxedApp = try d.placeExample("sandboxed")
        // Came first, under a name A registers as its access group below.
        let early = try Self.sandboxed(d, sandboxedApp, ["launch"], flatpakID: "team.example.late")
        #expect(early.status == 0, "\(early)")

        let a = try d.placeExample("a")
        try d.install(
            Self.appA, exe: a,
            [
                "--access-group", "team.example.shared", "--access-group", "team.example.late",
                "--app-group", "group.org.example.suite",
            ])
        for (group, secret) in [
            ("group.org.example.suite", "shared-secret"), ("team.example.shared", "team-secret"),
            ("team.example.late", "late-secret"),
        ] {
            let add = d.app(
                a, ["item", "add", "--access-group", group, "--service", "s", "--account", "a"],
                stdin: Data(secret.utf8))
            #expect(add.status == 0, "\(add)")
        }
        #expect(
            d.app(a, ["defaults", "set", "colour", "blue", "--suite", "group.org.example.suite"])
                .status == 0)

        for (name, group) in [
            ("group.org.example.suite", "group.org.example.suite"),
            ("team.example.shared", "team.example.shared"),
            ("team.example.late", "team.example.late"),
        ] {
            let get = try Self.sandboxed(
                d, sandboxedApp,
                ["item", "get", "--access-group", group, "--service", "s", "--account", "a"],
                flatpakID: name)
            #expect(get.status != 0 && !get.stdoutText.contains("secret"), "\(name): \(get)")
            let list = try Self.sandboxed(d, sandboxedApp, ["item", "list"], flatpakID: name)
            #expect(list.status != 0 && !list.stdoutText.contains("service"), "\(name): \(list)")
        }
        let suite = try Self.sandboxed(
            d, sandboxedApp, ["defaults", "get", "colour", "--suite", "group.org.example.suite"],
            flatpakID: "group.org.example.suite")
        #expect(suite.status != 0 && !suite.stdoutText.contains("blue"), "\(suite)")
        let own = try Self.sandboxed(
            d, sandboxedApp, ["defaults", "get", "colour"], flatpakID: "group.org.example.suite")
        #expect(own.status != 0 && !own.stdoutText.contains("blue"), "\(own)")
        // No app was registered under those names; the early one stays registered (the
        // owner can uninstall it) but is refused.
        let ids = Set(
            (d.ctl(["app", "list", "--json"]).jsonArray ?? []).compactMap { $0["appID"] as? String }
        )
        #expect(ids == [Self.appA, "team.example.late"], "\(ids)")
        #expect(
            d.log.contains("names an app group")
                && d.log.contains("an access group of org.example.A"), "log:\n\(d.log)")
        // A's items are untouched, and a sandbox with a name of its own still works.
        #expect(
            d.app(
                a,
                [
                    "item", "get", "--access-group", "team.example.shared", "--service", "s",
                    "--account", "a",
                ]
            ).stdoutText == "team-secret")
        let fine = try Self.sandboxed(d, sandboxedApp, ["launch"])
        #expect(
            fine.status == 0 && Launch(fine.jsonObject ?? [:]).appID == "org.example.Sandboxed",
            "\(fine)")
    }

    /// A sandbox whose `/.flatpak-info` names no usable app is neither the owner (admin
    /// surface) nor an app: it is refused.
    @Test(
        .tags(.system),
        arguments: [
            "", "[Application]\n", "[Instance]\nname=org.example.Sandboxed\n",
            "[Application]\nname=not an app id\n",
        ])
    func aSandboxVaultdCannotIdentifyIsRefused(_ infoText: String) throws {
        let d = try Self.daemon()
        defer { d.close() }
        #expect(
            d.ctl(
                ["item", "add", "--service", "owner-svc", "--account", "me"],
                stdin: Data("owner secret".utf8)
            ).status == 0)
        let app = try d.placeExample("sandboxed")
        let launch = try Self.sandboxed(d, app, ["launch"], infoText: infoText)
        #expect(launch.status != 0, "\(launch)")
        let read = try Self.sandboxed(
            d, app,
            ["item", "get", "--access-group", "user", "--service", "owner-svc", "--account", "me"],
            infoText: infoText)
        #expect(read.status != 0 && !read.stdoutText.contains("owner secret"), "\(read)")
        let list = try Self.sandboxed(d, app, ["item", "list"], infoText: infoText)
        #expect(!list.stdoutText.contains("owner-svc"), "\(list)")
        #expect(d.ctl(["app", "list", "--json"]).jsonArray?.isEmpty == true, "nothing registered")
    }

    /// A bubblewrap sandbox without `/.flatpak-info` (its root is not the host's) can neither
    /// run the host's vaultctl nor be told apart from another app: it is refused, not taken
    /// for the owner.
    @Test(.tags(.system)) func aSandboxWithoutFlatpakInfoIsRefused() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try Self.appAWithTokenBesideAnOwnerItem(d)
        let app = try d.placeExample("unnamed")
        let launch = try Self.sandboxed(d, app, ["launch"], root: .unnamed)
        #expect(launch.status != 0, "\(launch)")
        // The app is told why, not left with a reset connection.
        #expect(
            launch.stderr.contains("a sandbox vaultd cannot name")
                && !launch.stderr.contains("reset by peer"), "\(launch)")
        for args in [
            ["item", "get", "--access-group", "user", "--service", "owner-svc", "--account", "me"],
            ["item", "get", "--access-group", Self.appA] + Self.tokenFilter,
        ] {
            let r = try Self.sandboxed(d, app, args, root: .unnamed)
            #expect(
                r.status != 0 && !r.stdoutText.contains("secret")
                    && !r.stdoutText.contains("token-of-A"), "\(args): \(r)")
        }
        // The same binary at A's own path in such a sandbox is not A either.
        let atAsPath = try Self.sandboxed(d, a, ["token", "get"], inside: a, root: .unnamed)
        #expect(atAsPath.status != 0 && !atAsPath.stdoutText.contains("token-of-A"), "\(atAsPath)")
        #expect(d.log.contains("a sandbox vaultd cannot name"), "log:\n\(d.log)")
        #expect(d.ctl(["app", "list", "--json"]).jsonArray?.count == 1, "nothing registered but A")
    }

    /// A running app whose executable a package upgrade replaced (a new file renamed over the
    /// path: the running process's exe is "(deleted)") is still that app when it connects
    /// again, in vaultd's own mount namespace.
    @Test func aRunningAppWhoseBinaryWasReplacedIsStillThatApp() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let python = try Self.rawPythonApp(d)
        try d.install("org.example.Raw", exe: python)
        // Says Hello, waits for the go file, then connects again and says Hello.
        let script = """
            import json, os, socket, sys, time
            def hello():
                s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); buf = b''
                s.sendall(json.dumps({"method": "io.vaultd.Vault.Hello", "parameters": {}}).encode() + b'\\0')
                while b'\\0' not in buf:
                    chunk = s.recv(65536)
                    if not chunk: return "closed"
                    buf += chunk
                return buf.partition(b'\\0')[0].decode()
            print(hello(), flush=True)
            while not os.path.exists(sys.argv[2]): time.sleep(0.02)
            print(hello(), flush=True)
            """
        let out = d.root + "/upgrade.out"
        let go = d.root + "/upgrade.go"
        let pid = try ChildProcess.spawn(
            python, ["-c", script, d.socketPath, go], environment: d.environment, inputs: [:],
            stdout: .file(out, append: false),
            stderr: .file(out + ".err", append: false))
        #expect(
            eventually(timeout: 10) {
                ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").contains(
                    "org.example.Raw")
            })
        // The upgrade: a new file renamed over the executable.
        try FileManager.default.copyItem(atPath: python, toPath: python + ".new")
        #expect(rename(python + ".new", python) == 0)
        _ = FileManager.default.createFile(atPath: go, contents: Data())
        if ChildProcess.wait(pid, timeout: 20) == nil {
            kill(pid, SIGKILL)
            _ = ChildProcess.wait(pid, timeout: 5)
        }
        let lines = ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").split(
            separator: "\n")
        #expect(
            lines.count == 2 && lines[1].contains("\"appID\":\"org.example.Raw\""),
            "\(lines) \(d.log)")
    }

    /// Another file mounted over a registered app's path (in a sandbox that keeps the host's
    /// root) is not that app: vaultd compares the files, not the paths the peer sees.
    @Test(.tags(.system)) func anotherFileAtARegisteredAppsPathIsNotThatApp() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        try d.install(Self.appA, exe: a)
        #expect(d.app(a, ["token", "set"], stdin: Data("token-of-A".utf8)).status == 0)
        let other = try d.placeExample("other")  // a copy: the same bytes, another file
        let r = try Self.sandboxed(d, other, ["token", "get"], inside: a, root: .host)
        #expect(r.status != 0 && !r.stdoutText.contains("token-of-A"), "\(r)")
        #expect(d.log.contains("registered path but is another file"), "log:\n\(d.log)")
        // A itself, through the same kind of sandbox, is still A.
        let itself = try Self.sandboxed(d, a, ["token", "get"], inside: a, root: .host)
        #expect(itself.status == 0 && itself.stdoutText == "token-of-A", "\(itself)")
    }

    /// A program at a path that differs from an app's registered path only in Unicode
    /// normalisation (`café` with U+0301 against U+00E9: two directories to the kernel) is
    /// another program, not that app, and may be installed as another app, not refused as
    /// "registered with another app": the registered path is compared byte for byte, not
    /// with Swift's `==`, under which the two paths are equal.
    @Test func aProgramAtAPathDifferingOnlyInNormalisationIsNotTheApp() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("caf\u{E9}")
        let other = try d.placeExample("cafe\u{301}")
        var sa = stat()
        var so = stat()
        try #require(
            stat(a, &sa) == 0 && stat(other, &so) == 0 && sa.st_ino != so.st_ino, "two files")
        try d.install(Self.appA, exe: a)
        #expect(d.app(a, ["token", "set"], stdin: Data("token-of-A".utf8)).status == 0)
        #expect(
            try d.launch(other).appID == nil, "the other program is unregistered: the owner's tools"
        )
        let get = d.app(other, ["token", "get"])
        #expect(get.status != 0 && !get.stdoutText.contains("token-of-A"), "\(get)")
        #expect(try d.launch(a).appID == Self.appA)
        // Nor is its path A's registered one: it may be installed as an app of its own.
        try d.install(Self.appB, exe: other)
        #expect(try d.launch(other).appID == Self.appB)
        #expect(try d.launch(a).appID == Self.appA)
    }

    // MARK: Other users

    @Test func aPeerOfAnotherUserIsRefusedAtConnect() throws {
        let d = try Self.daemon()
        defer { d.close() }
        // Let another uid reach the socket, so the uid check is what refuses it.
        for dir in [d.root, (d.socketPath as NSString).deletingLastPathComponent] {
            chmod(dir, 0o755)
        }
        chmod(d.socketPath, 0o666)
        let asNobody = ["--reuid=65534", "--regid=65534", "--clear-groups"]
        var env = d.environment
        env["HOME"] = "/"
        let r = try ChildProcess.run(
            "setpriv", asNobody + [Paths.tool("vaultctl"), "status", "--json"], environment: env)
        #expect(r.status != 0, "\(r)")
        #expect(!r.stdoutText.contains("unlocked"), "\(r)")
        // vaultctl refuses vaultd (not its uid) as soon as it connects: vaultd's refusal may come after.
        #expect(
            eventually(timeout: 5) { d.log.contains("refused a connection from another user") },
            "log:\n\(d.log)")

        // A raw connection from that uid gets nothing back: closed at once.
        let probe = """
            import socket, sys
            s = socket.socket(socket.AF_UNIX)
            s.connect(sys.argv[1])
            try:
                s.sendall(b'{"method":"io.vaultd.Vault.Status"}\\0')
            except OSError:
                pass
            s.settimeout(5)
            try:
                data = s.recv(65536)
            except OSError as e:
                data = b''
            print(repr(data))
            """
        let raw = try ChildProcess.run(
            "setpriv", asNobody + ["/usr/bin/python3", "-c", probe, d.socketPath], environment: env)
        #expect(raw.stdoutText == "b''\n", "\(raw)")
        // The owner is still served.
        #expect(d.ctl(["status"]).status == 0)
    }

    // MARK: Validation, suites and the global domain

    @Test(arguments: [
        "notreverse", "org..example", "1org.example", ".org.example", "org.example.",
        "org.exa mple", "org/example.A", "org.ëxample",
    ])
    func appIDsMustBeReverseDNS(_ id: String) throws {
        let d = try Daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        let r = d.ctl(["app", "install", id, "--exe", a])
        #expect(r.status == 65, "\(r)")
        #expect(r.stderr.contains("io.vaultd.Apps.InvalidAppID"), "\(r)")
        let list = d.ctl(["app", "list", "--json"])
        #expect(list.jsonArray?.isEmpty == true, "\(list)")
    }

    /// An app ID may not be an app group's name (`group.*`): an app's own preferences domain
    /// and access group are its ID, so `group.example.shared` installed as an app read and
    /// wrote the suite and items of the apps in that group without being a member, they had
    /// its private domain, and its uninstall deleted their suite.
    @Test func anAppIDMayNotNameAnAppGroup() throws {
        let d = try Daemon()
        defer { d.close() }
        let member = try d.placeExample("member")
        let other = try d.placeExample("other")
        try #require(
            d.ctl([
                "app", "install", "org.example.member", "--exe", member, "--app-group",
                "group.example.shared",
            ]).status == 0)
        #expect(
            d.app(member, ["defaults", "set", "k", "members", "--suite", "group.example.shared"])
                .status == 0)
        let r = d.ctl(["app", "install", "group.example.shared", "--exe", other])
        #expect(r.status == 65, "\(r)")
        #expect(
            r.stderr.contains("io.vaultd.Apps.InvalidAppID") && r.stderr.contains("app group"),
            "\(r)")
        #expect(d.ctl(["app", "list"]).stdoutText.contains("group.example.shared") == false)
        // The copy stays unidentified (the owner's tools), and the members' suite is theirs.
        #expect(d.app(other, ["defaults", "get", "k"]).status != 0)
        #expect(d.ctl(["app", "uninstall", "group.example.shared"]).status != 0)
        #expect(
            d.app(member, ["defaults", "get", "k", "--suite", "group.example.shared"]).stdoutText
                == "members\n")
    }

    /// App groups whose names differ only in Unicode normalisation (`group.café` with a
    /// precomposed é, and with e + U+0301) are two groups, as the store keeps them: a member
    /// of one may not use the other's suite or items. Swift's `==` took them for one name, so
    /// each member read and wrote the other group's suite and keychain items.
    @Test func appGroupsDifferingOnlyInNormalisationAreDistinct() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let composed = "group.caf\u{E9}"
        let decomposed = "group.cafe\u{301}"
        let a = try d.placeExample("a")
        let b = try d.placeExample("b")
        try #require(
            d.ctl([
                "app", "install", "org.example.decomposed", "--exe", a, "--app-group", decomposed,
            ]).status == 0)
        try #require(
            d.ctl(["app", "install", "org.example.composed", "--exe", b, "--app-group", composed])
                .status == 0)
        #expect(
            d.app(a, ["defaults", "set", "k", "decomposed only", "--suite", decomposed]).status == 0
        )
        let item = ["--access-group", decomposed, "--service", "svc", "--account", "acct"]
        #expect(d.app(a, ["item", "add"] + item, stdin: Data("secret".utf8)).status == 0)

        let read = d.app(b, ["defaults", "get", "k", "--suite", decomposed])
        #expect(read.status != 0 && !read.stdoutText.contains("decomposed only"), "\(read)")
        #expect(read.stderr.contains("MissingEntitlement"), "\(read)")
        #expect(
            d.app(b, ["defaults", "set", "k", "overwritten", "--suite", decomposed]).status != 0)
        let get = d.app(b, ["item", "get"] + item)
        #expect(get.status != 0 && get.stdoutText.isEmpty, "\(get)")
        // Each member still has its own group.
        #expect(
            d.app(a, ["defaults", "get", "k", "--suite", decomposed]).stdoutText
                == "decomposed only\n")
        #expect(d.app(b, ["defaults", "set", "k", "composed", "--suite", composed]).status == 0)
        #expect(d.app(a, ["item", "get"] + item).stdoutText == "secret")
    }

    /// Bad Install arguments are varlink's InvalidParameter naming the parameter (they were
    /// io.vaultd.Keychain.Param, an error of another interface), and register nothing.
    @Test(arguments: [
        (["--exe", "relative/app"], "executable"),
        (["--access-group", ""], "accessGroups"),
        (["--access-group", String(repeating: "g", count: 256)], "accessGroups"),
        (["--access-group", "tab\there"], "accessGroups"),
        (["--app-group", "shared"], "appGroups"),
        (["--app-group", "group."], "appGroups"),
        (["--app-group", "group.line\nbreak"], "appGroups"),
    ])
    func badInstallArgumentsAreInvalidParameter(_ extra: [String], _ parameter: String) throws {
        let d = try Daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        let args =
            extra.first == "--exe"
            ? ["app", "install", Self.appA] + extra
            : ["app", "install", Self.appA, "--exe", a] + extra
        let r = d.ctl(args)
        #expect(r.status == 65, "\(r)")
        #expect(
            r.stderr.contains("org.varlink.service.InvalidParameter")
                && r.stderr.contains("'\(parameter)'"), "\(r)")
        #expect(d.ctl(["app", "list", "--json"]).jsonArray?.isEmpty == true)
    }

    @Test func anAppGroupSuiteIsReadableAndWritableByMembersOnly() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        let b = try d.placeExample("b")
        let c = try d.placeExample("c")
        try d.install(Self.appA, exe: a, ["--app-group", "group.org.example.suite"])
        try d.install(Self.appB, exe: b, ["--app-group", "group.org.example.suite"])
        try d.install(Self.appC, exe: c)
        let suite = ["--suite", "group.org.example.suite"]

        let set = d.app(a, ["defaults", "set", "colour", "blue"] + suite)
        #expect(set.status == 0, "\(set)")
        #expect(d.app(b, ["defaults", "get", "colour"] + suite).stdoutText == "blue\n")
        #expect(d.app(b, ["defaults", "set", "colour", "green"] + suite).status == 0)
        #expect(d.app(a, ["defaults", "get", "colour"] + suite).stdoutText == "green\n")
        #expect(
            d.ctl(["defaults", "read", "group.org.example.suite", "colour"]).stdoutText == "green\n"
        )

        let read = d.app(c, ["defaults", "get", "colour"] + suite)
        #expect(
            read.status == 77 && read.stderr.contains(Self.missingEntitlement)
                && !read.stdoutText.contains("green"), "\(read)")
        let write = d.app(c, ["defaults", "set", "colour", "red"] + suite)
        #expect(write.status == 77 && write.stderr.contains(Self.missingEntitlement), "\(write)")
        // Nor another app's own domain.
        let other = d.app(c, ["defaults", "get", "colour", "--suite", Self.appA])
        #expect(other.status == 77 && other.stderr.contains(Self.missingEntitlement), "\(other)")
        #expect(
            d.ctl(["defaults", "read", "group.org.example.suite", "colour"]).stdoutText == "green\n"
        )
    }

    /// Groups are compared byte for byte, as the store keeps them: an app whose group is
    /// `café` spelt with U+0301 is not a member of the `café` of another app with the
    /// precomposed U+00E9, though Swift's `==` calls the two equal. Were it one, B could read,
    /// replace, delete and plant items in A's group, and read and write A's app-group suite.
    @Test func groupsThatDifferOnlyInUnicodeNormalisationAreDifferentGroups() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        let b = try d.placeExample("b")
        let (nfc, nfd) = ("com.example.caf\u{E9}", "com.example.cafe\u{301}")
        let (suiteNFC, suiteNFD) = ("group.caf\u{E9}", "group.cafe\u{301}")
        #expect(Array(nfc.utf8) != Array(nfd.utf8) && Array(suiteNFC.utf8) != Array(suiteNFD.utf8))
        try d.install(Self.appA, exe: a, ["--access-group", nfc, "--app-group", suiteNFC])
        try d.install(Self.appB, exe: b, ["--access-group", nfd, "--app-group", suiteNFD])

        let item = ["--access-group", nfc, "--service", "svc", "--account", "acct"]
        let add = d.app(a, ["item", "add"] + item, stdin: Data("secret of A".utf8))
        try #require(add.status == 0, "\(add)")
        Self.expectMissingEntitlement(d.app(b, ["item", "get"] + item), "B reads A's item")
        Self.expectMissingEntitlement(
            d.app(b, ["item", "update"] + item, stdin: Data("replaced by B".utf8)),
            "B updates A's item")
        Self.expectMissingEntitlement(d.app(b, ["item", "delete"] + item), "B deletes A's item")
        Self.expectMissingEntitlement(
            d.app(b, ["item", "list", "--access-group", nfc]), "B lists A's group")
        Self.expectMissingEntitlement(
            d.app(
                b,
                ["item", "add", "--access-group", nfc, "--service", "planted", "--account", "x"],
                stdin: Data("p".utf8)),
            "B adds into A's group")
        #expect(d.app(a, ["item", "get"] + item).stdoutText == "secret of A")
        let listed = d.ctl(["item", "list", "--access-group", nfc, "--json"])
        #expect(listed.status == 0 && !listed.stdoutText.contains("planted"), "\(listed)")

        // B's own group, its default, is the other spelling, and holds what B adds.
        let own = d.app(
            b, ["item", "add", "--access-group", nfd, "--service", "svc", "--account", "acct"],
            stdin: Data("secret of B".utf8))
        #expect(own.status == 0, "\(own)")
        #expect(d.app(a, ["item", "get"] + item).stdoutText == "secret of A")

        // App-group suites likewise.
        #expect(d.app(a, ["defaults", "set", "colour", "blue", "--suite", suiteNFC]).status == 0)
        let read = d.app(b, ["defaults", "get", "colour", "--suite", suiteNFC])
        #expect(
            read.status == 77 && read.stderr.contains(Self.missingEntitlement)
                && !read.stdoutText.contains("blue"), "\(read)")
        let write = d.app(b, ["defaults", "set", "colour", "red", "--suite", suiteNFC])
        #expect(write.status == 77 && write.stderr.contains(Self.missingEntitlement), "\(write)")
        #expect(
            d.app(a, ["defaults", "get", "colour", "--suite", suiteNFC]).stdoutText == "blue\n")
    }

    /// An app group's suite goes with the group's last installed app, as iOS removes the
    /// group's shared container (its UserDefaults suite with it); while another member is
    /// installed it stays. It outlived them all, and a reinstall found the old values.
    @Test func anAppGroupSuiteGoesWithTheGroupsLastApp() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        let b = try d.placeExample("b")
        let group = "group.org.example.suite"
        try d.install(Self.appA, exe: a, ["--app-group", group])
        try d.install(Self.appB, exe: b, ["--app-group", group])
        #expect(d.app(a, ["defaults", "set", "colour", "blue", "--suite", group]).status == 0)
        #expect(d.ctl(["defaults", "write", "group.org.example.other", "kept", "yes"]).status == 0)

        #expect(d.ctl(["app", "uninstall", Self.appA]).status == 0)
        #expect(
            d.app(b, ["defaults", "get", "colour", "--suite", group]).stdoutText == "blue\n",
            "B is still a member")
        #expect(d.ctl(["app", "uninstall", Self.appB]).status == 0)
        let gone = d.ctl(["defaults", "read", group, "colour"])
        #expect(
            gone.status != 0 && !gone.stdoutText.contains("blue"), "the last member went: \(gone)")
        #expect(
            d.ctl(["defaults", "read", "group.org.example.other", "kept"]).stdoutText == "yes\n",
            "a suite of no uninstalled app stays")

        try d.install(Self.appA, exe: a, ["--app-group", group])
        let fresh = d.app(a, ["defaults", "get", "colour", "--suite", group])
        #expect(!fresh.stdoutText.contains("blue"), "\(fresh)")
    }

    /// Status tells an app only the figures it could read anyway: items in its access groups
    /// and the domains it may read. It gave every app the whole vault's counts, so one app
    /// could watch another's items and domains come and go.
    @Test func anAppsStatusCountsOnlyWhatItMayRead() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        let b = try d.placeExample("b")
        try d.install(Self.appA, exe: a, ["--app-group", "group.org.example.suite"])
        try d.install(Self.appB, exe: b)
        #expect(d.app(a, ["token", "set"], stdin: Data("a".utf8)).status == 0)
        #expect(d.app(a, ["defaults", "set", "k", "v"]).status == 0)
        #expect(
            d.app(a, ["defaults", "set", "k", "v", "--suite", "group.org.example.suite"]).status
                == 0)
        #expect(
            d.ctl(["item", "add", "--service", "owner", "--account", "x"], stdin: Data("s".utf8))
                .status == 0)
        #expect(d.ctl(["defaults", "write", "-g", "AppleLocale", "en_GB"]).status == 0)
        #expect(d.ctl(["defaults", "write", "org.example.elsewhere", "k", "v"]).status == 0)
        func figures(_ exe: String) -> ExactDictionary<Int>? {
            let r = d.app(exe, ["status"])
            return (try? JSON.parse(Array(r.stdout)))?.objectValue?.compactMapValues(\.intValue)
        }
        #expect(
            figures(a) == ["items": 1, "domains": 3],
            "A: its item; its domain, its suite and NSGlobalDomain")
        #expect(
            figures(b) == ["items": 0, "domains": 1],
            "B: nothing of A's or the owner's; NSGlobalDomain")
        let owner = d.ctl(["status", "--json"])
        let all = (try? JSON.parse(Array(owner.stdout)))?.objectValue
        #expect(
            all?["items"]?.intValue == 2 && all?["domains"]?.intValue == 4,
            "the owner: everything (\(owner))")
    }

    @Test func theGlobalDomainIsReadableByAppsButNotWritable() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        try d.install(Self.appA, exe: a)
        #expect(d.ctl(["defaults", "write", "-g", "AppleLocale", "en_GB"]).status == 0)

        #expect(
            d.app(a, ["defaults", "get", "AppleLocale"]).stdoutText == "en_GB\n",
            "through the search list")
        #expect(
            d.app(a, ["defaults", "get", "AppleLocale", "--suite", "NSGlobalDomain"]).stdoutText
                == "en_GB\n")
        let write = d.app(
            a, ["defaults", "set", "AppleLocale", "fr_FR", "--suite", "NSGlobalDomain"])
        #expect(write.status == 77, "\(write)")
        #expect(write.stderr.contains("io.vaultd.Preferences.ReadOnlyDomain"), "\(write)")
        #expect(d.ctl(["defaults", "read", "-g", "AppleLocale"]).stdoutText == "en_GB\n")
        // The app's own domain shadows the global one for that app only.
        #expect(d.app(a, ["defaults", "set", "AppleLocale", "de_DE"]).status == 0)
        #expect(d.app(a, ["defaults", "get", "AppleLocale"]).stdoutText == "de_DE\n")
        #expect(d.ctl(["defaults", "read", "-g", "AppleLocale"]).stdoutText == "en_GB\n")
    }
}
