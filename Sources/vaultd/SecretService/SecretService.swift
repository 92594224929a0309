import CGio
import CVaultSys
import Foundation
import SecretSession
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// vaultd's second front-end: the freedesktop Secret Service on the session bus, through
/// GLib's GDBus (docs/secret-service.md). It owns `org.freedesktop.secrets`, identifies each
/// calling connection from the bus's credentials through `PeerIdentity` (as the socket
/// identifies its peers), and turns each call into engine operations made with that
/// `Caller`: collections are access groups, items are generic passwords of service
/// `Vault.secretServiceService` with lookup attributes. It authorizes nothing itself: a
/// method without an entry in `SecretServiceOperations.byMember` is refused, and the engine
/// decides every other one.
///
/// Threads: one, `vaultd-dbus`, runs a GMainContext of its own; every method call and
/// property access is handled on it, each with one bounded engine call or a few (reads on
/// a reader connection; writes wait for their group commit). A prompt's wait is no call:
/// it ends from the engine's lock-state event or a timer.
///
/// `@unchecked Sendable`: its tables (peers, sessions, prompts, the items' signal window) are
/// read and written under `lock`; `context`, `loop` and `connection` are set on the bus
/// thread before `start` returns, and GLib's objects are thread-safe (a pointer is not
/// `Sendable`).
final class SecretService: @unchecked Sendable {
    static let busName = "org.freedesktop.secrets"

    /// The most peers whose identity is kept (one per bus connection that called), sessions
    /// per peer (past it, opening one closes that peer's oldest: secretstorage opens one for
    /// every item it makes and never closes them) and prompts per peer (past it,
    /// LimitsExceeded).
    static let maximumPeers = 1024
    static let maximumSessionsPerPeer = 64
    static let maximumPromptsPerPeer = 16
    /// The most bytes of secrets one GetSecrets returns.
    static let maximumSecretsReply = Varlink.maximumMessageSize
    /// How long a bus query of vaultd's own (credentials, a name's owner) may take (ms).
    static let busCallTimeout: Int32 = 5000
    /// Prompts that wait are logged, at most a burst of 10 every 6 s.
    static let promptLog = RateLimitedLog()

    let vault: Vault
    /// The vault's logger, which the Secret Service, its portal and its prompter log to.
    var logger: Logger { vault.logger }
    let replace: Bool
    /// Seconds after which a prompt the vault's unlock did not complete is dismissed.
    let promptTimeout: Double

    private(set) var connection: OpaquePointer?
    private(set) var context: OpaquePointer?
    private var loop: OpaquePointer?
    private(set) var nodeInfo: UnsafeMutablePointer<GDBusNodeInfo>?
    private let interfaceVTable = UnsafeMutablePointer<GDBusInterfaceVTable>.allocate(capacity: 1)
    private let subtreeVTable = UnsafeMutablePointer<GDBusSubtreeVTable>.allocate(capacity: 1)

    /// Guards everything below (the bus thread, the engine's event thread and the prompt
    /// timers use it).
    let lock = NSLock()
    var peers: [String: BusPeer] = [:]
    /// The collections whose readers are sent their new Items at the end of the current
    /// window (`ChangeSignals.swift`), and whether that end is scheduled.
    var itemsDue: [(collection: String, group: String)] = []
    var itemsWindowScheduled = false
    /// The length of the next window (seconds): `itemsWindow`, or longer after a window whose
    /// signals were many (`itemsBytesPerSecond`).
    var itemsNextWindow = SecretService.itemsWindow
    /// Session ID → the session.
    var sessions: [String: Session] = [:]
    var prompts: [String: Prompt] = [:]
    var nextID: UInt64 = 0
    /// Whether the relay answers the inline reads (`InlineReads.swift`); set before it runs.
    var inlineEnabled = true
    private var observer: VaultSubscription?
    /// The bus relay that answers calls itself (`InlineReads.swift`), once it does.
    private(set) var relay: BusRelay?
    /// What the relay's answering of calls keeps (`InlineReads.swift`).
    let inline = Locked(InlineState())
    /// The registered prompter agent, which prompts ask for the passphrase.
    private(set) lazy var prompter = PrompterAgent(service: self)
    /// vaultd's own dialogs (gcr's system prompter, pinentry), which the `Prompter` setting
    /// may choose instead of the agent.
    private(set) lazy var dialogs = PromptDialogs(service: self, logger: vault.logger)
    /// Calls waiting for the user's confirmation of an access, each on a thread of its own
    /// (`SecretService+Access.swift`).
    let waitingCalls = Locked(0)
    /// Durable writes being answered off the bus thread (`SecretService+Writes.swift`).
    let writingCalls = Locked(0)
    /// The threads they are answered on.
    let writers = WritingThreads(limit: SecretService.maximumWritingCalls)
    /// Connections with such a write not yet answered, and the calls each sent since, which
    /// wait for it (`SecretService+Writes.swift`).
    let behindWrites = Locked([String: [@Sendable () -> Void]]())
    /// The Flatpak secret portal's backend, on the same connection (`SecretPortal.swift`).
    private(set) lazy var portal = SecretPortal(service: self)

    /// An identified connection.
    final class BusPeer {
        let vaultSession: VaultSession
        let credentials: PeerCredentials
        /// The service's Collections as this connection was last given them (nil: never),
        /// under the service's lock.
        var collections: [String]?
        /// The collections whose Items this connection read (`itemsRead`): it is sent their
        /// Items, Created and Modified when they change, each costing a read of the whole
        /// collection; one that never read them (a program that stores or looks up, keeping
        /// no collection) has no copy to keep current. At most `maximumItemsReaders`, past
        /// which it is sent every collection's.
        var itemsRead: [String] = []
        var readsAllItems = false
        /// What the signals sent to it since the last Ping it answered was sent cost
        /// (`signalCost`), and that figure when a Ping of vaultd's on its way was sent (nil:
        /// none is): `SignalBudget.swift`.
        var unconfirmed = 0
        var pingAt: Int?
        /// The collections whose signals it was not sent while behind (`tell`), at most
        /// `maximumItemsReaders` (past it `missedAll`: every collection).
        var missed: [String] = []
        var missedAll = false
        init(vaultSession: VaultSession, credentials: PeerCredentials) {
            // Its calls never wait for a dialog on the bus thread (`SecretService+Access.swift`).
            self.vaultSession = vaultSession.waiting(.deferred)
            self.credentials = credentials
        }
    }

    /// A transport session: the connection that opened it, and for an encrypted one its key.
    final class Session {
        let owner: String
        let dh: DHSession?
        /// Its place in the order sessions were opened.
        let number: UInt64
        init(owner: String, dh: DHSession?, number: UInt64) {
            self.owner = owner
            self.dh = dh
            self.number = number
        }
    }

    /// A prompt: made by Unlock on a locked vault, completed by the vault's unlock, or
    /// dismissed (Dismiss, or `promptTimeout` after Prompt was called).
    final class Prompt {
        let owner: String
        /// What Completed's result lists when the vault is unlocked.
        let objects: [String]
        /// The app that asked (nil: the owner's program), as a prompter is told.
        let appID: String?
        var started = false
        /// Set by Prompt: the window the client named (for a prompter to set its dialog's
        /// parent), and when the prompt is dismissed (MonotonicClock nanoseconds).
        var windowID = ""
        var deadline: UInt64 = 0
        init(owner: String, objects: [String], appID: String?) {
            self.owner = owner
            self.objects = objects
            self.appID = appID
        }
    }

    /// The most bytes of a window ID a prompt keeps (longer: none).
    static let maximumWindowID = 256

    init(vault: Vault, replace: Bool, promptTimeout: Double) {
        self.vault = vault
        self.replace = replace
        self.promptTimeout = promptTimeout
    }

    // MARK: start

    /// Connects to the session bus and serves on a thread of its own. Returns once the name
    /// request is answered (or failed): whether vaultd now owns `org.freedesktop.secrets`.
    /// What happened is logged, with the process that owns the name when another does.
    @discardableResult
    func start() -> Bool {
        let done = DispatchSemaphore(value: 0)
        // Written by the bus thread before it signals `done`, read after the wait.
        let owned = Locked(false)
        let thread = Thread { [self] in
            vault_set_thread_name("vaultd-dbus")
            self.run { serving in
                owned.withLock { $0 = serving }
                done.signal()
            }
        }
        thread.stackSize = 1 << 20
        thread.start()
        done.wait()
        return owned.withLock { $0 }
    }

    /// The session bus's address: DBUS_SESSION_BUS_ADDRESS, else `$XDG_RUNTIME_DIR/bus` (as
    /// systemd's user bus); nil when neither (GLib's own fallback would start a bus).
    static func sessionBusAddress() -> String? {
        let env = ProcessInfo.processInfo.environment
        if let a = env["DBUS_SESSION_BUS_ADDRESS"], !a.isEmpty { return a }
        if let run = env["XDG_RUNTIME_DIR"], run.hasPrefix("/"),
            SystemCall.access(run + "/bus", F_OK)
        {
            return "unix:path=" + run + "/bus"
        }
        return nil
    }

    /// The bus thread: connect, register, ask for the name, then serve (for as long as vaultd
    /// runs; calls after the bus went away just fail).
    /// `started` is called once, with whether vaultd owns the name, before it serves.
    private func run(started: (Bool) -> Void) {
        var serving = false
        var startedCalled = false
        func report() {
            if !startedCalled {
                startedCalled = true
                started(serving)
            }
        }
        defer { report() }
        guard let address = Self.sessionBusAddress() else {
            logger.warning(
                "secret service: no session bus (DBUS_SESSION_BUS_ADDRESS and XDG_RUNTIME_DIR/bus are unset): not serving"
            )
            return
        }
        let ctx = g_main_context_new()
        context = ctx
        g_main_context_push_thread_default(ctx)
        var err: UnsafeMutablePointer<GError>?
        let flags = GDBusConnectionFlags(
            rawValue: G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT.rawValue
                | G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION.rawValue)
        var relay: BusRelay?
        guard let conn = Self.connect(address, flags, &err, relay: &relay, logger: logger) else {
            logger.error(
                "secret service: cannot connect to the session bus (\(logField(address))): \(String(cString: cg_error_message(err)))"
            )
            g_error_free(err)
            return
        }
        connection = conn
        g_dbus_connection_set_exit_on_close(conn, 0)
        guard registerObjects() else { return }
        addFilter()
        if inlineEnabled, let relay {
            self.relay = relay
            relay.serve(self)
        }
        subscribeToBus()
        guard requestName() else {
            g_dbus_connection_close_sync(conn, nil, nil)
            return
        }
        serving = true
        do {
            observer = try vault.daemonSession(for: .secretServiceSignals).subscribe(
                .observeItemChanges
            ) { [weak self] event in
                switch event {
                case .lockState: self?.lockStateChanged()
                case .itemsChanged(let changes): self?.itemsChanged(changes)
                default: break
                }
            }
        } catch {
            logger.error("secret service: no item or lock signals will be sent: \(error)")
        }
        report()
        let l = g_main_loop_new(ctx, 0)
        loop = l
        g_main_loop_run(l)
    }

    private var userData: gpointer { Unmanaged.passUnretained(self).toOpaque() }

    /// A GDBus connection to the bus at `address`, through a `BusRelay` (none with
    /// `VAULTD_SECRET_SERVICE_RELAY=0`); nil with `err` set.
    private static func connect(
        _ address: String, _ flags: GDBusConnectionFlags,
        _ err: inout UnsafeMutablePointer<GError>?, relay: inout BusRelay?,
        logger: Logger
    ) -> OpaquePointer? {
        guard ProcessInfo.processInfo.environment["VAULTD_SECRET_SERVICE_RELAY"] != "0" else {
            return g_dbus_connection_new_for_address_sync(address, flags, nil, nil, &err)
        }
        let fd: Int32
        do {
            (fd, relay) = try BusRelay.start(address: address, logger: logger)
        } catch {
            g_set_error_literal(
                &err, g_io_error_quark(), Int32(G_IO_ERROR_FAILED.rawValue), BusError(error).message
            )
            return nil
        }
        return cg_dbus_connection_new_for_fd(fd, flags, &err)
    }

    static func this(_ p: gpointer?) -> SecretService {
        Unmanaged<SecretService>.fromOpaque(p!).takeUnretainedValue()
    }

    /// The interfaces' descriptions and the callbacks of every object, registered as subtrees
    /// (GDBus dispatches a subtree's direct children: one for the service and its folders,
    /// and items' calls, which reach no subtree, dispatched by vaultd itself: `OwnDispatch.swift`).
    private func registerObjects() -> Bool {
        var err: UnsafeMutablePointer<GError>?
        guard let info = g_dbus_node_info_new_for_xml(SecretServiceIntrospection.xml, &err) else {
            logger.error(
                "secret service: bad introspection data: \(String(cString: cg_error_message(err)))")
            g_error_free(err)
            return false
        }
        nodeInfo = info
        interfaceVTable.initialize(to: GDBusInterfaceVTable())
        interfaceVTable.pointee.method_call = {
            _, sender, path, interface, method, parameters, invocation, user in
            SecretService.this(user).methodCall(
                sender: sender.map { String(cString: $0) } ?? "", path: String(cString: path!),
                interface: String(cString: interface!),
                method: String(cString: method!), parameters: GV(borrowing: parameters!),
                invocation: invocation!)
        }
        // No get_property or set_property: GDBus then hands Properties calls to method_call
        // (`propertyCall`), whose errors carry their own names.
        subtreeVTable.initialize(to: GDBusSubtreeVTable())
        subtreeVTable.pointee.enumerate = { _, sender, path, user in
            SecretService.this(user).enumerate(
                sender: sender.map { String(cString: $0) } ?? "", path: String(cString: path!))
        }
        subtreeVTable.pointee.introspect = { _, _, path, node, user in
            let this = SecretService.this(user)
            return this.introspect(path: this.fullPath(path, node))
        }
        subtreeVTable.pointee.dispatch = { _, _, _, _, _, outUserData, user in
            outUserData?.pointee = user
            return UnsafePointer(SecretService.this(user).interfaceVTable)
        }
        for path in Self.fixedSubtrees {
            guard registerSubtree(path) != 0 else { return false }
        }
        return portal.register()
    }

    /// The object a subtree callback is about. GDBus names it by the subtree's path and the
    /// child (`node`, nil for the subtree's own path), except that GLib 2.74 gives a method
    /// call's full path with the child: a path that is no subtree of vaultd's is taken whole.
    private func fullPath(_ path: UnsafePointer<gchar>?, _ node: UnsafePointer<gchar>?) -> String {
        let base = String(cString: path!)
        guard let node else { return base }
        return isSubtree(base) ? base + "/" + String(cString: node) : base
    }

    /// Whether a subtree is registered at `path`.
    private func isSubtree(_ path: String) -> Bool {
        Self.fixedSubtrees.contains(path)
    }

    /// The subtrees: the service and its folders. GDBus hands a subtree only its direct
    /// children, so an item's path (`…/collection/GROUP/ID`) reaches none: vaultd dispatches
    /// those calls itself (`OwnDispatch.swift`), the same way whichever collection they name.
    private static let fixedSubtrees = [
        SecretServicePath.root, SecretServicePath.collectionRoot, SecretServicePath.aliasRoot,
        SecretServicePath.sessionRoot, SecretServicePath.promptRoot,
    ]

    @discardableResult
    private func registerSubtree(_ path: String) -> guint {
        var err: UnsafeMutablePointer<GError>?
        let id = g_dbus_connection_register_subtree(
            connection, path, subtreeVTable, G_DBUS_SUBTREE_FLAGS_DISPATCH_TO_UNENUMERATED_NODES,
            userData, nil, &err)
        if id == 0 {
            logger.error(
                "secret service: cannot register \(path): \(String(cString: cg_error_message(err)))"
            )
            g_error_free(err)
        }
        return id
    }

    /// The path of collection `group`.
    func collectionPath(_ group: String) -> String {
        SecretServicePath.collection(group).path
    }

    func itemPath(_ group: String, _ id: String) -> String {
        SecretServicePath.item(collection: group, id: id).path
    }

    // MARK: the bus

    /// A call of vaultd's own to the bus daemon, bounded by `busCallTimeout`.
    func busCall(_ method: String, _ arguments: [GV], reply: String) throws -> GV {
        var err: UnsafeMutablePointer<GError>?
        // The type string is lent for the whole call (one passed straight to cg_type would
        // live only for cg_type's own call).
        let result = reply.withCString { type in
            GV.tuple(arguments).pass {
                g_dbus_connection_call_sync(
                    connection, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                    "org.freedesktop.DBus", method, $0,
                    cg_type(type), G_DBUS_CALL_FLAGS_NONE, Self.busCallTimeout, nil, &err)
            }
        }
        guard let result else {
            let message = String(cString: cg_error_message(err))
            g_error_free(err)
            throw BusError(.failed, "the bus did not answer \(method): \(message)")
        }
        return GV(owned: result)
    }

    /// NameOwnerChanged (a connection left: its identity, sessions and prompts go) and
    /// NameLost (another provider took the name with its own replace).
    private func subscribeToBus() {
        _ = g_dbus_connection_signal_subscribe(
            connection, "org.freedesktop.DBus", "org.freedesktop.DBus", "NameOwnerChanged",
            "/org/freedesktop/DBus", nil,
            G_DBUS_SIGNAL_FLAGS_NONE,
            { _, _, _, _, _, parameters, user in
                let p = GV(borrowing: parameters!)
                guard p.count == 3 else { return }
                let name = p.child(0).string
                let newOwner = p.child(2).string
                if name.hasPrefix(":") && newOwner.isEmpty { SecretService.this(user).forget(name) }
            }, userData, nil)
        _ = g_dbus_connection_signal_subscribe(
            connection, "org.freedesktop.DBus", "org.freedesktop.DBus", "NameLost",
            "/org/freedesktop/DBus", nil, G_DBUS_SIGNAL_FLAGS_NONE,
            { _, _, _, _, _, parameters, user in
                let p = GV(borrowing: parameters!)
                if p.count == 1, p.child(0).string == SecretService.busName {
                    SecretService.this(user).logger.warning(
                        "secret service: another provider took over \(SecretService.busName) (its --replace): vaultd no longer serves it"
                    )
                }
            }, userData, nil)
    }

    /// A connection left the bus.
    private func forget(_ sender: String) {
        lock.withLock {
            peers[sender] = nil
            sessions = sessions.filter { $0.value.owner != sender }
            prompts = prompts.filter { $0.value.owner != sender }
        }
        inline.withLock { $0.forget(sender) }
        prompter.connectionLeft(sender)
    }

    // MARK: identity

    /// The `Caller` of connection `sender`, identified once from the bus's credentials
    /// (GetConnectionCredentials: its uid and pid) through `PeerIdentity.caller`, the
    /// socket's identification, and checked at each call: the same process (its pidfd
    /// alive) running the same program. Every failure refuses the call (AccessDenied); none
    /// makes the peer the owner.
    func identify(_ sender: String) throws -> VaultSession {
        if let p = lock.withLock({ peers[sender] }) {
            guard p.credentials.isAlive,
                p.credentials.currentExecutable == p.credentials.identifiedExecutable
            else {
                lock.withLock { peers[sender] = nil }
                throw BusError.accessDenied(
                    "vaultd does not serve this connection: its process exited or ran another program since it was identified"
                )
            }
            return p.vaultSession
        }
        guard sender.hasPrefix(":") else {
            throw BusError.accessDenied("vaultd serves only calls with a unique sender name")
        }
        let (pid, uid) = try credentials(sender)
        guard uid == getuid() else {
            throw BusError.accessDenied(
                "vaultd serves only its own user (the connection is uid \(uid))")
        }
        let pidfd = vault_pidfd_open(pid)
        guard pidfd >= 0 else {
            throw BusError.accessDenied(
                "vaultd does not serve this connection: its process \(pid) cannot be opened (pidfd_open: \(String(cString: strerror(errno))))"
            )
        }
        let peer = PeerCredentials(pid: pid, uid: uid, pidfd: pidfd)
        let vaultSession: VaultSession
        switch PeerIdentity.session(for: peer, vault: vault) {
        case .success(let c): vaultSession = c
        case .failure(let e): throw BusError.accessDenied(e.message)
        }
        // The pidfd was opened from the pid the bus gave: it named the connection's process
        // only if the bus still gives that pid now (the connection is still there, so its
        // process's pid was not reused before the pidfd was opened).
        guard let again = try? credentials(sender), again.pid == pid else {
            throw BusError.accessDenied(
                "vaultd does not serve this connection: it left the bus while vaultd identified it")
        }
        lock.withLock {
            if peers.count < Self.maximumPeers {
                peers[sender] = BusPeer(vaultSession: vaultSession, credentials: peer)
            }
        }
        return vaultSession.waiting(.deferred)
    }

    /// The kernel's record of identified connection `sender` (`identify` first), nil when vaultd
    /// keeps none for it (not identified, or past `maximumPeers`).
    func identifiedCredentials(_ sender: String) -> PeerCredentials? {
        lock.withLock { peers[sender]?.credentials }
    }

    /// The `Caller` of a connection identified already that still passes the per-call check
    /// (as `caller`); nil otherwise. It never asks the bus (it runs on the bus relay's thread).
    func identified(_ sender: String) -> VaultSession? {
        guard let p = lock.withLock({ peers[sender] }), p.credentials.isAlive,
            p.credentials.currentExecutable == p.credentials.identifiedExecutable
        else { return nil }
        return p.vaultSession
    }

    /// The uid and pid the bus records for connection `sender` (it took them from the
    /// kernel, SO_PEERCRED, when the connection was made).
    func credentials(_ sender: String) throws -> (pid: pid_t, uid: uid_t) {
        let reply: GV
        do {
            reply = try busCall("GetConnectionCredentials", [.string(sender)], reply: "(a{sv})")
                .child(0)
        } catch {
            throw BusError.accessDenied(
                "vaultd cannot identify this connection: \(BusError(error).message)")
        }
        guard let pid = reply.lookup("ProcessID", "u"), let uid = reply.lookup("UnixUserID", "u")
        else {
            throw BusError.accessDenied(
                "vaultd cannot identify this connection: the bus gives no pid or uid for it")
        }
        return (pid_t(pid.uint32), uid_t(uid.uint32))
    }

    // MARK: dispatch

    private func methodCall(
        sender: String, path: String, interface: String, method: String, parameters: GV,
        invocation: OpaquePointer
    ) {
        let call = Handed((parameters, invocation))
        if waitsBehindWrite(
            sender,
            { [self] in
                methodCall(
                    sender: sender, path: path, interface: interface, method: method,
                    parameters: call.value.0, invocation: call.value.1)
            })
        {
            return
        }
        Self.answer(invocation) {
            if interface == Self.propertiesInterface {
                return try propertyCall(method, sender: sender, path: path, parameters)
            }
            guard SecretServiceOperations.of(interface, method) != nil else {
                throw BusError.accessDenied("\(interface).\(method) has no policy decision")
            }
            let vaultSession = try identify(sender)
            guard let target = SecretServicePath(path) else { throw BusError.noSuchObject }
            if Self.writesDurably(interface, method) {
                let started = answerWrite(of: sender) { [self] in
                    let (parameters, invocation) = call.value
                    Self.answer(invocation) {
                        try handleOffBusThread(
                            method, of: interface, on: target, parameters, sender: sender,
                            vaultSession: vaultSession)
                    }
                }
                if started { throw Deferred() }
            }
            do {
                return try handle(
                    method, of: interface, on: target, parameters, sender: sender,
                    vaultSession: vaultSession)
            } catch let e where Self.waitsForUser(e) {
                // Run again off the bus thread (`SecretService+Access.swift`), answered there.
                let call = Handed((invocation, parameters))
                try answerOffThread { [self] in
                    let (invocation, parameters) = call.value
                    Self.answer(invocation) {
                        try handle(
                            method, of: interface, on: target, parameters, sender: sender,
                            vaultSession: vaultSession.waiting(.wait))
                    }
                }
                throw Deferred()
            }
        }
    }

    /// Returns `body`'s reply, or its error, on `invocation` (which this consumes), but for
    /// `Deferred`: the call is answered later, from another thread.
    private static func answer(_ invocation: OpaquePointer, _ body: () throws -> GV?) {
        do {
            if let reply = try body() {
                reply.pass { g_dbus_method_invocation_return_value(invocation, $0) }
            } else {
                g_dbus_method_invocation_return_value(invocation, nil)
            }
        } catch is Deferred {
            // Answered by the thread it was handed to.
        } catch {
            let e = BusError(error)
            g_dbus_method_invocation_return_dbus_error(invocation, e.name.rawValue, e.message)
        }
    }

    /// The interfaces of the object at `path` (none for a path that is no object).
    private func introspect(path: String) -> UnsafeMutablePointer<
        UnsafeMutablePointer<GDBusInterfaceInfo>?
    >? {
        let names: [String]
        switch SecretServicePath(path) {
        case .service?:
            names = [SecretServiceIntrospection.service, SecretServiceIntrospection.prompting]
        case .collection?, .alias?: names = [SecretServiceIntrospection.collection]
        case .item?, .damaged?: names = [SecretServiceIntrospection.item]
        case .session?: names = [SecretServiceIntrospection.session]
        case .prompt?: names = [SecretServiceIntrospection.prompt]
        case .inner?, nil: return nil
        }
        var infos: [UnsafeMutablePointer<GDBusInterfaceInfo>?] = names.compactMap {
            g_dbus_node_info_lookup_interface(nodeInfo, $0)
        }
        return cg_interfaces_new(&infos, guint(infos.count))
    }

    /// The children GDBus lists under a subtree's own path: the aliases under theirs. The
    /// collections' folder is answered by `introspectCollections` instead.
    private func enumerate(sender: String, path: String) -> UnsafeMutablePointer<
        UnsafeMutablePointer<gchar>?
    >? {
        let names = path == SecretServicePath.aliasRoot ? SecretServicePath.aliases : []
        let strv = cg_strv_new(guint(names.count))!
        for (i, n) in names.enumerated() { strv[i] = g_strdup(n) }
        return strv
    }

    /// The path elements of the collections `caller` sees, as `Service.Collections` lists
    /// them (its access groups, and `session` once).
    func enumerateCollections(vaultSession: VaultSession) throws -> [String] {
        try visibleCollections(vaultSession: vaultSession).map(SecretServicePath.encode)
    }

    /// The collections (groups) `caller` sees: its access groups (`Vault.accessGroups`,
    /// which the policy decides), and the session collection, once.
    func visibleCollections(vaultSession: VaultSession) throws -> [String] {
        try vaultSession.accessGroups().filter { !Self.isSession($0) } + [
            Vault.sessionCollection
        ]
    }

    /// A signal to one connection (GDBus may be called from any thread for this).
    func emit(
        to destination: String, path: String, _ interface: String, _ name: String, _ arguments: [GV]
    ) {
        emit(to: destination, path: path, interface, name, body: GV.tuple(arguments))
    }

    /// A signal to one connection, with its arguments' tuple.
    func emit(
        to destination: String, path: String, _ interface: String, _ name: String, body: GV
    ) {
        var err: UnsafeMutablePointer<GError>?
        if body.pass({
            g_dbus_connection_emit_signal(connection, destination, path, interface, name, $0, &err)
        }) == 0 {
            g_error_free(err)
        }
    }
}
