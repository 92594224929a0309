// libFuzzer target for what a restore reads from a backup file (docs/backup.md): age's
// header and STREAM payload (`Age.Reader`, `Age.decrypt`) and, inside it, the archive's
// records (`BackupArchive.Reader`). Built by Fuzz/run.sh against VaultCore (`@testable`).
//
// The input's first byte chooses what it is:
// - even: a whole age file, opened with the test identity below;
// - odd: the rest is an archive's plaintext, read as a restore reads it once age opened it.
//
// Seeds (Fuzz/corpus/backup/), each after its mode byte: `backup`, a real backup vaultctl
// wrote to the identity's recipient (age17s3pn4kj…) of a vault with items of both classes,
// a ThisDeviceOnly one, preferences of several types and an app; `archive`, its plaintext
// (`age -d`); `backup-passphrase`, a backup to a passphrase (its scrypt stanza, which this
// identity does not open: the header is read, scrypt never runs).
//
// Invariants (a violation traps): nothing crashes, hangs or leaks; the streaming reader and
// the in-memory `Age.decrypt` agree on every file (both open it to the same bytes, or both
// refuse it); a reader never gives more plaintext than its limit.
import Foundation
import VaultProtocol

@testable import VaultCore

/// The X25519 identity the seed backups are encrypted to: a test key, committed on purpose
/// (it guards nothing). Made for each input: held in a global, its enum payload's pointer
/// (in the spare bits Swift packs the case into) would look leaked to LeakSanitizer.
var identity: [Age.Identity] {
    let text = SecureBytes(
        copying: Array(
            "AGE-SECRET-KEY-17JK53VVHK6FTRE4FEZ3XKVH0VNWUJHHP8KN6TTX8256V30GK0CTQ66KSP4".utf8))
    return try! Age.parseIdentities(text).map { .x25519($0) }
}

/// A source over `bytes` that gives at most `step` bytes a call (short reads, as a pipe or a
/// file being written may give).
func source(_ bytes: [UInt8], step: Int) -> Age.Source {
    var at = 0
    return { out in
        let n = min(out.count, bytes.count - at, step)
        bytes.withUnsafeBytes {
            out.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[at..<(at + n)]))
        }
        at += n
        return n
    }
}

/// Every plaintext byte the stream gives, or nil when it refuses the file.
func streamed(_ file: [UInt8], _ identity: [Age.Identity], step: Int, limit: Int) -> [UInt8]? {
    guard
        let reader = try? Age.Reader(
            source: source(file, step: step), identities: identity, maximumSize: limit)
    else { return nil }
    var out: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 1000)
    while true {
        guard let n = try? buffer.withUnsafeMutableBytes({ try reader.read(into: $0) }) else {
            return nil
        }
        if n == 0 { return out }
        out += buffer[..<n]
        precondition(out.count <= limit, "a reader gave more plaintext than its limit")
    }
}

func readArchive(_ plaintext: [UInt8], step: Int) {
    guard let archive = try? BackupArchive.Reader(source(plaintext, step: step)) else { return }
    _ = archive.deviceID
    var records = 0
    while let r = try? archive.next() {
        records += 1
        if case .item(let item) = r { _ = Vault.deviceBoundAssociatedData(item) }
    }
    precondition(records <= plaintext.count / 5, "more records than the bytes could hold")
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let mode = data[0]
    let rest = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    if mode & 1 == 1 {
        readArchive(rest, step: Int(mode >> 1) + 1)
        return 0
    }
    let limit = 1 << 20
    let id = identity
    let whole = try? Age.decrypt(rest, with: id, maximumSize: limit)
    let bytes = streamed(rest, id, step: Int(mode >> 1) * 97 + 1, limit: limit)
    precondition(
        (whole == nil) == (bytes == nil),
        "Age.decrypt and Age.Reader disagree on whether the file opens")
    if let whole, let bytes {
        precondition(
            whole.withUnsafeBytes { Array($0) } == bytes, "the two readers give other bytes")
        readArchive(bytes, step: 4093)
    }
    return 0
}
