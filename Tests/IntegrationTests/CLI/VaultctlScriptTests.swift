import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// vaultctl as scripts use it: exit codes, stdout and stderr.
@Suite struct VaultctlScriptTests {
    /// vaultctl's output that cannot be written (a full disk, stdout closed) is a failure a
    /// script can see: exit 1 and a line on stderr. `status`, `item list` and `defaults read`
    /// exited 0 with their output lost (`vaultctl item list --json > items.json` on a full
    /// disk left an empty file and "success"); `item get` and `defaults export -` crashed with
    /// a Foundation fatal error (SIGILL, 132); and with stdout closed the secret of `item get`
    /// went to the next file vaultctl opened as fd 1, its socket to vaultd, and it said 0.
    @Test func vaultctlOutputThatCannotBeWrittenIsAFailure() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        try #require(
            d.ctl(
                ["item", "add", "--service", "out", "--account", "a"], stdin: Data("sekrit".utf8)
            ).status == 0)
        try #require(
            d.ctl(["defaults", "write", "com.example.out", "k", "-string", "v"]).status == 0)
        let commands = [
            "status", "status --json", "item list", "item list --json", "item get --service out",
            "item get --service out --json",
            "defaults read com.example.out", "defaults export com.example.out -", "app list --json",
        ]
        for command in commands {
            for redirect in [">/dev/full", ">&-"] {
                let r = d.run(
                    "sh", ["-c", "\"$0\" \(command) \(redirect)", Paths.tool("vaultctl")])
                #expect(r.status == 1, "vaultctl \(command) \(redirect): \(r)")
                #expect(
                    r.stderr.hasPrefix("vaultctl: cannot write to standard output"),
                    "vaultctl \(command) \(redirect): \(r)")
                #expect(
                    !r.stderr.contains("Fatal error") && !r.stderr.contains("sekrit"),
                    "vaultctl \(command) \(redirect): \(r)")
            }
        }
        // Written whole, it is still 0 and exactly the secret.
        let get = d.ctl(["item", "get", "--service", "out"])
        #expect(
            get.status == 0 && get.stdout == Data("sekrit".utf8) && get.stderr.isEmpty, "\(get)")
    }

    /// Without `generic` or `internet`, an internet attribute names an internet password:
    /// `item get --server github.com` was ItemNotFound (the class defaulted to generic) and
    /// `item add --server …` was refused (a server on a generic password).
    @Test func anInternetAttributeWithoutAClassNamesAnInternetPassword() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        let add = d.ctl(
            ["item", "add", "--server", "github.com", "--protocol", "https", "--account", "bob"],
            stdin: Data("tok-1".utf8))
        try #require(add.status == 0, "\(add)")
        try #require(
            d.ctl(
                ["item", "add", "--service", "github.com", "--account", "bob"],
                stdin: Data("gen-1".utf8)
            ).status == 0)
        let list = d.ctl(["item", "list", "--json"])
        let classes = (try JSONSerialization.jsonObject(with: list.stdout) as? [[String: Any]])?
            .compactMap { $0["class"] as? String }.sorted()
        #expect(classes == ["genericPassword", "internetPassword"], "\(list)")
        for (args, secret) in [
            (["--server", "github.com"], "tok-1"),
            (["--protocol", "https", "--account", "bob"], "tok-1"), (["--port", "0"], "tok-1"),
            (["--service", "github.com"], "gen-1"), (["--account", "bob"], "gen-1"),
            (["internet", "--account", "bob"], "tok-1"),
        ] {
            let get = d.ctl(["item", "get"] + args)
            #expect(get.status == 0 && get.stdout == Data(secret.utf8), "item get \(args): \(get)")
        }
        // A service is a generic password's, a server (port, path, …) an internet password's:
        // a command line naming both, or the other class's, is a usage error that says so (it
        // was ItemNotFound, an empty list, or a Param error about the wrong class).
        for (args, said) in [
            (
                ["add", "--service", "s", "--server", "h"],
                "--service is a generic password's attribute and --server"
            ),
            (
                ["get", "--service", "github.com", "--port", "443"],
                "and --port internet passwords'"
            ),
            (
                ["list", "--service", "github.com", "--path", "/x"],
                "and --path internet passwords'"
            ),
            (
                ["get", "generic", "--server", "github.com"],
                "--server: internet passwords' attributes (use 'item get internet')"
            ),
            (
                ["update", "generic", "--service", "github.com", "--set-protocol", "ssh"],
                "--set-protocol: internet passwords'"
            ),
            (
                ["delete", "internet", "--service", "github.com"],
                "--service is a generic password's attribute"
            ),
            (
                ["get", "--server", "github.com", "internet"],
                "'internet' (the class) comes right after the verb"
            ),
        ] {
            let r = d.ctl(["item"] + args, stdin: Data("x".utf8))
            #expect(r.status == 64 && r.stderr.contains(said), "item \(args): \(r)")
        }
        #expect(
            d.ctl(["item", "list"]).stdoutText.split(separator: "\n").count == 2,
            "nothing added or deleted")
        let update = d.ctl(["item", "update", "--server", "github.com", "--set-label", "GitHub"])
        #expect(
            update.status == 0 && update.stdout == Data("updated 1 item(s)\n".utf8), "\(update)")
        let delete = d.ctl(["item", "delete", "--server", "github.com"])
        #expect(
            delete.status == 0 && delete.stdout == Data("deleted 1 item(s)\n".utf8), "\(delete)")
        #expect(d.ctl(["item", "get", "--service", "github.com"]).stdout == Data("gen-1".utf8))
    }

    /// `--help` after a command prints that command's usage and exits 0 (not "unexpected
    /// argument '--help'", exit 64).
    @Test func helpAfterACommandPrintsItsUsage() throws {
        let d = try Daemon()
        defer { d.close() }
        for (args, first) in [
            (["item", "add", "--help"], "  item add [CLASS]"),
            (["defaults", "--help"], "  defaults read [DOMAIN [KEY]]"),
            (["cache", "purge", "x", "--help"], "  cache path APP_ID"),
        ] {
            let r = d.ctl(args)
            #expect(
                r.status == 0 && r.stdoutText.hasPrefix("usage:\n" + first) && r.stderr.isEmpty,
                "\(args): \(r)")
        }
    }

    /// `defaults export DOMAIN PATH` writes to PATH as `> PATH` would: through a symlink (which
    /// stays one, the file it leads to getting the export), keeping a file's permissions, and
    /// to a FIFO's reader. It renamed a new 0644 file over PATH itself: the symlink became a
    /// regular file while its target kept the old content, a 0600 file became 0644, and the
    /// FIFO was replaced, its reader getting nothing (as root, `defaults export D /dev/stdout`
    /// replaced the system's /dev/stdout symlink with a regular file).
    @Test func defaultsExportWritesThroughSymlinksAndFIFOsAndKeepsPermissions() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        try #require(
            d.ctl(["defaults", "write", "com.example.exp", "k", "-string", "v"]).status == 0)
        let fm = FileManager.default
        func isBinaryPlist(_ path: String) -> Bool {
            (fm.contents(atPath: path) ?? Data()).starts(with: Array("bplist00".utf8))
        }
        func fileType(_ path: String) -> mode_t {
            var st = stat()
            return lstat(path, &st) == 0 ? st.st_mode & S_IFMT : 0
        }

        // A symlink to a file (kept in a dotfiles repository, say).
        try fm.createDirectory(atPath: d.root + "/dot", withIntermediateDirectories: true)
        try Data("old".utf8).write(to: URL(fileURLWithPath: d.root + "/dot/real.plist"))
        try fm.createSymbolicLink(
            atPath: d.root + "/link.plist", withDestinationPath: "dot/real.plist")
        let viaLink = d.ctl(["defaults", "export", "com.example.exp", d.root + "/link.plist"])
        #expect(viaLink.status == 0, "\(viaLink)")
        #expect(fileType(d.root + "/link.plist") == S_IFLNK, "the symlink was replaced by a file")
        #expect(
            isBinaryPlist(d.root + "/dot/real.plist"), "the symlink's file kept its old content")

        // A file its owner made private stays private.
        let privatePath = d.root + "/private.plist"
        try Data("old".utf8).write(to: URL(fileURLWithPath: privatePath))
        try #require(chmod(privatePath, 0o600) == 0)
        let toPrivate = d.ctl(["defaults", "export", "com.example.exp", privatePath])
        #expect(toPrivate.status == 0, "\(toPrivate)")
        var st = stat()
        #expect(
            stat(privatePath, &st) == 0 && st.st_mode & 0o777 == 0o600,
            "mode \(String(st.st_mode & 0o777, radix: 8))")
        #expect(isBinaryPlist(privatePath))

        // A FIFO: its reader gets the plist, and the FIFO stays one.
        let fifo = d.root + "/fifo"
        try #require(mkfifo(fifo, 0o600) == 0)
        let viaFIFO = d.run(
            "sh",
            [
                "-c",
                "timeout 10 cat \"$1\" >\"$2\" & \"$0\" defaults export com.example.exp \"$1\"; s=$?; wait; exit $s",
                Paths.tool("vaultctl"), fifo, d.root + "/from-fifo",
            ])
        #expect(viaFIFO.status == 0, "\(viaFIFO)")
        #expect(fileType(fifo) == S_IFIFO, "the FIFO was replaced by a file")
        #expect(isBinaryPlist(d.root + "/from-fifo"), "the FIFO's reader got no plist")
    }

    /// A usage error is exit 64 with its reason first and then the usage of the command it
    /// concerns, not the whole 50-line text, which buried the reason; an unknown command gets
    /// the synopsis. No daemon is needed (none runs here).
    @Test(arguments: [
        (
            ["item", "get"], "item get needs at least one filter",
            ["  item get [CLASS] FILTERS", "  ATTRIBUTES / FILTERS:"], "defaults"
        ),
        (
            ["--socket", "/nowhere", "unlock", "--frob"], "unknown option '--frob'",
            ["  unlock [--passphrase-fd N]", "  unlock --from-keyring"], "item"
        ),
        (
            ["defaults", "write"], "wrong number of arguments for defaults write",
            ["  defaults write DOMAIN KEY", "  defaults import"], "item "
        ),
        (
            ["app"], "app needs install",
            ["  app install APP_ID", "  [--keep-credentials-on-reinstall]"], "defaults"
        ),
        (
            ["frob"], "unknown command 'frob'", ["usage: vaultctl [--socket PATH] COMMAND ..."],
            "item"
        ),
        // A command whose usage line is the bare word (no arguments), not the synopsis.
        (["lock", "--frob"], "unknown option '--frob'", ["usage:\n  lock\n"], "COMMAND ..."),
        // An empty socket path (a variable unset): it said "File name too long".
        (["--socket", "", "status"], "--socket needs a value", ["  status [--json]"], "defaults"),
        // Options a cache action has no use for: they were ignored.
        (
            ["cache", "path", "com.example.app", "--bytes", "5"], "cache path takes only an APP_ID",
            ["  cache path APP_ID"], "defaults"
        ),
        (
            ["cache", "path", "com.example.app", "--json"], "cache path takes only an APP_ID",
            ["  cache path APP_ID"], "defaults"
        ),
        (
            ["cache", "purge", "--json"], "cache purge takes only [APP_ID] [--bytes N]",
            ["cache purge [APP_ID] [--bytes N]"], "defaults"
        ),
        // A mistyped option is named, with the one meant, not what its absence caused ("needs
        // at least one filter"); so are a mistyped command and verb.
        (
            ["item", "get", "--servce", "x"], "unknown option '--servce' (did you mean --service?)",
            ["  item get [CLASS] FILTERS"], "defaults"
        ),
        (
            ["item", "delete", "--acount=x", "--service", "s"],
            "unknown option '--acount=…' (did you mean --account?)", ["  item delete"], "defaults"
        ),
        (
            ["status", "--jsno"], "unknown option '--jsno' (did you mean --json?)",
            ["  status [--json]"], "defaults"
        ),
        (
            ["itme", "list"], "unknown command 'itme' (did you mean item?)",
            ["usage: vaultctl [--socket PATH] COMMAND ..."], "defaults"
        ),
        (
            ["item", "gte", "--service", "x"],
            "item needs add, get, update, delete or list (did you mean item get?)",
            ["  item get [CLASS] FILTERS"], "defaults"
        ),
        (
            ["defaults", "raed", "d"],
            "defaults needs read, read-type, write, delete, rename, domains, find, import or export (did you mean defaults read?)",
            ["  defaults read [DOMAIN [KEY]]"], "item"
        ),
        (
            ["sync", "status", "--jsn"], "unknown option '--jsn' (did you mean --json?)",
            ["  sync status [--json]"], "defaults"
        ),
    ])
    func aUsageErrorSaysWhyAndShowsThatCommandsUsage(
        arguments: [String], reason: String, shown: [String], notShown: String
    ) throws {
        let r = try ChildProcess.run(
            Paths.tool("vaultctl"), arguments, environment: ["PATH": "/usr/bin:/bin"])
        #expect(r.status == 64, "\(r)")
        let lines = r.stderr.split(separator: "\n")
        #expect(lines.first?.hasPrefix("vaultctl: " + reason) == true, "\(r.stderr)")
        for s in shown { #expect(r.stderr.contains(s), "missing '\(s)': \(r.stderr)") }
        #expect(!r.stderr.contains(notShown), "\(r.stderr)")
        #expect(
            lines.last == "Run 'vaultctl --help' for every command." && lines.count <= 16,
            "\(r.stderr)")
        #expect(r.stdout.isEmpty)
    }

    /// A VAULTCTL_TIMEOUT that is no number of seconds is a usage error naming it: it fell back
    /// to 60 s without a word, so a script's `VAULTCTL_TIMEOUT=5s` waited 60 on a hung vaultd.
    @Test(arguments: ["5s", "abc", "-1", "inf", ""])
    func aTimeoutThatIsNoNumberOfSecondsIsAUsageError(value: String) throws {
        let r = try ChildProcess.run(
            Paths.tool("vaultctl"), ["status"],
            environment: ["PATH": "/usr/bin:/bin", "VAULTCTL_TIMEOUT": value])
        #expect(
            r.status == 64
                && r.stderr.hasPrefix("vaultctl: VAULTCTL_TIMEOUT must be a number of seconds"),
            "\(r)")
        // A number is taken (here: no vaultd at the socket, so exit 69, not 64).
        let ok = try ChildProcess.run(
            Paths.tool("vaultctl"), ["--socket", "/nonexistent/vaultd.sock", "status"],
            environment: ["PATH": "/usr/bin:/bin", "VAULTCTL_TIMEOUT": "2.5"])
        #expect(ok.status == 69 && ok.stderr.contains("cannot connect"), "\(ok)")
    }

    /// A rejected typed value is named when short (`'1.5' is not an integer`) and not echoed
    /// when long or not printable ASCII ("the value"), for -int, -bool and -date as for
    /// -float: none prints any argument whole into the error.
    @Test(arguments: ["-int", "-bool", "-date"])
    func aRejectedTypedValueIsNamedOnlyWhenShort(flag: String) throws {
        let d = try Daemon()
        defer { d.close() }
        let long = String(repeating: "x", count: 200)
        let r = d.ctl(["defaults", "write", "com.example.v", "k", flag, long])
        #expect(
            r.status == 65 && r.stderr.hasPrefix("vaultctl: the value is not a")
                && !r.stderr.contains("xxxxxxxxxx"), "\(r)")
        let short = d.ctl(["defaults", "write", "com.example.v", "k", flag, "1.5x"])
        #expect(
            short.status == 65 && short.stderr.hasPrefix("vaultctl: '1.5x' is not a"), "\(short)")
        // Checked before connecting: with no vaultd at the socket, still bad input (65), not 69.
        let unserved = try ChildProcess.run(
            Paths.tool("vaultctl"),
            [
                "--socket", "/nonexistent/vaultd.sock", "defaults", "write", "com.example.v", "k",
                "-dict", "a", flag, "1.5x",
            ],
            environment: ["PATH": "/usr/bin:/bin"])
        #expect(
            unserved.status == 65 && unserved.stderr.hasPrefix("vaultctl: '1.5x' is not a"),
            "\(unserved)")
    }

    /// A secret typed on vaultctl's command line by mistake is not repeated by its usage
    /// error: `--passphrase-fd` taken for `--passphrase`, an option vaultctl does not have
    /// (`--passphrase=…`, `--secret=…`), a stray word after `item add`. Each was quoted back
    /// in the error ("needs an integer, not 'S3CRET-…'", "unexpected argument '--secret=S3CRET-…'"),
    /// so it reached the terminal's scrollback, a script's log or a CI job's output besides
    /// argv. The option is still named. No daemon runs (`--socket /nowhere`).
    @Test(arguments: [
        (
            ["unlock", "--passphrase-fd", "S3CRET-fd-7a1c"],
            "--passphrase-fd needs a file descriptor number"
        ),
        (
            ["unlock", "--passphrase-fd=S3CRET-fd-7a1c"],
            "--passphrase-fd needs a file descriptor number"
        ),
        (
            [
                "passphrase", "change", "--passphrase-fd", "3", "--new-passphrase-fd",
                "S3CRET-fd-7a1c",
            ], "--new-passphrase-fd needs a file descriptor number"
        ),
        (
            ["item", "add", "--service", "s", "--secret-fd", "S3CRET-fd-7a1c"],
            "--secret-fd needs a file descriptor number"
        ),
        (["init", "--passphrase=S3CRET-fd-7a1c"], "unknown option '--passphrase=…'"),
        (
            ["item", "add", "--service", "s", "--secret=S3CRET-fd-7a1c"],
            "unknown option '--secret=…'"
        ),
        (
            ["item", "add", "--service", "s", "S3CRET-fd-7a1c"],
            "unexpected argument (not repeated here"
        ),
        (
            ["item", "update", "--service", "s", "--secret-stdin", "S3CRET-fd-7a1c"],
            "unexpected argument (not repeated here"
        ),
        // A stray secret that begins with a dash is not an option's name either.
        (
            ["item", "add", "--service", "s", "-S3CRET-fd-7a1c"],
            "unexpected argument (not repeated here"
        ),
        (["unlock", "-S3CRET-fd-7a1c"], "unexpected argument (not repeated here"),
        (["init", "-S3CRET=fd-7a1c"], "unexpected argument (not repeated here"),
        // A mistyped option's value is not repeated either, and neither is the word after a
        // command that takes a verb: the verb it is nearest to is named.
        (
            ["item", "add", "--service", "s", "--acount=S3CRET-fd-7a1c"],
            "unknown option '--acount=…' (did you mean --account?)"
        ),
        (["passphrase", "S3CRET-fd-7a1c"], "passphrase needs change, set, remove or reset"),
        (
            ["passphrase", "chnage"],
            "passphrase needs change, set, remove or reset (did you mean passphrase change?)"
        ),
    ])
    func aSecretOnTheCommandLineIsNotRepeatedInTheUsageError(arguments: [String], reason: String)
        throws
    {
        let r = try ChildProcess.run(
            Paths.tool("vaultctl"), ["--socket", "/nowhere"] + arguments,
            environment: ["PATH": "/usr/bin:/bin"])
        #expect(r.status == 64, "\(r)")
        #expect(r.stderr.hasPrefix("vaultctl: " + reason), "\(r.stderr)")
        #expect(!r.stderr.contains("S3CRET") && !r.stdoutText.contains("S3CRET"), "\(r)")
    }
}

/// `vaultctl item list` of the Secret Service's items.
@Suite struct VaultctlSecretServiceListTests {
    /// An item of vaultd's Secret Service (service `org.freedesktop.secrets`, its ID as the
    /// account) lists with its lookup attributes, what its clients find it by; it listed with
    /// only its random-looking account. `--json` has them as `lookupAttributes`.
    @Test func secretServiceItemsListWithTheirLookupAttributes() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        let c = try d.connect()
        let id = "0123456789abcdef0123456789abcdef"
        _ = try c.call(
            "io.vaultd.Keychain.Add",
            [
                "class": "genericPassword", "data": "czNjcmV0",
                "attributes": [
                    "service": "org.freedesktop.secrets", "account": id, "label": "Mail",
                    "accessGroup": "user",
                    "lookupAttributes": [
                        "xdg:schema": "org.example.Password", "user": "alice\nbob",
                    ],
                ],
            ])
        try #require(
            d.ctl(
                ["item", "add", "--service", "plain.example", "--account", "a"],
                stdin: Data("x".utf8)
            ).status == 0)
        let list = d.ctl(["item", "list"])
        let line =
            list.stdoutText.split(separator: "\n").first { $0.contains(id) }.map(String.init) ?? ""
        #expect(
            line.hasSuffix(
                #"attributes={"user":"alice\nbob","xdg:schema":"org.example.Password"}"#), "\(list)"
        )
        #expect(
            line.contains(#"service="org.freedesktop.secrets" account="\#(id)""#)
                && line.contains(#"label="Mail""#), "\(line)")
        let plain =
            list.stdoutText.split(separator: "\n").first { $0.contains("plain.example") }.map(
                String.init) ?? ""
        #expect(!plain.contains("attributes="), "\(plain)")
        let json = d.ctl(["item", "list", "--service", "org.freedesktop.secrets", "--json"])
            .jsonArray
        #expect(
            (json?.first?["lookupAttributes"] as? [String: String]) == [
                "xdg:schema": "org.example.Password", "user": "alice\nbob",
            ], "\(String(describing: json))")
    }
}
