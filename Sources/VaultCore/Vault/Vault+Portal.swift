import Foundation
import VaultProtocol

/// The Flatpak secret portal's backend (docs/secret-service.md#the-flatpak-secret-portal):
/// each sandboxed app's master secret, which libsecret inside a Flatpak asks for through
/// xdg-desktop-portal and uses to encrypt its own keyring file in the sandbox.
extension Vault {
    /// The service of the item holding an app's portal secret; its account is the app ID and
    /// its access group the app's own (its ID), so the secret is the app's item: it sees it,
    /// no other app does, and the first launch of a reinstall wipes it with its other
    /// credentials (a reinstalled app gets a new secret, as its old keyring is gone too).
    public static let portalService = "org.freedesktop.portal.Secret"

    /// RetrieveSecret: the master secret of `appID` (`Policy.portalSecretSize` random bytes,
    /// made and stored at the app's first request, the same bytes at every later one).
    /// `portal`: what the kernel says of the calling process, which must be the system's
    /// xdg-desktop-portal; `requester`: the app vaultd identified as the sender of the
    /// portal request. Both are decided by the policy (`Policy.decidePortalRequest`), and the
    /// item is then read and added as the requester itself (its access group, its install
    /// generation: `authorize` admits it and runs its first launch).
    /// The item is `afterFirstUnlock`: an app started while the screen is locked still gets
    /// its secret once the vault was unlocked since vaultd started; before that, the read
    /// fails with InteractionNotAllowed. Throws PermissionDenied (the policy), and what
    /// `copyMatching` and `addItem` throw.
    func portalSecret(appID: String, requester: Caller, portal: PortalPeer) throws
        -> SecureBytes
    {
        try Policy.decidePortalRequest(appID: appID, requester: requester, portal: portal)
        let attributes = ItemAttributes(
            service: Self.portalService, account: appID, accessGroup: appID)
        let query = ItemQuery(itemClass: .genericPassword, attributes: attributes)
        // SecItemCopyMatching's semantics: no match is ItemNotFound, not an empty answer.
        func storedSecret() throws -> SecureBytes? {
            do {
                return try copyMatching(query, returnData: true, caller: requester).first?.data
            } catch let e as VaultFailure where e.code == .itemNotFound {
                return nil
            }
        }
        if let found = try storedSecret() { return found }
        var stored = attributes
        stored.label = "Flatpak secret portal: \(appID)"
        stored.accessible = .afterFirstUnlock
        stored.synchronizable = false
        let secret = SecureBytes.random(count: Policy.portalSecretSize)
        do {
            _ = try addItem(.genericPassword, attributes: stored, secret: secret, caller: requester)
        } catch let e as VaultFailure where e.code == .duplicateItem {
            // Another request of the same app made it first: that one is the app's secret.
            guard let found = try storedSecret() else { throw e }
            return found
        }
        logger.notice("portal: made the master secret of app \(appID)")
        return secret
    }
}

extension VaultSession {
    /// The secret portal's RetrieveSecret (`Vault.portalSecret`), made by this session (the
    /// calling process's: the system's xdg-desktop-portal, as `portal` describes it) for
    /// `requester`, the session of the app vaultd identified as the sender of the portal
    /// request, whose item it is.
    public func portalSecret(appID: String, requester: VaultSession, portal: PortalPeer) throws
        -> SecureBytes
    {
        // The portal is a host program, so the owner's; a session of an app (a sandbox that
        // called the backend's interface itself) is refused whatever `portal` says of it.
        guard caller.isOwner else {
            throw VaultFailure(
                .permissionDenied, "only the system's xdg-desktop-portal may ask for app secrets")
        }
        return try vault.portalSecret(appID: appID, requester: requester.caller, portal: portal)
    }
}
