import Foundation
import VaultProtocol

/// What a vaultd backup holds, inside its age encryption (docs/backup.md): a sequence of
/// records, each a tag byte, a 4-byte big-endian length and that many bytes.
///
/// - `H` header: JSON `{"format": 1, "created": ISO 8601, "vaultd": version, "device": id}`,
///   `device` naming the device whose key sealed the `D` records (`KeyHierarchy.deviceID`).
/// - `I` item: a 4-byte length, that much JSON (`ItemRecord.meta`: class, access group,
///   accessibility, synchronizable, generation, and the item's stored attributes, base64 of
///   their exact bytes), then the secret's bytes.
/// - `D` device-bound item: the same, but the secret sealed (XChaCha20-Poly1305) under a key
///   only this device's `device.key` gives, the JSON bound in as associated data.
/// - `R` row: JSON `{"table": T, "row": {column: typed value}}` of `preferences`, `apps` and
///   `app_generations` (a typed value: null, `{"i": "123"}`, `{"f": "<64-bit pattern, hex>"}`,
///   `{"t": text}`, `{"b": base64}`), so every value comes back with its SQLite type and
///   exact bits.
/// - `E` end: JSON of the counts of each kind; a file whose records do not add up to them, or
///   with anything after it, is refused.
///
/// Secrets are only ever in `SecureBytes`, and the JSON parts carry none. An archive is
/// written (`Writer`) and read (`Reader`) one record at a time, through age's streams: no
/// more than one record is ever held, whatever the archive's size.
enum BackupArchive {
    static let magic = Array("vaultd backup 1\n".utf8)
    static let format = 1
    /// Tables copied row by row, in the order a restore writes them (apps before the items
    /// whose generations they own, so the storage-quota triggers count them).
    static let tables = ["apps", "app_generations", "preferences"]
    /// A record's JSON may be at most this long (8 MiB: an item's metadata holds at most
    /// 64 KiB of attributes, a preference row one value of a domain of at most 4 MiB, which
    /// base64 and JSON escapes may double).
    static let maximumRecordJSON = 8 << 20

    struct ItemRecord {
        var itemClass: ItemClass
        var accessGroup: String
        var accessible: Accessibility
        var synchronizable: Bool
        var generation: String?
        /// The attributes as stored (the JSON the metadata key encrypted), exactly.
        var attributes: [UInt8]
        /// The secret (`I`), or for `D` the secret sealed by the device key.
        var secret: SecureBytes
        var deviceBound: Bool

        var meta: JSON {
            [
                "class": .string(itemClass.rawValue), "accessGroup": .string(accessGroup),
                "accessible": .string(accessible.rawValue),
                "synchronizable": .bool(synchronizable),
                "generation": generation.map { .string($0) } ?? .null,
                "attributes": .string(Data(attributes).base64EncodedString()),
            ]
        }
    }

    struct TableRow {
        var table: String
        var columns: [(name: String, value: SQLValue)]

        func value(_ name: String) -> SQLValue? { columns.first { $0.name == name }?.value }
    }

    /// A record after the header.
    enum Record {
        case item(ItemRecord)
        case row(TableRow)
    }

    /// How many records of each kind: what the `E` record holds.
    struct Counts: Equatable {
        var items = 0
        var deviceBoundItems = 0
        var rows: [String: Int] = Dictionary(uniqueKeysWithValues: tables.map { ($0, 0) })

        mutating func count(_ r: Record) {
            switch r {
            case .item(let i) where i.deviceBound: deviceBoundItems += 1
            case .item: items += 1
            case .row(let row): rows[row.table, default: 0] += 1
            }
        }

        var json: JSON {
            var t = JSONObject()
            for name in BackupArchive.tables { t[name] = JSON(rows[name] ?? 0) }
            return [
                "items": JSON(items), "deviceBoundItems": JSON(deviceBoundItems),
                "rows": .object(t),
            ]
        }
    }

    // MARK: typed values

    static func typed(_ v: SQLValue) -> JSON {
        switch v {
        case .null: return .null
        case .integer(let i): return ["i": .string(String(i))]
        case .real(let d): return ["f": .string(String(d.bitPattern, radix: 16))]
        case .text(let s): return ["t": .string(s)]
        case .blob(let b): return ["b": .string(Data(b).base64EncodedString())]
        }
    }

    static func untyped(_ j: JSON) -> SQLValue? {
        if j.isNull { return .null }
        guard case .object(let o) = j, o.count == 1, let (k, v) = o.first, let s = v.stringValue
        else { return nil }
        switch k {
        case "i": return Int64(s).map { .integer($0) }
        case "f": return UInt64(s, radix: 16).map { .real(Double(bitPattern: $0)) }
        case "t": return .text(s)
        case "b": return Data(base64Encoded: s).map { .blob([UInt8]($0)) }
        default: return nil
        }
    }

    // MARK: writing

    /// Writes an archive into an age stream, one record at a time.
    final class Writer {
        private let age: Age.Writer
        private(set) var counts = Counts()

        /// Writes the magic and the header record.
        init(_ age: Age.Writer, header: JSON) throws {
            self.age = age
            try age.write(magic)
            try record("H", json: header)
        }

        func append(_ r: Record) throws {
            switch r {
            case .item(let item):
                let meta = item.meta.serialized()
                try record(item.deviceBound ? "D" : "I", length: 4 + meta.count + item.secret.count)
                try age.write(u32(meta.count))
                try age.write(meta)
                try item.secret.withUnsafeBytes { try age.write($0) }
            case .row(let row):
                var o = JSONObject()
                for c in row.columns { o[c.name] = typed(c.value) }
                try record("R", json: ["table": .string(row.table), "row": .object(o)])
            }
            counts.count(r)
        }

        /// Writes the end record (the counts) and finishes the age stream.
        func finish() throws {
            try record("E", json: counts.json)
            try age.finish()
        }

        private func u32(_ v: Int) -> [UInt8] {
            [UInt8(v >> 24 & 0xff), UInt8(v >> 16 & 0xff), UInt8(v >> 8 & 0xff), UInt8(v & 0xff)]
        }

        /// A record's tag and length; its `length` bytes follow.
        private func record(_ tag: Character, length: Int) throws {
            try age.write([tag.asciiValue!] + u32(length))
        }

        private func record(_ tag: Character, json: JSON) throws {
            let bytes = json.serialized()
            try record(tag, length: bytes.count)
            try age.write(bytes)
        }
    }

    // MARK: reading

    static func unreadable(_ why: String) -> VaultFailure {
        VaultFailure(
            .backupUnreadable,
            "the file is not a vaultd backup, or a damaged one: \(why); nothing was changed")
    }

    /// Reads an archive from a stream of plaintext one record at a time, checking each as it
    /// comes: every record well-formed, known and within its limits, the header first, the
    /// counts last and matching, nothing after them. `next` returns nil only once all of
    /// that held; it throws BackupUnreadable saying what is wrong.
    final class Reader {
        private let source: Age.Source
        /// The header record's JSON.
        let header: JSON
        private var counts = Counts()
        private var ended = false

        var deviceID: String? { header["device"]?.stringValue }

        /// Reads the magic and the header record.
        init(_ source: @escaping Age.Source) throws {
            self.source = source
            var m = [UInt8](repeating: 0, count: magic.count)
            guard try Age.readFully(source, into: &m) == m.count, m == magic else {
                throw unreadable("it does not start as one (it may be another age file)")
            }
            guard let (tag, body) = try Self.record(source), tag == UInt8(ascii: "H") else {
                throw unreadable("no header record first")
            }
            let h = try Self.json(body)
            guard h["format"]?.intValue == format else {
                throw unreadable(
                    "format \(h["format"].map { $0.text } ?? "?") is not this vaultd's (\(format)): restore it with the vaultd that made it"
                )
            }
            header = h
        }

        /// The next record, or nil after the end record (checked against the counts, and
        /// nothing after it).
        func next() throws -> Record? {
            guard let (tag, body) = try Self.record(source) else {
                guard ended else { throw unreadable("it ends before its last record (truncated)") }
                return nil
            }
            guard !ended else { throw unreadable("data after its end") }
            let r: Record
            switch tag {
            case UInt8(ascii: "I"), UInt8(ascii: "D"):
                r = .item(try item(body, deviceBound: tag == UInt8(ascii: "D")))
            case UInt8(ascii: "R"):
                r = .row(try row(body))
            case UInt8(ascii: "E"):
                guard try Self.json(body) == counts.json else {
                    throw unreadable("its records do not add up to the counts it ends with")
                }
                ended = true
                return try next()
            default:
                throw unreadable("a record of unknown kind \(tag)")
            }
            counts.count(r)
            return r
        }

        /// The next record's tag and body (in secure memory), nil at the end of the stream.
        /// A body's length is bounded before it is allocated: an item's by the largest
        /// metadata and secret, any other's by `maximumRecordJSON`.
        private static func record(_ source: Age.Source) throws -> (UInt8, SecureBytes)? {
            var head = [UInt8](repeating: 0, count: 5)
            let got = try Age.readFully(source, into: &head)
            if got == 0 { return nil }
            guard got == 5 else { throw unreadable("it ends inside a record") }
            let length = Int(head[1]) << 24 | Int(head[2]) << 16 | Int(head[3]) << 8 | Int(head[4])
            let isItem = head[0] == UInt8(ascii: "I") || head[0] == UInt8(ascii: "D")
            let limit =
                isItem ? 4 + maximumRecordJSON + SecretLimit.maximumBytes + 64 : maximumRecordJSON
            guard length <= limit else { throw unreadable("a record over \(limit) bytes") }
            let body = SecureBytes(count: length)
            var at = 0
            while at < length {
                let n = try body.withUnsafeMutableBytes {
                    try source(UnsafeMutableRawBufferPointer(rebasing: $0[at...]))
                }
                guard n > 0 else { throw unreadable("it ends inside a record") }
                at += n
            }
            return (head[0], body)
        }

        private static func json(_ body: SecureBytes) throws -> JSON {
            try body.withUnsafeBytes { try BackupArchive.json($0.bindMemory(to: UInt8.self)) }
        }

        private func item(_ body: SecureBytes, deviceBound: Bool) throws -> ItemRecord {
            try body.withUnsafeBytes { raw in
                try BackupArchive.item(raw.bindMemory(to: UInt8.self), deviceBound: deviceBound)
            }
        }

        private func row(_ body: SecureBytes) throws -> TableRow {
            let r = try Self.json(body)
            guard let table = r["table"]?.stringValue, tables.contains(table),
                case .object(let o)? = r["row"]
            else {
                throw unreadable("a row record of no known table")
            }
            var columns: [(String, SQLValue)] = []
            for (name, v) in o {
                guard let value = untyped(v) else {
                    throw unreadable("a malformed value in a row of \(table)")
                }
                columns.append((name, value))
            }
            return TableRow(table: table, columns: columns.sorted { $0.0 < $1.0 })
        }
    }

    private static func json(_ bytes: UnsafeBufferPointer<UInt8>) throws -> JSON {
        guard bytes.count <= maximumRecordJSON else {
            throw unreadable("a record over \(maximumRecordJSON) bytes")
        }
        guard let j = try? JSON.parse(bytes) else { throw unreadable("a record that is not JSON") }
        return j
    }

    /// An `I` or `D` record's body: the metadata's length and JSON, then the secret.
    private static func item(_ b: UnsafeBufferPointer<UInt8>, deviceBound: Bool) throws
        -> ItemRecord
    {
        guard b.count >= 4 else { throw unreadable("an item record too short") }
        let metaLength = Int(b[0]) << 24 | Int(b[1]) << 16 | Int(b[2]) << 8 | Int(b[3])
        guard metaLength <= b.count - 4 else { throw unreadable("an item record too short") }
        let meta = try json(UnsafeBufferPointer(rebasing: b[4..<(4 + metaLength)]))
        let secretRange = (4 + metaLength)..<b.count
        guard let cls = meta["class"]?.stringValue.flatMap(ItemClass.init(rawValue:)),
            let group = meta["accessGroup"]?.stringValue, !group.isEmpty,
            let acc = meta["accessible"]?.stringValue.flatMap(Accessibility.init(rawValue:)),
            let sync = meta["synchronizable"]?.boolValue,
            let attrText = meta["attributes"]?.stringValue,
            let attrs = Data(base64Encoded: attrText),
            attrs.count <= KeychainStore.maximumAttributesSize
        else { throw unreadable("an item record with missing or malformed fields") }
        let generation = meta["generation"]
        guard generation == nil || generation!.isNull || generation!.stringValue != nil else {
            throw unreadable("an item's generation is not a string")
        }
        guard deviceBound == acc.isThisDeviceOnly else {
            throw unreadable("an item record whose kind does not match its accessibility")
        }
        guard secretRange.count <= SecretLimit.maximumBytes + 64 else {
            throw unreadable("an item's secret over the secret limit")
        }
        return ItemRecord(
            itemClass: cls, accessGroup: group, accessible: acc, synchronizable: sync,
            generation: generation?.stringValue, attributes: [UInt8](attrs),
            secret: SecureBytes(copying: UnsafeBufferPointer(rebasing: b[secretRange])),
            deviceBound: deviceBound)
    }
}

/// A growing buffer in secure memory: each growth copies into a larger `SecureBytes` and
/// lets the old one go (wiped as it is freed).
final class SecureWriter {
    private var buffer = SecureBytes(count: 64 << 10)
    private(set) var count = 0

    private func reserve(_ n: Int) {
        guard count + n > buffer.count else { return }
        let bigger = SecureBytes(count: max(buffer.count * 2, count + n))
        bigger.withUnsafeMutableBytes { o in
            buffer.withUnsafeBytes {
                o.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: count)
            }
        }
        buffer = bigger
    }

    func append(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        reserve(bytes.count)
        buffer.withUnsafeMutableBytes {
            ($0.baseAddress! + count).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        }
        count += bytes.count
    }

    func append(_ bytes: [UInt8]) { bytes.withUnsafeBytes { append($0) } }

    /// The bytes written, exactly (the buffer's slack is not copied).
    func finish() -> SecureBytes {
        let out = SecureBytes(count: count)
        out.withUnsafeMutableBytes { o in
            buffer.withUnsafeBytes {
                if count > 0 { o.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: count) }
            }
        }
        return out
    }
}
