import Foundation
import Testing
import VaultClient
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// The device key sealed by a TPM 2.0 (`DeviceKeyTPM`, docs/keychain.md "The device key"),
/// with swtpm as the TPM: one per test, on free ports, its state in the test's directory.
/// Through the real vaultd and vaultctl.
@Suite(.tags(.system)) struct TPMDeviceKeyTests {
    /// A whenUnlockedThisDeviceOnly item, the kind the device key guards.
    static let bound = ["--service", "bound", "--account", "a"]
    /// A migratable item, which needs no device key.
    static let free = ["--service", "free", "--account", "a"]

    /// Starts vaultd on a new data directory with `DeviceKeyTPM` set to `tpm`'s TCTI (or
    /// `setting`), initialises it with a passphrase and adds one item of each kind.
    static func vaultWithItems(_ tpm: SoftwareTPM) throws -> Daemon {
        let d = try Daemon(start: false)
        try d.startWithDeviceKeyTPM(tpm.tcti)
        try #require(d.initialize().status == 0)
        try d.addItems()
        return d
    }

    @Test func theKeySealedByTheTPMOpensDeviceBoundItemsAfterARestart() throws {
        let tpm = try SoftwareTPM()
        defer { tpm.close() }
        let d = try Self.vaultWithItems(tpm)
        defer { d.close() }
        let status = d.ctl(["status"])
        #expect(status.stdoutText.contains("device key: TPM 2.0"), "\(status)")
        let files = try FileManager.default.contentsOfDirectory(atPath: d.dataDirectory)
        #expect(files.contains("device.key.tpm") && !files.contains("device.key"), "\(files)")

        #expect(d.stop() == 0)
        try d.startWithDeviceKeyTPM(tpm.tcti)
        try #require(d.unlock().status == 0)
        #expect(d.ctl(["item", "get"] + Self.bound).stdoutText == "bound-secret")
        #expect(d.ctl(["item", "get"] + Self.free).stdoutText == "free-secret")
        let json = try #require(d.statusJSON())
        #expect(json["deviceKey"] as? String == "tpm" && json["deviceKeyProblem"] is NSNull)
    }

    @Test func aCopyWithAnotherTPMOpensAllButTheDeviceBoundItems() throws {
        let tpm = try SoftwareTPM()
        defer { tpm.close() }
        let d = try Self.vaultWithItems(tpm)
        defer { d.close() }
        #expect(d.stop() == 0)
        let blob = try Data(contentsOf: URL(fileURLWithPath: d.dataDirectory + "/device.key.tpm"))

        // The data directory copied to another machine: another TPM.
        let other = try SoftwareTPM()
        defer { other.close() }
        let copy = try Daemon(start: false)
        defer { copy.close() }
        try copyDirectory(d.dataDirectory, to: copy.dataDirectory)
        try copy.startWithDeviceKeyTPM(other.tcti)
        try #require(copy.unlock().status == 0)
        #expect(copy.ctl(["item", "get"] + Self.free).stdoutText == "free-secret")
        let get = copy.ctl(["item", "get"] + Self.bound)
        #expect(get.status != 0 && get.stderr.contains("NotAvailableOnThisDevice"), "\(get)")
        let status = copy.ctl(["status"])
        #expect(
            status.stdoutText.contains("device key: TPM 2.0")
                && status.stdoutText.contains("device key NOT AVAILABLE"), "\(status)")
        #expect(copy.log.contains("load the sealed device key"), "\(copy.log)")
        // Nothing rewritten: the sealed key is as it was, and no key made in its place.
        let after = try Data(
            contentsOf: URL(fileURLWithPath: copy.dataDirectory + "/device.key.tpm"))
        #expect(after == blob)
        #expect(!FileManager.default.fileExists(atPath: copy.dataDirectory + "/device.key"))
        // Nothing that would need the device key is done without it.
        let change = copy.ctl(
            ["passphrase", "change", "--passphrase-fd", "3", "--new-passphrase-fd", "4"],
            fds: [3: Data(Daemon.passphrase.utf8), 4: Data("other".utf8)])
        #expect(
            change.status != 0 && change.stderr.contains("NotAvailableOnThisDevice"), "\(change)")
    }

    @Test func theTPMGoneAfterSealingLeavesTheRestOpenAndLosesNothing() throws {
        let tpm = try SoftwareTPM()
        defer { tpm.close() }
        let d = try Self.vaultWithItems(tpm)
        defer { d.close() }
        #expect(d.stop() == 0)
        let blob = try Data(contentsOf: URL(fileURLWithPath: d.dataDirectory + "/device.key.tpm"))
        tpm.stop()

        try d.startWithDeviceKeyTPM(tpm.tcti)
        try #require(d.unlock().status == 0)
        #expect(d.ctl(["item", "get"] + Self.free).stdoutText == "free-secret")
        let get = d.ctl(["item", "get"] + Self.bound)
        #expect(get.status != 0 && get.stderr.contains("NotAvailableOnThisDevice"), "\(get)")
        let json = try #require(d.statusJSON())
        let problem = json["deviceKeyProblem"] as? String ?? ""
        #expect(problem.contains("open the TPM") || problem.contains("talk to the TPM"), "\(json)")
        #expect(d.log.contains("ThisDeviceOnly items are not available"), "\(d.log)")
        #expect(
            try Data(contentsOf: URL(fileURLWithPath: d.dataDirectory + "/device.key.tpm")) == blob)

        // The TPM back: the device-bound item opens again.
        #expect(d.stop() == 0)
        try tpm.start()
        try d.startWithDeviceKeyTPM(tpm.tcti)
        try #require(d.unlock().status == 0)
        #expect(d.ctl(["item", "get"] + Self.bound).stdoutText == "bound-secret")
    }

    /// A vault kept with `device.key` in a file, then started with a TPM: the key is sealed
    /// (the same key: the device-bound item still opens) and the file removed; no copy of the
    /// key's bytes is left anywhere in the data directory, in clear.
    @Test func aKeyInAFileIsSealedAndNothingOfItStaysOnDisk() throws {
        let tpm = try SoftwareTPM()
        defer { tpm.close() }
        let d = try Daemon(start: false)
        defer { d.close() }
        try d.startWithDeviceKeyTPM("none")
        try #require(d.initialize().status == 0)
        try d.addItems()
        #expect(d.ctl(["status"]).stdoutText.contains("device key: a file in the data directory"))
        #expect(d.stop() == 0)
        let key = try Data(contentsOf: URL(fileURLWithPath: d.dataDirectory + "/device.key"))
        try #require(key.count == 32)

        try d.startWithDeviceKeyTPM(tpm.tcti)
        #expect(d.log.contains("sealed the device key with the TPM"), "\(d.log)")
        try #require(d.unlock().status == 0)
        #expect(d.ctl(["item", "get"] + Self.bound).stdoutText == "bound-secret")
        #expect(d.ctl(["status"]).stdoutText.contains("device key: TPM 2.0"))
        #expect(d.stop() == 0)
        let files = try FileManager.default.contentsOfDirectory(atPath: d.dataDirectory)
        #expect(files.contains("device.key.tpm") && !files.contains("device.key"), "\(files)")
        for name in files {
            let path = d.dataDirectory + "/" + name
            guard let bytes = FileManager.default.contents(atPath: path) else { continue }
            #expect(bytes.range(of: key) == nil, "the device key's bytes are in \(name)")
        }
    }

    /// A vault without a passphrase, its key sealed with the device key: a copy of the data
    /// directory opens nowhere else (as systemd-cryptenroll --tpm2-device binds a disk).
    @Test func aVaultWithoutPassphraseOpensOnlyWithItsTPM() throws {
        let tpm = try SoftwareTPM()
        defer { tpm.close() }
        let d = try Daemon(start: false)
        defer { d.close() }
        try d.startWithDeviceKeyTPM(tpm.tcti)
        try #require(d.ctl(["init", "--no-passphrase"]).status == 0)
        try d.addItems()
        #expect(d.stop() == 0)

        try Self.withCopyOnAnotherTPM(d) { copy in
            #expect(copy.log.contains("its keys do not open"), "\(copy.log)")
        }

        try d.startWithDeviceKeyTPM(tpm.tcti)
        #expect(d.ctl(["item", "get"] + Self.free).stdoutText == "free-secret")
        #expect(d.ctl(["item", "get"] + Self.bound).stdoutText == "bound-secret")
    }
}

extension TPMDeviceKeyTests {
    /// A vault without a passphrase kept with `device.key` in a file, then started with a
    /// TPM: its key-encryption key, stored in clear until then, is moved under the device key
    /// the TPM now seals (`kek.nopassphrase.sealed`), and a copy opens nowhere else.
    @Test func aVaultWithoutPassphraseMovedToTheTPMIsBoundToIt() throws {
        let tpm = try SoftwareTPM()
        defer { tpm.close() }
        let d = try Daemon(start: false)
        defer { d.close() }
        try d.startWithDeviceKeyTPM("none")
        try #require(d.ctl(["init", "--no-passphrase"]).status == 0)
        try d.addItems()
        #expect(d.stop() == 0)
        #expect(try Self.metaKeys(d).contains("kek.nopassphrase"))

        try d.startWithDeviceKeyTPM(tpm.tcti)
        #expect(d.ctl(["item", "get"] + Self.free).stdoutText == "free-secret")
        #expect(d.ctl(["item", "get"] + Self.bound).stdoutText == "bound-secret")
        #expect(d.log.contains("its key is now sealed with the device key"), "\(d.log)")
        #expect(d.stop() == 0)
        let keys = try Self.metaKeys(d)
        #expect(keys.contains("kek.nopassphrase.sealed") && !keys.contains("kek.nopassphrase"))

        try Self.withCopyOnAnotherTPM(d) { _ in }
    }

    /// A copy of `d`'s data directory (vaultd stopped) started with another swtpm: even the
    /// items that are not device-bound stay closed, since the vault's own key is sealed by
    /// `d`'s TPM. `body` looks at the copy's daemon further.
    static func withCopyOnAnotherTPM(_ d: Daemon, _ body: (Daemon) throws -> Void) throws {
        let other = try SoftwareTPM()
        defer { other.close() }
        let copy = try Daemon(start: false)
        defer { copy.close() }
        try copyDirectory(d.dataDirectory, to: copy.dataDirectory)
        try copy.startWithDeviceKeyTPM(other.tcti)
        let get = copy.ctl(["item", "get"] + Self.free)
        #expect(get.status != 0 && get.stdoutText.isEmpty, "\(get)")
        try body(copy)
    }

    /// The names in `vault_meta` of `d`'s store (vaultd stopped), through the sqlite3 CLI.
    static func metaKeys(_ d: Daemon) throws -> [String] {
        let r = try ChildProcess.run(
            "sqlite3", [d.dataDirectory + "/vault.sqlite", "SELECT key FROM vault_meta"],
            environment: ProcessInfo.processInfo.environment)
        try #require(r.status == 0, "\(r)")
        return r.stdoutText.split(separator: "\n").map(String.init)
    }
}

extension Daemon {
    /// Starts vaultd with a config.plist whose `DeviceKeyTPM` is `setting`.
    func startWithDeviceKeyTPM(_ setting: String) throws {
        let config = root + "/config.plist"
        let plist: [String: Any] = ["DeviceKeyTPM": setting]
        let data = try PropertyListSerialization.data(
            fromPropertyList: plist, format: .xml, options: 0)
        try data.write(to: URL(fileURLWithPath: config))
        try start(extraArguments: ["--config", config])
    }

    /// One item of each kind: `TPMDeviceKeyTests.bound` (whenUnlockedThisDeviceOnly) and
    /// `.free` (whenUnlocked).
    func addItems() throws {
        let bound = ctl(
            ["item", "add"] + TPMDeviceKeyTests.bound + [
                "--accessible", "whenUnlockedThisDeviceOnly", "--secret-fd", "3",
            ], fds: [3: Data("bound-secret".utf8)])
        try #require(bound.status == 0, "\(bound)")
        let free = ctl(
            ["item", "add"] + TPMDeviceKeyTests.free + ["--secret-fd", "3"],
            fds: [3: Data("free-secret".utf8)])
        try #require(free.status == 0, "\(free)")
    }
}

/// `cp -a` of a data directory (a disk copy, a backup tool's).
func copyDirectory(_ from: String, to: String) throws {
    let r = try ChildProcess.run(
        "cp", ["-a", from, to], environment: ProcessInfo.processInfo.environment)
    guard r.status == 0 else { throw HarnessError("cp: \(r)") }
}

/// One swtpm (a TPM 2.0 in software) on two free TCP ports of 127.0.0.1 (P and P+1, as
/// tpm2-tss's swtpm TCTI expects them), its state in a
/// directory of its own; `tcti` names it for tpm2-tss. Started at once, killed on `close`.
final class SoftwareTPM: @unchecked Sendable {
    let root: String
    let port: Int
    let controlPort: Int
    private var pid: pid_t?

    var tcti: String { "swtpm:host=127.0.0.1,port=\(port)" }

    init() throws {
        root = try TemporaryDirectory.make(prefix: "swtpm")
        // tpm2-tss's swtpm TCTI reaches the control channel on the port after the server's.
        var p = try SyncthingPair.freePort()
        var tries = 0
        while p >= 65535 || !Self.isFree(p + 1) {
            tries += 1
            guard tries < 100 else { throw HarnessError("no two free ports in a row") }
            p = try SyncthingPair.freePort()
        }
        port = p
        controlPort = p + 1
        try start()
    }

    /// Starts swtpm on the state directory (kept across a stop) and waits until its port
    /// accepts a connection.
    func start() throws {
        precondition(pid == nil)
        let p = try ChildProcess.spawn(
            "swtpm",
            [
                "socket", "--tpm2", "--server", "type=tcp,port=\(port),bindaddr=127.0.0.1",
                "--ctrl", "type=tcp,port=\(controlPort),bindaddr=127.0.0.1",
                "--tpmstate", "dir=\(root)", "--flags", "not-need-init,startup-clear",
            ], environment: ProcessInfo.processInfo.environment, inputs: [:],
            stdout: .file(root + "/swtpm.log", append: true),
            stderr: .file(root + "/swtpm.log", append: true))
        pid = p
        let deadline = Date().addingTimeInterval(20)
        while !Self.accepts(port) {
            guard ChildProcess.isAlive(p), Date() < deadline else {
                stop()
                let log = (try? String(contentsOfFile: root + "/swtpm.log", encoding: .utf8)) ?? ""
                throw HarnessError("swtpm did not listen on \(port): \(log)")
            }
            usleep(20_000)
        }
    }

    /// Kills swtpm (its state stays for a later `start`).
    func stop() {
        guard let p = pid else { return }
        kill(p, SIGKILL)
        _ = ChildProcess.wait(p, timeout: 10)
        pid = nil
    }

    func close() {
        stop()
        TemporaryDirectory.remove(root)
    }

    deinit { close() }

    /// Whether `port` of 127.0.0.1 can be bound now (nothing listens there).
    static func isFree(_ port: Int) -> Bool { onLoopback(port) { bind($0, $1, $2) == 0 } }

    /// Whether something accepts a TCP connection on 127.0.0.1:`port`.
    static func accepts(_ port: Int) -> Bool { onLoopback(port) { connect($0, $1, $2) == 0 } }

    /// `act` on a new TCP socket and the address 127.0.0.1:`port` (closed after).
    private static func onLoopback(
        _ port: Int, _ act: (Int32, UnsafePointer<sockaddr>, socklen_t) -> Bool
    ) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { Glibc.close(fd) }
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        a.sin_addr.s_addr = inet_addr("127.0.0.1")
        a.sin_port = in_port_t(UInt16(port).bigEndian)
        return withUnsafePointer(to: &a) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                act(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
    }
}
