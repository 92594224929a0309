/// Every method the interface descriptions declare, by its fully-qualified name: the one list
/// of method names that vaultd's dispatch table, VaultClient and vaultctl use (a test holds
/// it to the `.varlink` files both ways, so a method added to a description is added here,
/// and vaultd's table, whose handlers a `switch` over these cases gives, cannot leave it out).
public enum VarlinkMethod: String, CaseIterable, Sendable {
    // org.varlink.service
    case serviceGetInfo = "org.varlink.service.GetInfo"
    case serviceGetInterfaceDescription = "org.varlink.service.GetInterfaceDescription"
    // io.vaultd.Vault
    case vaultHello = "io.vaultd.Vault.Hello"
    case vaultStatus = "io.vaultd.Vault.Status"
    case vaultInit = "io.vaultd.Vault.Init"
    case vaultUnlock = "io.vaultd.Vault.Unlock"
    case vaultUnlockFromKeyring = "io.vaultd.Vault.UnlockFromKeyring"
    case vaultLock = "io.vaultd.Vault.Lock"
    case vaultChangePassphrase = "io.vaultd.Vault.ChangePassphrase"
    case vaultCreateRecoveryKey = "io.vaultd.Vault.CreateRecoveryKey"
    case vaultRemoveRecoveryKey = "io.vaultd.Vault.RemoveRecoveryKey"
    case vaultUnlockWithRecoveryKey = "io.vaultd.Vault.UnlockWithRecoveryKey"
    case vaultResetPassphrase = "io.vaultd.Vault.ResetPassphrase"
    case vaultObserve = "io.vaultd.Vault.Observe"
    case vaultBackup = "io.vaultd.Vault.Backup"
    case vaultCheck = "io.vaultd.Vault.Check"
    case vaultRestore = "io.vaultd.Vault.Restore"
    // io.vaultd.Keychain
    case keychainAdd = "io.vaultd.Keychain.Add"
    case keychainCopyMatching = "io.vaultd.Keychain.CopyMatching"
    case keychainUpdate = "io.vaultd.Keychain.Update"
    case keychainDelete = "io.vaultd.Keychain.Delete"
    case keychainListAccess = "io.vaultd.Keychain.ListAccess"
    case keychainGrantAccess = "io.vaultd.Keychain.GrantAccess"
    case keychainRevokeAccess = "io.vaultd.Keychain.RevokeAccess"
    // io.vaultd.Preferences
    case preferencesGet = "io.vaultd.Preferences.Get"
    case preferencesSet = "io.vaultd.Preferences.Set"
    case preferencesRemove = "io.vaultd.Preferences.Remove"
    case preferencesDomain = "io.vaultd.Preferences.Domain"
    case preferencesDomains = "io.vaultd.Preferences.Domains"
    case preferencesImport = "io.vaultd.Preferences.Import"
    case preferencesExport = "io.vaultd.Preferences.Export"
    case preferencesObserve = "io.vaultd.Preferences.Observe"
    case preferencesRemoveDomain = "io.vaultd.Preferences.RemoveDomain"
    // io.vaultd.Caches
    case cachesDirectory = "io.vaultd.Caches.Directory"
    case cachesUsage = "io.vaultd.Caches.Usage"
    case cachesPurge = "io.vaultd.Caches.Purge"
    case cachesObserve = "io.vaultd.Caches.Observe"
    // io.vaultd.Apps
    case appsInstall = "io.vaultd.Apps.Install"
    case appsUninstall = "io.vaultd.Apps.Uninstall"
    case appsList = "io.vaultd.Apps.List"
    case appsShow = "io.vaultd.Apps.Show"
    // io.vaultd.Sync
    case syncInit = "io.vaultd.Sync.Init"
    case syncJoin = "io.vaultd.Sync.Join"
    case syncApprove = "io.vaultd.Sync.Approve"
    case syncStatus = "io.vaultd.Sync.Status"
    case syncLeave = "io.vaultd.Sync.Leave"
    case syncRemove = "io.vaultd.Sync.Remove"
    case syncConflicts = "io.vaultd.Sync.Conflicts"
    case syncRestoreConflict = "io.vaultd.Sync.RestoreConflict"
    case syncDismissConflict = "io.vaultd.Sync.DismissConflict"

    /// The fully-qualified name, e.g. `io.vaultd.Keychain.Add`.
    public var name: String { rawValue }

    /// The interface part of the name (`io.vaultd.Keychain`).
    public var interface: String { String(rawValue[..<rawValue.lastIndex(of: ".")!]) }
}
