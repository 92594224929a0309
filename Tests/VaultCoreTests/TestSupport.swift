import Foundation
import Testing
import VaultProtocol

@testable import VaultCore

/// Runs `body` with a fresh directory under the system temporary directory, removed afterwards.
func withTemporaryDirectory<T>(_ body: (String) throws -> T) throws -> T {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent(
        "vaultcore-tests-\(UUID().uuidString)", isDirectory: true)
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: url) }
    return try body(url.path)
}

/// Runs `body` with a vault in a fresh temporary data directory, initialised without a
/// passphrase (always unlocked) unless `initialize` is false.
/// `clock`: the vault's (the system's unless a test passes a `ManualClock`).
func withVault<T>(
    initialize: Bool = true, clock: any VaultClock = SystemClock(),
    _ body: (Vault, String) throws -> T
) throws -> T {
    try withTemporaryDirectory { tmp in
        let dir = tmp + "/data"
        let vault = try Vault(dataDirectory: dir, passphrasePolicy: .tests, clock: clock)
        defer { vault.close() }
        if initialize { _ = try vault.initialize(passphrase: nil, caller: .owner) }
        return try body(vault, dir)
    }
}

/// Runs `body`, expects it to throw a `VaultFailure` with `code`, and returns that error.
@discardableResult
func expectFailure(
    _ code: VaultFailure.Code, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () throws -> Void
) -> VaultFailure? {
    do {
        try body()
        Issue.record("expected \(code), but nothing was thrown", sourceLocation: sourceLocation)
    } catch let e as VaultFailure {
        #expect(e.code == code, "got \(e)", sourceLocation: sourceLocation)
        return e
    } catch {
        Issue.record("expected \(code), got \(error)", sourceLocation: sourceLocation)
    }
    return nil
}

func secret(_ s: String) -> SecureBytes { SecureBytes(copying: Array(s.utf8)) }
func secret(_ b: [UInt8]) -> SecureBytes { SecureBytes(copying: b) }

/// The bytes of a secret (through `withUnsafeBytes`, the only way to reach them).
func plain(_ s: SecureBytes?) -> [UInt8]? { s?.withUnsafeBytes { Array($0) } }

extension Vault {
    /// The caller of app `id`, registered now by its Flatpak ID (no executable needed), with
    /// `appGroups`: an app's caller comes from its registration (`AppRecord.caller`), with the
    /// install generation admission checks.
    func registeredApp(_ id: String, appGroups: [String] = []) throws -> Caller {
        try installApp(id, executable: nil, flatpak: true, appGroups: appGroups, caller: .owner)
            .caller
    }

    /// Adds a generic password as the owner.
    @discardableResult
    func addGeneric(
        service: String, account: String, secret s: [UInt8], accessible: Accessibility? = nil,
        accessGroup: String? = nil, caller: Caller = .owner
    ) throws -> ItemAttributes {
        try addItem(
            .genericPassword,
            attributes: ItemAttributes(
                service: service, account: account, accessGroup: accessGroup, accessible: accessible
            ),
            secret: secret(s), caller: caller)
    }

    /// The secret of the one generic password matching service and account.
    func readGeneric(service: String, account: String? = nil, caller: Caller = .owner) throws
        -> [UInt8]
    {
        let found = try copyMatching(
            ItemQuery(
                itemClass: .genericPassword,
                attributes: ItemAttributes(service: service, account: account)),
            returnData: true, caller: caller)
        #expect(found.count == 1)
        return try #require(plain(found.first?.data))
    }

    func lockStateName() -> String? { lockState.state.rawValue }
}

extension PassphrasePolicy {
    /// Argon2id at libsodium's MIN cost: the unit tests init and unlock many vaults and check
    /// nothing of the cost (PassphraseTests checks the real one).
    static let tests = PassphrasePolicy(kdfCost: .minimum)
}

/// A clock that stands still until the test moves it: the wall clock starts at the system's
/// time (its whole second, so that sums of halves and quarters stay exact), the monotonic one
/// at the system's, and both move only by `advance`. A wait on it ends when the test says, so
/// what it brings is checked without sleeping through it.
final class ManualClock: VaultClock, @unchecked Sendable {
    // `@unchecked Sendable`: both values are read and written under `lock`.
    private let lock = NSLock()
    private var wall = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
    private var monotonic = MonotonicClock.nanoseconds()

    var now: Date { lock.withLock { wall } }
    var monotonicNanoseconds: UInt64 { lock.withLock { monotonic } }

    /// Moves both clocks `seconds` ahead.
    func advance(by seconds: Double) {
        lock.withLock {
            wall = wall.addingTimeInterval(seconds)
            monotonic += UInt64(seconds * 1e9)
        }
    }
}
