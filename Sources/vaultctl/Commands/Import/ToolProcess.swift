import Foundation
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Runs a source's own tool (keepassxc-cli, gpg) as a child: its arguments never hold a
/// secret (a password goes to its stdin), its stdout comes back as bytes the caller wipes,
/// bounded by `limit`, and its stderr is kept (its last 4 KiB) to say why it failed.
struct ToolProcess {
    var status: Int32
    /// Everything the tool wrote to stdout; wiped by the caller once used.
    var output: [UInt8]
    var errorText: String

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Runs `executable` (looked up in PATH) with `arguments`, writing `input` to its stdin
    /// then closing it. Throws when it cannot start, or writes more than `limit` bytes.
    static func run(
        _ executable: String, _ arguments: [String], input: [UInt8] = [],
        environment: [String: String]? = nil, limit: Int
    ) throws -> ToolProcess {
        // Close-on-exec, so no other child holds a pipe end open (dup2 in the child clears it
        // on the copies at 0, 1 and 2).
        guard let inPipe = try? SystemCall.pipe(), let outPipe = try? SystemCall.pipe(),
            let errPipe = try? SystemCall.pipe()
        else {
            throw Failure(description: "cannot make a pipe for \(executable)")
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, inPipe.read, 0)
        posix_spawn_file_actions_adddup2(&actions, outPipe.write, 1)
        posix_spawn_file_actions_adddup2(&actions, errPipe.write, 2)
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for a in argv { free(a) } }
        let env =
            (environment ?? ProcessInfo.processInfo.environment).map { strdup("\($0)=\($1)") }
            + [nil]
        defer { for e in env { free(e) } }
        // The child gets SIGPIPE's default action back (vaultctl ignores it while writing).
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGPIPE)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF))
        var pid: pid_t = 0
        let rc = posix_spawnp(&pid, executable, &actions, &attributes, argv, env)
        for fd in [inPipe.read, outPipe.write, errPipe.write] { SystemCall.close(fd) }
        guard rc == 0 else {
            for fd in [inPipe.write, outPipe.read, errPipe.read] { SystemCall.close(fd) }
            throw Failure(
                description: "cannot run \(executable): \(String(cString: strerror(rc)))")
        }
        // The input first (a password: far less than a pipe's buffer), then both outputs
        // together, so neither fills while the other is read.
        var written = 0
        signal(SIGPIPE, SIG_IGN)
        while written < input.count {
            let n = try? input.withUnsafeBytes {
                try SystemCall.write(inPipe.write, UnsafeRawBufferPointer(rebasing: $0[written...]))
            }
            guard let n, n > 0 else { break }
            written += n
        }
        SystemCall.close(inPipe.write)
        var output: [UInt8] = []
        var errors: [UInt8] = []
        var tooLarge = false
        try drain(out: outPipe.read, err: errPipe.read, limit: limit, &output, &errors, &tooLarge)
        SystemCall.close(outPipe.read)
        SystemCall.close(errPipe.read)
        let status = (try? SystemCall.waitpid(pid))?.status ?? 0
        if tooLarge {
            output.wipe()
            throw Failure(description: "\(executable) wrote more than \(limit >> 20) MiB")
        }
        let code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        return ToolProcess(
            status: code, output: output,
            errorText: String(decoding: errors.suffix(4096), as: UTF8.self))
    }

    /// Reads both pipes to their ends; stdout up to `limit` bytes (then `tooLarge`, and the
    /// rest is read and dropped so the child can finish), stderr's last 64 KiB.
    private static func drain(
        out: Int32, err: Int32, limit: Int, _ output: inout [UInt8], _ errors: inout [UInt8],
        _ tooLarge: inout Bool
    ) throws {
        var open = [out, err]
        var buffer = [UInt8](repeating: 0, count: 65536)
        defer { buffer.wipe() }
        while !open.isEmpty {
            var fds = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            guard
                (try? fds.withUnsafeMutableBufferPointer { try SystemCall.poll($0, timeout: -1) })
                    != nil
            else {
                throw Failure(description: "cannot read a tool's output")
            }
            for p in fds where p.revents != 0 {
                let n =
                    (try? buffer.withUnsafeMutableBytes { try SystemCall.read(p.fd, into: $0) })
                    ?? -1
                if n <= 0 {
                    open.removeAll { $0 == p.fd }
                    continue
                }
                if p.fd == out {
                    if output.count + n > limit {
                        tooLarge = true
                        output.wipe()
                        output = []
                    } else if !tooLarge {
                        // Grown by hand so no old, unwiped copy of the secrets stays behind.
                        if output.capacity < output.count + n {
                            var bigger: [UInt8] = []
                            bigger.reserveCapacity(max(2 * output.capacity, output.count + n))
                            bigger.append(contentsOf: output)
                            output.wipe()
                            output = bigger
                        }
                        output.append(contentsOf: buffer[0..<n])
                    }
                } else {
                    errors.append(contentsOf: buffer[0..<n])
                    if errors.count > 65536 { errors.removeFirst(errors.count - 65536) }
                }
            }
        }
    }

    /// Whether `executable` is found in PATH (as `posix_spawnp` would find it).
    static func installed(_ executable: String) -> Bool {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        return path.split(separator: ":").contains {
            SystemCall.access("\($0)/\(executable)", X_OK)
        }
    }
}
