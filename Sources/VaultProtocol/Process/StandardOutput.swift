import CVaultSys
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// stdout and stderr as a script (or git) relies on them, for the command-line tools (vaultctl,
/// git-credential-vault): output that cannot be written (a full disk, a closed stdout) is a
/// failure, exit 1 with a line on stderr, never a silent 0 or a crash (Foundation's
/// `FileHandle.write` makes a failed write a fatal error, SIGILL). Everything goes through C's
/// `stdout` (as `print` does), in order, and is checked once at the end (`finish`).
public enum StandardOutput {
    /// Opens /dev/null the other way round on a closed fd 0, 1 or 2 (as gnulib's stdopen): the
    /// next file the process opens (a tool's socket to vaultd, a client's connection to
    /// vaultd) must not become stdout or stderr and get the output or the log, and a write to
    /// a closed stdout must still fail (EBADF). Every executable calls it first.
    public static func occupyClosedDescriptors() {
        for (fd, flags) in [
            (STDIN_FILENO, O_WRONLY), (STDOUT_FILENO, O_RDONLY), (STDERR_FILENO, O_RDONLY),
        ] {
            guard !SystemCall.isOpen(fd),
                let n = try? SystemCall.open("/dev/null", flags | O_CLOEXEC)
            else { continue }
            if n != fd {
                try? SystemCall.dup2(n, fd)
                SystemCall.close(n)
            }
        }
    }

    /// Writes `data` to stdout exactly (buffered with what `print` wrote).
    public static func write(_ data: Data) {
        guard !data.isEmpty else { return }
        _ = data.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, vault_stdout()) }
    }

    /// A line on stderr; a stderr that cannot take it is not a reason to crash.
    public static func writeError(_ text: String) {
        _ = text.withCString { fputs($0, vault_stderr()) }
        fflush(vault_stderr())
    }

    /// Flushes stdout: nil when everything was written, else why not.
    public static func finish() -> String? {
        errno = 0
        let flushed = fflush(vault_stdout()) == 0
        guard !flushed || ferror(vault_stdout()) != 0 else { return nil }
        let code = errno
        return code != 0 ? String(cString: strerror(code)) : "a write failed"
    }

    /// All of stdin (`FileDescriptor.readAll`), at most `limit` bytes; nil when it cannot be
    /// read (a closed stdin, an I/O error; EFBIG past `limit`: `errno` says which), where
    /// Foundation's `readDataToEndOfFile` crashes.
    public static func readInput(limit: Int = .max) -> Data? {
        do {
            return try FileDescriptor.readAll(inherited: STDIN_FILENO, limit: limit)
        } catch let e as Errno {
            errno = e.code
            return nil
        } catch {
            return nil
        }
    }

    /// Exits with `code` once stdout is flushed; 1 (and why, on stderr, after `program: `)
    /// when it could not be written whole.
    public static func exit(_ code: Int32, program: String) -> Never {
        if let failure = finish() {
            writeError("\(program): cannot write to standard output: \(failure)\n")
            Glibc.exit(code == 0 ? 1 : code)
        }
        Glibc.exit(code)
    }
}
