import Foundation
import VaultProtocol

/// What the Secret Service front-end does beyond the SecItem operations, as the session's
/// caller may (see Vault+SecretService.swift: collections are access groups).
extension VaultSession {
    /// The access groups the caller sees as collections; see `Vault.accessGroups`.
    public func accessGroups() throws -> [String] { try vault.accessGroups(caller: caller) }

    /// A collection used as such; see `Vault.accessGroup`.
    public func accessGroup(_ group: String) throws -> String {
        try vault.accessGroup(group, caller: caller)
    }

    /// See `Vault.collectionLabel`.
    public func collectionLabel(_ group: String) throws -> String {
        try vault.collectionLabel(group, caller: caller)
    }

    /// See `Vault.setCollectionLabel`.
    @discardableResult
    public func setCollectionLabel(_ group: String, to label: String) throws -> Bool {
        try vault.setCollectionLabel(group, to: label, caller: caller)
    }

    /// See `Vault.removeCollectionLabel`.
    public func removeCollectionLabel(_ group: String) throws {
        try vault.removeCollectionLabel(group, caller: caller)
    }

    /// See `Vault.requestUnlock`.
    public func requestUnlock() throws -> Bool { try vault.requestUnlock(caller: caller) }

    /// See `Vault.registerPrompter`.
    public func registerPrompter() throws { try vault.registerPrompter(caller: caller) }

    /// See `Vault.setAlias`.
    public func setAlias() throws { try vault.setAlias(caller: caller) }

    /// See `Vault.damagedSecretServiceItem`.
    public func damagedSecretServiceItem(_ id: Int64, accessGroup group: String) throws
        -> DamagedItem?
    {
        try vault.damagedSecretServiceItem(id, accessGroup: group, caller: caller)
    }

    /// See `Vault.deleteDamagedSecretServiceItem`.
    public func deleteDamagedSecretServiceItem(_ id: Int64, accessGroup group: String) throws
        -> DamagedItem
    {
        try vault.deleteDamagedSecretServiceItem(id, accessGroup: group, caller: caller)
    }

    /// The session collection's items; see `Vault.sessionItems`.
    public func sessionItems(
        matching attributes: ExactDictionary<String>, id: String? = nil, secrets: Bool
    ) throws -> [FoundItem] {
        try vault.sessionItems(
            matching: attributes, id: id, secrets: secrets, interaction: interaction,
            caller: caller)
    }

    /// See `Vault.addSessionItem`.
    public func addSessionItem(
        label: String, attributes: ExactDictionary<String>, secret: SecureBytes,
        contentType: String? = nil, replace: Bool
    ) throws -> String {
        try vault.addSessionItem(
            label: label, attributes: attributes, secret: secret, contentType: contentType,
            replace: replace, caller: caller)
    }

    /// See `Vault.updateSessionItem`.
    public func updateSessionItem(
        _ id: String, label: String? = nil, attributes: ExactDictionary<String>? = nil,
        secret: SecureBytes? = nil, contentType: String? = nil
    ) throws {
        try vault.updateSessionItem(
            id, label: label, attributes: attributes, secret: secret, contentType: contentType,
            caller: caller)
    }

    /// See `Vault.deleteSessionItems`.
    public func deleteSessionItems(_ id: String?) throws -> Int {
        try vault.deleteSessionItems(id, caller: caller)
    }
}
