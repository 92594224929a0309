import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Directory trees deeper than any full path can name (PATH_MAX is 4096 bytes), made and
/// inspected the only way such a tree can be: `mkdirat`/`openat`/`…at` relative to a directory
/// fd, one level at a time. Every fd returned is the caller's to close.
enum DeepTree {
    /// Opens the directory at `path` (a short path: where a deep tree starts), not following a
    /// symlink.
    static func open(_ path: String) throws -> Int32 {
        let fd = Glibc.open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else {
            throw HarnessError("open \(path): \(String(cString: strerror(errno)))")
        }
        return fd
    }

    /// Makes `depth` nested directories, each named `name`, inside the directory `fd`, and
    /// returns an fd on the deepest. `fd` stays open.
    static func chain(in fd: Int32, name: String = "d", depth: Int) throws -> Int32 {
        var current = dup(fd)
        guard current >= 0 else { throw HarnessError("dup: \(String(cString: strerror(errno)))") }
        for level in 0..<depth {
            guard mkdirat(current, name, 0o700) == 0 || errno == EEXIST else {
                defer { Glibc.close(current) }
                throw HarnessError(
                    "mkdirat at level \(level + 1): \(String(cString: strerror(errno)))")
            }
            let next = openat(current, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            Glibc.close(current)
            guard next >= 0 else {
                throw HarnessError(
                    "openat at level \(level + 1): \(String(cString: strerror(errno)))")
            }
            current = next
        }
        return current
    }

    /// Opens the directory `depth` levels down a chain of directories named `name` from the
    /// directory `fd` (which stays open); nil when the chain is not that deep.
    static func descend(from fd: Int32, name: String = "d", depth: Int) -> Int32? {
        var current = dup(fd)
        guard current >= 0 else { return nil }
        for _ in 0..<depth {
            let next = openat(current, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            Glibc.close(current)
            guard next >= 0 else { return nil }
            current = next
        }
        return current
    }

    /// Writes a file `name` of `size` bytes (zeros) in the directory `fd`: a new one, or
    /// (`replacing`) one that may be there already.
    static func write(in fd: Int32, _ name: String, size: Int, replacing: Bool = false) throws {
        let f = openat(
            fd, name,
            O_WRONLY | O_CREAT | O_TRUNC | (replacing ? 0 : O_EXCL) | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard f >= 0 else {
            throw HarnessError("create \(name): \(String(cString: strerror(errno)))")
        }
        defer { Glibc.close(f) }
        let bytes = [UInt8](repeating: 0, count: size)
        guard Glibc.write(f, bytes, size) == size else {
            throw HarnessError("write \(name): \(String(cString: strerror(errno)))")
        }
    }

    /// Makes a symlink `name` in the directory `fd` whose target is `target`.
    static func symlink(in fd: Int32, _ name: String, to target: String) throws {
        guard symlinkat(target, fd, name) == 0 else {
            throw HarnessError("symlink \(name): \(String(cString: strerror(errno)))")
        }
    }

    /// Whether the directory `fd` holds an entry `name` (of any type; a symlink is not followed).
    static func exists(in fd: Int32, _ name: String) -> Bool {
        var st = stat()
        return fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0
    }

    /// The names in the directory `fd` (without "." and ".."), sorted.
    static func names(in fd: Int32) -> [String] {
        let copy = dup(fd)
        guard copy >= 0, let dir = fdopendir(copy) else { return [] }
        defer { closedir(dir) }
        rewinddir(dir)  // the copy shares the position of `fd`, which an earlier read moved
        var out: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { out.append(name) }
        }
        return out.sorted()
    }
}
