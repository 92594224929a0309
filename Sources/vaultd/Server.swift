import CVaultSys
import Foundation
import Synchronization
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Named limits (as sd-varlink's): what one daemon accepts before it refuses. The first two
/// can be lowered (or raised) for tests and small machines through the environment:
/// `VAULTD_MAX_CONNECTIONS`, `VAULTD_PARTIAL_TIMEOUT` (seconds).
struct Limits: Sendable {
    /// Connections served at once; further ones are closed at once.
    var maximumConnections = 256
    /// A peer that leaves half a message unfinished this long is dropped (seconds), however
    /// slowly it keeps trickling bytes.
    var partialMessageTimeout = 10.0
    /// A reply its peer has not read whole within this long is given up and the peer
    /// dropped (seconds), however slowly it keeps reading.
    var sendTimeout = 30.0
    /// Bytes of messages in flight that vaultd holds for all connections together: the
    /// unfinished calls it is receiving and the replies it is sending, beyond the first
    /// `messageAllowance` of each (which always fit: ordinary calls and replies are never
    /// held up). Without it 256 connections each sending 8 MiB without its end held 2 GB,
    /// as did 256 that asked for a large reply and did not read it; with it vaultd's memory
    /// for them is bounded (buffers grow by doubling, so up to about twice the budget is
    /// allocated at once). A call that would pass it is read to its end without being kept,
    /// answered with RateLimited and its connection closed; a reply that would pass it is
    /// RateLimited instead.
    var messageBudget = 64 << 20
    /// Bytes of each message that do not count against the budget.
    var messageAllowance = 64 << 10
    /// How long a connection's thread polls for the next call before it sleeps
    /// (microseconds; `VAULTD_BUSY_POLL_US`, 0 turns it off). See `BusyPoll`.
    var busyPollMicroseconds = BusyPoll.window(fromEnvironment: "VAULTD_BUSY_POLL_US", default: 30)

    struct InvalidSetting: Error, CustomStringConvertible {
        var description: String
    }

    /// The defaults, with the overrides the environment sets. Throws for a value that is not
    /// a positive number (VAULTD_BUSY_POLL_US: not a whole number from 0; above 1000 it is 1000).
    static func fromEnvironment(_ env: [String: String]) throws -> Limits {
        var limits = Limits()
        if let v = env["VAULTD_MAX_CONNECTIONS"], !v.isEmpty {
            guard let n = Int(v), n >= 1 else {
                throw InvalidSetting(description: "VAULTD_MAX_CONNECTIONS must be a positive integer, not '\(v)'")
            }
            limits.maximumConnections = n
        }
        if let v = env["VAULTD_PARTIAL_TIMEOUT"], !v.isEmpty {
            guard let t = Double(v), t.isFinite, t > 0 else {
                throw InvalidSetting(description: "VAULTD_PARTIAL_TIMEOUT must be a positive number of seconds, not '\(v)'")
            }
            limits.partialMessageTimeout = t
        }
        if let v = env["VAULTD_BUSY_POLL_US"], !v.isEmpty {
            guard let n = Int(v), n >= 0 else {
                throw InvalidSetting(description: "VAULTD_BUSY_POLL_US must be a whole number of microseconds (0 turns busy polling off), not '\(v)'")
            }
            limits.busyPollMicroseconds = min(n, 1000)
        }
        return limits
    }
}

/// Accepts connections on the listening socket, checks each peer with SO_PEERCRED, and
/// serves each connection on its own thread: frames in, dispatch, replies out, in order.
final class Server: @unchecked Sendable {
    let listener: UnixSocket
    /// The listener is systemd's (socket activation): systemd keeps the same socket and
    /// starts the next vaultd on it, so `stop` must leave it able to take connections (a
    /// `shutdown` would act on systemd's copy too: every later connect refused).
    let listenerIsShared: Bool
    /// `stop` writes to `wake[1]` to end the accept loop, which polls the listener and `wake[0]`.
    private var wake: [Int32] = [-1, -1]
    let dispatcher: Dispatcher
    let identify: (PeerCredentials) -> Caller?
    let limits: Limits
    private let state = NSCondition()
    private var connections: [ObjectIdentifier: UnixSocket] = [:]
    private var appConnections: [String: Int] = [:]
    /// When the accept loop last logged a refusal over `maximumConnections` (its thread only).
    private var lastRefusalLog: UInt64 = 0
    /// What a connection over `maximumConnections` is sent before it is closed (the accept
    /// loop's thread only).
    private lazy var tooManyConnections: [UInt8] =
        VarlinkReply(
            error: VaultError(
                .rateLimited,
                "vaultd is serving \(limits.maximumConnections) connections, the most it serves at once (VAULTD_MAX_CONNECTIONS); try again shortly",
                extra: ["retryAfter": JSON(1.0)])
        ).json.serialized() + [0]
    /// Calls being served. Counted without a lock, as is `stopping`: every call touches
    /// them, from every connection's thread. A connection also polls for its next call only
    /// while no other call is being served.
    private let callsInProgress = Atomic<Int>(0)
    private let stopping = Atomic<Bool>(false)
    /// Bytes counted against `Limits.messageBudget`, all connections together.
    private let messageBytes = Atomic<Int>(0)

    /// Counts `bytes` more against the message budget; false (nothing counted) when that
    /// would pass it.
    private func reserveMessageBytes(_ bytes: Int) -> Bool {
        guard bytes > 0 else { return true }
        var current = messageBytes.load(ordering: .relaxed)
        while current + bytes <= limits.messageBudget {
            let (exchanged, original) = messageBytes.weakCompareExchange(
                expected: current, desired: current + bytes, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
        return false
    }

    private func releaseMessageBytes(_ bytes: Int) {
        if bytes > 0 { messageBytes.subtract(bytes, ordering: .relaxed) }
    }

    /// RateLimited, for a message over the budget: `what` it was.
    private func overBudget(_ what: String) -> VarlinkReply {
        let mib = limits.messageBudget >> 20
        log("refused \(what): messages in flight for other connections hold \(mib) MiB")
        return VarlinkReply(
            error: VaultError(
                .rateLimited, "vaultd holds \(mib) MiB of other connections' messages in flight; ask again in a second",
                extra: ["retryAfter": JSON(1.0)]))
    }

    init(
        listener: UnixSocket, listenerIsShared: Bool = false, dispatcher: Dispatcher, limits: Limits = Limits(),
        identify: @escaping (PeerCredentials) -> Caller?
    ) {
        self.listener = listener
        self.listenerIsShared = listenerIsShared
        if pipe(&wake) == 0 {
            for fd in wake {
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                _ = fcntl(fd, F_SETFL, O_NONBLOCK)
            }
        } else {
            wake = [-1, -1]
        }
        self.limits = limits
        self.dispatcher = dispatcher
        self.identify = identify
    }

    /// App IDs with at least one open connection.
    var runningApps: Set<String> { state.withLock { Set(appConnections.keys) } }

    /// Runs the accept loop on a new thread.
    func start() {
        let t = Thread { [self] in
            // Named where /proc shows it (Foundation's `Thread.name` does not name the OS thread).
            _ = vault_set_thread_name("vaultd-accept")
            acceptLoop()
        }
        t.start()
    }

    /// Waits until the listener has a connection to accept (true) or `stop` was called (false).
    private func waitForConnection() -> Bool {
        var fds = [pollfd(fd: listener.fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wake[0], events: Int16(POLLIN), revents: 0)]
        while !stopping.load(ordering: .sequentiallyConsistent) {
            let n = poll(&fds, nfds_t(wake[0] >= 0 ? 2 : 1), -1)
            if n < 0 && errno != EINTR { return true }  // accept says what is wrong
            if fds[1].revents != 0 { return false }
            if fds[0].revents != 0 { return true }
        }
        return false
    }

    private func acceptLoop() {
        while true {
            let conn: UnixSocket
            guard waitForConnection() else { return }
            do {
                conn = try listener.accept()
            } catch let e as Errno {
                if stopping.load(ordering: .sequentiallyConsistent) { return }
                if e.code == EMFILE || e.code == ENFILE || e.code == ENOBUFS || e.code == ENOMEM {
                    log("accept: \(e); waiting")
                    usleep(100_000)
                }
                continue
            } catch { continue }
            guard let peer = PeerCredentials(socket: conn), peer.uid == getuid() else {
                log("refused a connection from another user")
                conn.close()
                continue
            }
            var overCap = false
            let admitted: Bool = state.withLock {
                if stopping.load(ordering: .sequentiallyConsistent) { return false }
                if connections.count >= limits.maximumConnections {
                    overCap = true
                    return false
                }
                connections[ObjectIdentifier(conn)] = conn
                return true
            }
            guard admitted else {
                // Said once a minute at most: a flood must not fill the log.
                let now = MonotonicClock.nanoseconds()
                if now &- lastRefusalLog >= 60_000_000_000 || lastRefusalLog == 0 {
                    lastRefusalLog = now
                    if !stopping.load(ordering: .relaxed) {
                        log("refused a connection: \(limits.maximumConnections) are open, the most vaultd serves at once (VAULTD_MAX_CONNECTIONS)")
                    }
                }
                // Told why before the close (over a limit, an error): the refusal
                // is the reply to the first call, or waits for a client whose send fails. A
                // small message into a new socket's empty buffer; never waited for.
                if overCap { _ = try? conn.sendAll(tooManyConnections, within: 0) }
                conn.close()
                continue
            }
            let t = Thread { [self] in
                // Each connection's thread is `vaultd-conn` in /proc/PID/task/*/comm.
                _ = vault_set_thread_name("vaultd-conn")
                serve(conn, peer: peer)
                state.withLock { _ = connections.removeValue(forKey: ObjectIdentifier(conn)) }
                conn.close()
            }
            t.stackSize = 1 << 20
            t.start()
        }
    }

    /// Stops accepting, waits (up to `timeout` seconds) for in-flight calls, then wakes every
    /// connection thread so they exit.
    func stop(timeout: Double) {
        state.withLock { stopping.store(true, ordering: .sequentiallyConsistent) }
        // Connections still queued stay queued: for systemd's socket, the next vaultd takes them.
        if wake[1] >= 0 { _ = write(wake[1], "x", 1) }
        if !listenerIsShared { listener.shutdown() }
        let deadline = Date().addingTimeInterval(timeout)
        while callsInProgress.load(ordering: .sequentiallyConsistent) > 0 && Date() < deadline { usleep(5_000) }
        let open = state.withLock { Array(connections.values) }
        for c in open { c.shutdown() }
    }

    /// Counts a call in, unless vaultd is stopping. (Counted first, then checked, while
    /// `stop` sets `stopping` first, then waits for the count: a call either sees
    /// `stopping` or is waited for.)
    private func beginCall() -> Bool {
        callsInProgress.add(1, ordering: .sequentiallyConsistent)
        if stopping.load(ordering: .sequentiallyConsistent) {
            endCall()
            return false
        }
        return true
    }

    private func endCall() {
        callsInProgress.subtract(1, ordering: .sequentiallyConsistent)
    }

    /// Sends `reply`, or ReplyTooLarge in its place when it would be a message over the
    /// varlink limit (the peer would have to refuse it: `FrameReader`). Returns whether the
    /// reply went as it was: after ReplyTooLarge the call is over, a stream too.
    @discardableResult
    private func send(_ reply: VarlinkReply, on conn: UnixSocket) throws -> Bool {
        var bytes = reply.json.serialized()
        var fits = bytes.count < Varlink.maximumMessageSize
        if !fits {
            let error = VaultError(
                .replyTooLarge,
                "the answer would be \(bytes.count) bytes, over the \(Varlink.maximumMessageSize)-byte message limit: ask for less (keychain: matchLimit one, no data, a narrower query; preferences: export as binary)",
                extra: ["size": JSON(bytes.count), "limit": JSON(Varlink.maximumMessageSize)])
            bytes = VarlinkReply(error: error).json.serialized()
        }
        // A large reply counts against the message budget until it is sent: a peer that
        // does not read holds it for up to the send timeout.
        var counted = bytes.count - limits.messageAllowance
        if !reserveMessageBytes(counted) {
            bytes = overBudget("a \(bytes.count)-byte reply").json.serialized()
            fits = false
            counted = 0
        }
        defer { releaseMessageBytes(counted) }
        bytes.append(0)
        try conn.sendAll(bytes, within: limits.sendTimeout)
        return fits
    }

    private func serve(_ conn: UnixSocket, peer: PeerCredentials) {
        conn.setTimeouts(receive: min(1, limits.partialMessageTimeout), send: limits.sendTimeout)
        var reader = FrameReader()
        var busyPoll = BusyPoll(windowMicroseconds: limits.busyPollMicroseconds, limit: .oneLessThanCPUs)
        var partialSince: Date?
        // The caller is resolved once per connection, from the kernel's credentials.
        guard let caller = identify(peer) else { return }
        if let app = caller.appID {
            state.withLock { appConnections[app, default: 0] += 1 }
        }
        defer {
            if let app = caller.appID {
                state.withLock {
                    appConnections[app]! -= 1
                    if appConnections[app] == 0 { appConnections[app] = nil }
                }
            }
        }
        // What this connection's incoming bytes count against the message budget: its
        // unread bytes past the allowance, including the call being served (given back
        // once it was answered, at the top of the loop).
        var counted = 0
        defer { releaseMessageBytes(counted) }
        // A call refused over the budget is read to its end and dropped, byte by byte as
        // it comes (nothing kept), so its sender's write completes and it reads the refusal.
        var dropping: Int?
        while true {
            let held = max(0, reader.pendingByteCount - limits.messageAllowance)
            if held < counted {
                releaseMessageBytes(counted - held)
                counted = held
            }
            let frame: [UInt8]
            do {
                guard let f = try reader.nextFrame() else {
                    // Half a message is waiting: the peer has partialMessageTimeout to finish
                    // it, counted from when it began, however slowly it trickles bytes.
                    if reader.pendingByteCount > 0 || dropping != nil {
                        let since = partialSince ?? Date()
                        partialSince = since
                        if Date().timeIntervalSince(since) > limits.partialMessageTimeout {
                            log("dropped a connection that left a message unfinished for \(limits.partialMessageTimeout) s")
                            return
                        }
                    } else {
                        partialSince = nil
                    }
                    let chunk: [UInt8]
                    do {
                        chunk = try conn.receive(polling: &busyPoll, othersBusy: callsInProgress.load(ordering: .relaxed) > 0)
                    } catch let e as Errno where e.code == EAGAIN || e.code == EWOULDBLOCK {
                        if stopping.load(ordering: .relaxed) { return }
                        continue
                    }
                    if chunk.isEmpty { return }
                    if let dropped = dropping {
                        guard let end = chunk.firstIndex(of: 0) else {
                            dropping = dropped + chunk.count
                            if dropped + chunk.count > reader.maximumFrameSize { throw FrameReader.Failure.frameTooLarge(dropped + chunk.count) }
                            continue
                        }
                        // Answered, then closed: the refused call may have been oneway, which
                        // only its dropped text said.
                        _ = try? send(overBudget("a \(dropped + end)-byte call"), on: conn)
                        return
                    }
                    reader.append(chunk)
                    // Without a NUL in the chunk, the unread bytes are one unfinished call
                    // (complete ones were taken before this receive).
                    let wanted = max(0, reader.pendingByteCount - limits.messageAllowance)
                    if wanted > counted && !chunk.contains(0) {
                        guard reserveMessageBytes(wanted - counted) else {
                            dropping = reader.pendingByteCount
                            reader = FrameReader()
                            releaseMessageBytes(counted)
                            counted = 0
                            continue
                        }
                        counted = wanted
                    }
                    continue
                }
                frame = f
                partialSince = nil
            } catch FrameReader.Failure.frameTooLarge {
                _ = try? send(VarlinkReply(error: .invalidParameter("message", "a message may be at most \(Varlink.maximumMessageSize) bytes")), on: conn)
                return
            } catch {
                return
            }
            let call: VarlinkCall
            do {
                call = try VarlinkCall(json: try JSON.parse(frame))
            } catch let e as VaultError {
                _ = try? send(VarlinkReply(error: e), on: conn)
                return
            } catch {
                _ = try? send(VarlinkReply(error: .invalidParameter("message", "\(error)")), on: conn)
                return
            }
            guard beginCall() else { return }
            // A parameter the method does not declare is refused before anything runs (as
            // sd-varlink and the reference implementation do); the connection stays usable.
            // So is an upgrade of the connection, which none of vaultd's methods offers: the
            // refusal is not the reply confirming an upgrade, so the connection goes on as a
            // varlink one (varlink.org/Method-Call). (Unknown methods go on to MethodNotFound.)
            var refusal: VaultError?
            if let unknown = VarlinkInterfaces.undeclaredParameter(in: call) {
                refusal = .invalidParameter(unknown, "not a parameter of \(call.method)")
            } else if call.upgrade && VarlinkInterfaces.inputParameters[call.method] != nil {
                refusal = .invalidParameter("upgrade", "\(call.method) does not upgrade the connection to another protocol")
            }
            if let refusal {
                let sent = call.oneway || (try? send(VarlinkReply(error: refusal), on: conn)) != nil
                endCall()
                if !sent { return }
                continue
            }
            // A oneway call gets no reply, so no stream either (`more` is moot then).
            if Dispatcher.streamingMethods.contains(call.method) && call.more && !call.oneway {
                endCall()
                // The stream outlives the call: its bytes are not held meanwhile.
                releaseMessageBytes(counted)
                counted = 0
                // A stream refused before it began (an error without `continues`, the call's
                // final reply) leaves the connection free for the next call, as any reply does.
                if stream(call, on: conn, caller: caller) { continue }
                return
            }
            let reply: VarlinkReply
            do {
                reply = VarlinkReply(parameters: try dispatcher.handle(call, caller: caller))
            } catch let e as VaultError {
                reply = VarlinkReply(error: e)
            } catch {
                reply = VarlinkReply(error: VaultError(.internalError, "\(error)"))
            }
            let sent = call.oneway || (try? send(reply, on: conn)) != nil
            endCall()
            if !sent { return }
        }
    }

    /// Serves a `more` call: its first replies, then one per event, until the peer closes, the
    /// observer falls `EventQueue.capacity` events behind, or (an app's stream) its install ends
    /// or cannot be checked. Returns true when the call was refused before it streamed (one
    /// error reply without `continues`, its final reply), after which the connection serves
    /// the next call (varlink.org/Method-Call); false when it is to close.
    private func stream(_ call: VarlinkCall, on conn: UnixSocket, caller: Caller) -> Bool {
        let relay = StreamRelay()
        let queue = relay.queue
        // Observe before taking the snapshot, so no change falls between the two.
        let (token, emittedThrough) = dispatcher.vault.addObserverReportingSequence { relay.receive($0) }
        defer { dispatcher.vault.removeObserver(token) }
        let subscription: Dispatcher.Subscription
        do {
            subscription = try dispatcher.subscribe(call, caller: caller, emittedThrough: emittedThrough)
        } catch let e as VaultError {
            return (try? send(VarlinkReply(error: e), on: conn)) == true
        } catch {
            return false
        }
        relay.start(subscription.reply)
        for reply in subscription.initial {
            guard (try? send(VarlinkReply(parameters: reply, continues: true), on: conn)) == true else { return false }
        }
        while !stopping.load(ordering: .relaxed) {
            guard let batch = queue.drain(waitingUpTo: 1) else {
                log("an observer fell \(queue.capacity) events behind; its stream was closed (a client that connects again starts from a snapshot)")
                return false
            }
            // An app's stream ends when its install does (uninstall or reinstall), as its
            // other calls do: an instance of the earlier install must not go on receiving
            // what the next install writes to the same domain. Checked at least once a second.
            // Another error (the store failing for a moment) closes the stream without an
            // error reply: a client ends its observation for good on one, but connects again
            // (and starts from a snapshot) when the connection just closes.
            do {
                try subscription.recheck()
            } catch let e as VaultError where e.code == .missingEntitlement {
                // The connection's identity is stale: every further call would get the
                // same error (which says to reconnect), so it closes.
                _ = try? send(VarlinkReply(error: e), on: conn)
                return false
            } catch {
                log("could not check an app's stream against its install (\(error)); closed it")
                return false
            }
            for params in batch {
                guard (try? send(VarlinkReply(parameters: params, continues: true), on: conn)) == true else { return false }
            }
            if peerClosed(conn) { return false }
        }
        return false
    }

    /// True when the peer has closed the connection (POLLHUP: both directions). A peer that
    /// only shut down its writing side (POLLRDHUP, a zero-length read) still reads: a
    /// subscriber with nothing more to send may do that, and its stream goes on.
    private func peerClosed(_ conn: UnixSocket) -> Bool {
        var pfd = pollfd(fd: conn.fd, events: 0, revents: 0)
        guard poll(&pfd, 1, 0) > 0 else { return false }
        return pfd.revents & Int16(POLLHUP | POLLERR) != 0
    }
}

/// Turns engine events into one stream's replies. Events that arrive before the
/// subscription is ready are held and replayed, so none falls between observing and the
/// snapshot the stream starts with.
final class StreamRelay: @unchecked Sendable {
    let queue = EventQueue()
    private let lock = NSLock()
    private var reply: (@Sendable (VaultEvent) -> JSONObject?)?
    private var held: [VaultEvent] = []

    func receive(_ event: VaultEvent) {
        lock.withLock {
            guard let reply else { return held.append(event) }
            if let r = reply(event) { queue.push(r) }
        }
    }

    func start(_ reply: @escaping @Sendable (VaultEvent) -> JSONObject?) {
        lock.withLock {
            self.reply = reply
            for e in held { if let r = reply(e) { queue.push(r) } }
            held.removeAll()
        }
    }
}

/// Replies waiting to be streamed to one observer.
final class EventQueue: @unchecked Sendable {
    private let condition = NSCondition()
    private var items: [JSONObject] = []
    /// An observer this far behind (not reading its stream, during a burst such as the
    /// import of a large domain) is dropped: its stream ends, and a client that connects
    /// again starts from a snapshot. (Dropping the oldest events instead left its copy
    /// missing changes for good.)
    let capacity: Int
    private var overflowed = false

    init(capacity: Int = 100_000) { self.capacity = capacity }

    func push(_ item: JSONObject) {
        condition.withLock {
            guard !overflowed else { return }
            items.append(item)
            if items.count > capacity {
                overflowed = true
                items.removeAll()
            }
            condition.signal()
        }
    }

    /// The replies queued, waiting up to `seconds` for one; nil once the queue overflowed
    /// (the stream is to end).
    func drain(waitingUpTo seconds: Double) -> [JSONObject]? {
        condition.withLock {
            if items.isEmpty && !overflowed { _ = condition.wait(until: Date().addingTimeInterval(seconds)) }
            if overflowed { return nil }
            defer { items.removeAll() }
            return items
        }
    }
}

/// The kernel's record of a peer (`SO_PEERCRED`).
struct PeerCredentials {
    var pid: pid_t
    var uid: uid_t
    var gid: gid_t

    init?(socket: UnixSocket) {
        var pid: pid_t = 0, uid: uid_t = 0, gid: gid_t = 0
        guard vault_peer_cred(socket.fd, &pid, &uid, &gid) == 0 else { return nil }
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }
}
