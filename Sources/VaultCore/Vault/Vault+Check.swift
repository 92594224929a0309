import Foundation
import VaultProtocol

/// What `Vault.checkStore` found.
public struct StoreCheck: Sendable {
    /// SQLite's `PRAGMA integrity_check` lines, at most `Vault.integrityCheckLines`:
    /// ["ok"] when the file is sound.
    public var integrity: [String] = []
    /// Item rows read.
    public var items = 0
    /// Items whose secret was not checked: their class key is not in memory, or is another
    /// device's (NotAvailableOnThisDevice).
    public var secretsUnchecked = 0
    public var damaged: [DamagedItem] = []
    /// Preference values read.
    public var preferences = 0
    /// Preference values that do not decode (`DamagedValue`), at most
    /// `VaultFailure.maximumDamagedItems`.
    public var damagedValues: [DamagedValue] = []
    /// Rows set aside when the primary key's uniqueness was added (`items_set_aside`).
    public var setAside = 0

    public var isSound: Bool { integrity == ["ok"] && damaged.isEmpty && damagedValues.isEmpty }
}

extension Vault {
    /// The most lines of `PRAGMA integrity_check` a check reports (SQLite's own default).
    public static let integrityCheckLines = 100

    /// Checks the store (`vaultctl doctor`): SQLite's integrity check of the whole file, and
    /// every item's row, attributes (with the metadata key: before the first unlock none is
    /// in memory, so only the rows are checked) and secret (for each class whose key is in
    /// memory), and every preference value, read in one snapshot on a reader while writers go
    /// on. Names damaged items by their clear columns, damaged values by domain and key,
    /// never anything they hold. Owner only. Throws
    /// PermissionDenied, StoreDamaged (SQLite cannot read the file at all).
    func checkStore(caller: Caller) throws -> StoreCheck {
        _ = try authorize(.checkStore, for: caller)
        let metadata = withKeys { try? keychain.metadataKeys().metadata }
        var classKeys: [Accessibility: SecureBytes] = [:]
        var foreign: Set<Accessibility> = []
        withKeys {
            for a in Accessibility.allCases {
                classKeys[a] = try? keys.classKey(a)
                if keys.isForeign(a) { foreign.insert(a) }
            }
        }
        return try read { db in
            try db.readTransaction { db in
                var check = StoreCheck()
                // Bounded: a badly damaged file would list every page.
                check.integrity = try db.rows("PRAGMA integrity_check(\(Self.integrityCheckLines))")
                    .compactMap { $0[0].text }
                let s = try db.statement(
                    "SELECT id, uuid, item_class, access_group, accessible, synchronizable, attributes, wrapped_key, secret FROM items ORDER BY id"
                )
                defer { s.reset() }
                while try s.step() {
                    check.items += 1
                    let r: KeychainStore.Candidates.Stored
                    switch KeychainStore.stored(s.row()) {
                    case .failure(let d):
                        check.damaged.append(d)
                        continue
                    case .success(let row): r = row
                    }
                    let ad = r.associatedData
                    if let metadata {
                        guard
                            let plain = Sodium.openBytes(
                                r.attributes, key: metadata, associatedData: ad),
                            (try? ItemAttributes(jsonObject: plain)) != nil
                        else {
                            check.damaged.append(DamagedItem(r, .attributes))
                            continue
                        }
                    }
                    guard let classKey = classKeys[r.accessible] else {
                        check.secretsUnchecked += 1
                        continue
                    }
                    if KeychainStore.openSecret(of: r, classKey: classKey) == nil {
                        // Another device's item (a moved data directory) never opens here: not damaged.
                        if foreign.contains(r.accessible)
                            && Sodium.open(r.wrappedKey, key: classKey, associatedData: ad) == nil
                        {
                            check.secretsUnchecked += 1
                        } else {
                            check.damaged.append(DamagedItem(r, .secret))
                        }
                    }
                }
                check.setAside = Int(
                    try db.row("SELECT count(*) FROM items_set_aside")?[0].int64 ?? 0)
                let values = try preferences.damagedValues(in: db)
                check.preferences = values.checked
                check.damagedValues = Array(values.damaged.prefix(VaultFailure.maximumDamagedItems))
                return check
            }
        }
    }
}
