import Foundation
import Synchronization
import Testing
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// How many SIGURG the test's handler caught (a signal handler can reach only globals).
private let caughtSignals = Atomic<Int>(0)

/// The syscall layer (Sources/VaultProtocol/System): EINTR retried, EBADF trapped, a
/// `FileDescriptor` closed exactly once, errno by name.
@Suite struct SyscallLayerTests {
    /// A descriptor of /dev/null at a number of at least `minimum`: far above those other
    /// tests running at the same time open (the lowest free), so that it is not reused by
    /// them right after it is closed.
    static func highDescriptor(_ minimum: Int32) throws -> Int32 {
        let low = try SystemCall.open("/dev/null", O_RDONLY | O_CLOEXEC)
        defer { SystemCall.close(low) }
        return try SystemCall.fcntl(low, F_DUPFD_CLOEXEC, minimum)
    }

    @Test func aFileDescriptorIsClosedWhenItGoesAway() throws {
        let raw = try Self.highDescriptor(900)
        do {
            let fd = FileDescriptor(adopting: raw)
            #expect(SystemCall.isOpen(fd.rawValue))
        }
        #expect(!SystemCall.isOpen(raw))
    }

    /// `close()` closes it once: its deinit does not close it again (which would trap on EBADF).
    @Test func closeClosesOnceAndTakeHandsTheNumberOn() throws {
        let closed = try Self.highDescriptor(910)
        FileDescriptor(adopting: closed).close()
        #expect(!SystemCall.isOpen(closed))

        let taken = try Self.highDescriptor(920)
        let raw = FileDescriptor(adopting: taken).take()
        #expect(raw == taken)
        #expect(SystemCall.isOpen(taken))
        SystemCall.close(taken)
        #expect(!SystemCall.isOpen(taken))
    }

    /// A read interrupted by a signal (a handler without SA_RESTART) fails with EINTR when
    /// made directly, and returns the bytes that came after it through the layer.
    @Test func aCallInterruptedByASignalIsMadeAgain() throws {
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { _ in caughtSignals.add(1, ordering: .relaxed) }
        sigemptyset(&action.sa_mask)
        action.sa_flags = 0
        try #require(sigaction(SIGURG, &action, nil) == 0)

        let direct = try Self.readInterrupted { fd, buffer in
            let n = Glibc.read(fd, buffer.baseAddress, buffer.count)
            return n < 0 ? "errno \(errno)" : "\(n) bytes"
        }
        #expect(direct == "errno \(EINTR)")

        let layered = try Self.readInterrupted { fd, buffer in
            let n = try SystemCall.read(fd, into: buffer)
            return "\(n) bytes: \(buffer[0])"
        }
        #expect(layered == "1 bytes: 42")
    }

    /// Runs `read` on a thread of its own on an empty pipe and signals that thread (SIGURG)
    /// every 10 ms, five times or until `read` returned; then writes one byte (42): what
    /// `read` said. The thread waits in its read from the first milliseconds, so most of
    /// the signals come during it.
    static func readInterrupted(
        _ read: @escaping @Sendable (Int32, UnsafeMutableRawBufferPointer) throws -> String
    ) throws -> String {
        let pipe = try SystemCall.pipe()
        defer {
            SystemCall.close(pipe.read)
            SystemCall.close(pipe.write)
        }
        let thread = Atomic<UInt>(0)
        let result = Mutex<String?>(nil)
        // The thread stays until the signals are sent: pthread_kill needs it alive.
        let finish = Atomic<Bool>(false)
        defer { finish.store(true, ordering: .sequentiallyConsistent) }
        let before = caughtSignals.load(ordering: .relaxed)
        Thread {
            // The test runner's threads may block signals: this one takes SIGURG.
            var urg = sigset_t()
            sigemptyset(&urg)
            sigaddset(&urg, SIGURG)
            pthread_sigmask(SIG_UNBLOCK, &urg, nil)
            thread.store(UInt(pthread_self()), ordering: .sequentiallyConsistent)
            var byte: UInt8 = 0
            let said = withUnsafeMutableBytes(of: &byte) { buffer in
                Result { try read(pipe.read, buffer) }
            }
            result.withLock { $0 = (try? said.get()) ?? "threw \(said)" }
            while !finish.load(ordering: .sequentiallyConsistent) { usleep(1_000) }
        }.start()
        while thread.load(ordering: .sequentiallyConsistent) == 0 { usleep(1_000) }
        for _ in 0..<5 where result.withLock({ $0 }) == nil {
            usleep(10_000)
            try #require(
                pthread_kill(pthread_t(thread.load(ordering: .sequentiallyConsistent)), SIGURG) == 0
            )
        }
        for _ in 0..<100 where caughtSignals.load(ordering: .relaxed) == before { usleep(10_000) }
        #expect(caughtSignals.load(ordering: .relaxed) > before)
        var byte: UInt8 = 42
        _ = try withUnsafeBytes(of: &byte) { try SystemCall.write(pipe.write, $0) }
        for _ in 0..<500 where result.withLock({ $0 }) == nil { usleep(10_000) }
        return try #require(result.withLock { $0 })
    }

    /// A call on a descriptor that is not open traps (in a child process: an exit test).
    @Test func aBadDescriptorTraps() async {
        await #expect(processExitsWith: .failure) {
            let fd = try! SystemCall.open("/dev/null", O_RDONLY | O_CLOEXEC)
            SystemCall.close(fd)
            _ = try? SystemCall.fstat(fd)
        }
    }

    /// One the program did not open (`inherited`) is the user's mistake: an `Errno`.
    @Test func aBadInheritedDescriptorIsAnError() throws {
        let raw = try Self.highDescriptor(930)
        SystemCall.close(raw)
        #expect(throws: Errno(code: EBADF, call: "read")) {
            try FileDescriptor.readAll(inherited: raw)
        }
    }

    @Test func errnoNamesAreTheirValues() {
        let named: [(Int32, Int32)] = [
            (Errno.interrupted, EINTR), (Errno.badFileDescriptor, EBADF),
            (Errno.wouldBlock, EAGAIN), (Errno.wouldBlock, EWOULDBLOCK), (Errno.notFound, ENOENT),
            (Errno.noSpace, ENOSPC), (Errno.quotaExceeded, EDQUOT), (Errno.tooLarge, EFBIG),
            (Errno.timedOut, ETIMEDOUT), (Errno.exists, EEXIST),
        ]
        for (name, value) in named { #expect(name == value) }
        #expect(
            Errno(code: Errno.notFound, call: "open").description
                == "open: No such file or directory")
    }

    /// A failure names its call and errno; a bounded read stops past its limit.
    @Test func failuresNameTheCall() throws {
        #expect(throws: Errno(code: ENOENT, call: "open")) {
            try FileDescriptor.readFile("/nonexistent/\(getpid())")
        }
        #expect(throws: Errno(code: EFBIG, call: "read")) {
            try FileDescriptor.readFile("/proc/self/status", limit: 10)
        }
        let data = try FileDescriptor.readFile("/proc/self/status")
        #expect(String(decoding: data, as: UTF8.self).hasPrefix("Name:"))
    }
}
