import Foundation
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// The files on one filesystem that some process holds open or has mapped, as `fuser` finds
/// them: through `/proc/PID/fd` (each a stat of the open file, never an open of it) and
/// `/proc/PID/maps`. Removing such a file from a cache frees nothing until the process lets
/// go of it, and a process writing to it goes on writing into a file no one can read again:
/// a purge leaves them. Only processes whose `/proc` entries we may read are seen (ours), so
/// it is a best effort: a file opened after the look is not in it.
enum OpenFiles {
    /// A dev_t's major and minor numbers, as glibc's major(3) and minor(3) split it (their
    /// 32-bit parts included: without them the minor would keep the major's high bits, and
    /// a device with a major of 4096 or more would be misread).
    static func split(_ device: dev_t) -> (major: UInt32, minor: UInt32) {
        let major =
            UInt32(truncatingIfNeeded: (device >> 8) & 0xfff)
            | (UInt32(truncatingIfNeeded: device >> 32) & ~0xfff)
        let minor =
            UInt32(truncatingIfNeeded: device & 0xff)
            | (UInt32(truncatingIfNeeded: device >> 12) & ~0xff)
        return (major, minor)
    }

    /// The st_ino of every regular file on `device` that a process we can see has open or mapped.
    static func inodes(on device: dev_t) -> Set<ino_t> {
        var found: Set<ino_t> = []
        let (major, minor) = split(device)
        try? SystemCall.forEachEntry(ofDirectory: "/proc") { pid in
            guard !pid.isEmpty, pid.allSatisfy(\.isASCIIDigit) else { return true }
            // Open files: a stat through each /proc/PID/fd link gives the open file itself.
            if let fdDir = try? FileDescriptor(
                opening: "/proc/\(pid)/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            {
                let dir = fdDir.rawValue
                for name in (try? SystemCall.entries(ofDirectoryAt: dir)) ?? [] {
                    guard let st = try? SystemCall.fstatat(dir, name, 0) else { continue }
                    if st.st_dev == device && st.st_mode & S_IFMT == S_IFREG {
                        found.insert(st.st_ino)
                    }
                }
            }
            // Mapped files (a closed fd can leave a mapping): "start-end perms offset MAJ:MIN inode path".
            guard let maps = try? String(contentsOfFile: "/proc/\(pid)/maps", encoding: .utf8)
            else { return true }
            for line in maps.split(separator: "\n") {
                let fields = line.split(
                    separator: " ", maxSplits: 5, omittingEmptySubsequences: true)
                guard fields.count >= 5, let inode = UInt64(fields[4]), inode != 0 else { continue }
                let dev = fields[3].split(separator: ":")
                guard dev.count == 2, UInt32(dev[0], radix: 16) == major,
                    UInt32(dev[1], radix: 16) == minor
                else { continue }
                found.insert(ino_t(inode))
            }
            return true
        }
        return found
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
