import CGio
import Foundation
import Synchronization
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// The reads libsecret makes for every lookup (`Service.SearchItems`, `Service.GetSecrets`,
/// `Item.GetSecret`), answered on the bus relay's thread (`BusRelay`) as they come from the
/// bus, instead of going on through the socketpair to GDBus and from its worker thread to the
/// `vaultd-dbus` thread and back: each hand-over wakes another thread twice, and GDBus decodes
/// and encodes each message again, which costs more than the read itself. The durable writes
/// of a store, a replace and a clear (`Collection.CreateItem`, `Item.SetSecret`,
/// `Item.Delete`) are taken here too, and run on a thread of `writers`
/// (`answerWriteOnRelay`), whose reply goes back to the relay.
///
/// A call is answered here only when all of these hold, else it goes on to GDBus unchanged:
/// - it is one of those methods, at its object, with the exact argument signature and no
///   descriptors (anything else gets GDBus's own checks);
/// - its connection is identified already (`SecretService.identified`: a first call, which
///   asks the bus for credentials, never runs on the relay's thread) and still passes the
///   per-call check;
/// - the connection has no call handed to GDBus whose reply has not gone out, and has never
///   sent a call that wants no reply: a client's calls are answered in the order it sent
///   them, as when every call goes to one thread (a read never overtakes that client's
///   earlier write). The relay tells of each call it hands on (`handedOn`) before GDBus can
///   read it, and of each reply it sees go out (`replied`).
///
/// The same `handle` answers it, with the same policy decision and caller; only the thread
/// differs. Reads are bounded (reply sizes, the engine's reader connections), so the relay's
/// thread is held for one read at most.
extension SecretService: BusResponder {
    /// The most calls of one connection awaiting their reply that are tracked; past it, that
    /// connection's calls all take the usual way until vaultd forgets it.
    static let maximumTrackedCalls = 1024

    /// The filter GDBus runs on its worker thread for every message in, before it dispatches
    /// a call: it hands the calls vaultd dispatches itself (`OwnDispatch.swift`: those to an
    /// item's path, and Introspect of the collections' folder) to the bus thread. It also reads
    /// `VAULTD_SECRET_SERVICE_INLINE` (0: the relay answers no call itself, for comparing).
    func addFilter() {
        inlineEnabled = ProcessInfo.processInfo.environment["VAULTD_SECRET_SERVICE_INLINE"] != "0"
        _ = g_dbus_connection_add_filter(
            connection,
            { _, message, incoming, user in
                guard let message else { return nil }
                return SecretService.this(user).filter(message, incoming: incoming != 0)
            }, Unmanaged.passUnretained(self).toOpaque(), nil)
    }

    private func filter(_ message: OpaquePointer, incoming: Bool) -> OpaquePointer? {
        guard incoming, g_dbus_message_get_message_type(message) == G_DBUS_MESSAGE_TYPE_METHOD_CALL,
            let s = g_dbus_message_get_sender(message), isOwnDispatch(message)
        else { return message }
        let sender = String(cString: s)
        // Taken from GDBus: answered on the bus thread (the filter owns `message`, which the
        // bus thread unrefs once it has answered), in order with the calls GDBus hands there.
        // GDBus hands a subtree's call over in two steps (at G_PRIORITY_HIGH, then the
        // handler at G_PRIORITY_DEFAULT); so does this, so that neither overtakes the other.
        onBusThread(priority: -100) { [self] in
            onBusThread(priority: 0) { [self] in dispatchOwn(message, sender: sender) }
        }
        return nil
    }

    /// A call the relay hands here: interface, member and argument signature, the kind of
    /// object it is made at, and whether it is a durable write (answered on a thread of
    /// `writers`, its reply delivered to the relay: `SecretService+Writes.swift`).
    private struct InlineMethod {
        enum Object { case service, collection, item }
        let interface: String
        let member: String
        let signature: String
        let object: Object
        var writes = false
    }

    /// Which calls the relay hands here: the reads of a lookup, and the durable writes of a
    /// store, a replace and a clear (`writesDurably`).
    private static let inlineMethods = [
        InlineMethod(
            interface: SecretServiceIntrospection.service, member: "SearchItems",
            signature: "a{ss}", object: .service),
        InlineMethod(
            interface: SecretServiceIntrospection.service, member: "GetSecrets",
            signature: "aoo", object: .service),
        InlineMethod(
            interface: SecretServiceIntrospection.item, member: "GetSecret", signature: "o",
            object: .item),
        InlineMethod(
            interface: SecretServiceIntrospection.collection, member: "CreateItem",
            signature: "a{sv}(oayays)b", object: .collection, writes: true),
        InlineMethod(
            interface: SecretServiceIntrospection.item, member: "SetSecret",
            signature: "(oayays)", object: .item, writes: true),
        InlineMethod(
            interface: SecretServiceIntrospection.item, member: "Delete", signature: "",
            object: .item, writes: true),
    ]

    /// The method `header` calls, if the relay is to hand it here, at an object of its kind.
    private static func inlineMethod(_ header: BusHeader) -> InlineMethod? {
        guard let member = header.string(.member), let interface = header.string(.interface),
            let path = header.string(.path),
            let method = inlineMethods.first(where: {
                $0.member == member && $0.interface == interface
                    && $0.signature == header.signature
            })
        else { return nil }
        switch (SecretServicePath(path), method.object) {
        case (.service?, .service), (.item?, .item), (.damaged?, .item),
            (.collection?, .collection), (.alias?, .collection):
            return method
        default: return nil
        }
    }

    /// A call that wants no reply is never taken (it goes to GDBus, which sends none, and its
    /// connection's calls all take the usual way from then on: `handedOn`).
    func wantsWhole(_ header: BusHeader) -> Bool {
        header.flags & BusHeader.noReplyExpected == 0 && Self.inlineMethod(header) != nil
    }

    func answer(
        _ bytes: [UInt8], header: BusHeader, sender: String, replySerial: UInt32
    ) -> BusAnswer {
        let inOrder = inline.withLock { state in
            !state.disabled && !state.unordered.contains(sender)
                && state.awaitingReply[sender] == nil
        }
        guard inOrder, let vaultSession = identified(sender) else { return .pass }
        var err: UnsafeMutablePointer<GError>?
        guard
            let message = bytes.withUnsafeBytes({ b in
                g_dbus_message_new_from_blob(
                    UnsafeMutablePointer(
                        mutating: b.baseAddress!.assumingMemoryBound(to: UInt8.self)),
                    gsize(b.count), G_DBUS_CAPABILITY_FLAGS_NONE, &err)
            })
        else {
            // GDBus gives the client its error for a message it cannot read.
            g_error_free(err)
            return .pass
        }
        defer { g_object_unref(UnsafeMutableRawPointer(message)) }
        // `wantsWhole` checked the object's kind already: the member tells a write.
        let member = header.string(.member)
        if Self.inlineMethods.contains(where: { $0.writes && $0.member == member }) {
            return answerWriteOnRelay(
                message, serial: header.serial, sender: sender, replySerial: replySerial,
                vaultSession: vaultSession)
        }
        guard let reply = answerInline(message, sender: sender, vaultSession: vaultSession) else {
            return .taken
        }
        return .reply(replyBytes(reply, message, serial: replySerial))
    }

    /// `reply`'s bytes (it is consumed), numbered `serial`; if it does not encode, those of a
    /// Failed error answering `message` (an error with a short message always encodes).
    func replyBytes(_ reply: OpaquePointer, _ message: OpaquePointer, serial: UInt32) -> [UInt8] {
        if let bytes = Self.encoded(reply, serial: serial, logger: logger) { return bytes }
        let e = BusError(.failed, "the reply does not encode")
        return Self.encoded(
            g_dbus_message_new_method_error_literal(message, e.name.rawValue, e.message)!,
            serial: serial, logger: logger) ?? []
    }

    /// `reply`'s bytes on the wire (it is consumed), numbered `serial`; nil, logged, if GDBus
    /// cannot encode it. The copy GDBus made is zeroed: a reply may hold a secret (a plain
    /// session's).
    private static func encoded(_ reply: OpaquePointer, serial: UInt32, logger: Logger)
        -> [UInt8]?
    {
        defer { g_object_unref(UnsafeMutableRawPointer(reply)) }
        g_dbus_message_set_serial(reply, serial)
        var err: UnsafeMutablePointer<GError>?
        var size: gsize = 0
        guard let blob = g_dbus_message_to_blob(reply, &size, G_DBUS_CAPABILITY_FLAGS_NONE, &err)
        else {
            logger.error(
                "secret service: a reply vaultd made does not encode: \(String(cString: cg_error_message(err)))"
            )
            g_error_free(err)
            return nil
        }
        defer {
            explicit_bzero(blob, Int(size))
            g_free(blob)
        }
        return Array(UnsafeBufferPointer(start: blob, count: Int(size)))
    }

    func handedOn(sender: String, serial: UInt32, wantsNoReply: Bool) {
        inline.withLock { state in
            guard !wantsNoReply, !state.unordered.contains(sender) else {
                state.neverInline(sender)
                return
            }
            var waiting = state.awaitingReply[sender] ?? []
            guard waiting.count < Self.maximumTrackedCalls else {
                state.awaitingReply[sender] = nil
                state.neverInline(sender)
                return
            }
            waiting.insert(serial)
            state.awaitingReply[sender] = waiting
        }
    }

    func replied(to destination: String, serial: UInt32) {
        inline.withLock { state in
            if var waiting = state.awaitingReply[destination], waiting.remove(serial) != nil {
                state.awaitingReply[destination] = waiting.isEmpty ? nil : waiting
            }
        }
    }

    /// Answers call `message` of identified `sender`: its reply, or nil when the call must
    /// wait for the user and is answered off this thread, through GDBus.
    private func answerInline(
        _ message: OpaquePointer, sender: String, vaultSession: VaultSession
    ) -> OpaquePointer? {
        let path = String(cString: g_dbus_message_get_path(message)!)
        let interface = String(cString: g_dbus_message_get_interface(message)!)
        let member = String(cString: g_dbus_message_get_member(message)!)
        guard let b = g_dbus_message_get_body(message) else {
            return g_dbus_message_new_method_error_literal(
                message, BusError.Name.invalidArgs.rawValue, "no arguments")
        }
        let body = GV(borrowing: b)
        do {
            guard SecretServiceOperations.of(interface, member) != nil else {
                throw BusError.accessDenied("\(interface).\(member) has no policy decision")
            }
            guard let target = SecretServicePath(path) else { throw BusError.noSuchObject }
            let out = try handle(
                member, of: interface, on: target, body, sender: sender, vaultSession: vaultSession)
            let reply = g_dbus_message_new_method_reply(message)!
            if let out { out.pass { g_dbus_message_set_body(reply, $0) } }
            return reply
        } catch let e where Self.waitsForUser(e) {
            // Run again off this thread (`SecretService+Access.swift`), answered through GDBus;
            // until its reply goes out, the connection's later calls take the usual way, in
            // order.
            let serial = g_dbus_message_get_serial(message)
            _ = inline.withLock { state in state.awaitingReply[sender, default: []].insert(serial) }
            let args = Handed(body)
            answerWaiting(message, sender: sender, vaultSession: vaultSession) { [self] waiting in
                guard let target = SecretServicePath(path) else { throw BusError.noSuchObject }
                return try handle(
                    member, of: interface, on: target, args.value, sender: sender,
                    vaultSession: waiting)
            }
            return nil
        } catch {
            let e = BusError(error)
            return g_dbus_message_new_method_error_literal(message, e.name.rawValue, e.message)
        }
    }
}

/// What the relay's answering of reads keeps, under `SecretService.inline`.
struct InlineState {
    /// Per connection, the serials of its calls handed on whose reply has not gone out.
    var awaitingReply: [String: Set<UInt32>] = [:]
    /// Connections whose calls always take the usual way (one sent a call wanting no reply,
    /// whose end the filter cannot see, or had too many calls awaiting replies).
    var unordered: Set<String> = []
    /// Set when `unordered` is full: no call is answered inline any more.
    var disabled = false

    /// Marks `sender` as one whose calls always take the usual way (all connections, once
    /// `unordered` is full).
    mutating func neverInline(_ sender: String) {
        guard !unordered.contains(sender) else { return }
        if unordered.count >= SecretService.maximumPeers {
            disabled = true
        } else {
            unordered.insert(sender)
        }
    }

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
