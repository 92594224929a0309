import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `vaultctl import gnome-keyring FILE`: keyring files written by a real gnome-keyring-daemon
/// (on a private bus), read once it has stopped, with no Secret Service running.
@Suite(.tags(.system)) struct ImportKeyringFileTests {
    static var loginPassword: [Int32: Data] {
        [3: Data((KeyringFixture.keyringPassword + "\n").utf8)]
    }

    /// The items of `group`, by label: class, key attributes, comment and secret.
    static func items(_ k: KeyringFixture, group: String) throws -> [String: [String: Any]] {
        let r = k.ctl(["item", "list", "--access-group", group, "--json"])
        guard r.status == 0 else { return [:] }
        let list = try #require(
            try JSONSerialization.jsonObject(with: r.stdout) as? [[String: Any]])
        var out: [String: [String: Any]] = [:]
        for var i in list {
            let label = i["label"] as? String ?? ""
            var args = ["item", "get", "--access-group", group]
            for key in ["service", "account", "server", "protocol", "path"] {
                if let v = i[key] as? String { args += ["--\(key)", v] }
            }
            if let p = i["port"] as? Int { args += ["--port", String(p)] }
            let s = k.ctl(args)
            i["secret"] = s.status == 0 ? s.stdoutText : "(get failed: \(s))"
            out[label] = i
        }
        return out
    }

    /// The summary line's counts, "2 added, 0 updated, ..." as a dictionary.
    static func counts(_ r: ProcessResult) -> [String: Int] {
        guard let line = r.stdoutText.split(separator: "\n").last,
            let colon = line.lastIndex(of: ":")
        else { return [:] }
        var out: [String: Int] = [:]
        for part in line[line.index(after: colon)...].split(separator: ",") {
            let w = part.split(separator: " ")
            if w.count >= 2, let n = Int(w[0]) { out[w[1...].joined(separator: " ")] = n }
        }
        return out
    }

    /// The login keyring, encrypted with its password by gnome-keyring: read offline, its
    /// items come out as the Secret Service import makes them (importing the file into the
    /// group the bus import filled changes nothing), a dry run predicts the import, a second
    /// import changes nothing, and a wrong password is said, changing nothing.
    @Test func theEncryptedLoginKeyringImportsOfflineAsTheBusImportDoes() throws {
        let k = try KeyringTests.initialisedFixture()
        defer { k.close() }
        for (label, attributes, secret) in [
            ("Mail", ["service", "mail.example.com", "username", "alice"], "alice-pw"),
            (
                "Forge", ["server", "forge.example.com", "protocol", "https", "user", "bob"],
                "bob pw"
            ),
            ("Odd", ["application", "some-app", "key", "k1"], "odd\nsecret"),
        ] {
            let r = k.secretToolStore(label: label, attributes, secret: secret)
            try #require(r.status == 0, "\(r)")
        }
        let bus = k.ctl(["keyring", "import", "--access-group", "bus"])
        try #require(bus.status == 0, "\(bus)")
        k.stopKeyring()
        let file = k.keyringsDirectory + "/login.keyring"
        let bytes = try #require(FileManager.default.contents(atPath: file))
        #expect(bytes.prefix(12) == Data("GnomeKeyring".utf8))

        let dry = k.ctl(
            [
                "import", "gnome-keyring", file, "--access-group", "files", "--dry-run",
                "--passphrase-fd", "3",
            ], fds: Self.loginPassword)
        #expect(dry.status == 0, "\(dry)")
        #expect(dry.stdoutText.contains("dry run, nothing changed: keyring \"Login\", 3 item(s)"))
        #expect(Self.counts(dry)["added"] == 3, "\(dry)")
        #expect(try Self.items(k, group: "files").isEmpty)

        let real = k.ctl(
            ["import", "gnome-keyring", file, "--access-group", "files", "--passphrase-fd", "3"],
            fds: Self.loginPassword)
        #expect(real.status == 0, "\(real)")
        #expect(Self.counts(real)["added"] == 3, "\(real)")
        let fromBus = try Self.items(k, group: "bus")
        let fromFile = try Self.items(k, group: "files")
        #expect(fromFile.count == 3)
        #expect(fromFile["Mail"]?["secret"] as? String == "alice-pw")
        #expect(fromFile["Forge"]?["server"] as? String == "forge.example.com")
        #expect(fromFile["Forge"]?["account"] as? String == "bob")
        #expect(fromFile["Odd"]?["secret"] as? String == "odd\nsecret")
        // The same vault item either way: class, key, label, secret, and the keyring item's
        // attributes and `modified` kept in `generic` (gnome-keyring reports `xdg:schema` over
        // the bus for some items only, so it is left out, as the import's identity leaves it).
        func source(_ item: [String: Any]) -> String {
            guard let text = item["generic"] as? String,
                let o = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any],
                let s = o["secretService"] as? [String: Any]
            else { return "-" }
            var a = s["attributes"] as? [String: String] ?? [:]
            a["xdg:schema"] = nil
            return "\(a.sorted { $0.key < $1.key }) \(s["modified"] ?? "-")"
        }
        for (label, b) in fromBus {
            let f = try #require(fromFile[label], "\(label) missing from the file's import")
            for key in ["class", "service", "account", "server", "protocol", "secret"] {
                #expect(
                    "\(b[key] ?? "-")" == "\(f[key] ?? "-")", "\(label).\(key): bus vs file")
            }
            #expect(
                source(b) == source(f) && source(f) != "-", "\(label): \(source(b)) vs \(source(f))"
            )
        }

        // The same mapping and idempotence: into the bus import's group, nothing changes.
        let again = k.ctl(
            [
                "import", "gnome-keyring", file, "--access-group", "bus", "--json",
                "--passphrase-fd", "3",
            ], fds: Self.loginPassword)
        #expect(again.status == 0, "\(again)")
        let o = try #require(
            try JSONSerialization.jsonObject(with: again.stdout) as? [String: Any])
        #expect(o["unchanged"] as? Int == 3, "\(again)")
        #expect(o["added"] as? Int == 0)
        #expect(o["source"] as? String == "gnome-keyring")
        #expect(o["collection"] as? String == "Login")

        let wrong = k.ctl(
            ["import", "gnome-keyring", file, "--access-group", "wrong", "--passphrase-fd", "3"],
            fds: [3: Data("not-the-password\n".utf8)])
        #expect(wrong.status == 1, "\(wrong)")
        #expect(wrong.stderr.contains("the password does not open this keyring"), "\(wrong)")
        #expect(!wrong.stderr.contains("not-the-password"))
        #expect(try Self.items(k, group: "wrong").isEmpty)
    }

    /// The login keyring with an empty password, which gnome-keyring keeps in its plain
    /// format (a login keyring it is given no password for at --unlock; the test starts it
    /// from an empty plain file, and gnome-keyring writes the items into it): a text secret, a
    /// binary one (hex in the file) and an escaped label come through, the default FILE is
    /// that login keyring, and a second import changes nothing.
    @Test func thePlainLoginKeyringWrittenByGnomeKeyringImportsWithoutAPassword() throws {
        let k = try KeyringFixture(keyring: false)
        defer { k.close() }
        try FileManager.default.createDirectory(
            atPath: k.keyringsDirectory, withIntermediateDirectories: true)
        let plain = k.keyringsDirectory + "/login.keyring"
        try
            "[keyring]\ndisplay-name=Login\nctime=0\nmtime=0\nlock-on-idle=false\nlock-after=false\n"
            .write(toFile: plain, atomically: true, encoding: .utf8)
        try k.startKeyring(password: "")
        try k.startVaultd()
        var r = k.ctl(["init", "--passphrase-fd", "3"], fds: KeyringTests.passphraseFD)
        try #require(r.status == 0, "\(r)")
        r = k.run(
            "secret-tool",
            [
                "store", "--collection=/org/freedesktop/secrets/collection/login",
                "--label= Spaced\tlabel", "service", "svc", "username", "carol",
            ],
            stdin: Data("carol pw".utf8))
        try #require(r.status == 0, "\(r)")
        let script = """
            import sys, secretstorage
            bus = secretstorage.dbus_init()
            c = secretstorage.Collection(bus, '/org/freedesktop/secrets/collection/login')
            c.create_item('Binary', {'service': 'bin', 'username': 'dave'}, b'\\xff\\x00\\x01raw', content_type='application/octet-stream')
            """
        r = k.run("python3", ["-c", script])
        try #require(r.status == 0, "\(r)")
        k.stopKeyring()
        let text = try String(contentsOfFile: plain, encoding: .utf8)
        #expect(text.contains("binary-secret="), "\(text)")

        #expect(text.hasPrefix("[keyring]"), "\(text)")
        // No FILE: the login keyring, in $XDG_DATA_HOME/keyrings.
        let first = k.ctl(["import", "gnome-keyring", "--access-group", "plain"])
        #expect(first.stdoutText.contains("keyring \"Login\", 2 item(s)"), "\(first)")
        #expect(first.status == 0, "\(first)")
        #expect(Self.counts(first)["added"] == 2, "\(first)")
        let get = k.ctl(["item", "get", "--service", "bin", "--access-group", "plain"])
        #expect(get.stdout == Data([0xFF, 0x00, 0x01]) + Data("raw".utf8), "\(get)")
        let items = try Self.items(k, group: "plain")
        #expect(items[" Spaced\tlabel"]?["secret"] as? String == "carol pw", "\(items.keys)")
        let second = k.ctl(["import", "gnome-keyring", plain, "--access-group", "plain"])
        #expect(second.status == 0, "\(second)")
        #expect(Self.counts(second)["unchanged"] == 2, "\(second)")
    }

    /// A hostile or damaged keyring file: truncated anywhere, a byte changed in its header,
    /// counts and lengths claiming more than the file holds: a clear error (exit 1), never a
    /// crash, and nothing imported.
    @Test func damagedKeyringFilesAreRefusedClearly() throws {
        let k = try KeyringTests.initialisedFixture()
        defer { k.close() }
        let r = k.secretToolStore(label: "x", ["service", "s", "username", "u"], secret: "pw")
        try #require(r.status == 0, "\(r)")
        k.stopKeyring()
        let good = try #require(
            FileManager.default.contents(atPath: k.keyringsDirectory + "/login.keyring"))
        var variants: [Data] = []
        for cut in stride(from: 0, to: good.count, by: max(1, good.count / 24)) {
            variants.append(good.prefix(cut))
        }
        // Each 4-byte field of the header (after the 16-byte magic and 4 version bytes) set to
        // 0x7fffffff and 0xffffffff: huge names, counts, iterations, sizes.
        for offset in stride(from: 20, to: min(good.count - 4, 160), by: 4) {
            for v: [UInt8] in [[0x7F, 0xFF, 0xFF, 0xFF], [0xFF, 0xFF, 0xFF, 0xFF]] {
                var d = good
                d.replaceSubrange(offset..<(offset + 4), with: v)
                variants.append(d)
            }
        }
        variants.append(Data("[keyring]\n[1]\nsecret=\\".utf8))
        variants.append(Data("not a keyring at all".utf8))
        let path = k.root + "/bad.keyring"
        var outcomes: [Int32: Int] = [:]
        for v in variants {
            try v.write(to: URL(fileURLWithPath: path))
            let out = k.ctl(
                [
                    "import", "gnome-keyring", path, "--access-group", "bad", "--dry-run",
                    "--passphrase-fd", "3",
                ], fds: Self.loginPassword)
            outcomes[out.status, default: 0] += 1
            #expect(out.status == 0 || out.status == 1, "\(out)")
            if out.status == 1 { #expect(out.stderr.contains("vaultctl: import: "), "\(out)") }
        }
        print("import: \(variants.count) damaged keyring files: exit statuses \(outcomes)")
        #expect(try Self.items(k, group: "bad").isEmpty)
    }
}
