import Foundation
import Testing

/// Conflicts and rollbacks between two vaultds sharing a folder, through `vaultctl sync
/// conflicts` and `sync status` (docs/sync.md).
@Suite struct SyncConflictRollbackTests {
    static let work = SyncTests.work

    /// The segment files of a device's directory, by name (`d` running).
    static func segments(_ folder: String, _ d: Daemon) -> Set<String> {
        segments(in: "\(folder)/devices/\(d.syncStatus()?["deviceID"] as? String ?? "?")")
    }

    static func segments(in directory: String) -> Set<String> {
        let names = try? FileManager.default.contentsOfDirectory(atPath: directory)
        return Set((names ?? []).filter { $0.hasSuffix(".seg") })
    }

    /// Waits until `d` wrote a segment it did not have in `before`; returns its new names.
    static func newSegments(_ folder: String, _ d: Daemon, since before: Set<String>) throws
        -> Set<String>
    {
        var made = Set<String>()
        let wrote = eventually(timeout: SyncTests.timeout) {
            made = segments(folder, d).subtracting(before)
            return !made.isEmpty
        }
        try #require(wrote, "no new segment: \(d.log)")
        return made
    }

    static func conflicts(_ d: Daemon) -> [[String: Any]] {
        d.ctl(["sync", "conflicts", "--json", "--secrets"]).jsonObject?["conflicts"]
            as? [[String: Any]] ?? []
    }

    /// A and B change the item's secret while apart (A's change is kept from B's folder
    /// until B made its own, as an engine that had not carried it yet): both end with B's
    /// later value, `sync conflicts` lists A's on both with its value, and `restore` on A
    /// makes it current on both and settles the conflict.
    @Test func aConcurrentEditIsListedAndRestoredOnBothDevices() throws {
        try SyncTests.withPair { a, b, folder in
            try #require(
                a.ctl(
                    ["item", "add"] + Self.work + ["--synchronizable"], stdin: Data("original".utf8)
                )
                .status == 0)
            try #require(
                eventually(timeout: SyncTests.timeout) { b.secret(Self.work) == "original" })
            #expect(b.stop() == 0)
            let aDir = "\(folder)/devices/\(a.syncStatus()?["deviceID"] as? String ?? "?")"
            let before = Self.segments(folder, a)
            try #require(
                a.ctl(
                    ["item", "update"] + Self.work + ["--secret-stdin"], stdin: Data("from A".utf8)
                )
                .status == 0)
            let held = try Self.newSegments(folder, a, since: before)
            #expect(a.stop() == 0)
            let aside = try TemporaryDirectory.make(prefix: "vaultd-held")
            defer { TemporaryDirectory.remove(aside) }
            for name in held {
                try FileManager.default.moveItem(
                    atPath: "\(aDir)/\(name)", toPath: "\(aside)/\(name)")
            }

            try b.start()
            try #require(b.unlock().status == 0)
            let bBefore = Self.segments(folder, b)
            try #require(
                b.ctl(
                    ["item", "update"] + Self.work + ["--secret-stdin"], stdin: Data("from B".utf8)
                )
                .status == 0)
            _ = try Self.newSegments(folder, b, since: bBefore)
            for name in held {
                try FileManager.default.moveItem(
                    atPath: "\(aside)/\(name)", toPath: "\(aDir)/\(name)")
            }
            try a.start()
            try #require(a.unlock().status == 0)

            let converged = eventually(timeout: SyncTests.timeout) {
                a.secret(Self.work) == "from B" && b.secret(Self.work) == "from B"
                    && Self.conflicts(a).count == 1 && Self.conflicts(b).count == 1
            }
            try #require(
                converged,
                "A \(String(describing: a.secret(Self.work))) \(Self.conflicts(a)) B \(String(describing: b.secret(Self.work))) \(Self.conflicts(b))\n\(a.log)\n\(b.log)"
            )
            let onA = try #require(Self.conflicts(a).first)
            let id = try #require(onA["id"] as? String)
            #expect(Self.conflicts(b).first?["id"] as? String == id)
            #expect(onA["deviceID"] as? String == a.syncStatus()?["deviceID"] as? String)
            let fields = onA["fields"] as? [[String: Any]] ?? []
            let secret = fields.first { $0["field"] as? String == "secret" }
            #expect(secret?["value"] as? String == Data("from A".utf8).base64EncodedString())
            #expect(secret?["current"] as? String == Data("from B".utf8).base64EncodedString())
            // The text list names it and hides the secret unless asked.
            let text = b.ctl(["sync", "conflicts"])
            #expect(text.status == 0 && text.stdoutText.contains(id), "\(text)")
            #expect(!text.stdoutText.contains("from A"))
            let shown = b.ctl(["sync", "conflicts", "--secrets"]).stdoutText
            #expect(shown.contains("secret: 'from A' (current: 'from B')"), "\(shown)")
            #expect(
                b.ctl(["sync", "conflicts", "--json"]).jsonObject?["omitted"] as? Int == 0)

            let restored = a.ctl(["sync", "conflicts", "restore", id])
            #expect(restored.status == 0, "\(restored)")
            let back = eventually(timeout: SyncTests.timeout) {
                a.secret(Self.work) == "from A" && b.secret(Self.work) == "from A"
                    && Self.conflicts(a).isEmpty && Self.conflicts(b).isEmpty
            }
            #expect(back, "restore did not reach both: \(a.log)\n\(b.log)")
            let again = b.ctl(["sync", "conflicts", "dismiss", id])
            #expect(again.status == 65 && again.stderr.contains("no conflict"), "\(again)")
        }
    }

    /// A's directory put back to an older copy after B merged (and acknowledged) A's latest
    /// segment: B, started again and reading the folder anew, reports A as rolled back in
    /// `sync status` and its log, and keeps syncing.
    @Test func aDirectoryRolledBackToAnOlderCopyIsReported() throws {
        try SyncTests.withPair { a, b, folder in
            try #require(
                a.ctl(["item", "add"] + Self.work + ["--synchronizable"], stdin: Data("one".utf8))
                    .status == 0)
            try #require(eventually(timeout: SyncTests.timeout) { b.secret(Self.work) == "one" })
            let aID = a.syncStatus()?["deviceID"] as? String ?? "?"
            let aDir = "\(folder)/devices/\(aID)"
            // What an older copy of A's directory holds.
            let old = Self.segments(folder, a)
            let second = ["--service", "later.example.com", "--account", "bob"]
            try #require(
                a.ctl(["item", "add"] + second + ["--synchronizable"], stdin: Data("two".utf8))
                    .status == 0)
            try #require(eventually(timeout: SyncTests.timeout) { b.secret(second) == "two" })
            // B's acknowledgement of A's latest segment is in the folder.
            let newest = try #require(Self.segments(folder, a).subtracting(old).max())
            let acked = eventually(timeout: SyncTests.timeout) {
                (b.syncStatus()?["devices"] as? [[String: Any]])?.contains {
                    $0["deviceID"] as? String == aID && $0["pending"] as? Int == 0
                } == true
            }
            #expect(acked)
            #expect(a.stop() == 0)
            #expect(b.stop() == 0)
            // The older copy put in place of A's directory.
            for name in Self.segments(in: aDir) where !old.contains(name) {
                try FileManager.default.removeItem(atPath: "\(aDir)/\(name)")
            }
            try b.start()
            try #require(b.unlock().status == 0)
            var rolled: [String: Any]?
            let reported = eventually(timeout: SyncTests.timeout) {
                rolled = (b.syncStatus()?["rolledBack"] as? [[String: Any]])?.first
                return rolled != nil && b.log.contains("withheld or rolled back")
            }
            #expect(reported, "\(String(describing: b.syncStatus()))\n\(b.log)")
            #expect(rolled?["deviceID"] as? String == aID)
            #expect(
                (rolled?["acknowledged"] as? Int).map { String(format: "%016x.seg", $0) } == newest)
            #expect(rolled?["acknowledgedBy"] as? String == b.syncStatus()?["deviceID"] as? String)
            let text = b.ctl(["sync", "status"])
            #expect(text.stdoutText.contains("rolled back or withheld: device \(aID)"), "\(text)")
            // Sync goes on: B still serves its items, and its passes do not fail.
            #expect(b.secret(second) == "two")
            #expect(!b.log.contains("the pass failed"))
        }
    }
}
