import Foundation
import Testing

/// The syscall layer (Sources/VaultProtocol/System, docs/architecture.md) is the only code
/// that calls Glibc's file, socket and process calls: everything else goes through
/// `SystemCall` or `FileDescriptor`, so every call is retried on EINTR and a bad descriptor
/// traps. This test reads the sources for a call of one of those functions by its C name.
@Suite struct SyscallScanTests {
    /// The package's Sources, relative to this file.
    static let sources = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Sources")

    /// The layer's folder, where the calls are made.
    static let layer = "VaultProtocol/System/"

    /// The C functions only the layer calls.
    static let calls = [
        "open", "openat", "close", "read", "pread", "write", "pwrite", "fsync", "fdatasync",
        "ftruncate", "truncate", "lseek", "fstat", "stat", "lstat", "fstatat", "statvfs",
        "fstatvfs", "fchmod",
        "chmod",
        "rename", "renameat", "link", "linkat", "unlink", "unlinkat", "mkdir", "mkdirat", "rmdir",
        "readlink", "readlinkat", "realpath", "opendir", "fdopendir", "readdir", "closedir",
        "access", "faccessat", "fcntl", "dup", "dup2", "dup3", "pipe", "pipe2", "isatty",
        "tcgetattr", "tcsetattr", "poll", "ppoll", "socket", "socketpair", "connect", "bind",
        "listen", "accept", "accept4", "send", "recv", "sendmsg", "recvmsg", "shutdown",
        "setsockopt", "getsockopt", "waitpid", "kill", "mkstemp", "mkostemp", "flock", "ioctl",
        "posix_fallocate", "inotify_init1", "inotify_add_watch",
    ]

    /// Calls that look like a C one but are Swift methods declared in another file of their
    /// type (SecretService's `send(reply, answering: message)` and `send(change)`), by file
    /// and name.
    static let methods: Set<String> = [
        "vaultd/SecretService/OwnDispatch.swift: send",
        "vaultd/SecretService/SecretService+Writes.swift: send",
    ]

    /// `name(` called unqualified (or as `Glibc.name(`) with a first argument unlabelled, as
    /// a C function's are; not in a `//` comment. An unqualified call is a Swift method's
    /// (which shadows the C function of its name) when it is tried (`try`: C functions do
    /// not throw), an enum case's, or a function or case of that name is declared in the file.
    static func rawCalls(in text: String) -> [String] {
        let names = calls.joined(separator: "|")
        // NSRegularExpression (ICU) for the lookbehind.
        let call = try! NSRegularExpression(
            pattern: #"(?:(?<![\w.])|Glibc\.)("# + names + #")\((?!\s*\w+:)(?!\s*\))"#)
        let declaration = try! NSRegularExpression(pattern: #"(?:func|case)\s+(\w+)\s*\("#)
        let method = try! NSRegularExpression(pattern: #"(?:\btry[?!]?|\bcase|\bfunc)\s+$"#)
        let ns = text as NSString
        let declared = Set(
            declaration.matches(in: text, range: NSRange(location: 0, length: ns.length)).map {
                ns.substring(with: $0.range(at: 1))
            })
        var found: [String] = []
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let code =
                String(
                    line.split(separator: "//", maxSplits: 1, omittingEmptySubsequences: false)
                        .first ?? "") as NSString
            for match in call.matches(
                in: code as String, range: NSRange(location: 0, length: code.length))
            {
                let name = code.substring(with: match.range(at: 1))
                if !code.substring(with: match.range).hasPrefix("Glibc.") {
                    let before = code.substring(to: match.range.location)
                    let whole = NSRange(location: 0, length: (before as NSString).length)
                    if method.firstMatch(in: before, range: whole) != nil { continue }
                    if declared.contains(name) { continue }
                }
                found.append(name)
            }
        }
        return found
    }

    @Test func noRawSystemCallOutsideTheLayer() throws {
        let files = try FileManager.default.subpathsOfDirectory(atPath: Self.sources.path)
            .filter { $0.hasSuffix(".swift") && !$0.hasPrefix(Self.layer) }
        #expect(files.count > 150, "the sources were not found at \(Self.sources.path)")
        var raw: [String] = []
        for file in files.sorted() {
            let text = try String(
                contentsOf: Self.sources.appendingPathComponent(file), encoding: .utf8)
            let found = Self.rawCalls(in: text).filter { !Self.methods.contains("\(file): \($0)") }
            if !found.isEmpty {
                raw.append("\(file): \(Set(found).sorted().joined(separator: ", "))")
            }
        }
        #expect(raw.isEmpty, "raw system calls outside \(Self.layer): \(raw)")
    }

    /// The scan sees the forms a raw call takes, and not a Swift method's labelled call.
    @Test func theScanFindsRawCalls() {
        let found = Self.rawCalls(
            in: """
                let fd = open(path, O_RDONLY)
                defer { Glibc.close(fd) }
                guard fstat(fd, &st) == 0, poll(&p, 1, 0) > 0 else { return }
                try socket.send(serialized: bytes)
                try send(serialized: bytes)
                try write(prefs, words)
                func write(_ data: Data) {}
                // read(fd, &b, 1) in a comment
                let n = SystemCall.read(fd, into: b)
                """)
        #expect(found == ["open", "close", "fstat", "poll"])
    }
}
