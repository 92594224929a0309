import Foundation
import VaultProtocol

/// Compaction: this device's segments replaced by one snapshot once every member has them.
extension SyncService {
    /// Replaces this device's segments by one snapshot once it has `compactionThreshold` of
    /// them and every other member has acknowledged them all (so every record in them, a key
    /// rotation's included, has reached every member): the snapshot holds this device's
    /// member and removal records and `SyncCompaction.snapshot` of its changes, deletions
    /// every device has merged left out when nothing they cover is left in the folder. The
    /// merge is the same after it; the older segments are then deleted.
    func compactIfDue(config: SyncConfig, folder: SyncFolder) throws {
        let me = config.device
        let mine = (applied[me] ?? []).filter { $0 >= (floor[me] ?? 0) }
        guard mine.count >= compactionThreshold, let last = mine.max() else { return }
        // Not before the segments since the last snapshot are as large as it: rewriting
        // everything then costs each change a constant share, however large the vault.
        // Only segments this device wrote and read back count (each within the segment bound,
        // so the sum cannot overflow); a file anyone put in its directory has any size.
        let sizes = ((try? folder.list(preferring: [me])[me]?.segments) ?? [:]).filter {
            mine.contains($0.key)
        }
        let snapshotBytes = floor[me].flatMap { sizes[$0] } ?? 0
        guard sizes.filter({ $0.key > (floor[me] ?? 0) }).values.reduce(0, +) >= snapshotBytes
        else { return }
        let others = membership.currentMembers.map(\.device).filter { $0 != me }
        guard others.allSatisfy({ (acks[$0]?[me] ?? 0) >= last }) else { return }
        // Deletions may go once every change of every device that could predate them is merged
        // here: each member's up to its own acknowledgement (which followed its reading them),
        // each removed device's up to its cutoff.
        let drop =
            others.allSatisfy { contiguous($0) >= (acks[$0]?[$0] ?? 0) }
            && membership.removed.allSatisfy { d, cutoff in
                applied[d] == nil || contiguous(d) >= cutoff
            }
        let own = perDevice[me] ?? SyncVault()
        let rest = perDevice.filter { $0.key != me }.map(\.value)
        let snapshot = SyncCompaction.snapshot(
            own: own, others: rest, dropTombstones: drop, now: HybridClock.now())
        let changes = snapshot.changes
        guard
            changes.reduce(0, { $0 + SyncBaseline.estimatedSize($1) }) < SyncSegment
                .maximumFileBytes / 2, changes.count < SyncSegment.maximumChanges / 2
        else { return }
        let control = (controlOf[me] ?? []).filter {
            switch $0 {
            case .member, .remove: true
            case .rotate, .share, .snapshot: false
            }
        }
        let seq = nextSequence
        try writeSegment(
            SyncSegment(device: me, sequence: 0, control: control + [.snapshot], changes: changes),
            folder: folder)
        for n in mine where n < seq { folder.removeFile(device: me, name: SyncSegment.fileName(n)) }
        floor[me] = seq
        applied[me] = [seq]
        perDevice[me] = snapshot
        controlOf[me] = control
        rebuildMerged()
        logger.info(
            "sync: compacted \(mine.count) segments into snapshot \(SyncSegment.fileName(seq)) (\(changes.count) records)"
        )
    }
}
