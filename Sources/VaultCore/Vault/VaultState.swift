import Foundation

/// The vault's lock state, as Keychain Services' device lock states: before the first
/// unlock, locked, unlocked. Reported by Status, Unlock, Lock, Init and their events.
public struct LockState: Sendable, Equatable {
    public enum State: String, Sendable {
        /// `Init` has not been run.
        case uninitialized
        /// whenUnlocked class keys are not in memory.
        case locked
        case unlocked
    }
    public var state: State
    /// Unlocked at least once since vaultd started (afterFirstUnlock items are readable).
    public var unlockedSinceStart: Bool
    /// The vault has a passphrase (without one it is always unlocked).
    public var hasPassphrase: Bool

    public init(state: State, unlockedSinceStart: Bool, hasPassphrase: Bool) {
        self.state = state
        self.unlockedSinceStart = unlockedSinceStart
        self.hasPassphrase = hasPassphrase
    }
}

/// What `Vault.status` reports: the whole vault's figures to the owner, an app only those it
/// could read anyway.
public struct VaultStatus: Sendable, Equatable {
    public var lock: LockState
    /// Items the caller can see (its access groups; every item for the owner).
    public var items: Int
    /// Of those, ThisDeviceOnly items made on another device.
    public var unavailableItems: Int
    /// Preferences domains the caller can read.
    public var domains: Int
    /// Seconds before the next passphrase check is allowed (0: now).
    public var retryAfter: Double
    /// The data directory, for the owner only.
    public var dataDirectory: String?
    /// Where the device key is kept and whether it is available (owner only; nil for apps).
    public var deviceKey: DeviceKeyStatus?
    /// Whether a recovery key can unlock the vault (owner only; nil for apps).
    public var recoveryKey: Bool?
    /// The `SecretAccess` mode in force (owner only; nil for apps), and whether config.plist
    /// set it (else it is the vault's default: `open` for a vault made before per-program
    /// access, `confirm` after).
    public var secretAccess: SecretAccessMode?
    public var secretAccessConfigured: Bool?
}

/// What a passphrase change did.
public struct PassphraseChange: Sendable, Equatable {
    public var lock: LockState
    /// whenPasscodeSetThisDeviceOnly items deleted (a passphrase removed).
    public var deletedItems: Int
}
