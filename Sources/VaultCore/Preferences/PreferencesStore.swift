import Foundation
import VaultProtocol

/// Preference domains in the store: one row per (domain, key), so a write touches one row,
/// never the whole domain. Values are stored as tagged JSON. It holds no connection: each
/// operation reads or writes through the one it is handed (`in db:`), a transaction
/// `DatabasePool.write` or `read` gave its caller.
struct PreferencesStore {
    /// A domain may hold at most this many bytes (4 MiB), counted per entry as its key plus its
    /// value's binary-plist size (`PlistValue.storageSize`), or about half its size on the
    /// wire when that is more (`entrySize`).
    static let maximumDomainSize = DomainLimit.maximumBytes

    /// What an entry counts against the domain limit. 64/127 of the wire size bounds the
    /// whole domain's reply (Preferences.Domain, an Observe snapshot) to 8 MiB less 64 KiB,
    /// room for the reply's envelope within the message limit: JSON writes a control
    /// character in six bytes, so 4 MiB of them would be a 24 MiB reply no client could take.
    /// Ordinary values count their binary size. `stored`: the value's tagged
    /// JSON, as stored and sent.
    static func entrySize(key: String, value: PlistValue, stored: [UInt8]) -> Int {
        let wire = JSON.string(key).serialized().count + stored.count + 2  // `"key":value,`
        return max(key.utf8.count + value.storageSize, (wire * 64 + 126) / 127)
    }
    /// A key may be at most this many UTF-8 bytes (1 KiB).
    static let maximumKeyLength = 1024
    /// A domain name may be at most this many UTF-8 bytes.
    static let maximumDomainNameLength = 255

    static func validate(domain: String) throws {
        guard !domain.isEmpty, domain.utf8.count <= maximumDomainNameLength,
            !domain.unicodeScalars.contains(where: { $0.value < 0x20 || $0 == "/" })
        else {
            throw VaultFailure(
                .invalidValue,
                "invalid domain name: it must be 1 to \(maximumDomainNameLength) bytes, without '/' or control characters"
            )
        }
    }

    static func validate(key: String) throws {
        guard key.utf8.count <= maximumKeyLength else {
            throw VaultFailure(
                .invalidValue,
                "the key is \(key.utf8.count) bytes; keys may be at most \(maximumKeyLength) bytes")
        }
    }

    /// A stored value, nil when it does not decode: its bytes were altered or damaged on disk,
    /// or an earlier vaultd let in what today's checks refuse (a date outside years 0 to
    /// 9999). Such a value never blocks removing, replacing or re-importing its domain, nor
    /// reading its other keys.
    static func decode(_ blob: [UInt8]) -> PlistValue? {
        guard let json = try? JSON.parse(blob) else { return nil }
        return try? PlistValue(tagged: json)
    }

    /// One entry's stored bytes and what they count against the domain limit (`size`), from
    /// one statement: a reader can reserve its reply from the count before it decodes the
    /// bytes, with no second query and no explicit transaction. Nil when the key is not set;
    /// a nil `blob` when the row's value is not bytes at all (damaged: `DamagedValue`).
    func stored(domain: String, key: String, in db: Database) throws -> (blob: [UInt8]?, size: Int)?
    {
        guard
            let r = try db.row(
                "SELECT value, size FROM preferences WHERE domain = ? AND key = ?",
                [.text(domain), .text(key)])
        else {
            return nil
        }
        return (r[0].blob, Int(max(0, r[1].int64 ?? 0)))
    }

    /// A domain's keys and values: those whose stored value does not decode are named in
    /// `damaged` instead, so the others still read.
    func domain(_ domain: String, in db: Database) throws -> DomainValues {
        var out = DomainValues()
        for r in try db.rows("SELECT key, value FROM preferences WHERE domain = ?", [.text(domain)])
        {
            guard let k = r[0].text else { continue }
            if let blob = r[1].blob, let value = Self.decode(blob) {
                out.values[k] = value
            } else {
                out.damaged.append(k)
            }
        }
        out.damaged.sort { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
        return out
    }

    /// A domain's values, with nil for one that no longer decodes (a date an older vaultd let
    /// in, outside years 0 to 9999): such a value must never block deleting or replacing the domain.
    func storedValues(_ domain: String, in db: Database) throws -> ExactDictionary<PlistValue?> {
        var out: ExactDictionary<PlistValue?> = [:]
        for r in try db.rows("SELECT key, value FROM preferences WHERE domain = ?", [.text(domain)])
        {
            if let k = r[0].text { out[k] = r[1].blob.flatMap { Self.decode($0) } }
        }
        return out
    }

    /// Every stored value that does not decode, in domain and key order, and how many values
    /// were read (`Vault.checkStore`). Values are never kept: each is decoded and dropped.
    func damagedValues(in db: Database) throws -> (checked: Int, damaged: [DamagedValue]) {
        let s = try db.statement("SELECT domain, key, value FROM preferences ORDER BY domain, key")
        defer { s.reset() }
        var checked = 0
        var damaged: [DamagedValue] = []
        while try s.step() {
            checked += 1
            let r = s.row()
            guard let domain = r[0].text, let key = r[1].text else {
                damaged.append(
                    DamagedValue(
                        domain: r[0].text ?? "(unreadable)", key: r[1].text ?? "(unreadable)"))
                continue
            }
            if r[2].blob.flatMap({ Self.decode($0) }) == nil {
                damaged.append(DamagedValue(domain: domain, key: key))
            }
        }
        return (checked, damaged)
    }

    func domains(in db: Database) throws -> [String] {
        try db.rows("SELECT DISTINCT domain FROM preferences ORDER BY domain").compactMap {
            $0[0].text
        }
    }

    /// What `domain` counts against the domain limit (`entrySize` summed), or its entry `key`.
    func size(of domain: String, key: String?, in db: Database) throws -> Int {
        let r =
            try key.map {
                try db.row(
                    "SELECT COALESCE(SUM(size), 0) FROM preferences WHERE domain = ? AND key = ?",
                    [.text(domain), .text($0)])
            }
            ?? db.row(
                "SELECT COALESCE(SUM(size), 0) FROM preferences WHERE domain = ?", [.text(domain)])
        return Int(r?[0].int64 ?? 0)
    }

    /// The most memory a reply holding entries that count `size` bytes against the domain
    /// limit takes while it is built and sent: the decoded values, their tagged-JSON tree and
    /// the serialized reply. Long strings cost a few times what they count; a value that
    /// counts a byte or two (a bool, an empty dictionary in a dictionary) is a JSON object of
    /// its own, hundreds of bytes in the tree, the costliest shape (docs/protocol.md, the
    /// reply budget). Counted at 96 times, and 64 KiB for the reply around them.
    static func replyBytes(counted size: Int) -> Int { size * 96 + (64 << 10) }

    private func size(of domain: String, excluding key: String?, in db: Database) throws -> Int {
        let r = try db.row(
            "SELECT COALESCE(SUM(size), 0) FROM preferences WHERE domain = ? AND key IS NOT ?",
            [.text(domain), key.map { .text($0) } ?? .null])
        return Int(r?[0].int64 ?? 0)
    }

    private func checkSize(domain: String, total: Int) throws {
        guard total <= Self.maximumDomainSize else {
            throw VaultFailure(
                .domainTooLarge,
                "domain '\(domain)' would hold \(total) bytes; the limit is \(Self.maximumDomainSize) bytes (4 MiB); nothing was written",
                .init(limit: Int64(Self.maximumDomainSize), size: Int64(total), domain: domain))
        }
    }

    /// QuotaExceeded (through `quota`) when a write would grow the domain to `total` bytes,
    /// past `room` (what its app's quota leaves it). A write that does not grow it passes.
    private func checkRoom(
        domain: String, total: Int, room: (app: String, bytes: Int64, quota: StorageQuota)?,
        in db: Database
    ) throws {
        guard let room, Int64(total) > room.bytes,
            total > (try size(of: domain, excluding: nil, in: db))
        else { return }
        throw room.quota.exceeded(
            room.app, total: Int64(total) + (room.quota.bytesPerApp - room.bytes))
    }

    /// Sets one key. Throws DomainTooLarge (nothing written) or InvalidValue; QuotaExceeded
    /// when the domain would pass `room` (an app writing its own domain).
    func set(
        domain: String, key: String, value: PlistValue,
        room: (app: String, bytes: Int64, quota: StorageQuota)? = nil, in db: Database
    ) throws {
        try Self.validate(domain: domain)
        try Self.validate(key: key)
        let stored = value.tagged.serialized()
        let entrySize = Self.entrySize(key: key, value: value, stored: stored)
        let total = try size(of: domain, excluding: key, in: db) + entrySize
        try checkSize(domain: domain, total: total)
        try checkRoom(domain: domain, total: total, room: room, in: db)
        try db.run(
            "INSERT OR REPLACE INTO preferences (domain, key, value, size, modified) VALUES (?, ?, ?, ?, ?)",
            [
                .text(domain), .text(key), .blob(stored), .integer(Int64(entrySize)),
                .real(Date().timeIntervalSince1970),
            ])
    }

    /// Removes one key; returns whether it existed.
    @discardableResult
    func remove(domain: String, key: String, in db: Database) throws -> Bool {
        try db.run(
            "DELETE FROM preferences WHERE domain = ? AND key = ?", [.text(domain), .text(key)]) > 0
    }

    /// Removes a whole domain; returns the number of keys removed.
    func removeDomain(_ domain: String, in db: Database) throws -> Int {
        try db.run("DELETE FROM preferences WHERE domain = ?", [.text(domain)])
    }

    /// Replaces a domain's contents with `values`. Throws DomainTooLarge (nothing written);
    /// QuotaExceeded as `set`.
    func replace(
        domain: String, with values: PlistDictionary,
        room: (app: String, bytes: Int64, quota: StorageQuota)? = nil, in db: Database
    ) throws {
        try Self.validate(domain: domain)
        var rows: [(key: String, stored: [UInt8], size: Int)] = []
        for (k, v) in values {
            try Self.validate(key: k)
            let stored = v.tagged.serialized()
            rows.append((k, stored, Self.entrySize(key: k, value: v, stored: stored)))
        }
        let total = rows.reduce(0) { $0 + $1.size }
        try checkSize(domain: domain, total: total)
        try checkRoom(domain: domain, total: total, room: room, in: db)
        try db.run("DELETE FROM preferences WHERE domain = ?", [.text(domain)])
        let now = Date().timeIntervalSince1970
        for r in rows {
            try db.run(
                "INSERT INTO preferences (domain, key, value, size, modified) VALUES (?, ?, ?, ?, ?)",
                [.text(domain), .text(r.key), .blob(r.stored), .integer(Int64(r.size)), .real(now)])
        }
    }
}

extension PlistValue {
    /// Bytes the value takes, close to its binary-plist size (what the 4 MiB domain limit counts).
    public var storageSize: Int {
        switch self {
        case .string(let s): return s.utf8.count + 2
        case .integer, .unsignedInteger, .real, .date: return 9
        case .bool: return 1
        case .data(let d): return d.count + 2
        case .array(let a): return a.reduce(2) { $0 + $1.storageSize }
        case .dict(let d): return d.reduce(2) { $0 + $1.key.utf8.count + 2 + $1.value.storageSize }
        }
    }
}
