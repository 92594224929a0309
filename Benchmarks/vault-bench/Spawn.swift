import Foundation

#if canImport(Glibc)
import Glibc
#endif

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

/// Child processes through posix_spawn (cheaper and more predictable than Foundation's
/// Process, which matters when whole processes are what is timed).
enum Spawn {
    enum Output {
        case devNull
        case inherit
        case file(String)
    }

    /// Starts `path` with `arguments` (argv[0] is `path`) and `environment`; stdin is /dev/null.
    static func start(
        _ path: String, _ arguments: [String], environment: [String: String],
        stdout: Output = .devNull, stderr: Output = .devNull
    ) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        for (fd, out) in [(Int32(1), stdout), (Int32(2), stderr)] {
            switch out {
            case .devNull: posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", O_WRONLY, 0)
            case .inherit: break
            case .file(let p):
                posix_spawn_file_actions_addopen(
                    &actions, fd, p, O_WRONLY | O_CREAT | O_APPEND, 0o600)
            }
        }
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        var all = sigset_t()
        sigfillset(&all)
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigdefault(&attr, &all)
        posix_spawnattr_setsigmask(&attr, &none)
        posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for p in argv { free(p) }
            for p in envp { free(p) }
        }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, path, &actions, &attr, argv, envp)
        guard rc == 0 else {
            throw BenchError("cannot start \(path): \(String(cString: strerror(rc)))")
        }
        return pid
    }

    /// Waits for `pid`; returns its exit status (128 + signal when killed), or nil when it
    /// is still running after `timeout` seconds (nil timeout: wait for ever).
    static func wait(_ pid: pid_t, timeout: Double? = nil) -> Int32? {
        let deadline = timeout.map { Date().addingTimeInterval($0) }
        while true {
            var status: Int32 = 0
            let r = waitpid(pid, &status, deadline == nil ? 0 : WNOHANG)
            if r == pid {
                if status & 0x7f == 0 { return (status >> 8) & 0xff }
                return 128 + (status & 0x7f)
            }
            if r < 0 && errno != EINTR { return -1 }
            if let d = deadline {
                if Date() >= d { return nil }
                usleep(2000)
            }
        }
    }

    /// Runs to completion; returns the exit status.
    @discardableResult
    static func run(
        _ path: String, _ arguments: [String], environment: [String: String],
        stdout: Output = .devNull, stderr: Output = .devNull
    ) throws -> Int32 {
        let pid = try start(
            path, arguments, environment: environment, stdout: stdout, stderr: stderr)
        return wait(pid) ?? -1
    }

    /// The first executable named `name` in PATH, or nil.
    static func which(_ name: String) -> String? {
        if name.contains("/") {
            return FileManager.default.isExecutableFile(atPath: name) ? name : nil
        }
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for dir in path.split(separator: ":") {
            let p = "\(dir)/\(name)"
            if FileManager.default.isExecutableFile(atPath: p) { return p }
        }
        return nil
    }

    /// This executable's path (for re-executing itself).
    static var selfPath: String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
            ?? CommandLine.arguments[0]
    }

    /// An executable next to this one (same build directory), or nil.
    static func sibling(_ name: String) -> String? {
        let p = URL(fileURLWithPath: selfPath).deletingLastPathComponent().appendingPathComponent(
            name
        ).path
        return FileManager.default.isExecutableFile(atPath: p) ? p : nil
    }
}

/// Long-lived children (vaultd, the echo server, the keyring session): sent SIGTERM when
/// the bench is interrupted, so no daemon outlives it. The pids live in a fixed C array that
/// the signal handler reads (kill and _exit are async-signal-safe).
enum Children {
    static let capacity = 64
    nonisolated(unsafe) static let slots: UnsafeMutablePointer<pid_t> = {
        let p = UnsafeMutablePointer<pid_t>.allocate(capacity: capacity)
        p.initialize(repeating: 0, count: capacity)
        return p
    }()
    private static let lock = NSLock()

    static func add(_ pid: pid_t) {
        lock.withLock {
            for i in 0..<capacity where slots[i] == 0 {
                slots[i] = pid
                return
            }
        }
    }

    static func remove(_ pid: pid_t) {
        lock.withLock {
            for i in 0..<capacity where slots[i] == pid { slots[i] = 0 }
        }
    }

    /// On SIGINT / SIGTERM / SIGHUP: SIGTERM to every registered child, then exit.
    static func stopOnSignals() {
        _ = slots
        for sig in [SIGINT, SIGTERM, SIGHUP] {
            signal(sig) { sig in
                for i in 0..<Children.capacity where Children.slots[i] > 0 {
                    kill(Children.slots[i], SIGTERM)
                }
                _exit(128 + sig)
            }
        }
    }
}

/// Temporary directories (0700), removed by `remove`.
enum Temp {
    static func directory(_ prefix: String) throws -> String {
        var template = Array((NSTemporaryDirectory() + "/\(prefix).XXXXXX").utf8CString)
        guard let p = mkdtemp(&template) else {
            throw BenchError("mkdtemp: \(String(cString: strerror(errno)))")
        }
        return URL(fileURLWithPath: String(cString: p)).standardizedFileURL.path
    }

    static func remove(_ path: String) { try? FileManager.default.removeItem(atPath: path) }
}

/// Copies a directory's regular files (not recursive) into `to`, created 0700.
func copyDirectory(_ from: String, to: String) throws {
    let fm = FileManager.default
    try fm.createDirectory(
        atPath: to, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    for name in try fm.contentsOfDirectory(atPath: from) {
        let src = from + "/" + name
        var isDir: ObjCBool = false
        guard fm.fileExists(atPath: src, isDirectory: &isDir), !isDir.boolValue else { continue }
        let dst = to + "/" + name
        try? fm.removeItem(atPath: dst)
        try fm.copyItem(atPath: src, toPath: dst)
    }
}

/// Replaces `dst` with a copy of `src` atomically enough for a cache (copy, then rename).
func publishDirectory(_ src: String, as dst: String) throws {
    let fm = FileManager.default
    try fm.createDirectory(
        atPath: (dst as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
    let tmp = dst + ".tmp-\(getpid())"
    try? fm.removeItem(atPath: tmp)
    try copyDirectory(src, to: tmp)
    try? fm.removeItem(atPath: dst)
    try fm.moveItem(atPath: tmp, toPath: dst)
}

/// Resident set size of a process (VmRSS), in bytes.
func residentBytes(_ pid: pid_t) -> Int? {
    guard let s = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else {
        return nil
    }
    for line in s.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        let kb = line.split(separator: " ").compactMap { Int($0) }.first
        return kb.map { $0 * 1024 }
    }
    return nil
}
