import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A Flatpak app's install state (docs/apps.md#flatpak-apps-install-state): its deployment
/// (`app/ID` in the user's or the system's Flatpak installation, laid out here as `flatpak
/// install` lays it out) gone for the whole grace period is an uninstall, and its return a
/// reinstall whose first launch wipes the app's credentials; back within the period, the
/// same install. Through the real vaultd, a bubblewrap sandbox carrying a Flatpak instance
/// record, and vaultd's test clock for the grace period.
@Suite struct FlatpakInstallStateTests {
    static let appID = "org.example.Deployed"

    /// A vaultd whose Flatpak installations are the test's: the user's under its HOME
    /// (`$XDG_DATA_HOME/flatpak`, as flatpak finds it) and a system one of its own
    /// (`FLATPAK_SYSTEM_DIR`, which flatpak honours too), so the machine's
    /// `/var/lib/flatpak` plays no part.
    static func daemon() throws -> Daemon {
        let d = try Daemon(start: false)
        do {
            try d.start(environment: ["FLATPAK_SYSTEM_DIR": d.root + "/system-flatpak"])
        } catch {
            d.close()
            throw error
        }
        let i = d.ctl(["init", "--no-passphrase"])
        guard i.status == 0 else {
            d.close()
            throw HarnessError("init failed: \(i)")
        }
        return d
    }

    /// The user's installation: `$XDG_DATA_HOME/flatpak`.
    static func userInstallation(_ d: Daemon) -> String { d.root + "/home/.local/share/flatpak" }

    /// Deploys `appID` as `flatpak install --user` does: `app/ID/x86_64/stable/COMMIT/`
    /// holding `metadata` and `files/`, `active` → the commit's directory, and `current` →
    /// `x86_64/stable`. Returns `app/ID`.
    @discardableResult
    static func deploy(_ d: Daemon, _ appID: String, commit: String) throws -> String {
        let fm = FileManager.default
        let app = userInstallation(d) + "/app/" + appID
        let branch = app + "/x86_64/stable"
        try fm.createDirectory(
            atPath: branch + "/" + commit + "/files/bin", withIntermediateDirectories: true)
        try Data("[Application]\nname=\(appID)\nruntime=org.example.Platform/x86_64/1\n".utf8)
            .write(to: URL(fileURLWithPath: branch + "/" + commit + "/metadata"))
        if fm.fileExists(atPath: branch + "/active") {
            try fm.removeItem(atPath: branch + "/active")
        }
        try fm.createSymbolicLink(atPath: branch + "/active", withDestinationPath: commit)
        if !fm.fileExists(atPath: app + "/current") {
            try fm.createSymbolicLink(
                atPath: app + "/current", withDestinationPath: "x86_64/stable")
        }
        return app
    }

    /// `flatpak uninstall`: the app's whole directory goes.
    static func undeploy(_ d: Daemon, _ appID: String) throws {
        try FileManager.default.removeItem(atPath: userInstallation(d) + "/app/" + appID)
    }

    /// vault-example as Flatpak app `appID`, in a sandbox carrying its instance record.
    static func run(
        _ d: Daemon, _ exe: String, _ appID: String, _ arguments: [String], stdin: Data? = nil
    )
        throws -> ProcessResult
    {
        try AppsTests.sandboxed(d, exe, arguments, flatpakID: appID, stdin: stdin)
    }

    @Test(.tags(.system)) func aDeploymentGoneForTheGracePeriodIsAnUninstallAndItsReturnWipes()
        throws
    {
        let d = try Self.daemon()
        defer { d.close() }
        let exe = try d.placeExample("deployed")
        let app = try Self.deploy(d, Self.appID, commit: String(repeating: "a1", count: 32))

        // First contact registers the app; the next scan finds and records its deployment.
        let first = try Self.run(
            d, exe, Self.appID, ["token", "set"], stdin: Data("flat-token".utf8))
        try #require(first.status == 0, "\(first)")
        try d.tick()
        var shown = d.appShow(Self.appID) ?? [:]
        let generation = shown["generation"] as? String
        #expect(
            shown["flatpak"] as? Bool == true && shown["executable"] as? String == app, "\(shown)")
        #expect(d.ctl(["app", "show", Self.appID]).stdoutText.contains("deployed at \(app)"))

        // An update (a new commit made active) is no uninstall.
        try Self.deploy(d, Self.appID, commit: String(repeating: "b2", count: 32))
        try d.tick()
        shown = d.appShow(Self.appID) ?? [:]
        #expect(shown["missingSince"] is NSNull && shown["generation"] as? String == generation)

        // flatpak uninstall: missing from the next scan on, installed until the period passed.
        try Self.undeploy(d, Self.appID)
        try d.tick()
        shown = d.appShow(Self.appID) ?? [:]
        #expect(shown["installed"] as? Bool == true && shown["missingSince"] is String, "\(shown)")
        #expect(
            d.ctl(["app", "list"]).stdoutText.contains(
                "installed, Flatpak deployment missing since"))
        try d.advanceClock(by: 590)
        #expect(d.appShow(Self.appID)?["installed"] as? Bool == true, "uninstalled 590 s in")
        try d.advanceClock(by: 11)
        shown = d.appShow(Self.appID) ?? [:]
        #expect(shown["installed"] as? Bool == false, "\(shown)")
        #expect(
            d.log.contains("its Flatpak deployment has been missing for 600 s or more"), "\(d.log)")
        // The credential stays until the reinstall's first launch.
        #expect(d.ctl(["item", "list", "--access-group", Self.appID]).stdoutText.contains("token"))

        // flatpak install again: a reinstall, a new generation, whose first launch wipes.
        try Self.deploy(d, Self.appID, commit: String(repeating: "c3", count: 32))
        try d.tick()
        shown = d.appShow(Self.appID) ?? [:]
        let reinstalled = shown["generation"] as? String
        #expect(shown["installed"] as? Bool == true && reinstalled != generation, "\(shown)")
        let launch = try Self.run(d, exe, Self.appID, ["launch"])
        let info = Launch(launch.jsonObject ?? [:])
        #expect(
            info.appID == Self.appID && info.generation == reinstalled && info.firstLaunch
                && info.wiped == 1, "\(launch)")
        let get = try Self.run(d, exe, Self.appID, ["token", "get"])
        #expect(get.stdoutText.isEmpty, "the old install's token survived: \(get)")
    }

    @Test(.tags(.system)) func aDeploymentBackWithinTheGracePeriodIsTheSameInstall() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let exe = try d.placeExample("deployed")
        try Self.deploy(d, Self.appID, commit: String(repeating: "a1", count: 32))
        let set = try Self.run(d, exe, Self.appID, ["token", "set"], stdin: Data("kept".utf8))
        try #require(set.status == 0, "\(set)")
        try d.tick()
        let generation = d.appShow(Self.appID)?["generation"] as? String

        try Self.undeploy(d, Self.appID)
        try d.tick()
        try d.advanceClock(by: 590)
        try Self.deploy(d, Self.appID, commit: String(repeating: "d4", count: 32))
        try d.tick()
        let shown = d.appShow(Self.appID) ?? [:]
        #expect(
            shown["installed"] as? Bool == true && shown["missingSince"] is NSNull
                && shown["generation"] as? String == generation, "\(shown)")
        #expect(d.log.contains("its Flatpak deployment is back after about"), "\(d.log)")
        #expect(try Self.run(d, exe, Self.appID, ["token", "get"]).stdoutText == "kept")
    }

    /// A Flatpak app whose deployment vaultd never found (run from an installation it does
    /// not know) is not tracked: however long, it stays installed.
    @Test(.tags(.system)) func anAppNeverFoundDeployedIsNotTracked() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let exe = try d.placeExample("elsewhere")
        let id = "org.example.Elsewhere"
        let r = try Self.run(d, exe, id, ["launch"])
        try #require(r.status == 0, "\(r)")
        try d.advanceClock(by: 700)
        try d.advanceClock(by: 700)
        let shown = d.appShow(id) ?? [:]
        #expect(
            shown["installed"] as? Bool == true && shown["missingSince"] is NSNull
                && shown["executable"] is NSNull, "\(shown)")
    }
}
