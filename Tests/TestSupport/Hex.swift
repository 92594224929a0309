/// Hex text as the tests write known answers and vectors.
public enum Hex {
    /// The bytes `text` spells, two hex digits each (either case). Precondition: an even
    /// number of hex digits, as a test's own constants have.
    public static func bytes(_ text: String) -> [UInt8] {
        let digits = Array(text.utf8)
        precondition(digits.count % 2 == 0, "an odd number of hex digits")
        return stride(from: 0, to: digits.count, by: 2).map {
            UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)!
        }
    }
}
