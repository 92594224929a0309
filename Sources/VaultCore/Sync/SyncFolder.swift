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
///
/// The folder is opened once, when the value is made, without following a link, and every
/// later step works relative to that descriptor (`openat` and its kin, none following a
/// link): a folder, `devices/` or a device directory replaced by a symbolic link (an engine
/// carries links too) is refused, not followed, and a folder swapped while a pass runs is not
/// half read from one and half from the other.
final class SyncFolder {
    let root: String
    var devicesPath: String { root + "/devices" }
    /// The folder, opened without following a link; -1 when it could not be (`refusal` says why).
    private let rootFD: Int32
    private let refusal: String?

    static let joinName = "join"
    static let devicesName = "devices"
    static func grantName(_ to: SyncDeviceID) -> String { "grant-" + to.description }

    init(root: String) {
        self.root = root
        do {
            rootFD = try SystemCall.open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            refusal = nil
        } catch {
            rootFD = -1
            refusal = Self.describe(path: root, errno: error.code)
        }
    }

    deinit {
        if rootFD >= 0 { SystemCall.close(rootFD) }
    }

    /// Why `path` did not open as a directory: a link (refused, not followed), something
    /// else in its place, or the system's reason.
    static func describe(path: String, errno e: Int32) -> String {
        if let st = try? SystemCall.lstat(path), st.st_mode & S_IFMT == S_IFLNK {
            return
                "\(path) is a symbolic link: a sync folder and the directories in it must be directories, not links to one (not followed)"
        }
        if e == Errno.notDirectory { return "\(path) is not a directory" }
        return "cannot open \(path): \(String(cString: strerror(e)))"
    }

    func directory(_ d: SyncDeviceID) -> String { devicesPath + "/" + d.description }

    /// The folder's descriptor, or InternalError saying why the folder is refused.
    private func rootDescriptor() throws -> Int32 {
        guard rootFD >= 0 else {
            throw VaultFailure(.internalError, refusal ?? "cannot open the sync folder \(root)")
        }
        return rootFD
    }

    /// `name` in the directory `parent`, opened as a directory without following a link
    /// (the caller closes it). Throws `Errno` otherwise.
    private static func openDirectory(_ parent: Int32, _ name: String) throws(Errno) -> Int32 {
        try SystemCall.openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    }

    /// `devices/`, opened (the caller closes it); nil when there is none yet. Throws
    /// InternalError when it is a link or cannot be opened.
    private func openDevices() throws -> Int32? {
        let root = try rootDescriptor()
        do {
            return try Self.openDirectory(root, Self.devicesName)
        } catch  where error.code == Errno.notFound {
            return nil
        } catch {
            throw VaultFailure(.internalError, Self.describe(path: devicesPath, errno: error.code))
        }
    }

    /// Runs `body` with device `d`'s directory opened (not through a link). Throws
    /// InternalError when it is absent, a link or not a directory.
    private func withDevice<T>(_ d: SyncDeviceID, _ body: (Int32) throws -> T) throws -> T {
        guard let devices = try openDevices() else {
            throw VaultFailure(.internalError, "\(devicesPath) does not exist")
        }
        defer { SystemCall.close(devices) }
        let fd: Int32
        do {
            fd = try Self.openDirectory(devices, d.description)
        } catch {
            throw VaultFailure(.internalError, Self.describe(path: directory(d), errno: error.code))
        }
        defer { SystemCall.close(fd) }
        return try body(fd)
    }

    /// Makes `devices/` and this device's directory (0700; the folder's engine carries files,
    /// not modes, and the files are encrypted: the mode keeps other local users out).
    /// Either must be a directory, not a link to one (an engine carries links too: one put in
    /// place of this device's directory would send its writes elsewhere). Throws
    /// InternalError otherwise.
    func makeDeviceDirectory(_ d: SyncDeviceID) throws {
        let rootFD = try rootDescriptor()
        do {
            try SystemCall.mkdirat(rootFD, Self.devicesName, 0o700)
        } catch  where error.code != Errno.exists {
            throw VaultFailure(
                .internalError,
                "cannot make \(devicesPath): \(String(cString: strerror(error.code)))")
        } catch {}
        guard let devices = try openDevices() else {
            throw VaultFailure(.internalError, "\(devicesPath) vanished as it was made")
        }
        defer { SystemCall.close(devices) }
        do {
            try SystemCall.mkdirat(devices, d.description, 0o700)
        } catch  where error.code != Errno.exists {
            throw VaultFailure(
                .internalError,
                "cannot make \(directory(d)): \(String(cString: strerror(error.code)))")
        } catch {}
        do {
            SystemCall.close(try Self.openDirectory(devices, d.description))
        } catch {
            throw VaultFailure(.internalError, Self.describe(path: directory(d), errno: error.code))
        }
    }

    struct Entry {
        /// Segment sequence → file size in bytes.
        var segments: [UInt64: Int] = [:]
        /// Segment sequence → which file holds it now.
        var versions: [UInt64: FileVersion] = [:]
    }

    /// Which file a name held when listed: a file put in its place (renamed over it, or
    /// removed and written again) is another version, whatever its size.
    struct FileVersion: Hashable {
        var size: Int
        var inode: UInt64
        var changed: Int
    }

    /// What `scan` found in `devices/`.
    struct Listing {
        /// The device directories read, at most `SyncService.maximumDevices`.
        var devices: [SyncDeviceID: Entry] = [:]
        /// Device directories past that bound, not read.
        var ignored = 0
        /// Names of devices whose directory is a link (not followed, not read).
        var links: [SyncDeviceID] = []
    }

    /// Each device directory and its segments (`scan`'s devices).
    func list(preferring: Set<SyncDeviceID> = []) throws -> [SyncDeviceID: Entry] {
        try scan(preferring: preferring).devices
    }

    /// Each device directory and its segments: at most `SyncService.maximumDevices`, the
    /// `preferring` ones first (this device and the members: directories anyone can add never
    /// push them out), then the others by name; the rest are counted as ignored. Throws
    /// InternalError when the folder or `devices/` cannot be read or is a link. At most
    /// `maximumEntriesPerDevice` entries of `devices/` and of each directory are looked at.
    func scan(preferring: Set<SyncDeviceID> = []) throws -> Listing {
        var out = Listing()
        guard let devices = try openDevices() else { return out }
        defer { SystemCall.close(devices) }
        var found: [SyncDeviceID] = []
        Self.forEachName(in: devices) { name in
            guard let device = SyncDeviceID(hex: name),
                let st = try? SystemCall.fstatat(devices, name, AT_SYMLINK_NOFOLLOW)
            else { return }
            switch st.st_mode & S_IFMT {
            case S_IFDIR: found.append(device)
            case S_IFLNK: out.links.append(device)
            default: break
            }
        }
        let chosen = Self.choose(found, preferring: preferring)
        out.ignored = found.count - chosen.count
        for device in chosen { out.devices[device] = listDevice(devices, device) }
        return out
    }

    /// At most `SyncService.maximumDevices` of `found`: the preferred ones first, each part
    /// in the order of their names.
    static func choose(_ found: [SyncDeviceID], preferring: Set<SyncDeviceID>) -> [SyncDeviceID] {
        let first = found.filter { preferring.contains($0) }.sorted()
        let rest = found.filter { !preferring.contains($0) }.sorted()
        return Array((first + rest).prefix(SyncService.maximumDevices))
    }

    /// Calls `body` with each name in the directory `fd` (not `.` and `..`), at most
    /// `maximumEntriesPerDevice` of them. The descriptor stays open.
    private static func forEachName(in fd: Int32, _ body: (String) -> Void) {
        let names =
            (try? SystemCall.entries(
                ofDirectoryAt: fd, limit: SyncService.maximumEntriesPerDevice)) ?? []
        for name in names {
            body(String(decoding: name.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
    }

    /// A device directory's segments: regular files whose name is a segment's, with their
    /// size. A link in the place of the directory is not followed (nothing listed).
    private func listDevice(_ devices: Int32, _ device: SyncDeviceID) -> Entry {
        var entry = Entry()
        guard let fd = try? Self.openDirectory(devices, device.description) else { return entry }
        defer { SystemCall.close(fd) }
        Self.forEachName(in: fd) { name in
            guard let seq = SyncSegment.sequence(ofFileName: name),
                let st = try? SystemCall.fstatat(fd, name, AT_SYMLINK_NOFOLLOW),
                st.st_mode & S_IFMT == S_IFREG, let size = Int(exactly: st.st_size)
            else { return }
            entry.segments[seq] = size
            entry.versions[seq] = FileVersion(
                size: size, inode: UInt64(st.st_ino),
                changed: st.st_ctim.tv_sec * 1_000_000_000 + st.st_ctim.tv_nsec)
        }
        return entry
    }

    /// A file's bytes, at most `limit`: opened relative to `directory` without following a
    /// link, a regular file, its size checked before it is read. Throws `SyncFormatError`
    /// otherwise.
    static func read(_ name: String, in directory: Int32, limit: Int) throws -> [UInt8] {
        let raw: Int32
        do {
            raw = try SystemCall.openat(
                directory, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        } catch {
            throw SyncFormatError("cannot open: \(String(cString: strerror(error.code)))")
        }
        let fd = FileDescriptor(adopting: raw)
        guard let st = try? fd.status(), st.st_mode & S_IFMT == S_IFREG else {
            throw SyncFormatError("not a regular file")
        }
        guard st.st_size <= limit, let size = Int(exactly: st.st_size) else {
            throw SyncFormatError("\(st.st_size) bytes, over the \(limit)-byte limit")
        }
        var out = [UInt8](repeating: 0, count: size)
        var at = 0
        while at < out.count {
            let n =
                (try? out.withUnsafeMutableBytes {
                    try fd.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[at...]))
                }) ?? -1
            guard n > 0 else { throw SyncFormatError("the file shrank while it was read") }
            at += n
        }
        return out
    }

    /// A file of device `device`'s directory, at most `limit` bytes. Throws
    /// `SyncFormatError` (or InternalError: the folder or directory refused).
    func readFile(device: SyncDeviceID, name: String, limit: Int) throws -> [UInt8] {
        try withDevice(device) { try Self.read(name, in: $0, limit: limit) }
    }

    func readSegment(device: SyncDeviceID, sequence: UInt64) throws -> [UInt8] {
        try readFile(
            device: device, name: SyncSegment.fileName(sequence),
            limit: SyncSegment.maximumFileBytes)
    }

    func readSmallFile(device: SyncDeviceID, name: String, limit: Int) -> [UInt8]? {
        try? readFile(device: device, name: name, limit: limit)
    }

    /// Whether `name` is in device `device`'s directory (false too when it cannot be looked at).
    func exists(device: SyncDeviceID, name: String) -> Bool {
        (try? withDevice(device) { fd -> Bool in
            (try? SystemCall.fstatat(fd, name, AT_SYMLINK_NOFOLLOW)) != nil
        }) ?? false
    }

    /// Device directories anyone may have written a file `name` in, looked for by name (no
    /// bound on devices past the entries looked at): a joining device's grant may be in any
    /// of them, however many directories the folder holds.
    func devicesHolding(_ name: String) throws -> [SyncDeviceID] {
        guard let devices = try openDevices() else { return [] }
        defer { SystemCall.close(devices) }
        var out: [SyncDeviceID] = []
        Self.forEachName(in: devices) { dir in
            guard let d = SyncDeviceID(hex: dir),
                let fd = try? Self.openDirectory(devices, dir)
            else { return }
            defer { SystemCall.close(fd) }
            if let st = try? SystemCall.fstatat(fd, name, AT_SYMLINK_NOFOLLOW),
                st.st_mode & S_IFMT == S_IFREG
            {
                out.append(d)
            }
        }
        return out.sorted()
    }

    /// Writes a new file `name` in this device's directory whole or not at all: into a
    /// temporary file, fsynced, linked to its name (which fails rather than replace a file:
    /// segments are immutable), the directory fsynced. Throws InternalError; EEXIST (the name
    /// is taken) as `NameTaken`.
    func writeFile(_ bytes: [UInt8], device: SyncDeviceID, name: String) throws {
        try withDevice(device) { dir in
            try Self.write(bytes, name: name, in: dir, path: directory(device))
        }
    }

    /// A segment's name in this device's directory already holds a file.
    struct NameTaken: Error, CustomStringConvertible {
        var name: String
        var description: String { "\(name) already exists" }
    }

    private static func write(_ bytes: [UInt8], name: String, in dir: Int32, path: String) throws {
        let tmp = ".tmp-" + SyncHex.encode(Sodium.randomBytes(8))
        let fd: Int32
        do {
            fd = try SystemCall.openat(
                dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode: 0o600)
        } catch {
            throw VaultFailure(
                .internalError, "cannot write in \(path): \(String(cString: strerror(error.code)))")
        }
        defer { try? SystemCall.unlinkat(dir, tmp) }
        var failure: Int32 = 0
        do {
            try bytes.withUnsafeBytes { try SystemCall.writeAll(fd, $0) }
            try SystemCall.fsync(fd)
        } catch let e as Errno { failure = e.code }
        SystemCall.close(fd)
        // The join and ack files are this device's to replace (a second `sync join` after a
        // leave; each new acknowledgement); anything else is written once.
        if failure == 0 && !isReplaceable(name) {
            do { try SystemCall.linkat(dir, tmp, dir, name, 0) } catch { failure = error.code }
        }
        if failure == 0 && isReplaceable(name) {
            do { try SystemCall.renameat(dir, tmp, dir, name) } catch { failure = error.code }
            // A directory in the place of the file (anyone can make one): moved out of the way.
            if [Errno.isDirectory, Errno.notEmpty, Errno.exists].contains(failure)
                && clear(name, in: dir)
                && (try? SystemCall.renameat(dir, tmp, dir, name)) != nil
            {
                failure = 0
            }
        }
        if failure == Errno.exists { throw NameTaken(name: name) }
        guard failure == 0 else {
            throw VaultFailure(
                .internalError,
                "cannot write \(name) in \(path): \(String(cString: strerror(failure)))")
        }
        try? SystemCall.fsync(dir)
    }

    /// The files of this device's that it replaces as they change (a second `sync join` after
    /// a leave; each new acknowledgement; a grant written again); anything else is written once.
    static func isReplaceable(_ name: String) -> Bool {
        name == joinName || name == SyncAck.name || name.hasPrefix("grant-")
    }

    func removeFile(device: SyncDeviceID, name: String) {
        _ = try? withDevice(device) { try? SystemCall.unlinkat($0, name) }
    }

    /// Takes whatever holds `name` in this device's directory out of the way: a file is
    /// removed, an empty directory too, and any other directory is renamed to a temporary
    /// name (skipped by every reader). Returns whether the name is free.
    func clear(device: SyncDeviceID, name: String) -> Bool {
        (try? withDevice(device) { Self.clear(name, in: $0) }) ?? false
    }

    private static func clear(_ name: String, in dir: Int32) -> Bool {
        do {
            try SystemCall.unlinkat(dir, name)
            return true
        } catch {
            if error.code == Errno.notFound { return true }
        }
        if (try? SystemCall.unlinkat(dir, name, AT_REMOVEDIR)) != nil { return true }
        let aside = ".tmp-moved-" + SyncHex.encode(Sodium.randomBytes(8))
        return (try? SystemCall.renameat(dir, name, dir, aside)) != nil
    }
}

/// Wakes the sync passes: inotify on the folder's `devices/` and each device directory in it
/// (a file an engine moves into place or closes after writing), an eventfd for the vault's
/// own changes (`wake`, through a pipe), and a 60 s timeout for what inotify cannot see (a network file
/// system, an overflowed queue).
final class SyncWatcher: Sendable {
    /// What to watch: the folder, `devices/` and the device directories read.
    private let paths: @Sendable () -> [String]
    /// The wake-up pipe's read end (drained by the watcher) and write end.
    private let wakeFD: Int32
    private let wakeWriteFD: Int32
    private let inotifyFD: Int32

    init(paths: @escaping @Sendable () -> [String]) {
        self.paths = paths
        let ends = (try? SystemCall.pipe()) ?? (read: -1, write: -1)
        for fd in [ends.read, ends.write] where fd >= 0 {
            if let flags = try? SystemCall.fcntl(fd, F_GETFL) {
                _ = try? SystemCall.fcntl(fd, F_SETFL, flags | O_NONBLOCK)
            }
        }
        (wakeFD, wakeWriteFD) = ends
        inotifyFD = (try? SystemCall.inotifyInit(Int32(IN_CLOEXEC | IN_NONBLOCK))) ?? -1
    }

    func wake() {
        // A full pipe already holds a wake-up: the write may fail then.
        guard wakeWriteFD >= 0 else { return }
        _ = try? [UInt8(1)].withUnsafeBytes { try SystemCall.write(wakeWriteFD, $0) }
    }

    /// Runs `pass` on a thread of its own: once now, then after each wake-up.
    func run(_ pass: @escaping @Sendable () -> Void) {
        let t = Thread { [self] in
            // The paths watched (the watcher's thread's own).
            var watched: Set<String> = []
            while true {
                pass()
                watch(&watched)
                var fds = [
                    pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0),
                    pollfd(fd: inotifyFD, events: Int16(POLLIN), revents: 0),
                ]
                _ = try? fds.withUnsafeMutableBufferPointer {
                    try SystemCall.poll($0, timeout: 60_000)
                }
                drain(wakeFD)
                drain(inotifyFD)
            }
        }
        t.name = "vaultd sync"
        t.start()
    }

    private func drain(_ fd: Int32) {
        guard fd >= 0 else { return }
        var buffer = [UInt8](repeating: 0, count: 4096)
        while (try? buffer.withUnsafeMutableBytes({ try SystemCall.read(fd, into: $0) })) ?? 0 > 0 {
        }
    }

    /// Adds watches on the paths the service names (the folder, `devices/` and the device
    /// directories its last pass read) not in `watched`, and adds them to it.
    private func watch(_ watched: inout Set<String>) {
        guard inotifyFD >= 0 else { return }
        for p in paths() where !watched.contains(p) {
            // Not through a link (one in the place of a directory is not read either).
            let mask = UInt32(IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE | IN_DELETE | IN_DONT_FOLLOW)
            if (try? SystemCall.inotifyAddWatch(inotifyFD, p, mask)) != nil { watched.insert(p) }
        }
    }
}
