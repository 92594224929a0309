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
///
/// `@unchecked Sendable`: the failed-unlock record is read and written under the engine lock,
/// the observers and `emittedThrough` under `observersLock`, the keys under `keysLock`; the
/// stores it holds use non-`Sendable` SQLite connections, each under its pool's lock.
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
    public let presence: PresenceGate
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
    /// vaultd's log, which the vault, its stores and its sync service write to.
    public let logger: Logger
    /// Failed passphrase checks in a row, as this process counted them, and the wall-clock
    /// time of the last (seconds since 1970, on `clock`), under the engine lock. With the count stored in
    /// `vault_meta` (`unlock.failures`), the larger wins (`failureRecord`): a failure that
    /// could not be stored (a full disk) still counts, until vaultd exits.
    var failures = FailureRecord(count: 0, last: 0)
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
    /// waiting. `logger`: where the vault and its parts log (stderr at info level, but
    /// vaultd's).
    public init(
        dataDirectory: String, cacheDirectory: String? = nil, newDeviceKey: Bool = false,
        deviceKeyTPM: DeviceKeyTPM = .none,
        passphrasePolicy: PassphrasePolicy = PassphrasePolicy(),
        clock: any VaultClock = SystemClock(), logger: Logger = Logger()
    ) throws {
        self.logger = logger
        presence = PresenceGate(logger: logger)
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
        let db = try Self.openStore(dataDirectory + "/vault.sqlite", logger: logger)
        // A damaged (not 32 bytes), foreign or loose device.key is refused, never replaced.
        let loaded: DeviceKey.Loaded
        do {
            let initialized =
                try db.row("SELECT 1 FROM vault_meta WHERE key = 'wrapped.metadata'") != nil
            loaded = try DeviceKey.load(
                directory: dataDirectory, setting: deviceKeyTPM, initialized: initialized,
                newDeviceKey: newDeviceKey, logger: logger)
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
        caches = CacheStore(root: self.cacheDirectory, logger: logger)
        emittedThrough = orderedEvents.start
        reserve.replenish()
    }

    /// Opens the store and runs pending migrations, having checked it (`PRAGMA quick_check`):
    /// a file SQLite reports malformed, at the check or at any statement before vaultd
    /// serves it, is refused with StoreDamaged saying what to do; vaultd never serves it.
    private static func openStore(_ path: String, logger: Logger) throws -> Database {
        var opened: Database?
        do {
            let db = try Database(path: path, logger: logger)
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
            logger.warning(
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
    func addObserver(_ handler: @escaping @Sendable (VaultEvent) -> Void) -> UUID {
        addObserverReportingSequence(handler).id
    }

    /// `addObserver`, also returning the highest preference write sequence whose events went
    /// out before `handler` was registered (0: none): those writes have committed, so a
    /// snapshot read from now on holds them, and `handler` gets every later one.
    func addObserverReportingSequence(_ handler: @escaping @Sendable (VaultEvent) -> Void)
        -> (id: UUID, emittedThrough: UInt64)
    {
        let id = UUID()
        let through = observersLock.withLock {
            observers[id] = handler
            return emittedThrough
        }
        return (id, through)
    }

    func removeObserver(_ id: UUID) {
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
}
