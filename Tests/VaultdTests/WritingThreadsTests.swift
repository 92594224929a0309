import Foundation
import Testing

@testable import vaultd

/// The pool the Secret Service's durable writes run on (`WritingThreads`): as many jobs at
/// once as its limit, never more threads than that, and its threads kept for later jobs.
@Suite struct WritingThreadsTests {
    /// `limit` jobs that each wait for the others all run at once (else none would return),
    /// and jobs run later reuse those threads.
    @Test func jobsUpToTheLimitRunTogetherOnKeptThreads() {
        let limit = 4
        let pool = WritingThreads(limit: limit)
        let started = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        for _ in 0..<limit {
            pool.run {
                started.signal()
                release.wait()
                done.signal()
            }
        }
        for i in 0..<limit {
            #expect(started.wait(timeout: .now() + 30) == .success, "job \(i) did not start")
        }
        #expect(pool.threads == limit)
        for _ in 0..<limit { release.signal() }
        for _ in 0..<limit { #expect(done.wait(timeout: .now() + 30) == .success) }
        // More jobs than the limit, one after another and in bursts: all run, on the same
        // threads.
        let count = Locked(0)
        for burst in 0..<10 {
            for _ in 0..<(burst % 3 + 1) {
                pool.run {
                    count.withLock { $0 += 1 }
                    done.signal()
                }
            }
            for _ in 0..<(burst % 3 + 1) {
                #expect(done.wait(timeout: .now() + 30) == .success)
            }
        }
        #expect(count.withLock { $0 } == 19)
        #expect(pool.threads == limit)
    }

    /// Past the limit a job waits for the first thread that becomes free, and runs then.
    @Test func aJobPastTheLimitRunsOnceAThreadIsFree() {
        let pool = WritingThreads(limit: 1)
        let release = DispatchSemaphore(value: 0)
        let order = Locked([Int]())
        let done = DispatchSemaphore(value: 0)
        pool.run {
            release.wait()
            order.withLock { $0.append(1) }
            done.signal()
        }
        pool.run {
            order.withLock { $0.append(2) }
            done.signal()
        }
        release.signal()
        for _ in 0..<2 { #expect(done.wait(timeout: .now() + 30) == .success) }
        #expect(order.withLock { $0 } == [1, 2])
        #expect(pool.threads == 1)
    }
}
