import CGio
import Foundation
import VaultCore
import VaultProtocol

/// A prompt of gcr's system prompter (`org.gnome.keyring.SystemPrompter`: gnome-shell's, or
/// gcr's standalone `gcr-prompter`, started by D-Bus activation), spoken to as gnome-keyring
/// and gcr's `GcrSystemPrompt` do (gcr/gcr-system-prompt.c, gcr/org.gnome.keyring.Prompter.xml):
///
/// 1. vaultd exports a callback object (`org.gnome.keyring.internal.Prompter.Callback`) and
///    calls `BeginPrompting(callback)` on `/org/gnome/keyring/Prompter`;
/// 2. the prompter calls `PromptReady("", {}, exchange)` when it is vaultd's turn, its
///    exchange carrying its public value (`GcrSecretExchange`);
/// 3. `PerformPrompt(callback, "password" | "confirm", properties, exchange)` shows the dialog
///    (title, message, description, warning, continue-label, cancel-label, choice-label,
///    caller-window...); the prompter answers `PromptReady(reply, properties, exchange)`,
///    reply `yes` (its exchange then carries the passphrase, encrypted), `no` or `` (cancelled);
/// 4. `StopPrompting(callback)` closes it; the prompter answers `PromptDone()`.
///
/// Only the connection that owned the prompter's name when the prompt began may call the
/// callback; its leaving the bus ends the prompt as dismissed, and so do the deadline and
/// `cancel`. The calls vaultd makes are bounded by the deadline; the callbacks come on the
/// Secret Service's bus thread and are answered there at once.
///
/// `@unchecked Sendable`: `events`, `cancelled`, `closed`, `registration` and
/// `subscription` are read and written under `lock`; `connection` is GDBus's connection,
/// a thread-safe GObject (a pointer is not `Sendable`).
final class GcrPrompter: PromptDialog, @unchecked Sendable {
    static let busName = "org.gnome.keyring.SystemPrompter"
    static let path = "/org/gnome/keyring/Prompter"
    static let interface = "org.gnome.keyring.internal.Prompter"
    static let callbackInterface = "org.gnome.keyring.internal.Prompter.Callback"
    /// Where vaultd's callback objects live (one per prompt).
    static let callbackRoot = "/io/vaultd/Prompter"
    /// The most bytes of one callback's properties and exchange taken.
    static let maximumCallback = GcrSecretExchange.maximumText + 64 << 10

    static let callbackXML = """
        <node>
          <interface name="org.gnome.keyring.internal.Prompter.Callback">
            <method name="PromptReady">
              <arg name="reply" type="s" direction="in"/>
              <arg name="properties" type="a{sv}" direction="in"/>
              <arg name="exchange" type="s" direction="in"/>
            </method>
            <method name="PromptDone"/>
          </interface>
        </node>
        """
    // `nonisolated(unsafe)`: GLib data made once and never written after (GDBus only reads
    // it, from any thread); a pointer is not `Sendable`, and no lock would guard anything.
    nonisolated(unsafe) static let callbackInfo: UnsafeMutablePointer<GDBusInterfaceInfo>? = {
        guard let node = g_dbus_node_info_new_for_xml(callbackXML, nil) else { return nil }
        return node.pointee.interfaces[0]
    }()
    nonisolated(unsafe) static let vtable: UnsafeMutablePointer<GDBusInterfaceVTable> = {
        let v = UnsafeMutablePointer<GDBusInterfaceVTable>.allocate(capacity: 1)
        v.initialize(to: GDBusInterfaceVTable())
        v.pointee.method_call = { _, sender, _, _, method, parameters, invocation, user in
            let this = Unmanaged<GcrPrompter>.fromOpaque(user!).takeUnretainedValue()
            this.callback(
                sender: sender.map { String(cString: $0) } ?? "", method: String(cString: method!),
                GV(borrowing: parameters!), invocation!)
        }
        return v
    }()
    private static let counter = Locked<UInt64>(0)

    enum Failure: Error, CustomStringConvertible {
        case unavailable(String)
        case protocolError(String)
        var description: String {
            switch self {
            case .unavailable(let why): "gcr's system prompter is not available: \(why)"
            case .protocolError(let why): "gcr's system prompter: \(why)"
            }
        }
    }

    /// What the prompter told the callback.
    enum Event {
        case ready(reply: String, choiceChosen: Bool, exchange: String)
        case done
        case gone
    }

    let service: SecretService
    let connection: OpaquePointer?
    let callbackPath: String
    /// The prompter's unique name.
    let owner: String
    let exchange = GcrSecretExchange()
    /// Guards the fields below (the bus thread and the dialogs' queue use them).
    private let lock = NSLock()
    private var events: [Event] = []
    private var cancelled = false
    private var closed = false
    private let signal = DispatchSemaphore(value: 0)
    private var registration: guint = 0
    private var subscription: guint = 0

    /// Whether the system prompter's name has an owner or can be activated on `connection`.
    static func isAvailable(on connection: OpaquePointer?) -> Bool {
        guard let connection else { return false }
        if let r = try? call(
            connection, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
            "NameHasOwner", .tuple([.string(busName)]), timeout: 2000),
            r.child(0).bool
        {
            return true
        }
        guard
            let r = try? call(
                connection, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                "org.freedesktop.DBus", "ListActivatableNames", .tuple([]), timeout: 2000)
        else { return false }
        return r.child(0).children.contains { $0.string == busName }
    }

    /// Starts the prompter when it is not running (D-Bus activation), registers the
    /// callback, begins prompting and waits for the prompter's first PromptReady.
    init(service: SecretService, deadline: UInt64) throws {
        self.service = service
        connection = service.connection
        let number = Self.counter.withLock { n -> UInt64 in
            n += 1
            return n
        }
        callbackPath = Self.callbackRoot + "/p\(number)"
        guard let connection, Self.callbackInfo != nil else {
            throw Failure.unavailable("no bus connection")
        }
        _ = try? Self.call(
            connection, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
            "StartServiceByName",
            .tuple([.string(Self.busName), GV(new: g_variant_new_uint32(0))]),
            timeout: Self.remaining(deadline))
        do {
            owner = try Self.call(
                connection, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                "org.freedesktop.DBus", "GetNameOwner", .tuple([.string(Self.busName)]),
                timeout: Self.remaining(deadline)
            ).child(0).string
        } catch {
            throw Failure.unavailable("\(Self.busName) has no owner (\(error))")
        }
        // The prompter is handed the passphrase the user types: only a program of the owner's
        // may be it, as the policy decides for a registered agent (RegisterPrompter). A
        // registered app that took the name first gets no prompt.
        do {
            try service.identify(owner).registerPrompter()
        } catch {
            throw Failure.unavailable(
                "\(Self.busName) is held by a connection that may not prompt (\(error))")
        }
        do {
            try register()
            _ = try Self.call(
                connection, owner, Self.path, Self.interface, "BeginPrompting",
                .tuple([.objectPath(callbackPath)]), timeout: Self.remaining(deadline))
            guard case .ready(_, _, let text)? = next(deadline: deadline) else {
                throw Failure.protocolError("no PromptReady after BeginPrompting")
            }
            _ = try exchange.receive(text)
        } catch {
            close()
            throw error
        }
    }

    deinit { close() }

    /// The callback object and a watch on the prompter's name, registered on the bus thread
    /// (GDBus dispatches an object's calls in the context it was registered from).
    private func register() throws {
        let done = DispatchSemaphore(value: 0)
        // Each registration holds a reference of its own, released by GDBus once no callback
        // can come any more (after `close` removes it): a call already queued on the bus
        // thread then still finds the prompt.
        let release: GDestroyNotify = { Unmanaged<GcrPrompter>.fromOpaque($0!).release() }
        service.onBusThread(priority: 0) { [self] in
            var err: UnsafeMutablePointer<GError>?
            let id = g_dbus_connection_register_object(
                connection, callbackPath, Self.callbackInfo, Self.vtable,
                Unmanaged.passRetained(self).toOpaque(), release, &err)
            if err != nil { g_error_free(err) }
            // A registration that failed keeps no reference (GDBus frees nothing then).
            if id == 0 { Unmanaged.passUnretained(self).release() }
            let sub = g_dbus_connection_signal_subscribe(
                connection, "org.freedesktop.DBus", "org.freedesktop.DBus", "NameOwnerChanged",
                "/org/freedesktop/DBus", Self.busName, G_DBUS_SIGNAL_FLAGS_NONE,
                { _, _, _, _, _, parameters, user in
                    let p = GV(borrowing: parameters!)
                    let this = Unmanaged<GcrPrompter>.fromOpaque(user!).takeUnretainedValue()
                    if p.count == 3, p.child(1).string == this.owner { this.post(.gone) }
                }, Unmanaged.passRetained(self).toOpaque(), release)
            lock.withLock {
                registration = id
                subscription = sub
            }
            done.signal()
        }
        done.wait()
        guard lock.withLock({ registration }) != 0 else {
            throw Failure.unavailable("cannot export \(callbackPath)")
        }
    }

    // MARK: dialogs

    func passphrase(_ text: DialogText, deadline: UInt64) -> PassphraseAnswer {
        do {
            var props = properties(text)
            props.append(entry("password-new", .bool(false)))
            props.append(entry("choice-label", .string("")))
            guard case .ready(let reply, _, let ex)? = try perform("password", props, deadline)
            else { return .dismissed(isCancelled ? "cancelled" : "the prompter ended the prompt") }
            guard reply == "yes" else { return .dismissed("cancelled") }
            guard let secret = try exchange.receive(ex) else {
                return .dismissed("the prompter's answer carries no passphrase")
            }
            return .passphrase(secret)
        } catch {
            return .dismissed("\(error)")
        }
    }

    /// A confirm prompt: Allow (continue) or Deny (cancel), with the always-allow choice as
    /// gcr's check box (`choice-label`, `choice-chosen`).
    func confirm(_ text: DialogText, always: String, deadline: UInt64) -> AccessChoice? {
        var props = properties(text)
        props.append(entry("choice-label", .string(always)))
        props.append(entry("choice-chosen", .bool(false)))
        guard case .ready(let reply, let chosen, _)? = try? perform("confirm", props, deadline)
        else { return nil }
        switch reply {
        case "yes": return chosen ? .alwaysAllow : .allowOnce
        case "no": return .deny
        default: return nil
        }
    }

    func cancel() {
        lock.withLock { cancelled = true }
        signal.signal()
    }

    private var isCancelled: Bool { lock.withLock { cancelled } }

    /// StopPrompting (the prompter closes the dialog and answers PromptDone, waited for at
    /// most 2 s), then the callback object and the name watch go.
    func close() {
        let ids: (guint, guint)? = lock.withLock {
            defer { closed = true }
            return closed ? nil : (registration, subscription)
        }
        guard let ids, let connection else { return }
        let deadline = MonotonicClock.nanoseconds() + 2_000_000_000
        if (try? Self.call(
            connection, owner, Self.path, Self.interface, "StopPrompting",
            .tuple([.objectPath(callbackPath)]), timeout: 2000)) != nil
        {
            while let e = next(deadline: deadline, ignoringCancel: true) {
                if case .ready = e { continue }
                break
            }
        }
        if ids.0 != 0 { g_dbus_connection_unregister_object(connection, ids.0) }
        if ids.1 != 0 { g_dbus_connection_signal_unsubscribe(connection, ids.1) }
    }

    /// The properties every prompt sets (gcr's names).
    private func properties(_ text: DialogText) -> [GV] {
        [
            entry("title", .string(text.title)), entry("message", .string(text.message)),
            entry("description", .string(text.description)),
            entry("warning", .string(text.warning ?? "")),
            entry("continue-label", .string(text.okLabel)),
            entry("cancel-label", .string(text.cancelLabel)),
            entry("caller-window", .string(text.windowID)),
        ]
    }

    private func entry(_ key: String, _ value: GV) -> GV {
        .dictEntry(.string(key), .variant(value))
    }

    /// PerformPrompt, then the prompter's answer (nil: cancelled, timed out, done, gone).
    private func perform(_ type: String, _ props: [GV], _ deadline: UInt64) throws -> Event? {
        guard let sent = exchange.send() else { throw Failure.protocolError("no exchange") }
        _ = try Self.call(
            connection!, owner, Self.path, Self.interface, "PerformPrompt",
            .tuple([.objectPath(callbackPath), .string(type), .array("{sv}", props), .string(sent)]
            ),
            timeout: Self.remaining(deadline))
        let e = next(deadline: deadline)
        if case .ready? = e { return e }
        return nil
    }

    // MARK: the callback (bus thread)

    private func callback(
        sender: String, method: String, _ parameters: GV,
        _ invocation: OpaquePointer
    ) {
        guard sender == owner else {
            g_dbus_method_invocation_return_dbus_error(
                invocation, "org.freedesktop.DBus.Error.AccessDenied",
                "only the system prompter that began this prompt may call it")
            return
        }
        g_dbus_method_invocation_return_value(invocation, nil)
        switch method {
        case "PromptReady" where parameters.count == 3:
            guard Int(g_variant_get_size(parameters.raw)) <= Self.maximumCallback else {
                return post(.gone)
            }
            let chosen = parameters.child(1).lookup("choice-chosen", "b")?.bool ?? false
            post(
                .ready(
                    reply: parameters.child(0).string, choiceChosen: chosen,
                    exchange: parameters.child(2).string))
        case "PromptDone": post(.done)
        default: break
        }
    }

    private func post(_ e: Event) {
        lock.withLock { events.append(e) }
        signal.signal()
    }

    /// The next event, or nil at the deadline or a cancel (unless `ignoringCancel`).
    private func next(deadline: UInt64, ignoringCancel: Bool = false) -> Event? {
        while true {
            let e: Event?? = lock.withLock {
                if !events.isEmpty { return .some(events.removeFirst()) }
                return cancelled && !ignoringCancel ? .some(nil) : .none
            }
            if let e { return e.flatMap { if case .gone = $0 { nil } else { $0 } } }
            let now = MonotonicClock.nanoseconds()
            guard now < deadline,
                signal.wait(timeout: .now() + .nanoseconds(Int(clamping: deadline - now)))
                    == .success
            else { return nil }
        }
    }

    // MARK: calls

    /// Milliseconds to `deadline`, at least 1.
    static func remaining(_ deadline: UInt64) -> Int32 {
        let now = MonotonicClock.nanoseconds()
        return now >= deadline ? 1 : Int32(clamping: (deadline - now) / 1_000_000 + 1)
    }

    /// A synchronous call (from the dialogs' queue, never the bus thread), bounded by
    /// `timeout` ms; its reply, or the error as a Failure.
    static func call(
        _ connection: OpaquePointer, _ destination: String, _ path: String, _ interface: String,
        _ method: String, _ arguments: GV, timeout: Int32
    ) throws -> GV {
        var err: UnsafeMutablePointer<GError>?
        let reply = arguments.pass {
            g_dbus_connection_call_sync(
                connection, destination, path, interface, method, $0, nil,
                G_DBUS_CALL_FLAGS_NO_AUTO_START, timeout, nil, &err)
        }
        guard let reply else {
            defer { g_error_free(err) }
            // The message may be the peer's own (a remote error): escaped and bounded.
            throw Failure.protocolError(
                "\(method): \(logField(String(cString: cg_error_message(err))))")
        }
        return GV(owned: reply)
    }
}
