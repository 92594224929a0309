import Foundation
import Synchronization
import Testing
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

@Suite("UnixSocket")
struct UnixSocketTests {
    /// A connected AF_UNIX stream pair.
    static func pair() throws -> (UnixSocket, UnixSocket) {
        var fds: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        return (UnixSocket(adopting: fds[0]), UnixSocket(adopting: fds[1]))
    }

    /// A thread's scheduler state ("S" asleep, "R" running) and its voluntary context
    /// switches, from /proc.
    static func thread(_ tid: Int32) throws -> (state: String, voluntarySwitches: Int) {
        let status = try String(contentsOfFile: "/proc/self/task/\(tid)/status", encoding: .utf8)
        func field(_ name: String) -> String? {
            status.split(separator: "\n").first { $0.hasPrefix(name + ":") }
                .map { $0.dropFirst(name.count + 1).trimmingCharacters(in: .whitespaces) }
        }
        let state = try #require(field("State")).prefix(1)
        let switches = try #require(field("voluntary_ctxt_switches").flatMap { Int($0) })
        return (String(state), switches)
    }

    /// Waits until thread `tid` sleeps and stays asleep (its voluntary switch count the same
    /// over 10 ms): then it waits in its receive, not in a brief sleep on the way there.
    /// Returns that count.
    static func waitAsleep(_ tid: borrowing Atomic<Int32>) throws -> Int {
        var last: Int?
        for _ in 0..<2000 {
            usleep(10_000)
            let t = tid.load(ordering: .sequentiallyConsistent)
            guard t > 0, let now = try? thread(t), now.state == "S" else {
                last = nil
                continue
            }
            if now.voluntarySwitches == last { return now.voluntarySwitches }
            last = now.voluntarySwitches
        }
        throw Failure(message: "the receiving thread never settled asleep")
    }

    struct Failure: Error { var message: String }

    /// The calling thread's id (/proc/thread-self links to <pid>/task/<tid>).
    static func currentThreadID() -> Int32 {
        let link =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self")) ?? ""
        return link.split(separator: "/").last.flatMap { Int32($0) } ?? -1
    }

    @Test func receiveReturnsWhatCameThenEmptyOnceThePeerCloses() throws {
        let (a, b) = try Self.pair()
        try b.sendAll(Array("hello".utf8))
        #expect(try a.receive() == Array("hello".utf8))
        b.close()
        #expect(try a.receive() == [])
    }

    @Test func receiveGivesUpWithEAGAINAfterTheReceiveTimeout() throws {
        let (a, b) = try Self.pair()
        // the peer stays open: nothing arrives, nothing closes
        defer { withExtendedLifetime(b) {} }
        a.setTimeouts(receive: 0.05, send: 0)
        #expect(a.receiveTimeoutMilliseconds == 50)
        do {
            _ = try a.receive()
            Issue.record("receive returned with nothing sent")
        } catch let e as Errno {
            #expect(e.code == EAGAIN, "\(e)")
        }
        a.setTimeouts(receive: 0, send: 0)
        #expect(a.receiveTimeoutMilliseconds == -1)
        // Closed: EBADF at once (poll would ignore the -1 and wait for ever).
        a.close()
        do {
            _ = try a.receive()
            Issue.record("receive on a closed socket returned")
        } catch let e as Errno {
            #expect(e.code == EBADF, "\(e)")
        }
    }

    /// A peer that reads a little now and then cannot stretch one write past `within`.
    @Test func sendAllGivesUpWithETIMEDOUTPastItsDeadline() throws {
        let (a, b) = try Self.pair()
        a.setTimeouts(receive: 0, send: 0.3)
        let stop = Atomic<Bool>(false)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            // At most 64 KiB every 0.15 s (under 0.45 MB/s: 8 MiB would take 19 s or more,
            // however the threads are scheduled).
            var buffer = [UInt8](repeating: 0, count: 65536)
            while !stop.load(ordering: .relaxed) {
                _ = buffer.withUnsafeMutableBytes {
                    recv(b.fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT))
                }
                usleep(150_000)
            }
            done.signal()
        }
        defer {
            stop.store(true, ordering: .relaxed)
            done.wait()
            withExtendedLifetime(b) {}
        }
        let start = MonotonicClock.nanoseconds()
        do {
            try a.sendAll([UInt8](repeating: 7, count: 8 << 20), within: 1)
            Issue.record("8 MiB went within 1 s to a peer reading every 0.15 s")
        } catch let e as Errno {
            #expect(e.code == ETIMEDOUT, "\(e)")
        }
        let seconds = Double(MonotonicClock.nanoseconds() - start) / 1e9
        #expect(seconds >= 1 && seconds < 3, "gave up after \(seconds) s")
        // Without a deadline a write that completes is unaffected.
        let (c, d) = try Self.pair()
        try c.sendAll(Array("whole".utf8), within: 0)
        #expect(try d.receive() == Array("whole".utf8))
    }

    @Test func shutdownWakesAReceiveWithoutTimeout() throws {
        let (a, b) = try Self.pair()
        defer { withExtendedLifetime(b) {} }
        let tid = Atomic<Int32>(0)
        let got = Mutex<[UInt8]?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            tid.store(Self.currentThreadID(), ordering: .sequentiallyConsistent)
            let r = (try? a.receive()) ?? [0xFF]
            got.withLock { $0 = r }
            done.signal()
        }
        _ = try Self.waitAsleep(tid)
        a.shutdown()
        #expect(
            done.wait(timeout: .now() + 10) == .success, "receive never returned after shutdown")
        #expect(got.withLock { $0 } == [])
    }

    /// A thread asleep in a blocking recv is woken each time its peer reads what the thread
    /// has sent (Linux's unix_write_space), then sleeps again: one context switch for
    /// nothing per request and per reply. `receive` waits in poll for
    /// POLLIN, which that wake-up does not disturb. (Fails with a blocking recv: the count
    /// goes up by one.)
    @Test func aWaitingReceiveSleepsWhileThePeerReadsWhatItSent() throws {
        let (a, b) = try Self.pair()
        let tid = Atomic<Int32>(0)
        let got = Mutex<[UInt8]?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            tid.store(Self.currentThreadID(), ordering: .sequentiallyConsistent)
            try? a.sendAll(Array("request".utf8))
            let r = try? a.receive()
            got.withLock { $0 = r }
            done.signal()
        }
        // Wait for the thread to send and fall asleep in receive.
        let before = try Self.waitAsleep(tid)
        let t = tid.load(ordering: .sequentiallyConsistent)
        #expect(try b.receive() == Array("request".utf8))
        usleep(50_000)
        let after = try Self.thread(t)
        #expect(after.voluntarySwitches == before, "the peer's read woke the receiving thread")
        #expect(after.state == "S")
        try b.sendAll(Array("reply".utf8))
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(got.withLock { $0 } == Array("reply".utf8))
    }
}
