import Foundation
import Synchronization
import VaultProtocol

/// Sync of synchronizable keychain items between the owner's devices through a folder that an
/// engine such as Syncthing replicates (docs/sync.md). Each device writes only
/// `devices/ITS_ID/` in the folder, as append-only, immutable, encrypted segments; each pass
/// reads every new segment of every device, merges (`SyncVault`), exports what changed here
/// since the last pass as a new segment, and brings the local keychain to the merged state.
///
/// One pass runs at a time (under `lock`, which the owner's operations take too), on the
/// watcher's thread (or in `passNow`).
///
/// This file holds the state, loading, the watcher and the pass's outline (`pass`); its
/// steps and the owner's operations are extensions in files named for what they hold:
/// `+Operations`, `+Reading` (step 1), `+Local` (steps 2 and 3), `+Writing` (this device's
/// segments), `+Acks`, `+Compaction`.
public final class SyncService: @unchecked Sendable {
    let vault: Vault
    let lock = NSLock()

    /// The devices directory's subdirectories read at most: this device and the members
    /// first, then others by name; the rest are ignored and counted in `sync status`.
    public static let maximumDevices = 256
    /// Entries of one device's directory listed at most.
    public static let maximumEntriesPerDevice = 200_000
    /// Rejected segments logged by name per run; later ones are only counted (`sync status`).
    public static let maximumLoggedRejections = 20

    /// A device's segments compacted into a snapshot once it has this many (tests lower it).
    public var compactionThreshold = 64

    // The merged state and what was read, under `lock`. Rebuilt from the folder at start.
    var merged = SyncVault()
    /// The merge of each device's own segments (from its latest snapshot on): what compaction
    /// reads, and what `merged` is rebuilt from when a snapshot replaces segments.
    var perDevice: [SyncDeviceID: SyncVault] = [:]
    /// Each device's group records from its current segments (a snapshot keeps them).
    var controlOf: [SyncDeviceID: [SyncControl]] = [:]
    var clock: HybridClock?
    /// Segments merged, per device.
    var applied: [SyncDeviceID: Set<UInt64>] = [:]
    /// Each device's latest snapshot: its segments before it are not read.
    var floor: [SyncDeviceID: UInt64] = [:]
    /// The hash of each segment file merged (what a removal pins).
    var fileHashes: [SyncDeviceID: [UInt64: [UInt8]]] = [:]
    /// The key each member's approval was sealed under (one it holds: its grant had it).
    var approvedUnder: [SyncDeviceID: SyncKeyID] = [:]
    /// Segments refused, with the file they were (another file under the name, or the file
    /// changed, is tried again).
    var rejected: [SyncDeviceID: [UInt64: SyncFolder.FileVersion]] = [:]
    var rejectionsLogged = 0
    /// The latest wall-clock time (ms) of a change read from each device.
    var lastSeen: [SyncDeviceID: UInt64] = [:]
    /// The largest acknowledgement read from each device, of each device.
    var acks: [SyncDeviceID: [SyncDeviceID: UInt64]] = [:]
    /// The rollbacks logged (`logRollbacks`): each device's acknowledged sequence.
    var rollbacksLogged: [SyncDeviceID: UInt64] = [:]
    var ackWritten: [SyncDeviceID: UInt64]?
    /// The membership and the keys held, as stored (loaded at the first pass of a config).
    var membership = SyncMembership()
    var keyring = SyncKeyring()
    /// The config the state above was read under (a new one starts it over).
    var loadedFor: SyncConfig?
    var nextSequence: UInt64 = 1
    /// Why the last pass did not finish (nil: it did).
    var lastProblem: String?
    var lastPass: Date?
    /// Device directories the last listing left unread (over `maximumDevices`).
    var ignoredDevices = 0
    /// Device names whose directory was a link, logged once each.
    var linksLogged = Set<SyncDeviceID>()
    /// What the watcher watches: the folder, `devices/` and the device directories read.
    var watchPaths: [String] = []
    /// The local rows the last pass read, by row id; valid only after a pass that finished
    /// (every item then matched the merged vault, or could not be stored): the next pass
    /// looks only at the items changed here or in the merge since.
    var localCache: [Int64: LocalSyncRow] = [:]
    private var cacheValid = false
    /// Keys whose local rows the last pass wrote, after it read the rows: the next pass looks
    /// at them (a row written and then deleted before any pass read it is in no cache).
    var writtenByLastPass = Set<SyncItemKey>()
    /// The damaged synchronizable rows of this keychain the last pass met (`DamagedSyncRow`),
    /// and the keys it held for them: held keys are looked at again by the next pass, so an
    /// item whose damaged row was deleted here takes the group's copy back.
    var damagedRows: [DamagedSyncRow] = []
    var heldByLastPass = Set<SyncItemKey>()

    /// Set once by `start`; read by `wake` from any thread, under `watcherLock`.
    private var watcher: SyncWatcher?
    private let watcherLock = NSLock()
    /// Whether this device is in (or joining) a sync group, as the last pass found at its
    /// start: the vault's changes wake the watcher only then, so a vault that does not sync
    /// pays no thread wake-up per write. True until the first pass says otherwise.
    private let enrolled = Atomic<Bool>(true)

    public init(vault: Vault) {
        self.vault = vault
    }

    /// The vault's logger: what the passes did and what they refused.
    var logger: Logger { vault.logger }

    /// The config and folder of a member, with the membership and keys loaded. Throws
    /// NotInitialized otherwise.
    func memberState() throws -> (SyncConfig, SyncFolder) {
        guard let config = try vault.syncConfig(), config.state == .member else {
            throw VaultFailure(
                .notInitialized, "this device is not in a sync group: sync init or sync join first")
        }
        try load(config)
        // The stored sequence and the segments of this device read here (signed with its
        // key); never a name in the folder, which anyone can write.
        nextSequence = max(
            nextSequence, try vault.syncStoredSequence(), (applied[config.device]?.max() ?? 0) + 1)
        guard membership.isMember(config.device) else {
            throw VaultFailure(.notInitialized, "this device was removed from the sync group")
        }
        return (config, SyncFolder(root: config.folder))
    }

    /// Loads the stored membership and keys when the config changed (or at the first use).
    func load(_ config: SyncConfig) throws {
        if config != loadedFor {
            resetState()
            loadedFor = config
        }
        if keyring.keys.isEmpty {
            guard let raw = try vault.syncSecret("keyring"), let ring = SyncKeyring(encoded: raw),
                let view = try vault.syncMembership()
            else {
                throw VaultFailure(
                    .internalError,
                    "this device's sync keys are missing or from an older version: run sync leave, then sync join again"
                )
            }
            keyring = ring
            membership = view
        }
    }

    func resetState() {
        resetReadState()
        membership = SyncMembership()
        keyring = SyncKeyring()
        loadedFor = nil
        nextSequence = 1
        lastProblem = nil
        ackWritten = nil
        damagedRows = []
        ignoredDevices = 0
        rollbacksLogged = [:]
        watchPaths = []
    }

    /// Forgets what was read from the folder (kept: the membership and keys, which only grow).
    private func resetReadState() {
        merged = SyncVault()
        perDevice = [:]
        controlOf = [:]
        floor = [:]
        fileHashes = [:]
        approvedUnder = [:]
        acks = [:]
        clock = nil
        applied = [:]
        rejected = [:]
        lastSeen = [:]
        localCache = [:]
        cacheValid = false
        writtenByLastPass = []
        heldByLastPass = []
    }

    // MARK: running

    /// Starts the watcher thread: a pass now, then one whenever the folder or the keychain
    /// changes, or the vault is unlocked (and every 60 s, for changes inotify cannot report).
    public func start() {
        _ = vault.addObserver { [weak self] event in
            switch event {
            case .keychainChanged, .lockState:
                if self?.enrolled.load(ordering: .acquiring) == true { self?.wake() }
            default: break
            }
        }
        let w = SyncWatcher { [weak self] in self?.pathsToWatch() ?? [] }
        watcherLock.withLock { watcher = w }
        w.run { [weak self] in self?.runPass() }
    }

    /// Asks for a pass soon (from any thread; never waits for one).
    func wake() { watcherLock.withLock { watcher }?.wake() }

    /// What the watcher watches: what the last pass read, or the folder and `devices/` before
    /// one did.
    private func pathsToWatch() -> [String] {
        if let paths = lock.withLock({ watchPaths.isEmpty ? nil : watchPaths }) { return paths }
        guard let config = (try? vault.syncConfig()) ?? nil else { return [] }
        return [config.folder, config.folder + "/devices"]
    }

    /// One pass; failures are logged once each (until a pass succeeds) and left for the next.
    func runPass() {
        lock.withLock {
            do {
                try pass()
                if lastProblem != nil { logger.notice("sync: passes succeed again") }
                lastProblem = nil
                lastPass = Date()
            } catch let e as VaultFailure
                where e.code == .interactionNotAllowed || e.code == .notInitialized
            {
                // Locked, or not initialised yet: the unlock wakes the next pass.
                lastProblem = "waiting for the vault to be unlocked"
            } catch {
                let text = "\(error)"
                if text != lastProblem {
                    logger.warning(
                        "sync: the pass failed (tried again on the next change): \(text)")
                }
                lastProblem = text
            }
        }
    }

    /// Runs a pass now, in the caller's thread, throwing what it fails with (tests).
    public func passNow() throws {
        try lock.withLock { try pass() }
    }

    // MARK: the pass

    /// A pass, under `lock`: 1. every new segment of the folder merged, 2. what changed here
    /// since the last pass exported, 3. the local keychain brought to the merge, 4. this
    /// device's changes written to the folder, then to the keychain, its ack, and a compaction
    /// when one is due.
    func pass() throws {
        let found = try vault.syncConfig()
        // Before anything is read: a change made after this wakes the next pass.
        enrolled.store(found != nil, ordering: .releasing)
        guard var config = found else { return }
        if config != loadedFor {
            resetState()
            loadedFor = config
        }
        let folder = SyncFolder(root: config.folder)
        if config.state == .joining {
            guard let joined = try completeJoin(config, folder) else { return }
            config = joined
        }
        try load(config)
        let me = config.device
        if clock == nil { clock = HybridClock(device: me) }
        try folder.makeDeviceDirectory(me)

        // A pass that throws leaves the cache invalid: the next one looks at every item.
        let wasValid = cacheValid
        cacheValid = false

        // 1. Every new segment of every device that may write (`mergeNewSegments`).
        let listing = try read(folder, config)
        let membershipBefore = membership
        let keysBefore = Set(keyring.keys.keys)
        var reading = SegmentReading()
        try mergeNewSegments(listing, folder, me: me, into: &reading)
        if membership != membershipBefore || Set(keyring.keys.keys) != keysBefore {
            try vault.storeSync(
                config: config, secrets: ["keyring": keyring.encoded()], membership: membership)
        }
        if reading.rebuild {
            // Read everything again under the membership as it now stands.
            resetReadState()
            return try pass()
        }
        if reading.snapshotRead {
            // A snapshot leaves the live items as they were; what it dropped goes from the merge.
            let before = merged
            rebuildMerged()
            for (k, s) in before.items where merged.items[k] != s { reading.touched.insert(k) }
        }
        if membership.removed[me] != nil {
            // Removed (or left): nothing more is written; the items stay as they are.
            lastProblem = "this device was removed from the sync group"
            return
        }
        // The stored sequence and this device's own segments read above (signed with its key):
        // a name in the folder, which anyone can write, never sets it.
        nextSequence = max(
            nextSequence, try vault.syncStoredSequence(), (applied[me]?.max() ?? 0) + 1)
        readAcks(listing, folder)
        logRollbacks(rollbacks(listing, me: me))
        try shareKeys(withMembersNewSince: membershipBefore, config: config, folder: folder)

        // 2. and 3. (`reconcileLocal`).
        let local = try reconcileLocal(touched: reading.touched, wasValid: wasValid)
        try finish(local, listing: listing, config: config, folder: folder)
        // Only in a pass with nothing new, here or in the folder: a change never waits for it.
        if local.exported.isEmpty && reading.touched.isEmpty && local.changes.isEmpty {
            try compactIfDue(config: config, folder: folder)
        }
    }

    /// Step 4 of a pass: this device's changes into the folder first (durably), then the
    /// keychain and the baseline in one transaction (a crash between the two exports them
    /// again, harmlessly); then the cache the next pass starts from, and this device's ack.
    private func finish(
        _ local: LocalReconciliation, listing: [SyncDeviceID: SyncFolder.Entry],
        config: SyncConfig, folder: SyncFolder
    ) throws {
        try export(local.exported, config: config, folder: folder)
        if !local.changes.isEmpty || !local.baseline.isEmpty {
            try vault.applySync(local.changes, baseline: local.baseline)
        }
        localCache = local.rows
        heldByLastPass = local.held
        writtenByLastPass = Set(
            local.changes.compactMap { c -> SyncItemKey? in
                switch c {
                case .put(let key, _, _): key
                case .delete(let id): local.rows[id]?.key
                }
            })
        cacheValid = true
        try writeAck(listing, config: config, folder: folder)
    }

    /// `merged` made again from each device's own merge (after a snapshot replaced segments).
    func rebuildMerged() {
        merged = SyncVault()
        for v in perDevice.values { merged.join(v) }
    }
}
