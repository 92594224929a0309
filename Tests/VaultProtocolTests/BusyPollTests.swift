import Foundation
import Testing
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

@Suite("BusyPoll")
struct BusyPollTests {
    /// A connected AF_UNIX stream pair; closed when the test ends.
    final class Pair {
        let a: Int32, b: Int32
        init() throws {
            var fds: [Int32] = [-1, -1]
            try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
            a = fds[0]
            b = fds[1]
        }
        deinit {
            close(a)
            close(b)
        }
    }

    static let manyCPUs = sysconf(Int32(_SC_NPROCESSORS_ONLN)) > 1

    @Test(
        "a poll that finds nothing backs off 1, 2, 4 … 64 receives; one that finds data resets it")
    func backOff() throws {
        let pair = try Pair()
        var p = BusyPoll(windowMicroseconds: 20, limit: .ownOne)
        guard p.isEnabled else {
            #expect(!Self.manyCPUs, "polling is off only on one CPU")
            return
        }
        var seen: [Int] = []
        var readable: Bool
        for _ in 0..<8 {
            readable = p.awaitReadable(pair.a)  // nothing to read: polls, then backs off
            #expect(!readable)
            seen.append(p.receivesWithoutPolling)
            while p.receivesWithoutPolling > 0 {  // these don't poll
                readable = p.awaitReadable(pair.a)
                #expect(!readable)
            }
        }
        #expect(seen == [1, 2, 4, 8, 16, 32, 64, 64])
        #expect(send(pair.b, "x", 1, 0) == 1)
        readable = p.awaitReadable(pair.a)
        #expect(readable, "data waiting: the receive need not wait")
        #expect(p.receivesWithoutPolling == 0)
        // Data arriving again keeps it at 0; the next empty poll starts over at 1.
        readable = p.awaitReadable(pair.a)
        #expect(readable)
        #expect(p.receivesWithoutPolling == 0)
        var byte: UInt8 = 0
        #expect(recv(pair.a, &byte, 1, 0) == 1 && byte == UInt8(ascii: "x"))
        readable = p.awaitReadable(pair.a)
        #expect(!readable)
        #expect(p.receivesWithoutPolling == 1)
    }

    @Test("no polling when others are busy, with a zero window, or on one CPU")
    func whenNotToPoll() throws {
        let pair = try Pair()
        var readable: Bool
        var busy = BusyPoll(windowMicroseconds: 20, limit: .oneLessThanCPUs)
        #expect(send(pair.b, "x", 1, 0) == 1)
        readable = busy.awaitReadable(pair.a, othersBusy: true)
        #expect(!readable, "not polled, so not known readable")
        #expect(busy.receivesWithoutPolling == 0, "skipped entirely: no back-off recorded")
        var off = BusyPoll(windowMicroseconds: 0, limit: .one)
        #expect(!off.isEnabled)
        readable = off.awaitReadable(pair.a)
        #expect(!readable)
        #expect(off.receivesWithoutPolling == 0)
        #expect(BusyPoll(windowMicroseconds: 20, limit: .one).isEnabled == Self.manyCPUs)
    }

    @Test("the window comes from the environment, capped at 1 ms; junk keeps the default")
    func windowFromEnvironment() {
        let name = "VAULT_BUSY_POLL_TEST_US"
        defer { unsetenv(name) }
        unsetenv(name)
        #expect(BusyPoll.window(fromEnvironment: name, default: 50) == 50)
        setenv(name, "0", 1)
        #expect(BusyPoll.window(fromEnvironment: name, default: 50) == 0)
        setenv(name, "75", 1)
        #expect(BusyPoll.window(fromEnvironment: name, default: 50) == 75)
        setenv(name, "999999", 1)
        #expect(BusyPoll.window(fromEnvironment: name, default: 50) == 1000)
        setenv(name, "-3", 1)
        #expect(BusyPoll.window(fromEnvironment: name, default: 50) == 50)
        setenv(name, "fast", 1)
        #expect(BusyPoll.window(fromEnvironment: name, default: 50) == 50)
    }
}
