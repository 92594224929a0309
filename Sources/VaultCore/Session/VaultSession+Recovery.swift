import Foundation
import VaultProtocol

// MARK: the recovery key (io.vaultd.Vault)

extension VaultSession {
    /// See `Vault.createRecoveryKey(passphrase:caller:)`.
    public func createRecoveryKey(passphrase: SecureBytes) throws -> SecureBytes {
        try vault.createRecoveryKey(passphrase: passphrase, caller: caller)
    }

    /// See `Vault.removeRecoveryKey(caller:)`.
    public func removeRecoveryKey() throws { try vault.removeRecoveryKey(caller: caller) }

    /// See `Vault.unlock(recoveryKey:caller:)`.
    public func unlock(recoveryKey: SecureBytes) throws -> LockState {
        try vault.unlock(recoveryKey: recoveryKey, caller: caller)
    }

    /// See `Vault.resetPassphrase(recoveryKey:new:caller:)`.
    public func resetPassphrase(recoveryKey: SecureBytes, new: SecureBytes) throws -> LockState {
        try vault.resetPassphrase(recoveryKey: recoveryKey, new: new, caller: caller)
    }
}
