import Foundation
import Synchronization
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Sync of synchronizable keychain items between the owner's devices through a folder that an
/// engine such as Syncthing replicates (docs/sync.md). Each device writes only
/// `devices/ITS_ID/` in the folder, as append-only, immutable, encrypted segments; each pass
/// reads every new segment of every device, merges (`SyncVault`), exports what changed here
/// since the last pass as a new segment, and brings the local keychain to the merged state.
///
/// One pass runs at a time (under `lock`, which the owner's operations take too), on the
/// watcher's thread (or in `passNow`).
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
    private var perDevice: [SyncDeviceID: SyncVault] = [:]
    /// Each device's group records from its current segments (a snapshot keeps them).
    private var controlOf: [SyncDeviceID: [SyncControl]] = [:]
    var clock: HybridClock?
    /// Segments merged, per device.
    var applied: [SyncDeviceID: Set<UInt64>] = [:]
    /// Each device's latest snapshot: its segments before it are not read.
    private var floor: [SyncDeviceID: UInt64] = [:]
    /// The hash of each segment file merged (what a removal pins).
    private var fileHashes: [SyncDeviceID: [UInt64: [UInt8]]] = [:]
    /// The key each member's approval was sealed under (one it holds: its grant had it).
    private var approvedUnder: [SyncDeviceID: SyncKeyID] = [:]
    /// Segments refused, with the file they were (another file under the name, or the file
    /// changed, is tried again).
    var rejected: [SyncDeviceID: [UInt64: SyncFolder.FileVersion]] = [:]
    private var rejectionsLogged = 0
    /// The latest wall-clock time (ms) of a change read from each device.
    private var lastSeen: [SyncDeviceID: UInt64] = [:]
    /// The largest acknowledgement read from each device, of each device.
    private(set) var acks: [SyncDeviceID: [SyncDeviceID: UInt64]] = [:]
    /// The rollbacks logged (`logRollbacks`): each device's acknowledged sequence.
    var rollbacksLogged: [SyncDeviceID: UInt64] = [:]
    var ackWritten: [SyncDeviceID: UInt64]?
    /// The membership and the keys held, as stored (loaded at the first pass of a config).
    var membership = SyncMembership()
    private var keyring = SyncKeyring()
    /// The config the state above was read under (a new one starts it over).
    private var loadedFor: SyncConfig?
    private var nextSequence: UInt64 = 1
    /// Why the last pass did not finish (nil: it did).
    private var lastProblem: String?
    private var lastPass: Date?
    /// Device directories the last listing left unread (over `maximumDevices`).
    private var ignoredDevices = 0
    /// Device names whose directory was a link, logged once each.
    private var linksLogged = Set<SyncDeviceID>()
    /// What the watcher watches: the folder, `devices/` and the device directories read.
    private var watchPaths: [String] = []
    /// The local rows the last pass read, by row id; valid only after a pass that finished
    /// (every item then matched the merged vault, or could not be stored): the next pass
    /// looks only at the items changed here or in the merge since.
    private var localCache: [Int64: LocalSyncRow] = [:]
    private var cacheValid = false
    /// Keys whose local rows the last pass wrote, after it read the rows: the next pass looks
    /// at them (a row written and then deleted before any pass read it is in no cache).
    var writtenByLastPass = Set<SyncItemKey>()
    /// The damaged synchronizable rows of this keychain the last pass met (`DamagedSyncRow`),
    /// and the keys it held for them: held keys are looked at again by the next pass, so an
    /// item whose damaged row was deleted here takes the group's copy back.
    private var damagedRows: [DamagedSyncRow] = []
    private var heldByLastPass = Set<SyncItemKey>()

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

    // MARK: the owner's operations

    /// Makes a new sync group in `folder` (an existing directory): its group key, this
    /// device's ID and directory. Throws Param (not a directory, already a sync group's
    /// folder, this device already syncing), the lock errors (before the first unlock).
    public func initialize(folder: String, in session: VaultSession) throws -> SyncEnrolment {
        try vault.authorizeSync(.syncInit, session: session)
        return try lock.withLock {
            guard try vault.syncConfig() == nil else {
                throw VaultFailure.param("this device already syncs; run sync leave first")
            }
            let folder = try Self.checkedFolder(folder)
            if let found = try? SyncFolder(root: folder).scan(),
                !found.devices.isEmpty || found.ignored > 0
            {
                throw VaultFailure.param(
                    "\(folder) already holds a sync group: run sync join on this device, and sync approve on one already in it"
                )
            }
            let device = SyncDeviceID.random()
            let groupKey = SecureBytes.random(count: Sodium.keyLength)
            let (boxPK, boxSK) = SyncPairing.keyPair()
            let (signPK, signSK) = SyncSigning.keyPair()
            try SyncFolder(root: folder).makeDeviceDirectory(device)
            let config = SyncConfig(folder: folder, device: device, state: .member)
            var ring = SyncKeyring()
            let first = SyncKeyID(generation: 1, rotator: device)
            ring.keys[first] = groupKey
            var view = SyncMembership()
            view.members[device] = SyncMember(device: device, boxKey: boxPK, signKey: signPK)
            view.keys[first] = []
            try vault.storeSync(
                config: config,
                secrets: ["keyring": ring.encoded(), "boxSecret": boxSK, "signSecret": signSK],
                membership: view)
            log("sync: made a sync group in \(logField(folder)) as device \(device)")
            wake()
            return SyncEnrolment(
                deviceID: device.description, fingerprint: SyncPairing.groupFingerprint(groupKey))
        }
    }

    /// Asks to join the group syncing through `folder`: a key pair whose public half goes into
    /// the folder, and the pairing code to give `sync approve` on a device of the group.
    public func join(folder: String, in session: VaultSession) throws -> SyncEnrolment {
        try vault.authorizeSync(.syncJoin, session: session)
        return try lock.withLock {
            guard try vault.syncConfig() == nil else {
                throw VaultFailure.param("this device already syncs; run sync leave first")
            }
            let folder = try Self.checkedFolder(folder)
            let device = SyncDeviceID.random()
            let (boxPK, boxSK) = SyncPairing.keyPair()
            let (signPK, signSK) = SyncSigning.keyPair()
            let f = SyncFolder(root: folder)
            try f.makeDeviceDirectory(device)
            try f.writeFile(
                SyncPairing.joinFile(boxKey: boxPK, signKey: signPK), device: device,
                name: SyncFolder.joinName)
            try vault.storeSync(
                config: SyncConfig(folder: folder, device: device, state: .joining),
                secrets: ["boxSecret": boxSK, "signSecret": signSK])
            log("sync: asked to join the sync group in \(logField(folder)) as device \(device)")
            wake()
            return SyncEnrolment(
                deviceID: device.description,
                code: Self.code(device: device, boxKey: boxPK, signKey: signPK))
        }
    }

    /// A pairing code: the device ID and 16 bytes of its public key's hash, 64 hex digits in
    /// groups of 8 (so a public key put in the folder by anyone else is not approved).
    static func code(device: SyncDeviceID, boxKey: [UInt8], signKey: [UInt8]) -> String {
        let hex = Array(
            SyncHex.encode(device.bytes + SyncPairing.fingerprint(boxKey: boxKey, signKey: signKey))
        )
        return stride(from: 0, to: hex.count, by: 8).map {
            String(hex[$0..<min($0 + 8, hex.count)])
        }.joined(separator: "-")
    }

    /// Lets the device whose pairing code `code` is into the group (its join file in the
    /// folder must hold the public keys the code names): writes a member record for it in
    /// this device's next segment, then the group's keys and membership sealed to it. Throws
    /// Param (a malformed code, no such request in the folder, keys that do not match, a device
    /// removed before), NotInitialized (not a member).
    public func approve(code: String, in session: VaultSession) throws -> SyncEnrolment {
        try vault.authorizeSync(.syncApprove, session: session)
        return try lock.withLock {
            let (config, folder) = try memberState()
            let digits = code.filter { $0 != "-" && $0 != " " }
            guard digits.utf8.count == 64, let raw = SyncHex.decode(digits),
                let device = SyncDeviceID(bytes: Array(raw.prefix(16)))
            else {
                throw VaultFailure.param("a pairing code is 64 hex digits, as sync join printed it")
            }
            guard
                let file = folder.readSmallFile(
                    device: device, name: SyncFolder.joinName, limit: 256),
                let keys = SyncPairing.keys(ofJoinFile: file)
            else {
                throw VaultFailure.param(
                    "no join request of device \(device) in the folder yet (has the folder finished syncing?)"
                )
            }
            guard
                SyncPairing.fingerprint(boxKey: keys.boxKey, signKey: keys.signKey)
                    == Array(raw.suffix(16))
            else {
                throw VaultFailure.param(
                    "the join request in the folder does not match the code: do not approve it (someone else may have written it)"
                )
            }
            guard membership.removed[device] == nil else {
                throw VaultFailure.param(
                    "device \(device) was removed from the group; join again as a new device")
            }
            // Approved before (the same code given again): the member record and grant are in place.
            if membership.members[device] == nil {
                let member = SyncMember(device: device, boxKey: keys.boxKey, signKey: keys.signKey)
                try writeControl([.member(member)], config: config, folder: folder)
                log("sync: approved device \(device)")
            }
            // Written (again) whatever holds its name: a file there may not be this device's.
            try folder.writeFile(
                SyncPairing.grantFile(keyring: keyring, membership: membership, to: keys.boxKey),
                device: config.device, name: SyncFolder.grantName(device))
            return SyncEnrolment(deviceID: device.description)
        }
    }

    /// Removes `device` from the group, on a device that stays: a removal record (its
    /// segments after the last one merged here are never applied) and a new group key sealed
    /// to every remaining member, in one segment under the current key; every later segment
    /// is sealed under the new key, which the removed device never gets. Throws Param (not a
    /// device ID, not a member, this device: use leave), NotInitialized (not a member).
    public func remove(device text: String, in session: VaultSession) throws -> SyncEnrolment {
        try vault.authorizeSync(.syncRemove, session: session)
        return try lock.withLock {
            guard let device = SyncDeviceID(hex: text.lowercased()) else {
                throw VaultFailure.param("a device ID is 32 hex digits, as sync status shows it")
            }
            let (config, folder) = try memberState()
            guard device != config.device else {
                throw VaultFailure.param("this device cannot remove itself: run sync leave")
            }
            // Everything in the folder merged first: the cutoff keeps what the device wrote so far.
            try pass()
            guard membership.members[device] != nil else {
                throw VaultFailure.param("device \(device) is not a member of the group")
            }
            if membership.removed[device] == nil {
                let cutoff = applied[device]?.max() ?? 0
                var records: [SyncControl] = [.remove(device, cutoff: cutoff, pins: pins(device))]
                var view = membership
                _ = view.apply(records[0], author: config.device)
                let (rotate, newKey) = try makeRotation(view, me: config.device)
                records.append(rotate)
                try writeControl(records, config: config, folder: folder, newKey: newKey)
                log(
                    "sync: removed device \(device) (its segments after \(cutoff) are ignored) and rotated the group key"
                )
            }
            return SyncEnrolment(
                deviceID: device.description,
                keyGeneration: Int(keyring.current?.id.generation ?? 0))
        }
    }

    /// The hashes of the segments of `device` merged here, from its latest snapshot on.
    private func pins(_ device: SyncDeviceID) -> [UInt64: [UInt8]] {
        var out: [UInt64: [UInt8]] = [:]
        for seq in (applied[device] ?? []).sorted().suffix(SyncControl.maximumPins) {
            out[seq] = fileHashes[device]?[seq]
        }
        return out
    }

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
    private func load(_ config: SyncConfig) throws {
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

    /// A new group key for the members of `view`: the rotate record (the key sealed to each of
    /// them, the removed devices named) and the key.
    /// Throws InternalError when the generations are used up (a member wrote the largest one).
    private func makeRotation(_ view: SyncMembership, me: SyncDeviceID) throws -> (
        SyncControl, (SyncKeyID, SecureBytes)
    ) {
        let latest = view.keys.keys.map(\.generation).max() ?? 0
        guard latest < UInt32.max else {
            throw VaultFailure(
                .internalError,
                "the group key's generation is at its largest (\(latest)): no new key can be made; make a new sync group"
            )
        }
        let key = SecureBytes.random(count: Sodium.keyLength)
        let generation = latest + 1
        var boxes: [SyncDeviceID: [UInt8]] = [:]
        for m in view.currentMembers { boxes[m.device] = SyncPairing.seal(key, to: m.boxKey) }
        return (
            .rotate(generation: generation, excludes: Set(view.removed.keys), boxes: boxes),
            (SyncKeyID(generation: generation, rotator: me), key)
        )
    }

    /// Whether the current key keeps every removed device out: it was made after each
    /// removal (it excludes them), and no later key exists that this device was not given.
    private func currentKeyIsSafe() -> Bool {
        guard let current = keyring.current?.id else { return false }
        let excludes = membership.keys[current] ?? []
        guard membership.removed.keys.allSatisfy({ excludes.contains($0) }) else { return false }
        return !membership.keys.keys.contains { $0 > current }
    }

    /// Writes group records as this device's next segment, under the current key or `under`
    /// (the records of a rotation must be readable by those who do not have the new key yet), and
    /// takes them in here; `newKey`: the key a rotation among them made, held from then on.
    private func writeControl(
        _ records: [SyncControl], config: SyncConfig, folder: SyncFolder,
        newKey: (SyncKeyID, SecureBytes)? = nil, under: SyncKeyID? = nil
    ) throws {
        try writeSegment(
            SyncSegment(device: config.device, sequence: 0, control: records, changes: []),
            folder: folder, under: under)
        for r in records {
            _ = membership.apply(r, author: config.device)
            controlOf[config.device, default: []].append(r)
        }
        if let (id, key) = newKey { keyring.keys[id] = key }
        try vault.storeSync(
            config: config, secrets: ["keyring": keyring.encoded()], membership: membership)
    }

    /// Seals, signs and writes `segment` as this device's next sequence (durably), under
    /// the current key (or `under`).
    private func writeSegment(_ segment: SyncSegment, folder: SyncFolder, under: SyncKeyID? = nil)
        throws
    {
        guard
            let (id, key) = under.flatMap({ u in keyring.keys[u].map { (u, $0) } })
                ?? keyring.current, let me = loadedFor?.device,
            let sign = try vault.syncSecret("signSecret")
        else {
            throw VaultFailure(.internalError, "the sync keys are missing")
        }
        var s = segment
        var file: [UInt8] = []
        while true {
            guard nextSequence <= SyncSegment.maximumSequence else {
                throw VaultFailure(
                    .internalError,
                    "this device's segment numbers are used up: leave the sync group and join it again"
                )
            }
            s.sequence = nextSequence
            file = s.sealed(key: key, keyID: id, signingKey: sign)
            do {
                try folder.writeFile(file, device: me, name: SyncSegment.fileName(s.sequence))
                break
            } catch let taken as SyncFolder.NameTaken {
                try makeRoom(taken.name, sequence: s.sequence, folder: folder, me: me, sign: sign)
            }
        }
        applied[me, default: []].insert(s.sequence)
        fileHashes[me, default: [:]][s.sequence] = SyncSegment.fileHash(file)
        nextSequence = s.sequence + 1
        try vault.storeSyncSequence(nextSequence)
    }

    /// The name of this device's next segment is taken. A segment this device signed (written
    /// before a crash kept its sequence from the store) is kept, and the next number tried; a
    /// file it did not write (anyone can put one in its directory) is removed, so its
    /// sequence is this device's again: a name in the folder never sets this device's
    /// sequence, and none it did not write stops it writing.
    private func makeRoom(
        _ name: String, sequence: UInt64, folder: SyncFolder, me: SyncDeviceID, sign: SecureBytes
    ) throws {
        let there = try? folder.readSegment(device: me, sequence: sequence)
        if let there,
            SyncSegment.isSigned(
                there, device: me, sequence: sequence, verifyKey: SyncSigning.publicKey(of: sign))
        {
            nextSequence = sequence + 1
            return
        }
        log(
            "sync: moved \(logField(name)) out of this device's way: this device did not write it, and its name is this device's next segment's"
        )
        if !folder.clear(device: me, name: name) {
            throw VaultFailure(
                .internalError,
                "cannot remove \(name), which this device did not write, from its directory")
        }
    }

    /// The sync state: the folder, this device, its group's fingerprint, and every device in
    /// the folder with its segments, those read, those pending, and when it last wrote.
    public func status(in session: VaultSession) throws -> SyncStatus {
        try vault.authorizeSync(.syncStatus, session: session)
        return try lock.withLock {
            guard let config = try vault.syncConfig() else { return SyncStatus(state: "off") }
            var status = SyncStatus(state: config.state.rawValue)
            status.folder = config.folder
            status.deviceID = config.device.description
            if config.state == .member, (try? load(config)) != nil {
                // The group's first key names the group; the current one, its generation.
                if let first = keyring.keys.keys.min(), let k = keyring.keys[first] {
                    status.fingerprint = SyncPairing.groupFingerprint(k)
                }
                status.keyGeneration = keyring.current.map { Int($0.id.generation) }
                if membership.removed[config.device] != nil { status.state = "removed" }
            }
            let scan = try? SyncFolder(root: config.folder).scan(preferring: preferred(config))
            let listing = scan?.devices ?? [:]
            status.ignoredDevices = scan?.ignored ?? 0
            if config.state == .member {
                status.rolledBack = rollbacks(listing, me: config.device)
            }
            status.devices = listing.keys.sorted().map { d in
                let segments = listing[d]?.segments ?? [:]
                let read = applied[d] ?? []
                let current = segments.filter { $0.key >= (floor[d] ?? 0) }
                return SyncStatus.Device(
                    deviceID: d.description, thisDevice: d == config.device,
                    segments: current.count,
                    pending: current.filter {
                        !read.contains($0.key) && rejected[d]?[$0.key] == nil
                    }.count,
                    rejected: rejected[d]?.count ?? 0,
                    membership: membership.standing(d),
                    lastSeen: lastSeen[d].map { Date(timeIntervalSince1970: Double($0) / 1000) })
            }
            status.items = merged.liveItems.count
            status.problem = lastProblem
            status.lastPass = lastPass
            // At most 1,000 named, as CopyMatching's `damaged`.
            status.damaged = damagedRows.prefix(VaultFailure.maximumDamagedItems).map(\.item)
            return status
        }
    }

    /// Stops syncing on this device: records its leaving in the folder (its last segment),
    /// then forgets the group keys, the settings and the baseline. The items stay in this
    /// keychain; this device's segments stay in the folder (the other devices keep what they
    /// merged). Throws NotInitialized when it did not sync.
    public func leave(in session: VaultSession) throws {
        try vault.authorizeSync(.syncLeave, session: session)
        try lock.withLock {
            guard let config = try vault.syncConfig() else {
                throw VaultFailure(.notInitialized, "this device does not sync")
            }
            // A member records its leaving, signed, so the others stop accepting its segments
            // and make a new key without it before they next write. (A removed device, or one
            // whose keys are gone, just forgets.)
            if config.state == .member, (try? memberState()) != nil {
                let folder = SyncFolder(root: config.folder)
                try? pass()
                // The leaving record's own segment comes after the cutoff: the others apply it
                // once (it is how they learn of the leaving) and never again.
                try writeControl(
                    [.remove(config.device, cutoff: nextSequence - 1, pins: pins(config.device))],
                    config: config, folder: folder)
                log("sync: recorded this device's leaving in the folder")
            }
            try vault.storeSync(config: nil)
            // A request to join that was never approved goes too (its key pair is forgotten).
            SyncFolder(root: config.folder).removeFile(
                device: config.device, name: SyncFolder.joinName)
            resetState()
            log("sync: device \(config.device) left the sync group in \(logField(config.folder))")
        }
    }

    /// The folder as it is kept: an absolute path to a directory, with every link on the way
    /// resolved now (`realpath`). From then on the folder is opened without following a link:
    /// one put in its place later is refused, not followed.
    static func checkedFolder(_ path: String) throws -> String {
        guard path.hasPrefix("/") else {
            throw VaultFailure.param("the sync folder must be an absolute path")
        }
        var st = stat()
        guard stat(path, &st) == 0, st.st_mode & S_IFMT == S_IFDIR,
            let resolved = realpath(path, nil)
        else {
            throw VaultFailure.param("\(path) is not a directory")
        }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    private func resetState() {
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
                if lastProblem != nil { log("sync: passes succeed again") }
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
                    log("sync: the pass failed (tried again on the next change): \(text)")
                }
                lastProblem = text
            }
        }
    }

    /// Runs a pass now, in the caller's thread, throwing what it fails with (tests).
    public func passNow() throws {
        try lock.withLock { try pass() }
    }

    /// A pass, under `lock`.
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
            // The directories read are watched: the grant comes in one of them.
            _ = try read(folder, config)
            guard let (ring, view) = try acceptGrant(config, folder) else { return }
            config.state = .member
            try vault.storeSync(
                config: config, secrets: ["keyring": ring.encoded()], membership: view)
            folder.removeFile(device: config.device, name: SyncFolder.joinName)
            resetState()
            loadedFor = config
            log(
                "sync: joined the sync group (fingerprint \(ring.keys.keys.min().flatMap { ring.keys[$0] }.map(SyncPairing.groupFingerprint) ?? "?"))"
            )
        }
        try load(config)
        let me = config.device
        if clock == nil { clock = HybridClock(device: me) }
        try folder.makeDeviceDirectory(me)

        // A pass that throws leaves the cache invalid: the next one looks at every item.
        let wasValid = cacheValid
        cacheValid = false
        // The keys the merge changed in this pass.
        var touched = Set<SyncItemKey>()

        // 1. Every new segment of every device that may write (a member, or a removed device
        // before its cutoff), signed by it and sealed under a key held here. Segments of a
        // device not (yet) known to be a member, or under a key not (yet) held, stay pending:
        // a later record may let them in. Rounds go on while a round lets new ones in.
        let listing = try read(folder, config)
        let membershipBefore = membership
        let keysBefore = Set(keyring.keys.keys)
        var rebuild = false
        var snapshotRead = false
        var progress = true
        while progress {
            progress = false
            for (device, entry) in listing.sorted(by: { $0.key < $1.key }) {
                for (seq, size) in entry.segments.sorted(by: { $0.key < $1.key }) {
                    let version =
                        entry.versions[seq]
                        ?? SyncFolder.FileVersion(size: size, inode: 0, changed: 0)
                    if seq < (floor[device] ?? 0) || applied[device]?.contains(seq) == true
                        || rejected[device]?[seq] == version
                    {
                        continue
                    }
                    guard let member = membership.members[device] else { continue }
                    guard membership.accepts(device, sequence: seq) else {
                        reject(
                            device, seq, version,
                            "it was written after the device \(membership.left[device] != nil ? "left" : "was removed from") the group"
                        )
                        continue
                    }
                    let s: SyncSegment
                    var sealedUnder: SyncKeyID?
                    do {
                        let bytes = try folder.readSegment(device: device, sequence: seq)
                        let hash = SyncSegment.fileHash(bytes)
                        guard membership.accepts(device, sequence: seq, hash: hash) else {
                            throw SyncFormatError("it is not a segment the device's removal kept")
                        }
                        fileHashes[device, default: [:]][seq] = hash
                        guard let id = SyncSegment.keyID(of: bytes) else {
                            throw SyncFormatError("not a vaultd sync segment")
                        }
                        guard let key = keyring.keys[id] else { continue }
                        sealedUnder = id
                        s = try SyncSegment.open(
                            bytes, key: key, device: device, sequence: seq,
                            verifyKey: member.signKey)
                        try Self.checkLeaving(s)
                    } catch {
                        // Gone since it was listed (its device compacted it away): nothing to refuse.
                        if !folder.exists(device: device, name: SyncSegment.fileName(seq)) {
                            continue
                        }
                        reject(device, seq, version, "\(error)")
                        continue
                    }
                    progress = true
                    applied[device, default: []].insert(seq)
                    rejected[device]?[seq] = nil
                    if s.control.contains(.snapshot) {
                        // It replaces every earlier segment of its device.
                        floor[device] = seq
                        perDevice[device] = SyncVault()
                        controlOf[device] = []
                        applied[device] = applied[device]!.filter { $0 >= seq }
                        snapshotRead = true
                    }
                    for c in s.control {
                        if c == .snapshot { continue }
                        controlOf[device, default: []].append(c)
                        if case .member(let m) = c, approvedUnder[m.device] == nil {
                            approvedUnder[m.device] = sealedUnder
                        }
                        let changed = membership.apply(c, author: device)
                        if changed, case .remove(let d, _, _) = c, d == device {
                            log("sync: device \(device) left the sync group")
                        }
                        if changed, case .remove(let d, _, _) = c,
                            applied[d]?.contains(where: {
                                !membership.accepts(d, sequence: $0, hash: fileHashes[d]?[$0])
                            }) == true
                        {
                            // Changes of the removed device merged here that its remover had not
                            // merged: they no longer count, here as on every other device.
                            rebuild = true
                        }
                        var sealed: [SyncKeyID: [UInt8]] = [:]
                        if case .rotate(let generation, _, let boxes) = c, let box = boxes[me] {
                            sealed[SyncKeyID(generation: generation, rotator: device)] = box
                        }
                        if case .share(let d, let boxes) = c, d == me { sealed = boxes }
                        if !sealed.isEmpty, let boxSecret = try vault.syncSecret("boxSecret") {
                            for (id, box) in sealed where keyring.keys[id] == nil {
                                if let key = SyncPairing.unseal(
                                    box[...], publicKey: SyncPairing.publicKey(of: boxSecret),
                                    secretKey: boxSecret), key.count == Sodium.keyLength
                                {
                                    keyring.keys[id] = key
                                }
                            }
                        }
                    }
                    for c in s.changes {
                        let was = merged.items[c.key]
                        merged.apply(c)
                        perDevice[device, default: SyncVault()].apply(c)
                        if merged.items[c.key] != was { touched.insert(c.key) }
                        // This device's own changes bound its clock without the drift limit.
                        if device == me {
                            clock!.observe(c.timestamp, physical: UInt64.max / 2)
                        } else {
                            clock!.observe(c.timestamp)
                        }
                        lastSeen[device] = max(lastSeen[device] ?? 0, c.timestamp.wall)
                    }
                }
            }
        }
        if membership != membershipBefore || Set(keyring.keys.keys) != keysBefore {
            try vault.storeSync(
                config: config, secrets: ["keyring": keyring.encoded()], membership: membership)
        }
        if rebuild {
            // Read everything again under the membership as it now stands.
            resetReadState()
            return try pass()
        }
        if snapshotRead {
            // A snapshot leaves the live items as they were; what it dropped goes from the merge.
            let before = merged
            merged = SyncVault()
            for v in perDevice.values { merged.join(v) }
            for (k, s) in before.items where merged.items[k] != s { touched.insert(k) }
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

        // Members another device approved since: every key held here, sealed to each (its
        // approver may not have had a key made here at the same time).
        let newcomers = membership.currentMembers.filter {
            membershipBefore.members[$0.device] == nil && $0.device != me
        }
        for m in newcomers {
            // Under the key its approval came under, which its grant gave it.
            guard let under = approvedUnder[m.device], keyring.keys[under] != nil else { continue }
            try writeControl(
                [.share(m.device, keyring.keys.mapValues { SyncPairing.seal($0, to: m.boxKey) })],
                config: config, folder: folder, under: under)
        }

        // 2. What changed here since the last pass, against the baseline.
        let (rows, changedRows, damaged) = try vault.syncLocalItems(
            reusing: wasValid ? localCache : [:])
        var local: [SyncItemKey: LocalSyncItem] = [:]
        for r in rows.values { local[r.key] = r.item }
        let hashKey = try vault.syncHashKey()
        reportDamaged(damaged)
        // A damaged row holds its item: the pass cannot read it, so it neither exports it (its
        // absence is no deletion) nor writes the group's copy over it (a put would meet its
        // primary key). Known by its primary key's hash; a row whose hash does not read could
        // be any item absent here, so while one is there no item absent here is touched.
        let damagedKeys = Set(damaged.compactMap(\.primaryKeyHash))
        let unplacedDamage = damaged.contains { $0.primaryKeyHash == nil }
        var held = Set<SyncItemKey>()
        var exported: [SyncChange] = []
        var localChanges: [SyncLocalChange] = []
        var newBaseline: [([UInt8], [UInt8]?)] = []
        // Every item after a failed pass or at start; else those changed since the last pass:
        // by the merge, or here (a row written, or gone).
        var keys: Set<SyncItemKey>
        if wasValid {
            keys = touched.union(writtenByLastPass).union(heldByLastPass)
            for id in changedRows { keys.insert(rows[id]!.key) }
            for (id, r) in localCache where rows[id]?.uuid != r.uuid { keys.insert(r.key) }
        } else {
            keys = Set(local.keys).union(merged.items.keys)
        }
        let hashes = Dictionary(
            uniqueKeysWithValues: keys.map { ($0, SyncBaseline.keyHash($0, hashKey)) })
        let baseline = try vault.syncBaseline(wasValid ? Array(hashes.values) : nil)
        var seenHashes = Set<[UInt8]>()
        for key in keys {
            let h = hashes[key]!
            seenHashes.insert(h)
            if !damaged.isEmpty {
                let isDamaged = damagedKeys.contains(Vault.syncPrimaryKeyHash(key, index: hashKey))
                if isDamaged || (unplacedDamage && local[key] == nil) {
                    held.insert(key)
                    // What the baseline said of it goes: once the damaged row is deleted here,
                    // the item is absent with no baseline, and the group's copy comes back
                    // (a deletion here would take it from every device).
                    if isDamaged, baseline[h] != nil { newBaseline.append((h, nil)) }
                    continue
                }
            }
            let mine = local[key]?.fields
            let before = baseline[h].map(SyncBaseline.parse)
            // A write made here knows what this keychain held: the merge as of the last pass
            // (its baseline), not what this pass has just read (docs/sync.md, conflicts).
            func write(_ fields: [SyncField: SyncValue?]) -> SyncChange {
                let t = clock!.tick()
                var context = baseline[h].map(SyncBaseline.parseSeen) ?? [:]
                context[t.device] = t
                return SyncChange(key: key, timestamp: t, kind: .write(fields), context: context)
            }
            switch (mine, before) {
            case (nil, _?):
                // Deleted here since the last pass.
                if merged.items[key]?.live != nil {
                    exported.append(SyncChange(key: key, timestamp: clock!.tick(), kind: .delete))
                }
            case (let m?, nil):
                // Added here (or present before this device joined).
                if merged.items[key]?.live != m {
                    var all: [SyncField: SyncValue?] = [:]
                    for f in SyncField.allCases { all[f] = .some(m[f]) }
                    exported.append(write(all))
                }
            case (let m?, let b?)
            where merged.items[key] == nil
                && b.values.contains(where: { membership.removed[$0.timestamp.device] == nil }):
                // Synced before, but no segment of the folder holds any of its history (the
                // folder was emptied or replaced, its segments lost): only a deletion deletes,
                // so the item is written again whole, not taken for deleted.
                var all: [SyncField: SyncValue?] = [:]
                for f in SyncField.allCases { all[f] = .some(m[f]) }
                exported.append(write(all))
            case (let m?, let b?):
                var changed: [SyncField: SyncValue?] = [:]
                let state = merged.items[key]
                for f in SyncField.allCases {
                    let was = b[f]
                    if SyncBaseline.fieldHash(f, m[f], hashKey) != was?.hash ?? nil {
                        // Changed here since the last pass.
                        changed[f] = .some(m[f])
                    } else if let was {
                        // Unchanged here, but the write it came from is in no segment any more
                        // (the folder lost it), and nothing later, a deletion included, covers
                        // it: this device's copy is written again.
                        // A write of a removed device is not: it may be one made after its cutoff.
                        let covered = [state?.fields[f]?.timestamp, state?.tombstone].compactMap {
                            $0
                        }.max()
                        if !(covered.map { was.timestamp <= $0 } ?? false),
                            membership.removed[was.timestamp.device] == nil
                        {
                            changed[f] = .some(m[f])
                        }
                    }
                }
                if !changed.isEmpty { exported.append(write(changed)) }
            case (nil, nil):
                break
            }
            if let last = exported.last, last.key == key { merged.apply(last) }
            // 3. The local keychain brought to the merged item.
            let target = merged.items[key]?.live
            if target != mine {
                if let target {
                    do {
                        _ = try Vault.syncItem(key, target)
                        localChanges.append(.put(key, target, replacing: local[key]?.id))
                    } catch {
                        // Not storable here (a peer's malformed fields): left as it is, unsynced.
                        if rejectionsLogged < Self.maximumLoggedRejections {
                            log("sync: an item of the group cannot be stored here: \(error)")
                        }
                        rejectionsLogged += 1
                        continue
                    }
                } else if let id = local[key]?.id {
                    localChanges.append(.delete(id))
                }
            }
            let after =
                target == nil ? nil : merged.items[key].map { SyncBaseline.encode($0, hashKey) }
            if after != baseline[h] { newBaseline.append((h, after)) }
        }
        // Entries of items neither here nor in the merge (a full pass sees every key).
        if !wasValid {
            for h in baseline.keys where !seenHashes.contains(h) { newBaseline.append((h, nil)) }
        }

        // 4. This device's changes into the folder first (durably), then the keychain and the
        // baseline in one transaction: a crash between the two exports them again, harmlessly.
        try export(exported, config: config, folder: folder)
        if !localChanges.isEmpty || !newBaseline.isEmpty {
            try vault.applySync(localChanges, baseline: newBaseline)
        }
        localCache = rows
        heldByLastPass = held
        writtenByLastPass = Set(
            localChanges.compactMap { c -> SyncItemKey? in
                switch c {
                case .put(let key, _, _): key
                case .delete(let id): rows[id]?.key
                }
            })
        cacheValid = true
        try writeAck(listing, config: config, folder: folder)
        // Only in a pass with nothing new, here or in the folder: a change never waits for it.
        if exported.isEmpty && touched.isEmpty && localChanges.isEmpty {
            try compactIfDue(config: config, folder: folder)
        }
    }

    /// Writes changes made here into this device's next segments (durably; a key rotation
    /// first when one is due), cut near `SyncSegment.targetPlaintextBytes`, and takes them into
    /// this device's own merge. The caller has applied them to `merged` already.
    func export(_ exported: [SyncChange], config: SyncConfig, folder: SyncFolder) throws {
        guard !exported.isEmpty else { return }
        let me = config.device
        if !currentKeyIsSafe() {
            // A device was removed (or left) since the current key was made, or a later key
            // was made without this device: a new one first, for the members as they are.
            let (rotate, newKey) = try makeRotation(membership, me: me)
            try writeControl([rotate], config: config, folder: folder, newKey: newKey)
            log("sync: rotated the group key to generation \(newKey.0.generation)")
        }
        var start = 0
        while start < exported.count {
            var end = start
            var bytes = 0
            while end < exported.count,
                end == start
                    || (bytes < SyncSegment.targetPlaintextBytes
                        && end - start < SyncSegment.maximumChanges)
            {
                bytes += SyncBaseline.estimatedSize(exported[end])
                end += 1
            }
            let part = Array(exported[start..<end])
            try writeSegment(SyncSegment(device: me, sequence: 0, changes: part), folder: folder)
            for c in part { perDevice[me, default: SyncVault()].apply(c) }
            start = end
        }
        lastSeen[me] = max(lastSeen[me] ?? 0, exported.map(\.timestamp.wall).max() ?? 0)
    }

    /// Keeps the damaged rows a pass met for `status`, and logs them when they differ from
    /// the last pass's (once, not at every pass).
    private func reportDamaged(_ damaged: [DamagedSyncRow]) {
        if damaged != damagedRows {
            if damaged.isEmpty {
                log("sync: no damaged item is held any more")
            } else {
                let named = damaged.prefix(4).map(\.item.description).joined(separator: "; ")
                log(
                    "sync: \(damaged.count) damaged item(s) of this keychain not synced, held as they are (the others sync): \(named)\(damaged.count > 4 ? " and \(damaged.count - 4) more" : ""); `vaultctl doctor` lists them, and deleting one here takes the group's copy back"
                )
            }
        }
        damagedRows = damaged
    }

    /// Reads `devices/`: this device's directory and the members' first, the others up to
    /// `maximumDevices`; the rest counted (`sync status`) and logged when their number
    /// changes, links in the place of device directories logged once each. Sets what the
    /// watcher watches.
    private func read(_ folder: SyncFolder, _ config: SyncConfig) throws -> [SyncDeviceID:
        SyncFolder.Entry]
    {
        let scan = try folder.scan(preferring: preferred(config))
        if scan.ignored != ignoredDevices {
            if scan.ignored > 0 {
                log(
                    "sync: the folder holds \(scan.ignored) device directories past the \(Self.maximumDevices) read; they are ignored (this device's and the members' are read first)"
                )
            }
            ignoredDevices = scan.ignored
        }
        for d in scan.links where !linksLogged.contains(d) {
            log(
                "sync: \(logField(folder.directory(d))) is a symbolic link, not a directory: not followed, its files are not read"
            )
            linksLogged.insert(d)
        }
        watchPaths =
            [folder.root, folder.devicesPath] + scan.devices.keys.sorted().map(folder.directory)
        return scan.devices
    }

    /// The devices whose directories are read before any other: this one and every device
    /// the membership names.
    private func preferred(_ config: SyncConfig) -> Set<SyncDeviceID> {
        Set(membership.members.keys).union(membership.removed.keys).union([config.device])
    }

    /// A segment that records its writer's own leaving holds nothing else (vaultd writes it
    /// so): it is read after the writer's cutoff, where only the leaving may be. Throws
    /// `SyncFormatError` for one that holds more.
    static func checkLeaving(_ s: SyncSegment) throws {
        let leaves = s.control.contains {
            if case .remove(let d, _, _) = $0 { d == s.device } else { false }
        }
        guard leaves else { return }
        guard s.changes.isEmpty, s.control.count == 1 else {
            throw SyncFormatError("a segment recording its device's leaving holds other records")
        }
    }

    private func reject(
        _ device: SyncDeviceID, _ seq: UInt64, _ version: SyncFolder.FileVersion, _ why: String
    ) {
        rejected[device, default: [:]][seq] = version
        if rejectionsLogged < Self.maximumLoggedRejections {
            log("sync: ignored segment \(SyncSegment.fileName(seq)) of device \(device): \(why)")
        } else if rejectionsLogged == Self.maximumLoggedRejections {
            log("sync: further ignored segments are counted in sync status, not logged")
        }
        rejectionsLogged += 1
    }

    /// The sequence up to which every segment of `d` from its latest snapshot on is merged here.
    private func contiguous(_ d: SyncDeviceID) -> UInt64 {
        guard let done = applied[d] else { return 0 }
        var n = max(floor[d] ?? 1, 1)
        guard done.contains(n) else { return 0 }
        while done.contains(n + 1) { n += 1 }
        return n
    }

    /// Takes in each member's acknowledgement file (signed by it; the largest value seen of
    /// each device kept, so an older file put back changes nothing).
    private func readAcks(_ listing: [SyncDeviceID: SyncFolder.Entry], _ folder: SyncFolder) {
        for d in listing.keys where membership.isMember(d) {
            guard
                let f = folder.readSmallFile(
                    device: d, name: SyncAck.name, limit: SyncAck.maximumBytes),
                let a = SyncAck.parse(f, device: d, verifyKey: membership.members[d]!.signKey)
            else { continue }
            for (x, n) in a { acks[d, default: [:]][x] = max(acks[d]?[x] ?? 0, n) }
        }
    }

    /// Writes this device's acknowledgement when it changed. A value never goes down (as
    /// readers keep the largest): what this device once merged of a device stays
    /// acknowledged when the folder later holds less of it, which is how a rollback is told
    /// (`SyncRollback`), by this device and by any that reads its ack anew.
    private func writeAck(
        _ listing: [SyncDeviceID: SyncFolder.Entry], config: SyncConfig, folder: SyncFolder
    ) throws {
        var mine: [SyncDeviceID: UInt64] = [:]
        for d in Set(listing.keys).union(applied.keys) where membership.members[d] != nil {
            let n = max(contiguous(d), acks[config.device]?[d] ?? 0)
            if n > 0 { mine[d] = n }
        }
        guard mine != ackWritten, let sign = try vault.syncSecret("signSecret") else { return }
        try folder.writeFile(
            SyncAck.file(mine, device: config.device, signingKey: sign), device: config.device,
            name: SyncAck.name)
        ackWritten = mine
        acks[config.device] = mine
    }

    /// Replaces this device's segments by one snapshot once it has `compactionThreshold` of
    /// them and every other member has acknowledged them all (so every record in them, a key
    /// rotation's included, has reached every member): the snapshot holds this device's
    /// member and removal records and `SyncCompaction.snapshot` of its changes, deletions
    /// every device has merged left out when nothing they cover is left in the folder. The
    /// merge is the same after it; the older segments are then deleted.
    private func compactIfDue(config: SyncConfig, folder: SyncFolder) throws {
        let me = config.device
        let mine = (applied[me] ?? []).filter { $0 >= (floor[me] ?? 0) }
        guard mine.count >= compactionThreshold, let last = mine.max() else { return }
        // Not before the segments since the last snapshot are as large as it: rewriting
        // everything then costs each change a constant share, however large the vault.
        // Only segments this device wrote and read back count (each within the segment bound,
        // so the sum cannot overflow); a file anyone put in its directory has any size.
        let sizes = ((try? folder.list(preferring: [me])[me]?.segments) ?? [:]).filter {
            mine.contains($0.key)
        }
        let snapshotBytes = floor[me].flatMap { sizes[$0] } ?? 0
        guard sizes.filter({ $0.key > (floor[me] ?? 0) }).values.reduce(0, +) >= snapshotBytes
        else { return }
        let others = membership.currentMembers.map(\.device).filter { $0 != me }
        guard others.allSatisfy({ (acks[$0]?[me] ?? 0) >= last }) else { return }
        // Deletions may go once every change of every device that could predate them is merged
        // here: each member's up to its own acknowledgement (which followed its reading them),
        // each removed device's up to its cutoff.
        let drop =
            others.allSatisfy { contiguous($0) >= (acks[$0]?[$0] ?? 0) }
            && membership.removed.allSatisfy { d, cutoff in
                applied[d] == nil || contiguous(d) >= cutoff
            }
        let own = perDevice[me] ?? SyncVault()
        let rest = perDevice.filter { $0.key != me }.map(\.value)
        let snapshot = SyncCompaction.snapshot(
            own: own, others: rest, dropTombstones: drop, now: HybridClock.now())
        let changes = snapshot.changes
        guard
            changes.reduce(0, { $0 + SyncBaseline.estimatedSize($1) }) < SyncSegment
                .maximumFileBytes / 2, changes.count < SyncSegment.maximumChanges / 2
        else { return }
        let control = (controlOf[me] ?? []).filter {
            switch $0 {
            case .member, .remove: true
            case .rotate, .share, .snapshot: false
            }
        }
        let seq = nextSequence
        try writeSegment(
            SyncSegment(device: me, sequence: 0, control: control + [.snapshot], changes: changes),
            folder: folder)
        for n in mine where n < seq { folder.removeFile(device: me, name: SyncSegment.fileName(n)) }
        floor[me] = seq
        applied[me] = [seq]
        perDevice[me] = snapshot
        controlOf[me] = control
        merged = SyncVault()
        for v in perDevice.values { merged.join(v) }
        log(
            "sync: compacted \(mine.count) segments into snapshot \(SyncSegment.fileName(seq)) (\(changes.count) records)"
        )
    }

    /// The group's keys and membership from a grant sealed to this joining device, when one
    /// is in the folder.
    private func acceptGrant(_ config: SyncConfig, _ folder: SyncFolder) throws -> (
        SyncKeyring, SyncMembership
    )? {
        guard let sk = try vault.syncSecret("boxSecret") else {
            throw VaultFailure(.internalError, "the sync join key is missing")
        }
        let pk = SyncPairing.publicKey(of: sk)
        let name = SyncFolder.grantName(config.device)
        // Looked for in every device directory by name: a grant's is its approver's, which
        // may be past the directories a listing reads.
        for device in try folder.devicesHolding(name) where device != config.device {
            if let f = folder.readSmallFile(
                device: device, name: name, limit: SyncPairing.maximumGrantBytes),
                let (ring, view) = SyncPairing.openGrant(f, publicKey: pk, secretKey: sk),
                !ring.keys.isEmpty,
                let sign = try vault.syncSecret("signSecret"), view.isMember(config.device),
                view.members[config.device]?.signKey == SyncSigning.publicKey(of: sign),
                view.members[config.device]?.boxKey == pk
            {
                return (ring, view)
            }
        }
        return nil
    }
}
