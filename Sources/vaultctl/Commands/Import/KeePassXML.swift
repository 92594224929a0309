import Foundation

#if canImport(FoundationXML)
import FoundationXML
#endif

/// The KeePass 2 XML that `keepassxc-cli export --format xml` writes (KeePassFile > Meta,
/// Root > Group > Entry / Group ...), read with Foundation's XMLParser, bounded: at most
/// `KeePassXCSource.maximumEntries` entries, groups nested at most 256 deep, each text at
/// most 16 MiB. Only what an import needs is kept.
enum KeePassXML {
    struct Entry {
        var uuid = ""
        /// The group path below the root group ("Email/Work"); "" for the root's entries.
        var group = ""
        /// Every string field (Title, UserName, Password, URL, Notes, custom ones).
        var strings: [String: String] = [:]
        /// The fields marked ProtectInMemory (the password, protected custom attributes).
        var protected: Set<String> = []
        /// The later of LastModificationTime and LocationChanged (a move to another group),
        /// in seconds since 1970.
        var modified: UInt64 = 0
        var attachments = 0
    }

    struct Parsed {
        var databaseName = ""
        var entries: [Entry] = []
        /// What was not imported, one line each (recycle bin, protected attributes,
        /// attachments); never a value.
        var notes: [String] = []
    }

    /// KeePass's standard fields; every other string field is a custom attribute.
    static let standardFields: Set<String> = ["Title", "UserName", "Password", "URL", "Notes"]

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static func parse(_ data: Data) throws -> Parsed {
        let reader = Reader()
        let parser = XMLParser(data: data)
        parser.shouldResolveExternalEntities = false
        parser.delegate = reader
        let ok = parser.parse()
        if let e = reader.failure { throw e }
        guard ok else {
            throw Failure(
                description:
                    "keepassxc-cli's XML export could not be read (line \(parser.lineNumber))")
        }
        var out = reader.parsed
        // Entries of the recycle bin (and of groups in it) were deleted in KeePassXC.
        let binned = reader.binned
        if binned > 0 {
            out.notes.append(
                "\(binned) entr\(binned == 1 ? "y" : "ies") in the recycle bin not imported")
        }
        return out
    }

    /// XMLParser's delegate: a stack of element names, the groups around, the entry being read.
    final class Reader: NSObject, XMLParserDelegate {
        var parsed = Parsed()
        var failure: Failure?
        var binned = 0
        private var stack: [String] = []
        /// The groups around: name, UUID, whether it is (or is in) the recycle bin.
        private var groups: [(name: String, uuid: String, binned: Bool)] = []
        private var recycleBin = ""
        private var entry: Entry?
        private var key = ""
        private var protectedValue = false
        private var text = ""
        private var historyDepth = 0

        func parser(
            _ parser: XMLParser, didStartElement name: String, namespaceURI: String?,
            qualifiedName: String?, attributes: [String: String] = [:]
        ) {
            stack.append(name)
            text = ""
            guard stack.count <= 256 else {
                return stop(parser, "its XML is nested more than 256 deep")
            }
            if name == "History" { historyDepth += 1 }
            guard historyDepth == 0 else { return }
            switch name {
            case "Group":
                groups.append(("", "", groups.last?.binned ?? false))
            case "Entry":
                entry = Entry()
                entry?.group = groups.dropFirst().map(\.name).joined(separator: "/")
            case "Value" where entry != nil:
                protectedValue =
                    attributes["ProtectInMemory"]?.lowercased() == "true"
                    || attributes["Protected"]?.lowercased() == "true"
            default: break
            }
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) {
            guard text.utf8.count + string.utf8.count <= 16 << 20 else {
                return stop(parser, "a value in the export is larger than 16 MiB")
            }
            text += string
        }

        func parser(
            _ parser: XMLParser, didEndElement name: String, namespaceURI: String?,
            qualifiedName: String?
        ) {
            defer {
                stack.removeLast()
                text = ""
            }
            let parent = stack.dropLast().last ?? ""
            if name == "History" {
                historyDepth -= 1
                return
            }
            guard historyDepth == 0 else { return }
            switch (parent, name) {
            case ("Meta", "DatabaseName"): parsed.databaseName = text
            case ("Meta", "RecycleBinUUID"): recycleBin = text
            case ("Group", "Name"): if !groups.isEmpty { groups[groups.count - 1].name = text }
            case ("Group", "UUID"):
                if !groups.isEmpty {
                    groups[groups.count - 1].uuid = text
                    if !recycleBin.isEmpty && text == recycleBin {
                        groups[groups.count - 1].binned = true
                    }
                }
            case (_, "Group"): _ = groups.popLast()
            case ("Entry", "UUID"): entry?.uuid = text
            case ("Times", "LastModificationTime"), ("Times", "LocationChanged"):
                if entry != nil, let t = Self.seconds(text) {
                    entry!.modified = max(entry!.modified, t)
                }
            case ("String", "Key"): key = text
            case ("String", "Value"):
                if entry != nil {
                    entry!.strings[key] = text
                    if protectedValue { entry!.protected.insert(key) }
                }
            case ("Entry", "Binary"): entry?.attachments += 1
            case (_, "Entry"): finish(parser)
            default: break
            }
        }

        /// An entry ends: kept, or counted as binned; what is not imported is noted.
        private func finish(_ parser: XMLParser) {
            guard let e = entry else { return }
            entry = nil
            if groups.last?.binned ?? false {
                binned += 1
                return
            }
            guard parsed.entries.count < KeePassXCSource.maximumEntries else {
                return stop(parser, "the database holds more than 1048576 entries")
            }
            let title = e.strings["Title"] ?? e.uuid
            for k in e.protected.sorted() where !KeePassXML.standardFields.contains(k) {
                parsed.notes.append(
                    "entry \(title.debugDescription): protected attribute \(k.debugDescription) not imported (an item holds one secret; attributes are not secret)"
                )
            }
            if e.attachments > 0 {
                parsed.notes.append(
                    "entry \(title.debugDescription): \(e.attachments) attachment(s) not imported")
            }
            parsed.entries.append(e)
        }

        private func stop(_ parser: XMLParser, _ why: String) {
            if failure == nil { failure = Failure(description: why) }
            parser.abortParsing()
        }

        /// KeePass's times: ISO 8601 in UTC ("2026-12-07T00:50:19Z").
        static func seconds(_ s: String) -> UInt64? {
            let f = ISO8601DateFormatter()
            guard let d = f.date(from: s.trimmingCharacters(in: .whitespaces)) else { return nil }
            let t = d.timeIntervalSince1970
            return t > 0 ? UInt64(t) : nil
        }
    }
}
