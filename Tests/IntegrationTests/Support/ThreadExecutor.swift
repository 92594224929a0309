import Foundation

/// A task executor with a thread of its own. Tests block the cooperative pool (they wait
/// for child processes synchronously), so a task that consumes an async stream in the
/// background (e.g. VaultClient's `purgeEvents()`) could starve there; run it here instead:
///
///     Task(executorPreference: ThreadExecutor()) { for try await e in stream { ... } }
final class ThreadExecutor: TaskExecutor, @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []

    init() {
        let t = Thread { [self] in run() }
        t.name = "ThreadExecutor"
        t.start()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.withLock {
            jobs.append(job)
            condition.signal()
        }
    }

    private func run() {
        while true {
            let job: UnownedJob = condition.withLock {
                while jobs.isEmpty { condition.wait() }
                return jobs.removeFirst()
            }
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}
