import Foundation
import TestSupport
import Testing
import VaultClient
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// The keychain tier: secrets, identities, lock states, passphrase changes, updates,
/// rate limiting, lock-state events, idle auto-lock and CredentialStore, through the real
/// socket, vaultctl processes and the VaultClient library in this process.
@Suite struct KeychainTierTests {
    static let interactionNotAllowed: Int32 = -25308

    // MARK: secrets

    /// Secrets that must come back byte for byte.
    static let secrets: [(name: String, bytes: Data)] = [
        ("empty", Data()),
        ("one-byte", Data([0x7A])),
        ("nul-inside", Data([0x61, 0x62, 0x00, 0x63, 0x64])),
        // The six characters \u0142, a space, \n (two characters), a space, and a trailing backslash.
        ("backslashes", Data(#"\u0142 \n \"#.utf8)),
        ("newline", Data("line one\nline two\n".utf8)),
        ("invalid-utf8", Data([0xC3, 0x28, 0xFF, 0xFE, 0x80, 0xED, 0xA0, 0x80, 0xF8])),
        ("one-mebibyte", pseudoRandomBytes(count: 1 << 20, seed: 0x5EC2E7)),
    ]

    @Test func secretsRoundTripByteExactThroughVaultctlAndVaultClient() throws {
        #expect(
            Self.secrets[3].bytes.last == 0x5C
                && Self.secrets[3].bytes.starts(with: Data(#"\u0142"#.utf8)))
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        let vault = try d.client()
        let store = CredentialStore(vault: vault, service: "tier.secrets")
        let service = ["--service", "tier.secrets"]

        for (name, bytes) in Self.secrets {
            // vaultctl: the secret on stdin, and on --secret-fd 3.
            // `--raw --allow-empty`: every byte, an empty secret and a final newline included.
            let viaStdin = d.ctl(
                ["item", "add"] + service + [
                    "--account", name + "-stdin", "--raw", "--allow-empty",
                ], stdin: bytes)
            #expect(viaStdin.status == 0, "\(name) add (stdin): \(viaStdin)")
            let viaFD = d.ctl(
                ["item", "add"] + service + [
                    "--account", name + "-fd", "--secret-fd", "3", "--raw", "--allow-empty",
                ], fds: [3: bytes])
            #expect(viaFD.status == 0, "\(name) add (fd): \(viaFD)")
            // VaultClient: CredentialStore.set.
            #expect(throws: Never.self, "\(name) CredentialStore.set") {
                try store.set(bytes, for: name + "-client")
            }

            for account in [name + "-stdin", name + "-fd", name + "-client"] {
                let get = d.ctl(["item", "get"] + service + ["--account", account])
                #expect(get.status == 0, "\(account) get: \(get)")
                #expect(
                    get.stdout == bytes,
                    "\(account): vaultctl printed \(get.stdout.count) bytes, expected \(bytes.count)"
                )

                let found = try vault.keychain.copyMatching(
                    Query(
                        .genericPassword, ItemAttributes(service: "tier.secrets", account: account)),
                    returnData: true)
                #expect(
                    found.count == 1 && found.first?.data == bytes,
                    "\(account): Keychain.copyMatching")
                // Found and empty is not "not found".
                let viaStore = try store.data(for: account)
                #expect(
                    viaStore == bytes,
                    "\(account): CredentialStore.data is \(viaStore.map { "\($0.count) bytes" } ?? "nil")"
                )
                #expect(try store.contains(account), "\(account): contains")
            }
        }

        // An empty secret can be replaced: no DuplicateItem, neither through CredentialStore
        // nor through vaultctl item update.
        #expect(throws: Never.self) { try store.set("now set", for: "empty-stdin") }
        #expect(try store.string(for: "empty-stdin") == "now set")
        let update = d.ctl(
            ["item", "update"] + service + ["--account", "empty-fd", "--secret-stdin"],
            stdin: Data("from update".utf8))
        #expect(update.status == 0, "\(update)")
        #expect(
            d.ctl(["item", "get"] + service + ["--account", "empty-fd"]).stdout
                == Data("from update".utf8))
        // ...and a secret can be set back to empty (`--allow-empty`), and is then found empty.
        let toEmpty = d.ctl(
            ["item", "update"] + service + [
                "--account", "one-byte-fd", "--secret-stdin", "--allow-empty",
            ], stdin: Data())
        #expect(toEmpty.status == 0, "\(toEmpty)")
        let emptied = d.ctl(["item", "get"] + service + ["--account", "one-byte-fd"])
        #expect(emptied.status == 0 && emptied.stdout.isEmpty, "\(emptied)")
        #expect(try store.data(for: "one-byte-fd") == Data())
    }

    /// Values the protocol refuses are its Param error through vaultctl too (exit 1, the
    /// varlink error and OSStatus -50), not a usage error; nothing is stored.
    @Test(arguments: [
        ["--accessible", "always"], ["--accessible", "alwaysThisDeviceOnly"],
        ["--accessible", "whenever"],
        ["--port", "70000"], ["--port", "65536"],
    ])
    func refusedAttributeValuesAreParamErrorsInVaultctl(_ option: [String]) throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        let key =
            option[0] == "--port"
            ? ["internet", "--server", "example.org", "--account", "a"]
            : ["--service", "tier.param", "--account", "a"]
        let r = d.ctl(["item", "add"] + key + option, stdin: Data("x".utf8))
        #expect(r.status == 65, "\(r)")
        #expect(r.stderr.contains("io.vaultd.Keychain.Param") && r.stderr.contains("-50"), "\(r)")
        let u = d.ctl(["item", "update"] + key + ["--set-" + option[0].dropFirst(2), option[1]])
        #expect(u.status == 65 && u.stderr.contains("io.vaultd.Keychain.Param"), "\(u)")
        #expect(d.ctl(["item", "list"]).stdoutText.isEmpty, "nothing stored")
    }

    /// An answer that would be a message over the 8 MiB limit (the data of seven 1 MiB
    /// secrets) is ReplyTooLarge, with its size and the limit, not a reply no client can read;
    /// a narrower query still answers, and the connection stays usable.
    @Test func anAnswerOverTheMessageLimitIsReplyTooLarge() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        let vault = try d.client()
        for i in 0..<7 {
            try vault.keychain.add(
                attributes: ItemAttributes(service: "big", account: "a\(i)"),
                data: pseudoRandomBytes(count: 1 << 20, seed: UInt64(i)))
        }
        let all = Query(.genericPassword, ItemAttributes(service: "big"), matchAll: true)
        let error = vaultError { _ = try vault.keychain.copyMatching(all, returnData: true) }
        #expect(error?.name == "io.vaultd.Vault.ReplyTooLarge", "\(String(describing: error))")
        #expect(
            error?.parameters["limit"]?.intValue == 8 << 20
                && (error?.parameters["size"]?.intValue ?? 0) > 8 << 20,
            "\(String(describing: error))")
        #expect(try vault.keychain.copyMatching(all, returnData: false).count == 7)
        let one = try vault.keychain.copyMatching(
            Query(.genericPassword, ItemAttributes(service: "big", account: "a3")), returnData: true
        )
        #expect(one.first?.data == pseudoRandomBytes(count: 1 << 20, seed: 3))
    }

    @Test func secretsOverTheLimitAreRefusedAndNothingIsStored() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        let vault = try d.client()
        let tooLarge = pseudoRandomBytes(count: (1 << 20) + 1, seed: 7)
        let itemsBefore = try vault.status().items

        let add = d.ctl(
            ["item", "add", "--service", "tier.limit", "--account", "big"], stdin: tooLarge)
        #expect(add.status == 65, "\(add)")
        #expect(add.stderr.contains("io.vaultd.Keychain.SecretTooLarge"), "\(add)")
        #expect(
            add.stderr.contains("1048577") && add.stderr.contains("1048576"),
            "the error should give the size and the limit: \(add)")
        let viaFD = d.ctl(
            ["item", "add", "--service", "tier.limit", "--account", "big", "--secret-fd", "3"],
            fds: [3: tooLarge])
        #expect(viaFD.status == 65 && viaFD.stderr.contains("SecretTooLarge"), "\(viaFD)")
        let get = d.ctl(["item", "get", "--service", "tier.limit", "--account", "big"])
        #expect(
            get.status == 44 && get.stderr.contains("io.vaultd.Keychain.ItemNotFound"),
            "nothing may be stored: \(get)")

        let attrs = ItemAttributes(service: "tier.limit", account: "client")
        #expect(
            vaultError { try vault.keychain.add(attributes: attrs, data: tooLarge) }?.code
                == .secretTooLarge)
        let store = CredentialStore(vault: vault, service: "tier.limit")
        #expect(vaultError { try store.set(tooLarge, for: "store") }?.code == .secretTooLarge)
        #expect(try store.allAccounts() == [])
        #expect(try vault.status().items == itemsBefore)

        // Exactly 1 MiB is fine; growing it past the limit by Update is refused and keeps it.
        let limit = pseudoRandomBytes(count: 1 << 20, seed: 8)
        try store.set(limit, for: "exact")
        #expect(
            vaultError {
                try vault.keychain.update(
                    Query(
                        .genericPassword, ItemAttributes(service: "tier.limit", account: "exact")),
                    data: tooLarge)
            }?.code == .secretTooLarge)
        let viaCtl = d.ctl(
            ["item", "update", "--service", "tier.limit", "--account", "exact", "--secret-stdin"],
            stdin: tooLarge)
        #expect(viaCtl.status == 65 && viaCtl.stderr.contains("SecretTooLarge"), "\(viaCtl)")
        #expect(try store.data(for: "exact") == limit)

        // Far over the limit (base64 makes 6 MiB and more a message over varlink's 8 MiB):
        // still SecretTooLarge with both sizes, from vaultctl and from VaultClient alike.
        for size in [6 << 20, 8 << 20, 9 << 20] {
            let huge = Data(count: size)
            let r = d.ctl(
                ["item", "add", "--service", "tier.limit", "--account", "huge"], stdin: huge)
            #expect(
                r.status == 65 && r.stderr.contains("io.vaultd.Keychain.SecretTooLarge"),
                "\(size): \(r)")
            #expect(r.stderr.contains("\(size)") && r.stderr.contains("1048576"), "\(size): \(r)")
            let u = d.ctl(
                [
                    "item", "update", "--service", "tier.limit", "--account", "exact",
                    "--secret-stdin",
                ], stdin: huge)
            #expect(
                u.status == 65 && u.stderr.contains("io.vaultd.Keychain.SecretTooLarge"),
                "\(size): \(u)")
            #expect(
                vaultError { try vault.keychain.add(attributes: attrs, data: huge) }?.code
                    == .secretTooLarge)
        }
        #expect(try store.data(for: "exact") == limit)

        // vaultd itself refuses what a client sends past the limit, whatever the client checked.
        let raw = try d.connect()
        defer { raw.close() }
        let refused = try raw.call(
            "io.vaultd.Keychain.Add",
            [
                "class": "genericPassword",
                "attributes": ["service": "tier.limit", "account": "raw"],
                "data": tooLarge.base64EncodedString(),
            ])
        #expect(refused.errorName == "io.vaultd.Keychain.SecretTooLarge", "\(refused)")
        #expect(try vault.status().items == itemsBefore + 1)
    }

    // MARK: identities

    /// Items whose service, account or label hold a NUL or a newline.
    static let oddItems: [ItemAttributes] = [
        ItemAttributes(service: "svc\0hidden", account: "alice", label: "NUL in the service"),
        ItemAttributes(
            service: "svc", account: "alice", label: "the service before the NUL: a different item"),
        ItemAttributes(
            service: "tier.odd", account: "bob\0", label: "NUL at the end of the account"),
        ItemAttributes(service: "tier.odd", account: "carol", label: "two\nlines\0and a NUL"),
        ItemAttributes(service: "\n", account: "\0", label: "\0"),
        ItemAttributes(service: "tier.odd\n", account: "dave\r\n", label: "\u{1}\u{7f}"),
    ]

    @Test func itemsWithNULOrNewlineNeverStopOthersFromListingOrLoadingAlsoAfterARestart() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        var expected: [(attributes: ItemAttributes, secret: Data)] = []
        do {
            let vault = try d.client()
            for (i, a) in Self.oddItems.enumerated() {
                let secret = Data("odd secret \(i)".utf8)
                try vault.keychain.add(attributes: a, data: secret)
                expected.append((a, secret))
            }
        }
        // Through vaultctl, argv can carry a newline (not a NUL).
        let ctlItems: [(String, String, String)] = [
            ("multi\nline", "frank", "added by vaultctl"), ("tier.plain", "erin", "plain"),
        ]
        for (i, (service, account, label)) in ctlItems.enumerated() {
            let secret = Data("ctl secret \(i)".utf8)
            let add = d.ctl(
                ["item", "add", "--service", service, "--account", account, "--label", label],
                stdin: secret)
            try #require(add.status == 0, "\(add)")
            expected.append(
                (ItemAttributes(service: service, account: account, label: label), secret))
        }

        func check(_ when: String) throws {
            // vaultctl item list: one line per item, values escaped.
            let list = d.ctl(["item", "list"])
            #expect(list.status == 0, "\(when): \(list)")
            let lines = list.stdoutText.split(separator: "\n", omittingEmptySubsequences: false)
                .dropLast()
            #expect(
                lines.count == expected.count,
                "\(when): \(lines.count) lines for \(expected.count) items:\n\(list.stdoutText)")
            #expect(
                list.stdoutText.contains(#"label="two\nlines\u0000and a NUL""#),
                "\(when): \(list.stdoutText)")
            // vaultctl item list --json: every item, with exact values.
            let json = d.ctl(["item", "list", "--json"])
            #expect(json.status == 0, "\(when): \(json)")
            let parsed =
                (try? JSONSerialization.jsonObject(with: json.stdout)) as? [[String: Any]] ?? []
            let services = Set(parsed.compactMap { $0["service"] as? String })
            #expect(parsed.count == expected.count, "\(when): --json listed \(parsed.count)")
            #expect(
                services == Set(expected.map { $0.attributes.service! }), "\(when): \(services)")

            // VaultClient: all items listed, each loads with its own secret.
            let vault = try d.client()
            let all = try vault.keychain.copyMatching(
                Query(.genericPassword, matchAll: true), returnData: true)
            #expect(all.count == expected.count, "\(when): VaultClient listed \(all.count)")
            for (a, secret) in expected {
                let q = Query(
                    .genericPassword, ItemAttributes(service: a.service, account: a.account))
                let found = try vault.keychain.copyMatching(
                    q, returnData: true, returnAttributes: true)
                #expect(
                    found.count == 1,
                    "\(when): \(a.service!.debugDescription)/\(a.account!.debugDescription)")
                #expect(
                    found.first?.data == secret, "\(when): secret of \(a.service!.debugDescription)"
                )
                #expect(
                    found.first?.attributes?.label.map { Array($0.utf8) }
                        == a.label.map { Array($0.utf8) })
                #expect(
                    found.first?.attributes?.service.map { Array($0.utf8) }
                        == Array(a.service!.utf8))
            }
            let get = d.ctl(["item", "get", "--service", "multi\nline", "--account", "frank"])
            #expect(get.status == 0 && get.stdout == Data("ctl secret 0".utf8), "\(when): \(get)")
            let plain = d.ctl(["item", "get", "--service", "tier.plain", "--account", "erin"])
            #expect(
                plain.status == 0 && plain.stdout == Data("ctl secret 1".utf8), "\(when): \(plain)")
        }
        try check("before restart")
        #expect(try d.restart() == 0)
        try #require(d.unlock().status == 0)
        try check("after restart")
    }

    @Test func internetPasswordsDifferingInPortProtocolPathOrAccountAreDistinct() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        func attrs(
            protocol p: String = "https", port: Int = 443, path: String = "/a",
            account: String = "alice"
        ) -> [String] {
            [
                "--server", "example.com", "--protocol", p, "--port", String(port), "--path", path,
                "--account", account,
            ]
        }
        let items: [(String, [String])] = [
            ("base", attrs()), ("port", attrs(port: 8443)), ("protocol", attrs(protocol: "http")),
            ("path", attrs(path: "/b")),
            ("account", attrs(account: "bob")),
        ]
        for (name, a) in items {
            let add = d.ctl(["item", "add", "internet"] + a, stdin: Data("secret-\(name)".utf8))
            #expect(add.status == 0, "\(name): \(add)")
        }
        let again = d.ctl(["item", "add", "internet"] + attrs(), stdin: Data("other".utf8))
        #expect(
            again.status == 45 && again.stderr.contains("io.vaultd.Keychain.DuplicateItem"),
            "\(again)")

        for (name, a) in items {
            let get = d.ctl(["item", "get", "internet"] + a)
            #expect(get.status == 0 && get.stdout == Data("secret-\(name)".utf8), "\(name): \(get)")
        }
        // A query naming a port returns only that port's item.
        let byPort = d.ctl(["item", "get", "internet", "--server", "example.com", "--port", "8443"])
        #expect(byPort.stdout == Data("secret-port".utf8), "\(byPort)")
        let listed = d.ctl([
            "item", "list", "internet", "--server", "example.com", "--port", "8443", "--json",
        ])
        let ports =
            ((try? JSONSerialization.jsonObject(with: listed.stdout)) as? [[String: Any]] ?? []).map
        { $0["port"] as? Int }
        #expect(ports == [8443], "\(listed)")
        let at443 = d.ctl([
            "item", "list", "internet", "--server", "example.com", "--port", "443", "--json",
        ])
        let list443 =
            (try? JSONSerialization.jsonObject(with: at443.stdout)) as? [[String: Any]] ?? []
        #expect(list443.count == 4 && list443.allSatisfy { $0["port"] as? Int == 443 }, "\(at443)")
        let otherPort = d.ctl([
            "item", "get", "internet", "--server", "example.com", "--port", "9443",
        ])
        #expect(otherPort.status == 44 && otherPort.stderr.contains("ItemNotFound"), "\(otherPort)")

        let vault = try d.client()
        let q = Query(
            .internetPassword, ItemAttributes(server: "example.com", protocol: "https", port: 8443),
            matchAll: true)
        let found = try vault.keychain.copyMatching(q, returnData: true)
        #expect(found.map(\.data) == [Data("secret-port".utf8)])
        // Deleting one leaves the others.
        let del = d.ctl(["item", "delete", "internet"] + attrs(protocol: "http"))
        #expect(del.status == 0 && del.stdoutText.contains("deleted 1"), "\(del)")
        #expect(d.ctl(["item", "get", "internet"] + attrs()).stdout == Data("secret-base".utf8))
    }

    /// `vaultctl item list` shows every attribute of the primary key, so items that differ
    /// only in one (an internet password's authentication type or security domain, or
    /// synchronizable) never list as the same line. They did: neither those two nor
    /// synchronizable were shown.
    @Test func itemListTellsApartItemsDifferingOnlyInOnePrimaryKeyAttribute() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        let internet = ["internet", "--server", "example.com", "--account", "alice"]
        let adds: [[String]] = [
            internet, internet + ["--authentication-type", "httpBasic"],
            internet + ["--security-domain", "realm"],
            ["--service", "svc", "--account", "alice"],
            ["--service", "svc", "--account", "alice", "--synchronizable"],
        ]
        for a in adds {
            let add = d.ctl(["item", "add"] + a, stdin: Data("s".utf8))
            try #require(add.status == 0, "\(a): \(add)")
        }
        let list = d.ctl(["item", "list"])
        #expect(list.status == 0, "\(list)")
        let lines = list.stdoutText.split(separator: "\n")
        #expect(
            lines.count == adds.count && Set(lines).count == adds.count,
            "alike lines:\n\(list.stdoutText)")
        #expect(
            list.stdoutText.contains(#"authenticationType="httpBasic""#)
                && list.stdoutText.contains(#"securityDomain="realm""#))
        #expect(
            lines.filter { $0.hasSuffix(" synchronizable=yes") }.count == 1, "\(list.stdoutText)")
    }

    @Test func serviceNamesDifferingOnlyInCaseAreDifferentItems() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        let services = ["Example.Service", "example.service", "EXAMPLE.SERVICE"]
        for s in services {
            let add = d.ctl(
                ["item", "add", "--service", s, "--account", "alice"], stdin: Data("for \(s)".utf8))
            #expect(add.status == 0, "\(s): \(add)")
        }
        for s in services {
            let get = d.ctl(["item", "get", "--service", s, "--account", "alice"])
            #expect(get.status == 0 && get.stdout == Data("for \(s)".utf8), "\(s): \(get)")
        }
        #expect(
            d.ctl(["item", "delete", "--service", "example.service"]).stdoutText.contains(
                "deleted 1"))
        let vault = try d.client()
        let left = try vault.keychain.copyMatching(Query(.genericPassword, matchAll: true))
            .compactMap { $0.attributes?.service }
        #expect(Set(left) == ["Example.Service", "EXAMPLE.SERVICE"])
        let gone = d.ctl(["item", "get", "--service", "example.service", "--account", "alice"])
        #expect(gone.status == 44 && gone.stderr.contains("ItemNotFound"), "\(gone)")
    }

    // MARK: lock states

    @Test func afterFirstUnlockItemsStayReadableWhenLockedAndNothingIsReadableAfterARestart() throws
    {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        let classes: [(account: String, accessible: String, readableAfterLock: Bool)] = [
            ("afu", "afterFirstUnlock", true), ("afu-tdo", "afterFirstUnlockThisDeviceOnly", true),
            ("wu", "whenUnlocked", false), ("wu-tdo", "whenUnlockedThisDeviceOnly", false),
            ("wps", "whenPasscodeSetThisDeviceOnly", false),
        ]
        for c in classes {
            let add = d.ctl(
                [
                    "item", "add", "--service", "tier.lock", "--account", c.account, "--accessible",
                    c.accessible,
                ], stdin: Data(c.account.utf8))
            try #require(add.status == 0, "\(add)")
        }
        let vault = try d.client()
        func status(_ account: String) -> Int32? {
            vaultError {
                try vault.keychain.copyMatching(
                    Query(.genericPassword, ItemAttributes(service: "tier.lock", account: account)),
                    returnData: true)
            }?.status
        }

        try #require(d.ctl(["lock"]).status == 0)
        for c in classes {
            let get = d.ctl(["item", "get", "--service", "tier.lock", "--account", c.account])
            if c.readableAfterLock {
                #expect(
                    get.status == 0 && get.stdout == Data(c.account.utf8),
                    "\(c.accessible) after lock: \(get)")
            } else {
                #expect(
                    get.status == 36
                        && get.stderr.contains("io.vaultd.Keychain.InteractionNotAllowed"),
                    "\(c.accessible) after lock: \(get)")
                #expect(!get.stderr.contains("ItemNotFound") && get.stdout.isEmpty)
                #expect(status(c.account) == Self.interactionNotAllowed, "\(c.accessible)")
            }
        }
        // A query that matches only locked items: InteractionNotAllowed, for get and for list.
        let onlyLocked = d.ctl([
            "item", "list", "--service", "tier.lock", "--accessible", "whenUnlocked",
        ])
        #expect(
            onlyLocked.status == 36 && onlyLocked.stderr.contains("InteractionNotAllowed"),
            "\(onlyLocked)")
        let lockedByAccount = d.ctl(["item", "get", "--account", "wu"])
        #expect(lockedByAccount.stderr.contains("InteractionNotAllowed"), "\(lockedByAccount)")
        #expect(
            vaultError {
                try vault.keychain.copyMatching(
                    Query(
                        .genericPassword,
                        ItemAttributes(service: "tier.lock", accessible: .whenUnlocked),
                        matchAll: true))
            }?.status == Self.interactionNotAllowed)
        // A list that matches locked items beside readable ones fails too: a partial list
        // would report the locked ones as not found (it returned the afterFirstUnlock ones).
        let mixed = d.ctl(["item", "list", "--service", "tier.lock"])
        #expect(
            mixed.status == 36 && mixed.stderr.contains("InteractionNotAllowed")
                && mixed.stdout.isEmpty, "\(mixed)")
        #expect(
            vaultError {
                try vault.keychain.copyMatching(
                    Query(.genericPassword, ItemAttributes(service: "tier.lock"), matchAll: true))
            }?.status == Self.interactionNotAllowed)
        let accounts = Result {
            try CredentialStore(vault: vault, service: "tier.lock", accessGroup: "user")
                .allAccounts()
        }
        #expect((try? accounts.get()) == nil, "allAccounts while locked: \(accounts)")
        // Only the classes readable after the first unlock: listed.
        let readable = try vault.keychain.copyMatching(
            Query(
                .genericPassword,
                ItemAttributes(service: "tier.lock", accessible: .afterFirstUnlock), matchAll: true)
        )
        #expect(
            readable.compactMap { $0.attributes?.account }
                == classes.filter { $0.accessible == "afterFirstUnlock" }.map(\.account))

        // After a restart, before any unlock: every class gives -25308.
        #expect(try d.restart() == 0)
        let fresh = try d.client()
        for c in classes {
            let get = d.ctl(["item", "get", "--service", "tier.lock", "--account", c.account])
            #expect(
                get.status == 36 && get.stderr.contains("io.vaultd.Keychain.InteractionNotAllowed"),
                "\(c.accessible) after restart: \(get)")
            let e = vaultError {
                try fresh.keychain.copyMatching(
                    Query(
                        .genericPassword, ItemAttributes(service: "tier.lock", account: c.account)),
                    returnData: true)
            }
            #expect(
                e?.code == .interactionNotAllowed && e?.status == Self.interactionNotAllowed,
                "\(c.accessible): \(String(describing: e))")
        }
        try #require(d.unlock().status == 0)
        for c in classes {
            let get = d.ctl(["item", "get", "--service", "tier.lock", "--account", c.account])
            #expect(
                get.status == 0 && get.stdout == Data(c.account.utf8),
                "\(c.accessible) after unlock: \(get)")
        }
    }

    // MARK: a data directory moved to another device

    /// The data directory on another device (another `device.key`): the ThisDeviceOnly items
    /// made on the first are NotAvailableOnThisDevice for good, but the classes stay usable
    /// for new items (as on a restored iPhone), and the old items can still be deleted.
    @Test func aMovedVaultKeepsItsThisDeviceOnlyClassesUsableAndItsForeignItemsDeletable() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        let deviceOnly = Accessibility.allCases.filter(\.isThisDeviceOnly)
        for a in Accessibility.allCases {
            let add = d.ctl(
                [
                    "item", "add", "--service", "tier.moved", "--account", a.rawValue,
                    "--accessible", a.rawValue,
                ], stdin: Data(a.rawValue.utf8))
            try #require(add.status == 0, "\(a): \(add)")
        }
        // Another device: the same data directory with a device key of its own.
        d.stop()
        let keyPath = d.dataDirectory + "/device.key"
        try pseudoRandomBytes(count: 32, seed: 0xDE71CE).write(to: URL(fileURLWithPath: keyPath))
        chmod(keyPath, 0o600)
        try d.start()
        try #require(d.unlock().status == 0)
        func get(_ account: String) -> ProcessResult {
            d.ctl(["item", "get", "--service", "tier.moved", "--account", account])
        }
        for a in Accessibility.allCases {
            let r = get(a.rawValue)
            if a.isThisDeviceOnly {
                #expect(
                    r.status == 1
                        && r.stderr.contains("io.vaultd.Keychain.NotAvailableOnThisDevice"),
                    "\(a) moved: \(r)")
            } else {
                #expect(r.status == 0 && r.stdout == Data(a.rawValue.utf8), "\(a) moved: \(r)")
            }
        }

        // New ThisDeviceOnly items on this device: added, read, and still there after a lock,
        // a restart and a passphrase change; the old ones stay NotAvailableOnThisDevice.
        for a in deviceOnly {
            let add = d.ctl(
                [
                    "item", "add", "--service", "tier.moved", "--account", "new-" + a.rawValue,
                    "--accessible", a.rawValue,
                ], stdin: Data("new \(a)".utf8))
            #expect(add.status == 0, "\(a) add on the new device: \(add)")
        }
        try #require(d.ctl(["lock"]).status == 0)
        #expect(try d.restart() == 0)
        try #require(d.unlock().status == 0)
        let change = d.ctl(
            ["passphrase", "change", "--passphrase-fd", "3", "--new-passphrase-fd", "4"],
            fds: [3: passphraseLine(Daemon.passphrase), 4: passphraseLine("new horse")])
        try #require(change.status == 0, "\(change)")
        #expect(try d.restart() == 0)
        try #require(d.unlock(passphrase: "new horse").status == 0)
        for a in deviceOnly {
            let new = get("new-" + a.rawValue)
            #expect(new.status == 0 && new.stdout == Data("new \(a)".utf8), "\(a) new item: \(new)")
            let old = get(a.rawValue)
            #expect(
                old.status == 1
                    && old.stderr.contains("io.vaultd.Keychain.NotAvailableOnThisDevice"),
                "\(a) old item: \(old)")
        }

        // An update cannot re-encrypt them: NotAvailableOnThisDevice, and nothing changes.
        let update = d.ctl([
            "item", "update", "--service", "tier.moved", "--set-label", "relabelled", "--yes",
        ])
        #expect(
            update.status == 1
                && update.stderr.contains("io.vaultd.Keychain.NotAvailableOnThisDevice"),
            "\(update)")
        #expect(
            !d.ctl(["item", "list", "--service", "tier.moved"]).stdoutText.contains("relabelled"))

        // The old items can be deleted (nothing on this device will ever open them); a delete
        // naming the whole service takes them with the rest.
        let one = d.ctl([
            "item", "delete", "--service", "tier.moved", "--account",
            Accessibility.whenUnlockedThisDeviceOnly.rawValue,
        ])
        #expect(one.status == 0 && one.stdoutText.contains("deleted 1"), "\(one)")
        let gone = get(Accessibility.whenUnlockedThisDeviceOnly.rawValue)
        #expect(gone.status == 44 && gone.stderr.contains("ItemNotFound"), "\(gone)")
        let all = d.ctl(["item", "delete", "--service", "tier.moved", "--yes"])
        #expect(
            all.status == 0
                && all.stdoutText.contains(
                    "deleted \(Accessibility.allCases.count - 1 + deviceOnly.count)"),
            "\(all)")
        #expect(d.statusJSON()?["items"] as? Int == 0)

        // Without a passphrase there is no whenPasscodeSet class, this device's key included,
        // also after a restart (which opens every key again).
        let remove = d.ctl(
            ["passphrase", "remove", "--passphrase-fd", "3"], fds: [3: passphraseLine("new horse")])
        try #require(remove.status == 0, "\(remove)")
        for restart in [false, true] {
            if restart { #expect(try d.restart() == 0) }
            let wps = d.ctl(
                [
                    "item", "add", "--service", "tier.moved", "--account", "wps", "--accessible",
                    "whenPasscodeSetThisDeviceOnly",
                ], stdin: Data("x".utf8))
            #expect(
                wps.status == 1 && wps.stderr.contains("io.vaultd.Keychain.AuthFailed"),
                "restart \(restart): \(wps)")
            let tdo = d.ctl(
                [
                    "item", "add", "--service", "tier.moved", "--account", "tdo-\(restart)",
                    "--accessible", "whenUnlockedThisDeviceOnly",
                ], stdin: Data("y".utf8))
            #expect(tdo.status == 0, "restart \(restart): \(tdo)")
            #expect(
                d.ctl(["item", "get", "--service", "tier.moved", "--account", "tdo-\(restart)"])
                    .stdout == Data("y".utf8))
        }
    }

    /// Replaces the data directory's device key (stopped): the directory is now on another
    /// device, or back on the one whose key `bytes` is.
    private func moveVault(_ d: Daemon, toDeviceKey bytes: Data) throws {
        d.stop()
        let keyPath = d.dataDirectory + "/device.key"
        try bytes.write(to: URL(fileURLWithPath: keyPath))
        chmod(keyPath, 0o600)
        try d.start()
    }

    @Test func aVaultMovedBackKeepsTheOtherDevicesItemsNotAvailableOnThisDevice() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        let home = try Data(contentsOf: URL(fileURLWithPath: d.dataDirectory + "/device.key"))
        let add = d.ctl(
            [
                "item", "add", "--service", "tier.back", "--account", "home", "--accessible",
                "whenUnlockedThisDeviceOnly",
            ], stdin: Data("home".utf8))
        try #require(add.status == 0, "\(add)")
        // On another device: an item of the class made there.
        try moveVault(d, toDeviceKey: pseudoRandomBytes(count: 32, seed: 0xBAC4))
        try #require(d.unlock().status == 0)
        let there = d.ctl(
            [
                "item", "add", "--service", "tier.back", "--account", "there", "--accessible",
                "whenUnlockedThisDeviceOnly",
            ], stdin: Data("there".utf8))
        try #require(there.status == 0, "\(there)")
        // Back home: the home item reads; the other device's is NotAvailableOnThisDevice (not
        // an InternalError, "altered or damaged"), also in a list with the secrets.
        try moveVault(d, toDeviceKey: home)
        try #require(d.unlock().status == 0)
        let own = d.ctl(["item", "get", "--service", "tier.back", "--account", "home"])
        #expect(own.status == 0 && own.stdout == Data("home".utf8), "\(own)")
        let other = d.ctl(["item", "get", "--service", "tier.back", "--account", "there"])
        #expect(
            other.status == 1
                && other.stderr.contains("io.vaultd.Keychain.NotAvailableOnThisDevice"), "\(other)")
        let vault = try d.client()
        let all = try? vault.keychain.copyMatching(
            Query(.genericPassword, ItemAttributes(service: "tier.back"), matchAll: true),
            returnData: true, returnAttributes: true)
        #expect(
            all?.compactMap { $0.attributes?.account } == ["home"], "\(String(describing: all))")
        let update = d.ctl([
            "item", "update", "--service", "tier.back", "--account", "there", "--set-label", "x",
        ])
        #expect(
            update.status == 1
                && update.stderr.contains("io.vaultd.Keychain.NotAvailableOnThisDevice"),
            "\(update)")
        // A CredentialStore's set replaces the other device's item, which never opens here
        // (it failed with NotAvailableOnThisDevice, so the account could not be set at all).
        let store = CredentialStore(
            vault: vault, service: "tier.back", accessGroup: "user",
            accessibility: .whenUnlockedThisDeviceOnly)
        #expect(throws: Never.self) { try store.set("home again", for: "there") }
        #expect(try store.string(for: "there") == "home again")
        #expect(try store.string(for: "home") == "home")
    }

    @Test func aVaultBackOnADeviceAfterAPassphraseChangeElsewhereCanAddThisDeviceOnlyItems() throws
    {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        let home = try Data(contentsOf: URL(fileURLWithPath: d.dataDirectory + "/device.key"))
        let away = pseudoRandomBytes(count: 32, seed: 0xA3A7)
        // Used on another device (its keys are made there), back home, the passphrase changed
        // at home, then on the other device again.
        try moveVault(d, toDeviceKey: away)
        try #require(d.unlock().status == 0)
        let there = d.ctl(
            [
                "item", "add", "--service", "tier.again", "--account", "there", "--accessible",
                "whenUnlockedThisDeviceOnly",
            ], stdin: Data("there".utf8))
        try #require(there.status == 0, "\(there)")
        try moveVault(d, toDeviceKey: home)
        try #require(d.unlock().status == 0)
        let change = d.ctl(
            ["passphrase", "change", "--passphrase-fd", "3", "--new-passphrase-fd", "4"],
            fds: [3: passphraseLine(Daemon.passphrase), 4: passphraseLine("new horse")])
        try #require(change.status == 0, "\(change)")
        try moveVault(d, toDeviceKey: away)
        try #require(d.unlock(passphrase: "new horse").status == 0)
        for a in Accessibility.allCases where a.isThisDeviceOnly {
            let add = d.ctl(
                [
                    "item", "add", "--service", "tier.again", "--account", "new-" + a.rawValue,
                    "--accessible", a.rawValue,
                ], stdin: Data("new".utf8))
            #expect(add.status == 0, "\(a): \(add)")
            let get = d.ctl([
                "item", "get", "--service", "tier.again", "--account", "new-" + a.rawValue,
            ])
            #expect(get.status == 0 && get.stdout == Data("new".utf8), "\(a): \(get)")
        }
        // The item made there under the old passphrase cannot be opened any more: it is
        // NotAvailableOnThisDevice and can be deleted.
        let old = d.ctl(["item", "get", "--service", "tier.again", "--account", "there"])
        #expect(
            old.status == 1 && old.stderr.contains("io.vaultd.Keychain.NotAvailableOnThisDevice"),
            "\(old)")
        let delete = d.ctl(["item", "delete", "--service", "tier.again", "--account", "there"])
        #expect(delete.status == 0, "\(delete)")
    }

    // MARK: passphrase life-cycle

    static let allClasses: [Accessibility] = Accessibility.allCases

    /// One item per accessibility class, secret = class name; plus an internet password.
    private func addOneOfEachClass(_ d: Daemon) throws {
        for a in Self.allClasses {
            let add = d.ctl(
                [
                    "item", "add", "--service", "tier.pass", "--account", a.rawValue,
                    "--accessible", a.rawValue,
                ], stdin: Data(a.rawValue.utf8))
            try #require(add.status == 0, "\(a): \(add)")
        }
        let web = d.ctl(
            ["item", "add", "internet", "--server", "example.org", "--account", "web"],
            stdin: Data("web".utf8))
        try #require(web.status == 0, "\(web)")
    }

    private func readable(_ d: Daemon, _ classes: [Accessibility], _ when: String) {
        for a in classes {
            let get = d.ctl(["item", "get", "--service", "tier.pass", "--account", a.rawValue])
            #expect(get.status == 0 && get.stdout == Data(a.rawValue.utf8), "\(when): \(a): \(get)")
        }
        let web = d.ctl(["item", "get", "internet", "--server", "example.org", "--account", "web"])
        #expect(web.status == 0 && web.stdout == Data("web".utf8), "\(when): \(web)")
    }

    @Test func removingThePassphraseDeletesWhenPasscodeSetItemsAndNothingElse() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        try addOneOfEachClass(d)
        let others = Self.allClasses.filter { $0 != .whenPasscodeSetThisDeviceOnly }

        let wrong = d.ctl(
            ["passphrase", "remove", "--passphrase-fd", "3"],
            fds: [3: passphraseLine("wrong horse")])
        #expect(wrong.status == 1 && wrong.stderr.contains("AuthFailed"), "\(wrong)")
        readable(d, Self.allClasses, "after a refused removal")

        let remove = d.ctl(
            ["passphrase", "remove", "--passphrase-fd", "3"],
            fds: [3: passphraseLine(Daemon.passphrase)])
        #expect(remove.status == 0, "\(remove)")
        #expect(
            remove.stdoutText.contains("1 whenPasscodeSetThisDeviceOnly item(s) deleted"),
            "\(remove)")
        let gone = d.ctl([
            "item", "get", "--service", "tier.pass", "--account", "whenPasscodeSetThisDeviceOnly",
        ])
        #expect(gone.status == 44 && gone.stderr.contains("ItemNotFound"), "\(gone)")
        readable(d, others, "after removal")
        #expect(d.statusJSON()?["hasPassphrase"] as? Bool == false)
        #expect(d.statusJSON()?["items"] as? Int == others.count + 1)

        // Without a passphrase the vault is always unlocked, also after a restart; it cannot be
        // locked, and whenPasscodeSet items cannot be added.
        #expect(try d.restart() == 0)
        readable(d, others, "after removal and restart")
        let lock = d.ctl(["lock"])
        #expect(lock.status == 1 && lock.stderr.contains("NoPassphrase"), "\(lock)")
        let wps = d.ctl(
            [
                "item", "add", "--service", "tier.pass", "--account", "again", "--accessible",
                "whenPasscodeSetThisDeviceOnly",
            ], stdin: Data("x".utf8))
        #expect(wps.status == 1 && wps.stderr.contains("io.vaultd.Keychain.AuthFailed"), "\(wps)")
    }

    @Test func changingThePassphraseKeepsEveryItemAndRefusesTheOldOne() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        try addOneOfEachClass(d)
        let newPassphrase = "battery staple"

        let wrongOld = d.ctl(
            ["passphrase", "change", "--passphrase-fd", "3", "--new-passphrase-fd", "4"],
            fds: [3: passphraseLine("not it"), 4: passphraseLine(newPassphrase)])
        #expect(wrongOld.status == 1 && wrongOld.stderr.contains("AuthFailed"), "\(wrongOld)")
        let change = d.ctl(
            ["passphrase", "change", "--passphrase-fd", "3", "--new-passphrase-fd", "4"],
            fds: [3: passphraseLine(Daemon.passphrase), 4: passphraseLine(newPassphrase)])
        #expect(change.status == 0, "\(change)")
        readable(d, Self.allClasses, "right after the change")

        try #require(d.ctl(["lock"]).status == 0)
        let old = d.unlock()
        #expect(old.status == 1 && old.stderr.contains("io.vaultd.Vault.AuthFailed"), "\(old)")
        #expect(d.unlock(passphrase: newPassphrase).status == 0)
        readable(d, Self.allClasses, "after lock and unlock with the new passphrase")

        #expect(try d.restart() == 0)
        let oldAfterRestart = d.unlock()
        #expect(
            oldAfterRestart.status == 1 && oldAfterRestart.stderr.contains("AuthFailed"),
            "\(oldAfterRestart)")
        let unlock = d.unlock(passphrase: newPassphrase)
        #expect(unlock.status == 0, "\(unlock)")
        readable(d, Self.allClasses, "after a restart")
    }

    @Test func settingAPassphraseOnAVaultWithoutOne() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        let noPasscodeClasses = Self.allClasses.filter { $0 != .whenPasscodeSetThisDeviceOnly }
        for a in noPasscodeClasses {
            let add = d.ctl(
                [
                    "item", "add", "--service", "tier.pass", "--account", a.rawValue,
                    "--accessible", a.rawValue,
                ], stdin: Data(a.rawValue.utf8))
            try #require(add.status == 0, "\(add)")
        }
        try #require(
            d.ctl(
                ["item", "add", "internet", "--server", "example.org", "--account", "web"],
                stdin: Data("web".utf8)
            ).status == 0)

        let misuse = d.ctl(
            ["passphrase", "set", "--passphrase-fd", "3"], fds: [3: passphraseLine("x")])
        #expect(misuse.status == 64, "passphrase set takes no current passphrase: \(misuse)")
        let set = d.ctl(
            ["passphrase", "set", "--new-passphrase-fd", "4"],
            fds: [4: passphraseLine("first passphrase")])
        #expect(set.status == 0, "\(set)")
        #expect(d.statusJSON()?["hasPassphrase"] as? Bool == true)
        readable(d, noPasscodeClasses, "after set")

        // Now whenPasscodeSet items can be added, and the vault locks.
        let wps = d.ctl(
            [
                "item", "add", "--service", "tier.pass", "--account",
                "whenPasscodeSetThisDeviceOnly", "--accessible", "whenPasscodeSetThisDeviceOnly",
            ], stdin: Data("whenPasscodeSetThisDeviceOnly".utf8))
        #expect(wps.status == 0, "\(wps)")
        try #require(d.ctl(["lock"]).status == 0)
        let locked = d.ctl(["item", "get", "--service", "tier.pass", "--account", "whenUnlocked"])
        #expect(locked.stderr.contains("InteractionNotAllowed"), "\(locked)")
        #expect(d.unlock(passphrase: "first passphrase").status == 0)
        readable(d, Self.allClasses, "after unlock")

        #expect(try d.restart() == 0)
        #expect(d.statusJSON()?["state"] as? String == "locked")
        #expect(d.unlock(passphrase: "first passphrase").status == 0)
        readable(d, Self.allClasses, "after restart")
        // Setting again is refused: there is one already.
        let again = d.ctl(
            ["passphrase", "set", "--new-passphrase-fd", "4"], fds: [4: passphraseLine("second")])
        #expect(again.status == 1, "\(again)")
        #expect(d.unlock(passphrase: "first passphrase").status == 0)
    }

    // MARK: update

    @Test func updateActsOnEveryMatchAndACollidingUpdateChangesNothing() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        let vault = try d.client()
        for account in ["a", "b", "c"] {
            try vault.keychain.add(
                attributes: ItemAttributes(service: "tier.update", account: account, label: "old"),
                data: Data("s-\(account)".utf8))
        }
        try vault.keychain.add(
            attributes: ItemAttributes(service: "tier.other", account: "a", label: "old"),
            data: Data("other".utf8))
        func snapshot() throws -> [String: (label: String?, secret: Data?)] {
            var out: [String: (String?, Data?)] = [:]
            for item in try vault.keychain.copyMatching(
                Query(.genericPassword, matchAll: true), returnData: true, returnAttributes: true)
            {
                out[item.attributes!.service! + "/" + item.attributes!.account!] = (
                    item.attributes?.label, item.data
                )
            }
            return out
        }

        let n = try vault.keychain.update(
            Query(.genericPassword, ItemAttributes(service: "tier.update")),
            attributes: ItemAttributes(label: "new"))
        #expect(n == 3)
        var now = try snapshot()
        #expect(["a", "b", "c"].allSatisfy { now["tier.update/\($0)"]?.label == "new" })
        #expect(now["tier.other/a"]?.label == "old")

        // Every match would become tier.update/x: the second collides with the first.
        let all = vaultError {
            try vault.keychain.update(
                Query(.genericPassword, ItemAttributes(service: "tier.update")),
                attributes: ItemAttributes(account: "x", label: "collided"))
        }
        #expect(all?.code == .duplicateItem && all?.status == -25299, "\(String(describing: all))")
        // One item would take another's key.
        let one = d.ctl([
            "item", "update", "--service", "tier.update", "--account", "a", "--set-account", "b",
            "--set-label", "collided",
        ])
        #expect(
            one.status == 45 && one.stderr.contains("io.vaultd.Keychain.DuplicateItem"), "\(one)")
        let across = d.ctl([
            "item", "update", "--service", "tier.other", "--set-service", "tier.update",
            "--set-label", "collided",
        ])
        #expect(across.status == 45 && across.stderr.contains("DuplicateItem"), "\(across)")
        now = try snapshot()
        #expect(now.count == 4)
        for account in ["a", "b", "c"] {
            #expect(
                now["tier.update/\(account)"]?.label == "new"
                    && now["tier.update/\(account)"]?.secret == Data("s-\(account)".utf8),
                "\(account) changed")
        }
        #expect(
            now["tier.other/a"]?.label == "old" && now["tier.other/a"]?.secret == Data("other".utf8)
        )

        // A secret-only update of several matches gives each the new secret.
        #expect(
            try vault.keychain.update(
                Query(.genericPassword, ItemAttributes(service: "tier.update")),
                data: Data("shared".utf8)) == 3)
        #expect(
            try snapshot().filter { $0.key.hasPrefix("tier.update/") }.allSatisfy {
                $0.value.secret == Data("shared".utf8)
            })
        let none = vaultError {
            try vault.keychain.update(
                Query(.genericPassword, ItemAttributes(service: "tier.none")),
                attributes: ItemAttributes(label: "x"))
        }
        #expect(none?.code == .itemNotFound)
    }

    /// Many internet passwords of one server and one account (git's credentials for each
    /// repository of a host, `credential.useHttpPath`) differ only in their path: updates of
    /// all of them and duplicate checks among them stay right. (Their checks once read every
    /// row listed under the server and the account: 10,000 such items made an Update of all
    /// take 140 s. `ItemIndexTests.aPrimaryKeyListsOneRowAmongManyOfOneServerAndAccount`
    /// checks that the primary key's listing names one row.)
    @Test func writesAmongManyItemsOfOneServerAndAccountStayUnique() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        let vault = try d.client()
        let n = 2000
        for i in 0..<n {
            try vault.keychain.add(
                .internetPassword,
                attributes: ItemAttributes(
                    account: "bob", server: "git.example", protocol: "https",
                    path: "org/repo\(i).git"),
                data: Data("p\(i)".utf8))
            try vault.keychain.add(
                .internetPassword,
                attributes: ItemAttributes(
                    account: "bob", server: "host\(i).example", protocol: "https",
                    path: "org/repo.git"),
                data: Data("h\(i)".utf8))
        }
        for q in [
            ItemAttributes(account: "bob", server: "git.example"),
            ItemAttributes(account: "bob", path: "org/repo.git"),
        ] {
            let count = try vault.keychain.update(
                Query(.internetPassword, q), attributes: ItemAttributes(label: "relabelled"))
            #expect(count == n, "\(q): updated \(count)")
        }

        // Still unique: a path taken is a DuplicateItem, a new one is added.
        let dup = vaultError {
            try vault.keychain.add(
                .internetPassword,
                attributes: ItemAttributes(
                    account: "bob", server: "git.example", protocol: "https", path: "org/repo7.git"),
                data: Data())
        }
        #expect(dup?.code == .duplicateItem, "\(String(describing: dup))")
        #expect(throws: Never.self) {
            try vault.keychain.add(
                .internetPassword,
                attributes: ItemAttributes(
                    account: "bob", server: "git.example", protocol: "https", path: "org/new.git"),
                data: Data())
        }
        let moved = vaultError {
            try vault.keychain.update(
                Query(
                    .internetPassword,
                    ItemAttributes(account: "bob", server: "git.example", path: "org/new.git")),
                attributes: ItemAttributes(path: "org/repo8.git"))
        }
        #expect(moved?.code == .duplicateItem, "\(String(describing: moved))")
    }

    /// `vaultctl item update` needs a filter, as its usage says and as get and delete do:
    /// without one it replaced the secret (or attributes) of every item of every app.
    @Test func vaultctlItemUpdateWithoutAFilterIsAUsageErrorAndChangesNothing() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        try #require(
            d.ctl(
                ["item", "add", "--service", "tier.mine", "--account", "a"],
                stdin: Data("mine".utf8)
            ).status == 0)
        try #require(
            d.ctl(
                [
                    "item", "add", "--service", "tier.app", "--account", "b", "--access-group",
                    "com.example.app",
                ], stdin: Data("app's".utf8)
            ).status == 0)
        try #require(
            d.ctl(
                ["item", "add", "internet", "--server", "example.org", "--account", "c"],
                stdin: Data("web".utf8)
            ).status == 0)
        for args in [
            ["--secret-stdin"], ["--set-label", "x"], ["internet", "--secret-stdin"],
            ["internet", "--set-port", "8"],
        ] {
            let r = d.ctl(["item", "update"] + args, stdin: Data("overwritten".utf8))
            #expect(
                r.status == 64 && r.stderr.contains("needs at least one filter"), "\(args): \(r)")
        }
        #expect(d.ctl(["item", "get", "--service", "tier.mine"]).stdout == Data("mine".utf8))
        #expect(d.ctl(["item", "get", "--service", "tier.app"]).stdout == Data("app's".utf8))
        #expect(
            d.ctl(["item", "get", "internet", "--server", "example.org"]).stdout == Data("web".utf8)
        )
        #expect(!d.ctl(["item", "list"]).stdoutText.contains("label=\"x\""))
        // With a filter it still works.
        let one = d.ctl(
            ["item", "update", "--service", "tier.mine", "--secret-stdin"],
            stdin: Data("changed".utf8))
        #expect(one.status == 0 && one.stdoutText.contains("updated 1"), "\(one)")
    }

    @Test func updateKeepsTheCreationDateAndAdvancesTheModificationDate() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        let vault = try d.client()
        let q = Query(.genericPassword, ItemAttributes(service: "tier.dates", account: "a"))
        let added = try vault.keychain.add(
            attributes: ItemAttributes(service: "tier.dates", account: "a"), data: Data("1".utf8))
        let created = try #require(added.creationDate)
        #expect(added.modificationDate == created)
        usleep(50_000)
        try vault.keychain.update(q, attributes: ItemAttributes(label: "changed"))
        let first = try #require(try vault.keychain.copyMatching(q).first?.attributes)
        #expect(first.creationDate == created, "creationDate must be kept")
        let modified = try #require(first.modificationDate)
        #expect(modified > created)
        usleep(50_000)
        let viaCtl = d.ctl(
            ["item", "update", "--service", "tier.dates", "--account", "a", "--secret-stdin"],
            stdin: Data("2".utf8))
        #expect(viaCtl.status == 0, "\(viaCtl)")
        let second = try #require(try vault.keychain.copyMatching(q).first?.attributes)
        #expect(second.creationDate == created)
        #expect((second.modificationDate ?? .distantPast) > modified)
        // Dates in Add and Update input are vaultd's and are ignored.
        var forged = ItemAttributes(label: "forged")
        forged.creationDate = Date(timeIntervalSince1970: 0)
        try vault.keychain.update(q, attributes: forged)
        #expect(try vault.keychain.copyMatching(q).first?.attributes?.creationDate == created)
    }

    @Test func updateMayChangeAccessibilityAndTheItemThenFollowsItsNewClass() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        let add1 = d.ctl(
            [
                "item", "add", "--service", "tier.move", "--account", "up", "--accessible",
                "whenUnlocked",
            ], stdin: Data("up".utf8))
        let add2 = d.ctl(
            [
                "item", "add", "--service", "tier.move", "--account", "down", "--accessible",
                "afterFirstUnlock",
            ], stdin: Data("down".utf8))
        try #require(add1.status == 0 && add2.status == 0)
        let u1 = d.ctl([
            "item", "update", "--service", "tier.move", "--account", "up", "--set-accessible",
            "afterFirstUnlock",
        ])
        let u2 = d.ctl([
            "item", "update", "--service", "tier.move", "--account", "down", "--set-accessible",
            "whenUnlocked",
        ])
        #expect(u1.status == 0 && u2.status == 0, "\(u1)\n\(u2)")
        let attrs = d.ctl(["item", "get", "--service", "tier.move", "--account", "up", "--json"])
        #expect(attrs.stdoutText.contains(#""accessible":"afterFirstUnlock""#), "\(attrs)")

        try #require(d.ctl(["lock"]).status == 0)
        let up = d.ctl(["item", "get", "--service", "tier.move", "--account", "up"])
        #expect(up.status == 0 && up.stdout == Data("up".utf8), "now afterFirstUnlock: \(up)")
        let down = d.ctl(["item", "get", "--service", "tier.move", "--account", "down"])
        #expect(
            down.status == 36 && down.stderr.contains("InteractionNotAllowed"),
            "now whenUnlocked: \(down)")
        // While locked, an update touching a locked item is refused, and changes nothing.
        let touch = d.ctl([
            "item", "update", "--service", "tier.move", "--set-label", "while locked",
        ])
        #expect(touch.status == 36 && touch.stderr.contains("InteractionNotAllowed"), "\(touch)")

        #expect(try d.restart() == 0)
        try #require(d.unlock().status == 0)
        #expect(
            d.ctl(["item", "get", "--service", "tier.move", "--account", "down"]).stdout
                == Data("down".utf8))
        let labels = d.ctl(["item", "list", "--service", "tier.move"])
        #expect(!labels.stdoutText.contains("while locked"), "\(labels)")
        // Synchronizable + ThisDeviceOnly is contradictory: Param.
        let contradictory = d.ctl([
            "item", "update", "--service", "tier.move", "--account", "up", "--set-accessible",
            "afterFirstUnlockThisDeviceOnly", "--set-synchronizable",
        ])
        #expect(
            contradictory.status == 65 && contradictory.stderr.contains("io.vaultd.Keychain.Param"),
            "\(contradictory)")
    }

    /// kSecAttrSynchronizable from the command line: `--synchronizable[=yes|no]` as filter and
    /// `--set-synchronizable[=yes|no]` as change (only "yes" could be said: an item could
    /// not be made non-synchronizable again, nor a list kept to the non-synchronizable ones).
    @Test func vaultctlSaysSynchronizableYesAndNo() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        for (flag, secret) in [(["--synchronizable"], "synced"), ([], "local")] {
            let add = d.ctl(
                ["item", "add", "--service", "tier.sync", "--account", "a"] + flag,
                stdin: Data(secret.utf8))
            try #require(add.status == 0, "\(add)")
        }
        func listed(_ filter: [String]) throws -> [Bool] {
            let r = d.ctl(["item", "list", "--service", "tier.sync", "--json"] + filter)
            try #require(r.status == 0, "\(r)")
            return try JSON.parse(Array(r.stdout)).arrayValue?.compactMap {
                $0["synchronizable"]?.boolValue
            } ?? []
        }
        #expect(try listed([]).sorted { !$0 && $1 } == [false, true])
        #expect(try listed(["--synchronizable=no"]) == [false])
        #expect(try listed(["--synchronizable=yes"]) == [true])
        #expect(try listed(["--synchronizable"]) == [true])
        #expect(
            d.ctl(["item", "get", "--service", "tier.sync", "--synchronizable=no"]).stdout
                == Data("local".utf8))

        // Making the synchronizable one local collides with the local one (same primary key).
        let collide = d.ctl([
            "item", "update", "--service", "tier.sync", "--synchronizable",
            "--set-synchronizable=no",
        ])
        #expect(collide.status == 45 && collide.stderr.contains("DuplicateItem"), "\(collide)")
        #expect(
            d.ctl(["item", "delete", "--service", "tier.sync", "--synchronizable=no"]).stdoutText
                .contains("deleted 1"))
        let local = d.ctl(["item", "update", "--service", "tier.sync", "--set-synchronizable=no"])
        #expect(local.status == 0 && local.stdoutText.contains("updated 1"), "\(local)")
        #expect(try listed([]) == [false])
        #expect(
            d.ctl(["item", "get", "--service", "tier.sync", "--synchronizable=no"]).stdout
                == Data("synced".utf8))

        let bad = d.ctl(["item", "list", "--synchronizable=maybe"])
        #expect(
            bad.status == 64 && bad.stderr.contains("--synchronizable takes yes or no"), "\(bad)")
    }

    // MARK: rate limiting

    @Test func failedUnlocksAreRateLimitedAlsoAfterARestart() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        try #require(d.ctl(["lock"]).status == 0)
        let vault = try d.client()

        // Fail until six wrong passphrases have counted (waiting out each delay on vaultd's
        // test clock, so every attempt is a real check), then the next delay is 8 s.
        var failures = 0
        var rateLimited = 0
        let deadline = Date().addingTimeInterval(60)
        while failures < 6 && Date() < deadline {
            let e = vaultError { try vault.unlock(passphrase: "wrong \(failures)") }
            if e?.code == .wrongPassphrase {
                failures += 1
            } else if e?.code == .rateLimited {
                rateLimited += 1
                let wait = e?.parameters["retryAfter"]?.doubleValue ?? 0
                #expect(wait > 0, "RateLimited must carry retryAfter > 0: \(String(describing: e))")
                try d.advanceClock(by: wait + 0.001)
            } else {
                Issue.record("unexpected answer to a wrong passphrase: \(String(describing: e))")
                return
            }
        }
        #expect(failures == 6)
        #expect(rateLimited >= 1, "the fourth failure should already have had to wait")

        let limited = vaultError { try vault.unlock(passphrase: Daemon.passphrase) }
        #expect(
            limited?.code == .rateLimited,
            "even the right passphrase waits: \(String(describing: limited))")
        #expect((limited?.parameters["retryAfter"]?.doubleValue ?? 0) > 0)
        #expect(limited?.name == "io.vaultd.Vault.RateLimited")

        #expect(try d.restart() == 0)
        let viaCtl = d.unlock()
        #expect(
            viaCtl.status == 1 && viaCtl.stderr.contains("io.vaultd.Vault.RateLimited"),
            "after a restart: \(viaCtl)")
        let fresh = try d.client()
        let afterRestart = vaultError { try fresh.unlock(passphrase: Daemon.passphrase) }
        #expect(afterRestart?.code == .rateLimited, "\(String(describing: afterRestart))")
        #expect((afterRestart?.parameters["retryAfter"]?.doubleValue ?? 0) > 0)
        #expect(try fresh.status().retryAfter > 0)

        // Once the wait is over, the right passphrase unlocks and the count starts over.
        let wait = try fresh.status().retryAfter
        #expect(wait > 0 && wait <= 8, "after six failures (8 s, less the restart): \(wait)")
        try d.advanceClock(by: wait + 0.001)
        #expect(vaultError { try fresh.unlock(passphrase: Daemon.passphrase) } == nil)
        #expect(try fresh.status().retryAfter == 0)
    }

    // MARK: lock-state events

    @Test func lockStateEventsFollowLockAndUnlockFromAnotherProcess() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        let vault = try d.client()
        let seen = Shared<[LockState]>([])
        let failure = Shared<String?>(nil)
        let watcher = Task(executorPreference: DedicatedExecutor("lock-states")) {
            do {
                for try await state in vault.lockStates() { seen.update { $0.append(state) } }
            } catch {
                failure.update { $0 = "\(error)" }
            }
        }
        defer { watcher.cancel() }
        func waitFor(_ count: Int) -> Bool { eventually(timeout: 15) { seen.value.count >= count } }

        try #require(waitFor(1), "no current state (\(failure.value ?? "no error"))")
        #expect(seen.value[0].state == .unlocked && seen.value[0].hasPassphrase)
        let lock = d.ctl(["lock"])
        try #require(lock.status == 0, "\(lock)")
        try #require(waitFor(2), "no event for lock: \(seen.value)")
        #expect(seen.value[1].state == .locked && seen.value[1].unlockedSinceStart)
        try #require(d.unlock().status == 0)
        try #require(waitFor(3), "no event for unlock: \(seen.value)")
        #expect(seen.value[2].state == .unlocked)
        // A wrong passphrase changes nothing, so it is no event: the next event is the lock's.
        _ = d.unlock(passphrase: "wrong")
        try #require(d.ctl(["lock"]).status == 0)
        try #require(waitFor(4))
        #expect(seen.value.map(\.state) == [.unlocked, .locked, .unlocked, .locked])
        // Nor did one come after it: the unlock that follows is the fifth event.
        try #require(d.unlock().status == 0)
        try #require(waitFor(5))
        #expect(seen.value.map(\.state) == [.unlocked, .locked, .unlocked, .locked, .unlocked])
        #expect(failure.value == nil)
    }

    // MARK: idle auto-lock

    @Test func idleAutoLockLocksAfterTheConfiguredSeconds() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        try #require(
            d.ctl(
                [
                    "item", "add", "--service", "tier.idle", "--account", "afu", "--accessible",
                    "afterFirstUnlock",
                ], stdin: Data("afu".utf8)
            ).status == 0)
        try #require(
            d.ctl(
                ["item", "add", "--service", "tier.idle", "--account", "wu"], stdin: Data("wu".utf8)
            ).status == 0)

        // Restart with AutoLockSeconds = 2 (set up first, so no step races the clock).
        let config = d.root + "/config.plist"
        try PropertyListSerialization.data(
            fromPropertyList: ["AutoLockSeconds": 2], format: .xml, options: 0
        )
        .write(to: URL(fileURLWithPath: config))
        #expect(d.stop() == 0)
        try d.start(extraArguments: ["--config", config])
        let unlock = d.unlock()
        try #require(
            unlock.status == 0 && unlock.stdoutText.contains("state: unlocked"), "\(unlock)")
        let unlockedAt = Date()

        // Polling Status only looks: it must not keep the vault unlocked.
        let vault = try d.client()
        let locked = try eventually(timeout: 20) { try vault.status().lock.state == .locked }
        #expect(
            locked,
            "still unlocked \(Date().timeIntervalSince(unlockedAt)) s after the last call; log:\n\(d.log)"
        )
        #expect(Date().timeIntervalSince(unlockedAt) >= 1, "locked before AutoLockSeconds passed")
        let status = try vault.status().lock
        #expect(status.unlockedSinceStart && status.hasPassphrase)
        let wu = d.ctl(["item", "get", "--service", "tier.idle", "--account", "wu"])
        #expect(wu.status == 36 && wu.stderr.contains("InteractionNotAllowed"), "\(wu)")
        #expect(
            d.ctl(["item", "get", "--service", "tier.idle", "--account", "afu"]).stdout
                == Data("afu".utf8))
        #expect(d.log.contains("locked after 2 s without a call"), "\(d.log)")

        // Unlocking again starts the clock again.
        let again = d.unlock()
        #expect(again.status == 0 && again.stdoutText.contains("state: unlocked"), "\(again)")
        #expect(try eventually(timeout: 20) { try vault.status().lock.state == .locked })
    }

    // MARK: CredentialStore

    /// A CredentialStore without an access group is the caller's default group's (the
    /// owner's `user`, an app's first group): the same service and account in another group
    /// the caller can see is neither read, overwritten nor removed through it.
    @Test func aCredentialStoreWithoutAGroupKeepsToTheDefaultGroup() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        let vault = try d.client()
        #expect(vault.launch.defaultAccessGroup == "user")
        let other = ["--service", "com.example.scoped", "--access-group", "com.example.other"]
        for account in ["alice", "carol"] {
            let add = d.ctl(
                ["item", "add"] + other + ["--account", account],
                stdin: Data("other's \(account)".utf8))
            try #require(add.status == 0, "\(add)")
        }
        let store = CredentialStore(vault: vault, service: "com.example.scoped")
        #expect(try store.data(for: "carol") == nil, "read another group's item")
        #expect(try !store.contains("carol"))
        try store.set("mine", for: "alice")
        try store.set("mine again", for: "alice")
        #expect(try store.string(for: "alice") == "mine again")
        #expect(try store.allAccounts() == ["alice"])
        func othersSecret(_ account: String) -> ProcessResult {
            d.ctl(["item", "get"] + other + ["--account", account])
        }
        #expect(
            othersSecret("alice").stdout == Data("other's alice".utf8),
            "the other group's alice was overwritten")
        let mine = try vault.keychain.copyMatching(
            Query(
                .genericPassword,
                ItemAttributes(service: "com.example.scoped", account: "alice", accessGroup: "user")
            ))
        #expect(mine.count == 1)

        try store.remove("alice")
        try store.removeAll()
        #expect(
            othersSecret("alice").stdout == Data("other's alice".utf8),
            "the other group's alice was removed")
        #expect(
            othersSecret("carol").stdout == Data("other's carol".utf8),
            "the other group's carol was removed")
        // A store naming the group reaches it.
        let named = CredentialStore(
            vault: vault, service: "com.example.scoped", accessGroup: "com.example.other")
        #expect(try named.allAccounts() == ["alice", "carol"])
    }

    @Test func credentialStoreVerbsAndTypedErrors() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        let vault = try d.client()
        let store = CredentialStore(vault: vault, service: "com.example.creds")
        let neighbour = CredentialStore(vault: vault, service: "com.example.neighbour")
        try neighbour.set("n", for: "alice")

        try store.set("s3cret", for: "alice")
        try store.set(Data([0, 1, 2]), for: "bob")
        #expect(try store.string(for: "alice") == "s3cret")
        #expect(try store.data(for: "bob") == Data([0, 1, 2]))
        try store.set("replaced", for: "alice")
        #expect(try store.string(for: "alice") == "replaced")
        #expect(try store.string(for: "nobody") == nil)
        #expect(try store.contains("alice") && !(try store.contains("carol")))
        #expect(try store.allAccounts() == ["alice", "bob"])
        // vaultctl sees the same items (the owner's group, service = the store's).
        let get = d.ctl(["item", "get", "--service", "com.example.creds", "--account", "alice"])
        #expect(get.stdout == Data("replaced".utf8), "\(get)")

        try store.remove("alice")
        try store.remove("never-there")
        #expect(try store.allAccounts() == ["bob"])

        // Locked: typed errors with Keychain Services' codes.
        let afu = CredentialStore(
            vault: vault, service: "com.example.creds.afu", accessibility: .afterFirstUnlock)
        try afu.set("still here", for: "carol")
        // Replacing a secret gives the item the store's accessibility, as adding it would.
        try CredentialStore(vault: vault, service: "com.example.creds.afu").set(
            "was whenUnlocked", for: "erin")
        try afu.set("now afterFirstUnlock", for: "erin")
        try #require(d.ctl(["lock"]).status == 0)
        #expect(try afu.string(for: "erin") == "now afterFirstUnlock")
        do throws(VaultError) {
            _ = try store.string(for: "bob")
            Issue.record("read while locked")
        } catch {
            // `error` is a VaultError (typed throws).
            #expect(
                error.code == .interactionNotAllowed && error.status == Self.interactionNotAllowed,
                "\(error)")
        }
        #expect(vaultError { try store.contains("bob") }?.code == .interactionNotAllowed)
        #expect(vaultError { try store.allAccounts() }?.code == .interactionNotAllowed)
        #expect(vaultError { try store.set("x", for: "dave") }?.code == .interactionNotAllowed)
        #expect(vaultError { try store.removeAll() }?.code == .interactionNotAllowed)
        #expect(
            try afu.string(for: "carol") == "still here", "afterFirstUnlock items stay readable")
        try #require(d.unlock().status == 0)

        try store.removeAll()
        #expect(try store.allAccounts() == [])
        try store.removeAll()
        #expect(try neighbour.allAccounts() == ["alice"], "removeAll is per service")
        #expect(try afu.allAccounts() == ["carol", "erin"])
    }
}
