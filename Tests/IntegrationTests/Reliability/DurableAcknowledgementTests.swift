import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The fsync of a group commit runs outside the engine lock: the COMMIT does not wait for
/// the disk, and the leader syncs the WAL afterwards. A SIGKILL cannot tell
/// whether an acknowledged write reached the disk (the page cache survives it), so this
/// watches vaultd with a real `strace`: every durable write's reply must be sent after an
/// fdatasync of the WAL that began after its request arrived and ended before the reply.
@Suite(.tags(.system)) struct DurableAcknowledgementTests {
    static let strace = ["/usr/bin/strace", "/bin/strace"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    /// One write seen in the trace: the line its request was read on and its reply sent on.
    struct Write {
        var method: String
        var request: Int
        var reply: Int?
    }

    /// The trace's WAL syncs (first and last line) and durable writes, thread by thread.
    static func parse(_ lines: [Substring]) -> (syncs: [(start: Int, end: Int)], writes: [Write]) {
        var syncs: [(start: Int, end: Int)] = []
        var openSync: [Substring: Int] = [:]  // thread -> line its WAL fdatasync began
        var writes: [Write] = []
        var pending: [Substring: Int] = [:]  // thread -> index in writes awaiting its reply
        for (i, line) in lines.enumerated() {
            guard let tid = line.split(separator: " ", maxSplits: 1).first else { continue }
            if line.contains("fdatasync(") && line.contains("-wal>") {
                if line.contains("<unfinished") {
                    openSync[tid] = i
                } else if line.hasSuffix("= 0") {
                    syncs.append((i, i))
                }
            } else if line.contains("<... fdatasync resumed>"),
                let start = openSync.removeValue(forKey: tid)
            {
                if line.hasSuffix("= 0") { syncs.append((start, i)) }
            } else if (line.contains("recvfrom") || line.contains("recvmsg"))
                && !line.contains("<unfinished")
            {
                for method in [
                    "io.vaultd.Keychain.Add", "io.vaultd.Keychain.Update",
                    "io.vaultd.Preferences.Set",
                ]
                where line.contains(method) {
                    pending[tid] = writes.count
                    writes.append(Write(method: method, request: i))
                }
            } else if line.contains("sendto("), let w = pending.removeValue(forKey: tid) {
                writes[w].reply = i
            }
        }
        return (syncs, writes)
    }

    /// vaultd makes itself non-dumpable, so only root may trace it.
    @Test(
        .enabled(
            if: Self.strace != nil && getuid() == 0,
            "needs strace, and root to trace a non-dumpable vaultd"))
    func everyAcknowledgedWriteWasSyncedBeforeItsReply() throws {
        let d = try Daemon()
        defer { d.close() }
        let pid = try #require(d.pid)
        let initialized = d.initializeWithoutPassphrase()
        try #require(initialized.status == 0, "\(initialized)")
        let tracePath = d.root + "/strace.txt"
        let tracer = try ChildProcess.spawn(
            Self.strace!,
            [
                "-f", "-y", "-qq", "-s", "256", "-e", "trace=recvfrom,recvmsg,sendto,fdatasync",
                "-o", tracePath, "-p", String(pid),
            ],
            environment: ProcessInfo.processInfo.environment, inputs: [:], stdout: .devNull,
            stderr: .file(d.root + "/strace.err", append: false))
        defer {
            kill(tracer, SIGKILL)
            _ = ChildProcess.wait(tracer, timeout: 10)
        }
        // Attached once vaultd's replies show up in the trace.
        let deadline = Date().addingTimeInterval(20)
        var attached = false
        while Date() < deadline && !attached {
            _ = Daemon.answers(d.socketPath)
            attached = ((try? String(contentsOfFile: tracePath, encoding: .utf8)) ?? "").contains(
                "sendto(")
            if !attached { usleep(50_000) }
        }
        try #require(
            attached,
            "strace did not attach: \((try? String(contentsOfFile: d.root + "/strace.err", encoding: .utf8)) ?? "")"
        )

        // Four clients at once, so that group commits cover several writes.
        let clients = 4
        let each = 12
        let failures = LockedList()
        onThreads(clients) { c in
            do {
                let conn = try VarlinkConnection(path: d.socketPath)
                for i in 0..<each {
                    let secret = Data("secret \(c)-\(i)".utf8).base64EncodedString()
                    let outcomes = [
                        try conn.call(
                            "io.vaultd.Keychain.Add",
                            [
                                "class": "genericPassword",
                                "attributes": ["service": "durable", "account": "a\(c)-\(i)"],
                                "data": secret,
                            ]),
                        try conn.call(
                            "io.vaultd.Keychain.Update",
                            [
                                "class": "genericPassword",
                                "query": ["service": "durable", "account": "a\(c)-\(i)"],
                                "data": secret,
                            ]),
                        try conn.call(
                            "io.vaultd.Preferences.Set",
                            [
                                "domain": "com.example.durable", "key": "k\(c)",
                                "value": ["integer": i],
                            ]),
                    ]
                    for o in outcomes {
                        guard case .reply(let r) = o, r["error"] == nil else {
                            return failures.append("client \(c) write \(i): \(o)")
                        }
                    }
                }
            } catch {
                failures.append("client \(c): \(error)")
            }
        }
        #expect(failures.all.isEmpty, "\(failures.all)")
        usleep(200_000)  // strace writes its last lines
        kill(tracer, SIGINT)
        _ = ChildProcess.wait(tracer, timeout: 10)

        let lines = try String(contentsOfFile: tracePath, encoding: .utf8).split(separator: "\n")
        let (syncs, writes) = Self.parse(lines)
        #expect(
            writes.count == clients * each * 3, "durable writes found in the trace: \(writes.count)"
        )
        var unsynced: [String] = []
        for w in writes {
            guard let reply = w.reply else {
                unsynced.append("\(w.method) at line \(w.request + 1): no reply in the trace")
                continue
            }
            if !syncs.contains(where: { $0.start > w.request && $0.end < reply }) {
                unsynced.append(
                    "\(w.method): request at line \(w.request + 1), reply at line \(reply + 1), no WAL fdatasync between them"
                )
            }
        }
        #expect(
            unsynced.isEmpty,
            "\(unsynced.count) writes acknowledged before a WAL sync: \(unsynced.prefix(5))")
        // Group commit: fewer syncs than writes, and at least one.
        #expect(
            !syncs.isEmpty && syncs.count <= writes.count,
            "\(syncs.count) WAL syncs for \(writes.count) writes")
    }
}
