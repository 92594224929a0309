// libFuzzer target for the call parser vaultd runs on every message a peer sends
// (`JSON.parseCall`, as `CallSecrets.parse` in Sources/vaultd/Varlink/Parameters.swift calls
// it), and what it does with a secret member's raw text: `JSON.unescape` (which writes
// through an unsafe pointer), `SecureBytes.unescapingJSONString` and
// `SecureBytes.decodingBase64`. Built by Fuzz/run.sh against VaultCore.
//
// Invariants (a violation traps):
// - parseCall accepts exactly what `JSON.parse` accepts, and its tree is `JSON.parse`'s with
//   the raw members of `parameters` taken out;
// - each raw member's range lies inside the message, and `unescape` of its text writes at
//   most the text's length and gives the UTF-8 of the string `JSON.parse` read there; the
//   secure-memory decoder gives the same bytes;
// - base64 decoding in secure memory agrees with Foundation's.
import Foundation
import VaultCore
import VaultProtocol

/// Every secret parameter's name, as `CallSecrets.names` (vaultd) has them.
let rawMembers: Set<String> = [
    "passphrase", "old", "new", "recoveryKey", "identity", "newPassphrase", "data",
]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = UnsafeBufferPointer(start: data, count: size)
    let call = try? JSON.parseCall(input, rawMembers: rawMembers)
    let plain = try? JSON.parse(input)
    precondition((call == nil) == (plain == nil), "parseCall and parse disagree on the input")
    guard let (tree, raws) = call, let plain else { return 0 }
    var expected = plain
    if case .object(var o) = plain, case .object(var p)? = o["parameters"] {
        for raw in raws { p[raw.name] = nil }
        o["parameters"] = .object(p)
        expected = .object(o)
    }
    precondition(tree == expected, "parseCall's tree is not parse's without the raw members")
    for raw in raws {
        precondition(raw.range.lowerBound >= 0 && raw.range.upperBound <= size)
        precondition(rawMembers.contains(raw.name))
        let text = UnsafeBufferPointer(rebasing: input[raw.range])
        // One guard byte past the text's room: unescape must never reach it.
        var out = [UInt8](repeating: 0xA5, count: text.count + 1)
        let n = out.withUnsafeMutableBufferPointer { JSON.unescape(text, into: $0.baseAddress!) }
        precondition(n <= text.count && out[text.count] == 0xA5, "unescape wrote past its room")
        let string = plain["parameters"]?[raw.name]?.stringValue
        precondition(
            string.map { Array($0.utf8) == Array(out[..<n]) } ?? false,
            "unescape disagrees with parse")
        let secure = SecureBytes.unescapingJSONString(text)
        precondition(
            secure.withUnsafeBytes { Array($0) } == Array(out[..<n]),
            "unescapingJSONString disagrees with unescape")
        let decoded = out.withUnsafeBufferPointer {
            SecureBytes.decodingBase64(UnsafeBufferPointer(rebasing: $0[..<n]))
        }
        if let decoded, let foundation = Data(base64Encoded: Data(out[..<n])) {
            precondition(
                decoded.withUnsafeBytes { Array($0) } == [UInt8](foundation),
                "decodingBase64 disagrees with Foundation")
        }
    }
    return 0
}
