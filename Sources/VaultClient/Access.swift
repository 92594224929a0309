import Foundation
import VaultProtocol

/// A remembered access decision (io.vaultd.Keychain `AccessGrant`): a program allowed to
/// use an item's secret (docs/access.md).
public struct AccessGrantInfo: Sendable {
    /// "executable", "interpreter", "app" or "flatpak".
    public var kind: String
    /// The executable's path, or the app's ID.
    public var program: String
    /// The script an interpreter runs.
    public var script: String?
    /// The item's class and attributes.
    public var itemClass: ItemClass?
    public var attributes: ItemAttributes
    public var grantedAt: Date?
    /// The raw value, for `--json` output.
    public var json: JSON

    init(_ j: JSON) {
        json = j
        kind = j["program"]?["kind"]?.stringValue ?? ""
        program = j["program"]?["path"]?.stringValue ?? ""
        script = j["program"]?["script"]?.stringValue
        itemClass = j["class"]?.stringValue.flatMap(ItemClass.init(rawValue:))
        attributes = (try? ItemAttributes(json: j["attributes"])) ?? ItemAttributes()
        grantedAt = j["grantedAt"]?.stringValue.flatMap(PlistDate.parse)
    }
}

extension Keychain {
    /// The remembered access grants (owner only).
    public func accessGrants() throws -> [AccessGrantInfo] {
        (try connection.call(.keychainListAccess)["grants"]?.arrayValue ?? []).map {
            AccessGrantInfo($0)
        }
    }

    /// Allows the program at `program` (with `script`, that interpreter running that
    /// script) to use the secrets of the items `query` matches. In SecretAccess confirm and
    /// strict, vaultd asks the user first. Returns how many items. Owner only.
    @discardableResult
    public func grantAccess(to program: String, script: String? = nil, _ query: Query) throws
        -> Int
    {
        try connection.call(
            .keychainGrantAccess,
            [
                "program": .string(program), "script": script.map { .string($0) } ?? .null,
                "class": query.itemClass.map { .string($0.rawValue) } ?? .null,
                "query": query.attributes.json,
            ])["count"]?.intValue ?? 0
    }

    /// Forgets the grants to the program at `program` (nil: every program; with `script`,
    /// for that script) of the items `query` matches (nil: every item). Returns how many.
    @discardableResult
    public func revokeAccess(from program: String?, script: String? = nil, _ query: Query?)
        throws -> Int
    {
        try connection.call(
            .keychainRevokeAccess,
            [
                "program": program.map { .string($0) } ?? .null,
                "script": script.map { .string($0) } ?? .null,
                "class": query?.itemClass.map { .string($0.rawValue) } ?? .null,
                "query": query.map { $0.attributes.json } ?? .null,
            ])["count"]?.intValue ?? 0
    }
}
