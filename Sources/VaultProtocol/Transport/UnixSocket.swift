import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// An owned AF_UNIX SOCK_STREAM socket; closed on `close()` or deinit.
///
/// Its owner closes it after the thread using it is done with it; another thread may only
/// `shutdown()` it, which reads `fd` and wakes that thread. The kernel serialises what the
/// system calls on one fd do.
public final class UnixSocket: Sendable {
    /// The descriptor, -1 once closed (atomic: `shutdown` may read it from another thread).
    private let descriptor: Atomic<Int32>
    public var fd: Int32 { descriptor.load(ordering: .acquiring) }

    public init(adopting fd: Int32) { descriptor = Atomic(fd) }

    /// A new unconnected socket (`socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)`).
    public convenience init() throws {
        self.init(
            adopting: try SystemCall.socket(
                AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)))
    }

    deinit { close() }

    public func close() {
        let fd = descriptor.exchange(-1, ordering: .acquiringAndReleasing)
        if fd >= 0 { SystemCall.close(fd) }
    }

    /// The uid of the process at the other end, as the kernel recorded it at connect
    /// (SO_PEERCRED); nil when it cannot be had.
    public func peerUID() -> uid_t? {
        // struct ucred { pid_t pid; uid_t uid; gid_t gid; }, which Glibc does not import.
        var cred: (Int32, UInt32, UInt32) = (0, 0, 0)
        guard (try? SystemCall.getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred)) == 12 else {
            return nil
        }
        return cred.1
    }

    /// `shutdown(SHUT_RDWR)`: wakes a thread waiting in `receive` on this socket (none once
    /// it is closed).
    public func shutdown() {
        let fd = self.fd
        if fd >= 0 { SystemCall.shutdown(fd) }
    }

    private static func address(_ path: String) throws -> (sockaddr_un, socklen_t) {
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: addr.sun_path)
        guard !bytes.isEmpty, bytes.count < capacity else {
            throw Errno(code: Errno.nameTooLong, call: "socket path")
        }
        withUnsafeMutableBytes(of: &addr.sun_path) { p in
            for (i, b) in bytes.enumerated() { p[i] = b }
            p[bytes.count] = 0
        }
        return (addr, socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + 1))
    }

    /// `connect` to the socket at `path`.
    public func connect(path: String) throws {
        var (addr, len) = try Self.address(path)
        try withUnsafePointer(to: &addr) { p in
            try p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                try SystemCall.connect(fd, sa, len)
            }
        }
    }

    /// `bind` to `path` and `listen`.
    public func bindAndListen(path: String, backlog: Int32 = 128) throws {
        var (addr, len) = try Self.address(path)
        try withUnsafePointer(to: &addr) { p in
            try p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                try SystemCall.bind(fd, sa, len)
            }
        }
        try SystemCall.listen(fd, backlog)
    }

    /// `accept` (close-on-exec): the next connection.
    public func accept() throws -> UnixSocket {
        UnixSocket(adopting: try SystemCall.accept(fd))
    }

    /// Writes all of `bytes` (`send` with MSG_NOSIGNAL, so a closed peer is an error, not SIGPIPE).
    /// Without `within`, each wait for room is bounded by the send timeout (`setTimeouts`)
    /// alone, so a peer that reads a little now and then can stretch the write for ever (a
    /// peer reading a little every fraction of a second holds an 8 MiB `send` for seconds).
    /// `within`: seconds the whole write may take; throws `Errno` ETIMEDOUT past them.
    /// `stalledAfter` (with `within`): seconds the peer may take no byte at all; ETIMEDOUT
    /// too past them.
    public func sendAll(
        _ bytes: [UInt8], within seconds: Double? = nil, stalledAfter stall: Double? = nil
    ) throws {
        try bytes.withUnsafeBytes { try sendAll($0, within: seconds, stalledAfter: stall) }
    }

    /// `sendAll` of bytes that are not an array (a reply in secure memory).
    public func sendAll(
        _ b: UnsafeRawBufferPointer, within seconds: Double? = nil,
        stalledAfter stall: Double? = nil
    ) throws {
        guard b.count > 0 else { return }
        let deadline = seconds.map { MonotonicClock.nanoseconds() + UInt64(max(0, $0) * 1e9) }
        let stallNanoseconds = stall.map { UInt64(max(0, $0) * 1e9) }
        var lastProgress = MonotonicClock.nanoseconds()
        // With a deadline the sends do not block: the waits happen in `poll`, bounded by it.
        let flags = Int32(MSG_NOSIGNAL) | (deadline == nil ? 0 : Int32(MSG_DONTWAIT))
        var off = 0
        while off < b.count {
            var failure: Errno?
            do {
                off += try SystemCall.send(
                    fd, UnsafeRawBufferPointer(rebasing: b[off...]), flags: flags)
            } catch { failure = error }
            guard let failure else {
                if stallNanoseconds != nil { lastProgress = MonotonicClock.nanoseconds() }
                continue
            }
            guard var deadline, failure.code == Errno.wouldBlock else { throw failure }
            if let s = stallNanoseconds { deadline = min(deadline, lastProgress + s) }
            let now = MonotonicClock.nanoseconds()
            guard now < deadline else { throw Errno(code: Errno.timedOut, call: "send") }
            _ = try? SystemCall.poll(
                fd, events: Int16(POLLOUT),
                timeout: Int32(min((deadline - now) / 1_000_000 + 1, UInt64(Int32.max))))
        }
    }

    /// Reads what is available, up to `max` bytes, waiting for it up to the receive timeout
    /// (`setTimeouts`; none by default; a signal starts the wait over); an empty result
    /// means the peer closed. Throws `Errno` EAGAIN when the timeout expired, EBADF once
    /// the socket is closed. `readable`: a poll just saw data (or a hang-up) waiting, so
    /// there is nothing to wait for (when wrong, the recv blocks, bounded only by
    /// SO_RCVTIMEO).
    ///
    /// It waits in `poll` for POLLIN, not in a blocking `recv`. Linux wakes a thread asleep
    /// in an AF_UNIX stream `recv` also when the *peer* reads what this socket sent
    /// (`unix_write_space`: room to write, which `recv`'s wait does not tell apart from
    /// data), so every request and every reply would wake its sender once for nothing (a
    /// context switch each); `poll`'s wait ignores events it was not asked for.
    public func receive(max: Int = 65536, readable: Bool = false) throws -> [UInt8] {
        // poll ignores a negative descriptor: it would wait out the timeout, or for ever.
        guard fd >= 0 else { throw Errno(code: Errno.badFileDescriptor, call: "recv") }
        if !readable,
            try SystemCall.poll(fd, events: Int16(POLLIN), timeout: receiveTimeoutMilliseconds) == 0
        {
            throw Errno(code: Errno.wouldBlock, call: "recv")
        }
        // Readable, hung up or failed: the recv returns at once (data, 0 or the error).
        // Uninitialized capacity: zeroing 64 KiB per message cost more than the recv.
        return try [UInt8](unsafeUninitializedCapacity: max) { b, n in
            n = 0
            n = try SystemCall.recv(fd, into: UnsafeMutableRawBufferPointer(b), flags: 0)
        }
    }

    /// `receive`, after polling briefly for the data with `busyPoll` (vaultd's connections
    /// and `VarlinkStream` replies); `othersBusy` as for `BusyPoll.awaitReadable`.
    public func receive(polling busyPoll: inout BusyPoll, othersBusy: Bool = false) throws
        -> [UInt8]
    {
        try receive(readable: busyPoll.awaitReadable(fd, othersBusy: othersBusy))
    }

    /// How long `receive` waits for data, in milliseconds (-1: for ever).
    public var receiveTimeoutMilliseconds: Int32 { receiveTimeout.load(ordering: .relaxed) }
    private let receiveTimeout = Atomic<Int32>(-1)

    /// The receive and send timeouts in seconds (0: none): `SO_RCVTIMEO` / `SO_SNDTIMEO`,
    /// and `receive`'s wait.
    /// Each is capped at `Int32.max` milliseconds (about 24.8 days, poll's longest wait; a
    /// larger count did not fit a timeval's `Int` and trapped), and a positive one is at
    /// least a microsecond (a zero timeval means no timeout).
    public func setTimeouts(receive: Double, send: Double) {
        let longest = Double(Int32.max) / 1000
        receiveTimeout.store(
            receive > 0 ? Int32(min(receive * 1000, Double(Int32.max)).rounded(.up)) : -1,
            ordering: .relaxed)
        for (opt, asked) in [(SO_RCVTIMEO, receive), (SO_SNDTIMEO, send)] {
            let secs = asked > 0 ? min(max(asked, 1e-6), longest) : 0
            let tv = timeval(tv_sec: Int(secs), tv_usec: Int((secs - secs.rounded(.down)) * 1e6))
            try? SystemCall.setsockopt(fd, SOL_SOCKET, opt, tv)
        }
    }
}

/// Sends a call and reads replies over one connection: the client side of varlink framing.
///
/// `@unchecked Sendable` without a lock: a stream, its `reader` and `busyPoll` belong to one
/// thread at a time (a VaultClient connection is used under its own lock; a test's
/// connection by the thread that made it); it may be handed to another thread between calls.
public final class VarlinkStream: @unchecked Sendable {
    public let socket: UnixSocket
    private var reader = FrameReader()
    /// Used by `receive(polling: true)`: polls briefly for a reply before sleeping on it.
    private var busyPoll = BusyPoll(
        windowMicroseconds: BusyPoll.window(
            fromEnvironment: "VAULT_BUSY_POLL_US", default: defaultPollMicroseconds),
        limit: .one)

    /// The default poll for a reply, in microseconds: about the slow end of a lookup's reply
    /// time on a virtual machine (the round trip plus vaultd's work), so that most replies
    /// come within it and the client does not sleep and get woken for them. A reply that
    /// takes longer costs the window once and then the back-off (`BusyPoll`).
    public static let defaultPollMicroseconds = 200

    public init(socket: UnixSocket) { self.socket = socket }

    /// Writes one message (JSON + NUL).
    public func send(_ message: JSON) throws {
        try send(serialized: message.serialized())
    }

    /// Writes one message already serialized as JSON (the NUL is added here).
    public func send(serialized message: [UInt8]) throws {
        var bytes = message
        bytes.append(0)
        try socket.sendAll(bytes)
    }

    /// The next message, or nil when the peer closed the connection.
    /// Throws `JSONSyntaxError`, `FrameReader.Failure`, `Errno`.
    /// `polling`: poll briefly before sleeping (`BusyPoll`; `VAULT_BUSY_POLL_US`, default
    /// `defaultPollMicroseconds`, 0 turns it off), for a reply expected within microseconds.
    public func receive(polling: Bool = false) throws -> JSON? {
        while true {
            if let frame = try reader.nextFrame() { return try JSON.parse(frame) }
            let chunk = polling ? try socket.receive(polling: &busyPoll) : try socket.receive()
            if chunk.isEmpty { return nil }
            reader.append(chunk)
        }
    }

    /// A complete message that has already arrived, without waiting for one (nil when none
    /// has, or it does not parse). vaultd says why before it closes a connection it refuses
    /// (over its connection cap): a send to it may fail first, with the reason waiting here.
    public func arrivedMessage() -> JSON? {
        while true {
            if let frame = try? reader.nextFrame() { return try? JSON.parse(frame) }
            guard (try? SystemCall.poll(socket.fd, events: Int16(POLLIN), timeout: 0)) ?? 0 != 0,
                let chunk = try? socket.receive(readable: true),
                !chunk.isEmpty
            else { return nil }
            reader.append(chunk)
        }
    }

    /// Whether bytes of an incomplete message are waiting.
    public var hasPartialMessage: Bool { reader.pendingByteCount > 0 }
}
