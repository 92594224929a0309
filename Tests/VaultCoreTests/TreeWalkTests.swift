import Foundation
import TestSupport
import Testing

@testable import VaultCore

#if canImport(Glibc)
import Glibc
#endif

@Suite("TreeWalk")
struct TreeWalkTests {
    /// This process's open fds on `root` or below it (other tests run beside these, with
    /// files of their own).
    private func openFDs(under root: String) -> Int {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return fds.filter { fd in
            guard
                let target = try? FileManager.default.destinationOfSymbolicLink(
                    atPath: "/proc/self/fd/" + fd)
            else { return false }
            return target == root || target.hasPrefix(root + "/")
        }.count
    }

    /// A chain of `depth` directories `d`, each holding a file `f`; returns the root.
    private func chain(_ depth: Int) throws -> String {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent(
            "treewalk-\(UUID().uuidString)"
        ).path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        var fd = open(root, O_RDONLY | O_DIRECTORY)
        for _ in 0..<depth {
            close(openat(fd, "f", O_WRONLY | O_CREAT, 0o600))
            mkdirat(fd, "d", 0o700)
            let next = openat(fd, "d", O_RDONLY | O_DIRECTORY)
            close(fd)
            fd = next
        }
        close(fd)
        return root
    }

    /// A directory moved (within the tree) during the walk, above the window of open levels:
    /// the walk does not go on in the levels it can no longer climb back to, visits the rest,
    /// and leaves no fd open.
    @Test func aDirectoryMovedDuringTheWalkIsSkippedAndNoFDLeaks() throws {
        let root = try chain(60)
        defer { try? FileManager.default.removeItem(atPath: root) }
        var directories: [ino_t] = []
        var moved = false
        TreeWalk.walk(open(root, O_RDONLY | O_DIRECTORY), label: "test", logger: Logger()) {
            _, _, _, directory in
            directories.append(directory)
            if directories.count == 50 && !moved {
                moved = true
                #expect(rename(root + "/d/d/d", root + "/elsewhere") == 0)
            }
        }
        #expect(openFDs(under: root) == 0 && openFDs(under: root + "/elsewhere") == 0)
        #expect(moved)
        // Each level's file was visited once (files come before the subdirectory here or
        // not: a level is never visited twice, and never after the walk lost its way back).
        #expect(Set(directories).count == directories.count)
        #expect(directories.count <= 60)
    }

    /// Many walks of a deep chain leave no fd open.
    @Test func deepWalksLeaveNoFD() throws {
        let root = try chain(200)
        defer { try? FileManager.default.removeItem(atPath: root) }
        var count = 0
        for _ in 0..<5 {
            TreeWalk.walk(open(root, O_RDONLY | O_DIRECTORY), label: "test", logger: Logger()) {
                _, _, _, _ in
                count += 1
            }
        }
        #expect(count == 1000)
        #expect(openFDs(under: root) == 0)
    }

    /// A bind mount of an ancestor inside the tree makes a cycle; where the kernel cannot
    /// tell mounts apart (before Linux 5.8: no mount id, and the same st_dev), the walk must
    /// not go round it. Stood in for here by a walk that is given no mount ids.
    @Test(.tags(.system), .enabled(if: getuid() == 0, "needs root to make a bind mount"))
    func aBindMountOfAnAncestorIsNotACycleWithoutMountIDs() throws {
        let root = try chain(3)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let loop = root + "/d/d/loop"
        try FileManager.default.createDirectory(atPath: loop, withIntermediateDirectories: false)
        guard mount(root, loop, nil, UInt(MS_BIND), nil) == 0 else {
            Issue.record("mount --bind: \(String(cString: strerror(errno)))")
            return
        }
        var mounted = true
        defer { if mounted { umount2(loop, Int32(MNT_DETACH)) } }
        var files = 0
        TreeWalk.walk(
            open(root, O_RDONLY | O_DIRECTORY), label: "test", logger: Logger(),
            mountID: { _ in nil }
        ) {
            _, _, _, _ in
            files += 1
            // Going round the cycle: break it, so that a failure ends.
            if files == 1000 && mounted {
                umount2(loop, Int32(MNT_DETACH))
                mounted = false
            }
        }
        #expect(files == 3, "the walk went round the bind mount: \(files) files")
        #expect(openFDs(under: root) == 0)
    }
}

@Suite("CachePolicy")
struct CachePolicyTests {
    /// The marks of a 1,000,000-byte volume: the defaults, set ones, and a low mark set above
    /// the default high one, whose high mark stays 5 % of the volume above it (were they
    /// equal, each purge would stop where the next begins).
    @Test(arguments: [
        (CachePolicy(), 50_000, 100_000),
        (CachePolicy(freeLowWater: 200_000), 200_000, 250_000),
        (CachePolicy(freeLowWater: 990_000), 990_000, 1_000_000),
        (CachePolicy(freeLowWater: 200_000, freeHighWater: 200_000), 200_000, 200_000),
        (CachePolicy(freeLowWater: 200_000, freeHighWater: 100_000), 200_000, 200_000),
        (CachePolicy(freeHighWater: 300_000), 50_000, 300_000),
    ])
    func marks(policy: CachePolicy, low: Int64, high: Int64) {
        let m = policy.resolved(capacity: 1_000_000)
        #expect(m.low == low && m.high == high, "\(m)")
    }
}

@Suite("OpenFiles")
struct OpenFilesTests {
    /// dev_t values as glibc's makedev(3) builds them, split back (a major of 4096 or more
    /// came back with a wrong minor: the major's high bits were kept in it).
    @Test(
        arguments: [
            (8, 1), (253, 0), (4095, 255), (4096, 1), (0x12345, 0xABCDE),
            (0xFFFF_FFFF, 0xFFFF_FFFF),
        ] as [(UInt64, UInt64)])
    func devSplitsAsGlibcDoes(major: UInt64, minor: UInt64) {
        let dev = dev_t(
            ((major & 0xfff) << 8) | ((major & ~0xfff) << 32) | (minor & 0xff)
                | ((minor & ~0xff) << 12))
        let split = OpenFiles.split(dev)
        #expect(UInt64(split.major) == major && UInt64(split.minor) == minor, "\(split)")
    }
}
