import VaultCore

/// What a front-end method is, to the engine: one of its operations, which the engine
/// authorizes (`Vault.authorize`, through the caller's `VaultSession`), or open. Each front-end
/// maps its own methods (`VarlinkOperations`, `SecretServiceOperations`) and serves only a
/// method its table names: one declared but missing there is refused, never served unguarded.
package enum MethodOperation: Sendable, Equatable {
    /// The method is this engine operation.
    case operation(VaultCore.Operation.Kind)
    /// No decision needed: the method describes the service to anyone who may connect
    /// (org.varlink.service), or touches only a transport's own state (a Secret Service
    /// session, a prompt's dismissal), nothing in the vault.
    case open
}
