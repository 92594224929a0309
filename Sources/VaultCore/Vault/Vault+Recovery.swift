import Foundation
import VaultProtocol

/// The recovery key (docs/keychain.md "The recovery key"): a second way in, beside the
/// passphrase, for the day it is forgotten, as systemd-cryptenroll --recovery-key adds one to
/// a LUKS volume. Checked as the passphrase is: the same count of failures, the same waits
/// (`unlockWait`), one check at a time with Unlock's and ChangePassphrase's.
extension Vault {
    /// Makes a new recovery key (replacing any earlier one) and returns its 32 bytes, which
    /// the caller shows once: vaultd keeps only a wrapping of the KEK under a key derived from
    /// it (`KeyHierarchy.setRecoveryKey`). The passphrase is required, checked as Unlock
    /// checks it (a process of the user's, while the vault is unlocked, must not get itself a
    /// lasting way in). Owner only. Throws PermissionDenied, Vault.AuthFailed, RateLimited,
    /// NoPassphrase (a vault without one is always unlocked: nothing to recover),
    /// NotInitialized.
    func createRecoveryKey(passphrase: SecureBytes, caller: Caller) throws -> SecureBytes {
        _ = try authorize(.changePassphrase, for: caller)
        unlockAttempts.lock()
        defer { unlockAttempts.unlock() }
        let kek = try passphraseKEK(passphrase, for: "CreateRecoveryKey")
        let recoveryKey = SecureBytes.random(count: RecoveryKeyText.byteCount)
        try inEventOrder { ticket in
            let state: LockState = try exclusive { x in
                try openKeysCounting(kek, for: "CreateRecoveryKey", in: x)
                ticket.take()
                ticket.madeSoFar = [.lockState(keys.lockState)]
                try writingKeys(in: x) { db in
                    try changingKeys { try keys.setRecoveryKey(recoveryKey, kek: kek, in: db) }
                }
                // A replaced recovery key's wrapping stays in the WAL's old frames until it
                // wraps round: one rotated because it leaked would open the vault from there.
                do { try x.truncateWAL() } catch {
                    logger.warning(
                        "a recovery key was made, but the wrapping of the one it replaces may stay in the write-ahead log for a while: \(error)"
                    )
                }
                return keys.lockState
            }
            return ((), [.lockState(state)])
        }
        logger.notice("a recovery key was made (it replaces any earlier one)")
        return recoveryKey
    }

    /// Removes the recovery key's wrapping (the key no longer opens anything), and truncates
    /// the write-ahead log that held it. Owner only. Throws PermissionDenied, NotInitialized,
    /// Param (the vault has no recovery key).
    func removeRecoveryKey(caller: Caller) throws {
        _ = try authorize(.changePassphrase, for: caller)
        try exclusive { x in
            try keys.requireInitialized()
            guard try keys.hasRecoveryKey(in: x.db) else {
                throw VaultFailure.param("the vault has no recovery key")
            }
            try writingKeys(in: x) { db in try changingKeys { try keys.removeRecoveryKey(in: db) } }
            // The wrapping stays in the WAL's old frames until it wraps round.
            do { try x.truncateWAL() } catch {
                logger.warning(
                    "the recovery key was removed, but its wrapping may stay in the write-ahead log for a while: \(error)"
                )
            }
        }
        logger.notice("the recovery key was removed")
    }

    /// Unlocks with the recovery key's text (`RecoveryKeyText`, as typed). Owner only. Throws
    /// PermissionDenied, Param (not a recovery key's text: not counted), Vault.AuthFailed
    /// (wrong key, or none made; counted as a wrong passphrase), RateLimited, NoPassphrase,
    /// NotInitialized.
    func unlock(recoveryKey text: SecureBytes, caller: Caller) throws -> LockState {
        _ = try authorize(.unlock, for: caller)
        unlockAttempts.lock()
        defer { unlockAttempts.unlock() }
        let key = try Self.parseRecoveryKey(text)
        return try inEventOrder { ticket in
            let state: LockState = try exclusive { x in
                try openWithRecoveryKey(key, for: "Unlock with the recovery key", in: x)
                ticket.take()
                return keys.lockState
            }
            return (state, [.lockState(state)])
        }
    }

    /// Sets a new passphrase after the old one was forgotten, the recovery key proving the
    /// caller may: unlocks with it (counted and rate-limited as Unlock), then re-wraps the
    /// keys under the new passphrase's KEK, as ChangePassphrase does; the recovery key keeps
    /// working. Owner only. Throws as `unlock(recoveryKey:)`, and Param (empty `new`).
    func resetPassphrase(recoveryKey text: SecureBytes, new: SecureBytes, caller: Caller)
        throws -> LockState
    {
        _ = try authorize(.changePassphrase, for: caller)
        guard new.count > 0 else {
            throw VaultFailure.param("the new passphrase must not be empty")
        }
        unlockAttempts.lock()
        defer { unlockAttempts.unlock() }
        let key = try Self.parseRecoveryKey(text)
        // The rate limit first: a refused guess costs no Argon2id.
        try exclusive { x in
            try checkRateLimit(x)
            _ = try keys.passphraseParameters(in: x.db)
        }
        let newKEK = try KeyHierarchy.PassphraseKEK(deriving: new, cost: passphrasePolicy.kdfCost)
        let state: LockState = try inEventOrder { ticket in
            let state: LockState = try exclusive { x in
                try openWithRecoveryKey(key, for: "ResetPassphrase", in: x)
                ticket.take()
                ticket.madeSoFar = [.lockState(keys.lockState)]
                try writingKeys(in: x) { db in
                    try changingKeys { try keys.rewrap(newPassphrase: newKEK, in: db) }
                }
                do { try x.truncateWAL() } catch {
                    logger.warning(
                        "the passphrase was reset, but the keys it replaced may stay in the write-ahead log for a while: \(error)"
                    )
                }
                return keys.lockState
            }
            return (state, [.lockState(state)])
        }
        logger.notice("the passphrase was reset with the recovery key")
        return state
    }

    /// Whether the vault has a recovery key (for Status).
    func hasRecoveryKey() throws -> Bool {
        try read { db in try keys.hasRecoveryKey(in: db) }
    }

    /// The recovery key's bytes from its text, in secure memory. Throws Param.
    static func parseRecoveryKey(_ text: SecureBytes) throws -> SecureBytes {
        let key = SecureBytes(count: RecoveryKeyText.byteCount)
        let ok = text.withUnsafeBytes { t in
            key.withUnsafeMutableBytes { RecoveryKeyText.parse(t, into: $0) }
        }
        guard ok else {
            throw VaultFailure.param(
                "not a recovery key: it is 64 characters of cbdefghijklnrtuv, in 8 groups of 8 joined by dashes"
            )
        }
        return key
    }

    /// Checks the rate limit, then opens the keys with the recovery key under the engine lock
    /// (its KDF is one BLAKE2b: no need to leave the lock): a wrong one counts as a wrong
    /// passphrase, and is logged with the count (never the key); a right one clears the count.
    private func openWithRecoveryKey(
        _ key: SecureBytes, for operation: String, in x: DatabasePool.Exclusive
    ) throws {
        do {
            try checkRateLimit(x)
        } catch let e as VaultFailure where e.code == .rateLimited {
            logger.warning("\(operation) refused: \(e.message)")
            throw e
        }
        _ = try keys.passphraseParameters(in: x.db)
        do {
            try changingKeys { try keys.unlock(recoveryKey: key, in: x) }
        } catch let e as VaultFailure where e.code == .wrongPassphrase {
            let (n, stored) = recordFailedUnlock(x)
            let wait = Self.unlockWait(afterFailures: n)
            logger.warning(
                "\(operation) failed: wrong recovery key (\(n) failed in a row\(wait > 0 ? "; the next check is allowed in \(Int(wait)) s" : "")\(stored ? "" : "; counted in memory only, the store could not take it"))"
            )
            throw VaultFailure(.wrongPassphrase, "wrong recovery key")
        }
        do { try resetFailedUnlocks(x) } catch {
            logger.warning("could not clear the failed-unlock count: \(error)")
        }
    }
}
