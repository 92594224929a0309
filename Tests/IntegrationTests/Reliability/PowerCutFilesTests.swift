import Foundation
import Testing

/// Power cuts for the files vaultd writes outside SQLite (its device key, sync segments, acks
/// and membership records, a backup): vaultd runs under a real `strace`, recording every
/// write, sync, rename and unlink, while it is initialised, given a recovery key and a new
/// passphrase, made to sync, and backed up; `FileCrashModel` then replays every prefix of the trace and
/// checks that a cut at any point leaves each file whole (a version it held after a sync or a
/// rename, or nothing before it first was durable), and that everything is durable at the end.
/// (The store itself is `PowerCutTests`'s, in VaultCoreTests.)
@Suite(.tags(.system)) struct PowerCutFilesTests {
    @Test(
        .enabled(
            if: DurableAcknowledgementTests.strace != nil && getuid() == 0,
            "needs strace, and root to trace a non-dumpable vaultd"))
    func aCutAtAnyCallLeavesEveryFileWhole() throws {
        let d = try Daemon(start: false)
        defer { d.close() }
        let folder = d.root + "/sync-folder"
        let backups = d.root + "/backups"
        mkdir(folder, 0o700)
        mkdir(backups, 0o700)
        let trace = d.root + "/strace.txt"
        try d.start(wrapper: [
            DurableAcknowledgementTests.strace!, "-f", "-qq", "-y", "-xx", "-s", "2000000",
            "-e",
            "trace=openat,write,pwrite64,ftruncate,fsync,fdatasync,rename,renameat,renameat2,link,linkat,unlink,unlinkat,close",
            "-o", trace,
        ])
        let first = Data("first passphrase\n".utf8)
        let steps: [(String, ProcessResult)] = [
            ("init", d.ctl(["init", "--passphrase-fd", "3"], fds: [3: first])),
            ("sync init", d.ctl(["sync", "init", folder])),
            (
                "add",
                d.ctl(
                    ["item", "add", "--service", "s1", "--account", "a", "--synchronizable"],
                    stdin: Data("one".utf8))
            ),
            (
                "add",
                d.ctl(
                    ["item", "add", "--service", "s2", "--account", "a", "--synchronizable"],
                    stdin: Data("two".utf8))
            ),
            (
                "recovery-key create",
                d.ctl(["recovery-key", "create", "--passphrase-fd", "3"], fds: [3: first])
            ),
            (
                "passphrase change",
                d.ctl(
                    ["passphrase", "change", "--passphrase-fd", "3", "--new-passphrase-fd", "4"],
                    fds: [3: first, 4: Data("second passphrase\n".utf8)])
            ),
            (
                "backup",
                d.ctl(
                    ["backup", backups + "/vault.age", "--passphrase-fd", "3"],
                    fds: [3: Data("backup passphrase\n".utf8)])
            ),
        ]
        for (name, result) in steps {
            #expect(result.status == 0, "\(name): \(result)\nvaultd:\n\(d.log)")
        }
        // vaultd stops on SIGTERM (flushing, closing the store); strace then ends with it.
        let vaultd = try #require(d.wrappedPid, "no vaultd under strace")
        kill(vaultd, SIGTERM)
        #expect(d.stop(timeout: 30) != nil, "strace did not end after vaultd")
        let text = try String(contentsOfFile: trace, encoding: .utf8)
        var model = FileCrashModel(roots: [d.dataDirectory, folder, backups]) { path in
            // The space reserve holds no data (its blocks are what it keeps, fallocate'd).
            path.contains("/vault.sqlite") || path.hasSuffix("/space.reserve")
        }
        for call in TracedCall.parse(text) { model.replay(call) }
        model.finish()
        if !model.failures.isEmpty {
            try? FileManager.default.removeItem(atPath: "/tmp/vaultd-power-cut-trace.txt")
            try? FileManager.default.copyItem(
                atPath: trace, toPath: "/tmp/vaultd-power-cut-trace.txt")
        }
        #expect(model.failures.isEmpty, "\(model.failures.prefix(20).joined(separator: "\n"))")
        // The trace saw what it was meant to: vaultd's own files, synced and renamed.
        let watched = model.versions.keys.map { $0.replacingOccurrences(of: d.root, with: "") }
        #expect(watched.contains("/data/device.key"), "\(watched.sorted())")
        #expect(watched.contains { $0.hasSuffix("/ack") }, "\(watched.sorted())")
        #expect(watched.contains("/backups/vault.age"), "\(watched.sorted())")
        #expect(
            watched.contains { $0.hasPrefix("/sync-folder/") && $0.hasSuffix(".seg") },
            "\(watched.sorted())")
        #expect(model.calls > 20, "only \(model.calls) calls on watched files")
    }
}
