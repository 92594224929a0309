import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// An open file descriptor that this value owns: closed exactly once, by `close()` or when
/// the value goes away (noncopyable, so no copy can close it again or use it after).
/// `take()` hands the number on to an owner that is not a `FileDescriptor` (a C library, a
/// child process's table). Its calls go through `SystemCall` (EINTR retried, EBADF trapped,
/// failure thrown as `Errno`).
///
/// The static `readAll(inherited:)` and `writeAll(inherited:)` read and write descriptors
/// the program did not open (stdin, an fd a user named), which it must not close, and
/// whose EBADF is the user's mistake: an `Errno` to report, not a trap.
public struct FileDescriptor: ~Copyable {
    /// The descriptor's number, for a call that needs it (valid while this value lives).
    public let rawValue: Int32

    /// Owns `rawValue`, an open descriptor (from `SystemCall` or a C call).
    public init(adopting rawValue: Int32) {
        precondition(rawValue >= 0, "FileDescriptor(adopting: \(rawValue))")
        self.rawValue = rawValue
    }

    /// open(2) of `path` (O_CLOEXEC is the caller's to give, as every open in the tree does).
    public init(opening path: String, _ flags: Int32, mode: mode_t = 0) throws(Errno) {
        self.init(adopting: try SystemCall.open(path, flags, mode: mode))
    }

    /// openat(2) of `path` relative to the directory `dir`.
    public init(
        opening path: String, in dir: borrowing FileDescriptor, _ flags: Int32, mode: mode_t = 0
    ) throws(Errno) {
        self.init(adopting: try SystemCall.openat(dir.rawValue, path, flags, mode: mode))
    }

    deinit { SystemCall.close(rawValue) }

    /// Closes it now (`SystemCall.close`).
    public consuming func close() {
        SystemCall.close(rawValue)
        discard self
    }

    /// The number, no longer closed by this value: its new owner closes it.
    public consuming func take() -> Int32 {
        let fd = rawValue
        discard self
        return fd
    }

    /// read(2) of up to `buffer.count` bytes: the count, 0 at the end.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        try SystemCall.read(rawValue, into: buffer)
    }

    /// Every byte until the end of the file; EFBIG (`Errno.tooLarge`) once more than `limit` came.
    public func readAll(limit: Int = .max) throws -> Data {
        try Self.readAll(rawValue, limit: limit, inherited: false)
    }

    /// Writes all of `bytes` (again after a short write).
    public func writeAll(_ bytes: UnsafeRawBufferPointer) throws(Errno) {
        try SystemCall.writeAll(rawValue, bytes)
    }

    /// Writes all of `data`.
    public func writeAll(_ data: Data) throws {
        try data.withUnsafeBytes { try SystemCall.writeAll(rawValue, $0) }
    }

    /// fsync(2).
    public func sync() throws(Errno) { try SystemCall.fsync(rawValue) }

    /// fstat(2).
    public func status() throws(Errno) -> stat { try SystemCall.fstat(rawValue) }

    /// fchmod(2).
    public func setMode(_ mode: mode_t) throws(Errno) { try SystemCall.fchmod(rawValue, mode) }

    /// Every byte readable from `fd`, a descriptor the program did not open (stdin, an fd
    /// named by the user; left open), until end of file. Throws `Errno` ("read"; EBADF when
    /// it is not open for reading), EFBIG once more than `limit` bytes came.
    public static func readAll(inherited fd: Int32, limit: Int = .max) throws -> Data {
        try readAll(fd, limit: limit, inherited: true)
    }

    /// Writes all of `data` to `fd`, a descriptor the program did not open. Throws `Errno`
    /// ("write"; EBADF when it is not open for writing).
    public static func writeAll(inherited fd: Int32, _ data: Data) throws {
        try data.withUnsafeBytes { try SystemCall.writeAll(fd, $0, inherited: true) }
    }

    private static func readAll(_ fd: Int32, limit: Int, inherited: Bool) throws -> Data {
        var out = Data()
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = try buffer.withUnsafeMutableBytes {
                try SystemCall.read(fd, into: $0, inherited: inherited)
            }
            if n == 0 { return out }
            out.append(contentsOf: buffer[0..<n])
            if out.count > limit { throw Errno(code: Errno.tooLarge, call: "read") }
        }
    }

    /// The bytes of the file at `path`. Throws `Errno` ("open" or "read"; EFBIG past `limit`).
    public static func readFile(_ path: String, limit: Int = .max) throws -> Data {
        try FileDescriptor(opening: path, O_RDONLY | O_CLOEXEC).readAll(limit: limit)
    }
}
