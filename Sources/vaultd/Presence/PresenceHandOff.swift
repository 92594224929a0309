import CGio
import Foundation
import VaultCore
import VaultProtocol

/// A Secret Service call that reaches a presence-protected secret outside its process's
/// grace window (`PresenceWouldWait`) is answered later, from a thread of its own: the bus
/// thread and GDBus's worker thread serve every client (and the worker carries the polkit
/// call's own reply), so neither waits for the user. The call runs again there, whole, with a
/// session that may wait (`VaultSession.mayWaitForPresence()`); its reply goes out from that
/// thread (GDBus sends from any thread). At most `PresenceGate.maximumPending` such calls wait
/// at once; the others fail at once. A client's later calls are not held back meanwhile: a
/// GetSecret waiting for the user may be answered after a call its client sent later.
extension SecretService {
    /// Where handed-over calls wait for the user (concurrent; the gate bounds how many wait).
    static let presenceWork = DispatchQueue(
        label: "vaultd-presence", qos: .userInitiated, attributes: .concurrent)

    /// Runs `call` on a presence worker with a session that may wait, then `answer` with its
    /// outcome (there too).
    func handOverForPresence(
        _ vaultSession: VaultSession, _ call: @escaping (VaultSession) throws -> GV?,
        answer: @escaping (Result<GV?, any Error>) -> Void
    ) {
        let work = HandedOver((vaultSession.mayWaitForPresence(), call, answer))
        Self.presenceWork.async {
            let (session, call, answer) = work.value
            answer(Result { try call(session) })
        }
    }

    /// `handOverForPresence` for a message vaultd dispatches itself (the inline reads, the
    /// item paths): `message` (owned: this takes it over) is answered from the worker.
    func handOverForPresence(
        message: OpaquePointer, _ vaultSession: VaultSession,
        _ call: @escaping (VaultSession) throws -> GV?
    ) {
        let owned = HandedOver(message)
        handOverForPresence(vaultSession, call) { [self] outcome in
            answerHandedOver(owned.value, outcome)
        }
    }

    /// `handOverForPresence` for a call GDBus dispatched (`invocation`: returned, from the
    /// worker, exactly once).
    func handOverForPresence(
        invocation: OpaquePointer, _ vaultSession: VaultSession,
        _ call: @escaping (VaultSession) throws -> GV?
    ) {
        let owned = HandedOver(invocation)
        handOverForPresence(vaultSession, call) { outcome in
            switch outcome {
            case .success(let reply?):
                reply.pass { g_dbus_method_invocation_return_value(owned.value, $0) }
            case .success(nil): g_dbus_method_invocation_return_value(owned.value, nil)
            case .failure(let error):
                let e = BusError(Self.withoutHandOver(error))
                g_dbus_method_invocation_return_dbus_error(owned.value, e.name.rawValue, e.message)
            }
        }
    }

    /// The reply to `message` (unreferenced here), unless the call asked for none.
    private func answerHandedOver(_ message: OpaquePointer, _ outcome: Result<GV?, any Error>) {
        defer { g_object_unref(UnsafeMutableRawPointer(message)) }
        let reply: OpaquePointer
        switch outcome {
        case .success(let out):
            reply = g_dbus_message_new_method_reply(message)
            if let out { out.pass { g_dbus_message_set_body(reply, $0) } }
        case .failure(let error):
            let e = BusError(Self.withoutHandOver(error))
            reply = g_dbus_message_new_method_error_literal(message, e.name.rawValue, e.message)
        }
        send(reply, answering: message)
    }

    /// A `PresenceWouldWait` on the worker cannot happen (its session may wait); should it,
    /// it is the refusal the client sees.
    private static func withoutHandOver(_ error: any Error) -> any Error {
        guard error is PresenceWouldWait else { return error }
        return VaultFailure(
            .interactionNotAllowed, "user presence was not confirmed: no thread may wait for it")
    }
}

/// A value handed to the presence worker, which alone uses it from then on (`@unchecked
/// Sendable`: GDBus's objects and `GV` are reference-counted, and used by one thread at a time).
struct HandedOver<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
