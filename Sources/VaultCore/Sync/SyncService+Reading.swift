import Foundation
import VaultProtocol

/// Step 1 of a pass: reading the folder (a joining device's grant, the device directories),
/// verifying each new segment and applying its group records and changes to the merge.
extension SyncService {
    // MARK: reading the folder

    /// A joining device's pass: when a grant sealed to it is in the folder, it becomes a
    /// member (the grant's keys and membership stored, its join request removed) and the
    /// member's config is returned; nil while none is. The directories read are watched:
    /// the grant comes in one of them.
    func completeJoin(_ joining: SyncConfig, _ folder: SyncFolder) throws -> SyncConfig? {
        _ = try read(folder, joining)
        guard let (ring, view) = try acceptGrant(joining, folder) else { return nil }
        var config = joining
        config.state = .member
        try vault.storeSync(
            config: config, secrets: ["keyring": ring.encoded()], membership: view)
        folder.removeFile(device: config.device, name: SyncFolder.joinName)
        resetState()
        loadedFor = config
        logger.notice(
            "sync: joined the sync group (fingerprint \(ring.keys.keys.min().flatMap { ring.keys[$0] }.map(SyncPairing.groupFingerprint) ?? "?"))"
        )
        return config
    }

    /// The group's keys and membership from a grant sealed to this joining device, when one
    /// is in the folder.
    private func acceptGrant(_ config: SyncConfig, _ folder: SyncFolder) throws -> (
        SyncKeyring, SyncMembership
    )? {
        guard let sk = try vault.syncSecret("boxSecret") else {
            throw VaultFailure(.internalError, "the sync join key is missing")
        }
        let pk = SyncPairing.publicKey(of: sk)
        let name = SyncFolder.grantName(config.device)
        // Looked for in every device directory by name: a grant's is its approver's, which
        // may be past the directories a listing reads.
        for device in try folder.devicesHolding(name) where device != config.device {
            if let f = folder.readSmallFile(
                device: device, name: name, limit: SyncPairing.maximumGrantBytes),
                let (ring, view) = SyncPairing.openGrant(f, publicKey: pk, secretKey: sk),
                !ring.keys.isEmpty,
                let sign = try vault.syncSecret("signSecret"), view.isMember(config.device),
                view.members[config.device]?.signKey == SyncSigning.publicKey(of: sign),
                view.members[config.device]?.boxKey == pk
            {
                return (ring, view)
            }
        }
        return nil
    }

    /// Reads `devices/`: this device's directory and the members' first, the others up to
    /// `maximumDevices`; the rest counted (`sync status`) and logged when their number
    /// changes, links in the place of device directories logged once each. Sets what the
    /// watcher watches.
    func read(_ folder: SyncFolder, _ config: SyncConfig) throws -> [SyncDeviceID:
        SyncFolder.Entry]
    {
        let scan = try folder.scan(preferring: preferred(config))
        if scan.ignored != ignoredDevices {
            if scan.ignored > 0 {
                logger.warning(
                    "sync: the folder holds \(scan.ignored) device directories past the \(Self.maximumDevices) read; they are ignored (this device's and the members' are read first)"
                )
            }
            ignoredDevices = scan.ignored
        }
        for d in scan.links where !linksLogged.contains(d) {
            logger.warning(
                "sync: \(logField(folder.directory(d))) is a symbolic link, not a directory: not followed, its files are not read"
            )
            linksLogged.insert(d)
        }
        watchPaths =
            [folder.root, folder.devicesPath] + scan.devices.keys.sorted().map(folder.directory)
        return scan.devices
    }

    /// The devices whose directories are read before any other: this one and every device
    /// the membership names.
    func preferred(_ config: SyncConfig) -> Set<SyncDeviceID> {
        Set(membership.members.keys).union(membership.removed.keys).union([config.device])
    }

    /// A segment that records its writer's own leaving holds nothing else (vaultd writes it
    /// so): it is read after the writer's cutoff, where only the leaving may be. Throws
    /// `SyncFormatError` for one that holds more.
    static func checkLeaving(_ s: SyncSegment) throws {
        let leaves = s.control.contains {
            if case .remove(let d, _, _) = $0 { d == s.device } else { false }
        }
        guard leaves else { return }
        guard s.changes.isEmpty, s.control.count == 1 else {
            throw SyncFormatError("a segment recording its device's leaving holds other records")
        }
    }

    private func reject(
        _ device: SyncDeviceID, _ seq: UInt64, _ version: SyncFolder.FileVersion, _ why: String
    ) {
        rejected[device, default: [:]][seq] = version
        if rejectionsLogged < Self.maximumLoggedRejections {
            logger.warning(
                "sync: ignored segment \(SyncSegment.fileName(seq)) of device \(device): \(why)")
        } else if rejectionsLogged == Self.maximumLoggedRejections {
            logger.warning("sync: further ignored segments are counted in sync status, not logged")
        }
        rejectionsLogged += 1
    }

    // MARK: verifying and applying segments

    /// What reading the folder's new segments found, for the rest of the pass.
    struct SegmentReading {
        /// The keys the merge changed in this pass.
        var touched = Set<SyncItemKey>()
        /// A removal made changes merged here no longer count: everything is read again.
        var rebuild = false
        /// A snapshot replaced a device's segments: `merged` is made again from `perDevice`.
        var snapshotRead = false
    }

    /// Step 1 of a pass: every new segment of every device that may write (a member, or a
    /// removed device before its cutoff), signed by it and sealed under a key held here.
    /// Segments of a device not (yet) known to be a member, or under a key not (yet) held, stay
    /// pending: a later record may let them in. Rounds go on while a round lets new ones in.
    func mergeNewSegments(
        _ listing: [SyncDeviceID: SyncFolder.Entry], _ folder: SyncFolder, me: SyncDeviceID,
        into reading: inout SegmentReading
    ) throws {
        var progress = true
        while progress {
            progress = false
            for (device, entry) in listing.sorted(by: { $0.key < $1.key }) {
                for (seq, size) in entry.segments.sorted(by: { $0.key < $1.key }) {
                    let version =
                        entry.versions[seq]
                        ?? SyncFolder.FileVersion(size: size, inode: 0, changed: 0)
                    if seq < (floor[device] ?? 0) || applied[device]?.contains(seq) == true
                        || rejected[device]?[seq] == version
                    {
                        continue
                    }
                    guard
                        let (s, sealedUnder) = openSegment(
                            device, seq, version: version, folder: folder)
                    else { continue }
                    progress = true
                    try takeIn(s, sealedUnder: sealedUnder, me: me, into: &reading)
                }
            }
        }
    }

    /// Segment `seq` of `device` read, checked and opened, with the key it was sealed under;
    /// nil when it stays pending (its device not a member here yet, its key not held yet, or
    /// the file gone since the listing) or is refused (`reject`, logged).
    private func openSegment(
        _ device: SyncDeviceID, _ seq: UInt64, version: SyncFolder.FileVersion,
        folder: SyncFolder
    ) -> (SyncSegment, SyncKeyID)? {
        guard let member = membership.members[device] else { return nil }
        guard membership.accepts(device, sequence: seq) else {
            reject(
                device, seq, version,
                "it was written after the device \(membership.left[device] != nil ? "left" : "was removed from") the group"
            )
            return nil
        }
        do {
            let bytes = try folder.readSegment(device: device, sequence: seq)
            let hash = SyncSegment.fileHash(bytes)
            guard membership.accepts(device, sequence: seq, hash: hash) else {
                throw SyncFormatError("it is not a segment the device's removal kept")
            }
            fileHashes[device, default: [:]][seq] = hash
            guard let id = SyncSegment.keyID(of: bytes) else {
                throw SyncFormatError("not a vaultd sync segment")
            }
            guard let key = keyring.keys[id] else { return nil }
            let s = try SyncSegment.open(
                bytes, key: key, device: device, sequence: seq, verifyKey: member.signKey)
            try Self.checkLeaving(s)
            return (s, id)
        } catch {
            // Gone since it was listed (its device compacted it away): nothing to refuse.
            if folder.exists(device: device, name: SyncSegment.fileName(seq)) {
                reject(device, seq, version, "\(error)")
            }
            return nil
        }
    }

    /// Merges an opened segment: marks it applied; a snapshot first replaces every earlier
    /// segment of its device; then its group records and its changes.
    private func takeIn(
        _ s: SyncSegment, sealedUnder: SyncKeyID, me: SyncDeviceID,
        into reading: inout SegmentReading
    ) throws {
        let device = s.device
        let seq = s.sequence
        applied[device, default: []].insert(seq)
        rejected[device]?[seq] = nil
        if s.control.contains(.snapshot) {
            // It replaces every earlier segment of its device.
            floor[device] = seq
            perDevice[device] = SyncVault()
            controlOf[device] = []
            applied[device] = applied[device]!.filter { $0 >= seq }
            reading.snapshotRead = true
        }
        for c in s.control where c != .snapshot {
            if try takeIn(c, from: device, sealedUnder: sealedUnder, me: me) {
                reading.rebuild = true
            }
        }
        mergeChanges(s.changes, from: device, me: me, touched: &reading.touched)
    }

    /// Applies one group record of `device` to the membership, and takes any group key in it
    /// sealed to this device. Returns whether it removed a device some of whose merged
    /// changes no longer count (changes its remover had not merged): then everything is read
    /// again, so they count here as on every other device.
    private func takeIn(
        _ c: SyncControl, from device: SyncDeviceID, sealedUnder: SyncKeyID, me: SyncDeviceID
    ) throws -> Bool {
        controlOf[device, default: []].append(c)
        if case .member(let m) = c, approvedUnder[m.device] == nil {
            approvedUnder[m.device] = sealedUnder
        }
        let changed = membership.apply(c, author: device)
        var rebuild = false
        if changed, case .remove(let d, _, _) = c {
            if d == device { logger.notice("sync: device \(device) left the sync group") }
            rebuild =
                applied[d]?.contains(where: {
                    !membership.accepts(d, sequence: $0, hash: fileHashes[d]?[$0])
                }) == true
        }
        try takeKeys(in: c, from: device, me: me)
        return rebuild
    }

    /// The group keys a rotate or share record of `device` seals to this device, unsealed
    /// with its box secret and held (those held already are kept as they are).
    private func takeKeys(in c: SyncControl, from device: SyncDeviceID, me: SyncDeviceID) throws {
        var sealed: [SyncKeyID: [UInt8]] = [:]
        if case .rotate(let generation, _, let boxes) = c, let box = boxes[me] {
            sealed[SyncKeyID(generation: generation, rotator: device)] = box
        }
        if case .share(let d, let boxes) = c, d == me { sealed = boxes }
        guard !sealed.isEmpty, let boxSecret = try vault.syncSecret("boxSecret") else { return }
        for (id, box) in sealed where keyring.keys[id] == nil {
            if let key = SyncPairing.unseal(
                box[...], publicKey: SyncPairing.publicKey(of: boxSecret), secretKey: boxSecret),
                key.count == Sodium.keyLength
            {
                keyring.keys[id] = key
            }
        }
    }

    /// Merges a segment's changes into `merged` and its device's own merge, noting the keys
    /// whose merged state changed, and the clock and the device's last change time.
    private func mergeChanges(
        _ changes: [SyncChange], from device: SyncDeviceID, me: SyncDeviceID,
        touched: inout Set<SyncItemKey>
    ) {
        for c in changes {
            let was = merged.items[c.key]
            merged.apply(c)
            perDevice[device, default: SyncVault()].apply(c)
            if merged.items[c.key] != was { touched.insert(c.key) }
            // This device's own changes bound its clock without the drift limit.
            if device == me {
                clock!.observe(c.timestamp, physical: UInt64.max / 2)
            } else {
                clock!.observe(c.timestamp)
            }
            lastSeen[device] = max(lastSeen[device] ?? 0, c.timestamp.wall)
        }
    }
}
