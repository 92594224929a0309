/// Every operation of the engine, as the policy decides on it: what is done and, where the
/// decision depends on it, on what (the access group, the preferences domain, the app), as
/// the caller named it. Each engine operation passes one to `Vault.authorize` before it does
/// anything; front-ends (varlink, D-Bus) only name the engine operation they call.
public enum Operation: Sendable, Equatable {
    // The vault's life-cycle (io.vaultd.Vault).
    case hello
    case status
    case initialize
    case unlock
    /// Unlock with the passphrase remembered in the login keyring.
    case unlockFromKeyring
    case lock
    case changePassphrase
    case observeLockState
    /// A backup of the whole vault written to a file, and a restore from one (owner only:
    /// they read and write every item, domain and registration).
    case backup
    case restore
    /// A check of the store (`vaultctl doctor`): it names every damaged item, of every
    /// access group (owner only).
    case checkStore

    // Keychain items (SecItem*). `accessGroup`: the group the call names (in the query, or an
    // Add's attributes); nil: every group the caller may see (an Add: its default group).
    case addItem(accessGroup: String?)
    case copyItems(accessGroup: String?)
    /// `newAccessGroup`: the group the update moves the matches to, if it names one.
    case updateItems(accessGroup: String?, newAccessGroup: String?)
    case deleteItems(accessGroup: String?)
    /// The access groups the caller sees as Secret Service collections.
    case listAccessGroups
    /// A Secret Service collection used as such (CreateCollection, its own properties):
    /// `accessGroup`, the group the collection is.
    case useAccessGroup(accessGroup: String)
    /// A Secret Service Unlock: asks for the vault to be unlocked (a prompt that the owner's
    /// unlock completes); unlocks nothing itself.
    case requestUnlock
    /// A Secret Service SetAlias (which collection `default` or `login` names).
    case setAlias
    /// The Secret Service's signals: the changes to items of the access groups the caller
    /// sees (ItemCreated, ItemDeleted, ItemChanged) and the lock state (`Locked`).
    case observeItemChanges
    /// A process registering itself as the Secret Service's prompter: the agent vaultd asks
    /// for the passphrase when a client's prompt unlocks the vault (a desktop's dialog).
    case registerPrompter
    /// The remembered per-program access decisions: listed, granted, revoked (the owner's:
    /// a grant is confirmed by the user too, `Vault.grantAccess`).
    case listAccess
    case grantAccess
    case revokeAccess

    // Preferences. `domain`: the domain or suite the call names; nil: the caller's own.
    case readPreferences(domain: String?)
    case writePreferences(domain: String?)
    /// The list of stored domains (only those the caller may read are shown).
    case listDomains
    /// `domains`: nil, the caller's own.
    case observePreferences(domains: [String]?)

    // Caches. `appID`: the app the call names (an app may name only itself).
    case cacheDirectory(appID: String?)
    case cacheUsage
    case purgeCaches
    case observeCachePurges

    // The app registry.
    case installApp
    case uninstallApp
    case listApps
    case showApp

    // Sync between the owner's devices (io.vaultd.Sync): the owner's alone.
    case syncInit
    case syncJoin
    case syncApprove
    case syncStatus
    case syncLeave
    case syncRemove
    case syncConflicts
    /// Restores or dismisses a conflict (both write the item anew).
    case syncSettleConflict

    /// The operation without what it acts on: what the method table names.
    public var kind: Kind {
        switch self {
        case .hello: .hello
        case .status: .status
        case .initialize: .initialize
        case .unlock: .unlock
        case .unlockFromKeyring: .unlockFromKeyring
        case .lock: .lock
        case .changePassphrase: .changePassphrase
        case .observeLockState: .observeLockState
        case .backup: .backup
        case .restore: .restore
        case .checkStore: .checkStore
        case .addItem: .addItem
        case .copyItems: .copyItems
        case .updateItems: .updateItems
        case .deleteItems: .deleteItems
        case .listAccessGroups: .listAccessGroups
        case .useAccessGroup: .useAccessGroup
        case .requestUnlock: .requestUnlock
        case .setAlias: .setAlias
        case .observeItemChanges: .observeItemChanges
        case .registerPrompter: .registerPrompter
        case .listAccess: .listAccess
        case .grantAccess: .grantAccess
        case .revokeAccess: .revokeAccess
        case .readPreferences: .readPreferences
        case .writePreferences: .writePreferences
        case .listDomains: .listDomains
        case .observePreferences: .observePreferences
        case .cacheDirectory: .cacheDirectory
        case .cacheUsage: .cacheUsage
        case .purgeCaches: .purgeCaches
        case .observeCachePurges: .observeCachePurges
        case .installApp: .installApp
        case .uninstallApp: .uninstallApp
        case .listApps: .listApps
        case .showApp: .showApp
        case .syncInit: .syncInit
        case .syncJoin: .syncJoin
        case .syncApprove: .syncApprove
        case .syncStatus: .syncStatus
        case .syncLeave: .syncLeave
        case .syncRemove: .syncRemove
        case .syncConflicts: .syncConflicts
        case .syncSettleConflict: .syncSettleConflict
        }
    }

    /// An operation's kind: one per case of `Operation`.
    public enum Kind: String, Sendable, CaseIterable {
        case hello, status, initialize, unlock, unlockFromKeyring, lock, changePassphrase,
            observeLockState, backup, restore, checkStore
        case addItem, copyItems, updateItems, deleteItems
        case listAccessGroups, useAccessGroup, requestUnlock, setAlias, registerPrompter,
            observeItemChanges
        case listAccess, grantAccess, revokeAccess
        case readPreferences, writePreferences, listDomains, observePreferences
        case cacheDirectory, cacheUsage, purgeCaches, observeCachePurges
        case installApp, uninstallApp, listApps, showApp
        case syncInit, syncJoin, syncApprove, syncStatus, syncLeave, syncRemove, syncConflicts,
            syncSettleConflict

        /// Who may call it (see `Audience`).
        public var audience: Audience {
            switch self {
            // Apps may not lock, unlock, nor try passphrases; the registry and the purge of
            // caches are the owner's, and so are backups and restores, which hold everything, and
            // sync, which carries the owner's synchronizable items to other devices. The
            // prompter is handed the vault's passphrase: the owner's program alone.
            case .initialize, .unlock, .unlockFromKeyring, .lock, .changePassphrase, .backup,
                .restore, .checkStore, .purgeCaches,
                .installApp, .uninstallApp, .listApps, .showApp, .setAlias, .registerPrompter,
                .listAccess, .grantAccess, .revokeAccess,
                .syncInit, .syncJoin, .syncApprove, .syncStatus, .syncLeave, .syncRemove,
                .syncConflicts, .syncSettleConflict:
                .owner
            case .hello, .status, .observeLockState, .addItem, .copyItems, .updateItems,
                .deleteItems,
                .readPreferences, .writePreferences, .listDomains, .observePreferences,
                .cacheDirectory, .cacheUsage, .observeCachePurges, .listAccessGroups,
                .useAccessGroup, .requestUnlock, .observeItemChanges:
                .admitted
            }
        }

        /// Whether an app's first call of a new install generation launches it (wipes what
        /// earlier installs left, `Vault.admit`): the keychain calls, and Status, whose
        /// figures must not count what that launch wipes.
        var launchesApp: Bool {
            switch self {
            case .status, .addItem, .copyItems, .updateItems, .deleteItems, .listAccessGroups: true
            default: false
            }
        }
    }

    /// Who may perform an operation.
    public enum Audience: String, Sendable {
        /// The owner's own tools only (an app: PermissionDenied, whatever its install).
        case owner
        /// The owner, and an app whose install generation is still current (an earlier
        /// install's connection: MissingEntitlement); what an app may touch is then decided
        /// on the operation's target (groups, domains, its own cache).
        case admitted
    }
}
