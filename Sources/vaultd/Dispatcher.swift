import Foundation
import VaultCore
import VaultProtocol

/// Routes varlink calls to the engine. Knows the wire shapes (docs/protocol.md); knows nothing
/// of sockets or framing. It never authorizes nor filters: each engine operation takes the
/// caller and asks the policy (VaultCore/Policy), and a method the policy has no decision for
/// is refused before its parameters are read (`requirePolicyDecision`).
struct Dispatcher {
    let vault: Vault
    /// App IDs with an open connection (their caches are purged last).
    let runningApps: @Sendable () -> Set<String>
    /// Called for every call that counts as use of the vault (the idle auto-lock's clock).
    var activity: @Sendable () -> Void = {}
    /// The sync of synchronizable items (io.vaultd.Sync; nil: not served).
    var sync: SyncService?
    static let version = VaultVersion.current

    /// Calls that only look and do not count as activity: a status poller (a panel applet,
    /// a script waiting for a state) must not keep the vault unlocked forever. Hello too: every
    /// VaultClient connection (each `vaultctl status`) says it first, and saying who one is
    /// uses nothing in the vault.
    static let passiveMethods: Set<String> = [
        "io.vaultd.Vault.Hello", "io.vaultd.Vault.Status", "org.varlink.service.GetInfo", "org.varlink.service.GetInterfaceDescription",
        "io.vaultd.Sync.Status",
    ]

    /// Methods that stream replies and must be called with `more`.
    static let streamingMethods: Set<String> = [
        "io.vaultd.Vault.Observe", "io.vaultd.Preferences.Observe", "io.vaultd.Caches.Observe",
    ]

    /// A streaming call's first replies, and how each later event becomes a reply (nil: not
    /// for this subscriber).
    struct Subscription {
        var initial: [JSONObject]
        /// What the policy granted the subscriber: which events it is sent (`Policy.visible`).
        let grant: Grant
        let vault: Vault
        /// An event the subscriber may see as its reply, nil when it did not ask for it.
        let map: @Sendable (VaultEvent) -> JSONObject?

        init(initial: [JSONObject], grant: Grant, vault: Vault, map: @escaping @Sendable (VaultEvent) -> JSONObject?) {
            self.initial = initial
            self.grant = grant
            self.vault = vault
            self.map = map
        }

        /// The reply for `event`; nil when the policy does not show it to the subscriber, or
        /// it is not what the subscriber asked for.
        var reply: @Sendable (VaultEvent) -> JSONObject? {
            { [grant, map] event in Policy.visible(event, to: grant) ? map(event) : nil }
        }

        /// Throws once the subscriber may no longer be served (MissingEntitlement: its app's
        /// install ended; `Vault.recheck`).
        func recheck() throws { try vault.recheck(grant) }
    }

    /// The most memory the reply to `call` can take while `handle` builds it and the server
    /// sends it (bytes), for the keychain lookups, whose replies grow with what the store
    /// holds; 0 for the others: their replies are small, or (preference reads) reserved by
    /// `handle` once the store says what they hold (`ReplyReserving`). Read from the call's
    /// parameters before anything runs (`handle` refuses a parameter of the wrong type before
    /// it looks anything up).
    static func replyBound(_ call: VarlinkCall) -> Int {
        switch call.method {
        case "io.vaultd.Keychain.CopyMatching":
            let p = Parameters(values: call.parameters)
            return ReplyLimit.copyMatchingBytes(
                matchAll: (try? p.optionalString("matchLimit")) == "all", returnData: (try? p.optionalBool("returnData")) == true)
        default:
            return 0
        }
    }

    /// The largest `replyBound` of any call: a reply budget smaller than it could serve none.
    static let largestReplyBound = ReplyLimit.copyMatchingBytes(matchAll: true, returnData: true)

    /// Refuses `method` unless the policy has a decision for it (`Policy.varlinkMethods`):
    /// fail closed, so a method added to an interface without one is never served. A method
    /// no interface declares is InterfaceNotFound or MethodNotFound, as before.
    static func requirePolicyDecision(_ call: VarlinkCall) throws {
        guard Policy.decision(forVarlinkMethod: call.method) == nil else { return }
        if VarlinkInterfaces.inputParameters[call.method] != nil {
            throw VaultError(.permissionDenied, "\(call.method) has no decision in vaultd's policy, so it is refused")
        }
        if VarlinkInterfaces.description(of: call.interface) == nil {
            throw VaultError(.interfaceNotFound, "no interface \(call.interface)", extra: ["interface": .string(call.interface)])
        }
        throw VaultError(.methodNotFound, "no method \(call.method)", extra: ["method": .string(call.method)])
    }

    /// Sets up a `more` call. Throws like `handle` for bad parameters or permissions.
    /// `emittedThrough`: the preference write sequence every write up to which the snapshots
    /// hold (`Vault.addObserverReportingSequence`, called before this). `reply`: where the
    /// first replies' memory is reserved before they are built (the server's reply budget).
    func subscribe(_ call: VarlinkCall, caller: Caller, emittedThrough: UInt64 = 0, reply: ReplyReserving? = nil) throws -> Subscription {
        try Self.requirePolicyDecision(call)
        let p = Parameters(values: call.parameters)
        switch call.method {
        case "io.vaultd.Vault.Observe":
            // An earlier install's connection gets no lock state, as from Status.
            let grant = try vault.subscribe(.observeLockState, caller: caller)
            return Subscription(initial: [["lock": vault.lockState]], grant: grant, vault: vault) { event in
                if case .lockState(let s) = event { return ["lock": s] }
                return nil
            }
        case "io.vaultd.Preferences.Observe":
            var names: [String]?
            if let list = p.optionalJSON("domains") {
                guard let a = list.arrayValue?.compactMap(\.stringValue), a.count == list.arrayValue?.count else {
                    throw VaultError.invalidParameter("domains", "must be an array of strings")
                }
                names = a
            }
            let grant = try vault.subscribe(.observePreferences(domains: names), caller: caller)
            // Byte for byte: two keys differing only in Unicode normalisation are two to the
            // store; as a Swift `Set<String>` one would stand for the other.
            var keys: ExactSet?
            if let list = p.optionalJSON("keys") {
                guard let a = list.arrayValue?.compactMap(\.stringValue), a.count == list.arrayValue?.count else {
                    throw VaultError.invalidParameter("keys", "must be an array of strings")
                }
                // A key no preference can have is a mistake, not a key to wait for.
                for k in a { try Vault.validatePreferenceKey(k) }
                keys = ExactSet(a.map { ExactString($0) })
            }
            let initial: [JSONObject] = try vault.preferenceSnapshot(grant, reply: reply).map { d, all in
                var values = all
                if let keys { values = values.filter { keys.contains(ExactString($0.key)) } }
                return ["domain": .string(d), "values": .object(values.mapValues(\.tagged)), "sequence": JSON(emittedThrough)]
            }
            let wanted = keys
            return Subscription(initial: initial, grant: grant, vault: vault) { event in
                guard case .preference(let d, let k, let v, let n) = event, wanted?.contains(ExactString(k)) ?? true else { return nil }
                return ["domain": .string(d), "key": .string(k), "value": v?.tagged ?? .null, "sequence": JSON(n)]
            }
        case "io.vaultd.Caches.Observe":
            let grant = try vault.subscribe(.observeCachePurges, caller: caller)
            return Subscription(initial: [], grant: grant, vault: vault) { event in
                guard case .cachePurge(let app, let freed) = event else { return nil }
                return ["appID": .string(app), "freedBytes": JSON(freed)]
            }
        default:
            throw VaultError(.methodNotFound, "no streaming method \(call.method)", extra: ["method": .string(call.method)])
        }
    }

    /// Answers one non-streaming call. Throws `VaultError` for every failure. `secrets`: the
    /// call's secret parameters, decoded from its message (`CallSecrets.parse`), and where the
    /// reply's secrets go (a reply carrying one must be sent with `CallSecrets.reply`); nil
    /// for a call made otherwise (its secret parameters are in `call.parameters`; its reply
    /// carries secrets as base64 strings). `reply`: where a preference read reserves what its
    /// reply takes before it builds it (the server's reply budget; `replyBound` covers the
    /// other calls).
    func handle(_ call: VarlinkCall, caller: Caller, secrets: CallSecrets? = nil, reply: ReplyReserving? = nil) throws -> JSONObject {
        try Self.requirePolicyDecision(call)
        if !Self.passiveMethods.contains(call.method) { activity() }
        let p = Parameters(values: call.parameters, secrets: secrets)
        switch call.method {
        case "org.varlink.service.GetInfo":
            return [
                "vendor": "vaultd", "product": "vaultd", "version": .string(Self.version),
                "url": "https://github.com/vaultd/vaultd",
                "interfaces": .array(VarlinkInterfaces.all.map { .string($0.name) }),
            ]
        case "org.varlink.service.GetInterfaceDescription":
            let name = try p.string("interface")
            guard let d = VarlinkInterfaces.description(of: name) else {
                throw VaultError(.interfaceNotFound, "no interface \(name)", extra: ["interface": .string(name)])
            }
            return ["description": .string(d)]

        case "io.vaultd.Vault.Hello":
            let (firstLaunch, wiped) = try vault.hello(caller)
            return [
                "appID": caller.appID.map { .string($0) } ?? .null, "generation": caller.generation.map { .string($0) } ?? .null,
                "firstLaunch": .bool(firstLaunch), "wipedCredentials": JSON(wiped),
                "defaultAccessGroup": .string(caller.defaultAccessGroup),
                "unavailableItems": JSON(try vault.unavailableItems(caller: caller)),
            ]
        case "io.vaultd.Vault.Status":
            var s = try vault.status(caller: caller)
            s["version"] = .string(Self.version)
            return s
        case "io.vaultd.Vault.Init":
            return ["lock": try vault.initialize(passphrase: try p.passphrase("passphrase"), caller: caller)]
        case "io.vaultd.Vault.Unlock":
            guard let pass = try p.passphrase("passphrase") else { throw VaultError.invalidParameter("passphrase", "missing") }
            return ["lock": try vault.unlock(passphrase: pass, caller: caller)]
        case "io.vaultd.Vault.UnlockFromKeyring":
            return ["lock": try KeyringUnlock.unlock(vault, caller: caller, timeout: 5)]
        case "io.vaultd.Vault.Lock":
            return ["lock": try vault.lockVault(caller: caller)]
        case "io.vaultd.Vault.ChangePassphrase":
            let (state, deleted) = try vault.changePassphrase(old: try p.passphrase("old"), new: try p.passphrase("new"), caller: caller)
            return ["lock": state, "deletedItems": JSON(deleted)]
        case "io.vaultd.Vault.Backup":
            let passphrase = try p.passphrase("passphrase")
            var recipients: [Age.Recipient]
            if let list = p.optionalJSON("recipients") {
                guard let a = list.arrayValue, a.allSatisfy({ $0.stringValue != nil }), !a.isEmpty else {
                    throw VaultError.invalidParameter("recipients", "must be a non-empty array of age1… strings")
                }
                recipients = try a.compactMap(\.stringValue).map { .x25519(try Age.parseRecipient($0)) }
                if passphrase != nil { throw VaultError.invalidParameter("passphrase", "give either a passphrase or recipients, not both") }
            } else {
                guard let passphrase, passphrase.count > 0 else { throw VaultError.invalidParameter("passphrase", "give a backup passphrase or recipients") }
                recipients = [.passphrase(passphrase)]
            }
            let summary = try vault.backup(
                to: try p.string("path"), recipients: recipients, includeDeviceBound: try p.optionalBool("includeDeviceBound") ?? false, caller: caller)
            return summary.json
        case "io.vaultd.Vault.Check":
            return try vault.checkStore(caller: caller).json
        case "io.vaultd.Vault.Restore":
            var identities: [Age.Identity] = []
            if let pass = try p.passphrase("passphrase") { identities.append(.passphrase(pass)) }
            if let text = try p.passphrase("identity") { identities += try Age.parseIdentities(text).map { .x25519($0) } }
            guard !identities.isEmpty else { throw VaultError.invalidParameter("passphrase", "give the backup's passphrase or an identity") }
            let summary = try vault.restore(
                from: try p.string("path"), identities: identities, newPassphrase: try p.passphrase("newPassphrase"),
                merge: try p.optionalBool("merge") ?? false, caller: caller)
            return summary.json

        case "io.vaultd.Keychain.Add":
            let cls = try ItemClass(wire: try p.string("class"))
            let attrs = try ItemAttributes(json: try p.json("attributes"))
            let stored = try vault.addItem(cls, attributes: attrs, secret: try p.secret("data"), caller: caller)
            return ["attributes": stored.json]
        case "io.vaultd.Keychain.CopyMatching":
            let q = try query(p)
            let returnData = try p.optionalBool("returnData") ?? false
            let returnAttributes = try p.optionalBool("returnAttributes") ?? !returnData
            let matches = try vault.copyMatchingReportingDamage(q, returnData: returnData, caller: caller)
            let found = matches.items
            var reply: JSONObject = [
                "items": .array(
                    found.map { item in
                        var o: JSONObject = ["class": .string(item.itemClass.rawValue)]
                        if returnAttributes { o["attributes"] = item.attributes.json }
                        if let d = item.data {
                            o["data"] = secrets?.replyPlaceholder(for: d) ?? .string(d.withUnsafeBytes { Data($0).base64EncodedString() })
                        }
                        return .object(o)
                    })
            ]
            if !matches.damaged.isEmpty { reply["damaged"] = .array(matches.damaged.prefix(1000).map(\.json)) }
            return reply
        case "io.vaultd.Keychain.Update":
            let changes = try ItemAttributes(json: p.optionalJSON("attributes"))
            let n = try vault.updateItems(try query(p), changes: changes, secret: try p.optionalSecret("data"), caller: caller)
            return ["count": JSON(n)]
        case "io.vaultd.Keychain.Delete":
            return ["count": JSON(try vault.deleteItems(try query(p), caller: caller))]

        case "io.vaultd.Preferences.Get":
            let value = try vault.preference(domain: try p.optionalString("domain"), key: try p.string("key"), caller: caller, reply: reply)
            return ["value": value?.tagged ?? .null]
        case "io.vaultd.Preferences.Set":
            let n = try vault.setPreference(
                domain: try p.optionalString("domain"), key: try p.string("key"), value: try PlistValue(tagged: try p.json("value")), caller: caller)
            return ["sequence": JSON(n)]
        case "io.vaultd.Preferences.Remove":
            let n = try vault.removePreference(domain: try p.optionalString("domain"), key: try p.string("key"), caller: caller)
            return ["sequence": JSON(n)]
        case "io.vaultd.Preferences.Domain":
            return ["values": .object(try vault.preferenceDomain(try p.optionalString("domain"), caller: caller, reply: reply).mapValues(\.tagged))]
        case "io.vaultd.Preferences.Domains":
            return ["domains": .array(try vault.preferenceDomains(caller: caller).map { .string($0) })]
        case "io.vaultd.Preferences.Import":
            let domain = try p.string("domain")
            switch (try p.optionalString("plist"), p.optionalJSON("values")) {
            case (let text?, nil):
                guard let data = Data(base64Encoded: text) else { throw VaultError.invalidParameter("plist", "must be base64") }
                return ["keys": JSON(try vault.importDomain(domain, plist: data, caller: caller))]
            case (nil, let json?):
                guard let object = json.objectValue else { throw VaultError.invalidParameter("values", "must be an object of tagged values") }
                return ["keys": JSON(try vault.importDomain(domain, values: try object.mapValues { try PlistValue(tagged: $0) }, caller: caller))]
            default:
                throw VaultError.invalidParameter("plist", "give either plist or values")
            }
        case "io.vaultd.Preferences.Export":
            let domain = try p.string("domain")
            let format = try p.optionalString("format") ?? "xml"
            guard let f = PropertyListCodec.Format(rawValue: format) else {
                throw VaultError.invalidParameter("format", "must be xml or binary")
            }
            return ["plist": .string(try vault.exportDomain(domain, format: f, caller: caller, reply: reply).base64EncodedString())]
        case "io.vaultd.Preferences.RemoveDomain":
            return ["keys": JSON(try vault.removeDomain(try p.string("domain"), caller: caller))]

        case "io.vaultd.Caches.Directory":
            return ["path": .string(try vault.cacheDirectory(for: try p.optionalString("appID"), caller: caller))]
        case "io.vaultd.Caches.Usage":
            let usage = try vault.cacheUsage(caller: caller)
            let space = vault.caches.volumeSpace()
            return [
                "apps": .array(usage.map { ["appID": .string($0.appID), "bytes": JSON($0.bytes), "files": JSON($0.files)] }),
                "totalBytes": JSON(usage.reduce(Int64(0)) { $0 + $1.bytes }), "freeBytes": JSON(space?.free ?? 0),
                "capacityBytes": JSON(space?.capacity ?? 0),
            ]
        case "io.vaultd.Caches.Purge":
            var bytes: Int64?
            if let b = p.optionalJSON("bytes") {
                guard let v = b.int64Value, v >= 0 else { throw VaultError.invalidParameter("bytes", "must be a non-negative integer") }
                bytes = v
            }
            let r = try vault.purgeCaches(appID: try p.optionalString("appID"), bytes: bytes, running: runningApps(), caller: caller)
            return ["freedBytes": JSON(r.freedBytes), "removedFiles": JSON(r.removedFiles)]

        case "io.vaultd.Apps.Install":
            func list(_ name: String) throws -> [String] {
                guard let v = p.optionalJSON(name) else { return [] }
                guard let a = v.arrayValue, a.allSatisfy({ $0.stringValue != nil }) else {
                    throw VaultError.invalidParameter(name, "must be an array of strings")
                }
                return a.compactMap(\.stringValue)
            }
            let app = try vault.installApp(
                try p.string("appID"), executable: try p.optionalString("executable"), accessGroups: try list("accessGroups"),
                appGroups: try list("appGroups"), keepCredentialsOnReinstall: try p.optionalBool("keepCredentialsOnReinstall") ?? false,
                caller: caller)
            return ["app": app.json]
        case "io.vaultd.Apps.Uninstall":
            return ["app": try vault.uninstallApp(try p.string("appID"), caller: caller).json]
        case "io.vaultd.Apps.List":
            return ["apps": .array(try vault.allApps(caller: caller).map(\.json))]
        case "io.vaultd.Apps.Show":
            return ["app": try vault.app(try p.string("appID"), caller: caller).json]

        case let m where m.hasPrefix("io.vaultd.Sync."):
            return try handleSync(call.method, p, caller: caller)

        default:
            if Self.streamingMethods.contains(call.method) {
                throw VaultError(.expectedMore, "\(call.method) streams replies: call it with more")
            }
            let iface = call.interface
            if VarlinkInterfaces.description(of: iface) == nil {
                throw VaultError(.interfaceNotFound, "no interface \(iface)", extra: ["interface": .string(iface)])
            }
            throw VaultError(.methodNotFound, "no method \(call.method)", extra: ["method": .string(call.method)])
        }
    }

    private func query(_ p: Parameters) throws -> ItemQuery {
        let limit = try p.optionalString("matchLimit") ?? "one"
        guard limit == "one" || limit == "all" else { throw VaultError.param("matchLimit must be one or all") }
        return ItemQuery(itemClass: try p.itemClass("class"), attributes: try ItemAttributes(json: p.optionalJSON("query")), matchAll: limit == "all")
    }
}
