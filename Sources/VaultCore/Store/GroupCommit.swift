import Foundation
import VaultProtocol

/// Group commit: concurrent write transactions share one COMMIT, so one fsync acknowledges
/// many writes. The first writer to arrive becomes the leader: it takes every pending write,
/// runs each in its own SAVEPOINT inside one transaction (a failing write rolls back only
/// itself), commits once, and wakes the others. Nobody's reply is sent before the commit
/// that covers its write has returned.
final class GroupCommit: @unchecked Sendable {
    private final class Pending {
        /// Runs the write in its savepoint; returns its error, if it failed.
        let run: () -> Error?
        let fail: (Error) -> Void
        var done = false
        init(run: @escaping () -> Error?, fail: @escaping (Error) -> Void) {
            self.run = run
            self.fail = fail
        }
    }

    private let condition = NSCondition()
    private var queue: [Pending] = []
    private var leading = false
    /// Writers active around the last commit: its batch plus those that queued during it.
    private var activeWriters = 0
    /// A leader waiting for `activeWriters` to queue (then new writers wake it).
    private var gathering = false
    /// How long a leader may wait for the writers it expects (seconds).
    static let gatherDelay = 0.0005

    /// Runs `body` in a savepoint of the next group transaction and returns once that
    /// transaction is committed. `withDatabase` runs its closure with exclusive use of the
    /// database (the engine lock). Throws what `body` throws, or the COMMIT's error.
    func write<T>(_ db: Database, withDatabase: (() throws -> Void) throws -> Void, _ body: @escaping () throws -> T) throws -> T {
        var result: Result<T, Error>?
        let me = Pending(
            run: {
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
        condition.lock()
        queue.append(me)
        if gathering { condition.broadcast() }
        while !me.done {
            if leading {
                condition.wait()
                continue
            }
            leading = true
            // Commit delay (PostgreSQL's commit_delay with commit_siblings): when other
            // writers were active around the last commit, the ones it just acknowledged are
            // about to send their next write; wait briefly for them, so one fsync covers them
            // too. A lone writer never waits.
            if activeWriters > 1 && queue.count < activeWriters {
                gathering = true
                let deadline = Date().addingTimeInterval(Self.gatherDelay)
                while queue.count < activeWriters && condition.wait(until: deadline) {}
                gathering = false
            }
            let batch = queue
            queue.removeAll()
            condition.unlock()
            do {
                try withDatabase {
                    try db.execute("BEGIN IMMEDIATE")
                    for p in batch {
                        // On SQLITE_FULL, IOERR or NOMEM in the middle of a statement SQLite
                        // rolls the whole transaction back, not just the savepoint: every
                        // write of the batch is gone, those before this one too. All fail
                        // with this error (StorageFull, say); the rest must not run, or their
                        // SAVEPOINT would open a transaction of its own that RELEASE commits.
                        let error = p.run()
                        if !db.isInTransaction {
                            throw error ?? VaultError(.internalError, "the transaction ended in the middle of a group commit")
                        }
                    }
                    do {
                        try db.execute("COMMIT")
                    } catch {
                        try? db.execute("ROLLBACK")
                        throw error
                    }
                }
            } catch {
                for p in batch { p.fail(error) }
            }
            condition.lock()
            for p in batch { p.done = true }
            activeWriters = batch.count + queue.count
            leading = false
            condition.broadcast()
        }
        condition.unlock()
        return try result!.get()
    }
}
