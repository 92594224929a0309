import Foundation
import VaultProtocol

/// Connections that only read, beside the writer's (GRDB's `DatabasePool`): in WAL mode each
/// reads its own snapshot while the writer writes, so a lookup needs no engine lock, neither
/// behind a group commit's transaction nor behind other lookups (concurrent clients' lookups
/// would otherwise contend for the engine lock, futex calls on every lookup).
///
/// A snapshot holds every transaction committed when the read began, including one whose
/// WAL sync is still in flight (as `GroupCommit` says); a write acknowledged before a read
/// began is always in it. Each connection keeps a page cache of its own (SQLite's default,
/// up to 2 MiB).
///
/// Sendable: the pool's state is in `state`, a `Monitor` a reader waits on for a free
/// connection; a `Database` (not `Sendable`) is used by one thread at a time, between take
/// and give back.
final class ReaderPool: Sendable {
    private let path: String
    /// Told when a reader cannot be opened.
    private let logger: Logger
    /// At most this many connections are open.
    let capacity: Int
    private struct State {
        var idle: [Database] = []
        /// Connections open or being opened, idle or lent out.
        var opened = 0
        var closed = false
    }
    private let state = Monitor(State())

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
        let toClose: [Database] = state.withLock { state in
            state.closed = true
            defer { state.idle.removeAll() }
            return state.idle
        }
        state.broadcast()  // lookups waiting for a reader read under the engine lock
        for db in toClose { db.close() }
        state.withLock { $0.opened -= toClose.count }
        state.withLock(when: { $0.opened == 0 }) { _ in }
    }

    private func take() -> Database? {
        let reuse: Database?? = state.withLock(when: {
            $0.closed || !$0.idle.isEmpty || $0.opened < capacity
        }) { state in
            if state.closed { return .some(nil) }
            if let db = state.idle.popLast() { return .some(db) }
            state.opened += 1
            return .none
        }
        if let reuse { return reuse }
        do {
            return try Database(path: path, readOnly: true, logger: logger)
        } catch {
            logger.warning("cannot open a reader connection (\(error)); reading on the writer's")
            closedOne()
            return nil
        }
    }

    private func give(_ db: Database) {
        let keep = state.withLock { state in
            if state.closed { return false }
            state.idle.append(db)
            return true
        }
        guard !keep else {
            state.signal()
            return
        }
        db.close()
        closedOne()
    }

    /// One connection fewer open: a reader waiting for a free slot may open one, and `close`
    /// may be waiting for the last.
    private func closedOne() {
        state.withLock { $0.opened -= 1 }
        state.broadcast()
    }
}
