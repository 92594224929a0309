// libFuzzer target for property-list import (`defaults import`, `vaultctl defaults write`,
// settings.plist): `PropertyListCodec.decode` (XML through Foundation, binary through
// `BinaryPropertyList`) and `PropertyListCodec.parseText` (OpenStep text and plain strings).
// Built by Fuzz/run.sh against VaultProtocol. Seeds: the real application plists of
// Tests/Fixtures/plist and OpenStep texts (Fuzz/corpus/plist/).
//
// Invariants (a violation traps): nothing crashes, hangs or leaks; a decoded value written
// as binary decodes back to the same value (the same bytes again), and one written as XML,
// when XML can carry it, decodes; a text parses to a value that does the same.
import Foundation
import VaultProtocol

func roundTrips(_ value: PlistValue) {
    // A bare value (not a dictionary) round-trips inside one, as a domain holds it.
    let wrapped: PlistValue = .dict(["v": value])
    // Binary is exact (reals bit for bit, NaN included): the same bytes again.
    if let binary = try? PropertyListCodec.encode(wrapped, format: .binary) {
        guard let back = try? PropertyListCodec.decode(binary) else {
            preconditionFailure("a binary plist vaultd wrote does not decode")
        }
        precondition(
            (try? PropertyListCodec.encode(back, format: .binary)) == binary,
            "binary round trip changed the value")
    }
    // XML keeps dates to the second: it must read back, not necessarily bit for bit.
    if let xml = try? PropertyListCodec.encode(wrapped, format: .xml) {
        precondition(
            (try? PropertyListCodec.decode(xml)) != nil, "an XML plist vaultd wrote does not decode"
        )
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Data(bytes: data, count: size)
    if let value = try? PropertyListCodec.decode(bytes) { roundTrips(value) }
    if let text = String(data: bytes, encoding: .utf8) {
        roundTrips(PropertyListCodec.parseText(text))
    }
    return 0
}
