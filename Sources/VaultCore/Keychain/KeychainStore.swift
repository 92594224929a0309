import Foundation
import VaultProtocol

/// One item found by a query: its class and attributes, and the secret when asked for.
public struct FoundItem {
    public var itemClass: ItemClass
    public var attributes: ItemAttributes
    /// The secret, when `returnData` was requested.
    public var data: SecureBytes?
    /// Its class key is not available now (the vault is locked): listed only by a query
    /// that asks for locked items too (`includingLocked`), without its secret.
    public var isLocked = false
    /// The item's uuid (its row's identity): what its creator and access grants are
    /// recorded under (`AccessStore`). Nil for the session collection's items.
    var uuid: [UInt8]?
}

/// What a lookup found: the matches, and the damaged items it met, which it left out
/// (`DamagedItem`; a client sees them in CopyMatching's `damaged`).
public struct ItemMatches {
    public var items: [FoundItem]
    public var damaged: [DamagedItem]
}

/// What a keychain query asks for (SecItemCopyMatching's dictionary).
public struct ItemQuery: Sendable {
    /// nil matches both classes.
    public var itemClass: ItemClass?
    public var attributes: ItemAttributes
    /// kSecMatchLimitAll when true; kSecMatchLimitOne (the default) when false.
    public var matchAll: Bool

    public init(
        itemClass: ItemClass? = nil, attributes: ItemAttributes = ItemAttributes(),
        matchAll: Bool = false
    ) {
        self.itemClass = itemClass
        self.attributes = attributes
        self.matchAll = matchAll
    }
}

/// The keys that encrypt one item: the metadata and index keys and its class key.
struct WriteKeys {
    var metadata: SecureBytes
    var index: SecureBytes
    var classKey: SecureBytes
}

/// Keychain items in the store, encrypted as docs/keychain.md says: per-item keys wrapped by class
/// keys, attributes under the metadata key, each ciphertext bound to its row by associated
/// data. Semantics follow SecItemAdd / CopyMatching / Update / Delete. Not thread-safe. It holds
/// no connection: each operation reads or writes through the one it is handed (`in db:`, a
/// transaction `DatabasePool.write` or `read` gave its caller).
final class KeychainStore {
    /// An item's attributes, serialized, may take at most this many bytes (64 KiB).
    static let maximumAttributesSize = ReplyLimit.maximumAttributesBytes

    let keys: KeyHierarchy
    /// Where damaged items and index faults are logged: the writer connection's logger.
    let logger: Logger
    /// Each app's storage quota, checked by adds and updates.
    let quota: StorageQuota
    /// Finds rows by their keyed hashes, for the writer and the readers.
    let itemIndex: ItemIndex
    /// Tests only: `store` finds no other row of an item's primary key through `itemIndex`
    /// (as a fault in the index would), so only the store's own uniqueness stops a second one.
    var bypassIndexForTesting = false

    /// Over the writer's connection `db` (outside a transaction, with migrations done): lists
    /// every item in the index and installs its triggers. Throws what SQLite throws.
    init(loading db: Database, keys: KeyHierarchy, quota: StorageQuota) throws {
        self.logger = db.logger
        self.keys = keys
        self.quota = quota
        self.itemIndex = try ItemIndex(loading: db)
        try itemIndex.keep(on: db)
    }

    // MARK: identity and hashing

    /// A stored item with its attributes decrypted; its stored columns read through.
    @dynamicMemberLookup
    struct Row {
        var stored: Candidates.Stored
        var attributes: ItemAttributes
        subscript<T>(dynamicMember column: KeyPath<Candidates.Stored, T>) -> T {
            stored[keyPath: column]
        }
    }

    /// Associated data binding every ciphertext of an item to its identity, so rows or
    /// columns cannot be swapped.
    static func associatedData(
        uuid: [UInt8], itemClass: ItemClass, accessGroup: String, accessible: Accessibility,
        synchronizable: Bool
    ) -> [UInt8] {
        // "vaultd item v1\0" uuid "\0" class "\0" group "\0" accessibility "\0" "1" or "0",
        // appended in place into one reserved buffer (each lookup builds it for its row).
        var ad: [UInt8] = []
        ad.reserveCapacity(
            48 + uuid.count + accessGroup.utf8.count + accessible.rawValue.utf8.count)
        ad += "vaultd item v1".utf8
        ad.append(0)
        ad += uuid
        ad.append(0)
        ad += itemClass.rawValue.utf8
        ad.append(0)
        ad += accessGroup.utf8
        ad.append(0)
        ad += accessible.rawValue.utf8
        ad.append(0)
        ad.append(synchronizable ? UInt8(ascii: "1") : UInt8(ascii: "0"))
        return ad
    }

    /// The primary-key attributes of a class, in a fixed order (absent = empty / 0).
    private static func primaryKey(_ c: ItemClass, _ a: ItemAttributes) -> [JSON] {
        switch c {
        case .genericPassword:
            return [.string(a.service ?? ""), .string(a.account ?? "")]
        case .internetPassword:
            return [
                .string(a.server ?? ""), .string(a.protocol ?? ""), JSON(a.port ?? 0),
                .string(a.path ?? ""),
                .string(a.account ?? ""), .string(a.authenticationType ?? ""),
                .string(a.securityDomain ?? ""),
            ]
        }
    }

    static func primaryKeyHash(_ c: ItemClass, _ a: ItemAttributes, index: SecureBytes) -> [UInt8] {
        let material: JSON = .array(
            [
                .string("pk"), .string(c.rawValue), .string(a.accessGroup ?? ""),
                .bool(a.synchronizable ?? false),
            ]
                + primaryKey(c, a))
        return Sodium.keyedHash(material.serialized(), key: index)
    }

    static func fieldHash(_ field: String, _ value: String?, index: SecureBytes) -> SQLValue {
        guard let value else { return .null }
        // "field\0value" as bytes, without interpolating a String first.
        var message: [UInt8] = []
        message.reserveCapacity(field.utf8.count + 1 + value.utf8.count)
        message += field.utf8
        message.append(0)
        message += value.utf8
        return .blob(Sodium.keyedHash(message, key: index, length: 16))
    }

    /// The keyed hash of each lookup attribute (name and value) of a map, as
    /// `item_lookup_attributes` holds them: "lookup\0", the name's length (4 bytes, big
    /// endian), the name, the value; 16 bytes each, under the index key.
    static func lookupAttributeHashes(_ map: ExactDictionary<String>, index: SecureBytes)
        -> [[UInt8]]
    {
        map.map { name, value in
            var message: [UInt8] = []
            message.reserveCapacity(11 + name.utf8.count + value.utf8.count)
            message += "lookup".utf8
            message.append(0)
            let n = UInt32(name.utf8.count)
            message += [
                UInt8(n >> 24), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff),
            ]
            message += name.utf8
            message += value.utf8
            return Sodium.keyedHash(message, key: index, length: 16)
        }
    }

    /// `hashes` (of a search's lookup attributes) in the order `CandidateSQL` uses them: the
    /// first lists its rows, each other is probed for those rows only, so the rarest goes
    /// first (the others keep their order: each is one probe per listed row, whichever comes
    /// next). Apps' schemas have pairs most items share (libsecret's `xdg:schema` is on every
    /// item of a schema): found first, one would list all of them on each lookup.
    ///
    /// Counting walks the primary key's prefix and stops at a limit, so a count costs what it
    /// finds, up to the limit. Every pair is counted up to 2 first: a pair on one item or on
    /// none (an account name, the common lookup) is the rarest whatever the others hold, and
    /// the search costs a few steps of the index. Only when every pair is on two items or
    /// more are they counted up to `rarityCap`, each only as far as the fewest found so far
    /// (it goes first only when it has fewer). Equal counts keep their order.
    static func rarestFirst(_ hashes: [[UInt8]], in db: Database) throws -> [[UInt8]] {
        guard hashes.count > 1 else { return hashes }
        func first(_ i: Int) -> [[UInt8]] {
            [hashes[i]] + hashes.indices.lazy.filter { $0 != i }.map { hashes[$0] }
        }
        let few = try hashes.map { try rowCount(ofPair: $0, upTo: 2, in: db) }
        if let i = few.indices.min(by: { (few[$0], $0) < (few[$1], $1) }), few[i] < 2 {
            return first(i)
        }
        var rarest = 0
        var fewest = try rowCount(ofPair: hashes[0], upTo: rarityCap, in: db)
        for i in hashes.indices.dropFirst() where fewest > 2 {
            let n = try rowCount(ofPair: hashes[i], upTo: fewest, in: db)
            if n < fewest { (rarest, fewest) = (i, n) }
        }
        return first(rarest)
    }

    /// The rows holding lookup pair `hash`, counted up to `limit` (the walk stops there).
    static func rowCount(ofPair hash: [UInt8], upTo limit: Int, in db: Database) throws -> Int {
        Int(
            try db.row(
                "SELECT count(*) FROM (SELECT 1 FROM item_lookup_attributes WHERE hash = ? LIMIT ?)",
                [.blob(hash), .integer(Int64(limit))])?[0].int64 ?? 0)
    }

    /// How many rows of one lookup pair `rarestFirst` counts at most.
    static let rarityCap = 64

    /// The `lookup_hash` column of an item: its service's hash (a generic password) or its
    /// server's (an internet password), by which `ItemIndex` finds it.
    static func lookupHash(_ c: ItemClass, _ a: ItemAttributes, index: SecureBytes) -> SQLValue {
        switch c {
        case .genericPassword: return fieldHash("service", a.service, index: index)
        case .internetPassword: return fieldHash("server", a.server, index: index)
        }
    }

    /// Normalizes the primary-key attributes of a class: absent strings become empty.
    static func normalize(_ c: ItemClass, _ a: inout ItemAttributes) {
        if a.account == nil { a.account = "" }
        switch c {
        case .genericPassword:
            if a.service == nil { a.service = "" }
        case .internetPassword:
            for k: ItemAttributes.StringAttribute in [
                .server, .protocol, .path, .authenticationType, .securityDomain,
            ] where a[k] == nil {
                a[k] = ""
            }
            if a.port == nil { a.port = 0 }
        }
        if a.synchronizable == nil { a.synchronizable = false }
        if a.accessible == nil { a.accessible = .whenUnlocked }
    }

    static func validate(_ c: ItemClass, _ a: ItemAttributes) throws {
        if c == .genericPassword && a.hasInternetAttributes {
            throw VaultFailure.param(
                "internet-password attributes (server, protocol, port, path, authenticationType, securityDomain) on a generic password"
            )
        }
        if c == .internetPassword && a.service != nil {
            throw VaultFailure.param(
                "attribute 'service' belongs to generic passwords; internet passwords use 'server'")
        }
        if (a.synchronizable ?? false) && (a.accessible?.isThisDeviceOnly ?? false) {
            throw VaultFailure.param("a synchronizable item cannot be ThisDeviceOnly")
        }
        // As SecItemAdd and SecItemUpdate: "item with kSecAttrAccessControl is not
        // synchronizable". Presence is proven to this device's polkit; a copy synced to
        // another device would carry the flag but not the check the user chose.
        if (a.synchronizable ?? false) && a.accessControl != nil {
            throw VaultFailure.param(
                "an item with an access control (userPresence) cannot be synchronizable")
        }
        if let g = a.accessGroup, g.isEmpty {
            throw VaultFailure.param("the access group must not be empty")
        }
    }

    /// Whether a stored row is another device's ThisDeviceOnly item (a data directory moved
    /// here, or a backup restored here): in a foreign class, and its item key does not open
    /// with this device's class key. False when that cannot be told (the class is locked).
    func isOtherDevice(
        uuid: [UInt8], itemClass: ItemClass, accessGroup: String, accessible: Accessibility,
        synchronizable: Bool, wrappedKey: [UInt8]
    ) -> Bool {
        guard keys.isForeign(accessible) else { return false }
        do {
            let k = try keys.classKey(accessible)
            let ad = Self.associatedData(
                uuid: uuid, itemClass: itemClass, accessGroup: accessGroup, accessible: accessible,
                synchronizable: synchronizable)
            return Sodium.open(wrappedKey, key: k, associatedData: ad) == nil
        } catch let e as VaultFailure where e.code == .notAvailableOnThisDevice {
            return true
        } catch {
            return false
        }
    }

    /// Items that are another device's and never open here (NotAvailableOnThisDevice), of
    /// all of them or of those in `groups`. Only the foreign classes' rows are read (one
    /// small decryption each); those of a class locked now are not counted.
    func unavailableCount(inGroups groups: [String]? = nil, in db: Database) throws -> Int {
        if let groups, groups.isEmpty { return 0 }
        var n = 0
        for a in Accessibility.allCases where keys.isForeign(a) {
            var sql =
                "SELECT uuid, item_class, access_group, synchronizable, wrapped_key FROM items WHERE accessible = ?"
            var args: [SQLValue] = [.text(a.rawValue)]
            if let groups {
                sql += " AND access_group IN (SELECT value FROM json_each(?))"
                args.append(.text(JSON.array(groups.map { .string($0) }).text))
            }
            for r in try db.rows(sql, args) {
                guard let uuid = r[0].blob, let cls = r[1].text.flatMap(ItemClass.init(rawValue:)),
                    let group = r[2].text, let sync = r[3].int64,
                    let wrapped = r[4].blob
                else { continue }
                if isOtherDevice(
                    uuid: uuid, itemClass: cls, accessGroup: group, accessible: a,
                    synchronizable: sync != 0, wrappedKey: wrapped)
                {
                    n += 1
                }
            }
        }
        return n
    }

    /// Items stored: all of them, or those in `groups` (an app's access groups).
    func count(inGroups groups: [String]? = nil, in db: Database) throws -> Int {
        guard let groups else {
            return Int(try db.row("SELECT COUNT(*) FROM items")?[0].int64 ?? 0)
        }
        if groups.isEmpty { return 0 }
        let marks = Array(repeating: "?", count: groups.count).joined(separator: ", ")
        return Int(
            try db.row(
                "SELECT COUNT(*) FROM items WHERE access_group IN (\(marks))",
                groups.map { .text($0) })?[0].int64 ?? 0)
    }
}
