import Foundation
import VaultProtocol

/// The vault engine: the store, the key hierarchy, the keychain and preferences. It knows
/// nothing of sockets: vaultd calls it with the `Caller` it established.
///
/// Every method is thread-safe and every write is committed and on disk (the WAL fsynced)
/// before the method returns. Writes and the key hierarchy's changes are serialized on the
/// engine lock (as GRDB serializes its writer); lookups read through `ReaderPool` connections
/// and fetch their keys under the keys lock, so they wait for neither a group commit's
/// transaction nor each other. The keys change only under both locks (engine lock first), so
/// either is enough to read them.
public final class Vault: @unchecked Sendable {
    /// The data directory (0700) holding `vault.sqlite` and `device.key` (or `device.key.tpm`).
    public let dataDirectory: String
    /// Where this start found the device key (`DeviceKey.load`).
    public let deviceKeyStatus: DeviceKeyStatus
    /// Where per-app cache directories live (`<cacheDirectory>/<app-id>/`).
    public let cacheDirectory: String
    /// The store, reached only through `read`, `write` and `exclusive` (`DatabasePool`).
    let store: DatabasePool
    let keys: KeyHierarchy
    let keychain: KeychainStore
    let preferences: PreferencesStore
    /// Space kept for deletes on a full disk (`StorageReserve`, `writeMakingRoom`).
    let reserve: StorageReserve
    let apps: AppRegistry
    /// Each app's storage quota (`StorageQuota`); vaultd sets it from its settings.
    public let quota = StorageQuota()
    /// User presence before a presence-protected secret is released: vaultd sets its
    /// verifier (polkit) and grace window (`Policy/Presence.swift`).
    public let presence = PresenceGate()
    /// The Secret Service's `session` collection: items kept in memory only, until vaultd stops.
    let sessionItems = SessionItems()
    /// The per-app cache directories.
    public let caches: CacheStore
    /// Limits on registrations made on first contact, and the uninstall grace period
    /// (config.plist; vaultd sets them at start and on SIGHUP).
    public let appSettings = AppSettings()
    /// Per-program access to secrets: the mode set, who asks the user, and what is
    /// remembered in memory (pending questions, recent denials; docs/access.md).
    public let accessGate = AccessGate()
    private let keysLock = NSLock()
    let unlockAttempts = NSLock()
    /// The Argon2id cost of new passphrase keys.
    public let passphrasePolicy: PassphrasePolicy
    /// The time the rate limit and the executable scan go by (vaultd's idle auto-lock too):
    /// the system's, but in tests.
    public let clock: any VaultClock
    /// Failed passphrase checks in a row, as this process counted them, and the wall-clock
    /// time of the last (seconds since 1970, on `clock`), under the engine lock. With the count stored in
    /// `vault_meta` (`unlock.failures`), the larger wins (`failureRecord`): a failure that
    /// could not be stored (a full disk) still counts, until vaultd exits.
    private var failures = FailureRecord(count: 0, last: 0)
    /// Observers, under a lock of their own: a writer emits right after its commit, and on
    /// the engine lock it would wait for the next group's leader, which holds that lock while
    /// it waits for the writers of its group, which would serialize every write behind it.
    private let observersLock = NSLock()
    private var observers: [UUID: @Sendable (VaultEvent) -> Void] = [:]
    /// Puts preference and lock-state events in commit order (see `OrderedEvents`).
    private let orderedEvents = OrderedEvents(after: OrderedEvents.runStart())
    /// The highest preference write sequence emitted so far (under `observersLock`): at
    /// first the run's start, which every write of earlier runs is numbered below.
    private var emittedThrough: UInt64 = 0

    /// Opens (creating when absent) the vault in `dataDirectory`: creates the directory 0700
    /// and `device.key` 0600 (each created with that mode), opens the store and runs pending
    /// migrations. A `device.key` that is not exactly 32 bytes, not this user's, or accessible
    /// by others is refused (InternalError naming the file and the fix), never replaced. Throws
    /// `VaultFailure` InternalError (unreadable files, a newer schema) or StorageFull.
    ///
    /// `device.key` is made only for a vault not initialised yet, or with `newDeviceKey` (a
    /// data directory moved to a new device on purpose: its ThisDeviceOnly items stay bound to
    /// the old key). An initialised vault whose `device.key` is missing (deleted, or left out
    /// of a restore) is refused with InternalError saying so: a new key would make every
    /// ThisDeviceOnly item unavailable for good, and the old key, put back later, would no
    /// longer open what was made meanwhile.
    /// `deviceKeyTPM`: where the device key is kept (`DeviceKey.load`: sealed by a TPM, or a
    /// file; a key in a file is sealed and the file removed once a TPM is configured). A key
    /// the TPM cannot unseal leaves ThisDeviceOnly items NotAvailableOnThisDevice, the rest
    /// opening (`deviceKeyStatus.problem` says why).
    /// `passphrasePolicy`: the Argon2id cost of new passphrase keys (the default for real
    /// vaults; tests lower it). `clock`: the system's, but in tests, which move it instead of
    /// waiting.
    public init(
        dataDirectory: String, cacheDirectory: String? = nil, newDeviceKey: Bool = false,
        deviceKeyTPM: DeviceKeyTPM = .none,
        passphrasePolicy: PassphrasePolicy = PassphrasePolicy(),
        clock: any VaultClock = SystemClock()
    ) throws {
        self.dataDirectory = dataDirectory
        self.passphrasePolicy = passphrasePolicy
        self.clock = clock
        self.cacheDirectory = cacheDirectory ?? dataDirectory + "/caches"
        try FileSystem.makeDirectory(dataDirectory, mode: 0o700)
        reserve = StorageReserve(directory: dataDirectory)
        // The store is 0600 from its creation (SQLite would make it 0644, and its -wal and
        // -shm files take its mode); an older, looser one is tightened.
        try FileSystem.createPrivateFile(dataDirectory + "/vault.sqlite")
        try FileSystem.restrict(dataDirectory + "/vault.sqlite")
        let db = try Self.openStore(dataDirectory + "/vault.sqlite")
        // A damaged (not 32 bytes), foreign or loose device.key is refused, never replaced.
        let loaded: DeviceKey.Loaded
        do {
            let initialized =
                try db.row("SELECT 1 FROM vault_meta WHERE key = 'wrapped.metadata'") != nil
            loaded = try DeviceKey.load(
                directory: dataDirectory, setting: deviceKeyTPM, initialized: initialized,
                newDeviceKey: newDeviceKey)
        } catch {
            db.close()
            throw error
        }
        let deviceKey = loaded.key
        deviceKeyStatus = loaded.status
        db.checkpointInBackground()
        let store = DatabasePool(writer: db)
        self.store = store
        let keys = try store.exclusive { x in
            try KeyHierarchy(
                in: x, deviceKey: deviceKey, sealsNoPassphraseKEK: loaded.status.kind == .tpm)
        }
        self.keys = keys
        let quota = self.quota
        keychain = try store.exclusive { x in
            try KeychainStore(loading: x.db, keys: keys, quota: quota)
        }
        preferences = PreferencesStore()
        apps = AppRegistry()
        caches = CacheStore(root: self.cacheDirectory)
        emittedThrough = orderedEvents.start
        reserve.replenish()
    }

    /// Opens the store and runs pending migrations, having checked it (`PRAGMA quick_check`):
    /// a file SQLite reports malformed, at the check or at any statement before vaultd
    /// serves it, is refused with StoreDamaged saying what to do; vaultd never serves it.
    private static func openStore(_ path: String) throws -> Database {
        var opened: Database?
        do {
            let db = try Database(path: path)
            opened = db
            let problems = try db.quickCheck()
            guard problems == ["ok"] else {
                throw VaultFailure(
                    .storeDamaged,
                    "SQLite's check of the file finds it malformed: \(problems.prefix(3).joined(separator: "; "))"
                )
            }
            try Schema.migrator.migrate(db)
            return db
        } catch let e as VaultFailure where e.code == .storeDamaged {
            opened?.close()
            throw VaultFailure(
                .storeDamaged,
                "the store \(path) is damaged (\(e.message.prefix(400))); vaultd does not serve a damaged store. Keep the damaged files for inspection: stop here, move \(path) (and \(path)-wal, if there) out of the data directory, start vaultd (it makes an empty vault beside device.key) and restore your latest backup into it: `vaultctl restore FILE` (docs/backup.md)"
            )
        } catch {
            opened?.close()
            throw error
        }
    }

    /// Closes the store. Later calls fail with InternalError.
    public func close() {
        store.close()
    }

    /// Every mutation's one way into the store: `body` runs with the transaction's connection
    /// as a durable write in the next group transaction (`GroupCommit`, under the engine
    /// lock), and this returns once that transaction has committed and its WAL frames are on
    /// disk (the fsync runs outside the engine lock). Call it not holding the engine lock; a
    /// section that holds it writes through `exclusive`'s `write`.
    func write<T>(_ body: @escaping (Database) throws -> T) throws -> T {
        try store.write(body)
    }

    /// `write` of a change that makes room (a delete, a removal): on a full disk, where it is
    /// refused like any other write (SQLite needs room for its WAL frames), the space reserve
    /// is given back to the file system and the write tried once more. The reserve is filled
    /// again by `replenishReserve`, at the next periodic pass.
    func writeMakingRoom<T>(_ body: @escaping (Database) throws -> T) throws -> T {
        do {
            return try write(body)
        } catch let full as VaultFailure where full.code == .storageFull {
            let freed = reserve.release()
            guard freed > 0 else { throw full }
            log(
                "the disk is full: gave the space reserve (\(freed) bytes, \(reserve.path)) back for a delete; it is filled again once there is room"
            )
            return try write(body)
        }
    }

    /// Fills the space reserve again, as far as the disk allows (at start and at each
    /// periodic pass). Returns the bytes it holds.
    @discardableResult
    public func replenishReserve() -> Int {
        reserve.replenish()
    }

    /// Runs `body` under the engine lock, without the store (the keys, the failed-unlock
    /// count in memory).
    func locked<T>(_ body: () throws -> T) rethrows -> T {
        try store.locked(body)
    }

    /// Runs `body` under the engine lock with the writer's connection
    /// (`DatabasePool.Exclusive`): it reads what the last commit left and writes through
    /// `x.write`, on the same write path, without letting the lock go.
    func exclusive<T>(_ body: (DatabasePool.Exclusive) throws -> T) throws -> T {
        try store.exclusive(body)
    }

    /// Runs `body` with a reader connection (a snapshot of every committed transaction),
    /// waiting for one when every reader is lent out; with the writer's under the engine lock
    /// only when no reader could be opened or the pool is closed (`ReaderPool.read`). `body`
    /// must not call `read` again.
    func read<T>(_ body: (Database) throws -> T) throws -> T {
        try store.read(body)
    }

    /// Runs `body`, which reads the key hierarchy, under the keys lock alone.
    func withKeys<T>(_ body: () throws -> T) rethrows -> T {
        try keysLock.withLock(body)
    }

    /// Runs `body`, which changes the key hierarchy, under the keys lock too. Call it holding
    /// the engine lock (`locked`), and derive passphrase keys before: lookups wait meanwhile.
    func changingKeys<T>(_ body: () throws -> T) rethrows -> T {
        try withKeys(body)
    }

    /// `x.write` of a change to the stored keys that `body` makes (with `changingKeys`): when
    /// the transaction does not commit (a disk filling at the COMMIT itself), the keys in
    /// memory are put back as they were, as the store is. `x`: the `exclusive` section it
    /// runs in.
    func writingKeys<T>(in x: DatabasePool.Exclusive, _ body: (Database) throws -> T) throws -> T {
        let saved = withKeys { keys.snapshot() }
        return try x.write(body, undo: { withKeys { keys.restore(saved) } })
    }

    // MARK: observation

    /// Registers `handler` for every event; returns a token for `removeObserver`. Handlers run
    /// after the change committed, outside the engine lock and any lock of the vault's, so
    /// they may call the vault. A preference or lock-state event may come on another thread
    /// than the one that made the change (they are handed out in the order the changes were
    /// made, one thread at a time: `OrderedEvents`); a handler should return quickly.
    public func addObserver(_ handler: @escaping @Sendable (VaultEvent) -> Void) -> UUID {
        addObserverReportingSequence(handler).id
    }

    /// `addObserver`, also returning the highest preference write sequence whose events went
    /// out before `handler` was registered (0: none): those writes have committed, so a
    /// snapshot read from now on holds them, and `handler` gets every later one.
    public func addObserverReportingSequence(_ handler: @escaping @Sendable (VaultEvent) -> Void)
        -> (id: UUID, emittedThrough: UInt64)
    {
        let id = UUID()
        let through = observersLock.withLock {
            observers[id] = handler
            return emittedThrough
        }
        return (id, through)
    }

    public func removeObserver(_ id: UUID) {
        _ = observersLock.withLock { observers.removeValue(forKey: id) }
    }

    func emit(_ event: VaultEvent) {
        let handlers = observersLock.withLock {
            if case .preference(_, _, _, let n) = event { emittedThrough = max(emittedThrough, n) }
            return Array(observers.values)
        }
        for h in handlers { h(event) }
    }

    /// Runs a preference write or a lock-state change and then emits its events in the order
    /// the changes were made. `write` makes the change under the engine lock and, once it
    /// succeeded, takes its place in the order with `ticket.take()` (still under the lock:
    /// changes are made there one at a time); it returns its result and events. Each emits
    /// after its change on a thread of its own, and those run in any order: two writes of one
    /// key emitted in the wrong order would leave every observer (every `Defaults` copy) with
    /// the older value for good, and a Lock and an Unlock emitted reversed would leave
    /// observers showing the vault unlocked while it is locked.
    func inEventOrder<T>(_ write: (OrderedEvents.Ticket) throws -> (T, [VaultEvent])) throws -> T {
        let ticket = OrderedEvents.Ticket(orderedEvents)
        var events: [VaultEvent]?
        // A write that took its place and then failed (its commit did) still passes it on,
        // with what it had made by then (`madeSoFar`).
        defer {
            orderedEvents.publish(ticket, events ?? ticket.madeSoFar) {
                for e in $0 { self.emit(e) }
            }
        }
        let (result, made) = try write(ticket)
        events = made
        return result
    }

    // MARK: lock life-cycle

    /// True when the vault has a passphrase and is unlocked (so it can be auto-locked).
    public var isUnlockedWithPassphrase: Bool {
        locked { keys.hasPassphrase && keys.state == .unlocked }
    }

    /// The lock state now.
    public var lockState: LockState { locked { keys.lockState } }

    /// The vault's status. The owner's tools get the whole vault's figures; an
    /// app only those it could read anyway (items in its access groups; its own domain, its
    /// app groups' suites and NSGlobalDomain, when stored): the whole vault's counts told it
    /// how other apps' items and domains came and went.
    /// The data directory is told to the owner only.
    func status(caller: Caller) throws -> VaultStatus {
        // An app's connection made before an uninstall or reinstall gets nothing
        // (MissingEntitlement); a new install's first call, this one or any, is its first
        // launch, so the figures never count what that launch wipes.
        _ = try authorize(.status, for: caller)
        return try exclusive { x in
            let readable = Policy.visibleDomains(try preferences.domains(in: x.db), to: caller)
            return VaultStatus(
                lock: keys.lockState,
                items: try keychain.count(inGroups: caller.visibleAccessGroups, in: x.db),
                unavailableItems: try keychain.unavailableCount(
                    inGroups: caller.visibleAccessGroups, in: x.db),
                domains: readable.count,
                retryAfter: try rateLimitDelay(x),
                dataDirectory: caller.isOwner ? dataDirectory : nil,
                deviceKey: caller.isOwner ? deviceKeyStatus : nil,
                recoveryKey: caller.isOwner ? try keys.hasRecoveryKey(in: x.db) : nil,
                secretAccess: caller.isOwner ? try secretAccessMode(in: x.db) : nil,
                secretAccessConfigured: caller.isOwner ? accessGate.configuredMode != nil : nil)
        }
    }

    /// Creates the vault, with a passphrase or without (then always unlocked). Owner only.
    /// Throws AlreadyInitialized, PermissionDenied.
    func initialize(passphrase: SecureBytes?, caller: Caller) throws -> LockState {
        _ = try authorize(.initialize, for: caller)
        if let p = passphrase, p.count == 0 {
            throw VaultFailure.param("the passphrase must not be empty")
        }
        let kek = try passphrase.map {
            try KeyHierarchy.PassphraseKEK(deriving: $0, cost: passphrasePolicy.kdfCost)
        }
        return try inEventOrder { ticket in
            let state = try exclusive { x in
                try writingKeys(in: x) { db in
                    try changingKeys { try keys.initialize(passphrase: kek, in: db) }
                    // A vault made now asks before a program reads another's secret.
                    try AccessStore.setDefaultMode(.confirm, in: db)
                }
                accessGate.recordedMode = .confirm
                ticket.take()
                return keys.lockState
            }
            return (state, [.lockState(state)])
        }
    }

    /// Unlocks with the passphrase. Owner only. Throws PermissionDenied, Vault.AuthFailed
    /// (wrong passphrase; counted), RateLimited (too many failures: wait `retryAfter`
    /// seconds), NoPassphrase, NotInitialized. A vault whose stored Argon2id parameters cost
    /// less than `passphrasePolicy.kdfCost` (made before the cost was raised) is re-wrapped
    /// under a KEK derived at that cost once the passphrase proved right (`strengthenKDF`).
    func unlock(passphrase: SecureBytes, caller: Caller) throws -> LockState {
        _ = try authorize(.unlock, for: caller)
        return try unlockAuthorized(passphrase: passphrase)
    }

    /// Unlock with the passphrase remembered in the login keyring, which `lookUp` reads (a
    /// front-end's keyring client); it is asked only once the caller may unlock and the vault
    /// is locked with a passphrase. Owner only. Throws PermissionDenied, NotInitialized,
    /// NoPassphrase, what `lookUp` throws, and Unlock's errors. A vault already unlocked is
    /// left so.
    func unlockFromKeyring(caller: Caller, lookUp: () throws -> SecureBytes) throws
        -> LockState
    {
        _ = try authorize(.unlockFromKeyring, for: caller)
        let state = lockState
        if !state.hasPassphrase {
            if state.state == .uninitialized {
                throw VaultFailure(.notInitialized, "the vault has not been initialised")
            }
            throw VaultFailure(.noPassphrase, "the vault has no passphrase: it is always unlocked")
        }
        if state.state == .unlocked { return state }
        return try unlockAuthorized(passphrase: try lookUp())
    }

    private func unlockAuthorized(passphrase: SecureBytes) throws -> LockState {
        // One attempt at a time, so parallel guesses cannot all pass the rate limit.
        unlockAttempts.lock()
        defer { unlockAttempts.unlock() }
        let kek = try passphraseKEK(passphrase, for: "Unlock")
        let state: LockState = try inEventOrder { ticket in
            let state: LockState = try exclusive { x in
                try openKeysCounting(kek, for: "Unlock", in: x)
                ticket.take()
                return keys.lockState
            }
            return (state, [.lockState(state)])
        }
        strengthenKDF(passphrase)
        return state
    }

    /// Re-wraps this device's keys under a KEK of `passphrase` (just proved right) derived
    /// at `passphrasePolicy.kdfCost` when the stored parameters cost less: the new salt and
    /// parameters and the re-wrapped keys are stored in one transaction, so a crash leaves
    /// either the old wrapping or the new. Derived outside the engine lock, as Unlock derives.
    /// A failure (a full disk, a Lock in between) leaves the old wrapping, which still opens,
    /// and is logged: the next unlock tries again. Call it holding `unlockAttempts`.
    private func strengthenKDF(_ passphrase: SecureBytes) {
        let cost = passphrasePolicy.kdfCost
        guard (try? exclusive({ x in try keys.kdfIsWeaker(than: cost, in: x.db) })) == true else {
            return
        }
        do {
            let stronger = try KeyHierarchy.PassphraseKEK(deriving: passphrase, cost: cost)
            try exclusive { x in
                guard keys.state == .unlocked, try keys.kdfIsWeaker(than: cost, in: x.db) else {
                    return
                }
                try writingKeys(in: x) { db in
                    try changingKeys { try keys.rewrap(newPassphrase: stronger, in: db) }
                }
                // The keys wrapped under the weaker KEK stay in the WAL's old frames until it
                // wraps round (as after ChangePassphrase).
                do { try x.truncateWAL() } catch {
                    log(
                        "the keys wrapped under the earlier Argon2id cost may stay in the write-ahead log for a while: \(error)"
                    )
                }
            }
            let (ops, mem) = cost.limits
            log("re-wrapped the vault's keys under Argon2id at \(ops) passes over \(mem >> 20) MiB")
        } catch {
            log(
                "could not re-wrap the vault's keys at the stronger Argon2id cost (they stay as they were; the next unlock tries again): \(error)"
            )
        }
    }

    /// Locks (wipes whenUnlocked class keys). Owner only. Throws PermissionDenied,
    /// NoPassphrase, NotInitialized.
    func lockVault(caller: Caller) throws -> LockState {
        _ = try authorize(.lock, for: caller)
        return try inEventOrder { ticket in
            let state = try locked {
                try changingKeys { try keys.lock() }
                ticket.take()
                return keys.lockState
            }
            return (state, [.lockState(state)])
        }
    }

    /// Changes (both given), sets (`old` nil, vault without passphrase) or removes (`new` nil)
    /// the passphrase. Removing it deletes whenPasscodeSet items. Returns the new lock state
    /// and the number of items deleted. Owner only. With a passphrase, `old` is checked as
    /// Unlock checks it (counted, rate-limited, one check at a time with Unlock's) and, right,
    /// unlocks a locked vault; without one, `old` is ignored. Throws PermissionDenied, Param
    /// (empty `new`), Vault.AuthFailed (`old` wrong or missing), RateLimited, NotInitialized,
    /// NoPassphrase (removing a passphrase the vault does not have).
    func changePassphrase(old: SecureBytes?, new: SecureBytes?, caller: Caller) throws
        -> PassphraseChange
    {
        _ = try authorize(.changePassphrase, for: caller)
        if let p = new, p.count == 0 {
            throw VaultFailure.param("the new passphrase must not be empty")
        }
        // One passphrase check at a time, Unlock's included: a ChangePassphrase guess beside an
        // Unlock guess got two tries through one slot of the rate limit.
        unlockAttempts.lock()
        defer { unlockAttempts.unlock() }
        // The old passphrase's KEK, derived outside the engine lock as Unlock derives its own
        // (Argon2id is slow: under the lock it held up every write meanwhile).
        let hasPassphrase = try locked {
            try keys.requireInitialized()
            return keys.hasPassphrase
        }
        var oldKEK: SecureBytes?
        if hasPassphrase {
            guard let old else {
                log("ChangePassphrase refused: the current passphrase was not given")
                throw VaultFailure(.wrongPassphrase, "the current passphrase is required")
            }
            // A passphrase check like Unlock's, so rate-limited and counted like it.
            oldKEK = try passphraseKEK(old, for: "ChangePassphrase")
        } else if new == nil {
            throw VaultFailure(.noPassphrase, "the vault has no passphrase to remove")
        }
        // After the rate limit's check: a refused call does not spend an Argon2id on it.
        let newKEK = try new.map {
            try KeyHierarchy.PassphraseKEK(deriving: $0, cost: passphrasePolicy.kdfCost)
        }
        return try inEventOrder { ticket in
            let result: PassphraseChange = try exclusive { x in
                // Only a ChangePassphrase sets or removes a passphrase once the vault exists,
                // and this one holds `unlockAttempts`: `hasPassphrase` still holds.
                if let oldKEK {
                    try openKeysCounting(oldKEK, for: "ChangePassphrase", in: x)
                    // A locked vault is unlocked now, whatever becomes of the change.
                    ticket.take()
                    ticket.madeSoFar = [.lockState(keys.lockState)]
                }
                let result = try writingKeys(in: x) { db in
                    var deleted = 0
                    if new == nil {
                        deleted = try keychain.deleteAll(
                            accessible: .whenPasscodeSetThisDeviceOnly, in: db)
                    }
                    try changingKeys { try keys.rewrap(newPassphrase: newKEK, in: db) }
                    return PassphraseChange(lock: keys.lockState, deletedItems: deleted)
                }
                // The replaced keys (wrapped under the old KEK; without a passphrase the KEK
                // itself) stay in the WAL's old frames until it wraps round, and a crash leaves
                // them there: with them the old passphrase, or none, still opens every item.
                do {
                    try x.truncateWAL()
                } catch {
                    log(
                        "the passphrase changed, but the keys it replaced may stay in the write-ahead log for a while: \(error)"
                    )
                }
                ticket.take()
                return result
            }
            return (result, [.lockState(result.lock)])
        }
    }

    /// Checks the rate limit, then derives `passphrase`'s KEK outside the engine lock (Argon2id
    /// is slow: other callers are served meanwhile). Throws RateLimited, NoPassphrase,
    /// NotInitialized.
    /// `operation` (Unlock, ChangePassphrase) names the call in the log.
    func passphraseKEK(_ passphrase: SecureBytes, for operation: String) throws
        -> SecureBytes
    {
        let parameters = try exclusive { x in
            do {
                try checkRateLimit(x)
            } catch let e as VaultFailure where e.code == .rateLimited {
                // Guesses made during the wait are refused unchecked, but seen in the log.
                log("\(operation) refused: \(e.message)")
                throw e
            }
            return try keys.passphraseParameters(in: x.db)
        }
        return try Sodium.argon2id(passphrase: passphrase, parameters: parameters)
    }

    /// Opens the keys with a passphrase's KEK (under the engine lock): a wrong one counts for
    /// the rate limit, is logged (as sshd and polkit log a failed password: someone guessing
    /// must show in the journal; the count and the wait, never the passphrase) and throws
    /// Vault.AuthFailed, a right one clears the count.
    func openKeysCounting(
        _ kek: SecureBytes, for operation: String, in x: DatabasePool.Exclusive
    ) throws {
        do {
            try changingKeys { try keys.unlock(kek: kek, in: x) }
        } catch let e as VaultFailure where e.code == .wrongPassphrase {
            let (n, stored) = recordFailedUnlock(x)
            // The schedule's waits are whole seconds (1 s to 900 s).
            let wait = Self.unlockWait(afterFailures: n)
            let waitText = String(Int(wait))
            log(
                "\(operation) failed: wrong passphrase (\(n) failed in a row\(wait > 0 ? "; the next check is allowed in \(waitText) s" : "")\(stored ? "" : "; counted in memory only, the store could not take it"))"
            )
            throw e
        }
        // Unlocked: a count left behind (a full disk) only costs a later wait; failing here
        // reported an unlocked vault as not unlocked, to observers too.
        do { try resetFailedUnlocks(x) } catch {
            log("could not clear the failed-unlock count: \(error)")
        }
    }

    /// A count of failed passphrase checks in a row and the wall-clock time of the last
    /// (seconds since 1970).
    struct FailureRecord {
        var count: Int
        var last: Double
    }

    /// The failed checks to rate-limit by: the stored record or the one in memory, whichever
    /// counts more (the one in memory on a tie: it has the clock corrections `rateLimitDelay`
    /// made). A damaged stored record counts as three failures just now (a wait, never none).
    /// Throws when the store cannot be read: a check whose count is unknown is refused.
    /// Call it under the engine lock; the result becomes the record in memory.
    private func failureRecord(_ x: DatabasePool.Exclusive) throws -> FailureRecord {
        var stored = FailureRecord(count: 0, last: 0)
        if let r = try x.db.row("SELECT value FROM vault_meta WHERE key = 'unlock.failures'") {
            if let raw = r[0].blob, let j = try? JSON.parse(raw), let n = j["count"]?.intValue,
                let last = j["last"]?.doubleValue
            {
                stored = FailureRecord(count: n, last: last)
            } else {
                stored = FailureRecord(count: 3, last: clock.now.timeIntervalSince1970)
            }
        }
        if stored.count > failures.count { failures = stored }
        return failures
    }

    // Failed unlocks: after 3 failures each further one doubles the wait (1 s … 15 min,
    // `unlockWait`), recorded in the store so a restart does not reset it, and in memory so a
    // store that cannot take it (a full disk) does not either. A last failure later than now
    // (the wall clock went back since) counts from now: counted from the recorded time, the
    // wait would last as long as the clock had gone back (an hour, a year) on top. Call it
    // under the engine lock. Such a failure is recorded as now, so that the wait ends (in memory
    // at once; in the store when it can take it).
    private func rateLimitDelay(_ x: DatabasePool.Exclusive) throws -> Double {
        var record = try failureRecord(x)
        guard record.count >= 3 else { return 0 }
        let wait = Self.unlockWait(afterFailures: record.count)
        let now = clock.now.timeIntervalSince1970
        if record.last > now {
            record.last = now
            failures = record
            do { try storeFailures(record, x) } catch {
                log("could not store the corrected time of the last failed unlock: \(error)")
            }
        }
        return max(0, record.last + wait - now)
    }

    /// Throws RateLimited (with `retryAfter`) while failed passphrase checks impose a wait,
    /// and whatever reading the count threw (the check is then refused, not allowed).
    func checkRateLimit(_ x: DatabasePool.Exclusive) throws {
        let delay = try rateLimitDelay(x)
        if delay > 0 {
            throw VaultFailure(
                .rateLimited, "too many failed unlocks; try again in \(Int(delay.rounded(.up))) s",
                .init(retryAfter: delay))
        }
    }

    /// The wait in seconds after `n` failed passphrase checks in a row, as vaultd imposes it:
    /// none below 3, then 1 s doubling with each failure, at most 15 min (900 s).
    public static func unlockWait(afterFailures n: Int) -> Double {
        n >= 3 ? min(pow(2.0, Double(min(n, 64) - 3)), 900) : 0
    }

    /// Counts one more failure, in memory first (that cannot fail), then in the store.
    /// Returns the count and whether the store took it. Call it under the engine lock, after
    /// `failureRecord` (the rate limit's check) in the same attempt.
    func recordFailedUnlock(_ x: DatabasePool.Exclusive) -> (count: Int, stored: Bool) {
        failures = FailureRecord(count: failures.count + 1, last: clock.now.timeIntervalSince1970)
        do {
            try storeFailures(failures, x)
            return (failures.count, true)
        } catch {
            return (failures.count, false)
        }
    }

    private func storeFailures(_ record: FailureRecord, _ x: DatabasePool.Exclusive) throws {
        let j: JSON = ["count": JSON(record.count), "last": JSON(record.last)]
        try x.write { db in
            try db.run(
                "INSERT OR REPLACE INTO vault_meta (key, value) VALUES ('unlock.failures', ?)",
                [.blob(j.serialized())])
        }
    }

    func resetFailedUnlocks(_ x: DatabasePool.Exclusive) throws {
        failures = FailureRecord(count: 0, last: 0)
        // Only when there is a count: a DELETE of nothing is still a write transaction.
        guard try x.db.row("SELECT 1 FROM vault_meta WHERE key = 'unlock.failures'") != nil else {
            return
        }
        try x.write { db in try db.run("DELETE FROM vault_meta WHERE key = 'unlock.failures'") }
    }

    // MARK: keychain

    /// SecItemAdd. Returns the stored attributes. Throws DuplicateItem, Param, SecretTooLarge,
    /// MissingEntitlement (group not the caller's), InteractionNotAllowed (class key locked),
    /// AuthFailed (whenPasscodeSet without a passphrase).
    func addItem(
        _ itemClass: ItemClass, attributes: ItemAttributes, secret: SecureBytes, caller: Caller
    ) throws -> ItemAttributes {
        let grant = try authorize(.addItem(accessGroup: attributes.accessGroup), for: caller)
        // Checking, hashing and encrypting happen here, before the write joins a group
        // commit: the leader's transaction, under the engine lock, only runs the INSERT.
        let stored = try KeychainStore.addedAttributes(
            itemClass: itemClass, attributes: attributes, secretSize: secret.count,
            accessGroup: grant.accessGroup!)
        let accessible = stored.accessible ?? .whenUnlocked
        let keys = try withKeys { try keychain.writeKeys(accessible: accessible) }
        let values = try KeychainStore.encrypt(
            itemClass: itemClass, attributes: stored, secret: secret, keys: keys)
        // Its creator (issue 40 §2), sealed before the write as the item is.
        let creator = caller.program.map { AccessStore.seal($0, metadata: keys.metadata) }
        try write { db in
            try self.admitInWrite(caller, in: db)
            try self.keychain.insert(
                values, generation: caller.generation, classKey: keys.classKey,
                accessible: accessible, in: db)
            try self.recordCreator(values, sealed: creator, in: db)
        }
        if stored.synchronizable == true { emit(.keychainChanged) }
        // The row id is not needed: a made item is named by its attributes.
        emit(.itemsChanged([ItemChange(.created, itemClass, stored, row: 0)]))
        return stored
    }

    /// SecItemCopyMatching; see `KeychainStore.copyMatching`. The damaged items it met are
    /// left out (and logged); `copyMatchingReportingDamage` returns them too.
    /// `includingLocked`: locked matches are listed (`FoundItem.isLocked`) rather than failing.
    func copyMatching(
        _ query: ItemQuery, returnData: Bool, includingLocked: Bool = false,
        interaction: AccessInteraction = .wait, caller: Caller
    ) throws -> [FoundItem] {
        try copyMatchingReportingDamage(
            query, returnData: returnData, includingLocked: includingLocked,
            interaction: interaction, caller: caller
        ).items
    }

    /// SecItemCopyMatching, with the damaged items the query met (`ItemMatches.damaged`).
    /// Secrets are released only as the policy allows (`releaseSecrets`; `interaction`:
    /// how a question to the user is waited for).
    func copyMatchingReportingDamage(
        _ query: ItemQuery, returnData: Bool, includingLocked: Bool = false,
        interaction: AccessInteraction = .wait, caller: Caller
    ) throws -> ItemMatches {
        let matches = try lookUpMatches(
            query, returnData: returnData, includingLocked: includingLocked, caller: caller)
        if returnData { try releaseSecrets(of: matches, to: caller, interaction: interaction) }
        return matches
    }

    /// `copyMatchingReportingDamage`'s lookup, before the secrets are released.
    private func lookUpMatches(
        _ query: ItemQuery, returnData: Bool, includingLocked: Bool, caller: Caller
    ) throws -> ItemMatches {
        let grant = try authorize(
            .copyItems(accessGroup: query.attributes.accessGroup), for: caller)
        // No engine lock: the query runs on a reader connection, the keys come under the keys
        // lock, and decrypting and matching need no lock (with several clients, lookups would
        // otherwise queue on the engine lock behind each other and behind group commits).
        func lookUp() throws -> ItemMatches {
            let (metadata, index) = try withKeys { try keychain.metadataKeys() }
            let found = try read {
                try KeychainStore.candidateRows(
                    query, groups: grant.searchedAccessGroups, hashKey: index,
                    itemIndex: keychain.itemIndex, in: $0)
            }
            var candidates = KeychainStore.Candidates(
                rows: found.rows, malformed: found.malformed, metadata: metadata)
            try withKeys { try keychain.addClassKeys(to: &candidates) }
            return try KeychainStore.copyMatching(
                candidates, query, returnData: returnData, includingLocked: includingLocked)
        }
        // The rows come from one snapshot and the class keys a moment later: should the
        // passphrase be removed and set again in between (a new whenPasscodeSet key), a row
        // fails authentication (reported damaged). A second lookup reads both anew; a
        // damaged row is damaged again.
        let first: ItemMatches
        do {
            first = try lookUp()
        } catch let e as VaultFailure where e.code == .itemDamaged {
            return try lookUp()
        }
        return first.damaged.isEmpty ? first : try lookUp()
    }

    /// SecItemUpdate; see `KeychainStore.update`. All matches change, or none.
    func updateItems(
        _ query: ItemQuery, changes: ItemAttributes, secret: SecureBytes?, caller: Caller
    ) throws -> Int {
        let grant = try authorize(
            .updateItems(
                accessGroup: query.attributes.accessGroup, newAccessGroup: changes.accessGroup),
            for: caller)
        let (n, made) = try write { db in
            try self.admitInWrite(caller, in: db)
            var made: [ItemChange] = []
            let n = try self.keychain.update(
                query, changes: changes, secret: secret, groups: grant.searchedAccessGroups,
                in: db, reporting: { made.append(contentsOf: $0) })
            return (n, made)
        }
        emit(.keychainChanged)
        emit(.itemsChanged(made))
        return n
    }

    /// SecItemDelete; see `KeychainStore.delete`.
    func deleteItems(_ query: ItemQuery, caller: Caller) throws -> Int {
        let grant = try authorize(
            .deleteItems(accessGroup: query.attributes.accessGroup), for: caller)
        let (n, made) = try writeMakingRoom { db in
            try self.admitInWrite(caller, in: db)
            var made: [ItemChange] = []
            let n = try self.keychain.delete(
                query, groups: grant.searchedAccessGroups, in: db,
                reporting: { made.append(contentsOf: $0) })
            return (n, made)
        }
        emit(.keychainChanged)
        emit(.itemsChanged(made))
        return n
    }
}

/// How a vault treats passphrases: the Argon2id cost of new KEKs. The failed-unlock waits
/// (`Vault.unlockWait`) are not part of it: they are always the documented schedule, and
/// tests move the vault's clock to get through them.
public struct PassphrasePolicy: Sendable {
    /// The Argon2id cost of every KEK derived from now on, and the least a stored one may
    /// have before it is re-wrapped at the next unlock.
    public var kdfCost: Sodium.KDFCost

    public init(kdfCost: Sodium.KDFCost = .moderate) {
        self.kdfCost = kdfCost
    }

    /// The settings for tests only, from the environment: `VAULTD_ARGON2_TEST_COST=min`
    /// (libsodium's MIN limits, never less). Unset or empty, the real default. Throws for
    /// any other value.
    public static func fromEnvironment(_ env: [String: String]) throws -> PassphrasePolicy {
        var p = PassphrasePolicy()
        switch env["VAULTD_ARGON2_TEST_COST"] {
        case nil, "": break
        case "min": p.kdfCost = .minimum
        case let v?:
            throw VaultFailure(
                .param, "VAULTD_ARGON2_TEST_COST (for tests only) must be min, not '\(v)'")
        }
        return p
    }
}

/// Emits preference and lock-state events in the order their changes were made. Each
/// change takes a number under the engine lock once it is made (`Ticket.take`), and
/// publishes its events (none when it failed after all) afterwards; events wait here until
/// every change numbered before theirs has published. Lock-state changes take numbers too,
/// so a preference event's `sequence` may skip some.
final class OrderedEvents: @unchecked Sendable {
    /// One write's place in the order (nil until it takes one).
    final class Ticket: @unchecked Sendable {
        private let events: OrderedEvents
        fileprivate var number: UInt64?
        init(_ events: OrderedEvents) { self.events = events }
        /// The write's place in the order (from `start` + 1), once taken.
        var sequence: UInt64 { number ?? 0 }
        /// Takes the next number; call it under the engine lock, once the change is made
        /// (later calls keep the first number).
        func take() {
            if number == nil {
                number = events.lock.withLock {
                    events.taken += 1
                    return events.taken
                }
            }
        }
        /// Events of a change already made that must go out even if the rest of the call then
        /// fails (`inEventOrder` publishes them when it throws; its result's events replace them).
        var madeSoFar: [VaultEvent] = []
    }

    private let lock = NSLock()
    /// The number before this run's first.
    let start: UInt64
    private var taken: UInt64
    private var nextToEmit: UInt64

    /// Numbers changes from `start` + 1.
    init(after start: UInt64 = 0) {
        self.start = start
        taken = start
        nextToEmit = start + 1
    }

    /// Where a vaultd run starts numbering: the wall clock in microseconds since 1970, so a
    /// run numbers its writes above an earlier run's (which made fewer than one write per
    /// microsecond it ran) and a client still holding the earlier run's numbers does not
    /// take the new run's writes for old ones (a `Defaults` write just after a restart
    /// would miss its own copy). 0 on a clock before 1970.
    static func runStart() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return now.tv_sec < 0 ? 0 : UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec / 1000)
    }
    private var waiting: [UInt64: [VaultEvent]] = [:]
    /// Set while a thread hands out events (under `lock`): one at a time, so they stay in order.
    private var emitting = false

    /// Publishes a ticket's events (nothing when it took no number): `emit` gets them, and
    /// those of later tickets waiting for this one, in order. One thread emits at a time;
    /// a ticket published meanwhile is left to it. `emit` runs outside the lock: a write
    /// takes its number (`Ticket.take`) holding the engine lock and then this lock, so a
    /// handler that needed either (one that reads the lock state, or writes a preference)
    /// waited for itself or for a writer that waited for it.
    func publish(_ ticket: Ticket, _ events: [VaultEvent], emit: ([VaultEvent]) -> Void) {
        guard let n = ticket.number else { return }
        lock.lock()
        waiting[n] = events
        if emitting {
            lock.unlock()
            return
        }
        emitting = true
        while let ready = waiting.removeValue(forKey: nextToEmit) {
            nextToEmit += 1
            lock.unlock()
            emit(ready)
            lock.lock()
        }
        emitting = false
        lock.unlock()
    }
}

/// Something that changed in the vault, for observers.
public enum VaultEvent: Sendable {
    /// The lock state changed.
    case lockState(LockState)
    /// A preference was set (value) or removed (nil). `sequence`: the write's place in the
    /// commit order of this vaultd's run (`OrderedEvents`; increasing, not consecutive), also
    /// in the writer's reply.
    case preference(domain: String, key: String, value: PlistValue?, sequence: UInt64)
    /// Files were purged from an app's cache.
    case cachePurge(appID: String, freedBytes: Int64)
    /// Keychain items were added, updated or deleted (sync exports the synchronizable ones;
    /// no subscription is sent it).
    case keychainChanged
    /// These items were made, changed or deleted, by one committed write (after
    /// `keychainChanged`, when that is sent too). The Secret Service front-end signals its
    /// items' changes from it, whichever front-end made them; no subscription is sent it.
    case itemsChanged([ItemChange])
}
