import Foundation
import VaultProtocol

/// A few verbs over the generic passwords of one service, in the style of Valet: each
/// account holds one secret. Every method throws only `VaultError`, with the stable codes of
/// Keychain Services (e.g. `.interactionNotAllowed` when a matching item is locked, never
/// reported as absent; `.missingEntitlement` outside the app's access groups), and
/// ConnectionFailed.
public struct CredentialStore: Sendable {
    /// The handle the items are read and written through.
    public let vault: Vault
    /// kSecAttrService of every item.
    public let service: String
    /// The access group (nil: the caller's default group, `LaunchInfo.defaultAccessGroup`).
    public let accessGroup: String?
    /// Accessibility of the items this store adds.
    public let accessibility: Accessibility

    /// A store for `service`'s items in `accessGroup` (nil: the app's default group, which
    /// vaultd named in `Hello`), added with `accessibility` (kSecAttrAccessibleWhenUnlocked by
    /// default). Every verb keeps to that one group, as Valet does: an item of the same service
    /// and account in another group the app can see is neither read, replaced nor removed
    /// (a query without kSecAttrAccessGroup would match it, as SecItem's do). Nothing is sent yet.
    public init(
        vault: Vault, service: String, accessGroup: String? = nil,
        accessibility: Accessibility = .whenUnlocked
    ) {
        self.vault = vault
        self.service = service
        self.accessGroup = accessGroup
        self.accessibility = accessibility
    }

    /// The store's items' attributes: its service, `account`, and its group (the default
    /// group when it names none; with a vaultd that does not say which that is, none).
    private func attributes(_ account: String? = nil) -> ItemAttributes {
        ItemAttributes(
            service: service, account: account,
            accessGroup: accessGroup ?? vault.launch.defaultAccessGroup)
    }

    private func call<T>(_ body: () throws -> T) throws(VaultError) -> T {
        do {
            return try body()
        } catch let e as VaultError {
            throw e
        } catch {
            throw VaultError(.internalError, "\(error)")
        }
    }

    /// Stores `data` (at most 1 MiB, else SecretTooLarge) for `account`, replacing what was
    /// there (SecItemAdd, then SecItemUpdate on DuplicateItem); the item gets this store's
    /// accessibility either way. An item of the account made on another device (a data
    /// directory moved here: NotAvailableOnThisDevice, it never opens here) is replaced, as a
    /// restored device starts its ThisDeviceOnly items afresh. Throws InteractionNotAllowed
    /// when it or the old item is locked.
    public func set(_ data: Data, for account: String) throws(VaultError) {
        try call {
            var a = attributes(account)
            a.accessible = accessibility
            do {
                try vault.keychain.add(attributes: a, data: data)
            } catch let e as VaultError where e.code == .duplicateItem {
                do {
                    try vault.keychain.update(
                        Query(.genericPassword, attributes(account)),
                        attributes: ItemAttributes(accessible: accessibility), data: data)
                } catch let e as VaultError where e.code == .notAvailableOnThisDevice {
                    try vault.keychain.delete(Query(.genericPassword, attributes(account)))
                    try vault.keychain.add(attributes: a, data: data)
                }
            }
        }
    }

    /// Stores a string (as UTF-8) for `account`.
    public func set(_ string: String, for account: String) throws(VaultError) {
        try set(Data(string.utf8), for: account)
    }

    /// The secret of `account`, or nil when there is none. Throws InteractionNotAllowed
    /// when it is locked.
    public func data(for account: String) throws(VaultError) -> Data? {
        try call {
            do {
                return try vault.keychain.copyMatching(
                    Query(.genericPassword, attributes(account)), returnData: true,
                    returnAttributes: false
                ).first?.data
            } catch let e as VaultError where e.code == .itemNotFound {
                return nil
            }
        }
    }

    /// The secret of `account` as a string, or nil when there is none (or it is not UTF-8).
    public func string(for account: String) throws(VaultError) -> String? {
        try data(for: account).flatMap { String(data: $0, encoding: .utf8) }
    }

    /// Whether `account` has a secret. Throws InteractionNotAllowed when it is locked
    /// (before the first unlock, always).
    public func contains(_ account: String) throws(VaultError) -> Bool {
        try call {
            do {
                return
                    !(try vault.keychain.copyMatching(
                        Query(.genericPassword, attributes(account)), returnAttributes: true
                    ).isEmpty)
            } catch let e as VaultError where e.code == .itemNotFound {
                return false
            }
        }
    }

    /// Removes the secret of `account` (no error when there is none). Throws
    /// InteractionNotAllowed when it is locked (nothing removed).
    public func remove(_ account: String) throws(VaultError) {
        try call {
            do {
                try vault.keychain.delete(Query(.genericPassword, attributes(account)))
            } catch let e as VaultError where e.code == .itemNotFound {}
        }
    }

    /// Removes every account of the service, or none: InteractionNotAllowed when any is locked.
    public func removeAll() throws(VaultError) {
        try call {
            do {
                try vault.keychain.delete(Query(.genericPassword, attributes()))
            } catch let e as VaultError where e.code == .itemNotFound {}
        }
    }

    /// The accounts holding a secret, sorted (Swift's String order). Throws
    /// InteractionNotAllowed when any of them is locked (never a partial list).
    public func allAccounts() throws(VaultError) -> [String] {
        try call {
            do {
                return try vault.keychain.copyMatching(
                    Query(.genericPassword, attributes(), matchAll: true)
                ).compactMap { $0.attributes?.account }.sorted()
            } catch let e as VaultError where e.code == .itemNotFound {
                return []
            }
        }
    }
}
