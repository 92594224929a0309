// libFuzzer target for what vaultd reads from a sync folder, which any writer of the folder
// (a peer, a removed device, a same-user program) controls: segment files (`SyncSegment.open`
// and their records, `SyncWire.decode`, change and group records: members, removals, key
// rotations and shares), acknowledgement files (`SyncAck.parse`), file names
// (`SyncSegment.sequence(ofFileName:)`) and the stored group keyring (`SyncKeyring`). Built
// by Fuzz/run.sh against VaultCore (`@testable`).
//
// A signature covers every segment and acknowledgement, so a fuzzer could not pass it: the
// target signs what the input holds with its own device key (the case of a member, or a
// removed one, that writes a malformed file) and opens it with the matching public key. The
// input's first byte chooses what the rest is:
//   0: one record;  1: a segment file's bytes before its signature;  2: an acknowledgement
//   file's bytes before its signature;  3: a file name and a keyring;  else: a segment file
//   as it is (unsigned: the checks before the signature).
//
// Invariants (a violation traps): nothing crashes, hangs or leaks; a record that decodes
// encodes to bytes that decode to the same record again.
//
// Seeds (Fuzz/corpus/sync/) are written by vaultd's own writers (`SyncWire.encode`,
// `SyncSegment.sealed`, `SyncAck.file`) with this target's keys: run the fuzzer with
// FUZZ_WRITE_SEEDS=DIR to write them again (`seeds()` below says what they hold).
import CSodium
import Foundation
import VaultProtocol

@testable import VaultCore

let device = SyncDeviceID(bytes: Array(repeating: 0x11, count: 16))!
/// The target's device signing key (crypto_sign), from a fixed seed so the committed seeds
/// stay signed by it.
let signing: (publicKey: [UInt8], secretKey: SecureBytes) = {
    var pk = [UInt8](repeating: 0, count: Int(crypto_sign_publickeybytes()))
    var sk = [UInt8](repeating: 0, count: Int(crypto_sign_secretkeybytes()))
    let seed = [UInt8](repeating: 0x5E, count: Int(crypto_sign_seedbytes()))
    _ = crypto_sign_seed_keypair(&pk, &sk, seed)
    return (pk, SecureBytes(copying: sk))
}()
let groupKey = SecureBytes(copying: Array(repeating: 0x42, count: 32))

func record(_ bytes: [UInt8]) {
    let decoded = bytes.withUnsafeBytes { try? SyncWire.decode($0, device: device) }
    let again: [UInt8]
    switch decoded {
    case .change(let c)?: again = SyncWire.encode(c)
    case .control(let c)?: again = SyncWire.encode(c)
    case nil: return
    }
    let twice = again.withUnsafeBytes { try? SyncWire.decode($0, device: device) }
    let encodedTwice: [UInt8]?
    switch twice {
    case .change(let c)?: encodedTwice = SyncWire.encode(c)
    case .control(let c)?: encodedTwice = SyncWire.encode(c)
    case nil: encodedTwice = nil
    }
    precondition(encodedTwice == again, "a decoded record does not encode to itself")
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let rest = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    switch data[0] {
    case 0:
        record(rest)
    case 1:
        let signed =
            rest
            + SyncSigning.sign(
                [SyncSegment.nameBytes(device, 7), rest], secretKey: signing.secretKey)
        _ = try? SyncSegment.open(
            signed, key: groupKey, device: device, sequence: 7, verifyKey: signing.publicKey)
    case 2:
        let signed =
            rest
            + SyncSigning.sign(
                [Array("vaultd sync ack v1".utf8) + device.bytes, rest],
                secretKey: signing.secretKey)
        _ = SyncAck.parse(signed, device: device, verifyKey: signing.publicKey)
    case 3:
        if let n = SyncSegment.sequence(ofFileName: String(decoding: rest, as: UTF8.self)) {
            precondition(SyncSegment.sequence(ofFileName: SyncSegment.fileName(n)) == n)
        }
        _ = rest.withUnsafeBytes { SyncKeyring(encoded: $0) }
    default:
        _ = try? SyncSegment.open(
            rest, key: groupKey, device: device, sequence: 7, verifyKey: signing.publicKey)
        _ = SyncSegment.keyID(of: rest)
    }
    return 0
}

/// Segments, records and acknowledgements as vaultd writes them: additions of both item
/// classes (every field, a 70,000-byte secret, a non-ASCII label), a deletion, and every group
/// record (a member, a removal with pins, a key rotation, a snapshot, a share).
func seeds() -> [String: [UInt8]] {
    let other = SyncDeviceID(bytes: Array(repeating: 0x22, count: 16))!
    let t = { (n: UInt64) in
        SyncTimestamp(wall: 1_765_000_000_000 + n, counter: UInt32(n), device: device)
    }
    let generic = SyncItemKey(
        itemClass: .genericPassword, accessGroup: "team.shared", primaryKey: ["mail", "ann"])
    let internet = SyncItemKey(
        itemClass: .internetPassword, accessGroup: "git",
        primaryKey: ["example.org", "https", "8443", "/x", "bob", "form", ""])
    var fields: [SyncField: SyncValue?] = [:]
    for f in SyncField.allCases { fields[f] = .some(.bytes(Array("\(f)-värde".utf8))) }
    fields[.secret] = .secret(SecureBytes(copying: Array(repeating: 0x5A, count: 70_000)))
    fields[.comment] = .some(nil)
    let changes = [
        SyncChange(key: generic, timestamp: t(1), kind: .write(fields)),
        SyncChange(
            key: internet, timestamp: t(2),
            kind: .write([.secret: .secret(SecureBytes(copying: Array("s3cret".utf8)))])),
        SyncChange(key: generic, timestamp: t(3), kind: .delete),
    ]
    let member = SyncMember(
        device: other, boxKey: Array(repeating: 3, count: 32), signKey: signing.publicKey)
    let controls: [SyncControl] = [
        .member(member),
        .remove(other, cutoff: 9, pins: [1: Array(repeating: 7, count: 16)]),
        .rotate(
            generation: 2, excludes: [other],
            boxes: [device: Array(repeating: 9, count: 80)]),
        .snapshot,
        .share(other, [SyncKeyID(generation: 1, rotator: device): Array(repeating: 4, count: 80)]),
    ]
    var out: [String: [UInt8]] = [:]
    for (i, c) in changes.enumerated() { out["record-change-\(i)"] = [0] + SyncWire.encode(c) }
    for (i, c) in controls.enumerated() { out["record-control-\(i)"] = [0] + SyncWire.encode(c) }
    let segment = SyncSegment(device: device, sequence: 7, control: controls, changes: changes)
    let file = segment.sealed(
        key: groupKey, keyID: SyncKeyID(generation: 1, rotator: device),
        signingKey: signing.secretKey)
    out["segment-signed"] = [1] + file.dropLast(SyncSigning.signatureBytes)
    out["segment-file"] = [4] + file
    let ack = SyncAck.file([device: 7, other: 3], device: device, signingKey: signing.secretKey)
    out["ack"] = [2] + ack.dropLast(SyncSigning.signatureBytes)
    out["names"] = [3] + Array(SyncSegment.fileName(7).utf8)
    return out
}

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>
) -> CInt {
    guard let dir = ProcessInfo.processInfo.environment["FUZZ_WRITE_SEEDS"] else { return 0 }
    for (name, bytes) in seeds() {
        FileManager.default.createFile(atPath: dir + "/" + name, contents: Data(bytes))
    }
    exit(0)
}
