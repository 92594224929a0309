import Foundation
import Synchronization
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Serializes the registry changes that read, then write (register, and a Flatpak app's
/// registration on first contact); the engine lock is not reentrant, so it cannot span them.
private let registration = NSLock()

/// Settings for the app registry, from config.plist (vaultd sets them at start and on
/// SIGHUP); read under a lock of their own.
public final class AppSettings: Sendable {
    private struct Values {
        var maximumAutoRegisteredApps = 256
        var uninstallGraceSeconds: Double = 600
        var flatpakInstallations: [String] = []
    }
    private let values = Mutex(Values())

    /// The most apps registered by Flatpak ID (installed or not; the records stay after an
    /// uninstall): a sandbox that names a Flatpak app vaultd does not know yet is registered
    /// on first contact only while fewer are. Beyond it such a sandbox is refused
    /// (RateLimited, logged), so a sandbox renaming itself at every connection cannot grow
    /// the registry, the store or the log without bound. `MaximumAutoRegisteredApps`,
    /// default 256.
    public var maximumAutoRegisteredApps: Int {
        get { values.withLock { $0.maximumAutoRegisteredApps } }
        set { values.withLock { $0.maximumAutoRegisteredApps = newValue } }
    }

    /// How long a registered executable may be absent ("no such file") before its app
    /// counts as uninstalled (seconds; `UninstallGraceSeconds`, default 600). A rebuild or a
    /// package upgrade removes the file and writes it again: within this it is the same
    /// install (generation, credentials, preferences, caches).
    public var uninstallGraceSeconds: Double {
        get { values.withLock { $0.uninstallGraceSeconds } }
        set { values.withLock { $0.uninstallGraceSeconds = newValue } }
    }

    /// The Flatpak installations (absolute paths, the user's first, then the system's: what
    /// `flatpak --user` and `flatpak --system` use) whose deployments say which Flatpak apps
    /// are installed (docs/apps.md#flatpak-apps-install-state). vaultd sets them at start;
    /// empty: no Flatpak app's install state is tracked.
    public var flatpakInstallations: [String] {
        get { values.withLock { $0.flatpakInstallations } }
        set { values.withLock { $0.flatpakInstallations = newValue } }
    }
}

extension Vault {
    /// Registers `appID` (a new install generation each time), identified by `executable`
    /// (`/proc/PID/exe`) or, with `flatpak`, by its Flatpak ID. Owner only. Throws
    /// InvalidAppID, InvalidParameter (naming `executable`, `accessGroups` or `appGroups`),
    /// PermissionDenied.
    func installApp(
        _ appID: String, executable: String?, flatpak: Bool = false, accessGroups: [String] = [],
        appGroups: [String] = [],
        keepCredentialsOnReinstall: Bool = false, caller: Caller
    ) throws -> AppRecord {
        _ = try authorize(.installApp, for: caller)
        return try registration.withLock {
            try register(
                appID, executable: executable, flatpak: flatpak, accessGroups: accessGroups,
                appGroups: appGroups,
                keepCredentialsOnReinstall: keepCredentialsOnReinstall)
        }
    }

    private func register(
        _ appID: String, executable: String?, flatpak: Bool, accessGroups: [String],
        appGroups: [String],
        keepCredentialsOnReinstall: Bool
    ) throws -> AppRecord {
        try AppRecord.validate(appID: appID)
        // Bad arguments are varlink's InvalidParameter, naming Install's parameter (not
        // Keychain.Param, an error of another interface).
        guard flatpak || executable != nil else {
            throw VaultFailure.invalidParameter(
                "executable", "an app needs an executable path (or a Flatpak ID)")
        }
        if let e = executable, !e.hasPrefix("/") {
            throw VaultFailure.invalidParameter(
                "executable", "the executable path must be absolute")
        }
        // No file has a NUL in its path; realpath and stat would cut it there and register
        // the file named by what comes before.
        if let e = executable, e.utf8.contains(0) {
            throw VaultFailure.invalidParameter(
                "executable", "the executable path contains a NUL byte")
        }
        for g in accessGroups where !AppRecord.isValid(group: g) {
            throw VaultFailure.invalidParameter(
                "accessGroups", "invalid access group name (1 to 255 bytes, no control characters)")
        }
        for g in appGroups {
            guard g.hasPrefix("group."), g.count > 6 else {
                throw VaultFailure.invalidParameter(
                    "appGroups", "app groups must start with 'group.'")
            }
            guard AppRecord.isValid(group: g) else {
                throw VaultFailure.invalidParameter(
                    "appGroups", "invalid app group name (1 to 255 bytes, no control characters)")
            }
        }
        // Kept as given: a symlink in it is followed each time a peer is identified (and by
        // the scan), so an upgrade that repoints it (`/opt/app/current`, update-alternatives,
        // a Nix or Homebrew profile) leaves the app installed and identified. Were it resolved
        // once here, the old version's removal would be an uninstall and the new one would
        // run unidentified. The file that identifies the app must be there and be a program:
        // an app registered with a missing one would be marked uninstalled a second later,
        // and given a new generation when the file appeared.
        // A Flatpak app's `executable` is its deployment directory (`Vault.flatpakDeployment`),
        // recorded by the scan, never a program.
        if let e = executable, !flatpak {
            guard let st = try? SystemCall.stat(e), st.st_mode & S_IFMT == S_IFREG,
                SystemCall.access(e, X_OK)
            else {
                throw VaultFailure.invalidParameter(
                    "executable", "the executable \(e) is not an existing executable file")
            }
            // A script runs as its interpreter: /proc/PID/exe never names it, so the app would
            // never be identified and would run as the owner.
            if let interpreter = Self.scriptInterpreter(e) {
                throw VaultFailure.invalidParameter(
                    "executable",
                    "the executable \(e) is a script: it runs as its interpreter (\(interpreter)), the program vaultd sees; register a program (e.g. a copy of the interpreter for this app)"
                )
            }
        }
        if !flatpak, let e = executable.map(Self.canonicalPath),
            try exclusive({ try apps.all(in: $0.db) }).contains(where: {
                $0.installed && $0.resolvedExecutable?.sameBytes(e) == true && $0.appID != appID
            })
        {
            throw VaultFailure.invalidParameter(
                "executable", "another installed app is registered with this executable")
        }
        let earlier = try exclusive { try apps.find(appID, in: $0.db) }
        // What an earlier, uninstalled install left in its cache directory goes before the
        // new install can see it: the uninstall's removal may not have finished (vaultd
        // killed during it), or an instance still running after the uninstall made the
        // directory again. vaultd makes nothing there meanwhile (the app is not installed, so
        // its connections are refused, and the owner's Caches.Directory is AppNotFound), but
        // an instance of the earlier install that is still running writes to the path
        // directly, before the save below or after it: only ending it stops that.
        if let earlier, !earlier.installed { caches.removeDirectory(of: appID) }
        let record = AppRecord(
            appID: appID, executable: executable, flatpak: flatpak, accessGroups: accessGroups,
            appGroups: appGroups,
            keepCredentialsOnReinstall: keepCredentialsOnReinstall, installed: true,
            generation: UUID().uuidString.lowercased(),
            installedAt: Date(), launchedGeneration: earlier?.launchedGeneration)
        try write { db in
            try self.apps.save(record, in: db)
            try self.apps.recordGeneration(of: record, in: db)
        }
        logger.notice("app \(appID) installed (generation \(record.generation))")
        return record
    }

    /// The interpreter line of a `#!` script (what follows `#!`, e.g. `/usr/bin/env python3`),
    /// nil when `path` does not start with `#!`.
    static func scriptInterpreter(_ path: String) -> String? {
        guard let fd = try? FileDescriptor(opening: path, O_RDONLY | O_CLOEXEC) else { return nil }
        var buf = [UInt8](repeating: 0, count: 256)
        let n = (try? buf.withUnsafeMutableBytes { try fd.read(into: $0) }) ?? -1
        guard n >= 2, buf[0] == UInt8(ascii: "#"), buf[1] == UInt8(ascii: "!") else { return nil }
        let line = buf[2..<n].prefix { $0 != 0x0A }
        let interpreter = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespaces)
        return interpreter.isEmpty ? "?" : interpreter
    }

    /// `path` with symlinks resolved (`realpath`), or only standardized when it does not exist.
    static func canonicalPath(_ path: String) -> String {
        (try? SystemCall.realpath(path)) ?? URL(fileURLWithPath: path).standardizedFileURL.path
    }

    /// Uninstalls: the app's preferences domain and cache directory are deleted; its keychain
    /// items stay (as on iOS) until the first launch of a reinstall. Owner only.
    /// Throws AppNotFound.
    @discardableResult
    func uninstallApp(_ appID: String, caller: Caller) throws -> AppRecord {
        _ = try authorize(.uninstallApp, for: caller)
        return try markUninstalled(appID, executableMissing: false)
    }

    /// Uninstall (docs/apps.md): the app's preferences domain goes, and so does each of its
    /// app-group suites (`group.*`) that no installed app is a member of any more, as iOS
    /// removes an app group's shared container (its UserDefaults suite with it) with the
    /// group's last app. Credentials stay.
    private func markUninstalled(_ appID: String, executableMissing: Bool) throws -> AppRecord {
        // Observers of the domains learn that their keys went, as with any other removal (in
        // commit order with other preference writes: `inEventOrder`).
        let record: AppRecord = try inEventOrder { ticket in
            let (a, removed): (AppRecord, [(domain: String, key: String)]) = try writeMakingRoom {
                db in
                guard var a = try self.apps.find(appID, in: db) else {
                    throw VaultFailure(.appNotFound, "no app \(appID)")
                }
                a.installed = false
                a.executableMissing = executableMissing
                a.missingSince = nil
                try self.apps.save(a, in: db)
                let stillShared = try self.apps.all(in: db).filter {
                    $0.installed && $0.appID != appID
                }.flatMap(\.appGroups)
                var removed: [(domain: String, key: String)] = []
                for domain in [appID] + a.appGroups.filter({ !stillShared.containsBytes($0) }) {
                    removed += try self.preferences.storedValues(domain, in: db).keys.map {
                        (domain, $0)
                    }
                    _ = try self.preferences.removeDomain(domain, in: db)
                }
                ticket.take()
                return (a, removed)
            }
            return (
                a,
                removed.map {
                    .preference(
                        domain: $0.domain, key: $0.key, value: nil, sequence: ticket.sequence)
                }
            )
        }
        // Only while the app is still uninstalled: an install since the commit (it does not
        // wait for this one, and removes what is left under the cache lock before saving its
        // record) may have a cache of its own by now.
        caches.removeDirectory(of: appID) { (try? isInstalled(appID)) != true }
        logger.notice("app \(appID) uninstalled")
        return record
    }

    func app(_ appID: String, caller: Caller) throws -> AppRecord {
        _ = try authorize(.showApp, for: caller)
        guard let a = try exclusive({ try apps.find(appID, in: $0.db) }) else {
            throw VaultFailure(.appNotFound, "no app \(appID)")
        }
        return withUninstallTime(a)
    }

    func allApps(caller: Caller) throws -> [AppRecord] {
        _ = try authorize(.listApps, for: caller)
        return try exclusive { try apps.all(in: $0.db) }.map(withUninstallTime)
    }

    /// `a` with `uninstallAt` filled in (an installed app whose executable is absent).
    private func withUninstallTime(_ a: AppRecord) -> AppRecord {
        var a = a
        if a.installed, let since = a.missingSince {
            a.uninstallAt = since.addingTimeInterval(appSettings.uninstallGraceSeconds)
        }
        return a
    }

    /// The caller for a peer, from what the kernel says of it: its Flatpak app ID (from
    /// `/proc/PID/root/.flatpak-info`) or its executable (`/proc/PID/exe`). A Flatpak app
    /// not yet known is registered on first contact with its own group only. Anything
    /// unidentified is the owner (admin surface, no app tier).
    /// A Flatpak ID that names an app registered by executable (installed or not), an app
    /// group (`group.*`) or another app's access group is refused (PermissionDenied): a
    /// sandbox cannot take over a registered app or its groups.
    /// `isRegisteredFile(path)`: whether the peer runs the file vaultd sees at `path` (see
    /// `PeerIdentity.runsRegisteredFile`); a peer whose executable path is a registered
    /// app's but whose file is another (mounted over that path in its own mount namespace)
    /// is refused (PermissionDenied).
    func caller(
        flatpakAppID: String?, executable: String?, isRegisteredFile: (String) -> Bool
    ) throws -> Caller {
        if let id = flatpakAppID {
            // Look and register as one step, so two first contacts make one generation.
            return try registration.withLock {
                switch try Policy.flatpakClaim(
                    id, registered: try exclusive { try apps.all(in: $0.db) },
                    maximumAutoRegistered: appSettings.maximumAutoRegisteredApps)
                {
                case .installed(let a): return a.caller
                case .register:
                    return try register(
                        id, executable: nil, flatpak: true, accessGroups: [], appGroups: [],
                        keepCredentialsOnReinstall: false
                    ).caller
                }
            }
        }
        // The registered path as `/proc/PID/exe` shows a program: every symlink resolved, now.
        // Byte for byte: Swift's `==` equates `é` and `e` + U+0301, two paths to the kernel.
        if let exe = executable,
            let a = try exclusive({ try apps.all(in: $0.db) }).first(where: {
                $0.installed && !$0.flatpak && $0.resolvedExecutable?.sameBytes(exe) == true
            })
        {
            // The path is the peer's view (its mount namespace): another file mounted at A's
            // path is not A.
            guard isRegisteredFile(exe) else {
                throw VaultFailure(
                    .permissionDenied,
                    "the peer's executable is at \(a.appID)'s registered path but is another file")
            }
            return a.caller
        }
        return .owner
    }

    /// io.vaultd.Vault.Hello: on the first Hello of a new generation, wipes the credentials
    /// left by earlier installs (unless the app keeps them) and records the launch.
    /// Returns whether this was the first launch and how many items were wiped (also when
    /// an earlier call of this generation did the wipe: the first Hello reports it).
    func hello(_ caller: Caller) throws -> (firstLaunch: Bool, wiped: Int) {
        _ = try authorize(.hello, for: caller)
        return try launch(caller, reporting: true)
    }

    /// The caller's items (those of its access groups; all for the owner) that are another
    /// device's ThisDeviceOnly items, NotAvailableOnThisDevice here: what Hello reports, so an
    /// app moved to a new device learns which of its credentials to ask for again.
    func unavailableItems(caller: Caller) throws -> Int {
        // Nearly always no class holds another device's items: answered without the engine lock.
        guard withKeys({ Accessibility.allCases.contains(where: keys.isForeign) }) else { return 0 }
        return try exclusive {
            try keychain.unavailableCount(inGroups: caller.visibleAccessGroups, in: $0.db)
        }
    }

    /// The first launch of the caller's generation, once: wipes the leftovers, and reports it
    /// now (`reporting`: a Hello) or keeps it for the first Hello.
    func launch(_ caller: Caller, reporting: Bool) throws -> (firstLaunch: Bool, wiped: Int) {
        guard let appID = caller.appID else { return (false, 0) }
        return try write { db in
            guard var a = try self.apps.find(appID, in: db), a.installed,
                a.generation == caller.generation
            else { return (false, 0) }
            if a.launchedGeneration == a.generation {
                guard reporting, let wiped = a.unreportedLaunchWipe else { return (false, 0) }
                a.unreportedLaunchWipe = nil
                try self.apps.save(a, in: db)
                return (true, wiped)
            }
            let wiped =
                a.keepCredentialsOnReinstall
                ? 0 : try self.apps.wipeLeftoverCredentials(of: a, in: db)
            a.launchedGeneration = a.generation
            a.unreportedLaunchWipe = reporting ? nil : wiped
            try self.apps.save(a, in: db)
            if wiped > 0 {
                self.logger.notice(
                    "app \(appID): first launch of a new install; wiped \(wiped) leftover credential(s)"
                )
            }
            return (true, wiped)
        }
    }

    /// Whether `appID` is registered and installed (under the engine lock).
    func isInstalled(_ appID: String) throws -> Bool {
        try exclusive { try apps.find(appID, in: $0.db)?.installed ?? false }
    }

    /// What `stat` says of a registered executable: there, absent ("no such file": ENOENT or
    /// ENOTDIR, also a symlink whose target is gone), or not known (EACCES, EIO, ELOOP …:
    /// nothing is concluded from it).
    enum ExecutableState: Equatable {
        case present, absent
        case unknown(Int32)
    }

    static func executableState(_ path: String) -> ExecutableState {
        do {
            _ = try SystemCall.stat(path)
            return .present
        } catch {
            return error.code == Errno.notFound || error.code == Errno.notDirectory
                ? .absent : .unknown(error.code)
        }
    }

    /// Notices registered executables, and Flatpak apps' deployments, that disappeared or
    /// came back. An installed app's executable (deployment) found absent starts its grace
    /// period (`missingSince`); absent for the whole period
    /// (`AppSettings.uninstallGraceSeconds`), the app is uninstalled (preferences and caches
    /// go, credentials stay for a reinstall). Back before that, it is the same install:
    /// nothing changes but the mark. An app uninstalled so is reinstalled (a new generation,
    /// whose first launch wipes its credentials) when it comes back. vaultd calls this at
    /// start and then every second; `now` is the time of the scan (nil: `clock.now`; tests
    /// pass their own or move the clock).
    public func scanExecutables(now: Date? = nil) {
        let now = now ?? clock.now
        guard let all = try? exclusive({ try apps.all(in: $0.db) }) else { return }
        let installations = appSettings.flatpakInstallations
        for listed in all where listed.flatpak || listed.executable != nil {
            registration.withLock {
                // Decide on the current record: an install since the listing may have changed it.
                guard let a = try? exclusive({ try apps.find(listed.appID, in: $0.db) }),
                    a.flatpak == listed.flatpak
                else { return }
                if a.flatpak {
                    scanDeployment(a, installations: installations, now: now)
                } else if let exe = a.executable {
                    scanned(
                        a, state: Self.executableState(exe), what: "executable", path: exe, now: now
                    )
                }
            }
        }
    }

    /// The scan of a Flatpak app: its deployment is looked for in every installation. One
    /// never found is not tracked (an app run from an installation vaultd does not know, or
    /// a sandbox that names itself); once found, its directory is recorded in the app's
    /// `executable`, and its absence from every installation counts as an executable's does.
    private func scanDeployment(_ a: AppRecord, installations: [String], now: Date) {
        guard !installations.isEmpty else { return }
        var a = a
        let (state, found) = Self.flatpakDeployment(a.appID, in: installations)
        if let found, a.executable?.sameBytes(found) != true {
            a.executable = found
            guard (try? write({ [a] db in try self.apps.save(a, in: db) })) != nil else { return }
            logger.info("app \(a.appID): its Flatpak deployment is \(logField(found))")
        }
        guard let dir = a.executable else { return }
        scanned(a, state: state, what: "Flatpak deployment", path: dir, now: now)
    }

    /// What one scan concludes for `a`, whose executable (or deployment: `what`, at `path`)
    /// is in `state`.
    private func scanned(
        _ a: AppRecord, state: ExecutableState, what: String, path: String, now: Date
    ) {
        var a = a
        let grace = appSettings.uninstallGraceSeconds
        if a.installed {
            switch state {
            case .present where a.missingSince != nil:
                let absent = Int(now.timeIntervalSince(a.missingSince!).rounded())
                a.missingSince = nil
                if (try? write({ [a] db in try self.apps.save(a, in: db) })) != nil {
                    logger.notice(
                        "app \(a.appID): its \(what) is back after about \(absent) s; the same install (generation \(a.generation))"
                    )
                }
            case .absent where a.missingSince == nil:
                a.missingSince = now
                if (try? write({ [a] db in try self.apps.save(a, in: db) })) != nil {
                    logger.notice(
                        "app \(a.appID): its \(what) \(logField(path)) is missing; it counts as uninstalled in \(Int(grace)) s unless it comes back (UninstallGraceSeconds)"
                    )
                }
            case .absent where now.timeIntervalSince(a.missingSince!) >= grace:
                logger.notice(
                    "app \(a.appID): its \(what) has been missing for \(Int(grace)) s or more (UninstallGraceSeconds)"
                )
                _ = try? markUninstalled(a.appID, executableMissing: true)
            default:
                break
            }
        } else if a.executableMissing && state == .present {
            _ = try? register(
                a.appID, executable: a.executable, flatpak: a.flatpak,
                accessGroups: a.accessGroups, appGroups: a.appGroups,
                keepCredentialsOnReinstall: a.keepCredentialsOnReinstall)
        }
    }

    /// Where Flatpak app `appID` is deployed: `INSTALLATION/app/ID`, as `flatpak install`
    /// lays it out (`current` → `ARCH/BRANCH`, whose `active` → the deployed commit's
    /// directory, holding `metadata` and `files/`). Present when `current/active/metadata`
    /// is there in some installation (the first such one is returned); absent when every
    /// installation says "no such file" (`flatpak uninstall` removed `app/ID`, or its
    /// current branch); unknown otherwise (an installation that cannot be looked at).
    static func flatpakDeployment(_ appID: String, in installations: [String]) -> (
        ExecutableState, String?
    ) {
        var unknown: ExecutableState?
        for root in installations {
            // The app ID is validated (no '/', no "..": `AppRecord.validate`).
            let dir = root + "/app/" + appID
            switch executableState(dir + "/current/active/metadata") {
            case .present: return (.present, dir)
            case .absent: continue
            case .unknown(let code): unknown = .unknown(code)
            }
        }
        return (unknown ?? .absent, nil)
    }
}
