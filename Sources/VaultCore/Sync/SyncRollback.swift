import Foundation

/// A member whose segments in the folder stop short of what a member acknowledged having
/// merged of it (docs/sync.md, rollback): its latest segments were withheld, or its directory
/// was put back to an older copy (or the engine has not carried them here yet).
public struct SyncRollback: Sendable, Equatable {
    public var device: SyncDeviceID
    /// The largest sequence of it a member's acknowledgement names, and that member.
    public var acknowledged: UInt64
    public var acknowledgedBy: SyncDeviceID
    /// The largest sequence of it the folder holds that was not refused (0: none).
    public var present: UInt64

    /// The members whose latest segment in the folder is older than what a member (this
    /// device included) acknowledged of it. `acks`: each member's largest acknowledgement
    /// of each device (signed, read from its `ack` file, or this device's own); `present`:
    /// each device's largest segment in the folder, not refused. The acknowledging member
    /// named is another device when one acknowledged as much as the device itself (its own
    /// ack is in the directory that was rolled back), then the smallest ID. At most
    /// `SyncService.maximumDevices`, by device ID. Pure: any sequence read from the folder
    /// is only compared.
    static func find(
        members: Set<SyncDeviceID>, acks: [SyncDeviceID: [SyncDeviceID: UInt64]],
        present: [SyncDeviceID: UInt64]
    ) -> [SyncRollback] {
        var out: [SyncRollback] = []
        for d in members.sorted() {
            var best: (UInt64, SyncDeviceID)?
            let order = acks.keys.filter(members.contains).sorted { x, y in
                (x == d) == (y == d) ? x < y : y == d
            }
            for by in order {
                let acked = acks[by]!
                guard let n = acked[d], n > (best?.0 ?? 0) else { continue }
                best = (n, by)
            }
            guard let (n, by) = best, n > present[d] ?? 0 else { continue }
            out.append(
                SyncRollback(
                    device: d, acknowledged: n, acknowledgedBy: by, present: present[d] ?? 0))
            if out.count == SyncService.maximumDevices { break }
        }
        return out
    }
}

extension SyncService {
    /// The members rolled back or withheld in `listing` (`SyncRollback.find`), from the
    /// acknowledgements read so far. Under `lock`.
    func rollbacks(_ listing: [SyncDeviceID: SyncFolder.Entry], me: SyncDeviceID)
        -> [SyncRollback]
    {
        var present: [SyncDeviceID: UInt64] = [:]
        for (d, entry) in listing {
            present[d] = entry.segments.keys.filter { rejected[d]?[$0] == nil }.max()
        }
        let members = Set(membership.members.keys.filter(membership.isMember)).union([me])
        return SyncRollback.find(members: members, acks: acks, present: present)
    }

    /// Logs the rollbacks a pass found, each once (again when what was acknowledged grows);
    /// the pass goes on: the rest of the group syncs.
    func logRollbacks(_ found: [SyncRollback]) {
        for r in found where rollbacksLogged[r.device] != r.acknowledged {
            logger.warning(
                "sync: device \(r.device)'s segments in the folder end at \(r.present), but device \(r.acknowledgedBy) acknowledged \(r.acknowledged): they were withheld or rolled back (or have not arrived yet); what was merged here stays"
            )
            rollbacksLogged[r.device] = r.acknowledged
        }
        let now = Set(found.map(\.device))
        for d in rollbacksLogged.keys where !now.contains(d) {
            logger.notice(
                "sync: device \(d)'s segments in the folder reach what was acknowledged again")
            rollbacksLogged[d] = nil
        }
    }
}
