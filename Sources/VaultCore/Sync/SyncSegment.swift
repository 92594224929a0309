internal import CSodium
import Foundation
import VaultProtocol

/// Why a segment or record was refused: the text is for the log (it never quotes content).
public struct SyncFormatError: Error, CustomStringConvertible, Sendable {
    public let description: String
    init(_ d: String) { description = d }
}

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

/// A member of the sync group as the others know it: its device ID, the crypto_box public key
/// new group keys are sealed to, and the crypto_sign public key its segments are signed with.
public struct SyncMember: Hashable, Sendable {
    public var device: SyncDeviceID
    public var boxKey: [UInt8]
    public var signKey: [UInt8]
}

/// A group record inside a segment (signed by the device that wrote it, like its changes).
public enum SyncControl: Equatable, Sendable {
    /// A device approved into the group, with its keys.
    case member(SyncMember)
    /// A device removed (or leaving): its segments after `cutoff` are never applied, nor any
    /// whose file is not the one `pins` names for its sequence (BLAKE2b of the file, as the
    /// remover merged it), so it cannot put in other versions of its earlier segments either.
    case remove(SyncDeviceID, cutoff: UInt64, pins: [UInt64: [UInt8]])
    /// A new group key of this generation, made by the segment's device, sealed
    /// (crypto_box_seal) to each remaining member; `excludes`: the removed devices it was made
    /// to keep out.
    case rotate(generation: UInt32, excludes: Set<SyncDeviceID>, boxes: [SyncDeviceID: [UInt8]])
    /// This segment is a snapshot: it replaces every earlier segment of its device.
    case snapshot
    /// Group keys sealed to a member approved elsewhere, which its approver may not have had
    /// (a key made at the same time as the approval).
    case share(SyncDeviceID, [SyncKeyID: [UInt8]])

    /// The most segments a removal pins (its record within `SyncWire.maximumRecordBytes`).
    static let maximumPins = 40_000
}

/// What one record of a segment holds.
enum SyncRecord {
    case change(SyncChange)
    case control(SyncControl)
}

/// Which group key sealed a segment: its generation and the device that made it (two devices
/// rotating at once make two keys of one generation). Ordered by generation, then device.
public struct SyncKeyID: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var generation: UInt32
    public var rotator: SyncDeviceID

    public init(generation: UInt32, rotator: SyncDeviceID) {
        self.generation = generation
        self.rotator = rotator
    }

    public static func < (a: SyncKeyID, b: SyncKeyID) -> Bool {
        a.generation != b.generation ? a.generation < b.generation : a.rotator < b.rotator
    }

    public var description: String { "\(generation)-\(rotator)" }

    var bytes: [UInt8] {
        var out: [UInt8] = []
        SyncWire.appendU32(generation, to: &out)
        return out + rotator.bytes
    }
}

/// Per-device signatures (libsodium crypto_sign, Ed25519ph over the whole file), so that a
/// member holding the group key cannot write in another member's name.
public enum SyncSigning {
    static var publicKeyBytes: Int { Int(crypto_sign_publickeybytes()) }
    static var secretKeyBytes: Int { Int(crypto_sign_secretkeybytes()) }
    static var signatureBytes: Int { Int(crypto_sign_bytes()) }

    /// A new crypto_sign key pair (the secret key in secure memory).
    static func keyPair() -> (publicKey: [UInt8], secretKey: SecureBytes) {
        Sodium.initialize()
        var pk = [UInt8](repeating: 0, count: publicKeyBytes)
        let sk = SecureBytes(count: secretKeyBytes)
        sk.withUnsafeMutableBytes { s in
            _ = crypto_sign_keypair(&pk, s.bindMemory(to: UInt8.self).baseAddress!)
        }
        return (pk, sk)
    }

    /// The public key of a secret key (libsodium keeps it in the secret key's second half).
    static func publicKey(of sk: SecureBytes) -> [UInt8] {
        var pk = [UInt8](repeating: 0, count: publicKeyBytes)
        sk.withUnsafeBytes { s in
            _ = crypto_sign_ed25519_sk_to_pk(&pk, s.bindMemory(to: UInt8.self).baseAddress!)
        }
        return pk
    }

    /// The signature of `parts` (one message: the parts in order).
    static func sign(_ parts: [[UInt8]], secretKey: SecureBytes) -> [UInt8] {
        var state = crypto_sign_state()
        _ = crypto_sign_init(&state)
        for p in parts { _ = crypto_sign_update(&state, p, UInt64(p.count)) }
        var sig = [UInt8](repeating: 0, count: signatureBytes)
        secretKey.withUnsafeBytes { s in
            _ = crypto_sign_final_create(
                &state, &sig, nil, s.bindMemory(to: UInt8.self).baseAddress!)
        }
        return sig
    }

    static func verify(
        _ parts: [ArraySlice<UInt8>], signature: ArraySlice<UInt8>, publicKey: [UInt8]
    ) -> Bool {
        guard signature.count == signatureBytes, publicKey.count == publicKeyBytes else {
            return false
        }
        var state = crypto_sign_state()
        _ = crypto_sign_init(&state)
        for p in parts {
            p.withUnsafeBufferPointer {
                _ = crypto_sign_update(&state, $0.baseAddress, UInt64($0.count))
            }
        }
        var sig = Array(signature)
        return crypto_sign_final_verify(&state, &sig, publicKey) == 0
    }
}

/// One segment: what one device wrote in one file, `devices/DEVICE/SEQUENCE.seg` (SEQUENCE: 16
/// hex digits), encrypted with libsodium's secretstream (crypto_secretstream_xchacha20poly1305)
/// under a group key, and signed with the device's crypto_sign key:
///
///     "VDSYNC2\0" · key ID (u32 generation · rotator 16) · 24-byte secretstream header
///     · (u32 length · message) × N · 64-byte signature
///
/// one message per record (padded to a multiple of 256 bytes), the group records first, then
/// an empty message tagged FINAL; each message has the associated data "vaultd sync segment
/// v2" · device ID · u64 sequence · key ID, so a segment renamed to another device or
/// sequence fails to open. The signature (Ed25519ph) covers "vaultd sync segment v2" ·
/// device · sequence and every byte before it; it is checked before anything is decrypted. A
/// segment cut short (no FINAL), with bytes after FINAL, with any message that fails to
/// authenticate, or a bad signature opens as nothing.
public struct SyncSegment: Equatable, Sendable {
    public var device: SyncDeviceID
    public var sequence: UInt64
    public var control: [SyncControl]
    public var changes: [SyncChange]

    public init(
        device: SyncDeviceID, sequence: UInt64, control: [SyncControl] = [], changes: [SyncChange]
    ) {
        self.device = device
        self.sequence = sequence
        self.control = control
        self.changes = changes
    }

    static let magic = Array("VDSYNC2\0".utf8)
    static let keyIDBytes = 4 + 16
    /// The largest segment file read (64 MiB): checked before a byte of it is read.
    public static let maximumFileBytes = 64 << 20
    /// The most records one segment may hold.
    public static let maximumChanges = 200_000
    /// How much record plaintext a writer puts in one segment before starting the next (4 MiB).
    public static let targetPlaintextBytes = 4 << 20

    /// Records are padded to a multiple of this many bytes (ISO/IEC 7816-4, `sodium_pad`), so
    /// the message lengths the folder shows tell an item's size only to 256 bytes.
    static let paddingBlock = 256

    /// Pads a record in place (its buffer reserved whole first, so no copy is left unwiped).
    static func pad(_ record: inout [UInt8]) {
        let n = record.count
        let total = (n / paddingBlock + 1) * paddingBlock
        var padded = [UInt8](repeating: 0, count: total)
        padded.withUnsafeMutableBufferPointer { p in
            for i in 0..<n { p[i] = record[i] }
            var out = 0
            _ = sodium_pad(&out, p.baseAddress!, n, paddingBlock, total)
        }
        record.wipe()
        record = padded
    }

    static var headerBytes: Int { Int(crypto_secretstream_xchacha20poly1305_headerbytes()) }
    static var aBytes: Int { Int(crypto_secretstream_xchacha20poly1305_abytes()) }
    static var prefixBytes: Int { magic.count + keyIDBytes + headerBytes }

    /// The file name of sequence `n`: 16 lowercase hex digits and ".seg".
    public static func fileName(_ n: UInt64) -> String {
        let hex = String(n, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex + ".seg"
    }

    /// The largest sequence a segment may have (2⁶²). A device starts at 1 and counts up by
    /// one a segment, so no writer comes near it; a name above it is no segment, and every
    /// sequence read from a name can be added to without overflowing.
    public static let maximumSequence: UInt64 = 1 << 62

    /// The sequence a segment file name stands for: 16 lowercase hex digits from 1 to
    /// `maximumSequence`, then ".seg"; nil for any other name.
    public static func sequence(ofFileName name: String) -> UInt64? {
        let u = Array(name.utf8)
        guard u.count == 20, name.hasSuffix(".seg") else { return nil }
        let hex = String(name.prefix(16))
        guard hex.utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) }),
            let n = UInt64(hex, radix: 16)
        else { return nil }
        return (1...maximumSequence).contains(n) ? n : nil
    }

    /// Whether `file` is a whole segment signed with `verifyKey` for the name of `device`'s
    /// sequence `sequence` (the signature only: nothing is decrypted).
    static func isSigned(
        _ file: [UInt8], device: SyncDeviceID, sequence: UInt64, verifyKey: [UInt8]
    ) -> Bool {
        guard file.count <= maximumFileBytes, keyID(of: file) != nil,
            file.count >= prefixBytes + SyncSigning.signatureBytes
        else { return false }
        let body = file.count - SyncSigning.signatureBytes
        return SyncSigning.verify(
            [nameBytes(device, sequence)[...], file[..<body]], signature: file[body...],
            publicKey: verifyKey)
    }

    static let fileHashBytes = 16

    /// A segment file's hash, as a removal pins it (BLAKE2b, 16 bytes, unkeyed).
    static func fileHash(_ file: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: fileHashBytes)
        _ = crypto_generichash(&out, fileHashBytes, file, UInt64(file.count), nil, 0)
        return out
    }

    static func nameBytes(_ device: SyncDeviceID, _ sequence: UInt64) -> [UInt8] {
        var ad = Array("vaultd sync segment v2".utf8)
        ad += device.bytes
        SyncWire.appendU64(sequence, to: &ad)
        return ad
    }

    /// The key a segment file names, nil when it is not a segment.
    public static func keyID(of file: [UInt8]) -> SyncKeyID? {
        guard file.count >= prefixBytes, Array(file.prefix(magic.count)) == magic else {
            return nil
        }
        let m = magic.count
        let g =
            UInt32(file[m]) | UInt32(file[m + 1]) << 8 | UInt32(file[m + 2]) << 16 | UInt32(
                file[m + 3]) << 24
        return SyncKeyID(
            generation: g, rotator: SyncDeviceID(bytes: Array(file[(m + 4)..<(m + 20)]))!)
    }

    /// The encrypted, signed file. Every record's plaintext is wiped once encrypted.
    public func sealed(key: SecureBytes, keyID: SyncKeyID, signingKey: SecureBytes) -> [UInt8] {
        Sodium.initialize()
        precondition(key.count == Int(crypto_secretstream_xchacha20poly1305_keybytes()))
        var state = crypto_secretstream_xchacha20poly1305_state()
        defer { withUnsafeMutableBytes(of: &state) { $0.wipe() } }
        var header = [UInt8](repeating: 0, count: Self.headerBytes)
        key.withUnsafeBytes { k in
            _ = crypto_secretstream_xchacha20poly1305_init_push(
                &state, &header, k.bindMemory(to: UInt8.self).baseAddress!)
        }
        let name = Self.nameBytes(device, sequence)
        let ad = name + keyID.bytes
        var out = Self.magic + keyID.bytes + header
        func push(_ message: [UInt8], tag: UInt8) {
            var c = [UInt8](repeating: 0, count: message.count + Self.aBytes)
            var clen: UInt64 = 0
            _ = crypto_secretstream_xchacha20poly1305_push(
                &state, &c, &clen, message, UInt64(message.count), ad, UInt64(ad.count), tag)
            SyncWire.appendU32(UInt32(clen), to: &out)
            out += c.prefix(Int(clen))
        }
        for c in control {
            var record = SyncWire.encode(c)
            Self.pad(&record)
            push(record, tag: 0)
        }
        for change in changes {
            var record = SyncWire.encode(change)
            Self.pad(&record)
            push(record, tag: 0)
            record.wipe()
        }
        push([], tag: UInt8(crypto_secretstream_xchacha20poly1305_tag_final()))
        return out + SyncSigning.sign([name, out], secretKey: signingKey)
    }

    /// Opens a segment file's bytes, written by `device` as sequence `sequence`, signed with
    /// `verifyKey` and sealed under `key`. Throws `SyncFormatError` when it is not one whole
    /// segment signed by that device and sealed under that key for that name, or when a
    /// record in it is malformed: the segment is then refused whole.
    public static func open(
        _ file: [UInt8], key: SecureBytes, device: SyncDeviceID, sequence: UInt64,
        verifyKey: [UInt8]
    ) throws -> SyncSegment {
        Sodium.initialize()
        guard file.count <= maximumFileBytes else {
            throw SyncFormatError("the segment is over \(maximumFileBytes) bytes")
        }
        guard let keyID = keyID(of: file), file.count >= prefixBytes + SyncSigning.signatureBytes
        else {
            throw SyncFormatError("not a vaultd sync segment")
        }
        let name = nameBytes(device, sequence)
        let body = file.count - SyncSigning.signatureBytes
        guard
            SyncSigning.verify(
                [name[...], file[..<body]], signature: file[body...], publicKey: verifyKey)
        else {
            throw SyncFormatError(
                "the segment's signature is not its device's (forged, altered, or renamed)")
        }
        var state = crypto_secretstream_xchacha20poly1305_state()
        defer { withUnsafeMutableBytes(of: &state) { $0.wipe() } }
        let ok = file.withUnsafeBufferPointer { f in
            key.withUnsafeBytes { k in
                crypto_secretstream_xchacha20poly1305_init_pull(
                    &state, f.baseAddress! + magic.count + keyIDBytes,
                    k.bindMemory(to: UInt8.self).baseAddress!)
            }
        }
        guard ok == 0 else { throw SyncFormatError("the segment's header is invalid") }
        var segment = SyncSegment(device: device, sequence: sequence, changes: [])
        let ad = name + keyID.bytes
        var at = prefixBytes
        let finalTag = UInt8(crypto_secretstream_xchacha20poly1305_tag_final())
        var records = 0
        while true {
            guard body - at >= 4 else {
                throw SyncFormatError("the segment is cut short (no final message)")
            }
            let n = Int(
                UInt32(file[at]) | UInt32(file[at + 1]) << 8 | UInt32(file[at + 2]) << 16 | UInt32(
                    file[at + 3]) << 24)
            at += 4
            guard n >= aBytes, n <= SyncWire.maximumRecordBytes + paddingBlock + aBytes,
                n <= body - at
            else {
                throw SyncFormatError("a message's length is out of bounds")
            }
            let plain = SecureBytes(count: n - aBytes)
            var tag: UInt8 = 0
            let rc = file.withUnsafeBufferPointer { f in
                plain.withUnsafeMutableBytes { p in
                    var mlen: UInt64 = 0
                    return crypto_secretstream_xchacha20poly1305_pull(
                        &state, p.bindMemory(to: UInt8.self).baseAddress, &mlen, &tag,
                        f.baseAddress! + at, UInt64(n), ad, UInt64(ad.count))
                }
            }
            guard rc == 0 else {
                throw SyncFormatError(
                    "a message failed to authenticate (wrong key, altered, or renamed)")
            }
            at += n
            if tag == finalTag {
                guard plain.count == 0, at == body else {
                    throw SyncFormatError("bytes after the final message")
                }
                return segment
            }
            guard tag == 0 else { throw SyncFormatError("an unexpected message tag") }
            records += 1
            guard records <= maximumChanges else {
                throw SyncFormatError("more than \(maximumChanges) records")
            }
            let record = try plain.withUnsafeBytes { p in
                var n = 0
                guard p.count > 0,
                    sodium_unpad(
                        &n, p.bindMemory(to: UInt8.self).baseAddress!, p.count, paddingBlock) == 0
                else {
                    throw SyncFormatError("a record's padding is malformed")
                }
                return try SyncWire.decode(
                    UnsafeRawBufferPointer(rebasing: p[..<n]), device: device)
            }
            switch record {
            case .change(let c): segment.changes.append(c)
            case .control(let c):
                guard segment.changes.isEmpty else {
                    throw SyncFormatError("a group record after a change")
                }
                segment.control.append(c)
            }
        }
    }
}

/// A device's acknowledgement, `devices/DEVICE/ack`: for every device, the sequence up to
/// which it has merged all of that device's segments. Signed by the device, not encrypted
/// (sequence numbers are file names already):
///
///     "VDACK01\0" · u32 n · (device 16 · u64 sequence) × n · 64-byte signature
///
/// the signature over "vaultd sync ack v1" · device · everything before it. Readers keep the
/// largest value they have seen of each, so an older file put back changes nothing.
enum SyncAck {
    static let magic = Array("VDACK01\0".utf8)
    static let name = "ack"
    static var maximumBytes: Int {
        magic.count + 4 + SyncService.maximumDevices * 24 + SyncSigning.signatureBytes
    }

    static func file(_ acks: [SyncDeviceID: UInt64], device: SyncDeviceID, signingKey: SecureBytes)
        -> [UInt8]
    {
        var out = magic
        SyncWire.appendU32(UInt32(acks.count), to: &out)
        for d in acks.keys.sorted() {
            out += d.bytes
            SyncWire.appendU64(acks[d]!, to: &out)
        }
        return out
            + SyncSigning.sign(
                [Array("vaultd sync ack v1".utf8) + device.bytes, out], secretKey: signingKey)
    }

    static func parse(_ f: [UInt8], device: SyncDeviceID, verifyKey: [UInt8]) -> [SyncDeviceID:
        UInt64]?
    {
        let m = magic.count
        guard f.count >= m + 4 + SyncSigning.signatureBytes, f.count <= maximumBytes,
            Array(f.prefix(m)) == magic
        else { return nil }
        let n = Int(
            UInt32(f[m]) | UInt32(f[m + 1]) << 8 | UInt32(f[m + 2]) << 16 | UInt32(f[m + 3]) << 24)
        guard n <= SyncService.maximumDevices,
            f.count == m + 4 + n * 24 + SyncSigning.signatureBytes
        else { return nil }
        let body = f.count - SyncSigning.signatureBytes
        guard
            SyncSigning.verify(
                [(Array("vaultd sync ack v1".utf8) + device.bytes)[...], f[..<body]],
                signature: f[body...], publicKey: verifyKey)
        else {
            return nil
        }
        var out: [SyncDeviceID: UInt64] = [:]
        for i in 0..<n {
            let at = m + 4 + i * 24
            var v: UInt64 = 0
            for j in 0..<8 { v |= UInt64(f[at + 16 + j]) << (8 * UInt64(j)) }
            out[SyncDeviceID(bytes: Array(f[at..<(at + 16)]))!] = v
        }
        return out
    }
}

/// The sealed boxes of pairing: a joining device's public keys, and the group's keys and
/// membership sealed to it (crypto_box_seal: only the holder of the secret key opens it; the
/// sender stays anonymous, which is why the pairing code binds the public keys).
public enum SyncPairing {
    static let joinMagic = Array("VDJOIN2\0".utf8)
    static let grantMagic = Array("VDGRNT2\0".utf8)
    static var publicKeyBytes: Int { Int(crypto_box_publickeybytes()) }
    static var secretKeyBytes: Int { Int(crypto_box_secretkeybytes()) }
    static var sealBytes: Int { Int(crypto_box_sealbytes()) }
    /// The largest grant read: every key and member of a group of `maximumDevices`.
    static let maximumGrantBytes = 256 << 10

    /// A new crypto_box key pair (the secret key in secure memory).
    static func keyPair() -> (publicKey: [UInt8], secretKey: SecureBytes) {
        Sodium.initialize()
        var pk = [UInt8](repeating: 0, count: publicKeyBytes)
        let sk = SecureBytes(count: secretKeyBytes)
        sk.withUnsafeMutableBytes { s in
            _ = crypto_box_keypair(&pk, s.bindMemory(to: UInt8.self).baseAddress!)
        }
        return (pk, sk)
    }

    /// The public key of a secret key (crypto_scalarmult_base, as crypto_box_keypair made it).
    static func publicKey(of sk: SecureBytes) -> [UInt8] {
        var pk = [UInt8](repeating: 0, count: publicKeyBytes)
        sk.withUnsafeBytes { s in
            _ = crypto_scalarmult_base(&pk, s.bindMemory(to: UInt8.self).baseAddress!)
        }
        return pk
    }

    /// The file a joining device writes: its crypto_box and crypto_sign public keys.
    static func joinFile(boxKey: [UInt8], signKey: [UInt8]) -> [UInt8] {
        joinMagic + boxKey + signKey
    }

    /// The public keys a join file holds; nil when it is not one.
    static func keys(ofJoinFile f: [UInt8]) -> (boxKey: [UInt8], signKey: [UInt8])? {
        guard f.count == joinMagic.count + publicKeyBytes + SyncSigning.publicKeyBytes,
            Array(f.prefix(joinMagic.count)) == joinMagic
        else { return nil }
        let keys = f.dropFirst(joinMagic.count)
        return (Array(keys.prefix(publicKeyBytes)), Array(keys.suffix(SyncSigning.publicKeyBytes)))
    }

    /// The 16 bytes of a device's public keys a pairing code carries (BLAKE2b, unkeyed).
    static func fingerprint(boxKey: [UInt8], signKey: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 16)
        let both = boxKey + signKey
        _ = crypto_generichash(&out, 16, both, UInt64(both.count), nil, 0)
        return out
    }

    /// `key` sealed to `publicKey` (crypto_box_seal).
    static func seal(_ key: SecureBytes, to publicKey: [UInt8]) -> [UInt8] {
        Sodium.initialize()
        var c = [UInt8](repeating: 0, count: key.count + sealBytes)
        key.withUnsafeBytes { k in
            _ = crypto_box_seal(
                &c, k.bindMemory(to: UInt8.self).baseAddress!, UInt64(k.count), publicKey)
        }
        return c
    }

    /// What a box sealed to the key pair holds; nil when it was not sealed to it.
    static func unseal(_ box: ArraySlice<UInt8>, publicKey: [UInt8], secretKey: SecureBytes)
        -> SecureBytes?
    {
        guard box.count >= sealBytes else { return nil }
        let out = SecureBytes(count: box.count - sealBytes)
        let b = Array(box)
        let rc = out.withUnsafeMutableBytes { o in
            secretKey.withUnsafeBytes { s in
                crypto_box_seal_open(
                    o.bindMemory(to: UInt8.self).baseAddress!, b, UInt64(b.count), publicKey,
                    s.bindMemory(to: UInt8.self).baseAddress!)
            }
        }
        return rc == 0 ? out : nil
    }

    /// The group's keys and membership sealed to `publicKey`, as a grant file: sealed
    /// u32 keyring length · keyring (`SyncKeyring.encode`) · membership (JSON).
    static func grantFile(keyring: SyncKeyring, membership: SyncMembership, to publicKey: [UInt8])
        -> [UInt8]
    {
        let ring = keyring.encoded()
        let view = membership.json.serialized()
        let payload = SecureBytes(count: 4 + ring.count + view.count)
        payload.withUnsafeMutableBytes { p in
            var n = UInt32(ring.count).littleEndian
            withUnsafeBytes(of: &n) { for i in 0..<4 { p[i] = $0[i] } }
            ring.withUnsafeBytes { r in for i in 0..<r.count { p[4 + i] = r[i] } }
            for (i, b) in view.enumerated() { p[4 + ring.count + i] = b }
        }
        return grantMagic + seal(payload, to: publicKey)
    }

    /// The keys and membership in a grant file sealed to the key pair; nil when it is not one
    /// or was not sealed to it.
    static func openGrant(_ f: [UInt8], publicKey: [UInt8], secretKey: SecureBytes) -> (
        SyncKeyring, SyncMembership
    )? {
        guard f.count <= maximumGrantBytes, f.count > grantMagic.count,
            Array(f.prefix(grantMagic.count)) == grantMagic,
            let payload = unseal(
                f.dropFirst(grantMagic.count), publicKey: publicKey, secretKey: secretKey)
        else { return nil }
        return payload.withUnsafeBytes { p -> (SyncKeyring, SyncMembership)? in
            guard p.count >= 4 else { return nil }
            let n = Int(UInt32(p[0]) | UInt32(p[1]) << 8 | UInt32(p[2]) << 16 | UInt32(p[3]) << 24)
            guard n <= p.count - 4,
                let ring = SyncKeyring(encoded: UnsafeRawBufferPointer(rebasing: p[4..<(4 + n)])),
                let json = try? JSON.parse(Array(p[(4 + n)...])), let view = SyncMembership(json)
            else { return nil }
            return (ring, view)
        }
    }

    /// The group's fingerprint, shown by `sync status` on every device so the owner can check
    /// two devices hold the same group key: 8 bytes of BLAKE2b keyed with it, in hex.
    public static func groupFingerprint(_ key: SecureBytes) -> String {
        SyncHex.encode(
            Sodium.keyedHash(Array("vaultd sync group fingerprint".utf8), key: key, length: 16)
                .prefix(8).map { $0 })
    }
}
