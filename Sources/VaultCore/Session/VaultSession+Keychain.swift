import Foundation
import VaultProtocol

/// Keychain items (SecItem*), as the session's caller may use them.
extension VaultSession {
    /// SecItemAdd; see `Vault.addItem`.
    public func addItem(_ itemClass: ItemClass, attributes: ItemAttributes, secret: SecureBytes)
        throws -> ItemAttributes
    {
        try vault.addItem(itemClass, attributes: attributes, secret: secret, caller: caller)
    }

    /// SecItemCopyMatching; see `Vault.copyMatching`.
    public func copyMatching(
        _ query: ItemQuery, returnData: Bool, includingLocked: Bool = false
    ) throws -> [FoundItem] {
        try vault.copyMatching(
            query, returnData: returnData, includingLocked: includingLocked,
            interaction: interaction, caller: caller)
    }

    /// SecItemCopyMatching, with the damaged items the query met; see
    /// `Vault.copyMatchingReportingDamage`.
    public func copyMatchingReportingDamage(
        _ query: ItemQuery, returnData: Bool, includingLocked: Bool = false
    ) throws -> ItemMatches {
        try vault.copyMatchingReportingDamage(
            query, returnData: returnData, includingLocked: includingLocked,
            interaction: interaction, caller: caller)
    }

    /// SecItemUpdate; see `Vault.updateItems`.
    public func updateItems(_ query: ItemQuery, changes: ItemAttributes, secret: SecureBytes?)
        throws -> Int
    {
        try vault.updateItems(query, changes: changes, secret: secret, caller: caller)
    }

    /// SecItemDelete; see `Vault.deleteItems`.
    public func deleteItems(_ query: ItemQuery) throws -> Int {
        try vault.deleteItems(query, caller: caller)
    }
}
