import Foundation
import Testing
@testable import VaultCore

#if canImport(Glibc)
import Glibc
#endif

@Suite("TreeWalk")
struct TreeWalkTests {
    private func openFDs() -> Int { ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []).count }

    /// A chain of `depth` directories `d`, each holding a file `f`; returns the root.
    private func chain(_ depth: Int) throws -> String {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("treewalk-\(UUID().uuidString)").path
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
        let before = openFDs()
        var directories: [ino_t] = []
        var moved = false
        TreeWalk.walk(open(root, O_RDONLY | O_DIRECTORY), label: "test") { _, _, _, directory in
            directories.append(directory)
            if directories.count == 50 && !moved {
                moved = true
                #expect(rename(root + "/d/d/d", root + "/elsewhere") == 0)
            }
        }
        #expect(openFDs() == before)
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
        let before = openFDs()
        var count = 0
        for _ in 0..<5 { TreeWalk.walk(open(root, O_RDONLY | O_DIRECTORY), label: "test") { _, _, _, _ in count += 1 } }
        #expect(count == 1000)
        #expect(openFDs() == before)
    }
}
