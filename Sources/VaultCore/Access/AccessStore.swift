import Foundation
import VaultProtocol

/// One remembered access decision: a program the owner allowed to use an item's secret.
public struct AccessGrant: Sendable, Equatable {
    public var program: ProgramIdentity
    /// The item: its class, label, service, account, server and access group (what a user
    /// recognises it by).
    public var item: ItemAttributes
    public var itemClass: ItemClass
    /// When it was granted (Unix time).
    public var grantedAt: Date
}

/// The creators and grants tables (`2026-12-07-item-creators`): who added each item, and
/// which programs may use which item's secret. Program identities are sealed under the
/// metadata key (`seal`); a grant is found by a keyed hash of the program's match key
/// (`programHash`), so no path is in the clear. Not thread-safe: called inside the engine's
/// read and write closures.
enum AccessStore {
    /// Associated data of a sealed program identity: "vaultd program v1" and a NUL. Not bound
    /// to the item (a replace gives it a new uuid, which the triggers follow): a row moved
    /// to another item by someone who can write the store is out of scope, as that someone
    /// runs as the user (docs/threat-model.md).
    static let associatedData = Array("vaultd program v1".utf8) + [0]

    static func seal(_ program: ProgramIdentity, metadata: SecureBytes) -> [UInt8] {
        Sodium.seal(program.json.serialized(), key: metadata, associatedData: associatedData)
    }

    /// The identity `box` holds; nil when it does not open or parse (counted as unknown).
    static func open(_ box: [UInt8], metadata: SecureBytes) -> ProgramIdentity? {
        guard let plain = Sodium.openBytes(box, key: metadata, associatedData: associatedData),
            let j = try? JSON.parse(plain)
        else { return nil }
        return ProgramIdentity(json: j)
    }

    /// Keyed hash of `program`'s match key under the index key: what grants are found by.
    static func programHash(_ program: ProgramIdentity, index: SecureBytes) -> [UInt8] {
        Sodium.keyedHash(
            Array("vaultd access grant\u{0}\(program.matchKey)".utf8), key: index, length: 16)
    }

    /// Records `program` as the creator of item `uuid` (sealed beforehand: `seal`).
    static func recordCreator(uuid: [UInt8], sealed: [UInt8], in db: Database) throws {
        _ = try db.run(
            "INSERT OR REPLACE INTO item_creators (uuid, creator) VALUES (?, ?)",
            [.blob(uuid), .blob(sealed)])
    }

    /// The creators of items `uuids` (absent: unknown).
    static func creators(of uuids: [[UInt8]], metadata: SecureBytes, in db: Database) throws
        -> [[UInt8]: ProgramIdentity]
    {
        var out: [[UInt8]: ProgramIdentity] = [:]
        for uuid in uuids {
            if let box = try db.row(
                "SELECT creator FROM item_creators WHERE uuid = ?", [.blob(uuid)])?[0].blob,
                let p = open(box, metadata: metadata)
            {
                out[uuid] = p
            }
        }
        return out
    }

    /// Of `uuids`, those whose secret the program of hash `hash` was granted.
    static func granted(_ uuids: [[UInt8]], hash: [UInt8], in db: Database) throws -> Set<[UInt8]> {
        var out: Set<[UInt8]> = []
        for uuid in uuids
        where try db.row(
            "SELECT 1 FROM access_grants WHERE item_uuid = ? AND program_hash = ?",
            [.blob(uuid), .blob(hash)]) != nil
        {
            out.insert(uuid)
        }
        return out
    }

    /// Grants `program` the secrets of items `uuids`.
    static func grant(
        _ uuids: [[UInt8]], to program: ProgramIdentity, metadata: SecureBytes,
        index: SecureBytes, at now: Date, in db: Database
    ) throws {
        let hash = programHash(program, index: index)
        let sealed = seal(program, metadata: metadata)
        for uuid in uuids {
            _ = try db.run(
                "INSERT OR REPLACE INTO access_grants (item_uuid, program_hash, program, granted_at) VALUES (?, ?, ?, ?)",
                [.blob(uuid), .blob(hash), .blob(sealed), .real(now.timeIntervalSince1970)])
        }
    }

    /// Every grant: item uuid, the program (nil when its box does not open) and when.
    static func allGrants(metadata: SecureBytes, in db: Database) throws
        -> [(uuid: [UInt8], hash: [UInt8], program: ProgramIdentity?, at: Date)]
    {
        try db.rows(
            "SELECT item_uuid, program_hash, program, granted_at FROM access_grants ORDER BY granted_at"
        ).compactMap { r in
            guard let uuid = r[0].blob, let hash = r[1].blob, let box = r[2].blob else {
                return nil
            }
            return (
                uuid, hash, open(box, metadata: metadata),
                Date(timeIntervalSince1970: r[3].real ?? 0)
            )
        }
    }

    /// Removes the grants of items `uuids` (every item: nil) to the program of hash `hash`
    /// (every program: nil). Returns how many.
    static func revoke(_ uuids: [[UInt8]]?, hash: [UInt8]?, in db: Database) throws -> Int {
        var n = 0
        for uuid in uuids ?? [[]] {
            var sql = "DELETE FROM access_grants WHERE 1"
            var args: [SQLValue] = []
            if uuids != nil {
                sql += " AND item_uuid = ?"
                args.append(.blob(uuid))
            }
            if let hash {
                sql += " AND program_hash = ?"
                args.append(.blob(hash))
            }
            n += try db.run(sql, args)
        }
        return n
    }

    /// The mode a vault is in when config.plist sets none (`vault_meta` 'access.default'):
    /// `open` for a vault initialised before per-program access, else `confirm` (also when
    /// the row is missing or unreadable: fail towards asking).
    static func defaultMode(in db: Database) throws -> SecretAccessMode {
        try recordedMode(in: db) ?? .confirm
    }

    /// The mode recorded in `vault_meta` 'access.default' (an unreadable one: `confirm`);
    /// nil when none is recorded.
    static func recordedMode(in db: Database) throws -> SecretAccessMode? {
        guard let raw = try db.row("SELECT value FROM vault_meta WHERE key = 'access.default'")?[0]
        else { return nil }
        let text = raw.blob.flatMap { String(validating: $0, as: UTF8.self) }
        return text.flatMap(SecretAccessMode.init(rawValue:)) ?? .confirm
    }

    /// Records `mode` as the vault's default (`Vault.initialize`: `confirm`).
    static func setDefaultMode(_ mode: SecretAccessMode, in db: Database) throws {
        _ = try db.run(
            "INSERT OR REPLACE INTO vault_meta (key, value) VALUES ('access.default', ?)",
            [.blob(Array(mode.rawValue.utf8))])
    }
}
