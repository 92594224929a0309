import Foundation
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Why vaultd cannot start serving; printed and exit 1.
struct StartupError: Error, CustomStringConvertible {
    var description: String
}

/// Creates the listening socket: from systemd socket activation (`LISTEN_FDS`), or bound
/// at the configured path: the socket 0600 in a directory 0700 (docs/configuration.md).
enum Listener {
    /// The socket passed by systemd (fd 3), when LISTEN_PID is this process.
    static func fromActivation(environment env: [String: String]) -> UnixSocket? {
        guard let pid = env["LISTEN_PID"].flatMap(Int32.init), pid == getpid(),
            let n = env["LISTEN_FDS"].flatMap(Int.init), n >= 1
        else { return nil }
        unsetenv("LISTEN_PID")
        unsetenv("LISTEN_FDS")
        unsetenv("LISTEN_FDNAMES")
        _ = try? SystemCall.fcntl(3, F_SETFD, FD_CLOEXEC)
        return UnixSocket(adopting: 3)
    }

    /// Binds `path` (socket 0600 in a 0700 directory). A stale socket file is removed only
    /// after a connect to it fails; a live daemon on the path is a `StartupError`.
    static func bind(path: String, strictDirectory: Bool, logger: Logger) throws -> UnixSocket {
        try refuseIfServed(path: path, strictDirectory: strictDirectory, logger: logger)
        let s = try UnixSocket()
        let old = umask(0o177)
        defer { umask(old) }
        do {
            try s.bindAndListen(path: path)
        } catch {
            throw StartupError(description: "cannot listen on \(path): \(error)")
        }
        try? SystemCall.chmod(path, 0o600)
        return s
    }

    /// Checks the socket's directory (created if missing; with `strictDirectory`, ours and
    /// 0700), then throws `StartupError` when a live daemon answers on `path`
    /// (or `path` is not a socket); removes a stale socket that nothing answers on.
    static func refuseIfServed(path: String, strictDirectory: Bool, logger: Logger) throws {
        // A bare file name (`--socket vaultd.sock`) is in the current directory: its parent was
        // "" and vaultd stopped with "cannot create : No such file or directory".
        let directory = (path as NSString).deletingLastPathComponent
        try prepareDirectory(directory.isEmpty ? "." : directory, strict: strictDirectory)
        guard let st = try? SystemCall.lstat(path) else { return }
        guard st.st_mode & S_IFMT == S_IFSOCK else {
            throw StartupError(description: "\(path) exists and is not a socket; not touching it")
        }
        let probe = try UnixSocket()
        // Bounded: a stopped or hung vaultd whose listen backlog is full never takes the
        // connection, and an unbounded connect waits for ever (SO_SNDTIMEO bounds it: EAGAIN).
        probe.setTimeouts(receive: 3, send: 3)
        do {
            try probe.connect(path: path)
            throw StartupError(description: "another vaultd is already serving \(path)")
        } catch let e as Errno where e.code == Errno.connectionRefused || e.code == Errno.notFound {
            logger.notice("removing stale socket \(path)")
            try? SystemCall.unlink(path)
        } catch let e as Errno where e.code == Errno.wouldBlock {
            throw StartupError(
                description:
                    "another process listens on \(path) but takes no connection (a stopped or hung vaultd?); not touching it: stop that process first"
            )
        }
    }

    private static func prepareDirectory(_ dir: String, strict: Bool) throws {
        var st: stat
        do {
            st = try SystemCall.lstat(dir)
        } catch {
            do {
                try SystemCall.mkdir(dir, 0o700)
            } catch  where error.code != Errno.exists {
                throw StartupError(
                    description: "cannot create \(dir): \(String(cString: strerror(error.code)))")
            } catch {}
            guard let made = try? SystemCall.lstat(dir) else {
                throw StartupError(description: "cannot stat \(dir)")
            }
            st = made
        }
        guard st.st_mode & S_IFMT == S_IFDIR else {
            throw StartupError(description: "\(dir) is not a directory")
        }
        if strict {
            guard st.st_uid == getuid() else {
                // Another user may have made it first (a shared /tmp): say how to get past it.
                throw StartupError(
                    description:
                        "refusing socket directory \(dir): it is owned by uid \(st.st_uid), not \(getuid()) (another user may have made it to catch your secrets); remove it, or set XDG_RUNTIME_DIR or VAULTD_SOCKET to a directory of your own"
                )
            }
            guard st.st_mode & 0o777 == 0o700 else {
                throw StartupError(
                    description: String(
                        format:
                            "refusing socket directory %@: mode %o, expected 700 (chmod 700 %@)",
                        dir, st.st_mode & 0o777, dir))
            }
        }
    }
}
