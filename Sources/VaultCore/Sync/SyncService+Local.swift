import Foundation
import VaultProtocol

/// Steps 2 and 3 of a pass: this keychain's changes since the last pass, found against the
/// baseline, and the keychain brought to the merged state.
extension SyncService {
    /// What steps 2 and 3 of a pass decided: the changes to export, the changes to this
    /// keychain and its baseline, the items held for a damaged row, and the rows read.
    struct LocalReconciliation {
        /// The local rows read, by row id (the next pass's cache).
        var rows: [Int64: LocalSyncRow]
        /// Keys held as they are, for a damaged row (looked at again by the next pass).
        var held = Set<SyncItemKey>()
        /// Changes made here, for this device's next segments (applied to `merged` already).
        var exported: [SyncChange] = []
        /// Changes to this keychain the merge asks for.
        var changes: [SyncLocalChange] = []
        /// Baseline entries to write (keyed hash, encoded merged item; nil: remove it).
        var baseline: [([UInt8], [UInt8]?)] = []
    }

    /// The damaged rows of this keychain a pass met, as the items they hold. A damaged row
    /// holds its item: the pass cannot read it, so it neither exports it (its absence is no
    /// deletion) nor writes the group's copy over it (a put would meet its primary key).
    /// Known by its primary key's hash; a row whose hash does not read could be any item
    /// absent here, so while one is there no item absent here is touched.
    private struct Damage {
        var any: Bool
        var keys: Set<[UInt8]>
        var unplaced: Bool

        init(_ damaged: [DamagedSyncRow]) {
            any = !damaged.isEmpty
            keys = Set(damaged.compactMap(\.primaryKeyHash))
            unplaced = damaged.contains { $0.primaryKeyHash == nil }
        }
    }

    /// Steps 2 and 3 of a pass: what changed here since the last pass, against the baseline,
    /// becomes changes to export (applied to `merged`), and each item looked at is brought to
    /// the merged state. Every item after a failed pass or at start; else those changed since
    /// the last pass: by the merge (`touched`), or here (a row written, or gone).
    func reconcileLocal(touched: Set<SyncItemKey>, wasValid: Bool) throws
        -> LocalReconciliation
    {
        let (rows, changedRows, damaged) = try vault.syncLocalItems(
            reusing: wasValid ? localCache : [:])
        var local: [SyncItemKey: LocalSyncItem] = [:]
        for r in rows.values { local[r.key] = r.item }
        let hashKey = try vault.syncHashKey()
        reportDamaged(damaged)
        let damage = Damage(damaged)
        var out = LocalReconciliation(rows: rows)
        var keys: Set<SyncItemKey>
        if wasValid {
            keys = touched.union(writtenByLastPass).union(heldByLastPass)
            for id in changedRows { keys.insert(rows[id]!.key) }
            for (id, r) in localCache where rows[id]?.uuid != r.uuid { keys.insert(r.key) }
        } else {
            keys = Set(local.keys).union(merged.items.keys)
        }
        let hashes = Dictionary(
            uniqueKeysWithValues: keys.map { ($0, SyncBaseline.keyHash($0, hashKey)) })
        let baseline = try vault.syncBaseline(wasValid ? Array(hashes.values) : nil)
        for key in keys {
            let h = hashes[key]!
            reconcile(
                key, hash: h, local: local[key], baseline: baseline[h], hashKey: hashKey,
                damage: damage, into: &out)
        }
        // Entries of items neither here nor in the merge (a full pass sees every key).
        if !wasValid {
            let seen = Set(hashes.values)
            for h in baseline.keys where !seen.contains(h) { out.baseline.append((h, nil)) }
        }
        return out
    }

    /// One item of steps 2 and 3: held when a damaged row may hold it; else its change here
    /// exported (and merged), and the local keychain and the baseline brought to the merge.
    private func reconcile(
        _ key: SyncItemKey, hash h: [UInt8], local item: LocalSyncItem?, baseline raw: [UInt8]?,
        hashKey: SecureBytes, damage: Damage, into out: inout LocalReconciliation
    ) {
        if damage.any {
            let isDamaged = damage.keys.contains(Vault.syncPrimaryKeyHash(key, index: hashKey))
            if isDamaged || (damage.unplaced && item == nil) {
                out.held.insert(key)
                // What the baseline said of it goes: once the damaged row is deleted here,
                // the item is absent with no baseline, and the group's copy comes back
                // (a deletion here would take it from every device).
                if isDamaged, raw != nil { out.baseline.append((h, nil)) }
                return
            }
        }
        let mine = item?.fields
        if let change = localChange(key, mine: mine, baseline: raw, hashKey: hashKey) {
            out.exported.append(change)
            merged.apply(change)
        }
        // 3. The local keychain brought to the merged item.
        let target = merged.items[key]?.live
        if target != mine {
            if let target {
                do {
                    _ = try Vault.syncItem(key, target)
                    out.changes.append(.put(key, target, replacing: item?.id))
                } catch {
                    // Not storable here (a peer's malformed fields): left as it is, unsynced.
                    if rejectionsLogged < Self.maximumLoggedRejections {
                        logger.warning("sync: an item of the group cannot be stored here: \(error)")
                    }
                    rejectionsLogged += 1
                    return
                }
            } else if let id = item?.id {
                out.changes.append(.delete(id))
            }
        }
        let after =
            target == nil ? nil : merged.items[key].map { SyncBaseline.encode($0, hashKey) }
        if after != raw { out.baseline.append((h, after)) }
    }

    /// Step 2 for one item: the change made here since the last pass, from this keychain's
    /// fields (`mine`) and the baseline's entry (`raw`, what the last pass left), or nil.
    private func localChange(
        _ key: SyncItemKey, mine: [SyncField: SyncValue]?, baseline raw: [UInt8]?,
        hashKey: SecureBytes
    ) -> SyncChange? {
        // A write made here knows what this keychain held: the merge as of the last pass
        // (its baseline), not what this pass has just read (docs/sync.md, conflicts).
        func write(_ fields: [SyncField: SyncValue?]) -> SyncChange {
            let t = clock!.tick()
            var context = raw.map(SyncBaseline.parseSeen) ?? [:]
            context[t.device] = t
            return SyncChange(key: key, timestamp: t, kind: .write(fields), context: context)
        }
        switch (mine, raw.map(SyncBaseline.parse)) {
        case (nil, _?):
            // Deleted here since the last pass.
            guard merged.items[key]?.live != nil else { return nil }
            return SyncChange(key: key, timestamp: clock!.tick(), kind: .delete)
        case (let m?, nil):
            // Added here (or present before this device joined).
            return merged.items[key]?.live != m ? write(Self.allFields(m)) : nil
        case (let m?, let b?)
        where merged.items[key] == nil
            && b.values.contains(where: { membership.removed[$0.timestamp.device] == nil }):
            // Synced before, but no segment of the folder holds any of its history (the
            // folder was emptied or replaced, its segments lost): only a deletion deletes,
            // so the item is written again whole, not taken for deleted.
            return write(Self.allFields(m))
        case (let m?, let b?):
            let changed = changedFields(m, baseline: b, state: merged.items[key], hashKey: hashKey)
            return changed.isEmpty ? nil : write(changed)
        case (nil, nil):
            return nil
        }
    }

    /// Every field of an item, as a write that sets each (nil: the field is absent).
    private static func allFields(_ m: [SyncField: SyncValue]) -> [SyncField: SyncValue?] {
        var all: [SyncField: SyncValue?] = [:]
        for f in SyncField.allCases { all[f] = .some(m[f]) }
        return all
    }

    /// The fields of an item synced before to write again: those changed here since the last
    /// pass (their hash differs from the baseline's), and those unchanged whose write is in
    /// no segment any more (the folder lost it) with nothing later, a deletion included,
    /// covering it in `state`. A write of a removed device is not written again: it may be
    /// one made after its cutoff.
    private func changedFields(
        _ m: [SyncField: SyncValue], baseline b: [SyncField: SyncBaseline.Field],
        state: SyncItemState?, hashKey: SecureBytes
    ) -> [SyncField: SyncValue?] {
        var changed: [SyncField: SyncValue?] = [:]
        for f in SyncField.allCases {
            let was = b[f]
            if SyncBaseline.fieldHash(f, m[f], hashKey) != was?.hash ?? nil {
                changed[f] = .some(m[f])
            } else if let was {
                let covered = [state?.fields[f]?.timestamp, state?.tombstone].compactMap {
                    $0
                }.max()
                if !(covered.map { was.timestamp <= $0 } ?? false),
                    membership.removed[was.timestamp.device] == nil
                {
                    changed[f] = .some(m[f])
                }
            }
        }
        return changed
    }

    /// Keeps the damaged rows a pass met for `status`, and logs them when they differ from
    /// the last pass's (once, not at every pass).
    private func reportDamaged(_ damaged: [DamagedSyncRow]) {
        if damaged != damagedRows {
            if damaged.isEmpty {
                logger.notice("sync: no damaged item is held any more")
            } else {
                let named = damaged.prefix(4).map(\.item.description).joined(separator: "; ")
                logger.warning(
                    "sync: \(damaged.count) damaged item(s) of this keychain not synced, held as they are (the others sync): \(named)\(damaged.count > 4 ? " and \(damaged.count - 4) more" : ""); `vaultctl doctor` lists them, and deleting one here takes the group's copy back"
                )
            }
        }
        damagedRows = damaged
    }
}
