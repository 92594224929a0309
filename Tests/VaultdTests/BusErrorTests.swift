import Foundation
import Testing
import VaultCore
import VaultProtocol

@testable import vaultd

/// The Secret Service front-end's errors (`Sources/vaultd/SecretService`): every name it can
/// send is one of `BusError.Name`, each a proper D-Bus error name of the specification's
/// namespace or the bus's (vaultd's ItemDamaged aside, the name the socket gives a damaged
/// item, and vaultd's io.vaultd.Secret.Error.* of per-program access, which the
/// specification has no name for), and every engine failure maps to one of them. An object the caller may not see and
/// one that does not exist are the same error, message included.
@Suite struct BusErrorTests {
    /// Every error name the front-end sends.
    static let names: Set<String> = [
        "org.freedesktop.Secret.Error.NoSuchObject", "org.freedesktop.Secret.Error.NoSession",
        "org.freedesktop.Secret.Error.IsLocked",
        "org.freedesktop.DBus.Error.InvalidArgs", "org.freedesktop.DBus.Error.AccessDenied",
        "org.freedesktop.DBus.Error.NotSupported",
        "org.freedesktop.DBus.Error.LimitsExceeded", "org.freedesktop.DBus.Error.UnknownMethod",
        "org.freedesktop.DBus.Error.UnknownProperty",
        "org.freedesktop.DBus.Error.PropertyReadOnly", "org.freedesktop.DBus.Error.Failed",
        "io.vaultd.Keychain.ItemDamaged", "io.vaultd.Secret.Error.AccessRefused",
        "io.vaultd.Secret.Error.NotConfirmed",
    ]

    @Test func everyNameIsAProperDBusErrorName() {
        #expect(Set(BusError.Name.allCases.map(\.rawValue)) == Self.names)
        for name in BusError.Name.allCases.map(\.rawValue) {
            let elements = name.split(separator: ".", omittingEmptySubsequences: false)
            #expect(elements.count >= 2 && name.utf8.count <= 255, "\(name)")
            #expect(
                elements.allSatisfy {
                    !$0.isEmpty && !$0.first!.isNumber
                        && $0.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }
                }, "\(name)")
            #expect(
                name.hasPrefix("org.freedesktop.Secret.Error.")
                    || name.hasPrefix("org.freedesktop.DBus.Error.")
                    || name == VaultError.Code.itemDamaged.name
                    || name.hasPrefix("io.vaultd.Secret.Error."),
                "\(name)")
        }
    }

    /// What each engine failure is sent as: by the table in docs/secret-service.md.
    static let expected: [VaultFailure.Code: BusError.Name] = [
        .interactionNotAllowed: .isLocked, .itemNotFound: .noSuchObject,
        .missingEntitlement: .noSuchObject,
        .notAvailableOnThisDevice: .noSuchObject, .itemDamaged: .itemDamaged,
        .permissionDenied: .accessDenied,
        .param: .invalidArgs, .invalidParameter: .invalidArgs, .secretTooLarge: .invalidArgs,
        .invalidValue: .invalidArgs,
        .quotaExceeded: .limitsExceeded, .storageFull: .limitsExceeded,
        .replyTooLarge: .limitsExceeded, .rateLimited: .limitsExceeded,
        .noPassphrase: .notSupported,
    ]

    @Test func everyEngineFailureHasItsName() {
        for code in VaultFailure.Code.allCases {
            let e = BusError(VaultFailure(code, "why: \(code)"))
            #expect(e.name == Self.expected[code] ?? .failed, "\(code): \(e.name)")
        }
        // Not there and not yours: one answer, word for word.
        #expect(
            BusError(VaultFailure(.itemNotFound, "no such item"))
                == BusError(
                    VaultFailure(
                        .missingEntitlement,
                        "the caller is not a member of the requested access group")))
        #expect(BusError(VaultFailure(.itemNotFound, "x")) == BusError.noSuchObject)
        // An error that is neither (a codec's) is Failed, with its message.
        struct Other: Error {}
        #expect(BusError(Other()).name == .failed)
    }
}
