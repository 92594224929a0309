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

    private let keys: KeyHierarchy
    /// Each app's storage quota, checked by adds and updates.
    private let quota: StorageQuota
    /// Finds rows by their keyed hashes, for the writer and the readers.
    let itemIndex: ItemIndex
    /// Tests only: `store` finds no other row of an item's primary key through `itemIndex`
    /// (as a fault in the index would), so only the store's own uniqueness stops a second one.
    var bypassIndexForTesting = false

    /// Over the writer's connection `db` (outside a transaction, with migrations done): lists
    /// every item in the index and installs its triggers. Throws what SQLite throws.
    init(loading db: Database, keys: KeyHierarchy, quota: StorageQuota) throws {
        self.keys = keys
        self.quota = quota
        self.itemIndex = try ItemIndex(loading: db)
        try itemIndex.keep(on: db)
    }

    // MARK: identity and hashing

    /// A stored item with its attributes decrypted; its stored columns read through.
    @dynamicMemberLookup
    private struct Row {
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
    /// first. Apps' schemas have pairs most items share (libsecret's `xdg:schema` is on every
    /// item of a schema): found first, one would list all of them on each lookup. Each pair's
    /// rows are counted up to `rarityCap` (a walk of the primary key's prefix that stops
    /// there); equal counts keep their order.
    static func rarestFirst(_ hashes: [[UInt8]], in db: Database) throws -> [[UInt8]] {
        guard hashes.count > 1 else { return hashes }
        let counts = try hashes.map { h in
            try db.row(
                "SELECT count(*) FROM (SELECT 1 FROM item_lookup_attributes WHERE hash = ? LIMIT \(rarityCap))",
                [.blob(h)])?[0].int64 ?? 0
        }
        return hashes.indices.sorted { (counts[$0], $0) < (counts[$1], $1) }.map { hashes[$0] }
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
    private static func normalize(_ c: ItemClass, _ a: inout ItemAttributes) {
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

    private static func validate(_ c: ItemClass, _ a: ItemAttributes) throws {
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

    // MARK: reading rows

    /// A query's candidate rows as stored (found through the keyed-hash indexes), with the
    /// keys needed to decrypt them: what a lookup reads from the store and the key hierarchy.
    /// The rest (decrypting, matching, the secret) needs neither, so it runs outside the
    /// engine lock (with several clients, lookups would otherwise queue on it while others
    /// decrypt).
    struct Candidates {
        struct Stored {
            var id: Int64
            var uuid: [UInt8]
            var itemClass: ItemClass
            var accessGroup: String
            var accessible: Accessibility
            var synchronizable: Bool
            var attributes: [UInt8]
            var wrappedKey: [UInt8]
            var secret: [UInt8]

            /// What binds this row's ciphertexts to its identity.
            var associatedData: [UInt8] {
                KeychainStore.associatedData(
                    uuid: uuid, itemClass: itemClass, accessGroup: accessGroup,
                    accessible: accessible, synchronizable: synchronizable)
            }
        }
        var rows: [Stored] = []
        /// Rows the query's conditions on clear columns matched whose columns are malformed.
        var malformed: [DamagedItem] = []
        var metadata: SecureBytes?
        /// Each candidate class's key, or the error it is unavailable with.
        var classKeys: [Accessibility: Result<SecureBytes, VaultFailure>] = [:]
        /// Rows made on another device (a moved data directory) in a class this device has a
        /// key of its own for: their item key does not open with it (`KeyHierarchy.isForeign`).
        var otherDevice: Set<Int64> = []

        /// The key that opens row `r`'s item key, or the error it is unavailable with
        /// (nil: `r` is not a candidate).
        func key(of r: Stored) -> Result<SecureBytes, VaultFailure>? {
            if otherDevice.contains(r.id) {
                return .failure(KeychainStore.otherDeviceError(r.accessible))
            }
            return classKeys[r.accessible]
        }
    }

    /// What an item made on another device is read with: NotAvailableOnThisDevice.
    static func otherDeviceError(_ a: Accessibility) -> VaultFailure {
        VaultFailure(
            .notAvailableOnThisDevice,
            "the item is bound to another device (\(a.rawValue)) and is not available on this device"
        )
    }

    /// The stored rows matching the query's indexed parts, restricted to `groups` (what the
    /// policy granted: `Grant.searchedAccessGroups`; nil, every group), and their keys,
    /// through the writer's connection: under the engine lock.
    func candidates(_ q: ItemQuery, groups: [String]?, in db: Database) throws -> Candidates {
        let (metadata, hashKey) = try keys.metadataKeys()
        let found = try Self.candidateRows(
            q, groups: groups, hashKey: hashKey, itemIndex: itemIndex, in: db)
        var out = Candidates(rows: found.rows, malformed: found.malformed, metadata: metadata)
        try addClassKeys(to: &out)
        return out
    }

    /// The metadata and index keys (under either `Vault` lock). Throws InteractionNotAllowed
    /// before the first unlock, NotInitialized.
    func metadataKeys() throws -> (metadata: SecureBytes, index: SecureBytes) {
        try keys.metadataKeys()
    }

    /// Each candidate class's key, or the error it is unavailable with, and the rows another
    /// device made (under either `Vault` lock).
    func addClassKeys(to c: inout Candidates) throws {
        for r in c.rows where c.classKeys[r.accessible] == nil {
            do {
                c.classKeys[r.accessible] = .success(try keys.classKey(r.accessible))
            } catch let e as VaultFailure {
                c.classKeys[r.accessible] = .failure(e)
            }
        }
        // Only in a class with another device's key (a moved data directory): one small
        // decryption per row of it.
        for r in c.rows where keys.isForeign(r.accessible) {
            if case .success(let k)? = c.classKeys[r.accessible],
                Sodium.open(r.wrappedKey, key: k, associatedData: r.associatedData) == nil
            {
                c.otherDevice.insert(r.id)
            }
        }
    }

    /// The stored rows matching the query's indexed parts (their keyed hashes, made with
    /// `hashKey`, the index key, found through `itemIndex`), restricted to `groups` when the
    /// query names none (nil: every group), read through `db`: the writer's connection under
    /// the engine lock, or a reader's. A group the query names, and `groups`, were granted by
    /// the policy (`Vault.authorize`).
    static func candidateRows(
        _ q: ItemQuery, groups: [String]?, hashKey: SecureBytes, itemIndex: ItemIndex,
        in db: Database
    ) throws -> (rows: [Candidates.Stored], malformed: [DamagedItem]) {
        // The arguments in the order of the SQL's parts; `shape` says which parts it has.
        var args: [SQLValue] = []
        var shape = 0
        if let c = q.itemClass {
            shape |= CandidateSQL.itemClass
            args.append(.text(c.rawValue))
        }
        if let g = q.attributes.accessGroup {
            shape |= CandidateSQL.accessGroup
            args.append(.text(g))
        } else if let groups {
            if groups.isEmpty { return ([], []) }
            shape |= groups.count << CandidateSQL.groupCountShift
            args += groups.map { .text($0) }
        }
        if let a = q.attributes.accessible {
            shape |= CandidateSQL.accessible
            args.append(.text(a.rawValue))
        }
        // Lookup attributes: the rows holding every pair's hash (exact matches, checked again
        // once decrypted). With them, the service alone is checked on its column rather than
        // listed from the index: every Secret Service item has the same one.
        if let wanted = q.attributes.lookupAttributes, !wanted.isEmpty {
            let hashes = try Self.rarestFirst(
                Self.lookupAttributeHashes(wanted, index: hashKey), in: db)
            shape |= hashes.count << CandidateSQL.lookupAttributeCountShift
            args += hashes.map { .blob($0) }
            if q.attributes.account == nil, q.attributes.server == nil,
                let service = q.attributes.service
            {
                shape |= CandidateSQL.lookupHash
                args.append(Self.fieldHash("service", service, index: hashKey))
                return try rows(shape: shape, args, in: db)
            }
        }
        // Through `ItemIndex`: the service or the server (only a generic password has a
        // service, only an internet password a server: a query naming both matches nothing)
        // and the account. The rows it names are read by id and their hashes checked here.
        var lookupHash: SQLValue?
        switch (q.attributes.service, q.attributes.server) {
        case (let service?, nil): lookupHash = Self.fieldHash("service", service, index: hashKey)
        case (nil, let server?): lookupHash = Self.fieldHash("server", server, index: hashKey)
        case (nil, nil): break
        case (_?, _?): return ([], [])
        }
        let accountHash = q.attributes.account.map { Self.fieldHash("account", $0, index: hashKey) }
        if lookupHash != nil || accountHash != nil {
            var hashes: [(ItemIndex.Column, [UInt8])] = []
            if let h = lookupHash?.blob { hashes.append((.lookup, h)) }
            if let h = accountHash?.blob { hashes.append((.account, h)) }
            let ids = itemIndex.candidates(hashes)
            if ids.isEmpty { return ([], []) }
            if ids.count == 1 {
                shape |= CandidateSQL.oneID
                args.append(.integer(ids[0]))
            } else {
                shape |= CandidateSQL.idList
                args.append(.text(ItemIndex.jsonList(ids)))
            }
            if let h = lookupHash {
                shape |= CandidateSQL.lookupHash
                args.append(h)
            }
            if let h = accountHash {
                shape |= CandidateSQL.accountHash
                args.append(h)
            }
        }
        return try rows(shape: shape, args, in: db)
    }

    /// The rows of `candidateRows`'s SQL of `shape`, bound to `args`.
    private static func rows(shape: Int, _ args: [SQLValue], in db: Database) throws -> (
        rows: [Candidates.Stored], malformed: [DamagedItem]
    ) {
        var out: [Candidates.Stored] = []
        var malformed: [DamagedItem] = []
        for r in try db.rows(shape: shape, sql: { CandidateSQL.text(shape) }, args) {
            switch stored(r) {
            case .success(let row): out.append(row)
            case .failure(let damaged): malformed.append(damaged)
            }
        }
        return (out, malformed)
    }

    /// A row of `id, uuid, item_class, access_group, accessible, synchronizable, attributes,
    /// wrapped_key, secret` as stored, or, when a column is missing or of the wrong type (or
    /// the class or accessibility unknown), the damaged item it is.
    static func stored(_ r: [SQLValue]) -> Result<Candidates.Stored, DamagedItem> {
        guard let id = r[0].int64, let uuid = r[1].blob,
            let cls = r[2].text.flatMap(ItemClass.init(rawValue:)),
            let group = r[3].text, let acc = r[4].text.flatMap(Accessibility.init(rawValue:)),
            let sync = r[5].int64,
            let attrBox = r[6].blob, let wrapped = r[7].blob, let secret = r[8].blob
        else {
            return .failure(
                DamagedItem(
                    id: r[0].int64 ?? -1, uuid: r[1].blob, itemClass: r[2].text,
                    accessGroup: r[3].text, part: .row))
        }
        return .success(
            Candidates.Stored(
                id: id, uuid: uuid, itemClass: cls, accessGroup: group, accessible: acc,
                synchronizable: sync != 0, attributes: attrBox,
                wrappedKey: wrapped, secret: secret))
    }

    /// The SQL of `candidateRows`, by its shape: a bit for each condition it has (in the
    /// order their arguments are bound), and the number of access groups of an `IN` list.
    enum CandidateSQL {
        static let itemClass = 1, accessGroup = 2, accessible = 4, oneID = 8, idList = 16,
            lookupHash = 32, accountHash = 64
        /// The number of access groups of an `IN` list (24 bits), then the number of lookup
        /// attributes' hashes (at most `ItemAttributes.maximumLookupAttributes`).
        static let groupCountShift = 8
        static let groupCountMask = (1 << 24) - 1
        static let lookupAttributeCountShift = 32

        static func text(_ shape: Int) -> String {
            var sql =
                "SELECT id, uuid, item_class, access_group, accessible, synchronizable, attributes, wrapped_key, secret FROM items WHERE 1"
            if shape & itemClass != 0 { sql += " AND item_class = ?" }
            if shape & accessGroup != 0 { sql += " AND access_group = ?" }
            let groups = (shape >> groupCountShift) & groupCountMask
            if groups > 0 {
                sql +=
                    " AND access_group IN ("
                    + Array(repeating: "?", count: groups).joined(separator: ",") + ")"
            }
            if shape & accessible != 0 { sql += " AND accessible = ?" }
            // The first lookup attribute lists its rows (the primary key's prefix, hash); each
            // other is a probe of the primary key (hash, item_id) for one row: the cost follows
            // the first attribute's rows, not the store's (`rarestFirst`).
            for i in 0..<(shape >> lookupAttributeCountShift) {
                sql +=
                    i == 0
                    ? " AND id IN (SELECT item_id FROM item_lookup_attributes WHERE hash = ?)"
                    : " AND EXISTS (SELECT 1 FROM item_lookup_attributes WHERE hash = ? AND item_id = items.id)"
            }
            if shape & oneID != 0 { sql += " AND id = ?" }
            if shape & idList != 0 { sql += " AND id IN (SELECT value FROM json_each(?))" }
            if shape & lookupHash != 0 { sql += " AND \(ItemIndex.Column.lookup.name) = ?" }
            if shape & accountHash != 0 { sql += " AND \(ItemIndex.Column.account.name) = ?" }
            return sql + " ORDER BY id"
        }
    }

    /// Candidates decrypted, then matched exactly, and the damaged ones that may match: the
    /// malformed rows and those whose attributes do not open, when their clear columns match
    /// (`mayMatch`). Needs no lock.
    private static func decode(_ c: Candidates, _ q: ItemQuery) -> (
        rows: [Row], damaged: [DamagedItem]
    ) {
        guard let metadata = c.metadata else { return ([], []) }
        var out: [Row] = []
        var damaged = c.malformed
        for r in c.rows {
            guard
                let plain = Sodium.openBytes(
                    r.attributes, key: metadata, associatedData: r.associatedData),
                var attrs = try? ItemAttributes(jsonObject: plain)
            else {
                if mayMatch(r, q) { damaged.append(DamagedItem(r, .attributes)) }
                continue
            }
            attrs.accessGroup = r.accessGroup
            attrs.accessible = r.accessible
            attrs.synchronizable = r.synchronizable
            guard attrs.matches(q.attributes) else { continue }
            out.append(Row(stored: r, attributes: attrs))
        }
        if !damaged.isEmpty {
            log(
                "keychain: \(damaged.count) damaged item(s) met by a query: \(damaged.prefix(4).map(\.description).joined(separator: "; "))"
            )
        }
        return (out, damaged)
    }

    /// Whether a row whose attributes do not open may match `q`: its clear columns (class,
    /// access group, accessibility: the SQL checked them; synchronizable here) and keyed
    /// hashes (service or server, account, lookup attributes: the SQL checked those named)
    /// match; what only its attributes hold cannot be told.
    private static func mayMatch(_ r: Candidates.Stored, _ q: ItemQuery) -> Bool {
        q.attributes.synchronizable.map { $0 == r.synchronizable } ?? true
    }

    /// Whether every attribute `a` names is one a damaged row is matched by for certain:
    /// a clear column (access group, accessibility, synchronizable) or a keyed hash the
    /// query's SQL checks (service or server, account). A Delete of such a query removes
    /// the damaged items it meets; any other attribute could not be checked on them.
    static func namesOnlyClearAttributes(_ a: ItemAttributes) -> Bool {
        var rest = a
        rest.service = nil
        rest.server = nil
        rest.account = nil
        rest.accessGroup = nil
        rest.accessible = nil
        rest.synchronizable = nil
        return rest == ItemAttributes()
    }

    /// Every row matching the query (its indexed parts, then exactly, decrypted), restricted
    /// to `groups` (nil: every group), split into those whose key is available, those that
    /// can never be read here (NotAvailableOnThisDevice: made on another device), and the
    /// error of the others (the vault is locked), if any; and the damaged items that may
    /// match (`decode`).
    private func matchingRows(_ q: ItemQuery, groups: [String]?, in db: Database) throws -> (
        available: [Row], otherDevice: [Row], error: VaultFailure?, damaged: [DamagedItem]
    ) {
        let c = try candidates(
            ItemQuery(itemClass: q.itemClass, attributes: q.attributes, matchAll: true),
            groups: groups, in: db)
        var ok: [Row] = []
        var other: [Row] = []
        var firstError: VaultFailure?
        let (decoded, damaged) = Self.decode(c, q)
        for r in decoded {
            switch c.key(of: r.stored) {
            case .success?: ok.append(r)
            case .failure(let e)? where e.code == .notAvailableOnThisDevice: other.append(r)
            case .failure(let e)?: if firstError == nil { firstError = e }
            case nil: break
            }
        }
        return (ok, other, firstError, damaged)
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

    /// A row's secret: its item key unwrapped with `classKey`, then the secret opened with
    /// it; nil when either fails authentication.
    static func openSecret(of r: Candidates.Stored, classKey: SecureBytes) -> SecureBytes? {
        let ad = r.associatedData
        guard let itemKey = Sodium.open(r.wrappedKey, key: classKey, associatedData: ad) else {
            return nil
        }
        return Sodium.open(r.secret, key: itemKey, associatedData: ad)
    }

    // MARK: writing rows

    /// The keys that encrypt an item of class `accessible`. Throws the class-key error
    /// (InteractionNotAllowed, AuthFailed, NotAvailableOnThisDevice).
    func writeKeys(accessible: Accessibility) throws -> WriteKeys {
        let (metadata, index) = try keys.metadataKeys()
        return WriteKeys(metadata: metadata, index: index, classKey: try keys.classKey(accessible))
    }

    /// Encrypts and writes an item (insert when `id` is nil, else replace that row).
    private func write(
        id: Int64?, itemClass: ItemClass, attributes a: ItemAttributes, secret: SecureBytes,
        generation: String?, in db: Database
    ) throws {
        let values = try Self.encrypt(
            itemClass: itemClass, attributes: a, secret: secret,
            keys: try writeKeys(accessible: a.accessible ?? .whenUnlocked))
        try store(values, id: id, generation: generation, in: db)
    }

    /// Where `encrypt`'s values hold the primary key's hash, where the columns end, and
    /// which hold the bytes an item takes (attributes, wrapped key, secret: `app_usage`).
    private static let primaryKeyHashValue = 5
    private static let columnValues = 11
    private static let sizedValues = 8..<11

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
    /// unique, as in SecItemAdd).
    private func store(_ values: [SQLValue], id: Int64?, generation: String?, in db: Database)
        throws
    {
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
                try db.run(
                    """
                    UPDATE items SET uuid = ?, item_class = ?, access_group = ?, accessible = ?, synchronizable = ?,
                      primary_key_hash = ?, lookup_hash = ?, account_hash = ?, attributes = ?,
                      wrapped_key = ?, secret = ? WHERE id = ?
                    """, columns + [.integer(id)])
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
            log(
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

    /// SecItemCopyMatching's work after the candidates are read, without a lock. Returns
    /// available matches (one, or all with `matchAll`) and the damaged items the query met
    /// (`decode`; and those whose secret does not open, when `returnData`), which are left
    /// out of the matches, never fail the others; throws ItemNotFound when nothing
    /// matches, ItemDamaged when only damaged items do, or the class-key error
    /// (InteractionNotAllowed, NotAvailableOnThisDevice) when only unavailable items match.
    /// With `matchAll`, a match whose class is locked fails the
    /// whole query with its error (InteractionNotAllowed, as securityd's query stops at an
    /// item the keybag cannot open): a partial list would report the locked items as not
    /// found. Items of another device (a moved data directory) never open here,
    /// so they are left out of a list rather than failing every one.
    /// `includingLocked` (the Secret Service's searches, which answer with the unlocked and
    /// the locked matches): a locked match is listed, marked `isLocked`, instead, and when
    /// only damaged items match they are returned (no items) rather than thrown, for the
    /// front-end to list them (docs/secret-service.md, "Damaged items").
    static func copyMatching(
        _ c: Candidates, _ q: ItemQuery, returnData: Bool, includingLocked: Bool = false
    ) throws -> ItemMatches {
        var rows: [Row] = []
        var lockedRows: [Row] = []
        var error: VaultFailure?
        var locked: VaultFailure?
        var (decoded, damaged) = decode(c, q)
        for r in decoded {
            switch c.key(of: r.stored) {
            case .success?: rows.append(r)
            case .failure(let e)? where includingLocked && e.code != .notAvailableOnThisDevice:
                lockedRows.append(r)
            case .failure(let e)?:
                if error == nil || e.code == .notAvailableOnThisDevice { error = e }
                if locked == nil && e.code != .notAvailableOnThisDevice { locked = e }
            case nil: break
            }
        }
        if q.matchAll, let locked { throw locked }
        func nothing() -> VaultFailure {
            error
                ?? (damaged.isEmpty
                    ? VaultFailure(.itemNotFound, "no item matches the query")
                    : DamagedItem.error(damaged, DamagedItem.advice))
        }
        // The secrets alone, in base64, would make the reply larger than a message may be:
        // ReplyTooLarge as soon as that is known, before more of them are decrypted and held
        // (a query of every item with its data built a tree of all of them, then was refused).
        let items = try Self.found(
            c, rows, returnData: returnData, one: !q.matchAll, damaged: &damaged)
        if includingLocked {
            let lockedItems = lockedRows.map {
                FoundItem(
                    itemClass: $0.itemClass, attributes: $0.attributes, data: nil, isLocked: true,
                    uuid: $0.stored.uuid)
            }
            if items.isEmpty && lockedItems.isEmpty && damaged.isEmpty { throw nothing() }
            if !q.matchAll && items.isEmpty {
                return ItemMatches(items: Array(lockedItems.prefix(1)), damaged: damaged)
            }
            return ItemMatches(items: items + (q.matchAll ? lockedItems : []), damaged: damaged)
        }
        if items.isEmpty { throw nothing() }
        return ItemMatches(items: items, damaged: damaged)
    }

    /// Available rows as found items, with their secrets when `returnData` (`one`: the
    /// first whose secret opens); a row whose secret does not open is added to `damaged`
    /// instead. Throws ReplyTooLarge when the secrets alone would be over a message's size.
    private static func found(
        _ c: Candidates, _ rows: [Row], returnData: Bool, one: Bool, damaged: inout [DamagedItem]
    ) throws -> [FoundItem] {
        var replyBytes = 0
        // What the reply's items will take in memory while it is built and sent
        // (`ReplyLimit.itemBytes`): past `ReplyLimit.maximumBuildBytes`, ReplyTooLarge too, so
        // the bound vaultd reserved for the reply before the lookup (its reply budget) holds.
        var buildBytes = 0
        var out: [FoundItem] = []
        for r in rows {
            var data: SecureBytes?
            if returnData, case .success(let classKey)? = c.key(of: r.stored) {
                guard let s = openSecret(of: r.stored, classKey: classKey) else {
                    damaged.append(DamagedItem(r.stored, .secret))
                    log("keychain: \(DamagedItem(r.stored, .secret).description)")
                    continue
                }
                replyBytes += (s.count + 2) / 3 * 4
                if replyBytes >= ReplyLimit.maximumReplyBytes {
                    throw VaultFailure(
                        .replyTooLarge,
                        "the answer would be over \(replyBytes) bytes, over the \(ReplyLimit.maximumReplyBytes)-byte message limit: ask for less (matchLimit one, no data, a narrower query)",
                        .init(limit: Int64(ReplyLimit.maximumReplyBytes), size: Int64(replyBytes)))
                }
                data = s
            }
            buildBytes += ReplyLimit.itemBytes(
                attributes: r.stored.attributes.count, secret: data?.count ?? 0)
            if buildBytes > ReplyLimit.maximumBuildBytes {
                throw VaultFailure(
                    .replyTooLarge,
                    "the answer would hold more items than vaultd builds one reply of (\(ReplyLimit.maximumBuildBytes >> 20) MiB in memory): ask for less (a narrower query, no data)",
                    .init(limit: Int64(ReplyLimit.maximumBuildBytes), size: Int64(buildBytes)))
            }
            out.append(
                FoundItem(
                    itemClass: r.itemClass, attributes: r.attributes, data: data,
                    uuid: r.stored.uuid))
            if one { break }
        }
        return out
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
                id: r.id, itemClass: r.itemClass, attributes: a, secret: s, generation: nil, in: db)
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
            log(
                "keychain: deleted \(damagedIDs.count) damaged item(s): \(damaged.prefix(4).map(\.description).joined(separator: "; "))"
            )
        }
        return ids.count + damagedIDs.count
    }

    /// Deletes every item of one accessibility class (used when the passphrase is removed).
    func deleteAll(accessible: Accessibility, in db: Database) throws -> Int {
        try db.run("DELETE FROM items WHERE accessible = ?", [.text(accessible.rawValue)])
    }

    /// Whether a stored row is another device's ThisDeviceOnly item (a data directory moved
    /// here, or a backup restored here): in a foreign class, and its item key does not open
    /// with this device's class key. False when that cannot be told (the class is locked).
    private func isOtherDevice(
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
