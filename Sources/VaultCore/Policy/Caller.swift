/// Who is calling, as vaultd established it from the kernel (never from what a client says).
public struct Caller: Sendable, Equatable {
    /// The app ID of an identified app, or nil for the owner's own tools (vaultctl): the
    /// admin surface, which may name any access group and domain.
    public internal(set) var appID: String?
    /// The app's keychain access groups in order (registered groups, app ID, app groups);
    /// the first is the default for Add. Empty for the owner.
    public internal(set) var accessGroups: [String]
    /// The app groups (`group.*`) whose preference suites the app may use.
    public internal(set) var appGroups: [String]
    /// The install generation the app runs under (recorded on items it adds).
    public internal(set) var generation: String?
    /// The program the peer runs (issue 40 §2): recorded as the creator of the items it adds,
    /// and what the access decisions on other programs' items are about. An app's is the app;
    /// nil for vaultd's own actions (`Vault.daemonSession`) and tests' callers.
    public internal(set) var program: ProgramIdentity?
    /// Why no access may be granted to this peer, whatever was remembered for its program:
    /// it could pass for another program (traced, a loader variable such as LD_PRELOAD, its
    /// executable deleted or replaced; `PeerIdentity.impersonationRisk`). Nil: none seen.
    public internal(set) var impersonationRisk: String?

    /// Made by the engine's identification (`Vault.session(flatpakAppID:executable:
    /// isRegisteredFile:)`, `AppRecord.caller`) and by tests; never by a front-end.
    init(
        appID: String?, accessGroups: [String] = [], appGroups: [String] = [],
        generation: String? = nil
    ) {
        self.appID = appID
        self.accessGroups = accessGroups
        self.appGroups = appGroups
        self.generation = generation
    }

    /// The owner's tools (an unidentified peer of the same uid). A front-end gets an owner's
    /// session only by identifying a peer, or for vaultd's own actions (`Vault.daemonSession`).
    static let owner = Caller(appID: nil)

    public var isOwner: Bool { appID == nil }

    /// The access group the owner's items go to when Add names none.
    public static let ownerAccessGroup = "user"

    /// The group an Add without `accessGroup` uses.
    public var defaultAccessGroup: String { accessGroups.first ?? Caller.ownerAccessGroup }

    /// Whether the caller may touch items of `group`: one of its groups, byte for byte (as
    /// the store compares them), not by Swift's `==`, under which `é` and `e` + U+0301 are
    /// one string, so an app with one spelling would reach the other's items.
    public func mayAccess(group: String) -> Bool { isOwner || accessGroups.containsBytes(group) }

    /// The access groups whose items the caller sees when it names none: nil, every group
    /// (the owner); an app, its own groups.
    public var visibleAccessGroups: [String]? { isOwner ? nil : accessGroups }

    /// Whether the caller may read preferences `domain`: the owner any, an app its own, its
    /// app groups' suites and NSGlobalDomain (docs/preferences.md).
    public func mayRead(domain: String) -> Bool {
        isOwner || appID.map(domain.sameBytes) == true || appGroups.containsBytes(domain)
            || domain.sameBytes(Vault.globalDomain)
    }
}
