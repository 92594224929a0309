import Foundation
import Testing
import VaultCore
import VaultProtocol

@testable import vaultd

/// The varlink front-end's mapping of the engine's failures (`Sources/vaultd/Varlink/Wire`): every
/// `VaultFailure.Code` is sent as an error the interfaces declare, with Keychain Services'
/// OSStatus where one applies, and with the typed details as the declared parameters.
@Suite struct WireErrorsTests {
    /// What each code is sent as, and its OSStatus (nil: none), as docs/protocol.md lists them.
    static let expected: [VaultFailure.Code: (String, Int32?)] = [
        .duplicateItem: ("io.vaultd.Keychain.DuplicateItem", -25299),
        .itemNotFound: ("io.vaultd.Keychain.ItemNotFound", -25300),
        .interactionNotAllowed: ("io.vaultd.Keychain.InteractionNotAllowed", -25308),
        .missingEntitlement: ("io.vaultd.Keychain.MissingEntitlement", -34018),
        .authFailed: ("io.vaultd.Keychain.AuthFailed", -25293),
        .itemDamaged: ("io.vaultd.Keychain.ItemDamaged", -26275),
        .param: ("io.vaultd.Keychain.Param", -50),
        .notAvailableOnThisDevice: ("io.vaultd.Keychain.NotAvailableOnThisDevice", -25291),
        .secretTooLarge: ("io.vaultd.Keychain.SecretTooLarge", -50),
        .notInitialized: ("io.vaultd.Vault.NotInitialized", nil),
        .alreadyInitialized: ("io.vaultd.Vault.AlreadyInitialized", nil),
        .wrongPassphrase: ("io.vaultd.Vault.AuthFailed", -25293),
        .rateLimited: ("io.vaultd.Vault.RateLimited", nil),
        .noPassphrase: ("io.vaultd.Vault.NoPassphrase", nil),
        .keyringUnavailable: ("io.vaultd.Vault.KeyringUnavailable", nil),
        .storageFull: ("io.vaultd.Vault.StorageFull", nil),
        .quotaExceeded: ("io.vaultd.Vault.QuotaExceeded", nil),
        .backupUnreadable: ("io.vaultd.Vault.BackupUnreadable", nil),
        .backupAuthFailed: ("io.vaultd.Vault.BackupAuthFailed", nil),
        .notEmpty: ("io.vaultd.Vault.NotEmpty", nil),
        .storeReplaced: ("io.vaultd.Vault.StoreReplaced", nil),
        .storeDamaged: ("io.vaultd.Vault.StoreDamaged", nil),
        .internalError: ("io.vaultd.Vault.InternalError", nil),
        .permissionDenied: ("io.vaultd.Vault.PermissionDenied", nil),
        .replyTooLarge: ("io.vaultd.Vault.ReplyTooLarge", nil),
        .domainTooLarge: ("io.vaultd.Preferences.DomainTooLarge", nil),
        .invalidValue: ("io.vaultd.Preferences.InvalidValue", nil),
        .invalidPropertyList: ("io.vaultd.Preferences.InvalidPropertyList", nil),
        .readOnlyDomain: ("io.vaultd.Preferences.ReadOnlyDomain", nil),
        .valueDamaged: ("io.vaultd.Preferences.ValueDamaged", nil),
        .appNotFound: ("io.vaultd.Apps.AppNotFound", nil),
        .invalidAppID: ("io.vaultd.Apps.InvalidAppID", nil),
        .invalidParameter: ("org.varlink.service.InvalidParameter", nil),
    ]

    @Test func everyCodeIsSentAsADeclaredErrorWithItsStatus() {
        #expect(Set(Self.expected.keys) == Set(VaultFailure.Code.allCases))
        for code in VaultFailure.Code.allCases {
            let e = VaultError(VaultFailure(code, "what went wrong"))
            let (name, status) = Self.expected[code] ?? ("", nil)
            #expect(e.name == name, "\(code)")
            #expect(e.status == status, "\(code)")
            #expect(e.message == "what went wrong")
            #expect(
                VarlinkInterfaces.errorParameters[e.name] != nil,
                "\(code) is sent as \(e.name), which no interface declares")
        }
    }

    /// Every detail a code carries reaches the wire under its declared name; a detail its
    /// error does not declare is never sent (a client checking replies against the IDL would
    /// refuse it).
    @Test func detailsBecomeTheDeclaredParameters() throws {
        let damaged = DamagedItem(
            id: 3, uuid: [0x0a, 0x1b], itemClass: "genericPassword", accessGroup: "user",
            part: .attributes)
        let all = VaultFailure.Details(
            retryAfter: 2.5, limit: 4096, size: 5000, domain: "com.example.d", key: "Volume",
            appID: "org.example.A", parameter: "key", damaged: [damaged])
        let cases: [(VaultFailure.Code, JSONObject)] = [
            (.rateLimited, ["retryAfter": JSON(2.5)]),
            (.quotaExceeded, ["limit": JSON(4096), "size": JSON(5000), "appID": "org.example.A"]),
            (
                .domainTooLarge,
                ["limit": JSON(4096), "size": JSON(5000), "domain": "com.example.d"]
            ),
            (.secretTooLarge, ["limit": JSON(4096)]),
            (.replyTooLarge, ["limit": JSON(4096), "size": JSON(5000)]),
            (.readOnlyDomain, ["domain": "com.example.d"]),
            (.valueDamaged, ["domain": "com.example.d", "key": "Volume"]),
            (.invalidParameter, ["parameter": "key"]),
            (.itemDamaged, ["items": .array([damaged.wire])]),
            (.itemNotFound, [:]),
            (.internalError, [:]),
        ]
        for (code, fields) in cases {
            let e = VaultError(VaultFailure(code, "m", all))
            var expected = fields
            expected["message"] = "m"
            if let s = e.code.status { expected["status"] = JSON(Int(s)) }
            #expect(e.parameters == expected, "\(code)")
            let declared = try #require(VarlinkInterfaces.errorParameters[e.name])
            #expect(
                Set(e.parameters.keys).subtracting(["message", "status"]).isSubset(of: declared),
                "\(code)")
        }
    }

    /// A failure, the front-end's own error and anything else, as sent.
    @Test func anyErrorIsSentAsAVarlinkError() {
        #expect(VaultError.wire(VaultFailure(.itemNotFound, "no item")).code == .itemNotFound)
        #expect(VaultError.wire(VaultError(.methodNotFound, "no method")).code == .methodNotFound)
        struct Unexpected: Error {}
        #expect(VaultError.wire(Unexpected()).code == .internalError)
    }
}
