import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// stdout and stderr as a script relies on them: output that cannot be written (a full
/// disk, a closed stdout) is a failure, exit 1 with a line on stderr, never a silent 0 or a
/// crash. Everything goes through C's `stdout` (as `print` does), in order, and is checked
/// once at the end (`finish`).
enum StandardOutput {
    /// Opens /dev/null the other way round on a closed fd 0, 1 or 2 (as gnulib's stdopen): the
    /// next file vaultctl opens (its socket to vaultd) must not become stdout and get the
    /// output, and a write to a closed stdout must still fail (EBADF).
    static func occupyClosedDescriptors() {
        for (fd, flags) in [(STDIN_FILENO, O_WRONLY), (STDOUT_FILENO, O_RDONLY), (STDERR_FILENO, O_RDONLY)] {
            guard fcntl(fd, F_GETFD) == -1 && errno == EBADF else { continue }
            let n = open("/dev/null", flags | O_CLOEXEC)
            if n >= 0 && n != fd {
                dup2(n, fd)
                close(n)
            }
        }
    }

    /// Writes `data` to stdout exactly (buffered with what `print` wrote).
    static func write(_ data: Data) {
        guard !data.isEmpty else { return }
        _ = data.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, stdout) }
    }

    /// A line on stderr; a stderr that cannot take it is not a reason to crash.
    static func writeError(_ text: String) {
        _ = text.withCString { fputs($0, stderr) }
        fflush(stderr)
    }

    /// Flushes stdout: nil when everything was written, else why not.
    static func finish() -> String? {
        errno = 0
        let flushed = fflush(stdout) == 0
        guard !flushed || ferror(stdout) != 0 else { return nil }
        let code = errno
        return code != 0 ? String(cString: strerror(code)) : "a write failed"
    }

    /// Exits with `code` once stdout is flushed; 1 (and why, on stderr) when it could not be
    /// written whole.
    static func exit(_ code: Int32) -> Never {
        if let failure = finish() {
            writeError("vaultctl: cannot write to standard output: \(failure)\n")
            Glibc.exit(code == 0 ? 1 : code)
        }
        Glibc.exit(code)
    }
}
