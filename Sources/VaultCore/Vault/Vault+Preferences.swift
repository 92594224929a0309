import Foundation
import VaultProtocol

/// Preferences (UserDefaults' domains and suites): reads on a reader connection, each after
/// its reply's memory was reserved; writes in a group commit, their events in commit order
/// (`inEventOrder`). Every operation is authorized by the policy first (`authorize`).
extension Vault {
    /// What an app's quota leaves its own preferences domain, when `caller` is that app
    /// writing it (nil: no limit; the owner's writes and app-group suites have none).
    private func quotaRoom(_ caller: Caller, _ domain: String, in db: Database) throws -> (
        app: String, bytes: Int64, quota: StorageQuota
    )? {
        guard let app = caller.appID, app.sameBytes(domain),
            let room = try quota.domainRoom(for: app, in: db)
        else { return nil }
        return (app, room, quota)
    }

    /// The domain every app reads after its own (`defaults -g`).
    public static let globalDomain = "NSGlobalDomain"

    /// One key of `domain` (nil: the caller's own), nil when absent.
    /// `reply`: where its reply's memory is reserved before the value is read (`ReplyReserving`).
    func preference(
        domain: String?, key: String, caller: Caller, reply: ReplyReserving? = nil
    ) throws -> PlistValue? {
        let d = try authorize(.readPreferences(domain: domain), for: caller).domain
        // One key: the row's count reserves the reply before its bytes are decoded (the
        // decoded value and its reply are what can cost many times the bytes).
        while true {
            guard let stored = try read({ try preferences.stored(domain: d, key: key, in: $0) })
            else { return nil }
            let total = PreferencesStore.replyBytes(counted: stored.size)
            if reply?.reserveNow(total) ?? true {
                // A value that does not decode is reported, never read as absent (ValueDamaged).
                guard let value = stored.blob.flatMap(PreferencesStore.decode) else {
                    throw DamagedValue(domain: d, key: key).failure
                }
                return value
            }
            try reply?.waitForRoom(total)
        }
    }

    /// `read` on a reader, after `reply` (when given) reserved the most its reply can take
    /// (`PreferencesStore.replyBytes` of what the whole `domain` counts), read in the
    /// same snapshot as the values, so a write in between cannot make the reply larger than
    /// reserved. Without room it waits outside the snapshot, and tries again. `held`: what
    /// `reply` holds for earlier parts of the same reply; this read's bytes are added to it.
    private func readingPreferences<T>(
        _ domain: String, reply: ReplyReserving?, holding held: inout Int,
        _ values: (Database) throws -> T
    ) throws -> T {
        guard let reply else { return try read { try values($0) } }
        let base = held
        while true {
            var total = base
            var result: T?
            try read { db in
                try db.readTransaction { db in
                    total =
                        base
                        + PreferencesStore.replyBytes(
                            counted: try preferences.size(of: domain, key: nil, in: db))
                    if reply.reserveNow(total) { result = try values(db) }
                }
            }
            if let result {
                held = total
                return result
            }
            try reply.waitForRoom(total)
        }
    }

    /// Checks a preference key against the key limit (1 KiB of UTF-8). Throws InvalidValue.
    public static func validatePreferenceKey(_ key: String) throws {
        try PreferencesStore.validate(key: key)
    }

    /// Every key of `domain` (nil: the caller's own) whose value reads; a damaged value is
    /// left out (`preferenceDomainReportingDamage` names it).
    /// `reply`: where its reply's memory is reserved before the values are read (`ReplyReserving`).
    func preferenceDomain(_ domain: String?, caller: Caller, reply: ReplyReserving? = nil)
        throws -> PlistDictionary
    {
        try preferenceDomainReportingDamage(domain, caller: caller, reply: reply).values
    }

    /// Every key of `domain` (nil: the caller's own): the values that read, and the keys of
    /// those that do not (damaged on disk, `DamagedValue`). Not logged: the reply names them,
    /// and a client reading a domain in a loop must not fill the log.
    func preferenceDomainReportingDamage(
        _ domain: String?, caller: Caller, reply: ReplyReserving? = nil
    ) throws -> DomainValues {
        let d = try authorize(.readPreferences(domain: domain), for: caller).domain
        var held = 0
        return try readingPreferences(d, reply: reply, holding: &held) {
            try preferences.domain(d, in: $0)
        }
    }

    /// The first replies of a preferences Observe: every domain `grant` holds, with its values.
    /// `reply`: where their memory is reserved, all of them together, each domain's before it
    /// is read (`ReplyReserving`).
    func preferenceSnapshot(_ grant: Grant, reply: ReplyReserving? = nil) throws -> [(
        domain: String, values: PlistDictionary
    )] {
        precondition(
            grant.kind == .observePreferences, "a snapshot of the domains an Observe was granted")
        var held = 0
        return try grant.domainSet.sorted().map(\.string).map { d in
            (
                d,
                try readingPreferences(d, reply: reply, holding: &held) {
                    try preferences.domain(d, in: $0).values
                }
            )
        }
    }

    /// The stored domains the caller may read (`Policy.visibleDomains`).
    func preferenceDomains(caller: Caller) throws -> [String] {
        let grant = try authorize(.listDomains, for: caller)
        return Policy.visibleDomains(try read { try preferences.domains(in: $0) }, to: grant.caller)
    }

    /// Sets one key of `domain` (nil: the caller's own), durably. Returns the write's sequence
    /// number, which its event carries (observers order their own writes against events with
    /// it). Throws DomainTooLarge (nothing written), InvalidValue; the policy's errors
    /// (`Policy.resolve`); MissingEntitlement when `caller`'s install is no longer current
    /// (see `admit`).
    @discardableResult
    func setPreference(domain named: String?, key: String, value: PlistValue, caller: Caller)
        throws -> UInt64
    {
        let domain = try authorize(.writePreferences(domain: named), for: caller).domain
        return try inEventOrder { ticket in
            try write { db in
                try self.admitInWrite(caller, in: db)
                try self.preferences.set(
                    domain: domain, key: key, value: value,
                    room: try self.quotaRoom(caller, domain, in: db), in: db)
                ticket.take()
            }
            return (
                ticket.sequence,
                [.preference(domain: domain, key: key, value: value, sequence: ticket.sequence)]
            )
        }
    }

    /// Removes one key, durably (no error when it is absent). Returns the write's sequence
    /// number, as `setPreference`; throws MissingEntitlement as it does.
    @discardableResult
    func removePreference(domain named: String?, key: String, caller: Caller) throws
        -> UInt64
    {
        let domain = try authorize(.writePreferences(domain: named), for: caller).domain
        return try inEventOrder { ticket in
            let existed = try writeMakingRoom { db in
                try self.admitInWrite(caller, in: db)
                let existed = try self.preferences.remove(domain: domain, key: key, in: db)
                ticket.take()
                return existed
            }
            return (
                ticket.sequence,
                existed
                    ? [.preference(domain: domain, key: key, value: nil, sequence: ticket.sequence)]
                    : []
            )
        }
    }

    /// Removes a whole domain; returns the number of keys it had. Throws MissingEntitlement
    /// when `caller`'s install is no longer current (see `admit`).
    func removeDomain(_ named: String?, caller: Caller) throws -> Int {
        let domain = try authorize(.writePreferences(domain: named), for: caller).domain
        return try inEventOrder { ticket in
            let (count, keys) = try writeMakingRoom { db in
                try self.admitInWrite(caller, in: db)
                let keys = try self.preferences.storedValues(domain, in: db).keys
                let count = try self.preferences.removeDomain(domain, in: db)
                ticket.take()
                return (count, Array(keys))
            }
            return (
                count,
                keys.map {
                    .preference(domain: domain, key: $0, value: nil, sequence: ticket.sequence)
                }
            )
        }
    }

    /// Replaces a domain with a property list's contents (root must be a dictionary).
    /// Returns the number of keys. Throws InvalidPropertyList, DomainTooLarge (nothing changed),
    /// MissingEntitlement when `caller`'s install is no longer current (see `admit`).
    func importDomain(_ named: String?, plist: Data, caller: Caller) throws -> Int {
        let grant = try authorize(.writePreferences(domain: named), for: caller)
        guard
            case .dict(let values) = try VaultFailure.rethrowing(
                as: .invalidPropertyList, { try PropertyListCodec.decode(plist) })
        else {
            throw VaultFailure(
                .invalidPropertyList,
                "the property list's root is not a dictionary; a domain can only be imported from a dictionary"
            )
        }
        return try importDomain(grant, values: values)
    }

    /// Replaces a domain with `values` (a property list's root dictionary, already decoded).
    /// Returns the number of keys. Throws as `importDomain(_:plist:caller:)`, but for
    /// InvalidPropertyList.
    func importDomain(_ named: String?, values: PlistDictionary, caller: Caller) throws
        -> Int
    {
        try importDomain(
            try authorize(.writePreferences(domain: named), for: caller), values: values)
    }

    private func importDomain(_ grant: Grant, values: PlistDictionary) throws -> Int {
        let (domain, caller) = (grant.domain, grant.caller)
        return try inEventOrder { ticket in
            let old = try write { db in
                try self.admitInWrite(caller, in: db)
                let old = try self.preferences.storedValues(domain, in: db)
                try self.preferences.replace(
                    domain: domain, with: values, room: try self.quotaRoom(caller, domain, in: db),
                    in: db)
                ticket.take()
                return old
            }
            // By bytes: a key whose canonically equivalent twin is imported is still removed.
            var events: [VaultEvent] = old.filter { values[$0.key] == nil }.keys.map {
                .preference(domain: domain, key: $0, value: nil, sequence: ticket.sequence)
            }
            for (k, v) in values where (old[k] ?? nil) != v {
                events.append(
                    .preference(domain: domain, key: k, value: v, sequence: ticket.sequence))
            }
            return (values.count, events)
        }
    }

    /// A domain (nil: the caller's own) as a property list in `format`, without its damaged
    /// values (`exportDomainReportingDamage` names them).
    func exportDomain(
        _ domain: String?, format: PropertyListCodec.Format, caller: Caller,
        reply: ReplyReserving? = nil
    ) throws -> Data {
        try exportDomainReportingDamage(domain, format: format, caller: caller, reply: reply).plist
    }

    /// A domain as a property list in `format`, and the keys of the damaged values left out of it.
    func exportDomainReportingDamage(
        _ domain: String?, format: PropertyListCodec.Format, caller: Caller,
        reply: ReplyReserving? = nil
    ) throws -> (plist: Data, damaged: [String]) {
        let found = try preferenceDomainReportingDamage(domain, caller: caller, reply: reply)
        let plist = try VaultFailure.rethrowing(as: .invalidPropertyList) {
            try PropertyListCodec.encode(.dict(found.values), format: format)
        }
        return (plist, found.damaged)
    }
}
