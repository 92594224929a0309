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
public final class VaultConnection: @unchecked Sendable {
    private let stream: VarlinkStream
    private let lock = NSLock()
    /// The socket path this connection was made to.
    public let socketPath: String
    /// Seconds a call waits for vaultd to take its request and to answer (0: for ever).
    /// Setting it applies to the calls after (vaultctl lifts it for a cache purge, which
    /// removes files one by one: minutes for a large cache).
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

    /// The socket path a client uses: `VAULTD_SOCKET`, else `$XDG_RUNTIME_DIR/vaultd/vaultd.sock`,
    /// else `/tmp/vaultd-$UID/vaultd.sock` (DESIGN §2).
    public static func defaultSocketPath(environment env: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let s = env["VAULTD_SOCKET"], !s.isEmpty { return s }
        if let run = env["XDG_RUNTIME_DIR"], !run.isEmpty { return run + "/vaultd/vaultd.sock" }
        return "/tmp/vaultd-\(getuid())/vaultd.sock"
    }

    /// Connects to vaultd at `socketPath` (default: `defaultSocketPath()`). `replyTimeout`:
    /// seconds each call may wait for vaultd (0, the default: for ever, as an XPC call to
    /// securityd); a vaultd that is stopped or hung still accepts connections, so a script
    /// wants a bound. Past it the call throws ConnectionFailed and the connection is shut
    /// (a late reply would otherwise answer the next call). Throws `VaultError`
    /// ConnectionFailed when nothing answers at `socketPath`.
    public init(socketPath: String? = nil, replyTimeout: Double = 0) throws {
        let path = socketPath ?? Self.defaultSocketPath()
        self.socketPath = path
        let timeout = max(0, replyTimeout)
        self.timeout = timeout
        do {
            let s = try UnixSocket()
            // Before the connect: SO_SNDTIMEO also bounds an AF_UNIX connect's wait for room
            // in vaultd's listen backlog, which a stopped vaultd never empties (connections
            // whose clients gave up and closed them stay queued: 129 of them, and every
            // connect blocked for ever). Past it the connect fails with EAGAIN.
            if timeout > 0 { s.setTimeouts(receive: timeout, send: timeout) }
            try s.connect(path: path)
            stream = VarlinkStream(socket: s)
        } catch let e as Errno where e.code == EAGAIN || e.code == EWOULDBLOCK {
            throw VaultError.connectionFailed("vaultd did not take the connection at \(path) within \(timeout) s (is it stopped or hung?)")
        } catch {
            throw VaultError.connectionFailed("cannot connect to vaultd at \(path): \(error) (is vaultd running?)")
        }
    }

    /// Calls `method` and returns the reply's parameters. Throws the reply's `VaultError`, or
    /// ConnectionFailed / ProtocolViolation when the connection breaks.
    @discardableResult
    public func call(_ method: String, _ parameters: [String: JSON] = [:]) throws -> [String: JSON] {
        try lock.withLock {
            try send(VarlinkCall(method: method, parameters: parameters))
            // The reply is polled for only while no other thread of the app awaits one: then
            // the CPU is better left to those threads (see `BusyPoll`).
            let waiting = callsAwaitingReplies.add(1, ordering: .relaxed).newValue
            defer { callsAwaitingReplies.subtract(1, ordering: .relaxed) }
            let reply = try receiveReply(polling: waiting == 1)
            if let e = reply.vaultError { throw e }
            return reply.parameters
        }
    }

    /// Calls `method` with `more` and hands each reply to `handler` until it returns false,
    /// the stream ends, or the connection breaks. The connection is used up afterwards.
    public func stream(_ method: String, _ parameters: [String: JSON] = [:], handler: ([String: JSON]) -> Bool) throws {
        try lock.withLock {
            try send(VarlinkCall(method: method, parameters: parameters, more: true))
            while true {
                let reply = try receiveReply()
                if let e = reply.vaultError { throw e }
                if !handler(reply.parameters) || !reply.continues { return }
            }
        }
    }

    /// Closes the connection (also wakes a thread blocked in `stream`).
    public func close() {
        stream.socket.shutdown()
    }

    private func send(_ call: VarlinkCall) throws {
        do {
            try stream.send(call.json)
        } catch let e as Errno where e.code == EAGAIN || e.code == EWOULDBLOCK {
            throw timedOut()
        } catch {
            throw VaultError.connectionFailed("vaultd closed the connection: \(error)")
        }
    }

    /// Shuts the connection after `replyTimeout` passed, and says so (under `lock`).
    private func timedOut() -> VaultError {
        stream.socket.shutdown()
        return VaultError.connectionFailed("vaultd did not answer within \(timeout) s (is it stopped or hung?)")
    }

    private func receiveReply(polling: Bool = false) throws -> VarlinkReply {
        let message: JSON?
        do {
            message = try stream.receive(polling: polling)
        } catch let e as Errno where e.code == EAGAIN || e.code == EWOULDBLOCK {
            throw timedOut()
        } catch {
            throw VaultError.protocolViolation("bad reply from vaultd: \(error)")
        }
        guard let message else { throw VaultError.connectionFailed("vaultd closed the connection") }
        return try VarlinkReply(json: message)
    }
}
