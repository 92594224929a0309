import Foundation
import VaultClient
import VaultProtocol

/// `vaultctl recovery-key create|remove`: the recovery key, a second way into a vault with a
/// passphrase, for the day the passphrase is forgotten (`unlock --recovery-key-fd`,
/// `passphrase reset --recovery-key-fd`), as systemd-cryptenroll --recovery-key makes one.
struct RecoveryKeyCommand: Command {
    enum Action: String, CaseIterable { case create, remove }
    var action: Action
    var passphraseFD: Int?

    init(_ a: inout Arguments) throws {
        action = try a.verb(of: "recovery-key")
        passphraseFD = try a.intOption("--passphrase-fd")
        if action == .remove && passphraseFD != nil {
            throw UsageError(message: "recovery-key remove takes no passphrase")
        }
    }

    func run(_ context: Context) throws {
        switch action {
        case .create:
            let passphrase = try Terminal.passphrase(
                .init(name: "vault passphrase", fdOption: "--passphrase-fd"), fd: passphraseFD)
            let key = try context.vault().createRecoveryKey(passphrase: passphrase)
            // Shown once: vaultd keeps only the vault's key wrapped by it.
            print(
                """
                A new recovery key for this vault (it replaces any earlier one):

                    \(key)

                Write it down or keep it in a password manager, away from this computer: it is
                shown only this once. With it, `vaultctl unlock --recovery-key-fd N` unlocks the
                vault and `vaultctl passphrase reset --recovery-key-fd N` sets a new passphrase.
                """)
        case .remove:
            try context.vault().removeRecoveryKey()
            print("recovery key removed: it no longer opens the vault")
        }
    }
}
