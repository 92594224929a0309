import Foundation
import VaultClient
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

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
    /// `item add --update`: replace the secret and given attributes of an item of that primary
    /// key instead of failing with DuplicateItem (`security add-generic-password -U`).
    var addOrUpdate = false
    /// An empty secret is taken (it is refused without this, exit 65).
    var allowEmpty = false
    /// The secret byte for byte: no final newline removed.
    var raw = false
    /// `item delete|update` acting on several items: no question asked.
    var yes = false
    /// `item delete|update`: list what would be touched, change nothing.
    var dryRun = false

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
        if let v = try a.option(prefix + "accessible") {
            attrs.accessible = try Accessibility(wire: v)
        }
        if let p = try a.intOption(prefix + "port") {
            attrs.port = try ItemAttributes.checkedPort(p)
        }
        // kSecAttrSynchronizable: `--synchronizable` or `=yes`, `--synchronizable=no`; a
        // filter without it matches both.
        attrs.synchronizable = try a.booleanOption(prefix + "synchronizable")
        // kSecAttrAccessControl `userPresence`: the secret only after the user proves presence
        // (polkit); a filter with it finds only such items. Nothing takes it away.
        if a.flag(prefix + "require-presence") { attrs.accessControl = .userPresence }
        // kSecAttrGeneric as text (UTF-8) or, for bytes that are not text, as base64: the
        // two forms `--json` shows it in (`generic`, `genericBase64`).
        let text = try a.option(prefix + "generic")
        let base64 = try a.option(prefix + "generic-base64")
        if text != nil && base64 != nil {
            throw UsageError(
                message: "\(prefix)generic and \(prefix)generic-base64 exclude each other")
        }
        if let g = text { attrs.generic = Data(g.utf8) }
        if let b = base64 {
            guard let d = Data(base64Encoded: b) else {
                throw InputError(message: "the value of \(prefix)generic-base64 is not base64")
            }
            attrs.generic = d
        }
        return attrs
    }

    /// The options among `attributes` that only internet passwords have, as given.
    static func internetOptions(_ attributes: ItemAttributes, prefix: String) -> [String] {
        var names = stringOptions.filter {
            ItemAttributes.internetStringAttributes.contains($0.1) && attributes[$0.1] != nil
        }
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
        let given =
            Self.internetOptions(attributes, prefix: "--")
            + Self.internetOptions(changes, prefix: "--set-")
        let internet = !given.isEmpty
        let internetOptions = given.joined(separator: ", ")
        let service = attributes.service != nil || changes.service != nil
        switch named {
        case "internet":
            if service {
                throw UsageError(
                    message:
                        "--service is a generic password's attribute: internet passwords have a --server"
                )
            }
            itemClass = .internetPassword
        case "generic":
            if internet {
                throw UsageError(
                    message:
                        "\(internetOptions): internet passwords' attributes (use 'item \(action.rawValue) internet')"
                )
            }
            itemClass = .genericPassword
        // Without a class: an internet password when its attributes name one (`item get
        // --server github.com`), otherwise a generic password; `list` then lists both.
        default:
            if service && internet {
                throw UsageError(
                    message:
                        "--service is a generic password's attribute and \(internetOptions) internet passwords': give one class's"
                )
            }
            itemClass = internet ? .internetPassword : (action == .list ? nil : .genericPassword)
        }
        secretFD = try a.intOption("--secret-fd")
        secretStdin = a.flag("--secret-stdin")
        json = a.flag("--json")
        allowEmpty = a.flag("--allow-empty")
        raw = a.flag("--raw")
        if action == .add { addOrUpdate = a.flag("--update") }
        if action == .delete || action == .update {
            yes = a.flag("--yes")
            dryRun = a.flag("--dry-run")
        }
        if (allowEmpty || raw)
            && !(action == .add || (action == .update && (secretFD != nil || secretStdin)))
        {
            throw UsageError(
                message:
                    "--allow-empty and --raw concern a secret read: item add, or item update with --secret-fd N or --secret-stdin"
            )
        }
        if let w = a.words.first(where: { $0 == "generic" || $0 == "internet" }) {
            throw UsageError(
                message:
                    "'\(w)' (the class) comes right after the verb: vaultctl item \(action.rawValue) \(w) …"
            )
        }
        switch action {
        case .add:
            if secretStdin && secretFD != nil {
                throw UsageError(message: "--secret-fd and --secret-stdin exclude each other")
            }
        case .update:
            if secretStdin && secretFD != nil {
                throw UsageError(message: "--secret-fd and --secret-stdin exclude each other")
            }
            if changes == ItemAttributes() && secretFD == nil && !secretStdin {
                throw UsageError(
                    message: "item update needs --set-ATTRIBUTE, --secret-fd N or --secret-stdin")
            }
            // As for get and delete: an update without a filter acts on every item of the
            // class in every app's group (SecItemUpdate with only a class), which a
            // forgotten --service should not do.
            if attributes == ItemAttributes() {
                throw UsageError(message: "item update needs at least one filter, e.g. --service")
            }
        case .get, .delete:
            if attributes == ItemAttributes() {
                throw UsageError(
                    message: "item \(action.rawValue) needs at least one filter, e.g. --service")
            }
            if secretFD != nil || secretStdin {
                throw UsageError(message: "item \(action.rawValue) reads no secret")
            }
        case .list:
            break
        }
    }

    /// How the secret is read (`Terminal.read`): a new one, asked twice at a prompt.
    var secretValue: Terminal.Value {
        Terminal.Value(
            name: action == .add ? "secret" : "new secret", fdOption: "--secret-fd", isNew: true,
            allowEmpty: allowEmpty, raw: raw)
    }

    func run(_ context: Context) throws {
        let vault = try context.vault()
        let keychain = vault.keychain
        switch action {
        case .add:
            let secret = try Terminal.read(secretValue, fd: secretFD)
            let stored: ItemAttributes
            do {
                stored = try keychain.add(
                    itemClass ?? .genericPassword, attributes: attributes, data: secret)
            } catch let e as VaultError where e.code == .duplicateItem && addOrUpdate {
                // The item of this primary key, in the group the add went to (an add without
                // a group goes to the caller's default group, not to any group).
                var key = Self.primaryKey(itemClass ?? .genericPassword, attributes)
                if key.accessGroup == nil { key.accessGroup = vault.launch.defaultAccessGroup }
                var changes = attributes
                for k in ItemAttributes.StringAttribute.allCases where key[k] != nil {
                    changes[k] = nil
                }
                changes.accessGroup = nil
                changes.port = nil
                changes.synchronizable = nil
                _ = try keychain.update(
                    Query(itemClass ?? .genericPassword, key), attributes: changes, data: secret)
                if json {
                    print(
                        Self.json(
                            try keychain.copyMatching(
                                Query(itemClass ?? .genericPassword, key), returnAttributes: true)[
                                    0]
                        ).text)
                } else {
                    print("updated 1 item(s)")
                }
                return
            }
            if json { print(Self.jsonAttributes(stored).text) }
        case .get:
            let item = try keychain.copyMatching(
                Query(itemClass, attributes), returnData: !json, returnAttributes: json)[0]
            if json {
                print(Self.json(item).text)
            } else {
                Terminal.writeSecret(item.data ?? Data())
            }
        case .update, .delete:
            try changeMany(keychain)
        case .list:
            var items: [Item] = []
            var damaged: [JSON] = []
            do {
                (items, damaged) = try keychain.copyMatchingReportingDamage(
                    Query(itemClass, attributes, matchAll: true))
            } catch let e as VaultError
                where e.code == .itemNotFound || e.code == .notAvailableOnThisDevice
            {
                // Only items another device made match: none to list (they are counted below).
                items = []
            } catch let e as VaultError where e.code == .itemDamaged {
                damaged = e.parameters["items"]?.arrayValue ?? []
            }

            if json {
                print(JSON.array(items.map(Self.json)).text)
            } else {
                for item in items { print(Self.line(item)) }
                // What status counts but no list can show: said on stderr, so a script
                // reading the list is not misled either way.
                if let n = try? context.vault().status().unavailableItems, n > 0 {
                    FileHandle.standardError.write(
                        Data(
                            "vaultctl: \(n) ThisDeviceOnly item(s) made on another device are not available on this one and not listed (item delete with their attributes removes them; adding one anew replaces it)\n"
                                .utf8))
                }
            }
            // Damaged items (the store altered on disk) are not listed: named on stderr, and
            // the exit status is 1, once every readable item is listed.
            if !damaged.isEmpty {
                for d in damaged {
                    StandardOutput.writeError(
                        "vaultctl: damaged, not listed: \(Keychain.describeDamaged(d))\n")
                }
                throw Refusal(
                    message:
                        "\(damaged.count) damaged item(s) not listed (vaultctl doctor lists every one; item delete with their service or server and account removes them)"
                )
            }
        }
    }

    /// `item update` and `item delete`. The items the filters match are listed first; one is
    /// changed as SecItemUpdate/SecItemDelete would; several are listed and asked about on a
    /// terminal (`--yes`: not asked; no terminal and no `--yes`: refused, exit 1), then
    /// changed in one call with the same filters (a difference from the list is reported).
    /// `--dry-run` lists them and changes nothing.
    func changeMany(_ keychain: Keychain) throws {
        let verb = action == .delete ? "delete" : "update"
        var matched: [Item] = []
        var damaged: [JSON] = []
        do {
            (matched, damaged) = try keychain.copyMatchingReportingDamage(
                Query(itemClass, attributes, matchAll: true))
        } catch let e as VaultError where e.code == .itemDamaged && action == .delete {
            // Only damaged items match: a Delete may remove them (vaultd says whether).
            damaged = e.parameters["items"]?.arrayValue ?? []
        } catch let e as VaultError where e.code == .itemNotFound && dryRun {
            matched = []
        } catch let e as VaultError where e.code == .notAvailableOnThisDevice && !dryRun {
            // Items made on another device: vaultd cannot read their attributes to list them,
            // only delete them (or refuse their update); the call itself says what it did.
            matched = []
        }
        for d in damaged {
            StandardOutput.writeError("vaultctl: damaged: \(Keychain.describeDamaged(d))\n")
        }
        if dryRun {
            for item in matched { print("would \(verb) \(Self.line(item))") }
            print("dry run, nothing changed: \(matched.count) item(s) would be \(verb)d")
            return
        }
        let secret =
            action == .update && (secretFD != nil || secretStdin)
            ? try Terminal.read(secretValue, fd: secretFD) : nil
        if matched.count > 1 && !yes {
            let groups = Set(matched.compactMap { $0.attributes?.accessGroup }).count
            let list = matched.map { "  " + Self.line($0) }.joined(separator: "\n")
            let what = "item \(verb) matches \(matched.count) items in \(groups) access group(s)"
            guard Terminal.isTerminal(STDIN_FILENO) && Terminal.isTerminal(STDERR_FILENO) else {
                throw Refusal(
                    message:
                        "\(what); nothing was changed (give --yes to \(verb) them all, or filters that match one):\n\(list)"
                )
            }
            StandardOutput.writeError("\(what):\n\(list)\n")
            guard
                Terminal.confirm(
                    "\(verb.prefix(1).uppercased() + verb.dropFirst()) these \(matched.count) items? [y/N] "
                )
            else {
                throw Refusal(message: "nothing was changed")
            }
        }
        // One call with the filters, as SecItemUpdate/SecItemDelete: all or nothing (an
        // update that would make two items collide changes none).
        let n =
            action == .delete
            ? try keychain.delete(Query(itemClass, attributes))
            : try keychain.update(Query(itemClass, attributes), attributes: changes, data: secret)
        if n != matched.count && !matched.isEmpty && damaged.isEmpty {
            StandardOutput.writeError(
                "vaultctl: \(n) item(s) matched when \(verb)d, \(matched.count) when listed (items changed meanwhile)\n"
            )
        }
        print("\(verb)d \(n) item(s)")
    }

    /// The whole primary key of an item of class `c` with `a` (class, access group,
    /// synchronizable, account, and service or server, protocol, port, path, authentication
    /// type and security domain), each absent one as its empty value: a query matching that
    /// item alone.
    static func primaryKey(_ c: ItemClass, _ a: ItemAttributes) -> ItemAttributes {
        var k = ItemAttributes(
            accessGroup: a.accessGroup, synchronizable: a.synchronizable ?? false)
        k.account = a.account ?? ""
        switch c {
        case .genericPassword:
            k.service = a.service ?? ""
        case .internetPassword:
            k.server = a.server ?? ""
            k.protocol = a.protocol ?? ""
            k.port = a.port ?? 0
            k.path = a.path ?? ""
            k.authenticationType = a.authenticationType ?? ""
            k.securityDomain = a.securityDomain ?? ""
        }
        return k
    }

    static func json(_ item: Item) -> JSON {
        var o = jsonAttributes(item.attributes ?? ItemAttributes()).objectValue ?? [:]
        o["class"] = .string(item.itemClass.rawValue)
        return .object(o)
    }

    /// Attributes as `--json` prints them: the wire form, with `generic` as text when it is
    /// UTF-8 (as `--generic` takes it) and as `genericBase64` otherwise (as `--generic-base64`
    /// takes it), and dates to the microsecond at most (`2026-12-01T19:37:59.123456Z`).
    static func jsonAttributes(_ a: ItemAttributes) -> JSON {
        var o = a.json.objectValue ?? [:]
        if let g = a.generic {
            if let text = String(validating: Array(g), as: UTF8.self) {
                o["generic"] = .string(text)
            } else {
                o["generic"] = nil
                o["genericBase64"] = .string(g.base64EncodedString())
            }
        }
        if let d = a.creationDate { o["creationDate"] = .string(jsonDate(d)) }
        if let d = a.modificationDate { o["modificationDate"] = .string(jsonDate(d)) }
        return .object(o)
    }

    /// ISO 8601 UTC with at most six fraction digits (truncated to the microsecond, trailing
    /// zeros dropped): vaultd keeps a Double, whose exact decimal runs to 20 digits, which
    /// scripts' date parsers (Python's fromisoformat, jq) refuse.
    static func jsonDate(_ d: Date) -> String {
        let micros = (d.timeIntervalSinceReferenceDate * 1_000_000).rounded(.down)
        let whole = (micros / 1_000_000).rounded(.down)
        let fraction = Int(micros - whole * 1_000_000)
        var text = PlistDate.format(Date(timeIntervalSinceReferenceDate: whole))
        guard fraction > 0, text.hasSuffix("Z") else { return text }
        var digits = String(format: "%06d", fraction)
        while digits.hasSuffix("0") { digits.removeLast() }
        text.removeLast()
        return text + "." + digits + "Z"
    }

    /// One line per item: class, group, its class's primary key (service or server,
    /// protocol, port, path, account, authentication type, security domain), label,
    /// accessibility, and `synchronizable=yes` for a synchronizable one, so that two items
    /// never list alike. Values are escaped so a newline or NUL in one cannot break the listing.
    /// An item of the Secret Service (service `org.freedesktop.secrets`, whose account is its
    /// ID, the last element of its object path) ends with its lookup attributes, as a JSON
    /// object (`attributes={"user":"alice","xdg:schema":"…"}`): what its clients find it by.
    static func line(_ item: Item) -> String {
        let a = item.attributes ?? ItemAttributes()
        func show(_ s: String?) -> String { JSON.string(s ?? "").text }
        var tail =
            "label=\(show(a.label)) accessible=\(a.accessible?.rawValue ?? "")"
            + (a.synchronizable == true ? " synchronizable=yes" : "")
            + (a.accessControl.map { " accessControl=\($0.rawValue)" } ?? "")
        if let l = a.lookupAttributes {
            tail += " attributes=" + JSON.object(l.mapValues { .string($0) }).text
        }
        switch item.itemClass {
        case .genericPassword:
            return
                "generic  group=\(show(a.accessGroup)) service=\(show(a.service)) account=\(show(a.account)) \(tail)"
        case .internetPassword:
            return
                "internet group=\(show(a.accessGroup)) server=\(show(a.server)) protocol=\(show(a.protocol)) port=\(a.port ?? 0) path=\(show(a.path)) account=\(show(a.account)) authenticationType=\(show(a.authenticationType)) securityDomain=\(show(a.securityDomain)) \(tail)"
        }
    }
}
