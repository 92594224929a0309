internal import CVaultSys
import Foundation
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// A walk of a directory tree of any depth that never follows a symbolic link and never
/// leaves the tree or its filesystem: every step is `openat` relative to a directory fd
/// opened with `O_NOFOLLOW | O_DIRECTORY`, and a directory is entered only when the fd is the
/// directory `fstatat` saw (the same st_dev and st_ino) and on the root's device and mount
/// (as `find -xdev`: a mount point inside, and what is under it, is left alone, also a bind
/// mount of a directory of the same filesystem, which only the mount id tells apart).
///
/// It does not recurse: each level's state is on the heap (about 100 bytes, plus the names
/// in it still to visit), so a thread's small stack is no limit. It holds at most
/// `maximumOpenDirectories` directory fds, and two more for a moment: past that, the shallowest
/// open level but the root is closed, and the walk climbs back to it through "..", which
/// must be the very directory it came down through (st_dev and st_ino, as fts does). When
/// it is not (the app moved a directory during the walk), the rest of that level, and of
/// the levels up to the deepest one still open, is skipped and the skip is logged: the walk
/// never goes on in a directory it did not come down through. Nor does it enter a directory
/// it is already inside (a cycle, which only a bind mount can make).
enum TreeWalk {
    /// The most directory fds one walk keeps open (the root's included; two more for a moment).
    static let maximumOpenDirectories = 16

    private struct Level {
        /// -1 while closed (the level is outside the window of open ones).
        var fd: Int32
        let inode: ino_t
        /// The entries still to visit, the next one last.
        var names: [[CChar]]
        /// The directory's name in its parent (empty for the root).
        let name: [CChar]
    }

    /// Walks the tree below the directory `rootFD`, which it takes (closes). For every entry
    /// on the root's filesystem that is not a directory: `entry(directoryFD, name, status,
    /// directory)`, where `directoryFD` is the entry's directory (open during the call), `name`
    /// the entry's raw NUL-terminated name (it need not be UTF-8), `status` from `fstatat`
    /// without following a link, `directory` the st_ino of the entry's directory. Once all the
    /// entries of a directory below the root have been visited: `leave(parentFD, name)`, if
    /// given (to remove it). `label` names the tree in the log: an app ID. `mountID`: the
    /// mount a directory fd is on (tests stand in for a kernel that does not tell).
    /// `grantAccess`: a directory of ours that may not be read or searched (the app made it
    /// 0300, 0000, …) is given u+rwx so that the walk goes in (for a purge or a removal, which
    /// delete what is in it; not for a count, which must change nothing). `logger` is told of
    /// the levels a move during the walk made it skip.
    static func walk(
        _ rootFD: Int32, label: String, logger: Logger, mountID: (Int32) -> UInt64? = mountID,
        grantAccess: Bool = false,
        entry: (Int32, [CChar], stat, ino_t) -> Void, leave: ((Int32, [CChar]) -> Void)? = nil
    ) {
        guard var st = try? SystemCall.fstat(rootFD),
            let rootNames = try? SystemCall.entries(ofDirectoryAt: rootFD)
        else {
            SystemCall.close(rootFD)
            return
        }
        let device = st.st_dev
        let mount = mountID(rootFD)
        var levels = [Level(fd: rootFD, inode: st.st_ino, names: rootNames.reversed(), name: [])]
        // The directories from the root down to the current one: a directory that is one of
        // them again (a bind mount of an ancestor, where the mount id cannot tell: before
        // Linux 5.8) is not entered, or the walk would go round for ever.
        var onPath: Set<ino_t> = [st.st_ino]
        // Open: the root and the deepest levels, one run of them (levels[count - open + 1...]).
        var open = 1
        while let top = levels.indices.last {
            if let name = levels[top].names.popLast() {
                let fd = levels[top].fd
                guard let found = try? SystemCall.fstatat(fd, name, AT_SYMLINK_NOFOLLOW),
                    found.st_dev == device
                else { continue }
                st = found
                guard st.st_mode & S_IFMT == S_IFDIR else {
                    entry(fd, name, st, levels[top].inode)
                    continue
                }
                let directory = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
                var sub: Int32
                do {
                    sub = try SystemCall.openat(fd, name, directory)
                } catch {
                    guard error.code == Errno.permissionDenied, grantAccess,
                        grantOwnerAccess(in: fd, to: name, inode: st.st_ino, device: device),
                        let again = try? SystemCall.openat(fd, name, directory)
                    else { continue }
                    sub = again
                }
                guard let seen = try? SystemCall.fstat(sub), seen.st_dev == device,
                    seen.st_ino == st.st_ino, mountID(sub) == mount,
                    !onPath.contains(seen.st_ino),
                    let subNames = try? SystemCall.entries(ofDirectoryAt: sub)
                else {
                    SystemCall.close(sub)
                    continue
                }
                levels.append(
                    Level(fd: sub, inode: seen.st_ino, names: subNames.reversed(), name: name))
                onPath.insert(seen.st_ino)
                open += 1
                if open > maximumOpenDirectories {
                    let shallowest = levels.count - open + 1
                    SystemCall.close(levels[shallowest].fd)
                    levels[shallowest].fd = -1
                    open -= 1
                }
                continue
            }
            // Every entry of `top` visited: back up to its parent.
            let done = levels.removeLast()
            onPath.remove(done.inode)
            guard let parent = levels.indices.last else {
                SystemCall.close(done.fd)
                break
            }
            if levels[parent].fd < 0 {
                guard let up = climb(from: done.fd, to: levels[parent].inode, on: device) else {
                    SystemCall.close(done.fd)
                    open -= 1
                    var skipped = 0
                    while let last = levels.last, last.fd < 0 {
                        onPath.remove(levels.removeLast().inode)
                        skipped += 1
                    }
                    logger.info(
                        "cache walk of \(label): a directory \(levels.count + skipped) levels down was moved during the walk; the rest of the \(skipped) level(s) above it was skipped"
                    )
                    continue
                }
                levels[parent].fd = up
                open += 1
            }
            SystemCall.close(done.fd)
            open -= 1
            leave?(levels[parent].fd, done.name)
        }
    }

    /// The id of the mount `fd` is on; nil when the kernel does not tell (before Linux 5.8:
    /// then the device check stands alone).
    /// Gives the directory `name` in `parentFD` (the one a walk saw as `inode` on `device`)
    /// u+rwx when we own it, without following a symlink put in its place: through an
    /// `O_PATH | O_NOFOLLOW` fd, checked, and `chmod` of its `/proc/self/fd` link, which is
    /// that inode itself (as glibc's `fchmodat(AT_SYMLINK_NOFOLLOW)`).
    static func grantOwnerAccess(in parentFD: Int32, to name: [CChar], inode: ino_t, device: dev_t)
        -> Bool
    {
        guard
            let p = try? SystemCall.openat(
                parentFD, name, pathOnly | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        else { return false }
        defer { SystemCall.close(p) }
        guard let st = try? SystemCall.fstat(p), st.st_ino == inode, st.st_dev == device,
            st.st_uid == geteuid(), st.st_mode & S_IFMT == S_IFDIR
        else { return false }
        return (try? SystemCall.chmod("/proc/self/fd/\(p)", (st.st_mode & 0o7777) | 0o700)) != nil
    }

    /// Opens the directory at `path` (a tree's top: an app's cache directory) as `walk` takes
    /// it, without following a symlink there. With `grantAccess`, one of ours that the app
    /// made unreadable or unsearchable (0000, 0300: the top of its tree is as much the app's
    /// as any directory below it) is given u+rwx first, as `walk` does below the top: through
    /// an `O_PATH | O_NOFOLLOW | O_DIRECTORY` fd, and opened again through that fd, so the
    /// directory opened is the one checked. -1 when it cannot be opened.
    static func openDirectory(_ path: String, grantAccess: Bool) -> Int32 {
        do {
            return try SystemCall.open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        } catch {
            guard error.code == Errno.permissionDenied, grantAccess else { return -1 }
        }
        guard let p = try? SystemCall.open(path, pathOnly | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        else { return -1 }
        defer { SystemCall.close(p) }
        guard let st = try? SystemCall.fstat(p), st.st_uid == geteuid(),
            st.st_mode & S_IFMT == S_IFDIR,
            (try? SystemCall.chmod("/proc/self/fd/\(p)", (st.st_mode & 0o7777) | 0o700)) != nil
        else { return -1 }
        return (try? SystemCall.openat(p, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) ?? -1
    }

    /// O_PATH (Linux: 010000000).
    static let pathOnly: Int32 = 0o10000000

    /// `unlinkat(directoryFD, name, flags)`; when that is refused (EACCES: the app took the
    /// write permission from a directory of ours), the directory is given u+rwx and the
    /// unlink tried again. For purges and removals, which must not be stopped so.
    static func unlink(_ directoryFD: Int32, _ name: [CChar], flags: Int32 = 0) -> Bool {
        do {
            try SystemCall.unlinkat(directoryFD, name, flags)
            return true
        } catch {
            guard error.code == Errno.permissionDenied else { return false }
        }
        guard let st = try? SystemCall.fstat(directoryFD), st.st_uid == geteuid(),
            st.st_mode & 0o700 != 0o700,
            (try? SystemCall.fchmod(directoryFD, (st.st_mode & 0o7777) | 0o700)) != nil
        else { return false }
        return (try? SystemCall.unlinkat(directoryFD, name, flags)) != nil
    }

    static func mountID(_ fd: Int32) -> UInt64? {
        var id: UInt64 = 0
        return vault_mount_id(fd, &id) == 0 ? id : nil
    }

    /// The parent of the directory `fd` through "..", when it is the directory `inode` on
    /// `device`; nil otherwise.
    private static func climb(from fd: Int32, to inode: ino_t, on device: dev_t) -> Int32? {
        guard
            let up = try? SystemCall.openat(
                fd, "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        else { return nil }
        guard let st = try? SystemCall.fstat(up), st.st_dev == device, st.st_ino == inode else {
            SystemCall.close(up)
            return nil
        }
        return up
    }
}
