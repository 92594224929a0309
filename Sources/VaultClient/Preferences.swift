import Foundation
import VaultProtocol

/// Preference domains by name, as `defaults(1)` sees them (docs/preferences.md). Apps name nil for
/// their own domain and may use it, their app groups' suites (`group.*`) and, read-only,
/// `NSGlobalDomain`; another domain is MissingEntitlement, a write to NSGlobalDomain
/// ReadOnlyDomain. The owner's tools must name a domain (nil: InvalidParameter `domain`).
/// Domain names: 1 to 255 bytes, no '/' or control characters; keys: at most 1 KiB of
/// UTF-8 (else InvalidValue). A domain holds at most 4 MiB (`DomainLimit`). Every method
/// also throws ConnectionFailed.
public struct Preferences: Sendable {
    let connection: VaultConnection

    private static func domain(_ d: String?) -> JSON { d.map { .string($0) } ?? .null }

    /// The value of `key` in `domain` (nil: the app's own), or nil when the domain has no
    /// such key (as CFPreferencesCopyAppValue; no KeyNotFound). Reads one domain only, not the
    /// search list (`Defaults` does that). Throws ValueDamaged (naming domain and key) when
    /// the stored value does not read.
    public func value(domain: String?, key: String) throws -> PlistValue? {
        let r = try connection.call(
            .preferencesGet, ["domain": Self.domain(domain), "key": .string(key)])
        guard let v = r["value"], !v.isNull else { return nil }
        return try PlistValue(tagged: v)
    }

    /// Sets one key; durable when this returns. Throws DomainTooLarge when the domain would
    /// pass 4 MiB (nothing written; a value too large for one 8 MiB message is refused the
    /// same way, not sent), InvalidValue (a key over 1 KiB, a date outside years 0 to 9999,
    /// nesting past `PlistValue.maximumDepth`), ReadOnlyDomain, MissingEntitlement.
    public func set(_ value: PlistValue, domain: String?, key: String) throws {
        try setReturningSequence(value, domain: domain, key: key)
    }

    /// `set`, returning the write's sequence number (nil from a vaultd that sends none), which
    /// its Observe event carries.
    @discardableResult
    func setReturningSequence(_ value: PlistValue, domain: String?, key: String) throws -> UInt64? {
        do {
            let r = try connection.call(
                .preferencesSet,
                ["domain": Self.domain(domain), "key": .string(key), "value": value.tagged])
            return Self.sequence(in: r)
        } catch let e as VaultError
            where e.code == .invalidParameter && e.parameters["parameter"] == "message"
        {
            throw VaultError(
                .domainTooLarge,
                "the value is over \(Varlink.maximumMessageSize) bytes on the wire; a domain may hold \(DomainLimit.maximumBytes) bytes (4 MiB); nothing was written",
                extra: (["limit": JSON(DomainLimit.maximumBytes)] as JSONObject).merging(
                    domain.map { ["domain": .string($0)] } ?? [:]
                ) { $1 })
        }
    }

    /// Removes one key (no error when it is absent); durable when this returns. Throws
    /// ReadOnlyDomain, MissingEntitlement.
    public func remove(domain: String?, key: String) throws {
        try removeReturningSequence(domain: domain, key: key)
    }

    /// `remove`, returning the write's sequence number as `setReturningSequence`.
    @discardableResult
    func removeReturningSequence(domain: String?, key: String) throws -> UInt64? {
        let r = try connection.call(
            .preferencesRemove, ["domain": Self.domain(domain), "key": .string(key)])
        return Self.sequence(in: r)
    }

    /// A write's sequence number in a Set/Remove reply or an Observe event (nil when absent:
    /// a vaultd that sends none).
    static func sequence(in reply: JSONObject) -> UInt64? {
        reply["sequence"]?.int64Value.flatMap { UInt64(exactly: $0) }
    }

    /// Every key of a domain (empty when it has none) whose stored value reads: a value
    /// damaged on disk is left out (`valuesReportingDamage` names it). Throws MissingEntitlement.
    public func values(domain: String?) throws -> PlistDictionary {
        try valuesReportingDamage(domain: domain).values
    }

    /// Every key of a domain whose stored value reads, and the keys of those that do not
    /// (damaged on disk; `ValueDamaged` for a `value(domain:key:)` of one), sorted.
    public func valuesReportingDamage(domain: String?) throws -> (
        values: PlistDictionary, damaged: [String]
    ) {
        let r = try connection.call(.preferencesDomain, ["domain": Self.domain(domain)])
        let values = try (r["values"]?.objectValue ?? [:]).mapValues { try PlistValue(tagged: $0) }
        return (values, Self.damagedKeys(in: r))
    }

    /// A Domain or Export reply's `damaged` keys (none when absent).
    static func damagedKeys(in reply: JSONObject) -> [String] {
        reply["damaged"]?.arrayValue?.compactMap(\.stringValue) ?? []
    }

    /// Names of the domains holding keys, sorted: every domain for the owner's tools; for an
    /// app only its own, its suites' and NSGlobalDomain.
    public func domains() throws -> [String] {
        try connection.call(.preferencesDomains)["domains"]?.arrayValue?.compactMap(\.stringValue)
            ?? []
    }

    /// Replaces `domain` with a property list (XML or binary, read by
    /// `PropertyListSerialization`) whose root is a dictionary; all or nothing. Returns the
    /// number of keys. Throws InvalidPropertyList (not a plist, another root, a date outside
    /// years 0 to 9999, past 64 levels or 12 MiB expanded), InvalidValue (a key over 1 KiB),
    /// DomainTooLarge (over 4 MiB), ReadOnlyDomain, MissingEntitlement.
    ///
    /// A file too large to send in base64 in one 8 MiB message (the XML of a domain of many
    /// small keys takes far more than the domain's 4 MiB) is read here, with the same checks
    /// vaultd makes, and its values are sent instead; a domain over 4 MiB is DomainTooLarge
    /// either way.
    @discardableResult
    public func importDomain(_ domain: String, plist: Data) throws -> Int {
        // The call's envelope and the domain's name (at most 255 bytes, as JSON up to 6 times
        // that) take less than 4 KiB.
        if (plist.count + 2) / 3 * 4 + 4096 < Varlink.maximumMessageSize {
            return try connection.call(
                .preferencesImport,
                ["domain": .string(domain), "plist": .string(plist.base64EncodedString())])["keys"]?
                .intValue ?? 0
        }
        guard case .dict(let values) = try PropertyListCodec.decode(plist) else {
            throw VaultError(
                .invalidPropertyList,
                "the property list's root is not a dictionary; a domain can only be imported from a dictionary"
            )
        }
        return try importDomain(domain, values: values)
    }

    /// Replaces a domain with `values` (as `importDomain(_:plist:)`, without a plist: what
    /// `defaults write DOMAIN '{ … }'` writes). Returns the number of keys. Throws
    /// DomainTooLarge (over 4 MiB), InvalidValue, ReadOnlyDomain, MissingEntitlement.
    @discardableResult
    public func importDomain(_ domain: String, values: PlistDictionary) throws -> Int {
        do {
            return try connection.call(
                .preferencesImport,
                ["domain": .string(domain), "values": .object(values.mapValues(\.tagged))])["keys"]?
                .intValue ?? 0
        } catch let e as VaultError
            where e.code == .invalidParameter && e.parameters["parameter"] == "message"
        {
            throw VaultError(
                .domainTooLarge,
                "domain '\(domain)': the property list's values are over \(Varlink.maximumMessageSize) bytes on the wire; a domain may hold \(DomainLimit.maximumBytes) bytes (4 MiB); nothing was written",
                extra: ["domain": .string(domain), "limit": JSON(DomainLimit.maximumBytes)])
        }
    }

    /// The domain as a property list, `binary` or XML (as Apple writes it: dates in whole
    /// seconds). Throws InvalidPropertyList for XML holding a character XML 1.0 cannot carry
    /// (export binary instead), MissingEntitlement.
    ///
    /// XML is written here, from the domain's values (`values(domain:)`, which always fits one
    /// message), not by vaultd's `Export`: a domain within the 4 MiB limit can take more than
    /// the 8 MiB message limit as XML in base64 (many small keys, text full of `&` and `<`),
    /// and such an Export reply is ReplyTooLarge. A binary plist comes from vaultd's `Export`
    /// (written there when it fits a reply, here otherwise): Foundation's binary writer fails
    /// in a program that links the Swift runtime statically, as release vaultctl does, for a
    /// dictionary holding an array or a dictionary ("property lists cannot contain objects of
    /// type 'Not A Type'").
    public func exportDomain(_ domain: String, binary: Bool) throws -> Data {
        try exportDomainReportingDamage(domain, binary: binary).plist
    }

    /// `exportDomain`, and the keys of the values damaged on disk that it left out.
    public func exportDomainReportingDamage(_ domain: String, binary: Bool) throws -> (
        plist: Data, damaged: [String]
    ) {
        if binary {
            do {
                let reply = try connection.call(
                    .preferencesExport, ["domain": .string(domain), "format": "binary"])
                if let text = reply["plist"]?.stringValue, let plist = Data(base64Encoded: text) {
                    return (plist, Self.damagedKeys(in: reply))
                }
            } catch let e as VaultError where e.code == .replyTooLarge {}
        }
        let found = try valuesReportingDamage(domain: domain)
        return (
            try PropertyListCodec.encode(.dict(found.values), format: binary ? .binary : .xml),
            found.damaged
        )
    }

    /// Removes a whole domain; returns how many keys it had (0 when none). Throws
    /// ReadOnlyDomain, MissingEntitlement.
    @discardableResult
    public func removeDomain(_ domain: String) throws -> Int {
        try connection.call(.preferencesRemoveDomain, ["domain": .string(domain)])["keys"]?.intValue
            ?? 0
    }
}
