import Foundation
import VaultProtocol

/// A keychain query: the class and attributes to match (absent attributes match anything).
public struct Query: Sendable {
    /// nil matches both classes.
    public var itemClass: ItemClass?
    /// The attributes to match, each exactly (kSecAttrService, kSecAttrAccount, …).
    public var attributes: ItemAttributes
    /// kSecMatchLimitAll when true, kSecMatchLimitOne (default) when false.
    public var matchAll: Bool

    /// A query for `itemClass` (nil: both) items whose attributes match `attributes`; one
    /// match (`matchAll` false) or every match.
    public init(_ itemClass: ItemClass? = .genericPassword, _ attributes: ItemAttributes = ItemAttributes(), matchAll: Bool = false) {
        self.itemClass = itemClass
        self.attributes = attributes
        self.matchAll = matchAll
    }

    var parameters: [String: JSON] {
        ["class": itemClass.map { .string($0.rawValue) } ?? .null, "query": attributes.json, "matchLimit": matchAll ? "all" : "one"]
    }
}

/// One item returned by `copyMatching`.
public struct Item: Sendable {
    /// kSecClass: generic or internet password.
    public var itemClass: ItemClass
    /// Set when attributes were requested.
    public var attributes: ItemAttributes?
    /// The secret, when data was requested.
    public var data: Data?
}

/// The keychain tier, as Keychain Services' SecItem functions. Every method throws
/// `VaultError`: DuplicateItem (-25299), ItemNotFound (-25300), InteractionNotAllowed
/// (-25308, vault locked), MissingEntitlement (-34018), AuthFailed (-25293), Param (-50).
public struct Keychain: Sendable {
    let connection: VaultConnection

    /// As `SecItemAdd`: stores `data` (at most 1 MiB, `SecretLimit`; over it SecretTooLarge,
    /// -50, before anything is sent) under `attributes`. Returns the stored attributes (with
    /// defaults such as accessGroup, accessible and the dates filled in).
    @discardableResult
    public func add(_ itemClass: ItemClass = .genericPassword, attributes: ItemAttributes, data: Data) throws -> ItemAttributes {
        try SecretLimit.check(data.count)
        let r = try connection.call(
            "io.vaultd.Keychain.Add",
            ["class": .string(itemClass.rawValue), "attributes": attributes.json, "data": .string(data.base64EncodedString())])
        return try ItemAttributes(json: r["attributes"])
    }

    /// As `SecItemCopyMatching`: the matching items, with their data when `returnData` and
    /// their attributes when `returnAttributes`. Throws ItemNotFound when nothing matches.
    public func copyMatching(_ query: Query, returnData: Bool = false, returnAttributes: Bool = true) throws -> [Item] {
        var p = query.parameters
        p["returnData"] = .bool(returnData)
        p["returnAttributes"] = .bool(returnAttributes)
        let r = try connection.call("io.vaultd.Keychain.CopyMatching", p)
        return try (r["items"]?.arrayValue ?? []).map { j in
            Item(
                itemClass: try ItemClass(wire: j["class"]?.stringValue ?? ""),
                attributes: try j["attributes"].map { try ItemAttributes(json: $0) },
                data: j["data"]?.stringValue.flatMap { Data(base64Encoded: $0) })
        }
    }

    /// As `SecItemUpdate`: sets `attributes` on every match, and replaces the secret when
    /// `data` is given (at most 1 MiB, as for `add`). Returns the number of items changed.
    @discardableResult
    public func update(_ query: Query, attributes: ItemAttributes = ItemAttributes(), data: Data? = nil) throws -> Int {
        if let data { try SecretLimit.check(data.count) }
        var p = query.parameters
        p["matchLimit"] = nil  // not a parameter of Update (it acts on every match)
        p["attributes"] = attributes.json
        if let data { p["data"] = .string(data.base64EncodedString()) }
        return try connection.call("io.vaultd.Keychain.Update", p)["count"]?.intValue ?? 0
    }

    /// As `SecItemDelete`: deletes every match; returns how many.
    @discardableResult
    public func delete(_ query: Query) throws -> Int {
        var p = query.parameters
        p["matchLimit"] = nil  // not a parameter of Delete (it acts on every match)
        return try connection.call("io.vaultd.Keychain.Delete", p)["count"]?.intValue ?? 0
    }
}
