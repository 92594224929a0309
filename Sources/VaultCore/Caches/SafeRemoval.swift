import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Deletes inside a directory tree without ever following a symbolic link or leaving the
/// tree: every step is `openat`/`unlinkat` relative to a directory fd opened with
/// `O_NOFOLLOW | O_DIRECTORY`. A symlink is removed as a link; its target is untouched. It
/// stays on the tree's filesystem (as `rm --one-file-system`): a mount point inside, and what
/// is under it, is left alone (a bind mount there led outside the cache root). It goes at
/// most `maximumDepth` directories down (deeper recursion overflowed a thread's stack).
enum SafeRemoval {
    /// How many directory levels below its root a cache walk or removal goes.
    static let maximumDepth = 256

    /// Whether `st` is on `device` (the tree's filesystem).
    static func onDevice(_ st: stat, _ device: dev_t) -> Bool { st.st_dev == device }

    /// Removes everything inside the directory `path` (not the directory itself). Entries that
    /// cannot be removed (no permission, another filesystem, too deep) are skipped. Returns
    /// the bytes of regular files removed.
    @discardableResult
    static func removeContents(of path: String) -> Int64 {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return 0 }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            close(fd)
            return 0
        }
        return removeContents(directoryFD: fd, device: st.st_dev, depth: 0)  // closes fd
    }

    /// Removes the directory `path` and everything in it; a symlink at `path` is removed as a link.
    static func removeTree(_ path: String) {
        removeContents(of: path)
        if rmdir(path) != 0 && errno == ENOTDIR { unlink(path) }
    }

    /// Removes the entries of an open directory, recursing into subdirectories; closes `fd`.
    private static func removeContents(directoryFD fd: Int32, device: dev_t, depth: Int) -> Int64 {
        guard let dir = fdopendir(fd) else {
            close(fd)
            return 0
        }
        defer { closedir(dir) }
        var freed: Int64 = 0
        // Names are kept as raw bytes: a name need not be UTF-8.
        var names: [[CChar]] = []
        while let entry = readdir(dir) {
            var name = withUnsafeBytes(of: entry.pointee.d_name) { raw in raw.prefix(while: { $0 != 0 }).map { CChar(bitPattern: $0) } }
            if name == [46] || name == [46, 46] { continue }
            name.append(0)
            names.append(name)
        }
        for name in names {
            var st = stat()
            guard fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0, onDevice(st, device) else { continue }
            if st.st_mode & S_IFMT == S_IFDIR {
                guard depth + 1 < maximumDepth else { continue }
                let sub = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                if sub >= 0 { freed += removeContents(directoryFD: sub, device: device, depth: depth + 1) }
                unlinkat(fd, name, AT_REMOVEDIR)
            } else if unlinkat(fd, name, 0) == 0, st.st_mode & S_IFMT == S_IFREG {
                freed += Int64(st.st_blocks) * 512
            }
        }
        return freed
    }
}
