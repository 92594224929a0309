import Foundation
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
    private let lock = NSLock()

    /// The devices directory's subdirectories read at most (a folder with more is refused).
    public static let maximumDevices = 256
    /// Entries of one device's directory listed at most.
    public static let maximumEntriesPerDevice = 200_000
    /// Rejected segments logged by name per run; later ones are only counted (`sync status`).
    public static let maximumLoggedRejections = 20

    // The merged state and what was read, under `lock`. Rebuilt from the folder at start.
    private var merged = SyncVault()
    private var clock: HybridClock?
    /// Segments merged, per device.
    private var applied: [SyncDeviceID: Set<UInt64>] = [:]
    /// Segments refused, with the size they had (a file that changes size is tried again).
    private var rejected: [SyncDeviceID: [UInt64: Int]] = [:]
    private var rejectionsLogged = 0
    /// The latest wall-clock time (ms) of a change read from each device.
    private var lastSeen: [SyncDeviceID: UInt64] = [:]
    /// The config the state above was read under (a new one starts it over).
    private var loadedFor: SyncConfig?
    private var nextSequence: UInt64 = 1
    /// Why the last pass did not finish (nil: it did).
    private var lastProblem: String?
    private var lastPass: Date?
    /// The local rows the last pass read, by row id; valid only after a pass that finished
    /// (every item then matched the merged vault, or could not be stored): the next pass
    /// looks only at the items changed here or in the merge since.
    private var localCache: [Int64: LocalSyncRow] = [:]
    private var cacheValid = false
    /// Keys whose local rows the last pass wrote, after it read the rows: the next pass looks
    /// at them (a row written and then deleted before any pass read it is in no cache).
    private var writtenByLastPass = Set<SyncItemKey>()

    /// Set once by `start`; read by `wake` from any thread, under `watcherLock`.
    private var watcher: SyncWatcher?
    private let watcherLock = NSLock()

    public init(vault: Vault) {
        self.vault = vault
    }

    // MARK: the owner's operations

    /// Makes a new sync group in `folder` (an existing directory): its group key, this
    /// device's ID and directory. Throws Param (not a directory, already a sync group's
    /// folder, this device already syncing), the lock errors (before the first unlock).
    public func initialize(folder: String, caller: Caller) throws -> JSONObject {
        try vault.authorizeSync(.syncInit, caller: caller)
        return try lock.withLock {
            guard try vault.syncConfig() == nil else { throw VaultError.param("this device already syncs; run sync leave first") }
            let folder = try Self.checkedFolder(folder)
            if let names = try? FileManager.default.contentsOfDirectory(atPath: folder + "/devices"), names.contains(where: { SyncDeviceID(hex: $0) != nil }) {
                throw VaultError.param("\(folder) already holds a sync group: run sync join on this device, and sync approve on one already in it")
            }
            let device = SyncDeviceID.random()
            let groupKey = SecureBytes.random(count: Sodium.keyLength)
            try SyncFolder(root: folder).makeDeviceDirectory(device)
            let config = SyncConfig(folder: folder, device: device, state: .member)
            try vault.storeSync(config: config, secrets: ["groupKey": groupKey])
            log("sync: made a sync group in \(logField(folder)) as device \(device)")
            wake()
            return ["deviceID": .string(device.description), "fingerprint": .string(SyncPairing.groupFingerprint(groupKey))]
        }
    }

    /// Asks to join the group syncing through `folder`: a key pair whose public half goes into
    /// the folder, and the pairing code to give `sync approve` on a device of the group.
    public func join(folder: String, caller: Caller) throws -> JSONObject {
        try vault.authorizeSync(.syncJoin, caller: caller)
        return try lock.withLock {
            guard try vault.syncConfig() == nil else { throw VaultError.param("this device already syncs; run sync leave first") }
            let folder = try Self.checkedFolder(folder)
            let device = SyncDeviceID.random()
            let (pk, sk) = SyncPairing.keyPair()
            let f = SyncFolder(root: folder)
            try f.makeDeviceDirectory(device)
            try f.writeFile(SyncPairing.joinFile(publicKey: pk), device: device, name: SyncFolder.joinName)
            try vault.storeSync(config: SyncConfig(folder: folder, device: device, state: .joining), secrets: ["joinSecret": sk])
            log("sync: asked to join the sync group in \(logField(folder)) as device \(device)")
            wake()
            return ["deviceID": .string(device.description), "code": .string(Self.code(device: device, publicKey: pk))]
        }
    }

    /// A pairing code: the device ID and 16 bytes of its public key's hash, 64 hex digits in
    /// groups of 8 (so a public key put in the folder by anyone else is not approved).
    static func code(device: SyncDeviceID, publicKey: [UInt8]) -> String {
        let hex = Array(SyncHex.encode(device.bytes + SyncPairing.fingerprint(ofPublicKey: publicKey)))
        return stride(from: 0, to: hex.count, by: 8).map { String(hex[$0..<min($0 + 8, hex.count)]) }.joined(separator: "-")
    }

    /// Seals the group key to the device whose pairing code `code` is (its join file in the
    /// folder must hold the public key the code names). Throws Param (a malformed code, no such
    /// request in the folder, a key that does not match), NotInitialized (not a member).
    public func approve(code: String, caller: Caller) throws -> JSONObject {
        try vault.authorizeSync(.syncApprove, caller: caller)
        return try lock.withLock {
            guard let config = try vault.syncConfig(), config.state == .member, let groupKey = try vault.syncSecret("groupKey") else {
                throw VaultError(.notInitialized, "this device is not in a sync group: sync init or sync join first")
            }
            let digits = code.filter { $0 != "-" && $0 != " " }
            guard digits.utf8.count == 64, let raw = SyncHex.decode(digits), let device = SyncDeviceID(bytes: Array(raw.prefix(16))) else {
                throw VaultError.param("a pairing code is 64 hex digits, as sync join printed it")
            }
            let f = SyncFolder(root: config.folder)
            guard let file = f.readSmallFile(device: device, name: SyncFolder.joinName, limit: 64), let pk = SyncPairing.publicKey(ofJoinFile: file) else {
                throw VaultError.param("no join request of device \(device) in the folder yet (has the folder finished syncing?)")
            }
            guard SyncPairing.fingerprint(ofPublicKey: pk) == Array(raw.suffix(16)) else {
                throw VaultError.param("the join request in the folder does not match the code: do not approve it (someone else may have written it)")
            }
            // Approved before (the same code given again): the grant is in place already.
            if f.readSmallFile(device: config.device, name: SyncFolder.grantName(device), limit: 256) == nil {
                try f.writeFile(SyncPairing.grantFile(groupKey: groupKey, to: pk), device: config.device, name: SyncFolder.grantName(device))
                log("sync: approved device \(device)")
            }
            return ["deviceID": .string(device.description)]
        }
    }

    /// The sync state: the folder, this device, its group's fingerprint, and every device in
    /// the folder with its segments, those read, those pending, and when it last wrote.
    public func status(caller: Caller) throws -> JSONObject {
        try vault.authorizeSync(.syncStatus, caller: caller)
        return try lock.withLock {
            guard let config = try vault.syncConfig() else { return ["state": "off", "devices": .array([JSON]())] }
            var fingerprint: JSON = .null
            if config.state == .member, let k = try? vault.syncSecret("groupKey") { fingerprint = .string(SyncPairing.groupFingerprint(k)) }
            let listing: [SyncDeviceID: SyncFolder.Entry] = (try? SyncFolder(root: config.folder).list()) ?? [:]
            let devices: [JSON] = listing.keys.sorted().map { d in
                let segments = listing[d]?.segments ?? [:]
                let read = applied[d] ?? []
                let refused = rejected[d]?.count ?? 0
                return [
                    "deviceID": .string(d.description), "thisDevice": .bool(d == config.device), "segments": JSON(segments.count),
                    "pending": JSON(segments.filter { !read.contains($0.key) }.count), "rejected": JSON(refused),
                    "lastSeen": lastSeen[d].map { .string(PlistDate.format(Date(timeIntervalSince1970: Double($0) / 1000))) } ?? .null,
                ]
            }
            return [
                "state": .string(config.state.rawValue), "folder": .string(config.folder), "deviceID": .string(config.device.description),
                "fingerprint": fingerprint, "devices": .array(devices), "items": JSON(merged.liveItems.count),
                "problem": lastProblem.map { .string($0) } ?? .null,
                "lastPass": lastPass.map { .string(PlistDate.format($0)) } ?? .null,
            ]
        }
    }

    /// Stops syncing on this device: forgets the group key, the settings and the baseline.
    /// The items stay in this keychain; this device's segments stay in the folder (the other
    /// devices keep what they merged). Throws NotInitialized when it did not sync.
    public func leave(caller: Caller) throws {
        try vault.authorizeSync(.syncLeave, caller: caller)
        try lock.withLock {
            guard let config = try vault.syncConfig() else { throw VaultError(.notInitialized, "this device does not sync") }
            try vault.storeSync(config: nil)
            // A request to join that was never approved goes too (its key pair is forgotten).
            SyncFolder(root: config.folder).removeFile(device: config.device, name: SyncFolder.joinName)
            resetState()
            log("sync: device \(config.device) left the sync group in \(logField(config.folder))")
        }
    }

    static func checkedFolder(_ path: String) throws -> String {
        guard path.hasPrefix("/") else { throw VaultError.param("the sync folder must be an absolute path") }
        var st = stat()
        guard stat(path, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else { throw VaultError.param("\(path) is not a directory") }
        return URL(fileURLWithPath: path).standardizedFileURL.path
    }

    private func resetState() {
        merged = SyncVault()
        clock = nil
        applied = [:]
        rejected = [:]
        lastSeen = [:]
        loadedFor = nil
        nextSequence = 1
        lastProblem = nil
        localCache = [:]
        cacheValid = false
        writtenByLastPass = []
    }

    // MARK: running

    /// Starts the watcher thread: a pass now, then one whenever the folder or the keychain
    /// changes, or the vault is unlocked (and every 60 s, for changes inotify cannot report).
    public func start() {
        _ = vault.addObserver { [weak self] event in
            switch event {
            case .keychainChanged, .lockState: self?.wake()
            default: break
            }
        }
        let w = SyncWatcher { [weak self] in self?.folderToWatch() }
        watcherLock.withLock { watcher = w }
        w.run { [weak self] in self?.runPass() }
    }

    /// Asks for a pass soon (from any thread; never waits for one).
    func wake() { watcherLock.withLock { watcher }?.wake() }

    private func folderToWatch() -> String? {
        (try? vault.syncConfig())?.map { $0.folder + "/devices" } ?? nil
    }

    /// One pass; failures are logged once each (until a pass succeeds) and left for the next.
    func runPass() {
        lock.withLock {
            do {
                try pass()
                if lastProblem != nil { log("sync: passes succeed again") }
                lastProblem = nil
                lastPass = Date()
            } catch let e as VaultError where e.code == .interactionNotAllowed || e.code == .notInitialized {
                // Locked, or not initialised yet: the unlock wakes the next pass.
                lastProblem = "waiting for the vault to be unlocked"
            } catch {
                let text = "\(error)"
                if text != lastProblem { log("sync: the pass failed (tried again on the next change): \(text)") }
                lastProblem = text
            }
        }
    }

    /// Runs a pass now, in the caller's thread, throwing what it fails with (tests).
    public func passNow() throws {
        try lock.withLock { try pass() }
    }

    /// A pass, under `lock`.
    private func pass() throws {
        guard var config = try vault.syncConfig() else { return }
        if config != loadedFor {
            resetState()
            loadedFor = config
        }
        let folder = SyncFolder(root: config.folder)
        if config.state == .joining {
            guard let key = try acceptGrant(config, folder) else { return }
            config.state = .member
            try vault.storeSync(config: config, secrets: ["groupKey": key, "joinSecret": nil])
            folder.removeFile(device: config.device, name: SyncFolder.joinName)
            loadedFor = config
            log("sync: joined the sync group (fingerprint \(SyncPairing.groupFingerprint(key)))")
        }
        guard let groupKey = try vault.syncSecret("groupKey") else { throw VaultError(.internalError, "the sync group key is missing") }
        let me = config.device
        if clock == nil { clock = HybridClock(device: me) }
        try folder.makeDeviceDirectory(me)

        // A pass that throws leaves the cache invalid: the next one looks at every item.
        let wasValid = cacheValid
        cacheValid = false
        // The keys the merge changed in this pass.
        var touched = Set<SyncItemKey>()

        // 1. Every new segment of every device.
        let listing = try folder.list()
        for (device, entry) in listing.sorted(by: { $0.key < $1.key }) {
            for (seq, size) in entry.segments.sorted(by: { $0.key < $1.key }) {
                if applied[device]?.contains(seq) == true || rejected[device]?[seq] == size { continue }
                do {
                    let bytes = try folder.readSegment(device: device, sequence: seq)
                    let s = try SyncSegment.open(bytes, key: groupKey, device: device, sequence: seq)
                    for c in s.changes {
                        merged.apply(c)
                        touched.insert(c.key)
                        // This device's own changes bound its clock without the drift limit.
                        if device == me { clock!.observe(c.timestamp, physical: UInt64.max / 2) } else { clock!.observe(c.timestamp) }
                        lastSeen[device] = max(lastSeen[device] ?? 0, c.timestamp.wall)
                    }
                    applied[device, default: []].insert(seq)
                    rejected[device]?[seq] = nil
                } catch {
                    rejected[device, default: [:]][seq] = size
                    if rejectionsLogged < Self.maximumLoggedRejections {
                        log("sync: ignored segment \(SyncSegment.fileName(seq)) of device \(device): \(error)")
                    } else if rejectionsLogged == Self.maximumLoggedRejections {
                        log("sync: further ignored segments are counted in sync status, not logged")
                    }
                    rejectionsLogged += 1
                }
            }
        }
        nextSequence = max(nextSequence, try vault.syncStoredSequence(), (listing[me]?.segments.keys.max() ?? 0) + 1)

        // 2. What changed here since the last pass, against the baseline.
        let (rows, changedRows) = try vault.syncLocalItems(reusing: wasValid ? localCache : [:])
        var local: [SyncItemKey: LocalSyncItem] = [:]
        for r in rows.values { local[r.key] = r.item }
        let hashKey = try vault.syncHashKey()
        var exported: [SyncChange] = []
        var localChanges: [SyncLocalChange] = []
        var newBaseline: [([UInt8], [UInt8]?)] = []
        // Every item after a failed pass or at start; else those changed since the last pass:
        // by the merge, or here (a row written, or gone).
        var keys: Set<SyncItemKey>
        if wasValid {
            keys = touched.union(writtenByLastPass)
            for id in changedRows { keys.insert(rows[id]!.key) }
            for (id, r) in localCache where rows[id]?.uuid != r.uuid { keys.insert(r.key) }
        } else {
            keys = Set(local.keys).union(merged.items.keys)
        }
        let hashes = Dictionary(uniqueKeysWithValues: keys.map { ($0, SyncBaseline.keyHash($0, hashKey)) })
        let baseline = try vault.syncBaseline(wasValid ? Array(hashes.values) : nil)
        var seenHashes = Set<[UInt8]>()
        for key in keys {
            let h = hashes[key]!
            seenHashes.insert(h)
            let mine = local[key]?.fields
            let before = baseline[h].map(SyncBaseline.parse)
            switch (mine, before) {
            case (nil, _?):
                // Deleted here since the last pass.
                if merged.items[key]?.live != nil { exported.append(SyncChange(key: key, timestamp: clock!.tick(), kind: .delete)) }
            case (let m?, nil):
                // Added here (or present before this device joined).
                if merged.items[key]?.live != m {
                    var all: [SyncField: SyncValue?] = [:]
                    for f in SyncField.allCases { all[f] = .some(m[f]) }
                    exported.append(SyncChange(key: key, timestamp: clock!.tick(), kind: .write(all)))
                }
            case (let m?, _?) where merged.items[key] == nil:
                // Synced before, but no segment of the folder holds any of its history (the
                // folder was emptied or replaced, its segments lost): only a deletion deletes,
                // so the item is written again whole, not taken for deleted.
                var all: [SyncField: SyncValue?] = [:]
                for f in SyncField.allCases { all[f] = .some(m[f]) }
                exported.append(SyncChange(key: key, timestamp: clock!.tick(), kind: .write(all)))
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
                        let covered = [state?.fields[f]?.timestamp, state?.tombstone].compactMap { $0 }.max()
                        if !(covered.map { was.timestamp <= $0 } ?? false) { changed[f] = .some(m[f]) }
                    }
                }
                if !changed.isEmpty { exported.append(SyncChange(key: key, timestamp: clock!.tick(), kind: .write(changed))) }
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
                        if rejectionsLogged < Self.maximumLoggedRejections { log("sync: an item of the group cannot be stored here: \(error)") }
                        rejectionsLogged += 1
                        continue
                    }
                } else if let id = local[key]?.id {
                    localChanges.append(.delete(id))
                }
            }
            let after = target == nil ? nil : merged.items[key].map { SyncBaseline.encode($0, hashKey) }
            if after != baseline[h] { newBaseline.append((h, after)) }
        }
        // Entries of items neither here nor in the merge (a full pass sees every key).
        if !wasValid { for h in baseline.keys where !seenHashes.contains(h) { newBaseline.append((h, nil)) } }

        // 4. This device's changes into the folder first (durably), then the keychain and the
        // baseline in one transaction: a crash between the two exports them again, harmlessly.
        if !exported.isEmpty {
            var start = 0
            while start < exported.count {
                var end = start
                var bytes = 0
                while end < exported.count, end == start || (bytes < SyncSegment.targetPlaintextBytes && end - start < SyncSegment.maximumChanges) {
                    bytes += SyncBaseline.estimatedSize(exported[end])
                    end += 1
                }
                let seq = nextSequence
                let segment = SyncSegment(device: me, sequence: seq, changes: Array(exported[start..<end]))
                try folder.writeFile(segment.sealed(key: groupKey), device: me, name: SyncSegment.fileName(seq))
                applied[me, default: []].insert(seq)
                nextSequence = seq + 1
                try vault.storeSyncSequence(nextSequence)
                start = end
            }
            lastSeen[me] = max(lastSeen[me] ?? 0, exported.map(\.timestamp.wall).max() ?? 0)
        }
        if !localChanges.isEmpty || !newBaseline.isEmpty { try vault.applySync(localChanges, baseline: newBaseline) }
        localCache = rows
        writtenByLastPass = Set(localChanges.compactMap { c -> SyncItemKey? in
            switch c {
            case .put(let key, _, _): key
            case .delete(let id): rows[id]?.key
            }
        })
        cacheValid = true
    }

    /// The group key from a grant sealed to this joining device, when one is in the folder.
    private func acceptGrant(_ config: SyncConfig, _ folder: SyncFolder) throws -> SecureBytes? {
        guard let sk = try vault.syncSecret("joinSecret") else { throw VaultError(.internalError, "the sync join key is missing") }
        let pk = SyncPairing.publicKey(of: sk)
        let name = SyncFolder.grantName(config.device)
        for device in try folder.list().keys where device != config.device {
            if let f = folder.readSmallFile(device: device, name: name, limit: 256), let key = SyncPairing.openGrant(f, publicKey: pk, secretKey: sk) {
                return key
            }
        }
        return nil
    }
}

/// The baseline's encoding: for each field of a live item, its tag, the timestamp of the write
/// that won it and a 16-byte BLAKE2b of its value keyed with the index key, so the store holds
/// nothing of the item in clear.
enum SyncBaseline {
    static func keyHash(_ key: SyncItemKey, _ hashKey: SecureBytes) -> [UInt8] {
        Sodium.keyedHash(Array("sync key\0".utf8) + key.canonicalBytes, key: hashKey)
    }

    static func fieldHash(_ f: SyncField, _ v: SyncValue?, _ hashKey: SecureBytes) -> [UInt8]? {
        guard let v else { return nil }
        var message: [UInt8] = []
        // Reserved whole: growing would leave unwiped copies of a secret behind.
        message.reserveCapacity(1 + v.withBytes { $0.count })
        message.append(f.rawValue)
        v.withBytes { message += $0 }
        defer { message.wipe() }
        return Sodium.keyedHash(message, key: hashKey, length: 16)
    }

    /// One field as the baseline holds it: the timestamp of the write that won it, and its
    /// value's hash (nil: the write removed the attribute).
    struct Field: Equatable {
        var timestamp: SyncTimestamp
        var hash: [UInt8]?
    }

    /// Bytes per field: tag, wall, counter, device, hash (16 zero bytes for no value).
    static let entryBytes = 1 + 8 + 4 + 16 + 16

    /// The baseline of a live merged item: each field written since its latest deletion.
    static func encode(_ state: SyncItemState, _ hashKey: SecureBytes) -> [UInt8] {
        var out: [UInt8] = []
        for f in state.fields.keys.sorted() {
            let s = state.fields[f]!
            if let t = state.tombstone, !(t < s.timestamp) { continue }
            out.append(f.rawValue)
            SyncWire.appendU64(s.timestamp.wall, to: &out)
            SyncWire.appendU32(s.timestamp.counter, to: &out)
            out += s.timestamp.device.bytes
            out += fieldHash(f, s.value, hashKey) ?? [UInt8](repeating: 0, count: 16)
        }
        return out
    }

    static func parse(_ b: [UInt8]) -> [SyncField: Field] {
        var out: [SyncField: Field] = [:]
        b.withUnsafeBytes { raw in
            var i = 0
            while i + entryBytes <= raw.count {
                var r = SyncWire.Reader(bytes: UnsafeRawBufferPointer(rebasing: raw[i..<(i + entryBytes)]))
                if let tag = try? r.u8(), let f = SyncField(rawValue: tag), let wall = try? r.u64(), let counter = try? r.u32(),
                    let device = SyncDeviceID(bytes: Array(raw[(i + 13)..<(i + 29)]))
                {
                    let hash = Array(raw[(i + 29)..<(i + entryBytes)])
                    out[f] = Field(timestamp: SyncTimestamp(wall: wall, counter: counter, device: device), hash: hash.allSatisfy { $0 == 0 } ? nil : hash)
                }
                i += entryBytes
            }
        }
        return out
    }

    /// How many bytes a change's record takes at most (to cut segments near their target
    /// size, and to reserve a record's buffer whole).
    static func estimatedSize(_ c: SyncChange) -> Int {
        var n = 32 + c.key.accessGroup.utf8.count + c.key.primaryKey.reduce(0) { $0 + $1.utf8.count + 4 }
        // Per field: tag, presence, length, value.
        if case .write(let f) = c.kind {
            for v in f.values { n += 6 + (v?.withBytes { $0.count } ?? 0) }
        }
        return n
    }
}
