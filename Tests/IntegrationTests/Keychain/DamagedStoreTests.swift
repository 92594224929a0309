import Foundation
import Testing
import VaultClient
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Bytes of `vault.sqlite` zeroed on disk with vaultd stopped, then vaultd started again:
/// one damaged item is reported as damaged (ItemDamaged, naming it by id and uuid), can be
/// deleted, and keeps no other item from being read, listed or backed up; `vaultctl doctor`
/// names it; a file SQLite reports malformed is refused at start, with what to do.
@Suite("damaged store")
struct DamagedStoreTests {
    static func add(_ d: Daemon, _ service: String) -> ProcessResult {
        d.ctl(
            ["item", "add", "--service", service, "--account", "a", "--secret-fd", "3"],
            fds: [3: Data("v-\(service)".utf8)])
    }

    static func sqlite(_ d: Daemon, _ sql: String) -> String {
        d.run("sqlite3", [d.dataDirectory + "/vault.sqlite", sql]).stdoutText.trimmingCharacters(
            in: .whitespacesAndNewlines)
    }

    static func bytes(hex: String) -> Data {
        var out = Data()
        var i = hex.startIndex
        while i < hex.endIndex {
            let j = hex.index(i, offsetBy: 2)
            out.append(UInt8(hex[i..<j], radix: 16)!)
            i = j
        }
        return out
    }

    /// Zeroes 8 bytes in the middle of `column` of item row `id`, found in the file by its
    /// bytes (read through sqlite3); vaultd must be stopped (the WAL checkpointed away).
    static func damage(_ d: Daemon, id: Int, column: String) throws {
        try damage(store: d.dataDirectory + "/vault.sqlite", id: id, column: column) {
            sqlite(d, $0)
        }
    }

    /// `damage` of the store at `store`, read through `sqlite` (sqlite3 on it).
    static func damage(store: String, id: Int, column: String, sqlite: (String) -> String) throws {
        try damage(store: store, table: "items", row: "id = \(id)", column: column, sqlite: sqlite)
    }

    /// Zeroes 8 bytes in the middle of `column` of the row of `table` that `row` (an SQL
    /// condition) selects, in the store at `store`, read through `sqlite`.
    static func damage(
        store: String, table: String, row: String, column: String, sqlite: (String) -> String
    ) throws {
        #expect(
            !FileManager.default.fileExists(atPath: store + "-wal")
                || ((try? FileManager.default.attributesOfItem(atPath: store + "-wal")[.size]
                    as? Int) ?? 0) == 0
        )
        let value = bytes(hex: sqlite("SELECT hex(\(column)) FROM \(table) WHERE \(row)"))
        try #require(value.count >= 32, "\(column) of \(table) where \(row)")
        var file = try Data(contentsOf: URL(fileURLWithPath: store))
        let found = try #require(
            file.range(of: value), "the bytes of \(column) of \(table) where \(row) in the file")
        #expect(file[found.upperBound...].range(of: value) == nil, "one copy only")
        let at = found.lowerBound + value.count / 2
        file.replaceSubrange(at..<at + 8, with: Data(count: 8))
        try file.write(to: URL(fileURLWithPath: store))
    }

    @Test func aDamagedItemIsReportedDeletableAndKeepsNoOtherFromBeingRead() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        for s in ["s1", "s2", "s3", "s4"] { try #require(Self.add(d, s).status == 0) }
        // (sqlite3 opens the file only once vaultd, which holds a lock on it, has stopped.)
        #expect(d.stop() == 0)
        let uuid2 = Self.sqlite(d, "SELECT lower(hex(uuid)) FROM items WHERE id = 2")
        let uuid3 = Self.sqlite(d, "SELECT lower(hex(uuid)) FROM items WHERE id = 3")
        try #require(uuid2.count == 32 && uuid3.count == 32)
        // Item 2 (s2): its attributes; item 3 (s3): its secret.
        try Self.damage(d, id: 2, column: "attributes")
        try Self.damage(d, id: 3, column: "secret")
        #expect(
            Self.sqlite(d, "PRAGMA integrity_check") == "ok",
            "the file is sound; two items' ciphertexts are not")
        try d.start()

        // Get: ItemDamaged naming it (not ItemNotFound), errSecDecode.
        let get2 = d.ctl(["item", "get", "--service", "s2", "--account", "a"])
        #expect(get2.status == 1, "\(get2)")
        #expect(
            get2.stderr.contains("io.vaultd.Keychain.ItemDamaged")
                && get2.stderr.contains("OSStatus -26275"), "\(get2)")
        #expect(
            get2.stderr.contains(
                "item 2 (uuid \(uuid2), genericPassword in access group user): its attributes fail authentication"
            ), "\(get2)")
        #expect(!get2.stderr.contains("v-s"), "no secret in the message")
        let get3 = d.ctl(["item", "get", "--service", "s3", "--account", "a"])
        #expect(
            get3.status == 1
                && get3.stderr.contains(
                    "item 3 (uuid \(uuid3), genericPassword in access group user): its secret fails authentication"
                ), "\(get3)")
        // Add over it: ItemDamaged, not DuplicateItem.
        let add2 = Self.add(d, "s2")
        #expect(
            add2.status == 1 && add2.stderr.contains("ItemDamaged")
                && add2.stderr.contains("item 2 "), "\(add2)")
        // The others read.
        #expect(d.ctl(["item", "get", "--service", "s1", "--account", "a"]).stdoutText == "v-s1")
        #expect(d.ctl(["item", "get", "--service", "s4", "--account", "a"]).stdoutText == "v-s4")

        // A bulk read returns the others, and the damaged ones in `damaged`.
        let vault = try d.client()
        let (items, damaged) = try vault.keychain.copyMatchingReportingDamage(
            Query(.genericPassword, matchAll: true), returnData: true)
        #expect(
            items.compactMap { $0.data.map { String(decoding: $0, as: UTF8.self) } } == [
                "v-s1", "v-s4",
            ])
        #expect(damaged.map { $0["id"]?.intValue } == [2, 3])
        #expect(damaged.map { $0["uuid"]?.stringValue } == [uuid2, uuid3])
        #expect(damaged.map { $0["damaged"]?.stringValue } == ["attributes", "secret"])
        #expect(
            damaged.allSatisfy {
                $0["class"]?.stringValue == "genericPassword"
                    && $0["accessGroup"]?.stringValue == "user"
            })
        // Without data the secret is not read: item 3's attributes list it.
        let (listed, damagedNoData) = try vault.keychain.copyMatchingReportingDamage(
            Query(.genericPassword, matchAll: true))
        #expect(listed.compactMap { $0.attributes?.service } == ["s1", "s3", "s4"])
        #expect(damagedNoData.map { $0["id"]?.intValue } == [2])
        // vaultctl item list: the readable ones, the damaged named on stderr, exit 1.
        let list = d.ctl(["item", "list"])
        #expect(list.status == 1, "\(list)")
        #expect(
            list.stdoutText.contains("s1") && list.stdoutText.contains("s3")
                && list.stdoutText.contains("s4") && !list.stdoutText.contains("s2"), "\(list)")
        #expect(list.stderr.contains("damaged, not listed: item 2 (uuid \(uuid2)"), "\(list)")

        // doctor: the file is sound, two items are damaged.
        let doctor = d.ctl(["doctor"])
        #expect(doctor.status == 1, "\(doctor)")
        #expect(doctor.stdoutText.contains("store integrity: ok"), "\(doctor)")
        #expect(doctor.stdoutText.contains("items: 4 checked, 2 damaged"), "\(doctor)")
        #expect(
            doctor.stdoutText.contains(
                "damaged: item 2 (uuid \(uuid2), genericPassword in access group user): its attributes fail authentication"
            ), "\(doctor)")
        #expect(
            doctor.stdoutText.contains(
                "damaged: item 3 (uuid \(uuid3), genericPassword in access group user): its secret fails authentication"
            ), "\(doctor)")
        #expect(!doctor.stdoutText.contains("v-s"))
        let check = try vault.check()
        #expect(check["integrity"] == .array([.string("ok")]) && check["items"] == JSON(4))

        // A backup holds the others and names the damaged ones (exit 1); restored, it is them.
        let file = d.root + "/b.age"
        let backup = d.ctl(
            ["backup", file, "--passphrase-fd", "3"], fds: [3: passphraseLine("b4ckup")])
        #expect(backup.status == 1, "\(backup)")
        #expect(backup.stdoutText.contains("backup written to \(file): 2 items"), "\(backup)")
        #expect(
            backup.stderr.contains("damaged, not in the backup: item 2 (uuid \(uuid2)")
                && backup.stderr.contains("item 3 (uuid \(uuid3)"), "\(backup)")
        let other = try Daemon()
        defer { other.close() }
        let restore = other.ctl(
            ["restore", file, "--passphrase-fd", "3", "--no-passphrase"],
            fds: [3: passphraseLine("b4ckup")])
        #expect(restore.status == 0, "\(restore)")
        #expect(
            other.ctl(["item", "get", "--service", "s1", "--account", "a"]).stdoutText == "v-s1")
        #expect(
            other.ctl(["item", "get", "--service", "s4", "--account", "a"]).stdoutText == "v-s4")
        #expect(other.statusJSON()?["items"] as? Int == 2)

        // A Delete naming it removes it; then it is absent, and can be added again.
        let delete2 = d.ctl(["item", "delete", "--service", "s2", "--account", "a"])
        #expect(
            delete2.status == 0 && delete2.stdoutText.contains("deleted 1 item(s)"), "\(delete2)")
        let gone = d.ctl(["item", "get", "--service", "s2", "--account", "a"])
        #expect(gone.status == 44 && gone.stderr.contains("ItemNotFound"), "\(gone)")
        #expect(Self.add(d, "s2").status == 0)
        #expect(d.ctl(["item", "get", "--service", "s2", "--account", "a"]).stdoutText == "v-s2")
        // One whose secret is damaged is deleted as any other (its attributes read).
        #expect(d.ctl(["item", "delete", "--service", "s3", "--account", "a"]).status == 0)
        let sound = d.ctl(["doctor"])
        #expect(
            sound.status == 0 && sound.stdoutText.contains("items: 3 checked, 0 damaged"),
            "\(sound)")
        #expect(
            d.log.contains("keychain: deleted 1 damaged item(s): item 2 (uuid \(uuid2)"), "\(d.log)"
        )
    }

    /// A file SQLite cannot read as a database, and one whose items table is malformed:
    /// vaultd exits non-zero at start, saying what is wrong and what to do, and serves
    /// nothing.
    @Test(arguments: ["header", "items page"])
    func aMalformedStoreIsRefusedAtStart(_ what: String) throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        for s in ["s1", "s2"] { try #require(Self.add(d, s).status == 0) }
        #expect(d.stop() == 0)
        let pageSize = Int(Self.sqlite(d, "PRAGMA page_size")) ?? 4096
        let root =
            Int(Self.sqlite(d, "SELECT rootpage FROM sqlite_master WHERE name = 'items'")) ?? 0
        let store = d.dataDirectory + "/vault.sqlite"
        var file = try Data(contentsOf: URL(fileURLWithPath: store))
        if what == "header" {
            // "SQLite format 3\0" gone: SQLITE_NOTADB.
            file.replaceSubrange(0..<16, with: Data(count: 16))
        } else {
            // The b-tree page header of the items table's root page: SQLITE_CORRUPT.
            try #require(root > 1)
            let at = (root - 1) * pageSize
            file.replaceSubrange(at..<at + 12, with: Data(count: 12))
        }
        try file.write(to: URL(fileURLWithPath: store))
        #expect(throws: (any Error).self) { try d.start(timeout: 20) }
        #expect(
            d.lastExitStatus != nil && d.lastExitStatus != 0,
            "\(String(describing: d.lastExitStatus))")
        #expect(
            d.log.contains("io.vaultd.Vault.StoreDamaged: the store \(store) is damaged"),
            "\(d.log)")
        #expect(
            d.log.contains("vaultd does not serve a damaged store")
                && d.log.contains("vaultctl restore FILE") && d.log.contains("docs/backup.md"),
            "\(d.log)")
        #expect(!Daemon.answers(d.socketPath))
        // The damaged file is left as it was, for inspection.
        #expect(try Data(contentsOf: URL(fileURLWithPath: store)) == file)
    }
}
