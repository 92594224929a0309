import VaultCore

/// Every varlink method vaultd serves and the engine operation it is, by fully-qualified name.
/// The dispatcher serves only a method listed here (`Dispatcher.requirePolicyDecision`); a test
/// holds this table and the interface descriptions to each other, both ways.
package enum VarlinkOperations {
    package static let byMethod: [String: MethodOperation] = [
        "org.varlink.service.GetInfo": .open,
        "org.varlink.service.GetInterfaceDescription": .open,

        "io.vaultd.Vault.Hello": .operation(.hello),
        "io.vaultd.Vault.Status": .operation(.status),
        "io.vaultd.Vault.Init": .operation(.initialize),
        "io.vaultd.Vault.Unlock": .operation(.unlock),
        "io.vaultd.Vault.UnlockFromKeyring": .operation(.unlockFromKeyring),
        "io.vaultd.Vault.Lock": .operation(.lock),
        "io.vaultd.Vault.ChangePassphrase": .operation(.changePassphrase),
        // The recovery key opens the vault as the passphrase does: making, removing it and
        // resetting the passphrase with it are the owner's, as changing the passphrase is;
        // unlocking with it is Unlock.
        "io.vaultd.Vault.CreateRecoveryKey": .operation(.changePassphrase),
        "io.vaultd.Vault.RemoveRecoveryKey": .operation(.changePassphrase),
        "io.vaultd.Vault.UnlockWithRecoveryKey": .operation(.unlock),
        "io.vaultd.Vault.ResetPassphrase": .operation(.changePassphrase),
        "io.vaultd.Vault.Observe": .operation(.observeLockState),
        "io.vaultd.Vault.Backup": .operation(.backup),
        "io.vaultd.Vault.Restore": .operation(.restore),
        "io.vaultd.Vault.Check": .operation(.checkStore),

        "io.vaultd.Keychain.Add": .operation(.addItem),
        "io.vaultd.Keychain.CopyMatching": .operation(.copyItems),
        "io.vaultd.Keychain.Update": .operation(.updateItems),
        "io.vaultd.Keychain.Delete": .operation(.deleteItems),
        "io.vaultd.Keychain.ListAccess": .operation(.listAccess),
        "io.vaultd.Keychain.GrantAccess": .operation(.grantAccess),
        "io.vaultd.Keychain.RevokeAccess": .operation(.revokeAccess),

        "io.vaultd.Preferences.Get": .operation(.readPreferences),
        "io.vaultd.Preferences.Set": .operation(.writePreferences),
        "io.vaultd.Preferences.Remove": .operation(.writePreferences),
        "io.vaultd.Preferences.Domain": .operation(.readPreferences),
        "io.vaultd.Preferences.Domains": .operation(.listDomains),
        "io.vaultd.Preferences.Import": .operation(.writePreferences),
        "io.vaultd.Preferences.Export": .operation(.readPreferences),
        "io.vaultd.Preferences.RemoveDomain": .operation(.writePreferences),
        "io.vaultd.Preferences.Observe": .operation(.observePreferences),

        "io.vaultd.Caches.Directory": .operation(.cacheDirectory),
        "io.vaultd.Caches.Usage": .operation(.cacheUsage),
        "io.vaultd.Caches.Purge": .operation(.purgeCaches),
        "io.vaultd.Caches.Observe": .operation(.observeCachePurges),

        "io.vaultd.Apps.Install": .operation(.installApp),
        "io.vaultd.Apps.Uninstall": .operation(.uninstallApp),
        "io.vaultd.Apps.List": .operation(.listApps),
        "io.vaultd.Apps.Show": .operation(.showApp),

        "io.vaultd.Sync.Init": .operation(.syncInit),
        "io.vaultd.Sync.Join": .operation(.syncJoin),
        "io.vaultd.Sync.Approve": .operation(.syncApprove),
        "io.vaultd.Sync.Status": .operation(.syncStatus),
        "io.vaultd.Sync.Leave": .operation(.syncLeave),
        "io.vaultd.Sync.Remove": .operation(.syncRemove),
        "io.vaultd.Sync.Conflicts": .operation(.syncConflicts),
        "io.vaultd.Sync.RestoreConflict": .operation(.syncSettleConflict),
        "io.vaultd.Sync.DismissConflict": .operation(.syncSettleConflict),
    ]

    /// The operation `method` is, nil when it has none (the dispatcher refuses it).
    package static func of(_ method: String) -> MethodOperation? { byMethod[method] }
}
