import Foundation
// Fuzz/run.sh compiles this file into its keyring target, against VaultProtocol.
import VaultProtocol

/// gnome-keyring's plain keyring format (gkm-secret-textual.c), which it writes for a keyring
/// whose password is empty: a GKeyFile (GLib's ini-like key file).
///
///     [keyring]                      display-name, ctime, mtime, lock-on-idle, lock-after
///     [ID]                           an item: item-type, display-name, secret (text) or
///                                    binary-secret (hex), mtime, ctime
///     [ID:attributeN]                its attributes: name, type (string or uint32), value
///     [ID:aclN]                      gnome-keyring 2's access control (ignored)
///
/// Values are read as GLib's `g_key_file_get_string` reads them: leading spaces dropped, the
/// escapes \s \n \t \r \\ replaced (an unknown escape is kept as written, not dropped).
enum KeyringTextFile {
    static func parse(_ bytes: [UInt8]) throws -> KeyringFile {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw KeyringFile.Failure.notAKeyring
        }
        var groups: [(name: String, keys: [String: String])] = []
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            var line = raw.hasSuffix("\r") ? raw.dropLast() : raw
            line = line.drop { $0 == " " || $0 == "\t" }
            if line.isEmpty || line.hasPrefix("#") { continue }
            if line.hasPrefix("[") && line.hasSuffix("]") {
                guard groups.count < KeyringFile.maximumItems * 4 else {
                    throw KeyringFile.Failure.damaged("it has more groups than a keyring holds")
                }
                groups.append((String(line.dropFirst().dropLast()), [:]))
                continue
            }
            guard let eq = line.firstIndex(of: "="), !groups.isEmpty else {
                // The first group must be [keyring]: anything before it is no keyring.
                throw groups.isEmpty
                    ? KeyringFile.Failure.notAKeyring
                    : KeyringFile.Failure.damaged("a line is neither a group nor key=value")
            }
            let key = line[..<eq].trimmingCharacters(in: .whitespaces)
            let value = line[line.index(after: eq)...].drop { $0 == " " }
            groups[groups.count - 1].keys[key] = String(value)
        }
        guard let first = groups.first, first.name == "keyring" else {
            throw KeyringFile.Failure.notAKeyring
        }
        // One pass: each item's keys, and its attribute groups by the item's id (a hostile file
        // of a million groups is read in time linear in its size).
        var byName: [String: [String: String]] = [:]
        var attributeGroups: [String: [[String: String]]] = [:]
        var order: [String] = []
        for g in groups where g.name != "keyring" {
            if let colon = g.name.firstIndex(of: ":") {
                if g.name[colon...].hasPrefix(":attribute") {
                    attributeGroups[String(g.name[..<colon]), default: []].append(g.keys)
                }
                continue
            }
            if byName[g.name] == nil { order.append(g.name) }
            byName[g.name, default: [:]].merge(g.keys) { _, new in new }
        }
        let items = try order.map {
            try item($0, byName[$0] ?? [:], attributes: attributeGroups[$0] ?? [])
        }
        return KeyringFile(
            label: unescape(first.keys["display-name"] ?? ""), encrypted: false, items: items)
    }

    /// One item, from its group's keys and its `ID:attributeN` groups.
    private static func item(
        _ id: String, _ keys: [String: String], attributes list: [[String: String]]
    )
        throws -> KeyringFile.Item
    {
        var secret: [UInt8] = []
        if let s = keys["secret"] {
            secret = Array(unescape(s).utf8)
        } else if let hex = keys["binary-secret"] {
            guard let b = decodeHex(unescape(hex)) else {
                throw KeyringFile.Failure.damaged("item \(id)'s binary-secret is not hex")
            }
            secret = b
        }
        var attributes = ExactDictionary<String>()
        for g in list {
            guard let n = g["name"] else { continue }
            attributes[unescape(n)] = unescape(g["value"] ?? "")
        }
        return KeyringFile.Item(
            id: UInt32(id) ?? 0, type: keys["item-type"].flatMap { UInt32($0) } ?? 0,
            label: unescape(keys["display-name"] ?? ""), secret: secret,
            created: keys["ctime"].flatMap { UInt64($0) } ?? 0,
            modified: keys["mtime"].flatMap { UInt64($0) } ?? 0, attributes: attributes)
    }

    /// GLib's string escapes: \s space, \n, \t, \r, \\.
    static func unescape<S: StringProtocol>(_ s: S) -> String {
        guard s.contains("\\") else { return String(s) }
        var out = ""
        var escaped = false
        for c in s {
            if escaped {
                switch c {
                case "s": out.append(" ")
                case "n": out.append("\n")
                case "t": out.append("\t")
                case "r": out.append("\r")
                case "\\": out.append("\\")
                default:
                    out.append("\\")
                    out.append(c)
                }
                escaped = false
            } else if c == "\\" {
                escaped = true
            } else {
                out.append(c)
            }
        }
        if escaped { out.append("\\") }
        return out
    }

    static func decodeHex(_ s: String) -> [UInt8]? {
        let digits = Array(s.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count / 2)
        func value(_ d: UInt8) -> UInt8? {
            switch d {
            case 0x30...0x39: return d - 0x30
            case 0x41...0x46: return d - 0x41 + 10
            case 0x61...0x66: return d - 0x61 + 10
            default: return nil
            }
        }
        var i = 0
        while i < digits.count {
            guard let hi = value(digits[i]), let lo = value(digits[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }
}
