internal import CSodium
import Foundation

/// A value of a synchronized item that lost to a write made concurrently with it (neither
/// device had merged the other's when it wrote): kept by the merge (`SyncItemState.losers`)
/// until a write that knows it settles it, listed by `vaultctl sync conflicts` (docs/sync.md).
/// One conflict is one losing write: the fields it wrote whose values differ from the
/// item's current ones.
public struct SyncConflict: Sendable, Equatable {
    /// 16 hex digits, the same on every device: BLAKE2b of the item's key and the losing
    /// write's timestamp.
    public var id: String
    public var key: SyncItemKey
    /// The losing write: the device that made it, and its hybrid clock's wall time (ms).
    public var timestamp: SyncTimestamp
    /// Per field, the losing value (nil: the write removed the attribute).
    public var values: [SyncField: SyncValue?]
    /// Per field, the value that won (nil: none).
    public var current: [SyncField: SyncValue?]
    /// The device whose write won each field (the latest of them when they differ).
    public var winner: SyncDeviceID

    public var written: Date { Date(timeIntervalSince1970: Double(timestamp.wall) / 1000) }

    static func id(_ key: SyncItemKey, _ t: SyncTimestamp) -> String {
        var message = Array("sync conflict\0".utf8) + key.canonicalBytes + t.device.bytes
        SyncWire.appendU64(t.wall, to: &message)
        SyncWire.appendU32(t.counter, to: &message)
        var out = [UInt8](repeating: 0, count: 8)
        _ = crypto_generichash(&out, out.count, message, UInt64(message.count), nil, 0)
        return SyncHex.encode(out)
    }
}

extension SyncVault {
    /// The conflicts listed at most per item, newest first: older ones are dropped from the
    /// list (docs/sync.md).
    public static let maximumConflictsPerItem = 16
    /// The conflicts listed at most in all, newest first.
    public static let maximumConflicts = 1_000

    /// The fields a conflict is about: the dates each write sets change with every edit, so
    /// they tell nothing the user would restore.
    static let conflictFields: Set<SyncField> = [
        .label, .comment, .description, .generic, .accessible, .secret,
    ]

    /// The conflicts of the merged vault: per losing write, its fields whose values differ
    /// from the current ones; the newest `maximumConflictsPerItem` per item and
    /// `maximumConflicts` in all, newest first. A pure function of the merge, so the same on
    /// every device that merged the same changes.
    public var conflicts: [SyncConflict] {
        var out: [SyncConflict] = []
        for (key, state) in items where !state.losers.isEmpty {
            var byWrite: [SyncTimestamp: SyncConflict] = [:]
            for (f, losing) in state.losers where Self.conflictFields.contains(f) {
                guard let won = state.fields[f] else { continue }
                for l in losing where l.value != won.value {
                    var c =
                        byWrite[l.timestamp]
                        ?? SyncConflict(
                            id: SyncConflict.id(key, l.timestamp), key: key, timestamp: l.timestamp,
                            values: [:], current: [:], winner: won.timestamp.device)
                    c.values[f] = .some(l.value)
                    c.current[f] = .some(won.value)
                    byWrite[l.timestamp] = c
                }
            }
            out += byWrite.values.sorted { $1.timestamp < $0.timestamp }.prefix(
                Self.maximumConflictsPerItem)
        }
        out.sort { a, b in a.timestamp != b.timestamp ? b.timestamp < a.timestamp : a.id < b.id }
        return Array(out.prefix(Self.maximumConflicts))
    }
}

extension SyncService {
    /// The conflicts of the merged group (`SyncVault.conflicts`), after a pass. Throws
    /// NotInitialized (not a member), the lock errors.
    public func conflicts(in session: VaultSession) throws -> [SyncConflict] {
        try vault.authorizeSync(.syncConflicts, session: session)
        return try lock.withLock {
            _ = try memberState()
            try pass()
            return merged.conflicts
        }
    }

    /// Settles the conflict `id`: `restore` makes its losing values the current ones, else
    /// the current values stay. Either is a new write of the conflict's fields, made knowing
    /// every value of them merged here, so it settles every conflict of those fields on every
    /// device it reaches; it syncs as any change. Returns the conflict settled. Throws Param
    /// (no such conflict), NotInitialized (not a member), the lock errors.
    public func settleConflict(id: String, restore: Bool, in session: VaultSession) throws
        -> SyncConflict
    {
        try vault.authorizeSync(.syncSettleConflict, session: session)
        return try lock.withLock {
            let (config, folder) = try memberState()
            // Everything read and this keychain's own changes exported first.
            try pass()
            guard let c = merged.conflicts.first(where: { $0.id == id.lowercased() }),
                let state = merged.items[c.key], let t = clock?.tick()
            else {
                throw VaultFailure.param(
                    "no conflict \(logField(id)) (vaultctl sync conflicts lists them)")
            }
            let change = SyncChange(
                key: c.key, timestamp: t, kind: .write(restore ? c.values : c.current),
                context: state.context(at: t))
            merged.apply(change)
            try export([change], config: config, folder: folder)
            // The next pass brings this keychain's item to the merge.
            writtenByLastPass.insert(c.key)
            try pass()
            logger.notice(
                "sync: \(restore ? "restored" : "dismissed") conflict \(c.id) (\(c.values.count) field(s) of an item written by device \(c.timestamp.device))"
            )
            return c
        }
    }
}

extension SyncField {
    /// The attribute's name as io.vaultd.Keychain spells it ("secret" for the secret).
    public var name: String {
        switch self {
        case .label: "label"
        case .comment: "comment"
        case .description: "description"
        case .generic: "generic"
        case .accessible: "accessible"
        case .creationDate: "creationDate"
        case .modificationDate: "modificationDate"
        case .secret: "secret"
        }
    }
}

extension SyncConflict {
    /// An attribute's value as a reply shows it: text as it is, `generic`'s bytes in base64;
    /// nil when the write removed the attribute, and for the secret (which a reply carries
    /// from its `SecureBytes`, never as a String).
    public static func shown(_ f: SyncField, _ v: SyncValue?) -> String? {
        guard let v, f != .secret else { return nil }
        return v.withBytes { b in
            if f != .generic, let text = String(validating: b, as: UTF8.self) { return text }
            return Data(b).base64EncodedString()
        }
    }

    /// At most how many bytes this conflict takes in a reply: its item and names (the key's
    /// parts, 1 KiB of JSON around them), and each value twice (losing, current) in base64.
    public func replyBytes(secrets: Bool) -> Int {
        var n = 1024 + key.canonicalBytes.count
        for (f, v) in values where f != .secret || secrets {
            let b = (v?.withBytes { $0.count } ?? 0) + (current[f]??.withBytes { $0.count } ?? 0)
            n += (b + 2) / 3 * 4 + 64
        }
        return n
    }

    /// The item's identity attributes by name (those not empty).
    public var identity: [String: String] {
        let names =
            key.itemClass == .genericPassword
            ? ["service", "account"]
            : [
                "server", "protocol", "port", "path", "account", "authenticationType",
                "securityDomain",
            ]
        var out: [String: String] = [:]
        for (n, v) in zip(names, key.primaryKey) where !v.isEmpty && !(n == "port" && v == "0") {
            out[n] = v
        }
        return out
    }
}
