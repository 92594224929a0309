import Foundation

/// Connections that only read, beside the writer's (GRDB's `DatabasePool`): in WAL mode each
/// reads its own snapshot while the writer writes, so a lookup needs no engine lock, neither
/// behind a group commit's transaction nor behind other lookups (issue #8's profile: with four
/// clients, lookups contended for the engine lock, two futex calls per lookup).
///
/// A snapshot holds every transaction committed when the read began, including one whose
/// WAL sync is still in flight (as `GroupCommit` says); a write acknowledged before a read
/// began is always in it.
final class ReaderPool: @unchecked Sendable {
    private let path: String
    /// At most this many connections are open (each has its own page cache).
    let capacity: Int
    private let lock = NSLock()
    private var idle: [Database] = []
    private var opened = 0
    private var closed = false

    /// `capacity`: the most connections open at once (default: one per CPU, at least two).
    init(path: String, capacity: Int = max(2, ProcessInfo.processInfo.activeProcessorCount)) {
        self.path = path
        self.capacity = capacity
    }

    /// Runs `body` with a reader connection and returns its result, or nil without running it
    /// when every reader is busy (or the pool is closed): the caller then reads under the
    /// engine lock instead. Throws what `body` throws, or what opening a connection throws.
    func read<T>(_ body: (Database) throws -> T) throws -> T? {
        guard let db = try take() else { return nil }
        defer { give(db) }
        return try body(db)
    }

    /// Closes the idle readers now and each busy one when it comes back.
    func close() {
        let toClose: [Database] = lock.withLock {
            closed = true
            defer { idle.removeAll() }
            return idle
        }
        for db in toClose { db.close() }
    }

    private func take() throws -> Database? {
        let reuse: Database?? = lock.withLock {
            if closed { return .some(nil) }
            if let db = idle.popLast() { return .some(db) }
            if opened >= capacity { return .some(nil) }
            opened += 1
            return .none
        }
        if let reuse { return reuse }
        do {
            return try Database(path: path, readOnly: true)
        } catch {
            lock.withLock { opened -= 1 }
            throw error
        }
    }

    private func give(_ db: Database) {
        let keep = lock.withLock {
            if closed { return false }
            idle.append(db)
            return true
        }
        if !keep { db.close() }
    }
}
