import Foundation
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Deletes inside a directory tree of any depth without ever following a symbolic link or
/// leaving the tree: it walks with `TreeWalk` (every step `openat`/`unlinkat` relative to a
/// directory fd opened with `O_NOFOLLOW | O_DIRECTORY`; no recursion; a bounded number of
/// fds). A symlink is removed as a link; its target is untouched. It stays on the tree's
/// filesystem (as `rm --one-file-system`): a mount point inside, and what is under it, is
/// left alone (a bind mount there led outside the cache root).
enum SafeRemoval {
    /// Removes everything inside the directory `path` (not the directory itself). Entries that
    /// cannot be removed (no permission, another filesystem, moved during the removal) are
    /// skipped. `label` names the tree in the log (an app ID). Returns the bytes (allocated
    /// on disk) of the regular files removed.
    @discardableResult
    static func removeContents(of path: String, label: String, logger: Logger) -> Int64 {
        // The top too: the app may have made its own cache directory unreadable.
        let fd = TreeWalk.openDirectory(path, grantAccess: true)
        guard fd >= 0 else { return 0 }
        var freed: Int64 = 0
        // Directories the app made unreadable or unwritable are opened up first (they are
        // ours): else an uninstall would leave them, and what is in them, for the next install.
        TreeWalk.walk(fd, label: label, logger: logger, grantAccess: true) {
            directoryFD, name, st, _ in
            if TreeWalk.unlink(directoryFD, name), st.st_mode & S_IFMT == S_IFREG {
                freed += Int64(st.st_blocks) * 512
            }
        } leave: { parentFD, name in
            _ = TreeWalk.unlink(parentFD, name, flags: AT_REMOVEDIR)
        }
        return freed
    }

    /// Removes the directory `path` and everything in it; a symlink at `path` is removed as a
    /// link. `label` names it in the log (an app ID).
    static func removeTree(_ path: String, label: String, logger: Logger) {
        removeContents(of: path, label: label, logger: logger)
        do {
            try SystemCall.rmdir(path)
        } catch  where error.code == Errno.notDirectory {
            try? SystemCall.unlink(path)
        } catch {}
    }
}
