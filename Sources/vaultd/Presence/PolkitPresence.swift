import CGio
import Foundation
import VaultCore
import VaultProtocol

/// User presence through polkit: `org.freedesktop.PolicyKit1.Authority.CheckAuthorization`
/// on the system bus, for action `io.vaultd.user-presence` (shipped in
/// `dist/polkit/io.vaultd.policy`, `auth_self`: the user authenticates as themselves, through
/// whatever their polkit agent and PAM stack offer), with the requesting process as the
/// subject and AllowUserInteraction. The policy has no `_keep`: vaultd keeps its own grace
/// window (`PresenceGate`), so polkit remembers nothing.
///
/// Each check opens a private connection to the system bus (GDBus; the address from
/// `DBUS_SYSTEM_BUS_ADDRESS`, else the standard socket), so that the cancel comes from the
/// connection that asked, as polkit requires, and nothing is shared between checks. The
/// connect and the call are bounded by `timeout`; when the call times out, vaultd sends
/// CancelCheckAuthorization, which ends the agent's dialog. No system bus, no polkitd, no
/// agent, a wrong password, a cancel: `.notConfirmed`, in bounded time.
struct PolkitPresence: PresenceVerifier {
    static let action = "io.vaultd.user-presence"
    static let busName = "org.freedesktop.PolicyKit1"
    static let objectPath = "/org/freedesktop/PolicyKit1/Authority"
    static let interface = "org.freedesktop.PolicyKit1.Authority"
    /// CheckAuthorization's flag AllowUserInteraction.
    static let allowUserInteraction: UInt32 = 1
    /// How long the cancel may take (ms): polkitd answers it at once.
    static let cancelTimeout: Int32 = 5000

    /// Seconds the user has to answer (`PresenceTimeoutSeconds`).
    let timeout: Double

    func verifyPresence(of process: RequestingProcess) -> PresenceOutcome {
        let total = Int32(min(max(timeout, 1), 3600) * 1000)
        let start = MonotonicClock.nanoseconds()
        // The connect and its handshake have no timeout of their own: a bus that accepts and
        // never answers is cut off by the cancellable, which a timer cancels at the deadline.
        // The timer's closure holds a reference to the cancellable too, so it stays alive
        // however late the timer runs.
        let cancellable = GObjectReference(adopting: OpaquePointer(g_cancellable_new()))
        let timer = DispatchWorkItem { g_cancellable_cancel(UnsafeMutablePointer(cancellable.raw)) }
        DispatchQueue.global().asyncAfter(
            deadline: .now() + .milliseconds(Int(total)), execute: timer)
        defer { timer.cancel() }
        let connection: OpaquePointer
        switch Self.connect(UnsafeMutablePointer(cancellable.raw)) {
        case .connected(let c): connection = c
        case .none(let why): return .notConfirmed(why)
        }
        defer {
            g_dbus_connection_close_sync(connection, nil, nil)
            g_object_unref(UnsafeMutableRawPointer(connection))
        }
        // What is left of the deadline (ms) for the check itself.
        let spent = Int32(min((MonotonicClock.nanoseconds() &- start) / 1_000_000, UInt64(total)))
        let deadline = max(1, total - spent)
        let cancellationID = "vaultd-\(process.pid)-\(MonotonicClock.nanoseconds())"
        var error: UnsafeMutablePointer<GError>?
        let parameters = Self.parameters(process, cancellationID: cancellationID)
        // GDBus checks the answer's type against this one (an error otherwise).
        let replyType = g_variant_type_new("((bba{ss}))")
        defer { g_variant_type_free(replyType) }
        let reply = parameters.pass {
            g_dbus_connection_call_sync(
                connection, Self.busName, Self.objectPath, Self.interface, "CheckAuthorization",
                $0, replyType, G_DBUS_CALL_FLAGS_NONE, deadline, nil, &error)
        }
        guard let reply else {
            let timedOut =
                g_error_matches(error, g_io_error_quark(), gint(G_IO_ERROR_TIMED_OUT.rawValue)) != 0
            let why = Self.describe(error)
            g_error_free(error)
            if timedOut {
                Self.cancel(cancellationID, on: connection)
                return .notConfirmed("no answer within \(Int(timeout)) s (the check was cancelled)")
            }
            return .notConfirmed("polkit did not answer: \(why)")
        }
        return Self.outcome(GV(owned: reply))
    }

    /// A private connection to the system bus, or why there is none.
    private enum Connection {
        case connected(OpaquePointer)
        case none(String)
    }

    private static func connect(_ cancellable: UnsafeMutablePointer<GCancellable>?) -> Connection {
        var error: UnsafeMutablePointer<GError>?
        guard let address = g_dbus_address_get_for_bus_sync(G_BUS_TYPE_SYSTEM, cancellable, &error)
        else {
            defer { g_error_free(error) }
            return .none("no system bus: \(describe(error))")
        }
        defer { g_free(address) }
        let flags = GDBusConnectionFlags(
            rawValue: G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT.rawValue
                | G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION.rawValue)
        guard
            let c = g_dbus_connection_new_for_address_sync(
                address, flags, nil, cancellable, &error)
        else {
            defer { g_error_free(error) }
            return .none("no system bus: \(describe(error))")
        }
        // A private connection must not take vaultd down when the bus goes away.
        g_dbus_connection_set_exit_on_close(c, 0)
        return .connected(c)
    }

    /// CheckAuthorization's arguments `((sa{sv})sa{ss}us)`: the `unix-process` subject (pid,
    /// start time and uid: a pid alone is reused, the three name one process), the action,
    /// no details, AllowUserInteraction, and the id a cancel names.
    private static func parameters(_ p: RequestingProcess, cancellationID: String) -> GV {
        let subject = GV.tuple([
            .string("unix-process"),
            .array(
                "{sv}",
                [
                    .dictEntry(
                        .string("pid"), .variant(GV(new: g_variant_new_uint32(UInt32(p.pid))))),
                    .dictEntry(.string("start-time"), .variant(.uint64(p.startTime))),
                    .dictEntry(
                        .string("uid"),
                        .variant(GV(new: g_variant_new_int32(Int32(bitPattern: p.uid))))),
                ]),
        ])
        return .tuple([
            subject, .string(action), .array("{ss}", []),
            GV(new: g_variant_new_uint32(allowUserInteraction)), .string(cancellationID),
        ])
    }

    /// The answer `((bba{ss}))`: is_authorized, is_challenge, details.
    private static func outcome(_ reply: GV) -> PresenceOutcome {
        let result = reply.child(0)
        if result.child(0).bool { return .confirmed }
        let details = result.child(2)
        if let d = details.lookup("polkit.dismissed", "s"), d.string == "true" {
            return .notConfirmed("the authentication was dismissed (cancelled)")
        }
        if result.child(1).bool {
            return .notConfirmed(
                "polkit asks for authentication but no agent answered (no authentication agent, or it failed)"
            )
        }
        return .notConfirmed("polkit refused (a wrong password, or the action's policy says no)")
    }

    /// CancelCheckAuthorization, on the connection that asked (polkit accepts it only from
    /// there); its failure changes nothing (the check already failed).
    private static func cancel(_ id: String, on connection: OpaquePointer) {
        var error: UnsafeMutablePointer<GError>?
        let r = GV.tuple([.string(id)]).pass {
            g_dbus_connection_call_sync(
                connection, busName, objectPath, interface, "CancelCheckAuthorization", $0, nil,
                G_DBUS_CALL_FLAGS_NONE, cancelTimeout, nil, &error)
        }
        if let r { g_variant_unref(r) } else { g_error_free(error) }
    }

    private static func describe(_ error: UnsafeMutablePointer<GError>?) -> String {
        logField(String(cString: cg_error_message(error)))
    }
}
