import Foundation

/// What vaultd reads of a sandbox's `/.flatpak-info` (a GKeyFile-format text the sandbox can
/// write itself: hostile input) once `PeerIdentity.readBounded` read it: a key's value and
/// whether an instance ID can name a directory. Only Foundation here, so Fuzz/run.sh builds
/// it into a fuzz target (Fuzz/targets/FlatpakInfoFuzzer.swift) as it is.
enum FlatpakInfo {
    /// `group`'s `key` in a GKeyFile-format text (what `/.flatpak-info` is), nil when absent.
    static func value(_ bytes: [UInt8], group: String, key: String) -> String? {
        guard let text = String(validating: bytes, as: UTF8.self) else { return nil }
        var section = ""
        for raw in text.split(whereSeparator: \.isNewline) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.hasPrefix("[") && line.hasSuffix("]") {
                section = String(line.dropFirst().dropLast())
            } else if section == group, let eq = line.firstIndex(of: "=") {
                if line[..<eq].trimmingCharacters(in: .whitespaces) == key {
                    let value = line[line.index(after: eq)...].trimmingCharacters(in: .whitespaces)
                    return value.isEmpty ? nil : value
                }
            }
        }
        return nil
    }

    /// Whether `id` can name a Flatpak instance directory: 1 to 64 ASCII letters, digits,
    /// '-' and '_' (Flatpak's are decimal numbers). No '/', no "..".
    static func isInstanceID(_ id: String) -> Bool {
        !id.isEmpty && id.utf8.count <= 64
            && id.utf8.allSatisfy {
                ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A)
                    || ($0 >= 0x61 && $0 <= 0x7A) || $0 == 0x2D || $0 == 0x5F
            }
    }
}
