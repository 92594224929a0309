import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The Flatpak installations vaultd looks in for apps' deployments
/// (`AppSettings.flatpakInstallations`, docs/apps.md), found as flatpak(1) finds them: the
/// user's, `FLATPAK_USER_DIR` or else `$XDG_DATA_HOME/flatpak` (`~/.local/share/flatpak`),
/// then the system's, `FLATPAK_SYSTEM_DIR` or else `/var/lib/flatpak`. Flatpak honours the
/// same two variables, so a vaultd started with them agrees with the flatpak the user runs
/// (the tests point them at deployments they lay out). Extra system installations
/// (`/etc/flatpak/installations.d`) are not looked in: an app deployed only there is never
/// found, so its install state is not tracked (it is never taken for uninstalled).
enum FlatpakInstallations {
    static func fromEnvironment(_ env: [String: String] = ProcessInfo.processInfo.environment)
        -> [String]
    {
        func absolute(_ key: String) -> String? {
            guard let v = env[key], v.hasPrefix("/") else { return nil }
            return v
        }
        var out: [String] = []
        if let user = absolute("FLATPAK_USER_DIR") {
            out.append(user)
        } else if let data = absolute("XDG_DATA_HOME") {
            out.append(data + "/flatpak")
        } else if let home = absolute("HOME")
            ?? getpwuid(getuid()).flatMap({ $0.pointee.pw_dir.map { String(cString: $0) } })
        {
            out.append(home + "/.local/share/flatpak")
        }
        out.append(absolute("FLATPAK_SYSTEM_DIR") ?? "/var/lib/flatpak")
        return out
    }
}
