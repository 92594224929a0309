import Foundation

/// Every failure vaultd reports, as a varlink error: a fully-qualified `name`, the Keychain
/// Services OSStatus `status` where one applies, and a human `message`.
///
/// Messages never contain secrets or attribute values a user typed. Match families with
/// `catch let e as VaultError where e.code == .itemNotFound`, or `VaultError.Code ~= error`.
public struct VaultError: Error, Equatable, CustomStringConvertible, Sendable {
    /// The varlink error name, e.g. `io.vaultd.Keychain.ItemNotFound`.
    public var name: String
    /// Error parameters as sent on the wire; always holds `message`, and `status` when set.
    public var parameters: JSONObject

    public init(name: String, parameters: JSONObject) {
        self.name = name
        self.parameters = parameters
    }

    public init(_ code: Code, _ message: String, extra: JSONObject = [:]) {
        var p = extra
        p["message"] = .string(message)
        if let s = code.status { p["status"] = JSON(Int(s)) }
        self.init(name: code.name, parameters: p)
    }

    public var code: Code { Code(name) }
    public var message: String { parameters["message"]?.stringValue ?? "" }
    /// The Keychain Services OSStatus (e.g. -25300), when the error has one.
    public var status: Int32? { parameters["status"]?.int64Value.flatMap { Int32(exactly: $0) } }
    public var description: String { message.isEmpty ? name : "\(name): \(message)" }

    /// A stable error identity: its varlink name, plus the OSStatus it maps to.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let name: String
        public init(_ name: String) { self.name = name }
        public var description: String { name }
        public var status: Int32? { Code.statuses[name] }

        public static func ~= (code: Code, error: Error) -> Bool {
            (error as? VaultError)?.code == code
        }

        // Keychain (Keychain Services OSStatus values; docs/keychain.md).
        /// -25299 (errSecDuplicateItem): Add, or an Update's change, collides with an item of
        /// the same primary key, class, access group and synchronizable.
        public static let duplicateItem = Code("io.vaultd.Keychain.DuplicateItem")
        /// -25300 (errSecItemNotFound): nothing matches a CopyMatching, Update or Delete.
        public static let itemNotFound = Code("io.vaultd.Keychain.ItemNotFound")
        /// -25308 (errSecInteractionNotAllowed): a matched or added item's class key is not in
        /// memory (the vault is locked; before the first unlock, every item). Never reported
        /// as ItemNotFound.
        public static let interactionNotAllowed = Code("io.vaultd.Keychain.InteractionNotAllowed")
        /// -34018 (errSecMissingEntitlement): the access group (or preferences domain, cache
        /// directory) is not the caller's, or the app's install ended after it connected
        /// (uninstalled or reinstalled: reconnect).
        public static let missingEntitlement = Code("io.vaultd.Keychain.MissingEntitlement")
        /// -25293 (errSecAuthFailed): a whenPasscodeSetThisDeviceOnly item on a vault without
        /// a passphrase. (A wrong passphrase is `wrongPassphrase`.)
        public static let authFailed = Code("io.vaultd.Keychain.AuthFailed")
        /// -26275 (errSecDecode, as securityd reports an item that does not decode): the only
        /// items a call matched are damaged (their row's columns malformed, or their
        /// attributes or secret failing authentication: bytes of the store altered on disk),
        /// or an Add collides with a damaged item, or an Update would change one.
        /// `parameters["items"]` lists them (`DamagedItem`: id, uuid, class, access group,
        /// what is damaged). A Delete naming only service, server, account, access group,
        /// accessibility or synchronizable removes them.
        public static let itemDamaged = Code("io.vaultd.Keychain.ItemDamaged")
        /// -50 (errSecParam): a malformed or contradictory keychain request (see `ItemAttributes`).
        public static let param = Code("io.vaultd.Keychain.Param")
        /// -25291 (errSecNotAvailable): a ThisDeviceOnly item made on another device (a moved
        /// data directory).
        public static let notAvailableOnThisDevice = Code(
            "io.vaultd.Keychain.NotAvailableOnThisDevice")
        /// -50: a secret over `SecretLimit.maximumBytes` (1 MiB); `parameters["limit"]` holds it.
        public static let secretTooLarge = Code("io.vaultd.Keychain.SecretTooLarge")
        // Vault life-cycle.
        /// `Init` has not been run: every keychain call, Unlock, Lock, ChangePassphrase.
        public static let notInitialized = Code("io.vaultd.Vault.NotInitialized")
        /// `Init` on a vault that exists.
        public static let alreadyInitialized = Code("io.vaultd.Vault.AlreadyInitialized")
        /// -25293: a wrong (or, for ChangePassphrase, missing) passphrase; counted for the rate limit.
        public static let wrongPassphrase = Code("io.vaultd.Vault.AuthFailed")
        /// Wait `parameters["retryAfter"]` seconds: too many wrong passphrases (1 s doubling
        /// to 15 min after the third), vaultd at its connection cap (or the caller's identity
        /// at its share of it), its 64 MiB of messages in flight held by other connections,
        /// or an Observe stream that fell behind unread (observe again).
        public static let rateLimited = Code("io.vaultd.Vault.RateLimited")
        /// Lock or Unlock on a vault without a passphrase (it is always unlocked).
        public static let noPassphrase = Code("io.vaultd.Vault.NoPassphrase")
        /// `UnlockFromKeyring`: no session bus, no Secret Service, a locked login keyring, or
        /// no passphrase remembered there (`vaultctl unlock --remember`).
        public static let keyringUnavailable = Code("io.vaultd.Vault.KeyringUnavailable")
        /// The disk holding the data directory is full (or failed a write); nothing was written.
        public static let storageFull = Code("io.vaultd.Vault.StorageFull")
        /// A write would take an app past its storage quota (`parameters["limit"]` bytes, by
        /// default 64 MiB: the items it added and its own preferences domain; `["size"]` what
        /// it would store, `["appID"]`); nothing was written.
        public static let quotaExceeded = Code("io.vaultd.Vault.QuotaExceeded")
        /// Restore (or Backup's check) of a file that is not a readable vaultd backup: not an
        /// age file, malformed, altered, truncated, over the limits. Nothing was changed.
        public static let backupUnreadable = Code("io.vaultd.Vault.BackupUnreadable")
        /// The passphrase or identity does not open the backup file. Nothing was changed.
        public static let backupAuthFailed = Code("io.vaultd.Vault.BackupAuthFailed")
        /// Restore without merge into a vault that holds items, preferences or apps.
        public static let notEmpty = Code("io.vaultd.Vault.NotEmpty")
        /// The database file was replaced or truncated under vaultd while it ran: no more
        /// writes are served until it restarts.
        public static let storeReplaced = Code("io.vaultd.Vault.StoreReplaced")
        /// SQLite reports the store malformed (SQLITE_CORRUPT, SQLITE_NOTADB) in the middle of
        /// a call: nothing more is written until vaultd restarts, and a start refuses such a
        /// store. The message says what to do (`vaultctl doctor`, restore a backup).
        public static let storeDamaged = Code("io.vaultd.Vault.StoreDamaged")
        /// vaultd failed unexpectedly (a failed sync, a row it cannot read); the message says where.
        public static let internalError = Code("io.vaultd.Vault.InternalError")
        /// An owner-only method (Init, Unlock, Lock, ChangePassphrase, Apps, cache Purge) called by an app.
        public static let permissionDenied = Code("io.vaultd.Vault.PermissionDenied")
        /// The reply would be over the 8 MiB message limit (`parameters["size"]`, `["limit"]`,
        /// bytes); nothing was done to it. Ask for less (matchLimit one, no data).
        public static let replyTooLarge = Code("io.vaultd.Vault.ReplyTooLarge")
        // Preferences (docs/preferences.md).
        /// A write would take the domain past `DomainLimit.maximumBytes` (4 MiB); nothing was
        /// written. `parameters["limit"]`, and from vaultd `["domain"]`, `["size"]` (bytes).
        public static let domainTooLarge = Code("io.vaultd.Preferences.DomainTooLarge")
        /// A value that is not a valid tagged property-list value, a key over 1 KiB of UTF-8,
        /// or a domain name that is empty, over 255 bytes, or holds '/' or a control character.
        public static let invalidValue = Code("io.vaultd.Preferences.InvalidValue")
        /// Import of bytes that are not an XML or binary plist with a dictionary root (or
        /// that nest past 64 levels or expand past `PropertyListCodec.maximumExpandedSize`, 12 MiB),
        /// or an Export as XML of a string
        /// XML 1.0 cannot carry.
        public static let invalidPropertyList = Code("io.vaultd.Preferences.InvalidPropertyList")
        /// A stored preference value that does not decode (its bytes altered or damaged on
        /// disk): a Get of that key, named by `parameters["domain"]` and `["key"]`. A domain's
        /// other keys still read (Domain, Export and Backup name damaged keys in `damaged`),
        /// and a Set, Remove, RemoveDomain or Import replaces or removes the value.
        public static let valueDamaged = Code("io.vaultd.Preferences.ValueDamaged")
        /// Raised by vaultctl (`defaults read` of an absent key); vaultd's Get answers null instead.
        public static let keyNotFound = Code("io.vaultd.Preferences.KeyNotFound")
        /// An app writing `NSGlobalDomain` (apps may only read it).
        public static let readOnlyDomain = Code("io.vaultd.Preferences.ReadOnlyDomain")
        // Apps (docs/apps.md).
        /// No registered app has this ID (Show, Uninstall), or, for a cache directory, none is installed.
        public static let appNotFound = Code("io.vaultd.Apps.AppNotFound")
        /// An app ID that is not reverse-DNS (e.g. org.example.App).
        public static let invalidAppID = Code("io.vaultd.Apps.InvalidAppID")
        // org.varlink.service.
        public static let interfaceNotFound = Code("org.varlink.service.InterfaceNotFound")
        public static let methodNotFound = Code("org.varlink.service.MethodNotFound")
        /// A missing or mistyped call parameter, named in `parameters["parameter"]`; from
        /// `VaultConnection` (`parameter` "message") a call over 8 MiB, not sent.
        public static let invalidParameter = Code("org.varlink.service.InvalidParameter")
        /// A streaming method (Observe) called without `more`.
        public static let expectedMore = Code("org.varlink.service.ExpectedMore")
        /// Defined by varlink; vaultd does not send it (see `permissionDenied`).
        public static let permissionDeniedVarlink = Code("org.varlink.service.PermissionDenied")
        // Client side: the connection failed or the peer broke the protocol.
        /// Raised by `VaultConnection`: nothing answers at the socket, vaultd closed the
        /// connection (or refused the peer), or no reply within `replyTimeout` seconds. A call
        /// that was sent may or may not have been done.
        public static let connectionFailed = Code("io.vaultd.Client.ConnectionFailed")
        /// Raised by `VaultConnection`: a reply that is not a varlink message.
        public static let protocolViolation = Code("io.vaultd.Client.ProtocolViolation")

        static let statuses: [String: Int32] = [
            duplicateItem.name: -25299, itemNotFound.name: -25300,
            interactionNotAllowed.name: -25308,
            missingEntitlement.name: -34018, authFailed.name: -25293, param.name: -50,
            notAvailableOnThisDevice.name: -25291, secretTooLarge.name: -50,
            wrongPassphrase.name: -25293,
            itemDamaged.name: -26275,
        ]
    }

    public static func invalidParameter(_ parameter: String, _ why: String) -> VaultError {
        VaultError(
            .invalidParameter, "invalid parameter '\(parameter)': \(why)",
            extra: ["parameter": .string(parameter)])
    }
    public static func protocolViolation(_ why: String) -> VaultError {
        VaultError(.protocolViolation, why)
    }
    public static func connectionFailed(_ why: String) -> VaultError {
        VaultError(.connectionFailed, why)
    }
    public static func param(_ why: String) -> VaultError { VaultError(.param, why) }
}

extension VaultError: LocalizedError {
    /// The message alone: what `localizedDescription` shows (the name is in `description`).
    public var errorDescription: String? { message }
}
