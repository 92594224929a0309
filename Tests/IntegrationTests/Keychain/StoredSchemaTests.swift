import Foundation
import Testing
import VaultProtocol

@testable import VaultCore

#if canImport(Glibc)
import Glibc
#endif

/// Data directories made by each shipped schema version, with that version's own vaultd
/// (Tests/Fixtures/stores, made by its make-fixture.py): today's vaultd opens a copy of each,
/// migrates it, unlocks it with the test passphrase and reads back every item, preference,
/// app record and cache file the fixture's manifest lists, exactly as the old vaultd read
/// them; the store then holds today's every migration, in order.
@Suite struct StoredSchemaTests {
    static let stores = Paths.fixtures.appendingPathComponent("stores")
    /// The fixtures' app that added items and preferences itself (make-fixture.py's perl client).
    static let writingApp = "com.example.fixture.perl"

    /// The fixture directories (each has a manifest.json), oldest schema first: NN-MIGRATION,
    /// the number of migrations of its schema and the one that version added.
    static let fixtures: [String] = {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: stores.path)) ?? []
        return names.filter {
            FileManager.default.fileExists(
                atPath: stores.appendingPathComponent($0 + "/manifest.json").path)
        }.sorted()
    }()

    /// JSON as one comparable text: keys sorted, numbers as JSONSerialization writes them.
    static func canonical(_ v: Any?) -> String {
        guard let v, !(v is NSNull) else { return "null" }
        guard
            let d = try? JSONSerialization.data(
                withJSONObject: v, options: [.sortedKeys, .fragmentsAllowed])
        else { return "\(v)" }
        return String(decoding: d, as: UTF8.self)
    }

    static func manifest(_ name: String) throws -> [String: Any] {
        let data = try Data(contentsOf: stores.appendingPathComponent(name + "/manifest.json"))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    /// Copies `from` into `to` (a directory tree of regular files), keeping modes.
    static func copyTree(_ from: String, _ to: String) throws {
        let fm = FileManager.default
        try fm.createDirectory(
            atPath: to, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        for name in try fm.contentsOfDirectory(atPath: from) {
            let src = from + "/" + name
            let dst = to + "/" + name
            var isDir: ObjCBool = false
            _ = fm.fileExists(atPath: src, isDirectory: &isDir)
            if isDir.boolValue {
                try copyTree(src, dst)
            } else {
                try fm.copyItem(atPath: src, toPath: dst)
                // A checkout may give the key files another mode; vaultd wants them private.
                chmod(dst, 0o600)
            }
        }
    }

    @Test(
        "a stored database opens with today's vaultd, and every value reads back",
        arguments: fixtures)
    func opensAndReadsBack(_ name: String) throws {
        let m = try Self.manifest(name)
        let d = try Daemon(start: false)
        defer { d.close() }
        try Self.copyTree(Self.stores.path + "/" + name + "/data", d.dataDirectory)
        let cacheDirectory = d.root + "/cache"
        let hasCache = FileManager.default.fileExists(
            atPath: Self.stores.path + "/" + name + "/cache")
        if hasCache { try Self.copyTree(Self.stores.path + "/" + name + "/cache", cacheDirectory) }
        // No purge on a full disk of the machine running the tests: the cache files are read back.
        let config = d.root + "/config.plist"
        try PropertyListSerialization.data(
            fromPropertyList: ["CacheFreeLowWaterBytes": 0], format: .xml, options: 0
        )
        .write(to: URL(fileURLWithPath: config))
        try d.start(extraArguments: ["--cache-dir", cacheDirectory, "--config", config])

        let c = try d.connect()
        func call(_ method: String, _ parameters: [String: Any]? = nil) throws -> [String: Any] {
            let r = try c.call(method, parameters, timeout: 30)
            guard let p = r.parameters, r.errorName == nil else {
                throw HarnessError("\(method): \(r)")
            }
            return p
        }
        let before = try call("io.vaultd.Vault.Status")
        #expect((before["lock"] as? [String: Any])?["state"] as? String == "locked", "\(before)")
        let passphrase = try #require(m["passphrase"] as? String)
        let unlocked = try call("io.vaultd.Vault.Unlock", ["passphrase": passphrase])
        #expect(
            (unlocked["lock"] as? [String: Any])?["state"] as? String == "unlocked", "\(unlocked)")

        // Items: each found by its primary key, with every attribute and its secret as stored.
        let items = try #require(m["items"] as? [[String: Any]])
        let all =
            try call(
                "io.vaultd.Keychain.CopyMatching", ["matchLimit": "all", "returnAttributes": true])[
                "items"] as? [[String: Any]]
        #expect(
            all?.count == items.count,
            "\(name): \(all?.count ?? -1) items, the manifest lists \(items.count)")
        for item in items {
            let cls = try #require(item["class"] as? String)
            let attributes = try #require(item["attributes"] as? [String: Any])
            let query = attributes.filter {
                ["service", "server", "account", "accessGroup", "synchronizable"].contains($0.key)
            }
            let found = try #require(
                try call(
                    "io.vaultd.Keychain.CopyMatching",
                    [
                        "class": cls, "query": query, "matchLimit": "all", "returnData": true,
                        "returnAttributes": true,
                    ])["items"] as? [[String: Any]])
            try #require(found.count == 1, "\(name): \(cls) \(query): \(found.count) items")
            let got = try #require(found[0]["attributes"] as? [String: Any])
            for (key, value) in attributes {
                #expect(
                    Self.canonical(got[key]) == Self.canonical(value),
                    "\(name): \(cls) \(query) \(key)")
            }
            let data = try #require(
                (found[0]["data"] as? String).flatMap { Data(base64Encoded: $0) },
                "\(name): \(cls) \(query) data")
            #expect(
                data.count == item["dataLength"] as? Int, "\(name): \(cls) \(query) secret length")
            #expect(
                Sodium.sha256(Array(data)).map { String(format: "%02x", $0) }.joined() == item[
                    "dataSHA256"] as? String)
            if let stored = item["data"] as? String {
                #expect(data.base64EncodedString() == stored)
            }
        }

        // Preferences: each domain whole, every value with its type.
        let prefs = try #require(m["preferences"] as? [String: [String: Any]])
        let domains = try call("io.vaultd.Preferences.Domains")["domains"] as? [String] ?? []
        #expect(Set(domains) == Set(prefs.keys), "\(name): domains \(domains)")
        for (domain, values) in prefs {
            let got = try #require(
                try call("io.vaultd.Preferences.Domain", ["domain": domain])["values"]
                    as? [String: Any])
            #expect(Set(got.keys) == Set(values.keys), "\(name): \(domain) keys")
            for (key, value) in values {
                #expect(
                    Self.canonical(got[key]) == Self.canonical(value), "\(name): \(domain) \(key)")
            }
        }

        // Apps: every field the old vaultd listed, as it listed it.
        let apps = m["apps"] as? [[String: Any]] ?? []
        if !apps.isEmpty {
            let listed = try call("io.vaultd.Apps.List")["apps"] as? [[String: Any]] ?? []
            #expect(listed.count == apps.count, "\(name): \(listed.count) apps")
            for app in apps {
                let id = try #require(app["appID"] as? String)
                let got = try #require(
                    listed.first { $0["appID"] as? String == id }, "\(name): \(id) missing")
                for (key, value) in app {
                    #expect(
                        Self.canonical(got[key]) == Self.canonical(value),
                        "\(name): app \(id) \(key)")
                }
            }
        }

        // Caches: the apps' files, byte for byte, and counted in the usage.
        let caches = m["caches"] as? [String: [String: Any]] ?? [:]
        if !caches.isEmpty {
            let usage = try call("io.vaultd.Caches.Usage")["apps"] as? [[String: Any]] ?? []
            for (app, cache) in caches {
                let files = try #require(cache["files"] as? [String: Int])
                let directory = try #require(
                    try call("io.vaultd.Caches.Directory", ["appID": app])["path"] as? String)
                for (file, size) in files {
                    let content = try Data(contentsOf: URL(fileURLWithPath: directory + "/" + file))
                    #expect(
                        Array(content) == (0..<size).map { UInt8(($0 * 13) % 256) },
                        "\(name): \(app) \(file)")
                }
                let counted = usage.first { $0["appID"] as? String == app }
                #expect(
                    counted?["files"] as? Int == files.count,
                    "\(name): \(app) usage \(String(describing: counted))")
            }
        }

        let status = try call("io.vaultd.Vault.Status")
        #expect(status["items"] as? Int == items.count)
        #expect(status["domains"] as? Int == prefs.count)
        c.close()
        #expect(d.stop() == 0, "\(d.log)")

        // The schema is today's: the fixture's migrations, then the rest, in today's order.
        let db = try Database(path: d.dataDirectory + "/vault.sqlite")
        defer { db.close() }
        let applied = try Schema.migrator.applied(in: db)
        let known = Schema.migrator.migrations.map(\.name)
        #expect(Set(applied) == Set(known), "\(name): \(applied)")
        #expect(applied.last == known.last)
        let stored = try #require(m["migrations"] as? [String])
        #expect(Array(applied.prefix(stored.count)) == stored, "\(name): applied \(applied)")
        #expect(try db.row("PRAGMA integrity_check")?[0].text == "ok")
        // The items an app added keep their install generation, and each app's quota counts
        // exactly the bytes of its items (the usage migration's sum, then its triggers).
        if apps.contains(where: { $0["appID"] as? String == Self.writingApp }) {
            let generation = try #require(
                apps.first { $0["appID"] as? String == Self.writingApp }?["generation"] as? String)
            #expect(
                try db.row("SELECT count(*) FROM items WHERE generation = ?", [.text(generation)])?[
                    0
                ].int64 == 2)
            let usage = try db.rows(
                """
                SELECT u.app_id, u.bytes, (SELECT SUM(length(i.attributes) + length(i.wrapped_key) + length(i.secret))
                  FROM items i JOIN app_generations g ON g.generation = i.generation WHERE g.app_id = u.app_id) FROM app_usage u
                """)
            #expect(usage.map { $0[0].text } == [Self.writingApp], "\(name): \(usage)")
            for r in usage {
                #expect(r[1].int64 != nil && r[1].int64 == r[2].int64, "\(name): \(r)")
            }
        }
    }

    /// The oldest store's passphrase was derived at libsodium's INTERACTIVE cost (2 passes,
    /// 64 MiB), as vaultd then made vaults: today's vaultd, at its real cost, re-wraps it at
    /// MODERATE at the first unlock, and it opens again after a restart.
    @Test func anOldStoreIsRewrappedAtTodaysCost() throws {
        let name = try #require(Self.fixtures.first)
        let m = try Self.manifest(name)
        let passphrase = try #require(m["passphrase"] as? String)
        let d = try Daemon(start: false)
        defer { d.close() }
        try Self.copyTree(Self.stores.path + "/" + name + "/data", d.dataDirectory)
        func kdf() throws -> (UInt64?, UInt64?) {
            let db = try Database(path: d.dataDirectory + "/vault.sqlite")
            defer { db.close() }
            let j = try JSON.parse(
                try #require(try db.row("SELECT value FROM vault_meta WHERE key = 'kdf'")?[0].blob))
            return (j["opsLimit"]?.uint64Value, j["memLimit"]?.uint64Value)
        }
        #expect(try kdf() == (2, 64 * 1024 * 1024))
        let realCost = ["VAULTD_ARGON2_TEST_COST": ""]
        for _ in 0..<2 {
            try d.start(environment: realCost)
            let c = try d.connect()
            let r = try c.call("io.vaultd.Vault.Unlock", ["passphrase": passphrase], timeout: 60)
            #expect(r.errorName == nil, "\(r)")
            let found =
                try c.call("io.vaultd.Keychain.CopyMatching", ["matchLimit": "all"]).parameters?[
                    "items"] as? [[String: Any]]
            #expect(found?.count == (m["items"] as? [Any])?.count)
            c.close()
            #expect(d.stop() == 0, "\(d.log)")
            #expect(
                try kdf() == (
                    Sodium.KDFCost.moderate.limits.opsLimit, Sodium.KDFCost.moderate.limits.memLimit
                ))
        }
    }

    /// Every shipped schema version has a fixture (a new migration needs one made with the
    /// vaultd that adds it, once it ships: Tests/Fixtures/README.md says how).
    @Test func everyFixtureIsAShippedSchema() throws {
        let known = Schema.migrator.migrations.map(\.name)
        #expect(!Self.fixtures.isEmpty)
        for name in Self.fixtures {
            let m = try Self.manifest(name)
            let migrations = try #require(m["migrations"] as? [String])
            // NN-MIGRATION: the version's number of migrations, and the one it added.
            let added = try #require(m["migration"] as? String)
            #expect(
                name == String(format: "%02d-", migrations.count) + added,
                "\(name): its manifest says \(added), \(migrations.count) migrations")
            #expect(migrations.contains(added))
            // Everything in vault.sqlite: no WAL or shared-memory file beside it (a reader
            // such as sqlite3 leaves them behind; delete them).
            let files = try FileManager.default.contentsOfDirectory(
                atPath: Self.stores.path + "/" + name + "/data"
            ).sorted()
            #expect(files == m["dataFiles"] as? [String], "\(name): data/ holds \(files)")
            #expect(Set(migrations).isSubset(of: Set(known)), "\(name): \(migrations)")
        }
    }
}
