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
/// Secrets are only ever in `SecureBytes`: the archive is built in and parsed from secure
/// memory, and the JSON parts carry none.
struct BackupArchive {
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

    var header: JSON
    var items: [ItemRecord] = []
    var rows: [TableRow] = []

    var deviceID: String? { header["device"]?.stringValue }

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

    /// The archive's bytes, in secure memory.
    func serialized() -> SecureBytes {
        let w = SecureWriter()
        w.append(Self.magic)
        w.record("H", json: header)
        for item in items {
            let meta = item.meta.serialized()
            w.record(item.deviceBound ? "D" : "I", length: 4 + meta.count + item.secret.count) {
                w.append(UInt32(meta.count))
                w.append(meta)
                item.secret.withUnsafeBytes { w.append($0) }
            }
        }
        for r in rows {
            var row = JSONObject()
            for c in r.columns { row[c.name] = Self.typed(c.value) }
            w.record("R", json: ["table": .string(r.table), "row": .object(row)])
        }
        w.record("E", json: counts)
        return w.finish()
    }

    /// The counts the `E` record holds.
    var counts: JSON {
        var tables = JSONObject()
        for t in Self.tables { tables[t] = JSON(rows.filter { $0.table == t }.count) }
        return [
            "items": JSON(items.filter { !$0.deviceBound }.count),
            "deviceBoundItems": JSON(items.filter(\.deviceBound).count),
            "rows": .object(tables),
        ]
    }

    // MARK: reading

    /// Parses and checks an archive: every record well-formed, known and within its limits,
    /// the header first, the counts last and matching. Throws BackupUnreadable saying what
    /// is wrong.
    static func parse(_ payload: SecureBytes) throws -> BackupArchive {
        func bad(_ why: String) -> VaultFailure {
            VaultFailure(
                .backupUnreadable,
                "the file is not a vaultd backup, or a damaged one: \(why); nothing was changed")
        }
        return try payload.withUnsafeBytes { raw -> BackupArchive in
            let b = raw.bindMemory(to: UInt8.self)
            guard b.count >= magic.count, Array(b[..<magic.count]) == magic else {
                throw bad("it does not start as one (it may be another age file)")
            }
            var at = magic.count
            func u32() throws -> Int {
                guard b.count - at >= 4 else { throw bad("it ends inside a record") }
                defer { at += 4 }
                return Int(b[at]) << 24 | Int(b[at + 1]) << 16 | Int(b[at + 2]) << 8
                    | Int(b[at + 3])
            }
            func json(_ range: Range<Int>) throws -> JSON {
                guard range.count <= maximumRecordJSON else {
                    throw bad("a record over \(maximumRecordJSON) bytes")
                }
                guard let j = try? JSON.parse(UnsafeBufferPointer(rebasing: b[range])) else {
                    throw bad("a record that is not JSON")
                }
                return j
            }
            var archive: BackupArchive?
            var ended = false
            while at < b.count {
                guard !ended else { throw bad("data after its end") }
                let tag = b[at]
                at += 1
                let length = try u32()
                guard length <= b.count - at else { throw bad("a record longer than the file") }
                let body = at..<(at + length)
                at += length
                if archive == nil {
                    guard tag == UInt8(ascii: "H") else { throw bad("no header record first") }
                    let h = try json(body)
                    guard h["format"]?.intValue == format else {
                        throw bad(
                            "format \(h["format"].map { $0.text } ?? "?") is not this vaultd's (\(format)): restore it with the vaultd that made it"
                        )
                    }
                    archive = BackupArchive(header: h)
                    continue
                }
                switch tag {
                case UInt8(ascii: "I"), UInt8(ascii: "D"):
                    var inner = body.lowerBound
                    guard body.count >= 4 else { throw bad("an item record too short") }
                    let metaLength =
                        Int(b[inner]) << 24 | Int(b[inner + 1]) << 16 | Int(b[inner + 2]) << 8
                        | Int(b[inner + 3])
                    inner += 4
                    guard metaLength <= body.upperBound - inner else {
                        throw bad("an item record too short")
                    }
                    let meta = try json(inner..<(inner + metaLength))
                    let secretRange = (inner + metaLength)..<body.upperBound
                    guard let cls = meta["class"]?.stringValue.flatMap(ItemClass.init(rawValue:)),
                        let group = meta["accessGroup"]?.stringValue, !group.isEmpty,
                        let acc = meta["accessible"]?.stringValue.flatMap(
                            Accessibility.init(rawValue:)),
                        let sync = meta["synchronizable"]?.boolValue,
                        let attrText = meta["attributes"]?.stringValue,
                        let attrs = Data(base64Encoded: attrText),
                        attrs.count <= KeychainStore.maximumAttributesSize
                    else { throw bad("an item record with missing or malformed fields") }
                    let generation = meta["generation"]
                    guard generation == nil || generation!.isNull || generation!.stringValue != nil
                    else { throw bad("an item's generation is not a string") }
                    let deviceBound = tag == UInt8(ascii: "D")
                    guard deviceBound == acc.isThisDeviceOnly else {
                        throw bad("an item record whose kind does not match its accessibility")
                    }
                    guard secretRange.count <= SecretLimit.maximumBytes + 64 else {
                        throw bad("an item's secret over the secret limit")
                    }
                    archive!.items.append(
                        ItemRecord(
                            itemClass: cls, accessGroup: group, accessible: acc,
                            synchronizable: sync, generation: generation?.stringValue,
                            attributes: [UInt8](attrs),
                            secret: SecureBytes(
                                copying: UnsafeBufferPointer(rebasing: b[secretRange])),
                            deviceBound: deviceBound))
                case UInt8(ascii: "R"):
                    let r = try json(body)
                    guard let table = r["table"]?.stringValue, tables.contains(table),
                        case .object(let o)? = r["row"]
                    else {
                        throw bad("a row record of no known table")
                    }
                    var columns: [(String, SQLValue)] = []
                    for (name, v) in o {
                        guard let value = untyped(v) else {
                            throw bad("a malformed value in a row of \(table)")
                        }
                        columns.append((name, value))
                    }
                    archive!.rows.append(
                        TableRow(table: table, columns: columns.sorted { $0.0 < $1.0 }))
                case UInt8(ascii: "E"):
                    guard try json(body) == archive!.counts else {
                        throw bad("its records do not add up to the counts it ends with")
                    }
                    ended = true
                default:
                    throw bad("a record of unknown kind \(tag)")
                }
            }
            guard let archive, ended else {
                throw bad("it ends before its last record (truncated)")
            }
            return archive
        }
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

    func append(_ v: UInt32) {
        append([UInt8(v >> 24), UInt8(v >> 16 & 0xff), UInt8(v >> 8 & 0xff), UInt8(v & 0xff)])
    }

    /// A record of `tag` whose `length` bytes `body` appends.
    func record(_ tag: Character, length: Int, _ body: () -> Void) {
        append([tag.asciiValue!])
        append(UInt32(length))
        let start = count
        body()
        precondition(count - start == length, "a record's length was miscounted")
    }

    func record(_ tag: Character, json: JSON) {
        let bytes = json.serialized()
        record(tag, length: bytes.count) { append(bytes) }
    }

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
