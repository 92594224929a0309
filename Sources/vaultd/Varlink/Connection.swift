import Foundation
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// One admitted connection of the varlink socket, served on its own thread (`run`). Its
/// steps, each a part of its own: wait for and frame the next message (`nextFrame`: the
/// partial-message and idle timeouts, the message budget for unread bytes, drop mode for a
/// call over it); check the peer again at its first message (`confirmPeer`); count the
/// message's parse against the budget and decode it, its secrets into secure memory
/// (`decode`); validate it against its declaration (`refusal`); and answer it: a stream
/// (`Server.stream`), or a reply counted against the reply budget and dispatched (`answer`).
/// Identification and the per-identity caps come before (`Server.serve`).
final class Connection {
    private let server: Server
    private let socket: UnixSocket
    private let peer: PeerCredentials
    private let session: VaultSession
    private var limits: Limits { server.limits }
    private var reader = FrameReader()
    private var busyPoll: BusyPoll
    /// When the unfinished message now in `reader` (or being dropped) began.
    private var partialSince: Date?
    /// When the connection last finished a call (or opened): idle past `idleTimeout`, it
    /// closes. Monotonic, in ns.
    private var idleSince = MonotonicClock.nanoseconds()
    private let idleNanoseconds: UInt64
    /// What this connection's incoming bytes count against the message budget: its unread
    /// bytes past the allowance, including the call being served (given back once it was
    /// answered, at the top of the loop).
    private var counted = 0
    /// A call refused over the budget is read to its end and dropped, byte by byte as it
    /// comes (nothing kept), so its sender's write completes and it reads the refusal: the
    /// bytes dropped so far.
    private var dropping: Int?

    init(server: Server, socket: UnixSocket, peer: PeerCredentials, session: VaultSession) {
        self.server = server
        self.socket = socket
        self.peer = peer
        self.session = session
        busyPoll = BusyPoll(
            windowMicroseconds: server.limits.busyPollMicroseconds, limit: .oneLessThanCPUs)
        idleNanoseconds = UInt64(min(server.limits.idleTimeout, Settings.maximumSeconds) * 1e9)
    }

    /// Serves calls until the peer closes, a limit ends the connection, or vaultd stops.
    func run() {
        // What is left of a message when the connection ends is wiped too (`FrameReader`).
        defer {
            reader.reset()
            server.releaseMessageBytes(counted)
        }
        while true {
            giveBackReadBytes()
            guard var frame = nextFrame() else { return }
            // The message may hold a secret: wiped unanswered too (`decode` wipes it otherwise).
            guard confirmPeer() else { return frame.wipe() }
            guard answer(&frame) else { return }
        }
    }

    /// Gives back what the message budget held for bytes read since.
    private func giveBackReadBytes() {
        let held = max(0, reader.pendingByteCount - limits.messageAllowance)
        if held < counted {
            server.releaseMessageBytes(counted - held)
            counted = held
        }
    }

    // MARK: framing

    /// The next whole message, received as needed; nil when the connection is to close
    /// (closed by the peer, a timeout, a message over the size limit, vaultd stopping).
    private func nextFrame() -> [UInt8]? {
        do {
            while true {
                if let f = try reader.nextFrame() {
                    partialSince = nil
                    return f
                }
                guard withinPartialMessageTimeout() else { return nil }
                switch try receive() {
                case .closed: return nil
                case .again: continue
                }
            }
        } catch FrameReader.Failure.frameTooLarge {
            _ = try? server.send(
                VarlinkReply(
                    error: .invalidParameter(
                        "message", "a message may be at most \(Varlink.maximumMessageSize) bytes")),
                on: socket)
            return nil
        } catch {
            return nil
        }
    }

    /// Half a message is waiting: the peer has `partialMessageTimeout` to finish it, counted
    /// from when it began, however slowly it trickles bytes. False when it did not.
    private func withinPartialMessageTimeout() -> Bool {
        guard reader.pendingByteCount > 0 || dropping != nil else {
            partialSince = nil
            return true
        }
        let since = partialSince ?? Date()
        partialSince = since
        guard Date().timeIntervalSince(since) <= limits.partialMessageTimeout else {
            server.logger.info(
                "dropped a connection that left a message unfinished for \(limits.partialMessageTimeout) s"
            )
            return false
        }
        return true
    }

    private enum Received { case again, closed }

    /// One receive: its bytes into the reader (or dropped), counted against the message
    /// budget. `.closed` when the connection is to close.
    private func receive() throws -> Received {
        var chunk: [UInt8]
        do {
            chunk = try socket.receive(
                from: peer, polling: &busyPoll, othersBusy: server.othersAreBusy
            ).bytes
        } catch let e as Errno where e.code == Errno.wouldBlock {
            if server.isStopping { return .closed }
            let idle = MonotonicClock.nanoseconds() &- idleSince > idleNanoseconds
            return reader.pendingByteCount == 0 && dropping == nil && idle ? .closed : .again
        } catch let e as Errno where e.code == Errno.notPermitted {
            // The connection was handed on (or a child kept a copy of it): what another
            // process sends is not the identified peer's call.
            PeerIdentity.refusals.log(
                "handed-on", to: server.logger, .warning,
                "closed the connection of pid \(peer.pid): another process sent on it")
            return .closed
        }
        // It may hold a secret: wiped once copied into the reader (or dropped).
        defer { chunk.wipe() }
        if chunk.isEmpty { return .closed }
        if let dropped = dropping { return try drop(chunk, after: dropped) }
        reader.append(chunk)
        // Without a NUL in the chunk, the unread bytes are one unfinished call (complete
        // ones were taken before this receive).
        let wanted = max(0, reader.pendingByteCount - limits.messageAllowance)
        if wanted > counted && !chunk.contains(0) {
            guard server.reserveMessageBytes(wanted - counted) else {
                dropping = reader.pendingByteCount
                reader.reset()
                server.releaseMessageBytes(counted)
                counted = 0
                return .again
            }
            counted = wanted
        }
        return .again
    }

    /// Drop mode: `chunk` of a call refused over the budget, `dropped` bytes of it gone
    /// before. At its end the refusal is sent and the connection closes (the call may have
    /// been oneway, which only its dropped text said).
    private func drop(_ chunk: [UInt8], after dropped: Int) throws -> Received {
        guard let end = chunk.firstIndex(of: 0) else {
            dropping = dropped + chunk.count
            if dropped + chunk.count > reader.maximumFrameSize {
                throw FrameReader.Failure.frameTooLarge(dropped + chunk.count)
            }
            return .again
        }
        _ = try? server.send(server.overBudget("a \(dropped + end)-byte call"), on: socket)
        return .closed
    }

    /// The peer is checked again at its first call: an exec since it was identified ends
    /// the connection (see `PeerCredentials`).
    private func confirmPeer() -> Bool {
        guard !peer.confirmed, let why = peer.confirmAtFirstMessage() else { return true }
        PeerIdentity.refusals.log(
            "exec", to: server.logger, .warning, "closed the connection of pid \(peer.pid): \(why)")
        return false
    }

    // MARK: a call

    /// Decodes and answers the message `frame` (wiped). False when the connection is to close.
    private func answer(_ frame: inout [UInt8]) -> Bool {
        guard let treeReserved = reserveParse(frame) else {
            frame.wipe()
            return false
        }
        defer { idleSince = MonotonicClock.nanoseconds() }
        var held = treeReserved
        defer { server.releaseMessageBytes(held) }
        guard let (call, secrets) = decode(&frame) else { return false }
        guard server.beginCall() else { return false }
        if let refusal = Self.refusal(call, secrets) {
            return finish(call, with: VarlinkReply(error: refusal))
        }
        // A oneway call gets no reply, so no stream either (`more` is moot then).
        if Dispatcher.streamingMethods.contains(call.method) && call.more && !call.oneway {
            server.endCall()
            // The stream outlives the call: its bytes are not held meanwhile.
            server.releaseMessageBytes(counted + held)
            counted = 0
            held = 0
            // A stream refused before it began (an error without `continues`, the call's
            // final reply) leaves the connection free for the next call, as any reply does.
            return server.stream(call, on: socket, session: session)
        }
        return reply(to: call, secrets: secrets)
    }

    /// The tree a message parses into can cost many times its bytes (`[{},{},…]`): it is
    /// counted against the message budget before it is built, and held until the call is
    /// answered. One that could never fit is refused outright; one that does not fit now
    /// waits for room, as a reply does, then is RateLimited. Returns the bytes held; nil
    /// when refused (the connection closes).
    private func reserveParse(_ frame: [UInt8]) -> Int? {
        let treeBytes = JSON.estimatedTreeBytes(frame)
        let treeCounted = treeBytes - limits.messageAllowance
        if treeCounted > limits.messageBudget {
            _ = try? server.send(
                VarlinkReply(
                    error: .invalidParameter(
                        "message",
                        "its \(frame.count) bytes hold so many JSON values that they would take \(treeBytes >> 20) MiB to parse, over the \(limits.messageBudget >> 20) MiB vaultd holds for messages in flight: send fewer, larger values"
                    )), on: socket)
            return nil
        }
        guard server.reserveMessageBytes(treeCounted, waitingUpTo: limits.budgetWait) else {
            _ = try? server.send(
                server.overBudget("a \(frame.count)-byte call of \(treeBytes >> 20) MiB parsed"),
                on: socket)
            return nil
        }
        return treeCounted
    }

    /// The call in `frame`, its secret parameters moved into secure memory; the frame is
    /// wiped whatever the parse found. Nil (the error sent) when it is not a call.
    private func decode(_ frame: inout [UInt8]) -> (VarlinkCall, CallSecrets)? {
        defer { frame.wipe() }
        do {
            return try CallSecrets.parse(frame)
        } catch let e as VaultError {
            _ = try? server.send(VarlinkReply(error: e), on: socket)
        } catch {
            _ = try? server.send(
                VarlinkReply(error: .invalidParameter("message", "\(error)")), on: socket)
        }
        return nil
    }

    /// Parameters that do not match the method's declaration (one it does not declare, a
    /// required one missing, one of the wrong type) are refused before anything runs (as
    /// sd-varlink and the reference implementation do); the connection stays usable. So is
    /// an upgrade of the connection, which none of vaultd's methods offers: the refusal is not
    /// the reply confirming an upgrade, so the connection goes on as a varlink one
    /// (varlink.org/Method-Call). (Unknown methods go on to MethodNotFound.)
    private static func refusal(_ call: VarlinkCall, _ secrets: CallSecrets) -> VaultError? {
        if let invalid = VarlinkValidation.callRefusal(call, secrets: secrets.names) {
            return invalid
        }
        if call.upgrade && VarlinkInterfaces.inputParameters[call.method] != nil {
            return .invalidParameter(
                "upgrade", "\(call.method) does not upgrade the connection to another protocol")
        }
        return nil
    }

    /// A reply that grows with what the store holds is counted before it is built: the most
    /// it can take, against the reply budget, until it is sent (a keychain lookup here; a
    /// preference read once the store says what it holds). Without room within `budgetWait`
    /// the call is refused before anything is looked up. Then the call is dispatched and
    /// its reply sent. False when the connection is to close.
    private func reply(to call: VarlinkCall, secrets: CallSecrets) -> Bool {
        let reservation = Server.ReplyReservation(server, method: call.method)
        defer { reservation.release() }
        do {
            try reservation.reserve(Dispatcher.replyBound(call))
        } catch {
            return finish(call, with: VarlinkReply(error: VaultError.wire(error)))
        }
        let reply: VarlinkReply
        do {
            reply = VarlinkReply(
                parameters: try server.dispatcher.handle(
                    call, session: session, secrets: secrets, reply: reservation))
        } catch let e as VaultError {
            reply = VarlinkReply(error: e)
        } catch {
            reply = VarlinkReply(error: VaultError.wire(error))
        }
        return finish(call, with: reply, secrets: secrets, reserved: reservation.bytes)
    }

    /// Sends `reply` (none for a oneway call) and ends the call. False when it could not be
    /// sent as it was (the connection is to close).
    private func finish(
        _ call: VarlinkCall, with reply: VarlinkReply, secrets: CallSecrets? = nil,
        reserved: Int = 0
    ) -> Bool {
        let sent =
            call.oneway
            || (try? server.send(reply, on: socket, secrets: secrets, reserved: reserved)) != nil
        server.endCall()
        return sent
    }
}
