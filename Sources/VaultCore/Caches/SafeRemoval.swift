import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Deletes inside a directory tree without ever following a symbolic link or leaving the
/// tree: every step is `openat`/`unlinkat` relative to a directory fd opened with
/// `O_NOFOLLOW | O_DIRECTORY`. A symlink is removed as a link; its target is untouched.
enum SafeRemoval {
    /// Removes everything inside the directory `path` (not the directory itself). Entries that
    /// cannot be removed (no permission) are skipped. Returns the bytes of regular files removed.
    @discardableResult
    static func removeContents(of path: String) -> Int64 {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return 0 }
        return removeContents(directoryFD: fd)  // closes fd
    }

    /// Removes the directory `path` and everything in it; a symlink at `path` is removed as a link.
    static func removeTree(_ path: String) {
        removeContents(of: path)
        if rmdir(path) != 0 && errno == ENOTDIR { unlink(path) }
    }

    /// Removes the entries of an open directory, recursing into subdirectories; closes `fd`.
    private static func removeContents(directoryFD fd: Int32) -> Int64 {
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
            guard fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
            if st.st_mode & S_IFMT == S_IFDIR {
                let sub = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                if sub >= 0 { freed += removeContents(directoryFD: sub) }
                unlinkat(fd, name, AT_REMOVEDIR)
            } else if unlinkat(fd, name, 0) == 0, st.st_mode & S_IFMT == S_IFREG {
                freed += Int64(st.st_blocks) * 512
            }
        }
        return freed
    }
}
