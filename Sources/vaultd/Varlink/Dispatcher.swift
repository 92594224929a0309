import Foundation
import VaultCore
import VaultProtocol

/// Routes varlink calls to the engine through `table`, keyed by method name (Dispatcher+Table.swift).
/// Knows the wire shapes (docs/protocol.md); knows nothing of sockets or framing. A call
/// reaches it with parameters that match its method's declaration (the server checked them,
/// `VarlinkValidation.callRefusal`). It never authorizes nor filters: each engine operation
/// takes the caller and asks the policy (VaultCore/Policy), and a method the policy has no
/// decision for is refused before its parameters are read (`requirePolicyDecision`).
struct Dispatcher {
    let vault: Vault
    /// App IDs with an open connection (their caches are purged last).
    let runningApps: @Sendable () -> Set<String>
    /// Called for every call that counts as use of the vault (the idle auto-lock's clock).
    var activity: @Sendable () -> Void = {}
    /// The sync of synchronizable items (io.vaultd.Sync; nil: not served).
    var sync: SyncService?
    static let version = VaultVersion.current

    /// A streaming call's first replies, and how each later event becomes a reply (nil: not
    /// for this subscriber). The events reach the stream from the session already filtered
    /// by the policy (`VaultSubscription`); `map` only picks what the call asked for.
    struct Subscription {
        var initial: [JSONObject]
        /// The session's Observe: it delivers the events and is checked while it streams.
        let events: VaultSubscription
        /// An event as the subscriber's reply, nil when it did not ask for it.
        let map: @Sendable (VaultEvent) -> JSONObject?

        init(
            initial: [JSONObject], events: VaultSubscription,
            map: @escaping @Sendable (VaultEvent) -> JSONObject?
        ) {
            self.initial = initial
            self.events = events
            self.map = map
        }

        /// Throws once the subscriber may no longer be served (MissingEntitlement: its app's
        /// install ended; `VaultSubscription.recheck`).
        func recheck() throws {
            do { try events.recheck() } catch { throw VaultError.wire(error) }
        }
    }

    /// The most memory the reply to `call` can take while `handle` builds it and the server
    /// sends it (bytes), for the keychain lookups, whose replies grow with what the store
    /// holds; 0 for the others: their replies are small, or (preference reads) reserved by
    /// `handle` once the store says what they hold (`ReplyReserving`). Read from the call's
    /// parameters before anything runs (their types were checked against the declaration:
    /// `VarlinkValidation.callRefusal`).
    static func replyBound(_ call: VarlinkCall) -> Int {
        switch VarlinkMethod(rawValue: call.method) {
        case .keychainCopyMatching?:
            let p = Parameters(values: call.parameters)
            return ReplyLimit.copyMatchingBytes(
                matchAll: (try? p.optionalString("matchLimit")) == "all",
                returnData: (try? p.optionalBool("returnData")) == true)
        default:
            return 0
        }
    }

    /// The largest `replyBound` of any call: a reply budget smaller than it could serve none.
    static let largestReplyBound = ReplyLimit.copyMatchingBytes(matchAll: true, returnData: true)

    /// Refuses `method` unless the policy has a decision for it (`VarlinkOperations.byMethod`):
    /// fail closed, so a method added to an interface without one is never served. A method
    /// no interface declares is InterfaceNotFound or MethodNotFound, as before.
    static func requirePolicyDecision(_ call: VarlinkCall) throws {
        guard VarlinkOperations.of(call.method) == nil else { return }
        if VarlinkInterfaces.inputParameters[call.method] != nil {
            throw VaultError(
                .permissionDenied,
                "\(call.method) has no decision in vaultd's policy, so it is refused")
        }
        if VarlinkInterfaces.description(of: call.interface) == nil {
            throw VaultError(
                .interfaceNotFound, "no interface \(call.interface)",
                extra: ["interface": .string(call.interface)])
        }
        throw VaultError(
            .methodNotFound, "no method \(call.method)", extra: ["method": .string(call.method)])
    }

    /// Sets up a `more` call. Throws like `handle` for bad parameters or permissions.
    /// `events`: where every later event the policy shows the caller goes, from the moment the
    /// subscription is made (before its snapshot is read, so no change falls between the two).
    /// `reply`: where the first replies' memory is reserved before they are built (the
    /// server's reply budget).
    func subscribe(
        _ call: VarlinkCall, session: VaultSession,
        events: @escaping @Sendable (VaultEvent) -> Void, reply: ReplyReserving? = nil
    ) throws -> Subscription {
        do {
            return try subscribing(call, session: session, events: events, reply: reply)
        } catch { throw VaultError.wire(error) }
    }

    private func subscribing(
        _ call: VarlinkCall, session: VaultSession,
        events: @escaping @Sendable (VaultEvent) -> Void, reply: ReplyReserving?
    ) throws -> Subscription {
        try Self.requirePolicyDecision(call)
        guard case .stream(let serve)? = Self.table[call.method]?.route else {
            throw VaultError(
                .methodNotFound, "no streaming method \(call.method)",
                extra: ["method": .string(call.method)])
        }
        let request = Request(
            method: call.method, p: Parameters(values: call.parameters), session: session,
            secrets: nil, reply: reply, events: events)
        var subscription = try serve(self, request)
        #if DEBUG
        for r in subscription.initial { Self.checkReply(call.method, r) }
        let map = subscription.map
        let method = call.method
        subscription = Subscription(initial: subscription.initial, events: subscription.events) {
            event in
            let r = map(event)
            if let r { Self.checkReply(method, r) }
            return r
        }
        #endif
        return subscription
    }

    /// Answers one non-streaming call. Throws `VaultError` for every failure. `secrets`: the
    /// call's secret parameters, decoded from its message (`CallSecrets.parse`), and where the
    /// reply's secrets go (a reply carrying one must be sent with `CallSecrets.reply`); nil
    /// for a call made otherwise (its secret parameters are in `call.parameters`; its reply
    /// carries secrets as base64 strings). `reply`: where a preference read reserves what its
    /// reply takes before it builds it (the server's reply budget; `replyBound` covers the
    /// other calls).
    func handle(
        _ call: VarlinkCall, session: VaultSession, secrets: CallSecrets? = nil,
        reply: ReplyReserving? = nil
    ) throws -> JSONObject {
        do { return try handling(call, session: session, secrets: secrets, reply: reply) } catch {
            throw VaultError.wire(error)
        }
    }

    private func handling(
        _ call: VarlinkCall, session: VaultSession, secrets: CallSecrets?, reply: ReplyReserving?
    ) throws -> JSONObject {
        try Self.requirePolicyDecision(call)
        guard let entry = Self.table[call.method] else {
            // Declared with a policy decision but not in the table: impossible while the
            // table is built from every `VarlinkMethod` (Dispatcher+Table.swift).
            throw VaultError(
                .methodNotFound, "no method \(call.method)", extra: ["method": .string(call.method)]
            )
        }
        if !entry.passive { activity() }
        switch entry.route {
        case .stream:
            throw VaultError(.expectedMore, "\(call.method) streams replies: call it with more")
        case .call(let serve):
            let request = Request(
                method: call.method, p: Parameters(values: call.parameters, secrets: secrets),
                session: session, secrets: secrets, reply: reply)
            let result = try serve(self, request)
            #if DEBUG
            Self.checkReply(call.method, result)
            #endif
            return result
        }
    }

    #if DEBUG
    /// Debug builds and tests: a reply that does not match its method's declaration is a
    /// bug in vaultd; said on stderr, then an assertion failure (which ends the test's vaultd).
    static func checkReply(_ method: String, _ parameters: JSONObject) {
        guard let problem = VarlinkValidation.replyProblem(method: method, parameters: parameters)
        else { return }
        FileHandle.standardError.write(
            Data("vaultd: the reply to \(method) does not match its declaration: \(problem)\n".utf8)
        )
        assertionFailure("the reply to \(method) does not match its declaration: \(problem)")
    }
    #endif
}
