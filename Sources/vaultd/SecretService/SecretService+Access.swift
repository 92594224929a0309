import CGio
import Foundation
import VaultCore
import VaultProtocol

/// Calls that wait for the user: for the confirmation of an access (issue 40 §2,
/// docs/access.md: a `GetSecret` or `GetSecrets` of an item another program created), and for
/// user presence (issue 37 §3, docs/keychain.md: an item with `userPresence` read outside its
/// process's grace window, checked through polkit). Neither the bus thread nor GDBus's worker
/// thread waits for the user: every connection's calls would stop behind it (and GDBus's worker
/// carries polkit's own reply). The call runs first with a session that does not wait
/// (`AccessInteraction.deferred`); when the engine needs the user it throws
/// `AccessConfirmationNeeded` or `PresenceWouldWait` (`waitsForUser`), and the same call is
/// run again, whole, on a thread of its own with a session that waits (the dialog bounded by
/// `SecretServicePromptTimeoutSeconds`, polkit by `PresenceTimeoutSeconds`), whose reply is sent
/// from there. On that thread the access decision comes first, then presence
/// (`VaultSession.copyMatchingReportingDamage`). A client waits for its reply as for any slow
/// call (libsecret's default D-Bus timeout is 25 s).
extension SecretService {
    /// The most calls waiting for the user at once, confirmations and presence checks together
    /// (each holds a thread); past it, LimitsExceeded. Each program has at most one question
    /// pending anyway (`AccessGate`), and at most `PresenceGate`'s checks run at once.
    static let maximumWaitingCalls = 16

    /// Whether `error` says the call must wait for the user, so that it is run again off the
    /// bus thread (`answerOffThread`) rather than answered with it.
    static func waitsForUser(_ error: any Error) -> Bool {
        error is AccessConfirmationNeeded || error is PresenceWouldWait
    }

    /// Counts a call in `waitingCalls` (the caller counts it out); throws LimitsExceeded when
    /// `maximumWaitingCalls` wait already.
    func admitWaitingCall() throws {
        guard waitingCalls.admit(below: Self.maximumWaitingCalls) else {
            throw BusError.limitsExceeded(
                "\(Self.maximumWaitingCalls) calls are waiting for the user already; try again later"
            )
        }
    }

    /// Runs `answer` on a thread of its own, counted in `waitingCalls`; throws
    /// LimitsExceeded when `maximumWaitingCalls` wait already.
    func answerOffThread(_ answer: @escaping @Sendable () -> Void) throws {
        try admitWaitingCall()
        let t = Thread { [self] in
            answer()
            waitingCalls.withLock { $0 -= 1 }
        }
        t.name = "vaultd-waiting"
        t.start()
    }

    /// Answers `message` (a call this takes over) off the bus thread, running `handle` with
    /// a session that waits for the user. Sends the reply, unless none was wanted.
    func answerWaiting(
        _ message: OpaquePointer, sender: String, vaultSession: VaultSession,
        run: @escaping @Sendable (VaultSession) throws -> GV?
    ) {
        let box = GObjectReference(retaining: message)
        let waiting = vaultSession.waiting(.wait)
        do {
            try answerOffThread { [self] in reply(to: box) { try run(waiting) } }
        } catch {
            let e = BusError(error)
            send(
                g_dbus_message_new_method_error_literal(message, e.name.rawValue, e.message),
                answering: message)
        }
    }

    /// Sends `body`'s reply, or its error, to the call `message` is, unless it wanted none.
    func reply(to message: GObjectReference, _ body: () throws -> GV?) {
        send(replyMessage(to: message.raw, body), answering: message.raw)
    }

    /// The reply to call `message` with `body`'s value, or the error it throws (a new message).
    func replyMessage(to message: OpaquePointer, _ body: () throws -> GV?) -> OpaquePointer {
        do {
            let out = try body()
            let reply = g_dbus_message_new_method_reply(message)!
            if let out { out.pass { g_dbus_message_set_body(reply, $0) } }
            return reply
        } catch {
            let e = BusError(error)
            return g_dbus_message_new_method_error_literal(message, e.name.rawValue, e.message)
        }
    }

    /// Sends `reply` (consumed) to `message`'s call unless it wanted none.
    func send(_ reply: OpaquePointer, answering message: OpaquePointer) {
        defer { g_object_unref(UnsafeMutableRawPointer(reply)) }
        guard
            g_dbus_message_get_flags(message).rawValue
                & G_DBUS_MESSAGE_FLAGS_NO_REPLY_EXPECTED.rawValue == 0
        else { return }
        var err: UnsafeMutablePointer<GError>?
        if g_dbus_connection_send_message(
            connection, reply, G_DBUS_SEND_MESSAGE_FLAGS_NONE, nil, &err) == 0
        {
            g_error_free(err)
        }
    }
}

/// Thrown by a call's handler (`dispatchOwn`, `methodCall`) when the call is answered off the
/// bus thread: no reply now.
struct Deferred: Error {}
