import Foundation
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// The sync folder's layout (docs/sync.md), which every device reads and each writes only its
/// own part of:
///
///     devices/DEVICE_ID/0000000000000001.seg   segments, append-only, never changed once written
///     devices/DEVICE_ID/join                   a joining device's public key
///     devices/DEVICE_ID/grant-OTHER_ID         the group's keys and membership sealed to device OTHER_ID
///     devices/DEVICE_ID/ack                    what the device has merged of each device (signed)
///
/// Nothing else is read; other names (an engine's temporary files) are skipped. Every read is
/// bounded before it starts: the number of device directories and entries listed, and the
/// size of each file.
struct SyncFolder {
    let root: String
    var devicesPath: String { root + "/devices" }

    static let joinName = "join"
    static func grantName(_ to: SyncDeviceID) -> String { "grant-" + to.description }

    func directory(_ d: SyncDeviceID) -> String { devicesPath + "/" + d.description }

    /// Makes `devices/` and this device's directory (0700; the folder's engine carries files,
    /// not modes, and the files are encrypted: the mode keeps other local users out).
    /// Either must be a directory, not a link to one (an engine carries links too: one put in
    /// place of this device's directory would send its writes elsewhere).
    func makeDeviceDirectory(_ d: SyncDeviceID) throws {
        for p in [devicesPath, directory(d)] {
            if mkdir(p, 0o700) != 0 && errno != EEXIST {
                throw VaultFailure(.internalError, "cannot make \(p): \(String(cString: strerror(errno)))")
            }
            var st = stat()
            guard lstat(p, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else {
                throw VaultFailure(.internalError, "\(p) is not a directory (a link or a file is in its place)")
            }
        }
    }

    struct Entry {
        /// Segment sequence → file size in bytes.
        var segments: [UInt64: Int] = [:]
    }

    /// Each device directory and its segments. Throws InternalError when `devices/` cannot be
    /// read, Param when it holds more than `SyncService.maximumDevices` device directories. A
    /// directory's entries past `maximumEntriesPerDevice` are not listed.
    func list() throws -> [SyncDeviceID: Entry] {
        guard let dir = opendir(devicesPath) else {
            if errno == ENOENT { return [:] }
            throw VaultFailure(.internalError, "cannot read \(devicesPath): \(String(cString: strerror(errno)))")
        }
        defer { closedir(dir) }
        var out: [SyncDeviceID: Entry] = [:]
        while let e = readdir(dir) {
            let name = withUnsafeBytes(of: e.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
            guard let device = SyncDeviceID(hex: name) else { continue }
            guard out.count < SyncService.maximumDevices else {
                throw VaultFailure.param("the sync folder holds more than \(SyncService.maximumDevices) device directories")
            }
            out[device] = listDevice(device)
        }
        return out
    }

    private func listDevice(_ device: SyncDeviceID) -> Entry {
        var entry = Entry()
        let path = directory(device)
        // A link in the place of a device's directory is not followed.
        var st = stat()
        guard lstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFDIR, let dir = opendir(path) else { return entry }
        defer { closedir(dir) }
        var seen = 0
        while let e = readdir(dir), seen < SyncService.maximumEntriesPerDevice {
            seen += 1
            let name = withUnsafeBytes(of: e.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
            guard let seq = SyncSegment.sequence(ofFileName: name) else { continue }
            var st = stat()
            guard lstat(path + "/" + name, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { continue }
            entry.segments[seq] = Int(st.st_size)
        }
        return entry
    }

    /// A file's bytes, at most `limit`: opened without following a link, a regular file, its
    /// size checked before it is read. Throws `SyncFormatError` otherwise.
    static func read(_ path: String, limit: Int) throws -> [UInt8] {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { throw SyncFormatError("cannot open: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { throw SyncFormatError("not a regular file") }
        guard st.st_size <= limit else { throw SyncFormatError("\(st.st_size) bytes, over the \(limit)-byte limit") }
        var out = [UInt8](repeating: 0, count: Int(st.st_size))
        var at = 0
        while at < out.count {
            let n = out.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + at, $0.count - at) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw SyncFormatError("the file shrank while it was read") }
            at += n
        }
        return out
    }

    func readSegment(device: SyncDeviceID, sequence: UInt64) throws -> [UInt8] {
        try Self.read(directory(device) + "/" + SyncSegment.fileName(sequence), limit: SyncSegment.maximumFileBytes)
    }

    func readSmallFile(device: SyncDeviceID, name: String, limit: Int) -> [UInt8]? {
        try? Self.read(directory(device) + "/" + name, limit: limit)
    }

    /// Writes a new file `name` in this device's directory whole or not at all: into a
    /// temporary file, fsynced, linked to its name (which fails rather than replace a file:
    /// segments are immutable), the directory fsynced. Throws InternalError.
    func writeFile(_ bytes: [UInt8], device: SyncDeviceID, name: String) throws {
        let dir = directory(device)
        let tmp = dir + "/.tmp-" + SyncHex.encode(Sodium.randomBytes(8))
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw VaultFailure(.internalError, "cannot write in \(dir): \(String(cString: strerror(errno)))") }
        defer { unlink(tmp) }
        var at = 0
        var failure: Int32 = 0
        while at < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + at, $0.count - at) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 {
                failure = errno
                break
            }
            at += n
        }
        if failure == 0 && fsync(fd) != 0 { failure = errno }
        close(fd)
        // The join and ack files are this device's to replace (a second `sync join` after a
        // leave; each new acknowledgement); anything else is written once.
        let replaceable = name == Self.joinName || name == SyncAck.name
        if failure == 0 && !replaceable && link(tmp, dir + "/" + name) != 0 { failure = errno }
        if failure == 0 && replaceable && rename(tmp, dir + "/" + name) != 0 { failure = errno }
        guard failure == 0 else {
            throw VaultFailure(.internalError, "cannot write \(name) in \(dir): \(String(cString: strerror(failure)))")
        }
        let dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dfd >= 0 {
            fsync(dfd)
            close(dfd)
        }
    }

    func removeFile(device: SyncDeviceID, name: String) {
        unlink(directory(device) + "/" + name)
    }
}

/// Wakes the sync passes: inotify on the folder's `devices/` and each device directory in it
/// (a file an engine moves into place or closes after writing), an eventfd for the vault's
/// own changes (`wake`, through a pipe), and a 60 s timeout for what inotify cannot see (a network file
/// system, an overflowed queue).
final class SyncWatcher: @unchecked Sendable {
    private let path: () -> String?
    /// The wake-up pipe's read end (drained by the watcher) and write end.
    private let wakeFD: Int32
    private let wakeWriteFD: Int32
    private let inotifyFD: Int32
    /// Watched paths, by watch descriptor (touched by the watcher's thread only).
    private var watched: Set<String> = []

    init(path: @escaping () -> String?) {
        self.path = path
        var ends: [Int32] = [-1, -1]
        _ = pipe(&ends)
        for fd in ends where fd >= 0 {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        (wakeFD, wakeWriteFD) = (ends[0], ends[1])
        inotifyFD = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
    }

    func wake() {
        // A full pipe already holds a wake-up: the write may fail then.
        var one: UInt8 = 1
        _ = write(wakeWriteFD, &one, 1)
    }

    /// Runs `pass` on a thread of its own: once now, then after each wake-up.
    func run(_ pass: @escaping @Sendable () -> Void) {
        let t = Thread { [self] in
            while true {
                pass()
                watch()
                var fds = [pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0), pollfd(fd: inotifyFD, events: Int16(POLLIN), revents: 0)]
                _ = poll(&fds, 2, 60_000)
                drain(wakeFD)
                drain(inotifyFD)
            }
        }
        t.name = "vaultd sync"
        t.start()
    }

    private func drain(_ fd: Int32) {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while buffer.withUnsafeMutableBytes({ read(fd, $0.baseAddress!, $0.count) }) > 0 {}
    }

    /// Adds watches on the folder, `devices/` and every device directory not yet watched.
    private func watch() {
        guard inotifyFD >= 0, let devices = path() else { return }
        let root = (devices as NSString).deletingLastPathComponent
        var paths = [root, devices]
        if let names = try? FileManager.default.contentsOfDirectory(atPath: devices) {
            paths += names.filter { SyncDeviceID(hex: $0) != nil }.prefix(SyncService.maximumDevices).map { devices + "/" + $0 }
        }
        for p in paths where !watched.contains(p) {
            // Not through a link (one in the place of a directory is not read either).
            let mask = UInt32(IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE | IN_DELETE | IN_DONT_FOLLOW)
            if inotify_add_watch(inotifyFD, p, mask) >= 0 { watched.insert(p) }
        }
    }
}
