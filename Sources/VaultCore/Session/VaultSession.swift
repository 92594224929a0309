import Foundation
import VaultProtocol

/// The one door into the engine: every operation a front-end (varlink, the Secret Service)
/// performs for a peer goes through the session made for that peer's `Caller`, and the
/// engine's methods that take a caller are internal. A session is made by `Vault.session`,
/// which admits the caller (an app's install generation must be current); each of its
/// operations is then decided by the policy (`Vault.authorize`: the audience, the admission
/// again, since an uninstall may come between two calls, and the operation's targets), and
/// acts on what the decision granted. Event streams come out of it already filtered
/// (`VaultSubscription`). A session holds no lock and no state of its own: it is cheap to
/// copy, and as valid as its caller's install.
public struct VaultSession: Sendable {
    let vault: Vault
    /// Who the session acts for, as vaultd established it from the kernel.
    public let caller: Caller
    /// The process the session serves, as vaultd named it from the kernel: whom a
    /// presence-protected secret is released to (`requested(by:)`); nil, none, and such a
    /// secret is refused.
    public private(set) var process: RequestingProcess?
    /// How a call that needs the user waits for it (`AccessInteraction`): on its own thread
    /// (the default), or not at all (it throws `AccessConfirmationNeeded` for a confirmation of
    /// an access, `PresenceWouldWait` for a presence check, and the front-end runs it again on
    /// a thread of its own). One setting for both questions, so one mechanism serves both.
    public private(set) var interaction: AccessInteraction = .wait

    /// This session, waiting for the user (a confirmation of an access, user presence) as
    /// `interaction` says.
    public func waiting(_ interaction: AccessInteraction) -> VaultSession {
        var s = self
        s.interaction = interaction
        s.process?.mayWait = interaction == .wait
        return s
    }

    init(vault: Vault, caller: Caller) {
        self.vault = vault
        self.caller = caller
    }

    /// The app the session acts for; nil for the owner's own tools.
    public var appID: String? { caller.appID }
    public var isOwner: Bool { caller.isOwner }
    /// Where an Add naming no access group stores (`Caller.defaultAccessGroup`).
    public var defaultAccessGroup: String { caller.defaultAccessGroup }

    /// The session, serving `process` (the peer vaultd identified the caller from).
    public func requested(by process: RequestingProcess) -> VaultSession {
        var s = self
        s.process = process
        return s
    }

    /// Whether the session is told of a change to an item of access group `group` (the Secret
    /// Service's ItemCreated, ItemDeleted, ItemChanged signals): one of its groups.
    public func sees(itemInAccessGroup group: String) -> Bool {
        Policy.seesItem(inAccessGroup: group, caller)
    }

    /// Whether `group` is the session's default access group (where an Add naming none
    /// stores, and what the Secret Service's `default` alias names for it).
    public func isDefault(accessGroup group: String) -> Bool {
        caller.defaultAccessGroup.sameBytes(group)
    }
}

extension VaultSession: Equatable {
    /// Two sessions of one vault for the same caller act alike.
    public static func == (a: VaultSession, b: VaultSession) -> Bool {
        a.vault === b.vault && a.caller == b.caller
    }
}

extension Vault {
    /// The session for `caller`: the only way to call the engine on its behalf. Admits the
    /// caller: an app whose install generation is no longer current (uninstalled or
    /// reinstalled since it was identified) gets MissingEntitlement.
    public func session(for caller: Caller) throws -> VaultSession {
        try admit(caller)
        return VaultSession(vault: self, caller: caller)
    }

    /// What vaultd does on the owner's behalf, without a peer: each one the owner asked for
    /// (a setting, the login keyring, a dialog the owner answered).
    public enum DaemonAction: Sendable {
        /// `AutoLockSeconds` passed without a call: the owner's setting carried out.
        case idleLock
        /// The unlock at login with the passphrase the owner remembered in the login keyring.
        case loginKeyringUnlock
        /// The passphrase the user typed into vaultd's own unlock dialog.
        case unlockDialog
        /// The Secret Service's signals: vaultd's bus front-end hears every item change
        /// and the lock state, and sends each connection what that connection's session
        /// `sees`.
        case secretServiceSignals
    }

    /// The owner's session for one of vaultd's own actions: the only way a front-end acts as
    /// the owner without a peer identified as the owner's program. `action` names why.
    public func daemonSession(for action: DaemonAction) -> VaultSession {
        VaultSession(vault: self, caller: .owner)
    }

    /// The session for a peer, from what the kernel says of it (see `caller(flatpakAppID:
    /// executable:isRegisteredFile:)`, which throws what identification throws). `program`:
    /// the unregistered program it runs (an app's identity is the app, whatever is given);
    /// `impersonationRisk`: why no access may be granted to it (`Caller.impersonationRisk`).
    public func session(
        flatpakAppID: String?, executable: String?, isRegisteredFile: (String) -> Bool,
        program: ProgramIdentity? = nil, impersonationRisk: String? = nil
    ) throws -> VaultSession {
        var c = try caller(
            flatpakAppID: flatpakAppID, executable: executable,
            isRegisteredFile: isRegisteredFile)
        if c.appID == nil { c.program = program }
        c.impersonationRisk = impersonationRisk
        return try session(for: c)
    }
}

// MARK: the vault's life-cycle (io.vaultd.Vault)

extension VaultSession {
    /// See `Vault.status(caller:)`.
    public func status() throws -> VaultStatus { try vault.status(caller: caller) }

    /// See `Vault.initialize(passphrase:caller:)`.
    public func initialize(passphrase: SecureBytes?) throws -> LockState {
        try vault.initialize(passphrase: passphrase, caller: caller)
    }

    /// See `Vault.unlock(passphrase:caller:)`.
    public func unlock(passphrase: SecureBytes) throws -> LockState {
        try vault.unlock(passphrase: passphrase, caller: caller)
    }

    /// See `Vault.unlockFromKeyring(caller:lookUp:)`.
    public func unlockFromKeyring(lookUp: () throws -> SecureBytes) throws -> LockState {
        try vault.unlockFromKeyring(caller: caller, lookUp: lookUp)
    }

    /// See `Vault.lockVault(caller:)`.
    public func lock() throws -> LockState { try vault.lockVault(caller: caller) }

    /// See `Vault.changePassphrase(old:new:caller:)`.
    public func changePassphrase(old: SecureBytes?, new: SecureBytes?) throws -> PassphraseChange {
        try vault.changePassphrase(old: old, new: new, caller: caller)
    }

    /// See `Vault.hello(_:)`.
    public func hello() throws -> (firstLaunch: Bool, wiped: Int) { try vault.hello(caller) }

    /// See `Vault.unavailableItems(caller:)`.
    public func unavailableItems() throws -> Int { try vault.unavailableItems(caller: caller) }

    /// See `Vault.checkStore(caller:)`.
    public func checkStore() throws -> StoreCheck { try vault.checkStore(caller: caller) }

    /// See `Vault.backup(to:recipients:includeDeviceBound:caller:process:)`.
    public func backup(to path: String, recipients: [Age.Recipient], includeDeviceBound: Bool)
        throws -> BackupSummary
    {
        // A backup carries every secret: the presence check is the engine's, once the policy
        // admitted the call (`Vault.backup`).
        try vault.backup(
            to: path, recipients: recipients, includeDeviceBound: includeDeviceBound,
            caller: caller, process: process)
    }

    /// See `Vault.restore(from:identities:newPassphrase:merge:caller:)`.
    public func restore(
        from path: String, identities: [Age.Identity], newPassphrase: SecureBytes?, merge: Bool
    ) throws -> RestoreSummary {
        try vault.restore(
            from: path, identities: identities, newPassphrase: newPassphrase, merge: merge,
            caller: caller)
    }
}
