import Foundation
import VaultClient
import VaultProtocol

struct StatusCommand: Command {
    var json: Bool
    init(_ a: inout Arguments) throws { json = a.flag("--json") }

    func run(_ context: Context) throws {
        let s = try context.vault().status()
        if json {
            let j: JSON = [
                "state": .string(s.lock.state.rawValue),
                "unlockedSinceStart": .bool(s.lock.unlockedSinceStart),
                "hasPassphrase": .bool(s.lock.hasPassphrase), "version": .string(s.version),
                "items": JSON(s.items),
                "unavailableItems": JSON(s.unavailableItems),
                "domains": JSON(s.domains), "retryAfter": JSON(s.retryAfter),
                "deviceKey": s.deviceKey.map { .string($0) } ?? .null,
                "deviceKeyProblem": s.deviceKeyProblem.map { .string($0) } ?? .null,
                "recoveryKey": s.recoveryKey.map { .bool($0) } ?? .null,
                "secretAccess": s.secretAccess.map { .string($0) } ?? .null,
                "secretAccessSource": s.secretAccessSource.map { .string($0) } ?? .null,
            ]
            print(j.text)
            return
        }
        print(
            "state: \(s.lock.state.rawValue)\(s.lock.state == .locked && s.lock.unlockedSinceStart ? " (after first unlock)" : "")"
        )
        print("passphrase: \(s.lock.hasPassphrase ? "set" : "none")")
        if let r = s.recoveryKey { print("recovery key: \(r ? "set" : "none")") }
        switch s.deviceKey {
        case "tpm"?: print("device key: TPM 2.0")
        case "file"?: print("device key: a file in the data directory")
        default: break
        }
        if let problem = s.deviceKeyProblem {
            print("device key NOT AVAILABLE: \(problem)")
        }
        print(
            "items: \(s.items)\(s.unavailableItems > 0 ? " (\(s.unavailableItems) made on another device, not available on this one)" : "")"
        )
        print("domains: \(s.domains)")
        if let mode = s.secretAccess {
            let source =
                s.secretAccessSource == "config"
                ? "set in config.plist" : "the vault's default; SecretAccess in config.plist"
            print("secret access: \(mode) (\(source))")
        }
        if s.retryAfter > 0 { print("unlock possible in: \(Int(s.retryAfter.rounded(.up))) s") }
        print("vaultd: \(s.version)")
    }
}

struct InitCommand: Command {
    var noPassphrase: Bool
    var passphraseFD: Int?
    init(_ a: inout Arguments) throws {
        noPassphrase = a.flag("--no-passphrase")
        passphraseFD = try a.intOption("--passphrase-fd")
        if noPassphrase && passphraseFD != nil {
            throw UsageError(message: "--no-passphrase and --passphrase-fd exclude each other")
        }
    }

    func run(_ context: Context) throws {
        var passphrase: String?
        if !noPassphrase {
            passphrase = try Terminal.passphrase(
                .init(
                    name: "new vault passphrase", fdOption: "--passphrase-fd", isNew: true,
                    emptyHint: "use --no-passphrase for a vault without one"),
                fd: passphraseFD)
        }
        let state = try context.vault().initialize(passphrase: passphrase)
        print(
            "vault initialised \(state.hasPassphrase ? "with a passphrase" : "without a passphrase (always unlocked)"); state: \(state.state.rawValue)"
        )
    }
}

struct UnlockCommand: Command {
    var passphraseFD: Int?
    /// Also keep the passphrase in the login keyring, so vaultd unlocks itself at start.
    var remember: Bool
    /// Unlock with the passphrase remembered in the login keyring (vaultd looks it up).
    var fromKeyring: Bool
    /// Unlock with the recovery key read from this fd.
    var recoveryKeyFD: Int?
    init(_ a: inout Arguments) throws {
        passphraseFD = try a.intOption("--passphrase-fd")
        remember = a.flag("--remember")
        fromKeyring = a.flag("--from-keyring")
        recoveryKeyFD = try a.intOption("--recovery-key-fd")
        if fromKeyring && (remember || passphraseFD != nil) {
            throw UsageError(
                message: "--from-keyring takes no passphrase and cannot be combined with --remember"
            )
        }
        if recoveryKeyFD != nil && (fromKeyring || remember || passphraseFD != nil) {
            throw UsageError(message: "--recovery-key-fd takes no passphrase and no other option")
        }
    }

    func run(_ context: Context) throws {
        if let recoveryKeyFD {
            let key = try Terminal.passphrase(
                .init(name: "recovery key", fdOption: "--recovery-key-fd"), fd: recoveryKeyFD)
            let state = try context.vault().unlock(recoveryKey: key)
            print("state: \(state.state.rawValue)")
            return
        }
        if fromKeyring {
            let state = try context.vault().unlockFromKeyring()
            print("state: \(state.state.rawValue)")
            return
        }
        let passphrase = try Terminal.passphrase(
            .init(name: "vault passphrase", fdOption: "--passphrase-fd"), fd: passphraseFD)
        let state = try context.vault().unlock(passphrase: passphrase)
        print("state: \(state.state.rawValue)")
        if remember {
            // Only a passphrase vaultd just accepted is remembered.
            guard let dir = try context.vault().status().dataDirectory else {
                throw UsageError(
                    message: "vaultd did not say which data directory it serves; nothing remembered"
                )
            }
            try RememberedPassphrase.store(passphrase, dataDirectory: dir)
            print(
                "passphrase remembered in the login keyring: a vaultd that starts with that keyring on its session bus unlocks itself (vaultctl forget undoes this)"
            )
        }
    }
}

struct LockCommand: Command {
    init(_ a: inout Arguments) throws {}
    func run(_ context: Context) throws {
        let state = try context.vault().lock()
        print("state: \(state.state.rawValue)")
    }
}

struct PassphraseCommand: Command {
    enum Action: String, CaseIterable { case change, set, remove, reset }
    var action: Action
    var oldFD: Int?
    var newFD: Int?
    var recoveryKeyFD: Int?

    init(_ a: inout Arguments) throws {
        action = try a.verb(of: "passphrase")
        oldFD = try a.intOption("--passphrase-fd")
        newFD = try a.intOption("--new-passphrase-fd")
        recoveryKeyFD = try a.intOption("--recovery-key-fd")
        if action != .reset && recoveryKeyFD != nil {
            throw UsageError(message: "only passphrase reset takes --recovery-key-fd")
        }
        if action == .reset && oldFD != nil {
            throw UsageError(
                message: "passphrase reset takes --recovery-key-fd and --new-passphrase-fd")
        }
        if action == .set && oldFD != nil {
            throw UsageError(message: "passphrase set takes only --new-passphrase-fd")
        }
        if action == .remove && newFD != nil {
            throw UsageError(message: "passphrase remove takes only --passphrase-fd")
        }
    }

    func run(_ context: Context) throws {
        if action == .reset { return try reset(context) }
        let old =
            action == .set
            ? nil
            : try Terminal.passphrase(
                .init(name: "current passphrase", fdOption: "--passphrase-fd"), fd: oldFD)
        var new: String?
        if action != .remove {
            new = try Terminal.passphrase(
                .init(
                    name: "new passphrase", fdOption: "--new-passphrase-fd", isNew: true,
                    emptyHint: "passphrase remove makes a vault without one"),
                fd: newFD)
        }
        let deleted = try context.vault().changePassphrase(old: old, new: new)
        switch action {
        case .change: print("passphrase changed")
        case .set: print("passphrase set")
        case .remove:
            print("passphrase removed; \(deleted) whenPasscodeSetThisDeviceOnly item(s) deleted")
        case .reset: break
        }
        if action != .set, let dir = try? context.vault().status().dataDirectory {
            RememberedPassphrase.follow(newPassphrase: new, dataDirectory: dir)
        }
    }

    /// `passphrase reset`: the recovery key (first), then the new passphrase, as `change`
    /// reads it.
    private func reset(_ context: Context) throws {
        let key = try Terminal.passphrase(
            .init(name: "recovery key", fdOption: "--recovery-key-fd"), fd: recoveryKeyFD)
        let new = try Terminal.passphrase(
            .init(
                name: "new passphrase", fdOption: "--new-passphrase-fd", isNew: true,
                emptyHint: "a vault's passphrase cannot be empty"),
            fd: newFD)
        try context.vault().resetPassphrase(recoveryKey: key, new: new)
        print("passphrase reset with the recovery key; the vault is unlocked")
        if let dir = try? context.vault().status().dataDirectory {
            RememberedPassphrase.follow(newPassphrase: new, dataDirectory: dir)
        }
    }
}

/// `vaultctl doctor [--json]`: vaultd checks its store (io.vaultd.Vault.Check): SQLite's
/// integrity check, and every item's row, attributes and secret. Exit 0 when all is sound,
/// 1 when anything is damaged (each damaged item named, never its secret).
struct DoctorCommand: Command {
    var json: Bool
    init(_ a: inout Arguments) throws { json = a.flag("--json") }

    func run(_ context: Context) throws {
        let r = try context.vault().check()
        let integrity = r["integrity"]?.arrayValue?.compactMap(\.stringValue) ?? []
        let damaged = r["damaged"]?.arrayValue ?? []
        let damagedValues = r["damagedValues"]?.arrayValue ?? []
        let sound = integrity == ["ok"] && damaged.isEmpty && damagedValues.isEmpty
        if json {
            print(JSON.object(r).text)
        } else {
            print("store integrity: \(integrity == ["ok"] ? "ok" : "FAILED")")
            if integrity != ["ok"] { for line in integrity { print("  \(line)") } }
            let unchecked = r["secretsUnchecked"]?.intValue ?? 0
            print(
                "items: \(r["items"]?.intValue ?? 0) checked, \(damaged.count) damaged\(unchecked > 0 ? ", \(unchecked) secret(s) not checked (locked class, or made on another device)" : "")"
            )
            for d in damaged { print("  damaged: \(Keychain.describeDamaged(d))") }
            print(
                "preferences: \(r["preferences"]?.intValue ?? 0) checked, \(damagedValues.count) damaged"
            )
            for d in damagedValues { print("  damaged: \(Self.describeDamagedValue(d))") }
            if let aside = r["setAside"]?.intValue, aside > 0 {
                print(
                    "\(aside) row(s) set aside in items_set_aside (a second row of one primary key, kept when uniqueness was added)"
                )
            }
        }
        guard sound else {
            throw Refusal(
                message: Self.advice(
                    integrity: integrity, items: damaged.count, values: damagedValues.count))
        }
    }

    /// What to do about what the check found.
    static func advice(integrity: [String], items: Int, values: Int) -> String {
        guard integrity == ["ok"] else {
            return
                "the store's file is damaged: keep a copy of the data directory and restore a backup (vaultctl restore, docs/backup.md)"
        }
        var parts: [String] = []
        if items > 0 {
            parts.append(
                "\(items) damaged item(s): delete each (item delete with its service or server and account) and add it again"
            )
        }
        if values > 0 {
            parts.append(
                "\(values) damaged preference value(s): write each again or delete it (defaults delete DOMAIN KEY)"
            )
        }
        return parts.joined(separator: "; ") + "; or restore a backup (docs/backup.md)"
    }

    /// `key "K" of domain "D"` for a Check or Backup reply's DamagedValue.
    static func describeDamagedValue(_ d: JSON) -> String {
        "key \(JSON.string(d["key"]?.stringValue ?? "").text) of domain \(JSON.string(d["domain"]?.stringValue ?? "").text)"
    }
}
