import CSecret
import DesktopKeyring
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The Secret Service workloads: the same libsecret calls (`secret_password_lookupv_sync`,
/// `secret_password_storev_sync`, `secret_password_clearv_sync`) against vaultd's Secret
/// Service front-end and against gnome-keyring, each on a private `dbus-run-session` bus,
/// at each `--ss-items` count; and the bus's own round trip to the provider
/// (`org.freedesktop.DBus.Peer.Ping`, which GDBus answers on the provider's connection
/// without running any of its code) as the floor of a call through the bus.
///
/// libsecret talks to the one session bus of its process, so each system is measured by an
/// inner run of the bench (`--inner-ss FILE --ss-system vaultd|keyring --ss-count N`) under a
/// `dbus-run-session` of its own: for gnome-keyring, with its keyring from the cache as
/// `KeyringBench` prepares it; for vaultd, the inner run starts vaultd `--secret-service` on
/// that bus with a new vault and stores its items through libsecret.
enum SecretServiceBench {
    /// The provider's bus name, which both systems own on their bus.
    static let busName = "org.freedesktop.secrets"

    static let writeNames = [
        (name: "ss-store", note: "secret_password_storev_sync of a new item"),
        (name: "ss-replace", note: "secret_password_storev_sync over an item's secret"),
        (name: "ss-clear", note: "secret_password_clearv_sync of one item"),
    ]

    // MARK: outer

    /// Both systems at every `--ss-items` count (gnome-keyring's only with
    /// `--compare-keyring`). A failure of vaultd's side is an error; the keyring's is reported
    /// and skipped, as the keyring comparison is.
    static func run(_ options: Options, vaultd: String) throws -> [Entry] {
        guard Spawn.which("dbus-run-session") != nil else {
            warn("secret service: skipped, dbus-run-session is missing (Debian: dbus)")
            return []
        }
        var entries: [Entry] = []
        for n in options.ssItems {
            progress("secret service: vaultd with \(n) items on a private bus")
            entries += try KeyringBench.onPrivateBus(
                options, keyringItems: nil, inner: ["--inner-ss"],
                extra: ["--ss-system", "vaultd", "--ss-count", String(n), "--vaultd", vaultd])
            guard options.compareKeyring else { continue }
            if let why = KeyringBench.missingTools() {
                warn("secret service against the keyring: skipped, \(why)")
                continue
            }
            do {
                progress("secret service: gnome-keyring with \(n) items on a private bus")
                entries += try KeyringBench.onPrivateBus(
                    options, keyringItems: n, inner: ["--inner-ss"],
                    extra: ["--ss-system", "keyring", "--ss-count", String(n)])
            } catch {
                warn("the keyring's Secret Service workloads at \(n) items failed: \(error)")
            }
        }
        return entries
    }

    // MARK: inner (on the private bus)

    /// Measures the system on this process's session bus: for vaultd, starts it there first.
    static func inner(_ options: Options, results: String) throws {
        let n = options.ssCount
        var server: pid_t?
        var instance: VaultdInstance?
        var root: String?
        defer {
            instance?.stop()
            if let root { Temp.remove(root) }
        }
        switch options.ssSystem {
        case "vaultd":
            guard let binary = options.vaultdPath else {
                throw BenchError("--inner-ss vaultd needs --vaultd")
            }
            let r = try Temp.directory("vault-bench-ssd")
            root = r
            let v = VaultdInstance(
                binary: binary, root: r, dataDirectory: r + "/data",
                extraArguments: ["--secret-service"], seesSessionBus: true)
            instance = v
            try v.start()
            if let pidFile = options.pidFile, let p = v.pid {
                try? "\(p)\n".write(toFile: pidFile, atomically: true, encoding: .utf8)
            }
            // vaultd asks for the name before it serves its socket: by now it owns it or not.
            guard v.log.contains("secret service: serving \(busName)") else {
                throw BenchError(
                    "vaultd does not serve \(busName) on the private bus; log:\n\(v.log)")
            }
            try v.initialize()
            server = v.pid
            try fillVaultd(to: n, options: options)
            let count = try v.itemCount()
            guard count == n else {
                throw BenchError(
                    "vaultd's vault holds \(count) items after storing \(n) through libsecret")
            }
        case "keyring":
            try KeyringBench.fill(try DesktopKeyring(timeout: nil), to: n, options: options)
            if let pidFile = options.pidFile { KeyringBench.recordServicePIDs(pidFile) }
        default:
            throw BenchError("--ss-system takes vaultd or keyring, not '\(options.ssSystem)'")
        }
        let entries = try measure(
            system: options.ssSystem, items: n, options: options, server: server,
            dataDirectory: root.map { $0 + "/data" })
        try JSONEncoder().encode(entries).write(to: URL(fileURLWithPath: results))
    }

    /// Stores items 0..<n in vaultd through libsecret (`secret_password_storev_sync`, as the
    /// keyring is filled), from a few threads: vaultd's front-end handles one call at a time,
    /// the threads only keep it busy while a reply travels.
    private static func fillVaultd(to n: Int, options: Options) throws {
        let t0 = Date()
        let threads = 4
        let failure = LockedValue<String?>(nil)
        let group = DispatchGroup()
        for t in 0..<threads {
            group.enter()
            let thread = Thread {
                defer { group.leave() }
                do {
                    let k = try DesktopKeyring(timeout: nil)
                    for i in stride(from: t, to: n, by: threads) {
                        try k.store(
                            .item, KeyringBench.attributes(i), label: "vault-bench \(i)",
                            secret: Array(BenchItem.secret(i, size: options.secretSize)))
                    }
                } catch {
                    failure.value = "\(error)"
                }
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
        group.wait()
        if let f = failure.value {
            throw BenchError("storing in vaultd's Secret Service failed: \(f)")
        }
        progress(
            String(
                format: "  vaultd: stored %d items through libsecret in %.1f s", n,
                Date().timeIntervalSince(t0)))
    }

    /// The workloads, in turns (`interleave`): for each client count the bus round trip, then
    /// lookups; then the writes (store new items, store over them, clear them).
    /// `dataDirectory`: vaultd's, where the floor of a durable store (`fdatasync`) is measured
    /// in turn with the stores, for the store's target (one ping, one fdatasync and 200 µs).
    static func measure(
        system: String, items n: Int, options: Options, server: pid_t?, dataDirectory: String?
    ) throws -> [Entry] {
        var reads: [Series] = []
        for c in options.clients {
            reads.append(
                series(
                    "ss-ping", system: system, items: n, clients: c, options: options,
                    note: "org.freedesktop.DBus.Peer.Ping to \(busName)", server: server
                ) { _ in
                    let ping = try BusPing()
                    return { _ in
                        try ping.call()
                        return true
                    }
                })
            reads.append(
                series(
                    "ss-lookup", system: system, items: n, clients: c, options: options,
                    note: "secret_password_lookupv_sync", server: server
                ) { client in
                    let k = try DesktopKeyring(timeout: nil)
                    var rng = XorShift(seed: UInt64(client + 1))
                    return { _ in
                        let i = rng.next(below: n)
                        guard let s = try k.lookup(.item, KeyringBench.attributes(i)),
                            s.count == options.secretSize
                        else {
                            throw BenchError(
                                "\(system): lookup of item \(i) through libsecret found nothing")
                        }
                        return true
                    }
                })
        }
        var entries = try interleave(reads, repetitions: options.repetitions)
        let store = KeyringStore(options: options)
        let floor = dataDirectory.map {
            [Floor.fdatasyncSeries(directory: $0, items: n, options: options)]
        }
        let writes =
            (floor ?? [])
            + options.writeClients.map { c in
                writeSeries(
                    system: system, items: n, clients: c, options: options, store: store,
                    server: server, names: writeNames)
            }
        entries += try interleave(writes, repetitions: options.repetitions)
        return entries
    }
}

/// `org.freedesktop.DBus.Peer.Ping` to the Secret Service's owner on the session bus
/// connection libsecret uses (GDBus's shared one): the client to the bus, the bus to the
/// provider, whose GDBus answers it on its own worker thread, and back.
final class BusPing {
    private let connection: OpaquePointer

    init() throws {
        var error: UnsafeMutablePointer<GError>?
        guard let c = g_bus_get_sync(G_BUS_TYPE_SESSION, nil, &error) else {
            defer { if let error { g_error_free(error) } }
            throw BenchError(
                "no session bus: \(error.map { String(cString: $0.pointee.message) } ?? "?")")
        }
        connection = c
    }

    deinit { vk_object_unref(UnsafeMutableRawPointer(connection)) }

    func call() throws {
        var error: UnsafeMutablePointer<GError>?
        let reply = g_dbus_connection_call_sync(
            connection, SecretServiceBench.busName, "/org/freedesktop/secrets",
            "org.freedesktop.DBus.Peer", "Ping", nil, nil,
            G_DBUS_CALL_FLAGS_NONE, 10_000, nil, &error)
        if let error {
            defer { g_error_free(error) }
            throw BenchError("Peer.Ping: \(String(cString: error.pointee.message))")
        }
        if let reply { g_variant_unref(reply) }
    }
}
