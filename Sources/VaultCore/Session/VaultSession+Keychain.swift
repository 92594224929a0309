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

    /// SecItemCopyMatching; see `Vault.copyMatching`, and `copyMatchingReportingDamage` for
    /// what a secret passes before it is released.
    public func copyMatching(
        _ query: ItemQuery, returnData: Bool, includingLocked: Bool = false
    ) throws -> [FoundItem] {
        try copyMatchingReportingDamage(
            query, returnData: returnData, includingLocked: includingLocked
        ).items
    }

    /// SecItemCopyMatching, with the damaged items the query met; see
    /// `Vault.copyMatchingReportingDamage`; below, what a secret passes before it is released.
    public func copyMatchingReportingDamage(
        _ query: ItemQuery, returnData: Bool, includingLocked: Bool = false
    ) throws -> ItemMatches {
        // The secret-release point. First the per-program access decision (`Vault.
        // releaseSecrets`, inside the lookup), then user presence (`Vault.requirePresence`):
        // a program the policy refuses gets no polkit prompt the user would answer for
        // nothing, and a confirmation and a presence check both run on the thread `interaction`
        // allows (the Secret Service's worker: the one it reruns the call on, after
        // `AccessConfirmationNeeded` or `PresenceWouldWait`).
        let matches = try vault.copyMatchingReportingDamage(
            query, returnData: returnData, includingLocked: includingLocked,
            interaction: interaction, caller: caller)
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
