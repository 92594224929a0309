import Foundation
import VaultProtocol

/// Group commit: concurrent write transactions share one COMMIT, so one fsync acknowledges
/// many writes. The first writer to arrive becomes the leader: it takes every pending write,
/// runs each in its own SAVEPOINT inside one transaction (a failing write rolls back only
/// itself), commits once, and wakes the others. Nobody's reply is sent before the commit
/// that covers its write is on disk.
///
/// The COMMIT itself does not wait for the disk: the leader hands the lead on, then syncs
/// the WAL outside the engine lock, so the next group's transaction and every reader run
/// during the fsync (issue #8's profile: the fsync, under the engine lock, left a core idle).
/// A reader may therefore see a write whose fsync is still in flight, as it may under
/// SQLite's own `synchronous=NORMAL`; its writer is acknowledged only after the sync.
final class GroupCommit: @unchecked Sendable {
    private final class Pending {
        /// Runs the write (in a savepoint of its own when `true`); returns its error, if it
        /// failed.
        let run: (Bool) -> Error?
        let fail: (Error) -> Void
        /// Set (under the lock) once the commit covering this write has returned.
        var done = false
        /// Signalled once: when done, or when this writer is to lead the next group.
        let wake = DispatchSemaphore(value: 0)
        init(run: @escaping (Bool) -> Error?, fail: @escaping (Error) -> Void) {
            self.run = run
            self.fail = fail
        }
    }

    // Each waiting writer sleeps on its own semaphore and is woken exactly once (issue #8's
    // profile: one condition broadcast per commit woke all 16 writers of a benchmark, each
    // to find it was not its turn, and a fifth of vaultd's time went to futexes).
    private let lock = NSLock()
    private var queue: [Pending] = []
    private var leading = false
    /// Writers active around the last commit: its batch plus those that queued during it.
    private var activeWriters = 0
    /// Signalled when the queue reaches `activeWriters` while a leader gathers.
    private var gathering: DispatchSemaphore?
    /// How long a leader may wait for the writers it expects (seconds).
    static let gatherDelay = 0.0005

    /// Runs `body` in a savepoint of the next group transaction and returns once that
    /// transaction is committed. `withDatabase` runs its closure with exclusive use of the
    /// database (the engine lock). Throws what `body` throws, or the COMMIT's error.
    func write<T>(_ db: Database, withDatabase: (() throws -> Void) throws -> Void, _ body: @escaping () throws -> T) throws -> T {
        var result: Result<T, Error>?
        let me = Pending(
            run: { savepoint in
                // A lone write needs no savepoint: its failure rolls back the transaction.
                guard savepoint else {
                    do {
                        result = .success(try body())
                        return nil
                    } catch {
                        result = .failure(error)
                        return error
                    }
                }
                do {
                    try db.execute("SAVEPOINT w")
                    do {
                        result = .success(try body())
                        try db.execute("RELEASE w")
                    } catch {
                        try? db.execute("ROLLBACK TO w")
                        try? db.execute("RELEASE w")
                        result = .failure(error)
                        return error
                    }
                } catch {
                    result = .failure(error)
                    return error
                }
                return nil
            },
            fail: { result = .failure($0) })
        lock.lock()
        queue.append(me)
        if let g = gathering, queue.count >= activeWriters {
            gathering = nil
            g.signal()
        }
        if leading {
            lock.unlock()
            // Woken when a leader's commit covered this write, or to lead the next group.
            me.wake.wait()
            lock.lock()
            let promoted = !me.done
            lock.unlock()
            if promoted { lead(db, withDatabase: withDatabase) }
        } else {
            leading = true
            lock.unlock()
            lead(db, withDatabase: withDatabase)
        }
        return try result!.get()
    }

    /// Runs one group: every queued write (the leader's own among them) in one transaction,
    /// then wakes them and hands the lead to the first writer that queued meanwhile.
    private func lead(_ db: Database, withDatabase: (() throws -> Void) throws -> Void) {
        lock.lock()
        // Commit delay (PostgreSQL's commit_delay with commit_siblings): when other
        // writers were active around the last commit, the ones it just acknowledged are
        // about to send their next write; wait briefly for them, so one fsync covers them
        // too. A lone writer never waits.
        if activeWriters > 1 && queue.count < activeWriters {
            let g = DispatchSemaphore(value: 0)
            gathering = g
            lock.unlock()
            _ = g.wait(timeout: .now() + Self.gatherDelay)
            lock.lock()
            gathering = nil
        }
        let batch = queue
        queue.removeAll()
        lock.unlock()
        var failure: Error?
        do {
            try withDatabase {
                try db.writeDeferringSync {
                    for p in batch {
                        // On SQLITE_FULL, IOERR or NOMEM in the middle of a statement SQLite
                        // rolls the whole transaction back, not just the savepoint: every
                        // write of the batch is gone, those before this one too. All fail
                        // with this error (StorageFull, say); the rest must not run, or
                        // their SAVEPOINT would open a transaction of its own that RELEASE
                        // commits.
                        let error = p.run(batch.count > 1)
                        if !db.isInTransaction {
                            throw error ?? VaultError(.internalError, "the transaction ended in the middle of a group commit")
                        }
                        // Alone, a failed write rolls the whole transaction back.
                        if batch.count == 1, let error { throw error }
                    }
                }
            }
        } catch {
            failure = error
        }
        // The lead passes on before the fsync: the next group runs its transaction (and
        // readers read) while this one's WAL frames go to disk.
        lock.lock()
        activeWriters = batch.count + queue.count
        let next = queue.first
        if next == nil { leading = false }
        lock.unlock()
        next?.wake.signal()
        if failure == nil {
            do { try db.syncWAL() } catch { failure = error }
        }
        if let failure { for p in batch { p.fail(failure) } }
        lock.lock()
        for p in batch { p.done = true }
        lock.unlock()
        // The leader is in its own batch; it returns instead of waiting.
        for p in batch { p.wake.signal() }
    }
}
