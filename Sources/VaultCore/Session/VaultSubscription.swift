import Foundation
import VaultProtocol

/// An Observe, as the session's caller may have it: the events the policy shows the caller
/// (`Policy.visible` on the grant), and nothing else, reach its handler. The observer is
/// registered when the subscription is made and removed when it is cancelled or released,
/// so a stream that ends in any way stops receiving.
public final class VaultSubscription: Sendable {
    private let vault: Vault
    /// What the policy granted the Observe: which events it is sent.
    let grant: Grant
    private let token: UUID
    /// The highest preference write sequence whose events went out before the subscription
    /// began (0: none): those writes have committed, so a snapshot read from now on holds
    /// them, and the handler gets every later one.
    public let emittedThrough: UInt64

    init(vault: Vault, grant: Grant, receive: @escaping @Sendable (VaultEvent) -> Void) {
        self.vault = vault
        self.grant = grant
        let registered = vault.addObserverReportingSequence { event in
            if let shown = Policy.shown(event, to: grant) { receive(shown) }
        }
        self.token = registered.id
        self.emittedThrough = registered.emittedThrough
    }

    deinit { vault.removeObserver(token) }

    /// Stops the events now (releasing the subscription does too).
    public func cancel() { vault.removeObserver(token) }

    /// Throws MissingEntitlement once the subscriber's app was uninstalled or reinstalled
    /// after its connection was identified (see `Vault.admit`). A stream is checked with it
    /// before each batch of events; the owner always passes.
    public func recheck() throws { try vault.admit(grant.caller) }

    /// The first replies of a preferences Observe: every domain it was granted, with its
    /// values (see `Vault.preferenceSnapshot`).
    public func preferenceSnapshot(reply: ReplyReserving? = nil) throws -> [(
        domain: String, values: PlistDictionary
    )] {
        try vault.preferenceSnapshot(grant, reply: reply)
    }
}

extension VaultSession {
    /// Starts an Observe (`operation`: observeLockState, observePreferences,
    /// observeCachePurges or observeItemChanges): `receive` gets every later event the policy shows the caller, in
    /// the order they were emitted, on the emitting thread (it should return quickly). Throws
    /// the policy's refusal.
    public func subscribe(
        _ operation: Operation, receive: @escaping @Sendable (VaultEvent) -> Void
    ) throws -> VaultSubscription {
        switch operation.kind {
        case .observeLockState, .observePreferences, .observeCachePurges, .observeItemChanges:
            let grant = try vault.authorize(operation, for: caller)
            return VaultSubscription(vault: vault, grant: grant, receive: receive)
        default: throw VaultFailure(.internalError, "\(operation.kind) is not a subscription")
        }
    }
}
