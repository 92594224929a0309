import Foundation
import VaultProtocol

/// The recovery key's wrapping, beside the passphrase's (docs/keychain.md "The recovery key").
///
/// The recovery key is 32 random bytes (256 bits: `RecoveryKeyText`). Its wrapping key `R` is
/// keyed BLAKE2b of a random salt (`Sodium.combine`), not Argon2id: a slow KDF makes a guess
/// of a human passphrase costly, and there is nothing to gain against a key with the full
/// entropy of the key it protects (guessing it is guessing the KEK). The rate limit still
/// applies to guesses through vaultd (`Vault.openWithRecoveryKey`).
///
/// `vault_meta` holds `recovery.salt` (16 bytes), `recovery.kek` (the KEK sealed by `R`:
/// what the recovery key opens) and `recovery.key` (`R` sealed by the KEK: what lets a
/// passphrase change re-wrap the KEK for the recovery key without it). XChaCha20-Poly1305 as
/// every wrapping, each with its own associated data.
extension KeyHierarchy {
    private static let kekAD = Array("vaultd recovery kek v1".utf8)
    private static let wrappingAD = Array("vaultd recovery wrapping v1".utf8)

    static func recoveryWrappingKey(_ recoveryKey: SecureBytes, salt: [UInt8]) -> SecureBytes {
        Sodium.combine(SecureBytes(copying: salt), key: recoveryKey, context: "vaultd recovery v1")
    }

    func hasRecoveryKey(in db: Database) throws -> Bool {
        try meta(db, "recovery.kek") != nil
    }

    /// Stores the wrapping of `kek` (just proved right) for `recoveryKey`, replacing any
    /// earlier recovery key's. Runs inside the caller's transaction.
    func setRecoveryKey(_ recoveryKey: SecureBytes, kek: SecureBytes, in db: Database) throws {
        try requireInitialized()
        guard hasPassphrase else {
            throw VaultFailure(
                .noPassphrase,
                "the vault has no passphrase, so it is always unlocked: nothing to recover")
        }
        let salt = Sodium.randomBytes(16)
        let r = Self.recoveryWrappingKey(recoveryKey, salt: salt)
        try storeRecovery(r, salt: salt, kek: kek, in: db)
        recoveryWrapping = r
    }

    private func storeRecovery(_ r: SecureBytes, salt: [UInt8], kek: SecureBytes, in db: Database)
        throws
    {
        try setMeta(db, "recovery.salt", salt)
        try setMeta(db, "recovery.kek", Sodium.seal(kek, key: r, associatedData: Self.kekAD))
        try setMeta(db, "recovery.key", Sodium.seal(r, key: kek, associatedData: Self.wrappingAD))
    }

    func removeRecoveryKey(in db: Database) throws {
        for k in ["recovery.salt", "recovery.kek", "recovery.key"] { try setMeta(db, k, nil) }
        recoveryWrapping = nil
    }

    /// Unlocks with the recovery key: the KEK it wraps opens every key (`openAll`). Throws
    /// AuthFailed (`.wrongPassphrase`) for a wrong key or when none was made.
    func unlock(recoveryKey: SecureBytes, in x: DatabasePool.Exclusive) throws {
        guard let salt = try meta(x.db, "recovery.salt"), let box = try meta(x.db, "recovery.kek"),
            let kek = Sodium.open(
                box, key: Self.recoveryWrappingKey(recoveryKey, salt: salt),
                associatedData: Self.kekAD)
        else { throw VaultFailure(.wrongPassphrase, "wrong recovery key") }
        try openAll(kek: kek, in: x.db, store: { try x.write($0) })
    }

    /// `R`, opened with the KEK, at each unlock; nil without a recovery key.
    func openRecoveryWrapping(kek: SecureBytes, in db: Database) throws -> SecureBytes? {
        guard let box = try meta(db, "recovery.key") else { return nil }
        let r = Sodium.open(box, key: kek, associatedData: Self.wrappingAD)
        if r == nil {
            db.logger.error(
                "the recovery key's wrapping does not open with the vault's key: damaged")
        }
        return r
    }

    /// Re-wraps the KEK for the recovery key under a new passphrase's KEK (`rewrap`); a vault
    /// left without a passphrase drops the recovery key (it is always unlocked). Throws
    /// InternalError, changing nothing, when `R` is not at hand (its wrapping is damaged).
    func rewrapRecovery(newKEK: SecureBytes?, in db: Database) throws {
        guard try hasRecoveryKey(in: db) else { return }
        guard let newKEK else { return try removeRecoveryKey(in: db) }
        guard let r = recoveryWrapping, let salt = try meta(db, "recovery.salt") else {
            throw VaultFailure(
                .internalError,
                "the recovery key's wrapping is damaged: remove it (vaultctl recovery-key remove) before changing the passphrase, then make a new one"
            )
        }
        try storeRecovery(r, salt: salt, kek: newKEK, in: db)
    }
}
