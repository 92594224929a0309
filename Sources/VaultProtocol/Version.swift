/// The version of vaultd and its tools (one release carries all of them): vaultd's Status
/// and GetInfo answer it, `vaultctl --version` prints it.
public enum VaultVersion {
    public static let current = "0.1.0"
}
