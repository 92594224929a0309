import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Writes one line to stderr (vaultd runs in the foreground; journald or the terminal keeps it).
/// Callers never pass secrets or attribute values a user typed.
///
/// A line that cannot be written (a log file on a full disk, a terminal gone, stderr closed)
/// is dropped: the log must never stop the daemon (Foundation's `FileHandle.write` makes
/// such a failure a fatal error).
public func log(_ message: String) {
    writeToStandardError("vaultd: \(message)\n")
}

/// Writes `text` to fd 2 with write(2), whole unless it fails; failures are ignored.
public func writeToStandardError(_ text: String) {
    var bytes = Array(text.utf8)
    bytes.withUnsafeMutableBytes { raw in
        var offset = 0
        while offset < raw.count {
            let n = write(STDERR_FILENO, raw.baseAddress! + offset, raw.count - offset)
            if n > 0 {
                offset += n
            } else if n < 0 && errno == EINTR {
                continue
            } else {
                return
            }
        }
    }
}

/// Opens /dev/null on any of fds 0, 1 and 2 that is closed, so that no file or socket the
/// process opens later becomes one of them (a client's connection as fd 2 would get the log).
public func occupyClosedStandardDescriptors() {
    for fd in [STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO] {
        guard fcntl(fd, F_GETFD) == -1 && errno == EBADF else { continue }
        let n = open("/dev/null", O_RDWR)
        if n >= 0 && n != fd {
            dup2(n, fd)
            close(n)
        }
    }
}
