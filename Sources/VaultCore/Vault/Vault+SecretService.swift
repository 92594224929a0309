import Foundation
import VaultProtocol

/// What the Secret Service front-end needs beyond the SecItem operations: its collections
/// are access groups, and its items are generic passwords of one service
/// (`secretServiceService`) with lookup attributes. Every operation is authorized here, as
/// every other engine operation is; the front-end decides nothing.
extension Vault {
    /// The `service` of every item made through the Secret Service (its `account` is the
    /// item's own ID, its lookup attributes what the client gave).
    public static let secretServiceService = "org.freedesktop.secrets"

    /// The access groups `caller` sees as collections (`Policy.visibleAccessGroups`): the
    /// owner its default group and every group holding items; an app its own groups.
    public func accessGroups(caller: Caller) throws -> [String] {
        _ = try authorize(.listAccessGroups, for: caller)
        let stored: [String] =
            caller.isOwner
            ? try reading { db in try db.rows("SELECT DISTINCT access_group FROM items ORDER BY access_group").compactMap { $0[0].text } }
            : []
        return Policy.visibleAccessGroups(stored: stored, to: caller)
    }

    /// A collection used as such (CreateCollection, its label, its lock state): the group it
    /// is, once the policy grants it (an app only one of its own groups: MissingEntitlement).
    /// Nothing is stored: a group exists while it holds items, and an app's groups always.
    public func accessGroup(_ group: String, caller: Caller) throws -> String {
        guard !group.isEmpty else { throw VaultError.param("the access group must not be empty") }
        return try authorize(.useAccessGroup(accessGroup: group), for: caller).accessGroup!
    }

    /// Unlock: whether the vault's keychain is open now (an unlocked vault, or one without a
    /// passphrase). It unlocks nothing: only the owner's unlock (a passphrase) does.
    public func requestUnlock(caller: Caller) throws -> Bool {
        _ = try authorize(.requestUnlock, for: caller)
        return isKeychainOpen
    }

    /// Whether items of the default accessibility (`whenUnlocked`) can be read now.
    public var isKeychainOpen: Bool { withKeys { (try? keys.classKey(.whenUnlocked)) != nil } }

    /// SetAlias: only the owner may point an alias (`default`, `login`) at a collection.
    public func setAlias(caller: Caller) throws {
        _ = try authorize(.setAlias, for: caller)
    }
}
