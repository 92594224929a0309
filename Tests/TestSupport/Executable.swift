#if canImport(Glibc)
import Glibc
#endif

/// Writes `text` to a new executable file at `path` (0755) through a descriptor opened
/// close-on-exec: a child another test spawns meanwhile inherits no descriptor open for
/// writing on it, which would make executing it fail with ETXTBSY ("Text file busy") for
/// as long as that child runs. Returns false when it cannot be written.
@discardableResult
public func writeExecutable(_ path: String, _ text: String) -> Bool {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o755)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    let bytes = Array(text.utf8)
    var written = 0
    while written < bytes.count {
        let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + written, $0.count - written) }
        if n < 0 && errno == EINTR { continue }
        guard n > 0 else { return false }
        written += n
    }
    return true
}
