import Foundation
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

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

    /// Passes each row of `sql` to `body` as SQLite steps to it, in the caller's read
    /// transaction: one row in memory at a time, whatever the table's size.
    private static func forEachRow(_ db: Database, _ sql: String, _ body: (Row) throws -> Void)
        throws
    {
        let s = try db.statement(sql)
        // Reset once done or failed: a statement left on a row keeps its snapshot open.
        defer { s.reset() }
        try s.bind([])
        while try s.step() { try body(s.row()) }
    }

    /// Passes every row of `items` to `body`, in `id` order. A row whose columns are
    /// malformed comes as a damaged item.
    private static func forEachItem(
        _ db: Database,
        _ body: (Result<KeychainStore.Candidates.Stored, DamagedItem>, _ generation: String?)
            throws -> Void
    ) throws {
        try forEachRow(
            db,
            "SELECT id, uuid, item_class, access_group, accessible, synchronizable, attributes, wrapped_key, secret, generation FROM items ORDER BY id"
        ) { r in try body(KeychainStore.stored(r), r[9].text) }
    }

    /// Passes every row of the copied `table` to `body`.
    private static func forEachRow(
        of table: String, _ db: Database, _ body: (BackupArchive.TableRow) throws -> Void
    ) throws {
        let columns = try tableColumns(table, db)
        try forEachRow(db, "SELECT \(columns.joined(separator: ", ")) FROM \(table)") { r in
            try body(
                BackupArchive.TableRow(table: table, columns: zip(columns, r).map { ($0, $1) }))
        }
    }

    /// Whether a preference row reads (a value that decodes, a domain and key that are text):
    /// a restore refuses one that does not, and would refuse the whole backup with it.
    private static func reads(preference row: BackupArchive.TableRow) -> Bool {
        row.value("domain")?.text != nil && row.value("key")?.text != nil
            && row.value("value")?.blob.flatMap({ PreferencesStore.decode($0) }) != nil
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
    /// sealed by a key of this device's `device.key` (`KeyHierarchy.deviceBackupKey`). Items
    /// and rows are read one at a time, each record encrypted as it is written (age's 64 KiB
    /// chunks): memory stays bounded whatever the vault's size, and
    /// only the encrypted file leaves, renamed into place once whole and synced.
    /// Damaged items (`DamagedItem`) are left out, the rest written, and named in the
    /// summary and the log.
    /// Owner only. Throws PermissionDenied, InteractionNotAllowed (locked: nothing written;
    /// or not confirmed), Param (a relative path, bad recipients), StorageFull.
    /// `process`: who asks, for the presence check (`requirePresenceForEveryItem`).
    func backup(
        to path: String, recipients: [Age.Recipient], includeDeviceBound: Bool, caller: Caller,
        process: RequestingProcess? = nil
    ) throws -> BackupSummary {
        _ = try authorize(.backup, for: caller)
        // Every secret leaves the vault: the user confirms it (docs/access.md), then, with a
        // presence-protected item among them, proves presence, as a read of that item would
        // ask (in this order, as at every secret release: docs/keychain.md).
        try confirmOwnerAct(.backup, items: [], caller: caller)
        try requirePresenceForEveryItem(caller: caller, process: process)
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
        let header: JSON = [
            "format": JSON(BackupArchive.format), "created": .string(PlistDate.format(Date())),
            "vaultd": .string(VaultVersion.current), "device": .string(deviceID),
        ]
        var summary = BackupSummary()
        // One read transaction: one commit's state, whatever writers commit meanwhile (a WAL
        // reader's snapshot), read a row at a time and streamed through age into the file.
        summary.bytes = try read { db in
            try db.readTransaction { db in
                try FileSystem.writeAtomically(to: path) { write in
                    let out = try BackupArchive.Writer(
                        Age.Writer(to: recipients, sink: write), header: header)
                    try Self.forEachItem(db) { stored, generation in
                        try Self.backUp(
                            stored, generation: generation, into: out, summary: &summary,
                            keys: (metadata, classKeys, deviceBackupKey),
                            includeDeviceBound: includeDeviceBound)
                    }
                    var domains = Set<ExactString>()
                    for table in BackupArchive.tables {
                        try Self.forEachRow(of: table, db) { row in
                            if table == "preferences" {
                                guard Self.reads(preference: row) else {
                                    summary.damagedValues.append(
                                        DamagedValue(
                                            domain: row.value("domain")?.text ?? "(unreadable)",
                                            key: row.value("key")?.text ?? "(unreadable)"))
                                    return
                                }
                                summary.preferences += 1
                                domains.insert(ExactString(row.value("domain")!.text!))
                            }
                            if table == "apps" { summary.apps += 1 }
                            try out.append(.row(row))
                        }
                    }
                    summary.domains = domains.count
                    try out.finish()
                }
            }
        }
        logger.notice(
            "backup written to \(path): \(summary.items) items (\(summary.deviceBoundItems) device-bound, \(summary.leftOutItems) ThisDeviceOnly left out), \(summary.preferences) preferences in \(summary.domains) domains, \(summary.apps) apps, \(summary.bytes) bytes"
        )
        if !summary.damagedItems.isEmpty {
            logger.warning(
                "backup: \(summary.damagedItems.count) damaged item(s) left out: \(summary.damagedItems.prefix(16).map(\.description).joined(separator: "; "))"
            )
        }
        if !summary.damagedValues.isEmpty {
            logger.warning(
                "backup: \(summary.damagedValues.count) damaged preference value(s) left out: \(summary.damagedValues.prefix(16).map(\.description).joined(separator: "; "))"
            )
        }
        return summary
    }

    /// Writes one stored item to a backup as its record, or counts it left out: damaged
    /// (attributes or secret that do not open), or ThisDeviceOnly without
    /// `includeDeviceBound` or another device's. A device-bound item's secret is sealed by
    /// `keys.device` (this device's backup key).
    private static func backUp(
        _ stored: Result<KeychainStore.Candidates.Stored, DamagedItem>, generation: String?,
        into out: BackupArchive.Writer, summary: inout BackupSummary,
        keys: (metadata: SecureBytes, classes: [Accessibility: SecureBytes], device: SecureBytes),
        includeDeviceBound: Bool
    ) throws {
        let r: KeychainStore.Candidates.Stored
        switch stored {
        case .success(let row): r = row
        case .failure(let d):
            summary.damagedItems.append(d)
            return
        }
        let ad = r.associatedData
        guard
            let attributes = Sodium.openBytes(r.attributes, key: keys.metadata, associatedData: ad),
            (try? ItemAttributes(jsonObject: attributes)) != nil
        else {
            summary.damagedItems.append(DamagedItem(r, .attributes))
            return
        }
        if r.accessible.isThisDeviceOnly && !includeDeviceBound {
            summary.leftOutItems += 1
            return
        }
        guard let classKey = keys.classes[r.accessible],
            let itemKey = Sodium.open(r.wrappedKey, key: classKey, associatedData: ad)
        else {
            // Only another device's ThisDeviceOnly item opens with no key here.
            if r.accessible.isThisDeviceOnly {
                summary.leftOutItems += 1
            } else {
                summary.damagedItems.append(DamagedItem(r, .secret))
            }
            return
        }
        guard let secret = Sodium.open(r.secret, key: itemKey, associatedData: ad) else {
            summary.damagedItems.append(DamagedItem(r, .secret))
            return
        }
        var record = BackupArchive.ItemRecord(
            itemClass: r.itemClass, accessGroup: r.accessGroup, accessible: r.accessible,
            synchronizable: r.synchronizable, generation: generation, attributes: attributes,
            secret: secret, deviceBound: r.accessible.isThisDeviceOnly)
        if record.deviceBound {
            record.secret = SecureBytes(
                copying: Sodium.seal(
                    secret, key: keys.device, associatedData: deviceBoundAssociatedData(record)))
            summary.deviceBoundItems += 1
        }
        summary.items += 1
        try out.append(.item(record))
    }

    /// Checks one record of an archive before it is written: an item's attributes parse; a
    /// row's columns are known to this vaultd's tables (`known`), a preference's value
    /// decodes and its domain and key are valid, an app's ID is valid. Returns an item's
    /// attributes. Throws BackupUnreadable.
    private static func check(_ record: BackupArchive.Record, known: [String: Set<String>]) throws
        -> ItemAttributes?
    {
        func bad(_ why: String) -> VaultFailure {
            VaultFailure(.backupUnreadable, "the backup holds \(why); nothing was changed")
        }
        let row: BackupArchive.TableRow
        switch record {
        case .item(let r):
            guard var a = try? ItemAttributes(jsonObject: r.attributes) else {
                throw bad("an item whose attributes do not parse")
            }
            a.accessGroup = r.accessGroup
            a.accessible = r.accessible
            a.synchronizable = r.synchronizable
            return a
        case .row(let r): row = r
        }
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
        return nil
    }

    /// What opens a backup: the identities given, or the file key a first reading found.
    private enum BackupKey {
        case identities([Age.Identity])
        case fileKey(SecureBytes)
    }

    /// What the first reading of a backup found.
    private struct Scan {
        /// The file key, to read the file again without its KDF.
        var fileKey: SecureBytes
        var deviceID: String?
        var hasDeviceBound = false
    }

    /// Reads the backup open at `fd` from its start, through age (with `identities`, or the
    /// file key a first reading found) and the archive's reader, and passes each record,
    /// checked, with an item's attributes to `body`. It returns once the whole file was
    /// authenticated and its end record matched; `body` may have been called before a
    /// failure further on. Throws BackupAuthFailed (no identity opens it), BackupUnreadable.
    private static func readBackup(
        _ fd: Int32, path: String, opening key: BackupKey,
        known: [String: Set<String>],
        _ body: (BackupArchive.Record, ItemAttributes?) throws -> Void
    ) throws -> Scan {
        do {
            try SystemCall.lseek(fd, 0, SEEK_SET)
        } catch {
            throw VaultFailure(
                .internalError, "cannot read \(path): \(String(cString: strerror(error.code)))")
        }
        let source: Age.Source = { try FileSystem.readSome(fd, into: $0, path: path) }
        do {
            let age: Age.Reader
            switch key {
            case .identities(let identities):
                age = try Age.Reader(
                    source: source, identities: identities, maximumSize: maximumBackupSize)
            case .fileKey(let fileKey):
                age = try Age.Reader(
                    source: source, fileKey: fileKey, maximumSize: maximumBackupSize)
            }
            let archive = try BackupArchive.Reader { try age.read(into: $0) }
            var scan = Scan(fileKey: age.fileKey, deviceID: archive.deviceID)
            while let record = try archive.next() {
                if case .item(let r) = record, r.deviceBound { scan.hasDeviceBound = true }
                try body(record, try check(record, known: known))
            }
            return scan
        } catch let f as Age.Failure {
            throw VaultFailure(
                f.kind == .noMatch ? .backupAuthFailed : .backupUnreadable,
                f.message + "; nothing was changed")
        }
    }

    /// Restores the backup at `path` (absolute). The whole file is read once, a chunk at a
    /// time (`identities`: its passphrase or X25519 keys), authenticated and checked (format,
    /// counts, every record, age's last chunk) before anything changes; then it is read again
    /// and written in one transaction, so a failure (the file changed between the readings
    /// included) or a crash leaves the vault as it was, or restored. Memory holds one chunk
    /// and one record at a time, whatever the file's size.
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
        // Open until the restore returns; its number goes to the readings' closures.
        let file = try FileSystem.openRegularFile(path, limit: Self.maximumBackupSize)
        let fd = file.rawValue
        let known = try read { db in
            try Dictionary(
                uniqueKeysWithValues: BackupArchive.tables.map {
                    ($0, Set(try Self.tableColumns($0, db)))
                })
        }
        // First reading: the whole file authenticated and every record checked, before the
        // engine lock is taken and anything changes; one record in memory at a time.
        let scan = try Self.readBackup(
            fd, path: path, opening: .identities(identities), known: known
        ) {
            _, _ in
        }
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
                        fd, path: path, scan: scan, known: known, merge: merge, into: &summary,
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
        logger.notice(
            "restored the backup \(path): items \(result.items.added) added, \(result.items.replaced) replaced, \(result.items.kept) kept (\(result.unavailableItems) unavailable on this device); preferences \(result.preferences.added) added, \(result.preferences.replaced) replaced, \(result.preferences.kept) kept; apps \(result.apps.added) added, \(result.apps.kept) kept"
        )
        return result
    }

    /// Writes the backup open at `fd` in the caller's transaction (under the engine lock),
    /// reading it a second time with the file key of the first (`scan`): each record as it
    /// comes, counting what each did. Anything that fails (the file changed since the first
    /// reading, a duplicate, a domain over its limit) throws, and the transaction with all it
    /// wrote is rolled back. Items may come before the apps that own their generations (the
    /// archive's order), so each app's usage (`app_usage`) is counted again at the end.
    private func apply(
        _ fd: Int32, path: String, scan: Scan, known: [String: Set<String>], merge: Bool,
        into summary: inout RestoreSummary,
        changedPreferences: inout [(String, String, PlistValue)], in db: Database
    ) throws {
        let (deviceID, deviceBackupKey) = try withKeys {
            (
                keys.deviceID,
                scan.hasDeviceBound ? try keys.deviceBackupKey() : SecureBytes(count: 0)
            )
        }
        var domains: [String] = []
        _ = try Self.readBackup(fd, path: path, opening: .fileKey(scan.fileKey), known: known) {
            record, attributes in
            switch record {
            case .item(let r):
                try restore(
                    r, attributes: attributes!, merge: merge, foreignDevice: scan.deviceID,
                    device: (deviceID, deviceBackupKey), into: &summary, in: db)
            case .row(let row) where row.table == "apps":
                if try db.row("SELECT 1 FROM apps WHERE app_id = ?", [row.value("app_id")!]) != nil
                {
                    summary.apps.kept += 1
                } else {
                    try insert(row, in: db)
                    summary.apps.added += 1
                }
            case .row(let row) where row.table == "app_generations":
                try insert(row, orIgnore: true, in: db)
            case .row(let row):
                guard
                    let (domain, key, value) = try restore(
                        preference: row, into: &summary, in: db)
                else { return }
                changedPreferences.append((domain, key, value))
                if !domains.containsBytes(domain) { domains.append(domain) }
            }
        }
        try db.run("DELETE FROM app_usage")
        try db.run(
            """
            INSERT INTO app_usage (app_id, bytes)
              SELECT g.app_id, SUM(length(i.attributes) + length(i.wrapped_key) + length(i.secret))
              FROM items i JOIN app_generations g ON g.generation = i.generation GROUP BY g.app_id
            """)
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

    /// Restores one item record (checked, with its `attributes`). A device-bound one opens
    /// with this device's backup key; sealed by another device's (`foreignDevice`, the
    /// backup's), it is stored NotAvailableOnThisDevice.
    private func restore(
        _ record: BackupArchive.ItemRecord, attributes a: ItemAttributes, merge: Bool,
        foreignDevice: String?, device: (id: String, backupKey: SecureBytes),
        into summary: inout RestoreSummary, in db: Database
    ) throws {
        var secret = record.secret
        var unavailable = false
        if record.deviceBound {
            if let opened = Sodium.open(
                record.secret.withUnsafeBytes { Array($0) }, key: device.backupKey,
                associatedData: Self.deviceBoundAssociatedData(record))
            {
                secret = opened
            } else {
                // Sealed by another device's key: stored so, NotAvailableOnThisDevice here.
                guard let other = foreignDevice, other != device.id, other.utf8.count <= 64 else {
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

    /// Restores one preference row (checked): the later modification date wins, a tie keeps
    /// the vault's. Returns its domain, key and value when it was written.
    private func restore(
        preference row: BackupArchive.TableRow, into summary: inout RestoreSummary,
        in db: Database
    ) throws -> (String, String, PlistValue)? {
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
                return nil
            }
            summary.preferences.replaced += 1
        } else {
            summary.preferences.added += 1
        }
        // Checked as it was read (`check`).
        guard let value = PreferencesStore.decode(stored) else {
            throw VaultFailure(
                .backupUnreadable, "a preference value that does not decode; nothing was changed")
        }
        try db.run(
            "INSERT OR REPLACE INTO preferences (domain, key, value, size, modified) VALUES (?, ?, ?, ?, ?)",
            [
                .text(domain), .text(key), .blob(stored),
                .integer(Int64(PreferencesStore.entrySize(key: key, value: value, stored: stored))),
                row.value("modified") ?? .null,
            ])
        return (domain, key, value)
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
