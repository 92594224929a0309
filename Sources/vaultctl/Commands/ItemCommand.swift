import Foundation
import VaultClient
import VaultProtocol

/// `vaultctl item add|get|update|delete|list [generic|internet] ...`
struct ItemCommand: Command {
    enum Action: String, CaseIterable { case add, get, update, delete, list }
    var action: Action
    var itemClass: ItemClass?
    var attributes: ItemAttributes
    var changes = ItemAttributes()
    var secretFD: Int?
    var secretStdin = false
    var json = false

    /// Option name → attribute (string-valued attributes).
    static let stringOptions: [(String, ItemAttributes.StringAttribute)] = [
        ("service", .service), ("account", .account), ("label", .label), ("comment", .comment),
        ("description", .description), ("access-group", .accessGroup), ("server", .server),
        ("protocol", .protocol), ("path", .path), ("authentication-type", .authenticationType),
        ("security-domain", .securityDomain),
    ]

    /// Reads ATTRIBUTES options with `prefix` ("--" or "--set-").
    static func attributes(_ a: inout Arguments, prefix: String) throws -> ItemAttributes {
        var attrs = ItemAttributes()
        for (name, key) in stringOptions {
            if let v = try a.option(prefix + name) { attrs[key] = v }
        }
        // A value the protocol refuses (an unknown or deprecated `always*` accessibility, a
        // port out of range) is its Param error (-50, exit 1), as vaultd would answer it.
        if let v = try a.option(prefix + "accessible") { attrs.accessible = try Accessibility(wire: v) }
        if let p = try a.intOption(prefix + "port") { attrs.port = try ItemAttributes.checkedPort(p) }
        // kSecAttrSynchronizable: `--synchronizable` or `=yes`, `--synchronizable=no`; a
        // filter without it matches both.
        attrs.synchronizable = try a.booleanOption(prefix + "synchronizable")
        if let g = try a.option(prefix + "generic") { attrs.generic = Data(g.utf8) }
        return attrs
    }

    /// The options among `attributes` that only internet passwords have, as given.
    static func internetOptions(_ attributes: ItemAttributes, prefix: String) -> [String] {
        var names = stringOptions.filter { ItemAttributes.internetStringAttributes.contains($0.1) && attributes[$0.1] != nil }
            .map { prefix + $0.0 }
        if attributes.port != nil { names.append(prefix + "port") }
        return names
    }

    init(_ a: inout Arguments) throws {
        action = try a.verb(of: "item")
        let named = a.positional(oneOf: ["generic", "internet"])
        if action == .update { changes = try Self.attributes(&a, prefix: "--set-") }
        attributes = try Self.attributes(&a, prefix: "--")
        // A service is a generic password's; a server, protocol, port, path, authentication
        // type or security domain an internet password's. No item has both: a command line
        // naming both (or naming the other class's) is a mistake, told as one (not
        // ItemNotFound, an empty list, or a Param error about the wrong class).
        let given = Self.internetOptions(attributes, prefix: "--") + Self.internetOptions(changes, prefix: "--set-")
        let internet = !given.isEmpty
        let internetOptions = given.joined(separator: ", ")
        let service = attributes.service != nil || changes.service != nil
        switch named {
        case "internet":
            if service { throw UsageError(message: "--service is a generic password's attribute: internet passwords have a --server") }
            itemClass = .internetPassword
        case "generic":
            if internet { throw UsageError(message: "\(internetOptions): internet passwords' attributes (use 'item \(action.rawValue) internet')") }
            itemClass = .genericPassword
        // Without a class: an internet password when its attributes name one (`item get
        // --server github.com`), otherwise a generic password; `list` then lists both.
        default:
            if service && internet {
                throw UsageError(message: "--service is a generic password's attribute and \(internetOptions) internet passwords': give one class's")
            }
            itemClass = internet ? .internetPassword : (action == .list ? nil : .genericPassword)
        }
        secretFD = try a.intOption("--secret-fd")
        secretStdin = a.flag("--secret-stdin")
        json = a.flag("--json")
        if let w = a.words.first(where: { $0 == "generic" || $0 == "internet" }) {
            throw UsageError(message: "'\(w)' (the class) comes right after the verb: vaultctl item \(action.rawValue) \(w) …")
        }
        switch action {
        case .add:
            if secretStdin { secretFD = 0 }
        case .update:
            if secretStdin && secretFD != nil { throw UsageError(message: "--secret-fd and --secret-stdin exclude each other") }
            if secretStdin { secretFD = 0 }
            if changes == ItemAttributes() && secretFD == nil {
                throw UsageError(message: "item update needs --set-ATTRIBUTE, --secret-fd N or --secret-stdin")
            }
            // As for get and delete: an update without a filter acts on every item of the
            // class in every app's group (SecItemUpdate with only a class), which a
            // forgotten --service should not do.
            if attributes == ItemAttributes() { throw UsageError(message: "item update needs at least one filter, e.g. --service") }
        case .get, .delete:
            if attributes == ItemAttributes() { throw UsageError(message: "item \(action.rawValue) needs at least one filter, e.g. --service") }
            if secretFD != nil || secretStdin { throw UsageError(message: "item \(action.rawValue) reads no secret") }
        case .list:
            break
        }
    }

    func run(_ context: Context) throws {
        let keychain = try context.vault().keychain
        switch action {
        case .add:
            let secret = try Terminal.secret(fd: secretFD, prompt: "Secret: ")
            let stored = try keychain.add(itemClass ?? .genericPassword, attributes: attributes, data: secret)
            if json { print(stored.json.text) }
        case .get:
            let item = try keychain.copyMatching(Query(itemClass, attributes), returnData: !json, returnAttributes: json)[0]
            if json {
                print(Self.json(item).text)
            } else {
                Terminal.writeSecret(item.data ?? Data())
            }
        case .update:
            let secret = try secretFD.map { try Terminal.readAll(fd: Int32($0)) }
            let n = try keychain.update(Query(itemClass, attributes), attributes: changes, data: secret)
            print("updated \(n) item(s)")
        case .delete:
            let n = try keychain.delete(Query(itemClass, attributes))
            print("deleted \(n) item(s)")
        case .list:
            let items: [Item]
            do {
                items = try keychain.copyMatching(Query(itemClass, attributes, matchAll: true))
            } catch let e as VaultError where e.code == .itemNotFound {
                items = []
            }
            if json {
                print(JSON.array(items.map(Self.json)).text)
            } else {
                for item in items { print(Self.line(item)) }
            }
        }
    }

    static func json(_ item: Item) -> JSON {
        var o = item.attributes?.json.objectValue ?? [:]
        o["class"] = .string(item.itemClass.rawValue)
        return .object(o)
    }

    /// One line per item: class, group, its class's primary key (service or server,
    /// protocol, port, path, account, authentication type, security domain), label,
    /// accessibility, and `synchronizable=yes` for a synchronizable one, so that two items
    /// never list alike. Values are escaped so a newline or NUL in one cannot break the listing.
    static func line(_ item: Item) -> String {
        let a = item.attributes ?? ItemAttributes()
        func show(_ s: String?) -> String { JSON.string(s ?? "").text }
        let tail = "label=\(show(a.label)) accessible=\(a.accessible?.rawValue ?? "")" + (a.synchronizable == true ? " synchronizable=yes" : "")
        switch item.itemClass {
        case .genericPassword:
            return "generic  group=\(show(a.accessGroup)) service=\(show(a.service)) account=\(show(a.account)) \(tail)"
        case .internetPassword:
            return "internet group=\(show(a.accessGroup)) server=\(show(a.server)) protocol=\(show(a.protocol)) port=\(a.port ?? 0) path=\(show(a.path)) account=\(show(a.account)) authenticationType=\(show(a.authenticationType)) securityDomain=\(show(a.securityDomain)) \(tail)"
        }
    }
}
