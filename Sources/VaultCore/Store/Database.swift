internal import CSQLite
import Foundation
import Synchronization
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// One SQLite connection, its only owner. Not thread-safe: one thread at a time uses it (the
/// writer's under the engine lock, a reader's while `ReaderPool` lends it out; GRDB's rule).
/// Closing is explicit (`close()`), and also done in deinit.
public final class Database {
    private var handle: OpaquePointer?
    private var statementCache: [String: Statement] = [:]
    /// Statements cached by the number their SQL text is known by (`statement(shape:sql:)`).
    private var statementsByShape: [Int: Statement] = [:]
    private var checkpointer: Checkpointer?
    /// The writer's watch on its files (`StoreIdentity`), from `checkpointInBackground` on.
    private(set) var identity: StoreIdentity?
    /// Set once `storeReplaced` has put the store's WAL aside.
    private var replacementHandled = false
    private let walSync: WALSync
    public let path: String
    /// Where this connection's problems are logged.
    public let logger: Logger
    /// Called on this connection after each transaction of `write` or `writeDeferringSync`
    /// ends, committed or not, with no transaction open: `rolledBack` is true when any of it
    /// was undone (a savepoint rolled back, or the whole). `ItemIndex.settle` runs here.
    var transactionEnded: ((_ db: Database, _ rolledBack: Bool) -> Void)?
    /// Set by a rollback of the open transaction or of a savepoint in it (`execute` of
    /// ROLLBACK, or SQLite's own on a full disk: the rollback hook); cleared as it ends.
    private let rollbackSeen = RollbackSeen()
    /// Set by the rollback hook, which SQLite runs on the thread using the connection, and
    /// read by that thread; one thread uses a connection at a time (a `Database` is not
    /// `Sendable`, and neither is this).
    private final class RollbackSeen { var value = false }

    /// SQLite's `unix-excl` VFS: vaultd is the store's only user. It holds a lock on the file
    /// for as long as a connection is open, so no other process (a second vaultd on the same
    /// data directory, or `sqlite3`) can open it meanwhile, and it keeps the WAL index in
    /// this process's memory instead of a `-shm` file shared through file locks. The
    /// connections of this process (the checkpointer's too) share it. The default VFS takes
    /// fcntl locks on every lookup and several on every durable write.
    static var vfs: String { vfsForTests.withLock { $0 } ?? "unix-excl" }

    /// The VFS every connection opened from now on uses instead of `unix-excl`: a power-cut
    /// test's VFS, which wraps it (nil: none).
    static let vfsForTests = Mutex<String?>(nil)

    /// SQLite's busy handler for vaultd's connections. What they wait for is another
    /// connection of vaultd's: a lookup's read or a checkpoint round, most often gone within
    /// microseconds. So it yields the CPU for the first 1000 tries, then sleeps 1 ms a try,
    /// and gives up after about 5 s (SQLite's own handler sleeps 1 ms at once).
    static let busyHandler: @convention(c) (UnsafeMutableRawPointer?, Int32) -> Int32 = {
        _, tries in
        if tries < 1000 {
            sched_yield()
            return 1
        }
        if tries < 1000 + 5000 {
            usleep(1000)
            return 1
        }
        return 0
    }

    /// Process-wide SQLite settings, applied once before the first connection opens: no
    /// memory statistics: their global mutex is taken by every allocation of every
    /// connection, so concurrent lookups contend on it.
    /// SQLite's result code, checked at each open and logged by the first that sees a failure.
    private static let configured: Int32 = vaultd_sqlite3_disable_memstatus()
    /// Whether the failure of `configured` was logged.
    private static let configurationFailureLogged = Atomic<Bool>(false)

    /// Opens (creating) the database at `path` in WAL mode with `synchronous=FULL`, so a
    /// committed transaction is on disk when `write` returns; `secure_delete` overwrites freed
    /// content. `readOnly`: a connection of `ReaderPool`, which creates nothing (the database
    /// must exist) and is `query_only` (any write fails).
    /// Throws `VaultFailure` StorageFull / InternalError (also when another process has the
    /// store open).
    /// `logger`: told of store damage and failures (its copies share one level).
    public init(path: String, readOnly: Bool = false, logger: Logger = Logger()) throws {
        let configured = Database.configured
        if configured != SQLITE_OK,
            !Database.configurationFailureLogged.exchange(true, ordering: .relaxed)
        {
            logger.warning(
                "cannot turn SQLite's memory statistics off (\(String(cString: sqlite3_errstr(configured))))"
            )
        }
        self.path = path
        self.logger = logger
        self.walSync = WALSync(path: path + "-wal")
        var h: OpaquePointer?
        let rc = sqlite3_open_v2(
            path, &h,
            SQLITE_OPEN_READWRITE | (readOnly ? 0 : SQLITE_OPEN_CREATE) | SQLITE_OPEN_NOMUTEX,
            Database.vfs)
        handle = h
        guard rc == SQLITE_OK else {
            let e = Database.error(rc, h, context: "open")
            sqlite3_close_v2(h)
            handle = nil
            throw e
        }
        sqlite3_extended_result_codes(h, 1)
        // The first statement takes the lock: held elsewhere, it is refused at once.
        do {
            try execute("PRAGMA journal_mode=WAL")
        } catch {
            let busy = sqlite3_errcode(h) & 0xFF == SQLITE_BUSY
            close()
            if busy {
                throw VaultFailure(
                    .internalError,
                    "\(path) is in use by another process (another vaultd on the same data directory?)"
                )
            }
            throw error
        }
        sqlite3_busy_handler(h, Database.busyHandler, nil)
        sqlite3_rollback_hook(
            h,
            { context in
                context.map {
                    Unmanaged<RollbackSeen>.fromOpaque($0).takeUnretainedValue().value = true
                }
            }, Unmanaged.passUnretained(rollbackSeen).toOpaque())
        if readOnly {
            try execute("PRAGMA query_only=ON")
        } else {
            try execute("PRAGMA synchronous=FULL")
            try execute("PRAGMA secure_delete=ON")
            try execute("PRAGMA foreign_keys=ON")
        }
    }

    deinit { close() }

    /// Moves WAL checkpoints to a thread and connection of their own (`Checkpointer`), so
    /// commits do not pay for them.
    public func checkpointInBackground() {
        guard let h = handle, checkpointer == nil else { return }
        let identity = StoreIdentity(path: path)
        self.identity = identity
        let c = Checkpointer(path: path, identity: identity)
        c.start()
        checkpointer = c
        sqlite3_wal_hook(h, checkpointerWALHook, Unmanaged.passUnretained(c).toOpaque())
    }

    /// The WAL's runs seen by the background checkpointer; nil without one.
    var walRuns: Checkpointer.Runs? { checkpointer?.endedRuns }

    /// Finalizes cached statements and closes the connection. Idempotent. A store found
    /// replaced is not checkpointed on the way (`storeReplaced`).
    public func close() {
        if identity?.failure != nil { storeReplaced() }
        if let c = checkpointer, let h = handle {
            sqlite3_wal_hook(h, nil, nil)
            c.stop()
        }
        checkpointer = nil
        statementCache.removeAll()
        statementsByShape.removeAll()
        if let h = handle { sqlite3_close_v2(h) }
        handle = nil
        walSync.close()
    }

    /// Runs `body` in one IMMEDIATE transaction, like `write`, but commits it without
    /// waiting for the disk (`synchronous=NORMAL` for this one transaction): it is visible at
    /// once and survives a crash of vaultd, but not a power cut until `syncWAL()` returns.
    /// The caller must call `syncWAL()` before it acknowledges the transaction. Throws what
    /// `body` or COMMIT throws (StorageFull on a full disk), having rolled back.
    func writeDeferringSync(_ body: () throws -> Void) throws {
        try checkIdentity()
        // On a connection at FULL, NORMAL for this transaction only (`deferSyncs` sets it for
        // good on the vault's writer).
        let toggles = !syncsDeferred
        if toggles { try execute("PRAGMA synchronous=NORMAL") }
        defer { if toggles { restoreFullSync() } }
        try execute("BEGIN IMMEDIATE")
        inWritePath = true
        defer {
            inWritePath = false
            ended()
        }
        do {
            try body()
            try execute("COMMIT")
        } catch {
            if isInTransaction { try? execute("ROLLBACK") }
            throw error
        }
    }

    /// Set by `deferSyncs`: the connection commits at synchronous=NORMAL for good (no fsync
    /// in COMMIT), and each write transaction is made durable by `syncWAL()` after its COMMIT
    /// (the group commit's, outside the engine lock; `write`'s at once). In WAL mode that is
    /// what FULL does: one sync of the WAL per commit; checkpoints sync at either level.
    private(set) var syncsDeferred = false

    /// For the vault's writer connection (`DatabasePool`), whose writes all go through the
    /// group commit: synchronous=NORMAL, once. Toggled around each transaction instead (as
    /// `writeDeferringSync` does on a connection at FULL), both PRAGMAs are prepared again by
    /// SQLite every time (a PRAGMA runs once per prepare).
    func deferSyncs() throws {
        try execute("PRAGMA synchronous=NORMAL")
        syncsDeferred = true
    }

    /// After a transaction `writeDeferringSync` ran at NORMAL on a connection at FULL: FULL
    /// again (SQLite refuses to change the level inside a transaction). Every other write of
    /// such a connection relies on FULL; should it not come back, the connection is closed
    /// rather than left writing without syncs.
    private func restoreFullSync() {
        do {
            try execute("PRAGMA synchronous=FULL")
        } catch {
            if isInTransaction { try? execute("ROLLBACK") }
            if (try? execute("PRAGMA synchronous=FULL")) == nil {
                logger.error("cannot restore synchronous=FULL (\(error)); closing the store")
                close()
            }
        }
    }

    /// Tells `transactionEnded` that the transaction begun last has ended.
    private func ended() {
        let rolledBack = rollbackSeen.value
        rollbackSeen.value = false
        transactionEnded?(self, rolledBack)
    }

    /// Makes every transaction committed so far durable: fdatasync of the WAL file, which
    /// holds them (the store runs in WAL mode). Thread-safe, and meant to be called outside the
    /// engine lock, so readers and the next group commit go on meanwhile. Throws StorageFull
    /// when the disk refuses the data.
    func syncWAL() throws {
        try walSync.sync()
    }

    /// Copies every committed frame into the database file and truncates the WAL to nothing
    /// (a TRUNCATE checkpoint), so no earlier version of a page stays in it: for changes that
    /// must not outlive their transaction on disk (key material a new passphrase replaced;
    /// `secure_delete` zeroes it in the database file). Call it on the writer's connection
    /// outside a transaction; it waits for readers as the busy handler does. Throws
    /// InternalError (busy: a reader outlasted the wait, or an I/O error).
    func truncateWAL() throws {
        guard let h = handle else { throw VaultFailure(.internalError, "the store is closed") }
        // Not beside a background round: it holds SQLite's checkpoint lock, and this
        // checkpoint would fail at once, leaving the frames it is meant to drop.
        let truncate = {
            let checkpoint = {
                try self.check(
                    sqlite3_wal_checkpoint_v2(h, nil, SQLITE_CHECKPOINT_TRUNCATE, nil, nil),
                    "truncating the write-ahead log")
            }
            guard let identity = self.identity else { return try checkpoint() }
            if try identity.checkpoint(checkpoint) == nil { try self.checkIdentity() }
        }
        if let c = checkpointer { try c.excluding(truncate) } else { try truncate() }
    }

    /// Before a write: throws StoreReplaced once `identity` has seen the files changed
    /// underneath, having put the WAL aside (`storeReplaced`).
    private func checkIdentity() throws {
        if damageSeen {
            throw VaultFailure(
                .storeDamaged,
                "the store is damaged (SQLite reported it malformed earlier): vaultd writes nothing more to it; stopped and started again it refuses it. Keep a copy of the data directory, then restore a backup (`vaultctl restore`, docs/backup.md)"
            )
        }
        guard let identity else { return }
        do {
            try identity.checkWrite()
        } catch {
            storeReplaced()
            throw error
        }
    }

    /// What the writer's connection does, once, when its files were changed underneath:
    /// logs what was seen; when the database file at the path is another one (renamed over
    /// it) while this connection still has the one it opened, copies that (every
    /// acknowledged write in it) to `vault.sqlite.displaced-TIME` beside it (VACUUM INTO);
    /// moves the WAL, whose frames belong to the database vaultd opened, aside to
    /// `vault.sqlite-wal.displaced-TIME`, so the next start does not lay them over the file
    /// now at the path (which would make it malformed); and closes without a checkpoint.
    /// Reads may still be served; no write is.
    func storeReplaced() {
        guard !replacementHandled, let identity, let what = identity.failure, let h = handle else {
            return
        }
        replacementHandled = true
        _ = vaultd_sqlite3_no_checkpoint_on_close(h)
        let stamp = String(Int(Date().timeIntervalSince1970))
        var saved = ""
        if StoreIdentity.Fingerprint(path).map({ $0.inode != identity.openedInode }) ?? true {
            let copy = path + ".displaced-" + stamp
            do {
                try execute("VACUUM INTO '\(copy.replacingOccurrences(of: "'", with: "''"))'")
                saved =
                    "; the store vaultd had open, with every write it acknowledged, was copied to \(copy)"
            } catch {
                saved = "; the store vaultd had open could not be copied aside (\(error))"
            }
        }
        let walAside = path + "-wal.displaced-" + stamp
        let moved = (try? SystemCall.rename(path + "-wal", walAside)) != nil
        logger.error(
            "STORE REPLACED: \(what). vaultd serves no more writes and will not checkpoint into that file\(saved)\(moved ? "; its write-ahead log was moved to \(walAside)" : ""). Stop vaultd; to keep what vaultd had, put the displaced copy back as \(path); to keep the file now there, just start vaultd again"
        )
    }

    /// SQLite's `PRAGMA quick_check` of the whole file (at most `lines` lines): ["ok"] when
    /// sound. Throws StoreDamaged when SQLite cannot read the file at all.
    func quickCheck(lines: Int = 10) throws -> [String] {
        try rows("PRAGMA quick_check(\(lines))").compactMap { $0[0].text }
    }

    /// Makes the next COMMIT of this connection fail (SQLite rolls the transaction back), as a
    /// disk that fills at that very commit would: for tests of what a failed commit leaves.
    func failNextCommit() {
        guard let h = handle else { return }
        commitVeto.armed = true
        sqlite3_commit_hook(
            h,
            { context in
                guard
                    let veto = context.map({
                        Unmanaged<CommitVeto>.fromOpaque($0).takeUnretainedValue()
                    }), veto.armed
                else { return 0 }
                veto.armed = false
                return 1
            }, Unmanaged.passUnretained(commitVeto).toOpaque())
    }

    /// `failNextCommit`'s flag (the commit hook's context, alive as long as the connection).
    /// As `RollbackSeen`, touched only by the thread using the connection.
    private final class CommitVeto { var armed = false }
    private let commitVeto = CommitVeto()

    static func error(_ rc: Int32, _ h: OpaquePointer?, context: String) -> VaultFailure {
        let primary = rc & 0xFF
        let detail =
            h.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(rc))
        switch primary {
        case SQLITE_FULL:
            return VaultFailure(
                .storageFull, "the disk holding the vault is full; nothing was written")
        case SQLITE_CORRUPT, SQLITE_NOTADB:
            return VaultFailure(
                .storeDamaged,
                "the store is damaged: SQLite reports it malformed in \(context) (\(detail)). vaultd writes nothing more to it; stopped and started again it refuses it. Keep a copy of the data directory, then restore a backup (`vaultctl restore`, docs/backup.md)"
            )
        case SQLITE_IOERR where rc == SQLITE_IOERR | (3 << 8) || rc == SQLITE_IOERR | (4 << 8):
            // SQLITE_IOERR_WRITE / _FSYNC: a WAL write or sync failed, as on a full disk.
            return VaultFailure(
                .storageFull, "cannot write to the vault's disk (\(detail)); nothing was written")
        default:
            return VaultFailure(
                .internalError, "storage error in \(context): \(detail) (SQLite \(rc))")
        }
    }

    func check(_ rc: Int32, _ context: String) throws {
        guard rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW else {
            let e = Database.error(rc, handle, context: context)
            if e.code == .storeDamaged && !damageSeen {
                damageSeen = true
                logger.error("STORE DAMAGED: \(path): \(e.message)")
            }
            throw e
        }
    }

    /// Set once SQLite reported this connection's file malformed (SQLITE_CORRUPT,
    /// SQLITE_NOTADB): no write is begun on it afterwards (a write into a damaged b-tree
    /// can spread the damage).
    private(set) var damageSeen = false

    /// Runs one SQL statement without results (BEGIN, COMMIT, SAVEPOINT, a PRAGMA, DDL …),
    /// prepared once and cached: a group commit runs several per batch. Text holding more
    /// than one statement is refused (InternalError), never half run: a script of several
    /// goes through `executeScript`, which only migrations use.
    public func execute(_ sql: String) throws {
        // ROLLBACK TO a savepoint calls no rollback hook.
        if sql.hasPrefix("ROLLBACK") { rollbackSeen.value = true }
        let s = try statement(sql)
        defer { s.reset() }
        while try s.step() {}
    }

    /// Runs `sql`, a script of statements separated by semicolons, in order
    /// (sqlite3_exec): for schema migrations (`Migrator`), whose texts are scripts. Stops at
    /// the first failing statement and throws its error; the caller's transaction rolls the
    /// rest back.
    func executeScript(_ sql: String) throws {
        guard let h = handle else { throw VaultFailure(.internalError, "database is closed") }
        if sql.hasPrefix("ROLLBACK") { rollbackSeen.value = true }
        try check(sqlite3_exec(h, sql, nil, nil, nil), "exec")
    }

    /// A prepared statement, cached per SQL text, reset and with bindings cleared.
    public func statement(_ sql: String) throws -> Statement {
        if let s = statementCache[sql] {
            s.reset()
            return s
        }
        guard let h = handle else { throw VaultFailure(.internalError, "database is closed") }
        var st: OpaquePointer?
        var rest = false
        try sql.withCString { text in
            var tail: UnsafePointer<CChar>?
            try check(
                sqlite3_prepare_v3(h, text, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &st, &tail),
                "prepare")
            // What SQLite did not read (sqlite3_prepare's tail): only blanks and semicolons
            // may follow the statement.
            var p = tail
            while let c = p?.pointee, c != 0 {
                if !(c == 0x20 || c == 0x0A || c == 0x09 || c == 0x0D || c == 0x3B) {
                    rest = true
                    break
                }
                p = p?.advanced(by: 1)
            }
        }
        guard let st else {
            throw VaultFailure(
                .internalError, "storage error in prepare: no statement in the SQL text")
        }
        guard !rest else {
            sqlite3_finalize(st)
            throw VaultFailure(
                .internalError,
                "storage error in prepare: the SQL text holds more than one statement")
        }
        let s = Statement(handle: st, database: self)
        statementCache[sql] = s
        return s
    }

    /// A prepared statement cached under `shape`, reset and with bindings cleared: for SQL
    /// assembled from parts, `shape` is a number that stands for one text for the life of the
    /// connection (which parts it has), and `sql` makes that text, called only the first
    /// time, so a lookup neither assembles its text nor hashes it to find its statement.
    /// Only `KeychainStore.candidateRows` numbers its texts.
    public func statement(shape: Int, sql: () -> String) throws -> Statement {
        if let s = statementsByShape[shape] {
            s.reset()
            return s
        }
        let s = try statement(sql())
        statementsByShape[shape] = s
        return s
    }

    /// All rows of the query cached under `shape` (`statement(shape:sql:)`).
    public func rows(shape: Int, sql: () -> String, _ arguments: [SQLValue]) throws -> [Row] {
        try rows(of: try statement(shape: shape, sql: sql), arguments)
    }

    /// Set on the vault's writer connection once its migrations ran (`DatabasePool`): every
    /// statement that writes runs inside a transaction of the one write path, `GroupCommit`'s
    /// (`writeDeferringSync`, which its groups and `writeHoldingDatabase` both use), never
    /// in SQLite's autocommit nor in a transaction begun elsewhere (`write`,
    /// `readTransaction`), so each mutation has its durability (the fsync before the reply),
    /// its place in the commit order and its `ItemIndex` settling. Checked in debug builds
    /// (tests), where such a write, or `write` itself, throws.
    var writesNeedTransaction = false

    /// True while `writeDeferringSync` runs its body: the write path's transaction is open.
    private var inWritePath = false

    /// Runs `sql` with `arguments`; returns the number of rows changed.
    @discardableResult
    public func run(_ sql: String, _ arguments: [SQLValue] = []) throws -> Int {
        let s = try statement(sql)
        #if DEBUG
        if writesNeedTransaction && !s.isReadOnly && !(inWritePath && isInTransaction) {
            throw VaultFailure(
                .internalError,
                "a write outside the write path's transaction on the vault's writer connection: \(sql.prefix(80))"
            )
        }
        #endif
        try s.bind(arguments)
        while try s.step() {}
        return Int(sqlite3_changes(handle))
    }

    /// All rows of a query.
    public func rows(_ sql: String, _ arguments: [SQLValue] = []) throws -> [Row] {
        try rows(of: try statement(sql), arguments)
    }

    private func rows(of s: Statement, _ arguments: [SQLValue]) throws -> [Row] {
        try s.bind(arguments)
        var out: [Row] = []
        while try s.step() { out.append(s.row()) }
        return out
    }

    /// The first row of a query, or nil.
    public func row(_ sql: String, _ arguments: [SQLValue] = []) throws -> Row? {
        let s = try statement(sql)
        try s.bind(arguments)
        // Reset at once: a statement left on a row keeps its read transaction open, and with
        // it the WAL (no checkpoint can pass that snapshot, so the WAL only ever grew).
        defer { s.reset() }
        return try s.step() ? s.row() : nil
    }

    /// Runs `body`, which only reads, in one read transaction (BEGIN DEFERRED): every
    /// statement in it reads the same snapshot.
    func readTransaction<T>(_ body: (Database) throws -> T) throws -> T {
        try transaction("BEGIN DEFERRED", body)
    }

    /// Runs `body` in one IMMEDIATE transaction: committed (durably) when it returns,
    /// rolled back when it throws.
    /// Not on the vault's writer connection, whose writes go through `GroupCommit`
    /// (`DatabasePool.write`): there it throws in debug builds.
    public func write<T>(_ body: (Database) throws -> T) throws -> T {
        #if DEBUG
        if writesNeedTransaction {
            throw VaultFailure(
                .internalError,
                "a write transaction begun outside the write path on the vault's writer connection")
        }
        #endif
        try checkIdentity()
        let result = try transaction("BEGIN IMMEDIATE", body, then: ended)
        // Committed at NORMAL: durable once the WAL is synced.
        if syncsDeferred { try syncWAL() }
        return result
    }

    /// Runs `body` after `begin`: committed when it returns, rolled back when it throws;
    /// then `then`, once the transaction began.
    private func transaction<T>(
        _ begin: String, _ body: (Database) throws -> T, then: (() -> Void)? = nil
    ) throws -> T {
        try execute(begin)
        defer { then?() }
        do {
            let result = try body(self)
            try execute("COMMIT")
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    /// Calls `body` with the SQL text of each statement this connection starts from now on
    /// (SQLite's `SQLITE_TRACE_STMT`: the text as prepared, before binding; a trigger's as a
    /// `-- TRIGGER name` comment), until `stopTracing`. For the test that holds each shipped
    /// migration to the statements it ran when it shipped.
    func traceStatements(_ body: @escaping (String) -> Void) {
        let tracer = StatementTracer(body)
        self.tracer = tracer
        sqlite3_trace_v2(
            handle, UInt32(SQLITE_TRACE_STMT),
            { _, context, _, text in
                if let context, let text {
                    Unmanaged<StatementTracer>.fromOpaque(context).takeUnretainedValue().body(
                        String(cString: text.assumingMemoryBound(to: CChar.self)))
                }
                return 0
            }, Unmanaged.passUnretained(tracer).toOpaque())
    }

    func stopTracing() {
        sqlite3_trace_v2(handle, 0, nil, nil)
        tracer = nil
    }

    private var tracer: StatementTracer?
    private final class StatementTracer {
        let body: (String) -> Void
        init(_ body: @escaping (String) -> Void) { self.body = body }
    }

    /// Registers an SQL function `name` of `arity` arguments on this connection, for its
    /// temporary triggers (sqlite3_create_function_v2): `body` gets the arguments and its
    /// result is NULL. It runs on the thread stepping the statement; it must not use this
    /// connection.
    func createFunction(_ name: String, arity: Int32, _ body: @escaping ([SQLValue]) -> Void) throws
    {
        guard let h = handle else { throw VaultFailure(.internalError, "database is closed") }
        let box = Unmanaged.passRetained(FunctionBody(body)).toOpaque()
        let rc = sqlite3_create_function_v2(
            h, name, arity, SQLITE_UTF8, box,
            { context, count, arguments in
                let body = Unmanaged<FunctionBody>.fromOpaque(sqlite3_user_data(context)!)
                    .takeUnretainedValue()
                body.call((0..<Int(count)).map { SQLValue(arguments![$0]) })
                sqlite3_result_null(context)
            }, nil, nil,
            { box in box.map { Unmanaged<FunctionBody>.fromOpaque($0).release() } })
        try check(rc, "registering \(name)")
    }

    private final class FunctionBody {
        let call: ([SQLValue]) -> Void
        init(_ call: @escaping ([SQLValue]) -> Void) { self.call = call }
    }

    /// True inside a transaction (false once SQLite has rolled one back on its own, as it
    /// does on SQLITE_FULL or IOERR in the middle of a statement).
    var isInTransaction: Bool { handle.map { sqlite3_get_autocommit($0) == 0 } ?? false }
}
