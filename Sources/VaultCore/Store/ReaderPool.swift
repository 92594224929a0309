import Foundation

/// Connections that only read, beside the writer's (GRDB's `DatabasePool`): in WAL mode each
/// reads its own snapshot while the writer writes, so a lookup needs no engine lock, neither
/// behind a group commit's transaction nor behind other lookups (concurrent clients' lookups
/// would otherwise contend for the engine lock, futex calls on every lookup).
///
/// A snapshot holds every transaction committed when the read began, including one whose
/// WAL sync is still in flight (as `GroupCommit` says); a write acknowledged before a read
/// began is always in it. Each connection keeps a page cache of its own (SQLite's default,
/// up to 2 MiB).
final class ReaderPool: @unchecked Sendable {
    private let path: String
    /// Told when a reader cannot be opened.
    private let logger: Logger
    /// At most this many connections are open.
    let capacity: Int
    private let state = NSCondition()
    private var idle: [Database] = []
    /// Connections open or being opened, idle or lent out.
    private var opened = 0
    private var closed = false

    /// `capacity`: the most connections open at once (default: two per CPU, four to eight).
    /// A lookup that finds none free waits for one to come back (a read takes tens of
    /// microseconds) rather than read on the writer's connection under the engine lock, which
    /// a group commit's leader holds while its writers arrive (up to half a millisecond more).
    /// Two per CPU, so that more clients than CPUs seldom find none free; each connection's
    /// page cache costs up to 2 MiB more.
    init(
        path: String, logger: Logger,
        capacity: Int = min(8, max(4, 2 * ProcessInfo.processInfo.activeProcessorCount))
    ) {
        self.path = path
        self.logger = logger
        self.capacity = capacity
    }

    /// Runs `body` with a reader connection (waiting for one when all are lent out) and
    /// returns its result, or nil without running it when none could be opened (logged) or
    /// the pool is closed: the caller then reads under the engine lock instead. Throws what
    /// `body` throws. `body` must not read through the pool again (it would wait for itself).
    func read<T>(_ body: (Database) throws -> T) throws -> T? {
        guard let db = take() else { return nil }
        defer { give(db) }
        return try body(db)
    }

    /// Closes every reader: the idle ones at once, then each lent one as it comes back, and
    /// returns once none is open. Later reads get nil.
    func close() {
        let toClose: [Database] = state.withLock {
            closed = true
            state.broadcast()  // lookups waiting for a reader read under the engine lock
            defer { idle.removeAll() }
            return idle
        }
        for db in toClose { db.close() }
        state.withLock {
            opened -= toClose.count
            while opened > 0 { state.wait() }
        }
    }

    private func take() -> Database? {
        let reuse: Database?? = state.withLock {
            while true {
                if closed { return .some(nil) }
                if let db = idle.popLast() { return .some(db) }
                if opened < capacity { break }
                state.wait()
            }
            opened += 1
            return .none
        }
        if let reuse { return reuse }
        do {
            return try Database(path: path, readOnly: true, logger: logger)
        } catch {
            logger.warning("cannot open a reader connection (\(error)); reading on the writer's")
            state.withLock {
                opened -= 1
                state.broadcast()
            }
            return nil
        }
    }

    private func give(_ db: Database) {
        let keep = state.withLock {
            if closed { return false }
            idle.append(db)
            state.signal()
            return true
        }
        guard !keep else { return }
        db.close()
        state.withLock {
            opened -= 1
            state.broadcast()
        }
    }
}
