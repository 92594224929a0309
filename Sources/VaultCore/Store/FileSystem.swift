import Foundation
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// File-system steps the engine needs, with private modes: directories 0700, files 0600,
/// owned by the user (docs/configuration.md lists the paths).
enum FileSystem {
    /// Creates `path` (and parents) with `mode` when absent; tightens an existing one to `mode`.
    static func makeDirectory(_ path: String, mode: mode_t) throws {
        do {
            try FileManager.default.createDirectory(
                atPath: path, withIntermediateDirectories: true,
                attributes: [.posixPermissions: Int(mode)])
        } catch {
            throw VaultFailure(
                .internalError, "cannot create directory \(path): \(error.localizedDescription)")
        }
        guard chmod(path, mode) == 0 else {
            throw VaultFailure(
                .internalError, "cannot set mode of \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// Tightens an existing file to 0600 (a store made by an older vaultd, or copied in).
    static func restrict(_ path: String) throws {
        _ = chmod(path, 0o600)
    }

    /// Creates `path` empty with mode 0600 when absent (an existing file is left as it is), so
    /// that a file the store opens next (SQLite creates with 0644 and gives its -wal and -shm
    /// files the database's mode) is private from its creation: a start that fails right
    /// after (a full disk) must not leave it readable by others.
    static func createPrivateFile(_ path: String) throws {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            let code = errno
            throw VaultFailure(
                code == ENOSPC || code == EDQUOT ? .storageFull : .internalError,
                "cannot create \(path): \(String(cString: strerror(code)))")
        }
        close(fd)
    }

    /// Reads the key at `path`, or creates it with `length` random bytes, mode 0600, written
    /// durably (fsync of the file and its directory). An existing key must be a regular file of
    /// exactly `length` bytes (anything else is damaged: a key read from the first bytes of
    /// a longer file, or a short one, would silently be another key), owned by this user and
    /// neither readable nor writable by others (refused as ssh refuses such a private key,
    /// saying how to fix it; not changed behind the user's back).
    static func loadOrCreateKey(at path: String, length: Int) throws -> SecureBytes {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        if fd >= 0 {
            defer { close(fd) }
            var st = stat()
            guard fstat(fd, &st) == 0 else {
                throw VaultFailure(
                    .internalError, "cannot read \(path): \(String(cString: strerror(errno)))")
            }
            guard st.st_mode & S_IFMT == S_IFREG else {
                throw VaultFailure(
                    .internalError,
                    "\(path) is damaged: it is not a regular file. Put back the device.key from a backup of this device and start vaultd again"
                )
            }
            guard st.st_uid == getuid() else {
                throw VaultFailure(
                    .internalError,
                    "\(path) is owned by uid \(st.st_uid), not by this user (uid \(getuid())): refusing a device key another user controls. Fix: chown \(getuid()) \(path)"
                )
            }
            guard st.st_mode & 0o077 == 0 else {
                throw VaultFailure(
                    .internalError,
                    "\(path) has permissions \(String(st.st_mode & 0o777, radix: 8)): a device key must not be accessible by others. Fix: chmod 600 \(path)"
                )
            }
            guard st.st_size == off_t(length) else {
                throw VaultFailure(
                    .internalError,
                    "\(path) is damaged: it holds \(st.st_size) bytes, a device key is exactly \(length). Put back the device.key from a backup of this device and start vaultd again"
                )
            }
            let key = SecureBytes(count: length)
            var got = 0
            while got < length {
                let n = key.withUnsafeMutableBytes {
                    Glibc.read(fd, $0.baseAddress! + got, length - got)
                }
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { break }
                got += n
            }
            guard got == length else {
                throw VaultFailure(
                    .internalError,
                    "\(path) is damaged: could read only \(got) of its \(length) bytes")
            }
            return key
        }
        guard errno == ENOENT else {
            throw VaultFailure(
                .internalError, "cannot read \(path): \(String(cString: strerror(errno)))")
        }
        let key = SecureBytes.random(count: length)
        let tmp = path + ".tmp"
        unlink(tmp)
        let wfd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard wfd >= 0 else {
            throw VaultFailure(
                .internalError, "cannot create \(path): \(String(cString: strerror(errno)))")
        }
        let written = key.withUnsafeBytes { write(wfd, $0.baseAddress, length) }
        let synced = fsync(wfd) == 0
        close(wfd)
        guard written == length, synced, rename(tmp, path) == 0 else {
            unlink(tmp)
            throw VaultFailure(
                .storageFull, "cannot write \(path): \(String(cString: strerror(errno)))")
        }
        let dir = open(
            (path as NSString).deletingLastPathComponent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dir >= 0 {
            fsync(dir)
            close(dir)
        }
        return key
    }

    /// Writes `bytes` to `path` atomically and durably, mode 0600 (`writeAtomically(to:_:)`).
    static func writeAtomically(_ bytes: [UInt8], to path: String) throws {
        try writeAtomically(to: path) { write in try bytes.withUnsafeBytes { try write($0) } }
    }

    /// Writes what `body` passes to its `write` to `path` atomically and durably, mode 0600:
    /// into a new temporary file beside it (`mkstemp`, 0600), fsynced, renamed over `path`,
    /// then the directory fsynced; a reader sees the old file or the whole new one, and a
    /// crash leaves no partial `path`. The temporary file is removed when `body` or a write
    /// throws. `write` must not be called after `body` returns. Returns the bytes written. Throws StorageFull (no space), InternalError.
    @discardableResult
    static func writeAtomically(
        to path: String,
        _ body: (_ write: @escaping (UnsafeRawBufferPointer) throws -> Void) throws -> Void
    ) throws -> Int {
        let dir = (path as NSString).deletingLastPathComponent
        let name = (path as NSString).lastPathComponent
        var template = Array("\(dir.isEmpty ? "." : dir)/.\(name).tmp-XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        if fd >= 0 { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        func failure(_ what: String, _ code: Int32) -> VaultFailure {
            VaultFailure(
                code == ENOSPC || code == EDQUOT ? .storageFull : .internalError,
                "cannot \(what) \(path): \(String(cString: strerror(code)))")
        }
        guard fd >= 0 else { throw failure("create a file beside", errno) }
        let tmp = String(cString: template.withUnsafeBufferPointer { $0.baseAddress! })
        var done = false
        var closed = false
        defer {
            if !closed { close(fd) }
            if !done { unlink(tmp) }
        }
        var total = 0
        try body { bytes in
            var written = 0
            while written < bytes.count {
                let n = write(fd, bytes.baseAddress! + written, bytes.count - written)
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { throw failure("write", errno) }
                written += n
            }
            total += written
        }
        guard fchmod(fd, 0o600) == 0, fsync(fd) == 0 else { throw failure("write", errno) }
        closed = true
        close(fd)
        guard rename(tmp, path) == 0 else { throw failure("write", errno) }
        done = true
        let d = open(dir.isEmpty ? "." : dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if d >= 0 {
            fsync(d)
            close(d)
        }
        return total
    }

    /// A read-only descriptor (close-on-exec) of the regular file at `path`, refused when
    /// it is over `limit` bytes. The caller closes it. Throws Param (absent, not a regular
    /// file, over the limit).
    static func openRegularFile(_ path: String, limit: Int) throws -> Int32 {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else {
            throw VaultFailure.param("cannot open \(path): \(String(cString: strerror(errno)))")
        }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            throw VaultFailure.param("\(path) is not a regular file")
        }
        guard st.st_size <= off_t(limit) else {
            close(fd)
            throw VaultFailure.param("\(path) is \(st.st_size) bytes; at most \(limit) are read")
        }
        return fd
    }

    /// Reads up to `buffer.count` bytes of `fd` (retrying on EINTR); 0 at the end of the
    /// file. Throws InternalError naming `path`.
    static func readSome(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, path: String)
        throws
        -> Int
    {
        guard buffer.count > 0 else { return 0 }
        while true {
            let n = Glibc.read(fd, buffer.baseAddress!, buffer.count)
            if n >= 0 { return n }
            if errno != EINTR {
                throw VaultFailure(
                    .internalError, "cannot read \(path): \(String(cString: strerror(errno)))")
            }
        }
    }

    /// The bytes of the regular file at `path`, refused beyond `limit` bytes before any is
    /// read. Throws Param (absent, not a regular file, over the limit), InternalError.
    static func readFile(_ path: String, limit: Int) throws -> [UInt8] {
        let fd = try openRegularFile(path, limit: limit)
        defer { close(fd) }
        var st = stat()
        fstat(fd, &st)
        var out = [UInt8](repeating: 0, count: Int(st.st_size))
        var got = 0
        while got < out.count {
            let n = try out.withUnsafeMutableBytes {
                try readSome(
                    fd, into: UnsafeMutableRawBufferPointer(rebasing: $0[got...]), path: path)
            }
            if n == 0 { break }
            got += n
        }
        // A file that shrank while read is read as it now is (and then fails its checks).
        if got < out.count { out.removeLast(out.count - got) }
        return out
    }
}
