import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The keychain's promises, through vaultctl and the real socket.
@Suite struct KeychainTests {
    /// `printf 'tok-\\n\0x'`: t o k - backslash n NUL x.
    static let secret = Data([0x74, 0x6F, 0x6B, 0x2D, 0x5C, 0x6E, 0x00, 0x78])
    static let item = ["--service", "api.example.com", "--account", "alice"]

    @Test func secretComesBackByteExactAlsoAfterRestartAndUnlock() throws {
        let d = try Daemon()
        defer { d.close() }
        let initialized = d.initialize()
        try #require(initialized.status == 0, "\(initialized)")

        let add = d.ctl(["item", "add"] + Self.item, stdin: Self.secret)
        try #require(add.status == 0, "\(add)")
        let get = d.ctl(["item", "get"] + Self.item)
        #expect(get.status == 0, "\(get)")
        #expect(get.stdout == Self.secret, "got \(Array(get.stdout))")

        #expect(d.stop() == 0, "SIGTERM should end vaultd with exit 0; log:\n\(d.log)")
        try d.start()

        // A fresh vaultd has not been unlocked yet: the item exists but is unavailable.
        let whileLocked = d.ctl(["item", "get"] + Self.item)
        #expect(whileLocked.status != 0, "\(whileLocked)")
        #expect(
            whileLocked.stderr.contains("io.vaultd.Keychain.InteractionNotAllowed"),
            "\(whileLocked)")
        #expect(whileLocked.stdout.isEmpty)

        let unlock = d.unlock()
        #expect(unlock.status == 0, "\(unlock)")
        let again = d.ctl(["item", "get"] + Self.item)
        #expect(again.status == 0, "\(again)")
        #expect(again.stdout == Self.secret, "got \(Array(again.stdout))")
    }

    @Test func lockRefusesReadsAndOnlyTheRightPassphraseUnlocks() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        try #require(d.ctl(["item", "add"] + Self.item, stdin: Self.secret).status == 0)

        let lock = d.ctl(["lock"])
        #expect(lock.status == 0, "\(lock)")
        #expect(lock.stdoutText.contains("locked"), "\(lock)")

        let locked = d.ctl(["item", "get"] + Self.item)
        #expect(locked.status != 0, "\(locked)")
        #expect(locked.stderr.contains("io.vaultd.Keychain.InteractionNotAllowed"), "\(locked)")
        #expect(
            !locked.stderr.contains("ItemNotFound"), "locked must never be reported as not found")
        #expect(locked.stdout.isEmpty, "no secret bytes while locked")

        let wrong = d.unlock(passphrase: "wrong horse")
        #expect(wrong.status == 1, "\(wrong)")
        #expect(wrong.stderr.contains("io.vaultd.Vault.AuthFailed"), "\(wrong)")
        let stillLocked = d.ctl(["item", "get"] + Self.item)
        #expect(
            stillLocked.status != 0 && stillLocked.stderr.contains("InteractionNotAllowed"),
            "\(stillLocked)")

        let right = d.unlock()
        #expect(right.status == 0, "\(right)")
        let get = d.ctl(["item", "get"] + Self.item)
        #expect(get.status == 0, "\(get)")
        #expect(get.stdout == Self.secret)
    }

    /// Nothing a user typed (secret, service, account, label) appears in plaintext
    /// anywhere under the data dir, WAL files included.
    @Test func nothingTypedIsStoredInPlaintext() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        let items: [(secret: Data, service: String, account: String, label: String)] = [
            (Self.secret, "api.example.com", "alice", "Example API token"),
            (
                Data("Quokka-Zebra-7731-hunter2".utf8), "billing.internal.example",
                "robot@example.org", "Billing robot key"
            ),
        ]
        for it in items {
            let add = d.ctl(
                [
                    "item", "add", "--service", it.service, "--account", it.account, "--label",
                    it.label,
                ], stdin: it.secret)
            try #require(add.status == 0, "\(add)")
        }
        // The items really are there (so the scan below is looking at a vault that holds them).
        let list = d.ctl(["item", "list"])
        #expect(list.status == 0)
        #expect(
            list.stdoutText.contains("Billing robot key")
                && list.stdoutText.contains("Example API token"), "\(list)")
        let get = d.ctl([
            "item", "get", "--service", items[1].service, "--account", items[1].account,
        ])
        #expect(get.stdout == items[1].secret)

        let needles: [(String, Data)] = items.flatMap { it in
            [
                ("secret", it.secret), ("service", Data(it.service.utf8)),
                ("account", Data(it.account.utf8)), ("label", Data(it.label.utf8)),
            ]
        }
        // The scanner itself finds what is there.
        #expect(PlaintextScan.find(needles, in: Data("..alice..".utf8)) == ["account"])

        let whileRunning = try PlaintextScan.scan(directory: d.dataDirectory, for: needles)
        #expect(whileRunning.bytesScanned > 0, "the data dir should hold the vault's files")
        #expect(
            whileRunning.hits.isEmpty,
            "plaintext found while vaultd runs: \(whileRunning.hits) in \(whileRunning.files)")

        #expect(d.stop() == 0)
        let afterStop = try PlaintextScan.scan(directory: d.dataDirectory, for: needles)
        #expect(afterStop.bytesScanned > 0)
        #expect(
            afterStop.hits.isEmpty,
            "plaintext found after vaultd stopped: \(afterStop.hits) in \(afterStop.files)")
    }
}

/// Looks for byte strings in every regular file under a directory.
enum PlaintextScan {
    struct Result {
        var files: [String] = []
        var bytesScanned = 0
        /// "file: what" for every needle found.
        var hits: [String] = []
    }

    static func find(_ needles: [(String, Data)], in data: Data) -> [String] {
        needles.filter { !$0.1.isEmpty && data.range(of: $0.1) != nil }.map(\.0)
    }

    static func scan(directory: String, for needles: [(String, Data)]) throws -> Result {
        var result = Result()
        let fm = FileManager.default
        guard let walker = fm.enumerator(atPath: directory) else {
            throw HarnessError("cannot list \(directory)")
        }
        for case let relative as String in walker {
            let path = directory + "/" + relative
            var st = stat()
            guard lstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { continue }
            // Read straight from the file (no mmap): the daemon may be writing it.
            guard let data = fm.contents(atPath: path) else {
                throw HarnessError("cannot read \(path)")
            }
            result.files.append(relative)
            result.bytesScanned += data.count
            for what in find(needles, in: data) { result.hits.append("\(relative): \(what)") }
        }
        return result
    }
}
