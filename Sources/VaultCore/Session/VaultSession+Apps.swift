import Foundation
import VaultProtocol

/// The app registry and the caches tier, as the session's caller may use them (the registry
/// and the purge are the owner's).
extension VaultSession {
    /// See `Vault.installApp`.
    public func installApp(
        _ appID: String, executable: String?, flatpak: Bool = false, accessGroups: [String] = [],
        appGroups: [String] = [], keepCredentialsOnReinstall: Bool = false
    ) throws -> AppRecord {
        try vault.installApp(
            appID, executable: executable, flatpak: flatpak, accessGroups: accessGroups,
            appGroups: appGroups, keepCredentialsOnReinstall: keepCredentialsOnReinstall,
            caller: caller)
    }

    /// See `Vault.uninstallApp`.
    @discardableResult
    public func uninstallApp(_ appID: String) throws -> AppRecord {
        try vault.uninstallApp(appID, caller: caller)
    }

    /// See `Vault.app(_:caller:)`.
    public func app(_ appID: String) throws -> AppRecord { try vault.app(appID, caller: caller) }

    /// See `Vault.allApps`.
    public func allApps() throws -> [AppRecord] { try vault.allApps(caller: caller) }

    /// See `Vault.cacheDirectory`.
    public func cacheDirectory(for appID: String?) throws -> String {
        try vault.cacheDirectory(for: appID, caller: caller)
    }

    /// See `Vault.purgeCaches`.
    public func purgeCaches(appID: String?, bytes: Int64?, running: Set<String>) throws
        -> PurgeReport
    {
        try vault.purgeCaches(appID: appID, bytes: bytes, running: running, caller: caller)
    }

    /// See `Vault.cacheUsage`.
    public func cacheUsage() throws -> [CacheUsage] { try vault.cacheUsage(caller: caller) }
}
