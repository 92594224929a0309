import Foundation
import VaultProtocol

extension VaultConnection {
    /// Streams the replies of a `more` call on a new connection of its own, as an
    /// `AsyncThrowingStream`. Cancelling the iteration closes that connection.
    static func observe<T: Sendable>(
        socketPath: String, method: VarlinkMethod, parameters: JSONObject,
        transform: @escaping @Sendable (JSONObject) -> T?
    ) -> AsyncThrowingStream<T, Error> {
        AsyncThrowingStream { continuation in
            let connection: VaultConnection
            do {
                connection = try VaultConnection(socketPath: socketPath)
            } catch {
                continuation.finish(throwing: error)
                return
            }
            continuation.onTermination = { _ in connection.close() }
            let thread = Thread {
                do {
                    try connection.stream(method, parameters) { reply in
                        if let value = transform(reply) {
                            if case .terminated = continuation.yield(value) { return false }
                        }
                        return true
                    }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            thread.name = "VaultClient.observe"
            thread.start()
        }
    }
}

extension Vault {
    /// Lock-state changes (`io.vaultd.Vault.Observe`), on a connection of its own: the
    /// current state first, then each change, so an app can wait for protected data to become
    /// available (as UIApplication.protectedDataDidBecomeAvailableNotification). The stream
    /// ends, without reconnecting, when vaultd stops (finishing with ConnectionFailed);
    /// it throws ConnectionFailed at once when vaultd cannot be reached.
    public func lockStates() -> AsyncThrowingStream<LockState, Error> {
        VaultConnection.observe(
            socketPath: connection.socketPath, method: .vaultObserve, parameters: [:]
        ) {
            LockState($0["lock"])
        }
    }
}
