import Foundation
import TestSupport
import Testing
import VaultClient

#if canImport(Glibc)
import Glibc
#endif

/// Caches (docs/caches.md), on a real small filesystem: every test runs vaultd in a
/// mount namespace of its own whose cache volume is a 4 MiB tmpfs (`CacheVolume`); the apps
/// (copies of vault-example) run in that namespace too.
@Suite(.tags(.system)) struct CachesTests {
    static let appA = "org.example.A"
    static let appB = "org.example.B"
    static let kib: Int64 = 1024
    static let mib: Int64 = 1024 * 1024

    /// Settings with no automatic purge (free-space low-water 0, no budget).
    /// The cache root's CACHEDIR.TAG takes one page of the tmpfs.
    static let tagPage: Int64 = 4096
    static var noAutomaticPurge: [String: Any] {
        ["CacheFreeLowWaterBytes": 0, "CacheCheckIntervalSeconds": 0.2]
    }

    /// A volume daemon with an initialised vault and apps A and B installed.
    static func volume(_ settings: [String: Any], inodes: Int? = nil) throws -> (
        CacheVolume, a: String, b: String
    ) {
        let v = try CacheVolume(inodes: inodes, settings: settings)
        do {
            let i = v.ctl(["init", "--no-passphrase"])
            guard i.status == 0 else { throw HarnessError("init: \(i)") }
            let a = try v.placeExample("a")
            let b = try v.placeExample("b")
            try v.install(appA, exe: a)
            try v.install(appB, exe: b)
            return (v, a, b)
        } catch {
            v.close()
            throw error
        }
    }

    /// Collects purge events from `Vault.purgeEvents()` (VaultClient) in this process.
    /// `@unchecked Sendable`: its state is read and written under `lock`.
    final class PurgeObserver: @unchecked Sendable {
        private let lock = NSLock()
        private var seen: [PurgeEvent] = []
        private var task: Task<Void, Never>?
        let vault: Vault

        /// Subscribes, then waits until the subscription is live: it purges a probe file of app
        /// B (`probe` is B's executable) until the event arrives, and forgets that event.
        init(_ v: CacheVolume, probe: String) throws {
            vault = try Vault.connect(socketPath: v.socketPath)
            let stream = vault.purgeEvents()
            // On a thread of its own: the tests keep the cooperative pool busy.
            task = Task(executorPreference: ThreadExecutor()) { [weak self] in
                do {
                    for try await e in stream { self?.lock.withLock { self?.seen.append(e) } }
                } catch {}
            }
            let live = eventually(timeout: 30) {
                _ = v.inside(probe, ["cache", "write", "probe", "1"])
                _ = v.ctl(["cache", "purge", CachesTests.appB])
                return freed(CachesTests.appB) > 0
            }
            guard live else { throw HarnessError("the purge-event subscription never became live") }
            // The event seen may be an earlier probe's, with the latest probe's still on its
            // way (on a loaded machine): it would arrive after a plain removeAll and count in
            // the test. So a last purge of a size no probe has (3 pages; a probe frees one),
            // and every event up to its own is forgotten: events come in order.
            _ = v.inside(probe, ["cache", "write", "marker", "10000"])
            _ = v.ctl(["cache", "purge", CachesTests.appB])
            func isMarker(_ e: PurgeEvent) -> Bool {
                e.appID == CachesTests.appB && e.freedBytes > 4096
            }
            guard eventually(timeout: 30, { events.contains(where: isMarker) }) else {
                throw HarnessError("the marker purge's event never came: \(events)")
            }
            lock.withLock { seen.removeFirst(seen.lastIndex(where: isMarker)! + 1) }
        }

        deinit { task?.cancel() }

        var events: [PurgeEvent] { lock.withLock { seen } }

        func freed(_ app: String) -> Int64 {
            events.filter { $0.appID == app }.reduce(0) { $0 + $1.freedBytes }
        }
    }

    /// `touch -d` for each (relative name, date) inside `dir` (in the namespace).
    static func touch(_ v: CacheVolume, _ dir: String, _ dates: [(String, String)]) {
        for (name, date) in dates {
            let r = v.sh("touch -h -d \"$2\" \"$1\"", dir + "/" + name, date)
            #expect(r.status == 0, "touch \(name): \(r)")
        }
    }

    // MARK: Free space

    @Test func lowFreeSpacePurgesTheAppThatIsNotRunningFirstUntilHighWater() throws {
        let (v, a, b) = try Self.volume([
            "CacheFreeLowWaterBytes": Self.mib, "CacheFreeHighWaterBytes": 2 * Self.mib,
            "CacheCheckIntervalSeconds": 0.2,
        ])
        defer { v.close() }
        let observer = try PurgeObserver(v, probe: b)
        let start = try v.usage()
        #expect(start.capacityBytes == 4 * Self.mib, "\(start)")
        let cacheA = v.cacheRoot + "/" + Self.appA
        let cacheB = v.cacheRoot + "/" + Self.appB

        // A (not running) fills 1.5 MiB; its files are the *newest*, so only "not running
        // first" (not plain LRU) puts them first.
        for i in 1...6 {
            let w = v.inside(a, ["cache", "write", "a\(i)", "262144"])
            try #require(w.status == 0, "\(w)")
        }
        Self.touch(v, cacheA, (1...6).map { ("a\($0)", "2024-06-01 00:0\($0):00") })

        // B stays connected (running) and writes 1 MiB of old files: free space 1.5 MiB.
        let waitOutput = v.root + "/b-wait.out"
        let holder = try v.spawnInside(b, ["wait", "120"], output: waitOutput)
        defer { v.stop(holder) }
        let connected = eventually(timeout: 10) {
            (try? String(contentsOfFile: waitOutput, encoding: .utf8))?.contains(Self.appB) == true
        }
        try #require(
            connected,
            "B did not connect: \((try? String(contentsOfFile: waitOutput + ".err", encoding: .utf8)) ?? "")"
        )
        for i in 1...4 {
            let w = v.inside(b, ["cache", "write", "b\(i)", "262144"])
            try #require(w.status == 0, "\(w)")
        }
        Self.touch(v, cacheB, (1...4).map { ("b\($0)", "2020-01-01 00:0\($0):00") })
        try v.tick()  // a check of the policy, after the writes
        let before = try v.usage()
        #expect(before.files(Self.appA) == 6 && before.files(Self.appB) == 4, "\(before)")
        #expect(before.freeBytes >= Self.mib, "nothing should be purged above low-water: \(before)")
        #expect(observer.events.isEmpty, "\(observer.events)")

        // B writes 764 KiB more: free space falls to 768 KiB less the cache root's
        // CACHEDIR.TAG (one page), under the low-water mark.
        let crossing = v.inside(b, ["cache", "write", "b5", String(786432 - Self.tagPage)])
        try #require(crossing.status == 0, "\(crossing)")
        let purged = eventually(timeout: 10) { observer.freed(Self.appA) > 0 }
        #expect(purged, "no purge event; log:\n\(v.log)")
        try v.tick()  // one more check: it must purge nothing more

        let after = try v.usage()
        #expect(after.freeBytes >= 2 * Self.mib, "freed to the high-water mark: \(after)")
        #expect(
            after.files(Self.appB) == 5
                && after.bytes(Self.appB) == before.bytes(Self.appB) + 786432 - Self.tagPage,
            "the running app keeps its files: \(after)")
        #expect(after.files(Self.appA) == 1, "A: only what high-water needed goes: \(after)")
        // A's oldest first: a6 (the newest) is what remains.
        let left = v.sh("ls \"$1\"", cacheA)
        #expect(left.stdoutText == "a6\n", "\(left)")
        #expect(observer.events.allSatisfy { $0.appID == Self.appA }, "\(observer.events)")
        #expect(observer.freed(Self.appA) == 5 * 262144, "\(observer.events)")

        // The running app's next write succeeds: 960 KiB did not fit in the 768 KiB left
        // before the purge.
        let next = v.inside(b, ["cache", "write", "b6", "983040"])
        #expect(next.status == 0, "\(next)")
        #expect(try v.usage().files(Self.appB) == 6)
    }

    /// A file a process holds open (being written) or has mapped is not purged: removing it
    /// frees nothing until the process lets go (yet was counted as freed, so the purge stopped
    /// short and the next check purged more), and the process writes into a file no one can
    /// read again. B (not running) has the oldest files, 768 KiB held open by a writer and
    /// 256 KiB mapped by a reader; A has seven newer files of 256 KiB. Free space falls to
    /// 768 KiB (low-water 1 MiB): five of A's files go (free 2 MiB, the high-water mark), B's
    /// stay. A purge by hand leaves them too, until their processes end.
    @Test func filesOpenOrMappedByAProcessAreNotPurged() throws {
        let (v, a, b) = try Self.volume([
            "CacheFreeLowWaterBytes": Self.mib, "CacheFreeHighWaterBytes": 2 * Self.mib,
            "CacheCheckIntervalSeconds": 0.2,
        ])
        defer { v.close() }
        let observer = try PurgeObserver(v, probe: b)
        let cacheA = v.cacheRoot + "/" + Self.appA
        let cacheB = v.cacheRoot + "/" + Self.appB
        for i in 1...7 {
            let w = v.inside(a, ["cache", "write", "a\(i)", "262144"])
            try #require(w.status == 0, "\(w)")
        }
        Self.touch(v, cacheA, (1...7).map { ("a\($0)", "2022-01-0\($0) 00:00:00") })
        let writerOutput = v.root + "/writer.out"
        let readerOutput = v.root + "/reader.out"
        let writer = try v.spawnInside(
            "/bin/sh",
            [
                "-c", "exec 3>\"$1\"; head -c 786432 /dev/zero >&3; echo ready; exec sleep 300",
                "sh", cacheB + "/open.bin",
            ],
            output: writerOutput)
        defer { v.stop(writer) }
        try #require(v.sh("head -c 262144 /dev/zero > \"$1\"", cacheB + "/mapped.bin").status == 0)
        let reader = try v.spawnInside(
            "/usr/bin/python3",
            [
                "-c",
                "import mmap, sys, time\nf = open(sys.argv[1], 'rb')\nm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\nf.close()\nprint('ready', flush=True)\ntime.sleep(300)",
                cacheB + "/mapped.bin",
            ], output: readerOutput)
        defer { v.stop(reader) }
        let ready = eventually(timeout: 20) {
            [writerOutput, readerOutput].allSatisfy {
                (try? String(contentsOfFile: $0, encoding: .utf8))?.contains("ready") == true
            }
        }
        try #require(
            ready,
            "the holders did not start: \((try? String(contentsOfFile: readerOutput + ".err", encoding: .utf8)) ?? "")"
        )
        Self.touch(v, cacheB, [("open.bin", "2019-01-01"), ("mapped.bin", "2019-01-02")])
        let before = try v.usage()
        #expect(
            before.files(Self.appA) == 7 && before.files(Self.appB) == 2
                && before.freeBytes == 1_310_720 - Self.tagPage, "\(before)")

        // 508 KiB outside the cache root: free space 768 KiB less the CACHEDIR.TAG's page,
        // under the low-water mark.
        try #require(
            v.sh("head -c \(524288 - Self.tagPage) /dev/zero > \"$1/filler\"", v.outside).status
                == 0)
        #expect(
            eventually(timeout: 10) { observer.freed(Self.appA) > 0 }, "no purge; log:\n\(v.log)")
        try v.tick()  // one more check: it must purge nothing more
        let after = try v.usage()
        #expect(v.sh("ls \"$1\"", cacheA).stdoutText == "a6\na7\n", "A's five oldest go: \(after)")
        #expect(
            v.sh("ls \"$1\"", cacheB).stdoutText == "mapped.bin\nopen.bin\n",
            "B's files in use stay: \(after)")
        #expect(after.freeBytes == 2 * Self.mib, "\(after)")
        #expect(
            observer.events.allSatisfy { $0.appID == Self.appA }
                && observer.freed(Self.appA) == 5 * 262144, "\(observer.events)")

        // By hand: nothing of B's goes while it is in use, then all of it.
        let inUse = v.ctl(["cache", "purge", Self.appB])
        #expect(inUse.status == 0 && inUse.stdoutText == "freed 0 bytes in 0 file(s)\n", "\(inUse)")
        #expect(
            v.sh("stat -c %s \"$1/open.bin\" \"$1/mapped.bin\"", cacheB).stdoutText
                == "786432\n262144\n")
        v.stop(writer)
        v.stop(reader)
        let released = v.ctl(["cache", "purge", Self.appB])
        #expect(
            released.status == 0 && released.stdoutText == "freed 1048576 bytes in 2 file(s)\n",
            "\(released)")
    }

    /// Usage counts what `du` counts, and a purge reports what it frees: bytes allocated on
    /// disk (a sparse file counts its pages, not its length), a file with two names in the
    /// cache once (it had counted twice, and its first name's removal as freeing it all).
    @Test func usageAndPurgeFiguresAgreeWithDuAndTheVolume() throws {
        let (v, a, _) = try Self.volume(Self.noAutomaticPurge)
        defer { v.close() }
        let dir = try #require(v.cachePath(of: a))
        let setup = v.sh(
            """
            set -e
            cd "$1"
            truncate -s 100M sparse; dd if=/dev/urandom of=sparse bs=4096 count=2 seek=10 conv=notrunc 2>/dev/null
            head -c 50000 /dev/zero > h1; mkdir sub; ln h1 sub/h2; ln h1 h3
            head -c 5000 /dev/zero > sub/plain
            ln -s "$(head -c 300 /dev/zero | tr '\\0' x)" longlink
            """, dir)
        try #require(setup.status == 0, "\(setup)")
        let du = {
            Int64(
                v.sh("du -B1 -s \"$1\" | cut -f1", dir).stdoutText.trimmingCharacters(
                    in: .whitespacesAndNewlines)) ?? -1
        }
        let before = try v.usage()
        #expect(du() == 8192 + 53248 + 8192 + 4096, "the files as planned")
        #expect(
            before.bytes(Self.appA) == du() && before.files(Self.appA) == 6, "\(before) du \(du())")
        #expect(
            before.capacityBytes - before.freeBytes == du() + Self.tagPage,
            "the cache and the root's CACHEDIR.TAG: \(before)")

        let purge = v.ctl(["cache", "purge", Self.appA])
        let after = try v.usage()
        #expect(
            purge.status == 0
                && purge.stdoutText == "freed \(before.bytes(Self.appA)) bytes in 6 file(s)\n",
            "\(purge)")
        #expect(
            after.freeBytes - before.freeBytes == before.bytes(Self.appA)
                && after.bytes(Self.appA) == 0, "\(before) → \(after)")
    }

    /// Many small files can use up a volume's inodes before its bytes: then nothing can be
    /// written ("No space left on device") with most of the bytes free, and vaultd, watching
    /// bytes only, would never purge. Free inodes count as free space: under 5 % of them free,
    /// the purge goes (in the same order) until 10 % are. A tmpfs of 200 inodes; A (not
    /// running) has 100 old one-byte files, B fills the rest with newer ones until the
    /// volume refuses; A's 20 oldest go, B's stay, and B can write again.
    @Test func runningOutOfInodesPurgesLikeRunningOutOfBytes() throws {
        let (v, a, b) = try Self.volume(["CacheCheckIntervalSeconds": 0.2], inodes: 200)
        defer { v.close() }
        let cacheA = v.cacheRoot + "/" + Self.appA
        let cacheB = v.cacheRoot + "/" + Self.appB
        try #require(
            v.inside(a, ["cache", "path"]).status == 0
                && v.inside(b, ["cache", "path"]).status == 0)
        let fill = v.inside(
            "/usr/bin/python3",
            [
                "-c",
                """
                import os, sys
                a, b = sys.argv[1], sys.argv[2]
                for i in range(100):
                    with open(f"{a}/a{i:03}", "w") as f: f.write("x")
                    os.utime(f"{a}/a{i:03}", (1577836800 + i * 60, 1577836800 + i * 60))
                n = 0
                try:
                    while True:
                        with open(f"{b}/b{n:03}", "w") as f: f.write("x")
                        n += 1
                except OSError as e:
                    print(n, e.errno)
                """, cacheA, cacheB,
            ])
        try #require(
            fill.status == 0 && fill.stdoutText.hasSuffix(" 28\n"),
            "B's writes end in ENOSPC: \(fill)")
        let written = Int(fill.stdoutText.split(separator: " ")[0])!
        let freeInodes = {
            Int(
                v.sh("stat -f -c %d \"$1\"", v.volume).stdoutText.trimmingCharacters(
                    in: .whitespacesAndNewlines)) ?? -1
        }
        #expect(
            eventually(timeout: 10) { freeInodes() >= 20 },
            "free inodes \(freeInodes()); log:\n\(v.log)")
        try v.tick()  // one more check: it must purge nothing more
        #expect(freeInodes() == 20, "only to the high-water mark")
        let leftA = v.sh("ls \"$1\"", cacheA).stdoutText.split(separator: "\n")
        #expect(
            leftA.count == 80 && leftA.first == "a020", "A's twenty oldest go: \(leftA.prefix(3))")
        #expect(v.sh("ls \"$1\" | wc -l", cacheB).stdoutText == "\(written)\n", "B's files stay")
        let again = v.inside(b, ["cache", "write", "again", "10"])
        #expect(again.status == 0, "\(again)")
    }

    // MARK: What a purge never touches, and what never stops it

    @Test func aPurgeNeverFollowsSymlinksNorStopsAtOddEntries() throws {
        let (v, a, _) = try Self.volume(Self.noAutomaticPurge)
        defer { v.close() }
        let dir = try #require(v.cachePath(of: a))
        #expect(dir == v.cacheRoot + "/" + Self.appA)
        #expect(v.inside(a, ["cache", "write", "plain", "8192"]).status == 0)

        // Outside the cache root: on the same tmpfs, and on the ordinary filesystem.
        let hostTarget = v.root + "/host-target.txt"
        try Data("host file".utf8).write(to: URL(fileURLWithPath: hostTarget))
        let setup = v.sh(
            """
            set -e
            C="$1"; O="$2"; H="$3"
            printf 'keep me' > "$O/target.txt"; touch -d '2021-03-04 05:06:07' "$O/target.txt"
            mkdir "$O/dir"; printf 'inner' > "$O/dir/inner.txt"; touch -d '2021-03-04 05:06:07' "$O/dir/inner.txt"
            printf 'hard' > "$O/hard.txt"
            ln -s "$O/target.txt" "$C/link-to-file"
            ln -s "$H" "$C/link-to-host-file"
            ln -s "$O/dir" "$C/link-to-dir"
            ln -s ../../outside "$C/relative-link-up"
            mkfifo "$C/fifo"
            python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$C/socket"
            printf 'x' > "$C/no-permission"; chmod 000 "$C/no-permission"
            mkdir "$C/locked"; printf 'y' > "$C/locked/inside"; chmod 000 "$C/locked"
            ln "$O/hard.txt" "$C/hard-link"
            printf 'z' > "$C/new
            line"
            mkdir -p "$C/sub/deeper"; head -c 5000 /dev/zero > "$C/sub/deeper/file"
            printf 'last' > "$C/zz-last"
            """, dir, v.outside, hostTarget)
        try #require(setup.status == 0, "\(setup)")
        let outsideBefore = v.sh(
            "stat -c '%n %Y %s' \"$1/target.txt\" \"$1/dir/inner.txt\" \"$1/hard.txt\"; cat \"$1/target.txt\"",
            v.outside)
        let hostMtime =
            try FileManager.default.attributesOfItem(atPath: hostTarget)[.modificationDate] as? Date
        let entries = try v.usage().files(Self.appA)
        #expect(
            entries == 13,
            "every non-directory entry counts: \((try? v.usage())?.description ?? "?")")

        let purge = v.ctl(["cache", "purge", Self.appA])
        #expect(purge.status == 0, "\(purge)")
        #expect(purge.stdoutText.contains("in 13 file(s)"), "\(purge)")

        // Nothing outside was touched: content and mtimes as before.
        let outsideAfter = v.sh(
            "stat -c '%n %Y %s' \"$1/target.txt\" \"$1/dir/inner.txt\" \"$1/hard.txt\"; cat \"$1/target.txt\"",
            v.outside)
        #expect(
            outsideAfter.stdoutText == outsideBefore.stdoutText
                && outsideAfter.stdoutText.hasSuffix("keep me"),
            "\(outsideBefore.stdoutText) → \(outsideAfter.stdoutText)")
        #expect(
            v.sh("cat \"$1/dir/inner.txt\" \"$1/hard.txt\"", v.outside).stdoutText == "innerhard")
        #expect(try String(contentsOfFile: hostTarget, encoding: .utf8) == "host file")
        #expect(
            try FileManager.default.attributesOfItem(atPath: hostTarget)[.modificationDate] as? Date
                == hostMtime)
        #expect(v.sh("ls -A \"$1\"", v.volume).stdoutText == "caches\noutside\n")

        // Every entry in the cache went, whatever it was; directories stay, the app's own
        // directory too (still 0700).
        let left = v.sh("cd \"$1\" && find . ! -type d | sort; stat -c '%F %a' .", dir)
        #expect(left.stdoutText == "directory 700\n", "\(left)")
        #expect(try v.usage().files(Self.appA) == 0)
        // The app can write again at once.
        #expect(v.inside(a, ["cache", "write", "again", "100"]).status == 0)
    }

    /// What a purge and an uninstall must leave alone: bind mounts inside a cache (they lead to
    /// files outside the cache root; a purge had emptied them), of a directory on another
    /// filesystem and of one on the cache's own (the same st_dev: only the mount id tells it
    /// apart); and what they must survive: a
    /// tree 3000 directories deep (its recursion had crashed vaultd; its file is counted and
    /// purged like any other, see the Depth tests). The app's directory is kept 0700 and the
    /// user's even when it was there before with another mode.
    @Test func aMountInsideACacheIsLeftAloneAndAVeryDeepTreeCrashesNothing() throws {
        let (v, a, _) = try Self.volume(Self.noAutomaticPurge)
        defer { v.close() }
        let dir = try #require(v.cachePath(of: a))
        #expect(v.inside(a, ["cache", "write", "plain", "8192"]).status == 0)
        let host = v.root + "/bound"
        try FileManager.default.createDirectory(atPath: host, withIntermediateDirectories: true)
        try Data("precious".utf8).write(to: URL(fileURLWithPath: host + "/keep.txt"))
        let setup = v.sh(
            """
            set -e
            C="$1"; H="$2"; O="$3"
            mkdir "$C/mnt"; mount --bind "$H" "$C/mnt"
            mkdir "$O/same"; printf 'same filesystem' > "$O/same/keep.txt"
            mkdir "$C/same-fs"; mount --bind "$O/same" "$C/same-fs"
            test "$(stat -c %d "$C/same-fs")" = "$(stat -c %d "$C")"
            python3 -c '
            import os, sys
            fd = os.open(sys.argv[1], os.O_RDONLY)
            for i in range(3000):
                os.mkdir("d", dir_fd=fd); nfd = os.open("d", os.O_RDONLY, dir_fd=fd); os.close(fd); fd = nfd
            f = os.open("deep.bin", os.O_WRONLY | os.O_CREAT, dir_fd=fd); os.write(f, b"x" * 4096); os.close(f)
            ' "$C"
            chmod 777 "$C"
            """, dir, host, v.outside)
        try #require(setup.status == 0, "\(setup)")
        defer { _ = v.sh("umount \"$1/mnt\" \"$1/same-fs\" 2>/dev/null; true", dir) }
        let sameFS = { v.sh("cat \"$1/same/keep.txt\"", v.outside).stdoutText }
        // The bound files are not the app's: not counted; `plain` and `deep.bin` are.
        #expect(try v.usage().files(Self.appA) == 2, "\((try? v.usage())?.description ?? "?")")
        #expect(v.inside(a, ["cache", "path"]).status == 0)
        #expect(v.sh("stat -c %a \"$1\"", dir).stdoutText == "700\n")

        let purge = v.ctl(["cache", "purge", Self.appA])
        #expect(purge.status == 0 && purge.stdoutText.contains("in 2 file(s)"), "\(purge)")
        #expect(try String(contentsOfFile: host + "/keep.txt", encoding: .utf8) == "precious")
        #expect(sameFS() == "same filesystem")
        #expect(v.ctl(["app", "uninstall", Self.appA]).status == 0)
        #expect(try String(contentsOfFile: host + "/keep.txt", encoding: .utf8) == "precious")
        #expect(sameFS() == "same filesystem")
        #expect(v.ctl(["status"]).status == 0, "vaultd died: \(v.log)")
    }

    // MARK: Depth

    /// A cache tree deeper than any full path (3000 directories; PATH_MAX is 4096 bytes) is
    /// counted, purged and removed at uninstall to its bottom. Two chains part at depth 500, so
    /// the walk climbs back 2500 levels from the first before it goes down the second. Files
    /// (tmpfs pages of 4 KiB): `top` 100 B at depth 0, `at-200` 5000 B, `at-300` 1 B, and
    /// `bottom` 12 KiB and 1 B at depth 3000 of each chain.
    @Test func aTreeThousandsOfDirectoriesDeepIsCountedPurgedAndRemovedAtUninstall() throws {
        let (v, a, _) = try Self.volume(Self.noAutomaticPurge)
        defer { v.close() }
        let dir = try #require(v.cachePath(of: a))
        let top = try DeepTree.open(try v.visible(dir))
        defer { close(top) }
        try DeepTree.write(in: top, "top", size: 100)
        let at200 = try DeepTree.chain(in: top, depth: 200)
        defer { close(at200) }
        try DeepTree.write(in: at200, "at-200", size: 5000)
        let at300 = try DeepTree.chain(in: at200, depth: 100)
        defer { close(at300) }
        try DeepTree.write(in: at300, "at-300", size: 1)
        let fork = try DeepTree.chain(in: at300, depth: 200)
        defer { close(fork) }
        for (branch, size) in [("a", 12288), ("b", 1)] {
            let bottom = try DeepTree.chain(in: fork, name: branch, depth: 2500)
            defer { close(bottom) }
            try DeepTree.write(in: bottom, "bottom", size: size)
        }
        let expectedBytes: Int64 = 4096 + 8192 + 4096 + 12288 + 4096

        let usage = try v.usage()
        #expect(
            usage.files(Self.appA) == 5 && usage.bytes(Self.appA) == expectedBytes,
            "every depth counts: \(usage)")

        let purge = v.ctl(["cache", "purge", Self.appA])
        #expect(
            purge.status == 0 && purge.stdoutText == "freed \(expectedBytes) bytes in 5 file(s)\n",
            "\(purge)")
        #expect(try v.usage().files(Self.appA) == 0)
        for branch in ["a", "b"] {
            let bottom = try #require(
                DeepTree.descend(from: fork, name: branch, depth: 2500),
                "a purge removes files, not directories")
            defer { close(bottom) }
            #expect(DeepTree.names(in: bottom).isEmpty, "branch \(branch)")
        }
        #expect(
            DeepTree.names(in: at300) == ["d"] && DeepTree.names(in: at200) == ["d"]
                && DeepTree.names(in: top) == ["d"])

        // Something at the bottom again, then the uninstall: the app's directory goes, all of it.
        let bottom = try #require(DeepTree.descend(from: fork, name: "a", depth: 2500))
        try DeepTree.write(in: bottom, "again", size: 1)
        close(bottom)
        let uninstall = v.ctl(["app", "uninstall", Self.appA])
        #expect(uninstall.status == 0, "\(uninstall)")
        #expect(
            v.sh("test -e \"$1\" || test -L \"$1\"", dir).status != 0,
            "A's cache directory survived the uninstall: \(DeepTree.names(in: top))")
        #expect(v.ctl(["status"]).status == 0, "vaultd died: \(v.log)")
    }

    /// Past the old depth limit (256) the walk is as careful as above it. At depths 300 and
    /// 3000: symlinks to a file and to a directory outside the cache root (absolute, and at 300
    /// relative, climbing out), a hard link to a file outside; at 300 a bind mount of a
    /// directory on the host. The links are entries (counted, purged, removed as links); what
    /// they lead to is untouched; the mount is neither counted nor entered, at purge or uninstall.
    @Test func symlinksAndAMountDeeperThanTheOldLimitLeadNowhereOutside() throws {
        let (v, a, _) = try Self.volume(Self.noAutomaticPurge)
        defer { v.close() }
        let dir = try #require(v.cachePath(of: a))
        let host = v.root + "/bound"
        try FileManager.default.createDirectory(atPath: host, withIntermediateDirectories: true)
        try Data("precious".utf8).write(to: URL(fileURLWithPath: host + "/keep.txt"))
        let outside = v.sh(
            """
            set -e
            O="$1"
            printf 'keep me' > "$O/target.txt"; touch -d '2021-03-04 05:06:07' "$O/target.txt"
            mkdir "$O/dir"; printf 'inner' > "$O/dir/inner.txt"; touch -d '2021-03-04 05:06:07' "$O/dir/inner.txt"
            printf 'hard' > "$O/hard.txt"
            """, v.outside)
        try #require(outside.status == 0, "\(outside)")
        let outsideState = {
            v.sh(
                "cd \"$1\" && stat -c '%n %Y %s' target.txt dir dir/inner.txt hard.txt && cat target.txt dir/inner.txt hard.txt",
                v.outside
            ).stdoutText
        }
        let outsideBefore = outsideState()

        let top = try DeepTree.open(try v.visible(dir))
        defer { close(top) }
        let outsideFD = try DeepTree.open(try v.visible(v.outside))
        defer { close(outsideFD) }
        let at300 = try DeepTree.chain(in: top, depth: 300)
        defer { close(at300) }
        let at3000 = try DeepTree.chain(in: at300, depth: 2700)
        defer { close(at3000) }
        for level in [at300, at3000] {
            try DeepTree.symlink(in: level, "link-to-file", to: v.outside + "/target.txt")
            try DeepTree.symlink(in: level, "link-to-dir", to: v.outside + "/dir")
            guard linkat(outsideFD, "hard.txt", level, "hard-link", 0) == 0 else {
                throw HarnessError("linkat: \(String(cString: strerror(errno)))")
            }
        }
        // From depth 300 of the app's directory, 302 levels up is the volume.
        try DeepTree.symlink(
            in: at300, "link-up", to: String(repeating: "../", count: 302) + "outside/target.txt")
        guard mkdirat(at300, "mnt", 0o700) == 0 else {
            throw HarnessError("mkdirat: \(String(cString: strerror(errno)))")
        }
        let mountPoint = dir + String(repeating: "/d", count: 300) + "/mnt"
        let mount = v.sh("mount --bind \"$1\" \"$2\"", host, mountPoint)
        try #require(mount.status == 0, "\(mount)")
        defer { _ = v.sh("umount \"$1\" 2>/dev/null; true", mountPoint) }
        #expect(
            v.sh("cat \"$1/keep.txt\"", mountPoint).stdoutText == "precious",
            "the mount is in place")

        // 7 entries: 4 at depth 300, 3 at 3000; the bound file is not the app's.
        let usage = try v.usage()
        #expect(usage.files(Self.appA) == 7, "\(usage)")
        let purge = v.ctl(["cache", "purge", Self.appA])
        #expect(purge.status == 0 && purge.stdoutText.contains("in 7 file(s)"), "\(purge)")
        #expect(
            DeepTree.names(in: at300) == ["d", "mnt"] && DeepTree.names(in: at3000).isEmpty,
            "\(DeepTree.names(in: at300)) \(DeepTree.names(in: at3000))")
        #expect(outsideState() == outsideBefore, "\(outsideBefore) → \(outsideState())")
        #expect(try String(contentsOfFile: host + "/keep.txt", encoding: .utf8) == "precious")

        // The links again, then the uninstall: it removes everything but the mount point and
        // the directories above it, and nothing outside.
        for level in [at300, at3000] {
            try DeepTree.symlink(in: level, "link-to-file", to: v.outside + "/target.txt")
            try DeepTree.symlink(in: level, "link-to-dir", to: v.outside + "/dir")
        }
        #expect(v.ctl(["app", "uninstall", Self.appA]).status == 0)
        #expect(outsideState() == outsideBefore, "\(outsideBefore) → \(outsideState())")
        #expect(try String(contentsOfFile: host + "/keep.txt", encoding: .utf8) == "precious")
        #expect(try FileManager.default.contentsOfDirectory(atPath: host) == ["keep.txt"])
        #expect(DeepTree.names(in: at300) == ["mnt"], "\(DeepTree.names(in: at300))")
        #expect(v.ctl(["status"]).status == 0, "vaultd died: \(v.log)")
    }

    /// A purge's cost grows with the tree, not with depth × files: 5000 nested directories
    /// with an (empty) file on each level are purged in well under a second here. Removing
    /// each file by going down from the app's directory took 26 s for 2500 levels, and
    /// minutes for 5000, with the purge lock held (so also no uninstall).
    @Test func aDeepChainWithAFileOnEveryLevelIsPurgedInOneWalk() throws {
        let (v, a, _) = try Self.volume(Self.noAutomaticPurge)
        defer { v.close() }
        let dir = try #require(v.cachePath(of: a))
        var level = try DeepTree.open(try v.visible(dir))
        for _ in 0..<5000 {
            try DeepTree.write(in: level, "f", size: 0)
            let next = try DeepTree.chain(in: level, depth: 1)
            close(level)
            level = next
        }
        close(level)
        #expect(try v.usage().files(Self.appA) == 5000)

        // The 30 s is a watchdog, not a measurement: a walk down per file (depth²) took
        // over a minute here; one walk takes well under a second.
        let purge = v.ctl(["cache", "purge", Self.appA], timeout: 30)
        #expect(
            purge.status == 0 && purge.stdoutText == "freed 0 bytes in 5000 file(s)\n", "\(purge)")
        #expect(try v.usage().files(Self.appA) == 0)
    }

    /// Whether a racing thread is to stop (for `aDirectoryMovedOutDuringAnUninstallLeadsTheWalkNowhere`).
    final class StopFlag: @unchecked Sendable {
        private let lock = NSLock()
        private var stopped = false
        var isSet: Bool { lock.withLock { stopped } }
        func set() { lock.withLock { stopped = true } }
    }

    /// An app that moves a directory out of its cache while an uninstall removes what is below
    /// it. Past its window of open fds (16 levels) the walk climbs back through "..", and from
    /// the moved directory ".." is now `outside/victim`, which holds entries of the same names
    /// as the directory the walk came down through: the walk must see that it is not that
    /// directory and skip what was left of it (and log it), not remove the victim's entries.
    /// Ten rounds (install, fill, uninstall while moving), then an uninstall in peace
    /// removes everything.
    @Test func aDirectoryMovedOutDuringAnUninstallLeadsTheWalkNowhere() throws {
        let (v, a, _) = try Self.volume(Self.noAutomaticPurge)
        defer { v.close() }
        let dir = v.cacheRoot + "/" + Self.appA
        let names = (0..<20).map { "f\($0)" }
        let victimPath = v.outside + "/victim"
        try #require(v.sh("mkdir \"$1\"", victimPath).status == 0)
        let victim = try DeepTree.open(try v.visible(victimPath))
        defer { close(victim) }
        for name in names { try DeepTree.write(in: victim, name, size: 1) }

        for round in 1...10 {
            if round > 1 { try v.install(Self.appA, exe: a) }
            try #require(v.ctl(["cache", "path", Self.appA]).stdoutText == dir + "\n")
            // (What an earlier round skipped is there again.) At depth 300, `parent` holds
            // f0…f9, X, f10…f19 (X in the middle, whatever the order of a listing); X holds a
            // 40-level chain with 1000 empty files at its bottom.
            let top = try DeepTree.open(try v.visible(dir))
            defer { close(top) }
            let parent = try DeepTree.chain(in: top, depth: 300)
            defer { close(parent) }
            for name in names.prefix(10) {
                try DeepTree.write(in: parent, name, size: 1, replacing: true)
            }
            let x = try DeepTree.chain(in: parent, name: "X", depth: 1)
            let bottom = try DeepTree.chain(in: x, depth: 40)
            close(x)
            for i in 0..<1000 { try DeepTree.write(in: bottom, "b\(i)", size: 0, replacing: true) }
            for name in names.suffix(10) {
                try DeepTree.write(in: parent, name, size: 1, replacing: true)
            }

            // The app: once the files at the bottom start to go (the walk is below X), X moves
            // into the victim.
            let stop = StopFlag()
            let done = DispatchSemaphore(value: 0)
            let mover = Thread {
                while !stop.isSet {
                    if !DeepTree.exists(in: bottom, "b0") || !DeepTree.exists(in: bottom, "b999") {
                        renameat(parent, "X", victim, "X")
                        break
                    }
                }
                done.signal()
            }
            mover.start()
            let uninstall = v.ctl(["app", "uninstall", Self.appA])
            stop.set()
            done.wait()
            close(bottom)
            #expect(uninstall.status == 0, "round \(round): \(uninstall)")
            // X, if it moved, goes (it is the app's); nothing else in the victim may have.
            #expect(v.sh("rm -rf \"$1/X\"", victimPath).status == 0)
            #expect(
                DeepTree.names(in: victim) == names.sorted(),
                "round \(round): the walk went on outside: \(DeepTree.names(in: victim))")
        }
        let skips = v.log.components(separatedBy: "was moved during the walk").count - 1
        #expect(skips > 0, "no round moved X in time: the test tested nothing; log:\n\(v.log)")
        #expect(v.ctl(["status"]).status == 0, "vaultd died: \(v.log)")

        // In peace: all of what the rounds left goes.
        try v.install(Self.appA, exe: a)
        let uninstall = v.ctl(["app", "uninstall", Self.appA])
        #expect(uninstall.status == 0, "\(uninstall)")
        #expect(
            v.sh("test -e \"$1\"", dir).status != 0, "A's cache directory survived the uninstall")
        #expect(DeepTree.names(in: victim) == names.sorted())
    }

    /// An app that replaces its own cache directory with a symlink to somewhere else gets
    /// nothing there counted, purged or removed; the uninstall removes the link only.
    @Test func anAppCacheDirectoryReplacedByASymlinkIsNeverFollowed() throws {
        let (v, a, b) = try Self.volume(Self.noAutomaticPurge)
        defer { v.close() }
        let dirB = try #require(v.cachePath(of: b))
        #expect(v.inside(a, ["cache", "write", "mine", "4096"]).status == 0)
        let swap = v.sh(
            """
            set -e
            mkdir "$2/victim"; head -c 100000 /dev/zero > "$2/victim/precious"; touch -d '2021-01-01' "$2/victim/precious"
            rmdir "$1"; ln -s "$2/victim" "$1"
            """, dirB, v.outside)
        try #require(swap.status == 0, "\(swap)")
        let before = v.sh("stat -c '%n %s %Y' \"$1/victim/precious\"", v.outside).stdoutText

        let usage = try v.usage()
        #expect(usage.files(Self.appB) == 0, "\(usage)")
        let purge = v.ctl(["cache", "purge"])
        #expect(
            purge.status == 0 && purge.stdoutText == "freed 4096 bytes in 1 file(s)\n", "\(purge)")
        #expect(v.sh("stat -c '%n %s %Y' \"$1/victim/precious\"", v.outside).stdoutText == before)
        let dir = v.ctl(["cache", "path", Self.appB])
        #expect(dir.status != 0, "a symlink is not handed out as the cache directory: \(dir)")

        #expect(v.ctl(["app", "uninstall", Self.appB]).status == 0)
        #expect(
            v.sh("stat -c '%n %s %Y' \"$1/victim/precious\"", v.outside).stdoutText == before,
            "the uninstall followed the link")
        #expect(
            v.sh("test -e \"$1\" || test -L \"$1\"", dirB).status != 0,
            "the link itself goes at uninstall")
    }

    /// The same odd entries, purged by the policy (a budget) rather than by hand: they sort
    /// first (oldest) and do not stop the purge of the plain files after them.
    @Test func oddEntriesDoNotStopAPolicyPurge() throws {
        let (v, a, b) = try Self.volume([
            "CacheFreeLowWaterBytes": 0, "CacheBudgetBytes": 512 * Self.kib,
            "CacheBudgetHighWaterBytes": 100 * Self.kib,
            "CacheCheckIntervalSeconds": 0.2,
        ])
        defer { v.close() }
        let observer = try PurgeObserver(v, probe: b)
        let dir = try #require(v.cachePath(of: a))
        // Odd entries, all older than the plain files, staged outside then moved in at once.
        let setup = v.sh(
            """
            set -e
            S="$2/stage"; mkdir "$S"
            printf 'keep me' > "$2/target.txt"; touch -d '2021-03-04 05:06:07' "$2/target.txt"
            ln -s "$2/target.txt" "$S/link"; mkdir "$2/d"; ln -s "$2/d" "$S/link-dir"
            mkfifo "$S/fifo"; python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$S/socket"
            printf 'x' > "$S/no-permission"; chmod 000 "$S/no-permission"
            printf 'z' > "$S/new
            line"
            for f in link link-dir fifo socket no-permission 'new
            line'; do touch -h -d '2019-01-01' "$S/$f"; done
            for i in 1 2 3 4 5 6; do head -c 131072 /dev/zero > "$S/plain$i"; touch -d "2023-01-0$i" "$S/plain$i"; done
            mv "$S" "$1/blobs"
            """, dir, v.outside)
        try #require(setup.status == 0, "\(setup)")
        let outsideBefore = v.sh(
            "cat \"$1/target.txt\"; stat -c ' %Y' \"$1/target.txt\"", v.outside
        ).stdoutText
        let purged = eventually(timeout: 10) {
            (try? v.usage().bytes(Self.appA)) ?? .max <= 100 * Self.kib
        }
        #expect(purged, "usage \((try? v.usage())?.description ?? "?"); log:\n\(v.log)")
        let left = v.sh("cd \"$1/blobs\" && ls -A", dir)
        #expect(
            left.stdoutText == "",
            "everything went (12 entries, 768 KiB over a 100 KiB high-water): \(left)")
        let outsideAfter = v.sh("cat \"$1/target.txt\"; stat -c ' %Y' \"$1/target.txt\"", v.outside)
            .stdoutText
        #expect(
            outsideAfter == outsideBefore && outsideAfter.hasPrefix("keep me "),
            "\(outsideBefore) → \(outsideAfter)")
        #expect(v.sh("test -d \"$1/d\"", v.outside).status == 0)
        #expect(
            eventually(timeout: 5) { observer.freed(Self.appA) >= 6 * 131072 }, "\(observer.events)"
        )
    }

    /// With no budget, and free space above the low-water mark, the periodic check reads no
    /// cache: walking every app's whole tree on each check, to add up a total it has no use
    /// for, would cost a share of a core for ever with many files. A directory read updates
    /// its atime on this relatime tmpfs when the atime is older than the mtime: it must stay
    /// as set. With a budget the total is needed, and the walk comes back.
    @Test func theCheckWalksNoCacheWhenNeitherMarkCanBeCrossed() throws {
        let (v, a, _) = try Self.volume(["CacheCheckIntervalSeconds": 0.2])
        defer { v.close() }
        let dir = try #require(v.cachePath(of: a))
        let setup = v.sh(
            "mkdir \"$1/sub\" && touch \"$1/sub/f\" && touch -a -d '2020-01-01' \"$1/sub\"", dir)
        try #require(setup.status == 0, "\(setup)")
        for _ in 0..<7 { try v.tick() }  // seven checks
        let atime = v.sh("stat -c %X \"$1/sub\"", dir).stdoutText
        #expect(atime == "\(1_577_836_800)\n", "a check read the cache: atime \(atime)")
        #expect(v.ctl(["status"]).status == 0)
    }

    // MARK: Budget

    @Test func overBudgetPurgesOldestFilesFirstDownToHighWater() throws {
        let (v, a, b) = try Self.volume([
            "CacheFreeLowWaterBytes": 0, "CacheBudgetBytes": Self.mib,
            "CacheCheckIntervalSeconds": 0.2,
        ])
        defer { v.close() }
        let dir = try #require(v.cachePath(of: a))
        // A third-party observer: the varlink reference CLI, streaming with --more.
        let eventsPath = v.root + "/events.out"
        let observer = try ChildProcess.spawn(
            "python3",
            [
                "-m", "varlink.cli", "call", "--more",
                "unix:\(v.socketPath)/io.vaultd.Caches.Observe", "{}",
            ],
            environment: v.environment, inputs: [:], stdout: .file(eventsPath, append: false),
            stderr: .file(eventsPath + ".err", append: false))
        defer {
            kill(observer, SIGKILL)
            _ = ChildProcess.wait(observer, timeout: 10)
        }
        // Wait until the observer is subscribed (python starts slowly on a busy machine): purge
        // a byte of app B until the observer reports it; only then make A's purge happen.
        let subscribed = eventually(timeout: 30) {
            _ = v.inside(b, ["cache", "write", "probe", "1"])
            _ = v.ctl(["cache", "purge", Self.appB])
            return (try? String(contentsOfFile: eventsPath, encoding: .utf8))?.contains(Self.appB)
                == true
        }
        try #require(subscribed, "the observer never reported a purge of \(Self.appB)")

        // 3 MiB: twelve 256 KiB files whose ages are not in name order, staged outside the
        // cache and moved in with one rename, so the policy sees them all at once.
        // f00 is 8th oldest, f02 the newest, ...
        let ageRank = [7, 2, 11, 0, 5, 9, 1, 4, 10, 3, 8, 6]
        var script = "set -e; S=\"$2/stage\"; mkdir \"$S\"\n"
        for (i, rank) in ageRank.enumerated() {
            let name = String(format: "f%02d", i)
            script +=
                "head -c 262144 /dev/zero > \"$S/\(name)\"; touch -d '2020-01-\(String(format: "%02d", rank + 1)) 12:00:00' \"$S/\(name)\"\n"
        }
        script += "mv \"$S\" \"$1/blobs\"\n"
        let staged = v.sh(script, dir, v.outside)
        try #require(staged.status == 0, "\(staged)")

        // Budget 1 MiB, high-water 80 % of it (838860 bytes): three files (768 KiB) stay.
        // The purge removes one file at a time and Usage does not wait for it: usage is at
        // 1 MiB with the ninth file still to go. Its event is sent once it is over.
        let eventsText = { (try? String(contentsOfFile: eventsPath, encoding: .utf8)) ?? "" }
        let settled = eventually(timeout: 10) { eventsText().contains(Self.appA) }
        #expect(
            settled,
            "no purge event for A; usage \((try? v.usage())?.description ?? "?"); observer output: \(eventsText()) \((try? String(contentsOfFile: eventsPath + ".err", encoding: .utf8)) ?? ""); log:\n\(v.log)"
        )
        let usage = try v.usage()
        #expect(usage.bytes(Self.appA) == 3 * 262144 && usage.files(Self.appA) == 3, "\(usage)")
        let newest = ageRank.enumerated().sorted { $0.element > $1.element }.prefix(3).map {
            String(format: "f%02d", $0.offset)
        }.sorted()
        let left = v.sh("ls \"$1/blobs\"", dir)
        #expect(
            left.stdoutText == newest.joined(separator: "\n") + "\n",
            "the newest three (\(newest)) should remain: \(left)")

        // The observer saw the purge: A, 9 × 256 KiB.
        let text = eventsText()
        #expect(
            text.contains("\"freedBytes\": \(9 * 262144)")
                || text.contains("\"freedBytes\":\(9 * 262144)"), "\(text)")
    }

    // MARK: vaultctl and uninstall

    @Test func vaultctlCachePathUsagePurgeAndUninstall() throws {
        let (v, a, b) = try Self.volume(Self.noAutomaticPurge)
        defer { v.close() }
        let observer = try PurgeObserver(v, probe: b)

        let path = v.ctl(["cache", "path", Self.appA])
        #expect(
            path.status == 0 && path.stdoutText == v.cacheRoot + "/" + Self.appA + "\n", "\(path)")
        #expect(
            v.inside(a, ["cache", "path"]).stdoutText == path.stdoutText,
            "the app and vaultctl agree")
        #expect(
            v.sh("stat -c '%F %a' \"$1\"", v.cacheRoot + "/" + Self.appA).stdoutText
                == "directory 700\n")
        let bad = v.ctl(["cache", "path", "notreverse"])
        #expect(bad.status == 65 && bad.stderr.contains("io.vaultd.Apps.InvalidAppID"), "\(bad)")

        for (name, size) in [("a1", 100_000), ("a2", 200_000), ("a3", 300_000)] {
            #expect(v.inside(a, ["cache", "write", name, String(size)]).status == 0)
        }
        Self.touch(
            v, v.cacheRoot + "/" + Self.appA,
            [("a1", "2020-01-01"), ("a2", "2021-01-01"), ("a3", "2022-01-01")])
        for name in ["b1", "b2"] {
            #expect(v.inside(b, ["cache", "write", name, "50000"]).status == 0)
        }

        // Usage: bytes on disk (tmpfs pages of 4 KiB) and files, per app.
        let u = try v.usage()
        #expect(
            u.files(Self.appA) == 3 && u.bytes(Self.appA) == 102_400 + 200_704 + 303_104, "\(u)")
        #expect(u.files(Self.appB) == 2 && u.bytes(Self.appB) == 2 * 53_248, "\(u)")
        #expect(u.totalBytes == u.bytes(Self.appA) + u.bytes(Self.appB), "\(u)")
        #expect(
            u.capacityBytes == 4 * Self.mib && u.freeBytes <= u.capacityBytes - u.totalBytes, "\(u)"
        )
        let text = v.ctl(["cache", "usage"])
        #expect(text.stdoutText.contains("\(Self.appA)\t606208 bytes\t3 files"), "\(text)")

        // Purge one app entirely.
        let purgeB = v.ctl(["cache", "purge", Self.appB])
        #expect(
            purgeB.status == 0 && purgeB.stdoutText == "freed 106496 bytes in 2 file(s)\n",
            "\(purgeB)")
        #expect(
            eventually(timeout: 5) { observer.freed(Self.appB) == 106_496 }, "\(observer.events)")
        #expect(try v.usage().files(Self.appA) == 3)

        // Purge by amount: oldest first until at least N bytes are freed.
        let some = v.ctl(["cache", "purge", Self.appA, "--bytes", "150000"])
        #expect(
            some.status == 0 && some.stdoutText == "freed 303104 bytes in 2 file(s)\n", "\(some)")
        #expect(v.sh("ls \"$1\"", v.cacheRoot + "/" + Self.appA).stdoutText == "a3\n")
        #expect(
            eventually(timeout: 5) { observer.freed(Self.appA) == 303_104 }, "\(observer.events)")

        // Purge everything.
        #expect(v.inside(b, ["cache", "write", "b3", "1000"]).status == 0)
        let all = v.ctl(["cache", "purge"])
        #expect(
            all.status == 0 && all.stdoutText == "freed \(303_104 + 4096) bytes in 2 file(s)\n",
            "\(all)")
        let empty = try v.usage()
        #expect(
            empty.totalBytes == 0 && empty.files(Self.appA) == 0 && empty.files(Self.appB) == 0,
            "\(empty)")
        #expect(
            v.sh("test -d \"$1/\(Self.appA)\" && test -d \"$1/\(Self.appB)\"", v.cacheRoot).status
                == 0, "app directories stay")

        // Uninstall removes the whole app cache directory, subdirectories included.
        #expect(
            v.sh(
                "mkdir -p \"$1/sub/dir\" && echo hi > \"$1/sub/dir/f\"",
                v.cacheRoot + "/" + Self.appA
            ).status == 0)
        #expect(v.ctl(["app", "uninstall", Self.appA]).status == 0)
        #expect(
            v.sh("test -e \"$1/\(Self.appA)\"", v.cacheRoot).status != 0,
            "A's cache directory survived the uninstall")
        #expect(try v.usage().apps[Self.appA] == nil)
        #expect(v.sh("test -d \"$1/\(Self.appB)\"", v.cacheRoot).status == 0, "B's stays")

        // Asking for the path of an app that is not installed (any more, or ever) makes no
        // directory: AppNotFound.
        for app in [Self.appA, "org.example.NeverRegistered"] {
            let gone = v.ctl(["cache", "path", app])
            #expect(
                gone.status == 44 && gone.stderr.contains("io.vaultd.Apps.AppNotFound")
                    && gone.stdoutText.isEmpty, "\(gone)")
            #expect(
                v.sh("test -e \"$1/\(app)\"", v.cacheRoot).status != 0,
                "\(app)'s cache directory was made")
        }
    }

    /// `cache purge APP` for an app that is neither installed nor has a cache is AppNotFound,
    /// exit 1, as `cache path` is (a mistyped app ID must not "free 0 bytes", exit 0).
    @Test func purgingAnAppThatIsNotThereIsAppNotFound() throws {
        let (v, a, _) = try Self.volume(Self.noAutomaticPurge)
        defer { v.close() }
        let none = v.ctl(["cache", "purge", "org.example.NeverRegistered"])
        #expect(
            none.status == 44 && none.stderr.contains("io.vaultd.Apps.AppNotFound")
                && none.stdoutText.isEmpty, "\(none)")
        #expect(v.inside(a, ["cache", "write", "kept", "5000"]).status == 0)
        let own = v.ctl(["cache", "purge", Self.appA])
        #expect(own.status == 0 && own.stdoutText == "freed 8192 bytes in 1 file(s)\n", "\(own)")
    }

    /// The cache root holds a `CACHEDIR.TAG` (https://bford.info/cachedir/), so backup tools
    /// leave the caches out wherever the root is (caches are never part of backups: without
    /// the tag, `tar --exclude-caches-all`, borg or restic `--exclude-caches` would keep every
    /// cache). The tag is no app in `cache usage`, and a purge leaves it.
    @Test func theCacheRootIsTaggedSoBackupsLeaveItOut() throws {
        let (v, a, _) = try Self.volume(Self.noAutomaticPurge)
        defer { v.close() }
        #expect(v.inside(a, ["cache", "write", "in-a-backup", "5000"]).status == 0)
        let tag = v.sh("head -n 1 \"$1/CACHEDIR.TAG\"", v.cacheRoot)
        #expect(tag.stdoutText == "Signature: 8a477f597d28d172789f06886806bc55\n", "\(tag)")
        let backup = v.sh("tar -C \"$1\" --exclude-caches-all -cf - . | tar -tf -", v.volume)
        #expect(
            backup.status == 0 && !backup.stdoutText.contains("in-a-backup")
                && backup.stdoutText.contains("outside"), "\(backup)")
        let u = try v.usage()
        #expect(u.apps["CACHEDIR.TAG"] == nil && u.files(Self.appA) == 1, "\(u)")
        #expect(v.ctl(["cache", "purge"]).stdoutText == "freed 8192 bytes in 1 file(s)\n")
        #expect(v.sh("test -f \"$1/CACHEDIR.TAG\"", v.cacheRoot).status == 0)
    }

    /// Runs `steps` (sh) as nobody, with a vaultd of nobody's own started and initialised
    /// first and the app `com.example.modes` installed: `$3` is vaultctl, `$1` nobody's HOME.
    static func asNobodyWithAnApp(_ steps: String) throws -> ProcessResult {
        let root = try TemporaryDirectory.make(prefix: "vaultd-modes")
        defer {
            _ = try? ChildProcess.run(
                "chmod", ["-R", "u+rwx", root], environment: ["PATH": "/usr/bin:/bin"])
            TemporaryDirectory.remove(root)
        }
        chmod(root, 0o755)
        let own = root + "/own"
        mkdir(own, 0o700)
        chown(own, 65534, 65534)
        let script = """
            set -e
            export HOME="$1" XDG_RUNTIME_DIR="$1/run" XDG_DATA_HOME="$1/data" XDG_CACHE_HOME="$1/cache" XDG_CONFIG_HOME="$1/config"
            mkdir -m 700 "$1/run"
            "$2" > "$1/vaultd.log" 2>&1 &
            trap 'kill $!' EXIT
            i=0; until [ -S "$1/run/vaultd/vaultd.sock" ] || [ $i -ge 100 ]; do sleep 0.1; i=$((i+1)); done
            "$3" init --no-passphrase > /dev/null
            cp "$3" "$1/app"
            "$3" app install com.example.modes --exe "$1/app" > /dev/null

            """ + steps
        return try ChildProcess.run(
            "setpriv",
            [
                "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", script, "sh", own,
                Paths.tool("vaultd"), Paths.tool("vaultctl"),
            ],
            environment: ["PATH": "/usr/bin:/bin"], timeout: 60)
    }

    /// vaultd runs as the user, not root: a directory the app made unwritable (0500) or
    /// unreadable (0300, 0000) kept its files from every purge, though `cache usage` counted
    /// what it could see of them, and an uninstall left them there for the next install. The
    /// other tests run vaultd as root, whom no mode stops. Here vaultd and vaultctl run as
    /// nobody: the purge opens up the app's directories (they are the user's) and removes
    /// everything, and so does an uninstall.
    @Test(.enabled(if: getuid() == 0, "needs root to run vaultd as nobody (setpriv)"))
    func directoriesTheAppMadeUnwritableOrUnreadableDoNotKeepTheirFilesAsAUser() throws {
        let r = try Self.asNobodyWithAnApp(
            """
            C=$("$3" cache path com.example.modes)
            mkdir -p "$C/unwritable" "$C/unreadable/sub" "$C/none"
            head -c 100000 /dev/zero > "$C/unwritable/f"; chmod 500 "$C/unwritable"
            head -c 100000 /dev/zero > "$C/unreadable/sub/f"; chmod 300 "$C/unreadable"
            echo z > "$C/none/z"; chmod 0 "$C/none"
            "$3" cache purge com.example.modes
            find "$C" -type f | wc -l
            mkdir "$C/again"; echo a > "$C/again/a"; chmod 500 "$C/again"
            "$3" app uninstall com.example.modes > /dev/null
            test -e "$C" && echo "left: $C" || echo gone
            """)
        #expect(
            r.status == 0 && r.stdoutText == "freed 208896 bytes in 3 file(s)\n0\ngone\n", "\(r)")
    }

    /// The same for the app's own cache directory, the top of its tree, which the app can
    /// chmod as well: made unreadable, it kept everything in it from a purge and an
    /// uninstall, which left it for the next install.
    @Test(.enabled(if: getuid() == 0, "needs root to run vaultd as nobody (setpriv)"))
    func theAppsOwnDirectoryMadeUnreadableIsStillPurgedAndRemovedAsAUser() throws {
        let r = try Self.asNobodyWithAnApp(
            """
            C=$("$3" cache path com.example.modes)
            head -c 100000 /dev/zero > "$C/f"; chmod 300 "$C"
            "$3" cache purge com.example.modes
            chmod 700 "$C"; find "$C" -type f | wc -l
            echo a > "$C/a"; chmod 0 "$C"
            "$3" app uninstall com.example.modes > /dev/null
            test -e "$C" && echo "left: $(stat -c %a "$C")" || echo gone
            """)
        #expect(r.status == 0 && r.stdoutText.hasSuffix("\n0\ngone\n"), "\(r)")
    }
}
