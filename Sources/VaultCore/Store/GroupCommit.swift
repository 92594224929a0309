import Foundation
import VaultProtocol

/// Group commit: concurrent write transactions share one COMMIT, so one fsync acknowledges
/// many writes. The first writer to arrive becomes the leader: it takes every pending write,
/// and those that arrive while it waits for the rest of the group, runs each in its own
/// SAVEPOINT inside one transaction (a failing write rolls back only itself; a lone write
/// needs none), commits once, and wakes the others. Nobody's reply is
/// sent before the commit that covers its write is on disk.
///
/// The COMMIT itself does not wait for the disk: the leader hands the lead on, then syncs
/// the WAL outside the engine lock, so the next group's transaction and every reader run
/// during the fsync (an fsync under the engine lock would leave a core idle).
/// A reader may therefore see a write whose fsync is still in flight, as it may under
/// SQLite's own `synchronous=NORMAL`; its writer is acknowledged only after the sync.
///
/// A failed sync is not retried (PostgreSQL's lesson: after a failed fsync the kernel may
/// have dropped the dirty pages, so a later fsync's success proves nothing about them). The
/// batch learns that its writes are committed but not known to be on disk, and every later
/// write is refused until vaultd restarts and recovers from what the disk holds.
///
/// Sendable: the queue, the leader and the counts are in `group`, the sync outcomes in
/// `settled` (each a `Monitor`); a `Pending` is touched under `group`'s lock only.
final class GroupCommit: Sendable {
    private final class Pending {
        /// Runs the write (in a savepoint of its own when `true`); returns its error, if it
        /// failed.
        let run: (Bool) -> Error?
        let fail: (Error) -> Void
        /// Set (under `group`'s lock) once the commit covering this write is on disk (or
        /// failed).
        var done = false
        /// Signalled once: when done, or when this writer is to lead the next group.
        let wake = DispatchSemaphore(value: 0)
        init(run: @escaping (Bool) -> Error?, fail: @escaping (Error) -> Void) {
            self.run = run
            self.fail = fail
        }
    }

    // Each waiting writer sleeps on its own semaphore and is woken exactly once: one
    // condition broadcast per commit would wake every waiting writer, each to find it is not
    // its turn, and spend the daemon's time in futexes.
    private struct Group {
        var queue: [Pending] = []
        var leading = false
        /// Writers active around the last commit: its batch plus those that queued during it.
        var activeWriters = 0
        /// Signalled when a writer queues while the leader waits for more of its group.
        var gathering: DispatchSemaphore?
        /// Write transactions ended so far, the groups' and `writeHoldingDatabase`'s; each
        /// one's number, in commit order.
        var commits = 0
    }
    private let group = Monitor(Group())
    /// How long a leader may wait for the writers it expects (seconds). It waits holding the
    /// engine lock (its transaction is open): anything else that needs that lock (a lookup
    /// that could not open a reader connection, Status, Lock) may wait this much longer, and
    /// nothing a writer does between its acknowledgement and its next write should take it
    /// (the leader would wait out its whole delay for a writer that waits for the lock:
    /// observers have a lock of their own for that reason).
    static let gatherDelay = 0.0005
    /// Makes the committed WAL durable (`Database.syncWAL`; tests stand in for the disk).
    private let sync: @Sendable (Database) throws -> Void
    private struct Settled {
        /// Every group up to this number has its sync's outcome.
        var through = 0
        /// Set when a sync failed: no write is accepted afterwards.
        var syncFailure: VaultFailure?
    }
    private let settled = Monitor(Settled())

    init(sync: @escaping @Sendable (Database) throws -> Void = { try $0.syncWAL() }) {
        self.sync = sync
    }

    /// Waits until writers queue (or the deadline passes) and takes them; nil when none came.
    private func nextArrivals(until deadline: DispatchTime) -> [Pending]? {
        let gathering: DispatchSemaphore? = group.withLock { group in
            guard group.queue.isEmpty else { return nil }
            group.gathering = DispatchSemaphore(value: 0)
            return group.gathering
        }
        if let gathering { _ = gathering.wait(timeout: deadline) }
        return group.withLock { group in
            group.gathering = nil
            if group.queue.isEmpty { return nil }
            defer { group.queue.removeAll() }
            return group.queue
        }
    }

    /// Runs `body` in the next group transaction (in a savepoint of its own when the group
    /// has others) and returns once that transaction is committed and on disk. `withDatabase`
    /// runs its closure with exclusive use of the database (the engine lock). Throws what
    /// `body` throws, the COMMIT's error, or InternalError once a sync has failed.
    func write<T>(
        _ db: Database, withDatabase: (() throws -> Void) throws -> Void,
        _ body: @escaping () throws -> T
    ) throws -> T {
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
        if let refused = settled.withLock({ $0.syncFailure }) { throw refused }
        let follows: Bool = group.withLock { group in
            group.queue.append(me)
            if let g = group.gathering {
                group.gathering = nil
                g.signal()
            }
            if group.leading { return true }
            group.leading = true
            return false
        }
        if follows {
            // Woken when a leader's commit covered this write, or to lead the next group.
            me.wake.wait()
            let promoted = group.withLock { _ in !me.done }
            if promoted { lead(db, withDatabase: withDatabase) }
        } else {
            lead(db, withDatabase: withDatabase)
        }
        return try result!.get()
    }

    /// Runs one group: every queued write (the leader's own among them) in one transaction,
    /// then wakes them and hands the lead to the first writer that queued meanwhile.
    private func lead(_ db: Database, withDatabase: (() throws -> Void) throws -> Void) {
        // Commit delay (PostgreSQL's commit_delay with commit_siblings): when other
        // writers were active around the last commit, the ones it just acknowledged are
        // about to send their next write; wait briefly for them, so one fsync covers them
        // too. A lone writer never waits, and its write needs no savepoint.
        let (expected, queued) = group.withLock { group in
            defer { group.queue.removeAll() }
            return (group.activeWriters, group.queue)
        }
        var batch = queued
        let gather = expected > 1
        let deadline = DispatchTime.now() + Self.gatherDelay
        var failure: Error?
        var sequence: Int?
        do {
            try withDatabase {
                // Numbered while the engine lock is held: the commit order is the WAL's
                // (`writeHoldingDatabase` takes its number under that lock too).
                defer { sequence = nextSequence() }
                try db.writeDeferringSync {
                    // The writes run as they arrive, inside the open transaction: the leader
                    // inserts while the others are still on their way, and only the COMMIT
                    // is left once the last one is in (gathering first, then running the
                    // group, would leave a core idle for the gathering's length).
                    var next = 0
                    while true {
                        while next < batch.count {
                            let p = batch[next]
                            next += 1
                            let savepoint = gather || batch.count > 1
                            // On SQLITE_FULL, IOERR or NOMEM in the middle of a statement
                            // SQLite rolls the whole transaction back, not just the savepoint:
                            // every write of the batch is gone, those before this one too.
                            // All fail with this error (StorageFull, say); the rest must not
                            // run, or their SAVEPOINT would open a transaction of its own that
                            // RELEASE commits.
                            let error = p.run(savepoint)
                            if !db.isInTransaction {
                                throw error
                                    ?? VaultFailure(
                                        .internalError,
                                        "the transaction ended in the middle of a group commit")
                            }
                            // Without a savepoint, a failed write rolls the whole transaction back.
                            if !savepoint, let error { throw error }
                        }
                        guard gather, batch.count < expected,
                            let arrived = nextArrivals(until: deadline)
                        else { break }
                        batch += arrived
                    }
                }
            }
        } catch {
            failure = error
        }
        let number = sequence ?? nextSequence()
        // The lead passes on before the fsync: the next group runs its transaction (and
        // readers read) while this one's WAL frames go to disk.
        let next: Pending? = group.withLock { group in
            group.activeWriters = batch.count + group.queue.count
            if group.queue.isEmpty { group.leading = false }
            return group.queue.first
        }
        next?.wake.signal()
        if let failure = settle(db, number, failure) { for p in batch { p.fail(failure) } }
        group.withLock { _ in for p in batch { p.done = true } }
        // The leader is in its own batch; it returns instead of waiting.
        for p in batch { p.wake.signal() }
    }

    /// Runs `body` in a transaction of its own, now, for a caller that holds the engine lock
    /// already (`withDatabase`'s) and must keep it past the write: a change of the keys, whose
    /// memory changes with the store's, or of the failed-unlock count. It is numbered and
    /// settled in the same commit order as the groups, so the same rules hold: returns once
    /// the transaction is committed and its WAL frames are on disk (the fsync runs under the
    /// engine lock here, as `synchronous=FULL` would run it), a failed sync refuses every
    /// later write, and an earlier group's failed sync fails this write too. Throws what
    /// `body` throws (rolled back), the COMMIT's error, or InternalError once a sync has
    /// failed. `undo` runs (under the engine lock still) when the transaction ran and did not
    /// commit: for memory changed with it, which must be as the store is. A commit whose sync
    /// then fails is in the store as SQLite sees it, so `undo` does not run for it.
    func writeHoldingDatabase<T>(_ db: Database, _ body: () throws -> T, undo: () -> Void = {})
        throws -> T
    {
        if let refused = settled.withLock({ $0.syncFailure }) { throw refused }
        var result: T?
        var failure: Error?
        do {
            try db.writeDeferringSync { result = try body() }
        } catch {
            failure = error
            undo()
        }
        if let failure = settle(db, nextSequence(), failure) { throw failure }
        return result!
    }

    /// Write transactions ended so far, a group's or `writeHoldingDatabase`'s (committed or
    /// not): what a test counts to see a mutation take the write path.
    var transactionsEnded: Int { group.withLock { $0.commits } }

    /// The next number in commit order; take it holding the engine lock, right after the
    /// transaction ended (committed or not).
    private func nextSequence() -> Int {
        group.withLock { group in
            group.commits += 1
            return group.commits
        }
    }

    /// The end of every write transaction, a group's or `writeHoldingDatabase`'s: syncs the
    /// WAL when the transaction committed (`failure` nil), then settles its outcome in commit
    /// order; returns the error its writers are to get, if any.
    private func settle(_ db: Database, _ sequence: Int, _ failure: Error?) -> Error? {
        var syncError: Error?
        if failure == nil {
            do { try sync(db) } catch { syncError = error }
        }
        // Outcomes are settled in commit order: a group's frames follow the earlier groups'
        // in the WAL, so it is durable only if they are too, whichever fsync returned first.
        let outcome: Error? = settled.withLock(when: { $0.through >= sequence - 1 }) { settled in
            defer { settled.through = sequence }
            if let syncError, settled.syncFailure == nil {
                db.logger.error(
                    "the disk failed to sync the write-ahead log (\(syncError)); refusing writes until vaultd restarts"
                )
                settled.syncFailure = VaultFailure(
                    .internalError,
                    "the vault's disk failed a sync earlier; no write is accepted until vaultd restarts"
                )
                return VaultFailure(
                    .internalError,
                    "the disk failed to confirm this write (\(syncError)): it may or may not be kept; no write is accepted until vaultd restarts"
                )
            }
            if failure == nil, let earlier = settled.syncFailure {
                return VaultFailure(
                    .internalError, "\(earlier.message); this write may or may not be kept")
            }
            return failure
        }
        settled.broadcast()
        return outcome
    }
}
