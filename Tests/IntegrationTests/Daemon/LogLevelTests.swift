import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// vaultd's log levels through the real binary (docs/configuration.md): the default level
/// writes no debug line, config.plist's `LogLevel` (at start and at SIGHUP) changes that, a
/// `JOURNAL_STREAM` naming vaultd's stderr gives each line journald's `<N>` priority, and a
/// level that names none stops vaultd at start.
@Suite struct LogLevelTests {
    /// The log written since `mark` characters.
    static func since(_ d: Daemon, _ mark: Int) -> Substring { d.log.dropFirst(mark) }

    static func writeConfig(_ path: String, _ settings: [String: Any]) throws {
        try PropertyListSerialization.data(fromPropertyList: settings, format: .xml, options: 0)
            .write(to: URL(fileURLWithPath: path))
    }

    @Test func theLogLevelSettingAndJournalPrefixes() throws {
        let d = try Daemon(start: false)
        defer { d.close() }
        let config = d.root + "/config.plist"
        try Self.writeConfig(config, [:])

        // The default level: notice and info lines, no debug line, no prefixes.
        try d.start(extraArguments: ["--config", config])
        try #require(d.initialize().status == 0)
        #expect(d.stop() == 0)
        let first = d.log
        let lines = first.split(separator: "\n")
        #expect(lines.contains { $0.hasPrefix("vaultd: serving ") }, "\(first)")
        #expect(lines.contains { $0 == "vaultd: SIGTERM: stopping" }, "\(first)")
        #expect(!first.contains("settings in force"), "\(first)")
        #expect(lines.allSatisfy { $0.hasPrefix("vaultd: ") }, "\(first)")

        // LogLevel debug: the settings in force are logged, as fields.
        try Self.writeConfig(config, ["LogLevel": "debug", "AutoLockSeconds": 30])
        var mark = d.log.count
        try d.start(extraArguments: ["--config", config])
        #expect(d.stop() == 0)
        var run = Self.since(d, mark)
        #expect(
            run.contains(
                "vaultd: settings in force LogLevel=\"debug\" AutoLockSeconds=30.0"),
            "\(run)")

        // stderr is the journal (JOURNAL_STREAM names the log file's device and inode): each
        // line starts with its level's priority.
        var st = stat()
        try #require(stat(d.logPath, &st) == 0)
        mark = d.log.count
        try d.start(
            extraArguments: ["--config", config],
            environment: ["JOURNAL_STREAM": "\(st.st_dev):\(st.st_ino)"])
        #expect(d.stop() == 0)
        run = Self.since(d, mark)
        let journal = run.split(separator: "\n")
        #expect(journal.contains { $0.hasPrefix("<7>vaultd: settings in force ") }, "\(run)")
        #expect(journal.contains { $0.hasPrefix("<5>vaultd: serving ") }, "\(run)")
        #expect(journal.contains { $0 == "<5>vaultd: stopped" }, "\(run)")
        #expect(journal.allSatisfy { $0.hasPrefix("<") }, "\(run)")
        // A JOURNAL_STREAM naming another file (a child's inherited variable): no prefixes.
        mark = d.log.count
        try d.start(
            extraArguments: ["--config", config],
            environment: ["JOURNAL_STREAM": "\(st.st_dev):\(st.st_ino + 1)"])
        #expect(d.stop() == 0)
        run = Self.since(d, mark)
        #expect(run.split(separator: "\n").allSatisfy { $0.hasPrefix("vaultd: ") }, "\(run)")
        #expect(run.contains("vaultd: settings in force "), "\(run)")

        // Back to the default, then debug again by SIGHUP, without a restart.
        try Self.writeConfig(config, [:])
        try d.start(extraArguments: ["--config", config])
        try Self.writeConfig(config, ["LogLevel": "debug"])
        mark = d.log.count
        d.sendSignal(SIGHUP)
        let reloaded = eventually(timeout: 10) {
            Self.since(d, mark).contains("vaultd: settings in force LogLevel=\"debug\"")
        }
        #expect(reloaded, "\(d.log)")
        #expect(d.stop() == 0)

        // A level that is none of the five: vaultd does not start, and says why.
        try Self.writeConfig(config, ["LogLevel": "verbose"])
        mark = d.log.count
        #expect(throws: (any Error).self) { try d.start(extraArguments: ["--config", config]) }
        run = Self.since(d, mark)
        #expect(
            run.contains("LogLevel must be one of error, warning, notice, info, debug"), "\(run)")
    }
}
