extension Policy {
    /// The policy's decision for one front-end method.
    public enum MethodDecision: Sendable, Equatable {
        /// The method is this engine operation: the engine authorizes it (`Vault.authorize`).
        case operation(Operation.Kind)
        /// No decision needed: the method describes the service to anyone who may connect
        /// (org.varlink.service), and touches nothing in the vault.
        case open
        /// A call only the system's xdg-desktop-portal may make, for the app it names: decided
        /// by `Policy.decidePortalRequest` (through the engine operation, `Vault.portalSecret`).
        case desktopPortal
    }

    /// Every varlink method vaultd serves and its decision, by fully-qualified name. A front-end
    /// dispatches only a method listed here (`decision(forVarlinkMethod:)`): one declared in an
    /// interface but missing here is refused, never served unguarded; a test holds this table
    /// and the interface descriptions to each other, both ways.
    public static let varlinkMethods: [String: MethodDecision] = [
        "org.varlink.service.GetInfo": .open,
        "org.varlink.service.GetInterfaceDescription": .open,

        "io.vaultd.Vault.Hello": .operation(.hello),
        "io.vaultd.Vault.Status": .operation(.status),
        "io.vaultd.Vault.Init": .operation(.initialize),
        "io.vaultd.Vault.Unlock": .operation(.unlock),
        "io.vaultd.Vault.UnlockFromKeyring": .operation(.unlockFromKeyring),
        "io.vaultd.Vault.Lock": .operation(.lock),
        "io.vaultd.Vault.ChangePassphrase": .operation(.changePassphrase),
        "io.vaultd.Vault.Observe": .operation(.observeLockState),
        "io.vaultd.Vault.Backup": .operation(.backup),
        "io.vaultd.Vault.Restore": .operation(.restore),
        "io.vaultd.Vault.Check": .operation(.checkStore),

        "io.vaultd.Keychain.Add": .operation(.addItem),
        "io.vaultd.Keychain.CopyMatching": .operation(.copyItems),
        "io.vaultd.Keychain.Update": .operation(.updateItems),
        "io.vaultd.Keychain.Delete": .operation(.deleteItems),

        "io.vaultd.Preferences.Get": .operation(.readPreferences),
        "io.vaultd.Preferences.Set": .operation(.writePreferences),
        "io.vaultd.Preferences.Remove": .operation(.writePreferences),
        "io.vaultd.Preferences.Domain": .operation(.readPreferences),
        "io.vaultd.Preferences.Domains": .operation(.listDomains),
        "io.vaultd.Preferences.Import": .operation(.writePreferences),
        "io.vaultd.Preferences.Export": .operation(.readPreferences),
        "io.vaultd.Preferences.RemoveDomain": .operation(.writePreferences),
        "io.vaultd.Preferences.Observe": .operation(.observePreferences),

        "io.vaultd.Caches.Directory": .operation(.cacheDirectory),
        "io.vaultd.Caches.Usage": .operation(.cacheUsage),
        "io.vaultd.Caches.Purge": .operation(.purgeCaches),
        "io.vaultd.Caches.Observe": .operation(.observeCachePurges),

        "io.vaultd.Apps.Install": .operation(.installApp),
        "io.vaultd.Apps.Uninstall": .operation(.uninstallApp),
        "io.vaultd.Apps.List": .operation(.listApps),
        "io.vaultd.Apps.Show": .operation(.showApp),

        "io.vaultd.Sync.Init": .operation(.syncInit),
        "io.vaultd.Sync.Join": .operation(.syncJoin),
        "io.vaultd.Sync.Approve": .operation(.syncApprove),
        "io.vaultd.Sync.Status": .operation(.syncStatus),
        "io.vaultd.Sync.Leave": .operation(.syncLeave),
        "io.vaultd.Sync.Remove": .operation(.syncRemove),
    ]

    /// The decision for `method`, nil when the policy has none (the front-end refuses it).
    public static func decision(forVarlinkMethod method: String) -> MethodDecision? {
        varlinkMethods[method]
    }
}

extension Policy {
    /// Every Secret Service (D-Bus) method vaultd serves and its decision, by interface and
    /// member ("org.freedesktop.Secret.Item.GetSecret"); properties as "<interface>.Get" (a
    /// read of any property) and "<interface>.Set". As with `varlinkMethods`, the front-end
    /// dispatches only what is listed here, and the engine operation it calls authorizes.
    /// `.open` methods touch nothing in the vault: a transport session, a prompt's own state.
    public static let secretServiceMethods: [String: MethodDecision] = [
        "org.freedesktop.Secret.Service.OpenSession": .open,
        "org.freedesktop.Secret.Service.CreateCollection": .operation(.useAccessGroup),
        "org.freedesktop.Secret.Service.SearchItems": .operation(.copyItems),
        "org.freedesktop.Secret.Service.Unlock": .operation(.requestUnlock),
        "org.freedesktop.Secret.Service.Lock": .operation(.lock),
        "org.freedesktop.Secret.Service.GetSecrets": .operation(.copyItems),
        "org.freedesktop.Secret.Service.ReadAlias": .operation(.useAccessGroup),
        "org.freedesktop.Secret.Service.SetAlias": .operation(.setAlias),
        "org.freedesktop.Secret.Service.Get": .operation(.listAccessGroups),
        "org.freedesktop.Secret.Collection.Delete": .operation(.deleteItems),
        "org.freedesktop.Secret.Collection.SearchItems": .operation(.copyItems),
        "org.freedesktop.Secret.Collection.CreateItem": .operation(.addItem),
        "org.freedesktop.Secret.Collection.Get": .operation(.copyItems),
        "org.freedesktop.Secret.Collection.Set": .operation(.useAccessGroup),
        "org.freedesktop.Secret.Item.Delete": .operation(.deleteItems),
        "org.freedesktop.Secret.Item.GetSecret": .operation(.copyItems),
        "org.freedesktop.Secret.Item.SetSecret": .operation(.updateItems),
        "org.freedesktop.Secret.Item.Get": .operation(.copyItems),
        "org.freedesktop.Secret.Item.Set": .operation(.updateItems),
        "org.freedesktop.Secret.Session.Close": .open,
        "org.freedesktop.Secret.Prompt.Prompt": .operation(.requestUnlock),
        "org.freedesktop.Secret.Prompt.Dismiss": .open,
        "io.vaultd.Secret.Prompting.RegisterPrompter": .operation(.registerPrompter),
        "io.vaultd.Secret.Prompting.UnregisterPrompter": .operation(.registerPrompter),
    ]

    /// The decision for Secret Service `member` of `interface`, nil when the policy has none.
    public static func decision(forSecretService interface: String, _ member: String)
        -> MethodDecision?
    {
        secretServiceMethods[interface + "." + member]
    }
}

extension Policy {
    /// The Flatpak portal backends vaultd serves (on its Secret Service connection, at
    /// `/org/freedesktop/portal/desktop`) and their decisions, by interface and member; the
    /// front-end dispatches only what is listed here. Properties (the interface's `version`)
    /// are `.open`: they describe the interface and touch nothing in the vault.
    public static let portalMethods: [String: MethodDecision] = [
        "org.freedesktop.impl.portal.Secret.RetrieveSecret": .desktopPortal,
        "org.freedesktop.impl.portal.Secret.Get": .open,
    ]

    /// The decision for portal backend `member` of `interface`, nil when the policy has none.
    public static func decision(forPortal interface: String, _ member: String) -> MethodDecision? {
        portalMethods[interface + "." + member]
    }
}
