import Foundation
import Synchronization

/// The keychain's lookup index, kept in memory: for each keyed hash that finds items (the
/// `lookup_hash` of a service or server, the `account_hash`, and the `primary_key_hash` that
/// DuplicateItem is checked by), the ids of the rows holding it. It stands in for an SQLite
/// index on those columns: with one, each added item writes a page of that index, on a
/// random key, to the WAL (a large share of a group commit's frames, growing with the item
/// count), and the checkpoint then syncs those pages scattered over the file. The primary
/// key has a listing of its own: through the service (server) and account alone, a write
/// among many internet passwords of one server and account (one per path, port or
/// protocol) would read them all.
///
/// It is a superset of the store: every row a connection can see is listed under each of its
/// hashes, and an entry may also list a row that no longer holds that hash (deleted, changed,
/// or rolled back). Every use reads the rows it names and checks their stored columns, so
/// such an entry costs a row read, never a wrong answer. The writer's connection keeps it so
/// through temporary triggers on `items`: a row inserted or given new hashes is listed at
/// once, before its transaction commits (so no reader's snapshot holds a row it lacks); a
/// deleted or changed row's old entries go only once its transaction has ended and the row
/// is seen no longer to hold them (`settle`), so a rolled-back delete keeps its entries.
///
/// Keys are a hash's first 8 bytes (the hashes are keyed BLAKE2b: uniform); two hashes that
/// share them list each other's rows, which the check leaves out. About 60 bytes per row
/// (three hash tables of 16-byte entries, at most three-quarters full). Thread-safe.
final class ItemIndex: Sendable {
    /// The hashed columns of `items` it indexes.
    enum Column: Int, CaseIterable {
        case lookup, account, primaryKey

        var name: String {
            switch self {
            case .lookup: return "lookup_hash"
            case .account: return "account_hash"
            case .primaryKey: return "primary_key_hash"
            }
        }

        /// `prefix` (a row, `old` or `new`) followed by each column, for SQL.
        static func list(_ prefix: String) -> String {
            allCases.map { prefix + $0.name }.joined(separator: ", ")
        }
    }

    /// A row's keys, by `Column` (nil: the column is NULL).
    private typealias Keys = [UInt64?]

    /// The rows listed under each key of one column. Most keys list one row: it is kept in
    /// `one`, 16 bytes an entry; a key listing more has `several` there and its rows in
    /// `more`.
    private struct Listing {
        var one: [UInt64: Int64] = [:]
        var more: [UInt64: Set<Int64>] = [:]
        /// Not a row id (SQLite gives out positive ones).
        static let several = Int64.min

        init(capacity: Int = 0) {
            one.reserveCapacity(capacity)
        }

        func count(_ key: UInt64) -> Int {
            guard let id = one[key] else { return 0 }
            return id == Self.several ? more[key]!.count : 1
        }

        func ids(_ key: UInt64) -> [Int64] {
            guard let id = one[key] else { return [] }
            return id == Self.several ? Array(more[key]!) : [id]
        }

        /// Whether `key` lists row `id`.
        func lists(_ id: Int64, _ key: UInt64) -> Bool {
            guard let listed = one[key] else { return false }
            return listed == Self.several ? more[key]!.contains(id) : listed == id
        }

        mutating func add(_ id: Int64, _ key: UInt64) {
            switch one[key] {
            case nil: one[key] = id
            case Self.several?: more[key]!.insert(id)
            case let other? where other != id:
                one[key] = Self.several
                more[key] = [other, id]
            default: break
            }
        }

        mutating func remove(_ id: Int64, _ key: UInt64) {
            switch one[key] {
            case id?: one[key] = nil
            case Self.several?:
                more[key]!.remove(id)
                if more[key]!.count == 1 {
                    one[key] = more[key]!.first!
                    more[key] = nil
                }
            default: break
            }
        }
    }

    private struct State {
        var listings: [Listing]
        /// Rows deleted or changed since the last `settle`, with the keys they had.
        var suspects: [(id: Int64, keys: Keys)] = []
        /// Rows inserted or changed since the last `settle`, with their new keys: checked
        /// only when something rolled back.
        var added: [(id: Int64, keys: Keys)] = []
    }

    private let state: Mutex<State>

    /// The key of a hash: its first 8 bytes; nil for NULL (or a hash too short to be one).
    static func key(_ hash: UnsafeRawBufferPointer?) -> UInt64? {
        guard let hash, hash.count >= 8 else { return nil }
        return hash.loadUnaligned(as: UInt64.self)
    }

    static func key(_ hash: [UInt8]?) -> UInt64? {
        hash?.withUnsafeBytes { key($0) }
    }

    private static func keys(_ values: ArraySlice<SQLValue>) -> Keys {
        values.map { key($0.blob) }
    }

    /// Lists every row of `db`'s `items` (at open, after the migrations), reading them one
    /// at a time. Throws what SQLite throws.
    init(loading db: Database) throws {
        let count = Int(try db.row("SELECT COUNT(*) FROM items")?[0].int64 ?? 0)
        var listings = Column.allCases.map { _ in Listing(capacity: count) }
        let s = try db.statement("SELECT id, \(Column.list("")) FROM items")
        defer { s.reset() }
        while try s.step() {
            let id = s.int64(0)
            for c in Column.allCases {
                if let key = s.withBlob(Int32(c.rawValue + 1), Self.key) {
                    listings[c.rawValue].add(id, key)
                }
            }
        }
        state = Mutex(State(listings: listings))
    }

    private static func list(_ id: Int64, _ keys: Keys, in s: inout State) {
        for (c, key) in keys.enumerated() {
            if let key { s.listings[c].add(id, key) }
        }
    }

    /// Installs on the writer's connection `db` the triggers that keep the index, and the
    /// settling after each of its transactions. Throws what SQLite throws.
    func keep(on db: Database) throws {
        try db.createFunction("vaultd_item_index", arity: Int32(2 + Column.allCases.count)) {
            [weak self] args in
            guard let self, let id = args[1].int64 else { return }
            let keys = Self.keys(args[2...])
            self.state.withLock { s in
                if args[0].int64 == 1 {
                    Self.list(id, keys, in: &s)
                    s.added.append((id, keys))
                } else {
                    s.suspects.append((id, keys))
                }
            }
        }
        let old = "old.id, " + Column.list("old.")
        let new = "new.id, " + Column.list("new.")
        let changed = (["id"] + Column.allCases.map(\.name)).map { "old.\($0) IS NOT new.\($0)" }
            .joined(separator: " OR ")
        try db.execute(
            "CREATE TEMP TRIGGER items_index_insert AFTER INSERT ON main.items BEGIN SELECT vaultd_item_index(1, \(new)); END"
        )
        try db.execute(
            "CREATE TEMP TRIGGER items_index_delete AFTER DELETE ON main.items BEGIN SELECT vaultd_item_index(0, \(old)); END"
        )
        try db.execute(
            """
            CREATE TEMP TRIGGER items_index_update AFTER UPDATE OF id, \(Column.list("")) ON main.items
              WHEN \(changed)
              BEGIN SELECT vaultd_item_index(0, \(old)), vaultd_item_index(1, \(new)); END
            """)
        db.transactionEnded = { [weak self] db, rolledBack in
            self?.settle(db, rolledBack: rolledBack)
        }
    }

    /// After a transaction on the writer's connection `db`: drops the entries of the rows it
    /// deleted or changed that no longer hold them, and, when any of it rolled back, those it
    /// added that did not stay. A row that cannot be read now keeps its entries (a superset
    /// is never wrong).
    func settle(_ db: Database, rolledBack: Bool) {
        let (suspects, added) = state.withLock { s in
            defer {
                s.suspects.removeAll()
                s.added.removeAll()
            }
            return (s.suspects, rolledBack ? s.added : [])
        }
        let check = suspects + added
        if check.isEmpty { return }
        // The rows as they are now, in one query.
        let ids = Set(check.map(\.id))
        guard
            let rows = try? db.rows(
                "SELECT id, \(Column.list("")) FROM items WHERE id IN (SELECT value FROM json_each(?))",
                [.text(Self.jsonList(ids))])
        else {
            db.logger.warning(
                "keychain: cannot read the rows a transaction changed; the lookup index keeps their old entries"
            )
            return
        }
        var now: [Int64: Keys] = [:]
        for r in rows { if let id = r[0].int64 { now[id] = Self.keys(r[1...]) } }
        state.withLock { s in
            for (id, keys) in check {
                let held = now[id]
                for (c, key) in keys.enumerated() {
                    guard let key, held?[c] != key else { continue }
                    s.listings[c].remove(id, key)
                }
            }
        }
    }

    /// The ids of the rows that may hold all of `hashes` (each a column and its hash): those
    /// listed under every one of them, ascending; found through the shortest list, and kept
    /// when each other hash lists them too (in memory: a service and an account of thousands
    /// of rows each, and one row of both, read thousands of rows by id). Empty when a hash
    /// lists nothing (no row holds it). The caller checks the rows' columns.
    func candidates(_ hashes: [(Column, [UInt8])]) -> [Int64] {
        state.withLock { s in
            var lists: [(column: Int, key: UInt64, count: Int)] = []
            for (c, hash) in hashes {
                guard let key = Self.key(hash) else { return [] }
                let count = s.listings[c.rawValue].count(key)
                if count == 0 { return [] }
                lists.append((c.rawValue, key, count))
            }
            guard let shortest = lists.indices.min(by: { lists[$0].count < lists[$1].count }) else {
                return []
            }
            let best = lists.remove(at: shortest)
            return s.listings[best.column].ids(best.key)
                .filter { id in lists.allSatisfy { s.listings[$0.column].lists(id, $0.key) } }
                .sorted()
        }
    }

    /// `ids` as a JSON array, for `id IN (SELECT value FROM json_each(?))`.
    static func jsonList<S: Sequence>(_ ids: S) -> String where S.Element == Int64 {
        "[" + ids.map(String.init).joined(separator: ",") + "]"
    }
}
