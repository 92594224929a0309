import DesktopKeyring
import Foundation
import Synchronization
import VaultCore
import VaultProtocol

/// Unlock at login: `vaultctl unlock --remember` keeps the vault passphrase in the login
/// keyring (schema `io.vaultd.Unlock`, attribute `vault` = the data directory); vaultd looks
/// it up at start and on `io.vaultd.Vault.UnlockFromKeyring`. The lookup never unlocks the
/// keyring (so it never prompts) and is bounded by a deadline: a locked or absent keyring
/// leaves the vault locked, with the reason logged or returned.
enum KeyringUnlock {
    /// Why no passphrase is looked up in a login keyring: vaultd is that keyring (it serves the
    /// Secret Service), and the passphrase would be kept in the vault it unlocks.
    static let circle =
        "vaultd is this session's Secret Service, so the login keyring is the vault itself: a passphrase kept there could never unlock it (unlock with vaultctl unlock; docs/secret-service.md)"

    /// Set at start, before the socket serves, when vaultd serves the Secret Service: the
    /// keyring is never asked. Read by connection threads (UnlockFromKeyring).
    static let isOwnKeyring = Atomic(false)

    /// Unlocks `vault` for `session` with the remembered passphrase (the engine decides whether
    /// the caller may, before the keyring is asked). Throws KeyringUnavailable (no bus, no
    /// Secret Service, keyring locked, nothing remembered, timed out) or the engine's errors
    /// (PermissionDenied for an app, AuthFailed when the remembered passphrase is no longer
    /// the vault's, RateLimited, ...).
    static func unlock(_ vault: Vault, session: VaultSession, timeout: Double) throws -> LockState {
        do {
            return try session.unlockFromKeyring {
                try rememberedPassphrase(vault, timeout: timeout)
            }
        } catch let e as VaultFailure where e.code == .wrongPassphrase {
            throw VaultFailure(
                .wrongPassphrase,
                "the passphrase remembered in the login keyring is not the vault's (changed? run vaultctl unlock --remember again)"
            )
        }
    }

    /// The passphrase remembered for `vault` in the login keyring. Throws KeyringUnavailable.
    private static func rememberedPassphrase(_ vault: Vault, timeout: Double) throws -> SecureBytes
    {
        guard !isOwnKeyring.load(ordering: .acquiring) else {
            throw VaultFailure(.keyringUnavailable, circle)
        }
        let found: [KeyringItem]
        do {
            let keyring = try DesktopKeyring(timeout: timeout)
            found = try keyring.search(.unlock, ["vault": vault.dataDirectory])
        } catch let e as KeyringError {
            throw VaultFailure(.keyringUnavailable, "login keyring: \(e.message)")
        }
        guard !found.isEmpty else {
            throw VaultFailure(
                .keyringUnavailable,
                "login keyring: no passphrase remembered for this vault (vaultctl unlock --remember)"
            )
        }
        guard var bytes = found.first(where: { !$0.isLocked && $0.secret != nil })?.secret else {
            throw VaultFailure(
                .keyringUnavailable,
                "login keyring: the keyring holding the remembered passphrase is locked")
        }
        let passphrase = SecureBytes(copying: bytes)
        bytes.wipe()
        return passphrase
    }

    /// At start: when the vault is locked and has a passphrase, tries the keyring on a thread
    /// of its own, so serving never waits for it, and logs the outcome.
    static func atStart(_ vault: Vault, logger: Logger, timeout: Double = 5) {
        let state = vault.lockState
        guard state.hasPassphrase, state.state == .locked else { return }
        guard !isOwnKeyring.load(ordering: .acquiring) else {
            logger.info("locked; \(circle)")
            return
        }
        guard DesktopKeyring.sessionBusConfigured() else {
            logger.info(
                "locked; no session bus, so no passphrase remembered in a login keyring (vaultctl unlock --remember) can be asked for"
            )
            return
        }
        let t = Thread {
            do {
                // At the owner's login, for the owner.
                _ = try unlock(
                    vault, session: vault.daemonSession(for: .loginKeyringUnlock), timeout: timeout)
                logger.notice("unlocked with the passphrase remembered in the login keyring")
            } catch let e as VaultFailure {
                logger.warning("\(e.message); staying locked")
            } catch {
                logger.warning("login keyring: \(error); staying locked")
            }
        }
        t.name = "vaultd.keyring-unlock"
        t.start()
    }
}
