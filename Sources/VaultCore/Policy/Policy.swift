import Foundation
import VaultProtocol

/// What the policy allowed one call: the caller it admitted, the operation, and what that
/// operation may act on, resolved (the domain a nil named, the group an Add stores into).
/// Only `Vault.authorize` makes one; the engine acts on a grant's targets, never on what the
/// caller named, and a subscription keeps its grant to filter events (`Policy.visible`,
/// `VaultSubscription`).
public struct Grant: Sendable {
    /// The caller, admitted: the owner, or an app whose install generation was current when
    /// the call began (and is checked again inside each write: `Vault.admitInWrite`).
    public let caller: Caller
    public let kind: Operation.Kind
    /// An Add's access group: the one it named, or the caller's default.
    public internal(set) var accessGroup: String?
    /// A preference operation's domains, resolved (one, but for an Observe's), each one the
    /// caller may read (and, for a write, write).
    public internal(set) var domains: [String] = [] {
        didSet { domainSet = ExactSet(domains.map { ExactString($0) }) }
    }
    /// `domains`, for `Policy.visible`'s look-up on each event.
    private(set) var domainSet: ExactSet = []
    /// A cache operation's app: an app's own, or the one the owner named.
    public internal(set) var appID: String?
    /// The access groups a keychain lookup, update or delete searches when its query names
    /// none: the caller's own (an app), nil for every group (the owner).
    public internal(set) var searchedAccessGroups: [String]?

    init(caller: Caller, kind: Operation.Kind) {
        self.caller = caller
        self.kind = kind
        // Fail closed: a grant that reaches the keychain store searches the caller's own
        // groups unless the decision says otherwise.
        searchedAccessGroups = caller.visibleAccessGroups
    }

    /// The one domain of a preference read or write.
    public var domain: String { domains[0] }
}

extension Vault {
    /// The gate every engine operation passes before it does anything; front-ends never
    /// decide. Owner-only operations refuse an app (PermissionDenied) whatever its install;
    /// every other one admits the caller's install generation once (MissingEntitlement for an
    /// earlier install's connection, `admit`), then decides on the operation's target
    /// (`Policy.decide`).
    func authorize(_ operation: Operation, for caller: Caller) throws -> Grant {
        switch operation.kind.audience {
        case .owner:
            guard caller.isOwner else {
                throw VaultFailure(
                    .permissionDenied, "only the vault's owner (vaultctl) may do this")
            }
        case .admitted:
            try admit(caller, launch: operation.kind.launchesApp)
        }
        return try Policy.decide(operation, for: caller)
    }

}

/// The decisions: who may do what, on which groups, domains and caches, and which results
/// and events a caller sees. Every front-end reaches them through the engine
/// (`Vault.authorize`); the method tables below say which operation each method is.
public enum Policy {
    /// Decides `operation` for an admitted `caller` on what it names (access groups, domains
    /// and suites, caches). Throws MissingEntitlement (a group, domain or cache not the
    /// caller's), ReadOnlyDomain (an app writing NSGlobalDomain), InvalidParameter (the owner
    /// naming no domain or app), InvalidValue (a malformed domain).
    static func decide(_ operation: Operation, for caller: Caller) throws -> Grant {
        var grant = Grant(caller: caller, kind: operation.kind)
        switch operation {
        case .addItem(let group):
            let g = group ?? caller.defaultAccessGroup
            try requireAccess(
                to: g, for: caller, "the caller is not a member of the requested access group")
            grant.accessGroup = g
        case .copyItems(let group), .deleteItems(let group):
            grant.searchedAccessGroups = caller.visibleAccessGroups
            if let group {
                try requireAccess(
                    to: group, for: caller,
                    "the caller is not a member of the requested access group")
            }
        case .updateItems(let group, let newGroup):
            grant.searchedAccessGroups = caller.visibleAccessGroups
            if let group {
                try requireAccess(
                    to: group, for: caller,
                    "the caller is not a member of the requested access group")
            }
            if let newGroup {
                try requireAccess(
                    to: newGroup, for: caller,
                    "the caller is not a member of the target access group")
            }
        case .readPreferences(let domain):
            grant.domains = [try resolve(domain: domain, for: caller, write: false)]
        case .writePreferences(let domain):
            grant.domains = [try resolve(domain: domain, for: caller, write: true)]
        case .observePreferences(let domains):
            let named: [String?] = domains ?? [nil]
            grant.domains = try named.map { try resolve(domain: $0, for: caller, write: false) }
        case .cacheDirectory(let appID):
            grant.appID = try cacheApp(appID, for: caller)
        case .useAccessGroup(let group):
            try requireAccess(
                to: group, for: caller, "the caller is not a member of the requested access group")
            grant.accessGroup = group
        case .hello, .status, .initialize, .unlock, .unlockFromKeyring, .lock, .changePassphrase,
            .observeLockState, .backup, .restore, .checkStore,
            .listDomains, .cacheUsage, .purgeCaches, .observeCachePurges, .installApp,
            .uninstallApp, .listApps, .showApp,
            .listAccessGroups, .requestUnlock, .setAlias, .registerPrompter,
            .observeItemChanges, .listAccess,
            .grantAccess, .revokeAccess, .syncInit, .syncJoin, .syncApprove, .syncStatus,
            .syncLeave, .syncRemove, .syncConflicts, .syncSettleConflict:
            break
        }
        return grant
    }

    private static func requireAccess(to group: String, for caller: Caller, _ message: String)
        throws
    {
        guard caller.mayAccess(group: group) else {
            throw VaultFailure(.missingEntitlement, message)
        }
    }

    /// Resolves the domain a caller names (nil: its own) and checks it may read or write it.
    /// Apps: their own domain and their app groups' suites; NSGlobalDomain read-only. Throws
    /// MissingEntitlement / ReadOnlyDomain / InvalidValue.
    static func resolve(domain: String?, for caller: Caller, write: Bool) throws -> String {
        if caller.isOwner {
            guard let domain else {
                throw VaultFailure.invalidParameter("domain", "the owner must name a domain")
            }
            try PreferencesStore.validate(domain: domain)
            return domain
        }
        let d = domain ?? caller.appID!
        guard caller.mayRead(domain: d) else {
            throw VaultFailure(
                .missingEntitlement, "the caller may not use this preferences domain")
        }
        if write && d == Vault.globalDomain {
            throw VaultFailure(
                .readOnlyDomain, "apps may read NSGlobalDomain but not write it", .init(domain: d))
        }
        return d
    }

    /// The app whose cache directory a caller asks for: an app only its own (naming another:
    /// MissingEntitlement); the owner must name one (InvalidParameter).
    static func cacheApp(_ appID: String?, for caller: Caller) throws -> String {
        if let own = caller.appID {
            if let appID, appID != own {
                throw VaultFailure(
                    .missingEntitlement, "an app may only use its own cache directory")
            }
            return own
        }
        guard let appID else {
            throw VaultFailure.invalidParameter(
                "appID",
                "the caller is not a registered app, so it runs as the owner's tool and has no caches directory of its own: name an app (appID), or register the program (vaultctl app install APP_ID --exe PATH)"
            )
        }
        return appID
    }

    // MARK: what a caller sees

    /// The preference domains of `all` that `caller` may read (the owner: all of them).
    static func visibleDomains(_ all: [String], to caller: Caller) -> [String] {
        caller.isOwner ? all : all.filter(caller.mayRead(domain:))
    }

    /// The access groups `caller` sees as Secret Service collections, given the groups that
    /// hold items (`stored`): the owner every one of them and its own default group; an app
    /// its own groups, whether or not they hold items. Each once, in the order given (an
    /// app's default group first).
    static func visibleAccessGroups(stored: [String], to caller: Caller) -> [String] {
        var out: [String] = []
        for g in (caller.isOwner ? [Caller.ownerAccessGroup] + stored : caller.accessGroups)
        where !out.containsBytes(g) { out.append(g) }
        return out
    }

    /// Whether `caller` is told of a change to an item of access group `group` (the Secret
    /// Service's ItemCreated, ItemDeleted, ItemChanged signals): one of its groups.
    static func seesItem(inAccessGroup group: String, _ caller: Caller) -> Bool {
        caller.mayAccess(group: group)
    }

    /// Whether `caller` sees the cache of `appID` in a listing or event: the owner every app's,
    /// an app its own.
    static func seesCache(of appID: String, _ caller: Caller) -> Bool {
        caller.appID.map(appID.sameBytes) ?? true
    }

    /// Whether a subscriber holding `grant` (an Observe's) is sent `event`: the lock state to
    /// every admitted caller; a preference change in one of the domains it was granted; a cache
    /// purge of its own app (the owner: every app's).
    public static func visible(_ event: VaultEvent, to grant: Grant) -> Bool {
        switch (grant.kind, event) {
        case (.observeLockState, .lockState), (.observeItemChanges, .lockState): true
        case (.observeItemChanges, .itemsChanged(let changes)):
            changes.contains { seesItem(inAccessGroup: $0.accessGroup, grant.caller) }
        // Byte for byte: two domains differing only in Unicode normalisation are two to the
        // store; as Swift strings one would stand for the other (an observer of its own suite
        // heard another app's writes to the twin suite).
        case (.observePreferences, .preference(let domain, _, _, _)):
            grant.domainSet.contains(ExactString(domain))
        case (.observeCachePurges, .cachePurge(let appID, _)): seesCache(of: appID, grant.caller)
        default: false
        }
    }

    /// `event` as a subscriber holding `grant` is sent it, nil when not at all
    /// (`visible`): an item change event keeps only the changes of groups it sees.
    static func shown(_ event: VaultEvent, to grant: Grant) -> VaultEvent? {
        guard visible(event, to: grant) else { return nil }
        guard case .itemsChanged(let changes) = event, !grant.caller.isOwner else { return event }
        return .itemsChanged(
            changes.filter { seesItem(inAccessGroup: $0.accessGroup, grant.caller) })
    }
}
