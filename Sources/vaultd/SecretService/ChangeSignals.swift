import CGio
import Foundation
import VaultCore
import VaultProtocol

/// The signals that tell connections of changes (docs/secret-service.md, "Signals").
extension SecretService {

    /// A change the connections that see it are told of (`notify`).
    enum Change {
        /// Items of `collection` (an access group, or the session collection) were made,
        /// deleted or changed (their secret, label or attributes). `group` is the access
        /// group whose visibility decides who is told: the collection's own, or for the
        /// session collection the default group of the caller whose items they are.
        case items(
            collection: String, group: String, created: [String] = [], deleted: [String] = [],
            changed: [String] = [])
        /// A collection's label was set.
        case label(group: String)
        /// The vault was locked or unlocked.
        case lockState
    }

    /// Tells each identified connection that may see it of `change`, as gnome-keyring does:
    /// the specification's signals (ItemCreated, ItemDeleted, ItemChanged from the collection
    /// and, for a connection's default group, from its aliases; CollectionCreated,
    /// CollectionDeleted, CollectionChanged from the service) and PropertiesChanged with the
    /// new value of every property that changed (the collection's Items, Created and
    /// Modified; the item's properties; the service's Collections; Locked of each collection
    /// and item), never a property invalidated without its value: libsecret reads its cached
    /// value at the next signal, and finds none. Who sees what is the policy's
    /// (`Policy.seesItem`, and the engine's answers to each connection's `Caller`); nothing
    /// is broadcast. Sent from the bus thread's next iteration, after the current call's reply.
    /// A change made by a write answered off the bus thread is held until that write's
    /// reply is sent (`HeldChanges`, `answerWrite`), so that its signals follow the reply there
    /// too.
    func notify(_ change: Change) {
        if let held = HeldChanges.current {
            held.changes.append(change)
            return
        }
        onBusThread { [self] in send(change) }
    }

    /// Values computed once per `Caller` while one change is sent (connections of one app,
    /// or of the owner, see the same).
    final class PerSession<Value> {
        private var entries: [(VaultSession, Value?)] = []
        func value(for vaultSession: VaultSession, _ make: () throws -> Value) -> Value? {
            if let e = entries.first(where: { $0.0 == vaultSession }) { return e.1 }
            let v = try? make()
            entries.append((vaultSession, v))
            return v
        }
    }

    func send(_ change: Change) {
        switch change {
        case .items(let collection, let group, let created, let deleted, let changed):
            sendItems(
                collection, group: group, created: created, deleted: deleted, changed: changed)
        case .label(let group): sendLabel(group)
        case .lockState: sendLockState()
        }
    }

    /// The identified connections that may see items of access group `group`.
    private func peersSeeing(_ group: String) -> [(String, BusPeer)] {
        lock.withLock {
            peers.filter { $0.value.vaultSession.sees(itemInAccessGroup: group) }.map {
                ($0.key, $0.value)
            }
        }
    }

    /// `Change.items`: the item signals from the collection (and its aliases), the
    /// changed items' properties, and the service's Collections where they changed.
    private func sendItems(
        _ collection: String, group: String, created: [String], deleted: [String],
        changed: [String]
    ) {
        let targets = peersSeeing(group)
        let collectionsSeen = PerSession<[String]>()
        let itemValues = PerSession<[String: [(String, GV)]]>()
        // The collection's Items, Created and Modified go to its readers at the end of the
        // window (`itemsValuesDue`): libsecret follows Items from ItemCreated and
        // ItemDeleted themselves, and each PropertiesChanged of Items carries the whole
        // list, which towards connections that do not read piles up in the bus daemon.
        itemsValuesDue(collection, group: group)
        for (sender, peer) in targets {
            if !Self.isSession(collection) && !(created.isEmpty && deleted.isEmpty) {
                collectionsChanged(sender, peer, collectionsSeen, about: collection)
            }
            for path in collectionPaths(collection, for: peer.vaultSession) {
                for item in created {
                    tell(
                        sender, peer, about: collection, path: path,
                        SecretServiceIntrospection.collection, "ItemCreated", [.objectPath(item)])
                }
                for item in deleted {
                    tell(
                        sender, peer, about: collection, path: path,
                        SecretServiceIntrospection.collection, "ItemDeleted", [.objectPath(item)])
                }
                for item in changed {
                    tell(
                        sender, peer, about: collection, path: path,
                        SecretServiceIntrospection.collection, "ItemChanged", [.objectPath(item)])
                }
            }
            let items = itemValues.value(for: peer.vaultSession) {
                var out: [String: [(String, GV)]] = [:]
                for item in changed {
                    guard let target = SecretServicePath(item) else { continue }
                    out[item] = try readableProperties(of: SecretServiceIntrospection.item).map {
                        ($0, try property($0, of: target, vaultSession: peer.vaultSession))
                    }
                }
                return out
            }
            for (item, values) in items ?? [:] {
                propertiesChanged(
                    to: sender, peer, about: collection, path: item,
                    SecretServiceIntrospection.item, values)
            }
        }
    }

    /// `Change.label`: the collection's new Label, and CollectionChanged.
    private func sendLabel(_ group: String) {
        let targets = peersSeeing(group)
        let labels = PerSession<GV>()
        for (sender, peer) in targets {
            guard
                let label = labels.value(
                    for: peer.vaultSession,
                    {
                        try property(
                            "Label", of: .collection(group), vaultSession: peer.vaultSession)
                    })
            else { continue }
            for path in collectionPaths(group, for: peer.vaultSession) {
                propertiesChanged(
                    to: sender, peer, about: group, path: path,
                    SecretServiceIntrospection.collection, [("Label", label)])
            }
            tell(
                sender, peer, about: group, path: SecretServicePath.root,
                SecretServiceIntrospection.service, "CollectionChanged",
                [.objectPath(collectionPath(group))])
        }
    }

    /// `Change.lockState`: Locked (and Label, and to readers Items) of every collection a
    /// connection sees, Locked of each of their items, and CollectionChanged.
    private func sendLockState() {
        let targets = lock.withLock { peers.map { ($0.key, $0.value) } }
        let collectionsSeen = PerSession<[String]>()
        let locked = GV.bool(!vault.isKeychainOpen)
        let items = PerSession<[String: [(String, Bool)]]>()
        let labels = PerSession<[String: GV]>()
        for (sender, peer) in targets {
            guard
                let collections = collectionsSeen.value(
                    for: peer.vaultSession,
                    { try visibleCollections(vaultSession: peer.vaultSession) })
            else { continue }
            let seen = items.value(for: peer.vaultSession) {
                var out: [String: [(String, Bool)]] = [:]
                for c in collections {
                    out[c] = try find(Self.query(group: c), vaultSession: peer.vaultSession).map {
                        (path(of: $0), $0.isLocked)
                    }
                }
                return out
            }
            // Each collection's Label: locked since vaultd started, a set label was given
            // as the group's name (`Vault.collectionLabel`).
            let label = labels.value(for: peer.vaultSession) {
                var out: [String: GV] = [:]
                for c in collections {
                    out[c] = try? property(
                        "Label", of: .collection(c), vaultSession: peer.vaultSession)
                }
                return out
            }
            for c in collections {
                let itemsLocked = (seen?[c] ?? []).map { ($0.0, [("Locked", GV.bool($0.1))]) }
                sendState(
                    of: c, to: sender, peer, locked: locked, label: label?[c], items: itemsLocked)
            }
        }
    }

    /// Tells `sender` the state of collection `c` (as a change of the lock state does): its
    /// Locked and `label` and, to a reader of its Items (whose Items were given as none while
    /// the vault stayed locked since vaultd started: `collectionValues`), Items, Created and
    /// Modified, at each of its paths; `items`' properties; then CollectionChanged. `always`:
    /// whatever the connection's budget (`tell`).
    func sendState(
        of c: String, to sender: String, _ peer: BusPeer, locked: GV, label: GV?,
        items: [(String, [(String, GV)])], always: Bool = false
    ) {
        guard always || !isBehind(peer, missing: c) else { return }
        let reader = lock.withLock { peer.readsAllItems || peer.itemsRead.containsBytes(c) }
        let values =
            reader ? ((try? collectionValues(c, vaultSession: peer.vaultSession)) ?? []) : []
        let named = label.map { [("Label", $0)] } ?? []
        for path in collectionPaths(c, for: peer.vaultSession) {
            propertiesChanged(
                to: sender, peer, about: c, path: path, SecretServiceIntrospection.collection,
                [("Locked", locked)] + named + values, always: always)
        }
        for (item, itemValues) in items {
            propertiesChanged(
                to: sender, peer, about: c, path: item, SecretServiceIntrospection.item,
                itemValues, always: always)
        }
        tell(
            sender, peer, about: c, path: SecretServicePath.root,
            SecretServiceIntrospection.service, "CollectionChanged",
            [.objectPath(collectionPath(c))], always: always)
    }

    /// How long a changed collection's new Items wait for more changes before its readers
    /// are sent them (seconds), at least: the changes within one window share one
    /// PropertiesChanged, with the value at its end. Each carries the whole list, to every
    /// reader, and towards connections that never read the bus daemon keeps them all (200
    /// such connections and 300 CreateItem grew it by 240 MB to 850 MB when each change sent
    /// its own); so a window also lasts as long as the last one's signals take at
    /// `itemsBytesPerSecond`.
    static let itemsWindow = 0.2
    static let itemsBytesPerSecond = 1 << 20

    /// Schedules the PropertiesChanged of collection `collection`'s Items, Created and
    /// Modified to its readers (`group`: whose visibility decides who they are) at the end
    /// of the current window.
    func itemsValuesDue(_ collection: String, group: String) {
        let schedule: Bool = lock.withLock {
            if !itemsDue.contains(where: {
                $0.collection.sameBytes(collection) && $0.group.sameBytes(group)
            }) {
                itemsDue.append((collection, group))
            }
            defer { itemsWindowScheduled = true }
            return !itemsWindowScheduled
        }
        guard schedule else { return }
        let window = lock.withLock { itemsNextWindow }
        DispatchQueue.global().asyncAfter(deadline: .now() + window) { [weak self] in
            self?.onBusThread { self?.sendItemsValues() }
        }
    }

    /// The end of a window: each collection changed in it, to each connection that reads its
    /// Items and may see it, with the values of now.
    private func sendItemsValues() {
        let due = lock.withLock {
            defer {
                itemsDue = []
                itemsWindowScheduled = false
            }
            return itemsDue
        }
        var bytes = 0
        defer {
            let next = max(Self.itemsWindow, Double(bytes) / Double(Self.itemsBytesPerSecond))
            lock.withLock { itemsNextWindow = next }
        }
        for (collection, group) in due {
            let readers = lock.withLock {
                peers.filter {
                    $0.value.vaultSession.sees(itemInAccessGroup: group)
                        && ($0.value.readsAllItems || $0.value.itemsRead.containsBytes(collection))
                }.map { ($0.key, $0.value) }
            }
            let views = PerSession<[(String, GV)]>()
            for (sender, peer) in readers {
                guard
                    let values = views.value(
                        for: peer.vaultSession,
                        { try collectionValues(collection, vaultSession: peer.vaultSession) })
                else { continue }
                for path in collectionPaths(collection, for: peer.vaultSession) {
                    propertiesChanged(
                        to: sender, peer, about: collection, path: path,
                        SecretServiceIntrospection.collection, values)
                    bytes += Self.signalBytes(values)
                }
            }
        }
    }

    /// About what a PropertiesChanged with `values` takes on the bus: each item path of
    /// `Items` (with its length and padding) and the rest of the message.
    static func signalBytes(_ values: [(String, GV)]) -> Int {
        let items = values.first { $0.0 == "Items" }?.1.children ?? []
        return items.reduce(256) { $0 + $1.string.utf8.count + 8 }
    }

    /// The paths a connection of `caller` knows collection `collection` by: its own, and the
    /// aliases when it is that caller's default group.
    func collectionPaths(_ collection: String, for vaultSession: VaultSession) -> [String] {
        var paths = [collectionPath(collection)]
        if !Self.isSession(collection) && vaultSession.isDefault(accessGroup: collection) {
            paths += SecretServicePath.aliases.map { SecretServicePath.alias($0).path }
        }
        return paths
    }

    /// The service's Collections as `sender` sees them now; when they differ from what it
    /// was last given (its read of the property, or an earlier signal), CollectionCreated and
    /// CollectionDeleted for each difference, then PropertiesChanged with the new value.
    /// While the connection is behind (`tell`), nothing, and `collection` is recorded as
    /// missed: what it was last given stays, to compare with once it catches up.
    func collectionsChanged(
        _ sender: String, _ peer: BusPeer, _ seen: PerSession<[String]>, about collection: String,
        always: Bool = false
    ) {
        // Nothing to compare with (it never read them): it is told nothing.
        guard lock.withLock({ peer.collections != nil }) else { return }
        guard always || !isBehind(peer, missing: collection) else { return }
        guard
            let now = seen.value(
                for: peer.vaultSession, { try visibleCollections(vaultSession: peer.vaultSession) })
        else { return }
        let before: [String]? = lock.withLock {
            defer { peer.collections = now }
            return peer.collections
        }
        guard let before, !before.elementsEqual(now, by: { $0.sameBytes($1) }) else { return }
        for g in now where !before.containsBytes(g) {
            tell(
                sender, peer, about: collection, path: SecretServicePath.root,
                SecretServiceIntrospection.service, "CollectionCreated",
                [.objectPath(collectionPath(g))],
                always: always)
        }
        for g in before where !now.containsBytes(g) {
            tell(
                sender, peer, about: collection, path: SecretServicePath.root,
                SecretServiceIntrospection.service, "CollectionDeleted",
                [.objectPath(collectionPath(g))],
                always: always)
        }
        propertiesChanged(
            to: sender, peer, about: collection, path: SecretServicePath.root,
            SecretServiceIntrospection.service,
            [("Collections", .objectPaths(now.map(collectionPath)))], always: always)
    }

    /// Records that `sender` read the Items of `group`'s collection (see `BusPeer.itemsRead`).
    func itemsRead(_ group: String, by sender: String) {
        lock.withLock {
            guard let p = peers[sender], !p.readsAllItems, !p.itemsRead.containsBytes(group) else {
                return
            }
            // Bounded in number and in bytes (the owner may name a group of any length).
            if p.itemsRead.count >= Self.maximumItemsReaders
                || group.utf8.count > Self.maximumTrackedGroupBytes
            {
                p.readsAllItems = true
            } else {
                p.itemsRead.append(group)
            }
        }
    }

    /// The most collections whose readers are tracked per connection, and the longest group
    /// name tracked.
    static let maximumItemsReaders = 256
    static let maximumTrackedGroupBytes = 1024

    /// Records the Collections `sender` was given, which `collectionsChanged` compares with.
    func collectionsGiven(_ groups: [String], to sender: String) {
        lock.withLock { peers[sender]?.collections = groups }
    }

    /// PropertiesChanged of `interface` at `path` with these values, none invalidated, to
    /// `sender` as a change of `collection` (`tell`).
    func propertiesChanged(
        to sender: String, _ peer: BusPeer, about collection: String, path: String,
        _ interface: String, _ values: [(String, GV)], always: Bool = false
    ) {
        tell(
            sender, peer, about: collection, path: path, Self.propertiesInterface,
            "PropertiesChanged",
            [
                .string(interface),
                .array("{sv}", values.map { .dictEntry(.string($0.0), .variant($0.1)) }),
                .array("s", []),
            ], always: always)
    }
}
