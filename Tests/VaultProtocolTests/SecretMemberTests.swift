import Testing
import VaultProtocol

/// `JSON.parseCall` leaves a call's secret parameters in the message's bytes (vaultd decodes
/// them from there into secure memory), as strictly as `parse` reads the rest.
@Suite("JSON: secret members left in the message")
struct SecretMemberTests {
    static let names: Set<String> = ["data", "passphrase"]

    static func parse(_ text: String) throws -> (JSON, [RawStringMember], [UInt8]) {
        let bytes = Array(text.utf8)
        let (json, raws) = try bytes.withUnsafeBufferPointer {
            try JSON.parseCall($0, rawMembers: names)
        }
        return (json, raws, bytes)
    }

    static func unescaped(_ bytes: [UInt8], _ raw: RawStringMember) -> String {
        var out = [UInt8](repeating: 0, count: raw.range.count)
        let n = bytes.withUnsafeBufferPointer { b in
            out.withUnsafeMutableBufferPointer {
                JSON.unescape(UnsafeBufferPointer(rebasing: b[raw.range]), into: $0.baseAddress!)
            }
        }
        return String(decoding: out[..<n], as: UTF8.self)
    }

    @Test func aSecretParameterIsLeftOutOfTheTreeWithItsRange() throws {
        let (json, raws, bytes) = try Self.parse(
            #"{"method":"io.vaultd.Keychain.Add","parameters":{"class":"genericPassword","data":"c2VjcmV0","attributes":{"data":"kept"}}}"#
        )
        #expect(json["parameters"]?["data"] == nil)
        #expect(json["parameters"]?["class"] == "genericPassword")
        // Only the top-level parameters' members: one inside another object stays.
        #expect(json["parameters"]?["attributes"]?["data"] == "kept")
        #expect(raws.count == 1)
        let raw = try #require(raws.first)
        #expect(raw.name == "data" && !raw.escaped)
        #expect(String(decoding: bytes[raw.range], as: UTF8.self) == "c2VjcmV0")
    }

    @Test func escapesAreCheckedAndUnescapedAsParseDoes() throws {
        let (_, raws, bytes) = try Self.parse(
            #"{"parameters":{"passphrase":"a\"b\\c\/\n\u00e9\ud83d\ude00z"},"method":"io.vaultd.Vault.Unlock"}"#
        )
        let raw = try #require(raws.first)
        #expect(raw.escaped)
        #expect(Self.unescaped(bytes, raw) == "a\"b\\c/\n\u{e9}\u{1F600}z")
        // The same text through `parse`.
        #expect(
            try JSON.parse(#"{"p":"a\"b\\c\/\n\u00e9\ud83d\ude00z"}"#)["p"]?.stringValue
                == Self.unescaped(bytes, raw))
    }

    @Test func aNonStringSecretMemberStaysInTheTree() throws {
        let (json, raws, _) = try Self.parse(
            #"{"method":"m.x.Y","parameters":{"data":5,"passphrase":null}}"#)
        #expect(raws.isEmpty)
        #expect(json["parameters"]?["data"] == 5)
        #expect(json["parameters"]?["passphrase"] == .null)
    }

    @Test func badTextAndDuplicatesAreRefusedAsByParse() {
        for bad in [
            #"{"parameters":{"data":"a\qb"}}"#, #"{"parameters":{"data":"\ud800"}}"#,
            #"{"parameters":{"data":"unterminated}}"#,
            #"{"parameters":{"data":"a","data":"b"}}"#, #"{"parameters":{"data":"a","data":1}}"#,
            #"{"parameters":{"data":1,"data":"a"}}"#,
            "{\"parameters\":{\"data\":\"tab\there\"}}",
        ] {
            #expect(throws: JSONSyntaxError.self, "\(bad)") { _ = try Self.parse(bad) }
        }
        let invalidUTF8: [UInt8] =
            Array(#"{"parameters":{"passphrase":""#.utf8) + [0xC3, 0x28] + Array(#""}}"#.utf8)
        #expect(throws: JSONSyntaxError.self) {
            _ = try invalidUTF8.withUnsafeBufferPointer {
                try JSON.parseCall($0, rawMembers: Self.names)
            }
        }
    }

    /// Framing holds across the reader's compactions and its hand-grown buffer (both wipe
    /// what they leave behind), and `reset` drops what is pending.
    @Test func frameReaderKeepsFramingAcrossCompactionAndGrowth() throws {
        var reader = FrameReader()
        var expected: [[UInt8]] = []
        for i in 0..<2000 {
            let frame = Array(
                "{\"method\":\"x.y.Z\",\"parameters\":{\"data\":\"\(String(repeating: "A", count: i % 97))\"}}"
                    .utf8)
            expected.append(frame)
            reader.append(frame + [0])
        }
        var got: [[UInt8]] = []
        while let f = try reader.nextFrame() { got.append(f) }
        #expect(got == expected)
        #expect(reader.pendingByteCount == 0)
        reader.append(Array("half".utf8))
        reader.reset()
        #expect(reader.pendingByteCount == 0)
        reader.append(Array("next".utf8) + [0])
        #expect(try reader.nextFrame() == Array("next".utf8))
    }
}
