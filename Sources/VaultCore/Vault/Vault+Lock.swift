import Foundation
import VaultProtocol

// The lock life-cycle: initialization, unlock, lock, the passphrase, and the failed-unlock
// rate limit.

extension Vault {
    /// True when the vault has a passphrase and is unlocked (so it can be auto-locked).
    public var isUnlockedWithPassphrase: Bool {
        locked { keys.hasPassphrase && keys.state == .unlocked }
    }

    /// The lock state now.
    public var lockState: LockState { locked { keys.lockState } }

    /// The vault's status. The owner's tools get the whole vault's figures; an
    /// app only those it could read anyway (items in its access groups; its own domain, its
    /// app groups' suites and NSGlobalDomain, when stored): the whole vault's counts told it
    /// how other apps' items and domains came and went.
    /// The data directory is told to the owner only.
    func status(caller: Caller) throws -> VaultStatus {
        // An app's connection made before an uninstall or reinstall gets nothing
        // (MissingEntitlement); a new install's first call, this one or any, is its first
        // launch, so the figures never count what that launch wipes.
        _ = try authorize(.status, for: caller)
        return try exclusive { x in
            let readable = Policy.visibleDomains(try preferences.domains(in: x.db), to: caller)
            return VaultStatus(
                lock: keys.lockState,
                items: try keychain.count(inGroups: caller.visibleAccessGroups, in: x.db),
                unavailableItems: try keychain.unavailableCount(
                    inGroups: caller.visibleAccessGroups, in: x.db),
                domains: readable.count,
                retryAfter: try rateLimitDelay(x),
                dataDirectory: caller.isOwner ? dataDirectory : nil,
                deviceKey: caller.isOwner ? deviceKeyStatus : nil,
                recoveryKey: caller.isOwner ? try keys.hasRecoveryKey(in: x.db) : nil,
                secretAccess: caller.isOwner ? try secretAccessMode(in: x.db) : nil,
                secretAccessConfigured: caller.isOwner ? accessGate.configuredMode != nil : nil)
        }
    }

    /// Creates the vault, with a passphrase or without (then always unlocked). Owner only.
    /// Throws AlreadyInitialized, PermissionDenied.
    func initialize(passphrase: SecureBytes?, caller: Caller) throws -> LockState {
        _ = try authorize(.initialize, for: caller)
        if let p = passphrase, p.count == 0 {
            throw VaultFailure.param("the passphrase must not be empty")
        }
        let kek = try passphrase.map {
            try KeyHierarchy.PassphraseKEK(deriving: $0, cost: passphrasePolicy.kdfCost)
        }
        return try inEventOrder { ticket in
            let state = try exclusive { x in
                try writingKeys(in: x) { db in
                    try changingKeys { try keys.initialize(passphrase: kek, in: db) }
                    // A vault made now asks before a program reads another's secret.
                    try AccessStore.setDefaultMode(.confirm, in: db)
                }
                accessGate.recordedMode = .confirm
                ticket.take()
                return keys.lockState
            }
            return (state, [.lockState(state)])
        }
    }

    /// Unlocks with the passphrase. Owner only. Throws PermissionDenied, Vault.AuthFailed
    /// (wrong passphrase; counted), RateLimited (too many failures: wait `retryAfter`
    /// seconds), NoPassphrase, NotInitialized. A vault whose stored Argon2id parameters cost
    /// less than `passphrasePolicy.kdfCost` (made before the cost was raised) is re-wrapped
    /// under a KEK derived at that cost once the passphrase proved right (`strengthenKDF`).
    func unlock(passphrase: SecureBytes, caller: Caller) throws -> LockState {
        _ = try authorize(.unlock, for: caller)
        return try unlockAuthorized(passphrase: passphrase)
    }

    /// Unlock with the passphrase remembered in the login keyring, which `lookUp` reads (a
    /// front-end's keyring client); it is asked only once the caller may unlock and the vault
    /// is locked with a passphrase. Owner only. Throws PermissionDenied, NotInitialized,
    /// NoPassphrase, what `lookUp` throws, and Unlock's errors. A vault already unlocked is
    /// left so.
    func unlockFromKeyring(caller: Caller, lookUp: () throws -> SecureBytes) throws
        -> LockState
    {
        _ = try authorize(.unlockFromKeyring, for: caller)
        let state = lockState
        if !state.hasPassphrase {
            if state.state == .uninitialized {
                throw VaultFailure(.notInitialized, "the vault has not been initialised")
            }
            throw VaultFailure(.noPassphrase, "the vault has no passphrase: it is always unlocked")
        }
        if state.state == .unlocked { return state }
        return try unlockAuthorized(passphrase: try lookUp())
    }

    private func unlockAuthorized(passphrase: SecureBytes) throws -> LockState {
        // One attempt at a time, so parallel guesses cannot all pass the rate limit.
        unlockAttempts.lock()
        defer { unlockAttempts.unlock() }
        let kek = try passphraseKEK(passphrase, for: "Unlock")
        let state: LockState = try inEventOrder { ticket in
            let state: LockState = try exclusive { x in
                try openKeysCounting(kek, for: "Unlock", in: x)
                ticket.take()
                return keys.lockState
            }
            return (state, [.lockState(state)])
        }
        strengthenKDF(passphrase)
        return state
    }

    /// Re-wraps this device's keys under a KEK of `passphrase` (just proved right) derived
    /// at `passphrasePolicy.kdfCost` when the stored parameters cost less: the new salt and
    /// parameters and the re-wrapped keys are stored in one transaction, so a crash leaves
    /// either the old wrapping or the new. Derived outside the engine lock, as Unlock derives.
    /// A failure (a full disk, a Lock in between) leaves the old wrapping, which still opens,
    /// and is logged: the next unlock tries again. Call it holding `unlockAttempts`.
    private func strengthenKDF(_ passphrase: SecureBytes) {
        let cost = passphrasePolicy.kdfCost
        guard (try? exclusive({ x in try keys.kdfIsWeaker(than: cost, in: x.db) })) == true else {
            return
        }
        do {
            let stronger = try KeyHierarchy.PassphraseKEK(deriving: passphrase, cost: cost)
            try exclusive { x in
                guard keys.state == .unlocked, try keys.kdfIsWeaker(than: cost, in: x.db) else {
                    return
                }
                try writingKeys(in: x) { db in
                    try changingKeys { try keys.rewrap(newPassphrase: stronger, in: db) }
                }
                // The keys wrapped under the weaker KEK stay in the WAL's old frames until it
                // wraps round (as after ChangePassphrase).
                do { try x.truncateWAL() } catch {
                    logger.warning(
                        "the keys wrapped under the earlier Argon2id cost may stay in the write-ahead log for a while: \(error)"
                    )
                }
            }
            let (ops, mem) = cost.limits
            logger.notice(
                "re-wrapped the vault's keys under Argon2id at \(ops) passes over \(mem >> 20) MiB")
        } catch {
            logger.warning(
                "could not re-wrap the vault's keys at the stronger Argon2id cost (they stay as they were; the next unlock tries again): \(error)"
            )
        }
    }

    /// Locks (wipes whenUnlocked class keys). Owner only. Throws PermissionDenied,
    /// NoPassphrase, NotInitialized.
    func lockVault(caller: Caller) throws -> LockState {
        _ = try authorize(.lock, for: caller)
        return try inEventOrder { ticket in
            let state = try locked {
                try changingKeys { try keys.lock() }
                ticket.take()
                return keys.lockState
            }
            return (state, [.lockState(state)])
        }
    }

    /// Changes (both given), sets (`old` nil, vault without passphrase) or removes (`new` nil)
    /// the passphrase. Removing it deletes whenPasscodeSet items. Returns the new lock state
    /// and the number of items deleted. Owner only. With a passphrase, `old` is checked as
    /// Unlock checks it (counted, rate-limited, one check at a time with Unlock's) and, right,
    /// unlocks a locked vault; without one, `old` is ignored. Throws PermissionDenied, Param
    /// (empty `new`), Vault.AuthFailed (`old` wrong or missing), RateLimited, NotInitialized,
    /// NoPassphrase (removing a passphrase the vault does not have).
    func changePassphrase(old: SecureBytes?, new: SecureBytes?, caller: Caller) throws
        -> PassphraseChange
    {
        _ = try authorize(.changePassphrase, for: caller)
        if let p = new, p.count == 0 {
            throw VaultFailure.param("the new passphrase must not be empty")
        }
        // One passphrase check at a time, Unlock's included: a ChangePassphrase guess beside an
        // Unlock guess got two tries through one slot of the rate limit.
        unlockAttempts.lock()
        defer { unlockAttempts.unlock() }
        // The old passphrase's KEK, derived outside the engine lock as Unlock derives its own
        // (Argon2id is slow: under the lock it held up every write meanwhile).
        let hasPassphrase = try locked {
            try keys.requireInitialized()
            return keys.hasPassphrase
        }
        var oldKEK: SecureBytes?
        if hasPassphrase {
            guard let old else {
                logger.warning("ChangePassphrase refused: the current passphrase was not given")
                throw VaultFailure(.wrongPassphrase, "the current passphrase is required")
            }
            // A passphrase check like Unlock's, so rate-limited and counted like it.
            oldKEK = try passphraseKEK(old, for: "ChangePassphrase")
        } else if new == nil {
            throw VaultFailure(.noPassphrase, "the vault has no passphrase to remove")
        }
        // After the rate limit's check: a refused call does not spend an Argon2id on it.
        let newKEK = try new.map {
            try KeyHierarchy.PassphraseKEK(deriving: $0, cost: passphrasePolicy.kdfCost)
        }
        return try inEventOrder { ticket in
            let result: PassphraseChange = try exclusive { x in
                // Only a ChangePassphrase sets or removes a passphrase once the vault exists,
                // and this one holds `unlockAttempts`: `hasPassphrase` still holds.
                if let oldKEK {
                    try openKeysCounting(oldKEK, for: "ChangePassphrase", in: x)
                    // A locked vault is unlocked now, whatever becomes of the change.
                    ticket.take()
                    ticket.madeSoFar = [.lockState(keys.lockState)]
                }
                let result = try writingKeys(in: x) { db in
                    var deleted = 0
                    if new == nil {
                        deleted = try keychain.deleteAll(
                            accessible: .whenPasscodeSetThisDeviceOnly, in: db)
                    }
                    try changingKeys { try keys.rewrap(newPassphrase: newKEK, in: db) }
                    return PassphraseChange(lock: keys.lockState, deletedItems: deleted)
                }
                // The replaced keys (wrapped under the old KEK; without a passphrase the KEK
                // itself) stay in the WAL's old frames until it wraps round, and a crash leaves
                // them there: with them the old passphrase, or none, still opens every item.
                do {
                    try x.truncateWAL()
                } catch {
                    logger.warning(
                        "the passphrase changed, but the keys it replaced may stay in the write-ahead log for a while: \(error)"
                    )
                }
                ticket.take()
                return result
            }
            return (result, [.lockState(result.lock)])
        }
    }

    /// Checks the rate limit, then derives `passphrase`'s KEK outside the engine lock (Argon2id
    /// is slow: other callers are served meanwhile). Throws RateLimited, NoPassphrase,
    /// NotInitialized.
    /// `operation` (Unlock, ChangePassphrase) names the call in the log.
    func passphraseKEK(_ passphrase: SecureBytes, for operation: String) throws
        -> SecureBytes
    {
        let parameters = try exclusive { x in
            do {
                try checkRateLimit(x)
            } catch let e as VaultFailure where e.code == .rateLimited {
                // Guesses made during the wait are refused unchecked, but seen in the log.
                logger.warning("\(operation) refused: \(e.message)")
                throw e
            }
            return try keys.passphraseParameters(in: x.db)
        }
        return try Sodium.argon2id(passphrase: passphrase, parameters: parameters)
    }

    /// Opens the keys with a passphrase's KEK (under the engine lock): a wrong one counts for
    /// the rate limit, is logged (as sshd and polkit log a failed password: someone guessing
    /// must show in the journal; the count and the wait, never the passphrase) and throws
    /// Vault.AuthFailed, a right one clears the count.
    func openKeysCounting(
        _ kek: SecureBytes, for operation: String, in x: DatabasePool.Exclusive
    ) throws {
        do {
            try changingKeys { try keys.unlock(kek: kek, in: x) }
        } catch let e as VaultFailure where e.code == .wrongPassphrase {
            let (n, stored) = recordFailedUnlock(x)
            // The schedule's waits are whole seconds (1 s to 900 s).
            let wait = Self.unlockWait(afterFailures: n)
            let waitText = String(Int(wait))
            logger.warning(
                "\(operation) failed: wrong passphrase (\(n) failed in a row\(wait > 0 ? "; the next check is allowed in \(waitText) s" : "")\(stored ? "" : "; counted in memory only, the store could not take it"))"
            )
            throw e
        }
        // Unlocked: a count left behind (a full disk) only costs a later wait; failing here
        // reported an unlocked vault as not unlocked, to observers too.
        do { try resetFailedUnlocks(x) } catch {
            logger.warning("could not clear the failed-unlock count: \(error)")
        }
    }

    /// A count of failed passphrase checks in a row and the wall-clock time of the last
    /// (seconds since 1970).
    struct FailureRecord {
        var count: Int
        var last: Double
    }

    /// The failed checks to rate-limit by: the stored record or the one in memory, whichever
    /// counts more (the one in memory on a tie: it has the clock corrections `rateLimitDelay`
    /// made). A damaged stored record counts as three failures just now (a wait, never none).
    /// Throws when the store cannot be read: a check whose count is unknown is refused.
    /// Call it under the engine lock; the result becomes the record in memory.
    private func failureRecord(_ x: DatabasePool.Exclusive) throws -> FailureRecord {
        var stored = FailureRecord(count: 0, last: 0)
        if let r = try x.db.row("SELECT value FROM vault_meta WHERE key = 'unlock.failures'") {
            if let raw = r[0].blob, let j = try? JSON.parse(raw), let n = j["count"]?.intValue,
                let last = j["last"]?.doubleValue
            {
                stored = FailureRecord(count: n, last: last)
            } else {
                stored = FailureRecord(count: 3, last: clock.now.timeIntervalSince1970)
            }
        }
        if stored.count > failures.count { failures = stored }
        return failures
    }

    // Failed unlocks: after 3 failures each further one doubles the wait (1 s … 15 min,
    // `unlockWait`), recorded in the store so a restart does not reset it, and in memory so a
    // store that cannot take it (a full disk) does not either. A last failure later than now
    // (the wall clock went back since) counts from now: counted from the recorded time, the
    // wait would last as long as the clock had gone back (an hour, a year) on top. Call it
    // under the engine lock. Such a failure is recorded as now, so that the wait ends (in memory
    // at once; in the store when it can take it).
    private func rateLimitDelay(_ x: DatabasePool.Exclusive) throws -> Double {
        var record = try failureRecord(x)
        guard record.count >= 3 else { return 0 }
        let wait = Self.unlockWait(afterFailures: record.count)
        let now = clock.now.timeIntervalSince1970
        if record.last > now {
            record.last = now
            failures = record
            do { try storeFailures(record, x) } catch {
                logger.warning(
                    "could not store the corrected time of the last failed unlock: \(error)")
            }
        }
        return max(0, record.last + wait - now)
    }

    /// Throws RateLimited (with `retryAfter`) while failed passphrase checks impose a wait,
    /// and whatever reading the count threw (the check is then refused, not allowed).
    func checkRateLimit(_ x: DatabasePool.Exclusive) throws {
        let delay = try rateLimitDelay(x)
        if delay > 0 {
            throw VaultFailure(
                .rateLimited, "too many failed unlocks; try again in \(Int(delay.rounded(.up))) s",
                .init(retryAfter: delay))
        }
    }

    /// The wait in seconds after `n` failed passphrase checks in a row, as vaultd imposes it:
    /// none below 3, then 1 s doubling with each failure, at most 15 min (900 s).
    public static func unlockWait(afterFailures n: Int) -> Double {
        n >= 3 ? min(pow(2.0, Double(min(n, 64) - 3)), 900) : 0
    }

    /// Counts one more failure, in memory first (that cannot fail), then in the store.
    /// Returns the count and whether the store took it. Call it under the engine lock, after
    /// `failureRecord` (the rate limit's check) in the same attempt.
    func recordFailedUnlock(_ x: DatabasePool.Exclusive) -> (count: Int, stored: Bool) {
        failures = FailureRecord(count: failures.count + 1, last: clock.now.timeIntervalSince1970)
        do {
            try storeFailures(failures, x)
            return (failures.count, true)
        } catch {
            return (failures.count, false)
        }
    }

    private func storeFailures(_ record: FailureRecord, _ x: DatabasePool.Exclusive) throws {
        let j: JSON = ["count": JSON(record.count), "last": JSON(record.last)]
        try x.write { db in
            try db.run(
                "INSERT OR REPLACE INTO vault_meta (key, value) VALUES ('unlock.failures', ?)",
                [.blob(j.serialized())])
        }
    }

    func resetFailedUnlocks(_ x: DatabasePool.Exclusive) throws {
        failures = FailureRecord(count: 0, last: 0)
        // Only when there is a count: a DELETE of nothing is still a write transaction.
        guard try x.db.row("SELECT 1 FROM vault_meta WHERE key = 'unlock.failures'") != nil else {
            return
        }
        try x.write { db in try db.run("DELETE FROM vault_meta WHERE key = 'unlock.failures'") }
    }
}

/// How a vault treats passphrases: the Argon2id cost of new KEKs. The failed-unlock waits
/// (`Vault.unlockWait`) are not part of it: they are always the documented schedule, and
/// tests move the vault's clock to get through them.
public struct PassphrasePolicy: Sendable {
    /// The Argon2id cost of every KEK derived from now on, and the least a stored one may
    /// have before it is re-wrapped at the next unlock.
    public var kdfCost: Sodium.KDFCost

    public init(kdfCost: Sodium.KDFCost = .moderate) {
        self.kdfCost = kdfCost
    }

    /// The settings for tests only, from the environment: `VAULTD_ARGON2_TEST_COST=min`
    /// (libsodium's MIN limits, never less). Unset or empty, the real default. Throws for
    /// any other value.
    public static func fromEnvironment(_ env: [String: String]) throws -> PassphrasePolicy {
        var p = PassphrasePolicy()
        switch env["VAULTD_ARGON2_TEST_COST"] {
        case nil, "": break
        case "min": p.kdfCost = .minimum
        case let v?:
            throw VaultFailure(
                .param, "VAULTD_ARGON2_TEST_COST (for tests only) must be min, not '\(v)'")
        }
        return p
    }
}
