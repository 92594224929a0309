import VaultProtocol

extension Policy {
    /// What a sandbox that says it is the Flatpak app `id` is taken for.
    enum FlatpakClaim {
        /// The installed Flatpak app of that ID.
        case installed(AppRecord)
        /// An app to register now, on first contact (or again, after its uninstall).
        case register
    }

    /// Decides a sandbox's claim to be the Flatpak app `id`, against every app `registered`
    /// (call it under the registration lock, so that look and registration are one step).
    /// A sandbox writes its own .flatpak-info: the name it gives must not be a group it would
    /// then be in, an app group (`group.*`) or another app's access group, installed or not,
    /// registered before this contact or since; nor an app registered by its executable.
    /// Throws PermissionDenied for those; RateLimited for a new name when `limit` Flatpak
    /// apps are registered already.
    static func flatpakClaim(
        _ id: String, registered: [AppRecord], maximumAutoRegistered limit: Int
    ) throws -> FlatpakClaim {
        if id.hasPrefix("group.") {
            throw VaultFailure(
                .permissionDenied,
                "a sandbox names \(id), which names an app group (group.*), not an app")
        }
        if let other = registered.first(where: {
            $0.appID != id && $0.keychainAccessGroups.containsBytes(id)
        }) {
            throw VaultFailure(
                .permissionDenied, "a sandbox names \(id), an access group of \(other.appID)")
        }
        if let a = registered.first(where: { $0.appID.sameBytes(id) }) {
            // Installed or not: an uninstalled app's ID taken over by a sandbox would
            // wipe the credentials that app kept for its reinstall.
            guard a.flatpak else {
                throw VaultFailure(
                    .permissionDenied, "a sandbox names \(id), an app registered by its executable")
            }
            if a.installed { return .installed(a) }
        } else if registered.count(where: \.flatpak) >= limit {
            // A name not seen before adds a record for good: bounded, so a sandbox that
            // renames itself on every connection cannot grow the registry.
            // retryAfter 0, as the error's declaration requires one: no wait frees a place
            // (the owner uninstalls apps or raises the limit).
            throw VaultFailure(
                .rateLimited,
                "a sandbox names \(id), a Flatpak app vaultd has not seen, and \(limit) Flatpak apps are registered already, the most registered on first contact (MaximumAutoRegisteredApps in config.plist)",
                .init(retryAfter: 0))
        }
        return .register
    }
}
