import DesktopKeyring
import Foundation
import VaultProtocol

/// `vaultctl import gnome-keyring [FILE]`: one of gnome-keyring's keyring files, read offline
/// (no gnome-keyring running, no Secret Service). FILE defaults to the login keyring,
/// `$XDG_DATA_HOME/keyrings/login.keyring` (`~/.local/share/keyrings/login.keyring`). An
/// encrypted file's password comes from `--passphrase-fd N`, stdin or a prompt; a plain one
/// needs none. Its items are then imported as `keyring import` imports the same items from
/// a running gnome-keyring: the same mapping, and an item imported one way is found
/// unchanged the other.
enum GnomeKeyringFileSource {
    static func read(_ command: ImportCommand) throws -> (ImportOrigin, [ImportEntry]) {
        let path = command.path ?? defaultPath()
        var bytes: [UInt8]
        do {
            var data = try FileDescriptor.readFile(path, limit: KeyringFile.maximumFileBytes)
            bytes = Array(data)
            data.resetBytes(in: 0..<data.count)
        } catch let e as Errno where e.code == Errno.tooLarge {
            throw ImportFailure(
                description:
                    "\(path) is larger than \(KeyringFile.maximumFileBytes >> 20) MiB: no keyring file is"
            )
        } catch let e as Errno {
            throw ImportFailure(
                description: "cannot read \(path): \(String(cString: strerror(e.code)))")
        }
        // A plain keyring holds its secrets in clear: its bytes are wiped once parsed.
        defer { bytes.wipe() }
        let file: KeyringFile
        do {
            if KeyringFile.isEncrypted(bytes) {
                var password = try command.passphrase("password of keyring \(path)")
                defer { password.wipe() }
                file = try KeyringFile.binary(bytes, password: password)
            } else {
                file = try KeyringTextFile.parse(bytes)
            }
        } catch let e as KeyringFile.Failure {
            throw ImportFailure(
                description:
                    e.description.hasPrefix("the ") ? "\(path): \(e)" : "\(path) \(e)")
        }
        let entries = file.items.map { i in
            ImportEntry(
                item: .imported(
                    path: "\(path)/\(i.id)", label: i.label, schema: i.schema,
                    attributes: i.attributes, secret: i.secret, modified: i.modified))
        }
        return (ImportOrigin(kind: "keyring", label: file.label, path: path), entries)
    }

    /// The login keyring's file, where gnome-keyring keeps it.
    static func defaultPath() -> String {
        let env = ProcessInfo.processInfo.environment
        let data =
            env["XDG_DATA_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
            ?? (env["HOME"] ?? NSHomeDirectory()) + "/.local/share"
        return data + "/keyrings/login.keyring"
    }
}
