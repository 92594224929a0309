import CGio
import CVaultSys
import Foundation
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// The Flatpak secret portal's backend, `org.freedesktop.impl.portal.Secret`
/// (xdg-desktop-portal's data/org.freedesktop.impl.portal.Secret.xml), served at
/// `/org/freedesktop/portal/desktop` on the Secret Service's connection, so under
/// `org.freedesktop.secrets`, the bus name `dist/portal/vaultd.portal` (and gnome-keyring's
/// own portal file) route xdg-desktop-portal to. docs/secret-service.md says what it does.
///
/// A sandboxed app calls `org.freedesktop.portal.Secret.RetrieveSecret(fd, options)` on
/// xdg-desktop-portal, which names the app from the kernel (the caller's
/// `/proc/PID/root/.flatpak-info`) and calls `RetrieveSecret(handle, app_id, fd, options)`
/// here with the app's pipe. vaultd writes the app's master secret (`Vault.portalSecret`) to
/// that pipe, closes it, and answers response 0; on any failure it answers a D-Bus error,
/// which xdg-desktop-portal hands the app as response 2.
///
/// What the front-end does is find out, from the kernel: who calls (the bus's credentials of
/// the calling connection, then `/proc/PID/exe` and that file's owner and mode:
/// `PortalPeer`), and which app asked the portal (the request's sender, named in `handle`,
/// identified as any Secret Service caller is). The policy decides (`Policy.decidePortalRequest`).
///
/// Threads: the call arrives on the bus thread, which identifies both connections (bus
/// queries of a few ms); the engine call and the write to the app's pipe run on a worker
/// (`work`), at most `maximumInFlight` at once, so a pipe that is never read holds neither
/// the bus thread nor more than one worker for longer than `writeTimeout`.
final class SecretPortal: Sendable {
    static let path = "/org/freedesktop/portal/desktop"
    static let interface = "org.freedesktop.impl.portal.Secret"
    /// The prefix of a request handle: xdg-desktop-portal names each request
    /// `/org/freedesktop/portal/desktop/request/SENDER/TOKEN`, SENDER the calling connection's
    /// unique name without its ':' and with '.' as '_' (its src/request.c).
    static let requestPrefix = "/org/freedesktop/portal/desktop/request/"
    /// The version of the interface served (the `version` property).
    static let version: UInt32 = 1
    /// The most requests served at once; more are refused (LimitsExceeded) until one ends.
    static let maximumInFlight = 8
    /// How long the secret's write to the app's pipe may take in all (seconds).
    static let writeTimeout = 2.0
    /// Refusals are logged at most a burst of 10 every 6 s per reason.
    static let refusals = RateLimitedLog()

    static let xml = """
        <node>
          <interface name="org.freedesktop.impl.portal.Secret">
            <method name="RetrieveSecret">
              <arg type="o" name="handle" direction="in"/>
              <arg type="s" name="app_id" direction="in"/>
              <arg type="h" name="fd" direction="in"/>
              <arg type="a{sv}" name="options" direction="in"/>
              <arg type="u" name="response" direction="out"/>
              <arg type="a{sv}" name="results" direction="out"/>
            </method>
            <property name="version" type="u" access="read"/>
          </interface>
        </node>
        """

    unowned let service: SecretService
    private let inFlight = Locked(0)
    private let work = DispatchQueue(
        label: "vaultd-portal", qos: .userInitiated, attributes: .concurrent)

    init(service: SecretService) {
        self.service = service
    }

    private var userData: gpointer { Unmanaged.passUnretained(self).toOpaque() }

    /// The object's calls, to `call` and the `version` property. `nonisolated(unsafe)`: GLib
    /// data made once and never written after (GDBus only reads it, from any thread).
    nonisolated(unsafe) private static let vtable: UnsafeMutablePointer<GDBusInterfaceVTable> = {
        let vtable = UnsafeMutablePointer<GDBusInterfaceVTable>.allocate(capacity: 1)
        vtable.initialize(to: GDBusInterfaceVTable())
        vtable.pointee.method_call = {
            _, sender, _, interface, method, parameters, invocation, user in
            SecretPortal.this(user).call(
                sender: sender.map { String(cString: $0) } ?? "",
                interface: String(cString: interface!), method: String(cString: method!),
                parameters: GV(borrowing: parameters!), invocation: invocation!)
        }
        vtable.pointee.get_property = { _, _, _, interface, property, _, user in
            // Only `version` is declared (GDBus checks the name first): it describes the
            // interface, so anyone may read it.
            guard PortalOperations.of(String(cString: interface!), "Get") != nil,
                String(cString: property!) == "version"
            else { return nil }
            return g_variant_ref_sink(g_variant_new_uint32(SecretPortal.version))
        }
        return vtable
    }()

    private static func this(_ p: gpointer?) -> SecretPortal {
        Unmanaged<SecretPortal>.fromOpaque(p!).takeUnretainedValue()
    }

    /// Registers the object on the service's connection (on the bus thread, before the name
    /// is asked for). Returns false, logged, when GDBus refuses it.
    func register() -> Bool {
        var err: UnsafeMutablePointer<GError>?
        guard let info = g_dbus_node_info_new_for_xml(Self.xml, &err),
            let iface = info.pointee.interfaces?[0]
        else {
            service.logger.error(
                "secret portal: bad introspection data: \(String(cString: cg_error_message(err)))")
            g_error_free(err)
            return false
        }
        // `info` is never freed: the object stays registered as long as vaultd runs.
        let id = g_dbus_connection_register_object(
            service.connection, Self.path, iface, Self.vtable, userData, nil, &err)
        guard id != 0 else {
            service.logger.error(
                "secret portal: cannot register \(Self.path): \(String(cString: cg_error_message(err)))"
            )
            g_error_free(err)
            return false
        }
        return true
    }

    // MARK: a call

    private func call(
        sender: String, interface: String, method: String, parameters: GV,
        invocation: OpaquePointer
    ) {
        // The app's pipe: GDBus hands the message's descriptors over in its fd list, and
        // `g_unix_fd_list_get` returns a duplicate of the one the call's `h` indexes (owned
        // here, closed on every path).
        var fd: Int32 = -1
        defer { if fd >= 0 { SystemCall.close(fd) } }
        do {
            guard PortalOperations.of(interface, method) == .retrieveSecret
            else { throw BusError.accessDenied("\(interface).\(method) has no policy decision") }
            let handle = parameters.child(0).string
            let appID = parameters.child(1).string
            fd = try Self.descriptor(
                invocation, index: g_variant_get_handle(parameters.child(2).raw))
            let (portalSession, portal) = try portalPeer(sender)
            // The policy's caller check, asked before the request's sender is identified
            // (which registers a Flatpak app on first contact), so a caller that is not the
            // portal causes nothing; `Vault.portalSecret` decides the whole request again.
            do {
                try Policy.requireDesktopPortal(portal)
            } catch let e as VaultFailure {
                throw BusError.accessDenied(e.message)
            }
            let requester = try requester(handle)
            let pipe = fd
            // Handed to the worker, which returns it (GDBus's return functions may be called from
            // any thread); only that worker uses it after the hand-off.
            let pending = Handed(invocation)
            try startWork { [self] in
                try answer(
                    appID: appID, portalSession: portalSession, requester: requester,
                    portal: portal, fd: pipe)
            } onEnd: { [logger = service.logger] result in
                Self.reply(pending.value, result, logger: logger)
            }
            fd = -1  // the worker closes it now
        } catch {
            Self.reply(invocation, .failure(error), logger: service.logger)
        }
    }

    /// Runs `body` on a worker, then `onEnd` with its outcome there; throws LimitsExceeded
    /// when `maximumInFlight` requests run already.
    private func startWork(
        _ body: @escaping @Sendable () throws -> Void,
        onEnd: @escaping @Sendable (Result<Void, Error>) -> Void
    ) throws {
        let admitted = inFlight.admit(below: Self.maximumInFlight)
        guard admitted else {
            throw BusError(
                .limitsExceeded,
                "vaultd is serving \(Self.maximumInFlight) secret portal requests already; try again"
            )
        }
        work.async { [self] in
            defer { inFlight.withLock { $0 -= 1 } }
            onEnd(Result { try body() })
        }
    }

    /// On the worker: the secret, written to `fd` and `fd` closed (always).
    private func answer(
        appID: String, portalSession: VaultSession, requester: VaultSession, portal: PortalPeer,
        fd: Int32
    ) throws {
        defer { SystemCall.close(fd) }
        let secret = try portalSession.portalSecret(
            appID: appID, requester: requester, portal: portal)
        try secret.withUnsafeBytes { try Self.writeAll($0, to: fd, within: Self.writeTimeout) }
    }

    /// The call's answer: response 0 and no results, or the error (logged, rate-limited;
    /// never with the secret, which no error holds).
    private static func reply(
        _ invocation: OpaquePointer, _ result: Result<Void, Error>, logger: Logger
    ) {
        switch result {
        case .success:
            let reply = GV.tuple([GV(new: g_variant_new_uint32(0)), .array("{sv}", [])])
            reply.pass { g_dbus_method_invocation_return_value(invocation, $0) }
        case .failure(let error):
            let e = BusError(error)
            refusals.log(
                e.name.rawValue, to: logger, .warning,
                "secret portal: request refused: \(e.message)")
            g_dbus_method_invocation_return_dbus_error(invocation, e.name.rawValue, e.message)
        }
    }

    // MARK: identification

    /// The descriptor the call's `h` argument `index` names, a duplicate owned by the caller.
    static func descriptor(_ invocation: OpaquePointer, index: Int32) throws -> Int32 {
        let message = g_dbus_method_invocation_get_message(invocation)
        guard let list = g_dbus_message_get_unix_fd_list(message), index >= 0,
            index < g_unix_fd_list_get_length(list)
        else { throw BusError.invalidArgs("the call carries no file descriptor at index \(index)") }
        var err: UnsafeMutablePointer<GError>?
        let fd = g_unix_fd_list_get(list, index, &err)
        guard fd >= 0 else {
            let message = String(cString: cg_error_message(err))
            g_error_free(err)
            throw BusError.invalidArgs("the call's file descriptor cannot be taken: \(message)")
        }
        return fd
    }

    /// What the kernel says of the calling connection's process (`PortalPeer`), for the
    /// policy to judge. The connection is identified as any Secret Service caller (uid, a
    /// pidfd, its sandbox and executable; refused when that fails), then its executable
    /// file is looked at. Every read is followed by the check that the process is still the
    /// one identified (alive, the same executable), so they were about it.
    private func portalPeer(_ sender: String) throws -> (VaultSession, PortalPeer) {
        let session = try service.identify(sender)
        guard let peer = service.identifiedCredentials(sender),
            let exe = PeerIdentity.executable(pid: peer.pid)
        else {
            throw BusError.accessDenied("vaultd cannot identify the caller of the secret portal")
        }
        let facts = PortalExecutable(path: exe, pid: peer.pid)
        guard peer.isAlive, peer.currentExecutable == peer.identifiedExecutable else {
            throw BusError.accessDenied(
                "the caller of the secret portal exited or ran another program while vaultd identified it"
            )
        }
        return (session, facts.peer)
    }

    /// The app that asked the portal: the sender `handle` names, identified by vaultd itself
    /// (`SecretService.identify`: a Flatpak app's sandbox checked against Flatpak's record of
    /// its instance, registered on first contact). A handle of another form, or a sender
    /// that left the bus or cannot be identified, is refused.
    private func requester(_ handle: String) throws -> VaultSession {
        guard let sender = Self.sender(ofRequest: handle) else {
            throw BusError.invalidArgs(
                "the request handle \(logField(handle)) is not one xdg-desktop-portal makes")
        }
        do {
            return try service.identify(sender)
        } catch {
            throw BusError.accessDenied(
                "the app that asked the portal (connection \(sender)) is not served: \(BusError(error).message)"
            )
        }
    }

    /// The unique name of the connection that made request `handle`
    /// (`…/request/1_42/TOKEN` → `:1.42`), nil for a handle of another form. A unique name
    /// the bus daemon gives is ':' then digits and dots, so the mapping is one to one.
    static func sender(ofRequest handle: String) -> String? {
        guard handle.hasPrefix(requestPrefix) else { return nil }
        let rest = handle.dropFirst(requestPrefix.count).split(
            separator: "/", omittingEmptySubsequences: false)
        guard rest.count == 2, !rest[1].isEmpty, !rest[0].isEmpty, rest[0].utf8.count <= 64,
            rest[0].utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F })
        else { return nil }
        return ":" + rest[0].replacingOccurrences(of: "_", with: ".")
    }

    // MARK: the write

    /// Writes `bytes` to `fd` in full within `seconds`, or throws. Only a pipe or a socket
    /// is written to (what xdg-desktop-portal's clients pass): a regular file or a device
    /// could block in the kernel whatever vaultd asks. The descriptor is made non-blocking
    /// (its open file description is the app's own pipe end, which it gave away), and each
    /// write waits for room with `poll`, so a reader that never reads costs `seconds` at
    /// most.
    static func writeAll(_ bytes: UnsafeRawBufferPointer, to fd: Int32, within seconds: Double)
        throws
    {
        guard let st = try? SystemCall.fstat(fd) else {
            throw BusError.invalidArgs("the secret's descriptor cannot be looked at")
        }
        let kind = st.st_mode & S_IFMT
        guard kind == S_IFIFO || kind == S_IFSOCK else {
            throw BusError.invalidArgs("the secret's descriptor is no pipe or socket")
        }
        guard let flags = try? SystemCall.fcntl(fd, F_GETFL),
            (try? SystemCall.fcntl(fd, F_SETFL, flags | O_NONBLOCK)) != nil
        else {
            throw BusError.invalidArgs("the secret's descriptor cannot be made non-blocking")
        }
        let deadline = MonotonicClock.nanoseconds() + UInt64(seconds * 1e9)
        var done = 0
        while done < bytes.count {
            do {
                let n = try SystemCall.write(fd, UnsafeRawBufferPointer(rebasing: bytes[done...]))
                if n > 0 {
                    done += n
                    continue
                }
            } catch  where error.code != Errno.wouldBlock {
                throw BusError(
                    .failed,
                    "the secret could not be written: \(String(cString: strerror(error.code)))")
            } catch {}
            let now = MonotonicClock.nanoseconds()
            guard now < deadline else {
                throw BusError(.failed, "the app did not read its secret within \(seconds) s")
            }
            _ = try? SystemCall.poll(
                fd, events: Int16(POLLOUT),
                timeout: Int32(min((deadline - now) / 1_000_000 + 1, 60_000)))
        }
    }
}

/// The Flatpak portal backends vaultd serves and what each is, by interface and member; the
/// front-end dispatches only what is listed here (as `SecretServiceOperations`). RetrieveSecret
/// is no engine operation of the table's kind: only the system's xdg-desktop-portal may call
/// it, for the app that asked, which the policy decides (`Policy.decidePortalRequest`, through
/// `VaultSession.portalSecret`). Properties (the interface's `version`) are open: they
/// describe the interface and touch nothing in the vault.
enum PortalOperations {
    enum Operation: Equatable {
        case retrieveSecret
        case open
    }

    static let byMember: [String: Operation] = [
        "org.freedesktop.impl.portal.Secret.RetrieveSecret": .retrieveSecret,
        "org.freedesktop.impl.portal.Secret.Get": .open,
    ]

    /// What `member` of `interface` is, nil when it is none (refused).
    static func of(_ interface: String, _ member: String) -> Operation? {
        byMember[interface + "." + member]
    }
}

/// What `/proc/PID/exe` and the file at its path say, for `PortalPeer`.
struct PortalExecutable {
    let peer: PortalPeer

    init(path: String, pid: pid_t) {
        let st = try? SystemCall.stat(path)
        let there = st != nil
        peer = PortalPeer(
            executable: path,
            onHost: PeerIdentity.sameFile("/proc/\(pid)/ns/mnt", "/proc/self/ns/mnt")
                && PeerIdentity.sameFile("/proc/\(pid)/root", "/"),
            runsThatFile: there && PeerIdentity.sameFile("/proc/\(pid)/exe", path),
            fileOwner: st.map { UInt32($0.st_uid) } ?? UInt32.max,
            fileMode: st.map { UInt32($0.st_mode) } ?? 0o7777,
            pathOnlyRootWritable: Self.onlyRootWritable(directoriesOf: path),
            injected: Self.injection(pid: pid))
    }

    /// Whether every directory from `/` down to `path`'s own is root's and writable by no
    /// one else (sticky or not): then only root can change what the path names.
    static func onlyRootWritable(directoriesOf path: String) -> Bool {
        var dir = (path as NSString).deletingLastPathComponent
        while true {
            guard let st = try? SystemCall.lstat(dir), st.st_mode & S_IFMT == S_IFDIR,
                st.st_uid == 0,
                st.st_mode & 0o022 == 0
            else { return false }
            if dir == "/" { return true }
            dir = (dir as NSString).deletingLastPathComponent
        }
    }

    /// Why process `pid` may run code its program did not come with: a tracer attached
    /// (`TracerPid` in `/proc/PID/status`), `LD_PRELOAD` or `LD_AUDIT` in its environment
    /// (`/proc/PID/environ`, at most 256 KiB read). Nil when neither shows; a file that
    /// cannot be read is a reason too (fail closed).
    static func injection(pid: pid_t) -> String? {
        guard let status = readBounded("/proc/\(pid)/status", limit: 64 << 10) else {
            return "its /proc status cannot be read"
        }
        for line in status.split(separator: 0x0A) where line.starts(with: Array("TracerPid:".utf8))
        {
            let value = String(decoding: line.dropFirst(10), as: UTF8.self)
                .trimmingCharacters(in: .whitespaces)
            if value != "0" { return "traced by pid \(logField(value))" }
        }
        guard let environ = readBounded("/proc/\(pid)/environ", limit: 256 << 10) else {
            return "its environment cannot be read"
        }
        for entry in environ.split(separator: 0) {
            for name in ["LD_PRELOAD=", "LD_AUDIT="] where entry.starts(with: Array(name.utf8)) {
                return "\(name.dropLast()) is set"
            }
        }
        return nil
    }

    /// At most `limit` bytes of `path` (nil when it cannot be opened or holds more).
    static func readBounded(_ path: String, limit: Int) -> [UInt8]? {
        guard let fd = try? SystemCall.open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY) else {
            return nil
        }
        defer { SystemCall.close(fd) }
        var bytes = [UInt8](repeating: 0, count: limit + 1)
        var count = 0
        while count < bytes.count {
            guard
                let n = try? bytes.withUnsafeMutableBytes({
                    try SystemCall.read(
                        fd, into: UnsafeMutableRawBufferPointer(rebasing: $0[count...]))
                })
            else { return nil }
            if n == 0 { break }
            count += n
        }
        guard count <= limit else { return nil }
        return Array(bytes[..<count])
    }
}
