// libFuzzer target for what git-credential-vault reads from its standard input: git's
// key=value lines (`parseInput`) and the URL of a `url=` line (`fieldsFromURL`,
// `percentDecoded`), compiled with Sources/git-credential-vault/CredentialInput.swift by
// Fuzz/run.sh. Seeds: requests git sends (Fuzz/corpus/git-credential/).
//
// Invariants (a violation traps): nothing crashes, hangs or leaks; no field the helper
// accepts holds a NUL, CR or LF (each would end up in an item's attribute or in git's
// answer, where LF starts another field); percent-decoding never lengthens its input.
import Foundation

func checkFields(_ fields: [String: String]) {
    for (k, v) in fields where credentialReadKeys.contains(k) {
        precondition(
            !v.utf8.contains(where: { $0 == 0 || $0 == 0x0A || $0 == 0x0D }),
            "an accepted field holds NUL, CR or LF")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if let fields = try? parseInput(Data(bytes)) { checkFields(fields) }
    if let url = String(validating: bytes, as: UTF8.self),
        let fields = try? fieldsFromURL(url)
    {
        checkFields(fields)
    }
    precondition(percentDecoded(bytes[...]).count <= bytes.count, "decoding lengthened its input")
    return 0
}
