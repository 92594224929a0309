import Foundation
import VaultProtocol

/// The app's handle on vaultd: launch information, the lock state, and the keychain,
/// preferences and caches tiers. Create one with `Vault.connect()`; it says `Hello` first.
public final class Vault: Sendable {
    /// The varlink connection every tier of this handle calls through (one socket; calls
    /// from several threads are serialized on it).
    public let connection: VaultConnection
    /// What vaultd said about this launch (`io.vaultd.Vault.Hello`).
    public let launch: LaunchInfo

    /// Connects to vaultd and says Hello. `replyTimeout`: seconds each call may wait for
    /// vaultd (nil: `VAULT_TIMEOUT`, else 60; 0: for ever; see `VaultConnection.init`). Throws `VaultError` ConnectionFailed
    /// (nothing answers, the socket is served by another uid, or vaultd refused the peer),
    /// RateLimited (vaultd at its connection cap: retry after `retryAfter` seconds),
    /// MissingEntitlement (the app's install ended).
    public static func connect(socketPath: String? = nil, replyTimeout: Double? = nil) throws
        -> Vault
    {
        let c = try VaultConnection(socketPath: socketPath, replyTimeout: replyTimeout)
        return Vault(connection: c, launch: LaunchInfo(try c.call(.vaultHello)))
    }

    init(connection: VaultConnection, launch: LaunchInfo) {
        self.connection = connection
        self.launch = launch
    }

    /// The keychain, as Keychain Services' SecItem functions.
    public var keychain: Keychain { Keychain(connection: connection) }

    /// Preference domains by name (the owner's view; apps usually use `Defaults`).
    public var preferences: Preferences { Preferences(connection: connection) }

    /// `io.vaultd.Vault.Status`; answered in every lock state, and does not count as
    /// activity for the idle auto-lock.
    public func status() throws -> VaultStatus { VaultStatus(try connection.call(.vaultStatus)) }

    /// Creates the vault; nil passphrase: always unlocked (never locks). Owner only. Throws
    /// AlreadyInitialized, PermissionDenied, Param (-50: an empty passphrase).
    @discardableResult
    public func initialize(passphrase: String?) throws -> LockState {
        LockState(
            try connection.call(
                .vaultInit, ["passphrase": passphrase.map { .string($0) } ?? .null])["lock"])
    }

    /// Unlocks (the passphrase through Argon2id). Owner only. Throws `VaultError` with code
    /// `.wrongPassphrase` (io.vaultd.Vault.AuthFailed, -25293; counted), `.rateLimited` (after
    /// 3 failures, 1 s doubling to 15 min, also across restarts: wait
    /// `parameters["retryAfter"]` seconds), `.noPassphrase`, `.notInitialized`, `.permissionDenied`.
    @discardableResult
    public func unlock(passphrase: String) throws -> LockState {
        LockState(try connection.call(.vaultUnlock, ["passphrase": .string(passphrase)])["lock"])
    }

    /// Makes a recovery key (replacing any earlier one) and returns its text, 8 groups of 8
    /// modhex characters (`RecoveryKeyText`), to show once. Needs the passphrase (checked as
    /// Unlock checks it). Owner only.
    public func createRecoveryKey(passphrase: String) throws -> String {
        let r = try connection.call(.vaultCreateRecoveryKey, ["passphrase": .string(passphrase)])
        guard let text = r["recoveryKey"]?.stringValue, var bytes = Data(base64Encoded: text),
            bytes.count == RecoveryKeyText.byteCount
        else { throw VaultError(.internalError, "vaultd's reply carries no recovery key") }
        defer { bytes.resetBytes(in: 0..<bytes.count) }
        return bytes.withUnsafeBytes { RecoveryKeyText.format($0) }
    }

    /// Removes the recovery key. Owner only.
    public func removeRecoveryKey() throws {
        _ = try connection.call(.vaultRemoveRecoveryKey)
    }

    /// Unlocks with the recovery key's text (counted and rate-limited as Unlock). Owner only.
    @discardableResult
    public func unlock(recoveryKey: String) throws -> LockState {
        LockState(
            try connection.call(.vaultUnlockWithRecoveryKey, ["recoveryKey": .string(recoveryKey)])[
                "lock"])
    }

    /// Sets a new passphrase with the recovery key, after a forgotten one. Owner only.
    @discardableResult
    public func resetPassphrase(recoveryKey: String, new: String) throws -> LockState {
        LockState(
            try connection.call(
                .vaultResetPassphrase,
                ["recoveryKey": .string(recoveryKey), "new": .string(new)])["lock"])
    }

    /// Unlocks with the passphrase remembered in the login keyring (`vaultctl unlock
    /// --remember`); never prompts, and gives up on the keyring after 5 s. Owner only.
    /// Returns at once when already unlocked. Throws `.keyringUnavailable` (the message says
    /// why: no bus or Secret Service, keyring locked, nothing remembered, timed out),
    /// `.wrongPassphrase` (the remembered one is stale),
    /// `.rateLimited`, `.noPassphrase`, `.notInitialized`, `.permissionDenied`.
    @discardableResult
    public func unlockFromKeyring() throws -> LockState {
        LockState(try connection.call(.vaultUnlockFromKeyring)["lock"])
    }

    /// Locks: the whenUnlocked* classes' keys (whenPasscodeSetThisDeviceOnly too) are wiped;
    /// afterFirstUnlock* items stay usable. Owner only. Throws `.noPassphrase`,
    /// `.notInitialized`, `.permissionDenied`.
    @discardableResult
    public func lock() throws -> LockState { LockState(try connection.call(.vaultLock)["lock"]) }

    /// Changes (both), sets (`old` nil) or removes (`new` nil) the passphrase. Returns the
    /// number of whenPasscodeSetThisDeviceOnly items deleted by a removal. Owner only. With a
    /// passphrase, `old` is checked as `unlock` checks it (counted, rate-limited) and, right,
    /// also unlocks a locked vault; without one, `old` is ignored. Throws `.wrongPassphrase`
    /// (`old` wrong or nil), `.rateLimited`, `.notInitialized`, `.permissionDenied`, Param
    /// (an empty `new`).
    @discardableResult
    public func changePassphrase(old: String?, new: String?) throws -> Int {
        let r = try connection.call(
            .vaultChangePassphrase,
            ["old": old.map { .string($0) } ?? .null, "new": new.map { .string($0) } ?? .null])
        return r["deletedItems"]?.intValue ?? 0
    }
}

extension Vault {
    /// `io.vaultd.Vault.Check`: SQLite's integrity check of the store and every item's row,
    /// attributes and secret (`integrity`, `items`, `secretsUnchecked`, `damaged`,
    /// `setAside`). Owner only.
    public func check() throws -> JSONObject {
        try connection.call(.vaultCheck)
    }

    /// `io.vaultd.Vault.Backup`: vaultd writes a backup of the whole vault to `path`
    /// (absolute, as vaultd sees the file system), an age v1 file encrypted with `passphrase`
    /// (scrypt) or to `recipients` (`age1…` keys), 0600, atomically. Owner only. Returns
    /// its reply (`items`, `deviceBoundItems`, `leftOutItems`, `preferences`, `domains`,
    /// `apps`, `bytes`). Throws InteractionNotAllowed (locked; nothing written),
    /// PermissionDenied, Param, StorageFull.
    public func backup(
        to path: String, passphrase: String?, recipients: [String] = [],
        includeDeviceBound: Bool = false
    ) throws -> JSONObject {
        try connection.call(
            .vaultBackup,
            [
                "path": .string(path), "passphrase": passphrase.map { .string($0) } ?? .null,
                "recipients": recipients.isEmpty ? .null : .array(recipients.map { .string($0) }),
                "includeDeviceBound": .bool(includeDeviceBound),
            ])
    }

    /// `io.vaultd.Vault.Restore`: vaultd restores the backup at `path`, opened with
    /// `passphrase` or `identity` (an age identity file's text); into an uninitialised vault
    /// it creates one with `newPassphrase` (nil: none). Owner only. Returns its reply
    /// (`items`, `preferences`, `apps`: each `added`, `replaced`, `kept`; `unavailableItems`;
    /// `lock`). Throws BackupAuthFailed, BackupUnreadable, NotEmpty (without `merge`),
    /// InteractionNotAllowed, PermissionDenied.
    public func restore(
        from path: String, passphrase: String?, identity: String? = nil,
        newPassphrase: String? = nil, merge: Bool = false
    ) throws -> JSONObject {
        try connection.call(
            .vaultRestore,
            [
                "path": .string(path), "passphrase": passphrase.map { .string($0) } ?? .null,
                "identity": identity.map { .string($0) } ?? .null,
                "newPassphrase": newPassphrase.map { .string($0) } ?? .null, "merge": .bool(merge),
            ])
    }
}

/// `io.vaultd.Vault.Hello`: who vaultd says the caller is.
public struct LaunchInfo: Sendable, Equatable {
    /// The app ID (reverse-DNS), or nil for the owner's tools (an unidentified peer).
    public var appID: String?
    /// The install generation (UUID), or nil for the owner's tools.
    public var generation: String?
    /// True on the first Hello of a new install generation (also when a keychain call of
    /// this generation came before it and did the wipe).
    public var isFirstLaunch: Bool
    /// Keychain items vaultd wiped on this first launch: those of earlier installs in groups
    /// no other installed app shares (0 when the app keeps them, or not a first launch).
    public var wipedCredentials: Int
    /// The keychain access group an add without one goes to (kSecAttrAccessGroup's default):
    /// the app's first access group, or `user` for the owner's tools. nil from a vaultd that
    /// does not say.
    public var defaultAccessGroup: String?
    /// The app's ThisDeviceOnly items that were made with another `device.key` (the vault
    /// moved to this device, or a backup restored here) and cannot be read here
    /// (NotAvailableOnThisDevice): add them again (an add with the same key replaces them).
    public var unavailableItems: Int

    init(_ p: JSONObject) {
        unavailableItems = p["unavailableItems"]?.intValue ?? 0
        appID = p["appID"]?.stringValue
        generation = p["generation"]?.stringValue
        isFirstLaunch = p["firstLaunch"]?.boolValue ?? false
        wipedCredentials = p["wipedCredentials"]?.intValue ?? 0
        defaultAccessGroup = p["defaultAccessGroup"]?.stringValue
    }
}

/// io.vaultd.Vault `LockState`.
public struct LockState: Sendable, Equatable {
    /// `uninitialized`: no vault yet (`initialize`; keychain calls throw NotInitialized);
    /// `locked`: the whenUnlocked* class keys are not in memory (their items throw
    /// InteractionNotAllowed), nor, before the first unlock, any key; `unlocked`.
    public enum State: String, Sendable { case uninitialized, locked, unlocked }
    /// The current state.
    public var state: State
    /// The vault has been unlocked since vaultd started (afterFirstUnlock items usable).
    public var unlockedSinceStart: Bool
    /// The vault has a passphrase now (false: none, always unlocked; also when uninitialized).
    public var hasPassphrase: Bool

    init(_ j: JSON?) {
        state = j?["state"]?.stringValue.flatMap(State.init(rawValue:)) ?? .uninitialized
        unlockedSinceStart = j?["unlockedSinceStart"]?.boolValue ?? false
        hasPassphrase = j?["hasPassphrase"]?.boolValue ?? false
    }
}

/// `io.vaultd.Vault.Status`.
public struct VaultStatus: Sendable, Equatable {
    /// The lock state.
    public var lock: LockState
    /// vaultd's version string.
    public var version: String
    /// Keychain items in the vault: every app's and group's for the owner's tools, those in
    /// its access groups for an app.
    public var items: Int
    /// Of `items`, those made with another `device.key`: NotAvailableOnThisDevice here.
    public var unavailableItems: Int
    /// Preference domains holding at least one key: every one for the owner's tools, those it
    /// may read for an app (its own, its app groups' suites, NSGlobalDomain).
    public var domains: Int
    /// Seconds before another unlock attempt is accepted (0: now).
    public var retryAfter: Double
    /// vaultd's data directory (given to the owner's tools only; nil for apps).
    public var dataDirectory: String?
    /// Where the device key is kept: "tpm" (sealed by a TPM 2.0) or "file" (owner only).
    public var deviceKey: String?
    /// Why the device key is not available now (ThisDeviceOnly items are then
    /// NotAvailableOnThisDevice); nil when it is.
    public var deviceKeyProblem: String?
    /// Whether a recovery key can unlock the vault (owner only).
    public var recoveryKey: Bool?
    /// The `SecretAccess` mode in force: "open", "confirm" or "strict" (owner only;
    /// docs/access.md), and where it comes from: "config" or "vault" (the vault's default).
    public var secretAccess: String?
    public var secretAccessSource: String?

    init(_ p: JSONObject) {
        lock = LockState(p["lock"])
        version = p["version"]?.stringValue ?? ""
        items = p["items"]?.intValue ?? 0
        unavailableItems = p["unavailableItems"]?.intValue ?? 0
        domains = p["domains"]?.intValue ?? 0
        retryAfter = p["retryAfter"]?.doubleValue ?? 0
        dataDirectory = p["dataDirectory"]?.stringValue
        deviceKey = p["deviceKey"]?.stringValue
        deviceKeyProblem = p["deviceKeyProblem"]?.stringValue
        recoveryKey = p["recoveryKey"]?.boolValue
        secretAccess = p["secretAccess"]?.stringValue
        secretAccessSource = p["secretAccessSource"]?.stringValue
    }
}
