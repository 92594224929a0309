import CVaultSys

#if canImport(Glibc)
import Glibc
#endif

/// The system calls the tree makes, on raw descriptors and paths: each through
/// `retryingOnInterrupt` (EINTR retried, EBADF trapped, failure thrown as `Errno` naming the
/// call). Code outside Sources/VaultProtocol/System calls these, or `FileDescriptor`, never
/// Glibc's (SyscallLayerTests scans for that). Descriptors a caller keeps as raw numbers
/// (in an array, a C library's struct) use these; one it owns for a scope is a
/// `FileDescriptor`.
public enum SystemCall {
    // MARK: Files

    /// open(2); the new descriptor, which the caller owns (`FileDescriptor(adopting:)`).
    public static func open(_ path: String, _ flags: Int32, mode: mode_t = 0) throws(Errno) -> Int32
    {
        try retryingOnInterrupt("open") { Glibc.open(path, flags, mode) }
    }

    /// openat(2), relative to the directory descriptor `dir`.
    public static func openat(
        _ dir: Int32, _ path: UnsafePointer<CChar>, _ flags: Int32, mode: mode_t = 0
    )
        throws(Errno) -> Int32
    {
        try retryingOnInterrupt("openat") { Glibc.openat(dir, path, flags, mode) }
    }

    /// close(2), exactly once per descriptor (`FileDescriptor` makes it so). Not retried on
    /// EINTR: Linux releases the descriptor before it can fail, and a second close could
    /// close another thread's new file. Its other failures (EIO of a network file system)
    /// come after everything that had to be durable was fsynced, and are ignored. EBADF traps.
    public static func close(_ fd: Int32) {
        if Glibc.close(fd) == -1 && errno == EBADF { badDescriptor("close") }
    }

    /// read(2) of up to `buffer.count` bytes: the count read, 0 at the end.
    public static func read(
        _ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, inherited: Bool = false
    ) throws(Errno) -> Int {
        try retryingOnInterrupt("read", inherited: inherited) {
            Glibc.read(fd, buffer.baseAddress, buffer.count)
        }
    }

    /// pread(2) at `offset`.
    public static func pread(
        _ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: off_t
    )
        throws(Errno) -> Int
    {
        try retryingOnInterrupt("pread") {
            Glibc.pread(fd, buffer.baseAddress, buffer.count, offset)
        }
    }

    /// write(2): the count written, which may be short (`writeAll` writes everything).
    public static func write(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, inherited: Bool = false)
        throws(Errno) -> Int
    {
        try retryingOnInterrupt("write", inherited: inherited) {
            Glibc.write(fd, bytes.baseAddress, bytes.count)
        }
    }

    /// write(2) until all of `bytes` is written (again after a short write).
    public static func writeAll(
        _ fd: Int32, _ bytes: UnsafeRawBufferPointer, inherited: Bool = false
    ) throws(Errno) {
        var done = 0
        while done < bytes.count {
            done += try write(
                fd, UnsafeRawBufferPointer(rebasing: bytes[done...]), inherited: inherited)
        }
    }

    /// pwrite(2) at `offset`: the count written.
    public static func pwrite(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: off_t)
        throws(Errno) -> Int
    {
        try retryingOnInterrupt("pwrite") {
            Glibc.pwrite(fd, bytes.baseAddress, bytes.count, offset)
        }
    }

    /// mkostemp(3) with O_CLOEXEC: a new file 0600 at `template` (ending in XXXXXX, made
    /// unique): its descriptor, the caller's to close, and its path.
    public static func makeTemporaryFile(_ template: String) throws(Errno) -> (
        fd: Int32, path: String
    ) {
        var bytes = Array(template.utf8CString)
        let fd = try retryingOnInterrupt("mkostemp") {
            bytes.withUnsafeMutableBufferPointer { vault_mkstemp_cloexec($0.baseAddress!) }
        }
        return (
            fd,
            String(decoding: bytes.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        )
    }

    /// fsync(2).
    public static func fsync(_ fd: Int32) throws(Errno) {
        try retryingOnInterrupt("fsync") { Glibc.fsync(fd) }
    }

    /// fdatasync(2).
    public static func fdatasync(_ fd: Int32) throws(Errno) {
        try retryingOnInterrupt("fdatasync") { Glibc.fdatasync(fd) }
    }

    /// ftruncate(2).
    public static func ftruncate(_ fd: Int32, _ length: off_t) throws(Errno) {
        try retryingOnInterrupt("ftruncate") { Glibc.ftruncate(fd, length) }
    }

    /// truncate(2) of the file at `path` to `length` bytes.
    public static func truncate(_ path: String, _ length: off_t) throws(Errno) {
        try retryingOnInterrupt("truncate") { Glibc.truncate(path, length) }
    }

    /// posix_fallocate(3): the blocks of `length` bytes from `offset` allocated (which
    /// returns its error rather than setting errno).
    public static func fallocate(_ fd: Int32, _ offset: off_t, _ length: off_t) throws(Errno) {
        try retryingOnInterrupt("posix_fallocate") {
            let code = Glibc.posix_fallocate(fd, offset, length)
            if code != 0 { errno = code }
            return code == 0 ? 0 : -1
        }
    }

    /// lseek(2): the new offset.
    @discardableResult
    public static func lseek(_ fd: Int32, _ offset: off_t, _ whence: Int32) throws(Errno) -> off_t {
        try retryingOnInterrupt("lseek") { Glibc.lseek(fd, offset, whence) }
    }

    /// fstat(2).
    public static func fstat(_ fd: Int32, inherited: Bool = false) throws(Errno) -> stat {
        var st = Glibc.stat()
        try retryingOnInterrupt("fstat", inherited: inherited) { Glibc.fstat(fd, &st) }
        return st
    }

    /// stat(2) (following a final symbolic link).
    public static func stat(_ path: String) throws(Errno) -> stat {
        var st = Glibc.stat()
        // fstatat(AT_FDCWD, …) is stat(2): Swift takes `Glibc.stat(` for the struct's init.
        try retryingOnInterrupt("stat") { Glibc.fstatat(AT_FDCWD, path, &st, 0) }
        return st
    }

    /// statvfs(3): the filesystem that holds `path` (a file or directory the process may
    /// read), through fstatvfs on it opened (Swift takes `statvfs(` for the struct's init).
    public static func statvfs(_ path: String) throws(Errno) -> statvfs {
        let fd = try open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        defer { close(fd) }
        var s = Glibc.statvfs()
        try retryingOnInterrupt("fstatvfs") { Glibc.fstatvfs(fd, &s) }
        return s
    }

    /// lstat(2) (a final symbolic link itself).
    public static func lstat(_ path: String) throws(Errno) -> stat {
        var st = Glibc.stat()
        try retryingOnInterrupt("lstat") { Glibc.fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) }
        return st
    }

    /// fstatat(2) relative to `dir` (AT_SYMLINK_NOFOLLOW and the like in `flags`).
    public static func fstatat(_ dir: Int32, _ path: UnsafePointer<CChar>, _ flags: Int32)
        throws(Errno) -> stat
    {
        var st = Glibc.stat()
        try retryingOnInterrupt("fstatat") { Glibc.fstatat(dir, path, &st, flags) }
        return st
    }

    /// fchmod(2).
    public static func fchmod(_ fd: Int32, _ mode: mode_t) throws(Errno) {
        try retryingOnInterrupt("fchmod") { Glibc.fchmod(fd, mode) }
    }

    /// chmod(2).
    public static func chmod(_ path: String, _ mode: mode_t) throws(Errno) {
        try retryingOnInterrupt("chmod") { Glibc.chmod(path, mode) }
    }

    /// rename(2).
    public static func rename(_ from: String, _ to: String) throws(Errno) {
        try retryingOnInterrupt("rename") { Glibc.rename(from, to) }
    }

    /// renameat(2).
    public static func renameat(
        _ fromDir: Int32, _ from: UnsafePointer<CChar>, _ toDir: Int32, _ to: UnsafePointer<CChar>
    )
        throws(Errno)
    {
        try retryingOnInterrupt("renameat") { Glibc.renameat(fromDir, from, toDir, to) }
    }

    /// linkat(2).
    public static func linkat(
        _ fromDir: Int32, _ from: UnsafePointer<CChar>, _ toDir: Int32, _ to: UnsafePointer<CChar>,
        _ flags: Int32
    ) throws(Errno) {
        try retryingOnInterrupt("linkat") { Glibc.linkat(fromDir, from, toDir, to, flags) }
    }

    /// unlink(2).
    public static func unlink(_ path: String) throws(Errno) {
        try retryingOnInterrupt("unlink") { Glibc.unlink(path) }
    }

    /// unlinkat(2) (AT_REMOVEDIR in `flags` for a directory).
    public static func unlinkat(_ dir: Int32, _ path: UnsafePointer<CChar>, _ flags: Int32 = 0)
        throws(Errno)
    {
        try retryingOnInterrupt("unlinkat") { Glibc.unlinkat(dir, path, flags) }
    }

    /// mkdir(2).
    public static func mkdir(_ path: String, _ mode: mode_t) throws(Errno) {
        try retryingOnInterrupt("mkdir") { Glibc.mkdir(path, mode) }
    }

    /// mkdirat(2).
    public static func mkdirat(_ dir: Int32, _ path: UnsafePointer<CChar>, _ mode: mode_t)
        throws(Errno)
    {
        try retryingOnInterrupt("mkdirat") { Glibc.mkdirat(dir, path, mode) }
    }

    /// rmdir(2).
    public static func rmdir(_ path: String) throws(Errno) {
        try retryingOnInterrupt("rmdir") { Glibc.rmdir(path) }
    }

    /// readlink(2): the link's target, of at most `capacity` bytes (a longer one comes cut).
    public static func readlink(_ path: String, capacity: Int = Int(PATH_MAX)) throws(Errno)
        -> String
    {
        var buffer = [UInt8](repeating: 0, count: capacity)
        let n = try retryingOnInterrupt("readlink") { Glibc.readlink(path, &buffer, capacity) }
        return String(decoding: buffer[..<n], as: UTF8.self)
    }

    /// realpath(3): `path` absolute, with every symbolic link, `.` and `..` resolved.
    public static func realpath(_ path: String) throws(Errno) -> String {
        guard let resolved = Glibc.realpath(path, nil) else {
            throw Errno(code: errno, call: "realpath")
        }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// The names in the directory at `path` (opendir(3), readdir(3); not `.` and `..`), to
    /// `body` until it returns false.
    public static func forEachEntry(ofDirectory path: String, _ body: (String) -> Bool)
        throws(Errno)
    {
        guard let dir = Glibc.opendir(path) else { throw Errno(code: errno, call: "opendir") }
        defer { Glibc.closedir(dir) }
        while true {
            errno = 0
            guard let entry = Glibc.readdir(dir) else {
                if errno != 0 { throw Errno(code: errno, call: "readdir") }
                return
            }
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name == "." || name == ".." { continue }
            if !body(name) { return }
        }
    }

    /// The names in the directory `fd` (not `.` and `..`), as raw NUL-terminated bytes
    /// (a name need not be UTF-8), read from the start; `fd` stays open. readdir(3) on a
    /// duplicate (fdopendir takes the descriptor it is given), which shares `fd`'s position.
    /// At most `limit` entries are read (`.` and `..` count): a directory others write in
    /// may hold any number.
    public static func entries(ofDirectoryAt fd: Int32, limit: Int = .max) throws(Errno)
        -> [[CChar]]
    {
        let copy = try fcntl(fd, F_DUPFD_CLOEXEC, 0)
        guard let dir = Glibc.fdopendir(copy) else {
            let code = errno
            close(copy)
            throw Errno(code: code, call: "fdopendir")
        }
        defer { Glibc.closedir(dir) }
        Glibc.rewinddir(dir)
        var names: [[CChar]] = []
        for _ in 0..<limit {
            errno = 0
            guard let entry = Glibc.readdir(dir) else {
                if errno != 0 { throw Errno(code: errno, call: "readdir") }
                return names
            }
            var name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                raw.prefix(while: { $0 != 0 }).map { CChar(bitPattern: $0) }
            }
            if name == [46] || name == [46, 46] { continue }
            name.append(0)
            names.append(name)
        }
        return names
    }

    /// access(2): whether the calling user may `mode` (R_OK, X_OK, …) the file at `path`.
    public static func access(_ path: String, _ mode: Int32) -> Bool {
        (try? checkAccess(path, mode)) != nil
    }

    /// access(2), throwing why the calling user may not `mode` the file at `path`.
    public static func checkAccess(_ path: String, _ mode: Int32) throws(Errno) {
        try retryingOnInterrupt("access") { Glibc.access(path, mode) }
    }

    // MARK: Descriptors

    /// fcntl(2) with an integer argument (F_GETFD, F_SETFD, F_GETFL, F_SETFL, …): its result.
    @discardableResult
    public static func fcntl(_ fd: Int32, _ command: Int32, _ argument: Int32 = 0) throws(Errno)
        -> Int32
    {
        try retryingOnInterrupt("fcntl") { Glibc.fcntl(fd, command, argument) }
    }

    /// Whether `fd` is an open descriptor (fcntl F_GETFD), for the standard ones a program
    /// may have been started without.
    public static func isOpen(_ fd: Int32) -> Bool {
        (try? retryingOnInterrupt("fcntl", inherited: true) { Glibc.fcntl(fd, F_GETFD) }) != nil
    }

    /// dup2(2): `fd` also as `target` (which is closed first when open).
    public static func dup2(_ fd: Int32, _ target: Int32) throws(Errno) {
        try retryingOnInterrupt("dup2") { Glibc.dup2(fd, target) }
    }

    /// pipe2(2) with O_CLOEXEC: the read end and the write end, the caller's to close.
    public static func pipe() throws(Errno) -> (read: Int32, write: Int32) {
        var fds: [Int32] = [-1, -1]
        try retryingOnInterrupt("pipe2") { vault_pipe_cloexec(&fds) }
        return (fds[0], fds[1])
    }

    /// isatty(3): whether `fd` is a terminal.
    public static func isTerminal(_ fd: Int32) -> Bool { Glibc.isatty(fd) == 1 }

    /// tcgetattr(3): the terminal's attributes.
    public static func terminalAttributes(_ fd: Int32) throws(Errno) -> termios {
        var t = termios()
        try retryingOnInterrupt("tcgetattr") { Glibc.tcgetattr(fd, &t) }
        return t
    }

    /// tcsetattr(3) (`when`: TCSANOW, TCSAFLUSH, …).
    public static func setTerminalAttributes(_ fd: Int32, _ when: Int32, _ attributes: termios)
        throws(Errno)
    {
        var t = attributes
        try retryingOnInterrupt("tcsetattr") { Glibc.tcsetattr(fd, when, &t) }
    }

    /// poll(2) of `fds` for up to `timeout` milliseconds (-1: for ever): how many have events.
    /// A signal starts the wait over with the whole timeout.
    @discardableResult
    public static func poll(_ fds: UnsafeMutableBufferPointer<pollfd>, timeout: Int32) throws(Errno)
        -> Int32
    {
        try retryingOnInterrupt("poll") { Glibc.poll(fds.baseAddress, nfds_t(fds.count), timeout) }
    }

    /// `poll` of one descriptor: its `revents` (0 when the timeout passed).
    public static func poll(_ fd: Int32, events: Int16, timeout: Int32) throws(Errno) -> Int16 {
        var p = pollfd(fd: fd, events: events, revents: 0)
        try retryingOnInterrupt("poll") { Glibc.poll(&p, 1, timeout) }
        return p.revents
    }

    /// inotify_init1(2): the new inotify descriptor, the caller's to close.
    public static func inotifyInit(_ flags: Int32) throws(Errno) -> Int32 {
        try retryingOnInterrupt("inotify_init1") { Glibc.inotify_init1(flags) }
    }

    /// inotify_add_watch(2): the watch descriptor.
    @discardableResult
    public static func inotifyAddWatch(_ fd: Int32, _ path: String, _ mask: UInt32)
        throws(Errno) -> Int32
    {
        try retryingOnInterrupt("inotify_add_watch") { Glibc.inotify_add_watch(fd, path, mask) }
    }

    // MARK: Sockets

    /// socket(2); the new descriptor, the caller's to close.
    public static func socket(_ domain: Int32, _ type: Int32, _ proto: Int32 = 0) throws(Errno)
        -> Int32
    {
        try retryingOnInterrupt("socket") { Glibc.socket(domain, type, proto) }
    }

    /// socketpair(2): two connected sockets, the caller's to close.
    public static func socketpair(_ domain: Int32, _ type: Int32) throws(Errno) -> (Int32, Int32) {
        var fds: [Int32] = [-1, -1]
        try retryingOnInterrupt("socketpair") { Glibc.socketpair(domain, type, 0, &fds) }
        return (fds[0], fds[1])
    }

    /// connect(2) to `address`.
    public static func connect(_ fd: Int32, _ address: UnsafePointer<sockaddr>, _ length: socklen_t)
        throws(Errno)
    {
        try retryingOnInterrupt("connect") { Glibc.connect(fd, address, length) }
    }

    /// bind(2) to `address`.
    public static func bind(_ fd: Int32, _ address: UnsafePointer<sockaddr>, _ length: socklen_t)
        throws(Errno)
    {
        try retryingOnInterrupt("bind") { Glibc.bind(fd, address, length) }
    }

    /// listen(2).
    public static func listen(_ fd: Int32, _ backlog: Int32) throws(Errno) {
        try retryingOnInterrupt("listen") { Glibc.listen(fd, backlog) }
    }

    /// accept4(2), close-on-exec (and `flags`, e.g. SOCK_NONBLOCK): the connection, the
    /// caller's to close.
    public static func accept(_ fd: Int32, flags: Int32 = 0) throws(Errno) -> Int32 {
        try retryingOnInterrupt("accept") {
            vault_accept_cloexec(fd, flags)
        }
    }

    /// send(2): the count sent.
    public static func send(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, flags: Int32)
        throws(Errno)
        -> Int
    {
        try retryingOnInterrupt("send") { Glibc.send(fd, bytes.baseAddress, bytes.count, flags) }
    }

    /// recv(2): the count received, 0 when the peer closed.
    public static func recv(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, flags: Int32)
        throws(Errno) -> Int
    {
        try retryingOnInterrupt("recv") { Glibc.recv(fd, buffer.baseAddress, buffer.count, flags) }
    }

    /// shutdown(2) of both directions: wakes a thread waiting on the socket. Its failure
    /// (ENOTCONN: the peer is gone already) leaves nothing to do.
    public static func shutdown(_ fd: Int32) {
        _ = try? retryingOnInterrupt("shutdown") { Glibc.shutdown(fd, Int32(SHUT_RDWR)) }
    }

    /// setsockopt(2) of `value`.
    public static func setsockopt<T: BitwiseCopyable>(
        _ fd: Int32, _ level: Int32, _ option: Int32, _ value: T
    )
        throws(Errno)
    {
        var v = value
        try retryingOnInterrupt("setsockopt") {
            Glibc.setsockopt(fd, level, option, &v, socklen_t(MemoryLayout<T>.size))
        }
    }

    /// getsockopt(2) into `value`: the length the kernel gave.
    public static func getsockopt<T: BitwiseCopyable>(
        _ fd: Int32, _ level: Int32, _ option: Int32, _ value: inout T
    )
        throws(Errno) -> Int
    {
        var len = socklen_t(MemoryLayout<T>.size)
        try retryingOnInterrupt("getsockopt") { Glibc.getsockopt(fd, level, option, &value, &len) }
        return Int(len)
    }

    // MARK: Processes

    /// waitpid(2) for `pid`: its status (WEXITSTATUS and the like read it).
    public static func waitpid(_ pid: pid_t, options: Int32 = 0) throws(Errno) -> (
        pid: pid_t, status: Int32
    ) {
        var status: Int32 = 0
        let r = try retryingOnInterrupt("waitpid") { Glibc.waitpid(pid, &status, options) }
        return (r, status)
    }

    /// kill(2).
    public static func kill(_ pid: pid_t, _ signal: Int32) throws(Errno) {
        try retryingOnInterrupt("kill") { Glibc.kill(pid, signal) }
    }
}
