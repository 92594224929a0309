import Foundation
import VaultCore
import VaultProtocol

/// A D-Bus error reply: its name, one of `Name` (the only names the front-end sends), and a
/// message for people. Every reply goes out through `g_dbus_method_invocation_return_dbus_error`
/// or a message of its own (`InlineReads`) with that name, property calls included
/// (`SecretService.propertyCall`): never as a GError GDBus would have to name itself.
struct BusError: Error, Equatable {
    /// Every error name the Secret Service front-end sends: the specification's own
    /// (org.freedesktop.Secret.Error.*), the bus's standard ones (org.freedesktop.DBus.Error.*),
    /// and vaultd's ItemDamaged, the name the socket gives a damaged item too.
    enum Name: String, CaseIterable {
        case noSuchObject = "org.freedesktop.Secret.Error.NoSuchObject"
        case noSession = "org.freedesktop.Secret.Error.NoSession"
        case isLocked = "org.freedesktop.Secret.Error.IsLocked"
        case invalidArgs = "org.freedesktop.DBus.Error.InvalidArgs"
        case accessDenied = "org.freedesktop.DBus.Error.AccessDenied"
        case notSupported = "org.freedesktop.DBus.Error.NotSupported"
        case limitsExceeded = "org.freedesktop.DBus.Error.LimitsExceeded"
        case unknownMethod = "org.freedesktop.DBus.Error.UnknownMethod"
        case unknownProperty = "org.freedesktop.DBus.Error.UnknownProperty"
        case propertyReadOnly = "org.freedesktop.DBus.Error.PropertyReadOnly"
        case failed = "org.freedesktop.DBus.Error.Failed"
        case itemDamaged = "io.vaultd.Keychain.ItemDamaged"
        /// A secret the per-program access check refused: denied by the user, recently
        /// denied, strict, or a program that could pass for another (docs/access.md).
        case accessRefused = "io.vaultd.Secret.Error.AccessRefused"
        /// A secret that needs the user's confirmation, and none came: no prompter, dismissed,
        /// timed out, or a question for the program already pending.
        case notConfirmed = "io.vaultd.Secret.Error.NotConfirmed"
    }

    var name: Name
    var message: String

    init(_ name: Name, _ message: String) {
        self.name = name
        self.message = message
    }

    /// The one answer for an object the caller may not see, whether it does not exist or is
    /// another app's: the same name and the same words, so no reply tells the two apart.
    static let noSuchObject = BusError(
        .noSuchObject, "no such object, or not one this program may use")
    static func invalidArgs(_ m: String) -> BusError { BusError(.invalidArgs, m) }
    static func noSession(_ m: String) -> BusError { BusError(.noSession, m) }
    static func accessDenied(_ m: String) -> BusError { BusError(.accessDenied, m) }
    static func notSupported(_ m: String) -> BusError { BusError(.notSupported, m) }
    static func limitsExceeded(_ m: String) -> BusError { BusError(.limitsExceeded, m) }
    static func unknownProperty(_ name: String) -> BusError {
        BusError(.unknownProperty, "no property \(name) here")
    }
    static func propertyReadOnly(_ name: String) -> BusError {
        BusError(.propertyReadOnly, "\(name) cannot be set")
    }
    /// A session or prompt of another connection, or one that ended: these belong to a
    /// connection, not to an access group, so saying which is no oracle.
    static func noSuchObject(_ m: String) -> BusError { BusError(.noSuchObject, m) }
}

extension BusError {

    /// The reply for an engine error. A group or item the caller may not use is NoSuchObject,
    /// as one that does not exist, with the same message (`noSuchObject`): a client learns
    /// nothing of other apps' collections.
    init(_ e: VaultFailure) {
        if e.details.program != nil {
            self.init(e.code == .authFailed ? .accessRefused : .notConfirmed, e.message)
            return
        }
        switch e.code {
        case .interactionNotAllowed: self.init(.isLocked, e.message)
        case .itemNotFound, .missingEntitlement, .notAvailableOnThisDevice: self = .noSuchObject
        // vaultd's own name, as on the socket: the item is there but does not read.
        case .itemDamaged: self.init(.itemDamaged, e.message)
        case .permissionDenied: self.init(.accessDenied, e.message)
        case .param, .invalidParameter, .secretTooLarge, .invalidValue:
            self.init(.invalidArgs, e.message)
        case .quotaExceeded, .storageFull, .replyTooLarge, .rateLimited:
            self.init(.limitsExceeded, e.message)
        case .noPassphrase: self.init(.notSupported, e.message)
        default: self.init(.failed, e.message)
        }
    }

    init(_ error: Error) {
        if let b = error as? BusError {
            self = b
        } else if let f = error as? VaultFailure {
            self.init(f)
        } else {
            // A shared codec's error (VaultProtocol's, a LocalizedError) by its message.
            self.init(.failed, (error as? LocalizedError)?.errorDescription ?? "\(error)")
        }
    }
}
