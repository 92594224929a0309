import Foundation
import VaultProtocol

/// A device's sync settings, in `vault_meta` ('sync.config'): the folder, this device's ID in
/// the group, and whether it is a member (holds the group key) or waits to be approved.
struct SyncConfig: Equatable {
    enum State: String { case member, joining }
    var folder: String
    var device: SyncDeviceID
    var state: State

    var json: JSON {
        [
            "folder": .string(folder), "device": .string(device.description),
            "state": .string(state.rawValue),
        ]
    }

    init(folder: String, device: SyncDeviceID, state: State) {
        self.folder = folder
        self.device = device
        self.state = state
    }

    init?(_ j: JSON) {
        guard let f = j["folder"]?.stringValue,
            let d = j["device"]?.stringValue.flatMap(SyncDeviceID.init(hex:)),
            let s = j["state"]?.stringValue.flatMap(State.init(rawValue:))
        else { return nil }
        self.init(folder: f, device: d, state: s)
    }
}

/// A synchronizable item as this device's keychain holds it.
struct LocalSyncItem {
    var id: Int64
    var fields: [SyncField: SyncValue]
}

/// A synchronizable row of this keychain as a pass last read it: its uuid (new with every
/// write), its sync key and its fields.
struct LocalSyncRow {
    var uuid: [UInt8]
    var key: SyncItemKey
    var item: LocalSyncItem
}

/// A synchronizable row of this keychain that does not read (`DamagedItem`), with the keyed
/// hash of its primary key (`primary_key_hash`) when that column reads: the item a pass
/// holds as it is, neither exported nor overwritten (docs/sync.md, "Damaged items").
struct DamagedSyncRow: Equatable {
    var item: DamagedItem
    var primaryKeyHash: [UInt8]?
}

/// One change to this device's keychain that the merge asks for.
enum SyncLocalChange {
    /// Replace (or add) the item `key` with these fields; `replacing`: the row it replaces.
    case put(SyncItemKey, [SyncField: SyncValue], replacing: Int64?)
    case delete(Int64)
}

extension Vault {
    /// What binds the sealed sync keys in `vault_meta` to their purpose.
    private static func syncKeyAD(_ name: String) -> [UInt8] {
        Array("vaultd sync \(name) v1".utf8)
    }

    /// The sync settings, nil when this device syncs nothing.
    func syncConfig() throws -> SyncConfig? {
        try exclusive { x in
            guard
                let raw = try x.db.row("SELECT value FROM vault_meta WHERE key = 'sync.config'")?[0]
                    .blob
            else { return nil }
            return SyncConfig(
                try VaultFailure.rethrowing(as: .internalError) { try JSON.parse(raw) })
        }
    }

    /// The group's membership as this device knows it ('sync.members'; public keys and IDs,
    /// nothing secret), nil when absent.
    func syncMembership() throws -> SyncMembership? {
        try exclusive { x in
            guard
                let raw = try x.db.row("SELECT value FROM vault_meta WHERE key = 'sync.members'")?[
                    0
                ].blob
            else { return nil }
            return SyncMembership(
                try VaultFailure.rethrowing(as: .internalError) { try JSON.parse(raw) })
        }
    }

    /// A key stored sealed under the metadata key (available from the first unlock):
    /// 'sync.keyring' (the group keys), 'sync.boxSecret' (this device's crypto_box secret
    /// key), 'sync.signSecret' (its crypto_sign secret key). nil when absent. Throws InteractionNotAllowed
    /// before the first unlock, InternalError when it does not open.
    func syncSecret(_ name: String) throws -> SecureBytes? {
        let (metadata, _) = try withKeys { try keychain.metadataKeys() }
        guard
            let box = try exclusive({ x in
                try x.db.row(
                    "SELECT value FROM vault_meta WHERE key = ?", [.text("sync.\(name)")])?[0].blob
            })
        else { return nil }
        guard let key = Sodium.open(box, key: metadata, associatedData: Self.syncKeyAD(name)) else {
            throw VaultFailure(
                .internalError,
                "the stored sync \(name) failed authentication (the vault file was altered or damaged)"
            )
        }
        return key
    }

    /// Stores the settings, the given sealed keys (nil: removed) and the membership in one transaction;
    /// `config` nil removes everything sync keeps in the store (settings, keys, baseline).
    func storeSync(
        config: SyncConfig?, secrets: [String: SecureBytes?] = [:],
        membership: SyncMembership? = nil
    ) throws {
        let (metadata, _) = try withKeys { try keychain.metadataKeys() }
        try write { db in
            guard let config else {
                try db.run("DELETE FROM vault_meta WHERE key LIKE 'sync.%'")
                try db.run("DELETE FROM sync_baseline")
                return
            }
            try db.run(
                "INSERT OR REPLACE INTO vault_meta (key, value) VALUES ('sync.config', ?)",
                [.blob(config.json.serialized())])
            if let membership {
                try db.run(
                    "INSERT OR REPLACE INTO vault_meta (key, value) VALUES ('sync.members', ?)",
                    [.blob(membership.json.serialized())])
            }
            for (name, key) in secrets {
                if let key {
                    let box = Sodium.seal(key, key: metadata, associatedData: Self.syncKeyAD(name))
                    try db.run(
                        "INSERT OR REPLACE INTO vault_meta (key, value) VALUES (?, ?)",
                        [.text("sync.\(name)"), .blob(box)])
                } else {
                    try db.run("DELETE FROM vault_meta WHERE key = ?", [.text("sync.\(name)")])
                }
            }
        }
    }

    /// The next sequence number this device writes ('sync.sequence'; 1 when none was stored).
    func syncStoredSequence() throws -> UInt64 {
        try exclusive { x in
            guard
                let raw = try x.db.row("SELECT value FROM vault_meta WHERE key = 'sync.sequence'")?[
                    0
                ].blob
            else { return 1 }
            // A number out of the sequences' range (a store written otherwise than by vaultd)
            // counts as none: the pass goes by the segments it reads of this device instead.
            let n =
                try VaultFailure.rethrowing(as: .internalError) { try JSON.parse(raw) }.uint64Value
                ?? 1
            return (1...SyncSegment.maximumSequence).contains(n) ? n : 1
        }
    }

    /// The index key, with which sync hashes item keys and fields for its baseline.
    func syncHashKey() throws -> SecureBytes { try withKeys { try keychain.metadataKeys() }.index }

    /// The baseline: each synchronized item's fields as they stood after the last pass (the
    /// winning write's timestamp, the value's hash), by the hash of its key (`SyncBaseline`).
    /// `keys`: only those entries (nil: all).
    func syncBaseline(_ keys: [[UInt8]]? = nil) throws -> [[UInt8]: [UInt8]] {
        try read { db in
            var out: [[UInt8]: [UInt8]] = [:]
            let rows: [Row]
            if let keys {
                if keys.isEmpty { return [:] }
                // The hashes as a JSON array of hex strings, matched against hex(key_hash).
                let list = JSON.array(keys.map { .string(SyncHex.encode($0).uppercased()) })
                    .serialized()
                rows = try db.rows(
                    "SELECT key_hash, fields FROM sync_baseline WHERE hex(key_hash) IN (SELECT value FROM json_each(?))",
                    [.text(String(decoding: list, as: UTF8.self))])
            } else {
                rows = try db.rows("SELECT key_hash, fields FROM sync_baseline")
            }
            for r in rows {
                if let k = r[0].blob, let f = r[1].blob { out[k] = f }
            }
            return out
        }
    }

    /// Every synchronizable item of this keychain, decrypted, by its row id, and the rows that
    /// are new or changed since `cache` (every write gives a row a new uuid: a row whose uuid is
    /// the cached one is taken from the cache, not read or decrypted again), and the rows that
    /// do not read (`DamagedSyncRow`: a column malformed, the attributes or the secret failing
    /// authentication), which are in neither and are read again by every pass. Throws
    /// InteractionNotAllowed while a class key it needs is locked (the pass waits for the unlock).
    func syncLocalItems(reusing cache: [Int64: LocalSyncRow]) throws -> (
        rows: [Int64: LocalSyncRow], changed: Set<Int64>, damaged: [DamagedSyncRow]
    ) {
        let (metadata, _) = try withKeys { try keychain.metadataKeys() }
        var out: [Int64: LocalSyncRow] = [:]
        var damaged: [DamagedSyncRow] = []
        let stored: [(KeychainStore.Candidates.Stored, [UInt8]?)] = try read { db in
            var changed: [Int64] = []
            for r in try db.rows("SELECT id, uuid FROM items WHERE synchronizable = 1") {
                guard let id = r[0].int64, let uuid = r[1].blob else {
                    damaged.append(
                        DamagedSyncRow(
                            item: DamagedItem(
                                id: r[0].int64 ?? -1, uuid: r[1].blob, itemClass: nil,
                                accessGroup: nil, part: .row), primaryKeyHash: nil))
                    continue
                }
                if let c = cache[id], c.uuid == uuid { out[id] = c } else { changed.append(id) }
            }
            if changed.isEmpty { return [] }
            return try db.rows(
                """
                SELECT id, uuid, item_class, access_group, accessible, synchronizable, attributes, wrapped_key, secret, primary_key_hash FROM items
                WHERE synchronizable = 1 AND id IN (SELECT value FROM json_each(?))
                """, [.text(ItemIndex.jsonList(changed))]
            ).compactMap { r in
                switch KeychainStore.stored(Array(r[0..<9])) {
                case .success(let row): return (row, r[9].blob)
                case .failure(let d):
                    damaged.append(DamagedSyncRow(item: d, primaryKeyHash: r[9].blob))
                    return nil
                }
            }
        }
        var classKeys: [Accessibility: SecureBytes] = [:]
        var changed = Set<Int64>()
        for (r, primaryKeyHash) in stored {
            // Synchronizable items are never ThisDeviceOnly (`KeychainStore.validate`).
            guard !r.accessible.isThisDeviceOnly else { continue }
            if classKeys[r.accessible] == nil {
                classKeys[r.accessible] = try withKeys { try keys.classKey(r.accessible) }
            }
            let ad = r.associatedData
            guard let plain = Sodium.openBytes(r.attributes, key: metadata, associatedData: ad),
                var a = try? ItemAttributes(jsonObject: plain)
            else {
                damaged.append(
                    DamagedSyncRow(
                        item: DamagedItem(r, .attributes), primaryKeyHash: primaryKeyHash))
                continue
            }
            guard
                let itemKey = Sodium.open(
                    r.wrappedKey, key: classKeys[r.accessible]!, associatedData: ad),
                let secret = Sodium.open(r.secret, key: itemKey, associatedData: ad)
            else {
                damaged.append(
                    DamagedSyncRow(item: DamagedItem(r, .secret), primaryKeyHash: primaryKeyHash))
                continue
            }
            a.accessGroup = r.accessGroup
            a.accessible = r.accessible
            a.synchronizable = true
            let key = SyncItemKey(itemClass: r.itemClass, attributes: a)
            out[r.id] = LocalSyncRow(
                uuid: r.uuid, key: key,
                item: LocalSyncItem(id: r.id, fields: Self.syncFields(of: a, secret: secret)))
            changed.insert(r.id)
        }
        return (out, changed, damaged.sorted { $0.item.id < $1.item.id })
    }

    /// The keyed hash of `key`'s primary key, as `items.primary_key_hash` holds it (`index`:
    /// the index key, `syncHashKey`): how a pass tells which item a damaged row is.
    static func syncPrimaryKeyHash(_ key: SyncItemKey, index: SecureBytes) -> [UInt8] {
        KeychainStore.primaryKeyHash(key.itemClass, key.attributes, index: index)
    }

    /// An item's fields, as the merge sees them.
    static func syncFields(of a: ItemAttributes, secret: SecureBytes) -> [SyncField: SyncValue] {
        var f: [SyncField: SyncValue] = [.secret: .secret(secret)]
        if let v = a.label { f[.label] = .bytes(Array(v.utf8)) }
        if let v = a.comment { f[.comment] = .bytes(Array(v.utf8)) }
        if let v = a.description { f[.description] = .bytes(Array(v.utf8)) }
        if let v = a.generic { f[.generic] = .bytes(Array(v)) }
        if let v = a.accessible { f[.accessible] = .bytes(Array(v.rawValue.utf8)) }
        if let v = a.creationDate { f[.creationDate] = .bytes(Array(PlistDate.format(v).utf8)) }
        if let v = a.modificationDate {
            f[.modificationDate] = .bytes(Array(PlistDate.format(v).utf8))
        }
        return f
    }

    /// The attributes and secret of a merged item; throws `SyncFormatError` for fields this
    /// keychain would not store (text that is not UTF-8, an unknown or ThisDeviceOnly
    /// accessibility, a date that is not ISO 8601, no secret).
    static func syncItem(_ key: SyncItemKey, _ fields: [SyncField: SyncValue]) throws -> (
        ItemAttributes, SecureBytes
    ) {
        var a = key.attributes
        func text(_ f: SyncField) throws -> String? {
            guard let v = fields[f] else { return nil }
            guard case .bytes(let b) = v, let s = String(validating: b, as: UTF8.self) else {
                throw SyncFormatError("field \(f) is not text")
            }
            return s
        }
        a.label = try text(.label)
        a.comment = try text(.comment)
        a.description = try text(.description)
        if case .bytes(let b)? = fields[.generic] { a.generic = Data(b) }
        let accessible = try text(.accessible).map { s -> Accessibility in
            guard let acc = Accessibility(rawValue: s), !acc.isThisDeviceOnly else {
                throw SyncFormatError("an accessibility that cannot sync")
            }
            return acc
        }
        a.accessible = accessible ?? .whenUnlocked
        for (f, path) in [
            (SyncField.creationDate, \ItemAttributes.creationDate),
            (.modificationDate, \.modificationDate),
        ] {
            if let s = try text(f) {
                guard let d = PlistDate.parse(s) else {
                    throw SyncFormatError("a date that is not ISO 8601")
                }
                a[keyPath: path] = d
            }
        }
        guard case .secret(let secret)? = fields[.secret] else {
            throw SyncFormatError("an item without a secret")
        }
        guard secret.count <= SecretLimit.maximumBytes else {
            throw SyncFormatError("a secret over the limit")
        }
        // What `KeychainStore.encrypt` would refuse, refused here: a pass must not fail on it.
        guard a.json.serialized().count <= KeychainStore.maximumAttributesSize else {
            throw SyncFormatError("attributes over the limit")
        }
        return (a, secret)
    }

    /// Makes the local changes and sets the baseline entries (nil: removed) in one durable
    /// transaction. Items that sync writes belong to no app's install generation: they count
    /// against no app's quota and outlive an app's reinstall, as synced items do.
    func applySync(_ changes: [SyncLocalChange], baseline: [([UInt8], [UInt8]?)]) throws {
        // Encrypted before the transaction, as an Add is (`addItem`).
        var prepared:
            [(
                values: [SQLValue], classKey: SecureBytes, accessible: Accessibility,
                replacing: Int64?
            )] = []
        var deletes: [Int64] = []
        for c in changes {
            switch c {
            case .delete(let id):
                deletes.append(id)
            case .put(let key, let fields, let replacing):
                let (a, secret) = try Self.syncItem(key, fields)
                let accessible = a.accessible ?? .whenUnlocked
                let k = try withKeys { try keychain.writeKeys(accessible: accessible) }
                prepared.append(
                    (
                        try KeychainStore.encrypt(
                            itemClass: key.itemClass, attributes: a, secret: secret, keys: k),
                        k.classKey, accessible, replacing
                    ))
            }
        }
        try write { [prepared] db in
            for id in deletes { try db.run("DELETE FROM items WHERE id = ?", [.integer(id)]) }
            for p in prepared {
                if let id = p.replacing {
                    try db.run("DELETE FROM items WHERE id = ?", [.integer(id)])
                }
                try self.keychain.insert(
                    p.values, generation: nil, classKey: p.classKey, accessible: p.accessible,
                    in: db)
            }
            for (k, f) in baseline {
                if let f {
                    try db.run(
                        "INSERT OR REPLACE INTO sync_baseline (key_hash, fields) VALUES (?, ?)",
                        [.blob(k), .blob(f)])
                } else {
                    try db.run("DELETE FROM sync_baseline WHERE key_hash = ?", [.blob(k)])
                }
            }
        }
    }

    /// Records the next sequence this device will write, once a segment is in the folder.
    func storeSyncSequence(_ next: UInt64) throws {
        _ = try write { db in
            try db.run(
                "INSERT OR REPLACE INTO vault_meta (key, value) VALUES ('sync.sequence', ?)",
                [.blob(JSON(next).serialized())])
        }
    }

    /// The policy's decision on a sync operation (owner only), for a session of this vault.
    func authorizeSync(_ operation: Operation, session: VaultSession) throws {
        precondition(session.vault === self, "a session of another vault")
        _ = try authorize(operation, for: session.caller)
    }
}
