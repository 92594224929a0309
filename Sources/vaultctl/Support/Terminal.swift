import Foundation
import Synchronization
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// How every command reads a secret or a passphrase (never from argv), one rule for all:
/// 1. from the file descriptor its option names (`--secret-fd N`, `--passphrase-fd N`,
///    `--new-passphrase-fd N`), read to its end;
/// 2. else from stdin, when stdin is not a terminal and no other value of this command took it;
/// 3. else at a prompt on the terminal (/dev/tty) without echo; a new value (a new passphrase,
///    the secret of `item add`) is asked twice and must be typed the same both times.
/// From 1 and 2, one final newline ("\n") is removed, so `3<<<x`, `echo x |` and a file
/// ending in a newline all give `x` (as `security` reads a typed password; secret-tool keeps
/// it); `--raw` keeps every byte of a secret. An empty value is refused (exit 65) unless the
/// command is given `--allow-empty`; a passphrase must be UTF-8 without CR or LF in it.
enum Terminal {
    static func isTerminal(_ fd: Int32) -> Bool { SystemCall.isTerminal(fd) }

    /// Set once a value was read from stdin: a second value of the same command (the new
    /// passphrase after the current one) cannot come from there too.
    private static let stdinTaken = Atomic(false)

    /// What one value is, for its prompt and its errors ("secret", "new passphrase").
    struct Value {
        var name: String
        /// The option that gives it by fd, for the error when there is no terminal.
        var fdOption: String
        /// A new value, asked twice at a prompt.
        var isNew = false
        var allowEmpty = false
        /// Every byte as given: no final newline removed.
        var raw = false
        /// What an empty value's error suggests.
        var emptyHint = "give --allow-empty for an empty one"
    }

    /// All bytes readable from `fd` until end of file.
    static func readAll(fd: Int32) throws -> Data {
        do {
            return try FileDescriptor.readAll(inherited: fd, limit: 16 << 20)
        } catch let e as Errno where e.code == Errno.tooLarge {
            throw InputError(message: "input on fd \(fd) is larger than 16 MiB")
        } catch let e as Errno {
            throw UsageError(
                message: "cannot read file descriptor \(fd): \(String(cString: strerror(e.code)))")
        }
    }

    /// One value, read as the rule above says.
    static func read(_ value: Value, fd: Int?) throws -> Data {
        var bytes: Data
        var source: String
        if let fd {
            bytes = try readAll(fd: Int32(fd))
            source = "file descriptor \(fd)"
        } else if !stdinTaken.load(ordering: .relaxed) && !isTerminal(STDIN_FILENO) {
            stdinTaken.store(true, ordering: .relaxed)
            bytes = try readAll(fd: STDIN_FILENO)
            source = "standard input"
        } else {
            bytes = try readHidden(
                prompt: value.name.prefix(1).uppercased() + value.name.dropFirst() + ": ",
                value: value)
            source = "the prompt"
            if value.isNew && !(bytes.isEmpty && !value.allowEmpty) {
                let again = try readHidden(prompt: "Retype the \(value.name): ", value: value)
                guard again == bytes else {
                    throw InputError(
                        message: "the two \(value.name)s typed differ; nothing was changed")
                }
            }
        }
        if !value.raw && source != "the prompt" && bytes.last == 0x0A { bytes.removeLast() }
        if bytes.isEmpty && !value.allowEmpty {
            throw InputError(
                message: "the \(value.name) from \(source) is empty (\(value.emptyHint))")
        }
        return bytes
    }

    /// A passphrase: `read`, then UTF-8 without a line break.
    static func passphrase(_ value: Value, fd: Int?) throws -> String {
        let bytes = try read(value, fd: fd)
        if bytes.contains(0x0A) || bytes.contains(0x0D) {
            throw InputError(
                message:
                    "the \(value.name) contains a line break (CR or LF; only one final LF is removed)"
            )
        }
        guard let s = String(validating: bytes, as: UTF8.self) else {
            throw InputError(message: "the \(value.name) is not valid UTF-8")
        }
        return s
    }

    /// One line from /dev/tty with echo off.
    static func readHidden(prompt: String, value: Value) throws -> Data {
        guard let tty = try? FileDescriptor(opening: "/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY)
        else {
            throw UsageError(
                message:
                    "no terminal to ask for the \(value.name) on: give it on stdin or with \(value.fdOption) N"
            )
        }
        // Echo off (discarding what was typed before) and only then the prompt: an answer
        // typed once the prompt shows is neither echoed nor discarded.
        let old = try? SystemCall.terminalAttributes(tty.rawValue)
        if var noEcho = old {
            noEcho.c_lflag &= ~tcflag_t(ECHO)
            try? SystemCall.setTerminalAttributes(tty.rawValue, TCSAFLUSH, noEcho)
        }
        defer {
            if let old { try? SystemCall.setTerminalAttributes(tty.rawValue, TCSANOW, old) }
            try? tty.writeAll(Data("\n".utf8))
        }
        try? tty.writeAll(Data(prompt.utf8))
        var line = Data()
        while true {
            guard let c = readByte(tty), c != 0x0A else { break }
            line.append(c)
            if line.count > 16 << 20 {
                throw InputError(message: "the \(value.name) typed is larger than 16 MiB")
            }
        }
        if line.last == 0x0D { line.removeLast() }
        return line
    }

    /// One byte typed on `tty`; nil at the end of input, or when it cannot be read.
    private static func readByte(_ tty: borrowing FileDescriptor) -> UInt8? {
        var c: UInt8 = 0
        let n = try? withUnsafeMutableBytes(of: &c) { try tty.read(into: $0) }
        return n == 1 ? c : nil
    }

    /// Asks a yes/no question on the terminal; false when there is none or the answer is not yes.
    static func confirm(_ question: String) -> Bool {
        guard isTerminal(STDIN_FILENO) else { return false }
        guard let tty = try? FileDescriptor(opening: "/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY)
        else { return false }
        try? tty.writeAll(Data(question.utf8))
        var line = Data()
        while line.count < 64 {
            guard let c = readByte(tty), c != 0x0A else { break }
            line.append(c)
        }
        let answer = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespaces)
            .lowercased()
        return answer == "y" || answer == "yes"
    }

    /// Writes bytes to stdout exactly, plus a newline when stdout is a terminal.
    static func writeSecret(_ data: Data) {
        StandardOutput.write(data)
        if isTerminal(STDOUT_FILENO) { StandardOutput.write(Data("\n".utf8)) }
    }
}
