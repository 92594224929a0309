import Foundation
import VaultProtocol

// Writing rows: an item encrypted into its row; SecItemAdd, SecItemUpdate, SecItemDelete.

extension KeychainStore {
    /// The keys that encrypt an item of class `accessible`. Throws the class-key error
    /// (InteractionNotAllowed, AuthFailed, NotAvailableOnThisDevice).
    func writeKeys(accessible: Accessibility) throws -> WriteKeys {
        let (metadata, index) = try keys.metadataKeys()
        return WriteKeys(metadata: metadata, index: index, classKey: try keys.classKey(accessible))
    }

    /// Encrypts and writes an item (insert when `id` is nil, else replace that row).
    private func write(
        id: Int64?, itemClass: ItemClass, attributes a: ItemAttributes, secret: SecureBytes,
        generation: String?, keepsLookupAttributes: Bool = false, in db: Database
    ) throws {
        let values = try Self.encrypt(
            itemClass: itemClass, attributes: a, secret: secret,
            keys: try writeKeys(accessible: a.accessible ?? .whenUnlocked))
        try store(
            values, id: id, generation: generation, keepsLookupAttributes: keepsLookupAttributes,
            in: db)
    }

    /// Where `encrypt`'s values hold the primary key's hash, where the columns end, and
    /// which hold the bytes an item takes (attributes, wrapped key, secret: `app_usage`).
    static let primaryKeyHashValue = 5
    private static let columnValues = 11
    private static let sizedValues = 8..<11
    /// The columns a row's place in the indexes is made of: class, group, accessibility,
    /// sync and the three hashes.
    private static let keyValues = 1..<8

    /// The row values of an encrypted item: pure computation, no store access, so a durable
    /// add runs it before joining a group commit (outside the engine lock). Throws Param
    /// when the attributes are too large. `fixed` is for the known-answer tests only: it
    /// gives the uuid, the item key and the three nonces (in that order) instead of
    /// `randombytes_buf`.
    static func encrypt(
        itemClass: ItemClass, attributes a: ItemAttributes, secret: SecureBytes, keys k: WriteKeys,
        fixed: ((Int) -> [UInt8])? = nil
    ) throws -> [SQLValue] {
        let (metadata, index, classKey) = (k.metadata, k.index, k.classKey)
        let accessible = a.accessible ?? .whenUnlocked
        let group = a.accessGroup!
        let sync = a.synchronizable ?? false
        let uuid = fixed?(16) ?? Sodium.randomBytes(16)
        let ad = Self.associatedData(
            uuid: uuid, itemClass: itemClass, accessGroup: group, accessible: accessible,
            synchronizable: sync)
        let itemKey =
            fixed.map { SecureBytes(copying: $0(Sodium.keyLength)) }
            ?? SecureBytes.random(count: Sodium.keyLength)
        func seal<P: ContiguousBytes>(_ plaintext: P, key: SecureBytes) -> [UInt8] {
            guard let fixed else { return Sodium.seal(plaintext, key: key, associatedData: ad) }
            return Sodium.seal(
                plaintext, key: key, associatedData: ad, nonce: fixed(Sodium.nonceLength))
        }
        let attrPlain = a.json.serialized()
        guard attrPlain.count <= Self.maximumAttributesSize else {
            throw VaultFailure.param(
                "the attributes take \(attrPlain.count) bytes; the limit is \(Self.maximumAttributesSize)"
            )
        }
        let values: [SQLValue] = [
            .blob(uuid), .text(itemClass.rawValue), .text(group), .text(accessible.rawValue),
            .integer(sync ? 1 : 0),
            .blob(Self.primaryKeyHash(itemClass, a, index: index)),
            Self.lookupHash(itemClass, a, index: index),
            Self.fieldHash("account", a.account, index: index),
            .blob(seal(attrPlain, key: metadata)),
            .blob(seal(itemKey, key: classKey)),
            .blob(seal(secret, key: itemKey)),
            // Not a column: the lookup attributes' hashes, 16 bytes each, for `store`.
            a.lookupAttributes.map {
                .blob(Self.lookupAttributeHashes($0, index: index).flatMap { $0 })
            } ?? .null,
        ]
        return values
    }

    /// Inserts (`id` nil) or replaces a row of `encrypt`'s values. Throws DuplicateItem when
    /// another row has its primary key (class, group, sync and the class's key attributes:
    /// unique, as in SecItemAdd). `keepsLookupAttributes`: a replaced row's lookup attributes
    /// are those it had (their hashes stay listed as they are).
    func store(
        _ values: [SQLValue], id: Int64?, generation: String?, keepsLookupAttributes: Bool = false,
        in db: Database
    ) throws {
        // Through the primary key's own listing: those of the service (or server) and the
        // account may hold thousands of rows (one server's internet passwords of one account,
        // one per path), each read for every write.
        let primaryKeyHash = values[Self.primaryKeyHashValue]
        let others =
            bypassIndexForTesting
            ? []
            : itemIndex.candidates([(.primaryKey, primaryKeyHash.blob ?? [])]).filter { $0 != id }
        if !others.isEmpty,
            let r = try db.row(
                "SELECT id, uuid, item_class, access_group, accessible, synchronizable, wrapped_key, attributes, secret FROM items WHERE id IN (SELECT value FROM json_each(?)) AND primary_key_hash = ?",
                [.text(ItemIndex.jsonList(others)), primaryKeyHash])
        {
            // The item holding this primary key is damaged: said so, rather than
            // DuplicateItem for an item no lookup finds.
            switch Self.stored([r[0], r[1], r[2], r[3], r[4], r[5], r[7], r[6], r[8]]) {
            case .failure(let d):
                throw DamagedItem.error([d], DamagedItem.advice)
            case .success(let row):
                if Sodium.openBytes(
                    row.attributes, key: try keys.metadataKeys().metadata,
                    associatedData: row.associatedData) == nil
                {
                    throw DamagedItem.error(
                        [DamagedItem(row, .attributes)],
                        "It holds this item's primary key. " + DamagedItem.advice)
                }
            }
            // An add over another device's ThisDeviceOnly item (which no unlock here opens)
            // replaces it, as an iPhone restored from a backup lets its apps add such items
            // afresh; any other collision is SecItemAdd's DuplicateItem.
            guard id == nil, let old = r[0].int64, let uuid = r[1].blob,
                let cls = r[2].text.flatMap(ItemClass.init(rawValue:)), let group = r[3].text,
                let acc = r[4].text.flatMap(Accessibility.init(rawValue:)), let sync = r[5].int64,
                let wrapped = r[6].blob,
                isOtherDevice(
                    uuid: uuid, itemClass: cls, accessGroup: group, accessible: acc,
                    synchronizable: sync != 0, wrappedKey: wrapped)
            else {
                throw VaultFailure(
                    .duplicateItem,
                    "an item with the same primary key already exists in this access group")
            }
            try db.run("DELETE FROM items WHERE id = ?", [.integer(old)])
        }
        let columns = Array(values[..<Self.columnValues])
        let rowID: Int64
        do {
            if let id {
                rowID = id
                try Self.replace(id, with: columns, in: db)
                if keepsLookupAttributes { return }
                try db.run("DELETE FROM item_lookup_attributes WHERE item_id = ?", [.integer(id)])
            } else {
                try db.run(
                    """
                    INSERT INTO items (uuid, item_class, access_group, accessible, synchronizable, primary_key_hash,
                      lookup_hash, account_hash, attributes, wrapped_key, secret, generation)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """, columns + [generation.map { .text($0) } ?? .null])
                rowID = db.lastInsertRowID
            }
            if let hashes = values[Self.columnValues].blob {
                for start in stride(from: 0, to: hashes.count, by: 16) {
                    try db.run(
                        "INSERT OR IGNORE INTO item_lookup_attributes (hash, item_id) VALUES (?, ?)",
                        [.blob(Array(hashes[start..<start + 16])), .integer(rowID)])
                }
            }
        } catch let e as ConstraintViolation where e.isUniqueness {
            // `items_primary_key` (the only UNIQUE index of `items`) holds this primary key:
            // the lookup index missed the row holding it, which the check above relies on.
            // SecItemAdd's answer all the same, never a second item.
            logger.error(
                "keychain: the store's uniqueness of primary keys refused a row the lookup index did not know of (a fault in the index)"
            )
            throw VaultFailure(
                .duplicateItem,
                "an item with the same primary key already exists in this access group")
        } catch let e as ConstraintViolation {
            throw VaultFailure(
                .internalError, "the store refused the item's row (SQLite \(e.code))")
        }
    }

    /// Writes `columns` (`encrypt`'s) over row `id`. A row that keeps its key columns (an
    /// update of the secret, or of attributes no key is made of: the common one) gets only
    /// its uuid and sealed columns written, so none of `items`' indexes, nor the item
    /// index's triggers, is touched; the WHERE has SQLite compare the stored key columns, so
    /// a row that differs in any of them is written whole.
    private static func replace(_ id: Int64, with columns: [SQLValue], in db: Database) throws {
        let sealedOnly = try db.run(
            """
            UPDATE items SET uuid = ?, attributes = ?, wrapped_key = ?, secret = ?
            WHERE id = ? AND item_class = ? AND access_group = ? AND accessible = ? AND synchronizable = ?
              AND primary_key_hash = ? AND lookup_hash IS ? AND account_hash IS ?
            """,
            [columns[0]] + columns[sizedValues] + [.integer(id)] + columns[keyValues])
        if sealedOnly == 1 { return }
        try db.run(
            """
            UPDATE items SET uuid = ?, item_class = ?, access_group = ?, accessible = ?, synchronizable = ?,
              primary_key_hash = ?, lookup_hash = ?, account_hash = ?, attributes = ?,
              wrapped_key = ?, secret = ? WHERE id = ?
            """, columns + [.integer(id)])
    }

    // MARK: SecItem operations

    /// The attributes an Add stores in `accessGroup` (the one the policy granted: `Grant`),
    /// checked, normalized, dated. Throws SecretTooLarge, Param.
    static func addedAttributes(
        itemClass: ItemClass, attributes input: ItemAttributes, secretSize: Int, accessGroup: String
    ) throws -> ItemAttributes {
        try VaultFailure.checkSecretSize(secretSize)
        var a = input
        a.creationDate = nil
        a.modificationDate = nil
        a.accessGroup = accessGroup
        try validate(itemClass, a)
        normalize(itemClass, &a)
        let now = Date()
        a.creationDate = now
        a.modificationDate = now
        return a
    }

    /// Inserts an item `encrypt` prepared with `classKey`, the key of class `accessible`.
    /// Throws DuplicateItem, or the class-key error (InteractionNotAllowed, AuthFailed) when
    /// that key is no longer the class's: the vault was locked, or the class key replaced
    /// (a passphrase removed and set again), after the keys were fetched. Run it under the
    /// engine lock, so the keys cannot change until the transaction ends.
    func insert(
        _ values: [SQLValue], generation: String?, classKey: SecureBytes, accessible: Accessibility,
        in db: Database
    ) throws {
        guard try keys.classKey(accessible).constantTimeEquals(classKey) else {
            throw VaultFailure(
                .interactionNotAllowed,
                "the vault's keys changed while the item was being added; add it again")
        }
        // The bytes the row takes (what `app_usage` counts: attributes, wrapped key, secret).
        let bytes = values[Self.sizedValues].reduce(Int64(0)) { $0 + Int64($1.blob?.count ?? 0) }
        try quota.checkItems(generation: generation, adding: bytes, in: db)
        try store(values, id: nil, generation: generation, in: db)
    }

    /// A row's secret, for an Update. Throws ItemDamaged when it does not open, the
    /// class-key error.
    private func decryptSecret(_ r: Row) throws -> SecureBytes {
        guard let s = Self.openSecret(of: r.stored, classKey: try keys.classKey(r.accessible))
        else {
            throw DamagedItem.error([DamagedItem(r.stored, .secret)], DamagedItem.advice)
        }
        return s
    }

    /// SecItemUpdate: sets `changes` on every match and, when `secret` is given, replaces its
    /// secret. Throws ItemNotFound, DuplicateItem (a change would collide), Param, or the
    /// class-key error when any match is unavailable. The groups of `q` and `changes` were
    /// granted by the policy (`Vault.authorize`).
    func update(
        _ q: ItemQuery, changes: ItemAttributes, secret: SecureBytes?, groups: [String]?,
        in db: Database, reporting: ([ItemChange]) -> Void = { _ in }
    ) throws -> Int {
        // As SecItemUpdate: an update that changes nothing is errSecParam (the dates are
        // read-only: `apply` leaves them, so they change nothing).
        var settable = changes
        settable.creationDate = nil
        settable.modificationDate = nil
        if secret == nil && settable == ItemAttributes() {
            throw VaultFailure.param(
                "nothing to update: give attributes to change, a new secret, or both")
        }
        if let secret { try VaultFailure.checkSecretSize(secret.count) }
        let (rows, otherDevice, error, damaged) = try matchingRows(q, groups: groups, in: db)
        if let e = otherDevice.first { throw Self.otherDeviceError(e.accessible) }
        if let error { throw error }
        // All matches change or none: a damaged item that matches for certain (the query
        // names only what its clear columns tell) cannot be changed, so nothing is; one that
        // may match (the query names more) is left alone, unless nothing else matches.
        if !damaged.isEmpty && (rows.isEmpty || Self.namesOnlyClearAttributes(q.attributes)) {
            throw DamagedItem.error(damaged, "Nothing was changed. " + DamagedItem.advice)
        }
        if rows.isEmpty { throw VaultFailure(.itemNotFound, "no item matches the query") }
        let now = Date()
        // A change that grows items counts against the apps that added them (QuotaExceeded
        // rolls the whole update back).
        let before = try StorageQuota.itemBytes(ofAppsWriting: rows.map { $0.id }, in: db)
        for r in rows {
            var a = r.attributes
            a.apply(changes)
            try Self.validate(r.itemClass, a)
            Self.normalize(r.itemClass, &a)
            a.modificationDate = now
            let s = try secret ?? decryptSecret(r)
            try write(
                id: r.id, itemClass: r.itemClass, attributes: a, secret: s, generation: nil,
                keepsLookupAttributes: a.lookupAttributes == r.attributes.lookupAttributes, in: db)
            reporting(ItemChange.update(r.itemClass, before: r.attributes, after: a, row: r.id))
        }
        try quota.checkGrowth(
            before: before,
            after: try StorageQuota.itemBytes(ofAppsWriting: rows.map { $0.id }, in: db), in: db)
        return rows.count
    }

    /// SecItemDelete: deletes every match. Throws ItemNotFound, or the class-key error when a
    /// match is unavailable (the vault is locked; nothing is deleted then). Items made on
    /// another device (NotAvailableOnThisDevice) are deleted: no unlock here will open them.
    /// Damaged items (`DamagedItem`) are deleted when the query names only what their clear
    /// columns tell (service or server, account, access group, accessibility,
    /// synchronizable: they match for certain); a query naming more leaves them, and throws
    /// ItemDamaged when nothing else matches.
    func delete(
        _ q: ItemQuery, groups: [String]?, in db: Database,
        reporting: ([ItemChange]) -> Void = { _ in }
    ) throws -> Int {
        let (available, otherDevice, error, damaged) = try matchingRows(q, groups: groups, in: db)
        if let error { throw error }
        let ids = (available + otherDevice).map(\.id)
        let damagedIDs = Self.namesOnlyClearAttributes(q.attributes) ? damaged.map(\.id) : []
        if ids.isEmpty && damagedIDs.isEmpty {
            if !damaged.isEmpty {
                throw DamagedItem.error(
                    damaged,
                    "Nothing was deleted: a Delete removes a damaged item when it names only its service or server, account, access group, accessibility or synchronizable"
                )
            }
            throw VaultFailure(.itemNotFound, "no item matches the query")
        }
        for id in ids + damagedIDs { try db.run("DELETE FROM items WHERE id = ?", [.integer(id)]) }
        reporting(
            (available + otherDevice).map {
                ItemChange(.deleted, $0.itemClass, $0.attributes, row: $0.id)
            }
                + (damagedIDs.isEmpty ? [] : damaged.map(ItemChange.init(deleted:))))
        if !damagedIDs.isEmpty {
            logger.warning(
                "keychain: deleted \(damagedIDs.count) damaged item(s): \(damaged.prefix(4).map(\.description).joined(separator: "; "))"
            )
        }
        return ids.count + damagedIDs.count
    }

    /// Deletes every item of one accessibility class (used when the passphrase is removed).
    func deleteAll(accessible: Accessibility, in db: Database) throws -> Int {
        try db.run("DELETE FROM items WHERE accessible = ?", [.text(accessible.rawValue)])
    }
}
