import CGio
import Foundation
import Synchronization
import VaultCore
import VaultProtocol

/// The reads libsecret makes for every lookup (`Service.SearchItems`, `Service.GetSecrets`,
/// `Item.GetSecret`), answered on GDBus's own worker thread, in a message filter, instead of
/// being handed to the `vaultd-dbus` thread and back: each hand-over wakes another thread
/// twice, which costs more than the read itself. Everything else takes the usual way.
///
/// A call is answered here only when all of these hold, else it is passed on unchanged:
/// - it is one of those three methods, at its object, with the exact argument signature
///   (anything else gets GDBus's own checks);
/// - its connection is identified already (`SecretService.identifiedCaller`: a first call,
///   which asks the bus for credentials, never runs on the worker thread) and still passes
///   the per-call check;
/// - the connection has no call handed on whose reply is not yet sent, and has never sent a
///   call that wants no reply: a client's calls are answered in the order it sent them, as
///   when every call goes to one thread (a read never overtakes that client's earlier write).
///
/// The same `handle` answers it, with the same policy decision and caller; only the thread
/// differs. Reads are bounded (reply sizes, the engine's reader connections), so the worker
/// thread is held for one read at most.
extension SecretService {
    /// The most calls of one connection awaiting their reply that are tracked; past it, that
    /// connection's calls all take the usual way until vaultd forgets it.
    static let maximumTrackedCalls = 1024

    /// The filter GDBus runs on its worker thread for every message in and out, before it
    /// dispatches a call: it answers the inline reads (none with
    /// `VAULTD_SECRET_SERVICE_INLINE=0`: every call then goes to the bus thread, for
    /// comparing), and hands the calls vaultd dispatches itself (`OwnDispatch.swift`: those to
    /// an item's path, and Introspect of the collections' folder) to the bus thread.
    func addFilter() {
        inlineEnabled = ProcessInfo.processInfo.environment["VAULTD_SECRET_SERVICE_INLINE"] != "0"
        _ = g_dbus_connection_add_filter(
            connection,
            { _, message, incoming, user in
                guard let message else { return nil }
                return SecretService.this(user).filter(message, incoming: incoming != 0)
            }, Unmanaged.passUnretained(self).toOpaque(), nil)
    }

    /// A call answered on the worker thread: interface, member and argument signature as C
    /// strings (made once, compared with GDBus's by `strcmp`, nothing allocated per call),
    /// and whether its object is an item (else the service).
    private struct InlineMethod {
        let interface: [CChar]
        let member: [CChar]
        let signature: [CChar]
        let atItem: Bool
        init(_ interface: String, _ member: String, _ signature: String, atItem: Bool) {
            self.interface = Array(interface.utf8CString)
            self.member = Array(member.utf8CString)
            self.signature = Array(signature.utf8CString)
            self.atItem = atItem
        }
    }

    /// Which calls are answered on the worker thread.
    private static let inlineMethods = [
        InlineMethod(SecretServiceIntrospection.service, "SearchItems", "a{ss}", atItem: false),
        InlineMethod(SecretServiceIntrospection.service, "GetSecrets", "aoo", atItem: false),
        InlineMethod(SecretServiceIntrospection.item, "GetSecret", "o", atItem: true),
    ]

    private func filter(_ message: OpaquePointer, incoming: Bool) -> OpaquePointer? {
        let type = g_dbus_message_get_message_type(message)
        if !incoming {
            // A reply going out ends the wait of the call it answers.
            if type == G_DBUS_MESSAGE_TYPE_METHOD_RETURN || type == G_DBUS_MESSAGE_TYPE_ERROR {
                replyGoingOut(message)
            }
            return message
        }
        guard type == G_DBUS_MESSAGE_TYPE_METHOD_CALL, let s = g_dbus_message_get_sender(message)
        else { return message }
        let sender = String(cString: s)
        let own = isOwnDispatch(message)
        // Taken from GDBus: answered on the bus thread (the filter owns `message`, which the
        // bus thread unrefs once it has answered), in order with the calls GDBus hands there.
        // GDBus hands a subtree's call over in two steps (at G_PRIORITY_HIGH, then the
        // handler at G_PRIORITY_DEFAULT); so does this, so that neither overtakes the other.
        func handOver() -> OpaquePointer? {
            onBusThread(priority: -100) { [self] in
                onBusThread(priority: 0) { [self] in dispatchOwn(message, sender: sender) }
            }
            return nil
        }
        guard inlineEnabled else { return own ? handOver() : message }
        let serial = g_dbus_message_get_serial(message)
        guard inOrder(message, sender: sender, serial: serial) else {
            return own ? handOver() : message
        }
        guard let vaultSession = identified(sender) else {
            // Not identified yet (or no longer passing the check): the usual way, in order.
            inline.withLock { state in state.awaitingReply[sender, default: []].insert(serial) }
            return own ? handOver() : message
        }
        answerInline(message, sender: sender, serial: serial, vaultSession: vaultSession)
        return nil
    }

    /// A reply (or error) vaultd sends: the call it answers no longer awaits its reply.
    private func replyGoingOut(_ message: OpaquePointer) {
        guard let d = g_dbus_message_get_destination(message) else { return }
        let serial = g_dbus_message_get_reply_serial(message)
        let destination = String(cString: d)
        inline.withLock { state in
            if var waiting = state.awaitingReply[destination], waiting.remove(serial) != nil {
                state.awaitingReply[destination] = waiting.isEmpty ? nil : waiting
            }
        }
    }

    /// Whether call `message` (`serial`) of `sender` may be answered here, as far as order
    /// goes; if not, it is recorded as awaiting its reply (or its connection as one that must
    /// always take the usual way).
    private func inOrder(_ message: OpaquePointer, sender: String, serial: UInt32) -> Bool {
        let wantsNoReply =
            (g_dbus_message_get_flags(message).rawValue
                & G_DBUS_MESSAGE_FLAGS_NO_REPLY_EXPECTED.rawValue) != 0
        return inline.withLock { state in
            if wantsNoReply || state.unordered.contains(sender) {
                if !state.unordered.contains(sender) {
                    if state.unordered.count >= Self.maximumPeers {
                        state.disabled = true
                    } else {
                        state.unordered.insert(sender)
                    }
                }
                return false
            }
            let waiting = state.awaitingReply[sender]
            if waiting == nil && !state.disabled && isInlineCandidate(message) { return true }
            var w = waiting ?? []
            if w.count >= Self.maximumTrackedCalls {
                state.awaitingReply[sender] = nil
                if state.unordered.count >= Self.maximumPeers {
                    state.disabled = true
                } else {
                    state.unordered.insert(sender)
                }
                return false
            }
            w.insert(serial)
            state.awaitingReply[sender] = w
            return false
        }
    }

    /// Answers call `message` (`serial`) of identified `sender` on this thread, and takes it
    /// over from GDBus (a call that must wait for the user is handed off, and answered there).
    private func answerInline(
        _ message: OpaquePointer, sender: String, serial: UInt32, vaultSession: VaultSession
    ) {
        let path = String(cString: g_dbus_message_get_path(message)!)
        let interface = String(cString: g_dbus_message_get_interface(message)!)
        let member = String(cString: g_dbus_message_get_member(message)!)
        let body = GV(borrowing: g_dbus_message_get_body(message)!)
        let reply: OpaquePointer
        do {
            guard SecretServiceOperations.of(interface, member) != nil else {
                throw BusError.accessDenied("\(interface).\(member) has no policy decision")
            }
            guard let target = SecretServicePath(path) else { throw BusError.noSuchObject }
            let out = try handle(
                member, of: interface, on: target, body, sender: sender, vaultSession: vaultSession)
            reply = g_dbus_message_new_method_reply(message)
            if let out { out.pass { g_dbus_message_set_body(reply, $0) } }
        } catch let e where Self.waitsForUser(e) {
            // Run again off this thread (`SecretService+Access.swift`); until its reply goes out,
            // the connection's later calls take the usual way, in order.
            inline.withLock { state in state.awaitingReply[sender, default: []].insert(serial) }
            let args = Handed(body)
            answerWaiting(message, sender: sender, vaultSession: vaultSession) { [self] waiting in
                guard let target = SecretServicePath(path) else { throw BusError.noSuchObject }
                return try handle(
                    member, of: interface, on: target, args.value, sender: sender,
                    vaultSession: waiting)
            }
            g_object_unref(UnsafeMutableRawPointer(message))
            return
        } catch {
            let e = BusError(error)
            reply = g_dbus_message_new_method_error_literal(message, e.name.rawValue, e.message)
        }
        var err: UnsafeMutablePointer<GError>?
        if g_dbus_connection_send_message(
            connection, reply, G_DBUS_SEND_MESSAGE_FLAGS_NONE, nil, &err) == 0
        {
            g_error_free(err)
        }
        g_object_unref(UnsafeMutableRawPointer(reply))
        g_object_unref(UnsafeMutableRawPointer(message))
    }

    /// Whether `message` is one of `inlineMethods` at an object of its kind.
    private func isInlineCandidate(_ message: OpaquePointer) -> Bool {
        guard let i = g_dbus_message_get_interface(message),
            let m = g_dbus_message_get_member(message), let p = g_dbus_message_get_path(message)
        else {
            return false
        }
        // Compared as the C strings GDBus holds: this runs for every call a connection
        // sends while it has none awaiting a reply.
        let signature = g_dbus_message_get_signature(message)
        guard
            let method = Self.inlineMethods.first(where: { candidate in
                strcmp(m, candidate.member) == 0 && strcmp(i, candidate.interface) == 0
                    && (signature.map { strcmp($0, candidate.signature) == 0 }
                        ?? (candidate.signature == [0]))
            })
        else { return false }
        switch SecretServicePath(String(cString: p)) {
        case .service?: return !method.atItem
        case .item?, .damaged?: return method.atItem
        default: return false
        }
    }
}

/// What the inline filter keeps, under `SecretService.inline`.
struct InlineState {
    /// Per connection, the serials of its calls handed on whose reply has not gone out.
    var awaitingReply: [String: Set<UInt32>] = [:]
    /// Connections whose calls always take the usual way (one sent a call wanting no reply,
    /// whose end the filter cannot see, or had too many calls awaiting replies).
    var unordered: Set<String> = []
    /// Set when `unordered` is full: no call is answered inline any more.
    var disabled = false

    mutating func forget(_ sender: String) {
        awaitingReply[sender] = nil
        unordered.remove(sender)
    }
}

/// A value behind a lock: a class, so that closures and several owners can share it (a
/// `Mutex` cannot be captured).
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    func withLock<T: Sendable, E: Error>(_ body: (inout Value) throws(E) -> T) throws(E) -> T {
        try mutex.withLock { (value: inout Value) throws(E) -> T in try body(&value) }
    }
}

extension Locked where Value == Int {
    /// Counts one more in, unless `limit` are counted already: whether it was counted (the
    /// caller counts it out when done).
    func admit(below limit: Int) -> Bool {
        withLock { n -> Bool in
            guard n < limit else { return false }
            n += 1
            return true
        }
    }
}
