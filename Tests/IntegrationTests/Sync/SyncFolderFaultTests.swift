import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What anyone who can write the sync folder can put in it (a Syncthing peer writes any file
/// there): names, sizes, directories and links that vaultd did not write. Two real vaultds
/// share the folder; whatever is planted, both keep starting, serving and syncing, and say
/// what they ignored.
extension SyncTests {
    /// The sequences of the files named like segments in `dir`, planted ones included.
    static func segmentNumbers(_ dir: String) -> [UInt64] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).compactMap {
            name -> UInt64? in
            guard name.count == 20, name.hasSuffix(".seg") else { return nil }
            return UInt64(name.prefix(16), radix: 16)
        }.sorted()
    }

    static func isRegularFile(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0 && st.st_mode & S_IFMT == S_IFREG
    }

    static func device(_ d: Daemon, _ id: String) -> [String: Any]? {
        (d.syncStatus()?["devices"] as? [[String: Any]])?.first { $0["deviceID"] as? String == id }
    }

    /// Empty files named as the largest sequences (which overflowed vaultd's next sequence:
    /// it died at its next write, and at every start), names that are no segment's, a sparse
    /// file of a terabyte, and directories in the place of this device's next segment and of
    /// its ack, all in A's own directory: A's changes still cross, under its own next numbers,
    /// before and after a restart; the file named within the sequences is ignored and logged.
    @Test func namesPlantedInADevicesDirectoryNeverSetItsSequenceNorStopVaultd() throws {
        try Self.withPair { a, b, folder in
            try #require(
                a.ctl(
                    ["item", "add"] + Self.work + ["--synchronizable"], stdin: Data("first".utf8)
                ).status == 0)
            var crossed = eventually(timeout: Self.timeout) { b.secret(Self.work) == "first" }
            try #require(crossed, "\(b.log)")
            let aID = try #require(a.syncStatus()?["deviceID"] as? String)
            let dir = folder + "/devices/" + aID
            let written = Self.segmentNumbers(dir)
            let next = try #require(written.max()) + 1
            try #require(next < 100, "\(written)")

            let planted = [
                "7fffffffffffffff.seg", "ffffffffffffffff.seg", "4000000000000000.seg",
                "0000000000000000.seg", "FFFFFFFFFFFFFFFF.seg",
                "fffffffffffffffff.seg", "-000000000000001.seg", ".seg", "ack.tmp",
            ]
            for name in planted {
                #expect(FileManager.default.createFile(atPath: dir + "/" + name, contents: Data()))
            }
            let huge = open(dir + "/3fffffffffffffff.seg", O_WRONLY | O_CREAT, 0o600)
            try #require(huge >= 0)
            #expect(ftruncate(huge, 1 << 40) == 0)
            close(huge)
            let nextName = String(format: "%016llx.seg", next)
            try FileManager.default.createDirectory(
                atPath: dir + "/" + nextName + "/inside", withIntermediateDirectories: true)
            try FileManager.default.removeItem(atPath: dir + "/ack")
            try FileManager.default.createDirectory(
                atPath: dir + "/ack/inside", withIntermediateDirectories: true)
            // A file where a device's directory would be.
            #expect(
                FileManager.default.createFile(
                    atPath: folder + "/devices/" + String(repeating: "0", count: 32),
                    contents: Data("x".utf8)))

            try #require(
                a.ctl(
                    ["item", "update"] + Self.work + ["--secret-stdin"], stdin: Data("second".utf8)
                ).status == 0)
            crossed = eventually(timeout: Self.timeout) { b.secret(Self.work) == "second" }
            #expect(crossed, "A's change after the planting did not cross: A \(a.log)\nB \(b.log)")
            #expect(
                Self.isRegularFile(dir + "/" + nextName),
                "A's next segment was not written under its own next number")
            #expect(
                a.log.contains(
                    "sync: moved \"\(nextName)\" out of this device's way: this device did not write it"
                ), "\(a.log)")
            let acked = eventually(timeout: Self.timeout) { Self.isRegularFile(dir + "/ack") }
            #expect(acked, "A's ack was not written in place of the directory")

            // Started again (where it died at every start): it serves and syncs.
            #expect(a.stop() == 0)
            try a.start()
            try #require(a.unlock().status == 0)
            try #require(
                a.ctl(
                    ["item", "update"] + Self.work + ["--secret-stdin"], stdin: Data("third".utf8)
                ).status == 0)
            crossed = eventually(timeout: Self.timeout) { b.secret(Self.work) == "third" }
            #expect(crossed, "A's change after its restart did not cross: A \(a.log)\nB \(b.log)")

            // Every segment A wrote has a number of its own, counted on from its own.
            let own = Self.segmentNumbers(dir).filter { $0 < 1 << 32 && $0 > 0 }
            #expect(own.max().map { $0 > next && $0 < next + 20 } == true, "\(own)")
            #expect(
                a.log.contains("ignored segment 4000000000000000.seg of device \(aID)"), "\(a.log)")
            #expect(
                b.log.contains("ignored segment 4000000000000000.seg of device \(aID)"), "\(b.log)")
            for d in [a, b] {
                #expect(d.isRunning && !d.log.contains("Fatal error"), "\(d.log)")
                #expect(
                    !(d.syncStatus()?["problem"] is String), "\(String(describing: d.syncStatus()))"
                )
            }
            // The names out of range are no segments: the planted file in range is the one refused.
            #expect(
                Self.device(a, aID)?["rejected"] as? Int == 2,
                "\(String(describing: Self.device(a, aID)))")
        }
    }

    /// 300 device directories added to the folder (named to come before the members'), each
    /// with a file named as a segment: the members' directories are still read, so changes
    /// cross both ways; the 46 past the 256 read are ignored, counted in Status and by `sync
    /// status`, and logged.
    @Test func devicesPastTheBoundAreIgnoredAndTheMembersKeepSyncing() throws {
        try Self.withPair { a, b, folder in
            let aID = try #require(a.syncStatus()?["deviceID"] as? String)
            let bID = try #require(b.syncStatus()?["deviceID"] as? String)
            for i in 0..<300 {
                let dir = folder + "/devices/" + String(format: "%032x", i + 1)
                try FileManager.default.createDirectory(
                    atPath: dir, withIntermediateDirectories: true)
                #expect(
                    FileManager.default.createFile(
                        atPath: dir + "/0000000000000001.seg", contents: Data()))
            }
            try #require(
                a.ctl(
                    ["item", "add"] + Self.work + ["--synchronizable"], stdin: Data("from A".utf8)
                ).status == 0)
            let second = ["--service", "mail.example.com", "--account", "bob"]
            try #require(
                b.ctl(["item", "add"] + second + ["--synchronizable"], stdin: Data("from B".utf8))
                    .status == 0)
            let crossed = eventually(timeout: Self.timeout) {
                b.secret(Self.work) == "from A" && a.secret(second) == "from B"
            }
            #expect(crossed, "A \(a.log)\nB \(b.log)")
            for (d, other) in [(a, bID), (b, aID)] {
                let status = try #require(d.syncStatus())
                #expect(status["ignoredDevices"] as? Int == 46, "\(status)")
                let devices = status["devices"] as? [[String: Any]] ?? []
                #expect(devices.count == 256)
                #expect(Self.device(d, other)?["membership"] as? String == "member")
                #expect(!(status["problem"] is String), "\(status)")
                #expect(
                    d.log.contains(
                        "the folder holds 46 device directories past the 256 read; they are ignored"
                    ), "\(d.log)")
            }
            let text = a.ctl(["sync", "status"])
            #expect(
                text.status == 0 && text.stdoutText.contains("ignored device directories: 46"),
                "\(text)")
        }
    }

    /// A link in the place of a device's directory is not followed (the device it names is not
    /// listed, and the log says so); the folder itself replaced by a link is refused: no pass
    /// reads or writes through it, Status and the log say why, and once the directory is back
    /// syncing goes on.
    @Test func linksInThePlaceOfTheFolderOrADeviceDirectoryAreRefused() throws {
        try Self.withPair { a, b, folder in
            defer { TemporaryDirectory.remove(folder + ".real") }
            let aID = try #require(a.syncStatus()?["deviceID"] as? String)
            let linked = String(repeating: "ab", count: 16)
            #expect(symlink(folder + "/devices/" + aID, folder + "/devices/" + linked) == 0)
            try #require(
                a.ctl(
                    ["item", "add"] + Self.work + ["--synchronizable"], stdin: Data("first".utf8)
                ).status == 0)
            var crossed = eventually(timeout: Self.timeout) { b.secret(Self.work) == "first" }
            try #require(crossed, "\(b.log)")
            let said = eventually(timeout: Self.timeout) {
                b.log.contains(
                    "devices/\(linked)\" is a symbolic link, not a directory: not followed")
            }
            #expect(said, "\(b.log)")
            #expect(Self.device(b, linked) == nil)

            // The folder moved aside and a link to it put in its place.
            let segmentsBefore = Self.segmentNumbers(folder + "/devices/" + aID)
            #expect(rename(folder, folder + ".real") == 0)
            #expect(symlink(folder + ".real", folder) == 0)
            let second = ["--service", "mail.example.com", "--account", "bob"]
            try #require(
                a.ctl(["item", "add"] + second + ["--synchronizable"], stdin: Data("held".utf8))
                    .status == 0)
            let refused = eventually(timeout: Self.timeout) {
                (a.syncStatus()?["problem"] as? String)?.contains("is a symbolic link") == true
            }
            #expect(refused, "\(String(describing: a.syncStatus()))\n\(a.log)")
            #expect(
                a.log.contains(
                    "\(folder) is a symbolic link: a sync folder and the directories in it must be directories"
                ), "\(a.log)")
            #expect(
                a.ctl(["sync", "status"]).stdoutText.contains("problem: "),
                "\(a.ctl(["sync", "status"]))")
            #expect(
                Self.segmentNumbers(folder + ".real/devices/" + aID) == segmentsBefore,
                "A wrote through the link")

            // The directory back in its place: the held change crosses, and the passes succeed.
            #expect(unlink(folder) == 0)
            #expect(rename(folder + ".real", folder) == 0)
            try #require(
                a.ctl(
                    ["item", "update"] + Self.work + ["--secret-stdin"], stdin: Data("after".utf8)
                ).status == 0)
            crossed = eventually(timeout: Self.timeout) {
                b.secret(second) == "held" && b.secret(Self.work) == "after"
            }
            #expect(crossed, "A \(a.log)\nB \(b.log)")
            let recovered = eventually(timeout: Self.timeout) {
                a.syncStatus().map { !($0["problem"] is String) } == true
            }
            #expect(recovered, "\(String(describing: a.syncStatus()))")
        }
    }

    /// `sync leave` on B: A lists B as left, with nothing rejected and no segment of it
    /// ignored (its leaving segment was refused as "written after the device was removed"
    /// and counted as rejected), also once A reads the folder anew after a restart.
    @Test func aDeviceThatLeftIsListedAsLeftNotRejected() throws {
        try Self.withPair { a, b, folder in
            try #require(
                b.ctl(
                    ["item", "add"] + Self.work + ["--synchronizable"], stdin: Data("from B".utf8)
                ).status == 0)
            let crossed = eventually(timeout: Self.timeout) { a.secret(Self.work) == "from B" }
            try #require(crossed, "\(a.log)")
            let bID = try #require(b.syncStatus()?["deviceID"] as? String)
            let leave = b.ctl(["sync", "leave"])
            try #require(leave.status == 0, "\(leave)")
            let left = eventually(timeout: Self.timeout) {
                Self.device(a, bID)?["membership"] as? String == "left"
            }
            #expect(left, "\(String(describing: a.syncStatus()))\n\(a.log)")
            #expect(a.log.contains("sync: device \(bID) left the sync group"), "\(a.log)")
            let text = a.ctl(["sync", "status"]).stdoutText
            #expect(text.contains("\(bID) (left)") && !text.contains("rejected"), "\(text)")

            // Read anew: the same.
            #expect(a.stop() == 0)
            try a.start()
            try #require(a.unlock().status == 0)
            let passed = eventually(timeout: Self.timeout) { a.syncStatus()?["lastPass"] is String }
            #expect(passed, "\(String(describing: a.syncStatus()))")
            let entry = Self.device(a, bID)
            #expect(
                entry?["membership"] as? String == "left" && entry?["rejected"] as? Int == 0
                    && entry?["pending"] as? Int == 0, "\(String(describing: entry))")
            #expect(!a.log.contains("ignored segment"), "\(a.log)")
            #expect(a.secret(Self.work) == "from B")
        }
    }
}
