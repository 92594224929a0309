internal import CSodium
import Foundation
import VaultProtocol

/// Why a segment or record was refused: the text is for the log (it never quotes content).
public struct SyncFormatError: Error, CustomStringConvertible, Sendable {
    public let description: String
    init(_ d: String) { description = d }
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
