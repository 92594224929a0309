/// The exit statuses of vaultctl, git-credential-vault and vault-example, one per kind of
/// failure a script may want to tell apart. Where Keychain Services has an OSStatus for it,
/// the status is the one macOS `security` exits with (the OSStatus's low byte: `security
/// find-generic-password` exits 44 for errSecItemNotFound), so a script ported from macOS keeps
/// its checks; the rest are sysexits(3) values. Every other failure is 1.
public enum ExitCode: Int32, CaseIterable, Sendable {
    case success = 0
    /// Any failure not named below (a wrong passphrase, a keyring failure, a full disk, ...).
    case failure = 1
    /// errSecMissingEntitlement / PermissionDenied, as sysexits' EX_NOPERM: the access group,
    /// domain or cache is not the caller's, or the method is the owner's.
    case notPermitted = 77
    /// errSecInteractionNotAllowed (-25308, `security`'s 36): the vault (or the keyring) is locked.
    case locked = 36
    /// errSecItemNotFound (-25300, `security`'s 44): no item, preferences key or domain, or app.
    case notFound = 44
    /// errSecDuplicateItem (-25299, `security`'s 45): an item with that primary key exists.
    case duplicateItem = 45
    /// EX_DATAERR: input vaultd or the tool refuses (errSecParam, a value that is not a
    /// property list, a secret over 1 MiB, an empty secret without --allow-empty).
    case badInput = 65
    /// EX_USAGE: a wrong command line (the reason and the command's usage on stderr).
    case usage = 64
    /// EX_IOERR: a stored preference value vaultd cannot read (damaged on disk): a read of
    /// that key, or a read, find or export that left such a value out, naming it.
    case damaged = 74
    /// EX_UNAVAILABLE: nothing answers at vaultd's socket, vaultd closed the connection, or
    /// it did not answer in time.
    case unavailable = 69

    /// The status for a failure vaultd (or VaultClient) reported.
    public init(_ error: VaultError) {
        switch error.code {
        case .itemNotFound, .keyNotFound, .appNotFound: self = .notFound
        case .duplicateItem: self = .duplicateItem
        case .interactionNotAllowed: self = .locked
        case .missingEntitlement, .permissionDenied, .permissionDeniedVarlink, .readOnlyDomain:
            self = .notPermitted
        case .param, .invalidParameter, .invalidValue, .invalidPropertyList, .secretTooLarge,
            .domainTooLarge, .invalidAppID:
            self = .badInput
        case .valueDamaged: self = .damaged
        case .connectionFailed: self = .unavailable
        default: self = .failure
        }
    }
}
