import Foundation

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
        guard let proc = opendir("/proc") else { return found }
        defer { closedir(proc) }
        let (major, minor) = split(device)
        while let entry = readdir(proc) {
            let pid = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            guard !pid.isEmpty, pid.allSatisfy(\.isASCIIDigit) else { continue }
            // Open files: a stat through each /proc/PID/fd link gives the open file itself.
            let fdDir = open("/proc/\(pid)/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            if fdDir >= 0, let dir = fdopendir(fdDir) {
                while let fd = readdir(dir) {
                    var st = stat()
                    guard fd.pointee.d_name.0 != 46,  // "." and ".."
                        withUnsafeBytes(
                            of: fd.pointee.d_name,
                            { raw in
                                raw.withMemoryRebound(to: CChar.self) {
                                    fstatat(fdDir, $0.baseAddress!, &st, 0)
                                }
                            }) == 0
                    else { continue }
                    if st.st_dev == device && st.st_mode & S_IFMT == S_IFREG {
                        found.insert(st.st_ino)
                    }
                }
                closedir(dir)
            } else if fdDir >= 0 {
                close(fdDir)
            }
            // Mapped files (a closed fd can leave a mapping): "start-end perms offset MAJ:MIN inode path".
            guard let maps = try? String(contentsOfFile: "/proc/\(pid)/maps", encoding: .utf8)
            else { continue }
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
        }
        return found
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
