import Foundation
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// The floor: a bare AF_UNIX round trip between the bench and a child process of it that
/// answers each request of `request` bytes with `reply` bytes — what any daemon answering
/// over a Unix socket pays before doing any work. No JSON, no allocation per call.
enum Floor {
    /// Serves round trips until killed (`vault-bench --echo-server PATH REQUEST REPLY`).
    static func serve(path: String, request: Int, reply: Int) -> Never {
        signal(SIGPIPE, SIG_IGN)
        let listener: UnixSocket
        do {
            listener = try UnixSocket()
            try listener.bindAndListen(path: path)
        } catch {
            warn("echo server: \(error)")
            exit(1)
        }
        while true {
            guard let conn = try? listener.accept() else { continue }
            let t = Thread {
                var inBuf = [UInt8](repeating: 0, count: request)
                let out = [UInt8](repeating: UInt8(ascii: "x"), count: reply)
                while readExactly(conn.fd, &inBuf) && writeAll(conn.fd, out) {}
                conn.close()
            }
            t.stackSize = 1 << 18
            t.start()
        }
    }

    /// A blocking recv, the plain round trip. (Unlike vaultd's receives it is woken once
    /// more when its peer reads what it sent; on an idle VM that wake-up comes just before
    /// the reply and spares it the vCPU's wake from halt, so for one client it is a faster
    /// floor than a wait in poll.)
    static func readExactly(_ fd: Int32, _ buf: inout [UInt8]) -> Bool {
        let count = buf.count
        return buf.withUnsafeMutableBytes { b in
            var off = 0
            while off < count {
                let n = recv(fd, b.baseAddress! + off, count - off, 0)
                if n > 0 {
                    off += n
                } else if n < 0 && errno == EINTR {
                    continue
                } else {
                    return false
                }
            }
            return true
        }
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { b in
            var off = 0
            while off < b.count {
                let n = send(fd, b.baseAddress! + off, b.count - off, Int32(MSG_NOSIGNAL))
                if n > 0 {
                    off += n
                } else if n < 0 && errno == EINTR {
                    continue
                } else {
                    return false
                }
            }
            return true
        }
    }

    /// The byte sizes of a lookup's request and reply on the wire (with their NULs), measured
    /// with one real call to vaultd.
    static func lookupSizes(socketPath: String, index: Int, options: Options) throws -> (
        request: Int, reply: Int
    ) {
        let call = VarlinkCall(
            method: VarlinkMethod.keychainCopyMatching.name,
            parameters: [
                "class": "genericPassword", "query": BenchItem.attributes(index).json,
                "matchLimit": "one", "returnData": true,
                "returnAttributes": false,
            ])
        let s = try UnixSocket()
        try s.connect(path: socketPath)
        let stream = VarlinkStream(socket: s)
        try stream.send(call.json)
        guard let reply = try stream.receive() else {
            throw BenchError("vaultd closed the connection")
        }
        guard reply["error"] == nil else { throw BenchError("lookup failed: \(reply.text)") }
        return (call.json.serialized().count + 1, reply.serialized().count + 1)
    }

    /// Starts the echo server as a child process; returns its pid once it accepts.
    static func start(root: String, request: Int, reply: Int) throws -> (pid: pid_t, path: String) {
        let path = root + "/floor.sock"
        let pid = try Spawn.start(
            Spawn.selfPath, ["--echo-server", path, String(request), String(reply)],
            environment: ProcessInfo.processInfo.environment,
            stdout: .devNull, stderr: .inherit)
        Children.add(pid)
        for _ in 0..<2000 {
            if let s = try? UnixSocket(), (try? s.connect(path: path)) != nil { return (pid, path) }
            usleep(1000)
        }
        kill(pid, SIGKILL)
        _ = Spawn.wait(pid, timeout: 5)
        throw BenchError("the floor's echo server did not start")
    }

    /// Round trips on `clients` connections, as a `Series`; the entry's items are `items`
    /// (the item count whose lookups it is the floor of).
    static func roundTripSeries(
        path: String, request: Int, reply: Int, clients: Int, items: Int, options: Options
    ) -> Series {
        series(
            "lookup", system: "floor", items: items, clients: clients, options: options,
            note: "bare AF_UNIX round trip, \(request) B request / \(reply) B reply"
        ) { _ in
            let s = try UnixSocket()
            try s.connect(path: path)
            let fd = s.fd
            let out = [UInt8](repeating: UInt8(ascii: "q"), count: request)
            var inBuf = [UInt8](repeating: 0, count: reply)
            return { _ in
                try withExtendedLifetime(s) {
                    guard writeAll(fd, out), readExactly(fd, &inBuf) else {
                        throw BenchError("floor: the echo server closed the connection")
                    }
                    return true
                }
            }
        }
    }

    /// The floor of a durable write: one 4 KiB `pwrite` and its `fdatasync`, one client, on a
    /// file in `directory` (the vault's data directory: the same file system and disk). A
    /// durable add, update or delete pays at least one of these; the group commit shares one
    /// among the writes that gather while the last one runs.
    static func fdatasyncSeries(directory: String, items: Int, options: Options) -> Series {
        series(
            "fdatasync", system: "floor", items: items, clients: 1, options: options,
            note: "pwrite of 4 KiB + fdatasync, in the data directory"
        ) { _ in
            let path = directory + "/floor-fdatasync"
            let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            guard fd >= 0 else {
                throw BenchError("floor: cannot open \(path): \(String(cString: strerror(errno)))")
            }
            let page = [UInt8](repeating: 0x5A, count: 4096)
            var offset: off_t = 0
            return { _ in
                let written = page.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, offset) }
                guard written == page.count, fdatasync(fd) == 0 else {
                    throw BenchError("floor: fdatasync: \(String(cString: strerror(errno)))")
                }
                // Sixteen pages in turn, as a WAL's frames go on being rewritten once checkpointed.
                offset = (offset + 4096) % (16 * 4096)
                return true
            }
        }
    }
}
