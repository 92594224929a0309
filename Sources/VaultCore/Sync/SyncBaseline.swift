import Foundation
import VaultProtocol

/// The baseline's encoding: for each field of a live item, its tag, the timestamp of the write
/// that won it and a 16-byte BLAKE2b of its value keyed with the index key, so the store holds
/// nothing of the item in clear.
enum SyncBaseline {
    static func keyHash(_ key: SyncItemKey, _ hashKey: SecureBytes) -> [UInt8] {
        Sodium.keyedHash(Array("sync key\0".utf8) + key.canonicalBytes, key: hashKey)
    }

    static func fieldHash(_ f: SyncField, _ v: SyncValue?, _ hashKey: SecureBytes) -> [UInt8]? {
        guard let v else { return nil }
        var message: [UInt8] = []
        // Reserved whole: growing would leave unwiped copies of a secret behind.
        message.reserveCapacity(1 + v.withBytes { $0.count })
        message.append(f.rawValue)
        v.withBytes { message += $0 }
        defer { message.wipe() }
        return Sodium.keyedHash(message, key: hashKey, length: 16)
    }

    /// One field as the baseline holds it: the timestamp of the write that won it, and its
    /// value's hash (nil: the write removed the attribute).
    struct Field: Equatable {
        var timestamp: SyncTimestamp
        var hash: [UInt8]?
    }

    /// Bytes per field: tag, wall, counter, device, hash (16 zero bytes for no value).
    static let entryBytes = 1 + 8 + 4 + 16 + 16
    /// The tag of an entry that holds what the merge had seen of one device
    /// (`SyncItemState.seen`, hash bytes zero): the context of the next write made here.
    static let seenTag: UInt8 = 0xF0

    /// The baseline of a live merged item: each field written since its latest deletion,
    /// then what the merge had seen of each device (`seenTag`).
    static func encode(_ state: SyncItemState, _ hashKey: SecureBytes) -> [UInt8] {
        var out: [UInt8] = []
        func append(_ tag: UInt8, _ t: SyncTimestamp, _ hash: [UInt8]?) {
            out.append(tag)
            SyncWire.appendU64(t.wall, to: &out)
            SyncWire.appendU32(t.counter, to: &out)
            out += t.device.bytes
            out += hash ?? [UInt8](repeating: 0, count: 16)
        }
        for f in state.fields.keys.sorted() {
            let s = state.fields[f]!
            if let t = state.tombstone, !(t < s.timestamp) { continue }
            append(f.rawValue, s.timestamp, fieldHash(f, s.value, hashKey))
        }
        for t in state.seen.values.sorted() { append(seenTag, t, nil) }
        return out
    }

    /// What a baseline says the merge had seen of each device (empty in one written before
    /// it held that: the timestamps of its fields then).
    static func parseSeen(_ b: [UInt8]) -> [SyncDeviceID: SyncTimestamp] {
        var out: [SyncDeviceID: SyncTimestamp] = [:]
        var fields: [SyncDeviceID: SyncTimestamp] = [:]
        entries(b) { tag, t, _ in
            if tag == seenTag {
                out[t.device] = t
            } else if fields[t.device].map({ $0 < t }) ?? true {
                fields[t.device] = t
            }
        }
        return out.isEmpty ? fields : out
    }

    /// Calls `body` with each whole entry of a baseline: its tag, timestamp and hash bytes.
    private static func entries(
        _ b: [UInt8], _ body: (UInt8, SyncTimestamp, ArraySlice<UInt8>) -> Void
    ) {
        var i = 0
        while i + entryBytes <= b.count {
            let e = b[i..<(i + entryBytes)]
            var wall: UInt64 = 0
            var counter: UInt32 = 0
            for k in 0..<8 { wall |= UInt64(e[i + 1 + k]) << (8 * UInt64(k)) }
            for k in 0..<4 { counter |= UInt32(e[i + 9 + k]) << (8 * UInt32(k)) }
            if let device = SyncDeviceID(bytes: Array(e[(i + 13)..<(i + 29)])) {
                body(
                    e[i], SyncTimestamp(wall: wall, counter: counter, device: device),
                    e[(i + 29)..<(i + entryBytes)])
            }
            i += entryBytes
        }
    }

    static func parse(_ b: [UInt8]) -> [SyncField: Field] {
        var out: [SyncField: Field] = [:]
        entries(b) { tag, t, hash in
            if let f = SyncField(rawValue: tag) {
                out[f] = Field(timestamp: t, hash: hash.allSatisfy { $0 == 0 } ? nil : Array(hash))
            }
        }
        return out
    }

    /// How many bytes a change's record takes at most (to cut segments near their target
    /// size, and to reserve a record's buffer whole).
    static func estimatedSize(_ c: SyncChange) -> Int {
        var n =
            32 + c.key.accessGroup.utf8.count
            + c.key.primaryKey.reduce(0) { $0 + $1.utf8.count + 4 }
        // Per field: tag, presence, length, value.
        if case .write(let f) = c.kind {
            for v in f.values { n += 6 + (v?.withBytes { $0.count } ?? 0) }
            n += 4 + c.context.count * SyncWire.contextEntryBytes
        }
        return n
    }
}
