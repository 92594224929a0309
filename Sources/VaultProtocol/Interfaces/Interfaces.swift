/// The varlink interface descriptions vaultd serves through
/// `org.varlink.service.GetInterfaceDescription`. They are the source of truth for the
/// protocol: every method, field and error, with a one-line comment each. The Swift
/// types of the daemon and the client follow them one-to-one.
public enum VarlinkInterfaces {
    /// Interface name → description text, in the order `GetInfo` lists them.
    public static let all: [(name: String, description: String)] = [
        ("org.varlink.service", service),
        ("io.vaultd.Vault", vault),
        ("io.vaultd.Keychain", keychain),
        ("io.vaultd.Preferences", preferences),
        ("io.vaultd.Caches", caches),
        ("io.vaultd.Apps", apps),
        ("io.vaultd.Sync", sync),
    ]

    public static func description(of name: String) -> String? {
        all.first { $0.name == name }?.description
    }
}
