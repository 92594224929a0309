import Foundation
import Testing

@testable import vaultd

/// `BusHeader`, the framing `BusRelay` reads: the lengths from the fixed start, the header
/// fields, and the header of an oversized message cut to one without a body.
@Suite struct BusHeaderTests {
    /// A method call as GDBus writes it: path, interface, member, destination, sender,
    /// signature "a{ss}" and UNIX_FDS `unixFDs` (none when nil), with a body of `bodyLength`;
    /// little- or big-endian.
    static func header(bodyLength: Int, little: Bool = true, unixFDs: UInt32? = 1) -> [UInt8] {
        func u32(_ v: UInt32) -> [UInt8] {
            let w = little ? v : v.byteSwapped
            return (0..<4).map { UInt8(truncatingIfNeeded: w >> (8 * UInt32($0))) }
        }
        var out: [UInt8] = [little ? UInt8(ascii: "l") : UInt8(ascii: "B"), 1, 0, 1]
        out += u32(UInt32(bodyLength)) + u32(7) + u32(0)
        func field(_ code: UInt8, _ sig: Character, _ value: String) {
            while out.count % 8 != 0 { out.append(0) }
            out += [code, 1, UInt8(ascii: sig.unicodeScalars.first!), 0]
            let v = Array(value.utf8)
            if sig == "g" {
                out += [UInt8(v.count)] + v + [0]
            } else {
                while out.count % 4 != 0 { out.append(0) }
                out += u32(UInt32(v.count)) + v + [0]
            }
        }
        field(1, "o", "/org/freedesktop/secrets")
        field(2, "s", "org.freedesktop.Secret.Service")
        field(3, "s", "SearchItems")
        field(6, "s", "org.freedesktop.secrets")
        field(8, "g", "a{ss}")
        if let unixFDs {
            while out.count % 8 != 0 { out.append(0) }
            out += [9, 1, UInt8(ascii: "u"), 0] + u32(unixFDs)
        }
        field(7, "s", ":1.42")
        let fieldsLength = out.count - 16
        out.replaceSubrange(12..<16, with: u32(UInt32(fieldsLength)))
        while out.count % 8 != 0 { out.append(0) }
        return out
    }

    @Test(arguments: [true, false]) func readsTheFramingAndTheFields(little: Bool) throws {
        let bytes = Self.header(bodyLength: 100_000_000, little: little)
        let lengths = try #require(BusHeader.lengths(bytes[0..<16]))
        #expect(lengths.header == bytes.count)
        #expect(lengths.body == 100_000_000)
        let h = try #require(BusHeader(bytes))
        #expect(h.type == BusHeader.MessageType.methodCall.rawValue)
        #expect(h.serial == 7)
        #expect(h.string(.sender) == ":1.42")
        #expect(h.string(.member) == "SearchItems")
        #expect(h.signature == "a{ss}")
        #expect(h.uint32(.unixFDs) == 1)
    }

    /// The cut header names the same call, with no body, signature or descriptors, and
    /// reads again as a whole header.
    @Test(arguments: [true, false]) func cutsTheBodyKeepingTheCall(little: Bool) throws {
        let h = try #require(BusHeader(Self.header(bodyLength: 5_000_000, little: little)))
        let cut = h.withoutBody()
        #expect(cut.count % 8 == 0)
        let lengths = try #require(BusHeader.lengths(cut[0..<16]))
        #expect(lengths.header == cut.count && lengths.body == 0)
        let again = try #require(BusHeader(cut))
        #expect(again.serial == 7)
        #expect(again.string(.path) == "/org/freedesktop/secrets")
        #expect(again.string(.interface) == "org.freedesktop.Secret.Service")
        #expect(again.string(.member) == "SearchItems")
        #expect(again.string(.sender) == ":1.42")
        #expect(again.signature == "")
        #expect(again.uint32(.unixFDs) == nil)
    }

    @Test func refusesWhatIsNoMessageStart() {
        var bytes = Self.header(bodyLength: 0)
        bytes[3] = 2  // protocol version 2
        #expect(BusHeader.lengths(bytes[0..<16]) == nil)
        var truncated = Self.header(bodyLength: 0)
        truncated.replaceSubrange(12..<16, with: [0xff, 0, 0, 0])  // fields past the end
        #expect(BusHeader(truncated) == nil)
    }

    /// What a call may cost decoded: variants and arrays of containers many times their size.
    @Test func estimatesTheDecodedCost() {
        #expect(BusRelay.decodedCost(bytes: 1 << 20, signature: "a{ss}") == 1 << 20)
        #expect(BusRelay.decodedCost(bytes: 1 << 20, signature: "av") == 40 << 20)
        #expect(BusRelay.decodedCost(bytes: 1 << 20, signature: "aay") == 40 << 20)
        #expect(BusRelay.decodedCost(bytes: 10, signature: "s") == BusRelay.minimumCost)
    }
}
