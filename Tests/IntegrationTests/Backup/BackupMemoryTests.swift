import Foundation
import TestSupport
import Testing
import VaultClient
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// A backup and a restore stream: vaultd's peak resident memory (`VmHWM`) grows by a bounded
/// amount while it backs up or restores a large vault, or reads a padded file, whatever their
/// size. Backups are encrypted to an X25519 key (`age-keygen`), so no scrypt (256 MiB of its
/// own) is in the figures.
@Suite("backup and restore memory")
struct BackupMemoryTests {
    /// Items of 1 MiB secrets (the secret limit): 128 MiB of plaintext, which the whole-file
    /// code held two to four times over (file, payload, parsed records, encrypted output).
    static let items = 128
    /// The most vaultd's peak may grow during one backup or restore (MiB): one 1 MiB secret
    /// in its forms, a page of store rows, age's chunks, SQLite's caches, allocator slack.
    static let boundMiB = 48

    /// vaultd's `VmHWM` and `VmRSS` (KiB) from /proc/PID/status.
    static func memory(_ pid: pid_t) throws -> (peak: Int, resident: Int) {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        func field(_ name: String) throws -> Int {
            let line = try #require(status.split(separator: "\n").first { $0.hasPrefix(name) })
            return try #require(Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]))
        }
        return (try field("VmHWM:"), try field("VmRSS:"))
    }

    /// How much vaultd's peak resident memory grows (MiB) while `body` runs: the peak is reset
    /// to the resident size first (`/proc/PID/clear_refs` 5, Linux ≥ 4.0), then compared.
    static func peakGrowth(_ d: Daemon, _ body: () throws -> Void) throws -> Double {
        let pid = try #require(d.pid)
        try "5".write(toFile: "/proc/\(pid)/clear_refs", atomically: false, encoding: .utf8)
        let before = try memory(pid)
        try body()
        let after = try memory(pid)
        return Double(after.peak - before.resident) / 1024
    }

    /// An age key pair made by `age-keygen` in `d`'s root: the key file's path and recipient.
    static func keyPair(_ d: Daemon) throws -> (file: String, recipient: String) {
        let file = d.root + "/backup-key.txt"
        let keygen = d.run("age-keygen", ["-o", file])
        try #require(keygen.status == 0, "\(keygen)")
        let line = try #require(
            keygen.stderr.split(separator: "\n").first { $0.hasPrefix("Public key: ") })
        return (file, String(line.dropFirst(12)))
    }

    @Test func aLargeVaultIsBackedUpAndRestoredInBoundedMemory() throws {
        let a = try Daemon()
        defer { a.close() }
        try #require(a.initializeWithoutPassphrase().status == 0)
        let vault = try a.client()
        for i in 0..<Self.items {
            _ = try vault.keychain.add(
                attributes: ItemAttributes(service: "big", account: "a\(i)"),
                data: pseudoRandomBytes(count: SecretLimit.maximumBytes, seed: UInt64(i + 1)))
        }
        let key = try Self.keyPair(a)
        let file = a.root + "/big.age"
        var backup: ProcessResult?
        let backupGrowth = try Self.peakGrowth(a) {
            backup = a.ctl(["backup", file, "--recipient", key.recipient])
        }
        try #require(backup?.status == 0, "\(String(describing: backup))")
        let size = try #require(
            try FileManager.default.attributesOfItem(atPath: file)[.size] as? Int)
        #expect(size > Self.items * SecretLimit.maximumBytes)

        let b = try Daemon()
        defer { b.close() }
        try #require(b.initializeWithoutPassphrase().status == 0)
        var restore: ProcessResult?
        let restoreGrowth = try Self.peakGrowth(b) {
            restore = b.ctl(["restore", file, "--identity", key.file])
        }
        #expect(
            restore?.status == 0
                && restore?.stdoutText.contains("items: \(Self.items) added") == true,
            "\(String(describing: restore))")
        print(
            "backup memory: \(Self.items) items of 1 MiB (\(size) bytes): vaultd's peak grew \(String(format: "%.1f", backupGrowth)) MiB for the backup, \(String(format: "%.1f", restoreGrowth)) MiB for the restore"
        )
        #expect(backupGrowth < Double(Self.boundMiB), "backup: \(backupGrowth) MiB")
        #expect(restoreGrowth < Double(Self.boundMiB), "restore: \(restoreGrowth) MiB")
        // Every secret came back whole.
        let one = try b.client().keychain.copyMatching(
            Query(.genericPassword, ItemAttributes(service: "big", account: "a77")),
            returnData: true)
        #expect(one.first?.data == pseudoRandomBytes(count: SecretLimit.maximumBytes, seed: 78))
    }

    /// A real backup padded to 900 MB (sparse) is refused as altered, nothing changed, and
    /// vaultd's peak does not grow by the file (the whole-file code held 1.87 GB for it).
    @Test func aBackupPaddedTo900MBIsRefusedInBoundedMemory() throws {
        let a = try Daemon()
        defer { a.close() }
        try #require(a.initializeWithoutPassphrase().status == 0)
        let vault = try a.client()
        _ = try vault.keychain.add(
            attributes: ItemAttributes(service: "mail", account: "ann"), data: Data("s".utf8))
        let key = try Self.keyPair(a)
        let file = a.root + "/padded.age"
        try #require(a.ctl(["backup", file, "--recipient", key.recipient]).status == 0)
        let fd = open(file, O_WRONLY)
        try #require(fd >= 0)
        try #require(ftruncate(fd, 900_000_000) == 0)
        close(fd)

        let b = try Daemon()
        defer { b.close() }
        try #require(b.initializeWithoutPassphrase().status == 0)
        var r: ProcessResult?
        let growth = try Self.peakGrowth(b) {
            r = b.ctl(["restore", file, "--identity", key.file])
        }
        #expect(
            r?.status == 1 && r?.stderr.contains("BackupUnreadable") == true
                && r?.stderr.contains("nothing was changed") == true, "\(String(describing: r))")
        #expect(b.statusJSON()?["items"] as? Int == 0)
        print(
            "backup memory: a backup padded to 900 MB refused; vaultd's peak grew \(String(format: "%.1f", growth)) MiB"
        )
        #expect(growth < Double(Self.boundMiB), "\(growth) MiB")
    }
}
