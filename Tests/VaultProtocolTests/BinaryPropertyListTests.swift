import Foundation
import TestSupport
import Testing
import VaultProtocol

/// Binary plists as `PropertyListCodec` writes and reads them (`BinaryPropertyList`): the same
/// bytes for the same values, and reals bit for bit.
@Suite("Binary property lists")
struct BinaryPropertyListTests {
    /// A domain built in two different insertion orders, and written in two runs of the
    /// encoder, gives the same bytes; the keys come out in UTF-8 byte order.
    @Test func theSameValuesGiveTheSameBytes() throws {
        var random = SeededRandom(seed: 38)
        let keys =
            (0..<200).map { "key-\($0)-\(random.next() % 1000)" } + [
                "Z", "a", "\u{E9}", "e\u{301}x", "😀", "",
            ]
        var forward = PlistDictionary()
        var backward = PlistDictionary()
        for (i, k) in keys.enumerated() {
            forward[k] = .dict([
                "n": .integer(Int64(i)), "s": .string(k), "r": .real(Double(i) / 7),
            ])
        }
        for (i, k) in keys.enumerated().reversed() {
            backward[k] = .dict([
                "r": .real(Double(i) / 7), "s": .string(k), "n": .integer(Int64(i)),
            ])
        }
        let a = try PropertyListCodec.encode(.dict(forward), format: .binary)
        let b = try PropertyListCodec.encode(.dict(backward), format: .binary)
        #expect(a == b)
        #expect(try PropertyListCodec.decode(a) == .dict(forward))
        // The top dictionary's keys, in the order written: byte order.
        let small = try PropertyListCodec.encode(
            .dict(["b": .integer(1), "a": .integer(2), "\u{E9}": .integer(3), "B": .integer(4)]),
            format: .binary)
        let text = String(decoding: small, as: UTF8.self)
        // 0x51 'Q': a one-byte ASCII string
        let order = ["B", "a", "b"].map { text.range(of: "Q" + $0)!.lowerBound }
        #expect(order == order.sorted(), "\(small.map { String(format: "%02x", $0) }.joined())")
    }

    /// A NaN's sign and payload, -0.0 and the smallest subnormal survive a write and a read,
    /// and the real is the 8 bytes of its bit pattern, big-endian, after the 0x23 marker.
    @Test func realsKeepEveryBit() throws {
        let patterns: [UInt64] = [
            0x7ff8_0000_0000_0000, 0xfff8_0000_0000_0000, 0x7ff8_0000_0000_1234,
            0x7ff0_0000_0000_0001,
            0xffff_ffff_ffff_ffff, 0x8000_0000_0000_0000, 1, 0x3ff0_0000_0000_0000,
        ]
        for bits in patterns {
            let data = try PropertyListCodec.encode(
                .dict(["r": .real(Double(bitPattern: bits))]), format: .binary)
            let be = withUnsafeBytes(of: bits.bigEndian) { Array($0) }
            #expect(
                Array(data).firstRange(of: [0x23] + be) != nil,
                "\(String(bits, radix: 16)) not written as its bits")
            guard case .dict(let d) = try PropertyListCodec.decode(data),
                case .real(let back)? = d["r"]
            else {
                Issue.record("not a real")
                continue
            }
            #expect(
                back.bitPattern == bits,
                "\(String(bits, radix: 16)) came back as \(String(back.bitPattern, radix: 16))")
        }
    }

    /// Every kind of value, large counts (past the 4-bit count, past 256 objects: 2-byte
    /// references), integers of every width and unsigned ones above Int64.max round-trip.
    @Test func everyKindRoundTrips() throws {
        var d = PlistDictionary()
        d["ints"] = .array(
            [0, 1, 255, 256, 65535, 65536, 1 << 32 - 1, 1 << 32, -1, Int64.min, Int64.max].map {
                .integer($0)
            })
        d["unsigned"] = .array([.unsignedInteger(1 << 63), .unsignedInteger(.max)])
        d["strings"] = .array([
            .string(""), .string("ascii"), .string("é😀 and more than fifteen characters"),
            .string(String(repeating: "x", count: 300)),
        ])
        d["data"] = .data(Data((0..<300).map { UInt8($0 & 0xFF) }))
        d["date"] = .date(Date(timeIntervalSinceReferenceDate: 123_456.789))
        d["bools"] = .array([.bool(true), .bool(false)])
        d["many"] = .array((0..<400).map { .string("item \($0)") })
        d["nested"] = .dict(["a": .array([.dict(["b": .array([])])]), "empty": .dict([:])])
        let value = PlistValue.dict(d)
        let data = try PropertyListCodec.encode(value, format: .binary)
        #expect(data.starts(with: Array("bplist00".utf8)))
        #expect(try PropertyListCodec.decode(data) == value)
        // Foundation reads what is written as the same values (unsigned 128-bit integers aside,
        // which its reader on Linux does not bridge).
        d["unsigned"] = nil
        let plain = try PropertyListCodec.encode(.dict(d), format: .binary)
        let foundation = try PropertyListCodec.value(
            from: PropertyListSerialization.propertyList(from: plain, options: [], format: nil))
        #expect(foundation == .dict(d))
    }

    /// Altered files (random bytes changed, cut short) are read or refused, never crash or
    /// hang: vaultd reads binary plists an app or a user hands it.
    @Test func alteredFilesAreReadOrRefused() throws {
        var random = SeededRandom(seed: 0x38)
        var d = PlistDictionary()
        for i in 0..<40 {
            d["k\(i)"] =
                i % 3 == 0
                ? .array([.integer(Int64(i)), .string("é\(i)"), .real(Double(i))])
                : .dict(["n": .data(Data([UInt8(i)]))])
        }
        let good = [UInt8](try PropertyListCodec.encode(.dict(d), format: .binary))
        var read = 0
        var refused = 0
        for round in 0..<3000 {
            var b = good
            for _ in 0..<(1 + Int(random.next() % 4)) {
                b[Int(random.next() % UInt64(b.count))] = UInt8(truncatingIfNeeded: random.next())
            }
            if round % 5 == 0 { b = Array(b.prefix(Int(random.next() % UInt64(b.count)))) }
            do {
                _ = try PropertyListCodec.decode(Data(b))
                read += 1
            } catch is VaultError {
                refused += 1
            }
        }
        #expect(read + refused == 3000 && refused > 0, "read \(read), refused \(refused)")
    }
}
