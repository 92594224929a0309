import Foundation
import VaultCore

#if canImport(Glibc)
import Glibc
#endif

/// What the kernel says about a peer process beyond SO_PEERCRED (DESIGN §5): its Flatpak
/// app ID and its executable. Nothing the client sends is consulted.
enum PeerIdentity {
    /// `[Application] name` from `/proc/PID/root/.flatpak-info`: only a sandbox can put a file
    /// there (the host's `/` is root's), so its presence means a sandboxed app.
    static func flatpakAppID(pid: pid_t) -> String? {
        let path = "/proc/\(pid)/root/.flatpak-info"
        guard let data = FileManager.default.contents(atPath: path), data.count < 1 << 20,
            let text = String(data: data, encoding: .utf8)
        else { return nil }
        var section = ""
        for raw in text.split(whereSeparator: \.isNewline) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.hasPrefix("[") && line.hasSuffix("]") {
                section = String(line.dropFirst().dropLast())
            } else if section == "Application", let eq = line.firstIndex(of: "=") {
                let key = line[..<eq].trimmingCharacters(in: .whitespaces)
                if key == "name" {
                    let name = line[line.index(after: eq)...].trimmingCharacters(in: .whitespaces)
                    return name.isEmpty ? nil : name
                }
            }
        }
        return nil
    }

    /// The target of `/proc/PID/exe` (without the " (deleted)" suffix the kernel adds).
    static func executable(pid: pid_t) -> String? {
        var buf = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/\(pid)/exe", &buf, Int(PATH_MAX))
        guard n > 0 else { return nil }
        var path = String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if path.hasSuffix(" (deleted)") { path.removeLast(" (deleted)".count) }
        return path
    }

    /// The caller for a connected peer.
    static func caller(for peer: PeerCredentials, vault: Vault) -> Caller? {
        do {
            return try vault.caller(flatpakAppID: flatpakAppID(pid: peer.pid), executable: executable(pid: peer.pid))
        } catch {
            log("cannot identify peer pid \(peer.pid): \(error)")
            return nil
        }
    }
}
