import CGio
import Foundation
import VaultCore
import VaultProtocol

/// The objects' properties: org.freedesktop.DBus.Properties' calls, each property's value
/// as a caller sees it, and the writable ones set.
extension SecretService {
    static let propertiesInterface = "org.freedesktop.DBus.Properties"

    /// org.freedesktop.DBus.Properties' Get, GetAll and Set. The interface vtable has no
    /// property callbacks, so GDBus hands these calls to `methodCall` (after checking that
    /// the property exists on the object's interfaces, may be read or written, and that a
    /// value to set has its type), and each one is answered, error included, as a method
    /// call is: a property callback's GError would reach the client under a name GDBus makes
    /// up from the error's domain. GetAll is all or nothing: an object the caller may not see
    /// is NoSuchObject, as for Get (GDBus's own GetAll leaves out each property that fails,
    /// which answered `{}` for another app's collection).
    func propertyCall(_ method: String, sender: String, path: String, _ p: GV) throws -> GV? {
        let interface = p.child(0).string
        let decision = method == "Set" ? "Set" : "Get"
        guard SecretServiceOperations.of(interface, decision) != nil else {
            throw BusError.accessDenied("no policy decision for \(interface) properties")
        }
        let vaultSession = try identify(sender)
        guard let target = SecretServicePath(path) else { throw BusError.noSuchObject }
        switch method {
        case "Get":
            return .tuple([
                .variant(
                    try property(
                        p.child(1).string, of: target, vaultSession: vaultSession, sender: sender))
            ])
        case "GetAll":
            let names = readableProperties(of: interface)
            var entries: [GV] = []
            for name in names {
                entries.append(
                    .dictEntry(
                        .string(name),
                        .variant(
                            try property(
                                name, of: target, vaultSession: vaultSession, sender: sender))))
            }
            return .tuple([.array("{sv}", entries)])
        case "Set":
            try setProperty(
                p.child(1).string, of: target, to: p.child(2).unboxed, vaultSession: vaultSession)
            return nil
        default:
            throw BusError(.unknownMethod, "no method \(Self.propertiesInterface).\(method)")
        }
    }

    /// The readable properties `interface` declares (`Introspection.swift`), in its order.
    func readableProperties(of interface: String) -> [String] {
        guard let info = g_dbus_node_info_lookup_interface(nodeInfo, interface),
            let properties = info.pointee.properties
        else { return [] }
        var names: [String] = []
        var i = 0
        while let p = properties[i] {
            // G_DBUS_PROPERTY_INFO_FLAGS_READABLE: (1 << 0).
            if p.pointee.flags.rawValue & 1 != 0 { names.append(String(cString: p.pointee.name)) }
            i += 1
        }
        return names
    }

    /// Property `name` of the object at `target`, as `caller` sees it. `sender`, when given,
    /// is the connection it is read for: the Collections it is given are remembered, so that
    /// a later change tells it what was created or deleted (`notify`).
    func property(
        _ name: String, of target: SecretServicePath, vaultSession: VaultSession,
        sender: String? = nil
    ) throws -> GV {
        switch (target, name) {
        case (.service, "Collections"):
            let groups = try visibleCollections(vaultSession: vaultSession)
            if let sender { collectionsGiven(groups, to: sender) }
            return .objectPaths(groups.map(collectionPath))
        case (.collection, "Items"), (.alias, "Items"), (.collection, "Created"),
            (.alias, "Created"), (.collection, "Modified"), (.alias, "Modified"):
            let g = try group(of: target, vaultSession: vaultSession)
            let values = try collectionValues(g, vaultSession: vaultSession)
            if let sender, name == "Items" { itemsRead(g, by: sender) }
            return values.first { $0.0 == name }!.1
        case (.collection, "Label"), (.alias, "Label"):
            let g = try group(of: target, vaultSession: vaultSession)
            return .string(Self.isSession(g) ? g : try vaultSession.collectionLabel(g))
        case (.collection, "Locked"), (.alias, "Locked"):
            let g = try group(of: target, vaultSession: vaultSession)
            if !Self.isSession(g) { _ = try vaultSession.accessGroup(g) }
            return .bool(!(try vaultSession.requestUnlock()))
        case (.item, _), (.damaged, _):
            let found: FoundItem
            switch try stored(target, vaultSession: vaultSession) {
            case .item(let f): found = f
            case .damaged(let d):
                // Shown, as a locked item whose label says what is wrong: nothing of it reads.
                switch name {
                case "Locked": return .bool(true)
                case "Attributes": return .stringDictionary([:])
                case "Label": return .string("damaged: " + d.description)
                case "Created", "Modified": return Self.seconds(nil)
                default: throw BusError.unknownProperty(name)
                }
            }
            switch name {
            case "Locked": return .bool(found.isLocked)
            case "Attributes": return .stringDictionary(found.attributes.lookupAttributes ?? [:])
            case "Label": return .string(found.attributes.label ?? "")
            case "Created": return Self.seconds(found.attributes.creationDate)
            case "Modified": return Self.seconds(found.attributes.modificationDate)
            default: break
            }
        default: break
        }
        throw BusError.unknownProperty(name)
    }

    /// A collection's Items, Created and Modified, from one read of its items. A group has
    /// no dates of its own: its items' earliest creation and latest change (0 when empty).
    /// While the vault has stayed locked since vaultd started, its items' IDs (in their
    /// encrypted attributes) cannot be read: no items then, and dates 0, until the unlock
    /// sends the real values (`notify(.lockState)`); an error here would fail the whole
    /// GetAll a client makes of the collection, and libsecret then has no collection at all.
    func collectionValues(_ group: String, vaultSession: VaultSession) throws -> [(String, GV)] {
        let found: [FoundItem]
        let damaged: [DamagedItem]
        do {
            (found, damaged) = try findReportingDamage(
                Self.query(group: group), vaultSession: vaultSession)
        } catch let e as VaultFailure where e.code == .interactionNotAllowed {
            if !Self.isSession(group) { _ = try vaultSession.accessGroup(group) }
            (found, damaged) = ([], [])
        }
        return [
            ("Items", .objectPaths(found.map(path) + damaged.compactMap(path(ofDamaged:)))),
            ("Created", Self.seconds(found.compactMap(\.attributes.creationDate).min())),
            ("Modified", Self.seconds(found.compactMap(\.attributes.modificationDate).max())),
        ]
    }

    func setProperty(
        _ name: String, of target: SecretServicePath, to value: GV, vaultSession: VaultSession
    )
        throws
    {
        switch (target, name) {
        case (.item(let g, let id), "Label"), (.item(let g, let id), "Attributes"):
            var changes = ItemAttributes()
            if name == "Label" {
                changes.label = value.string
            } else {
                changes.lookupAttributes = try Self.attributes(value)
            }
            if Self.isSession(g) {
                try vaultSession.updateSessionItem(
                    id, label: changes.label, attributes: changes.lookupAttributes)
            } else {
                _ = try vaultSession.updateItems(
                    Self.query(group: g, id: id), changes: changes, secret: nil)
            }
            notifySession(g, changed: [target.path], vaultSession: vaultSession)
        case (.collection, "Label"), (.alias, "Label"):
            let g = try group(of: target, vaultSession: vaultSession)
            guard !Self.isSession(g) else {
                // One collection for every caller, each seeing its own items there: a label
                // one app set would be read by the others.
                guard value.string == g else {
                    throw BusError.notSupported("the session collection's label is \(g)")
                }
                return
            }
            if try vaultSession.setCollectionLabel(g, to: value.string) {
                notify(.label(group: g))
            }
        case (.damaged, "Label"), (.damaged, "Attributes"):
            _ = try item(target, vaultSession: vaultSession)
            throw BusError.noSuchObject
        default:
            throw BusError.propertyReadOnly(name)
        }
    }
}
