import Foundation
import VaultProtocol

// Reading rows: a query's candidates, found through the keyed-hash indexes, decrypted and
// matched; SecItemCopyMatching.

extension KeychainStore {
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
    private static func decode(_ c: Candidates, _ q: ItemQuery, logger: Logger) -> (
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
            logger.warning(
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
    func matchingRows(_ q: ItemQuery, groups: [String]?, in db: Database) throws -> (
        available: [Row], otherDevice: [Row], error: VaultFailure?, damaged: [DamagedItem]
    ) {
        let c = try candidates(
            ItemQuery(itemClass: q.itemClass, attributes: q.attributes, matchAll: true),
            groups: groups, in: db)
        var ok: [Row] = []
        var other: [Row] = []
        var firstError: VaultFailure?
        let (decoded, damaged) = Self.decode(c, q, logger: logger)
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

    /// A row's secret: its item key unwrapped with `classKey`, then the secret opened with
    /// it; nil when either fails authentication.
    static func openSecret(of r: Candidates.Stored, classKey: SecureBytes) -> SecureBytes? {
        let ad = r.associatedData
        guard let itemKey = Sodium.open(r.wrappedKey, key: classKey, associatedData: ad) else {
            return nil
        }
        return Sodium.open(r.secret, key: itemKey, associatedData: ad)
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
        _ c: Candidates, _ q: ItemQuery, returnData: Bool, includingLocked: Bool = false,
        logger: Logger
    ) throws -> ItemMatches {
        var rows: [Row] = []
        var lockedRows: [Row] = []
        var error: VaultFailure?
        var locked: VaultFailure?
        var (decoded, damaged) = decode(c, q, logger: logger)
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
            c, rows, returnData: returnData, one: !q.matchAll, damaged: &damaged, logger: logger)
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
        _ c: Candidates, _ rows: [Row], returnData: Bool, one: Bool, damaged: inout [DamagedItem],
        logger: Logger
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
                    logger.warning("keychain: \(DamagedItem(r.stored, .secret).description)")
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
}
