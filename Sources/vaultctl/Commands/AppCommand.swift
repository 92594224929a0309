import Foundation
import VaultClient
import VaultProtocol

/// `vaultctl app install|uninstall|list|show`
struct AppCommand: Command {
    enum Action: String, CaseIterable { case install, uninstall, list, show }
    var action: Action
    var appID: String?
    var executable: String?
    var accessGroups: [String] = []
    var appGroups: [String] = []
    var keep = false
    var json = false
    /// `app uninstall --dry-run`: say what the uninstall would remove, remove nothing.
    var dryRun = false

    init(_ a: inout Arguments) throws {
        action = try a.verb(of: "app")
        json = a.flag("--json")
        if action == .uninstall { dryRun = a.flag("--dry-run") }
        if action == .install {
            executable = try a.option("--exe")
            accessGroups = try a.options("--access-group")
            appGroups = try a.options("--app-group")
            keep = a.flag("--keep-credentials-on-reinstall")
            guard let exe = executable else {
                throw UsageError(message: "app install needs --exe PATH")
            }
            executable = URL(fileURLWithPath: exe).standardizedFileURL.path
        }
        if action != .list {
            guard let id = a.positional() else {
                throw UsageError(message: "app \(action.rawValue) needs an APP_ID")
            }
            appID = id
        }
    }

    func run(_ context: Context) throws {
        let apps = try (action == .uninstall ? context.vaultForRemovingFiles() : context.vault())
            .apps
        switch action {
        case .install:
            // Installing an installed app is a reinstall (a new generation): say so, and what
            // its first launch does, which "installed" alone did not.
            let wasInstalled = json ? false : ((try? apps.show(appID!))?.installed ?? false)
            let app = try apps.install(
                appID!, executable: executable!, accessGroups: accessGroups, appGroups: appGroups,
                keepCredentialsOnReinstall: keep)
            if json {
                print(app.json.text)
            } else if wasInstalled {
                let wipe = app.keepCredentialsOnReinstall ? "keeps" : "wipes"
                print(
                    "reinstalled \(app.appID) (new generation \(app.generation)): its next launch is a first launch, which \(wipe) the credentials of earlier installs; its preferences and caches stay"
                )
            } else {
                print("installed \(app.appID) (generation \(app.generation))")
            }
        case .uninstall:
            if dryRun {
                // What io.vaultd.Apps.Uninstall does: the preferences domain and the cache
                // directory go, the credentials stay (a reinstall's first launch decides).
                let app = try apps.show(appID!)
                let vault = try context.vault()
                let domain = (try? vault.preferences.values(domain: app.appID))?.count ?? 0
                let cache = (try? vault.cacheUsage())?.apps.first { $0.appID == app.appID }
                print(
                    "would uninstall \(app.appID)\(app.installed ? "" : " (already uninstalled)"): its preferences domain (\(domain) key(s)) and its cache (\(cache?.bytes ?? 0) bytes in \(cache?.files ?? 0) file(s)) would be removed; its credentials would be kept until a reinstall's first launch"
                )
                print("dry run, nothing changed")
                return
            }
            let app = try apps.uninstall(appID!)
            json
                ? print(app.json.text)
                : print(
                    "uninstalled \(app.appID); its credentials are kept until a reinstall's first launch"
                )
        case .show:
            let app = try apps.show(appID!)
            json ? print(app.json.text) : print(Self.describe(app))
        case .list:
            let all = try apps.list()
            if json {
                print(JSON.array(all.map(\.json)).text)
            } else {
                for app in all {
                    print(
                        "\(app.appID)\t\(Self.state(app))\t\(app.flatpak ? "flatpak" : app.executable ?? "")"
                    )
                }
            }
        }
    }

    /// "installed", "uninstalled", or "installed, executable missing since …, uninstalled at …".
    static func state(_ app: AppInfo) -> String {
        guard app.installed else { return "uninstalled" }
        guard let since = app.missingSince else { return "installed" }
        let at =
            app.uninstallAt.map {
                ", counts as uninstalled at \(PlistDate.format($0)) unless it comes back"
            } ?? ""
        let what = app.flatpak ? "Flatpak deployment" : "executable"
        return "installed, \(what) missing since \(PlistDate.format(since))\(at)"
    }

    static func describe(_ app: AppInfo) -> String {
        """
        app ID: \(app.appID)
        state: \(state(app))
        identified by: \(app.flatpak ? "Flatpak ID\(app.executable.map { ", deployed at " + $0 } ?? "")" : "executable \(app.executable ?? "")")
        keychain access groups: \(app.keychainAccessGroups.joined(separator: ", "))
        app groups: \(app.appGroups.joined(separator: ", "))
        keep credentials on reinstall: \(app.keepCredentialsOnReinstall ? "yes" : "no")
        generation: \(app.generation)
        """
    }
}
