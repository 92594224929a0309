import Foundation
import VaultProtocol

/// The vault's database, reached only through closures (GRDB's `DatabasePool`): `write` and
/// `read` hand their body a connection for as long as it runs, and nothing else holds one,
/// so no store can touch the database outside a transaction it was given. The stores keep
/// no connection; each of their operations takes the one it is handed (`in db:`).
///
/// - `write { db in … }`: a durable write in the next group commit (`GroupCommit`): under
///   the engine lock, in the group's transaction (a savepoint of its own beside other
///   writes); it returns once that transaction is committed and its WAL frames are on disk.
/// - `read { db in … }`: a reader connection and its snapshot (`ReaderPool`), without the
///   engine lock.
/// - `exclusive { x in … }`: the engine lock with the writer's connection outside any
///   transaction (`Exclusive`), for a change of the engine's memory that must stay in step
///   with the store (the keys, the failed-unlock count): it reads through `x.db` and writes
///   through `x.write`, a transaction of its own on the same write path
///   (`GroupCommit.writeHoldingDatabase`), without letting the lock go in between.
///
/// Every write goes through `GroupCommit`, and its transaction is the only one in which the
/// writer's connection may write (`Database.writesNeedTransaction`: any other write throws in
/// debug builds). `@unchecked Sendable`: the writer's connection is used under `lock` only
/// (a group commit's leader holds it through its transaction), the readers as
/// `ReaderPool` lends them.
final class DatabasePool: @unchecked Sendable {
    private let writer: Database
    private let readers: ReaderPool
    private let groupCommit = GroupCommit()
    /// The engine lock: the writer's connection, and what `Vault` keeps under it.
    private let lock = NSLock()

    /// Takes the writer's connection, opened and migrated: from here on its writes go
    /// through `write` and `Exclusive.write` only.
    init(writer: Database) {
        self.writer = writer
        writer.writesNeedTransaction = true
        // Every write here is synced by the group commit after its COMMIT; should NORMAL not
        // be set, each transaction sets it for itself, as on any connection at FULL.
        try? writer.deferSyncs()
        readers = ReaderPool(path: writer.path, logger: writer.logger)
    }

    /// The database file's path.
    var path: String { writer.path }

    /// Runs `body` under the engine lock, without the database (state `Vault` keeps beside
    /// it: the keys, the failed-unlock count in memory). `body` must not call `write`,
    /// `exclusive` or `locked`: the lock is not reentrant.
    func locked<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    /// Runs `body` in the next group commit's transaction (a savepoint of its own when the
    /// group has others) under the engine lock, and returns once that transaction is committed
    /// and on disk (the fsync runs outside the engine lock). Throws what `body` throws (its
    /// changes rolled back), the COMMIT's error (StorageFull), StoreReplaced, StoreDamaged,
    /// or InternalError once a sync has failed. Call it not holding the engine lock.
    func write<T>(_ body: @escaping (Database) throws -> T) throws -> T {
        let db = writer
        return try groupCommit.write(db, withDatabase: { run in try locked { try run() } }) {
            try body(db)
        }
    }

    /// Runs `body` with a reader connection (a snapshot of every committed transaction),
    /// waiting for one when every reader is lent out; with the writer's under the engine lock
    /// only when no reader could be opened or the pool is closed (`ReaderPool.read`). `body`
    /// only reads and must not call `read` again. Call it not holding the engine lock.
    func read<T>(_ body: (Database) throws -> T) throws -> T {
        if let result = try readers.read(body) { return result }
        return try locked { try body(writer) }
    }

    /// The writer's connection under the engine lock, outside any transaction, for the
    /// length of an `exclusive` section only.
    struct Exclusive {
        /// For reads: what the last commit left, with no write in between. A write through it
        /// throws in debug builds; writes go through `write`.
        let db: Database
        fileprivate let pool: DatabasePool

        /// Runs `body` in a transaction of its own on the write path, now, keeping the engine
        /// lock (`GroupCommit.writeHoldingDatabase`): returns once it is committed and on
        /// disk; throws having rolled it back, or (a failed sync) committed but not known to
        /// be on disk. `undo` runs, still under the lock, when it did not commit.
        func write<T>(_ body: (Database) throws -> T, undo: () -> Void = {}) throws -> T {
            try pool.groupCommit.writeHoldingDatabase(db, { try body(db) }, undo: undo)
        }

        /// Copies every committed frame into the database file and truncates the WAL
        /// (`Database.truncateWAL`): for key material a change replaced.
        func truncateWAL() throws {
            try db.truncateWAL()
        }
    }

    /// Runs `body` under the engine lock with the writer's connection (`Exclusive`). Call it
    /// not holding the engine lock; `body` must not call `write`, `exclusive` or `locked`.
    func exclusive<T>(_ body: (Exclusive) throws -> T) throws -> T {
        try locked { try body(Exclusive(db: writer, pool: self)) }
    }

    /// Write transactions ended so far on the write path (`GroupCommit.transactionsEnded`).
    var writeTransactions: Int { groupCommit.transactionsEnded }

    /// Closes the readers, then the writer's connection. Later calls fail with InternalError.
    func close() {
        readers.close()
        locked { writer.close() }
    }
}
