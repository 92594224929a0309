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
/// Maps and streams (binary data) are named, not imported. The export holds no modification
/// times: an import takes each entry's secret when it differs from the vault's.
///
/// The wallet itself (kwalletd's encrypted file) is read only by KDE's own tools; without an
/// exported file vaultctl says what to do. (`kwallet-query` reads one entry of a running
/// kwalletd at a time, and is not part of Debian without KDE.)
enum KWalletSource {
    static let maximumFileBytes = 64 << 20

    /// Without a file: what to do, as the error (exit 1).
    static func check(path: String?) throws {
        guard path == nil else { return }
        throw ImportFailure(
            description: """
                import kwallet reads a wallet exported as XML: in KWallet Manager, open the wallet, \
                then File > Export as XML..., and run vaultctl import kwallet FILE.xml \
                (then remove FILE.xml: it holds the passwords in clear)
                """)
    }

    static func read(_ command: ImportCommand) throws -> (ImportOrigin, [ImportEntry]) {
        let path = command.path!
        let data: Data
        do {
            data = try FileDescriptor.readFile(path, limit: maximumFileBytes)
        } catch let e as Errno {
            throw ImportFailure(
                description:
                    e.code == EFBIG
                    ? "\(path) is larger than \(maximumFileBytes >> 20) MiB"
                    : "cannot read \(path): \(String(cString: strerror(e.code)))")
        }
        var st = stat()
        let modified = stat(path, &st) == 0 ? UInt64(max(st.st_mtim.tv_sec, 0)) : 0
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
