import Foundation
import VaultCore

#if canImport(Glibc)
import Glibc
#endif

/// What the kernel says about a peer process beyond SO_PEERCRED (docs/apps.md): its Flatpak
/// app ID and its executable. Nothing the client sends is consulted.
enum PeerIdentity {
    /// Where a peer runs, from `/proc/PID/root`.
    enum Sandbox: Equatable {
        /// vaultd's own root directory and no `/.flatpak-info`: a host process.
        case none
        /// A sandboxed app with this Flatpak ID (`/.flatpak-info`, `[Application] name`).
        case flatpak(String)
        /// A root directory not vaultd's (a bubblewrap sandbox, a container, a chroot) and no
        /// `/.flatpak-info`: a sandbox vaultd cannot name. It can neither run the host's
        /// vaultctl nor be told apart from another app, so it gets nothing
        /// (docs/threat-model.md).
        case unnamed
        /// A `/.flatpak-info` that names no app.
        case unidentifiable
        /// vaultd may not look at the process's root (`errno`; a process that made itself
        /// non-dumpable, say): it cannot be placed, so it gets nothing.
        case unreadable(Int32)
    }

    /// Only a sandbox can put a file at `/.flatpak-info` (the host's `/` is root's), so its
    /// presence means a sandboxed app.
    static func sandbox(pid: pid_t) -> Sandbox {
        let root = "/proc/\(pid)/root"
        var peerRoot = stat(), ownRoot = stat(), info = stat()
        guard stat(root, &peerRoot) == 0 else { return .unreadable(errno) }
        if stat(root + "/.flatpak-info", &info) == 0 {
            return flatpakAppID(path: root + "/.flatpak-info").map(Sandbox.flatpak) ?? .unidentifiable
        }
        guard errno == ENOENT else { return .unreadable(errno) }
        guard stat("/", &ownRoot) == 0, peerRoot.st_dev == ownRoot.st_dev, peerRoot.st_ino == ownRoot.st_ino else { return .unnamed }
        return .none
    }

    /// Whether the peer's executable path, a registered app's, names the very file the peer
    /// runs. In vaultd's own mount namespace the path the kernel gives is the truth (also
    /// "(deleted)": an app whose binary a package upgrade replaced is still that app until
    /// vaultd notices the reinstall); in another, something may be mounted over that path,
    /// so the files are compared (device and inode).
    static func runsRegisteredFile(pid: pid_t, path: String) -> Bool {
        if sameFile("/proc/\(pid)/ns/mnt", "/proc/self/ns/mnt") { return true }
        return sameFile("/proc/\(pid)/exe", path)
    }

    /// Whether two paths name the same file (device and inode; false when either cannot be
    /// looked at). `/proc/PID/…` links lead to the peer's own file whatever its mount
    /// namespace shows at that path.
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

    /// The target of `/proc/PID/exe`, without the " (deleted)" suffix the kernel adds to a
    /// deleted file (one with no link left); a file whose name ends so keeps its name.
    static func executable(pid: pid_t) -> String? {
        var buf = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/\(pid)/exe", &buf, Int(PATH_MAX))
        guard n > 0 else { return nil }
        var path = String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if path.hasSuffix(" (deleted)") {
            var st = stat()
            guard stat("/proc/\(pid)/exe", &st) == 0 else { return nil }
            if st.st_nlink == 0 { path.removeLast(" (deleted)".count) }
        }
        return path
    }

    /// The caller for a connected peer.
    static func caller(for peer: PeerCredentials, vault: Vault) -> Caller? {
        var flatpakID: String?
        switch sandbox(pid: peer.pid) {
        case .none: break
        case .flatpak(let id): flatpakID = id
        case .unnamed:
            log("refused pid \(peer.pid): a sandbox vaultd cannot name (its root directory is not vaultd's and it has no .flatpak-info)")
            return nil
        case .unidentifiable:
            log("refused pid \(peer.pid): a sandbox whose .flatpak-info names no app")
            return nil
        case .unreadable(ENOENT), .unreadable(ESRCH):
            // Gone before it could be placed: a client that gave up (a timeout) and exited.
            log("refused pid \(peer.pid): the process exited before vaultd could identify it")
            return nil
        case .unreadable(let code):
            log("refused pid \(peer.pid): vaultd may not look at the process (/proc/\(peer.pid)/root: \(String(cString: strerror(code))))")
            return nil
        }
        do {
            return try vault.caller(
                flatpakAppID: flatpakID, executable: executable(pid: peer.pid),
                isRegisteredFile: { runsRegisteredFile(pid: peer.pid, path: $0) })
        } catch {
            log("cannot identify peer pid \(peer.pid): \(error)")
            return nil
        }
    }
}
