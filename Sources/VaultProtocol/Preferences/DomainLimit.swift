/// The most a preference domain holds: vaultd refuses a write past it with
/// DomainTooLarge, and `VaultClient` says the same for a value too large to send at all.
public enum DomainLimit {
    /// 4 MiB, in bytes (how an entry counts: `PreferencesStore.entrySize` in VaultCore).
    public static let maximumBytes = 4 << 20
}
