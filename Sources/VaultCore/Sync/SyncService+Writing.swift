import Foundation
import VaultProtocol

/// Writing this device's segments: its changes, its group records (approvals, removals, key
/// rotations and shares), each sealed under a group key, signed and written durably.
extension SyncService {
    /// Writes changes made here into this device's next segments (durably; a key rotation
    /// first when one is due), cut near `SyncSegment.targetPlaintextBytes`, and takes them into
    /// this device's own merge. The caller has applied them to `merged` already.
    func export(_ exported: [SyncChange], config: SyncConfig, folder: SyncFolder) throws {
        guard !exported.isEmpty else { return }
        let me = config.device
        if !currentKeyIsSafe() {
            // A device was removed (or left) since the current key was made, or a later key
            // was made without this device: a new one first, for the members as they are.
            let (rotate, newKey) = try makeRotation(membership, me: me)
            try writeControl([rotate], config: config, folder: folder, newKey: newKey)
            logger.notice("sync: rotated the group key to generation \(newKey.0.generation)")
        }
        var start = 0
        while start < exported.count {
            var end = start
            var bytes = 0
            while end < exported.count,
                end == start
                    || (bytes < SyncSegment.targetPlaintextBytes
                        && end - start < SyncSegment.maximumChanges)
            {
                bytes += SyncBaseline.estimatedSize(exported[end])
                end += 1
            }
            let part = Array(exported[start..<end])
            try writeSegment(SyncSegment(device: me, sequence: 0, changes: part), folder: folder)
            for c in part { perDevice[me, default: SyncVault()].apply(c) }
            start = end
        }
        lastSeen[me] = max(lastSeen[me] ?? 0, exported.map(\.timestamp.wall).max() ?? 0)
    }

    /// Writes group records as this device's next segment, under the current key or `under`
    /// (the records of a rotation must be readable by those who do not have the new key yet), and
    /// takes them in here; `newKey`: the key a rotation among them made, held from then on.
    func writeControl(
        _ records: [SyncControl], config: SyncConfig, folder: SyncFolder,
        newKey: (SyncKeyID, SecureBytes)? = nil, under: SyncKeyID? = nil
    ) throws {
        try writeSegment(
            SyncSegment(device: config.device, sequence: 0, control: records, changes: []),
            folder: folder, under: under)
        for r in records {
            _ = membership.apply(r, author: config.device)
            controlOf[config.device, default: []].append(r)
        }
        if let (id, key) = newKey { keyring.keys[id] = key }
        try vault.storeSync(
            config: config, secrets: ["keyring": keyring.encoded()], membership: membership)
    }

    /// Seals, signs and writes `segment` as this device's next sequence (durably), under
    /// the current key (or `under`).
    func writeSegment(_ segment: SyncSegment, folder: SyncFolder, under: SyncKeyID? = nil)
        throws
    {
        guard
            let (id, key) = under.flatMap({ u in keyring.keys[u].map { (u, $0) } })
                ?? keyring.current, let me = loadedFor?.device,
            let sign = try vault.syncSecret("signSecret")
        else {
            throw VaultFailure(.internalError, "the sync keys are missing")
        }
        var s = segment
        var file: [UInt8] = []
        while true {
            guard nextSequence <= SyncSegment.maximumSequence else {
                throw VaultFailure(
                    .internalError,
                    "this device's segment numbers are used up: leave the sync group and join it again"
                )
            }
            s.sequence = nextSequence
            file = s.sealed(key: key, keyID: id, signingKey: sign)
            do {
                try folder.writeFile(file, device: me, name: SyncSegment.fileName(s.sequence))
                break
            } catch let taken as SyncFolder.NameTaken {
                try makeRoom(taken.name, sequence: s.sequence, folder: folder, me: me, sign: sign)
            }
        }
        applied[me, default: []].insert(s.sequence)
        fileHashes[me, default: [:]][s.sequence] = SyncSegment.fileHash(file)
        nextSequence = s.sequence + 1
        try vault.storeSyncSequence(nextSequence)
    }

    /// The name of this device's next segment is taken. A segment this device signed (written
    /// before a crash kept its sequence from the store) is kept, and the next number tried; a
    /// file it did not write (anyone can put one in its directory) is removed, so its
    /// sequence is this device's again: a name in the folder never sets this device's
    /// sequence, and none it did not write stops it writing.
    private func makeRoom(
        _ name: String, sequence: UInt64, folder: SyncFolder, me: SyncDeviceID, sign: SecureBytes
    ) throws {
        let there = try? folder.readSegment(device: me, sequence: sequence)
        if let there,
            SyncSegment.isSigned(
                there, device: me, sequence: sequence, verifyKey: SyncSigning.publicKey(of: sign))
        {
            nextSequence = sequence + 1
            return
        }
        logger.warning(
            "sync: moved \(logField(name)) out of this device's way: this device did not write it, and its name is this device's next segment's"
        )
        if !folder.clear(device: me, name: name) {
            throw VaultFailure(
                .internalError,
                "cannot remove \(name), which this device did not write, from its directory")
        }
    }

    /// A new group key for the members of `view`: the rotate record (the key sealed to each of
    /// them, the removed devices named) and the key.
    /// Throws InternalError when the generations are used up (a member wrote the largest one).
    func makeRotation(_ view: SyncMembership, me: SyncDeviceID) throws -> (
        SyncControl, (SyncKeyID, SecureBytes)
    ) {
        let latest = view.keys.keys.map(\.generation).max() ?? 0
        guard latest < UInt32.max else {
            throw VaultFailure(
                .internalError,
                "the group key's generation is at its largest (\(latest)): no new key can be made; make a new sync group"
            )
        }
        let key = SecureBytes.random(count: Sodium.keyLength)
        let generation = latest + 1
        var boxes: [SyncDeviceID: [UInt8]] = [:]
        for m in view.currentMembers { boxes[m.device] = SyncPairing.seal(key, to: m.boxKey) }
        return (
            .rotate(generation: generation, excludes: Set(view.removed.keys), boxes: boxes),
            (SyncKeyID(generation: generation, rotator: me), key)
        )
    }

    /// Whether the current key keeps every removed device out: it was made after each
    /// removal (it excludes them), and no later key exists that this device was not given.
    private func currentKeyIsSafe() -> Bool {
        guard let current = keyring.current?.id else { return false }
        let excludes = membership.keys[current] ?? []
        guard membership.removed.keys.allSatisfy({ excludes.contains($0) }) else { return false }
        return !membership.keys.keys.contains { $0 > current }
    }

    /// Members another device approved since `before`: every key held here, sealed to each
    /// (its approver may not have had a key made here at the same time), under the key its
    /// approval came under, which its grant gave it.
    func shareKeys(
        withMembersNewSince before: SyncMembership, config: SyncConfig, folder: SyncFolder
    ) throws {
        let newcomers = membership.currentMembers.filter {
            before.members[$0.device] == nil && $0.device != config.device
        }
        for m in newcomers {
            guard let under = approvedUnder[m.device], keyring.keys[under] != nil else { continue }
            try writeControl(
                [.share(m.device, keyring.keys.mapValues { SyncPairing.seal($0, to: m.boxKey) })],
                config: config, folder: folder, under: under)
        }
    }
}
