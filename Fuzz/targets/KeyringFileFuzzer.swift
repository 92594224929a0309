// Coverage-guided fuzz target (libFuzzer) for vaultctl's reader of gnome-keyring's keyring
// files (Sources/vaultctl/Commands/Import/GnomeKeyringFile.swift, KeyringTextFile.swift): a
// file is the user's, but may come from anywhere (a backup, another machine). Built by
// Fuzz/run.sh with those two files, against its VaultProtocol library.
//
// Each input is read three ways: as a plain (text) keyring, as an encrypted keyring with the
// password of the seed Fuzz/corpus/keyring/login.keyring, "login-pw" (a mutation of its header
// or hashed attributes is read through; one of its encrypted part fails the MD5 check), and as
// the decrypted part itself, with a header of 0 to 7 items taken from the
// input's first byte (what a file opened with its right password holds).
// Invariants checked (a violation traps, which libFuzzer reports as a crash):
// - nothing crashes, hangs or leaks (AddressSanitizer, libFuzzer's -timeout/-rss_limit_mb);
// - a parsed file never has more items than its input had bytes.
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if let f = try? KeyringTextFile.parse(bytes) { precondition(f.items.count <= size) }
    if let f = try? KeyringFile.binary(bytes, password: Array("login-pw".utf8)) {
        precondition(f.items.count <= size)
    }
    let n = Int(bytes.first ?? 0) % 8
    let header = (0..<n).map { (id: UInt32($0), type: UInt32($0 % 3)) }
    _ = try? KeyringFile.items(decrypted: bytes, header: header)
    return 0
}
