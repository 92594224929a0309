import Foundation
import Testing
import VaultClient
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// A copy of an old vault.sqlite put over the live one while vaultd runs, in place (`cp`)
/// and renamed over it (`cp` then `mv`): vaultd refuses every write after it with
/// StoreReplaced and says so in its log, acknowledges none that would be lost, and leaves a
/// store that is not malformed (the WAL, whose frames belong to the file it opened, put
/// aside); renamed over, the store it had open is kept beside with every acknowledged write.
@Suite("store replaced underneath")
struct StoreReplacedTests {
    static func add(_ d: Daemon, _ service: String) -> ProcessResult {
        d.ctl(
            ["item", "add", "--service", service, "--account", "a", "--secret-fd", "3"],
            fds: [3: Data("v-\(service)".utf8)])
    }

    static func sqlite(_ d: Daemon, _ file: String, _ sql: String) -> String {
        d.run("sqlite3", [file, sql]).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test(arguments: ["in place", "renamed over"])
    func anOldCopyPutOverTheLiveStore(_ how: String) throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        for i in 1...3 { try #require(Self.add(d, "s\(i)").status == 0) }
        let store = d.dataDirectory + "/vault.sqlite"
        let old = d.root + "/old.sqlite"
        try FileManager.default.copyItem(atPath: store, toPath: old)
        for i in 4...6 { try #require(Self.add(d, "s\(i)").status == 0) }
        if how == "in place" {
            // cp writes into the open file itself (same inode).
            #expect(d.run("cp", [old, store]).status == 0)
        } else {
            #expect(d.run("cp", [old, d.dataDirectory + "/incoming"]).status == 0)
            #expect(rename(d.dataDirectory + "/incoming", store) == 0)
        }
        // No write is acknowledged any more: each says why.
        for service in ["s7", "s8"] {
            let r = Self.add(d, service)
            #expect(r.status == 1 && r.stderr.contains("StoreReplaced"), "\(how): \(r)")
        }
        let pref = d.ctl(["defaults", "write", "org.example.A", "k", "-int", "1"])
        #expect(pref.status == 1 && pref.stderr.contains("StoreReplaced"), "\(how): \(pref)")
        #expect(d.log.contains("STORE REPLACED"), "\(how): \(d.log)")
        #expect(d.stop() == 0)

        // What is left opens cleanly: the WAL was put aside, nothing was checkpointed into the copy.
        #expect(Self.sqlite(d, store, "PRAGMA integrity_check") == "ok", "\(how)")
        let files = try FileManager.default.contentsOfDirectory(atPath: d.dataDirectory)
        #expect(!files.contains("vault.sqlite-wal"), "\(how): \(files)")
        #expect(files.contains { $0.hasPrefix("vault.sqlite-wal.displaced-") }, "\(how): \(files)")
        if how == "renamed over" {
            // The store vaultd had open, kept with every write it acknowledged.
            let displaced = try #require(
                files.first { $0.hasPrefix("vault.sqlite.displaced-") }, "\(files)")
            #expect(
                Self.sqlite(d, d.dataDirectory + "/" + displaced, "PRAGMA integrity_check") == "ok")
            #expect(
                Self.sqlite(d, d.dataDirectory + "/" + displaced, "SELECT count(*) FROM items")
                    == "6")
            // Put back, it is the vault as it was at the last acknowledged write.
            try FileManager.default.removeItem(atPath: store)
            try FileManager.default.moveItem(
                atPath: d.dataDirectory + "/" + displaced, toPath: store)
            try d.start()
            #expect(d.statusJSON()?["items"] as? Int == 6)
            #expect(d.ctl(["item", "get", "--service", "s6"]).stdoutText == "v-s6")
            #expect(Self.add(d, "s7").status == 0)
        } else {
            try d.start()
            #expect(d.statusJSON() != nil, "vaultd serves the file now at the path")
        }
    }
}
