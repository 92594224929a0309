import Foundation
import Synchronization
import Testing

@testable import VaultCore

#if canImport(Glibc)
import Glibc
#endif

/// vaultd's levelled log (`Logger`): what each level lets through, journald's `<N>` prefixes
/// when stderr is the journal and only then, and fields a peer controls kept to one bounded,
/// escaped line.
@Suite struct LoggerTests {
    /// The lines a logger wrote, in order.
    final class Lines: Sendable {
        let lines = Mutex<[String]>([])
        var all: [String] { lines.withLock { $0 } }
        func logger(level: LogLevel, journal: Bool = false) -> Logger {
            Logger(level: level, journal: journal) { line in self.lines.withLock { $0.append(line) }
            }
        }
    }

    static func logEveryLevel(_ logger: Logger) {
        logger.error("e")
        logger.warning("w")
        logger.notice("n")
        logger.info("i")
        logger.debug("d")
    }

    @Test func eachLevelWritesItsOwnAndTheMoreImportantLines() {
        let expected: [LogLevel: [String]] = [
            .error: ["e"], .warning: ["e", "w"], .notice: ["e", "w", "n"],
            .info: ["e", "w", "n", "i"], .debug: ["e", "w", "n", "i", "d"],
        ]
        for level in LogLevel.allCases {
            let out = Lines()
            Self.logEveryLevel(out.logger(level: level))
            #expect(out.all == expected[level]!.map { "vaultd: \($0)\n" }, "\(level)")
        }
    }

    /// A message below the level is not even built; a copy's `setLevel` reaches the original
    /// (a SIGHUP's reload reaches every object holding the logger).
    @Test func filteredMessagesAreNotBuiltAndCopiesShareTheLevel() {
        let out = Lines()
        let logger = out.logger(level: .info)
        let built = Atomic<Int>(0)
        func message() -> String {
            built.add(1, ordering: .relaxed)
            return "built"
        }
        logger.debug(message())
        #expect(built.load(ordering: .relaxed) == 0 && out.all.isEmpty)
        let copy = logger
        copy.setLevel(.debug)
        #expect(logger.level == .debug)
        logger.debug(message())
        #expect(built.load(ordering: .relaxed) == 1 && out.all == ["vaultd: built\n"])
        logger.setLevel(.error)
        copy.warning("not written")
        #expect(out.all.count == 1)
    }

    @Test func levelsAreNamedAsTheSettingSpellsThem() {
        #expect(LogLevel.allCases.map(\.name) == ["error", "warning", "notice", "info", "debug"])
        #expect(LogLevel.allCases.map(\.rawValue) == [3, 4, 5, 6, 7])
        for level in LogLevel.allCases { #expect(LogLevel(name: level.name) == level) }
        for wrong in ["", "Debug", "DEBUG", "warn", "err", "debug ", "7"] {
            #expect(LogLevel(name: wrong) == nil, "\(wrong)")
        }
    }

    @Test func theJournalGetsSyslogPriorities() {
        let out = Lines()
        Self.logEveryLevel(out.logger(level: .debug, journal: true))
        #expect(
            out.all == [
                "<3>vaultd: e\n", "<4>vaultd: w\n", "<5>vaultd: n\n", "<6>vaultd: i\n",
                "<7>vaultd: d\n",
            ])
    }

    /// `JOURNAL_STREAM` counts only when it names the very file open on the descriptor.
    @Test func theJournalIsRecognisedByDeviceAndInode() throws {
        let path =
            NSTemporaryDirectory() + "logger-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        try #require(fd >= 0)
        let other = open("/dev/null", O_RDWR | O_CLOEXEC)
        defer {
            close(fd)
            close(other)
            unlink(path)
        }
        var st = stat()
        try #require(fstat(fd, &st) == 0)
        let named = "\(st.st_dev):\(st.st_ino)"
        #expect(Logger.isJournal(named, fd: fd))
        #expect(!Logger.isJournal(named, fd: other))
        for wrong in [
            nil, "", "\(st.st_dev)", "\(st.st_dev):", ":\(st.st_ino)",
            "\(st.st_dev):\(st.st_ino + 1)",
            "\(st.st_dev + 1):\(st.st_ino)", "\(named):1", " \(named)",
            "\(st.st_dev):-\(st.st_ino)",
        ] {
            #expect(!Logger.isJournal(wrong, fd: fd), "\(String(describing: wrong))")
        }
        // A closed descriptor is no journal.
        #expect(!Logger.isJournal(named, fd: -1))
    }

    /// A hostile field (newlines to forge a line, ANSI escapes, bidirectional overrides,
    /// bytes that are not UTF-8 are not possible in a String, megabytes) stays on one line,
    /// escaped, and bounded to 160 bytes of it plus the count of the rest.
    @Test func hostileFieldsStayOnOneBoundedEscapedLine() {
        let out = Lines()
        let logger = out.logger(level: .info)
        let hostile =
            "x\nvaultd: forged\r\u{1b}[31mred\u{1b}[0m\t\u{202e}evil\u{2028}\"q\"\\"
            + String(repeating: "A", count: 4 << 20)
        logger.warning("refused", ["app": hostile, "pid": Int32(42), "late": true])
        let lines = out.all
        try? #require(lines.count == 1)
        let line = lines[0]
        #expect(line.hasSuffix("\n") && line.dropLast().allSatisfy { $0 != "\n" && $0 != "\r" })
        #expect(
            !line.unicodeScalars.contains { $0 == "\u{1b}" || $0 == "\u{202e}" || $0 == "\u{2028}" }
        )
        let start =
            "vaultd: refused app=\"x\\nvaultd: forged\\r\\x1b[31mred\\x1b[0m\\t\\u{202e}evil\\u{2028}\\\"q\\\"\\\\"
        #expect(line.hasPrefix(start), "\(line.prefix(200))")
        let kept =
            160
            - Array("x\nvaultd: forged\r\u{1b}[31mred\u{1b}[0m\t\u{202e}evil\u{2028}\"q\"\\".utf8)
            .count
        #expect(
            line.hasSuffix(
                String(repeating: "A", count: kept)
                    + "\"…(+\((4 << 20) - kept) bytes) pid=42 late=true\n"),
            "\(line.suffix(100))")
        #expect(line.utf8.count < 400)
    }

    /// A rate-limited reason logs its burst at the level asked, then counts what it drops and
    /// says so with the next line; a level that writes nothing spends no token.
    @Test func rateLimitedLinesKeepTheirLevelAndCountTheSuppressed() {
        let out = Lines()
        let logger = out.logger(level: .info, journal: true)
        let limited = RateLimitedLog(burst: 2, interval: 0.05)
        let quiet = Lines().logger(level: .error)
        for _ in 0..<5 { #expect(!limited.log("flood", to: quiet, .warning, "not written")) }
        let written = (0..<5).map { limited.log("flood", to: logger, .warning, "refused \($0)") }
        #expect(written == [true, true, false, false, false])
        usleep(120_000)
        #expect(limited.log("flood", to: logger, .warning, "refused again"))
        #expect(
            out.all == [
                "<4>vaultd: refused 0\n", "<4>vaultd: refused 1\n",
                "<4>vaultd: 3 similar message(s) suppressed (flood)\n",
                "<4>vaultd: refused again\n",
            ])
    }
}
