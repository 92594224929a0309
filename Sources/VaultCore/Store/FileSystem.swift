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
        do {
            try SystemCall.chmod(path, mode)
        } catch {
            throw VaultFailure(
                .internalError,
                "cannot set mode of \(path): \(String(cString: strerror(error.code)))")
        }
    }

    /// Tightens an existing file to 0600 (a store made by an older vaultd, or copied in).
    static func restrict(_ path: String) throws {
        try? SystemCall.chmod(path, 0o600)
    }

    /// Creates `path` empty with mode 0600 when absent (an existing file is left as it is), so
    /// that a file the store opens next (SQLite creates with 0644 and gives its -wal and -shm
    /// files the database's mode) is private from its creation: a start that fails right
    /// after (a full disk) must not leave it readable by others.
    static func createPrivateFile(_ path: String) throws {
        do {
            SystemCall.close(
                try SystemCall.open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode: 0o600))
        } catch {
            throw VaultFailure(
                isFull(error.code) ? .storageFull : .internalError,
                "cannot create \(path): \(String(cString: strerror(error.code)))")
        }
    }

    /// Reads the key at `path`, or creates it with `length` random bytes, mode 0600, written
    /// durably (fsync of the file and its directory). An existing key must be a regular file of
    /// exactly `length` bytes (anything else is damaged: a key read from the first bytes of
    /// a longer file, or a short one, would silently be another key), owned by this user and
    /// neither readable nor writable by others (refused as ssh refuses such a private key,
    /// saying how to fix it; not changed behind the user's back).
    static func loadOrCreateKey(at path: String, length: Int) throws -> SecureBytes {
        do {
            let fd = try FileDescriptor(
                opening: path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
            return try readKey(fd, at: path, length: length)
        } catch let e as Errno where e.code == Errno.notFound && e.call == "open" {
        } catch let e as Errno {
            throw VaultFailure(
                .internalError, "cannot read \(path): \(String(cString: strerror(e.code)))")
        }
        let key = SecureBytes.random(count: length)
        try writeKey(key, to: path)
        return key
    }

    /// Refuses the key file at `path` (its status `st`) when another user owns it or others
    /// may read or write it: InternalError naming the fix. `what`: what it holds, for the
    /// message ("a device key").
    static func requirePrivate(_ st: stat, at path: String, holding what: String) throws {
        guard st.st_uid == getuid() else {
            throw VaultFailure(
                .internalError,
                "\(path) is owned by uid \(st.st_uid), not by this user (uid \(getuid())): refusing \(what) another user controls. Fix: chown \(getuid()) \(path)"
            )
        }
        guard st.st_mode & 0o077 == 0 else {
            throw VaultFailure(
                .internalError,
                "\(path) has permissions \(String(st.st_mode & 0o777, radix: 8)): \(what) must not be accessible by others. Fix: chmod 600 \(path)"
            )
        }
    }

    /// The key in `fd` (the file at `path`), checked as `loadOrCreateKey` says. Throws
    /// InternalError, or `Errno` ("fstat", "read").
    private static func readKey(_ fd: borrowing FileDescriptor, at path: String, length: Int)
        throws -> SecureBytes
    {
        let st = try fd.status()
        guard st.st_mode & S_IFMT == S_IFREG else {
            throw VaultFailure(
                .internalError,
                "\(path) is damaged: it is not a regular file. Put back the device.key from a backup of this device and start vaultd again"
            )
        }
        try requirePrivate(st, at: path, holding: "a device key")
        guard st.st_size == off_t(length) else {
            throw VaultFailure(
                .internalError,
                "\(path) is damaged: it holds \(st.st_size) bytes, a device key is exactly \(length). Put back the device.key from a backup of this device and start vaultd again"
            )
        }
        let key = SecureBytes(count: length)
        var got = 0
        while got < length {
            let n =
                (try? key.withUnsafeMutableBytes {
                    try fd.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[got..<length]))
                }) ?? -1
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

    /// Writes a new key to `path` durably, mode 0600: a temporary file beside it, fsynced,
    /// renamed over it, then the directory fsynced. Throws StorageFull, InternalError.
    private static func writeKey(_ key: SecureBytes, to path: String) throws {
        let tmp = path + ".tmp"
        try? SystemCall.unlink(tmp)
        let wfd: Int32
        do {
            wfd = try SystemCall.open(
                tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode: 0o600)
        } catch {
            throw VaultFailure(
                .internalError, "cannot create \(path): \(String(cString: strerror(error.code)))")
        }
        do {
            do {
                let fd = FileDescriptor(adopting: wfd)
                try key.withUnsafeBytes { try fd.writeAll($0) }
                try fd.sync()
            }
            try SystemCall.rename(tmp, path)
        } catch {
            try? SystemCall.unlink(tmp)
            let code = (error as? Errno)?.code ?? Errno.ioError
            throw VaultFailure(
                .storageFull, "cannot write \(path): \(String(cString: strerror(code)))")
        }
        syncDirectory((path as NSString).deletingLastPathComponent)
    }

    /// fsync of the directory `dir` (a rename in it made durable); a failure is ignored, as
    /// the rename happened.
    static func syncDirectory(_ dir: String) {
        guard
            let d = try? FileDescriptor(
                opening: dir.isEmpty ? "." : dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        else { return }
        try? d.sync()
    }

    /// ENOSPC or EDQUOT: the store is full (StorageFull), not broken.
    static func isFull(_ code: Int32) -> Bool {
        code == Errno.noSpace || code == Errno.quotaExceeded
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
        func failure(_ what: String, _ code: Int32) -> VaultFailure {
            VaultFailure(
                isFull(code) ? .storageFull : .internalError,
                "cannot \(what) \(path): \(String(cString: strerror(code)))")
        }
        let made: (fd: Int32, path: String)
        do {
            made = try SystemCall.makeTemporaryFile(
                "\(dir.isEmpty ? "." : dir)/.\(name).tmp-XXXXXX")
        } catch { throw failure("create a file beside", error.code) }
        // A raw descriptor, closed here: `body`'s `write` escapes, which an owned one cannot.
        let fd = made.fd
        var done = false
        var closed = false
        defer {
            if !closed { SystemCall.close(fd) }
            if !done { try? SystemCall.unlink(made.path) }
        }
        var total = 0
        try body { bytes in
            do {
                try SystemCall.writeAll(fd, bytes)
            } catch let e as Errno { throw failure("write", e.code) }
            total += bytes.count
        }
        do {
            try SystemCall.fchmod(fd, 0o600)
            try SystemCall.fsync(fd)
        } catch { throw failure("write", error.code) }
        closed = true
        SystemCall.close(fd)
        do { try SystemCall.rename(made.path, path) } catch { throw failure("write", error.code) }
        done = true
        syncDirectory(dir)
        return total
    }

    /// A read-only descriptor (close-on-exec) of the regular file at `path`, refused when
    /// it is over `limit` bytes. The caller closes it. Throws Param (absent, not a regular
    /// file, over the limit).
    static func openRegularFile(_ path: String, limit: Int) throws -> FileDescriptor {
        let raw: Int32
        do {
            raw = try SystemCall.open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        } catch {
            throw VaultFailure.param(
                "cannot open \(path): \(String(cString: strerror(error.code)))")
        }
        let fd = FileDescriptor(adopting: raw)
        guard let st = try? fd.status(), st.st_mode & S_IFMT == S_IFREG else {
            throw VaultFailure.param("\(path) is not a regular file")
        }
        guard st.st_size <= off_t(limit) else {
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
        do {
            return try SystemCall.read(fd, into: buffer)
        } catch {
            throw VaultFailure(
                .internalError, "cannot read \(path): \(String(cString: strerror(error.code)))")
        }
    }

    /// The bytes of the regular file at `path`, refused beyond `limit` bytes before any is
    /// read. Throws Param (absent, not a regular file, over the limit), InternalError.
    static func readFile(_ path: String, limit: Int) throws -> [UInt8] {
        let fd = try openRegularFile(path, limit: limit)
        let size = (try? fd.status())?.st_size ?? 0
        var out = [UInt8](repeating: 0, count: Int(size))
        var got = 0
        while got < out.count {
            let n = try out.withUnsafeMutableBytes {
                try readSome(
                    fd.rawValue, into: UnsafeMutableRawBufferPointer(rebasing: $0[got...]),
                    path: path)
            }
            if n == 0 { break }
            got += n
        }
        // A file that shrank while read is read as it now is (and then fails its checks).
        if got < out.count { out.removeLast(out.count - got) }
        return out
    }
}
