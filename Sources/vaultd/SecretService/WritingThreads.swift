import Foundation
import VaultProtocol

/// The threads that answer the Secret Service's durable writes off the bus thread
/// (`SecretService.answerWrite`), started as writes need them and kept, idle, for the next:
/// a thread made and torn down for each store cost its creation, its stack's mapping and
/// Foundation's `Thread` bookkeeping on every store.
///
/// At most `limit` threads: the caller admits at most that many writes at once
/// (`SecretService.maximumWritingCalls`), so a job never waits behind a full pool longer
/// than a running job takes to return.
final class WritingThreads: Sendable {
    private struct State {
        /// Jobs not yet taken, first in first out.
        var jobs: [@Sendable () -> Void] = []
        var threads = 0
        /// Threads waiting for a job.
        var idle = 0
    }
    private let state = Monitor(State())
    private let limit: Int

    init(limit: Int) { self.limit = limit }

    /// The threads started so far (they are kept).
    var threads: Int { state.withLock { $0.threads } }

    /// Runs `job` on an idle thread of the pool, a new one while there are fewer than
    /// `limit`, else on the first that becomes free.
    func run(_ job: @escaping @Sendable () -> Void) {
        let start = state.withLock { s -> Bool in
            s.jobs.append(job)
            // Each idle thread takes one queued job once woken.
            if s.jobs.count <= s.idle { return false }
            guard s.threads < limit else { return false }
            s.threads += 1
            return true
        }
        if start {
            let t = Thread { [self] in serve() }
            t.name = "vaultd-writing"
            t.stackSize = 1 << 20
            t.start()
        } else {
            state.signal()
        }
    }

    /// A worker's loop: the next job, else waiting for one (counted idle meanwhile, which
    /// `run` reads to wake it rather than start another thread).
    private func serve() {
        while true {
            state.withLock { $0.idle += 1 }
            // At most `limit` jobs are queued: removing the first moves a few pointers.
            let job = state.withLock(when: { !$0.jobs.isEmpty }) { s -> @Sendable () -> Void in
                s.idle -= 1
                return s.jobs.removeFirst()
            }
            job()
        }
    }
}
