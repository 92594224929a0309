import Foundation
import Testing
import VaultClient
import VaultProtocol

/// Bytes of one stored preference value zeroed on disk with vaultd stopped, then vaultd
/// started again: the damaged value is reported (ValueDamaged for its key, naming domain and
/// key, exit 74; named by `defaults read`, `find`, `export`, `doctor` and `backup`) and
/// isolated: its domain's other keys and every other domain read, the backup holds the rest
/// and restores, and writing or deleting the key mends it.
@Suite("damaged preferences")
struct DamagedPreferencesTests {
    static let domain = "com.example.damaged"
    /// Unique in the file, and long enough that zeroing its middle leaves its ends to find.
    static let longValue = "a value long enough to be found in the store, 0123456789abcdef"

    /// Zeroes 8 bytes in the middle of the stored value of `key` in `domain`, found in the
    /// file by its bytes (read through sqlite3); vaultd must be stopped.
    static func damage(_ d: Daemon, domain: String, key: String) throws {
        try DamagedStoreTests.damage(
            store: d.dataDirectory + "/vault.sqlite", table: "preferences",
            row: "domain = '\(domain)' AND key = '\(key)'", column: "value"
        ) {
            DamagedStoreTests.sqlite(d, $0)
        }
    }

    @Test func aDamagedValueIsReportedAndKeepsTheRestReadable() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        for w in [
            ["Volume", "-float", "0.8"], ["Name", "-string", Self.longValue],
            ["Count", "-int", "7"],
        ] {
            try #require(d.ctl(["defaults", "write", Self.domain] + w).status == 0)
        }
        try #require(
            d.ctl(["defaults", "write", "com.example.other", "Greeting", "-string", "findme here"])
                .status == 0)
        #expect(d.stop() == 0)
        try Self.damage(d, domain: Self.domain, key: "Name")
        #expect(
            DamagedStoreTests.sqlite(d, "PRAGMA integrity_check") == "ok",
            "the file is sound; one value is not")
        try d.start()
        let named = #"key "Name" of domain "com.example.damaged""#

        // The damaged key: ValueDamaged naming domain and key, exit 74, no value in the message.
        let get = d.ctl(["defaults", "read", Self.domain, "Name"])
        #expect(get.status == 74, "\(get)")
        #expect(
            get.stderr.contains("io.vaultd.Preferences.ValueDamaged") && get.stderr.contains(named),
            "\(get)")
        #expect(!get.stderr.contains("0123456789"), "no value in the message")
        #expect(d.ctl(["defaults", "read-type", Self.domain, "Name"]).status == 74)
        // The same domain's other keys read, one by one and together (the damaged one named).
        let volume = d.ctl(["defaults", "read", Self.domain, "Volume"])
        #expect(volume.status == 0 && volume.stdoutText.contains("0.8"), "\(volume)")
        let count = d.ctl(["defaults", "read", Self.domain, "Count"])
        #expect(count.status == 0 && count.stdoutText == "7\n", "\(count)")
        let whole = d.ctl(["defaults", "read", Self.domain])
        #expect(whole.status == 74, "\(whole)")
        #expect(
            whole.stdoutText.contains("Volume = ") && whole.stdoutText.contains("Count = 7")
                && !whole.stdoutText.contains("Name"), "\(whole)")
        #expect(whole.stderr.contains("vaultctl: damaged, not shown: \(named)"), "\(whole)")
        // find searches every other value and domain.
        let find = d.ctl(["defaults", "find", "findme"])
        #expect(find.status == 74, "\(find)")
        #expect(
            find.stdoutText.contains("Found 1 keys in domain 'com.example.other'")
                && find.stdoutText.contains("findme here"), "\(find)")
        #expect(find.stderr.contains("vaultctl: damaged, not searched: \(named)"), "\(find)")
        // Export (XML on stdout, binary to a file) writes the rest and names what it left out.
        let xml = d.ctl(["defaults", "export", Self.domain, "-"])
        #expect(
            xml.status == 74 && xml.stdoutText.contains("<key>Volume</key>")
                && xml.stdoutText.contains("<key>Count</key>")
                && !xml.stdoutText.contains("<key>Name</key>"), "\(xml)")
        #expect(xml.stderr.contains("vaultctl: damaged, not exported: \(named)"), "\(xml)")
        let binaryPath = d.root + "/out.plist"
        let binary = d.ctl(["defaults", "export", Self.domain, binaryPath])
        #expect(binary.status == 74 && binary.stderr.contains(named), "\(binary)")
        let exported =
            try PropertyListSerialization.propertyList(
                from: Data(contentsOf: URL(fileURLWithPath: binaryPath)), format: nil)
            as? [String: Any]
        #expect(exported?.keys.sorted() == ["Count", "Volume"])
        // Over the wire: Domain's `damaged`.
        let vault = try d.client()
        let found = try vault.preferences.valuesReportingDamage(domain: Self.domain)
        #expect(
            found.values == ["Volume": .real(0.8), "Count": .integer(7)]
                && found.damaged == ["Name"])

        // doctor names it.
        let doctor = d.ctl(["doctor"])
        #expect(doctor.status == 1, "\(doctor)")
        #expect(
            doctor.stdoutText.contains("store integrity: ok")
                && doctor.stdoutText.contains("preferences: 4 checked, 1 damaged"), "\(doctor)")
        #expect(
            doctor.stdoutText.contains("damaged: \(named)")
                && !doctor.stdoutText.contains("0123456789"), "\(doctor)")

        // A backup holds the rest, names what it left out, and restores.
        let file = d.root + "/b.age"
        let backup = d.ctl(
            ["backup", file, "--passphrase-fd", "3"], fds: [3: passphraseLine("b4ckup")])
        #expect(backup.status == 1, "\(backup)")
        #expect(backup.stdoutText.contains("3 preferences in 2 domains"), "\(backup)")
        #expect(
            backup.stderr.contains("damaged, not in the backup: \(named)")
                && backup.stderr.contains("1 damaged preference value(s)"), "\(backup)")
        #expect(
            d.log.contains("backup: 1 damaged preference value(s) left out: \(named)"), "\(d.log)")
        let other = try Daemon()
        defer { other.close() }
        let restore = other.ctl(
            ["restore", file, "--passphrase-fd", "3", "--no-passphrase"],
            fds: [3: passphraseLine("b4ckup")])
        #expect(restore.status == 0, "\(restore)")
        #expect(restore.stdoutText.contains("preferences: 3 added"), "\(restore)")
        #expect(other.ctl(["defaults", "read", Self.domain, "Volume"]).stdoutText.contains("0.8"))
        #expect(
            other.ctl(["defaults", "read", "com.example.other", "Greeting"]).stdoutText.contains(
                "findme here"))
        #expect(other.ctl(["defaults", "read", Self.domain, "Name"]).status == 44)

        // Deleting the key mends it; so would writing it again.
        let delete = d.ctl(["defaults", "delete", Self.domain, "Name"])
        #expect(delete.status == 0, "\(delete)")
        #expect(d.ctl(["defaults", "read", Self.domain, "Name"]).status == 44)
        #expect(d.ctl(["defaults", "read", Self.domain]).status == 0)
        let sound = d.ctl(["doctor"])
        #expect(
            sound.status == 0 && sound.stdoutText.contains("preferences: 3 checked, 0 damaged"),
            "\(sound)")
    }
}
