import Foundation
import VaultProtocol

/// What `Vault.backup` wrote.
public struct BackupSummary: Sendable, Equatable {
    /// Items written, device-bound ones included.
    public var items = 0
    /// ThisDeviceOnly items written, sealed by this device's key.
    public var deviceBoundItems = 0
    /// ThisDeviceOnly items left out: without `includeDeviceBound`, or another device's
    /// (unavailable here, so not readable for a backup either).
    public var leftOutItems = 0
    public var preferences = 0
    public var domains = 0
    public var apps = 0
    /// The file's size.
    public var bytes = 0
    /// Damaged items (`DamagedItem`) left out: the rest is written.
    public var damagedItems: [DamagedItem] = []
    /// Preference values that do not decode (`DamagedValue`), left out: the rest is written.
    public var damagedValues: [DamagedValue] = []
}

/// What `Vault.restore` did.
public struct RestoreSummary: Sendable {
    /// Per kind of record: added (absent before), replaced (older, by modification date),
    /// kept (the vault's was as new or newer).
    public struct Counts: Sendable, Equatable {
        public var added = 0
        public var replaced = 0
        public var kept = 0
    }
    public var items = Counts()
    public var preferences = Counts()
    public var apps = Counts()
    /// ThisDeviceOnly items sealed by another device's key: stored NotAvailableOnThisDevice.
    public var unavailableItems = 0
    /// The lock state after the restore.
    public var lock = LockState(
        state: .uninitialized, unlockedSinceStart: false, hasPassphrase: false)
}

extension Vault {
    /// The largest backup file a restore reads (1 GiB), and the most its plaintext may hold.
    public static let maximumBackupSize = 1 << 30

    /// The associated data sealing a device-bound item's secret in a backup: its identity
    /// and exact stored attributes, so a sealed secret cannot be moved onto another record.
    static func deviceBoundAssociatedData(_ r: BackupArchive.ItemRecord) -> [UInt8] {
        var ad = Array("vaultd backup device-bound item v1".utf8)
        for part in [
            r.itemClass.rawValue, r.accessGroup, r.accessible.rawValue,
            r.synchronizable ? "1" : "0",
        ] {
            ad.append(0)
            ad += part.utf8
        }
        ad.append(0)
        return ad + r.attributes
    }

    /// One item row as a backup reads it.
    private struct StoredItem {
        var row: KeychainStore.Candidates.Stored
        var generation: String?
    }

    /// Every item and every row of the copied tables, read in one transaction on `db`: one
    /// commit's state, whatever writers commit meanwhile (a WAL reader's snapshot). Rows
    /// with malformed columns are returned as damaged items.
    private static func snapshot(_ db: Database) throws -> (
        items: [StoredItem], malformed: [DamagedItem], rows: [BackupArchive.TableRow]
    ) {
        try db.readTransaction { db in try snapshotInTransaction(db) }
    }

    private static func snapshotInTransaction(_ db: Database) throws -> (
        items: [StoredItem], malformed: [DamagedItem], rows: [BackupArchive.TableRow]
    ) {
        var items: [StoredItem] = []
        var malformed: [DamagedItem] = []
        for r in try db.rows(
            "SELECT id, uuid, item_class, access_group, accessible, synchronizable, attributes, wrapped_key, secret, generation FROM items ORDER BY id"
        ) {
            switch KeychainStore.stored(r) {
            case .success(let row): items.append(StoredItem(row: row, generation: r[9].text))
            case .failure(let d): malformed.append(d)
            }
        }
        var rows: [BackupArchive.TableRow] = []
        for table in BackupArchive.tables {
            let columns = try tableColumns(table, db)
            for r in try db.rows("SELECT \(columns.joined(separator: ", ")) FROM \(table)") {
                rows.append(
                    BackupArchive.TableRow(
                        table: table, columns: Array(zip(columns, r)).map { ($0.0, $0.1) }))
            }
        }
        return (items, malformed, rows)
    }

    /// `rows` without the preferences that do not read (a value that does not decode, a
    /// domain or key that is not text: a restore would refuse them, and the whole backup with
    /// them), and those left out, by domain and key.
    private static func withoutDamagedValues(_ rows: [BackupArchive.TableRow]) -> (
        [BackupArchive.TableRow], [DamagedValue]
    ) {
        var kept: [BackupArchive.TableRow] = []
        var damaged: [DamagedValue] = []
        for row in rows {
            let domain = row.value("domain")?.text
            let key = row.value("key")?.text
            let reads =
                domain != nil && key != nil
                && row.value("value")?.blob.flatMap({ PreferencesStore.decode($0) }) != nil
            guard row.table == "preferences", !reads else {
                kept.append(row)
                continue
            }
            damaged.append(
                DamagedValue(domain: domain ?? "(unreadable)", key: key ?? "(unreadable)"))
        }
        return (kept, damaged)
    }

    /// The columns of `table`, in order (`PRAGMA table_info`).
    private static func tableColumns(_ table: String, _ db: Database) throws -> [String] {
        try db.rows("PRAGMA table_info(\(table))").compactMap { $0[1].text }
    }

    /// Writes a backup of the whole vault to `path` (absolute), encrypted to `recipients`
    /// (age v1: a passphrase through scrypt, or X25519 public keys): every item with its
    /// attributes, dates and generation, every preference, the app registrations and their
    /// generations, read in one read transaction while writers go on. Never caches nor
    /// `device.key`. ThisDeviceOnly items only with `includeDeviceBound`, their secrets then
    /// sealed by a key of this device's `device.key` (`KeyHierarchy.deviceBackupKey`). The
    /// plaintext is built in secure memory, encrypted here, and wiped; only the file leaves.
    /// Damaged items (`DamagedItem`) are left out, the rest written, and named in the
    /// summary and the log.
    /// Owner only. Throws PermissionDenied, InteractionNotAllowed (locked: nothing written),
    /// Param (a relative path, bad recipients), StorageFull.
    func backup(
        to path: String, recipients: [Age.Recipient], includeDeviceBound: Bool, caller: Caller
    ) throws -> BackupSummary {
        _ = try authorize(.backup, for: caller)
        // Every secret leaves the vault: the user confirms it (docs/access.md).
        try confirmOwnerAct(.backup, items: [], caller: caller)
        guard path.hasPrefix("/") else {
            throw VaultFailure.param("the backup's path must be absolute")
        }
        // Renamed over vault.sqlite or beside it, a backup would replace or crowd the live store.
        let directory = Self.canonicalPath((path as NSString).deletingLastPathComponent)
        guard directory != Self.canonicalPath(dataDirectory) else {
            throw VaultFailure.param(
                "a backup must not be written into vaultd's data directory (\(dataDirectory)): give a path elsewhere"
            )
        }
        // All of it or nothing: a backup without the locked classes' items would look whole.
        let (metadata, classKeys, deviceID, deviceBackupKey) = try withKeys {
            try keys.requireInitialized()
            guard keys.state == .unlocked else {
                throw VaultFailure(
                    .interactionNotAllowed,
                    "the vault is locked: unlock it to back it up (its items' keys are not in memory); nothing was written"
                )
            }
            var found: [Accessibility: SecureBytes] = [:]
            for a in Accessibility.allCases { found[a] = try? keys.classKey(a) }
            // The device key is needed only for ThisDeviceOnly items (refused while the TPM
            // cannot unseal it).
            return (
                try keys.metadataKeys().metadata, found, keys.deviceID,
                includeDeviceBound ? try keys.deviceBackupKey() : SecureBytes(count: 0)
            )
        }
        let (items, malformed, rows) = try read { try Self.snapshot($0) }
        var summary = BackupSummary()
        summary.damagedItems = malformed
        var archive = BackupArchive(header: [
            "format": JSON(BackupArchive.format), "created": .string(PlistDate.format(Date())),
            "vaultd": .string(VaultVersion.current),
            "device": .string(deviceID),
        ])
        for item in items {
            let r = item.row
            let ad = r.associatedData
            guard
                let attributes = Sodium.openBytes(r.attributes, key: metadata, associatedData: ad),
                (try? ItemAttributes(jsonObject: attributes)) != nil
            else {
                summary.damagedItems.append(DamagedItem(r, .attributes))
                continue
            }
            if r.accessible.isThisDeviceOnly && !includeDeviceBound {
                summary.leftOutItems += 1
                continue
            }
            guard let classKey = classKeys[r.accessible],
                let itemKey = Sodium.open(r.wrappedKey, key: classKey, associatedData: ad)
            else {
                // Only another device's ThisDeviceOnly item opens with no key here.
                guard r.accessible.isThisDeviceOnly else {
                    summary.damagedItems.append(DamagedItem(r, .secret))
                    continue
                }
                summary.leftOutItems += 1
                continue
            }
            guard let secret = Sodium.open(r.secret, key: itemKey, associatedData: ad) else {
                summary.damagedItems.append(DamagedItem(r, .secret))
                continue
            }
            var record = BackupArchive.ItemRecord(
                itemClass: r.itemClass, accessGroup: r.accessGroup, accessible: r.accessible,
                synchronizable: r.synchronizable,
                generation: item.generation, attributes: attributes, secret: secret,
                deviceBound: r.accessible.isThisDeviceOnly)
            if record.deviceBound {
                record.secret = SecureBytes(
                    copying: Sodium.seal(
                        secret, key: deviceBackupKey,
                        associatedData: Self.deviceBoundAssociatedData(record)))
                summary.deviceBoundItems += 1
            }
            summary.items += 1
            archive.items.append(record)
        }
        (archive.rows, summary.damagedValues) = Self.withoutDamagedValues(rows)
        let preferences = archive.rows.filter { $0.table == "preferences" }
        summary.preferences = preferences.count
        var domains = Set<ExactString>()
        for p in preferences {
            if let d = p.value("domain")?.text { domains.insert(ExactString(d)) }
        }
        summary.domains = domains.count
        summary.apps = archive.rows.filter { $0.table == "apps" }.count
        let file = try Age.encrypt(archive.serialized(), to: recipients)
        try FileSystem.writeAtomically(file, to: path)
        summary.bytes = file.count
        log(
            "backup written to \(path): \(summary.items) items (\(summary.deviceBoundItems) device-bound, \(summary.leftOutItems) ThisDeviceOnly left out), \(summary.preferences) preferences in \(summary.domains) domains, \(summary.apps) apps, \(file.count) bytes"
        )
        if !summary.damagedItems.isEmpty {
            log(
                "backup: \(summary.damagedItems.count) damaged item(s) left out: \(summary.damagedItems.prefix(16).map(\.description).joined(separator: "; "))"
            )
        }
        if !summary.damagedValues.isEmpty {
            log(
                "backup: \(summary.damagedValues.count) damaged preference value(s) left out: \(summary.damagedValues.prefix(16).map(\.description).joined(separator: "; "))"
            )
        }
        return summary
    }

    /// An archive's contents, checked before anything is written: item attributes parsed,
    /// preference values decoded and their domains and keys valid, app IDs valid, every row's
    /// columns known to this vaultd's tables. Throws BackupUnreadable.
    private func check(_ archive: BackupArchive) throws -> [ItemAttributes] {
        func bad(_ why: String) -> VaultFailure {
            VaultFailure(.backupUnreadable, "the backup holds \(why); nothing was changed")
        }
        let attributes = try archive.items.map { r -> ItemAttributes in
            guard var a = try? ItemAttributes(jsonObject: r.attributes) else {
                throw bad("an item whose attributes do not parse")
            }
            a.accessGroup = r.accessGroup
            a.accessible = r.accessible
            a.synchronizable = r.synchronizable
            return a
        }
        let known = try read { db in
            try Dictionary(
                uniqueKeysWithValues: BackupArchive.tables.map {
                    ($0, Set(try Self.tableColumns($0, db)))
                })
        }
        for row in archive.rows {
            for c in row.columns where !(known[row.table]?.contains(c.name) ?? false) {
                throw bad(
                    "a column \(row.table).\(c.name) this vaultd does not have (a backup of a newer vaultd?)"
                )
            }
            switch row.table {
            case "preferences":
                guard let d = row.value("domain")?.text, let k = row.value("key")?.text,
                    let v = row.value("value")?.blob,
                    (try? PreferencesStore.validate(domain: d)) != nil,
                    (try? PreferencesStore.validate(key: k)) != nil,
                    PreferencesStore.decode(v) != nil
                else { throw bad("a malformed preference") }
            case "apps":
                guard let id = row.value("app_id")?.text,
                    (try? AppRecord.validate(appID: id)) != nil,
                    row.value("generation")?.text != nil
                else {
                    throw bad("a malformed app registration")
                }
            default:
                guard row.value("generation")?.text != nil, row.value("app_id")?.text != nil else {
                    throw bad("a malformed app generation")
                }
            }
        }
        return attributes
    }

    /// Restores the backup at `path` (absolute). The whole file is opened (`identities`: its
    /// passphrase or X25519 keys), authenticated and checked (format, counts, every record)
    /// before anything changes; then everything is written in one transaction, so a failure
    /// or a crash leaves the vault as it was, or restored.
    ///
    /// Into an uninitialised vault (a new device), which is created with `newPassphrase`
    /// (nil: none); into an initialised one that holds no item, preference nor app; or with
    /// `merge` into one that does: per item (by primary key) and per preference key, the
    /// later modification date wins (a tie keeps the vault's); apps it lacks are added.
    /// Device-bound items open again where the same `device.key` sealed them; elsewhere they
    /// are stored NotAvailableOnThisDevice. Owner only. Throws PermissionDenied,
    /// BackupAuthFailed (wrong passphrase or key), BackupUnreadable (not a backup, altered,
    /// truncated, too large), NotEmpty, InteractionNotAllowed (locked), Param, StorageFull,
    /// DomainTooLarge (a merged domain over 4 MiB).
    func restore(
        from path: String, identities: [Age.Identity], newPassphrase: SecureBytes?, merge: Bool,
        caller: Caller
    ) throws -> RestoreSummary {
        _ = try authorize(.restore, for: caller)
        guard path.hasPrefix("/") else {
            throw VaultFailure.param("the backup's path must be absolute")
        }
        if let p = newPassphrase, p.count == 0 {
            throw VaultFailure.param("the new passphrase must not be empty")
        }
        let file = try FileSystem.readFile(path, limit: Self.maximumBackupSize)
        let payload: SecureBytes
        do {
            payload = try Age.decrypt(file, with: identities, maximumSize: Self.maximumBackupSize)
        } catch let f as Age.Failure {
            throw VaultFailure(
                f.kind == .noMatch ? .backupAuthFailed : .backupUnreadable,
                f.message + "; nothing was changed")
        }
        let archive = try BackupArchive.parse(payload)
        let attributes = try check(archive)
        let uninitialized = locked { keys.state == .uninitialized }
        if !uninitialized && newPassphrase != nil {
            throw VaultFailure.param(
                "the vault is initialised: a new passphrase is for a restore into a new vault only (vaultctl passphrase change changes this one's)"
            )
        }
        let kek =
            uninitialized
            ? try newPassphrase.map {
                try KeyHierarchy.PassphraseKEK(deriving: $0, cost: passphrasePolicy.kdfCost)
            } : nil
        let result: RestoreSummary = try inEventOrder { ticket in
            try exclusive { x in
                try writingKeys(in: x) { db in
                    var events: [VaultEvent] = []
                    if keys.state == .uninitialized {
                        try changingKeys { try keys.initialize(passphrase: kek, in: db) }
                    } else {
                        guard keys.state == .unlocked else {
                            throw VaultFailure(
                                .interactionNotAllowed,
                                "the vault is locked: unlock it to restore into it; nothing was changed"
                            )
                        }
                        if !merge,
                            let n = try db.row(
                                "SELECT (SELECT count(*) FROM items) + (SELECT count(*) FROM preferences) + (SELECT count(*) FROM apps)"
                            )?[0].int64,
                            n > 0
                        {
                            throw VaultFailure(
                                .notEmpty,
                                "the vault already holds items, preferences or apps: restore --merge merges into it; nothing was changed"
                            )
                        }
                    }
                    var summary = RestoreSummary()
                    var changed: [(String, String, PlistValue)] = []
                    try apply(
                        archive, attributes: attributes, merge: merge, into: &summary,
                        changedPreferences: &changed, in: db)
                    ticket.take()
                    summary.lock = keys.lockState
                    if uninitialized { events.append(.lockState(summary.lock)) }
                    events += changed.map {
                        .preference(domain: $0.0, key: $0.1, value: $0.2, sequence: ticket.sequence)
                    }
                    return (summary, events)
                }
            }
        }
        log(
            "restored the backup \(path): items \(result.items.added) added, \(result.items.replaced) replaced, \(result.items.kept) kept (\(result.unavailableItems) unavailable on this device); preferences \(result.preferences.added) added, \(result.preferences.replaced) replaced, \(result.preferences.kept) kept; apps \(result.apps.added) added, \(result.apps.kept) kept"
        )
        return result
    }

    /// Writes a checked archive in the caller's transaction (under the engine lock): apps and
    /// their generations first (the storage-quota triggers then count the items they own),
    /// then items, then preferences, counting what each did.
    private func apply(
        _ archive: BackupArchive, attributes: [ItemAttributes], merge: Bool,
        into summary: inout RestoreSummary,
        changedPreferences: inout [(String, String, PlistValue)], in db: Database
    ) throws {
        for row in archive.rows where row.table == "apps" {
            if try db.row("SELECT 1 FROM apps WHERE app_id = ?", [row.value("app_id")!]) != nil {
                summary.apps.kept += 1
                continue
            }
            try insert(row, in: db)
            summary.apps.added += 1
        }
        for row in archive.rows where row.table == "app_generations" {
            try insert(row, orIgnore: true, in: db)
        }

        let hasDeviceBound = archive.items.contains { $0.deviceBound }
        let (deviceID, deviceBackupKey) = try withKeys {
            (keys.deviceID, hasDeviceBound ? try keys.deviceBackupKey() : SecureBytes(count: 0))
        }
        for (record, a) in zip(archive.items, attributes) {
            var secret = record.secret
            var unavailable = false
            if record.deviceBound {
                if let opened = Sodium.open(
                    record.secret.withUnsafeBytes { Array($0) }, key: deviceBackupKey,
                    associatedData: Self.deviceBoundAssociatedData(record))
                {
                    secret = opened
                } else {
                    // Sealed by another device's key: stored so, NotAvailableOnThisDevice here.
                    guard let other = archive.deviceID, other != deviceID, other.utf8.count <= 64
                    else {
                        throw VaultFailure(
                            .backupUnreadable,
                            "a device-bound item of the backup does not open with this device's key, which sealed it; nothing was changed"
                        )
                    }
                    try changingKeys {
                        try keys.noteForeignDevice(record.accessible, deviceID: other, in: db)
                    }
                    secret = SecureBytes.random(count: 16)
                    unavailable = true
                    summary.unavailableItems += 1
                }
            }
            switch try keychain.restore(
                record.itemClass, attributes: a, secret: secret, generation: record.generation,
                merge: merge, unavailable: unavailable, in: db)
            {
            case .added: summary.items.added += 1
            case .replaced: summary.items.replaced += 1
            case .kept: summary.items.kept += 1
            }
        }

        var domains: [String] = []
        for row in archive.rows where row.table == "preferences" {
            let (domain, key, stored) = (
                row.value("domain")!.text!, row.value("key")!.text!, row.value("value")!.blob!
            )
            let theirs = row.value("modified")?.real ?? -Double.infinity
            if let existing = try db.row(
                "SELECT modified FROM preferences WHERE domain = ? AND key = ?",
                [.text(domain), .text(key)])
            {
                guard theirs > existing[0].real ?? -Double.infinity else {
                    summary.preferences.kept += 1
                    continue
                }
                summary.preferences.replaced += 1
            } else {
                summary.preferences.added += 1
            }
            // Checked with the whole archive before anything was written (`check`).
            guard let value = PreferencesStore.decode(stored) else {
                throw VaultFailure(
                    .backupUnreadable,
                    "a preference value that does not decode; nothing was changed")
            }
            try db.run(
                "INSERT OR REPLACE INTO preferences (domain, key, value, size, modified) VALUES (?, ?, ?, ?, ?)",
                [
                    .text(domain), .text(key), .blob(stored),
                    .integer(
                        Int64(PreferencesStore.entrySize(key: key, value: value, stored: stored))),
                    row.value("modified") ?? .null,
                ])
            changedPreferences.append((domain, key, value))
            if !domains.containsBytes(domain) { domains.append(domain) }
        }
        // A merge can grow a domain past its limit: refused whole, as an Import would be.
        for d in domains {
            let size = Int(
                try db.row(
                    "SELECT COALESCE(SUM(size), 0) FROM preferences WHERE domain = ?", [.text(d)])?[
                        0
                    ].int64 ?? 0)
            if size > PreferencesStore.maximumDomainSize {
                throw VaultFailure(
                    .domainTooLarge,
                    "domain '\(d)' would hold \(size) bytes after the restore; the limit is \(PreferencesStore.maximumDomainSize) bytes (4 MiB); nothing was changed",
                    .init(
                        limit: Int64(PreferencesStore.maximumDomainSize), size: Int64(size),
                        domain: d))
            }
        }
    }

    /// Inserts a copied table's row as it was (its columns were checked against the table).
    private func insert(_ row: BackupArchive.TableRow, orIgnore: Bool = false, in db: Database)
        throws
    {
        let names = row.columns.map(\.name)
        try db.run(
            "INSERT \(orIgnore ? "OR IGNORE " : "")INTO \(row.table) (\(names.joined(separator: ", "))) VALUES (\(Array(repeating: "?", count: names.count).joined(separator: ", ")))",
            row.columns.map(\.value))
    }
}
