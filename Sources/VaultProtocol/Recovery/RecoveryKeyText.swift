/// The text form of a recovery key, as systemd-cryptenroll --recovery-key shows its own
/// (systemd's src/shared/recovery-key.c): 32 random bytes as 64 "modhex" characters (the
/// YubiKey alphabet `cbdefghijklnrtuv`, one per half-byte, the same on most keyboard layouts)
/// in 8 groups of 8 joined by dashes, 71 characters in all.
public enum RecoveryKeyText {
    /// The key's bytes: 256 bits.
    public static let byteCount = 32
    /// The characters of the text: 8 groups of 8 and 7 dashes.
    public static let textCount = byteCount * 2 + 7
    /// The modhex alphabet, half-byte 0 to 15.
    static let alphabet: [UInt8] = Array("cbdefghijklnrtuv".utf8)

    /// The text of `key` (`byteCount` bytes).
    public static func format(_ key: UnsafeRawBufferPointer) -> String {
        precondition(key.count == byteCount)
        var out: [UInt8] = []
        out.reserveCapacity(textCount)
        for (i, b) in key.enumerated() {
            if i > 0 && i % 4 == 0 { out.append(UInt8(ascii: "-")) }
            out.append(alphabet[Int(b >> 4)])
            out.append(alphabet[Int(b & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes `text` into `out` (`byteCount` bytes): 64 modhex characters, upper or lower
    /// case, with dashes and spaces anywhere (as typed), and a final line break, ignored. False
    /// for anything else (a character outside the alphabet, too few or too many); `out` may
    /// then hold part of a key, which the caller wipes. At most 256 bytes are looked at.
    public static func parse(
        _ text: UnsafeRawBufferPointer, into out: UnsafeMutableRawBufferPointer
    )
        -> Bool
    {
        precondition(out.count == byteCount)
        guard text.count <= 256 else { return false }
        var n = 0
        for c in text {
            if c == UInt8(ascii: "-") || c == UInt8(ascii: " ") || c == 0x0A || c == 0x0D {
                continue
            }
            let lower = c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z") ? c + 32 : c
            guard let v = alphabet.firstIndex(of: lower), n < byteCount * 2 else { return false }
            if n % 2 == 0 {
                out[n / 2] = UInt8(v) << 4
            } else {
                out[n / 2] |= UInt8(v)
            }
            n += 1
        }
        return n == byteCount * 2
    }
}
