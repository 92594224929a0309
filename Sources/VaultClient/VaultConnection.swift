import Foundation
import Synchronization
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Threads of this process waiting for the reply to a call (`VaultConnection.call`).
private let callsAwaitingReplies = Atomic<Int>(0)

/// One varlink connection to vaultd. Calls are serialized on the connection (varlink answers
/// in order); it is safe to share between threads.
///
/// When vaultd has gone away since the last call (restarted, or it closed the connection), a
/// call connects again and is sent on the new connection, as an XPC connection to a
/// restarted cfprefsd or securityd recovers: only a call whose request could not be sent is
/// sent again (vaultd never saw it whole), never one that was sent and got no reply (that
/// one throws ConnectionFailed: it may or may not have been done).
///
/// `@unchecked Sendable`: a call runs under `lock`; `stream` is replaced under `lock` and
/// `streamLock` and closed under `streamLock`; `closed` is atomic.
public final class VaultConnection: @unchecked Sendable {
    /// The current connection; replaced (under `lock` and `streamLock`) when a call finds
    /// that vaultd closed it.
    private var stream: VarlinkStream
    /// Guards `stream` for `close()`, which cannot wait for `lock` (a blocked `stream` call holds it).
    private let streamLock = NSLock()
    /// Set by `close()`: calls fail from then on and never connect again.
    private let closed = Atomic<Bool>(false)
    private let lock = NSLock()
    /// The socket path this connection was made to.
    public let socketPath: String
    /// Seconds a call waits for vaultd to take its request and to answer (0: for ever; by
    /// default `defaultReplyTimeout`). Setting it applies to the calls after (vaultctl
    /// lifts it for a cache purge, which removes files one by one: minutes for a large
    /// cache).
    public var replyTimeout: Double {
        get { lock.withLock { timeout } }
        set {
            lock.withLock {
                timeout = max(0, newValue)
                stream.socket.setTimeouts(receive: timeout, send: timeout)
            }
        }
    }
    /// `replyTimeout`'s value (under `lock`).
    private var timeout: Double

    /// Seconds a call waits for vaultd when the connection names no `replyTimeout` and
    /// `VAULT_TIMEOUT` is not set: 60, more than any call but those removing files takes
    /// (an unlock's Argon2id included). A hung vaultd (stopped, deadlocked) still accepts
    /// connections, so without a bound every call of an app would wait for ever.
    public static let defaultReplyTimeout: Double = 60

    /// Seconds the calls that remove files one by one (a cache purge, an app's uninstall)
    /// wait for their reply instead of `replyTimeout` (0: for ever; by default 900, as
    /// 200,000 files took three minutes on a loaded machine).
    public var fileRemovalTimeout: Double {
        get { lock.withLock { removalTimeout } }
        set { lock.withLock { removalTimeout = max(0, newValue) } }
    }
    /// `fileRemovalTimeout`'s value (under `lock`).
    private var removalTimeout: Double = 900

    /// The reply timeout from the environment: `VAULT_TIMEOUT` (seconds, 0: for ever), else
    /// `defaultReplyTimeout`. Throws InvalidParameter `VAULT_TIMEOUT` for a value that is
    /// not a number of seconds from 0: a typo must not quietly mean 60 s, nor for ever.
    public static func replyTimeout(
        environment env: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> Double {
        guard let v = env["VAULT_TIMEOUT"], !v.isEmpty else { return defaultReplyTimeout }
        guard let t = Double(v), t.isFinite, t >= 0 else {
            throw VaultError.invalidParameter(
                "VAULT_TIMEOUT",
                "must be a number of seconds (0 or more; 0: for ever), not '\(v.prefix(20))'")
        }
        return t
    }

    /// The socket path a client uses: `VAULTD_SOCKET`, else `$XDG_RUNTIME_DIR/vaultd/vaultd.sock`,
    /// else `/tmp/vaultd-$UID/vaultd.sock` (docs/configuration.md).
    public static func defaultSocketPath(
        environment env: [String: String] = ProcessInfo.processInfo.environment
    ) -> String {
        if let s = env["VAULTD_SOCKET"], !s.isEmpty { return s }
        if let run = env["XDG_RUNTIME_DIR"], !run.isEmpty { return run + "/vaultd/vaultd.sock" }
        return "/tmp/vaultd-\(getuid())/vaultd.sock"
    }

    /// Connects to vaultd at `socketPath` (default: `defaultSocketPath()`). `replyTimeout`:
    /// seconds each call may wait for vaultd (nil, the default: `VAULT_TIMEOUT`, else
    /// `defaultReplyTimeout`, 60; 0: for ever); a vaultd that is stopped or hung still
    /// accepts connections, so a call needs a bound. Past it the call throws
    /// ConnectionFailed and the connection is shut (a late reply would otherwise answer the
    /// next call). An Observe stream waits that long for its first reply, then for ever for
    /// events. Throws `VaultError` ConnectionFailed when nothing answers at `socketPath`, or
    /// when what answers is not served by this user's uid (SO_PEERCRED; nothing is sent to
    /// it); InvalidParameter `VAULT_TIMEOUT` for a value that is not a number of seconds.
    public init(socketPath: String? = nil, replyTimeout: Double? = nil) throws {
        let path = socketPath ?? Self.defaultSocketPath()
        self.socketPath = path
        let timeout = max(0, try replyTimeout ?? Self.replyTimeout())
        self.timeout = timeout
        stream = try Self.open(path, timeout: timeout)
    }

    /// A new connection to `path`. Throws ConnectionFailed.
    private static func open(_ path: String, timeout: Double) throws -> VarlinkStream {
        do {
            let s = try UnixSocket()
            // Before the connect: SO_SNDTIMEO also bounds an AF_UNIX connect's wait for room
            // in vaultd's listen backlog, which a stopped vaultd never empties (connections
            // whose clients gave up and closed them stay queued: 129 of them, and every
            // connect blocked for ever). Past it the connect fails with EAGAIN.
            if timeout > 0 { s.setTimeouts(receive: timeout, send: timeout) }
            try s.connect(path: path)
            // Only our own vaultd is told anything: another user's process listening on the
            // path (a squatted /tmp/vaultd-$UID, a socket in a shared directory) would get
            // every secret and passphrase sent. vaultd checks its peers the same way.
            let server = s.peerUID()
            guard let uid = server, uid == getuid() else {
                s.close()
                throw VaultError.connectionFailed(
                    "\(path) is served by \(server.map { "uid \($0)" } ?? "an unknown user"), not by this user (uid \(getuid())): refusing to talk to it, as it may be another user's process posing as vaultd; start your own vaultd on a path only you can write to"
                )
            }
            return VarlinkStream(socket: s)
        } catch let e as VaultError {
            throw e
        } catch let e as Errno where e.code == Errno.wouldBlock {
            throw VaultError.connectionFailed(
                "vaultd did not take the connection at \(path) within \(timeout) s (is it stopped or hung?)"
            )
        } catch {
            throw VaultError.connectionFailed(
                "cannot connect to vaultd at \(path): \(error) (is vaultd running?)")
        }
    }

    /// Calls `method` (e.g. `io.vaultd.Keychain.Add`) with `parameters` as the varlink
    /// interfaces define them and returns the reply's parameters. Throws the reply's `VaultError`, or
    /// ConnectionFailed / ProtocolViolation when the connection breaks (vaultd gone, or gone
    /// after it took the call: the call may or may not have been done), or InvalidParameter
    /// `message` for a call over the 8 MiB message limit (nothing is sent; the connection
    /// stays usable).
    @discardableResult
    public func call(_ method: String, _ parameters: JSONObject = [:]) throws -> JSONObject {
        try call(method, parameters, removingFiles: false)
    }

    /// `call(_:_:)` of one of the declared methods (`VarlinkMethod`: the names the interface
    /// descriptions declare, which vaultd dispatches by).
    @discardableResult
    public func call(_ method: VarlinkMethod, _ parameters: JSONObject = [:]) throws -> JSONObject {
        try call(method.name, parameters, removingFiles: false)
    }

    func call(_ method: VarlinkMethod, _ parameters: JSONObject, removingFiles: Bool) throws
        -> JSONObject
    {
        try call(method.name, parameters, removingFiles: removingFiles)
    }

    /// `call`; `removingFiles`: a call that removes files one by one (a purge, an
    /// uninstall) waits `fileRemovalTimeout` for its reply instead of `replyTimeout`.
    func call(_ method: String, _ parameters: JSONObject, removingFiles: Bool) throws -> JSONObject
    {
        try lock.withLock {
            try send(
                try Self.message(VarlinkCall(method: method, parameters: parameters)),
                reconnecting: true)
            let wait = removingFiles ? removalTimeout : timeout
            if wait != timeout { stream.socket.setTimeouts(receive: wait, send: timeout) }
            defer {
                if wait != timeout { stream.socket.setTimeouts(receive: timeout, send: timeout) }
            }
            // The reply is polled for only while no other thread of the app awaits one: then
            // the CPU is better left to those threads (see `BusyPoll`).
            let waiting = callsAwaitingReplies.add(1, ordering: .relaxed).newValue
            defer { callsAwaitingReplies.subtract(1, ordering: .relaxed) }
            let reply = try receiveReply(polling: waiting == 1)
            if let e = reply.vaultError { throw e }
            return reply.parameters
        }
    }

    /// Calls `method` with `more` and hands each reply to `handler` until it returns false or
    /// the stream ends (then it returns). Throws the reply's `VaultError` (e.g. ExpectedMore,
    /// MissingEntitlement), ConnectionFailed when the connection closes or breaks (never
    /// reconnects) or a reply takes over `replyTimeout` seconds. The connection is used up
    /// afterwards.
    public func stream(
        _ method: VarlinkMethod, _ parameters: JSONObject = [:], handler: (JSONObject) -> Bool
    ) throws {
        try stream(method.name, parameters, handler: handler)
    }

    /// `stream(_:_:handler:)` of a method named by its fully-qualified name.
    public func stream(
        _ method: String, _ parameters: JSONObject = [:], handler: (JSONObject) -> Bool
    ) throws {
        try lock.withLock {
            try send(
                try Self.message(VarlinkCall(method: method, parameters: parameters, more: true)))
            var first = true
            while true {
                let reply = try receiveReply()
                if let e = reply.vaultError { throw e }
                // Events come when something changes, which may be never: past the first
                // reply (vaultd took the call), the stream waits for them without a bound.
                if first && timeout > 0 { stream.socket.setTimeouts(receive: 0, send: timeout) }
                first = false
                if !handler(reply.parameters) || !reply.continues { return }
            }
        }
    }

    /// Closes the connection (also wakes a thread blocked in `stream`). Later calls throw
    /// ConnectionFailed and never connect again.
    public func close() {
        // Not under `lock`: a thread blocked in `stream` holds it, and this is what wakes it.
        closed.store(true, ordering: .sequentiallyConsistent)
        streamLock.withLock { stream }.socket.shutdown()
    }

    /// `call` serialized; InvalidParameter `message` when it is over the 8 MiB message limit
    /// (vaultd answers a longer message with an error and closes the connection, most likely
    /// before the client has sent it all: it then saw only "Broken pipe").
    private static func message(_ call: VarlinkCall) throws -> [UInt8] {
        let message = call.json.serialized()
        guard message.count < Varlink.maximumMessageSize else {
            throw VaultError.invalidParameter(
                "message",
                "a message may be at most \(Varlink.maximumMessageSize) bytes; this call is \(message.count + 1) bytes (nothing was sent)"
            )
        }
        return message
    }

    /// Sends one message (under `lock`). `reconnecting`: when vaultd has closed the connection
    /// (a send to it fails, so none of the message reached it: vaultd restarted, or an earlier
    /// call timed out and shut it), connect again and send it on the new connection.
    private func send(_ message: [UInt8], reconnecting: Bool = false) throws {
        do {
            try stream.send(serialized: message)
            return
        } catch let e as Errno where e.code == Errno.wouldBlock {
            throw timedOut()
        } catch {
            // vaultd refused the connection (over its cap) and said why before closing it.
            if let m = stream.arrivedMessage(), let reply = try? VarlinkReply(json: m),
                let e = reply.vaultError
            {
                throw e
            }
            guard reconnecting, !closed.load(ordering: .sequentiallyConsistent) else {
                throw VaultError.connectionFailed("vaultd closed the connection: \(error)")
            }
        }
        let fresh = try Self.open(socketPath, timeout: timeout)
        // `close()` may have run while this connected: it shut the old stream, not this one.
        let replaced = streamLock.withLock {
            if closed.load(ordering: .sequentiallyConsistent) { return false }
            stream = fresh
            return true
        }
        guard replaced else {
            fresh.socket.shutdown()
            throw VaultError.connectionFailed("the connection was closed (close())")
        }
        try send(message)
    }

    /// Shuts the connection after `replyTimeout` passed, and says so (under `lock`).
    private func timedOut() -> VaultError {
        stream.socket.shutdown()
        return VaultError.connectionFailed(
            "vaultd did not answer within \(timeout) s (is it stopped or hung?)")
    }

    private func receiveReply(polling: Bool = false) throws -> VarlinkReply {
        let message: JSON?
        do {
            message = try stream.receive(polling: polling)
        } catch let e as Errno where e.code == Errno.wouldBlock {
            throw timedOut()
        } catch {
            throw VaultError.protocolViolation("bad reply from vaultd: \(error)")
        }
        guard let message else { throw VaultError.connectionFailed("vaultd closed the connection") }
        return try VarlinkReply(json: message)
    }
}
