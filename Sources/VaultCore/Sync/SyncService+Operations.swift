import Foundation
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// The owner's operations on the sync group (`vaultctl sync`): making it, joining, approving
/// and removing a device, the status, leaving. Each is authorized for the session, then runs
/// under `lock`.
extension SyncService {
    /// Makes a new sync group in `folder` (an existing directory): its group key, this
    /// device's ID and directory. Throws Param (not a directory, already a sync group's
    /// folder, this device already syncing), the lock errors (before the first unlock).
    public func initialize(folder: String, in session: VaultSession) throws -> SyncEnrolment {
        try vault.authorizeSync(.syncInit, session: session)
        return try lock.withLock {
            let folder = try folderToEnrolIn(folder)
            if let found = try? SyncFolder(root: folder).scan(),
                !found.devices.isEmpty || found.ignored > 0
            {
                throw VaultFailure.param(
                    "\(folder) already holds a sync group: run sync join on this device, and sync approve on one already in it"
                )
            }
            let device = SyncDeviceID.random()
            let groupKey = SecureBytes.random(count: Sodium.keyLength)
            let (boxPK, boxSK) = SyncPairing.keyPair()
            let (signPK, signSK) = SyncSigning.keyPair()
            try SyncFolder(root: folder).makeDeviceDirectory(device)
            let config = SyncConfig(folder: folder, device: device, state: .member)
            var ring = SyncKeyring()
            let first = SyncKeyID(generation: 1, rotator: device)
            ring.keys[first] = groupKey
            var view = SyncMembership()
            view.members[device] = SyncMember(device: device, boxKey: boxPK, signKey: signPK)
            view.keys[first] = []
            try vault.storeSync(
                config: config,
                secrets: ["keyring": ring.encoded(), "boxSecret": boxSK, "signSecret": signSK],
                membership: view)
            logger.notice("sync: made a sync group in \(logField(folder)) as device \(device)")
            wake()
            return SyncEnrolment(
                deviceID: device.description, fingerprint: SyncPairing.groupFingerprint(groupKey))
        }
    }

    /// Asks to join the group syncing through `folder`: a key pair whose public half goes into
    /// the folder, and the pairing code to give `sync approve` on a device of the group.
    public func join(folder: String, in session: VaultSession) throws -> SyncEnrolment {
        try vault.authorizeSync(.syncJoin, session: session)
        return try lock.withLock {
            let folder = try folderToEnrolIn(folder)
            let device = SyncDeviceID.random()
            let (boxPK, boxSK) = SyncPairing.keyPair()
            let (signPK, signSK) = SyncSigning.keyPair()
            let f = SyncFolder(root: folder)
            try f.makeDeviceDirectory(device)
            try f.writeFile(
                SyncPairing.joinFile(boxKey: boxPK, signKey: signPK), device: device,
                name: SyncFolder.joinName)
            try vault.storeSync(
                config: SyncConfig(folder: folder, device: device, state: .joining),
                secrets: ["boxSecret": boxSK, "signSecret": signSK])
            logger.notice(
                "sync: asked to join the sync group in \(logField(folder)) as device \(device)")
            wake()
            return SyncEnrolment(
                deviceID: device.description,
                code: Self.code(device: device, boxKey: boxPK, signKey: signPK))
        }
    }

    /// `folder` checked (`checkedFolder`) for a device about to make or join a group. Throws
    /// Param when this device already syncs, or the folder is not a directory.
    private func folderToEnrolIn(_ folder: String) throws -> String {
        guard try vault.syncConfig() == nil else {
            throw VaultFailure.param("this device already syncs; run sync leave first")
        }
        return try Self.checkedFolder(folder)
    }

    /// A pairing code: the device ID and 16 bytes of its public key's hash, 64 hex digits in
    /// groups of 8 (so a public key put in the folder by anyone else is not approved).
    static func code(device: SyncDeviceID, boxKey: [UInt8], signKey: [UInt8]) -> String {
        let hex = Array(
            SyncHex.encode(device.bytes + SyncPairing.fingerprint(boxKey: boxKey, signKey: signKey))
        )
        return stride(from: 0, to: hex.count, by: 8).map {
            String(hex[$0..<min($0 + 8, hex.count)])
        }.joined(separator: "-")
    }

    /// Lets the device whose pairing code `code` is into the group (its join file in the
    /// folder must hold the public keys the code names): writes a member record for it in
    /// this device's next segment, then the group's keys and membership sealed to it. Throws
    /// Param (a malformed code, no such request in the folder, keys that do not match, a device
    /// removed before), NotInitialized (not a member).
    public func approve(code: String, in session: VaultSession) throws -> SyncEnrolment {
        try vault.authorizeSync(.syncApprove, session: session)
        return try lock.withLock {
            let (config, folder) = try memberState()
            let digits = code.filter { $0 != "-" && $0 != " " }
            guard digits.utf8.count == 64, let raw = SyncHex.decode(digits),
                let device = SyncDeviceID(bytes: Array(raw.prefix(16)))
            else {
                throw VaultFailure.param("a pairing code is 64 hex digits, as sync join printed it")
            }
            guard
                let file = folder.readSmallFile(
                    device: device, name: SyncFolder.joinName, limit: 256),
                let keys = SyncPairing.keys(ofJoinFile: file)
            else {
                throw VaultFailure.param(
                    "no join request of device \(device) in the folder yet (has the folder finished syncing?)"
                )
            }
            guard
                SyncPairing.fingerprint(boxKey: keys.boxKey, signKey: keys.signKey)
                    == Array(raw.suffix(16))
            else {
                throw VaultFailure.param(
                    "the join request in the folder does not match the code: do not approve it (someone else may have written it)"
                )
            }
            guard membership.removed[device] == nil else {
                throw VaultFailure.param(
                    "device \(device) was removed from the group; join again as a new device")
            }
            // Approved before (the same code given again): the member record and grant are in place.
            if membership.members[device] == nil {
                let member = SyncMember(device: device, boxKey: keys.boxKey, signKey: keys.signKey)
                try writeControl([.member(member)], config: config, folder: folder)
                logger.notice("sync: approved device \(device)")
            }
            // Written (again) whatever holds its name: a file there may not be this device's.
            try folder.writeFile(
                SyncPairing.grantFile(keyring: keyring, membership: membership, to: keys.boxKey),
                device: config.device, name: SyncFolder.grantName(device))
            return SyncEnrolment(deviceID: device.description)
        }
    }

    /// Removes `device` from the group, on a device that stays: a removal record (its
    /// segments after the last one merged here are never applied) and a new group key sealed
    /// to every remaining member, in one segment under the current key; every later segment
    /// is sealed under the new key, which the removed device never gets. Throws Param (not a
    /// device ID, not a member, this device: use leave), NotInitialized (not a member).
    public func remove(device text: String, in session: VaultSession) throws -> SyncEnrolment {
        try vault.authorizeSync(.syncRemove, session: session)
        return try lock.withLock {
            guard let device = SyncDeviceID(hex: text.lowercased()) else {
                throw VaultFailure.param("a device ID is 32 hex digits, as sync status shows it")
            }
            let (config, folder) = try memberState()
            guard device != config.device else {
                throw VaultFailure.param("this device cannot remove itself: run sync leave")
            }
            // Everything in the folder merged first: the cutoff keeps what the device wrote so far.
            try pass()
            guard membership.members[device] != nil else {
                throw VaultFailure.param("device \(device) is not a member of the group")
            }
            if membership.removed[device] == nil {
                let cutoff = applied[device]?.max() ?? 0
                var records: [SyncControl] = [.remove(device, cutoff: cutoff, pins: pins(device))]
                var view = membership
                _ = view.apply(records[0], author: config.device)
                let (rotate, newKey) = try makeRotation(view, me: config.device)
                records.append(rotate)
                try writeControl(records, config: config, folder: folder, newKey: newKey)
                logger.notice(
                    "sync: removed device \(device) (its segments after \(cutoff) are ignored) and rotated the group key"
                )
            }
            return SyncEnrolment(
                deviceID: device.description,
                keyGeneration: Int(keyring.current?.id.generation ?? 0))
        }
    }

    /// The hashes of the segments of `device` merged here, from its latest snapshot on.
    private func pins(_ device: SyncDeviceID) -> [UInt64: [UInt8]] {
        var out: [UInt64: [UInt8]] = [:]
        for seq in (applied[device] ?? []).sorted().suffix(SyncControl.maximumPins) {
            out[seq] = fileHashes[device]?[seq]
        }
        return out
    }

    /// The sync state: the folder, this device, its group's fingerprint, and every device in
    /// the folder with its segments, those read, those pending, and when it last wrote.
    public func status(in session: VaultSession) throws -> SyncStatus {
        try vault.authorizeSync(.syncStatus, session: session)
        return try lock.withLock {
            guard let config = try vault.syncConfig() else { return SyncStatus(state: "off") }
            var status = SyncStatus(state: config.state.rawValue)
            status.folder = config.folder
            status.deviceID = config.device.description
            if config.state == .member, (try? load(config)) != nil {
                // The group's first key names the group; the current one, its generation.
                if let first = keyring.keys.keys.min(), let k = keyring.keys[first] {
                    status.fingerprint = SyncPairing.groupFingerprint(k)
                }
                status.keyGeneration = keyring.current.map { Int($0.id.generation) }
                if membership.removed[config.device] != nil { status.state = "removed" }
            }
            let scan = try? SyncFolder(root: config.folder).scan(preferring: preferred(config))
            let listing = scan?.devices ?? [:]
            status.ignoredDevices = scan?.ignored ?? 0
            if config.state == .member {
                status.rolledBack = rollbacks(listing, me: config.device)
            }
            status.devices = listing.keys.sorted().map { d in
                let segments = listing[d]?.segments ?? [:]
                let read = applied[d] ?? []
                let current = segments.filter { $0.key >= (floor[d] ?? 0) }
                return SyncStatus.Device(
                    deviceID: d.description, thisDevice: d == config.device,
                    segments: current.count,
                    pending: current.filter {
                        !read.contains($0.key) && rejected[d]?[$0.key] == nil
                    }.count,
                    rejected: rejected[d]?.count ?? 0,
                    membership: membership.standing(d),
                    lastSeen: lastSeen[d].map { Date(timeIntervalSince1970: Double($0) / 1000) })
            }
            status.items = merged.liveItems.count
            status.problem = lastProblem
            status.lastPass = lastPass
            // At most 1,000 named, as CopyMatching's `damaged`.
            status.damaged = damagedRows.prefix(VaultFailure.maximumDamagedItems).map(\.item)
            return status
        }
    }

    /// Stops syncing on this device: records its leaving in the folder (its last segment),
    /// then forgets the group keys, the settings and the baseline. The items stay in this
    /// keychain; this device's segments stay in the folder (the other devices keep what they
    /// merged). Throws NotInitialized when it did not sync.
    public func leave(in session: VaultSession) throws {
        try vault.authorizeSync(.syncLeave, session: session)
        try lock.withLock {
            guard let config = try vault.syncConfig() else {
                throw VaultFailure(.notInitialized, "this device does not sync")
            }
            // A member records its leaving, signed, so the others stop accepting its segments
            // and make a new key without it before they next write. (A removed device, or one
            // whose keys are gone, just forgets.)
            if config.state == .member, (try? memberState()) != nil {
                let folder = SyncFolder(root: config.folder)
                try? pass()
                // The leaving record's own segment comes after the cutoff: the others apply it
                // once (it is how they learn of the leaving) and never again.
                try writeControl(
                    [.remove(config.device, cutoff: nextSequence - 1, pins: pins(config.device))],
                    config: config, folder: folder)
                logger.notice("sync: recorded this device's leaving in the folder")
            }
            try vault.storeSync(config: nil)
            // A request to join that was never approved goes too (its key pair is forgotten).
            SyncFolder(root: config.folder).removeFile(
                device: config.device, name: SyncFolder.joinName)
            resetState()
            logger.notice(
                "sync: device \(config.device) left the sync group in \(logField(config.folder))")
        }
    }

    /// The folder as it is kept: an absolute path to a directory, with every link on the way
    /// resolved now (`realpath`). From then on the folder is opened without following a link:
    /// one put in its place later is refused, not followed.
    static func checkedFolder(_ path: String) throws -> String {
        guard path.hasPrefix("/") else {
            throw VaultFailure.param("the sync folder must be an absolute path")
        }
        guard let st = try? SystemCall.stat(path), st.st_mode & S_IFMT == S_IFDIR,
            let resolved = try? SystemCall.realpath(path)
        else {
            throw VaultFailure.param("\(path) is not a directory")
        }
        return resolved
    }
}
