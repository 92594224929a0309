import Foundation
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Input and output as secret-tool does it: secrets never from argv; from an fd, stdin or a
/// prompt without echo; printed exactly, with a newline only when stdout is a terminal.
enum Terminal {
    static func isTerminal(_ fd: Int32) -> Bool { isatty(fd) == 1 }

    /// All bytes readable from `fd` until end of file.
    static func readAll(fd: Int32) throws -> Data {
        do {
            return try FileDescriptor.readAll(fd, limit: 16 << 20)
        } catch let e as Errno where e.code == EFBIG {
            throw UsageError(message: "input on fd \(fd) is larger than 16 MiB")
        } catch let e as Errno {
            throw UsageError(message: "cannot read file descriptor \(fd): \(String(cString: strerror(e.code)))")
        }
    }

    /// A passphrase from `fd` (its first line), or from the terminal without echo.
    static func passphrase(fd: Int?, prompt: String) throws -> String {
        let data: Data
        if let fd {
            data = try readAll(fd: Int32(fd))
        } else {
            data = try readHidden(prompt: prompt)
        }
        var bytes = [UInt8](data)
        if let nl = bytes.firstIndex(of: 0x0A) { bytes.removeSubrange(nl...) }
        if bytes.last == 0x0D { bytes.removeLast() }
        guard let s = String(validating: bytes, as: UTF8.self) else { throw UsageError(message: "the passphrase is not valid UTF-8") }
        return s
    }

    /// A secret: from `fd` when given, else stdin when it is not a terminal (every byte,
    /// exactly), else a prompt without echo.
    static func secret(fd: Int?, prompt: String) throws -> Data {
        if let fd { return try readAll(fd: Int32(fd)) }
        if !isTerminal(STDIN_FILENO) { return try readAll(fd: STDIN_FILENO) }
        var bytes = [UInt8](try readHidden(prompt: prompt))
        if let nl = bytes.firstIndex(of: 0x0A) { bytes.removeSubrange(nl...) }
        return Data(bytes)
    }

    /// One line from /dev/tty with echo off.
    static func readHidden(prompt: String) throws -> Data {
        let tty = open("/dev/tty", O_RDWR | O_CLOEXEC)
        guard tty >= 0 else {
            let what = prompt.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: ": "))
            throw UsageError(message: "no terminal to ask for the \(what) on: give it through a file descriptor (the command's --passphrase-fd, --new-passphrase-fd or --secret-fd; see vaultctl --help)")
        }
        defer { close(tty) }
        _ = prompt.withCString { write(tty, $0, strlen($0)) }
        var old = termios()
        tcgetattr(tty, &old)
        var noEcho = old
        noEcho.c_lflag &= ~tcflag_t(ECHO)
        tcsetattr(tty, TCSAFLUSH, &noEcho)
        defer {
            tcsetattr(tty, TCSAFLUSH, &old)
            _ = write(tty, "\n", 1)
        }
        var line = Data()
        var c: UInt8 = 0
        while read(tty, &c, 1) == 1 && c != 0x0A { line.append(c) }
        return line
    }

    /// Writes bytes to stdout exactly, plus a newline when stdout is a terminal.
    static func writeSecret(_ data: Data) {
        StandardOutput.write(data)
        if isTerminal(STDOUT_FILENO) { StandardOutput.write(Data("\n".utf8)) }
    }
}
