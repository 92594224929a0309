import Foundation

// What git-credential-vault reads from git (its standard input): the key=value lines of git's
// credential protocol (git-credential(1), "INPUT/OUTPUT FORMAT") and the URL a `url=` line
// holds. Only Foundation here, so Fuzz/run.sh builds it into a fuzz target
// (Fuzz/targets/GitCredentialFuzzer.swift) as it is.

/// Fields kept beside a credential (git 2.41's password expiry and OAuth refresh token).
let credentialExtraKeys = ["password_expiry_utc", "oauth_refresh_token"]
/// The input fields the helper reads (`url` holds the first five).
let credentialReadKeys: Set<String> = Set(
    ["protocol", "host", "path", "username", "password", "url"] + credentialExtraKeys)

struct Rejected: Error { var message: String }

/// The key=value lines git sends, up to the first blank line or the end.
func parseInput(_ data: Data) throws -> [String: String] {
    var bytes = [UInt8](data)
    if bytes.contains(0) { throw Rejected(message: "the input contains a NUL byte") }
    if bytes.contains(0x0D) { throw Rejected(message: "the input contains a carriage return") }
    if let end = bytes.indices.first(where: {
        bytes[$0] == 0x0A && ($0 == 0 || bytes[$0 - 1] == 0x0A)
    }) {
        bytes.removeSubrange(end...)
    }
    var fields: [String: String] = [:]
    for line in bytes.split(separator: 0x0A, omittingEmptySubsequences: true) {
        guard let eq = line.firstIndex(of: UInt8(ascii: "=")) else {
            throw Rejected(message: "a line is not key=value")
        }
        guard let key = String(validating: line[..<eq], as: UTF8.self) else {
            throw Rejected(message: "the input is not UTF-8")
        }
        if key.isEmpty { throw Rejected(message: "a line has an empty key") }
        // Only what the helper reads must be UTF-8: a field it does not use (`wwwauth[]`,
        // which git 2.41 and later fill from the server's WWW-Authenticate header, whose
        // realm may be Latin-1) must not make it refuse the whole request, as git itself and
        // its credential-store take any bytes there.
        guard let value = String(validating: line[(eq + 1)...], as: UTF8.self) else {
            if credentialReadKeys.contains(key) {
                throw Rejected(message: "the input is not UTF-8")
            }
            continue
        }
        // As git's credential_read: `url=` clears what came before and sets the fields it
        // holds; a field after it overrides.
        if key == "url" {
            fields = try fieldsFromURL(value)
            continue
        }
        // Repeated keys (capability[], wwwauth[]) are not ours: the last one is kept.
        fields[key] = value
    }
    return fields
}

/// git's credential_from_url: `proto://[user[:password]@]host[:port][/path]`. The host ends
/// at the first `/`, `?` or `#`; the username and password only when their `@` comes before
/// that. Username, password, host and path are decoded as git decodes them (`percentDecoded`);
/// the path loses its leading and trailing slashes. A URL without a scheme is rejected (git
/// dies on it), and so is one whose decoded fields hold LF or CR, or are not UTF-8.
func fieldsFromURL(_ url: String) throws -> [String: String] {
    let u = Array(url.utf8)
    let scheme: [UInt8] = Array("://".utf8)
    guard let protoEnd = u.indices.first(where: { u[$0...].starts(with: scheme) }), protoEnd > 0
    else {
        throw Rejected(message: "the url has no scheme")
    }
    let cp = protoEnd + 3
    let at = u[cp...].firstIndex(of: UInt8(ascii: "@"))
    let colon = u[cp...].firstIndex(of: UInt8(ascii: ":"))
    let slash =
        u[cp...].firstIndex(where: {
            $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#")
        }) ?? u.endIndex

    func text(_ bytes: [UInt8], _ what: String) throws -> String {
        if bytes.contains(where: { $0 == 0 || $0 == 0x0A || $0 == 0x0D }) {
            throw Rejected(message: "the url's \(what) contains LF, CR or NUL")
        }
        guard let s = String(validating: bytes, as: UTF8.self) else {
            throw Rejected(message: "the url's \(what) is not UTF-8")
        }
        return s
    }

    var fields: [String: String] = ["protocol": try text(Array(u[..<protoEnd]), "protocol")]
    var hostStart = cp
    if let at, at < slash {
        if let colon, colon < at {
            fields["username"] = try text(percentDecoded(u[cp..<colon]), "username")
            fields["password"] = try text(percentDecoded(u[(colon + 1)..<at]), "password")
        } else {
            fields["username"] = try text(percentDecoded(u[cp..<at]), "username")
        }
        hostStart = at + 1
    }
    fields["host"] = try text(percentDecoded(u[hostStart..<slash]), "host")
    var p = slash
    while p < u.endIndex && u[p] == UInt8(ascii: "/") { p += 1 }
    if p < u.endIndex {
        var path = percentDecoded(u[p...])
        while path.count > 1 && path.last == UInt8(ascii: "/") { path.removeLast() }
        fields["path"] = try text(path, "path")
    }
    return fields
}

/// A URL component decoded as git's `url_decode_mem` does: what comes before its first `:`
/// (when that is not its first byte) is kept as it is, and then `%XX` is decoded to its byte,
/// except `%00`; a `%` not followed by two hex digits stays, and `+` is not a space.
func percentDecoded(_ s: ArraySlice<UInt8>) -> [UInt8] {
    func hex(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
    var out: [UInt8] = []
    var i = s.startIndex
    if let colon = s.firstIndex(of: UInt8(ascii: ":")), colon > s.startIndex {
        out += s[..<colon]
        i = colon
    }
    while i < s.endIndex {
        if s[i] == UInt8(ascii: "%"), i + 2 < s.endIndex, let hi = hex(s[i + 1]),
            let lo = hex(s[i + 2]), hi | lo != 0
        {
            out.append(hi << 4 | lo)
            i += 3
        } else {
            out.append(s[i])
            i += 1
        }
    }
    return out
}

/// What git asked about, as vault attributes.
