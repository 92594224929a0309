import Foundation
import VaultProtocol

/// Acknowledgements: what each member has merged of each device (`SyncAck`), read from the
/// members' files and written for this device; what compaction and rollback go by.
extension SyncService {
    /// The sequence up to which every segment of `d` from its latest snapshot on is merged here.
    func contiguous(_ d: SyncDeviceID) -> UInt64 {
        guard let done = applied[d] else { return 0 }
        var n = max(floor[d] ?? 1, 1)
        guard done.contains(n) else { return 0 }
        while done.contains(n + 1) { n += 1 }
        return n
    }

    /// Takes in each member's acknowledgement file (signed by it; the largest value seen of
    /// each device kept, so an older file put back changes nothing).
    func readAcks(_ listing: [SyncDeviceID: SyncFolder.Entry], _ folder: SyncFolder) {
        for d in listing.keys where membership.isMember(d) {
            guard
                let f = folder.readSmallFile(
                    device: d, name: SyncAck.name, limit: SyncAck.maximumBytes),
                let a = SyncAck.parse(f, device: d, verifyKey: membership.members[d]!.signKey)
            else { continue }
            for (x, n) in a { acks[d, default: [:]][x] = max(acks[d]?[x] ?? 0, n) }
        }
    }

    /// Writes this device's acknowledgement when it changed. A value never goes down (as
    /// readers keep the largest): what this device once merged of a device stays
    /// acknowledged when the folder later holds less of it, which is how a rollback is told
    /// (`SyncRollback`), by this device and by any that reads its ack anew.
    func writeAck(
        _ listing: [SyncDeviceID: SyncFolder.Entry], config: SyncConfig, folder: SyncFolder
    ) throws {
        var mine: [SyncDeviceID: UInt64] = [:]
        for d in Set(listing.keys).union(applied.keys) where membership.members[d] != nil {
            let n = max(contiguous(d), acks[config.device]?[d] ?? 0)
            if n > 0 { mine[d] = n }
        }
        guard mine != ackWritten, let sign = try vault.syncSecret("signSecret") else { return }
        try folder.writeFile(
            SyncAck.file(mine, device: config.device, signingKey: sign), device: config.device,
            name: SyncAck.name)
        ackWritten = mine
        acks[config.device] = mine
    }
}
