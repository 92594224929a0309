import DesktopKeyring
import Foundation
import VaultProtocol

#if canImport(FoundationXML)
import FoundationXML
#endif

/// `vaultctl import keepassxc DATABASE.kdbx`: a KeePassXC (KeePass 2) database, read through
/// `keepassxc-cli export --format xml` (KeePassXC's own reader: every cipher, KDF and key
/// file it knows). The database password goes to keepassxc-cli on its stdin, read from
/// `--passphrase-fd N`, stdin or a prompt; never on its command line. `--key-file PATH`
/// is passed on.
///
/// An entry becomes one vault item (docs/import.md): its password the secret, its title the
/// label, its notes the comment; with a URL of scheme and host an internet password (server,
/// protocol, port, path, account = user name), else a generic password (service = title,
/// account = user name). Its group path, URL and unprotected custom attributes are kept as
/// the item's source attributes; the UUID is its identity across imports. Entries of the
/// recycle bin and old versions (history) are not imported; protected custom attributes
/// and attachments are named, not imported (an item has one secret, and attributes are not
/// secret).
enum KeePassXCSource {
    /// keepassxc-cli's export of a database: far less than this.
    static let maximumExportBytes = 256 << 20
    static let maximumEntries = 1 << 20

    static func read(_ command: ImportCommand) throws -> (ImportOrigin, [ImportEntry]) {
        guard let path = command.path else {
            throw UsageError(message: "import keepassxc needs the database file (DATABASE.kdbx)")
        }
        guard ToolProcess.installed("keepassxc-cli") else {
            throw ImportFailure(
                description:
                    "keepassxc-cli is not installed (Debian: apt install keepassxc; it reads the database)"
            )
        }
        do {
            try SystemCall.checkAccess(path, R_OK)
        } catch {
            throw ImportFailure(
                description: "cannot read \(path): \(String(cString: strerror(error.code)))")
        }
        // With a key file, the password may be empty: a database locked by the key file alone.
        var password = try command.passphrase(
            "password of database \(path)", allowEmpty: command.keyFile != nil)
        defer { password.wipe() }
        // Not --quiet: it silences the reason of a failure too (its prompt goes to stderr,
        // and is left out of the error below).
        var arguments = ["export", "--format", "xml"]
        if let k = command.keyFile { arguments += ["--key-file", k] }
        if password.isEmpty {
            arguments.append("--no-password")
        } else {
            password.append(0x0A)
        }
        var result = try ToolProcess.run(
            "keepassxc-cli", arguments + ["--", path], input: password,
            limit: maximumExportBytes)
        defer { result.output.wipe() }
        guard result.status == 0 else {
            let why = result.errorText.split(separator: "\n")
                .filter { !$0.hasPrefix("Enter password") }.joined(separator: " ")
                .trimmingCharacters(in: .whitespacesAndNewlines)
            throw ImportFailure(
                description:
                    "keepassxc-cli could not export \(path) (exit \(result.status)): \(why.isEmpty ? "no message" : String(why.suffix(500)))"
            )
        }
        guard !result.output.isEmpty else {
            throw ImportFailure(description: "keepassxc-cli exported nothing for \(path)")
        }
        // The export is read in place (no copy of it is left unwiped; XMLParser's own buffers
        // and the strings it gives cannot be wiped).
        let parsed = try result.output.withUnsafeMutableBytes { raw in
            try KeePassXML.parse(
                Data(bytesNoCopy: raw.baseAddress!, count: raw.count, deallocator: .none))
        }
        for note in parsed.notes { printError("note: \(note)") }
        let name =
            parsed.databaseName.isEmpty ? (path as NSString).lastPathComponent : parsed.databaseName
        return (
            ImportOrigin(kind: "database", label: name, path: path),
            parsed.entries.map { entry($0) }
        )
    }

    /// The attribute names the mapping reads: a custom attribute of one of these names is
    /// kept as `keepassxc:NAME`, so it cannot change how the entry maps.
    static let reserved: Set<String> = [
        "service", "username", "user", "account", "server", "protocol", "port", "path", "object",
        "domain", "authtype", "group", "url", "xdg:schema", "class", "access-group",
    ]

    static func entry(_ e: KeePassXML.Entry) -> ImportEntry {
        var a = ExactDictionary<String>()
        let title = e.strings["Title"] ?? ""
        let user = e.strings["UserName"] ?? ""
        let url = e.strings["URL"] ?? ""
        if let u = URLComponents(string: url), let scheme = u.scheme?.lowercased(),
            let host = u.host, !host.isEmpty
        {
            a["server"] = host
            a["protocol"] = scheme
            if let p = u.port { a["port"] = String(p) }
            if !u.path.isEmpty && u.path != "/" { a["path"] = u.path }
            if !user.isEmpty { a["user"] = user }
        } else {
            a["service"] = title
            if !user.isEmpty { a["username"] = user }
        }
        if !url.isEmpty { a["url"] = url }
        if !e.group.isEmpty { a["group"] = e.group }
        for (k, v) in e.strings.sorted(by: { $0.key < $1.key })
        where !KeePassXML.standardFields.contains(k) && !e.protected.contains(k) {
            a[reserved.contains(k) ? "keepassxc:" + k : k] = v
        }
        let label = !title.isEmpty ? title : !url.isEmpty ? url : "(untitled)"
        let notes = e.strings["Notes"] ?? ""
        return ImportEntry(
            item: .imported(
                path: "keepassxc/\(e.group)/\(e.uuid)", label: label, schema: nil, attributes: a,
                secret: Array((e.strings["Password"] ?? "").utf8), modified: e.modified),
            id: "keepassxc:" + e.uuid, comment: notes.isEmpty ? nil : notes)
    }
}
