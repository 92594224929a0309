import Foundation
import VaultProtocol

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
