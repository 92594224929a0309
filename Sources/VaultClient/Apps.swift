import Foundation
import VaultProtocol

/// A registered app as io.vaultd.Apps reports it.
public struct AppInfo: Sendable, Equatable {
    public var appID: String
    public var executable: String?
    public var flatpak: Bool
    public var accessGroups: [String]
    public var appGroups: [String]
    /// Every keychain access group, in order; the first is the default for Add.
    public var keychainAccessGroups: [String]
    public var keepCredentialsOnReinstall: Bool
    public var installed: Bool
    /// The current install generation (UUID).
    public var generation: String
    public var installedAt: Date?
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
    }
}

/// The app registry (owner only). Throws `VaultError` AppNotFound, InvalidAppID, Param,
/// PermissionDenied.
public struct Apps: Sendable {
    let connection: VaultConnection

    /// Registers (or reinstalls, with a new generation) an app identified by `executable`.
    @discardableResult
    public func install(
        _ appID: String, executable: String, accessGroups: [String] = [], appGroups: [String] = [],
        keepCredentialsOnReinstall: Bool = false
    ) throws -> AppInfo {
        AppInfo(
            try connection.call(
                "io.vaultd.Apps.Install",
                [
                    "appID": .string(appID), "executable": .string(executable), "accessGroups": .array(accessGroups.map { .string($0) }),
                    "appGroups": .array(appGroups.map { .string($0) }), "keepCredentialsOnReinstall": .bool(keepCredentialsOnReinstall),
                ])["app"])
    }

    /// Uninstalls: preferences and caches go, credentials stay until a reinstall's first launch.
    @discardableResult
    public func uninstall(_ appID: String) throws -> AppInfo {
        AppInfo(try connection.call("io.vaultd.Apps.Uninstall", ["appID": .string(appID)])["app"])
    }

    public func list() throws -> [AppInfo] {
        (try connection.call("io.vaultd.Apps.List")["apps"]?.arrayValue ?? []).map { AppInfo($0) }
    }

    public func show(_ appID: String) throws -> AppInfo {
        AppInfo(try connection.call("io.vaultd.Apps.Show", ["appID": .string(appID)])["app"])
    }
}

extension Vault {
    /// The app registry (owner only).
    public var apps: Apps { Apps(connection: connection) }
}
