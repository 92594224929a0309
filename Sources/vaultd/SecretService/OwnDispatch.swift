import CGio
import Foundation
import VaultCore
import VaultProtocol

/// The calls vaultd dispatches itself rather than through GDBus's registered subtrees: those
/// to an item's path (`…/collection/GROUP/ID`, `…/GROUP/damaged_itemROW`), and Introspect of
/// the collections' folder (`…/collection`). The filter takes them from GDBus
/// (`InlineReads.swift`) and hands them to the bus thread, where they are answered here.
///
/// Why: GDBus hands a subtree only its direct children, so items would need a subtree per
/// collection, registered on the bus thread (a subtree's callbacks run in the context it was
/// registered from) when a collection is first named. Which collections were named then
/// showed: a call to an item of a collection never named got GDBus's own error, one of a named
/// collection vaultd's NoSuchObject, and GDBus lists registered subtrees as the folder's
/// children in Introspect (another app's collections, `session` twice). Dispatched here,
/// every item path is answered the same way whichever collection it names, and the folder
/// lists the caller's own collections.
///
/// The checks GDBus makes before a handler runs are made here too, with its error names:
/// the interface and method exist at the object (UnknownMethod), the arguments have the
/// method's signature (InvalidArgs); for a property, that it exists, may be read or written
/// (InvalidArgs, PropertyReadOnly), and that a value set has its type (InvalidArgs).
extension SecretService {
    /// Whether vaultd dispatches `message` itself: a call to an item's path (three elements
    /// under the service), or Introspect of the collections' folder.
    func isOwnDispatch(_ message: OpaquePointer) -> Bool {
        guard let p = g_dbus_message_get_path(message) else { return false }
        let path = String(cString: p)
        if path == SecretServicePath.collectionRoot {
            return g_dbus_message_get_interface(message).map { String(cString: $0) }
                == Self.introspectable
                && g_dbus_message_get_member(message).map { String(cString: $0) } == "Introspect"
        }
        guard path.hasPrefix(SecretServicePath.collectionRoot + "/") else { return false }
        return path.dropFirst(SecretServicePath.collectionRoot.count + 1).split(
            separator: "/", omittingEmptySubsequences: false
        ).count == 2
    }

    static let introspectable = "org.freedesktop.DBus.Introspectable"

    /// Answers `message` (which this takes over) on the bus thread; no reply when the call
    /// asked for none.
    func dispatchOwn(_ message: OpaquePointer, sender: String) {
        let owned = Handed(message)
        if waitsBehindWrite(sender, { [self] in dispatchOwn(owned.value, sender: sender) }) {
            return
        }
        defer { g_object_unref(UnsafeMutableRawPointer(message)) }
        let path = String(cString: g_dbus_message_get_path(message)!)
        let interface = g_dbus_message_get_interface(message).map { String(cString: $0) } ?? ""
        let member = g_dbus_message_get_member(message).map { String(cString: $0) } ?? ""
        let signature = g_dbus_message_get_signature(message).map { String(cString: $0) } ?? ""
        let body = g_dbus_message_get_body(message).map { GV(borrowing: $0) } ?? GV.tuple([])
        let reply: OpaquePointer
        do {
            let out: GV?
            if path == SecretServicePath.collectionRoot {
                out = .tuple([.string(try introspectCollections(sender: sender))])
            } else {
                out = try itemCall(
                    path: path, interface: interface, member: member, signature: signature, body,
                    sender: sender, message: message)
            }
            reply = g_dbus_message_new_method_reply(message)
            if let out { out.pass { g_dbus_message_set_body(reply, $0) } }
        } catch is Deferred {
            return
        } catch {
            let e = BusError(error)
            reply = g_dbus_message_new_method_error_literal(message, e.name.rawValue, e.message)
        }
        send(reply, answering: message)
    }

    /// Introspect of the collections' folder: no interfaces (it is no object), and the
    /// caller's own collections as its children, as `Service.Collections` lists them. A
    /// caller vaultd cannot identify is refused (AccessDenied).
    func introspectCollections(sender: String) throws -> String {
        let vaultSession = try identify(sender)
        var xml = SecretServiceIntrospection.doctype + "<node>\n"
        for name in try visibleCollections(vaultSession: vaultSession).map(SecretServicePath.encode)
        {
            xml += "  <node name=\"\(name)\"/>\n"
        }
        return xml + "</node>\n"
    }

    /// A call to an item's path: Introspect and Peer, the Properties calls, and the Item
    /// interface's methods, after GDBus's checks (above). The object's interfaces depend on
    /// the path's shape alone (an item, or none for an element vaultd does not write), never
    /// on what is stored.
    private func itemCall(
        path: String, interface: String, member: String, signature: String, _ body: GV,
        sender: String, message: OpaquePointer
    ) throws -> GV? {
        let info: UnsafeMutablePointer<GDBusInterfaceInfo>?
        switch SecretServicePath(path) {
        case .item?, .damaged?:
            info = g_dbus_node_info_lookup_interface(nodeInfo, SecretServiceIntrospection.item)
        default: info = nil
        }
        guard let info else {
            throw BusError(
                .unknownMethod,
                "No such interface \u{201c}\(interface)\u{201d} on object at path \(path)")
        }
        switch interface {
        case Self.introspectable:
            guard member == "Introspect" else {
                throw BusError(.unknownMethod, "No such method \u{201c}\(member)\u{201d}")
            }
            try Self.require(signature, "")
            return .tuple([.string(Self.introspectItem(info))])
        case "org.freedesktop.DBus.Peer":
            try Self.require(signature, "")
            return try Self.peerCall(member)
        case Self.propertiesInterface:
            try Self.checkPropertyCall(member, signature: signature, body, info)
            return try propertyCall(member, sender: sender, path: path, body)
        case SecretServiceIntrospection.item:
            return try itemMethodCall(
                path: path, member: member, signature: signature, body, info, sender: sender,
                message: message)
        default:
            throw BusError(
                .unknownMethod,
                "No such interface \u{201c}\(interface)\u{201d} on object at path \(path)")
        }
    }

    /// InvalidArgs, in GDBus's words, unless the call's argument signature is `expected`.
    private static func require(_ signature: String, _ expected: String) throws {
        guard signature == expected else {
            throw BusError.invalidArgs(
                "Type of message, \u{201c}(\(signature))\u{201d}, does not match expected type \u{201c}(\(expected))\u{201d}"
            )
        }
    }

    /// Introspect of an item: the standard interfaces and the Item interface `info`.
    private static func introspectItem(_ info: UnsafeMutablePointer<GDBusInterfaceInfo>)
        -> String
    {
        let xml = g_string_new(
            SecretServiceIntrospection.doctype + "<node>\n"
                + SecretServiceIntrospection.standardInterfaces)!
        g_dbus_interface_info_generate_xml(info, 2, xml)
        g_string_append(xml, "</node>\n")
        let text = String(cString: xml.pointee.str)
        _ = g_string_free(xml, 1)
        return text
    }

    /// org.freedesktop.DBus.Peer's Ping and GetMachineId.
    private static func peerCall(_ member: String) throws -> GV? {
        switch member {
        case "Ping": return nil
        case "GetMachineId":
            let id =
                (try? String(contentsOfFile: "/etc/machine-id", encoding: .utf8))
                ?? (try? String(contentsOfFile: "/var/lib/dbus/machine-id", encoding: .utf8))
            guard let id else { throw BusError(.failed, "no machine id") }
            return .tuple([.string(id.trimmingCharacters(in: .whitespacesAndNewlines))])
        default: throw BusError(.unknownMethod, "No such method \u{201c}\(member)\u{201d}")
        }
    }

    /// GDBus's checks of a Properties call to an item (Item interface `info`): the method
    /// and its signature, the interface named, and for Get and Set the property, whether it
    /// may be read or written, and the type of a value set.
    private static func checkPropertyCall(
        _ member: String, signature: String, _ body: GV,
        _ info: UnsafeMutablePointer<GDBusInterfaceInfo>
    ) throws {
        let expected = ["Get": "ss", "GetAll": "s", "Set": "ssv"]
        guard let wanted = expected[member] else {
            throw BusError(.unknownMethod, "No such method \u{201c}\(member)\u{201d}")
        }
        try require(signature, wanted)
        let named = body.child(0).string
        guard named == SecretServiceIntrospection.item else {
            throw BusError.invalidArgs("No such interface \u{201c}\(named)\u{201d}")
        }
        guard member != "GetAll" else { return }
        let name = body.child(1).string
        guard let property = g_dbus_interface_info_lookup_property(info, name) else {
            throw BusError.invalidArgs("No such property \u{201c}\(name)\u{201d}")
        }
        // G_DBUS_PROPERTY_INFO_FLAGS_READABLE (1), G_DBUS_PROPERTY_INFO_FLAGS_WRITABLE (2).
        let flags = property.pointee.flags.rawValue
        if member == "Get" && flags & 1 == 0 {
            throw BusError.invalidArgs("Property \u{201c}\(name)\u{201d} is not readable")
        }
        if member == "Set" {
            guard flags & 2 != 0 else { throw BusError.propertyReadOnly(name) }
            let type = String(cString: property.pointee.signature)
            guard body.child(2).unboxed.isOfType(type) else {
                throw BusError.invalidArgs(
                    "Error setting property \u{201c}\(name)\u{201d}: Expected type \u{201c}\(type)\u{201d}"
                )
            }
        }
    }

    /// A method of the Item interface (`info`), checked as GDBus would, then handled as a
    /// call GDBus dispatched is (`methodCall`).
    private func itemMethodCall(
        path: String, member: String, signature: String, _ body: GV,
        _ info: UnsafeMutablePointer<GDBusInterfaceInfo>, sender: String, message: OpaquePointer
    ) throws -> GV? {
        let interface = SecretServiceIntrospection.item
        guard let method = g_dbus_interface_info_lookup_method(info, member) else {
            throw BusError(.unknownMethod, "No such method \u{201c}\(member)\u{201d}")
        }
        var expected = ""
        if let args = method.pointee.in_args {
            var i = 0
            while let a = args[i] {
                expected += String(cString: a.pointee.signature)
                i += 1
            }
        }
        try Self.require(signature, expected)
        guard SecretServiceOperations.of(interface, member) != nil else {
            throw BusError.accessDenied("\(interface).\(member) has no policy decision")
        }
        let vaultSession = try identify(sender)
        guard let target = SecretServicePath(path) else { throw BusError.noSuchObject }
        if Self.writesDurably(interface, member) {
            // Answered off the bus thread (`SecretService+Writes.swift`); no reply here.
            let call = GObjectReference(retaining: message)
            let args = Handed(body)
            let started = answerWrite(of: sender) { [self] in
                reply(to: call) {
                    try handleOffBusThread(
                        member, of: interface, on: target, args.value, sender: sender,
                        vaultSession: vaultSession)
                }
            }
            if started { throw Deferred() }
        }
        do {
            return try handle(
                member, of: interface, on: target, body, sender: sender,
                vaultSession: vaultSession)
        } catch let e where Self.waitsForUser(e) {
            // Run again off the bus thread (`SecretService+Access.swift`); no reply here.
            let args = Handed(body)
            answerWaiting(message, sender: sender, vaultSession: vaultSession) {
                [self] waiting in
                try handle(
                    member, of: interface, on: target, args.value, sender: sender,
                    vaultSession: waiting)
            }
            throw Deferred()
        }
    }
}
