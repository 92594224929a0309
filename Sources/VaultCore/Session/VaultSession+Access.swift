import Foundation
import VaultProtocol

/// Per-program access to secrets (docs/access.md), as the session's caller may use it.
extension VaultSession {
    /// The program the session's peer runs (nil: vaultd's own actions).
    public var program: ProgramIdentity? { caller.program }

    /// Asks the user the question a call deferred (`AccessInteraction.deferred`), blocking
    /// this thread until the answer or the timeout; on Allow, the call run again releases the
    /// secrets once. Throws AuthFailed (denied) or InteractionNotAllowed (no answer).
    public func confirm(_ needed: AccessConfirmationNeeded) throws {
        try vault.confirm(needed, permitting: true)
    }

    /// See `Vault.accessGrants`.
    public func accessGrants() throws -> [AccessGrant] { try vault.accessGrants(caller: caller) }

    /// See `Vault.grantAccess`.
    public func grantAccess(_ query: ItemQuery, to program: ProgramIdentity) throws -> Int {
        try vault.grantAccess(query, to: program, caller: caller)
    }

    /// See `Vault.revokeAccess`.
    public func revokeAccess(_ query: ItemQuery?, programPath: String?, script: String?) throws
        -> Int
    {
        try vault.revokeAccess(query, programPath: programPath, script: script, caller: caller)
    }
}
