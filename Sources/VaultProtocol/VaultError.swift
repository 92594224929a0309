/// Every failure vaultd reports, as a varlink error: a fully-qualified `name`, the Keychain
/// Services OSStatus `status` where one applies, and a human `message`.
///
/// Messages never contain secrets or attribute values a user typed. Match families with
/// `catch let e as VaultError where e.code == .itemNotFound`, or `VaultError.Code ~= error`.
public struct VaultError: Error, Equatable, CustomStringConvertible, Sendable {
    /// The varlink error name, e.g. `io.vaultd.Keychain.ItemNotFound`.
    public var name: String
    /// Error parameters as sent on the wire; always holds `message`, and `status` when set.
    public var parameters: [String: JSON]

    public init(name: String, parameters: [String: JSON]) {
        self.name = name
        self.parameters = parameters
    }

    public init(_ code: Code, _ message: String, extra: [String: JSON] = [:]) {
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

        // Keychain (Keychain Services OSStatus values).
        public static let duplicateItem = Code("io.vaultd.Keychain.DuplicateItem")
        public static let itemNotFound = Code("io.vaultd.Keychain.ItemNotFound")
        public static let interactionNotAllowed = Code("io.vaultd.Keychain.InteractionNotAllowed")
        public static let missingEntitlement = Code("io.vaultd.Keychain.MissingEntitlement")
        public static let authFailed = Code("io.vaultd.Keychain.AuthFailed")
        public static let param = Code("io.vaultd.Keychain.Param")
        public static let notAvailableOnThisDevice = Code("io.vaultd.Keychain.NotAvailableOnThisDevice")
        public static let secretTooLarge = Code("io.vaultd.Keychain.SecretTooLarge")
        // Vault life-cycle.
        public static let notInitialized = Code("io.vaultd.Vault.NotInitialized")
        public static let alreadyInitialized = Code("io.vaultd.Vault.AlreadyInitialized")
        public static let wrongPassphrase = Code("io.vaultd.Vault.AuthFailed")
        public static let rateLimited = Code("io.vaultd.Vault.RateLimited")
        public static let noPassphrase = Code("io.vaultd.Vault.NoPassphrase")
        public static let storageFull = Code("io.vaultd.Vault.StorageFull")
        public static let internalError = Code("io.vaultd.Vault.InternalError")
        public static let permissionDenied = Code("io.vaultd.Vault.PermissionDenied")
        public static let replyTooLarge = Code("io.vaultd.Vault.ReplyTooLarge")
        // Preferences.
        public static let domainTooLarge = Code("io.vaultd.Preferences.DomainTooLarge")
        public static let invalidValue = Code("io.vaultd.Preferences.InvalidValue")
        public static let invalidPropertyList = Code("io.vaultd.Preferences.InvalidPropertyList")
        public static let keyNotFound = Code("io.vaultd.Preferences.KeyNotFound")
        public static let readOnlyDomain = Code("io.vaultd.Preferences.ReadOnlyDomain")
        // Apps.
        public static let appNotFound = Code("io.vaultd.Apps.AppNotFound")
        public static let invalidAppID = Code("io.vaultd.Apps.InvalidAppID")
        // org.varlink.service.
        public static let interfaceNotFound = Code("org.varlink.service.InterfaceNotFound")
        public static let methodNotFound = Code("org.varlink.service.MethodNotFound")
        public static let invalidParameter = Code("org.varlink.service.InvalidParameter")
        public static let expectedMore = Code("org.varlink.service.ExpectedMore")
        public static let permissionDeniedVarlink = Code("org.varlink.service.PermissionDenied")
        // Client side: the connection failed or the peer broke the protocol.
        public static let connectionFailed = Code("io.vaultd.Client.ConnectionFailed")
        public static let protocolViolation = Code("io.vaultd.Client.ProtocolViolation")

        static let statuses: [String: Int32] = [
            duplicateItem.name: -25299, itemNotFound.name: -25300, interactionNotAllowed.name: -25308,
            missingEntitlement.name: -34018, authFailed.name: -25293, param.name: -50,
            notAvailableOnThisDevice.name: -25291, secretTooLarge.name: -50, wrongPassphrase.name: -25293,
        ]
    }

    public static func invalidParameter(_ parameter: String, _ why: String) -> VaultError {
        VaultError(.invalidParameter, "invalid parameter '\(parameter)': \(why)", extra: ["parameter": .string(parameter)])
    }
    public static func protocolViolation(_ why: String) -> VaultError { VaultError(.protocolViolation, why) }
    public static func connectionFailed(_ why: String) -> VaultError { VaultError(.connectionFailed, why) }
    public static func param(_ why: String) -> VaultError { VaultError(.param, why) }
}
