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

    /// SecItemCopyMatching; see `Vault.copyMatching`. A secret whose item requires user
    /// presence is released only once the user proved it (`Vault.requirePresence`).
    public func copyMatching(_ query: ItemQuery, returnData: Bool, includingLocked: Bool = false)
        throws -> [FoundItem]
    {
        try copyMatchingReportingDamage(
            query, returnData: returnData, includingLocked: includingLocked
        ).items
    }

    /// SecItemCopyMatching, with the damaged items the query met; see
    /// `Vault.copyMatchingReportingDamage`, and `copyMatching` for user presence.
    public func copyMatchingReportingDamage(
        _ query: ItemQuery, returnData: Bool, includingLocked: Bool = false
    ) throws -> ItemMatches {
        let matches = try vault.copyMatchingReportingDamage(
            query, returnData: returnData, includingLocked: includingLocked, caller: caller)
        // The secret-release point: the found secrets go out only past this check.
        try vault.requirePresence(for: matches.items, caller: caller, process: process)
        return matches
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
