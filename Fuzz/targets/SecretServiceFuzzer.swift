// libFuzzer target for the Secret Service arguments vaultd parses itself: the object paths a
// peer names (`SecretServicePath`: collections, items, damaged items, aliases, sessions,
// prompts) and their element encoding. D-Bus (GDBus) has checked each argument's type and
// that a path is a valid object path; what the path names is read here. Compiled with
// Sources/vaultd/SecretService/SecretServicePath.swift by Fuzz/run.sh. Seeds: paths
// secret-tool and libsecret send (Fuzz/corpus/secret-service/).
//
// Invariants (a violation traps): nothing crashes, hangs or leaks; a path that names a
// collection, an item or a damaged item is the one path of it (`path` gives it back, and it
// reads again as the same object); an element decodes only to what encodes to it.
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    if let p = SecretServicePath(text) {
        switch p {
        case .collection, .item, .damaged, .service:
            precondition(p.path == text, "an object with two paths")
            precondition(SecretServicePath(p.path) == p, "a path that reads as another object")
        case .session(let s), .prompt(let s):
            precondition(!s.contains("/"))
        case .alias, .inner:
            break
        }
    }
    if let decoded = SecretServicePath.decode(text) {
        precondition(SecretServicePath.encode(decoded) == text, "an element with two spellings")
    }
    return 0
}
