import VaultProtocol

/// Named, recorded, append-only schema migrations (as GRDB's `DatabaseMigrator`).
///
/// Each migration runs once, in order, in its own transaction, and its name is recorded in
/// `schema_migrations`. Shipped migrations are never edited: add a new one instead.
public struct Migrator {
    public typealias Migration = (name: String, migrate: (MigrationDatabase) throws -> Void)
    public private(set) var migrations: [Migration] = []

    public init() {}

    public mutating func register(
        _ name: String, _ migrate: @escaping (MigrationDatabase) throws -> Void
    ) {
        precondition(!migrations.contains { $0.name == name }, "duplicate migration \(name)")
        migrations.append((name, migrate))
    }

    /// Names of the migrations already applied to `db`, in order.
    public func applied(in db: Database) throws -> [String] {
        try db.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY NOT NULL, applied_at REAL NOT NULL)"
        )
        return try db.rows("SELECT name FROM schema_migrations ORDER BY rowid").compactMap {
            $0[0].text
        }
    }

    /// Applies the pending migrations. Throws `VaultFailure` InternalError when the database
    /// carries a migration this build does not know (it was written by a newer vaultd).
    public func migrate(_ db: Database) throws {
        let done = try applied(in: db)
        let known = Set(migrations.map(\.name))
        if let unknown = done.first(where: { !known.contains($0) }) {
            throw VaultFailure(
                .internalError,
                "the vault was written by a newer vaultd (unknown migration '\(unknown)')")
        }
        for m in migrations where !done.contains(m.name) {
            try db.write { db in
                try m.migrate(MigrationDatabase(db))
                try db.run(
                    "INSERT INTO schema_migrations (name, applied_at) VALUES (?, julianday('now'))",
                    [.text(m.name)])
            }
        }
    }
}

/// The database as a migration sees it, inside the migration's transaction: `execute` runs
/// a script (several statements, as the shipped migrations' texts are), the others one
/// statement each, as `Database`'s do.
public struct MigrationDatabase {
    let db: Database
    init(_ db: Database) { self.db = db }

    /// The connection's logger, for what a migration reports.
    public var logger: Logger { db.logger }

    /// Runs a script of statements (`Database.executeScript`).
    public func execute(_ sql: String) throws { try db.executeScript(sql) }
    @discardableResult
    public func run(_ sql: String, _ arguments: [SQLValue] = []) throws -> Int {
        try db.run(sql, arguments)
    }
    public func rows(_ sql: String, _ arguments: [SQLValue] = []) throws -> [Row] {
        try db.rows(sql, arguments)
    }
    public func row(_ sql: String, _ arguments: [SQLValue] = []) throws -> Row? {
        try db.row(sql, arguments)
    }
}
