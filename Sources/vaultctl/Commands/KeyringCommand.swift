import DesktopKeyring
import Foundation
import VaultClient
import VaultProtocol

/// `vaultctl keyring import|export ...`: the desktop keyring (Secret Service, through
/// libsecret) and the vault. Both directions are idempotent; secrets are never printed.
struct KeyringCommand: Command {
    enum Action: String, CaseIterable { case `import`, export }
    var action: Action
    var collection: String?
    var accessGroup: String?
    var dryRun: Bool
    var itemClass: ItemClass?
    var filters = ItemAttributes()
    /// `keyring export --all-groups`: apps' private groups too.
    var allGroups = false
    /// `keyring import --secret-service`: as items of vaultd's own Secret Service (its label
    /// and every attribute kept as they are), which the same clients then find once vaultd is
    /// the desktop's keyring.
    var asSecretService = false
    /// `--json`: one JSON object (the counts and each item's result) instead of the lines.
    var json = false
    /// Each item's result, for `--json`.
    final class Report {
        var results: [JSON] = []
    }
    let report = Report()

    init(_ a: inout Arguments) throws {
        action = try a.verb(of: "keyring")
        collection = try a.option("--collection")
        dryRun = a.flag("--dry-run")
        json = a.flag("--json")
        switch action {
        case .import:
            accessGroup = try a.option("--access-group")
            guard let g = accessGroup, !g.isEmpty else {
                throw UsageError(
                    message:
                        "keyring import needs --access-group G (the vault group the items go to)")
            }
            asSecretService = a.flag("--secret-service")
        case .export:
            switch a.positional(oneOf: ["generic", "internet"]) {
            case "internet": itemClass = .internetPassword
            case "generic": itemClass = .genericPassword
            default: itemClass = nil
            }
            filters = try ItemCommand.attributes(&a, prefix: "--")
            allGroups = a.flag("--all-groups")
            if allGroups && filters.accessGroup != nil {
                throw UsageError(message: "--all-groups and --access-group exclude each other")
            }
        }
    }

    func run(_ context: Context) throws {
        let keyring: DesktopKeyring
        do {
            // Unlocking a collection may show a prompt: give a person time to answer it.
            keyring = try DesktopKeyring(timeout: 120)
        } catch let e as KeyringError {
            throw KeyringFailure(e)
        }
        switch action {
        case .import: try importItems(keyring, context)
        case .export: try exportItems(keyring, context)
        }
    }

    /// The service of vaultd's Secret Service items (`Vault.secretServiceService`).
    static let secretServiceService = "org.freedesktop.secrets"

    /// Runs one write of one item; returns the vault's message when the vault refuses that item
    /// (`Param`, `SecretTooLarge`, `DuplicateItem`), nil when it was written. Other errors
    /// (locked, connection lost, ...) concern every item and are thrown.
    static func refusal(_ write: () throws -> Void) throws -> String? {
        do {
            try write()
            return nil
        } catch let e as VaultError
            where [.param, .secretTooLarge, .duplicateItem].contains(e.code)
        {
            return e.message
        }
    }

    static func describe(_ m: KeyringMapping.Mapped) -> String {
        describe(m.itemClass, m.attributes)
    }

    /// One line naming an item: class, group and key attributes, escaped (never the secret).
    static func describe(_ c: ItemClass, _ a: ItemAttributes) -> String {
        func show(_ s: String?) -> String { JSON.string(s ?? "").text }
        switch c {
        case .genericPassword:
            return
                "generic group=\(show(a.accessGroup)) service=\(show(a.service)) account=\(show(a.account))"
        case .internetPassword:
            return
                "internet group=\(show(a.accessGroup)) server=\(show(a.server)) protocol=\(show(a.protocol)) port=\(a.port ?? 0) path=\(show(a.path)) account=\(show(a.account))"
        }
    }

    // MARK: output

    /// One item's result: its line, or with `--json` its entry in `results`: `action` (add,
    /// update, unchanged, skip, fail), the keyring item's label (`from`, an import's), the
    /// vault item's class and key attributes (`item`), the label written (an export's) and why
    /// (`note`). Never a secret.
    func say(
        _ line: String, _ action: String, from: KeyringItem? = nil,
        item: (ItemClass, ItemAttributes)? = nil, label: String? = nil, note: String? = nil
    ) {
        guard json else {
            print(line)
            return
        }
        var o: JSONObject = ["action": .string(action)]
        if let from { o["from"] = .string(from.label) }
        if let item {
            let (c, a) = item
            var key = ItemCommand.primaryKey(c, a).json.objectValue ?? [:]
            key["class"] = .string(c.rawValue)
            o["item"] = .object(key)
        }
        if let label { o["label"] = .string(label) }
        if let note { o["note"] = .string(note) }
        report.results.append(.object(o))
    }

    /// `--json`'s object: the collection, whether it was a dry run, the item count, each count
    /// (`added`, `updated`, `unchanged`, `skipped`, `failed`) and each item's result.
    func summaryJSON(_ c: KeyringCollection, items: Int, counts: [String: Int]) -> JSON {
        summaryJSON(
            ImportOrigin(kind: "collection", label: c.label, path: c.path), items: items,
            counts: counts)
    }

    /// The same for any origin: `collection` is its label (a keyring's collection, a KeePassXC
    /// database's name, the password store's directory), `path` where it is; `source` the
    /// `vaultctl import` source, when it was one.
    func summaryJSON(_ c: ImportOrigin, items: Int, counts: [String: Int]) -> JSON {
        var o: JSONObject = [
            "collection": .string(c.label), "path": .string(c.path), "dryRun": .bool(dryRun),
            "items": JSON(items),
            "added": JSON(counts["add", default: 0]), "updated": JSON(counts["update", default: 0]),
            "unchanged": JSON(counts["unchanged", default: 0]),
            "skipped": JSON(counts["skip", default: 0]),
            "failed": JSON(counts["fail", default: 0]), "results": .array(report.results),
        ]
        if let source = c.source { o["source"] = .string(source) }
        return .object(o)
    }

    // MARK: export

    func exportItems(_ keyring: DesktopKeyring, _ context: Context) throws {
        let (items, damaged, appsOnly) = try exportedItems(context)
        var counts: [String: Int] = [:]
        for d in damaged {
            counts["fail", default: 0] += 1
            say(
                "cannot export \(Keychain.describeDamaged(d)) (vaultctl doctor lists damaged items)",
                "fail", note: "damaged: \(Keychain.describeDamaged(d))")
        }
        do {
            let target = try keyring.collection(named: collection)
            // A locked collection neither shows what it holds nor takes new items: a dry run
            // would only guess (the export itself fails, saying so).
            if dryRun && target.isLocked {
                throw KeyringError(
                    .locked,
                    "collection '\(target.label)' is locked: unlock it to see what an export would do"
                )
            }
            for item in items {
                guard let verb = try export(item, to: target, in: keyring) else { continue }
                counts[verb, default: 0] += 1
            }
            try reportExport(target, items: items.count, counts: counts, appsOnly: appsOnly)
        } catch let e as KeyringError {
            throw KeyringFailure(e)
        }
    }

    /// The items an export copies: every match of the filters with its secret, less those in
    /// apps' private groups unless a group or --all-groups is named (the exported copies are
    /// readable by every program of the user: without a group named, only the owner's own
    /// groups go, `user` and every group no registered app holds). Damaged items (the store
    /// altered on disk) are returned apart, to be named and counted as not exported; every
    /// other item still is. `appsOnly` counts the items left out for being in an app's group.
    private func exportedItems(_ context: Context) throws -> (
        items: [Item], damaged: [JSON], appsOnly: Int
    ) {
        let vault = try context.vault()
        var items: [Item] = []
        var damaged: [JSON] = []
        do {
            (items, damaged) = try vault.keychain.copyMatchingReportingDamage(
                Query(itemClass, filters, matchAll: true), returnData: true, returnAttributes: true)
        } catch let e as VaultError where e.code == .itemNotFound {
            items = []
        } catch let e as VaultError where e.code == .itemDamaged {
            damaged = e.parameters["items"]?.arrayValue ?? []
        }
        guard filters.accessGroup == nil && !allGroups else { return (items, damaged, 0) }
        var appGroups: ExactSet = []
        for app in try vault.apps.list() {
            for g in app.keychainAccessGroups where g != "user" {
                appGroups.insert(ExactString(g))
            }
        }
        let before = items.count
        items.removeAll { item in
            item.attributes?.accessGroup.map { appGroups.contains(ExactString($0)) } ?? false
        }
        return (items, damaged, before - items.count)
    }

    /// Exports one item into `target` (unless a dry run) and says what happened: returns the
    /// verb counted ("add", "update", "unchanged", "skip", "fail"), nil for an item without
    /// attributes or secret.
    private func export(
        _ item: Item, to target: KeyringCollection, in keyring: DesktopKeyring
    ) throws -> String? {
        guard let a = item.attributes, let data = item.data else { return nil }
        // A ThisDeviceOnly item is bound to this device's device.key and, as in Keychain
        // Services, never leaves it: a copy in the keyring (a file in the home directory,
        // which moves with it) would carry it anywhere, and back in as a migratable item.
        if let accessible = a.accessible, accessible.isThisDeviceOnly {
            say(
                "skip \(Self.describe(item.itemClass, a)): \(accessible.rawValue) items stay on this device",
                "skip", item: (item.itemClass, a),
                note: "\(accessible.rawValue) items stay on this device")
            return "skip"
        }
        // An item `keyring import` made goes back under the schema and attributes it came with
        // (kept in its `generic`), and an item of vaultd's Secret Service under its own (its
        // lookup attributes), so the program that wrote it (secret-tool, python keyring, git's
        // libsecret helper) finds it again, and the original, when still there, is the item
        // replaced; an item born in the vault is an `io.vaultd.Item` with its class and
        // primary key.
        let original =
            a.lookupAttributes.map { l in
                Dictionary(l.map { ($0.key, $0.value) }, uniquingKeysWith: { first, _ in first })
            }
            ?? KeyringMapping.originalAttributes(a.generic)
        let attributes = original ?? KeyringMapping.exportAttributes(item.itemClass, a)
        // libsecret cuts a string at a NUL byte: two items differing after it would become one
        // keyring entry with one of their secrets.
        if let bad = attributes.first(where: {
            $0.key.utf8.contains(0) || $0.value.utf8.contains(0)
        }) {
            let why =
                "its attribute \(JSON.string(bad.key).text) holds a NUL byte, which the Secret Service cannot carry"
            say(
                "cannot export \(Self.describe(item.itemClass, a)): \(why)", "fail",
                item: (item.itemClass, a), note: why)
            return "fail"
        }
        // Only the target collection counts: the same item exported into another one is not
        // this export's. Its label is part of what is exported, as the keyring keeps it
        // (`KeyringMapping.keyringLabel`), so an unchanged item compares equal.
        let label = KeyringMapping.keyringLabel(KeyringMapping.label(item.itemClass, a))
        let found =
            try original != nil
            ? keyring.search(attributes: attributes) : keyring.search(.item, attributes)
        let existing = found.first(where: target.holds)
        let verb =
            existing == nil
            ? "add"
            : existing?.secret == Array(data) && existing?.label.sameBytes(label) == true
                ? "unchanged" : "update"
        if verb != "unchanged" && !dryRun {
            // Stored as text/plain only when it is text (`DesktopKeyring.contentType(of:)`).
            if original != nil {
                try keyring.store(
                    attributes: attributes, label: label, secret: Array(data),
                    collection: target.path)
            } else {
                try keyring.store(
                    .item, attributes, label: label, secret: Array(data), collection: target.path)
            }
        }
        let schema = original.map { " as \($0["xdg:schema"] ?? "its original attributes")" } ?? ""
        say(
            "\(dryRun && verb != "unchanged" ? "would \(verb)" : verb) \(Self.describe(item.itemClass, a))\(schema)",
            verb, item: (item.itemClass, a), label: label)
        return verb
    }

    /// The export's summary line (or JSON), and its failure when an item was not exported.
    private func reportExport(
        _ target: KeyringCollection, items: Int, counts: [String: Int], appsOnly: Int
    ) throws {
        let failed = counts["fail", default: 0]
        var summary =
            "\(counts["add", default: 0]) added, \(counts["update", default: 0]) updated, \(counts["unchanged", default: 0]) unchanged, \(counts["skip", default: 0]) skipped"
        if failed > 0 { summary += ", \(failed) not exported" }
        if json {
            var o = summaryJSON(target, items: items, counts: counts).objectValue ?? [:]
            o["appGroupItems"] = JSON(appsOnly)
            print(JSON.object(o).text)
        } else {
            print(
                "\(dryRun ? "dry run, nothing changed: " : "")collection \(JSON.string(target.label).text), \(items) item(s): \(summary)"
            )
            if appsOnly > 0 {
                print(
                    "\(appsOnly) item(s) in apps' private groups not exported (give --access-group G or --all-groups)"
                )
            }
        }
        if failed > 0 {
            throw KeyringError(
                .failed,
                "\(failed) item(s) \(dryRun ? "could not be" : "were not") exported (the lines \"cannot export\" say why)"
            )
        }
    }
}

/// A keyring failure as vaultctl reports it: exit 36 (`ExitCode.locked`) for a collection
/// that stays locked, else 1.
struct KeyringFailure: Error, CustomStringConvertible {
    var error: KeyringError
    init(_ e: KeyringError) { error = e }
    var description: String { "keyring: \(error.message)" }
    var exitCode: ExitCode { error.kind == .locked ? .locked : .failure }
}

/// How keyring items become vault items and back.
enum KeyringMapping {
    struct Mapped {
        var itemClass: ItemClass
        /// Primary key, access group and all: what the vault stores.
        var attributes: ItemAttributes
        /// An `io.vaultd.Item` (written by `keyring export`), not a foreign item.
        var exported = false
        /// The exact primary key (every key attribute set) to find the item again.
        var primaryKey: ItemAttributes { ItemCommand.primaryKey(itemClass, attributes) }
    }

    static let unlockSchema = "io.vaultd.Unlock"
    static let itemSchema = "io.vaultd.Item"
    static let genericSchema = "org.freedesktop.Secret.Generic"

    /// Which keyring attributes an internet password's attributes are read from (the first
    /// present of each list); `server`, `protocol` and `port` are named so everywhere.
    struct InternetSchema {
        var path: [String]
        var account: [String]
        var securityDomain: [String] = []
        var authenticationType: [String] = []
    }

    /// The internet-password schemas, by `xdg:schema`: git-credential-libsecret's, and
    /// libsecret's network password (`SECRET_SCHEMA_COMPAT_NETWORK`, gnome-keyring's
    /// network items: user, domain, object, server, protocol, port, authtype).
    static let internetSchemas: [String: InternetSchema] = [
        "org.git.Password": InternetSchema(path: ["object"], account: ["user"]),
        "org.gnome.keyring.NetworkPassword": InternetSchema(
            path: ["object"], account: ["user"], securityDomain: ["domain"],
            authenticationType: ["authtype"]),
    ]

    /// An item with no known schema but `server` and `protocol` (e.g. `secret-tool store
    /// server S protocol P user U path /p`): the plain names first, then the schemas' names
    /// (their writers may leave `xdg:schema` out).
    static let unnamedInternetSchema = InternetSchema(
        path: ["path", "object"], account: ["user", "username", "account"],
        securityDomain: ["domain"], authenticationType: ["authtype"])

    /// Maps one keyring item; nil for items that must not be imported (vaultd's own unlock
    /// secret). Conventions:
    /// - `io.vaultd.Item` (our export): its class and primary key;
    /// - an internet-password schema (`internetSchemas`), or no known schema with `server` +
    ///   `protocol` (`unnamedInternetSchema`): an internet password: server, protocol, port,
    ///   and path, account, security domain, authentication type as the schema names them;
    /// - secret-tool / python keyring (`service` with `username`, `user` or `account`): a
    ///   generic password;
    /// - anything else: `fallback`.
    /// The full attribute set and schema are kept in `generic` (JSON, with the item's
    /// `modified`, which tells a later import whether the keyring item changed), the label as label.
    static func map(_ entry: ImportEntry, accessGroup: String) -> Mapped? {
        let item = entry.item
        let a = item.attributes
        let schema = item.schema ?? a["xdg:schema"]
        if schema == unlockSchema { return nil }
        var out = ItemAttributes(accessGroup: accessGroup)
        var cls = ItemClass.genericPassword
        if schema == itemSchema, let c = a["class"].flatMap(ItemClass.init(rawValue:)) {
            cls = c
            // An item vaultd exported maps back to its own group, where the vault's copy is
            // the reference (`importOne` takes the import's group instead when the vault no
            // longer holds the item there).
            if let g = a["access-group"], !g.isEmpty { out.accessGroup = g }
            // Part of the primary key (docs/keychain.md), as `exportAttributes` writes it.
            if a["synchronizable"] == "true" { out.synchronizable = true }
            out.account = a["account"]
            switch c {
            case .genericPassword:
                out.service = a["service"]
            case .internetPassword:
                out.server = a["server"]
                out.protocol = a["protocol"]
                out.port = a["port"].flatMap { Int($0) }.flatMap {
                    (0...65535).contains($0) ? $0 : nil
                }
                out.path = a["path"]
                out.authenticationType = a["authentication-type"]
                out.securityDomain = a["security-domain"]
            }
            let l = item.label
            if !l.isEmpty && !l.sameBytes(label(c, out)) { out.label = l }
            return Mapped(itemClass: cls, attributes: out, exported: true)
        } else if let internet = schema.flatMap({ internetSchemas[$0] })
            ?? (a["server"] != nil && a["protocol"] != nil && a["service"] == nil
                ? unnamedInternetSchema : nil)
        {
            func first(_ names: [String]) -> String? { names.lazy.compactMap { a[$0] }.first }
            cls = .internetPassword
            out.server = a["server"] ?? ""
            out.protocol = a["protocol"]
            if let p = a["port"].flatMap({ Int($0) }), (1...65535).contains(p) { out.port = p }
            out.path = first(internet.path)
            out.account = first(internet.account)
            out.securityDomain = first(internet.securityDomain)
            out.authenticationType = first(internet.authenticationType)
        } else if let service = a["service"] {
            out.service = service
            out.account = a["username"] ?? a["user"] ?? a["account"]
        } else {
            return fallback(entry, accessGroup: accessGroup)
        }
        return finish(Mapped(itemClass: cls, attributes: out), entry)
    }

    /// Items that follow no known convention (or whose key is taken): a generic password with
    /// service = the schema and account = every attribute, as `k=v&k=v` (sorted, escaped).
    static func fallback(_ entry: ImportEntry, accessGroup: String) -> Mapped {
        let item = entry.item
        let schema = item.schema ?? item.attributes["xdg:schema"] ?? genericSchema
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~:/@")
        func esc(_ s: String) -> String {
            s.addingPercentEncoding(withAllowedCharacters: allowed) ?? s
        }
        let account = item.attributes.filter { $0.key != "xdg:schema" }.sortedByKey()
            .map { "\(esc($0.key))=\(esc($0.value))" }.joined(separator: "&")
        return finish(
            Mapped(
                itemClass: .genericPassword,
                attributes: ItemAttributes(
                    service: schema, account: account, accessGroup: accessGroup)), entry)
    }

    private static func finish(_ m: Mapped, _ entry: ImportEntry) -> Mapped {
        let item = entry.item
        var m = m
        if !item.label.isEmpty { m.attributes.label = item.label }
        if let c = entry.comment, !c.isEmpty { m.attributes.comment = c }
        var source: JSONObject = [
            "attributes": .object(item.attributes.mapValues { JSON.string($0) })
        ]
        if let s = item.schema { source["schema"] = .string(s) }
        if let id = entry.id { source["id"] = .string(id) }
        // Whole seconds: a change later in the same second would keep the same `modified`,
        // so one of this very second is not recorded (the next import records it).
        if item.modified > 0 && item.modified < UInt64(Date().timeIntervalSince1970) {
            source["modified"] = JSON(item.modified)
        }
        m.attributes.generic = Data(JSON.object(["secretService": .object(source)]).serialized())
        return m
    }

    /// The keyring attributes an imported item came from (what `finish` kept in `generic`),
    /// less `xdg:schema`, which gnome-keyring reports for an item only once it has reloaded
    /// its file: the identity of a keyring item across imports.
    /// Compared byte for byte (names and values), as the keyring compares them.
    /// An entry with an `id` of its own (a KeePassXC entry's UUID, a pass file's path) is
    /// that id instead: its attributes may change and it stays the same entry.
    static func source(_ generic: Data?) -> JSONObject? {
        guard let g = generic, let j = try? JSON.parse(Array(g)),
            let a = j["secretService"]?["attributes"]?.objectValue
        else { return nil }
        if let id = j["secretService"]?["id"]?.stringValue { return ["id": .string(id)] }
        var out = a.filter { $0.value.stringValue != nil }
        out["xdg:schema"] = nil
        return out
    }

    /// Every attribute of the keyring item an imported item came from, `xdg:schema` included,
    /// as `finish` kept them in `generic`: what `keyring export` writes it back under. nil for
    /// an item that did not come from an import.
    static func originalAttributes(_ generic: Data?) -> [String: String]? {
        guard let g = generic, let j = try? JSON.parse(Array(g)),
            let a = j["secretService"]?["attributes"]?.objectValue
        else { return nil }
        var out: [String: String] = [:]
        for (k, v) in a { if let s = v.stringValue { out[k] = s } }
        return out.isEmpty ? nil : out
    }

    /// The keyring item's `modified` (seconds since 1970, as the Secret Service reports it)
    /// when it was last imported, as `finish` recorded it in `generic`; nil when not recorded.
    static func modified(_ generic: Data?) -> UInt64? {
        guard let g = generic, let j = try? JSON.parse(Array(g)) else { return nil }
        return j["secretService"]?["modified"]?.uint64Value
    }

    /// The `io.vaultd.Item` attributes of a vault item: class, group and the whole primary key.
    static func exportAttributes(_ c: ItemClass, _ a: ItemAttributes) -> [String: String] {
        var out: [String: String] = [
            "class": c.rawValue, "access-group": a.accessGroup ?? "",
            "synchronizable": (a.synchronizable ?? false) ? "true" : "false",
            "account": a.account ?? "",
        ]
        switch c {
        case .genericPassword:
            out["service"] = a.service ?? ""
        case .internetPassword:
            out["server"] = a.server ?? ""
            out["protocol"] = a.protocol ?? ""
            out["port"] = String(a.port ?? 0)
            out["path"] = a.path ?? ""
            out["authentication-type"] = a.authenticationType ?? ""
            out["security-domain"] = a.securityDomain ?? ""
        }
        return out
    }

    /// A label as the Secret Service can carry it: libsecret passes it as a C string, cut at
    /// its first NUL, so each NUL is written as U+2400 (␀) instead. The whole label reaches the
    /// keyring, and an export of an unchanged item finds it equal (the label cut short differed
    /// every time, so each export updated the item again).
    static func keyringLabel(_ label: String) -> String {
        guard label.utf8.contains(0) else { return label }
        var out = String.UnicodeScalarView()
        for c in label.unicodeScalars { out.append(c == "\u{0}" ? "\u{2400}" : c) }
        return String(out)
    }

    static func label(_ c: ItemClass, _ a: ItemAttributes) -> String {
        if let l = a.label, !l.isEmpty { return l }
        let who = (a.account ?? "").isEmpty ? "" : "\(a.account!) on "
        switch c {
        case .genericPassword: return "\(who)\(a.service ?? "")"
        case .internetPassword:
            return "\(who)\(a.protocol.map { "\($0)://" } ?? "")\(a.server ?? "")"
        }
    }
}

/// `vaultctl forget`: removes the passphrase `unlock --remember` stored in the login keyring.
struct ForgetCommand: Command {
    init(_ a: inout Arguments) throws {}

    func run(_ context: Context) throws {
        guard let dir = try context.vault().status().dataDirectory else {
            throw UsageError(message: "vaultd did not say which data directory it serves")
        }
        do {
            let keyring = try DesktopKeyring(timeout: 30)
            // A locked keyring keeps its items: clearing would remove nothing and say so.
            if try keyring.search(.unlock, ["vault": dir], loadSecrets: false).contains(
                where: \.isLocked)
            {
                throw KeyringError(
                    .locked,
                    "the login keyring is locked, so the passphrase remembered in it cannot be removed: unlock the keyring, then run vaultctl forget again"
                )
            }
            let removed = try keyring.clear(.unlock, ["vault": dir])
            if try !keyring.search(.unlock, ["vault": dir], loadSecrets: false).isEmpty {
                throw KeyringError(
                    .failed, "the keyring kept the passphrase remembered for this vault")
            }
            print(
                removed
                    ? "the passphrase is no longer remembered in the login keyring"
                    : "no passphrase was remembered for this vault")
        } catch let e as KeyringError {
            throw KeyringFailure(e)
        }
    }
}

/// Remembering the vault passphrase in the login keyring (used by `unlock --remember`).
enum RememberedPassphrase {
    /// After `passphrase change` or `remove`: a passphrase remembered for this vault is
    /// replaced by the new one, or removed. Best effort, never unlocking the keyring; a
    /// failure is reported, not fatal (the passphrase itself has changed).
    static func follow(newPassphrase: String?, dataDirectory: String) {
        guard DesktopKeyring.sessionBusConfigured() else { return }
        do {
            let keyring = try DesktopKeyring(timeout: 30)
            let found = try keyring.search(.unlock, ["vault": dataDirectory], loadSecrets: false)
            guard !found.isEmpty else { return }
            if let new = newPassphrase {
                let collection = (try? keyring.collection(named: "login")) != nil ? "login" : nil
                try keyring.store(
                    .unlock, ["vault": dataDirectory],
                    label: "vaultd unlock passphrase (\(dataDirectory))", secret: Array(new.utf8),
                    collection: collection)
                print("the passphrase remembered in the login keyring was updated")
            } else {
                try keyring.clear(.unlock, ["vault": dataDirectory])
                print("the passphrase remembered in the login keyring was removed")
            }
        } catch {
            printError(
                "the passphrase remembered in the login keyring could not be updated (\(error)); run vaultctl forget or unlock --remember"
            )
        }
    }

    static func store(_ passphrase: String, dataDirectory: String) throws {
        do {
            let keyring = try DesktopKeyring(timeout: 120)
            // gnome-keyring's login keyring has the alias "login"; elsewhere use the default.
            let login = (try? keyring.collection(named: "login")) != nil ? "login" : nil
            try keyring.store(
                .unlock, ["vault": dataDirectory],
                label: "vaultd unlock passphrase (\(dataDirectory))",
                secret: Array(passphrase.utf8),
                collection: login)
        } catch let e as KeyringError {
            throw KeyringFailure(e)
        }
    }
}
