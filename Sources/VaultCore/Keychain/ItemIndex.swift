import Foundation
import Synchronization

/// The keychain's lookup index, kept in memory: for each keyed hash that finds items (the
/// `lookup_hash` of a service or server, the `account_hash`, the `primary_key_hash`), the ids
/// of the rows holding it. It stands in for an SQLite index on those columns (issue #8: each
/// added item wrote a page of that index, on a random key, to the WAL: a third of a group
/// commit's frames at 1,000 items and more at 100,000, where the checkpoint then synced those
/// pages scattered over the file; without it, 16 writers' adds went from 16-20k to 23-25k/s
/// at 1,000 items and from 15-17k to 23k/s at 100,000 in paired runs).
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
/// share them list each other's rows, which the check leaves out. About 30 bytes per row and
/// hash: 9 MB at 100,000 items. Thread-safe.
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
    }

    /// A row's keys, by `Column` (nil: the column is NULL).
    private typealias Keys = [UInt64?]

    /// The rows listed under one key: most keys have one.
    private enum Ids {
        case one(Int64)
        case many(Set<Int64>)

        var all: [Int64] {
            switch self {
            case .one(let id): return [id]
            case .many(let ids): return Array(ids)
            }
        }

        var count: Int {
            switch self {
            case .one: return 1
            case .many(let ids): return ids.count
            }
        }

        func adding(_ id: Int64) -> Ids {
            switch self {
            case .one(let old): return old == id ? self : .many([old, id])
            case .many(var ids):
                ids.insert(id)
                return .many(ids)
            }
        }

        /// Without `id`; nil when none is left.
        func removing(_ id: Int64) -> Ids? {
            switch self {
            case .one(let old): return old == id ? nil : self
            case .many(var ids):
                ids.remove(id)
                if ids.count == 1 { return .one(ids.first!) }
                return ids.isEmpty ? nil : .many(ids)
            }
        }
    }

    private struct State {
        var maps: [[UInt64: Ids]] = Array(repeating: [:], count: Column.allCases.count)
        /// Rows deleted or changed since the last `settle`, with the keys they had.
        var suspects: [(id: Int64, keys: Keys)] = []
        /// Rows inserted or changed since the last `settle`, with their new keys: checked
        /// only when something rolled back.
        var added: [(id: Int64, keys: Keys)] = []
    }

    private let state = Mutex(State())

    /// The key of a hash: its first 8 bytes; nil for NULL (or a hash too short to be one).
    static func key(_ hash: [UInt8]?) -> UInt64? {
        guard let hash, hash.count >= 8 else { return nil }
        return hash.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
    }

    private static func keys(_ values: ArraySlice<SQLValue>) -> Keys {
        values.map { key($0.blob) }
    }

    /// Lists every row of `db`'s `items` (at open, after the migrations). Throws what SQLite
    /// throws.
    init(loading db: Database) throws {
        let rows = try db.rows("SELECT id, lookup_hash, account_hash, primary_key_hash FROM items")
        state.withLock { s in
            for r in rows {
                guard let id = r[0].int64 else { continue }
                Self.list(id, Self.keys(r[1...]), in: &s)
            }
        }
    }

    private static func list(_ id: Int64, _ keys: Keys, in s: inout State) {
        for (c, key) in keys.enumerated() {
            guard let key else { continue }
            s.maps[c][key] = s.maps[c][key].map { $0.adding(id) } ?? .one(id)
        }
    }

    private static func unlist(_ id: Int64, _ key: UInt64, column c: Int, in s: inout State) {
        if let ids = s.maps[c][key] { s.maps[c][key] = ids.removing(id) }
    }

    /// Installs on the writer's connection `db` the triggers that keep the index, and the
    /// settling after each of its transactions. Throws what SQLite throws.
    func keep(on db: Database) throws {
        try db.createFunction("vaultd_item_index", arity: 5) { [weak self] args in
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
        let old = "old.id, old.lookup_hash, old.account_hash, old.primary_key_hash"
        let new = "new.id, new.lookup_hash, new.account_hash, new.primary_key_hash"
        try db.execute(
            """
            CREATE TEMP TRIGGER items_index_insert AFTER INSERT ON main.items
              BEGIN SELECT vaultd_item_index(1, \(new)); END;
            CREATE TEMP TRIGGER items_index_delete AFTER DELETE ON main.items
              BEGIN SELECT vaultd_item_index(0, \(old)); END;
            CREATE TEMP TRIGGER items_index_update AFTER UPDATE OF id, lookup_hash, account_hash, primary_key_hash ON main.items
              WHEN old.id IS NOT new.id OR old.lookup_hash IS NOT new.lookup_hash
                OR old.account_hash IS NOT new.account_hash OR old.primary_key_hash IS NOT new.primary_key_hash
              BEGIN SELECT vaultd_item_index(0, \(old)), vaultd_item_index(1, \(new)); END;
            """)
        db.transactionEnded = { [weak self] db, rolledBack in self?.settle(db, rolledBack: rolledBack) }
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
                "SELECT id, lookup_hash, account_hash, primary_key_hash FROM items WHERE id IN (SELECT value FROM json_each(?))",
                [.text(Self.jsonList(ids))])
        else {
            log("keychain: cannot read the rows a transaction changed; the lookup index keeps their old entries")
            return
        }
        var now: [Int64: Keys] = [:]
        for r in rows { if let id = r[0].int64 { now[id] = Self.keys(r[1...]) } }
        state.withLock { s in
            for (id, keys) in check {
                let held = now[id]
                for (c, key) in keys.enumerated() {
                    guard let key, held?[c] != key else { continue }
                    Self.unlist(id, key, column: c, in: &s)
                }
            }
        }
    }

    /// The ids of the rows that may hold one of `hashes` (each a column and its hash): those
    /// listed under the column whose list is shortest, ascending. Empty when a hash lists
    /// nothing (no row holds it).
    func candidates(_ hashes: [(Column, [UInt8])]) -> [Int64] {
        state.withLock { s in
            var best: Ids?
            for (c, hash) in hashes {
                guard let key = Self.key(hash), let ids = s.maps[c.rawValue][key] else { return [] }
                if best == nil || ids.count < best!.count { best = ids }
            }
            return best?.all.sorted() ?? []
        }
    }

    /// `ids` as a JSON array, for `id IN (SELECT value FROM json_each(?))`.
    static func jsonList<S: Sequence>(_ ids: S) -> String where S.Element == Int64 {
        "[" + ids.map(String.init).joined(separator: ",") + "]"
    }
}
