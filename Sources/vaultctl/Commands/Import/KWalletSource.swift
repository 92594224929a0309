import DesktopKeyring
import Foundation
import VaultProtocol

#if canImport(FoundationXML)
import FoundationXML
#endif

/// `vaultctl import kwallet FILE.xml`: a KDE wallet as KWallet Manager exports it (File >
/// Export as XML): `<wallet name="W">`, `<folder name="F">`, and in each folder
/// `<password name="N">SECRET</password>`, `<map name="N"><mapentry name="K">V</mapentry>
/// </map>` and `<stream name="N">BASE64</stream>`.
///
/// A password entry becomes a generic password: service = its name, label = its name, the
/// folder kept as the `folder` attribute; folder and name are its identity across imports.
/// Maps and streams (binary data) are counted, not imported. The export holds no modification
/// times: the file's own is each entry's (a new export is a change).
///
/// The wallet itself (kwalletd's encrypted file) is read only by KDE's own tools. Where
/// `kwallet-query` is installed (KDE's; not part of Debian without KDE), `import kwallet
/// [WALLET]` with no file reads the `Passwords` folder of WALLET (default `kdewallet`) from the
/// running kwalletd through it instead: `kwallet-query -l` lists the entries, `-r NAME` reads
/// each (kwalletd may ask to open the wallet). Without either, vaultctl says what to do.
enum KWalletSource {
    static let maximumFileBytes = 64 << 20

    /// Without a file and without kwallet-query: what to do, as the error (exit 1).
    static func check(path: String?) throws {
        if let p = path, FileManager.default.fileExists(atPath: p) { return }
        if ToolProcess.installed("kwallet-query") { return }
        if let p = path, p.hasSuffix(".xml") || p.contains("/") {
            throw ImportFailure(description: "cannot read \(p): no such file")
        }
        throw ImportFailure(
            description: """
                import kwallet reads a wallet exported as XML: in KWallet Manager, open the wallet, \
                then File > Export as XML..., and run vaultctl import kwallet FILE.xml \
                (then remove FILE.xml: it holds the passwords in clear)
                """)
    }

    static func read(_ command: ImportCommand) throws -> (ImportOrigin, [ImportEntry]) {
        guard let path = command.path, FileManager.default.fileExists(atPath: path) else {
            return try query(wallet: command.path ?? "kdewallet")
        }
        var data: Data
        do {
            data = try FileDescriptor.readFile(path, limit: maximumFileBytes)
        } catch let e as Errno {
            throw ImportFailure(
                description:
                    e.code == Errno.tooLarge
                    ? "\(path) is larger than \(maximumFileBytes >> 20) MiB"
                    : "cannot read \(path): \(String(cString: strerror(e.code)))")
        }
        let modified = (try? SystemCall.stat(path)).map { UInt64(max($0.st_mtim.tv_sec, 0)) } ?? 0
        // The passwords are in clear in the file: its bytes are wiped once parsed.
        defer { data.resetBytes(in: 0..<data.count) }
        let reader = Reader()
        let parser = XMLParser(data: data)
        parser.shouldResolveExternalEntities = false
        parser.delegate = reader
        guard parser.parse(), reader.sawWallet else {
            throw ImportFailure(
                description:
                    "\(path) is not a KWallet XML export (\(reader.failure ?? "no <wallet> element; line \(parser.lineNumber)"))"
            )
        }
        if reader.skipped > 0 {
            printError(
                "note: \(reader.skipped) map or stream entr\(reader.skipped == 1 ? "y" : "ies") not imported (only password entries are)"
            )
        }
        let entries = reader.entries.map { e in
            ImportEntry(
                item: .imported(
                    path: "kwallet/\(e.folder)/\(e.name)", label: e.name, schema: nil,
                    attributes: ["service": e.name, "folder": e.folder],
                    secret: Array(e.secret.utf8), modified: modified),
                id: "kwallet:\(e.folder)/\(e.name)")
        }
        return (ImportOrigin(kind: "wallet", label: reader.wallet, path: path), entries)
    }

    /// The `Passwords` folder of `wallet`, through kwallet-query and the running kwalletd.
    /// kwallet-query gives no modification times: each entry's secret is taken when it
    /// differs from the vault's.
    static func query(wallet: String) throws -> (ImportOrigin, [ImportEntry]) {
        let folder = "Passwords"
        let list = try ToolProcess.run(
            "kwallet-query", ["-l", "-f", folder, "--", wallet], limit: 16 << 20)
        guard list.status == 0 else {
            throw ImportFailure(
                description:
                    "kwallet-query could not list folder \(folder) of wallet \(wallet) (exit \(list.status)): \(list.errorText.trimmingCharacters(in: .whitespacesAndNewlines).suffix(500))"
            )
        }
        let names = String(decoding: list.output, as: UTF8.self).split(separator: "\n")
            .map(String.init).filter { !$0.isEmpty }
        var entries: [ImportEntry] = []
        var unreadable = 0
        for name in names.prefix(1 << 20) {
            var r = try ToolProcess.run(
                "kwallet-query", ["-r", name, "-f", folder, "--", wallet], limit: 2 << 20)
            defer { r.output.wipe() }
            guard r.status == 0 else {
                printError(
                    "cannot import \(name.debugDescription): kwallet-query could not read it")
                unreadable += 1
                continue
            }
            // kwallet-query ends the password with a newline.
            var secret = r.output
            if secret.last == 0x0A { secret.removeLast() }
            entries.append(
                ImportEntry(
                    item: .imported(
                        path: "kwallet/\(folder)/\(name)", label: name, schema: nil,
                        attributes: ["service": name, "folder": folder], secret: secret,
                        modified: 0),
                    id: "kwallet:\(folder)/\(name)"))
        }
        var origin = ImportOrigin(kind: "wallet", label: wallet, path: wallet)
        origin.unreadable = unreadable
        return (origin, entries)
    }

    final class Reader: NSObject, XMLParserDelegate {
        var wallet = ""
        var sawWallet = false
        var entries: [(folder: String, name: String, secret: String)] = []
        var skipped = 0
        var failure: String?
        private var folder = ""
        private var name: String?
        private var text = ""
        private var depth = 0

        func parser(
            _ parser: XMLParser, didStartElement element: String, namespaceURI: String?,
            qualifiedName: String?, attributes: [String: String] = [:]
        ) {
            depth += 1
            text = ""
            guard depth <= 16, entries.count < 1 << 20 else {
                failure = "nested too deep, or too many entries"
                return parser.abortParsing()
            }
            switch element {
            case "wallet":
                sawWallet = true
                wallet = attributes["name"] ?? ""
            case "folder": folder = attributes["name"] ?? ""
            case "password": name = attributes["name"] ?? ""
            case "map", "stream": skipped += 1
            default: break
            }
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) {
            guard name != nil else { return }
            guard text.utf8.count + string.utf8.count <= 1 << 20 else {
                failure = "a password is larger than 1 MiB"
                return parser.abortParsing()
            }
            text += string
        }

        func parser(
            _ parser: XMLParser, didEndElement element: String, namespaceURI: String?,
            qualifiedName: String?
        ) {
            depth -= 1
            if element == "password", let n = name {
                entries.append((folder, n, text))
                name = nil
            }
            text = ""
        }
    }
}
