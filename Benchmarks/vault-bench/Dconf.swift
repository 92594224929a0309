import CSecret
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// dconf, the desktop's preference store, in-process through libdconf (loaded at run time,
/// so building the bench needs no dconf headers): reads from its mmapped database, durable
/// writes through dconf-service on the session bus. Measured only inside the keyring's
/// private session, and only when libdconf and dconf-service are installed.
enum Dconf {
    private typealias New = @convention(c) () -> UnsafeMutableRawPointer?
    private typealias Read =
        @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<CChar>) -> OpaquePointer?
    private typealias WriteSync =
        @convention(c) (
            UnsafeMutableRawPointer?, UnsafePointer<CChar>, OpaquePointer?,
            UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
            UnsafeMutableRawPointer?, UnsafeMutablePointer<UnsafeMutablePointer<GError>?>?
        ) -> Int32

    private struct Library {
        let new: New
        let read: Read
        let writeSync: WriteSync
    }

    private static func load() -> Library? {
        guard let h = dlopen("libdconf.so.1", RTLD_NOW), let n = dlsym(h, "dconf_client_new"),
            let r = dlsym(h, "dconf_client_read"),
            let w = dlsym(h, "dconf_client_write_sync")
        else { return nil }
        return Library(
            new: unsafeBitCast(n, to: New.self), read: unsafeBitCast(r, to: Read.self),
            writeSync: unsafeBitCast(w, to: WriteSync.self))
    }

    static func measure(_ options: Options) -> [Entry] {
        guard let lib = load() else {
            warn("dconf: libdconf.so.1 not found (Debian: dconf-cli): skipped")
            return []
        }
        guard FileManager.default.fileExists(atPath: "/usr/libexec/dconf-service") else {
            warn("dconf: dconf-service not installed (Debian: dconf-service): skipped")
            return []
        }
        let key = "/io/vaultd/bench/k"
        do {
            let setup = lib.new()
            try write(lib, setup, key, 42)
            // Reads see the written value once dconf-service has changed the database.
            var seen = false
            for _ in 0..<500 {
                if let v = lib.read(setup, key) {
                    seen = g_variant_get_int32(v) == 42
                    g_variant_unref(v)
                    if seen { break }
                }
                usleep(2000)
            }
            guard seen else { throw BenchError("dconf does not read back what it wrote") }
            var entries: [Entry] = []
            entries.append(
                try batchedReads(
                    "defaults-read", system: "dconf", options: options,
                    note: "dconf_client_read (mmap)"
                ) {
                    guard let v = lib.read(setup, key) else { return false }
                    g_variant_unref(v)
                    return true
                })
            for clients in options.writeClients {
                entries.append(
                    try vault_bench.measure(
                        "prefs-set", system: "dconf", items: 0, clients: clients, options: options,
                        note: "dconf_client_write_sync"
                    ) { client in
                        let c = lib.new()
                        return { k in
                            try write(
                                lib, c, "/io/vaultd/bench/k\(client)", Int32(truncatingIfNeeded: k))
                            return true
                        }
                    })
            }
            return entries
        } catch {
            warn("dconf: \(error): skipped")
            return []
        }
    }

    private static func write(
        _ lib: Library, _ client: UnsafeMutableRawPointer?, _ key: String, _ value: Int32
    ) throws {
        var error: UnsafeMutablePointer<GError>?
        let ok = lib.writeSync(client, key, g_variant_new_int32(value), nil, nil, &error)
        if let error {
            defer { g_error_free(error) }
            throw BenchError("dconf write: \(String(cString: error.pointee.message))")
        }
        if ok == 0 { throw BenchError("dconf write failed") }
    }
}
