import Foundation
import VaultCore
import VaultProtocol

extension Dispatcher {
    /// One call as a handler receives it: its parameters (already checked against the
    /// method's declaration), the caller, and what the server lends the call.
    struct Request {
        let method: String
        let p: Parameters
        let session: VaultSession
        /// The call's secrets and where its reply's go (`handle`); nil for a stream.
        let secrets: CallSecrets?
        /// Where a reply that grows with the store reserves its memory (`handle`, `subscribe`).
        let reply: ReplyReserving?
        /// Where a stream's events go once the policy showed them to the caller (`subscribe`:
        /// the server's relay); nothing for other calls.
        var events: @Sendable (VaultEvent) -> Void = { _ in }
    }

    /// How a method is served.
    enum Route: Sendable {
        /// One reply (`handle`).
        case call(@Sendable (Dispatcher, Request) throws -> JSONObject)
        /// Replies streamed to a call made with `more` (`subscribe`); without `more`, ExpectedMore.
        case stream(@Sendable (Dispatcher, Request) throws -> Subscription)
    }

    struct Entry: Sendable {
        let route: Route
        /// The call only looks and does not count as activity: a status poller (a panel
        /// applet, a script waiting for a state) must not keep the vault unlocked forever.
        /// Hello too: every VaultClient connection (each `vaultctl status`) says it first,
        /// and saying who one is uses nothing in the vault.
        var passive = false
    }

    /// The dispatch table: every method the interface descriptions declare (`VarlinkMethod`,
    /// which a test holds to them) and its handler. Built from an exhaustive `switch`, so a
    /// method declared but not handled does not compile; one handled but not declared has no
    /// `VarlinkMethod` case to be keyed by. Joined with the policy's table only to refuse a
    /// method it has no decision for (`requirePolicyDecision`): the engine authorizes.
    static let table: [String: Entry] = Dictionary(
        uniqueKeysWithValues: VarlinkMethod.allCases.map { ($0.name, entry($0)) })

    /// Methods that stream replies and must be called with `more`.
    static let streamingMethods: Set<String> = Set(
        table.compactMap { if case .stream = $0.value.route { $0.key } else { nil } })

    static func entry(_ method: VarlinkMethod) -> Entry {
        switch method {
        case .serviceGetInfo: Entry(route: .call { try $0.serviceGetInfo($1) }, passive: true)
        case .serviceGetInterfaceDescription:
            Entry(route: .call { try $0.serviceGetInterfaceDescription($1) }, passive: true)

        case .vaultHello: Entry(route: .call { try $0.vaultHello($1) }, passive: true)
        case .vaultStatus: Entry(route: .call { try $0.vaultStatus($1) }, passive: true)
        case .vaultInit: Entry(route: .call { try $0.vaultInit($1) })
        case .vaultUnlock: Entry(route: .call { try $0.vaultUnlock($1) })
        case .vaultUnlockFromKeyring: Entry(route: .call { try $0.vaultUnlockFromKeyring($1) })
        case .vaultLock: Entry(route: .call { try $0.vaultLock($1) })
        case .vaultChangePassphrase: Entry(route: .call { try $0.vaultChangePassphrase($1) })
        case .vaultCreateRecoveryKey: Entry(route: .call { try $0.vaultCreateRecoveryKey($1) })
        case .vaultRemoveRecoveryKey: Entry(route: .call { try $0.vaultRemoveRecoveryKey($1) })
        case .vaultUnlockWithRecoveryKey:
            Entry(route: .call { try $0.vaultUnlockWithRecoveryKey($1) })
        case .vaultResetPassphrase: Entry(route: .call { try $0.vaultResetPassphrase($1) })
        case .vaultObserve: Entry(route: .stream { try $0.vaultObserve($1) })
        case .vaultBackup: Entry(route: .call { try $0.vaultBackup($1) })
        case .vaultRestore: Entry(route: .call { try $0.vaultRestore($1) })
        case .vaultCheck: Entry(route: .call { try $0.vaultCheck($1) })

        case .keychainAdd: Entry(route: .call { try $0.keychainAdd($1) })
        case .keychainCopyMatching: Entry(route: .call { try $0.keychainCopyMatching($1) })
        case .keychainUpdate: Entry(route: .call { try $0.keychainUpdate($1) })
        case .keychainDelete: Entry(route: .call { try $0.keychainDelete($1) })
        case .keychainListAccess: Entry(route: .call { try $0.keychainListAccess($1) })
        case .keychainGrantAccess: Entry(route: .call { try $0.keychainGrantAccess($1) })
        case .keychainRevokeAccess: Entry(route: .call { try $0.keychainRevokeAccess($1) })

        case .preferencesGet: Entry(route: .call { try $0.preferencesGet($1) })
        case .preferencesSet: Entry(route: .call { try $0.preferencesSet($1) })
        case .preferencesRemove: Entry(route: .call { try $0.preferencesRemove($1) })
        case .preferencesDomain: Entry(route: .call { try $0.preferencesDomain($1) })
        case .preferencesDomains: Entry(route: .call { try $0.preferencesDomains($1) })
        case .preferencesImport: Entry(route: .call { try $0.preferencesImport($1) })
        case .preferencesExport: Entry(route: .call { try $0.preferencesExport($1) })
        case .preferencesObserve: Entry(route: .stream { try $0.preferencesObserve($1) })
        case .preferencesRemoveDomain: Entry(route: .call { try $0.preferencesRemoveDomain($1) })

        case .cachesDirectory: Entry(route: .call { try $0.cachesDirectory($1) })
        case .cachesUsage: Entry(route: .call { try $0.cachesUsage($1) })
        case .cachesPurge: Entry(route: .call { try $0.cachesPurge($1) })
        case .cachesObserve: Entry(route: .stream { try $0.cachesObserve($1) })

        case .appsInstall: Entry(route: .call { try $0.appsInstall($1) })
        case .appsUninstall: Entry(route: .call { try $0.appsUninstall($1) })
        case .appsList: Entry(route: .call { try $0.appsList($1) })
        case .appsShow: Entry(route: .call { try $0.appsShow($1) })

        case .syncInit: Entry(route: .call { try $0.syncInit($1) })
        case .syncJoin: Entry(route: .call { try $0.syncJoin($1) })
        case .syncApprove: Entry(route: .call { try $0.syncApprove($1) })
        case .syncStatus: Entry(route: .call { try $0.syncStatus($1) }, passive: true)
        case .syncLeave: Entry(route: .call { try $0.syncLeave($1) })
        case .syncRemove: Entry(route: .call { try $0.syncRemove($1) })
        case .syncConflicts: Entry(route: .call { try $0.syncConflicts($1) })
        case .syncRestoreConflict:
            Entry(route: .call { try $0.syncSettleConflict($1, restore: true) })
        case .syncDismissConflict:
            Entry(route: .call { try $0.syncSettleConflict($1, restore: false) })
        }
    }
}

// The handlers, one per method, in the order of the interface descriptions.
extension Dispatcher {
    // org.varlink.service.GetInfo
    func serviceGetInfo(_ r: Request) throws -> JSONObject {
        return [
            "vendor": "vaultd", "product": "vaultd", "version": .string(Self.version),
            "url": "https://github.com/vaultd/vaultd",
            "interfaces": .array(VarlinkInterfaces.all.map { .string($0.name) }),
        ]
    }

    // org.varlink.service.GetInterfaceDescription
    func serviceGetInterfaceDescription(_ r: Request) throws -> JSONObject {
        let p = r.p
        let name = try p.string("interface")
        guard let d = VarlinkInterfaces.description(of: name) else {
            throw VaultError(
                .interfaceNotFound, "no interface \(name)", extra: ["interface": .string(name)])
        }
        return ["description": .string(d)]
    }

    // io.vaultd.Vault.Hello
    func vaultHello(_ r: Request) throws -> JSONObject {
        let session = r.session
        let (firstLaunch, wiped) = try session.hello()
        return [
            "appID": session.appID.map { .string($0) } ?? .null,
            "generation": session.caller.generation.map { .string($0) } ?? .null,
            "firstLaunch": .bool(firstLaunch), "wipedCredentials": JSON(wiped),
            "defaultAccessGroup": .string(session.defaultAccessGroup),
            "unavailableItems": JSON(try session.unavailableItems()),
        ]
    }

    // io.vaultd.Vault.Status
    func vaultStatus(_ r: Request) throws -> JSONObject {
        let session = r.session
        var s = try session.status().wire
        s["version"] = .string(Self.version)
        return s
    }

    // io.vaultd.Vault.Init
    func vaultInit(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        return [
            "lock": try session.initialize(passphrase: try p.passphrase("passphrase"))
                .wire
        ]
    }

    // io.vaultd.Vault.Unlock
    func vaultUnlock(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        guard let pass = try p.passphrase("passphrase") else {
            throw VaultError.invalidParameter("passphrase", "missing")
        }
        return ["lock": try session.unlock(passphrase: pass).wire]
    }

    // io.vaultd.Vault.UnlockFromKeyring
    func vaultUnlockFromKeyring(_ r: Request) throws -> JSONObject {
        let session = r.session
        return ["lock": try KeyringUnlock.unlock(vault, session: session, timeout: 5).wire]
    }

    // io.vaultd.Vault.Lock
    func vaultLock(_ r: Request) throws -> JSONObject {
        let session = r.session
        return ["lock": try session.lock().wire]
    }

    // io.vaultd.Vault.ChangePassphrase
    func vaultChangePassphrase(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        let change = try session.changePassphrase(
            old: try p.passphrase("old"), new: try p.passphrase("new"))
        return ["lock": change.lock.wire, "deletedItems": JSON(change.deletedItems)]
    }

    // io.vaultd.Vault.CreateRecoveryKey
    func vaultCreateRecoveryKey(_ r: Request) throws -> JSONObject {
        guard let pass = try r.p.passphrase("passphrase") else {
            throw VaultError.invalidParameter("passphrase", "missing")
        }
        let key = try r.session.createRecoveryKey(passphrase: pass)
        // Written into the reply only as it is sent (`CallSecrets`), never kept in a String.
        return [
            "recoveryKey": r.secrets?.replyPlaceholder(for: key)
                ?? .string(key.withUnsafeBytes { Data($0).base64EncodedString() })
        ]
    }

    // io.vaultd.Vault.RemoveRecoveryKey
    func vaultRemoveRecoveryKey(_ r: Request) throws -> JSONObject {
        try r.session.removeRecoveryKey()
        return [:]
    }

    // io.vaultd.Vault.UnlockWithRecoveryKey
    func vaultUnlockWithRecoveryKey(_ r: Request) throws -> JSONObject {
        guard let key = try r.p.passphrase("recoveryKey") else {
            throw VaultError.invalidParameter("recoveryKey", "missing")
        }
        return ["lock": try r.session.unlock(recoveryKey: key).wire]
    }

    // io.vaultd.Vault.ResetPassphrase
    func vaultResetPassphrase(_ r: Request) throws -> JSONObject {
        guard let key = try r.p.passphrase("recoveryKey") else {
            throw VaultError.invalidParameter("recoveryKey", "missing")
        }
        guard let new = try r.p.passphrase("new") else {
            throw VaultError.invalidParameter("new", "missing")
        }
        return [
            "lock": try r.session.resetPassphrase(recoveryKey: key, new: new).wire
        ]
    }

    // io.vaultd.Vault.Backup
    func vaultBackup(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        let passphrase = try p.passphrase("passphrase")
        var recipients: [Age.Recipient]
        if let list = p.optionalJSON("recipients") {
            guard let a = list.arrayValue, a.allSatisfy({ $0.stringValue != nil }), !a.isEmpty
            else {
                throw VaultError.invalidParameter(
                    "recipients", "must be a non-empty array of age1… strings")
            }
            recipients = try a.compactMap(\.stringValue).map { .x25519(try Age.parseRecipient($0)) }
            if passphrase != nil {
                throw VaultError.invalidParameter(
                    "passphrase", "give either a passphrase or recipients, not both")
            }
        } else {
            guard let passphrase, passphrase.count > 0 else {
                throw VaultError.invalidParameter(
                    "passphrase", "give a backup passphrase or recipients")
            }
            recipients = [.passphrase(passphrase)]
        }
        let summary = try session.backup(
            to: try p.string("path"), recipients: recipients,
            includeDeviceBound: try p.optionalBool("includeDeviceBound") ?? false)
        return summary.wire
    }

    // io.vaultd.Vault.Check
    func vaultCheck(_ r: Request) throws -> JSONObject {
        try r.session.checkStore().wire
    }

    // io.vaultd.Vault.Restore
    func vaultRestore(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        var identities: [Age.Identity] = []
        if let pass = try p.passphrase("passphrase") { identities.append(.passphrase(pass)) }
        if let text = try p.passphrase("identity") {
            identities += try Age.parseIdentities(text).map { .x25519($0) }
        }
        guard !identities.isEmpty else {
            throw VaultError.invalidParameter(
                "passphrase", "give the backup's passphrase or an identity")
        }
        let summary = try session.restore(
            from: try p.string("path"), identities: identities,
            newPassphrase: try p.passphrase("newPassphrase"),
            merge: try p.optionalBool("merge") ?? false)
        return summary.wire
    }

    // io.vaultd.Keychain.Add
    func keychainAdd(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        let cls = try ItemClass(wire: try p.string("class"))
        let attrs = try ItemAttributes(json: try p.json("attributes"))
        let stored = try session.addItem(
            cls, attributes: attrs, secret: try p.secret("data"))
        return ["attributes": stored.json]
    }

    // io.vaultd.Keychain.CopyMatching
    func keychainCopyMatching(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        let q = try query(p)
        let returnData = try p.optionalBool("returnData") ?? false
        let returnAttributes = try p.optionalBool("returnAttributes") ?? !returnData
        let matches = try session.copyMatchingReportingDamage(
            q, returnData: returnData)
        var reply: JSONObject = [
            "items": .array(
                matches.items.map { item in
                    var o: JSONObject = ["class": .string(item.itemClass.rawValue)]
                    if returnAttributes { o["attributes"] = item.attributes.json }
                    if let d = item.data {
                        o["data"] =
                            r.secrets?.replyPlaceholder(for: d)
                            ?? .string(d.withUnsafeBytes { Data($0).base64EncodedString() })
                    }
                    return .object(o)
                })
        ]
        // At most 1,000 named: a store damaged throughout must not make a reply past the limit.
        if !matches.damaged.isEmpty { reply["damaged"] = DamagedItem.wire(matches.damaged) }
        return reply
    }

    // io.vaultd.Keychain.Update
    func keychainUpdate(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        let changes = try ItemAttributes(json: p.optionalJSON("attributes"))
        let n = try session.updateItems(
            try query(p), changes: changes, secret: try p.optionalSecret("data"))
        return ["count": JSON(n)]
    }

    // io.vaultd.Keychain.Delete
    func keychainDelete(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        return ["count": JSON(try session.deleteItems(try query(p)))]
    }

    // io.vaultd.Keychain.ListAccess
    func keychainListAccess(_ r: Request) throws -> JSONObject {
        ["grants": .array(try r.session.accessGrants().map(\.wire))]
    }

    // io.vaultd.Keychain.GrantAccess
    func keychainGrantAccess(_ r: Request) throws -> JSONObject {
        let p = r.p
        let program = try PeerIdentity.program(
            path: try p.string("program"), script: try p.optionalString("script"))
        let q = ItemQuery(
            itemClass: try p.itemClass("class"),
            attributes: try ItemAttributes(json: p.optionalJSON("query")), matchAll: true)
        return ["count": JSON(try r.session.grantAccess(q, to: program))]
    }

    // io.vaultd.Keychain.RevokeAccess
    func keychainRevokeAccess(_ r: Request) throws -> JSONObject {
        let p = r.p
        let named = try p.optionalJSON("query")
        let cls = try p.itemClass("class")
        let q =
            named == nil && cls == nil
            ? nil
            : ItemQuery(itemClass: cls, attributes: try ItemAttributes(json: named), matchAll: true)
        let n = try r.session.revokeAccess(
            q, programPath: try p.optionalString("program"), script: try p.optionalString("script"))
        return ["count": JSON(n)]
    }

    // io.vaultd.Preferences.Get
    func preferencesGet(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        let value = try session.preference(
            domain: try p.optionalString("domain"), key: try p.string("key"), reply: r.reply)
        return ["value": value?.tagged ?? .null]
    }

    // io.vaultd.Preferences.Set
    func preferencesSet(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        let n = try session.setPreference(
            domain: try p.optionalString("domain"), key: try p.string("key"),
            value: try PlistValue(tagged: try p.json("value")))
        return ["sequence": JSON(n)]
    }

    // io.vaultd.Preferences.Remove
    func preferencesRemove(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        let n = try session.removePreference(
            domain: try p.optionalString("domain"), key: try p.string("key"))
        return ["sequence": JSON(n)]
    }

    // io.vaultd.Preferences.Domain
    func preferencesDomain(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        let found = try session.preferenceDomainReportingDamage(
            try p.optionalString("domain"), reply: r.reply)
        var reply: JSONObject = ["values": .object(found.values.mapValues(\.tagged))]
        if !found.damaged.isEmpty { reply["damaged"] = .array(found.damaged.map { .string($0) }) }
        return reply
    }

    // io.vaultd.Preferences.Domains
    func preferencesDomains(_ r: Request) throws -> JSONObject {
        let session = r.session
        return ["domains": .array(try session.preferenceDomains().map { .string($0) })]
    }

    // io.vaultd.Preferences.Import
    func preferencesImport(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        let domain = try p.string("domain")
        switch (try p.optionalString("plist"), p.optionalJSON("values")) {
        case (let text?, nil):
            guard let data = Data(base64Encoded: text) else {
                throw VaultError.invalidParameter("plist", "must be base64")
            }
            return ["keys": JSON(try session.importDomain(domain, plist: data))]
        case (nil, let json?):
            guard let object = json.objectValue else {
                throw VaultError.invalidParameter("values", "must be an object of tagged values")
            }
            return [
                "keys": JSON(
                    try session.importDomain(
                        domain, values: try object.mapValues { try PlistValue(tagged: $0) }))
            ]
        default:
            throw VaultError.invalidParameter("plist", "give either plist or values")
        }
    }

    // io.vaultd.Preferences.Export
    func preferencesExport(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        let domain = try p.string("domain")
        let format = try p.optionalString("format") ?? "xml"
        guard let f = PropertyListCodec.Format(rawValue: format) else {
            throw VaultError.invalidParameter("format", "must be xml or binary")
        }
        let export = try session.exportDomainReportingDamage(
            domain, format: f, reply: r.reply)
        var reply: JSONObject = ["plist": .string(export.plist.base64EncodedString())]
        if !export.damaged.isEmpty { reply["damaged"] = .array(export.damaged.map { .string($0) }) }
        return reply
    }

    // io.vaultd.Preferences.RemoveDomain
    func preferencesRemoveDomain(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        return ["keys": JSON(try session.removeDomain(try p.string("domain")))]
    }

    // io.vaultd.Caches.Directory
    func cachesDirectory(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        return [
            "path": .string(
                try session.cacheDirectory(for: try p.optionalString("appID")))
        ]
    }

    // io.vaultd.Caches.Usage
    func cachesUsage(_ r: Request) throws -> JSONObject {
        let session = r.session
        let usage = try session.cacheUsage()
        let space = vault.caches.volumeSpace()
        return [
            "apps": .array(
                usage.map {
                    ["appID": .string($0.appID), "bytes": JSON($0.bytes), "files": JSON($0.files)]
                }),
            "totalBytes": JSON(usage.reduce(Int64(0)) { $0 + $1.bytes }),
            "freeBytes": JSON(space?.free ?? 0),
            "capacityBytes": JSON(space?.capacity ?? 0),
        ]
    }

    // io.vaultd.Caches.Purge
    func cachesPurge(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        var bytes: Int64?
        if let b = p.optionalJSON("bytes") {
            guard let v = b.int64Value, v >= 0 else {
                throw VaultError.invalidParameter("bytes", "must be a non-negative integer")
            }
            bytes = v
        }
        let purged = try session.purgeCaches(
            appID: try p.optionalString("appID"), bytes: bytes, running: runningApps())
        return ["freedBytes": JSON(purged.freedBytes), "removedFiles": JSON(purged.removedFiles)]
    }

    // io.vaultd.Apps.Install
    func appsInstall(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        func list(_ name: String) throws -> [String] {
            guard let v = p.optionalJSON(name) else { return [] }
            guard let a = v.arrayValue, a.allSatisfy({ $0.stringValue != nil }) else {
                throw VaultError.invalidParameter(name, "must be an array of strings")
            }
            return a.compactMap(\.stringValue)
        }
        let app = try session.installApp(
            try p.string("appID"), executable: try p.optionalString("executable"),
            accessGroups: try list("accessGroups"),
            appGroups: try list("appGroups"),
            keepCredentialsOnReinstall: try p.optionalBool("keepCredentialsOnReinstall") ?? false)
        return ["app": app.wire]
    }

    // io.vaultd.Apps.Uninstall
    func appsUninstall(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        return ["app": try session.uninstallApp(try p.string("appID")).wire]
    }

    // io.vaultd.Apps.List
    func appsList(_ r: Request) throws -> JSONObject {
        let session = r.session
        return ["apps": .array(try session.allApps().map(\.wire))]
    }

    // io.vaultd.Apps.Show
    func appsShow(_ r: Request) throws -> JSONObject {
        let p = r.p
        let session = r.session
        return ["app": try session.app(try p.string("appID")).wire]
    }

    // io.vaultd.Vault.Observe
    func vaultObserve(_ r: Request) throws -> Subscription {
        // An earlier install's connection gets no lock state, as from Status.
        let events = try r.session.subscribe(.observeLockState, receive: r.events)
        return Subscription(initial: [["lock": vault.lockState.wire]], events: events) { event in
            if case .lockState(let s) = event { return ["lock": s.wire] }
            return nil
        }
    }

    // io.vaultd.Preferences.Observe
    func preferencesObserve(_ r: Request) throws -> Subscription {
        let p = r.p
        let session = r.session
        var names: [String]?
        if let list = p.optionalJSON("domains") {
            guard let a = list.arrayValue?.compactMap(\.stringValue),
                a.count == list.arrayValue?.count
            else {
                throw VaultError.invalidParameter("domains", "must be an array of strings")
            }
            names = a
        }
        let events = try session.subscribe(
            .observePreferences(domains: names), receive: r.events)
        // Byte for byte: two keys differing only in Unicode normalisation are two to the
        // store; as a Swift `Set<String>` one would stand for the other.
        var keys: ExactSet?
        if let list = p.optionalJSON("keys") {
            guard let a = list.arrayValue?.compactMap(\.stringValue),
                a.count == list.arrayValue?.count
            else {
                throw VaultError.invalidParameter("keys", "must be an array of strings")
            }
            // A key no preference can have is a mistake, not a key to wait for.
            for k in a { try Vault.validatePreferenceKey(k) }
            keys = ExactSet(a.map { ExactString($0) })
        }
        let initial: [JSONObject] = try events.preferenceSnapshot(reply: r.reply).map {
            d, all in
            var values = all
            if let keys { values = values.filter { keys.contains(ExactString($0.key)) } }
            return [
                "domain": .string(d), "values": .object(values.mapValues(\.tagged)),
                "sequence": JSON(events.emittedThrough),
            ]
        }
        let wanted = keys
        return Subscription(initial: initial, events: events) { event in
            guard case .preference(let d, let k, let v, let n) = event,
                wanted?.contains(ExactString(k)) ?? true
            else { return nil }
            return [
                "domain": .string(d), "key": .string(k), "value": v?.tagged ?? .null,
                "sequence": JSON(n),
            ]
        }
    }

    // io.vaultd.Caches.Observe
    func cachesObserve(_ r: Request) throws -> Subscription {
        let events = try r.session.subscribe(.observeCachePurges, receive: r.events)
        return Subscription(initial: [], events: events) { event in
            guard case .cachePurge(let app, let freed) = event else { return nil }
            return ["appID": .string(app), "freedBytes": JSON(freed)]
        }
    }

    private func query(_ p: Parameters) throws -> ItemQuery {
        let limit = try p.optionalString("matchLimit") ?? "one"
        guard limit == "one" || limit == "all" else {
            throw VaultError.param("matchLimit must be one or all")
        }
        return ItemQuery(
            itemClass: try p.itemClass("class"),
            attributes: try ItemAttributes(json: p.optionalJSON("query")), matchAll: limit == "all")
    }
}
