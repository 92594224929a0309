import Foundation
import Testing

@testable import VaultCore

/// A shipped migration never changes (Schema.swift): stores out there ran it as it was, and
/// running another text on the next store would leave two kinds of stores with one schema
/// name. Each migration is held to the SQL statements it runs, as SQLite starts them
/// (`Database.traceStatements`: the text before binding, and each trigger that fires), on
/// an empty store and on the oldest stored fixture (Tests/Fixtures/stores, whose rows make
/// the migrations that go through rows run their per-row statements too). The Swift code
/// around those statements is held by StoredSchemaTests, which reads every value back from
/// a store of each shipped schema.
@Suite struct MigrationTextTests {
    /// SHA-256 of each shipped migration's statements (`digest`), in the order they are
    /// registered. A new migration is added here, with the digest the test prints, in the
    /// commit that ships it.
    static let shipped: [(name: String, sha256: String)] = [
        ("2026-11-29-initial", "a06545614b89168929cda5467aac2cffe91ee04c48540dcf0fcbdff690918b26"),
        ("2026-11-29-apps", "c9308d07e3212d0a109446a3953a40f923946d1262ed12ed0331ecf5a9a664e4"),
        (
            "2026-11-30-items-uuid-unindexed",
            "7e993546fde325e610194c6e093914be78d014a0520c0c63238e2fccb3397cb6"
        ),
        (
            "2026-11-30-preferences-wire-size",
            "71c789b55bdecfbd30b47efdb45dc0654de99a99af386a0a5e5bc437d81b0162"
        ),
        (
            "2026-11-30-apps-unreported-launch-wipe",
            "eaf7a5961fb9d3967e4551d48fc99b70040d08c31aab231b70c54ce7c3363f1d"
        ),
        (
            "2026-11-30-app-generations",
            "c8c5f4c91267c6a9453c2bb958e665de3232d4ed058ae94564fe52385ec62925"
        ),
        (
            "2026-11-30-items-lookup-index",
            "20c8fd684348fd8c052ea1c4874f4d9596efa55b4af6320671d52315c588b918"
        ),
        (
            "2026-11-30-items-lookup-in-memory",
            "b1b829acf270969b0588099c174e5c6cd78ef06212cd64ab4eb342982d289852"
        ),
        (
            "2026-12-01-apps-missing-since",
            "8551f49a768b7e347a7fc3cc9b0e5a501d29ac9a09a3716c6cf40dd70b7f065c"
        ),
        (
            "2026-12-01-app-usage",
            "c3996ab53265edfba8acd12a45b3e7435f711a9b5ce6c332cd3d7369bd5d7fef"
        ),
        (
            "2026-12-01-preferences-modified",
            "1fbaf3b41aef7b9d7589135d8e302568e062f3602830eadf951998c80d77c840"
        ),
        (
            "2026-12-01-item-lookup-attributes",
            "df7a88ac857f7aca8e314ee9c2e42d787f16241e19e46780cc1625086cfedbe9"
        ),
        (
            "2026-12-02-sync-baseline",
            "8418a30efe75e0193defb0243eb53a18aee14f8b4b33af59b29647526fdc4504"
        ),
        (
            "2026-12-02-items-primary-key-unique",
            "2fda04e31c52ecf7419d5858a0e7a01577ace1e5deca494311100679a0c5f5fe"
        ),
        (
            "2026-12-06-collection-labels",
            "47f6fd8cc7616fa147950bf9e76f68546ec7241a7cb2c5a6a50b2bd326d1141e"
        ),
        (
            "2026-12-07-item-creators",
            "a949a04db4ebd680f0aac3eea505cdb2bbf4af2109635da509fa4708a20b3367"
        ),
    ]

    static let oldestFixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent()
        .appendingPathComponent("Fixtures/stores/01-2026-11-29-initial/data/vault.sqlite")

    /// The statements each migration runs, each text once, in the order first run: on an
    /// empty store, then on a copy of the oldest fixture.
    static func statements() throws -> [String: [String]] {
        var seen: [String: [String]] = [:]
        func run(_ db: Database, skipping done: [String]) throws {
            for m in Schema.migrator.migrations where !done.contains(m.name) {
                var texts: [String] = []
                try db.write { db in
                    db.traceStatements { texts.append($0) }
                    defer { db.stopTracing() }
                    try m.migrate(MigrationDatabase(db))
                }
                for t in texts where !(seen[m.name]?.contains(t) ?? false) {
                    seen[m.name, default: []].append(t)
                }
            }
        }
        try withTemporaryDirectory { dir in
            let empty = try Database(path: dir + "/empty.sqlite")
            defer { empty.close() }
            try run(empty, skipping: [])

            try FileManager.default.copyItem(
                atPath: oldestFixture.path, toPath: dir + "/fixture.sqlite")
            let fixture = try Database(path: dir + "/fixture.sqlite")
            defer { fixture.close() }
            try run(fixture, skipping: try Schema.migrator.applied(in: fixture))
        }
        return seen
    }

    /// Hex SHA-256 of the statements, each followed by a NUL.
    static func digest(_ statements: [String]) -> String {
        Sodium.sha256(statements.flatMap { Array($0.utf8) + [0] }).map {
            String(format: "%02x", $0)
        }.joined()
    }

    @Test func shippedMigrationsAreUnchanged() throws {
        let statements = try Self.statements()
        let registered = Schema.migrator.migrations.map(\.name)
        let shipped = Dictionary(uniqueKeysWithValues: Self.shipped.map { ($0.name, $0.sha256) })
        for name in registered {
            let digest = Self.digest(statements[name] ?? [])
            guard let expected = shipped[name] else {
                Issue.record(
                    """
                    migration '\(name)' is not in MigrationTextTests.shipped: add ("\(name)", "\(digest)") there \
                    when it ships (and a stored fixture of its schema: Tests/Fixtures/README.md)
                    """)
                continue
            }
            #expect(
                digest == expected,
                """
                the statements of shipped migration '\(name)' changed (SHA-256 \(digest), shipped \(expected)): \
                never edit a shipped migration, stores out there ran it as it was; register a new migration \
                that changes the schema from there instead. Its statements now: \(statements[name] ?? [])
                """)
        }
        for (name, _) in Self.shipped where !registered.contains(name) {
            Issue.record(
                "shipped migration '\(name)' is no longer registered: stores out there carry it; keep it"
            )
        }
        let shippedOrder = Self.shipped.map(\.name)
        #expect(
            registered.filter(shipped.keys.contains) == shippedOrder,
            "the shipped migrations' order changed: \(registered)")
    }

    /// The trace sees what a migration runs: the initial one creates the tables, and the
    /// wire-size one updates each preference row of the fixture.
    @Test func theTraceSeesEachStatement() throws {
        let statements = try Self.statements()
        #expect(
            statements["2026-11-29-initial"]?.contains { $0.contains("CREATE TABLE items") } == true
        )
        #expect(
            statements["2026-11-30-preferences-wire-size"]?.contains {
                $0.hasPrefix("UPDATE preferences SET size")
            } == true)
        #expect(
            statements["2026-12-01-app-usage"]?.contains {
                $0.contains("CREATE TRIGGER items_usage_insert")
            } == true)
    }
}
