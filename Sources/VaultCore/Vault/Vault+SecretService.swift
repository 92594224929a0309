import Foundation
import Synchronization
import VaultProtocol

/// What the Secret Service front-end needs beyond the SecItem operations: its collections
/// are access groups, and its items are generic passwords of one service
/// (`secretServiceService`) with lookup attributes. Every operation is authorized here, as
/// every other engine operation is; the front-end decides nothing.
extension Vault {
    /// The `service` of every item made through the Secret Service (its `account` is the
    /// item's own ID, its lookup attributes what the client gave).
    public static let secretServiceService = "org.freedesktop.secrets"

    /// The access groups `caller` sees as collections (`Policy.visibleAccessGroups`): the
    /// owner its default group and every group holding items; an app its own groups.
    func accessGroups(caller: Caller) throws -> [String] {
        _ = try authorize(.listAccessGroups, for: caller)
        let stored: [String] =
            caller.isOwner
            ? try read { db in try db.rows(Self.storedAccessGroupsSQL).compactMap { $0[0].text } }
            : []
        return Policy.visibleAccessGroups(stored: stored, to: caller)
    }

    /// The distinct access groups of `items`, in byte order (as `SELECT DISTINCT access_group
    /// … ORDER BY access_group`): one seek of the `items_group` index per group, each to the
    /// first entry after the last group found (a loose index scan), where DISTINCT reads every
    /// entry of the index. The Secret Service asks at every item created or deleted (a
    /// connection's `Collections`): at 100,000 items that was about 5 ms a time.
    static let storedAccessGroupsSQL = """
        WITH RECURSIVE g(name) AS (
          SELECT min(access_group) FROM items
          UNION ALL
          SELECT (SELECT min(access_group) FROM items WHERE access_group > g.name) FROM g
          WHERE g.name IS NOT NULL
        )
        SELECT name FROM g WHERE name IS NOT NULL
        """

    /// A collection used as such (CreateCollection, its label, its lock state): the group it
    /// is, once the policy grants it (an app only one of its own groups: MissingEntitlement).
    /// Nothing is stored: a group exists while it holds items, and an app's groups always.
    func accessGroup(_ group: String, caller: Caller) throws -> String {
        guard !group.isEmpty else { throw VaultFailure.param("the access group must not be empty") }
        return try authorize(.useAccessGroup(accessGroup: group), for: caller).accessGroup!
    }

    /// The most bytes of a collection's label (`setCollectionLabel`).
    public static let maximumCollectionLabelBytes = 4096

    /// A collection's label (Secret Service `Collection.Label`): the display name set for
    /// access group `group` (`setCollectionLabel`), else the group's own name. Authorized as
    /// the collection's use (an app only one of its own groups: MissingEntitlement).
    ///
    /// The stored label is sealed under the metadata key, which is in memory only from the
    /// first unlock: before it (a vault locked since vaultd started) the label reads as the
    /// group's name, as a group without one does, and the Secret Service sends the real one
    /// at the unlock. A label that does not open (the file altered or damaged) reads as the
    /// group's name too, and is logged; setting one replaces it.
    func collectionLabel(_ group: String, caller: Caller) throws -> String {
        let g = try accessGroup(group, caller: caller)
        guard
            let box = try read({ db in
                try db.row(
                    "SELECT label FROM collection_labels WHERE access_group = ?", [.text(g)])?[0]
                    .blob
            })
        else {
            return g
        }
        guard let metadata = withKeys({ try? keychain.metadataKeys().metadata }) else { return g }
        guard let label = Self.openCollectionLabel(box, accessGroup: g, metadata: metadata) else {
            logger.warning(
                "secret service: the label of collection \(g) failed authentication (the vault file was altered or damaged); it reads as the group's name until one is set"
            )
            return g
        }
        return label
    }

    /// Sets the display name of access group `group`'s collection; the group's own name
    /// removes it. The group keeps its name (items and apps name it so). Returns whether the
    /// label changed. Throws Param for an empty label or one over
    /// `maximumCollectionLabelBytes`; MissingEntitlement for a group not the caller's;
    /// InteractionNotAllowed before the first unlock (the label is sealed under the metadata
    /// key, `collectionLabel`).
    @discardableResult
    func setCollectionLabel(_ group: String, to label: String, caller: Caller) throws -> Bool {
        let g = try accessGroup(group, caller: caller)
        guard !label.isEmpty else {
            throw VaultFailure.param("a collection's label must not be empty")
        }
        guard label.utf8.count <= Self.maximumCollectionLabelBytes else {
            throw VaultFailure.param(
                "a collection's label takes at most \(Self.maximumCollectionLabelBytes) bytes")
        }
        let metadata = try withKeys { try keychain.metadataKeys().metadata }
        return try write { db in
            try self.admitInWrite(caller, in: db)
            // The label now: the group's name without a row; nil when the row does not open
            // (damaged), which any label then replaces.
            let before: String?
            if let box = try db.row(
                "SELECT label FROM collection_labels WHERE access_group = ?", [.text(g)])?[0].blob
            {
                before = Self.openCollectionLabel(box, accessGroup: g, metadata: metadata)
            } else {
                before = g
            }
            if let before, before.sameBytes(label) { return false }
            if label.sameBytes(g) {
                _ = try db.run("DELETE FROM collection_labels WHERE access_group = ?", [.text(g)])
            } else {
                _ = try db.run(
                    "INSERT INTO collection_labels (access_group, label) VALUES (?, ?) ON CONFLICT (access_group) DO UPDATE SET label = excluded.label",
                    [
                        .text(g),
                        .blob(Self.sealCollectionLabel(label, accessGroup: g, metadata: metadata)),
                    ])
            }
            return true
        }
    }

    /// Associated data of a collection's sealed label: "vaultd collection label v1", a NUL,
    /// then the access group's UTF-8. A label box opens only in its own group's row, and no
    /// item's box (whose associated data starts "vaultd item v1") opens as a label.
    static func collectionLabelAssociatedData(_ accessGroup: String) -> [UInt8] {
        Array("vaultd collection label v1".utf8) + [0] + Array(accessGroup.utf8)
    }

    /// `label`'s UTF-8 sealed under the metadata key (XChaCha20-Poly1305, nonce ‖ ciphertext
    /// ‖ tag), bound to `accessGroup`. `nonce`: tests only (known answers); a random one
    /// otherwise.
    static func sealCollectionLabel(
        _ label: String, accessGroup: String, metadata: SecureBytes, nonce: [UInt8]? = nil
    ) -> [UInt8] {
        let ad = collectionLabelAssociatedData(accessGroup)
        guard let nonce else {
            return Sodium.seal(Array(label.utf8), key: metadata, associatedData: ad)
        }
        return Sodium.seal(Array(label.utf8), key: metadata, associatedData: ad, nonce: nonce)
    }

    /// The label `box` holds (`sealCollectionLabel`), nil when it does not open in
    /// `accessGroup`'s row or is not UTF-8.
    static func openCollectionLabel(_ box: [UInt8], accessGroup: String, metadata: SecureBytes)
        -> String?
    {
        guard
            let plain = Sodium.openBytes(
                box, key: metadata, associatedData: collectionLabelAssociatedData(accessGroup))
        else { return nil }
        return String(validating: plain, as: UTF8.self)
    }

    /// Forgets the display name of `group`'s collection (Collection.Delete: a collection made
    /// again starts with its group's name). Authorized as deleting the group's items.
    func removeCollectionLabel(_ group: String, caller: Caller) throws {
        _ = try authorize(.deleteItems(accessGroup: group), for: caller)
        _ = try write { db in
            try self.admitInWrite(caller, in: db)
            return try db.run(
                "DELETE FROM collection_labels WHERE access_group = ?", [.text(group)])
        }
    }

    /// Unlock: whether the vault's keychain is open now (an unlocked vault, or one without a
    /// passphrase). It unlocks nothing: only the owner's unlock (a passphrase) does.
    func requestUnlock(caller: Caller) throws -> Bool {
        _ = try authorize(.requestUnlock, for: caller)
        return isKeychainOpen
    }

    /// Whether items of the default accessibility (`whenUnlocked`) can be read now.
    public var isKeychainOpen: Bool { withKeys { (try? keys.classKey(.whenUnlocked)) != nil } }

    /// RegisterPrompter (and its undoing): only the owner's program may be the agent vaultd
    /// asks for the passphrase, which it then unlocks with through `unlock(passphrase:caller:)`.
    func registerPrompter(caller: Caller) throws {
        _ = try authorize(.registerPrompter, for: caller)
    }

    /// SetAlias: only the owner may point an alias (`default`, `login`) at a collection.
    func setAlias(caller: Caller) throws {
        _ = try authorize(.setAlias, for: caller)
    }

    /// The Secret Service items of `group` (generic passwords of `secretServiceService`).
    static func secretServiceQuery(_ group: String) -> ItemQuery {
        ItemQuery(
            itemClass: .genericPassword,
            attributes: ItemAttributes(service: secretServiceService, accessGroup: group),
            matchAll: true)
    }

    /// The damaged Secret Service item of `group` whose row is `id` (`DamagedItem`), nil when
    /// there is none (deleted, or readable again). Its Secret Service ID (its account) is in
    /// its attributes, which do not read: the front-end names it by its row id, and this
    /// finds it among the damaged items a read of the group meets. Throws as `copyMatching`.
    func damagedSecretServiceItem(_ id: Int64, accessGroup group: String, caller: Caller)
        throws -> DamagedItem?
    {
        try copyMatchingReportingDamage(
            Self.secretServiceQuery(group), returnData: false, includingLocked: true, caller: caller
        ).damaged.first { $0.id == id }
    }

    /// Item.Delete of a damaged Secret Service item named by its row id (`damagedSecretServiceItem`):
    /// deletes that row, and only while it is still that damaged item (the same uuid), as a
    /// SecItemDelete naming a damaged item's service and account would. Returns what was
    /// deleted; throws ItemNotFound when it is not (or no longer) such an item, the policy's
    /// refusal for a group the caller may not delete from.
    func deleteDamagedSecretServiceItem(
        _ id: Int64, accessGroup group: String, caller: Caller
    ) throws -> DamagedItem {
        _ = try authorize(.deleteItems(accessGroup: group), for: caller)
        guard let d = try damagedSecretServiceItem(id, accessGroup: group, caller: caller) else {
            throw VaultFailure(.itemNotFound, "no damaged item \(id) in this collection")
        }
        let n = try write { db in
            try self.admitInWrite(caller, in: db)
            // A row whose uuid column does not read is named by its id alone.
            if d.uuid.isEmpty {
                return try db.run("DELETE FROM items WHERE id = ?", [.integer(d.id)])
            }
            return try db.run(
                "DELETE FROM items WHERE id = ? AND lower(hex(uuid)) = ?",
                [.integer(d.id), .text(d.uuid)])
        }
        guard n == 1 else {
            throw VaultFailure(.itemNotFound, "no damaged item \(id) in this collection")
        }
        logger.warning("keychain: deleted 1 damaged item(s): \(d.description)")
        emit(.keychainChanged)
        emit(.itemsChanged([ItemChange(deleted: d)]))
        return d
    }
}

/// The Secret Service's `session` collection: items that live in vaultd's memory only (their
/// secrets in sodium memory) and are gone when it stops, as gnome-keyring's. Each belongs to
/// the access group of the caller that made it (its default group), so an app sees only its
/// own, and the owner every one; it is usable while the keychain is open. At most
/// `maximumItems` items and `maximumBytes` bytes of secrets and attributes in all.
final class SessionItems: Sendable {
    static let maximumItems = 4096
    static let maximumBytes = 16 << 20

    struct Item {
        var accessGroup: String
        var label: String
        var attributes: ExactDictionary<String>
        var secret: SecureBytes
        /// The secret's content type, as its client gave it (nil: none given).
        var contentType: String?
        var created: Date
        var modified: Date
        /// The program that created it (issue 40 §2); nil: vaultd's own action.
        var creator: ProgramIdentity?

        var bytes: Int {
            secret.count + label.utf8.count + (contentType?.utf8.count ?? 0)
                + attributes.reduce(0) { $0 + $1.key.utf8.count + $1.value.utf8.count }
        }
    }

    /// The items by ID.
    let items = Mutex<[String: Item]>([:])

    /// The bytes `items` hold.
    static func bytes(_ items: [String: Item]) -> Int { items.values.reduce(0) { $0 + $1.bytes } }
}

extension Vault {
    /// The collection name (and path element) of the in-memory collection.
    public static let sessionCollection = "session"

    /// The session collection's items the caller sees (`Caller.mayAccess`) having every pair
    /// of `attributes` (exactly), and item `id` when given; as found items of access group
    /// `sessionCollection`, with their secrets when `secrets`. Locked (no secret) while the
    /// keychain is not open.
    func sessionItems(
        matching attributes: ExactDictionary<String>, id: String? = nil, secrets: Bool,
        interaction: AccessInteraction = .wait, caller: Caller
    ) throws -> [FoundItem] {
        _ = try authorize(.copyItems(accessGroup: nil), for: caller)
        let open = isKeychainOpen
        var creators: [String: ProgramIdentity] = [:]
        // Read from a copy of the items taken under the lock (a secret is replaced, never
        // changed in place, so the copy's stay as they were).
        let found: [FoundItem] = sessionItems.items.withLock { $0 }
            .filter { key, item in
                (id.map(key.sameBytes) ?? true) && caller.mayAccess(group: item.accessGroup)
                    && attributes.allSatisfy {
                        item.attributes[$0.key]?.sameBytes($0.value) == true
                    }
            }
            .sorted { $0.key < $1.key }
            .map { key, item in
                creators[key] = item.creator
                var a = ItemAttributes(
                    service: Vault.secretServiceService, account: key, label: item.label,
                    accessGroup: Vault.sessionCollection)
                a.lookupAttributes = item.attributes
                a.contentType = item.contentType
                a.creationDate = item.created
                a.modificationDate = item.modified
                return FoundItem(
                    itemClass: .genericPassword, attributes: a,
                    data: open && secrets ? item.secret.copy() : nil,
                    isLocked: !open)
            }
        // Their secrets, as the store's are released (`release`; an Always allow is kept in
        // memory, as the items are).
        if secrets, caller.isOwner, let program = caller.program,
            found.contains(where: { $0.data != nil })
        {
            let mode = try read { try secretAccessMode(in: $0) }
            let key = program.matchKey
            try release(
                found.filter { $0.data != nil }.map {
                    let id = $0.attributes.account ?? ""
                    let uuid = Array("session\u{0}\(id)".utf8)
                    return Subject(
                        uuid: uuid, attributes: $0.attributes, creator: creators[id],
                        granted: accessGate.isGrantedInMemory(key, uuid))
                }, mode: mode, to: caller, program: program, persistent: false,
                interaction: interaction)
        }
        return found
    }

    /// CreateItem in the session collection: a new item of the caller's default group, or,
    /// with `replace`, the new secret and label on one of its items with exactly these
    /// attributes. Returns its ID. Throws InteractionNotAllowed while the keychain is not open,
    /// SecretTooLarge, QuotaExceeded past the collection's bounds.
    func addSessionItem(
        label: String, attributes: ExactDictionary<String>, secret: SecureBytes,
        contentType: String? = nil, replace: Bool, caller: Caller
    ) throws -> String {
        let group = try authorize(.addItem(accessGroup: nil), for: caller).accessGroup!
        try VaultFailure.checkSecretSize(secret.count)
        guard isKeychainOpen else {
            throw VaultFailure(
                .interactionNotAllowed, "the vault is locked: unlock it (vaultctl unlock)")
        }
        return try sessionItems.items.withLock { items in
            let now = Date()
            if replace,
                let (id, _) = items.first(where: {
                    $0.value.accessGroup.sameBytes(group) && $0.value.attributes == attributes
                })
            {
                items[id]!.secret = secret
                items[id]!.contentType = contentType
                items[id]!.label = label
                items[id]!.modified = now
                return id
            }
            let item = SessionItems.Item(
                accessGroup: group, label: label, attributes: attributes, secret: secret,
                contentType: contentType, created: now, modified: now, creator: caller.program)
            guard items.count < SessionItems.maximumItems,
                SessionItems.bytes(items) + item.bytes <= SessionItems.maximumBytes
            else {
                throw VaultFailure(
                    .quotaExceeded,
                    "the session collection is full (\(SessionItems.maximumItems) items, \(SessionItems.maximumBytes) bytes)"
                )
            }
            let id = String(lowercaseHex: Sodium.randomBytes(16))
            items[id] = item
            return id
        }
    }

    /// Changes session item `id` (its label, attributes, or secret with its content type).
    /// Throws ItemNotFound for one the caller does not see, InteractionNotAllowed while the
    /// keychain is not open.
    func updateSessionItem(
        _ id: String, label: String? = nil, attributes: ExactDictionary<String>? = nil,
        secret: SecureBytes? = nil, contentType: String? = nil, caller: Caller
    ) throws {
        _ = try authorize(.updateItems(accessGroup: nil, newAccessGroup: nil), for: caller)
        if let secret { try VaultFailure.checkSecretSize(secret.count) }
        guard isKeychainOpen else {
            throw VaultFailure(
                .interactionNotAllowed, "the vault is locked: unlock it (vaultctl unlock)")
        }
        try sessionItems.items.withLock { items in
            guard var item = items[id], caller.mayAccess(group: item.accessGroup)
            else { throw VaultFailure(.itemNotFound, "no such item") }
            if let label { item.label = label }
            if let attributes { item.attributes = attributes }
            if let secret {
                item.secret = secret
                item.contentType = contentType
            }
            item.modified = Date()
            items[id] = item
        }
    }

    /// Deletes session item `id`, or every one the caller sees (nil). Returns how many.
    @discardableResult
    func deleteSessionItems(_ id: String?, caller: Caller) throws -> Int {
        _ = try authorize(.deleteItems(accessGroup: nil), for: caller)
        return sessionItems.items.withLock { items in
            let doomed = items.filter { key, item in
                (id.map(key.sameBytes) ?? true) && caller.mayAccess(group: item.accessGroup)
            }.map(\.key)
            for k in doomed { items[k] = nil }
            return doomed.count
        }
    }
}
