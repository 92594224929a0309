import Foundation
import VaultProtocol

// MARK: restoring a backup

extension KeychainStore {
    /// What a restore did with one item.
    enum RestoreOutcome { case added, replaced, kept }

    /// Writes one item of a backup with its dates and generation as they were. Added when no
    /// item has its primary key; when one has it and `merge` is set, replaced when the
    /// backup's modification date is later than the stored one's, else kept (SecItemAdd's
    /// DuplicateItem without `merge`). `unavailable`: the item was sealed by another
    /// device's key, so it is stored with an item key that opens nowhere and reads
    /// NotAvailableOnThisDevice here (its class must be foreign: `KeyHierarchy.noteForeignDevice`),
    /// as the item of a data directory moved from that device would. Throws Param for
    /// attributes an Add refuses, the class-key error (InteractionNotAllowed).
    func restore(
        _ itemClass: ItemClass, attributes input: ItemAttributes, secret: SecureBytes,
        generation: String?, merge: Bool, unavailable: Bool,
        in db: Database
    ) throws -> RestoreOutcome {
        var a = input
        try Self.validate(itemClass, a)
        Self.normalize(itemClass, &a)
        let keys = try writeKeys(accessible: a.accessible ?? .whenUnlocked)
        var values = try Self.encrypt(
            itemClass: itemClass, attributes: a, secret: secret, keys: keys)
        let wrappedKeyValue = Self.primaryKeyHashValue + 4
        if unavailable {
            values[wrappedKeyValue] = .blob(
                Sodium.randomBytes(values[wrappedKeyValue].blob?.count ?? 72))
        }
        let primaryKeyHash = values[Self.primaryKeyHashValue]
        let ids = itemIndex.candidates([(.primaryKey, primaryKeyHash.blob ?? [])])
        if !ids.isEmpty,
            let r = try db.row(
                "SELECT id, uuid, item_class, access_group, accessible, synchronizable, attributes FROM items WHERE id IN (SELECT value FROM json_each(?)) AND primary_key_hash = ?",
                [.text(ItemIndex.jsonList(ids)), primaryKeyHash])
        {
            guard merge else {
                throw VaultFailure(
                    .duplicateItem, "the backup holds two items with the same primary key")
            }
            // The stored item's modification date; one that does not decrypt counts as oldest.
            var stored: Date?
            if let id = r[0].int64, let uuid = r[1].blob,
                let cls = r[2].text.flatMap(ItemClass.init(rawValue:)), let group = r[3].text,
                let acc = r[4].text.flatMap(Accessibility.init(rawValue:)), let sync = r[5].int64,
                let box = r[6].blob,
                let plain = Sodium.openBytes(
                    box, key: keys.metadata,
                    associatedData: Self.associatedData(
                        uuid: uuid, itemClass: cls, accessGroup: group, accessible: acc,
                        synchronizable: sync != 0))
            {
                stored = (try? ItemAttributes(jsonObject: plain))?.modificationDate
                guard let theirs = a.modificationDate, stored.map({ theirs > $0 }) ?? true else {
                    return .kept
                }
                try db.run("DELETE FROM items WHERE id = ?", [.integer(id)])
            } else if let id = r[0].int64 {
                try db.run("DELETE FROM items WHERE id = ?", [.integer(id)])
            }
            try store(values, id: nil, generation: generation, in: db)
            return .replaced
        }
        try store(values, id: nil, generation: generation, in: db)
        return .added
    }
}
