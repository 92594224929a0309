import CGio
import Foundation
import VaultCore
import VaultProtocol

/// The bound on the change signals vaultd sends towards one connection (docs/secret-service.md,
/// "Limits"). The bus daemon keeps every message for a connection that does not read its
/// socket, so what vaultd sends a connection that stopped reading is memory of the user's bus.
///
/// vaultd counts what the signals sent to each connection cost (`signalCost`) since it last
/// knew the connection had read them. It knows that from org.freedesktop.DBus.Peer.Ping,
/// which GDBus, libdbus and sd-bus answer by themselves: the bus daemon keeps a connection's
/// messages in order, so the connection's own answer to a Ping (a reply or an error, sent by
/// the connection: not one the bus daemon sends for it) comes after it read everything sent
/// before the Ping. A Ping goes out once `pingAfter` is not yet known to be read, one at a
/// time. Past `signalBudget`, the connection is behind: its change signals are not sent, and
/// the collections they were about are recorded (`BusPeer.missed`). When it answers, it is
/// sent each such collection's state, whatever its budget: Locked, Label, its Items, Created
/// and Modified to a reader of them, every item's properties, and the service's Collections
/// when they changed (`catchUp`). A connection that never reads is sent at most the budget and
/// one signal past it, and a Ping; one that reads gets, at the end, what a change would have
/// told it. Signals that are no change's (a prompt's Completed, the prompter's) are not
/// counted.
extension SecretService {
    /// The most signal bytes (`signalCost`) sent to a connection that it is not known to
    /// have read, past which it is behind.
    static let signalBudget = 64 << 10
    /// The signal bytes not known to be read after which a Ping is sent.
    static let pingAfter = 8 << 10
    /// What the bus daemon keeps for a message beyond its path, names and body (its header,
    /// the sender and destination, its own bookkeeping), in bytes, about.
    static let signalOverhead = 512

    /// What a signal at `path` of `interface`.`name` with `body` takes in the bus daemon, about.
    static func signalCost(path: String, _ interface: String, _ name: String, body: GV) -> Int {
        signalOverhead + path.utf8.count + interface.utf8.count + name.utf8.count
            + Int(g_variant_get_size(body.raw))
    }

    /// A change signal about `collection` to `sender` (connection `peer`), counted against
    /// its budget: not sent while it is behind, `collection` then recorded as missed; sent
    /// whatever the budget with `always` (a catch-up's). Sends a Ping when one is due.
    func tell(
        _ sender: String, _ peer: BusPeer, about collection: String, path: String,
        _ interface: String, _ name: String, _ arguments: [GV], always: Bool = false
    ) {
        let body = GV.tuple(arguments)
        let cost = Self.signalCost(path: path, interface, name, body: body)
        let send: Bool = lock.withLock {
            guard always || peer.unconfirmed <= Self.signalBudget else {
                Self.miss(collection, peer)
                return false
            }
            peer.unconfirmed += cost
            return true
        }
        if send { emit(to: sender, path: path, interface, name, body: body) }
        pingIfDue(sender, peer)
    }

    /// Whether `peer` is behind (past its budget); if so, `collection` is recorded as missed.
    func isBehind(_ peer: BusPeer, missing collection: String) -> Bool {
        lock.withLock {
            guard peer.unconfirmed > Self.signalBudget else { return false }
            Self.miss(collection, peer)
            return true
        }
    }

    /// Records `collection` as missed by `peer` (under the lock), within the bounds of
    /// `itemsRead`'s: past them, every collection is.
    private static func miss(_ collection: String, _ peer: BusPeer) {
        guard !peer.missedAll, !peer.missed.containsBytes(collection) else { return }
        if peer.missed.count >= maximumItemsReaders
            || collection.utf8.count > maximumTrackedGroupBytes
        {
            peer.missedAll = true
            peer.missed = []
        } else {
            peer.missed.append(collection)
        }
    }

    /// What a Ping's answer is matched with.
    private final class PingContext {
        let service: SecretService
        let sender: String
        let peer: BusPeer
        init(_ service: SecretService, _ sender: String, _ peer: BusPeer) {
            self.service = service
            self.sender = sender
            self.peer = peer
        }
    }

    /// Sends `sender` a Ping when `pingAfter` bytes are not known to be read and none is on
    /// its way. It waits for its answer without a timeout (one Ping per connection at most);
    /// a connection that leaves the bus is answered for by the bus daemon.
    private func pingIfDue(_ sender: String, _ peer: BusPeer) {
        let due: Bool = lock.withLock {
            guard peer.pingAt == nil, peer.unconfirmed >= Self.pingAfter, peers[sender] === peer
            else { return false }
            peer.pingAt = peer.unconfirmed
            return true
        }
        guard due,
            let message = g_dbus_message_new_method_call(
                sender, "/", "org.freedesktop.DBus.Peer", "Ping")
        else { return }
        let context = Unmanaged.passRetained(PingContext(self, sender, peer)).toOpaque()
        // G_MAXINT: no timeout. The answer comes in this thread's context (the bus thread's).
        g_dbus_connection_send_message_with_reply(
            connection, message, G_DBUS_SEND_MESSAGE_FLAGS_NONE, Int32.max, nil, nil,
            { _, result, data in
                let c = Unmanaged<PingContext>.fromOpaque(data!).takeRetainedValue()
                var err: UnsafeMutablePointer<GError>?
                let reply = g_dbus_connection_send_message_with_reply_finish(
                    c.service.connection, result, &err)
                if reply == nil { g_error_free(err) }
                c.service.pingAnswered(c.sender, c.peer, reply: reply)
            }, context)
        g_object_unref(UnsafeMutableRawPointer(message))
    }

    /// The answer to a Ping (nil: none came). The connection's own answer confirms what was
    /// sent before the Ping, and a connection that missed changes catches up; any other (the
    /// bus daemon's, for a connection that left) leaves the Ping to be sent again at the next
    /// signal.
    private func pingAnswered(_ sender: String, _ peer: BusPeer, reply: OpaquePointer?) {
        let answered =
            reply.flatMap { g_dbus_message_get_sender($0) }.map { String(cString: $0) } == sender
        if let reply { g_object_unref(UnsafeMutableRawPointer(reply)) }
        let missed: (collections: [String], all: Bool)? = lock.withLock {
            guard let at = peer.pingAt else { return nil }
            peer.pingAt = nil
            guard answered else { return nil }
            peer.unconfirmed = max(0, peer.unconfirmed - at)
            guard peer.unconfirmed <= Self.signalBudget, peer.missedAll || !peer.missed.isEmpty
            else { return nil }
            defer {
                peer.missed = []
                peer.missedAll = false
            }
            return (peer.missed, peer.missedAll)
        }
        if let missed { catchUp(sender, peer, missed.collections, all: missed.all) }
        pingIfDue(sender, peer)
    }

    /// Sends `sender`, which missed changes of `missed` (`all`: of every collection), the
    /// state of each of those it sees, whatever its budget (see the top).
    private func catchUp(_ sender: String, _ peer: BusPeer, _ missed: [String], all: Bool) {
        guard lock.withLock({ peers[sender] === peer }),
            let collections = try? visibleCollections(vaultSession: peer.vaultSession)
        else { return }
        // `always`: the collection it is about does not count.
        collectionsChanged(sender, peer, PerSession(), about: "", always: true)
        let locked = GV.bool(!vault.isKeychainOpen)
        let names = readableProperties(of: SecretServiceIntrospection.item)
        for c in collections where all || missed.containsBytes(c) {
            let label = try? property("Label", of: .collection(c), vaultSession: peer.vaultSession)
            let found = (try? find(Self.query(group: c), vaultSession: peer.vaultSession)) ?? []
            let items = found.map { item in
                (
                    path(of: item),
                    names.compactMap { n in Self.itemProperty(n, of: item).map { (n, $0) } }
                )
            }
            sendState(
                of: c, to: sender, peer, locked: locked, label: label, items: items, always: true)
        }
    }
}
