import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Whole files and file descriptors read with read(2) (and written with write(2)): a read that fails is an `Errno` to
/// report, where Foundation's `FileHandle.readDataToEndOfFile` makes it a fatal error and
/// `FileManager.contents(atPath:)` gives nil without a reason. One helper for vaultd's
/// config file, vaultctl's input files and fds, and git-credential-vault's stdin.
public enum FileDescriptor {
    /// Every byte readable from `fd` until end of file. Throws `Errno` ("read"), EFBIG once
    /// more than `limit` bytes came.
    public static func readAll(_ fd: Int32, limit: Int = .max) throws -> Data {
        var out = Data()
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw Errno(code: errno, call: "read") }
            if n == 0 { return out }
            out.append(contentsOf: buffer[0..<n])
            if out.count > limit { throw Errno(code: EFBIG, call: "read") }
        }
    }

    /// Writes all of `data` to `fd`, again after a short write or EINTR. Throws `Errno`
    /// ("write").
    public static func writeAll(_ fd: Int32, _ data: Data) throws {
        try data.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
            var done = 0
            while done < raw.count {
                let n = write(fd, raw.baseAddress! + done, raw.count - done)
                if n < 0 && errno == EINTR { continue }
                if n < 0 { throw Errno(code: errno, call: "write") }
                done += n
            }
        }
    }

    /// The bytes of the file at `path`. Throws `Errno` ("open" or "read"; EFBIG past `limit`).
    public static func readFile(_ path: String, limit: Int = .max) throws -> Data {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw Errno(code: errno, call: "open") }
        defer { close(fd) }
        return try readAll(fd, limit: limit)
    }
}
