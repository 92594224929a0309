import Foundation
import VaultCore

#if canImport(Glibc)
import Glibc
#endif

/// What the kernel says about a peer process beyond SO_PEERCRED (DESIGN §5): its Flatpak
/// app ID and its executable. Nothing the client sends is consulted.
enum PeerIdentity {
    /// What `/proc/PID/root/.flatpak-info` says of a peer.
    enum Sandbox: Equatable {
        /// No such file: a host process.
        case none
        /// A sandboxed app with this Flatpak ID (`[Application] name`).
        case flatpak(String)
        /// The file is there but names no app, or vaultd cannot look: a sandbox it cannot
        /// identify, which must get neither the admin surface nor an app tier.
        case unidentifiable
    }

    /// Only a sandbox can put a file at `/.flatpak-info` (the host's `/` is root's), so its
    /// presence means a sandboxed app. Without one, a peer whose root directory is not
    /// vaultd's (a bubblewrap sandbox, a container, a chroot) is a sandbox vaultd cannot
    /// name: it can neither run the host's vaultctl nor be told apart from another app, so
    /// it gets nothing (README, the threat model).
    static func sandbox(pid: pid_t) -> Sandbox {
        let path = "/proc/\(pid)/root/.flatpak-info"
        var st = stat()
        if stat(path, &st) != 0 {
            guard errno == ENOENT else { return .unidentifiable }
            return sameFile("/proc/\(pid)/root", "/") ? .none : .unidentifiable
        }
        return flatpakAppID(path: path).map(Sandbox.flatpak) ?? .unidentifiable
    }

    /// Whether two paths name the same file (device and inode; false when either cannot be
    /// looked at). `/proc/PID/root` and `/proc/PID/exe` lead to the peer's own file whatever
    /// its mount namespace shows at that path.
    static func sameFile(_ a: String, _ b: String) -> Bool {
        var sa = stat(), sb = stat()
        guard stat(a, &sa) == 0, stat(b, &sb) == 0 else { return false }
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino
    }

    /// `[Application] name` from a `.flatpak-info` file.
    static func flatpakAppID(path: String) -> String? {
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
        var flatpakID: String?
        switch sandbox(pid: peer.pid) {
        case .none: break
        case .flatpak(let id): flatpakID = id
        case .unidentifiable:
            log("refused pid \(peer.pid): a sandbox vaultd cannot name (a root directory not vaultd's, or a .flatpak-info that names no app or cannot be read)")
            return nil
        }
        do {
            return try vault.caller(
                flatpakAppID: flatpakID, executable: executable(pid: peer.pid),
                isRegisteredFile: { sameFile("/proc/\(peer.pid)/exe", $0) })
        } catch {
            log("cannot identify peer pid \(peer.pid): \(error)")
            return nil
        }
    }
}
