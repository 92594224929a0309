import Foundation
import Synchronization
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// A pinentry (pinentry-gnome3, -qt, -gtk2, -curses, -tty), driven as gpg-agent drives it
/// (gnupg's agent/call-pinentry.c): the Assuan protocol over the child's stdin and stdout,
/// one command line at a time, each answered by `OK` or `ERR code text`, with data on `D`
/// lines (percent-escaped), status on `S` lines and comments on `#` lines
/// (https://www.gnupg.org/documentation/manuals/assuan/). The dialog is configured with
/// `OPTION ttyname`/`ttytype`/`display` (a curses or tty pinentry draws on the terminal
/// `GPG_TTY` names, as gpg-agent's does), `SETTITLE`, `SETDESC`, `SETPROMPT`, `SETOK`,
/// `SETCANCEL`, `SETERROR` and `SETTIMEOUT`; `GETPIN` asks for the passphrase, `CONFIRM`
/// for a yes or no.
///
/// Every byte the child sends is bounded: a line of more than `maximumLine` bytes, a reply
/// that is no Assuan line, an `INQUIRE` (vaultd asks nothing a pinentry may inquire about)
/// end the dialog as dismissed, and so do the deadline and the child's exit. The PIN is read
/// into sodium memory (the receive buffer, the decoded data), never into a Swift string,
/// and never logged.
///
/// Sendable: `child` and `inboxCount` are behind mutexes; the child's socket and `inbox`
/// are the asking thread's alone (`cancel` only signals the child).
final class Pinentry: PromptDialog, Sendable {
    /// Assuan's longest line, its LF included (assuan.h ASSUAN_LINELENGTH).
    static let maximumLine = 1000
    /// gpg-error codes a pinentry answers with: GPG_ERR_CANCELED (99) from the pinentry
    /// source (GPG_ERR_SOURCE_PINENTRY, 5): the user pressed Cancel or closed the dialog.
    static let cancelledCode: UInt32 = 83_886_179
    /// GPG_ERR_TIMEOUT (62) from the pinentry: its own SETTIMEOUT ran out.
    static let timeoutCode: UInt32 = 83_886_142

    enum Failure: Error, CustomStringConvertible {
        case spawn(String)
        case exited
        case timedOut
        case lineTooLong
        case malformed(String)
        var description: String {
            switch self {
            case .spawn(let why): "the pinentry cannot be started: \(why)"
            case .exited: "the pinentry exited"
            case .timedOut: "the pinentry did not answer in time"
            case .lineTooLong: "the pinentry sent a line over \(Pinentry.maximumLine) bytes"
            case .malformed(let line): "the pinentry sent no Assuan reply (\(line))"
            }
        }
    }

    /// D lines' data, decoded into sodium memory; `count` goes past the capacity when more
    /// came than fits (the rest dropped).
    final class Collected {
        let buffer: SecureBytes
        var count = 0
        init(capacity: Int) { buffer = SecureBytes(count: capacity) }
    }

    /// An Assuan reply: OK, or ERR with its code and text.
    enum Reply: Equatable {
        case ok
        case error(UInt32, String)
    }

    let pid: pid_t
    /// vaultd's end of the socket pair that is the child's stdin and stdout.
    private let fd: Int32
    /// Received bytes not yet taken as lines (sodium memory: they may hold the PIN).
    private let inbox = SecureBytes(count: Pinentry.maximumLine * 2)
    /// Bytes held in `inbox` (the asking thread's alone; a `Mutex` only to be `Sendable`).
    private let inboxCount = Mutex(0)
    private struct Child {
        /// Set by `cancel`.
        var cancelled = false
        /// Set by `finish` before it waits for the child: no signal is sent after.
        var reaped = false
    }
    private let child = Mutex(Child())

    /// Starts `program` and reads its greeting. The options name vaultd's own terminal and
    /// display: `GPG_TTY` (with `TERM`), `DISPLAY` or `WAYLAND_DISPLAY`.
    init(program: String, deadline: UInt64) throws {
        let pair: (Int32, Int32)
        do {
            pair = try SystemCall.socketpair(
                AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
        } catch { throw Failure.spawn(String(cString: strerror(error.code))) }
        fd = pair.0
        do {
            pid = try Self.spawn(program, stdio: pair.1)
        } catch {
            SystemCall.close(pair.0)
            SystemCall.close(pair.1)
            throw error
        }
        SystemCall.close(pair.1)
        do {
            guard try readReply(nil, deadline: deadline) == .ok else {
                throw Failure.malformed("no greeting")
            }
            let env = ProcessInfo.processInfo.environment
            var options: [String] = []
            if let tty = env["GPG_TTY"], tty.hasPrefix("/") {
                options.append("ttyname=" + tty)
                if let term = env["TERM"], !term.isEmpty { options.append("ttytype=" + term) }
            }
            if let d = env["DISPLAY"], !d.isEmpty { options.append("display=" + d) }
            // An option a pinentry does not know is answered with ERR, as gpg-agent ignores it.
            for o in options { _ = try command("OPTION " + o, deadline: deadline) }
        } catch {
            finish()
            throw error
        }
    }

    deinit { finish() }

    // MARK: dialogs

    func passphrase(_ text: DialogText, deadline: UInt64) -> PassphraseAnswer {
        do {
            try configure(text, deadline: deadline)
            if let warning = text.warning {
                _ = try command("SETERROR " + warning, deadline: deadline)
            }
            let pin = Collected(capacity: PrompterAgent.maximumPassphrase)
            switch try command("GETPIN", data: pin, deadline: deadline) {
            case .ok:
                guard pin.count <= PrompterAgent.maximumPassphrase else {
                    return .dismissed("a passphrase over \(PrompterAgent.maximumPassphrase) bytes")
                }
                let out = SecureBytes(count: pin.count)
                out.withUnsafeMutableBytes { dst in
                    pin.buffer.withUnsafeBytes {
                        dst.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0.prefix(pin.count)))
                    }
                }
                return .passphrase(out)
            case .error(let code, _):
                return .dismissed(Self.why(code))
            }
        } catch {
            return .dismissed(isCancelled ? "cancelled" : "\(error)")
        }
    }

    /// Two questions, so that only OK ever grants: whether to allow (OK "Allow", Cancel
    /// "Deny"), then whether always (OK "Always allow", Cancel "Only this time"). A
    /// pinentry's third button (SETNOTOK) is not used: a pinentry without one answers No
    /// with the same code, which must never mean yes.
    func confirm(_ text: DialogText, always: String, deadline: UInt64) -> AccessChoice? {
        do {
            try configure(text, deadline: deadline)
            guard try command("CONFIRM", deadline: deadline) == .ok else { return .deny }
            var second = text
            second.description = always
            second.okLabel = "Always allow"
            second.cancelLabel = "Only this time"
            try configure(second, deadline: deadline)
            return try command("CONFIRM", deadline: deadline) == .ok ? .alwaysAllow : .allowOnce
        } catch {
            return nil
        }
    }

    /// Ends the dialog from any thread: the child is terminated, which ends a pending read.
    /// The signal is sent under the lock: `finish` claims the child (`reaped`) under it
    /// before it waits for it, so the pid signalled is never one the child left for reuse.
    func cancel() {
        child.withLock {
            $0.cancelled = true
            if !$0.reaped { try? SystemCall.kill(pid, SIGTERM) }
        }
    }

    private var isCancelled: Bool { child.withLock { $0.cancelled } }

    func close() { finish() }

    /// The texts and buttons of the next GETPIN or CONFIRM, and the pinentry's own timeout.
    private func configure(_ text: DialogText, deadline: UInt64) throws {
        // Whole seconds left, at least 1 (a deadline already past: 1; the next read ends it).
        let now = MonotonicClock.nanoseconds()
        let seconds = deadline > now ? max(1, (deadline - now) / 1_000_000_000) : 1
        for c in [
            "SETTITLE " + text.title, "SETDESC " + text.message + "\n\n" + text.description,
            "SETPROMPT " + text.prompt, "SETOK " + text.okLabel, "SETCANCEL " + text.cancelLabel,
            "SETTIMEOUT \(seconds)",
        ] {
            _ = try command(c, deadline: deadline)
        }
    }

    private static func why(_ code: UInt32) -> String {
        switch code {
        case cancelledCode: "cancelled"
        case timeoutCode: "timed out"
        default: "the pinentry answered error \(code)"
        }
    }

    // MARK: Assuan

    /// Sends one command (its argument percent-escaped, the line cut to `maximumLine`) and
    /// reads its reply; `data` collects D lines, decoded, up to its capacity.
    @discardableResult
    func command(
        _ line: String, data: Collected? = nil, deadline: UInt64
    ) throws -> Reply {
        var bytes = Self.escaped(line)
        bytes.append(0x0a)
        try write(bytes, deadline: deadline)
        return try readReply(data, deadline: deadline)
    }

    /// The command line for `line`: the verb as is, the argument with `%`, CR, LF and every
    /// other control character percent-escaped (Assuan escapes at least the first three),
    /// and cut at a character's boundary to fit a line.
    static func escaped(_ line: String) -> [UInt8] {
        var out: [UInt8] = []
        var inArgument = false
        for scalar in line.unicodeScalars {
            var encoded: [UInt8]
            if inArgument && (scalar.value < 0x20 || scalar == "%" || scalar.value == 0x7f) {
                encoded = Array(String(format: "%%%02X", scalar.value).utf8)
            } else {
                encoded = Array(String(scalar).utf8)
            }
            if scalar == " " { inArgument = true }
            if out.count + encoded.count > maximumLine - 1 { break }
            out += encoded
        }
        return out
    }

    private func write(_ bytes: [UInt8], deadline: UInt64) throws {
        var sent = 0
        while sent < bytes.count {
            try wait(for: Int16(POLLOUT), deadline: deadline)
            let n = try? bytes.withUnsafeBytes {
                try SystemCall.send(
                    fd, UnsafeRawBufferPointer(rebasing: $0[sent...]), flags: Int32(MSG_NOSIGNAL))
            }
            guard let n, n > 0 else { throw Failure.exited }
            sent += n
        }
    }

    /// Waits until `fd` is ready for `events`, or throws at the deadline.
    private func wait(for events: Int16, deadline: UInt64) throws {
        while true {
            let now = MonotonicClock.nanoseconds()
            guard now < deadline else { throw Failure.timedOut }
            let ms = Int32(clamping: (deadline - now) / 1_000_000 + 1)
            guard let r = try? SystemCall.poll(fd, events: events, timeout: ms) else {
                throw Failure.exited
            }
            if r != 0 { return }
        }
    }

    /// Reads lines up to an OK or ERR. D lines are decoded into `data`; S and # lines are
    /// skipped; anything else (INQUIRE included) is malformed.
    private func readReply(_ data: Collected?, deadline: UInt64)
        throws -> Reply
    {
        while true {
            let line = try readLine(deadline: deadline)
            let reply: Reply?? = line.withUnsafeBytes { b in
                if b.starts(with: "D ".utf8) {
                    if let data { Self.decode(b.dropFirst(2), into: data) }
                    return .some(nil)
                }
                // Not the PIN: a reply's text is shown, escaped and bounded, in the log.
                let text = String(decoding: b, as: UTF8.self)
                if text == "OK" || text.hasPrefix("OK ") { return .some(.ok) }
                if text.hasPrefix("S ") || text == "S" || text.hasPrefix("#") { return .some(nil) }
                if text.hasPrefix("ERR ") {
                    let rest = text.dropFirst(4)
                    let code = rest.prefix { $0.isNumber }
                    if let n = UInt32(code) {
                        return .some(
                            .error(
                                n,
                                String(rest.dropFirst(code.count)).trimmingCharacters(
                                    in: .whitespaces)))
                    }
                }
                return .none
            }
            switch reply {
            case .none:
                let shown = line.withUnsafeBytes { String(decoding: $0.prefix(80), as: UTF8.self) }
                throw Failure.malformed(logField(shown))
            case .some(nil): continue
            case .some(let r?): return r
            }
        }
    }

    /// Percent-decodes `src` onto the end of `data`.
    private static func decode(_ src: UnsafeRawBufferPointer.SubSequence, into data: Collected) {
        data.buffer.withUnsafeMutableBytes { dst in
            var i = src.startIndex
            func hex(_ c: UInt8) -> UInt8? {
                switch c {
                case 0x30...0x39: c - 0x30
                case 0x41...0x46: c - 0x41 + 10
                case 0x61...0x66: c - 0x61 + 10
                default: nil
                }
            }
            while i < src.endIndex {
                var byte = src[i]
                if byte == 0x25, i + 2 < src.endIndex, let h = hex(src[i + 1]),
                    let l = hex(src[i + 2])
                {
                    byte = h << 4 | l
                    i += 2
                }
                i += 1
                if data.count < dst.count { dst[data.count] = byte }
                data.count += 1
            }
        }
    }

    /// One line, without its LF, in sodium memory. Throws at a line over `maximumLine`
    /// bytes, the child's exit (end of file) and the deadline.
    private func readLine(deadline: UInt64) throws -> SecureBytes {
        while true {
            let inboxCount = self.inboxCount.withLock { $0 }
            let lf: Int? = inbox.withUnsafeBytes { b in
                b.prefix(inboxCount).firstIndex(of: 0x0a)
            }
            if let lf {
                guard lf < Self.maximumLine else { throw Failure.lineTooLong }
                let line = SecureBytes(count: lf)
                inbox.withUnsafeMutableBytes { b in
                    line.withUnsafeMutableBytes {
                        $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: b.prefix(lf)))
                    }
                    let rest = inboxCount - lf - 1
                    if rest > 0 {
                        memmove(b.baseAddress!, b.baseAddress! + lf + 1, rest)
                    }
                    memset(b.baseAddress! + max(rest, 0), 0, inboxCount - max(rest, 0))
                    self.inboxCount.withLock { $0 = max(rest, 0) }
                }
                return line
            }
            guard inboxCount < Self.maximumLine else { throw Failure.lineTooLong }
            try wait(for: Int16(POLLIN), deadline: deadline)
            let n: Int
            do {
                n = try inbox.withUnsafeMutableBytes { b in
                    try SystemCall.recv(
                        fd, into: UnsafeMutableRawBufferPointer(rebasing: b[inboxCount...]),
                        flags: 0)
                }
            } catch let e as Errno where e.code == Errno.wouldBlock {
                continue
            } catch { throw Failure.exited }
            guard n > 0 else { throw Failure.exited }
            self.inboxCount.withLock { $0 = inboxCount + n }
        }
    }

    // MARK: the child

    /// Starts `program` (a path, or a name looked up in PATH) with `stdio` as its stdin and
    /// stdout, stderr on /dev/null, no other descriptor of vaultd's, and the default signal
    /// mask and dispositions (vaultd blocks and ignores some).
    private static func spawn(_ program: String, stdio: Int32) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, stdio, 0)
        posix_spawn_file_actions_adddup2(&actions, stdio, 1)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(
            &attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var pid: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup(program), nil]
        defer { for a in argv { free(a) } }
        let rc = posix_spawnp(&pid, program, &actions, &attributes, argv, environ)
        guard rc == 0 else {
            throw Failure.spawn("\(logField(program)): \(String(cString: strerror(rc)))")
        }
        return pid
    }

    /// Says goodbye, closes the socket and reaps the child (terminated, then killed, when it
    /// does not exit within a second of the socket's close).
    private func finish() {
        let done: Bool = child.withLock { child in
            defer { child.reaped = true }
            return child.reaped
        }
        guard !done else { return }
        _ = try? Array("BYE\n".utf8).withUnsafeBytes {
            try SystemCall.send(fd, $0, flags: Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
        }
        SystemCall.close(fd)
        for i in 0..<100 {
            if (try? SystemCall.waitpid(pid, options: WNOHANG))?.pid == pid { return }
            if i == 50 { try? SystemCall.kill(pid, SIGTERM) }
            usleep(10_000)
        }
        try? SystemCall.kill(pid, SIGKILL)
        _ = try? SystemCall.waitpid(pid)
    }
}
