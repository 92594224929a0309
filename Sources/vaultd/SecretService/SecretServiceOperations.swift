import VaultCore

/// Every Secret Service (D-Bus) method vaultd serves and the engine operation it is, by
/// interface and member ("org.freedesktop.Secret.Item.GetSecret"); properties as
/// "<interface>.Get" (a read of any property) and "<interface>.Set". As with
/// `VarlinkOperations`, the front-end dispatches only what is listed here, and the engine
/// operation it calls authorizes. `.open` methods touch nothing in the vault: a transport
/// session, a prompt's own state.
package enum SecretServiceOperations {
    package static let byMember: [String: MethodOperation] = [
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

    /// The operation `member` of `interface` is, nil when it has none (refused).
    package static func of(_ interface: String, _ member: String) -> MethodOperation? {
        byMember[interface + "." + member]
    }
}
