import VaultCore
import VaultProtocol

/// The Secret Service's signals for changes of stored items, from the engine's
/// `VaultEvent.itemsChanged`: a change made on the bus and one made through the socket
/// (`vaultctl item`, an app's `VaultClient`, `vaultctl keyring import`) are signalled alike, to
/// every connection that may see the collection (`notify`). The in-memory session collection
/// is no store's: its changes, only ever made on the bus, are signalled by the methods that
/// make them (`notifySession`).
extension SecretService {

    /// Signals the changes of Secret Service items (generic passwords of
    /// `Vault.secretServiceService`, and damaged generic passwords, which may be ones) among
    /// `changes`, one `notify` per access group. Runs on the writer's thread, after the commit;
    /// the signals go out from the bus thread's next iteration (after a bus call's reply).
    func itemsChanged(_ changes: [ItemChange]) {
        var byGroup: [(group: String, created: [String], deleted: [String], changed: [String])] =
            []
        for c in changes where c.itemClass == .genericPassword {
            // An access group named `session` is hidden by the session collection.
            guard !Self.isSession(c.accessGroup) else { continue }
            let path: String
            if c.damaged {
                path = SecretServicePath.damaged(collection: c.accessGroup, row: c.row).path
            } else {
                guard let s = c.service, s.sameBytes(Vault.secretServiceService),
                    let account = c.account
                else { continue }
                path = itemPath(c.accessGroup, account)
            }
            var i = byGroup.firstIndex { $0.group.sameBytes(c.accessGroup) }
            if i == nil {
                byGroup.append((c.accessGroup, [], [], []))
                i = byGroup.count - 1
            }
            switch c.kind {
            case .created: byGroup[i!].created.append(path)
            case .deleted: byGroup[i!].deleted.append(path)
            case .changed: byGroup[i!].changed.append(path)
            }
        }
        for g in byGroup {
            notify(
                .items(
                    collection: g.group, group: g.group, created: g.created, deleted: g.deleted,
                    changed: g.changed))
        }
    }

    /// Signals a change of the session collection's items made on the bus (a stored item's
    /// comes from the engine's event: `itemsChanged`); nothing for another collection.
    func notifySession(
        _ collection: String, created: [String] = [], deleted: [String] = [],
        changed: [String] = [], vaultSession: VaultSession
    ) {
        guard Self.isSession(collection) else { return }
        notify(
            .items(
                collection: collection, group: vaultSession.defaultAccessGroup, created: created,
                deleted: deleted, changed: changed))
    }
}
