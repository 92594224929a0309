import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// vaultctl's exit statuses, how it reads secrets and passphrases, and how it acts on several
/// items: through the real binaries, a real vaultd, and a real pseudo-terminal for prompts.
@Suite struct VaultctlInputTests {
    /// Each kind of failure has its own status (`ExitCode`, the table in `vaultctl --help`),
    /// the same from vault-example: a script tells "not found" from "locked" from "vaultd
    /// is not running" without reading stderr.
    @Test func eachKindOfFailureHasItsOwnExitStatus() throws {
        let d = try Daemon()
        defer { d.close() }
        #expect(d.initialize().status == 0)
        let add = d.ctl(
            ["item", "add", "--service", "codes", "--account", "a"], stdin: Data("v\n".utf8))
        try #require(add.status == 0, "\(add)")
        func expect(
            _ r: ProcessResult, _ status: Int32, _ said: String,
            sourceLocation: SourceLocation = #_sourceLocation
        ) {
            #expect(
                r.status == status && r.stderr.contains(said), "\(r)",
                sourceLocation: sourceLocation)
        }
        expect(
            d.ctl(["item", "get", "--service", "nothing-here"]), 44,
            "io.vaultd.Keychain.ItemNotFound")
        expect(d.ctl(["defaults", "read", "com.example.none", "k"]), 44, "does not exist")
        expect(d.ctl(["app", "show", "com.example.none"]), 44, "io.vaultd.Apps.AppNotFound")
        expect(
            d.ctl(["item", "add", "--service", "codes", "--account", "a"], stdin: Data("w".utf8)),
            45, "io.vaultd.Keychain.DuplicateItem")
        expect(
            d.ctl(
                [
                    "item", "add", "--service", "codes", "--account", "b", "--accessible",
                    "sometimes",
                ], stdin: Data("w".utf8)), 65, "io.vaultd.Keychain.Param")
        expect(
            d.ctl(["item", "add", "--service", "codes", "--account", "c"], stdin: Data()), 65,
            "is empty")
        expect(
            d.ctl(["defaults", "import", "com.example.bad", "-"], stdin: Data("not a plist".utf8)),
            65, "io.vaultd.Preferences.InvalidPropertyList")
        expect(d.ctl(["item", "frob"]), 64, "item needs add")
        expect(
            d.ctl(["--socket", d.root + "/no-such.sock", "status"]), 69,
            "io.vaultd.Client.ConnectionFailed")
        expect(d.unlock(passphrase: "wrong horse"), 1, "io.vaultd.Vault.AuthFailed")
        try #require(d.ctl(["lock"]).status == 0)
        expect(
            d.ctl(["item", "get", "--service", "codes"]), 36,
            "io.vaultd.Keychain.InteractionNotAllowed")
        try #require(d.unlock().status == 0)

        // Not permitted: a copy of vaultctl registered as an app may not use the owner's
        // group, nor the owner-only methods.
        let dir = d.root + "/apps/ctl"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: Paths.tool("vaultctl"), toPath: dir + "/vaultctl")
        try d.install("com.example.ctl", exe: dir + "/vaultctl")
        let asApp = { (args: [String]) in d.app(dir + "/vaultctl", args) }
        expect(
            asApp(["item", "get", "--access-group", "user", "--service", "codes"]), 77,
            "io.vaultd.Keychain.MissingEntitlement")
        expect(asApp(["app", "list"]), 77, "io.vaultd.Vault.PermissionDenied")

        // vault-example, an app on VaultClient, exits with the same statuses.
        let example = try d.placeExample("codes")
        try d.install("com.example.codes", exe: example)
        expect(d.app(example, ["token", "get"]), 44, "io.vaultd.Keychain.ItemNotFound")
        expect(
            d.app(example, ["item", "get", "--access-group", "user", "--service", "codes"]), 77,
            "io.vaultd.Keychain.MissingEntitlement")
        expect(d.app(example, ["frob"]), 64, "unknown command")
        var away = d.environment
        away["VAULTD_SOCKET"] = d.root + "/no-such.sock"
        let unreachable = try ChildProcess.run(example, ["status"], environment: away)
        expect(unreachable, 69, "io.vaultd.Client.ConnectionFailed")
        // The table is in the usage text.
        let help = d.ctl(["--help"])
        #expect(
            help.stdoutText.contains(
                "Exit status: 0 ok, 1 other failure, 36 locked, 44 not found, 45 duplicate item, 64 usage,"
            ), "\(help)")
    }

    /// One rule for every secret and passphrase: an fd, else stdin when it is not a terminal,
    /// else a prompt; one final newline removed from fd and stdin input (so `3<<<x` is `x`
    /// for `--secret-fd` as for `--passphrase-fd`; `--raw` keeps it); empty refused unless
    /// `--allow-empty`; a passphrase with a line break left in it is refused, not cut.
    @Test func secretsAndPassphrasesAreReadByOneRule() throws {
        let d = try Daemon()
        defer { d.close() }
        // The passphrase from stdin at init, from an fd without a newline at unlock.
        let i = d.ctl(["init"], stdin: Data("pass word\n".utf8))
        try #require(i.status == 0, "\(i)")
        try #require(d.ctl(["lock"]).status == 0)
        let u = d.ctl(["unlock", "--passphrase-fd", "3"], fds: [3: Data("pass word".utf8)])
        #expect(u.status == 0, "\(u)")
        func secret(_ account: String) -> Data {
            d.ctl(["item", "get", "--service", "rule", "--account", account]).stdout
        }
        for (account, args, fds, stdin, expected) in [
            ("fd", ["--secret-fd", "3"], [Int32(3): Data("x\n".utf8)], nil, Data("x".utf8)),
            ("stdin", [], [:], Data("x\n".utf8), Data("x".utf8)),
            ("no-newline", [], [:], Data("x".utf8), Data("x".utf8)),
            ("two-newlines", [], [:], Data("x\n\n".utf8), Data("x\n".utf8)),
            ("raw", ["--raw", "--secret-fd", "3"], [3: Data("x\n".utf8)], nil, Data("x\n".utf8)),
            ("empty", ["--allow-empty"], [:], Data(), Data()),
            ("just-newline", ["--allow-empty"], [:], Data("\n".utf8), Data()),
        ] as [(String, [String], [Int32: Data], Data?, Data)] {
            let r = d.ctl(
                ["item", "add", "--service", "rule", "--account", account] + args, stdin: stdin,
                fds: fds)
            #expect(r.status == 0, "\(account): \(r)")
            #expect(secret(account) == expected, "\(account): \(Array(secret(account)))")
        }
        // item update reads its new secret by the same rule.
        let up = d.ctl(
            ["item", "update", "--service", "rule", "--account", "fd", "--secret-fd", "3"],
            fds: [3: Data("y\n".utf8)])
        #expect(up.status == 0 && secret("fd") == Data("y".utf8), "\(up)")
        let upStdin = d.ctl(
            ["item", "update", "--service", "rule", "--account", "fd", "--secret-stdin"],
            stdin: Data("z\n".utf8))
        #expect(upStdin.status == 0 && secret("fd") == Data("z".utf8), "\(upStdin)")

        // Empty input is refused, and nothing is stored or changed.
        for (args, fds, stdin) in [
            (["item", "add", "--service", "rule", "--account", "e1"], [:], Data()),
            (
                ["item", "add", "--service", "rule", "--account", "e2", "--secret-fd", "3"],
                [Int32(3): Data("\n".utf8)], nil
            ),
            (
                ["item", "update", "--service", "rule", "--account", "fd", "--secret-stdin"], [:],
                Data()
            ),
        ] as [([String], [Int32: Data], Data?)] {
            let r = d.ctl(args, stdin: stdin, fds: fds)
            #expect(
                r.status == 65
                    && r.stderr.contains("is empty (give --allow-empty for an empty one)"),
                "\(args): \(r)")
        }
        #expect(d.ctl(["item", "get", "--service", "rule", "--account", "e1"]).status == 44)
        #expect(secret("fd") == Data("z".utf8))

        // A passphrase with a line break inside (a second line, a CRLF file) is refused, not cut.
        for bad in ["pass word\nmore\n", "pass word\r\n"] {
            try #require(d.ctl(["lock"]).status == 0)
            let r = d.ctl(["unlock", "--passphrase-fd", "3"], fds: [3: Data(bad.utf8)])
            #expect(r.status == 65 && r.stderr.contains("contains a line break"), "\(r)")
        }
        // passphrase change: the current one takes stdin, the new one its fd.
        let change = d.ctl(
            ["passphrase", "change", "--new-passphrase-fd", "3"], stdin: Data("pass word\n".utf8),
            fds: [3: Data("new word\n".utf8)])
        #expect(change.status == 0, "\(change)")
        try #require(d.ctl(["lock"]).status == 0)
        #expect(d.ctl(["unlock"], stdin: Data("new word".utf8)).status == 0)
        // The new passphrase cannot take stdin too; with no terminal to ask on, it says so.
        let both = d.ctl(["passphrase", "change"], stdin: Data("new word\n".utf8))
        #expect(
            both.status == 64
                && both.stderr.contains(
                    "no terminal to ask for the new passphrase on: give it on stdin or with --new-passphrase-fd N"
                ), "\(both)")
    }

    /// At a terminal, a new secret or passphrase (`init`, `item add`, the new one of
    /// `passphrase change`) is asked twice and must match; an existing one once. Typed through a real
    /// pseudo-terminal.
    @Test func aPromptAsksTwiceForANewSecretOrPassphrase() throws {
        let d = try Daemon()
        defer { d.close() }
        // Two different entries: refused, and the vault is still uninitialised.
        let differ = PseudoTerminal.run(
            d, "vaultctl", ["init"],
            answers: [
                ("New vault passphrase: ", "one"), ("Retype the new vault passphrase: ", "two"),
            ])
        #expect(
            differ.status == 65 && differ.stdoutText.contains("differ; nothing was changed"),
            "\(differ)")
        #expect(d.statusJSON()?["state"] as? String == "uninitialized")
        let i = PseudoTerminal.run(
            d, "vaultctl", ["init"],
            answers: [
                ("New vault passphrase: ", "typed pw"),
                ("Retype the new vault passphrase: ", "typed pw"),
            ])
        #expect(i.status == 0 && !i.stdoutText.contains("typed pw"), "\(i)")
        try #require(d.ctl(["lock"]).status == 0)
        let u = PseudoTerminal.run(
            d, "vaultctl", ["unlock"], answers: [("Vault passphrase: ", "typed pw")])
        #expect(
            u.status == 0 && u.stdoutText.contains("state: unlocked")
                && !u.stdoutText.contains("Retype"), "\(u)")

        let add = PseudoTerminal.run(
            d, "vaultctl", ["item", "add", "--service", "tty", "--account", "a"],
            answers: [("Secret: ", "typed-s3cret"), ("Retype the secret: ", "typed-s3cret")])
        #expect(add.status == 0 && !add.stdoutText.contains("typed-s3cret"), "\(add)")
        #expect(d.ctl(["item", "get", "--service", "tty"]).stdout == Data("typed-s3cret".utf8))
        let addDiffer = PseudoTerminal.run(
            d, "vaultctl", ["item", "add", "--service", "tty", "--account", "b"],
            answers: [("Secret: ", "one"), ("Retype the secret: ", "two")])
        #expect(addDiffer.status == 65, "\(addDiffer)")
        #expect(d.ctl(["item", "get", "--service", "tty", "--account", "b"]).status == 44)

        let change = PseudoTerminal.run(
            d, "vaultctl", ["passphrase", "change"],
            answers: [
                ("Current passphrase: ", "typed pw"), ("New passphrase: ", "next pw"),
                ("Retype the new passphrase: ", "next pw"),
            ])
        #expect(change.status == 0 && change.stdoutText.contains("passphrase changed"), "\(change)")
        try #require(d.ctl(["lock"]).status == 0)
        #expect(d.unlock(passphrase: "next pw").status == 0)
    }

    /// `item delete` and `item update` that match several items list them and ask; `--yes`
    /// acts without asking; without it and without a terminal they refuse (exit 1) with the
    /// list; `--dry-run` lists and changes nothing. One filter never changes matches in
    /// several groups unseen.
    @Test func deleteAndUpdateOfSeveralItemsListThemAndAsk() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        for (group, account) in [("user", "a"), ("team", "b")] {
            try #require(
                d.ctl(
                    [
                        "item", "add", "--access-group", group, "--service", "many", "--account",
                        account,
                    ], stdin: Data("v-\(account)".utf8)
                ).status == 0)
        }
        func count() -> Int {
            d.ctl(["item", "list", "--service", "many"]).stdoutText.split(separator: "\n").count
        }

        let refused = d.ctl(["item", "delete", "--service", "many"])
        #expect(
            refused.status == 1
                && refused.stderr.contains(
                    "item delete matches 2 items in 2 access group(s); nothing was changed"),
            "\(refused)")
        #expect(
            refused.stderr.contains("group=\"user\" service=\"many\" account=\"a\"")
                && refused.stderr.contains("group=\"team\" service=\"many\" account=\"b\""),
            "\(refused)")
        let updateRefused = d.ctl(["item", "update", "--service", "many", "--set-label", "L"])
        #expect(
            updateRefused.status == 1
                && updateRefused.stderr.contains("item update matches 2 items"), "\(updateRefused)")
        let dry = d.ctl(["item", "delete", "--service", "many", "--dry-run"])
        #expect(
            dry.status == 0
                && dry.stdoutText.hasSuffix(
                    "dry run, nothing changed: 2 item(s) would be deleted\n"),
            "\(dry)")
        #expect(dry.stdoutText.contains("would delete generic  group=\"team\""), "\(dry)")
        let dryUpdate = d.ctl([
            "item", "update", "--service", "many", "--set-label", "L", "--dry-run",
        ])
        #expect(
            dryUpdate.status == 0 && dryUpdate.stdoutText.contains("2 item(s) would be updated"),
            "\(dryUpdate)")
        #expect(
            count() == 2
                && !d.ctl(["item", "list", "--service", "many"]).stdoutText.contains("label=\"L\""))

        // At a terminal: asked; "n" keeps both.
        let no = PseudoTerminal.run(
            d, "vaultctl", ["item", "delete", "--service", "many"],
            answers: [("Delete these 2 items? [y/N] ", "n")])
        #expect(no.status == 1 && no.stdoutText.contains("group=\"team\""), "\(no)")
        #expect(count() == 2)
        let update = d.ctl(["item", "update", "--service", "many", "--set-label", "L", "--yes"])
        #expect(update.status == 0 && update.stdoutText == "updated 2 item(s)\n", "\(update)")
        #expect(
            d.ctl(["item", "list", "--service", "many", "--label", "L"]).stdoutText.split(
                separator: "\n"
            ).count == 2)
        // One match is changed without a question.
        let one = d.ctl(["item", "delete", "--service", "many", "--access-group", "team"])
        #expect(one.status == 0 && one.stdoutText == "deleted 1 item(s)\n", "\(one)")
        try #require(
            d.ctl(
                ["item", "add", "--access-group", "team", "--service", "many", "--account", "b"],
                stdin: Data("v".utf8)
            ).status == 0)
        let yes = PseudoTerminal.run(
            d, "vaultctl", ["item", "delete", "--service", "many"],
            answers: [("Delete these 2 items? [y/N] ", "y")])
        #expect(yes.status == 0 && yes.stdoutText.contains("deleted 2 item(s)"), "\(yes)")
        #expect(count() == 0)
    }

    /// `item add --update` adds, or replaces the secret and the given attributes of the item
    /// with that primary key in the group the add goes to (`security add-generic-password
    /// -U`); an item of the same service and account in another group is not touched.
    @Test func addWithUpdateReplacesTheItemWithThatKey() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        try #require(
            d.ctl(
                ["item", "add", "--access-group", "team", "--service", "upd", "--account", "a"],
                stdin: Data("team".utf8)
            ).status == 0)
        let first = d.ctl(
            ["item", "add", "--service", "upd", "--account", "a", "--update"],
            stdin: Data("one".utf8))
        #expect(first.status == 0 && first.stdout.isEmpty, "\(first)")
        let second = d.ctl(
            ["item", "add", "--service", "upd", "--account", "a", "--update", "--label", "Second"],
            stdin: Data("two".utf8))
        #expect(second.status == 0 && second.stdoutText == "updated 1 item(s)\n", "\(second)")
        #expect(
            d.ctl(["item", "get", "--access-group", "user", "--service", "upd"]).stdout
                == Data("two".utf8))
        #expect(
            d.ctl(["item", "get", "--access-group", "team", "--service", "upd"]).stdout
                == Data("team".utf8))
        let list = d.ctl(["item", "list", "--service", "upd", "--json"]).jsonArray ?? []
        #expect(
            list.count == 2
                && list.contains {
                    $0["accessGroup"] as? String == "user" && $0["label"] as? String == "Second"
                }, "\(list)")
        #expect(
            d.ctl(["item", "add", "--service", "upd", "--account", "a"], stdin: Data("three".utf8))
                .status == 45, "without --update: DuplicateItem")
    }

    /// `cache purge --dry-run` and `app uninstall --dry-run` say what they would remove and
    /// remove nothing.
    @Test func cachePurgeAndAppUninstallHaveADryRun() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        let app = try d.placeExample("dry")
        try d.install("com.example.dry", exe: app)
        try #require(d.app(app, ["cache", "write", "blob", "10000"]).status == 0)
        try #require(d.app(app, ["defaults", "set", "k", "v"]).status == 0)
        let dir = d.app(app, ["cache", "path"]).stdoutText.trimmingCharacters(in: .newlines)
        let purge = d.ctl(["cache", "purge", "com.example.dry", "--dry-run"])
        #expect(
            purge.status == 0 && purge.stdoutText.contains("would purge com.example.dry: ")
                && purge.stdoutText.contains(
                    "dry run, nothing changed: a purge would remove 1 file(s)"),
            "\(purge)")
        #expect(FileManager.default.fileExists(atPath: dir + "/blob"))
        let uninstall = d.ctl(["app", "uninstall", "com.example.dry", "--dry-run"])
        #expect(
            uninstall.status == 0
                && uninstall.stdoutText.contains(
                    "would uninstall com.example.dry: its preferences domain (1 key(s))"),
            "\(uninstall)")
        #expect(d.appShow("com.example.dry")?["installed"] as? Bool == true)
        #expect(FileManager.default.fileExists(atPath: dir + "/blob"))
        #expect(d.ctl(["cache", "path", "x", "--dry-run"]).status == 64)
    }

    /// `defaults read` shows data over 24 bytes abbreviated as macOS 10.15 and later do
    /// (CFData's description: the first 16 and last 8 bytes in groups of four); 24 bytes or
    /// fewer whole. `defaults export` keeps every byte.
    @Test func defaultsReadAbbreviatesLongDataAndExportKeepsIt() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        let long = (0..<32).map { String(format: "%02x", $0) }.joined()
        let short = (0..<24).map { String(format: "%02x", $0) }.joined()
        try #require(
            d.ctl(["defaults", "write", "com.example.data", "long", "-data", long]).status == 0)
        try #require(
            d.ctl(["defaults", "write", "com.example.data", "short", "-data", short]).status == 0)
        let abbreviated =
            "{length = 32, bytes = 0x00010203 04050607 08090a0b 0c0d0e0f ... 18191a1b 1c1d1e1f }"
        #expect(
            d.ctl(["defaults", "read", "com.example.data", "long"]).stdoutText == abbreviated + "\n"
        )
        #expect(
            d.ctl(["defaults", "read", "com.example.data", "short"]).stdoutText
                == "{length = 24, bytes = 0x\(short)}\n")
        let domain = d.ctl(["defaults", "read", "com.example.data"]).stdoutText
        #expect(domain.contains("    long = \(abbreviated);\n"), "\(domain)")
        let export = d.ctl(["defaults", "export", "com.example.data", "-"])
        let plist =
            try PropertyListSerialization.propertyList(from: export.stdout, format: nil)
            as? [String: Any]
        #expect((plist?["long"] as? Data) == Data((0..<32).map { UInt8($0) }), "\(export)")
    }

    /// `--json` shows `generic` as it was given: text when it is UTF-8 (as `--generic` takes
    /// it), `genericBase64` otherwise (as `--generic-base64` takes it), so a value read back
    /// can be written back; dates have at most six fraction digits.
    @Test func jsonShowsGenericAsGivenAndDatesToTheMicrosecond() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        try #require(
            d.ctl(
                ["item", "add", "--service", "j", "--account", "text", "--generic", "hello wörld"],
                stdin: Data("x".utf8)
            ).status == 0)
        try #require(
            d.ctl(
                [
                    "item", "add", "--service", "j", "--account", "bytes", "--generic-base64",
                    "/wAB",
                ], stdin: Data("x".utf8)
            ).status == 0)
        let list = d.ctl(["item", "list", "--service", "j", "--json"]).jsonArray ?? []
        let text = try #require(list.first { $0["account"] as? String == "text" })
        let bytes = try #require(list.first { $0["account"] as? String == "bytes" })
        #expect(
            text["generic"] as? String == "hello wörld" && text["genericBase64"] == nil, "\(text)")
        #expect(bytes["genericBase64"] as? String == "/wAB" && bytes["generic"] == nil, "\(bytes)")
        for item in list {
            for key in ["creationDate", "modificationDate"] {
                let date = item[key] as? String ?? ""
                #expect(
                    date.wholeMatch(of: #/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z/#) != nil,
                    "\(key): \(date)")
            }
        }
        // Written back as shown, it is the same value.
        let back = d.ctl([
            "item", "update", "--service", "j", "--account", "text", "--set-generic-base64",
            bytes["genericBase64"] as! String,
        ])
        #expect(back.status == 0, "\(back)")
        let again = d.ctl(["item", "get", "--service", "j", "--account", "text", "--json"])
            .jsonObject
        #expect(again?["genericBase64"] as? String == "/wAB", "\(String(describing: again))")
        #expect(
            d.ctl(
                ["item", "add", "--service", "j", "--generic-base64", "not base64!"],
                stdin: Data("x".utf8)
            ).status == 65)
    }

    /// With no vaultd at the socket, git-credential-vault `store` and `erase` exit 69 with one
    /// line on stderr (git shows it: the credential was not kept); `get` stays silent with
    /// exit 0, so git prompts, as git's own helpers do.
    @Test func gitsHelperSaysWhenVaultdIsNotReachable() throws {
        let d = try Daemon(start: false)
        defer { d.close() }
        let input = Data("protocol=https\nhost=example.org\nusername=bob\npassword=pw\n\n".utf8)
        for action in ["store", "erase"] {
            let r = d.run("git-credential-vault", [action], stdin: input)
            #expect(r.status == 69 && r.stdout.isEmpty, "\(action): \(r)")
            #expect(
                r.stderr.hasPrefix("git-credential-vault: \(action): vaultd is not reachable (")
                    && r.stderr.split(separator: "\n").count == 1, "\(action): \(r)")
            #expect(!r.stderr.contains("pw\n") && !r.stderr.contains("password"), "\(r)")
        }
        let get = d.run("git-credential-vault", ["get"], stdin: input)
        #expect(get.status == 0 && get.stdout.isEmpty && get.stderr.isEmpty, "\(get)")
    }
}
