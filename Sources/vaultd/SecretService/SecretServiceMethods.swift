import CGio
import Foundation
import SecretSession
import VaultCore
import VaultProtocol

/// The Secret Service's methods and properties, each as engine operations made with the
/// caller's `Caller` (the engine authorizes them; see `SecretServiceOperations.byMember`).
extension SecretService {
    static let itemLabel = "org.freedesktop.Secret.Item.Label"
    static let itemAttributes = "org.freedesktop.Secret.Item.Attributes"
    static let collectionLabel = "org.freedesktop.Secret.Collection.Label"
    /// The content type of a secret stored without one (as gnome-keyring gives every secret).
    static let defaultContentType = "text/plain"
    /// The schema of the vault passphrase `vaultctl unlock --remember` keeps in the login keyring.
    static let unlockSchema = "io.vaultd.Unlock"

    // MARK: queries

    /// The Secret Service items of `group` (nil: every group the caller sees) having every
    /// lookup attribute of `attributes`, and of item `id` when given. No attributes asks for
    /// none: an item of the service made through the socket without lookup attributes
    /// (`vaultctl item add --service org.freedesktop.secrets`) is an item with no attributes,
    /// as `Vault.secretServiceQuery` lists it (an empty map would match only items that have
    /// a map).
    static func query(group: String?, id: String? = nil, attributes: ExactDictionary<String> = [:])
        -> ItemQuery
    {
        var a = ItemAttributes(service: Vault.secretServiceService, account: id, accessGroup: group)
        a.lookupAttributes = attributes.isEmpty ? nil : attributes
        return ItemQuery(itemClass: .genericPassword, attributes: a, matchAll: true)
    }

    /// The matches, locked ones too (none: empty): of the session collection (its group
    /// named `Vault.sessionCollection`), of the store, or of both (no group named).
    func find(_ q: ItemQuery, secrets: Bool = false, vaultSession: VaultSession) throws
        -> [FoundItem]
    {
        try findReportingDamage(q, secrets: secrets, vaultSession: vaultSession).items
    }

    /// `find`, with the damaged items of the store the query met (`DamagedItem`; with
    /// `secrets`, those whose secret does not open too), which never keep the others from
    /// being found (docs/secret-service.md, "Damaged items").
    func findReportingDamage(_ q: ItemQuery, secrets: Bool = false, vaultSession: VaultSession)
        throws -> (
            items: [FoundItem], damaged: [DamagedItem]
        )
    {
        let session = {
            try vaultSession.sessionItems(
                matching: q.attributes.lookupAttributes ?? [:], id: q.attributes.account,
                secrets: secrets)
        }
        if let g = q.attributes.accessGroup, Self.isSession(g) { return (try session(), []) }
        var stored: (items: [FoundItem], damaged: [DamagedItem]) = ([], [])
        do {
            let m = try vaultSession.copyMatchingReportingDamage(
                q, returnData: secrets, includingLocked: true)
            stored = (m.items, m.damaged)
        } catch let e as VaultFailure where e.code == .itemNotFound {}
        if q.attributes.accessGroup == nil { stored.items += try session() }
        return stored
    }

    /// The path a search lists a damaged item at: by its row id, as its ID (its account) is
    /// in its attributes. nil for one whose group does not read or is `session` (hidden from
    /// the Secret Service): the engine logs it and `vaultctl doctor` names it.
    func path(ofDamaged d: DamagedItem) -> String? {
        guard let g = d.accessGroup, !Self.isSession(g) else { return nil }
        _ = collectionPath(g)
        return SecretServicePath.damaged(collection: g, row: d.id).path
    }

    /// ItemDamaged (vaultd's own error name, as on the socket) naming `items` by their row
    /// id and uuid, never by what they hold.
    static func damagedError(_ items: [DamagedItem]) -> BusError {
        let named = items.prefix(16).map(\.description).joined(separator: "; ")
        let more = items.count > 16 ? " and \(items.count - 16) more" : ""
        return BusError(
            .itemDamaged,
            "damaged in the store (altered or damaged on disk): \(named)\(more). Delete it (Item.Delete, or secret-tool clear with its attributes) and store it again, or restore it from a backup; `vaultctl doctor` lists every damaged item"
        )
    }

    /// Whether a collection's group is the in-memory session collection (which hides an
    /// access group of that name from the Secret Service).
    static func isSession(_ group: String) -> Bool { group.sameBytes(Vault.sessionCollection) }

    func path(of item: FoundItem) -> String {
        itemPath(item.attributes.accessGroup ?? "", item.attributes.account ?? "")
    }

    /// The access group a collection path stands for: the collection's own, or for an alias
    /// (`default`, `login`) the caller's default group (`Caller.defaultAccessGroup`). Other
    /// aliases name nothing (NoSuchObject).
    func group(of target: SecretServicePath, vaultSession: VaultSession) throws -> String {
        switch target {
        case .collection(let g): return g
        case .alias(let a) where SecretServicePath.aliases.contains(a):
            return vaultSession.defaultAccessGroup
        default: throw BusError.noSuchObject
        }
    }

    /// What stands at an item path: the item, or a damaged one (its row or attributes do not
    /// read, or with `secret` its secret).
    enum StoredItem {
        case item(FoundItem)
        case damaged(DamagedItem)
    }

    /// What is at `target` (NoSuchObject when nothing the caller may see is).
    func stored(_ target: SecretServicePath, secret: Bool = false, vaultSession: VaultSession)
        throws
        -> StoredItem
    {
        switch target {
        case .item(let g, let id):
            let (items, damaged) = try findReportingDamage(
                Self.query(group: g, id: id), secrets: secret, vaultSession: vaultSession)
            if let found = items.first { return .item(found) }
            if let d = damaged.first { return .damaged(d) }
        case .damaged(let g, let row) where !Self.isSession(g):
            if let d = try vaultSession.damagedSecretServiceItem(row, accessGroup: g) {
                return .damaged(d)
            }
        default: break
        }
        throw BusError.noSuchObject
    }

    /// The one item at `target` (NoSuchObject when there is none the caller may see,
    /// ItemDamaged when it is damaged).
    func item(_ target: SecretServicePath, secret: Bool = false, vaultSession: VaultSession) throws
        -> FoundItem
    {
        switch try stored(target, secret: secret, vaultSession: vaultSession) {
        case .item(let found): return found
        case .damaged(let d): throw Self.damagedError([d])
        }
    }

    // MARK: wire values

    /// An `a{ss}` as lookup attributes (at most `ItemAttributes.maximumLookupAttributes`).
    static func attributes(_ v: GV) throws -> ExactDictionary<String> {
        guard v.count <= ItemAttributes.maximumLookupAttributes else {
            throw BusError.invalidArgs(
                "at most \(ItemAttributes.maximumLookupAttributes) attributes")
        }
        var out = ExactDictionary<String>(minimumCapacity: v.count)
        for entry in v.children { out[entry.child(0).string] = entry.child(1).string }
        return out
    }

    /// The value of a `(oayays)` secret sent in a session `sender` opened, into sodium memory:
    /// decrypted in an encrypted session (its parameters are the IV), as it is in a plain one
    /// (no parameters).
    func secret(_ s: GV, sender: String) throws -> SecureBytes {
        let session = try session(s.child(0).string, for: sender)
        if let dh = session.dh {
            let iv = s.child(1).withBytes { Array($0) }
            let ciphertext = s.child(2).withBytes { Array($0) }
            do {
                return try dh.decrypt(iv: iv, ciphertext: ciphertext)
            } catch {
                throw BusError.invalidArgs("\(error)")
            }
        }
        guard s.child(1).withBytes({ $0.isEmpty }) else {
            throw BusError.invalidArgs("a plain session's secret has no parameters")
        }
        return s.child(2).withBytes { bytes in
            let out = SecureBytes(count: bytes.count)
            out.withUnsafeMutableBytes { dst in
                if let base = bytes.baseAddress, bytes.count > 0 {
                    dst.baseAddress!.copyMemory(from: base, byteCount: bytes.count)
                }
            }
            return out
        }
    }

    /// The content type of a `(oayays)` secret, to be stored with it: nil for none (""). At
    /// most `ItemAttributes.maximumContentTypeBytes` (InvalidArgs).
    static func contentType(_ s: GV) throws -> String? {
        let type = s.child(3).string
        guard type.utf8.count <= ItemAttributes.maximumContentTypeBytes else {
            throw BusError.invalidArgs(
                "a content type takes at most \(ItemAttributes.maximumContentTypeBytes) bytes")
        }
        return type.isEmpty ? nil : type
    }

    /// A `(oayays)` secret for session `path` (`session`): encrypted in an encrypted one; with
    /// the content type it was stored with (`defaultContentType` when none was given).
    static func secretValue(
        _ data: SecureBytes, contentType: String?, session: Session, path: String
    ) throws -> GV {
        let contentType = contentType.flatMap { $0.isEmpty ? nil : $0 } ?? defaultContentType
        if let dh = session.dh {
            let (iv, ciphertext) = try dh.encrypt(data)
            return iv.withUnsafeBytes { i in
                ciphertext.withUnsafeBytes { c in
                    GV.tuple([.objectPath(path), .bytes(i), .bytes(c), .string(contentType)])
                }
            }
        }
        return data.withUnsafeBytes { bytes in
            GV.tuple([.objectPath(path), .array("y", []), .bytes(bytes), .string(contentType)])
        }
    }

    static func seconds(_ d: Date?) -> GV { .uint64(UInt64(max(0, d?.timeIntervalSince1970 ?? 0))) }

    // MARK: methods

    /// Handles one call; returns its reply's out arguments (a tuple), nil for none.
    func handle(
        _ method: String, of interface: String, on target: SecretServicePath, _ p: GV,
        sender: String, vaultSession: VaultSession
    ) throws -> GV? {
        switch interface {
        case SecretServiceIntrospection.service:
            return try serviceMethod(
                method, on: target, p, sender: sender, vaultSession: vaultSession)
        case SecretServiceIntrospection.collection:
            return try collectionMethod(
                method, on: target, p, sender: sender, vaultSession: vaultSession)
        case SecretServiceIntrospection.item:
            return try itemMethod(method, on: target, p, sender: sender, vaultSession: vaultSession)
        default:
            return try sessionMethod(
                method, of: interface, on: target, p, sender: sender, vaultSession: vaultSession)
        }
    }

    /// The reply to a method the object at the path does not have.
    static func unknownMethod(_ interface: String, _ method: String) -> BusError {
        BusError(.unknownMethod, "no method \(interface).\(method) at this object")
    }

    /// The Service interface's methods, at the service's path.
    private func serviceMethod(
        _ method: String, on target: SecretServicePath, _ p: GV, sender: String,
        vaultSession: VaultSession
    ) throws -> GV? {
        let interface = SecretServiceIntrospection.service
        switch (method, target) {
        case ("OpenSession", .service):
            return try openSession(p, sender: sender)
        case ("SearchItems", .service):
            // A damaged item is listed among the locked: libsecret reads no secret of those
            // without unlocking them first, and then GetSecrets names it as damaged.
            let (found, damaged) = try findReportingDamage(
                Self.query(group: nil, attributes: try Self.attributes(p.child(0))),
                vaultSession: vaultSession)
            return .tuple([
                .objectPaths(found.filter { !$0.isLocked }.map(path)),
                .objectPaths(
                    found.filter(\.isLocked).map(path) + damaged.compactMap(path(ofDamaged:))),
            ])
        case ("GetSecrets", .service):
            return try getSecrets(p, sender: sender, vaultSession: vaultSession)
        case ("Unlock", .service):
            let objects = p.child(0).children.map(\.string).filter { SecretServicePath($0) != nil }
            if try vaultSession.requestUnlock() {
                return .tuple([.objectPaths(objects), .objectPath("/")])
            }
            return .tuple([
                .objectPaths([]),
                .objectPath(
                    try makePrompt(for: sender, objects: objects, vaultSession: vaultSession)),
            ])
        case ("Lock", .service):
            _ = try vaultSession.lock()
            return .tuple([
                .objectPaths(
                    p.child(0).children.map(\.string).filter { SecretServicePath($0) != nil }),
                .objectPath("/"),
            ])
        case ("ReadAlias", .service):
            let name = p.child(0).string
            guard SecretServicePath.aliases.contains(name) else {
                return .tuple([.objectPath("/")])
            }
            let group = try vaultSession.accessGroup(vaultSession.defaultAccessGroup)
            return .tuple([.objectPath(collectionPath(group))])
        case ("SetAlias", .service):
            try vaultSession.setAlias()
            let name = p.child(0).string
            let to = p.child(1).string
            // An alias names the caller's default group; pointing it there again is a no-op.
            guard SecretServicePath.aliases.contains(name),
                to == SecretServicePath.collection(vaultSession.defaultAccessGroup).path
            else {
                throw BusError.notSupported(
                    "vaultd's aliases default and login always name the default access group")
            }
            return nil
        case ("CreateCollection", .service):
            let alias = p.child(1).string
            let label = p.child(0).lookup(Self.collectionLabel, "s")?.string ?? ""
            // An alias of vaultd's is the caller's default group, which always exists.
            let wanted =
                SecretServicePath.aliases.contains(alias) || label.isEmpty
                ? vaultSession.defaultAccessGroup : label
            let group = try vaultSession.accessGroup(wanted)
            return .tuple([.objectPath(collectionPath(group)), .objectPath("/")])
        default:
            throw Self.unknownMethod(interface, method)
        }
    }

    /// The Collection interface's methods, at a collection's path or an alias.
    private func collectionMethod(
        _ method: String, on target: SecretServicePath, _ p: GV, sender: String,
        vaultSession: VaultSession
    ) throws -> GV? {
        let interface = SecretServiceIntrospection.collection
        switch method {
        case "SearchItems":
            let g = try group(of: target, vaultSession: vaultSession)
            let (found, damaged) = try findReportingDamage(
                Self.query(group: g, attributes: try Self.attributes(p.child(0))),
                vaultSession: vaultSession)
            return .tuple([.objectPaths(found.map(path) + damaged.compactMap(path(ofDamaged:)))])
        case "CreateItem":
            return try createItem(
                in: try group(of: target, vaultSession: vaultSession), p, sender: sender,
                vaultSession: vaultSession)
        case "Delete":
            let g = try group(of: target, vaultSession: vaultSession)
            let (items, damaged) = try findReportingDamage(
                Self.query(group: g), vaultSession: vaultSession)
            if Self.isSession(g) {
                try vaultSession.deleteSessionItems(nil)
                notifySession(g, deleted: items.map(path), vaultSession: vaultSession)
            } else {
                // The engine's event of each delete signals it (`itemsChanged`).
                if !items.isEmpty {
                    _ = try vaultSession.deleteItems(Self.query(group: g))
                }
                // The damaged ones too, each by its row (the query above names lookup
                // attributes, which a damaged item's cannot be checked against).
                for d in damaged {
                    _ = try vaultSession.deleteDamagedSecretServiceItem(
                        d.id, accessGroup: g)
                }
                try vaultSession.removeCollectionLabel(g)
                notify(.label(group: g))
            }
            return .tuple([.objectPath("/")])
        default:
            throw Self.unknownMethod(interface, method)
        }
    }

    /// The Item interface's methods, at an item's path (or a damaged item's).
    private func itemMethod(
        _ method: String, on target: SecretServicePath, _ p: GV, sender: String,
        vaultSession: VaultSession
    ) throws -> GV? {
        let interface = SecretServiceIntrospection.item
        switch (method, target) {
        case ("GetSecret", .item):
            let path = p.child(0).string
            let session = try session(path, for: sender)
            let found = try item(target, secret: true, vaultSession: vaultSession)
            guard let data = found.data else {
                throw BusError(
                    VaultFailure(
                        .interactionNotAllowed,
                        "the item is locked: unlock the vault (vaultctl unlock)"))
            }
            return .tuple([
                try Self.secretValue(
                    data, contentType: found.attributes.contentType, session: session, path: path)
            ])
        case ("SetSecret", .damaged),
            ("GetSecret", .damaged):
            // Nothing of it reads: named as damaged (or NoSuchObject once it is gone).
            _ = try item(target, vaultSession: vaultSession)
            throw BusError.noSuchObject
        case ("SetSecret", .item(let g, let id)):
            let s = try secret(p.child(0), sender: sender)
            let type = try Self.contentType(p.child(0))
            if Self.isSession(g) {
                try vaultSession.updateSessionItem(id, secret: s, contentType: type)
            } else {
                // The content type goes with the secret; "" is stored as none (given back as
                // `defaultContentType`), as an item made without one.
                var changes = ItemAttributes()
                changes.contentType = type ?? ""
                _ = try vaultSession.updateItems(
                    Self.query(group: g, id: id), changes: changes, secret: s)
            }
            notifySession(g, changed: [target.path], vaultSession: vaultSession)
            return nil
        case ("Delete", .item(let g, let id)):
            if Self.isSession(g) {
                guard try vaultSession.deleteSessionItems(id) > 0 else {
                    throw BusError.noSuchObject
                }
            } else {
                do {
                    _ = try vaultSession.deleteItems(Self.query(group: g, id: id))
                } catch let e as VaultFailure where e.code == .itemDamaged {
                    // The item at this path is damaged: a query naming only its service,
                    // account and group, which its row tells in clear, deletes it.
                    _ = try vaultSession.deleteItems(
                        ItemQuery(
                            itemClass: .genericPassword,
                            attributes: ItemAttributes(
                                service: Vault.secretServiceService, account: id, accessGroup: g),
                            matchAll: true))
                }
            }
            notifySession(g, deleted: [target.path], vaultSession: vaultSession)
            return .tuple([.objectPath("/")])
        case ("Delete", .damaged(let g, let row)):
            guard !Self.isSession(g) else { throw BusError.noSuchObject }
            _ = try vaultSession.deleteDamagedSecretServiceItem(row, accessGroup: g)
            return .tuple([.objectPath("/")])
        default:
            throw Self.unknownMethod(interface, method)
        }
    }

    /// The Session and Prompt interfaces' methods, and vaultd's own prompter agent's.
    private func sessionMethod(
        _ method: String, of interface: String, on target: SecretServicePath, _ p: GV,
        sender: String, vaultSession: VaultSession
    ) throws -> GV? {
        switch (interface, method, target) {
        case (SecretServiceIntrospection.session, "Close", .session(let id)):
            try closeSession(id, for: sender)
            return nil
        case (SecretServiceIntrospection.prompt, "Prompt", .prompt(let id)):
            try startPrompt(id, window: p.child(0).string, for: sender)
            return nil
        case (SecretServiceIntrospection.prompt, "Dismiss", .prompt(let id)):
            try dismissPrompt(id, for: sender)
            return nil

        // vaultd's own: the prompter agent
        case (SecretServiceIntrospection.prompting, "RegisterPrompter", .service):
            try prompter.register(
                sender: sender, path: p.child(0).string, vaultSession: vaultSession)
            return nil
        case (SecretServiceIntrospection.prompting, "UnregisterPrompter", .service):
            try prompter.unregister(sender: sender, vaultSession: vaultSession)
            return nil
        default:
            throw Self.unknownMethod(interface, method)
        }
    }

    /// Service.OpenSession(algorithm, input): a plain session, or an encrypted one whose
    /// key comes from a Diffie-Hellman exchange with the client's public key.
    private func openSession(_ p: GV, sender: String) throws -> GV {
        switch p.child(0).string {
        case "plain":
            let id = try openSession(for: sender, dh: nil)
            return .tuple([
                .variant(.string("")), .objectPath(SecretServicePath.session(id).path),
            ])
        case DHSession.algorithm:
            let input = p.child(1).unboxed
            guard input.isOfType("ay") else {
                throw BusError.invalidArgs(
                    "the input of \(DHSession.algorithm) is the client's public key (ay)")
            }
            let dh: DHSession
            do {
                dh = try DHSession(peerPublicKey: input.withBytes { Array($0) })
            } catch {
                throw BusError.invalidArgs("\(error)")
            }
            let id = try openSession(for: sender, dh: dh)
            let output = dh.publicKey.withUnsafeBytes { GV.bytes($0) }
            return .tuple([.variant(output), .objectPath(SecretServicePath.session(id).path)])
        default:
            throw BusError.notSupported(
                "vaultd offers the algorithms plain and \(DHSession.algorithm)")
        }
    }

    /// Service.GetSecrets(items, session): the secrets of the items that read, at most
    /// `maximumSecretsReply` bytes of them.
    private func getSecrets(_ p: GV, sender: String, vaultSession: VaultSession) throws -> GV {
        let path = p.child(1).string
        let session = try session(path, for: sender)
        var entries: [GV] = []
        var bytes = 0
        var damaged: [DamagedItem] = []
        var locked = false
        for itemPath in p.child(0).children.map(\.string) {
            guard let t = SecretServicePath(itemPath) else { continue }
            let data: SecureBytes
            let contentType: String?
            // An item that does not read is left out, but for the per-program access
            // check (its refusal is the call's answer) and a wait for the user (a question
            // of access, a presence check: the whole call runs again where it may wait).
            let read: StoredItem?
            do {
                read = try stored(t, secret: true, vaultSession: vaultSession)
            } catch let e where Self.waitsForUser(e) {
                throw e
            } catch let e as VaultFailure where e.details.program != nil {
                throw e
            } catch {
                read = nil
            }
            switch read {
            case .item(let found)?:
                guard let d = found.data else {
                    locked = true
                    continue
                }
                data = d
                contentType = found.attributes.contentType
            case .damaged(let d)?:
                // Left out, as a locked item is: it never keeps the others from being read.
                damaged.append(d)
                continue
            case nil: continue
            }
            bytes += data.count
            guard bytes <= Self.maximumSecretsReply else {
                throw BusError.limitsExceeded(
                    "the secrets asked for are over \(Self.maximumSecretsReply) bytes: ask for fewer"
                )
            }
            entries.append(
                .dictEntry(
                    .objectPath(itemPath),
                    try Self.secretValue(
                        data, contentType: contentType, session: session, path: path)))
        }
        // Nothing but damaged items asked for (a lookup of one): the error names them, as
        // CopyMatching's ItemDamaged does, rather than an answer of nothing.
        if entries.isEmpty && !locked && !damaged.isEmpty { throw Self.damagedError(damaged) }
        return .tuple([.array("{o(oayays)}", entries)])
    }

    /// CreateItem(properties, secret, replace) in `group`: with `replace`, an item of the
    /// group whose attributes are exactly these gets the new secret and label instead.
    private func createItem(in group: String, _ p: GV, sender: String, vaultSession: VaultSession)
        throws -> GV
    {
        let properties = p.child(0)
        let label = properties.lookup(Self.itemLabel, "s")?.string ?? ""
        let attributes =
            try properties.lookup(Self.itemAttributes, "a{ss}").map(Self.attributes) ?? [:]
        // `vaultctl unlock --remember` storing the vault's passphrase in the vault it unlocks.
        if attributes["xdg:schema"] == Self.unlockSchema {
            throw BusError.notSupported(KeyringUnlock.circle)
        }
        let secret = try secret(p.child(1), sender: sender)
        let contentType = try Self.contentType(p.child(1))
        if Self.isSession(group) {
            let id = try vaultSession.addSessionItem(
                label: label, attributes: attributes, secret: secret, contentType: contentType,
                replace: p.child(2).bool)
            let path = itemPath(group, id)
            notifySession(group, created: [path], vaultSession: vaultSession)
            return .tuple([.objectPath(path), .objectPath("/")])
        }
        if p.child(2).bool,
            let existing = try find(
                Self.query(group: group, attributes: attributes), vaultSession: vaultSession
            ).first(where: { $0.attributes.lookupAttributes == attributes })
        {
            var changes = ItemAttributes(label: label)
            changes.lookupAttributes = attributes
            changes.contentType = contentType ?? ""
            let id = existing.attributes.account ?? ""
            _ = try vaultSession.updateItems(
                Self.query(group: group, id: id), changes: changes, secret: secret)
            return .tuple([.objectPath(itemPath(group, id)), .objectPath("/")])
        }
        // The item's ID: 128 random bits, in hex (a path element as it is).
        let id = String(lowercaseHex: Sodium.randomBytes(16))
        var a = ItemAttributes(
            service: Vault.secretServiceService, account: id, label: label, accessGroup: group)
        a.lookupAttributes = attributes
        a.contentType = contentType
        _ = try vaultSession.addItem(.genericPassword, attributes: a, secret: secret)
        return .tuple([.objectPath(itemPath(group, id)), .objectPath("/")])
    }
}
