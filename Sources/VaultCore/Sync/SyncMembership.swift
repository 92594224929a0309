import Foundation
import VaultProtocol

/// The group's membership as one device knows it (docs/sync.md, "Membership and keys"): the
/// members and their public keys, the removed devices with the last sequence of theirs that
/// counts, and every group key made, with the removed devices it was made to keep out. A
/// joining device gets it in its grant; every group record read from a member's segment adds
/// to it. Each part only grows (a removal is never undone), so devices that have read the
/// same records agree, in whatever order they read them.
struct SyncMembership: Equatable {
    var members: [SyncDeviceID: SyncMember] = [:]
    /// Removed devices: their segments after this sequence are never applied.
    var removed: [SyncDeviceID: UInt64] = [:]
    /// The devices that left (wrote their own removal), with the cutoff they gave it: the
    /// segment just after that cutoff is the one holding the leaving, read as such.
    var left: [SyncDeviceID: UInt64] = [:]
    /// Every key made (held here or not), with the devices it excludes.
    var keys: [SyncKeyID: Set<SyncDeviceID>] = [:]
    /// The segment files of each removed device that count (sequence → file hashes; two
    /// removers may each pin one).
    var pins: [SyncDeviceID: [UInt64: Set<[UInt8]>]] = [:]

    /// A current member: approved and not removed.
    func isMember(_ d: SyncDeviceID) -> Bool { members[d] != nil && removed[d] == nil }

    /// Whether a segment `sequence` of `device` may be applied: the device is a member, or was
    /// one and the segment comes before its removal's cutoff.
    func accepts(_ device: SyncDeviceID, sequence: UInt64) -> Bool {
        guard members[device] != nil else { return false }
        return removed[device].map { sequence <= $0 } ?? true
            || isLeaving(device, sequence: sequence)
    }

    /// Whether `sequence` is where `device`, which left, wrote its leaving (the segment after
    /// the cutoff it gave): read, but only as the leaving (`SyncService` checks it holds
    /// nothing else).
    func isLeaving(_ device: SyncDeviceID, sequence: UInt64) -> Bool {
        guard let cutoff = left[device], cutoff < SyncSegment.maximumSequence else { return false }
        return sequence == cutoff + 1 && sequence > (removed[device] ?? 0)
    }

    /// How `sync status` names a device: "member", "left" (it wrote its own removal),
    /// "removed" (another device removed it) or "unknown" (not approved, as far as read here).
    func standing(_ d: SyncDeviceID) -> String {
        if left[d] != nil { return "left" }
        if removed[d] != nil { return "removed" }
        return members[d] != nil ? "member" : "unknown"
    }

    /// Whether the segment file of that hash may be applied: any file of a member; of a
    /// removed device, only one its removal pinned.
    func accepts(_ device: SyncDeviceID, sequence: UInt64, hash: [UInt8]?) -> Bool {
        guard accepts(device, sequence: sequence) else { return false }
        guard removed[device] != nil else { return true }
        if isLeaving(device, sequence: sequence) { return true }
        return hash.map { pins[device]?[sequence]?.contains($0) == true } ?? false
    }

    var currentMembers: [SyncMember] {
        members.values.filter { removed[$0.device] == nil }.sorted { $0.device < $1.device }
    }

    /// Takes in one group record written by `author`; returns whether anything changed.
    mutating func apply(_ c: SyncControl, author: SyncDeviceID) -> Bool {
        let before = self
        switch c {
        case .member(let m):
            // A device's keys are fixed at its approval: a second record cannot replace them.
            if members[m.device] == nil { members[m.device] = m }
        case .remove(let d, let cutoff, let p):
            // Two removals of one device (made at once on two devices): the later cutoff,
            // and the pins of both, so every device keeps the changes either remover had merged.
            removed[d] = max(removed[d] ?? 0, cutoff)
            if author == d { left[d] = max(left[d] ?? 0, cutoff) }
            for (seq, h) in p { pins[d, default: [:]][seq, default: []].insert(h) }
        case .rotate(let generation, let excludes, _):
            keys[SyncKeyID(generation: generation, rotator: author), default: []].formUnion(
                excludes)
        case .snapshot, .share:
            break
        }
        return self != before
    }

    /// The join with another device's view (a grant's).
    mutating func join(_ o: SyncMembership) {
        for (d, m) in o.members where members[d] == nil { members[d] = m }
        for (d, c) in o.removed { removed[d] = max(removed[d] ?? 0, c) }
        for (d, c) in o.left { left[d] = max(left[d] ?? 0, c) }
        for (k, e) in o.keys { keys[k, default: []].formUnion(e) }
        for (d, p) in o.pins {
            for (seq, h) in p { pins[d, default: [:]][seq, default: []].formUnion(h) }
        }
    }

    var json: JSON {
        var m = JSONObject()
        for (d, v) in members {
            m[d.description] = [
                "box": .string(SyncHex.encode(v.boxKey)),
                "sign": .string(SyncHex.encode(v.signKey)),
            ]
        }
        var r = JSONObject()
        for (d, c) in removed { r[d.description] = JSON(c) }
        var l = JSONObject()
        for (d, c) in left { l[d.description] = JSON(c) }
        let k: [JSON] = keys.keys.sorted().map { id in
            [
                "generation": JSON(Int(id.generation)), "rotator": .string(id.rotator.description),
                "excludes": .array(keys[id]!.sorted().map { .string($0.description) }),
            ]
        }
        var p = JSONObject()
        for (d, bySeq) in pins {
            var o = JSONObject()
            for (seq, hs) in bySeq {
                o[String(seq)] = .array(
                    hs.map { .string(SyncHex.encode($0)) }.sorted {
                        $0.stringValue! < $1.stringValue!
                    })
            }
            p[d.description] = .object(o)
        }
        return [
            "members": .object(m), "removed": .object(r), "left": .object(l), "keys": .array(k),
            "pins": .object(p),
        ]
    }

    init() {}

    init?(_ j: JSON) {
        guard let m = j["members"]?.objectValue, let r = j["removed"]?.objectValue,
            let k = j["keys"]?.arrayValue,
            m.count <= SyncService.maximumDevices * 4, r.count <= SyncService.maximumDevices * 4,
            k.count <= 1 << 16
        else { return nil }
        for name in m.keys {
            guard let d = SyncDeviceID(hex: name),
                let box = m[name]?["box"]?.stringValue.flatMap(SyncHex.decode),
                let sign = m[name]?["sign"]?.stringValue.flatMap(SyncHex.decode),
                box.count == SyncPairing.publicKeyBytes, sign.count == SyncSigning.publicKeyBytes
            else { return nil }
            members[d] = SyncMember(device: d, boxKey: box, signKey: sign)
        }
        for name in r.keys {
            guard let d = SyncDeviceID(hex: name), let c = r[name]?.uint64Value else { return nil }
            removed[d] = c
        }
        // Absent in a membership stored before leaving was told apart from removal.
        if let l = j["left"]?.objectValue {
            guard l.count <= SyncService.maximumDevices * 4 else { return nil }
            for name in l.keys {
                guard let d = SyncDeviceID(hex: name), let c = l[name]?.uint64Value else {
                    return nil
                }
                left[d] = c
            }
        }
        for e in k {
            guard let g = e["generation"]?.intValue, let g32 = UInt32(exactly: g),
                let rot = e["rotator"]?.stringValue.flatMap(SyncDeviceID.init(hex:)),
                let ex = e["excludes"]?.arrayValue
            else { return nil }
            var set = Set<SyncDeviceID>()
            for x in ex {
                guard let d = x.stringValue.flatMap(SyncDeviceID.init(hex:)) else { return nil }
                set.insert(d)
            }
            keys[SyncKeyID(generation: g32, rotator: rot), default: []].formUnion(set)
        }
        if let p = j["pins"]?.objectValue {
            for name in p.keys {
                guard let d = SyncDeviceID(hex: name), let bySeq = p[name]?.objectValue else {
                    return nil
                }
                for seqText in bySeq.keys {
                    guard let seq = UInt64(seqText), let hs = bySeq[seqText]?.arrayValue else {
                        return nil
                    }
                    for h in hs {
                        guard let b = h.stringValue.flatMap(SyncHex.decode),
                            b.count == SyncSegment.fileHashBytes
                        else { return nil }
                        pins[d, default: [:]][seq, default: []].insert(b)
                    }
                }
            }
        }
    }
}

/// The group keys this device holds, by key ID.
struct SyncKeyring {
    var keys: [SyncKeyID: SecureBytes] = [:]

    /// The key new segments are sealed under: the latest held.
    var current: (id: SyncKeyID, key: SecureBytes)? {
        keys.keys.max().map { ($0, keys[$0]!) }
    }

    /// (u32 generation · rotator 16 · key 32) × n, in secure memory.
    func encoded() -> SecureBytes {
        let entry = 4 + 16 + Sodium.keyLength
        let out = SecureBytes(count: keys.count * entry)
        out.withUnsafeMutableBytes { o in
            for (i, id) in keys.keys.sorted().enumerated() {
                let at = i * entry
                for (j, b) in id.bytes.enumerated() { o[at + j] = b }
                keys[id]!.withUnsafeBytes { k in for j in 0..<k.count { o[at + 20 + j] = k[j] } }
            }
        }
        return out
    }

    init() {}

    init?(encoded p: UnsafeRawBufferPointer) {
        let entry = 4 + 16 + Sodium.keyLength
        guard p.count % entry == 0 else { return nil }
        for i in 0..<(p.count / entry) {
            let at = i * entry
            let g =
                UInt32(p[at]) | UInt32(p[at + 1]) << 8 | UInt32(p[at + 2]) << 16 | UInt32(p[at + 3])
                << 24
            let rot = SyncDeviceID(bytes: Array(p[(at + 4)..<(at + 20)]))!
            keys[SyncKeyID(generation: g, rotator: rot)] = SecureBytes(
                copying: UnsafeRawBufferPointer(rebasing: p[(at + 20)..<(at + entry)]))
        }
    }

    init?(encoded s: SecureBytes) {
        guard let r = s.withUnsafeBytes({ SyncKeyring(encoded: $0) }) else { return nil }
        self = r
    }
}
