import Foundation
import VaultProtocol

/// A registered app as io.vaultd.Apps reports it.
public struct AppInfo: Sendable, Equatable {
    /// The reverse-DNS app ID (its preferences domain and cache directory name).
    public var appID: String
    /// The absolute path of the executable that identifies it; nil for a Flatpak app.
    public var executable: String?
    /// Identified by its Flatpak ID (`/.flatpak-info`) rather than an executable.
    public var flatpak: Bool
    /// The keychain access groups it was registered with (`--access-group`), in order.
    public var accessGroups: [String]
    /// Its app groups (`group.*`): shared keychain groups and preference suites.
    public var appGroups: [String]
    /// Every keychain access group, in order (its access groups, its app ID, its app
    /// groups); the first is the default for Add.
    public var keychainAccessGroups: [String]
    /// Its credentials survive a reinstall's first launch (not wiped).
    public var keepCredentialsOnReinstall: Bool
    /// False once uninstalled (or its executable stayed absent for the grace period); the
    /// record stays, with the credentials, until a reinstall.
    public var installed: Bool
    /// The current install generation (a lowercase UUID); new on each install.
    public var generation: String
    /// When the current generation was installed.
    public var installedAt: Date?
    /// Installed, but its executable has been absent since then (nil while it is there).
    public var missingSince: Date?
    /// When it counts as uninstalled if its executable stays absent (the grace period,
    /// vaultd's `UninstallGraceSeconds`, after `missingSince`).
    public var uninstallAt: Date?
    /// The raw reply, for `--json` output.
    public var json: JSON

    init(_ j: JSON?) {
        let j = j ?? .null
        json = j
        func list(_ k: String) -> [String] { j[k]?.arrayValue?.compactMap(\.stringValue) ?? [] }
        appID = j["appID"]?.stringValue ?? ""
        executable = j["executable"]?.stringValue
        flatpak = j["flatpak"]?.boolValue ?? false
        accessGroups = list("accessGroups")
        appGroups = list("appGroups")
        keychainAccessGroups = list("keychainAccessGroups")
        keepCredentialsOnReinstall = j["keepCredentialsOnReinstall"]?.boolValue ?? false
        installed = j["installed"]?.boolValue ?? false
        generation = j["generation"]?.stringValue ?? ""
        installedAt = j["installedAt"]?.stringValue.flatMap(PlistDate.parse)
        missingSince = j["missingSince"]?.stringValue.flatMap(PlistDate.parse)
        uninstallAt = j["uninstallAt"]?.stringValue.flatMap(PlistDate.parse)
    }
}

/// The app registry (docs/apps.md; owner only: apps get PermissionDenied). Throws `VaultError`
/// AppNotFound, InvalidAppID, InvalidParameter, PermissionDenied, ConnectionFailed.
public struct Apps: Sendable {
    let connection: VaultConnection

    /// Registers (or reinstalls, with a new generation) an app identified by `executable`,
    /// an absolute path to an existing executable file that no other installed app has.
    /// `accessGroups`: keychain access groups (1 to 255 bytes, no control characters);
    /// `appGroups`: `group.*` names. Throws InvalidAppID (not reverse-DNS, over 255 bytes),
    /// InvalidParameter naming `executable`, `accessGroups` or `appGroups`.
    @discardableResult
    public func install(
        _ appID: String, executable: String, accessGroups: [String] = [], appGroups: [String] = [],
        keepCredentialsOnReinstall: Bool = false
    ) throws -> AppInfo {
        AppInfo(
            try connection.call(
                .appsInstall,
                [
                    "appID": .string(appID), "executable": .string(executable),
                    "accessGroups": .array(accessGroups.map { .string($0) }),
                    "appGroups": .array(appGroups.map { .string($0) }),
                    "keepCredentialsOnReinstall": .bool(keepCredentialsOnReinstall),
                ])["app"])
    }

    /// Uninstalls: preferences and caches go, credentials stay until a reinstall's first
    /// launch (as iOS). Its open connections get MissingEntitlement from then on. Throws AppNotFound.
    @discardableResult
    public func uninstall(_ appID: String) throws -> AppInfo {
        AppInfo(
            try connection.call(.appsUninstall, ["appID": .string(appID)], removingFiles: true)[
                "app"])
    }

    /// Every registered app, installed or not. Owner only (PermissionDenied for apps).
    public func list() throws -> [AppInfo] {
        (try connection.call(.appsList)["apps"]?.arrayValue ?? []).map { AppInfo($0) }
    }

    /// One registered app, installed or not. Throws AppNotFound; owner only.
    public func show(_ appID: String) throws -> AppInfo {
        AppInfo(try connection.call(.appsShow, ["appID": .string(appID)])["app"])
    }
}

extension Vault {
    /// The app registry (owner only).
    public var apps: Apps { Apps(connection: connection) }
}
