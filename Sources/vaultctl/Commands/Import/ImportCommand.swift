import DesktopKeyring
import Foundation
import VaultClient
import VaultProtocol

/// One item of a source, as a keyring item (label, attributes, schema, secret, modified), so
/// every source goes through the one mapping of `KeyringMapping` and the one set of
/// idempotence rules of `KeyringCommand.importOne` (docs/import.md).
struct ImportEntry {
    var item: KeyringItem
    /// The entry's identity in its source when it has one of its own (a KeePassXC entry's
    /// UUID, a pass file's path): kept in the vault item's `generic`, and what a later import
    /// recognises it by. nil: the item's attributes are its identity (a keyring item's).
    var id: String?
    /// The vault item's comment (KeePassXC's notes, the lines of a pass file that are not
    /// attributes); nil: none.
    var comment: String?
}

/// Where the entries of one import come from: a keyring's collection, a keyring file, a
/// KeePassXC database, a password store.
struct ImportOrigin {
    /// What it is, as the summary line names it ("collection", "database", "password store").
    var kind: String
    var label: String
    var path: String
    /// The `vaultctl import` source (gnome-keyring, keepassxc, pass), for `--json`.
    var source: String?
    /// The source's entries that could not be read (each named on stderr): the import of
    /// the others goes on, and its exit status says it was not whole.
    var unreadable = 0
}

/// A source's failure, said as it is (exit 1): a wrong password, a file that is no keyring,
/// a tool that is missing or failed.
struct ImportFailure: Error, CustomStringConvertible {
    var description: String
}

/// `vaultctl import SOURCE [PATH] [--access-group G] [--passphrase-fd N] [--dry-run] [--json]`:
/// secrets from where they live today, read by vaultctl and written to vaultd as
/// `keyring import` writes them. Re-importing changes only what changed in the source.
struct ImportCommand: Command {
    enum Source: String, CaseIterable {
        case gnomeKeyring = "gnome-keyring"
        case keepassxc, pass, kwallet
    }
    var source: Source
    /// The keyring file, the database, the password store; nil: the source's default.
    var path: String?
    var accessGroup: String
    var passphraseFD: Int?
    /// KeePassXC's `--key-file PATH`, passed on to keepassxc-cli.
    var keyFile: String?
    var dryRun: Bool
    var json: Bool

    init(_ a: inout Arguments) throws {
        source = try a.verb(of: "import")
        accessGroup = try a.option("--access-group") ?? "user"
        if accessGroup.isEmpty {
            throw UsageError(message: "--access-group needs a group name")
        }
        passphraseFD = try a.intOption("--passphrase-fd")
        keyFile = try a.option("--key-file")
        if keyFile != nil && source != .keepassxc {
            throw UsageError(message: "--key-file is KeePassXC's (import keepassxc)")
        }
        dryRun = a.flag("--dry-run")
        json = a.flag("--json")
        path = a.positional()
        if passphraseFD != nil && [.pass, .kwallet].contains(source) {
            throw UsageError(
                message:
                    "import \(source.rawValue) takes no --passphrase-fd (\(source == .pass ? "gpg asks through your gpg-agent" : "KWallet's own tools ask"))"
            )
        }
    }

    func run(_ context: Context) throws {
        if source == .kwallet { try KWalletSource.check(path: path) }
        // The source is read before vaultd is asked anything: a wrong password or a missing
        // tool is said before any change.
        var (origin, entries) = try read()
        // As `keyring import` does: an entry modified in this very second has a `modified`
        // that a change later in the second would keep, so it is not recorded; the source is
        // read again once that second has passed (a password is asked only once: the
        // sources that ask read their whole input once, so this read is the first's copy).
        let now = Date().timeIntervalSince1970
        if source != .kwallet,
            entries.contains(where: { Double($0.item.modified) >= now.rounded(.down) })
        {
            usleep(UInt32(((now.rounded(.down) + 1 - now) * 1_000_000).rounded(.up)) + 10_000)
            wipe(&entries)
            (origin, entries) = try read(again: true)
        }
        defer { wipe(&entries) }
        let importer = KeyringCommand(importingInto: accessGroup, dryRun: dryRun, json: json)
        origin.source = source.rawValue
        try importer.importEntries(entries, from: origin, context)
        if origin.unreadable > 0 {
            throw ImportFailure(
                description:
                    "\(origin.unreadable) entr\(origin.unreadable == 1 ? "y" : "ies") could not be read (named above)"
            )
        }
    }

    /// The source's entries. `again`: a second read, with the passphrase of the first.
    private func read(again: Bool = false) throws -> (ImportOrigin, [ImportEntry]) {
        if !again { cachedPassphrase.value = nil }
        switch source {
        case .gnomeKeyring: return try GnomeKeyringFileSource.read(self)
        case .keepassxc: return try KeePassXCSource.read(self)
        case .pass: return try PassSource.read(self)
        case .kwallet: return try KWalletSource.read(self)
        }
    }

    private func wipe(_ entries: inout [ImportEntry]) {
        for i in entries.indices { entries[i].item.secret?.wipe() }
    }

    /// The passphrase once read, for a second read of the source (wiped when the command ends).
    final class Passphrase {
        var value: [UInt8]?
        deinit { value?.wipe() }
    }
    let cachedPassphrase = Passphrase()

    /// The passphrase of an encrypted source, from `--passphrase-fd N`, else stdin when it is
    /// not a terminal, else a prompt (`Terminal.read`). Bytes, wiped by the caller.
    func passphrase(_ name: String, allowEmpty: Bool = false) throws -> [UInt8] {
        if let p = cachedPassphrase.value { return p }
        var data = try Terminal.read(
            Terminal.Value(
                name: name, fdOption: "--passphrase-fd", allowEmpty: allowEmpty),
            fd: passphraseFD)
        defer { data.resetBytes(in: 0..<data.count) }
        cachedPassphrase.value = Array(data)
        return Array(data)
    }
}

extension KeyringCommand {
    /// An import of entries read by `vaultctl import` into `accessGroup`.
    init(importingInto accessGroup: String, dryRun: Bool, json: Bool) {
        self.action = .import
        self.accessGroup = accessGroup
        self.dryRun = dryRun
        self.json = json
    }
}

extension KeyringItem {
    /// An item read from somewhere other than the Secret Service: `path` orders the items
    /// (and names them in a keyring file: the file and the item's id).
    static func imported(
        path: String, label: String, schema: String?, attributes: ExactDictionary<String>,
        secret: [UInt8], modified: UInt64
    ) -> KeyringItem {
        KeyringItem(
            path: path, label: label, schema: schema, attributes: attributes, secret: secret,
            contentType: nil, isLocked: false, modified: modified)
    }
}
