import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Sync of synchronizable items between two vaultds (two data directories) sharing one folder,
/// as two devices whose folder an engine replicates would: through `vaultctl sync` and the
/// keychain commands, waiting for each change to show on the other side.
@Suite struct SyncTests {
    /// Every wait for a change to cross: generous for a loaded machine (a pass takes
    /// milliseconds; the watcher wakes on the file's arrival).
    static let timeout = 30.0

    /// Two initialised, unlocked vaultds, the first in a new group in `folder`, the second
    /// joined through the pairing code; returns them once both are members.
    static func pair(folder: String) throws -> (Daemon, Daemon) {
        let a = try Daemon()
        let b = try Daemon()
        for d in [a, b] {
            let r = d.initialize()
            try #require(r.status == 0, "\(r)")
        }
        let made = a.ctl(["sync", "init", folder])
        try #require(made.status == 0, "\(made)")
        let join = b.ctl(["sync", "join", folder])
        try #require(join.status == 0, "\(join)")
        let code = try #require(
            join.stdoutText.split(separator: "\n").first { $0.contains("vaultctl sync approve") }?
                .split(separator: " ").last.map(String.init))
        let approve = a.ctl(["sync", "approve", code])
        try #require(approve.status == 0, "\(approve)")
        let joined = eventually(timeout: timeout) {
            b.syncStatus()?["state"] as? String == "member"
        }
        try #require(joined, "B never joined: \(String(describing: b.syncStatus()))\n\(b.log)")
        // Both hold the same group key.
        let fa = a.syncStatus()?["fingerprint"] as? String
        #expect(fa != nil && fa == b.syncStatus()?["fingerprint"] as? String)
        return (a, b)
    }

    static let work = ["--service", "api.example.com", "--account", "alice"]

    /// Runs `body` with a pair of devices in a new folder (`pair`), closed and removed after.
    static func withPair(_ body: (Daemon, Daemon, String) throws -> Void) throws {
        let folder = try TemporaryDirectory.make(prefix: "vaultd-sync")
        defer { TemporaryDirectory.remove(folder) }
        let (a, b) = try pair(folder: folder)
        defer {
            a.close()
            b.close()
        }
        try body(a, b, folder)
    }

    @Test func itemsAddedChangedAndDeletedOnEitherSideConverge() throws {
        try Self.withPair { a, b, folder in try itemsConverge(a, b, folder) }
    }

    func itemsConverge(_ a: Daemon, _ b: Daemon, _ folder: String) throws {

        // Added on A: a synchronizable item, one that is not, and a ThisDeviceOnly one
        // (which cannot be synchronizable: refused, as SecItemAdd refuses it).
        try #require(
            a.ctl(
                ["item", "add"] + Self.work + ["--label", "Work key", "--synchronizable"],
                stdin: Data("s3cret-A".utf8)
            ).status == 0)
        try #require(
            a.ctl(
                ["item", "add", "--service", "local.only", "--account", "alice"],
                stdin: Data("stays-here".utf8)
            ).status == 0)
        try #require(
            a.ctl(
                [
                    "item", "add", "--service", "device.only", "--account", "alice", "--accessible",
                    "whenUnlockedThisDeviceOnly",
                ], stdin: Data("bound".utf8)
            )
            .status == 0)
        let refused = a.ctl(
            [
                "item", "add", "--service", "device.sync", "--account", "alice", "--accessible",
                "afterFirstUnlockThisDeviceOnly", "--synchronizable",
            ],
            stdin: Data("x".utf8))
        #expect(refused.status == 65, "\(refused)")
        var crossed = eventually(timeout: Self.timeout) { b.secret(Self.work) == "s3cret-A" }
        #expect(crossed, "the item never reached B: \(b.log)")
        #expect(b.attributes(Self.work)?["label"] as? String == "Work key")
        #expect(b.attributes(Self.work)?["synchronizable"] as? Bool == true)
        // The dates came along, as the item was made on A.
        #expect(
            b.attributes(Self.work)?["creationDate"] as? String == a.attributes(Self.work)?[
                "creationDate"] as? String)

        // Changed on B (a label and the secret): back on A.
        try #require(
            b.ctl(
                ["item", "update"] + Self.work + ["--set-label", "Home key", "--secret-stdin"],
                stdin: Data("s3cret-B".utf8)
            ).status == 0)
        crossed = eventually(timeout: Self.timeout) {
            a.secret(Self.work) == "s3cret-B"
                && a.attributes(Self.work)?["label"] as? String == "Home key"
        }
        #expect(crossed, "B's change never reached A: \(a.log)")

        // B stopped: A adds and changes meanwhile; B, started and unlocked, catches up.
        #expect(b.stop() == 0)
        let second = ["--service", "mail.example.com", "--account", "bob"]
        try #require(
            a.ctl(["item", "add"] + second + ["--synchronizable"], stdin: Data("mail-pw".utf8))
                .status == 0)
        try b.start()
        try #require(b.unlock().status == 0)
        crossed = eventually(timeout: Self.timeout) { b.secret(second) == "mail-pw" }
        #expect(crossed, "B did not catch up after its restart: \(b.log)")

        // Deleted on A: gone from B. Added on B meanwhile: on A.
        try #require(a.ctl(["item", "delete"] + Self.work + ["--yes"]).status == 0)
        let third = ["--server", "git.example.com", "--protocol", "https", "--account", "carol"]
        try #require(
            b.ctl(
                ["item", "add"] + third + ["--synchronizable", "--comment", "from B"],
                stdin: Data("git-token".utf8)
            ).status == 0)
        crossed = eventually(timeout: Self.timeout) {
            b.ctl(["item", "get"] + Self.work).status == 44 && a.secret(third) == "git-token"
        }
        #expect(crossed, "the deletion or B's add did not cross: A \(a.log)\nB \(b.log)")
        #expect(a.attributes(third)?["comment"] as? String == "from B")

        // One item changed on both sides at once converges to one value on both.
        _ = a.ctl(["item", "update"] + second + ["--set-label", "label from A"])
        _ = b.ctl(["item", "update"] + second + ["--set-label", "label from B"])
        crossed = eventually(timeout: Self.timeout) {
            let la = a.attributes(second)?["label"] as? String
            return la != nil && la == b.attributes(second)?["label"] as? String && a.pending() == 0
                && b.pending() == 0
                && a.attributes(second)?["label"] as? String == b.attributes(second)?["label"]
                    as? String
        }
        #expect(
            crossed,
            "the concurrent updates did not converge: A \(String(describing: a.attributes(second))) B \(String(describing: b.attributes(second)))"
        )
        #expect(
            ["label from A", "label from B"].contains(
                a.attributes(second)?["label"] as? String ?? ""))

        // What was never synchronizable never crossed (every later change did).
        #expect(
            b.ctl(["item", "get", "--service", "local.only", "--account", "alice"]).status == 44)
        #expect(
            b.ctl(["item", "get", "--service", "device.only", "--account", "alice"]).status == 44)

        // The folder: only devices/ID/SEQUENCE.seg (and pairing files), and not one byte of
        // any service, account, label, access group or secret in any of them.
        let needles = [
            "api.example.com", "alice", "Work key", "Home key", "s3cret-A", "s3cret-B",
            "mail.example.com", "mail-pw", "git.example.com",
            "carol", "git-token", "from B", "local.only", "stays-here", "device.only", "label from",
        ]
        var files = 0
        let names = try #require(FileManager.default.subpaths(atPath: folder))
        for name in names {
            var isDir: ObjCBool = false
            _ = FileManager.default.fileExists(atPath: folder + "/" + name, isDirectory: &isDir)
            if isDir.boolValue {
                #expect(
                    name == "devices"
                        || name.range(of: #"^devices/[0-9a-f]{32}$"#, options: .regularExpression)
                            != nil,
                    "\(name)")
                continue
            }
            #expect(
                name.range(
                    of: #"^devices/[0-9a-f]{32}/([0-9a-f]{16}\.seg|grant-[0-9a-f]{32}|ack)$"#,
                    options: .regularExpression) != nil, "\(name)")
            let bytes = try Data(contentsOf: URL(fileURLWithPath: folder + "/" + name))
            for n in needles { #expect(bytes.range(of: Data(n.utf8)) == nil, "\(n) is in \(name)") }
            files += 1
        }
        #expect(files >= 6, "\(names)")
        let devices = try #require(a.syncStatus()?["devices"] as? [[String: Any]])
        #expect(devices.count == 2)
        #expect(devices.allSatisfy { $0["lastSeen"] is String && ($0["rejected"] as? Int) == 0 })
    }

    @Test func aTamperedSegmentIsIgnoredAndLoggedAndSyncGoesOn() throws {
        try Self.withPair { a, b, folder in try tamperedSegment(a, b, folder) }
    }

    func tamperedSegment(_ a: Daemon, _ b: Daemon, _ folder: String) throws {
        try #require(
            a.ctl(["item", "add"] + Self.work + ["--synchronizable"], stdin: Data("first".utf8))
                .status == 0)
        var crossed = eventually(timeout: Self.timeout) { b.secret(Self.work) == "first" }
        try #require(crossed, "\(b.log)")

        // A's newest segment with one byte changed, put beside it as A's next: B refuses it.
        let aID = try #require(a.syncStatus()?["deviceID"] as? String)
        let dir = folder + "/devices/" + aID
        let segments = try FileManager.default.contentsOfDirectory(atPath: dir).filter {
            $0.hasSuffix(".seg")
        }.sorted()
        var bytes = try Data(contentsOf: URL(fileURLWithPath: dir + "/" + segments.last!))
        bytes[bytes.count / 2] ^= 0x40
        let forged = String(format: "%016llx.seg", UInt64(segments.count + 1))
        // Moved into place whole, as an engine does (a file still growing would be tried again).
        try bytes.write(to: URL(fileURLWithPath: dir + "/" + forged), options: .atomic)
        let rejected = eventually(timeout: Self.timeout) {
            (b.syncStatus()?["devices"] as? [[String: Any]])?.first {
                $0["deviceID"] as? String == aID
            }?["rejected"] as? Int == 1
        }
        #expect(rejected, "\(String(describing: b.syncStatus()))")
        #expect(b.log.contains("ignored segment \(forged) of device \(aID)"), "\(b.log)")
        #expect(b.secret(Self.work) == "first")

        // A's next change still crosses: the forged file, which A did not write, is moved out
        // of the way, and A writes its own segment under that name (another file, so B reads
        // it, though it refused the forged one of the same size).
        try #require(
            a.ctl(["item", "update"] + Self.work + ["--secret-stdin"], stdin: Data("second".utf8))
                .status == 0)
        crossed = eventually(timeout: Self.timeout) { b.secret(Self.work) == "second" }
        #expect(crossed, "\(b.log)")
        // Logged once, not on every pass.
        #expect(b.log.components(separatedBy: "ignored segment").count == 2, "\(b.log)")
    }

    /// Bad input is refused with the usage or input status, saying why; an app may not sync;
    /// `sync status` prints the group; `sync leave` forgets it and keeps the items.
    @Test func theCommandsRefuseBadInputAndLeaveForgetsTheGroup() throws {
        try Self.withPair { a, b, folder in
            #expect(a.ctl(["sync", "init"]).status == 64)
            #expect(a.ctl(["sync", "frobnicate"]).status == 64)
            let c = try Daemon()
            defer { c.close() }
            try #require(c.initialize().status == 0)
            let missing = c.ctl(["sync", "init", folder + "/no-such-dir"])
            #expect(
                missing.status == 65 && missing.stderr.contains("is not a directory"), "\(missing)")
            let taken = c.ctl(["sync", "init", folder])
            #expect(
                taken.status == 65 && taken.stderr.contains("already holds a sync group"),
                "\(taken)")
            #expect(a.ctl(["sync", "approve", "12345"]).status == 65)
            let unknown = a.ctl([
                "sync", "approve", "--wait", "0", String(repeating: "ab", count: 32),
            ])
            #expect(
                unknown.status == 65 && unknown.stderr.contains("no join request")
                    && !unknown.stderr.contains("waiting"), "\(unknown)")
            // With a wait, it says what it waits for, and past the bound what to check.
            let waited = a.ctl([
                "sync", "approve", "--wait", "1", String(repeating: "ab", count: 32),
            ])
            #expect(
                waited.status == 65
                    && waited.stderr.contains("waiting up to 1 s for the join request"), "\(waited)"
            )
            #expect(
                waited.stderr.contains("none arrived within 1 s (is the folder shared"), "\(waited)"
            )
            let again = a.ctl(["sync", "init", folder])
            #expect(again.status == 65 && again.stderr.contains("already syncs"), "\(again)")

            let text = a.ctl(["sync", "status"])
            #expect(
                text.status == 0 && text.stdoutText.contains("sync: member")
                    && text.stdoutText.contains("group fingerprint: "), "\(text)")
            #expect(
                text.stdoutText.components(separatedBy: " segments, ").count == 3,
                "two device lines: \(text)")
            // Times in whole seconds or milliseconds (they printed the Double's exact
            // decimal: `…:51.2239999771118164Z`), in the text and the JSON alike.
            let time = #/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z$/#
            let seen = text.stdoutText.split(separator: "\n").compactMap {
                $0.firstMatch(of: #/last seen (\S+)/#).map { String($0.1) }
            }
            #expect(
                seen.count == 2
                    && seen.allSatisfy { $0 == "never" || $0.wholeMatch(of: time) != nil },
                "\(text)")
            let devices = (a.syncStatus()?["devices"] as? [[String: Any]]) ?? []
            for d in devices {
                if let t = d["lastSeen"] as? String {
                    #expect(t.wholeMatch(of: time) != nil, "lastSeen \(t)")
                }
            }
            if let t = a.syncStatus()?["lastPass"] as? String {
                #expect(t.wholeMatch(of: time) != nil, "lastPass \(t)")
            }

            try #require(
                a.ctl(["item", "add"] + Self.work + ["--synchronizable"], stdin: Data("kept".utf8))
                    .status == 0)
            let crossed = eventually(timeout: Self.timeout) { b.secret(Self.work) == "kept" }
            try #require(crossed, "\(b.log)")
            let leave = b.ctl(["sync", "leave"])
            #expect(leave.status == 0, "\(leave)")
            #expect(b.syncStatus()?["state"] as? String == "off")
            #expect(b.ctl(["sync", "status"]).stdoutText.hasPrefix("sync: off"))
            #expect(b.secret(Self.work) == "kept")
            #expect(b.ctl(["sync", "leave"]).status != 0)
            // B no longer follows the group: A's next change stays A's.
            try #require(
                a.ctl(
                    ["item", "update"] + Self.work + ["--secret-stdin"], stdin: Data("after".utf8)
                ).status == 0)
            let written = eventually(timeout: Self.timeout) {
                a.pending() == 0 && (a.syncStatus()?["lastPass"] as? String) != nil
            }
            #expect(written)
            #expect(b.secret(Self.work) == "kept")
        }
    }

    /// `sync approve` run before the join request has reached this device's copy of the
    /// folder waits for it (saying so on stderr) and approves it once it arrives, instead of
    /// failing: here B joins through its own copy of the folder, and the join file is carried
    /// to A's by hand once A's approve says it is waiting, as Syncthing would carry it.
    @Test func anApprovalWaitsForTheJoinRequestToArrive() throws {
        let folderA = try TemporaryDirectory.make(prefix: "vaultd-sync")
        let folderB = try TemporaryDirectory.make(prefix: "vaultd-sync")
        defer {
            TemporaryDirectory.remove(folderA)
            TemporaryDirectory.remove(folderB)
        }
        let a = try Daemon()
        let b = try Daemon()
        defer {
            a.close()
            b.close()
        }
        for d in [a, b] { try #require(d.initialize().status == 0) }
        try #require(a.ctl(["sync", "init", folderA]).status == 0)
        // B's copy: what the folder held when B's Syncthing had carried A's first files. A's
        // vaultd may be writing a file there meanwhile (written under a temporary name, then
        // renamed): a copy that found a file gone is made again, as Syncthing would.
        var copied = false
        for _ in 0..<5 where !copied {
            copied =
                try ChildProcess.run(
                    "/bin/cp", ["-a", folderA + "/.", folderB],
                    environment: ["PATH": "/usr/bin:/bin"]
                ).status == 0
        }
        try #require(copied)
        let join = b.ctl(["sync", "join", folderB])
        try #require(join.status == 0, "\(join)")
        let code = try #require(
            join.stdoutText.split(separator: "\n").first { $0.contains("sync approve") }?.split(
                separator: " "
            ).last.map(String.init))
        let deviceB = try #require(b.syncStatus()?["deviceID"] as? String)

        let out = a.root + "/approve.out"
        let err = a.root + "/approve.err"
        let pid = try ChildProcess.spawn(
            Paths.tool("vaultctl"),
            ["--socket", a.socketPath, "sync", "approve", "--wait", "60", code],
            environment: a.environment, inputs: [:],
            stdout: .file(out, append: false), stderr: .file(err, append: false))
        let waiting = eventually(timeout: Self.timeout) {
            (try? String(contentsOfFile: err, encoding: .utf8))?.contains("waiting up to 60 s")
                == true
        }
        #expect(
            waiting,
            "approve did not say it waits: \((try? String(contentsOfFile: err, encoding: .utf8)) ?? "")"
        )
        #expect(ChildProcess.isAlive(pid), "approve ended before the join request arrived")
        // The join request arrives (by a rename, as Syncthing writes a finished file).
        let from = folderB + "/devices/" + deviceB + "/join"
        let into = folderA + "/devices/" + deviceB
        try FileManager.default.createDirectory(atPath: into, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: from, toPath: into + "/.join.tmp")
        try #require(rename(into + "/.join.tmp", into + "/join") == 0)
        let status = ChildProcess.wait(pid, timeout: Self.timeout)
        let output = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        #expect(
            status == 0 && output.hasPrefix("approved device \(deviceB)"),
            "status \(String(describing: status)): \(output)")
        // A wrote the member record and the grant for B into its own copy of the folder.
        let grants =
            (try? FileManager.default.contentsOfDirectory(
                atPath: folderA + "/devices/" + (a.syncStatus()?["deviceID"] as? String ?? "?")))
            ?? []
        #expect(grants.contains("grant-" + deviceB), "\(grants)")
    }

    /// 1,000 changes made on A (400 adds, 400 updates, 200 deletions, through one varlink
    /// connection), then a third device joins: it gets the 200 items that are left, each as
    /// last updated, and none of the deleted ones.
    @Test func aThirdDeviceJoiningAfterAThousandChangesGetsThemAll() throws {
        let folder = try TemporaryDirectory.make(prefix: "vaultd-sync")
        defer { TemporaryDirectory.remove(folder) }
        let (a, b) = try Self.pair(folder: folder)
        let c = try Daemon()
        defer {
            a.close()
            b.close()
            c.close()
        }
        let conn = try a.connect()
        func call(_ method: String, _ parameters: [String: Any]) throws {
            guard case .reply(let r) = try conn.call(method, parameters, timeout: 60),
                r["error"] == nil
            else {
                throw HarnessError("\(method) failed")
            }
        }
        func query(_ i: Int) -> [String: Any] {
            ["service": "svc\(i).example.com", "account": "user\(i)"]
        }
        for i in 0..<400 {
            var attributes = query(i)
            attributes["synchronizable"] = true
            try call(
                "io.vaultd.Keychain.Add",
                [
                    "class": "genericPassword", "attributes": attributes,
                    "data": Data("pw-\(i)".utf8).base64EncodedString(),
                ])
        }
        for i in 0..<400 {
            try call(
                "io.vaultd.Keychain.Update",
                [
                    "class": "genericPassword", "query": query(i),
                    "attributes": ["label": "updated \(i)"],
                ])
        }
        for i in 200..<400 {
            try call("io.vaultd.Keychain.Delete", ["class": "genericPassword", "query": query(i)])
        }

        let onB = eventually(timeout: 120) {
            b.syncStatus()?["items"] as? Int == 200 && b.pending() == 0 && a.pending() == 0
        }
        #expect(onB, "B: \(String(describing: b.syncStatus()))")

        try #require(c.initialize().status == 0)
        let join = c.ctl(["sync", "join", folder])
        let code = try #require(
            join.stdoutText.split(separator: "\n").first { $0.contains("sync approve") }?.split(
                separator: " "
            ).last.map(String.init))
        try #require(b.ctl(["sync", "approve", code]).status == 0)
        let start = Date()
        let onC = eventually(timeout: 120) {
            (c.ctl(["item", "list", "--json"]).jsonArray?.count ?? 0) == 200
        }
        let seconds = Date().timeIntervalSince(start)
        #expect(onC, "C: \(String(describing: c.syncStatus()))\n\(c.log)")
        let list = c.ctl(["item", "list", "--json"]).jsonArray ?? []
        let labels = Set(list.compactMap { $0["label"] as? String })
        #expect(labels == Set((0..<200).map { "updated \($0)" }))
        #expect(c.secret(["--service", "svc7.example.com", "--account", "user7"]) == "pw-7")
        #expect(
            c.ctl(["item", "get", "--service", "svc300.example.com", "--account", "user300"]).status
                == 44)
        var bytes = 0
        var segments = 0
        for name in FileManager.default.subpaths(atPath: folder) ?? [] where name.hasSuffix(".seg")
        {
            segments += 1
            bytes +=
                (try? FileManager.default.attributesOfItem(atPath: folder + "/" + name)[.size]
                    as? Int) ?? 0
        }
        print(
            "sync: a third device got 200 items from 1,000 changes in \(Int(seconds * 1000)) ms; the folder holds \(segments) segments, \(bytes) bytes"
        )
    }
}

extension SyncTests {
    /// Three devices; `vaultctl sync remove` on A removes C: B follows the removal and the new
    /// key, C's status says it was removed, what A adds afterwards reaches B and not C, and
    /// what C adds afterwards reaches no one.
    @Test func aRemovedDeviceGetsNothingWrittenAfterItsRemoval() throws {
        let folder = try TemporaryDirectory.make(prefix: "vaultd-sync")
        defer { TemporaryDirectory.remove(folder) }
        let (a, b) = try Self.pair(folder: folder)
        let c = try Daemon()
        defer {
            a.close()
            b.close()
            c.close()
        }
        try #require(c.initialize().status == 0)
        let join = c.ctl(["sync", "join", folder])
        let code = try #require(
            join.stdoutText.split(separator: "\n").first { $0.contains("sync approve") }?.split(
                separator: " "
            ).last.map(String.init))
        try #require(b.ctl(["sync", "approve", code]).status == 0)
        let before = ["--service", "before.example.com", "--account", "c"]
        try #require(
            c.ctl(["item", "add"] + before + ["--synchronizable"], stdin: Data("from C".utf8))
                .status == 0)
        let crossed = eventually(timeout: Self.timeout) {
            a.secret(before) == "from C" && b.secret(before) == "from C"
        }
        try #require(crossed, "\(a.log)\n\(c.log)")
        let cID = try #require(c.syncStatus()?["deviceID"] as? String)

        #expect(a.ctl(["sync", "remove", "nonsense"]).status == 65)
        let mine = try #require(a.syncStatus()?["deviceID"] as? String)
        #expect(a.ctl(["sync", "remove", mine]).stderr.contains("sync leave"))
        let removed = a.ctl(["sync", "remove", cID])
        #expect(removed.status == 0 && removed.stdoutText.contains("generation 2"), "\(removed)")
        let after = ["--service", "after.example.com", "--account", "a"]
        try #require(
            a.ctl(["item", "add"] + after + ["--synchronizable"], stdin: Data("not for C".utf8))
                .status == 0)
        let onB = eventually(timeout: Self.timeout) { b.secret(after) == "not for C" }
        #expect(onB, "\(b.log)")
        let told = eventually(timeout: Self.timeout) {
            c.syncStatus()?["state"] as? String == "removed"
        }
        #expect(told, "\(String(describing: c.syncStatus()))")
        #expect(b.syncStatus()?["keyGeneration"] as? Int == 2)
        let cOnB = (b.syncStatus()?["devices"] as? [[String: Any]])?.first {
            $0["deviceID"] as? String == cID
        }
        #expect(cOnB?["membership"] as? String == "removed")
        #expect(b.secret(before) == "from C")
        let late = ["--service", "late.example.com", "--account", "c"]
        try #require(
            c.ctl(
                ["item", "add"] + late + ["--synchronizable"], stdin: Data("from removed C".utf8)
            ).status == 0)
        // A change after C's: once it has crossed, C's would have too.
        let last = ["--service", "last.example.com", "--account", "a"]
        try #require(
            a.ctl(["item", "add"] + last + ["--synchronizable"], stdin: Data("x".utf8)).status == 0)
        let lastOnB = eventually(timeout: Self.timeout) { b.secret(last) == "x" }
        #expect(lastOnB)
        #expect(c.secret(after) == nil && c.secret(last) == nil)
        #expect(b.secret(late) == nil && a.secret(late) == nil)
    }
}

extension Daemon {
    /// `vaultctl sync status --json`, parsed.
    func syncStatus() -> [String: Any]? { ctl(["sync", "status", "--json"]).jsonObject }

    /// Segments of every device not merged here yet (nil: no status).
    func pending() -> Int? {
        (syncStatus()?["devices"] as? [[String: Any]])?.reduce(0) {
            $0 + ($1["pending"] as? Int ?? 0)
        }
    }

    /// The secret `item get FILTERS` prints, nil when it fails.
    func secret(_ filters: [String]) -> String? {
        let r = ctl(["item", "get"] + filters)
        return r.status == 0 ? r.stdoutText : nil
    }

    /// The attributes `item get FILTERS --json` prints.
    func attributes(_ filters: [String]) -> [String: Any]? {
        ctl(["item", "get"] + filters + ["--json"]).jsonObject
    }
}
