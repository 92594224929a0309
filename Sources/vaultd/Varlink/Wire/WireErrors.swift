import Foundation
import VaultCore
import VaultProtocol

// The engine's failures as varlink errors: the one place a `VaultFailure.Code` gets its
// `io.vaultd.*` name (and through it Keychain Services' OSStatus, `VaultError.Code.status`)
// and its typed details their wire fields. A test holds every code against the IDL's
// declared errors.

extension VaultFailure.Code {
    /// The varlink error this code is sent as.
    var wire: VaultError.Code {
        switch self {
        case .duplicateItem: .duplicateItem
        case .itemNotFound: .itemNotFound
        case .interactionNotAllowed: .interactionNotAllowed
        case .missingEntitlement: .missingEntitlement
        case .authFailed: .authFailed
        case .itemDamaged: .itemDamaged
        case .param: .param
        case .notAvailableOnThisDevice: .notAvailableOnThisDevice
        case .secretTooLarge: .secretTooLarge
        case .notInitialized: .notInitialized
        case .alreadyInitialized: .alreadyInitialized
        case .wrongPassphrase: .wrongPassphrase
        case .rateLimited: .rateLimited
        case .noPassphrase: .noPassphrase
        case .keyringUnavailable: .keyringUnavailable
        case .storageFull: .storageFull
        case .quotaExceeded: .quotaExceeded
        case .backupUnreadable: .backupUnreadable
        case .backupAuthFailed: .backupAuthFailed
        case .notEmpty: .notEmpty
        case .storeReplaced: .storeReplaced
        case .storeDamaged: .storeDamaged
        case .internalError: .internalError
        case .permissionDenied: .permissionDenied
        case .replyTooLarge: .replyTooLarge
        case .domainTooLarge: .domainTooLarge
        case .invalidValue: .invalidValue
        case .invalidPropertyList: .invalidPropertyList
        case .readOnlyDomain: .readOnlyDomain
        case .valueDamaged: .valueDamaged
        case .appNotFound: .appNotFound
        case .invalidAppID: .invalidAppID
        case .invalidParameter: .invalidParameter
        }
    }
}

extension VaultError {
    /// `failure` as the varlink error it is sent as, its details as the error's parameters:
    /// those its declaration names (the IDL's `error` line), never another.
    init(_ failure: VaultFailure) {
        let d = failure.details
        var extra: JSONObject = [:]
        if let v = d.retryAfter { extra["retryAfter"] = JSON(v) }
        if let v = d.limit { extra["limit"] = JSON(v) }
        if let v = d.size { extra["size"] = JSON(v) }
        if let v = d.domain { extra["domain"] = .string(v) }
        if let v = d.key { extra["key"] = .string(v) }
        if let v = d.appID { extra["appID"] = .string(v) }
        if let v = d.parameter { extra["parameter"] = .string(v) }
        if failure.code == .itemDamaged { extra["items"] = DamagedItem.wire(d.damaged) }
        let code = failure.code.wire
        let declared = VarlinkInterfaces.errorParameters[code.name] ?? []
        self.init(code, failure.message, extra: extra.filter { declared.contains($0.key) })
    }

    /// Any error met while answering a call, as the varlink error sent for it: the engine's
    /// failures mapped, the front-end's own `VaultError`s as they are, anything else (a bug)
    /// InternalError with its description.
    static func wire(_ error: any Error) -> VaultError {
        switch error {
        case let e as VaultError: e
        case let f as VaultFailure: VaultError(f)
        default: VaultError(.internalError, "\(error)")
        }
    }
}
