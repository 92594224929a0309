import Foundation
import VaultClient
import VaultProtocol

/// `path` made absolute against the working directory: vaultd opens the file, and its own
/// working directory is not the caller's.
private func absolute(_ path: String) -> String {
    path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
}

/// `vaultctl backup FILE [--passphrase-fd N | --recipient age1…]... [--include-device-bound]`:
/// vaultd writes the backup (an age v1 file) itself; only the backup passphrase crosses the
/// socket, as Unlock's does.
struct BackupCommand: Command {
    var file: String
    var passphraseFD: Int?
    var recipients: [String]
    var includeDeviceBound: Bool
    /// `--json`: vaultd's reply (the counts, the size, the damaged items left out) with the
    /// file, as one JSON object, instead of the lines.
    var json: Bool

    init(_ a: inout Arguments) throws {
        passphraseFD = try a.intOption("--passphrase-fd")
        recipients = try a.options("--recipient")
        includeDeviceBound = a.flag("--include-device-bound")
        json = a.flag("--json")
        guard let f = a.positional() else {
            throw UsageError(message: "backup needs a FILE to write")
        }
        file = f
        if passphraseFD != nil && !recipients.isEmpty {
            throw UsageError(
                message:
                    "--passphrase-fd and --recipient exclude each other (a passphrase must be an age file's only recipient)"
            )
        }
    }

    func run(_ context: Context) throws {
        var passphrase: String?
        if recipients.isEmpty {
            passphrase = try Terminal.passphrase(
                .init(
                    name: "new backup passphrase", fdOption: "--passphrase-fd", isNew: true,
                    emptyHint: "or use --recipient age1… for a key"),
                fd: passphraseFD)
        }
        let r = try context.vault().backup(
            to: absolute(file), passphrase: passphrase, recipients: recipients,
            includeDeviceBound: includeDeviceBound)
        func n(_ k: String) -> Int { r[k]?.intValue ?? 0 }
        // Written without the damaged items and values: named, and the exit status says not
        // all of it is in.
        let damaged = r["damagedItems"]?.arrayValue ?? []
        let damagedValues = r["damagedValues"]?.arrayValue ?? []
        let incomplete = [
            damaged.isEmpty ? nil : "\(damaged.count) damaged item(s)",
            damagedValues.isEmpty ? nil : "\(damagedValues.count) damaged preference value(s)",
        ]
        .compactMap { $0 }
        if json {
            var o = r
            o["file"] = .string(file)
            print(JSON.object(o).text)
            if !incomplete.isEmpty {
                throw Refusal(
                    message:
                        "the backup was written without \(incomplete.joined(separator: " and ")) (vaultctl doctor lists them)"
                )
            }
            return
        }
        var line = "backup written to \(file): \(n("items")) items"
        if n("deviceBoundItems") > 0 {
            line += " (\(n("deviceBoundItems")) ThisDeviceOnly, sealed to this device)"
        }
        line +=
            ", \(n("preferences")) preferences in \(n("domains")) domains, \(n("apps")) apps; \(n("bytes")) bytes"
        print(line)
        if n("leftOutItems") > 0 {
            print(
                "\(n("leftOutItems")) ThisDeviceOnly item(s) left out\(includeDeviceBound ? " (made on another device)" : " (--include-device-bound includes them)")"
            )
        }
        print(
            "key wrappings: not included (this vault's recovery key and passphrase do not open the backup, nor carry over to a restore)"
        )
        print(
            passphrase != nil
                ? "open it with: vaultctl restore \(file)  (or age -d)"
                : "open it with: vaultctl restore --identity KEYFILE \(file)  (or age -d -i KEYFILE)"
        )
        for d in damaged {
            printError("damaged, not in the backup: \(Keychain.describeDamaged(d))")
        }
        for d in damagedValues {
            printError("damaged, not in the backup: \(DoctorCommand.describeDamagedValue(d))")
        }
        guard incomplete.isEmpty else {
            throw Refusal(
                message:
                    "the backup was written without \(incomplete.joined(separator: " and ")) (vaultctl doctor lists them)"
            )
        }
    }
}

/// `vaultctl restore FILE [--passphrase-fd N | --identity KEYFILE] [--merge]
/// [--new-passphrase-fd M | --no-passphrase]`: vaultd opens, checks and applies the backup.
struct RestoreCommand: Command {
    var file: String
    var passphraseFD: Int?
    var identity: String?
    var merge: Bool
    var newPassphraseFD: Int?
    var noPassphrase: Bool
    /// `--json`: vaultd's reply (added, replaced and kept counts of items, preferences and
    /// apps) with the file and whether the restore made the vault, as one JSON object.
    var json: Bool

    init(_ a: inout Arguments) throws {
        passphraseFD = try a.intOption("--passphrase-fd")
        identity = try a.option("--identity")
        json = a.flag("--json")
        merge = a.flag("--merge")
        newPassphraseFD = try a.intOption("--new-passphrase-fd")
        noPassphrase = a.flag("--no-passphrase")
        guard let f = a.positional() else {
            throw UsageError(message: "restore needs the backup FILE")
        }
        file = f
        if passphraseFD != nil && identity != nil {
            throw UsageError(message: "--passphrase-fd and --identity exclude each other")
        }
        if newPassphraseFD != nil && noPassphrase {
            throw UsageError(message: "--new-passphrase-fd and --no-passphrase exclude each other")
        }
    }

    func run(_ context: Context) throws {
        let vault = try context.vault()
        var identityText: String?
        var passphrase: String?
        if let identity {
            let data: Data
            do {
                data = try FileDescriptor.readFile(identity, limit: 1 << 20)
            } catch {
                throw UsageError(message: "cannot read the identity file \(identity): \(error)")
            }
            guard let text = String(validating: data, as: UTF8.self) else {
                throw InputError(message: "the identity file \(identity) is not UTF-8 text")
            }
            identityText = text
        } else {
            passphrase = try Terminal.passphrase(
                .init(name: "backup passphrase", fdOption: "--passphrase-fd"), fd: passphraseFD)
        }
        // A new device: the vault is made by the restore, with a passphrase of its own.
        var newPassphrase: String?
        let uninitialized = try vault.status().lock.state == .uninitialized
        if uninitialized && !noPassphrase {
            newPassphrase = try Terminal.passphrase(
                .init(
                    name: "new vault passphrase", fdOption: "--new-passphrase-fd", isNew: true,
                    emptyHint: "use --no-passphrase for a vault without one"),
                fd: newPassphraseFD)
        } else if !uninitialized && (newPassphraseFD != nil || noPassphrase) {
            throw UsageError(
                message:
                    "the vault exists: --new-passphrase-fd and --no-passphrase are for a restore into a new vault (vaultctl passphrase change changes this one's)"
            )
        }
        let r = try vault.restore(
            from: absolute(file), passphrase: passphrase, identity: identityText,
            newPassphrase: newPassphrase, merge: merge)
        if json {
            var o = r
            o["file"] = .string(file)
            o["initialised"] = .bool(uninitialized)
            print(JSON.object(o).text)
            return
        }
        func counts(_ k: String) -> String {
            let c = r[k]
            return
                "\(c?["added"]?.intValue ?? 0) added, \(c?["replaced"]?.intValue ?? 0) replaced, \(c?["kept"]?.intValue ?? 0) kept"
        }
        print("restored \(file)")
        print("items: \(counts("items"))")
        print("preferences: \(counts("preferences"))")
        print("apps: \(counts("apps"))")
        if let u = r["unavailableItems"]?.intValue, u > 0 {
            print(
                "\(u) ThisDeviceOnly item(s) were sealed to another device: stored, but not available on this one"
            )
        }
        if uninitialized {
            print(
                "vault initialised \(newPassphrase != nil ? "with the new passphrase" : "without a passphrase (always unlocked)")"
            )
        }
    }
}
