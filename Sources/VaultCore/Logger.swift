import Synchronization
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// How much a log line matters, with syslog's priority numbers (RFC 5424, sd-daemon(3)'s
/// `<N>` prefixes): a logger writes the lines at its level and the more important ones.
public enum LogLevel: Int, Sendable, Comparable, CaseIterable {
    /// Something failed that the user must see: a damaged store, a front-end that cannot serve.
    case error = 3
    /// A refusal or a problem vaultd works around: a peer refused, a file not read.
    case warning = 4
    /// A normal event worth keeping: serving, stopped, an app installed, a setting reloaded.
    case notice = 5
    /// Routine detail of what vaultd did (the default level writes it).
    case info = 6
    /// Detail for finding a fault, off by default.
    case debug = 7

    /// The setting's spelling: `error`, `warning`, `notice`, `info`, `debug`.
    public var name: String {
        switch self {
        case .error: "error"
        case .warning: "warning"
        case .notice: "notice"
        case .info: "info"
        case .debug: "debug"
        }
    }

    /// The level a setting names (`name`, compared byte for byte), or nil.
    public init?(name: String) {
        guard let level = Self.allCases.first(where: { $0.name.utf8.elementsEqual(name.utf8) })
        else { return nil }
        self = level
    }

    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }
}

/// A value logged as a field (`key=value` after a line's message). A string is escaped and
/// bounded as `logField` does it (a peer may control it); numbers are written as they are.
public protocol LogValue {
    /// The value's text in a log line: one line, bounded.
    var logText: String { get }
}

extension String: LogValue {
    public var logText: String { logField(self) }
}
extension Int: LogValue {
    public var logText: String { String(self) }
}
extension Int32: LogValue {
    public var logText: String { String(self) }
}
extension Int64: LogValue {
    public var logText: String { String(self) }
}
extension UInt32: LogValue {
    public var logText: String { String(self) }
}
extension UInt64: LogValue {
    public var logText: String { String(self) }
}
extension Double: LogValue {
    public var logText: String { String(self) }
}
extension Bool: LogValue {
    public var logText: String { self ? "true" : "false" }
}

/// vaultd's log: lines of `vaultd: MESSAGE[ key=value…]` on stderr (vaultd runs in the
/// foreground; journald or the terminal keeps them), written when their level is at most the
/// logger's. Passed to the objects that log (an init parameter), never a global, so a test
/// gives its own (`sink`).
///
/// Callers never pass secrets or attribute values a user typed. A message names values a
/// peer controls only through `logField` or as a field: a field's string is escaped and
/// bounded the same way (`LogValue`); its key is one of vaultd's fixed words.
///
/// When stderr is the journal (`JOURNAL_STREAM`, `isJournal(_:fd:)`), each line starts with
/// its level's syslog priority, `<3>` to `<7>`, which journald takes as the entry's priority
/// and strips.
///
/// A value type whose copies share one level: `setLevel` (a SIGHUP's reload) reaches every
/// object that holds a copy.
public struct Logger: Sendable {
    /// The level in force, shared by the copies (`LogLevel.rawValue`).
    private final class Threshold: Sendable {
        let value: Atomic<Int>
        init(_ level: LogLevel) { value = Atomic(level.rawValue) }
    }
    private let threshold: Threshold
    /// Whether each line starts with `<N>` (stderr is the journal).
    public let journal: Bool
    /// Where each finished line goes (newline included).
    private let sink: @Sendable (String) -> Void

    /// A logger at `level` writing to `sink` (stderr: `writeToStandardError`, which drops a
    /// line it cannot write: the log must never stop the daemon), with `<N>` prefixes when
    /// `journal`.
    public init(
        level: LogLevel = .info, journal: Bool = false,
        sink: @escaping @Sendable (String) -> Void = writeToStandardError
    ) {
        threshold = Threshold(level)
        self.journal = journal
        self.sink = sink
    }

    /// The logger vaultd runs with: stderr, with `<N>` prefixes when `environment`'s
    /// `JOURNAL_STREAM` names stderr.
    public static func standardError(level: LogLevel = .info, environment: [String: String])
        -> Logger
    {
        Logger(level: level, journal: isJournal(environment["JOURNAL_STREAM"], fd: STDERR_FILENO))
    }

    /// Whether `journalStream` (`JOURNAL_STREAM`: `DEVICE:INODE` in decimal, which systemd
    /// sets for a service whose stdout or stderr is the journal) names the file open on `fd`.
    /// The variable alone is not enough: a child inherits it with its stderr redirected
    /// elsewhere (a file, a terminal), where `<N>` would be noise (sd_journal_stream_fd(3),
    /// systemd.exec(5)).
    public static func isJournal(_ journalStream: String?, fd: Int32) -> Bool {
        guard let parts = journalStream?.split(separator: ":", omittingEmptySubsequences: false),
            parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1])
        else { return false }
        guard let st = try? SystemCall.fstat(fd, inherited: true) else { return false }
        return UInt64(st.st_dev) == device && UInt64(st.st_ino) == inode
    }

    /// The level in force.
    public var level: LogLevel {
        LogLevel(rawValue: threshold.value.load(ordering: .relaxed)) ?? .info
    }

    /// Puts `level` in force for this logger and every copy of it.
    public func setLevel(_ level: LogLevel) {
        threshold.value.store(level.rawValue, ordering: .relaxed)
    }

    /// Whether a line at `level` is written.
    public func writes(_ level: LogLevel) -> Bool {
        level.rawValue <= threshold.value.load(ordering: .relaxed)
    }

    /// Writes `message` and `fields` (in their order, as ` key=value`) at `level`, if the
    /// logger's level lets it through; the message is not built otherwise.
    public func log(
        _ level: LogLevel, _ message: @autoclosure () -> String,
        _ fields: KeyValuePairs<String, any LogValue> = [:]
    ) {
        guard writes(level) else { return }
        var text = message()
        for (key, value) in fields { text += " \(key)=\(value.logText)" }
        sink((journal ? "<\(level.rawValue)>vaultd: " : "vaultd: ") + text + "\n")
    }

    public func error(
        _ message: @autoclosure () -> String, _ fields: KeyValuePairs<String, any LogValue> = [:]
    ) { log(.error, message(), fields) }
    public func warning(
        _ message: @autoclosure () -> String, _ fields: KeyValuePairs<String, any LogValue> = [:]
    ) { log(.warning, message(), fields) }
    public func notice(
        _ message: @autoclosure () -> String, _ fields: KeyValuePairs<String, any LogValue> = [:]
    ) { log(.notice, message(), fields) }
    public func info(
        _ message: @autoclosure () -> String, _ fields: KeyValuePairs<String, any LogValue> = [:]
    ) { log(.info, message(), fields) }
    public func debug(
        _ message: @autoclosure () -> String, _ fields: KeyValuePairs<String, any LogValue> = [:]
    ) { log(.debug, message(), fields) }
}
