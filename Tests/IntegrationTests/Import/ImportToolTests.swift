import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `vaultctl import keepassxc|pass|kwallet`: data made by the real tools (keepassxc-cli, gpg
/// and pass under a throwaway GNUPGHOME), imported into a real vaultd.
@Suite(.tags(.system)) struct ImportToolTests {
    static let databasePassword = "db pass phrase"

    /// A fixture with vaultd initialised (a bus, no keyring: these sources need none).
    static func fixture() throws -> KeyringFixture {
        let k = try KeyringFixture(keyring: false)
        do {
            try k.startVaultd()
            let r = k.ctl(["init", "--passphrase-fd", "3"], fds: KeyringTests.passphraseFD)
            guard r.status == 0 else { throw HarnessError("vaultctl init: \(r)") }
        } catch {
            k.close()
            throw error
        }
        return k
    }

    /// A tool run in the fixture's environment plus `extra`.
    static func tool(
        _ k: KeyringFixture, _ name: String, _ arguments: [String], stdin: String? = nil,
        environment extra: [String: String] = [:]
    ) throws -> ProcessResult {
        try ChildProcess.run(
            name, arguments, environment: k.environment.merging(extra) { $1 },
            stdin: stdin.map { Data($0.utf8) }, timeout: 60)
    }

    /// A KeePassXC database made by keepassxc-cli: a group, an entry with a URL and notes, one
    /// without, and (through keepassxc-cli's own XML import) a custom attribute and a protected
    /// one. The import maps them as docs/import.md says, a dry run predicts it, a second
    /// import changes nothing, and a password changed in KeePassXC is taken by the next.
    @Test func aKeePassXCDatabaseImportsIdempotentlyAndTakesAChange() throws {
        let k = try Self.fixture()
        defer { k.close() }
        let pw = Self.databasePassword
        let first = k.root + "/first.kdbx"
        let db = k.root + "/db.kdbx"
        var r = try Self.tool(
            k, "keepassxc-cli", ["db-create", "-p", first], stdin: "\(pw)\n\(pw)\n")
        try #require(r.status == 0, "\(r)")
        r = try Self.tool(k, "keepassxc-cli", ["mkdir", first, "Email"], stdin: "\(pw)\n")
        try #require(r.status == 0, "\(r)")
        r = try Self.tool(
            k, "keepassxc-cli",
            [
                "add", "-u", "alice", "--url", "https://mail.example.com:8443/login", "--notes",
                "line one\nline two", "-p", first, "Email/Mail",
            ], stdin: "\(pw)\nalice-secret\n")
        try #require(r.status == 0, "\(r)")
        r = try Self.tool(
            k, "keepassxc-cli", ["add", "-u", "bob", "-p", first, "Plain"],
            stdin: "\(pw)\nbob-secret\n")
        try #require(r.status == 0, "\(r)")
        // Custom attributes: keepassxc-cli 2.7 adds none itself, but imports KeePass XML.
        r = try Self.tool(
            k, "keepassxc-cli", ["export", "-q", "-f", "xml", first], stdin: "\(pw)\n")
        try #require(r.status == 0, "\(r)")
        let custom = """
            <String><Key>Department</Key><Value>Sales</Value></String>
            <String><Key>otp</Key><Value ProtectInMemory="True">SEEDSEED</Value></String>
            <String><Key>Title</Key><Value>Plain</Value></String>
            """
        let xml = r.stdoutText.replacingOccurrences(
            of:
                "<String>\n\t\t\t\t\t<Key>Title</Key>\n\t\t\t\t\t<Value>Plain</Value>\n\t\t\t\t</String>",
            with: custom)
        try #require(xml != r.stdoutText, "the export's layout changed:\n\(r.stdoutText)")
        try xml.write(toFile: k.root + "/edited.xml", atomically: true, encoding: .utf8)
        r = try Self.tool(
            k, "keepassxc-cli", ["import", "-p", k.root + "/edited.xml", db],
            stdin: "\(pw)\n\(pw)\n")
        try #require(r.status == 0, "\(r)")
        let fd: [Int32: Data] = [3: Data("\(pw)\n".utf8)]
        func run(_ extra: [String]) -> ProcessResult {
            k.ctl(
                ["import", "keepassxc", db, "--access-group", "kp", "--passphrase-fd", "3"] + extra,
                fds: fd)
        }

        let dry = run(["--dry-run"])
        #expect(dry.status == 0, "\(dry)")
        #expect(ImportKeyringFileTests.counts(dry)["added"] == 2, "\(dry)")
        #expect(dry.stderr.contains("protected attribute \"otp\" not imported"), "\(dry)")
        #expect(!dry.stderr.contains("SEEDSEED") && !dry.stdoutText.contains("bob-secret"))
        let real = run([])
        #expect(real.status == 0, "\(real)")
        #expect(ImportKeyringFileTests.counts(real)["added"] == 2, "\(real)")
        let items = try ImportKeyringFileTests.items(k, group: "kp")
        let mail = try #require(items["Mail"], "\(items)")
        #expect(mail["class"] as? String == "internetPassword")
        #expect(mail["server"] as? String == "mail.example.com")
        #expect(mail["protocol"] as? String == "https")
        #expect(mail["port"] as? Int == 8443)
        #expect(mail["path"] as? String == "/login")
        #expect(mail["account"] as? String == "alice")
        #expect(mail["comment"] as? String == "line one\nline two")
        #expect(mail["secret"] as? String == "alice-secret")
        #expect((mail["generic"] as? String)?.contains("\"group\":\"Email\"") == true, "\(mail)")
        let plain = try #require(items["Plain"])
        #expect(plain["class"] as? String == "genericPassword")
        #expect(plain["service"] as? String == "Plain")
        #expect(plain["account"] as? String == "bob")
        #expect(plain["secret"] as? String == "bob-secret")
        #expect((plain["generic"] as? String)?.contains("\"Department\":\"Sales\"") == true)
        #expect((plain["generic"] as? String)?.contains("SEEDSEED") == false)

        let again = run([])
        #expect(again.status == 0, "\(again)")
        #expect(ImportKeyringFileTests.counts(again)["unchanged"] == 2, "\(again)")

        r = try Self.tool(
            k, "keepassxc-cli", ["edit", "-p", db, "Email/Mail"], stdin: "\(pw)\nnew-alice\n")
        try #require(r.status == 0, "\(r)")
        let changed = run([])
        #expect(changed.status == 0, "\(changed)")
        #expect(ImportKeyringFileTests.counts(changed)["updated"] == 1, "\(changed)")
        #expect(ImportKeyringFileTests.counts(changed)["unchanged"] == 1, "\(changed)")
        let get = k.ctl(["item", "get", "--server", "mail.example.com", "--access-group", "kp"])
        #expect(get.stdoutText == "new-alice", "\(get)")

        let wrong = k.ctl(
            ["import", "keepassxc", db, "--access-group", "kp2", "--passphrase-fd", "3"],
            fds: [3: Data("wrong\n".utf8)])
        #expect(wrong.status == 1, "\(wrong)")
        #expect(wrong.stderr.contains("keepassxc-cli could not export"), "\(wrong)")
    }

    /// The database password reaches keepassxc-cli on its stdin, never on its command line: a
    /// stand-in keepassxc-cli first in PATH records both, then answers with a KeePass XML
    /// export of one entry.
    @Test func theDatabasePasswordGoesToKeePassXCCLIsStdinNotItsArguments() throws {
        let k = try Self.fixture()
        defer { k.close() }
        let bin = k.root + "/bin"
        mkdir(bin, 0o755)
        let script = #"""
            #!/bin/sh
            printf '%s\n' "$@" > "$0.argv"
            cat > "$0.stdin"
            printf '<KeePassFile><Meta><DatabaseName>Stand-in</DatabaseName></Meta><Root><Group><Name>Root</Name><Entry><UUID>AAAAAAAAAAAAAAAAAAAAAA==</UUID><String><Key>Title</Key><Value>T</Value></String><String><Key>Password</Key><Value ProtectInMemory="True">entry-secret</Value></String></Entry></Group></Root></KeePassFile>'
            """#
        try script.write(toFile: bin + "/keepassxc-cli", atomically: true, encoding: .utf8)
        chmod(bin + "/keepassxc-cli", 0o755)
        let db = k.root + "/x.kdbx"
        FileManager.default.createFile(atPath: db, contents: Data())
        let env = ["PATH": bin + ":" + (k.environment["PATH"] ?? "/usr/bin:/bin")]
        let r = try ChildProcess.run(
            Paths.tool("vaultctl"),
            ["import", "keepassxc", db, "--access-group", "argv", "--passphrase-fd", "3"],
            environment: k.environment.merging(env) { $1 },
            extraFDs: [3: Data("s3cret db pw\n".utf8)])
        #expect(r.status == 0, "\(r)")
        #expect(r.stdoutText.contains("database \"Stand-in\", 1 item(s)"), "\(r)")
        let argv = try String(contentsOfFile: bin + "/keepassxc-cli.argv", encoding: .utf8)
        #expect(argv == "export\n--format\nxml\n--\n\(db)\n", "\(argv)")
        let stdin = try String(contentsOfFile: bin + "/keepassxc-cli.stdin", encoding: .utf8)
        #expect(stdin == "s3cret db pw\n")
        let get = k.ctl(["item", "get", "--service", "T", "--access-group", "argv"])
        #expect(get.stdoutText == "entry-secret", "\(get)")
    }

    /// A password store made by `pass init` and `pass insert -m` with a passphrase-less key in
    /// a throwaway GNUPGHOME: the first line is the secret, login: and url: lines attributes,
    /// the rest the comment; a second import changes nothing, a `pass insert -f` is taken.
    @Test func aPasswordStoreImportsThroughGpgAndTakesAChange() throws {
        let k = try Self.fixture()
        let gnupg = k.root + "/gnupg"
        let store = k.root + "/store"
        let env = ["GNUPGHOME": gnupg, "PASSWORD_STORE_DIR": store]
        defer {
            _ = try? Self.tool(k, "gpgconf", ["--kill", "all"], environment: env)
            k.close()
        }
        mkdir(gnupg, 0o700)
        var r = try Self.tool(
            k, "gpg",
            [
                "--batch", "--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key",
                "Vault Test <vault-test@example.com>", "default", "default", "never",
            ],
            environment: env)
        try #require(r.status == 0, "\(r)")
        r = try Self.tool(k, "pass", ["init", "vault-test@example.com"], environment: env)
        try #require(r.status == 0, "\(r)")
        r = try Self.tool(
            k, "pass", ["insert", "-m", "web/forge.example.com"],
            stdin:
                "forge-pw\nlogin: alice\nurl: https://forge.example.com\nrecovery codes in the safe\n",
            environment: env)
        try #require(r.status == 0, "\(r)")
        r = try Self.tool(
            k, "pass", ["insert", "-m", "email"], stdin: "mail-pw\n", environment: env)
        try #require(r.status == 0, "\(r)")

        // vaultctl, and so gpg, with the throwaway GNUPGHOME.
        func ctl(_ arguments: [String]) throws -> ProcessResult {
            try Self.tool(k, Paths.tool("vaultctl"), arguments, environment: env)
        }
        let dry = try ctl(["import", "pass", store, "--access-group", "pass", "--dry-run"])
        #expect(dry.status == 0, "\(dry)")
        #expect(ImportKeyringFileTests.counts(dry)["added"] == 2, "\(dry)")
        #expect(!dry.stdoutText.contains("forge-pw"))
        let real = try ctl(["import", "pass", store, "--access-group", "pass"])
        #expect(real.status == 0, "\(real)")
        let items = try ImportKeyringFileTests.items(k, group: "pass")
        let forge = try #require(items["web/forge.example.com"], "\(items)")
        #expect(forge["service"] as? String == "web/forge.example.com")
        #expect(forge["account"] as? String == "alice")
        #expect(forge["secret"] as? String == "forge-pw")
        #expect(forge["comment"] as? String == "recovery codes in the safe")
        #expect((forge["generic"] as? String)?.contains("https://forge.example.com") == true)
        #expect(items["email"]?["secret"] as? String == "mail-pw")

        let again = try ctl(["import", "pass", store, "--access-group", "pass"])
        #expect(ImportKeyringFileTests.counts(again)["unchanged"] == 2, "\(again)")
        r = try Self.tool(
            k, "pass", ["insert", "-m", "-f", "email"], stdin: "mail-pw-2\n", environment: env)
        try #require(r.status == 0, "\(r)")
        let changed = try ctl(["import", "pass", store, "--access-group", "pass", "--json"])
        #expect(changed.status == 0, "\(changed)")
        let o = try #require(
            try JSONSerialization.jsonObject(with: changed.stdout) as? [String: Any])
        #expect(o["updated"] as? Int == 1, "\(changed)")
        #expect(o["unchanged"] as? Int == 1)
        let get = k.ctl(["item", "get", "--service", "email", "--access-group", "pass"])
        #expect(get.stdoutText == "mail-pw-2", "\(get)")
    }

    /// KWallet: without an exported file, what to do; with KWallet Manager's XML, its
    /// password entries (maps named, not imported).
    @Test func kwalletSaysWhatToDoAndReadsItsXMLExport() throws {
        let k = try Self.fixture()
        defer { k.close() }
        let none = k.ctl(["import", "kwallet", "--access-group", "kw"])
        #expect(none.status == 1, "\(none)")
        #expect(none.stderr.contains("Export as XML"), "\(none)")
        let xml = """
            <wallet name="kdewallet">
            <folder name="Passwords">
            <password name="irc.example.org">irc &amp; pw</password>
            <map name="form"><mapentry name="login">x</mapentry></map>
            </folder>
            </wallet>
            """
        try xml.write(toFile: k.root + "/w.xml", atomically: true, encoding: .utf8)
        let r = k.ctl(["import", "kwallet", k.root + "/w.xml", "--access-group", "kw"])
        #expect(r.status == 0, "\(r)")
        #expect(r.stderr.contains("1 map or stream entry not imported"), "\(r)")
        let get = k.ctl(["item", "get", "--service", "irc.example.org", "--access-group", "kw"])
        #expect(get.stdoutText == "irc & pw", "\(get)")
        let again = k.ctl(["import", "kwallet", k.root + "/w.xml", "--access-group", "kw"])
        #expect(ImportKeyringFileTests.counts(again)["unchanged"] == 1, "\(again)")
    }

    /// Where kwallet-query is installed, `import kwallet [WALLET]` reads the Passwords folder
    /// of the running kwalletd through it. KDE's kwallet-query is not in Debian without KDE, so
    /// a stand-in answers as its manual says (`-l` lists the folder's entries one a line, `-r
    /// NAME` prints one password and a newline); the wallet is the positional argument.
    @Test func kwalletQueryIsReadWhenInstalled() throws {
        let k = try Self.fixture()
        defer { k.close() }
        let bin = k.root + "/bin"
        mkdir(bin, 0o755)
        let script = #"""
            #!/bin/sh
            for last in "$@"; do :; done
            [ "$last" = kdewallet ] || exit 2
            case "$1 $2" in
              "-l -f") printf 'irc.example.org\nmail\n' ;;
              "-r irc.example.org") printf 'irc pw\n' ;;
              "-r mail") printf 'mail pw\n' ;;
              *) exit 1 ;;
            esac
            """#
        try script.write(toFile: bin + "/kwallet-query", atomically: true, encoding: .utf8)
        chmod(bin + "/kwallet-query", 0o755)
        let env = ["PATH": bin + ":" + (k.environment["PATH"] ?? "/usr/bin:/bin")]
        let r = try Self.tool(
            k, Paths.tool("vaultctl"), ["import", "kwallet", "--access-group", "kq"],
            environment: env)
        #expect(r.status == 0, "\(r)")
        #expect(ImportKeyringFileTests.counts(r)["added"] == 2, "\(r)")
        let get = k.ctl(["item", "get", "--service", "mail", "--access-group", "kq"])
        #expect(get.stdoutText == "mail pw", "\(get)")
        let again = try Self.tool(
            k, Paths.tool("vaultctl"), ["import", "kwallet", "--access-group", "kq"],
            environment: env)
        #expect(ImportKeyringFileTests.counts(again)["unchanged"] == 2, "\(again)")
    }
}
