import Foundation
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Space on the data directory's file system kept for the writes that make room: a file,
/// `space.reserve` beside the store, of `StorageReserve.bytes` allocated blocks. On a full disk
/// every write is refused (StorageFull), a delete too (SQLite needs room for its WAL frames,
/// however small the change). A delete, or a removal of preferences or an app, refused so
/// gives the reserve's blocks back (`release`: the file truncated to nothing) and is tried
/// once more; the file is filled again (`replenish`) at the next start and at each periodic
/// pass, as far as the disk then allows (docs/configuration.md, "A full disk").
///
/// `lock` guards the file's use; the path never changes.
final class StorageReserve: Sendable {
    /// What the reserve holds when whole (1 MiB): a delete's frames are a few pages each,
    /// and a checkpoint that resets the WAL needs no more room.
    static let bytes = 1 << 20

    let path: String
    private let lock = NSLock()

    init(directory: String) {
        path = directory + "/space.reserve"
    }

    /// Allocates the file's blocks up to `bytes` (mode 0600), as far as the disk allows;
    /// returns the bytes it then holds. Blocks already there are kept (posix_fallocate of an
    /// allocated range changes nothing), a hole is filled. Never fails: a reserve is a help,
    /// not a need.
    @discardableResult
    func replenish() -> Int {
        lock.withLock {
            guard
                let fd = try? FileDescriptor(
                    opening: path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode: 0o600),
                let st = try? fd.status(), st.st_mode & S_IFMT == S_IFREG
            else { return 0 }
            // In chunks, so a nearly full disk still gets part of the reserve.
            let chunk = 64 << 10
            var held = 0
            while held < Self.bytes {
                let length = min(chunk, Self.bytes - held)
                guard (try? SystemCall.fallocate(fd.rawValue, off_t(held), off_t(length))) != nil
                else { break }
                held += length
            }
            return held
        }
    }

    /// Gives the reserve's blocks back to the file system (the file truncated to nothing);
    /// returns the bytes it held, its size (0: nothing to give).
    func release() -> Int {
        lock.withLock {
            guard let st = try? SystemCall.lstat(path), st.st_mode & S_IFMT == S_IFREG,
                st.st_size > 0
            else { return 0 }
            guard (try? SystemCall.truncate(path, 0)) != nil else { return 0 }
            return Int(st.st_size)
        }
    }
}
