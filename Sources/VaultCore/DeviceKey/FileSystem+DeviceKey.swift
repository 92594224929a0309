internal import CSodium
import Foundation
import VaultProtocol

extension FileSystem {
    /// The bytes of the key file at `path` (a sealed key, say), refused unless it is a regular
    /// file of this user, neither readable nor writable by others (as `loadOrCreateKey`
    /// checks), of at most `limit` bytes. Throws InternalError naming the file and the fix.
    static func readPrivateFile(_ path: String, limit: Int) throws -> [UInt8] {
        let raw: Int32
        do {
            raw = try SystemCall.open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        } catch {
            throw VaultFailure(
                .internalError, "cannot read \(path): \(String(cString: strerror(error.code)))")
        }
        let fd = FileDescriptor(adopting: raw)
        guard let st = try? fd.status(), st.st_mode & S_IFMT == S_IFREG,
            st.st_size <= off_t(limit)
        else {
            throw VaultFailure(
                .internalError,
                "\(path) is damaged: it is not a regular file of at most \(limit) bytes. Put it back from a backup of this device"
            )
        }
        try requirePrivate(st, at: path, holding: "a key file")
        var out = [UInt8](repeating: 0, count: Int(st.st_size))
        var got = 0
        while got < out.count {
            let n =
                (try? out.withUnsafeMutableBytes {
                    try fd.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[got...]))
                }) ?? -1
            guard n > 0 else { break }
            got += n
        }
        guard got == out.count else {
            throw VaultFailure(.internalError, "\(path) is damaged: could not read all of it")
        }
        return out
    }

    /// Overwrites the regular file at `path` with zeros (fsynced), then removes it and fsyncs
    /// its directory. On a copy-on-write or journalling file system, or an SSD remapping
    /// blocks, older copies of the bytes may survive on the medium: this removes the key from
    /// the file system, not necessarily from the disk (docs/threat-model.md). Failures are
    /// logged: a key left behind is reported, never a reason to fail.
    static func removeSecurely(_ path: String, logger: Logger) {
        if let fd = try? FileDescriptor(
            opening: path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK),
            let st = try? fd.status(), st.st_mode & S_IFMT == S_IFREG, st.st_size > 0,
            st.st_size <= 1 << 20
        {
            let zeros = [UInt8](repeating: 0, count: Int(st.st_size))
            _ = try? zeros.withUnsafeBytes { try SystemCall.pwrite(fd.rawValue, $0, at: 0) }
            try? fd.sync()
        }
        do {
            try SystemCall.unlink(path)
        } catch {
            logger.warning("could not remove \(path): \(String(cString: strerror(error.code)))")
            return
        }
        syncDirectory((path as NSString).deletingLastPathComponent)
    }
}
