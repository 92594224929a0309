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
///
/// The device of a record's timestamp is the segment's: a record cannot claim another's.
enum SyncWire {
    /// The most bytes one variable part of a key (group, primary-key attribute) may take.
    static let maximumKeyPartBytes = 64 << 10
    /// The most bytes one record may take: a 1 MiB secret, attributes within the keychain's
    /// 64 KiB limit, the key, framing.
    static let maximumRecordBytes = SecretLimit.maximumBytes + 3 * KeychainStore.maximumAttributesSize

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
            guard n <= limit, n <= bytes.count - at else { throw SyncFormatError("a record's part is longer than allowed or than the record") }
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

    /// The change a record holds, written by `device`. Throws `SyncFormatError` for anything
    /// malformed: an unknown kind, class or field, a field twice, a part over its limit,
    /// bytes left over.
    static func decode(_ record: UnsafeRawBufferPointer, device: SyncDeviceID) throws -> SyncChange {
        var r = Reader(bytes: record)
        let kind = try r.u8()
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
        for _ in 0..<SyncItemKey.primaryKeyCount(itemClass) { primaryKey.append(try r.text(limit: maximumKeyPartBytes)) }
        if itemClass == .internetPassword {
            guard let port = Int(primaryKey[2]), (0...65535).contains(port), String(port) == primaryKey[2] else {
                throw SyncFormatError("a port that is not a decimal number in 0...65535")
            }
        }
        let key = SyncItemKey(itemClass: itemClass, accessGroup: group, primaryKey: primaryKey)
        guard kind == 1 else {
            guard r.at == record.count else { throw SyncFormatError("bytes after a record") }
            return SyncChange(key: key, timestamp: timestamp, kind: .delete)
        }
        let count = Int(try r.u8())
        guard count <= SyncField.allCases.count else { throw SyncFormatError("more fields than a record has") }
        var fields: [SyncField: SyncValue?] = [:]
        for _ in 0..<count {
            let tag = try r.u8()
            guard let f = SyncField(rawValue: tag) else { throw SyncFormatError("unknown field \(tag)") }
            guard fields[f] == nil else { throw SyncFormatError("a field given twice") }
            switch try r.u8() {
            case 0:
                fields[f] = .some(nil)
            case 1:
                let limit = f == .secret ? SecretLimit.maximumBytes : KeychainStore.maximumAttributesSize
                let p = try r.part(limit: limit)
                fields[f] = f == .secret ? .secret(SecureBytes(copying: p)) : .bytes(Array(p))
            case let x:
                throw SyncFormatError("a field's presence is \(x), not 0 or 1")
            }
        }
        guard r.at == record.count else { throw SyncFormatError("bytes after a record") }
        return SyncChange(key: key, timestamp: timestamp, kind: .write(fields))
    }
}

/// One segment: the changes one device wrote in one file, `devices/DEVICE/SEQUENCE.seg`
/// (SEQUENCE: 16 hex digits), encrypted with libsodium's secretstream
/// (crypto_secretstream_xchacha20poly1305) under the group key:
///
///     "VDSYNC1\0" · 24-byte secretstream header · (u32 length · message) × N
///
/// one message per record (padded to a multiple of 256 bytes), then an empty message tagged FINAL, each with the associated data
/// "vaultd sync segment v1" · device ID · u64 sequence, so a segment renamed to another
/// device or sequence fails to open. A segment cut short (no FINAL), with bytes after FINAL,
/// or with any message that fails to authenticate opens as nothing.
public struct SyncSegment: Equatable, Sendable {
    public var device: SyncDeviceID
    public var sequence: UInt64
    public var changes: [SyncChange]

    public init(device: SyncDeviceID, sequence: UInt64, changes: [SyncChange]) {
        self.device = device
        self.sequence = sequence
        self.changes = changes
    }

    static let magic = Array("VDSYNC1\0".utf8)
    /// The largest segment file read (64 MiB): checked before a byte of it is read.
    public static let maximumFileBytes = 64 << 20
    /// The most changes one segment may hold.
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

    /// The file name of sequence `n`: 16 lowercase hex digits and ".seg".
    public static func fileName(_ n: UInt64) -> String {
        let hex = String(n, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex + ".seg"
    }

    /// The sequence a segment file name stands for; nil for any other name.
    public static func sequence(ofFileName name: String) -> UInt64? {
        let u = Array(name.utf8)
        guard u.count == 20, name.hasSuffix(".seg") else { return nil }
        let hex = String(name.prefix(16))
        guard hex.utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) }) else { return nil }
        return UInt64(hex, radix: 16)
    }

    func associatedData() -> [UInt8] {
        var ad = Array("vaultd sync segment v1".utf8)
        ad += device.bytes
        SyncWire.appendU64(sequence, to: &ad)
        return ad
    }

    /// The encrypted file. Every record's plaintext is wiped once encrypted.
    public func sealed(key: SecureBytes) -> [UInt8] {
        Sodium.initialize()
        precondition(key.count == Int(crypto_secretstream_xchacha20poly1305_keybytes()))
        var state = crypto_secretstream_xchacha20poly1305_state()
        defer { withUnsafeMutableBytes(of: &state) { $0.wipe() } }
        var header = [UInt8](repeating: 0, count: Self.headerBytes)
        key.withUnsafeBytes { k in
            _ = crypto_secretstream_xchacha20poly1305_init_push(&state, &header, k.bindMemory(to: UInt8.self).baseAddress!)
        }
        let ad = associatedData()
        var out = Self.magic + header
        func push(_ message: [UInt8], tag: UInt8) {
            var c = [UInt8](repeating: 0, count: message.count + Self.aBytes)
            var clen: UInt64 = 0
            _ = crypto_secretstream_xchacha20poly1305_push(&state, &c, &clen, message, UInt64(message.count), ad, UInt64(ad.count), tag)
            SyncWire.appendU32(UInt32(clen), to: &out)
            out += c.prefix(Int(clen))
        }
        for change in changes {
            var record = SyncWire.encode(change)
            Self.pad(&record)
            push(record, tag: 0)
            record.wipe()
        }
        push([], tag: UInt8(crypto_secretstream_xchacha20poly1305_tag_final()))
        return out
    }

    /// Opens a segment file's bytes, written by `device` as sequence `sequence`. Throws
    /// `SyncFormatError` when it is not one whole segment sealed under `key` for that name, or
    /// when a record in it is malformed: the segment is then refused whole.
    public static func open(_ file: [UInt8], key: SecureBytes, device: SyncDeviceID, sequence: UInt64) throws -> SyncSegment {
        Sodium.initialize()
        guard file.count <= maximumFileBytes else { throw SyncFormatError("the segment is over \(maximumFileBytes) bytes") }
        guard file.count >= magic.count + headerBytes, Array(file.prefix(magic.count)) == magic else {
            throw SyncFormatError("not a vaultd sync segment")
        }
        var state = crypto_secretstream_xchacha20poly1305_state()
        defer { withUnsafeMutableBytes(of: &state) { $0.wipe() } }
        let ok = file.withUnsafeBufferPointer { f in
            key.withUnsafeBytes { k in
                crypto_secretstream_xchacha20poly1305_init_pull(&state, f.baseAddress! + magic.count, k.bindMemory(to: UInt8.self).baseAddress!)
            }
        }
        guard ok == 0 else { throw SyncFormatError("the segment's header is invalid") }
        var segment = SyncSegment(device: device, sequence: sequence, changes: [])
        let ad = segment.associatedData()
        var at = magic.count + headerBytes
        let finalTag = UInt8(crypto_secretstream_xchacha20poly1305_tag_final())
        while true {
            guard file.count - at >= 4 else { throw SyncFormatError("the segment is cut short (no final message)") }
            let n = Int(UInt32(file[at]) | UInt32(file[at + 1]) << 8 | UInt32(file[at + 2]) << 16 | UInt32(file[at + 3]) << 24)
            at += 4
            guard n >= aBytes, n <= SyncWire.maximumRecordBytes + paddingBlock + aBytes, n <= file.count - at else {
                throw SyncFormatError("a message's length is out of bounds")
            }
            let plain = SecureBytes(count: n - aBytes)
            var tag: UInt8 = 0
            let rc = file.withUnsafeBufferPointer { f in
                plain.withUnsafeMutableBytes { p in
                    var mlen: UInt64 = 0
                    return crypto_secretstream_xchacha20poly1305_pull(
                        &state, p.bindMemory(to: UInt8.self).baseAddress, &mlen, &tag, f.baseAddress! + at, UInt64(n), ad, UInt64(ad.count))
                }
            }
            guard rc == 0 else { throw SyncFormatError("a message failed to authenticate (wrong key, altered, or renamed)") }
            at += n
            if tag == finalTag {
                guard plain.count == 0, at == file.count else { throw SyncFormatError("bytes after the final message") }
                return segment
            }
            guard tag == 0 else { throw SyncFormatError("an unexpected message tag") }
            guard segment.changes.count < maximumChanges else { throw SyncFormatError("more than \(maximumChanges) changes") }
            segment.changes.append(
                try plain.withUnsafeBytes { p in
                    var n = 0
                    guard p.count > 0, sodium_unpad(&n, p.bindMemory(to: UInt8.self).baseAddress!, p.count, paddingBlock) == 0 else {
                        throw SyncFormatError("a record's padding is malformed")
                    }
                    return try SyncWire.decode(UnsafeRawBufferPointer(rebasing: p[..<n]), device: device)
                })
        }
    }
}

/// The sealed boxes of pairing: a joining device's public key, and the group key sealed to it
/// (crypto_box_seal: only the holder of the secret key opens it; the sender stays anonymous,
/// which is why the pairing code binds the public key).
public enum SyncPairing {
    static let joinMagic = Array("VDJOIN1\0".utf8)
    static let grantMagic = Array("VDGRNT1\0".utf8)
    static var publicKeyBytes: Int { Int(crypto_box_publickeybytes()) }
    static var secretKeyBytes: Int { Int(crypto_box_secretkeybytes()) }
    static var sealBytes: Int { Int(crypto_box_sealbytes()) }

    /// A new crypto_box key pair (the secret key in secure memory).
    static func keyPair() -> (publicKey: [UInt8], secretKey: SecureBytes) {
        Sodium.initialize()
        var pk = [UInt8](repeating: 0, count: publicKeyBytes)
        let sk = SecureBytes(count: secretKeyBytes)
        sk.withUnsafeMutableBytes { s in _ = crypto_box_keypair(&pk, s.bindMemory(to: UInt8.self).baseAddress!) }
        return (pk, sk)
    }

    /// The public key of a secret key (crypto_scalarmult_base, as crypto_box_keypair made it).
    static func publicKey(of sk: SecureBytes) -> [UInt8] {
        var pk = [UInt8](repeating: 0, count: publicKeyBytes)
        sk.withUnsafeBytes { s in _ = crypto_scalarmult_base(&pk, s.bindMemory(to: UInt8.self).baseAddress!) }
        return pk
    }

    /// The file a joining device writes: its public key.
    static func joinFile(publicKey: [UInt8]) -> [UInt8] { joinMagic + publicKey }

    /// The public key a join file holds; nil when it is not one.
    static func publicKey(ofJoinFile f: [UInt8]) -> [UInt8]? {
        guard f.count == joinMagic.count + publicKeyBytes, Array(f.prefix(joinMagic.count)) == joinMagic else { return nil }
        return Array(f.suffix(publicKeyBytes))
    }

    /// The 16 bytes of a public key a pairing code carries (BLAKE2b, unkeyed).
    static func fingerprint(ofPublicKey pk: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 16)
        _ = crypto_generichash(&out, 16, pk, UInt64(pk.count), nil, 0)
        return out
    }

    /// The group key sealed to `publicKey`, as a grant file.
    static func grantFile(groupKey: SecureBytes, to publicKey: [UInt8]) -> [UInt8] {
        Sodium.initialize()
        var c = [UInt8](repeating: 0, count: groupKey.count + sealBytes)
        groupKey.withUnsafeBytes { k in
            _ = crypto_box_seal(&c, k.bindMemory(to: UInt8.self).baseAddress!, UInt64(k.count), publicKey)
        }
        return grantMagic + c
    }

    /// The group key in a grant file sealed to the key pair; nil when it is not one or was not
    /// sealed to it.
    static func openGrant(_ f: [UInt8], publicKey: [UInt8], secretKey: SecureBytes) -> SecureBytes? {
        guard f.count == grantMagic.count + Sodium.keyLength + sealBytes, Array(f.prefix(grantMagic.count)) == grantMagic else { return nil }
        let box = Array(f.dropFirst(grantMagic.count))
        let key = SecureBytes(count: Sodium.keyLength)
        let rc = key.withUnsafeMutableBytes { k in
            secretKey.withUnsafeBytes { s in
                crypto_box_seal_open(k.bindMemory(to: UInt8.self).baseAddress!, box, UInt64(box.count), publicKey, s.bindMemory(to: UInt8.self).baseAddress!)
            }
        }
        return rc == 0 ? key : nil
    }

    /// The group's fingerprint, shown by `sync status` on every device so the owner can check
    /// two devices hold the same group key: 8 bytes of BLAKE2b keyed with it, in hex.
    public static func groupFingerprint(_ key: SecureBytes) -> String {
        SyncHex.encode(Sodium.keyedHash(Array("vaultd sync group fingerprint".utf8), key: key, length: 16).prefix(8).map { $0 })
    }
}
