import Foundation
import VaultProtocol

/// The binary form of changes inside a segment (little-endian; each variable part preceded by
/// its u32 length). One record per change:
///
///     u8 kind (1 write, 2 delete) · u64 wall ms · u32 counter
///     u8 class (1 genericPassword, 2 internetPassword) · bytes accessGroup · bytes × N primary key
///     write only: u8 field count · (u8 field tag · u8 present (0/1) · bytes value if present) × count
///     write only, optional: u32 n · (device 16 · u64 wall ms · u32 counter) × n, its context
///     (`SyncChange.context`; absent in records written before conflicts were kept)
///
/// and the group's own records (`SyncControl`):
///
///     u8 3 (member) · device 16 · crypto_box public key 32 · crypto_sign public key 32
///     u8 4 (remove) · device 16 · u64 cutoff sequence · u32 n · (u64 sequence · file hash 16) × n
///     u8 5 (rotate) · u32 generation · u32 n · excluded device 16 × n · u32 m · (device 16 · sealed key 80) × m
///     u8 6 (snapshot)
///     u8 7 (share) · device 16 · u32 n · (key ID 20 · sealed key 80) × n
///
/// The device of a record's timestamp is the segment's: a record cannot claim another's.
enum SyncWire {
    /// The most bytes one variable part of a key (group, primary-key attribute) may take.
    static let maximumKeyPartBytes = 64 << 10
    /// The most bytes one record may take: a 1 MiB secret, attributes within the keychain's
    /// 64 KiB limit, the key, framing.
    static let maximumRecordBytes =
        SecretLimit.maximumBytes + 3 * KeychainStore.maximumAttributesSize

    static func appendBytes(_ b: [UInt8], to out: inout [UInt8]) {
        appendU32(UInt32(b.count), to: &out)
        out += b
    }

    static func appendU32(_ v: UInt32, to out: inout [UInt8]) {
        withUnsafeBytes(of: v.littleEndian) { out += $0 }
    }

    static func appendU64(_ v: UInt64, to out: inout [UInt8]) {
        withUnsafeBytes(of: v.littleEndian) { out += $0 }
    }

    /// The record of `c`. It may hold a secret: the caller wipes it once encrypted.
    static func encode(_ c: SyncChange) -> [UInt8] {
        // Room for all of it at once: a buffer that grew would leave copies of the secret in
        // the blocks it outgrew, which the wipe does not reach.
        var out: [UInt8] = []
        out.reserveCapacity(SyncBaseline.estimatedSize(c))
        out.append(c.kind == .delete ? 2 : 1)
        appendU64(c.timestamp.wall, to: &out)
        appendU32(c.timestamp.counter, to: &out)
        out.append(c.key.itemClass == .genericPassword ? 1 : 2)
        appendBytes(Array(c.key.accessGroup.utf8), to: &out)
        for p in c.key.primaryKey { appendBytes(Array(p.utf8), to: &out) }
        if case .write(let fields) = c.kind {
            out.append(UInt8(fields.count))
            for f in fields.keys.sorted() {
                out.append(f.rawValue)
                if let v = fields[f]! {
                    out.append(1)
                    v.withBytes { b in
                        appendU32(UInt32(b.count), to: &out)
                        out += b
                    }
                } else {
                    out.append(0)
                }
            }
            if !c.context.isEmpty {
                appendU32(UInt32(c.context.count), to: &out)
                for (d, t) in c.context.sorted(by: { $0.key < $1.key }) {
                    out += d.bytes
                    appendU64(t.wall, to: &out)
                    appendU32(t.counter, to: &out)
                }
            }
        }
        return out
    }

    /// The most devices a write's context names (a writer keeps the latest ones).
    static let maximumContext = 1024
    static let contextEntryBytes = 16 + 8 + 4

    /// A write's context after its fields (none when the record ends there).
    static func decodeContext(_ r: inout Reader) throws -> [SyncDeviceID: SyncTimestamp] {
        guard r.at < r.bytes.count else { return [:] }
        let n = Int(try r.u32())
        guard n >= 1, n <= maximumContext else {
            throw SyncFormatError("a context of \(n) devices (1 to \(maximumContext))")
        }
        var out: [SyncDeviceID: SyncTimestamp] = [:]
        for _ in 0..<n {
            var d: [UInt8] = []
            for _ in 0..<16 { d.append(try r.u8()) }
            guard let device = SyncDeviceID(bytes: d), out[device] == nil else {
                throw SyncFormatError("a device named twice in a context")
            }
            out[device] = SyncTimestamp(wall: try r.u64(), counter: try r.u32(), device: device)
        }
        return out
    }

    /// Reads bounded parts from a decrypted record.
    struct Reader {
        let bytes: UnsafeRawBufferPointer
        var at = 0

        mutating func u8() throws -> UInt8 {
            guard at < bytes.count else { throw SyncFormatError("a record ends early") }
            defer { at += 1 }
            return bytes[at]
        }

        mutating func u32() throws -> UInt32 {
            var v: UInt32 = 0
            for i in 0..<4 { v |= UInt32(try u8()) << (8 * UInt32(i)) }
            return v
        }

        mutating func u64() throws -> UInt64 {
            var v: UInt64 = 0
            for i in 0..<8 { v |= UInt64(try u8()) << (8 * UInt64(i)) }
            return v
        }

        /// A length-prefixed part of at most `limit` bytes.
        mutating func part(limit: Int) throws -> UnsafeRawBufferPointer {
            let n = Int(try u32())
            guard n <= limit, n <= bytes.count - at else {
                throw SyncFormatError("a record's part is longer than allowed or than the record")
            }
            defer { at += n }
            return UnsafeRawBufferPointer(rebasing: bytes[at..<(at + n)])
        }

        mutating func text(limit: Int) throws -> String {
            let p = try part(limit: limit)
            guard let s = String(validating: p.bindMemory(to: UInt8.self), as: UTF8.self) else {
                throw SyncFormatError("a record's text is not UTF-8")
            }
            return s
        }
    }

    /// The record of a group record.
    static func encode(_ c: SyncControl) -> [UInt8] {
        var out: [UInt8] = []
        switch c {
        case .member(let m):
            out.append(3)
            out += m.device.bytes + m.boxKey + m.signKey
        case .remove(let d, let cutoff, let pins):
            out.append(4)
            out += d.bytes
            appendU64(cutoff, to: &out)
            appendU32(UInt32(pins.count), to: &out)
            for seq in pins.keys.sorted() {
                appendU64(seq, to: &out)
                out += pins[seq]!
            }
        case .rotate(let generation, let excludes, let boxes):
            out.append(5)
            appendU32(generation, to: &out)
            appendU32(UInt32(excludes.count), to: &out)
            for d in excludes.sorted() { out += d.bytes }
            appendU32(UInt32(boxes.count), to: &out)
            for d in boxes.keys.sorted() { out += d.bytes + boxes[d]! }
        case .snapshot:
            out.append(6)
        case .share(let d, let boxes):
            out.append(7)
            out += d.bytes
            appendU32(UInt32(boxes.count), to: &out)
            for id in boxes.keys.sorted() { out += id.bytes + boxes[id]! }
        }
        return out
    }

    static func decodeControl(_ kind: UInt8, _ r: inout Reader) throws -> SyncControl {
        func device() throws -> SyncDeviceID {
            var b: [UInt8] = []
            for _ in 0..<16 { b.append(try r.u8()) }
            return SyncDeviceID(bytes: b)!
        }
        func bytes(_ n: Int) throws -> [UInt8] {
            guard r.bytes.count - r.at >= n else { throw SyncFormatError("a record ends early") }
            defer { r.at += n }
            return Array(r.bytes[r.at..<(r.at + n)])
        }
        switch kind {
        case 3:
            return .member(
                SyncMember(
                    device: try device(), boxKey: try bytes(SyncPairing.publicKeyBytes),
                    signKey: try bytes(SyncSigning.publicKeyBytes)))
        case 4:
            let d = try device()
            let cutoff = try r.u64()
            let n = Int(try r.u32())
            guard n <= SyncControl.maximumPins else {
                throw SyncFormatError("a removal pins too many segments")
            }
            var pins: [UInt64: [UInt8]] = [:]
            for _ in 0..<n {
                let seq = try r.u64()
                pins[seq] = try bytes(SyncSegment.fileHashBytes)
            }
            return .remove(d, cutoff: cutoff, pins: pins)
        case 5:
            let generation = try r.u32()
            let n = Int(try r.u32())
            guard n <= SyncService.maximumDevices else {
                throw SyncFormatError("a rotation excludes too many devices")
            }
            var excludes = Set<SyncDeviceID>()
            for _ in 0..<n { excludes.insert(try device()) }
            let m = Int(try r.u32())
            guard m <= SyncService.maximumDevices else {
                throw SyncFormatError("a rotation seals to too many devices")
            }
            var boxes: [SyncDeviceID: [UInt8]] = [:]
            for _ in 0..<m {
                let d = try device()
                boxes[d] = try bytes(Sodium.keyLength + SyncPairing.sealBytes)
            }
            return .rotate(generation: generation, excludes: excludes, boxes: boxes)
        case 6:
            return .snapshot
        case 7:
            let d = try device()
            let n = Int(try r.u32())
            guard n <= 1 << 16 else { throw SyncFormatError("a share of too many keys") }
            var boxes: [SyncKeyID: [UInt8]] = [:]
            for _ in 0..<n {
                let g = try r.u32()
                boxes[SyncKeyID(generation: g, rotator: try device())] = try bytes(
                    Sodium.keyLength + SyncPairing.sealBytes)
            }
            return .share(d, boxes)
        default:
            throw SyncFormatError("unknown record kind \(kind)")
        }
    }

    /// The change or group record a record holds, written by `device`. Throws
    /// `SyncFormatError` for anything malformed: an unknown kind, class or field, a field
    /// twice, a part over its limit, bytes left over.
    static func decode(_ record: UnsafeRawBufferPointer, device: SyncDeviceID) throws -> SyncRecord
    {
        var r = Reader(bytes: record)
        let kind = try r.u8()
        if kind >= 3 {
            let c = try decodeControl(kind, &r)
            guard r.at == record.count else { throw SyncFormatError("bytes after a record") }
            return .control(c)
        }
        guard kind == 1 || kind == 2 else { throw SyncFormatError("unknown record kind \(kind)") }
        let timestamp = SyncTimestamp(wall: try r.u64(), counter: try r.u32(), device: device)
        let itemClass: ItemClass
        switch try r.u8() {
        case 1: itemClass = .genericPassword
        case 2: itemClass = .internetPassword
        case let c: throw SyncFormatError("unknown item class \(c)")
        }
        let group = try r.text(limit: maximumKeyPartBytes)
        guard !group.isEmpty else { throw SyncFormatError("an empty access group") }
        var primaryKey: [String] = []
        for _ in 0..<SyncItemKey.primaryKeyCount(itemClass) {
            primaryKey.append(try r.text(limit: maximumKeyPartBytes))
        }
        if itemClass == .internetPassword {
            guard let port = Int(primaryKey[2]), (0...65535).contains(port),
                String(port) == primaryKey[2]
            else {
                throw SyncFormatError("a port that is not a decimal number in 0...65535")
            }
        }
        let key = SyncItemKey(itemClass: itemClass, accessGroup: group, primaryKey: primaryKey)
        guard kind == 1 else {
            guard r.at == record.count else { throw SyncFormatError("bytes after a record") }
            return .change(SyncChange(key: key, timestamp: timestamp, kind: .delete))
        }
        let count = Int(try r.u8())
        guard count <= SyncField.allCases.count else {
            throw SyncFormatError("more fields than a record has")
        }
        var fields: [SyncField: SyncValue?] = [:]
        for _ in 0..<count {
            let tag = try r.u8()
            guard let f = SyncField(rawValue: tag) else {
                throw SyncFormatError("unknown field \(tag)")
            }
            guard fields[f] == nil else { throw SyncFormatError("a field given twice") }
            switch try r.u8() {
            case 0:
                fields[f] = .some(nil)
            case 1:
                let limit =
                    f == .secret ? SecretLimit.maximumBytes : KeychainStore.maximumAttributesSize
                let p = try r.part(limit: limit)
                fields[f] = f == .secret ? .secret(SecureBytes(copying: p)) : .bytes(Array(p))
            case let x:
                throw SyncFormatError("a field's presence is \(x), not 0 or 1")
            }
        }
        let context = try decodeContext(&r)
        guard r.at == record.count else { throw SyncFormatError("bytes after a record") }
        return .change(
            SyncChange(key: key, timestamp: timestamp, kind: .write(fields), context: context))
    }
}
