import Testing

@testable import VaultProtocol

/// The recovery key's text: systemd's format (64 modhex characters in 8 groups of 8), and the
/// forms a person types it in.
@Suite struct RecoveryKeyTextTests {
    static func format(_ bytes: [UInt8]) -> String {
        bytes.withUnsafeBytes { RecoveryKeyText.format($0) }
    }

    static func parse(_ text: String) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: RecoveryKeyText.byteCount)
        let ok = Array(text.utf8).withUnsafeBytes { t in
            out.withUnsafeMutableBytes { RecoveryKeyText.parse(t, into: $0) }
        }
        return ok ? out : nil
    }

    @Test func knownBytesGiveSystemdsModhexInGroups() {
        // 0x00 → "cc", 0xff → "vv", 0x01 0x23 0x45 0x67 → "cbdefghi" (half-byte n → alphabet[n]).
        var bytes = [UInt8](repeating: 0, count: 32)
        bytes[0] = 0x01
        bytes[1] = 0x23
        bytes[2] = 0x45
        bytes[3] = 0x67
        bytes[31] = 0xff
        let text = Self.format(bytes)
        #expect(text.count == RecoveryKeyText.textCount)
        #expect(text.hasPrefix("cbdefghi-cccccccc-"))
        #expect(text.hasSuffix("-ccccccvv"))
        #expect(Self.parse(text) == bytes)
    }

    @Test func typedFormsAreTheSameKey() {
        let bytes = (0..<32).map { UInt8($0 * 7 & 0xff) }
        let text = Self.format(bytes)
        #expect(Self.parse(text.uppercased()) == bytes)
        #expect(Self.parse(text.replacingOccurrences(of: "-", with: "")) == bytes)
        #expect(Self.parse(text.replacingOccurrences(of: "-", with: " ") + "\n") == bytes)
    }

    @Test func anythingElseIsRefused() {
        let text = Self.format([UInt8](repeating: 0xab, count: 32))
        #expect(Self.parse(String(text.dropLast())) == nil, "one character short")
        #expect(Self.parse(text + "c") == nil, "one too many")
        #expect(Self.parse(text.replacingOccurrences(of: "l", with: "a")) == nil, "not modhex")
        #expect(Self.parse("") == nil)
        #expect(Self.parse(String(repeating: "-", count: 300)) == nil, "longer than 256 bytes")
    }
}
