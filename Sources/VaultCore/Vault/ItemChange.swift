import VaultProtocol

/// One keychain item made, changed or deleted by a write through the engine (`addItem`,
/// `updateItems`, `deleteItems`, whichever front-end called them), as observers are told of it
/// in `VaultEvent.itemsChanged`: the Secret Service front-end signals the changes of its items
/// (generic passwords of `Vault.secretServiceService`) made through the socket as it signals
/// its own. It names an item by its clear identity, never by what it holds.
public struct ItemChange: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        case created, changed, deleted
    }

    public var kind: Kind
    public var itemClass: ItemClass
    public var accessGroup: String
    /// A generic password's service (nil for another class, or for a damaged item).
    public var service: String?
    /// Its account (nil when absent, or for a damaged item).
    public var account: String?
    /// `items.id`: how a damaged item, whose attributes do not read, is named.
    public var row: Int64
    /// A damaged item (deleted by its clear columns, its attributes unread).
    public var damaged: Bool

    public init(
        _ kind: Kind, itemClass: ItemClass, accessGroup: String, service: String?,
        account: String?, row: Int64, damaged: Bool = false
    ) {
        self.kind = kind
        self.itemClass = itemClass
        self.accessGroup = accessGroup
        self.service = service
        self.account = account
        self.row = row
        self.damaged = damaged
    }

    /// `kind` of an item with attributes `a` (its class `itemClass`, in row `row`).
    init(_ kind: Kind, _ itemClass: ItemClass, _ a: ItemAttributes, row: Int64) {
        self.init(
            kind, itemClass: itemClass, accessGroup: a.accessGroup ?? "",
            service: itemClass == .genericPassword ? a.service : nil, account: a.account, row: row)
    }

    /// A damaged item deleted, named by its clear columns.
    init(deleted d: DamagedItem) {
        self.init(
            .deleted, itemClass: d.itemClass.flatMap(ItemClass.init(rawValue:)) ?? .genericPassword,
            accessGroup: d.accessGroup ?? "", service: nil, account: nil, row: d.id, damaged: true)
    }

    /// What an update of one row is: the same item changed, or, when it moved to another
    /// identity (its access group, class, service or account changed), the old one deleted and
    /// a new one made.
    static func update(
        _ itemClass: ItemClass, before: ItemAttributes, after: ItemAttributes, row: Int64
    ) -> [ItemChange] {
        let old = ItemChange(.deleted, itemClass, before, row: row)
        let new = ItemChange(.created, itemClass, after, row: row)
        // Byte for byte, as the store compares them.
        func same(_ a: String?, _ b: String?) -> Bool {
            a?.utf8.elementsEqual(b?.utf8 ?? "".utf8) ?? (b == nil)
        }
        if same(old.accessGroup, new.accessGroup) && same(old.service, new.service)
            && same(old.account, new.account)
        {
            return [ItemChange(.changed, itemClass, after, row: row)]
        }
        return [old, new]
    }
}
