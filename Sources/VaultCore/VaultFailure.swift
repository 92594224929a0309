import Foundation
import VaultProtocol

/// Every failure of the engine, in the domain's terms: what went wrong (`code`, one of the
/// `Code` enum), a human `message`, and typed `details` where a caller can act on them (how
/// long to wait, which limit, which items).
///
/// The engine knows no protocol. Each front-end maps a failure to its own wire once: the
/// varlink front-end to `io.vaultd.*` errors with Keychain Services' OSStatus
/// (`Sources/vaultd/Varlink/Wire/WireErrors.swift`), the Secret Service front-end to D-Bus errors.
/// Messages never hold secrets, attribute values or preference values.
public struct VaultFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong. The Keychain Services result code a case stands for is named where
    /// there is one; docs/keychain.md and docs/protocol.md say when each is raised.
    public enum Code: String, Sendable, CaseIterable {
        // Keychain items.
        /// errSecDuplicateItem: an Add, or an Update's change, collides with an item of the
        /// same primary key, class, access group and synchronizable.
        case duplicateItem
        /// errSecItemNotFound: nothing matches a query.
        case itemNotFound
        /// errSecInteractionNotAllowed: a matched or added item's class key is not in memory.
        case interactionNotAllowed
        /// errSecMissingEntitlement: the access group, preferences domain or cache directory is
        /// not the caller's, or its app's install ended after it connected.
        case missingEntitlement
        /// errSecAuthFailed: a whenPasscodeSetThisDeviceOnly item on a vault without a passphrase.
        case authFailed
        /// errSecDecode: the only items a call matched are damaged on disk (`details.damaged`).
        case itemDamaged
        /// errSecParam: a malformed or contradictory request.
        case param
        /// errSecNotAvailable: a ThisDeviceOnly item made on another device.
        case notAvailableOnThisDevice
        /// A secret over `SecretLimit.maximumBytes` (`details.limit`).
        case secretTooLarge
        // The vault's life-cycle.
        case notInitialized
        case alreadyInitialized
        /// A wrong (or missing) passphrase; counted for the rate limit.
        case wrongPassphrase
        /// Wait `details.retryAfter` seconds.
        case rateLimited
        /// Lock, Unlock or a passphrase removal on a vault without a passphrase.
        case noPassphrase
        /// No passphrase could be read from the login keyring.
        case keyringUnavailable
        /// The disk is full or failed a write; nothing was written.
        case storageFull
        /// An app's storage quota (`details.appID`, `.size`, `.limit`).
        case quotaExceeded
        /// Not a readable vaultd backup; nothing was changed.
        case backupUnreadable
        /// The passphrase or identity does not open the backup; nothing was changed.
        case backupAuthFailed
        /// A restore without merge into a vault that holds items, preferences or apps.
        case notEmpty
        /// The database file was replaced or truncated under vaultd.
        case storeReplaced
        /// SQLite reports the store malformed.
        case storeDamaged
        /// Something failed unexpectedly; the message says where.
        case internalError
        /// An owner-only operation asked for by an app, or a peer vaultd does not serve.
        case permissionDenied
        /// An answer over the reply limit (`details.size`, `.limit`).
        case replyTooLarge
        // Preferences.
        /// A domain past its size limit (`details.domain`, `.size`, `.limit`).
        case domainTooLarge
        /// A value, key or domain name that is not valid.
        case invalidValue
        /// Bytes that are not a property list with a dictionary root, or a value that cannot
        /// be written in the asked format.
        case invalidPropertyList
        /// An app writing `NSGlobalDomain` (`details.domain`).
        case readOnlyDomain
        /// A stored preference value that does not decode: damaged on disk (`details.domain`,
        /// `.key`).
        case valueDamaged
        // Apps.
        case appNotFound
        case invalidAppID
        /// A parameter of the call that is missing or out of range (`details.parameter`).
        case invalidParameter
    }

    /// What a caller can act on, typed. Each code fills the fields its case names; the rest
    /// stay nil (or empty).
    public struct Details: Sendable, Equatable {
        /// Seconds to wait before trying again (rateLimited).
        public var retryAfter: Double?
        /// The limit passed, in bytes (secretTooLarge, quotaExceeded, domainTooLarge, replyTooLarge).
        public var limit: Int64?
        /// What the write or answer would have taken, in bytes.
        public var size: Int64?
        /// The preferences domain concerned.
        public var domain: String?
        /// The preference key concerned (valueDamaged).
        public var key: String?
        /// The app concerned.
        public var appID: String?
        /// The request's parameter concerned (invalidParameter).
        public var parameter: String?
        /// The damaged items met (itemDamaged), at most `VaultFailure.maximumDamagedItems`.
        public var damaged: [DamagedItem] = []
        /// The program refused a secret by the per-program access check (authFailed: denied;
        /// interactionNotAllowed: not confirmed), as a dialog names it (docs/access.md).
        public var program: String?

        public init(
            retryAfter: Double? = nil, limit: Int64? = nil, size: Int64? = nil,
            domain: String? = nil, key: String? = nil,
            appID: String? = nil, parameter: String? = nil, damaged: [DamagedItem] = []
        ) {
            self.retryAfter = retryAfter
            self.limit = limit
            self.size = size
            self.domain = domain
            self.key = key
            self.appID = appID
            self.parameter = parameter
            self.damaged = damaged
        }
    }

    /// The most damaged items one failure names in `details.damaged` (each is a few hundred
    /// bytes at most: a reply stays far below its limit).
    public static let maximumDamagedItems = 1000

    public var code: Code
    public var message: String
    public var details: Details

    public init(_ code: Code, _ message: String, _ details: Details = Details()) {
        self.code = code
        self.message = message
        self.details = details
    }

    public var description: String { "\(code): \(message)" }

    /// errSecParam with `why`.
    public static func param(_ why: String) -> VaultFailure { VaultFailure(.param, why) }

    /// A call parameter that is missing or out of range.
    public static func invalidParameter(_ parameter: String, _ why: String) -> VaultFailure {
        VaultFailure(
            .invalidParameter, "invalid parameter '\(parameter)': \(why)",
            Details(parameter: parameter))
    }
}

extension VaultFailure.Code {
    /// `VaultFailure.Code.x ~= error`, to match a family in a `catch` or `switch`.
    public static func ~= (code: VaultFailure.Code, error: any Error) -> Bool {
        (error as? VaultFailure)?.code == code
    }
}

extension VaultFailure {
    /// Throws secretTooLarge (with the limit) when a secret of `count` bytes is over
    /// `SecretLimit.maximumBytes`.
    static func checkSecretSize(_ count: Int) throws {
        guard count <= SecretLimit.maximumBytes else {
            throw VaultFailure(
                .secretTooLarge, SecretLimit.refusal(count),
                Details(limit: Int64(SecretLimit.maximumBytes)))
        }
    }

    /// Re-raises an error of a shared codec (the property-list and JSON codecs of
    /// VaultProtocol, which clients use too and which report in their own terms) as the
    /// engine's `code`, keeping its message; a `VaultFailure` passes unchanged.
    static func rethrowing<T>(as code: Code, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let failure as VaultFailure {
            throw failure
        } catch {
            throw VaultFailure(code, error.localizedDescription)
        }
    }
}
