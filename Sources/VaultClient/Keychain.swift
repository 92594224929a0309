import Foundation
import VaultProtocol

/// A keychain query, as SecItem's query dictionary: the class and attributes to match
/// (absent attributes match anything; see `ItemAttributes` for where that differs).
public struct Query: Sendable {
    /// kSecClass; nil matches both classes.
    public var itemClass: ItemClass?
    /// The attributes to match, each exactly (kSecAttrService, kSecAttrAccount, …). An
    /// `accessGroup` not the caller's is MissingEntitlement (-34018); without one, every
    /// group the caller may use is searched (the owner's tools: every group).
    public var attributes: ItemAttributes
    /// kSecMatchLimitAll when true, kSecMatchLimitOne (default) when false. Used by
    /// `copyMatching` only: `update` and `delete` act on every match.
    public var matchAll: Bool

    /// A query for `itemClass` (nil: both) items whose attributes match `attributes`; one
    /// match (`matchAll` false) or every match.
    public init(
        _ itemClass: ItemClass? = .genericPassword, _ attributes: ItemAttributes = ItemAttributes(),
        matchAll: Bool = false
    ) {
        self.itemClass = itemClass
        self.attributes = attributes
        self.matchAll = matchAll
    }

    var parameters: JSONObject {
        [
            "class": itemClass.map { .string($0.rawValue) } ?? .null, "query": attributes.json,
            "matchLimit": matchAll ? "all" : "one",
        ]
    }
}

/// One item returned by `copyMatching`: a copy, not a live reference.
public struct Item: Sendable {
    /// kSecClass: generic or internet password.
    public var itemClass: ItemClass
    /// Set when attributes were requested (kSecReturnAttributes), with vaultd's defaults
    /// filled in (absent primary-key strings as "", `port` 0, `synchronizable` false).
    public var attributes: ItemAttributes?
    /// The secret (at most 1 MiB), when data was requested (kSecReturnData).
    public var data: Data?
}

/// The keychain tier, as Keychain Services' SecItem functions (docs/keychain.md). Every method
/// throws `VaultError`: the codes each lists, and NotInitialized (no vault yet),
/// MissingEntitlement (-34018) for an access group not the caller's or an install that
/// ended since it connected, Param (-50) for a malformed request, and ConnectionFailed.
public struct Keychain: Sendable {
    let connection: VaultConnection

    /// As `SecItemAdd`: stores `data` (at most 1 MiB, `SecretLimit`; over it SecretTooLarge,
    /// -50, before anything is sent) under `attributes`. Returns the stored attributes (with
    /// defaults such as accessGroup, accessible and the dates filled in). Throws
    /// DuplicateItem (-25299), InteractionNotAllowed (-25308: the class is locked),
    /// AuthFailed (-25293: whenPasscodeSetThisDeviceOnly without a vault passphrase), Param
    /// (-50: see `ItemAttributes`; synchronizable with a ThisDeviceOnly class).
    @discardableResult
    public func add(
        _ itemClass: ItemClass = .genericPassword, attributes: ItemAttributes, data: Data
    ) throws -> ItemAttributes {
        try SecretLimit.check(data.count)
        let r = try connection.call(
            .keychainAdd,
            [
                "class": .string(itemClass.rawValue), "attributes": attributes.json,
                "data": .string(data.base64EncodedString()),
            ])
        return try ItemAttributes(json: r["attributes"])
    }

    /// As `SecItemCopyMatching`: the matching items in the order they were added (with
    /// `matchAll` false, the first readable one), with their data when `returnData` and their
    /// attributes when `returnAttributes`. Throws ItemNotFound (-25300) when nothing matches;
    /// InteractionNotAllowed (-25308) when only locked items match, or, with `matchAll`, when
    /// any match is locked (never a partial list); NotAvailableOnThisDevice (-25291) in
    /// their place when some of them are another device's (`matchAll` leaves those out of a
    /// list); ReplyTooLarge when
    /// the reply would pass 8 MiB (many large secrets).
    public func copyMatching(
        _ query: Query, returnData: Bool = false, returnAttributes: Bool = true
    ) throws -> [Item] {
        try copyMatchingReportingDamage(
            query, returnData: returnData, returnAttributes: returnAttributes
        ).items
    }

    /// `copyMatching`, with the damaged items the query met (left out of `items`: their
    /// rows, attributes or secrets do not read; each the wire's `DamagedItem`: `id`, `uuid`,
    /// `class`, `accessGroup`, `damaged`). Throws as `copyMatching`, and ItemDamaged
    /// (-26275) when only damaged items match.
    public func copyMatchingReportingDamage(
        _ query: Query, returnData: Bool = false, returnAttributes: Bool = true
    ) throws -> (items: [Item], damaged: [JSON]) {
        var p = query.parameters
        p["returnData"] = .bool(returnData)
        p["returnAttributes"] = .bool(returnAttributes)
        let r = try connection.call(.keychainCopyMatching, p)
        let items = try (r["items"]?.arrayValue ?? []).map { j in
            Item(
                itemClass: try ItemClass(wire: j["class"]?.stringValue ?? ""),
                attributes: try j["attributes"].map { try ItemAttributes(json: $0) },
                data: j["data"]?.stringValue.flatMap { Data(base64Encoded: $0) })
        }
        return (items, r["damaged"]?.arrayValue ?? [])
    }

    /// "item 3 (uuid 0a1b…, genericPassword in access group user): its attributes fail
    /// authentication", of one of the wire's `DamagedItem`s (as vaultd's messages say it).
    public static func describeDamaged(_ j: JSON) -> String {
        let name = [
            j["class"]?.stringValue, j["accessGroup"]?.stringValue.map { "in access group \($0)" },
        ].compactMap { $0 }.joined(separator: " ")
        let uuid = j["uuid"]?.stringValue ?? ""
        let what: String
        switch j["damaged"]?.stringValue {
        case "attributes": what = "its attributes fail authentication"
        case "secret": what = "its secret fails authentication"
        default: what = "its row is malformed"
        }
        return
            "item \(j["id"]?.intValue ?? -1) (uuid \(uuid.isEmpty ? "unreadable" : uuid)\(name.isEmpty ? "" : ", " + name)): \(what)"
    }

    /// As `SecItemUpdate`: sets `attributes` on every match (its dates are ignored;
    /// `modificationDate` becomes now), and replaces the secret when `data` is given (at most
    /// 1 MiB, as for `add`). All matches change, or none. Returns the number of items
    /// changed. Throws ItemNotFound (-25300); DuplicateItem (-25299) when a change collides;
    /// Param (-50) when neither attributes nor data are given; InteractionNotAllowed,
    /// AuthFailed or NotAvailableOnThisDevice when any match, or the new class, is unavailable.
    @discardableResult
    public func update(
        _ query: Query, attributes: ItemAttributes = ItemAttributes(), data: Data? = nil
    ) throws -> Int {
        if let data { try SecretLimit.check(data.count) }
        var p = query.parameters
        p["matchLimit"] = nil  // not a parameter of Update (it acts on every match)
        p["attributes"] = attributes.json
        if let data { p["data"] = .string(data.base64EncodedString()) }
        return try connection.call(.keychainUpdate, p)["count"]?.intValue ?? 0
    }

    /// As `SecItemDelete`: deletes every match; returns how many. Throws ItemNotFound
    /// (-25300); InteractionNotAllowed (-25308) when any match is locked (nothing is deleted).
    /// Another device's items (NotAvailableOnThisDevice) are deleted with the rest.
    @discardableResult
    public func delete(_ query: Query) throws -> Int {
        var p = query.parameters
        p["matchLimit"] = nil  // not a parameter of Delete (it acts on every match)
        return try connection.call(.keychainDelete, p)["count"]?.intValue ?? 0
    }
}
