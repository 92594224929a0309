import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What a finished child process left behind.
struct ProcessResult: CustomStringConvertible, Sendable {
    /// The exit code, or 128 + the signal number when a signal ended it (as a shell reports it).
    var status: Int32
    var stdout: Data
    var stderr: String
    /// True when the process had to be killed because it ran past its timeout.
    var timedOut = false

    var stdoutText: String { String(decoding: stdout, as: UTF8.self) }

    var description: String {
        "exit \(status)\(timedOut ? " (killed after timeout)" : "")\nstdout: \(stdoutText.prefix(2000))\nstderr: \(stderr.prefix(2000))"
    }
}

struct HarnessError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

/// Spawns children with `posix_spawn`, so that:
/// - extra file descriptors (`--passphrase-fd 3`) can be handed to a child through pipes,
///   with the secret never in argv (Foundation's `Process` cannot map extra fds);
/// - the child gets exactly fds 0, 1, 2 and the mapped ones (`closefrom`), never a pipe end
///   of another test running in parallel, which would keep that test's pipe from closing;
/// - signal dispositions and mask are reset to the defaults in the child.
enum ChildProcess {
    /// Ignore SIGPIPE in the test process: a child that exits early must not kill the test
    /// runner while we write its stdin.
    static let ignoreSIGPIPE: Void = { _ = signal(SIGPIPE, SIG_IGN) }()

    // GNU extensions the Glibc module does not import (no _GNU_SOURCE), looked up at run time.
    private typealias Pipe2 = @convention(c) (UnsafeMutablePointer<Int32>, Int32) -> Int32
    private typealias AddCloseFrom =
        @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    /// dlopen's handle of the process's own symbols: set once, only passed to dlsym.
    nonisolated(unsafe) private static let libc = dlopen(nil, RTLD_NOW)
    private static let pipe2: Pipe2 = unsafeBitCast(dlsym(libc, "pipe2")!, to: Pipe2.self)
    private static let addCloseFrom: AddCloseFrom = unsafeBitCast(
        dlsym(libc, "posix_spawn_file_actions_addclosefrom_np")!, to: AddCloseFrom.self)

    /// How a standard fd of the child is set up.
    enum Output {
        case file(String, append: Bool)
        case devNull
    }

    /// Starts `executable` (a path, or a name looked up in PATH). `inputs` maps child fds
    /// (0 for stdin, 3, 4, ...) to bytes that are written into a pipe read by the child;
    /// `passing` maps child fds to fds of this process the child gets as they are (a socket).
    static func spawn(
        _ executable: String, _ arguments: [String], environment: [String: String],
        inputs: [Int32: Data],
        passing: [Int32: Int32] = [:], stdout: Output, stderr: Output
    ) throws -> pid_t {
        _ = ignoreSIGPIPE
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }

        var allSignals = sigset_t()
        sigfillset(&allSignals)
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigdefault(&attributes, &allSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))

        // Pipes for every input; the parent keeps the write ends (close-on-exec).
        var writers: [(fd: Int32, data: Data)] = []
        var readEnds: [Int32] = []
        defer { for fd in readEnds { close(fd) } }
        var failed = false
        for (target, data) in inputs.sorted(by: { $0.key < $1.key }) {
            var p: [Int32] = [-1, -1]
            guard pipe2(&p, O_CLOEXEC) == 0 else {
                failed = true
                break
            }
            readEnds.append(p[0])
            writers.append((p[1], data))
            posix_spawn_file_actions_adddup2(&actions, p[0], target)
        }
        if failed {
            for w in writers { close(w.fd) }
            throw HarnessError("pipe2: \(String(cString: strerror(errno)))")
        }
        for (target, fd) in passing { posix_spawn_file_actions_adddup2(&actions, fd, target) }
        if inputs[0] == nil {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        for (fd, output) in [(Int32(1), stdout), (Int32(2), stderr)] {
            switch output {
            case .devNull:
                posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", O_WRONLY, 0)
            case .file(let path, let append):
                posix_spawn_file_actions_addopen(
                    &actions, fd, path, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0o600)
            }
        }
        let highest = max(2, inputs.keys.max() ?? 0, passing.keys.max() ?? 0)
        _ = addCloseFrom(&actions, highest + 1)

        let argv: [UnsafeMutablePointer<CChar>?] =
            ([executable] + arguments).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] =
            environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for p in argv { free(p) }
            for p in envp { free(p) }
        }
        var pid: pid_t = 0
        let rc =
            executable.contains("/")
            ? posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
            : posix_spawnp(&pid, executable, &actions, &attributes, argv, envp)
        guard rc == 0 else {
            for w in writers { close(w.fd) }
            throw HarnessError("cannot start \(executable): \(String(cString: strerror(rc)))")
        }
        // Feed each pipe on its own thread (the child may read them in any order), then close it.
        for w in writers {
            let t = Thread {
                w.data.withUnsafeBytes { raw in
                    var offset = 0
                    while offset < raw.count {
                        let n = write(w.fd, raw.baseAddress! + offset, raw.count - offset)
                        if n < 0 {
                            if errno == EINTR { continue }
                            break  // the child closed its end: fine
                        }
                        offset += n
                    }
                }
                close(w.fd)
            }
            t.start()
        }
        return pid
    }

    /// Decodes a `waitpid` status as a shell does: the exit code, or 128 + signal.
    static func decode(_ status: Int32) -> Int32 {
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }

    /// Waits for `pid` up to `timeout` seconds. Returns the decoded status, or nil on timeout.
    static func wait(_ pid: pid_t, timeout: Double) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        var status: Int32 = 0
        while true {
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid { return decode(status) }
            if r < 0 && errno != EINTR { return nil }
            if Date() > deadline { return nil }
            usleep(5_000)
        }
    }

    /// True while `pid` (our child) has not exited. Does not reap it.
    static func isAlive(_ pid: pid_t) -> Bool {
        var info = siginfo_t()
        // WNOWAIT: look without reaping, so a later `wait` still gets the status.
        let r = waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT)
        return r == 0 && info._sifields._sigchld.si_pid == 0
    }

    /// Runs a command to completion, capturing stdout and stderr (through files, so a large
    /// output cannot block the child). Killed after `timeout` seconds.
    static func run(
        _ executable: String, _ arguments: [String], environment: [String: String],
        stdin: Data? = nil,
        extraFDs: [Int32: Data] = [:], timeout: Double = 60
    ) throws -> ProcessResult {
        let dir = try TemporaryDirectory.make(prefix: "vaultd-run")
        defer { TemporaryDirectory.remove(dir) }
        var inputs = extraFDs
        if let stdin { inputs[0] = stdin }
        let pid = try spawn(
            executable, arguments, environment: environment, inputs: inputs,
            stdout: .file(dir + "/stdout", append: false),
            stderr: .file(dir + "/stderr", append: false))
        var timedOut = false
        var status = wait(pid, timeout: timeout)
        if status == nil {
            timedOut = true
            Glibc.kill(pid, SIGKILL)
            status = wait(pid, timeout: 10) ?? -1
        }
        let out = FileManager.default.contents(atPath: dir + "/stdout") ?? Data()
        let err = FileManager.default.contents(atPath: dir + "/stderr") ?? Data()
        return ProcessResult(
            status: status!, stdout: out, stderr: String(decoding: err, as: UTF8.self),
            timedOut: timedOut)
    }
}

enum TemporaryDirectory {
    /// A new private directory under /tmp (short paths: a socket path must fit in 108 bytes).
    static func make(prefix: String) throws -> String {
        var template = Array("/tmp/\(prefix).XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else {
            throw HarnessError("mkdtemp: \(String(cString: strerror(errno)))")
        }
        return String(cString: p)
    }

    static func remove(_ path: String) {
        try? FileManager.default.removeItem(atPath: path)
    }
}
