import CVaultSys
import Foundation
import Synchronization
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Accepts connections on the listening socket, checks each peer with SO_PEERCRED, and
/// serves each connection on its own thread: frames in, dispatch, replies out, in order.
final class Server: Sendable {
    let listener: UnixSocket
    /// vaultd's log: refusals, budgets, accept failures.
    let logger: Logger
    /// The listener is systemd's (socket activation): systemd keeps the same socket and
    /// starts the next vaultd on it, so `stop` must leave it able to take connections (a
    /// `shutdown` would act on systemd's copy too: every later connect refused).
    let listenerIsShared: Bool
    /// `stop` writes to `wake[1]` to end the accept loop, which polls the listener and `wake[0]`.
    private let wake: [Int32]
    let dispatcher: Dispatcher
    let identify: @Sendable (PeerCredentials) -> Result<VaultSession, VaultError>
    let limits: Limits
    /// The open connections, counted per app and per identity.
    private struct Tables {
        var connections: [ObjectIdentifier: UnixSocket] = [:]
        var appConnections: [String: Int] = [:]
        /// Open connections per identity (`identityKey`), for `maximumConnectionsPerPeer`.
        var identityConnections: [String: Int] = [:]
        /// When a refusal over `maximumConnectionsPerPeer` was last logged.
        var lastPeerRefusalLog: UInt64 = 0
    }
    private let tables = Mutex(Tables())
    /// When the accept loop last logged a refusal over `maximumConnections` (its thread only).
    private let lastRefusalLog = Atomic<UInt64>(0)
    /// What a connection over `maximumConnections` is sent before it is closed.
    private let tooManyConnections: [UInt8]
    /// Calls being served. Counted without a lock, as is `stopping`: every call touches
    /// them, from every connection's thread. A connection also polls for its next call only
    /// while no other call is being served.
    private let callsInProgress = Atomic<Int>(0)
    private let stopping = Atomic<Bool>(false)
    /// Whether another call is being served now (a connection then does not busy-poll).
    var othersAreBusy: Bool { callsInProgress.load(ordering: .relaxed) > 0 }
    var isStopping: Bool { stopping.load(ordering: .relaxed) }
    /// When an observer's drop was last logged (all connections).
    private static let lastObserverDropLog = Mutex<UInt64>(0)
    /// When a refusal over the reply budget was last logged (all connections).
    private static let lastReplyBudgetLog = Mutex<UInt64>(0)

    /// True when `last` (a monotonic time in ns, 0: never) is a minute or more ago, and then
    /// sets it to now: what is logged this way is said once a minute at most.
    private static func onceAMinute(_ last: borrowing Mutex<UInt64>) -> Bool {
        let now = MonotonicClock.nanoseconds()
        return last.withLock { t in
            guard t == 0 || now &- t >= 60_000_000_000 else { return false }
            t = now
            return true
        }
    }
    /// `identityConnections`' key for an app, or for one program of the owner's: its
    /// executable's device and inode, as identified (an app ID is reverse-DNS, never this).
    static func identityKey(_ session: VaultSession, _ peer: PeerCredentials) -> String {
        if let app = session.appID { return app }
        guard let exe = peer.identifiedExecutable else { return "(owner)" }
        return "(owner) \(exe.device):\(exe.inode)"
    }
    /// Bytes counted against `Limits.messageBudget`, all connections together.
    private let messageBytes = Atomic<Int>(0)
    /// Bytes counted against `Limits.replyBudget`, all connections together.
    private let replyBytes = Atomic<Int>(0)

    /// Counts `bytes` more in `counter`; false (nothing counted) when that would pass `budget`.
    private static func reserve(_ bytes: Int, in counter: borrowing Atomic<Int>, budget: Int)
        -> Bool
    {
        guard bytes > 0 else { return true }
        var current = counter.load(ordering: .relaxed)
        while current + bytes <= budget {
            let (exchanged, original) = counter.weakCompareExchange(
                expected: current, desired: current + bytes, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
        return false
    }

    /// Counts `bytes` more against the message budget; false (nothing counted) when that
    /// would pass it.
    func reserveMessageBytes(_ bytes: Int) -> Bool {
        Self.reserve(bytes, in: messageBytes, budget: limits.messageBudget)
    }

    /// `reserveMessageBytes`, waiting up to `seconds` for other connections to give bytes
    /// back (a peer that does not read its reply gives it up after `stalledSendTimeout`).
    func reserveMessageBytes(_ bytes: Int, waitingUpTo seconds: Double) -> Bool {
        if reserveMessageBytes(bytes) { return true }
        guard bytes <= limits.messageBudget else { return false }
        let deadline = MonotonicClock.nanoseconds() + UInt64(seconds * 1e9)
        while MonotonicClock.nanoseconds() < deadline && !stopping.load(ordering: .relaxed) {
            usleep(10_000)
            if reserveMessageBytes(bytes) { return true }
        }
        return false
    }

    func releaseMessageBytes(_ bytes: Int) {
        if bytes > 0 { messageBytes.subtract(bytes, ordering: .relaxed) }
    }

    /// The reply budget one call holds for its reply (`Limits.replyBudget`): what
    /// `Dispatcher.replyBound` says before the call runs, and what a preference read adds
    /// once the store says what its reply holds (`ReplyReserving`). A reply that may take
    /// more than the whole budget holds all of it: it is built alone. Given back once the
    /// reply is sent (`release`). Used on its connection's thread only.
    final class ReplyReservation: ReplyReserving {
        let server: Server
        let method: String
        /// Bytes held.
        private(set) var bytes = 0
        /// Until when this reply may wait for room (monotonic ns; from its first wait).
        private var deadline: UInt64?

        init(_ server: Server, method: String) {
            self.server = server
            self.method = method
        }

        private func wanted(_ total: Int) -> Int { min(total, server.limits.replyBudget) }

        func reserveNow(_ total: Int) -> Bool {
            let more = wanted(total) - bytes
            guard more > 0 else { return true }
            guard Server.reserve(more, in: server.replyBytes, budget: server.limits.replyBudget)
            else { return false }
            bytes += more
            return true
        }

        func waitForRoom(_ total: Int) throws {
            let deadline =
                self.deadline ?? MonotonicClock.nanoseconds()
                + UInt64(server.limits.budgetWait * 1e9)
            self.deadline = deadline
            while server.replyBytes.load(ordering: .relaxed) + wanted(total) - bytes
                > server.limits.replyBudget
            {
                if MonotonicClock.nanoseconds() >= deadline
                    || server.stopping.load(ordering: .relaxed)
                {
                    throw server.overReplyBudget(method, total)
                }
                usleep(10_000)
            }
        }

        /// `reserveNow`, waiting up to `Limits.budgetWait` for room. Throws RateLimited.
        func reserve(_ total: Int) throws {
            while !reserveNow(total) { try waitForRoom(total) }
        }

        func release() {
            if bytes > 0 { server.replyBytes.subtract(bytes, ordering: .relaxed) }
            bytes = 0
        }
    }

    /// RateLimited, for a message over the budget: `what` it was.
    func overBudget(_ what: String) -> VarlinkReply {
        let mib = limits.messageBudget >> 20
        logger.warning("refused \(what): messages in flight for other connections hold \(mib) MiB")
        return VarlinkReply(
            error: VaultError(
                .rateLimited,
                "vaultd holds \(mib) MiB of other connections' messages in flight; ask again in a second",
                extra: ["retryAfter": JSON(1.0)]))
    }

    /// RateLimited, for a call whose reply does not fit the reply budget now.
    private func overReplyBudget(_ method: String, _ bytes: Int) -> VaultError {
        let mib = limits.replyBudget >> 20
        // Said once a minute at most: many connections asking at once must not fill the log.
        if Self.onceAMinute(Self.lastReplyBudgetLog) {
            logger.warning(
                "refused a \(method) call: replies being built and sent for other connections hold the \(mib) MiB reply budget"
            )
        }
        return VaultError(
            .rateLimited,
            "vaultd is building and sending \(mib) MiB of other connections' replies, its reply budget, and this reply may take \((bytes + (1 << 20) - 1) >> 20) MiB; ask again in a second (or ask for less)",
            extra: ["retryAfter": JSON(1.0)])
    }

    init(
        listener: UnixSocket, listenerIsShared: Bool = false, dispatcher: Dispatcher,
        limits: Limits = Limits(), logger: Logger,
        identify: @escaping @Sendable (PeerCredentials) -> Result<VaultSession, VaultError>
    ) {
        self.logger = logger
        self.listener = listener
        self.listenerIsShared = listenerIsShared
        if let pipe = try? SystemCall.pipe() {
            wake = [pipe.read, pipe.write]
            for fd in wake { _ = try? SystemCall.fcntl(fd, F_SETFL, O_NONBLOCK) }
        } else {
            wake = [-1, -1]
        }
        // Every message then carries its sender's pid (SCM_CREDENTIALS), also what a client
        // sends before its connection is accepted: accepted sockets take the option over.
        do {
            try retryingOnInterrupt("setsockopt") { vault_set_passcred(listener.fd) }
        } catch {
            logger.warning(
                "cannot set SO_PASSCRED on the listening socket: \(String(cString: strerror(error.code)))"
            )
        }
        self.limits = limits
        self.dispatcher = dispatcher
        self.identify = identify
        tooManyConnections =
            VarlinkReply(
                error: VaultError(
                    .rateLimited,
                    "vaultd is serving \(limits.maximumConnections) connections, the most it serves at once (VAULTD_MAX_CONNECTIONS); try again shortly",
                    extra: ["retryAfter": JSON(1.0)])
            ).checkedJSON.serialized() + [0]
    }

    /// App IDs with at least one open connection.
    var runningApps: Set<String> { tables.withLock { Set($0.appConnections.keys) } }

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
        var fds = [
            pollfd(fd: listener.fd, events: Int16(POLLIN), revents: 0),
            pollfd(fd: wake[0], events: Int16(POLLIN), revents: 0),
        ]
        while !stopping.load(ordering: .sequentiallyConsistent) {
            let count = wake[0] >= 0 ? 2 : 1
            let polled = fds.withUnsafeMutableBufferPointer {
                try? SystemCall.poll(
                    UnsafeMutableBufferPointer(rebasing: $0[..<count]), timeout: -1)
            }
            if polled == nil { return true }  // accept says what is wrong
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
                if e.code == Errno.tooManyOpenFiles || e.code == Errno.tooManyOpenFilesInSystem
                    || e.code == Errno.noBufferSpace || e.code == Errno.noMemory
                {
                    logger.warning("accept: \(e); waiting")
                    usleep(100_000)
                }
                continue
            } catch { continue }
            guard let peer = PeerCredentials(socket: conn) else {
                PeerIdentity.refusals.log(
                    "no-pidfd", to: logger, .warning,
                    "refused a connection: the kernel names no process for it (SO_PEERCRED, SO_PEERPIDFD or pidfd_open: \(String(cString: strerror(errno))))"
                )
                conn.close()
                continue
            }
            guard peer.uid == getuid() else {
                PeerIdentity.refusals.log(
                    "other-user", to: logger, .warning, "refused a connection from another user")
                conn.close()
                continue
            }
            _ = vault_set_passcred(conn.fd)
            var overCap = false
            let admitted: Bool = tables.withLock {
                if stopping.load(ordering: .sequentiallyConsistent) { return false }
                if $0.connections.count >= limits.maximumConnections {
                    overCap = true
                    return false
                }
                $0.connections[ObjectIdentifier(conn)] = conn
                return true
            }
            guard admitted else {
                // Said once a minute at most: a flood must not fill the log.
                let now = MonotonicClock.nanoseconds()
                let last = lastRefusalLog.load(ordering: .relaxed)
                if now &- last >= 60_000_000_000 || last == 0 {
                    lastRefusalLog.store(now, ordering: .relaxed)
                    if !stopping.load(ordering: .relaxed) {
                        logger.warning(
                            "refused a connection: \(limits.maximumConnections) are open, the most vaultd serves at once (VAULTD_MAX_CONNECTIONS)"
                        )
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
                tables.withLock { _ = $0.connections.removeValue(forKey: ObjectIdentifier(conn)) }
                conn.close()
            }
            t.stackSize = 1 << 20
            t.start()
        }
    }

    /// Stops accepting, waits (up to `timeout` seconds) for in-flight calls, then wakes every
    /// connection thread so they exit.
    func stop(timeout: Double) {
        tables.withLock { _ in stopping.store(true, ordering: .sequentiallyConsistent) }
        // Connections still queued stay queued: for systemd's socket, the next vaultd takes them.
        if wake[1] >= 0 {
            _ = try? [UInt8(ascii: "x")].withUnsafeBytes { try SystemCall.write(wake[1], $0) }
        }
        if !listenerIsShared { listener.shutdown() }
        let deadline = Date().addingTimeInterval(timeout)
        while callsInProgress.load(ordering: .sequentiallyConsistent) > 0 && Date() < deadline {
            usleep(5_000)
        }
        let open = tables.withLock { Array($0.connections.values) }
        for c in open { c.shutdown() }
    }

    /// Counts a call in, unless vaultd is stopping. (Counted first, then checked, while
    /// `stop` sets `stopping` first, then waits for the count: a call either sees
    /// `stopping` or is waited for.)
    func beginCall() -> Bool {
        callsInProgress.add(1, ordering: .sequentiallyConsistent)
        if stopping.load(ordering: .sequentiallyConsistent) {
            endCall()
            return false
        }
        return true
    }

    func endCall() {
        callsInProgress.subtract(1, ordering: .sequentiallyConsistent)
    }

    /// Sends `reply`, or ReplyTooLarge in its place when it would be a message over the
    /// varlink limit (the peer would have to refuse it: `FrameReader`). Returns whether the
    /// reply went as it was: after ReplyTooLarge the call is over, a stream too. A reply
    /// holding `secrets`' place-holders is sent from secure memory with the secrets in
    /// their place (`CallSecrets.reply`), wiped once sent.
    /// `reserved`: bytes of the reply budget held for this reply since before it was built;
    /// a reply within them is not counted against the message budget again.
    @discardableResult
    func send(
        _ reply: VarlinkReply, on conn: UnixSocket, secrets: CallSecrets? = nil, reserved: Int = 0
    ) throws -> Bool {
        try send(
            serialized: reply.checkedJSON.serialized(), on: conn, secrets: secrets,
            reserved: reserved)
    }

    /// `send` of a reply serialized already (without its NUL).
    @discardableResult
    private func send(
        serialized reply: [UInt8], on conn: UnixSocket, secrets: CallSecrets? = nil,
        reserved: Int = 0
    ) throws -> Bool {
        var bytes = reply
        var secure = secrets?.reply(substitutedInto: bytes)
        // The size with the secrets in (and the NUL `secure` ends with).
        let size = secure.map { $0.count - 1 } ?? bytes.count
        var fits = size < Varlink.maximumMessageSize
        if !fits {
            secure = nil
            let error = VaultError(
                .replyTooLarge,
                "the answer would be \(size) bytes, over the \(Varlink.maximumMessageSize)-byte message limit: ask for less (keychain: matchLimit one, no data, a narrower query; preferences: export as binary)",
                extra: ["size": JSON(size), "limit": JSON(Varlink.maximumMessageSize)])
            bytes = VarlinkReply(error: error).checkedJSON.serialized()
        }
        // A large reply counts against the message budget until it is sent (unless the reply
        // budget holds it already); its peer must read it at once and briskly
        // (`stalledSendTimeout`, `minimumSendRate`), or it is given up: a peer that does not
        // read holds the budget about a second.
        var counted =
            (secure.map { $0.count - 1 } ?? bytes.count) - max(limits.messageAllowance, reserved)
        if !reserveMessageBytes(counted, waitingUpTo: limits.budgetWait) {
            secure = nil
            bytes = overBudget("a \(size)-byte reply").checkedJSON.serialized()
            fits = false
            counted = 0
        }
        defer { releaseMessageBytes(counted) }
        let total = secure?.count ?? bytes.count + 1
        let large = total - 1 > limits.messageAllowance
        let within =
            large
            ? min(
                limits.sendTimeout,
                limits.stalledSendTimeout + Double(total) / Double(limits.minimumSendRate))
            : limits.sendTimeout
        let stall = large ? limits.stalledSendTimeout : nil
        if let secure {
            try secure.withUnsafeBytes { try conn.sendAll($0, within: within, stalledAfter: stall) }
            return fits
        }
        bytes.append(0)
        try conn.sendAll(bytes, within: within, stalledAfter: stall)
        return fits
    }

    /// Serves one accepted connection on its thread: identifies the peer, admits it under
    /// its identity's share of the connections, and runs its `Connection`.
    private func serve(_ conn: UnixSocket, peer: PeerCredentials) {
        conn.setTimeouts(receive: min(1, limits.partialMessageTimeout), send: limits.sendTimeout)
        // The caller is resolved once per connection, from the kernel's credentials.
        let session: VaultSession
        switch identify(peer) {
        case .success(let c): session = c
        case .failure(let refusal):
            // The reason, as the reply to whatever the peer sends first, then the close.
            _ = try? conn.sendAll(
                VarlinkReply(error: refusal).checkedJSON.serialized() + [0], within: 1)
            return
        }
        guard let identity = admit(session, peer, on: conn) else { return }
        defer { release(identity, session) }
        Connection(server: self, socket: conn, peer: peer, session: session).run()
    }

    /// Each identity has its own share of the connections: one app (or sandbox), or one
    /// program of the owner's, holding as many as it likes leaves room for every other.
    /// Returns the identity counted (`release` it), or nil when its share is taken (the peer
    /// was told, RateLimited).
    private func admit(_ session: VaultSession, _ peer: PeerCredentials, on conn: UnixSocket)
        -> String?
    {
        let identity = Self.identityKey(session, peer)
        var logRefusal = false
        let admitted: Bool = tables.withLock { tables in
            guard
                tables.identityConnections[identity, default: 0]
                    < limits.maximumConnectionsPerPeer
            else {
                let now = MonotonicClock.nanoseconds()
                let last = tables.lastPeerRefusalLog
                if last == 0 || now &- last >= 60_000_000_000 {
                    tables.lastPeerRefusalLog = now
                    logRefusal = true
                }
                return false
            }
            tables.identityConnections[identity, default: 0] += 1
            if let app = session.appID { tables.appConnections[app, default: 0] += 1 }
            return true
        }
        if admitted { return identity }
        // Said once a minute at most (a flood must not fill the log); the app ID is one
        // vaultd registered, bounded and printable.
        if logRefusal {
            logger.warning(
                "refused connections of \(session.appID.map { "app \($0)" } ?? "a program of the owner's (\(identity))"): \(limits.maximumConnectionsPerPeer) are open, the most one identity holds (VAULTD_MAX_CONNECTIONS_PER_PEER)"
            )
        }
        let refusal = VaultError(
            .rateLimited,
            "\(limits.maximumConnectionsPerPeer) connections of this \(session.appID == nil ? "program" : "app") are open, the most vaultd serves for one (VAULTD_MAX_CONNECTIONS_PER_PEER); close one or try again shortly",
            extra: ["retryAfter": JSON(1.0)])
        _ = try? conn.sendAll(
            VarlinkReply(error: refusal).checkedJSON.serialized() + [0], within: 0)
        return nil
    }

    /// Gives back the connection `admit` counted for `identity`.
    private func release(_ identity: String, _ session: VaultSession) {
        tables.withLock { tables in
            tables.identityConnections[identity]! -= 1
            if tables.identityConnections[identity] == 0 {
                tables.identityConnections[identity] = nil
            }
            if let app = session.appID {
                tables.appConnections[app]! -= 1
                if tables.appConnections[app] == 0 { tables.appConnections[app] = nil }
            }
        }
    }

    /// Serves a `more` call: its first replies, then one per event, until the peer closes, the
    /// observer falls `observerQueueBytes` behind, or (an app's stream) its install ends
    /// or cannot be checked. Returns true when the call was refused before it streamed (one
    /// error reply without `continues`, its final reply), after which the connection serves
    /// the next call (varlink.org/Method-Call); false when it is to close.
    func stream(_ call: VarlinkCall, on conn: UnixSocket, session: VaultSession) -> Bool {
        let relay = StreamRelay(capacityBytes: limits.observerQueueBytes)
        let queue = relay.queue
        // The first replies (a preferences Observe: a snapshot of every domain it watches)
        // count against the reply budget before they are built, until they are sent.
        let reservation = ReplyReservation(self, method: call.method)
        defer { reservation.release() }
        var subscription: Dispatcher.Subscription
        do {
            // The session's Observe delivers to the relay from before the snapshot is read,
            // so no change falls between the two; it ends when `subscription` goes.
            subscription = try dispatcher.subscribe(
                call, session: session, events: { relay.receive($0) }, reply: reservation)
        } catch let e as VaultError {
            return (try? send(VarlinkReply(error: e), on: conn)) == true
        } catch {
            return false
        }
        defer { subscription.events.cancel() }
        relay.start(subscription.map)
        for reply in subscription.initial {
            guard
                (try? send(
                    VarlinkReply(parameters: reply, continues: true), on: conn,
                    reserved: reservation.bytes)) == true
            else { return false }
        }
        // Sent: the stream no longer holds them, nor their share of the budget.
        subscription.initial = []
        reservation.release()
        while !stopping.load(ordering: .relaxed) {
            guard let batch = queue.drain(waitingUpTo: 1) else {
                // Said once a minute at most: a client that reconnects and stalls again
                // must not fill the log.
                if Self.onceAMinute(Self.lastObserverDropLog) {
                    logger.warning(
                        "an observer fell \(queue.capacityBytes >> 20) MiB of events behind; its stream was closed (a client that connects again starts from a snapshot)"
                    )
                }
                // Told why, if its socket still has room (it is not read, so never waited for).
                let error = VaultError(
                    .rateLimited,
                    "this Observe stream fell \(queue.capacityBytes >> 20) MiB of events behind (it was not read); observe again, starting from a snapshot",
                    extra: ["retryAfter": JSON(0.0)])
                _ = try? conn.sendAll(
                    VarlinkReply(error: error).checkedJSON.serialized() + [0], within: 0)
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
                logger.warning(
                    "could not check an app's stream against its install (\(error)); closed it")
                return false
            }
            for reply in batch {
                guard (try? send(serialized: reply, on: conn)) == true else { return false }
            }
            if peerClosed(conn) { return false }
        }
        return false
    }

    /// True when the peer has closed the connection (POLLHUP: both directions). A peer that
    /// only shut down its writing side (POLLRDHUP, a zero-length read) still reads: a
    /// subscriber with nothing more to send may do that, and its stream goes on.
    private func peerClosed(_ conn: UnixSocket) -> Bool {
        let revents = (try? SystemCall.poll(conn.fd, events: 0, timeout: 0)) ?? 0
        return revents & Int16(POLLHUP | POLLERR) != 0
    }
}

extension VarlinkReply {
    /// `json`, the form sent. In debug builds and tests an error reply is first checked
    /// against its error's declaration (its name declared by a served interface, its
    /// parameters of the declared types): a mismatch is a bug in vaultd, said on stderr, then
    /// an assertion failure. (Replies to calls are checked by `Dispatcher`, which knows the method.)
    var checkedJSON: JSON {
        let json = self.json
        #if DEBUG
        if let error,
            let problem = VarlinkValidation.errorProblem(
                name: error, parameters: json["parameters"]?.objectValue ?? [:])
        {
            logger.error("an error reply does not match its declaration: \(problem)")
            assertionFailure("an error reply does not match its declaration: \(problem)")
        }
        #endif
        return json
    }
}
