import Synchronization
import VaultProtocol

/// How much each app may store, so that one app cannot fill the disk for all.
///
/// What counts against an app: the keychain items it added (the rows whose install
/// generation is one of the app's, `app_generations`), at the bytes they take in the store
/// (encrypted attributes, wrapped item key and encrypted secret), wherever they are (its
/// own groups or a shared app group: an item counts against the app that wrote it, as
/// disk space counts against a file's owner, so no member of a shared group can use up
/// another's quota), for as long as they exist, whoever updates them later; and its own
/// preferences domain (the sizes the 4 MiB domain limit counts). Items the owner's tools
/// add count against no app; the owner is not limited. App-group suites are bounded by
/// the domain limit alone.
///
/// The items' bytes per app are kept in the store (`app_usage`), maintained by triggers on
/// `items` in the same transaction as each change (every path that adds, changes or
/// deletes rows, and a rollback, keeps it exact), so a check reads one row and sums one
/// domain, never scans the app's items.
public final class StorageQuota: Sendable {
    /// Bytes each app may store (0: no limit). 64 MiB unless vaultd's config sets
    /// `AppStorageQuotaBytes`.
    private let limit = Atomic<Int64>(StorageQuota.defaultBytes)

    /// The default quota: 64 MiB per app.
    public static let defaultBytes: Int64 = 64 << 20

    public init() {}

    /// Bytes each app may store (0: no limit); set at start and at a settings reload.
    public var bytesPerApp: Int64 {
        get { limit.load(ordering: .relaxed) }
        set { limit.store(max(0, newValue), ordering: .relaxed) }
    }

    /// What `appID` stores now: its items' bytes and its own domain's.
    static func usage(of appID: String, in db: Database) throws -> (items: Int64, domain: Int64) {
        let r = try db.row(
            """
            SELECT COALESCE((SELECT bytes FROM app_usage WHERE app_id = ?1), 0),
                   COALESCE((SELECT SUM(size) FROM preferences WHERE domain = ?1), 0)
            """, [.text(appID)])
        return (r?[0].int64 ?? 0, r?[1].int64 ?? 0)
    }

    /// The app an install generation belongs to.
    static func app(ofGeneration generation: String, in db: Database) throws -> String? {
        try db.row("SELECT app_id FROM app_generations WHERE generation = ?", [.text(generation)])?[
            0
        ].text
    }

    /// QuotaExceeded for `appID`, which would store `total` bytes.
    func exceeded(_ appID: String, total: Int64) -> VaultFailure {
        let limit = bytesPerApp
        return VaultFailure(
            .quotaExceeded,
            "app \(appID) would store \(total) bytes in items and preferences; its quota is \(limit) bytes (\(limit >> 20) MiB, AppStorageQuotaBytes); nothing was written: delete some of its items or preferences",
            .init(limit: Int64(limit), size: Int64(total), appID: appID))
    }

    /// Throws QuotaExceeded when the app of `generation` would pass its quota with
    /// `adding` more bytes of items. (A generation of no app, nil: no limit.)
    func checkItems(generation: String?, adding: Int64, in db: Database) throws {
        let limit = bytesPerApp
        guard limit > 0, adding > 0, let generation,
            let app = try Self.app(ofGeneration: generation, in: db)
        else { return }
        let (items, domain) = try Self.usage(of: app, in: db)
        if items + domain + adding > limit { throw exceeded(app, total: items + domain + adding) }
    }

    /// The bytes of items of each app that wrote one of the rows `ids` (as `app_usage` holds them).
    /// One indexed lookup per row (the rows an update changes, usually one), through the
    /// primary keys of `items`, `app_generations` and `app_usage`, so an update pays for the
    /// rows it changes, not for every app's usage: an owner's row, with no generation, costs
    /// one probe.
    static func itemBytes(ofAppsWriting ids: [Int64], in db: Database) throws -> [String: Int64] {
        var result: [String: Int64] = [:]
        for id in ids {
            guard
                let r = try db.row(
                    """
                    SELECT u.app_id, u.bytes FROM items i
                      JOIN app_generations g ON g.generation = i.generation
                      JOIN app_usage u ON u.app_id = g.app_id
                    WHERE i.id = ?
                    """, [.integer(id)]),
                let app = r[0].text
            else { continue }
            result[app] = r[1].int64 ?? 0
        }
        return result
    }

    /// Throws QuotaExceeded when a change grew an app's items (`before` → `after`, as
    /// `itemBytes`) past its quota. Shrinking, or staying the same, is always allowed.
    func checkGrowth(before: [String: Int64], after: [String: Int64], in db: Database) throws {
        let limit = bytesPerApp
        guard limit > 0 else { return }
        for (app, bytes) in after where bytes > before[app, default: 0] {
            let domain = try Self.usage(of: app, in: db).domain
            if bytes + domain > limit { throw exceeded(app, total: bytes + domain) }
        }
    }

    /// The bytes `appID`'s own preferences domain may hold within its quota (nil: no limit).
    func domainRoom(for appID: String, in db: Database) throws -> Int64? {
        let limit = bytesPerApp
        guard limit > 0 else { return nil }
        return limit - (try Self.usage(of: appID, in: db).items)
    }
}
