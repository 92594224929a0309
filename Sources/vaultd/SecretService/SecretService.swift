import CGio
import CVaultSys
import Foundation
import SecretSession
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// A D-Bus error reply: its name, one of `Name` (the only names the front-end sends), and a
/// message for people. Every reply goes out through `g_dbus_method_invocation_return_dbus_error`
/// or a message of its own (`InlineReads`) with that name, property calls included
/// (`SecretService.propertyCall`): never as a GError GDBus would have to name itself.
struct BusError: Error, Equatable {
    /// Every error name the Secret Service front-end sends: the specification's own
    /// (org.freedesktop.Secret.Error.*), the bus's standard ones (org.freedesktop.DBus.Error.*),
    /// and vaultd's ItemDamaged, the name the socket gives a damaged item too.
    enum Name: String, CaseIterable {
        case noSuchObject = "org.freedesktop.Secret.Error.NoSuchObject"
        case noSession = "org.freedesktop.Secret.Error.NoSession"
        case isLocked = "org.freedesktop.Secret.Error.IsLocked"
        case invalidArgs = "org.freedesktop.DBus.Error.InvalidArgs"
        case accessDenied = "org.freedesktop.DBus.Error.AccessDenied"
        case notSupported = "org.freedesktop.DBus.Error.NotSupported"
        case limitsExceeded = "org.freedesktop.DBus.Error.LimitsExceeded"
        case unknownMethod = "org.freedesktop.DBus.Error.UnknownMethod"
        case unknownProperty = "org.freedesktop.DBus.Error.UnknownProperty"
        case propertyReadOnly = "org.freedesktop.DBus.Error.PropertyReadOnly"
        case failed = "org.freedesktop.DBus.Error.Failed"
        case itemDamaged = "io.vaultd.Keychain.ItemDamaged"
        /// A secret the per-program access check refused: denied by the user, recently
        /// denied, strict, or a program that could pass for another (docs/access.md).
        case accessRefused = "io.vaultd.Secret.Error.AccessRefused"
        /// A secret that needs the user's confirmation, and none came: no prompter, dismissed,
        /// timed out, or a question for the program already pending.
        case notConfirmed = "io.vaultd.Secret.Error.NotConfirmed"
    }

    var name: Name
    var message: String

    init(_ name: Name, _ message: String) {
        self.name = name
        self.message = message
    }

    /// The one answer for an object the caller may not see, whether it does not exist or is
    /// another app's: the same name and the same words, so no reply tells the two apart.
    static let noSuchObject = BusError(
        .noSuchObject, "no such object, or not one this program may use")
    static func invalidArgs(_ m: String) -> BusError { BusError(.invalidArgs, m) }
    static func noSession(_ m: String) -> BusError { BusError(.noSession, m) }
    static func accessDenied(_ m: String) -> BusError { BusError(.accessDenied, m) }
    static func notSupported(_ m: String) -> BusError { BusError(.notSupported, m) }
    static func limitsExceeded(_ m: String) -> BusError { BusError(.limitsExceeded, m) }
    static func unknownProperty(_ name: String) -> BusError {
        BusError(.unknownProperty, "no property \(name) here")
    }
    static func propertyReadOnly(_ name: String) -> BusError {
        BusError(.propertyReadOnly, "\(name) cannot be set")
    }
    /// A session or prompt of another connection, or one that ended: these belong to a
    /// connection, not to an access group, so saying which is no oracle.
    static func noSuchObject(_ m: String) -> BusError { BusError(.noSuchObject, m) }
}

extension BusError {

    /// The reply for an engine error. A group or item the caller may not use is NoSuchObject,
    /// as one that does not exist, with the same message (`noSuchObject`): a client learns
    /// nothing of other apps' collections.
    init(_ e: VaultFailure) {
        if e.details.program != nil {
            self.init(e.code == .authFailed ? .accessRefused : .notConfirmed, e.message)
            return
        }
        switch e.code {
        case .interactionNotAllowed: self.init(.isLocked, e.message)
        case .itemNotFound, .missingEntitlement, .notAvailableOnThisDevice: self = .noSuchObject
        // vaultd's own name, as on the socket: the item is there but does not read.
        case .itemDamaged: self.init(.itemDamaged, e.message)
        case .permissionDenied: self.init(.accessDenied, e.message)
        case .param, .invalidParameter, .secretTooLarge, .invalidValue:
            self.init(.invalidArgs, e.message)
        case .quotaExceeded, .storageFull, .replyTooLarge, .rateLimited:
            self.init(.limitsExceeded, e.message)
        case .noPassphrase: self.init(.notSupported, e.message)
        default: self.init(.failed, e.message)
        }
    }

    init(_ error: Error) {
        if let b = error as? BusError {
            self = b
        } else if let f = error as? VaultFailure {
            self.init(f)
        } else {
            // A shared codec's error (VaultProtocol's, a LocalizedError) by its message.
            self.init(.failed, (error as? LocalizedError)?.errorDescription ?? "\(error)")
        }
    }
}

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
    private var context: OpaquePointer?
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
    private var sessions: [String: Session] = [:]
    private var prompts: [String: Prompt] = [:]
    private var nextID: UInt64 = 0
    /// Whether the filter answers the inline reads (`InlineReads.swift`); set before it runs.
    var inlineEnabled = true
    private var observer: UUID?
    /// What the filter answering reads on GDBus's worker thread keeps (`InlineReads.swift`).
    let inline = Locked(InlineState())
    /// The registered prompter agent, which prompts ask for the passphrase.
    private(set) lazy var prompter = PrompterAgent(service: self)
    /// vaultd's own dialogs (gcr's system prompter, pinentry), which the `Prompter` setting
    /// may choose instead of the agent.
    private(set) lazy var dialogs = PromptDialogs(service: self, logger: vault.logger)
    /// Calls waiting for the user's confirmation of an access, each on a thread of its own
    /// (`SecretService+Access.swift`).
    let waitingCalls = Locked(0)
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
        nonisolated(unsafe) var owned = false
        let thread = Thread { [self] in
            vault_set_thread_name("vaultd-dbus")
            self.run { serving in
                owned = serving
                done.signal()
            }
        }
        thread.stackSize = 1 << 20
        thread.start()
        done.wait()
        return owned
    }

    /// The session bus's address: DBUS_SESSION_BUS_ADDRESS, else `$XDG_RUNTIME_DIR/bus` (as
    /// systemd's user bus); nil when neither (GLib's own fallback would start a bus).
    static func sessionBusAddress() -> String? {
        let env = ProcessInfo.processInfo.environment
        if let a = env["DBUS_SESSION_BUS_ADDRESS"], !a.isEmpty { return a }
        if let run = env["XDG_RUNTIME_DIR"], run.hasPrefix("/"), access(run + "/bus", F_OK) == 0 {
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
        guard let conn = Self.connect(address, flags, &err, logger: logger) else {
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
        subscribeToBus()
        guard requestName() else {
            g_dbus_connection_close_sync(conn, nil, nil)
            return
        }
        serving = true
        observer = vault.addObserver { [weak self] event in
            switch event {
            case .lockState: self?.lockStateChanged()
            case .itemsChanged(let changes): self?.itemsChanged(changes)
            default: break
            }
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
        _ err: inout UnsafeMutablePointer<GError>?,
        logger: Logger
    ) -> OpaquePointer? {
        guard ProcessInfo.processInfo.environment["VAULTD_SECRET_SERVICE_RELAY"] != "0" else {
            return g_dbus_connection_new_for_address_sync(address, flags, nil, nil, &err)
        }
        let fd: Int32
        do {
            fd = try BusRelay.start(address: address, logger: logger)
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
    private func busCall(_ method: String, _ arguments: [GV], reply: String) throws -> GV {
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

    /// Asks for `org.freedesktop.secrets`, letting a later `--replace` (of vaultd or another
    /// provider) take it. With `replace`, it is taken over: at once from an owner that lets
    /// itself be replaced, else, as gnome-keyring-daemon's `--replace` does, by stopping the
    /// owner (SIGTERM through a pidfd, to a process of vaultd's own user only) and asking
    /// again once the bus says the name is free (at most `replaceWait` seconds). Logs the
    /// outcome, naming the owner when it is another process.
    private func requestName() -> Bool {
        switch askForName() {
        case .owned?:
            logger.notice("secret service: serving \(Self.busName) on the session bus")
            return true
        case nil:
            return false
        case .taken?:
            break
        }
        let owner = nameOwner()
        guard replace else {
            logger.warning(
                "secret service: \(Self.busName) is already provided by \(owner.description): not serving (vaultd --secret-service --replace takes it over)"
            )
            return false
        }
        guard let pid = owner.pid, let uid = owner.uid, uid == getuid(), pid != getpid() else {
            logger.warning(
                "secret service: \(Self.busName) is provided by \(owner.description), which vaultd may not stop: not serving"
            )
            return false
        }
        let pidfd = vault_pidfd_open(pid)
        // The pidfd is the owner's only if the bus still names that pid as the owner now.
        guard pidfd >= 0 else {
            logger.warning(
                "secret service: cannot open \(owner.description) to stop it: not serving")
            return false
        }
        defer { close(pidfd) }
        guard nameOwner().pid == pid, vault_pidfd_signal(pidfd, SIGTERM) == 0 else {
            logger.warning(
                "secret service: \(Self.busName)'s owner changed or cannot be stopped (\(owner.description)): not serving"
            )
            return false
        }
        let deadline = MonotonicClock.nanoseconds() + UInt64(Self.replaceWait * 1e9)
        while MonotonicClock.nanoseconds() < deadline {
            usleep(50_000)
            switch askForName() {
            case .owned?:
                logger.notice(
                    "secret service: serving \(Self.busName) on the session bus, taken over from \(owner.description) (stopped with SIGTERM)"
                )
                return true
            case nil: return false
            case .taken?: continue
            }
        }
        logger.warning(
            "secret service: \(owner.description) did not give up \(Self.busName) within \(Int(Self.replaceWait)) s of SIGTERM: not serving"
        )
        return false
    }

    /// How long `--replace` waits for a stopped owner to leave the name (seconds).
    static let replaceWait = 5.0

    private enum NameRequest { case owned, taken }

    /// RequestName (DBUS_NAME_FLAG_ALLOW_REPLACEMENT 1, REPLACE_EXISTING 2 with `replace`,
    /// DO_NOT_QUEUE 4); nil when the bus did not answer (logged).
    private func askForName() -> NameRequest? {
        let flags: UInt32 = 1 | 4 | (replace ? 2 : 0)
        do {
            let answer = try busCall(
                "RequestName", [.string(Self.busName), GV(new: g_variant_new_uint32(flags))],
                reply: "(u)"
            ).child(0).uint32
            // 1: the primary owner now; 4: already was.
            return answer == 1 || answer == 4 ? .owned : .taken
        } catch {
            logger.warning("secret service: \(BusError(error).message)")
            return nil
        }
    }

    /// The connection owning the name, its pid and uid (as the bus has them) and executable.
    private struct NameOwner: CustomStringConvertible {
        var unique: String?
        var pid: pid_t?
        var uid: uid_t?
        var executable: String?
        var description: String {
            guard let unique else { return "another connection" }
            guard let pid else { return "connection \(unique)" }
            return
                "pid \(pid)\(executable.map { " (\(logField($0)))" } ?? ""), connection \(unique)"
        }
    }

    private func nameOwner() -> NameOwner {
        guard
            let unique = try? busCall("GetNameOwner", [.string(Self.busName)], reply: "(s)").child(
                0
            ).string
        else { return NameOwner() }
        guard let c = try? credentials(unique) else { return NameOwner(unique: unique) }
        return NameOwner(
            unique: unique, pid: c.pid, uid: c.uid, executable: PeerIdentity.executable(pid: c.pid))
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
    /// (as `caller`); nil otherwise. It never asks the bus (it runs on GDBus's worker thread).
    func identified(_ sender: String) -> VaultSession? {
        guard let p = lock.withLock({ peers[sender] }), p.credentials.isAlive,
            p.credentials.currentExecutable == p.credentials.identifiedExecutable
        else { return nil }
        return p.vaultSession
    }

    /// The uid and pid the bus records for connection `sender` (it took them from the
    /// kernel, SO_PEERCRED, when the connection was made).
    private func credentials(_ sender: String) throws -> (pid: pid_t, uid: uid_t) {
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
        Self.answer(invocation) {
            if interface == Self.propertiesInterface {
                return try propertyCall(method, sender: sender, path: path, parameters)
            }
            guard SecretServiceOperations.of(interface, method) != nil else {
                throw BusError.accessDenied("\(interface).\(method) has no policy decision")
            }
            let vaultSession = try identify(sender)
            guard let target = SecretServicePath(path) else { throw BusError.noSuchObject }
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

    static let propertiesInterface = "org.freedesktop.DBus.Properties"

    /// org.freedesktop.DBus.Properties' Get, GetAll and Set. The interface vtable has no
    /// property callbacks, so GDBus hands these calls to `methodCall` (after checking that
    /// the property exists on the object's interfaces, may be read or written, and that a
    /// value to set has its type), and each one is answered, error included, as a method
    /// call is: a property callback's GError would reach the client under a name GDBus makes
    /// up from the error's domain. GetAll is all or nothing: an object the caller may not see
    /// is NoSuchObject, as for Get (GDBus's own GetAll leaves out each property that fails,
    /// which answered `{}` for another app's collection).
    func propertyCall(_ method: String, sender: String, path: String, _ p: GV) throws -> GV? {
        let interface = p.child(0).string
        let decision = method == "Set" ? "Set" : "Get"
        guard SecretServiceOperations.of(interface, decision) != nil else {
            throw BusError.accessDenied("no policy decision for \(interface) properties")
        }
        let vaultSession = try identify(sender)
        guard let target = SecretServicePath(path) else { throw BusError.noSuchObject }
        switch method {
        case "Get":
            return .tuple([
                .variant(
                    try property(
                        p.child(1).string, of: target, vaultSession: vaultSession, sender: sender))
            ])
        case "GetAll":
            let names = readableProperties(of: interface)
            var entries: [GV] = []
            for name in names {
                entries.append(
                    .dictEntry(
                        .string(name),
                        .variant(
                            try property(
                                name, of: target, vaultSession: vaultSession, sender: sender))))
            }
            return .tuple([.array("{sv}", entries)])
        case "Set":
            try setProperty(
                p.child(1).string, of: target, to: p.child(2).unboxed, vaultSession: vaultSession)
            return nil
        default:
            throw BusError(.unknownMethod, "no method \(Self.propertiesInterface).\(method)")
        }
    }

    /// The readable properties `interface` declares (`Introspection.swift`), in its order.
    func readableProperties(of interface: String) -> [String] {
        guard let info = g_dbus_node_info_lookup_interface(nodeInfo, interface),
            let properties = info.pointee.properties
        else { return [] }
        var names: [String] = []
        var i = 0
        while let p = properties[i] {
            // G_DBUS_PROPERTY_INFO_FLAGS_READABLE: (1 << 0).
            if p.pointee.flags.rawValue & 1 != 0 { names.append(String(cString: p.pointee.name)) }
            i += 1
        }
        return names
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

    // MARK: sessions, prompts, signals

    /// A new session ID for `sender`; `dh`, its key when encrypted. Past
    /// `maximumSessionsPerPeer` of that connection's, its oldest is closed.
    func openSession(for sender: String, dh: DHSession?) throws -> String {
        lock.withLock {
            let own = sessions.filter { $0.value.owner == sender }
            if own.count >= Self.maximumSessionsPerPeer,
                let oldest = own.min(by: { $0.value.number < $1.value.number })
            {
                sessions[oldest.key] = nil
            }
            nextID += 1
            let id = "s\(nextID)"
            sessions[id] = Session(owner: sender, dh: dh, number: nextID)
            return id
        }
    }

    func closeSession(_ id: String, for sender: String) throws {
        try lock.withLock {
            guard sessions[id]?.owner == sender else {
                throw BusError.noSuchObject("no such session")
            }
            sessions[id] = nil
        }
    }

    /// Session `path`, which `sender` must have opened (NoSession otherwise).
    func session(_ path: String, for sender: String) throws -> Session {
        guard case .session(let id)? = SecretServicePath(path),
            let s = lock.withLock({ sessions[id] }), s.owner == sender
        else {
            throw BusError.noSession("the session \(path) is not one this connection opened")
        }
        return s
    }

    /// A prompt for `sender` that completes with `objects` once the vault is unlocked.
    func makePrompt(for sender: String, objects: [String], vaultSession: VaultSession) throws
        -> String
    {
        try lock.withLock {
            guard prompts.values.filter({ $0.owner == sender }).count < Self.maximumPromptsPerPeer
            else {
                throw BusError.limitsExceeded(
                    "at most \(Self.maximumPromptsPerPeer) prompts per connection")
            }
            nextID += 1
            let id = "p\(nextID)"
            prompts[id] = Prompt(
                owner: sender, objects: objects,
                appID: vaultSession.isOwner ? nil : vaultSession.appID)
            return SecretServicePath.prompt(id).path
        }
    }

    /// Prompt.Prompt: completes at once when the vault is open, else at its unlock, or is
    /// dismissed after `promptTimeout` seconds. The prompter the `Prompter` setting chooses
    /// (a dialog of vaultd's own, or the registered agent: `PrompterAgent`) is asked for the
    /// passphrase; any unlock of the owner's (`vaultctl unlock`) completes it too.
    func startPrompt(_ id: String, window: String, for sender: String) throws {
        let deadline = MonotonicClock.nanoseconds() + UInt64(promptTimeout * 1e9)
        let start: Bool = try lock.withLock {
            guard let p = prompts[id], p.owner == sender else {
                throw BusError.noSuchObject("no such prompt")
            }
            defer { p.started = true }
            if !p.started {
                p.windowID = window.utf8.count <= Self.maximumWindowID ? window : ""
                p.deadline = deadline
            }
            return !p.started
        }
        guard start else { return }
        if vault.isKeychainOpen {
            complete(id, dismissed: false)
            return
        }
        let how =
            "the prompter chosen by Prompter \(settings.prompter.rawValue) asks for the passphrase"
        _ = Self.promptLog.log(
            "prompt", to: logger, .info,
            "secret service: a prompt waits for the vault's unlock (\(how); vaultctl unlock) for at most \(Int(promptTimeout)) s"
        )
        DispatchQueue.global().asyncAfter(deadline: .now() + promptTimeout) { [weak self] in
            self?.complete(id, dismissed: true)
        }
        prompter.enqueue(id)
    }

    /// What a prompter is told of started prompt `id`; nil once it has ended.
    func promptDetails(_ id: String) -> (windowID: String, appID: String?, deadline: UInt64)? {
        lock.withLock {
            prompts[id].flatMap { $0.started ? ($0.windowID, $0.appID, $0.deadline) : nil }
        }
    }

    /// Runs `body` on the bus thread, later (never inline, so no caller's lock is held); at
    /// `priority` 0 (G_PRIORITY_DEFAULT, GDBus's own for the calls it hands there) in turn
    /// with those calls, else after them (G_PRIORITY_DEFAULT_IDLE).
    func onBusThread(priority: Int32 = 200, _ body: @escaping () -> Void) {
        guard let context else { return }
        let source = g_idle_source_new()
        g_source_set_priority(source, gint(priority))
        g_source_set_callback(
            source,
            { data in
                Unmanaged<Thunk>.fromOpaque(data!).takeRetainedValue().body()
                return 0
            }, Unmanaged.passRetained(Thunk(body)).toOpaque(), nil)
        g_source_attach(source, context)
        g_source_unref(source)
    }

    final class Thunk: @unchecked Sendable {
        let body: () -> Void
        init(_ body: @escaping () -> Void) { self.body = body }
    }

    func dismissPrompt(_ id: String, for sender: String) throws {
        guard lock.withLock({ prompts[id]?.owner == sender }) else {
            throw BusError.noSuchObject("no such prompt")
        }
        complete(id, dismissed: true)
    }

    /// Ends prompt `id` once, with the Completed signal to its owner (any thread).
    func complete(_ id: String, dismissed: Bool) {
        guard let p = lock.withLock({ prompts.removeValue(forKey: id) }) else { return }
        prompter.ended(id)
        // Dismissed: an empty list, of the type a completed Unlock gives (libsecret 0.20 waits
        // for ever on a dismissed prompt whose result is of another type).
        let result: GV = .variant(.objectPaths(dismissed ? [] : p.objects))
        emit(
            to: p.owner, path: SecretServicePath.prompt(id).path, SecretServiceIntrospection.prompt,
            "Completed", [.bool(dismissed), result])
    }

    /// The vault's lock state changed: started prompts complete once it is open, and every
    /// identified connection is told the new `Locked` of what it sees (`notify`).
    private func lockStateChanged() {
        notify(.lockState)
        guard vault.isKeychainOpen else { return }
        let started = lock.withLock { prompts.filter { $0.value.started }.map(\.key) }
        for id in started { complete(id, dismissed: false) }
    }

    /// A signal to one connection (GDBus may be called from any thread for this).
    func emit(
        to destination: String, path: String, _ interface: String, _ name: String, _ arguments: [GV]
    ) {
        var err: UnsafeMutablePointer<GError>?
        if GV.tuple(arguments).pass({
            g_dbus_connection_emit_signal(connection, destination, path, interface, name, $0, &err)
        }) == 0 {
            g_error_free(err)
        }
    }
}
