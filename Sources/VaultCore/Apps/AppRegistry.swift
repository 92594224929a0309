import Foundation
import VaultProtocol

/// A registered app (docs/apps.md).
public struct AppRecord: Sendable, Equatable {
    /// Reverse-DNS app ID, e.g. `org.example.Notes`.
    public var appID: String
    /// The executable that identifies the app, as registered (an absolute path, symlinks
    /// kept), or nil for a Flatpak app.
    public var executable: String?
    /// Identified by its Flatpak ID (`/.flatpak-info`) rather than an executable.
    public var flatpak: Bool
    /// Registered keychain access groups, in order (before the app ID and app groups).
    public var accessGroups: [String]
    /// App groups (`group.*`): shared keychain groups and preference suites.
    public var appGroups: [String]
    /// Keep credentials of earlier installs on the first launch of a new one.
    public var keepCredentialsOnReinstall: Bool
    public var installed: Bool
    /// The current install generation (UUID).
    public var generation: String
    /// When the current generation was installed.
    public var installedAt: Date
    /// The generation whose first launch happened last (nil: never launched).
    public var launchedGeneration: String?
    /// Uninstalled because its executable disappeared: it is reinstalled when it comes back.
    public var executableMissing = false
    /// Credentials wiped at that first launch, while no Hello has reported it yet (the launch
    /// began with another call): the generation's first Hello reports it. Nil once reported.
    public var unreportedLaunchWipe: Int?
    /// Installed, but its executable has been absent ("no such file") since then: it is
    /// uninstalled once it has been absent for the whole grace period
    /// (`AppSettings.uninstallGraceSeconds`), and is the same install if it comes back
    /// first. Nil while the executable is there.
    public var missingSince: Date?
    /// When an absent executable's app counts as uninstalled (`missingSince` plus the grace
    /// period in force); filled in by `Vault.app` and `Vault.allApps`, not stored.
    public var uninstallAt: Date?

    /// The executable as `/proc/PID/exe` shows the program it leads to now: every symlink
    /// resolved (nil for a Flatpak app).
    public var resolvedExecutable: String? { executable.map(Vault.canonicalPath) }

    /// Every keychain access group of the app, in order; the first is the default for Add.
    public var keychainAccessGroups: [String] {
        var out: [String] = []
        for g in accessGroups + [appID] + appGroups where !out.containsBytes(g) { out.append(g) }
        return out
    }

    public var caller: Caller {
        var c = Caller(
            appID: appID, accessGroups: keychainAccessGroups, appGroups: appGroups,
            generation: generation)
        // An app's program is the app, however it runs (issue 40 §2).
        c.program = ProgramIdentity(kind: flatpak ? .flatpak : .app, path: appID)
        return c
    }

    /// Validates a reverse-DNS app ID: two or more dot-separated components of letters,
    /// digits, '_' and '-', the first not starting with a digit; at most 255 bytes; not
    /// `group.*`, which names app groups: an app's own preferences domain and keychain
    /// access group are its ID, so an app named group.X would have the suite and the access
    /// group of app group group.X as its own (reading and writing them without being a
    /// member), every member of group.X would have that app's private domain and items, and
    /// its uninstall would delete the members' suite. Throws `VaultFailure` InvalidAppID.
    public static func validate(appID: String) throws {
        if appID.hasPrefix("group.") {
            throw VaultFailure(
                .invalidAppID,
                "'\(appID)' names an app group (group.*), not an app; app IDs must not start with 'group.'"
            )
        }
        let parts = appID.split(separator: ".", omittingEmptySubsequences: false)
        let ok =
            appID.utf8.count <= 255 && parts.count >= 2
            && parts.allSatisfy { p in
                !p.isEmpty
                    && p.unicodeScalars.allSatisfy {
                        $0.isASCII
                            && (CharacterSet.alphanumerics.contains($0) || $0 == "_" || $0 == "-")
                    }
            }
            && !(parts[0].first?.isNumber ?? true)
        guard ok else {
            throw VaultFailure(
                .invalidAppID, "'\(appID)' is not a reverse-DNS app ID (e.g. org.example.App)")
        }
    }

    /// Whether an access group name is 1...255 bytes without control characters.
    static func isValid(group: String) -> Bool {
        !group.isEmpty && group.utf8.count <= 255
            && !group.unicodeScalars.contains(where: { $0.value < 0x20 })
    }
}

/// The apps table. It holds no connection: each operation reads or writes through the one it
/// is handed (`in db:`: a write's transaction, a reader's snapshot, the writer's under the
/// engine lock).
struct AppRegistry {
    private static let columns =
        "app_id, executable, flatpak, access_groups, app_groups, keep_credentials, installed, generation, installed_at, launched_generation, executable_missing, unreported_launch_wipe, missing_since"

    private static func record(_ r: Row) -> AppRecord? {
        guard let id = r[0].text, let groups = r[3].text, let appGroups = r[4].text,
            let gen = r[7].text
        else { return nil }
        func list(_ s: String) -> [String] {
            (try? JSON.parse(s))?.arrayValue?.compactMap(\.stringValue) ?? []
        }
        return AppRecord(
            appID: id, executable: r[1].text, flatpak: r[2].int64 == 1, accessGroups: list(groups),
            appGroups: list(appGroups),
            keepCredentialsOnReinstall: r[5].int64 == 1, installed: r[6].int64 == 1,
            generation: gen,
            installedAt: Date(timeIntervalSince1970: r[8].real ?? 0), launchedGeneration: r[9].text,
            executableMissing: r[10].int64 == 1,
            unreportedLaunchWipe: r[11].int64.map { Int($0) },
            missingSince: r[12].real.map { Date(timeIntervalSince1970: $0) })
    }

    func all(in db: Database) throws -> [AppRecord] {
        try db.rows("SELECT \(Self.columns) FROM apps ORDER BY app_id").compactMap(Self.record)
    }

    func find(_ appID: String, in db: Database) throws -> AppRecord? {
        try db.row("SELECT \(Self.columns) FROM apps WHERE app_id = ?", [.text(appID)]).flatMap(
            Self.record)
    }

    /// How many apps are registered by Flatpak ID (installed or not): the registrations a
    /// sandbox can cause by connecting.
    func flatpakCount(in db: Database) throws -> Int {
        Int(try db.row("SELECT count(*) FROM apps WHERE flatpak = 1")?[0].int64 ?? 0)
    }

    /// Records `a`'s current generation as one of its installs (`app_generations`).
    func recordGeneration(of a: AppRecord, in db: Database) throws {
        try db.run(
            "INSERT OR IGNORE INTO app_generations (generation, app_id) VALUES (?, ?)",
            [.text(a.generation), .text(a.appID)])
    }

    func save(_ a: AppRecord, in db: Database) throws {
        func list(_ l: [String]) -> SQLValue { .text(JSON.array(l.map { .string($0) }).text) }
        try db.run(
            "INSERT OR REPLACE INTO apps (\(Self.columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                .text(a.appID), a.executable.map { .text($0) } ?? .null,
                .integer(a.flatpak ? 1 : 0), list(a.accessGroups),
                list(a.appGroups), .integer(a.keepCredentialsOnReinstall ? 1 : 0),
                .integer(a.installed ? 1 : 0),
                .text(a.generation), .real(a.installedAt.timeIntervalSince1970),
                a.launchedGeneration.map { .text($0) } ?? .null,
                .integer(a.executableMissing ? 1 : 0),
                a.unreportedLaunchWipe.map { .integer(Int64($0)) } ?? .null,
                a.missingSince.map { .real($0.timeIntervalSince1970) } ?? .null,
            ])
    }

    /// Deletes the keychain items a first launch of `app` must wipe: made under an earlier
    /// generation of the app, in groups no other installed app shares. Returns how many.
    /// Such an item is one whose generation is one of the app's earlier installs
    /// (`app_generations`), in any group (also one the app no longer has), or one in the
    /// app's groups whose generation is not known (made before generations were recorded)
    /// and is not another app's last install (an app uninstalled now but sharing a group: its
    /// leftovers are for its own next first launch). The owner's items (no generation) stay.
    /// Needs no class key, so a locked vault cannot be used to skip it.
    func wipeLeftoverCredentials(of app: AppRecord, in db: Database) throws -> Int {
        let everyOther = try all(in: db).filter { $0.appID != app.appID }
        // Byte for byte (`containsBytes`): a `Set` of strings would keep one of two
        // canonically equivalent groups (`é`, `e` + U+0301), which are two groups in the store.
        var shared: [String] = []
        for g in everyOther.filter(\.installed).flatMap(\.keychainAccessGroups)
        where !shared.containsBytes(g) { shared.append(g) }
        let groups = app.keychainAccessGroups.filter { !shared.containsBytes($0) }
        let keep = [app.generation] + everyOther.map(\.generation)
        // One SQL text whatever the lists hold (JSON arrays through json_each): a text per
        // list length was one more cached statement per registered app.
        func list(_ l: [String]) -> SQLValue { .text(JSON.array(l.map { .string($0) }).text) }
        return try db.run(
            """
            DELETE FROM items WHERE generation IS NOT NULL AND generation != ? AND access_group NOT IN (SELECT value FROM json_each(?)) AND (
              generation IN (SELECT generation FROM app_generations WHERE app_id = ?)
              OR (access_group IN (SELECT value FROM json_each(?)) AND generation NOT IN (SELECT value FROM json_each(?))
                  AND generation NOT IN (SELECT generation FROM app_generations)))
            """,
            [.text(app.generation), list(shared), .text(app.appID), list(groups), list(keep)])
    }
}
