import Foundation
import Testing
import VaultProtocol

@testable import VaultCore

@Suite("Encryption at rest")
struct AtRestTests {
    static let markers = [
        "svc-PLAINTEXT-CHECK", "acct-PLAINTEXT-CHECK", "label-PLAINTEXT-CHECK",
        "comment-PLAINTEXT-CHECK",
        "descr-PLAINTEXT-CHECK", "generic-PLAINTEXT-CHECK", "secret-PLAINTEXT-CHECK",
        "server-PLAINTEXT-CHECK",
        "path-PLAINTEXT-CHECK", "realm-PLAINTEXT-CHECK", "label2-PLAINTEXT-CHECK",
        "secret2-PLAINTEXT-CHECK",
        "deleted-PLAINTEXT-CHECK", "PLAINTEXT-CHECK",
    ]

    /// Every regular file under `dir` with its bytes.
    static func files(in dir: String) throws -> [String: [UInt8]] {
        var out: [String: [UInt8]] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: dir) {
            var isDir: ObjCBool = false
            let path = dir + "/" + name
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDir) else {
                continue
            }
            if isDir.boolValue {
                for (k, v) in try files(in: path) { out[name + "/" + k] = v }
            } else {
                out[name] = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
            }
        }
        return out
    }

    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, haystack.count >= needle.count else { return false }
        let first = needle[0]
        var i = 0
        let last = haystack.count - needle.count
        while i <= last {
            if haystack[i] == first && haystack[i..<(i + needle.count)].elementsEqual(needle) {
                return true
            }
            i += 1
        }
        return false
    }

    static func expectNoMarkers(in dir: String, sourceLocation: SourceLocation = #_sourceLocation)
        throws -> [String: [UInt8]]
    {
        let all = try files(in: dir)
        for (name, content) in all {
            for m in markers {
                #expect(
                    !contains(content, Array(m.utf8)), "'\(m)' in plaintext in \(name)",
                    sourceLocation: sourceLocation)
            }
        }
        return all
    }

    /// Every stored item's three ciphertexts are bound to these bytes: a vault written by any
    /// earlier build opens only while they stay the same.
    @Test func theAssociatedDataOfAnItemIsItsIdentityInTheStoredFormat() {
        let uuid: [UInt8] = [0x01, 0x00, 0xFE]
        let ad = KeychainStore.associatedData(
            uuid: uuid, itemClass: .internetPassword, accessGroup: "team.shared",
            accessible: .afterFirstUnlockThisDeviceOnly,
            synchronizable: true)
        #expect(
            ad == Array("vaultd item v1\0".utf8) + uuid
                + Array(
                    "\0internetPassword\0team.shared\0afterFirstUnlockThisDeviceOnly\0\u{31}".utf8))
        let generic = KeychainStore.associatedData(
            uuid: [], itemClass: .genericPassword, accessGroup: "", accessible: .whenUnlocked,
            synchronizable: false)
        #expect(generic == Array("vaultd item v1\0\0genericPassword\0\0whenUnlocked\00".utf8))
    }

    /// The index columns hold a keyed hash of "field NUL value": a vault written by any
    /// earlier build finds its items only while these bytes stay the same.
    @Test func theIndexHashOfAFieldIsOfItsNameAndValue() throws {
        let key = SecureBytes(copying: Array(repeating: 7, count: 32))
        for (field, value) in [
            ("account", "alice@example.org"), ("service", ""), ("server", "caf\u{E9}\0x"),
        ] {
            let expected = Sodium.keyedHash(
                Array(field.utf8) + [0] + Array(value.utf8), key: key, length: 16)
            #expect(KeychainStore.fieldHash(field, value, index: key) == .blob(expected))
        }
        #expect(KeychainStore.fieldHash("account", nil, index: key) == .null)
    }

    @Test func nothingTypedAppearsInPlaintextOnDisk() throws {
        try withTemporaryDirectory { tmp in
            let dir = tmp + "/data"
            let vault = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
            var closed = false
            defer { if !closed { vault.close() } }
            _ = try vault.initialize(passphrase: nil, caller: .owner)
            _ = try vault.addItem(
                .genericPassword,
                attributes: ItemAttributes(
                    service: "svc-PLAINTEXT-CHECK", account: "acct-PLAINTEXT-CHECK",
                    label: "label-PLAINTEXT-CHECK",
                    comment: "comment-PLAINTEXT-CHECK", description: "descr-PLAINTEXT-CHECK",
                    generic: Data("generic-PLAINTEXT-CHECK".utf8)),
                secret: secret("secret-PLAINTEXT-CHECK"), caller: .owner)
            _ = try vault.addItem(
                .internetPassword,
                attributes: ItemAttributes(
                    account: "acct-PLAINTEXT-CHECK", server: "server-PLAINTEXT-CHECK",
                    protocol: "https", port: 443,
                    path: "/path-PLAINTEXT-CHECK", securityDomain: "realm-PLAINTEXT-CHECK"),
                secret: secret("secret-PLAINTEXT-CHECK"), caller: .owner)
            // Old versions of rows (update) and deleted rows must not leave plaintext either.
            _ = try vault.updateItems(
                ItemQuery(attributes: ItemAttributes(service: "svc-PLAINTEXT-CHECK")),
                changes: ItemAttributes(label: "label2-PLAINTEXT-CHECK"),
                secret: secret("secret2-PLAINTEXT-CHECK"),
                caller: .owner)
            try vault.addGeneric(
                service: "deleted-PLAINTEXT-CHECK", account: "deleted-PLAINTEXT-CHECK",
                secret: Array("deleted-PLAINTEXT-CHECK".utf8))
            _ = try vault.deleteItems(
                ItemQuery(attributes: ItemAttributes(service: "deleted-PLAINTEXT-CHECK")),
                caller: .owner)
            // A positive control: preferences are not encrypted, so this marker must be found,
            // which shows the scan really reads the store (and its WAL) while open.
            try vault.setPreference(
                domain: "com.example.control", key: "k", value: .string("CONTROL-MARKER-VISIBLE"),
                caller: .owner)

            let open = try Self.expectNoMarkers(in: dir)
            #expect(
                open.keys.contains("vault.sqlite-wal"),
                "the store runs in WAL mode: \(open.keys.sorted())")
            #expect(
                open.values.contains { Self.contains($0, Array("CONTROL-MARKER-VISIBLE".utf8)) })

            #expect(
                try vault.readGeneric(service: "svc-PLAINTEXT-CHECK")
                    == Array("secret2-PLAINTEXT-CHECK".utf8))
            vault.close()
            closed = true
            let after = try Self.expectNoMarkers(in: dir)
            #expect(
                after.values.contains { Self.contains($0, Array("CONTROL-MARKER-VISIBLE".utf8)) })

            // And the data is really there: reopened, it decrypts.
            let reopened = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
            defer { reopened.close() }
            #expect(
                try reopened.readGeneric(service: "svc-PLAINTEXT-CHECK")
                    == Array("secret2-PLAINTEXT-CHECK".utf8))
        }
    }
}

@Suite("Migrator")
struct MigratorTests {
    /// `@unchecked Sendable`: the migrations it counts run on the test's thread.
    final class Counter: @unchecked Sendable { var runs: [String: Int] = [:] }

    static func migrator(_ counter: Counter, names: [String]) -> Migrator {
        var m = Migrator()
        for name in names {
            m.register(name) { db in
                counter.runs[name, default: 0] += 1
                try db.execute("CREATE TABLE \"t_\(name)\" (x INTEGER)")
            }
        }
        return m
    }

    @Test func applyingTwiceIsANoOp() throws {
        try withTemporaryDirectory { tmp in
            let db = try Database(path: tmp + "/m.sqlite")
            defer { db.close() }
            let counter = Counter()
            let m = Self.migrator(counter, names: ["one", "two"])
            #expect(try m.applied(in: db) == [])
            try m.migrate(db)
            try m.migrate(db)
            #expect(counter.runs == ["one": 1, "two": 1])
            #expect(try m.applied(in: db) == ["one", "two"])
            // A later build with one more migration runs only that one.
            let later = Self.migrator(counter, names: ["one", "two", "three"])
            try later.migrate(db)
            try later.migrate(db)
            #expect(counter.runs == ["one": 1, "two": 1, "three": 1])
            #expect(try later.applied(in: db) == ["one", "two", "three"])
            #expect(
                try db.rows(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 't\\_%' ESCAPE '\\' ORDER BY name"
                ).map { $0[0].text } == ["t_one", "t_three", "t_two"])
        }
    }

    @Test func anUnknownRecordedMigrationThrows() throws {
        try withTemporaryDirectory { tmp in
            let db = try Database(path: tmp + "/m.sqlite")
            defer { db.close() }
            let counter = Counter()
            try Self.migrator(counter, names: ["one", "two"]).migrate(db)
            // An older build, which knows only "one", must refuse the newer database.
            let older = Self.migrator(counter, names: ["one"])
            let e = expectFailure(.internalError) { try older.migrate(db) }
            #expect(e?.message.contains("two") == true)
            // Also when the unknown one was recorded by hand.
            try db.run(
                "INSERT INTO schema_migrations (name, applied_at) VALUES ('2099-01-01-future', 0)")
            expectFailure(.internalError) {
                try Self.migrator(counter, names: ["one", "two"]).migrate(db)
            }
            #expect(counter.runs == ["one": 1, "two": 1])
        }
    }

    @Test func aFailingMigrationIsRolledBackAndNotRecorded() throws {
        struct Boom: Error {}
        try withTemporaryDirectory { tmp in
            let db = try Database(path: tmp + "/m.sqlite")
            defer { db.close() }
            var m = Migrator()
            m.register("good") { db in try db.execute("CREATE TABLE good (x)") }
            m.register("bad") { db in
                try db.execute("CREATE TABLE half (x)")
                throw Boom()
            }
            #expect(throws: Boom.self) { try m.migrate(db) }
            #expect(try m.applied(in: db) == ["good"])
            #expect(try db.rows("SELECT name FROM sqlite_master WHERE name = 'half'").isEmpty)
        }
    }

    /// A vault written before the items table was rebuilt (twice: without the uuid index,
    /// then with one lookup index for service/server and account): the first two shipped
    /// migrations (exactly as shipped), holding rows the current code encrypted, in the
    /// columns of that time. Opening it rebuilds the items table; every item keeps its id and
    /// hashes and still decrypts, every query shape finds what it found, and the primary
    /// key's uniqueness survives.
    @Test func theItemsRebuildsKeepEveryItem() throws {
        try withTemporaryDirectory { tmp in
            let dir = tmp + "/data"
            var current: [[SQLValue]] = []
            do {
                let v = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
                _ = try v.initialize(passphrase: nil, caller: .owner)
                for i in 0..<50 {
                    try v.addGeneric(
                        service: "svc\(i % 7)", account: "acct\(i % 20)", secret: [UInt8(i), 1, 2])
                }
                _ = try v.addItem(
                    .internetPassword,
                    attributes: ItemAttributes(account: "acct3", server: "example.com", port: 443),
                    secret: secret("web"), caller: .owner)
                v.close()
            }
            let columns =
                "id, uuid, item_class, access_group, accessible, synchronizable, primary_key_hash, lookup_hash, account_hash, attributes, wrapped_key, secret, generation"
            // The same rows in a store of the earlier schema, which recorded only its own migrations.
            do {
                let old = tmp + "/old.sqlite"
                let db = try Database(path: old)
                var shipped = Migrator()
                for m in Schema.migrator.migrations where m.name < "2026-11-30" {
                    shipped.register(m.name, m.migrate)
                }
                #expect(
                    shipped.migrations.map(\.name) == ["2026-11-29-initial", "2026-11-29-apps"])
                try shipped.migrate(db)
                #expect(
                    try db.rows("PRAGMA index_list(items)").contains {
                        $0[1].text == "sqlite_autoindex_items_1"
                    })
                try db.executeScript(
                    """
                    ATTACH '\(dir)/vault.sqlite' AS cur;
                    INSERT INTO main.vault_meta SELECT * FROM cur.vault_meta;
                    INSERT INTO main.items (id, uuid, item_class, access_group, accessible, synchronizable, primary_key_hash,
                      service_hash, account_hash, server_hash, attributes, wrapped_key, secret, generation)
                    SELECT id, uuid, item_class, access_group, accessible, synchronizable, primary_key_hash,
                      CASE item_class WHEN 'genericPassword' THEN lookup_hash END, account_hash,
                      CASE item_class WHEN 'internetPassword' THEN lookup_hash END, attributes, wrapped_key, secret, generation
                    FROM cur.items;
                    DETACH cur;
                    """)
                #expect(
                    try db.row("SELECT COUNT(*) FROM items WHERE service_hash IS NOT NULL")?[0]
                        .int64 == 50)
                #expect(
                    try db.row("SELECT COUNT(*) FROM items WHERE server_hash IS NOT NULL")?[0].int64
                        == 1)
                db.close()
                let now = try Database(path: dir + "/vault.sqlite")
                current = try now.rows("SELECT \(columns) FROM items ORDER BY id")
                now.close()
                try FileManager.default.removeItem(atPath: dir + "/vault.sqlite")
                try? FileManager.default.removeItem(atPath: dir + "/vault.sqlite-wal")
                try FileManager.default.moveItem(atPath: old, toPath: dir + "/vault.sqlite")
                try? FileManager.default.removeItem(atPath: old + "-wal")
            }
            #expect(current.count == 51)
            let v = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
            for i in 0..<20 {
                // acct i holds the items i, i + 20, i + 40 (those below 50), each under svc (n % 7).
                let expected = stride(from: i, to: 50, by: 20).map { [UInt8($0), 1, 2] }
                for n in stride(from: i, to: 50, by: 20) {
                    #expect(
                        try v.readGeneric(service: "svc\(n % 7)", account: "acct\(i)") == [
                            UInt8(n), 1, 2,
                        ])
                }
                // Only the account: the lookup index finds every item of it, of both classes.
                let byAccount = try v.copyMatching(
                    ItemQuery(attributes: ItemAttributes(account: "acct\(i)"), matchAll: true),
                    returnData: true, caller: .owner)
                let generic = byAccount.filter { $0.itemClass == .genericPassword }.compactMap {
                    plain($0.data)
                }
                #expect(generic == expected)
                #expect(byAccount.count == expected.count + (i == 3 ? 1 : 0))
            }
            let byService = try v.copyMatching(
                ItemQuery(
                    itemClass: .genericPassword, attributes: ItemAttributes(service: "svc2"),
                    matchAll: true), returnData: true,
                caller: .owner)
            #expect(
                byService.compactMap { plain($0.data) }
                    == stride(from: 2, to: 50, by: 7).map { [UInt8($0), 1, 2] })
            let web = try v.copyMatching(
                ItemQuery(
                    itemClass: .internetPassword, attributes: ItemAttributes(server: "example.com")),
                returnData: true, caller: .owner)
            #expect(web.count == 1 && plain(web.first?.data) == Array("web".utf8))
            expectFailure(.duplicateItem) {
                try v.addGeneric(service: "svc3", account: "acct3", secret: [9])
            }
            expectFailure(.duplicateItem) {
                _ = try v.addItem(
                    .internetPassword,
                    attributes: ItemAttributes(account: "acct3", server: "example.com", port: 443),
                    secret: secret("again"), caller: .owner)
            }
            v.close()

            let db = try Database(path: dir + "/vault.sqlite")
            defer { db.close() }
            #expect(try db.rows("SELECT \(columns) FROM items ORDER BY id") == current)
            #expect(try db.row("PRAGMA integrity_check")?[0].text == "ok")
            let indexes = try db.rows(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'items' ORDER BY name"
            ).compactMap { $0[0].text }
            // The lookup index is kept in memory (`ItemIndex`), not in the file; the primary
            // key's uniqueness is held by SQLite too.
            #expect(indexes == ["items_generation", "items_group", "items_primary_key"])
            let applied = try Schema.migrator.applied(in: db)
            #expect(
                applied.contains("2026-11-30-items-uuid-unindexed")
                    && applied.contains("2026-11-30-items-lookup-index")
                    && applied.contains("2026-11-30-items-lookup-in-memory"))
        }
    }

    @Test func vaultRefusesAStoreWrittenByANewerVersion() throws {
        try withTemporaryDirectory { tmp in
            let dir = tmp + "/data"
            do {
                let v = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
                v.close()
            }
            // Reopening runs the shipped migrations again: a no-op.
            do {
                let v = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
                _ = try v.initialize(passphrase: nil, caller: .owner)
                try v.addGeneric(service: "s", account: "a", secret: [1])
                v.close()
            }
            do {
                let v = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
                #expect(try v.readGeneric(service: "s") == [1])
                v.close()
            }
            do {
                let db = try Database(path: dir + "/vault.sqlite")
                try db.run(
                    "INSERT INTO schema_migrations (name, applied_at) VALUES ('2099-01-01-future', 0)"
                )
                db.close()
            }
            expectFailure(.internalError) {
                _ = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
            }
        }
    }
}
