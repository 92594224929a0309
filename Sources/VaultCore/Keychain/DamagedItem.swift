import Foundation
import VaultProtocol

/// A stored item that cannot be read: its row's columns are malformed, or its attributes or
/// its secret fail authentication (bytes of `vault.sqlite` altered or damaged on disk). Named
/// by what its row holds in clear (the row id, the uuid its ciphertexts are bound to, the
/// class and access group), never by anything its ciphertexts hold. Reported where it is met
/// (docs/keychain.md, "Damaged items") instead of passing for absent.
public struct DamagedItem: Error, Sendable, Equatable {
    /// What of it does not read.
    public enum Part: String, Sendable {
        /// A column is missing or of the wrong type, or its class or accessibility unknown.
        case row
        /// Its attributes fail authentication under the metadata key (or do not parse).
        case attributes
        /// Its item key or its secret fails authentication (with its class key available).
        case secret
    }

    /// `items.id`.
    public var id: Int64
    /// Its uuid in hex ("" when the column is unreadable).
    public var uuid: String
    /// As stored (nil when the column is unreadable).
    public var itemClass: String?
    public var accessGroup: String?
    public var part: Part

    public init(id: Int64, uuid: [UInt8]?, itemClass: String?, accessGroup: String?, part: Part) {
        self.id = id
        self.uuid = uuid.map { String(lowercaseHex: $0) } ?? ""
        // Clear columns, yet of a damaged row: bounded in what they put in a reply or a log.
        self.itemClass = itemClass.map { String($0.prefix(64)) }
        self.accessGroup = accessGroup.map { String($0.prefix(256)) }
        self.part = part
    }

    init(_ r: KeychainStore.Candidates.Stored, _ part: Part) {
        self.init(
            id: r.id, uuid: r.uuid, itemClass: r.itemClass.rawValue, accessGroup: r.accessGroup,
            part: part)
    }

    /// "item 3 (uuid 0a1b…, genericPassword in access group user): its attributes fail
    /// authentication".
    public var description: String {
        let what: String
        switch part {
        case .row: what = "its row is malformed"
        case .attributes: what = "its attributes fail authentication"
        case .secret: what = "its secret fails authentication"
        }
        let name = [itemClass, accessGroup.map { "in access group \($0)" }].compactMap { $0 }
            .joined(separator: " ")
        return
            "item \(id) (uuid \(uuid.isEmpty ? "unreadable" : uuid)\(name.isEmpty ? "" : ", " + name)): \(what)"
    }

    /// ItemDamaged naming `items` (at most 16 in the message, all of them, up to 1,000, in
    /// `items`), with `advice` after them.
    static func error(_ items: [DamagedItem], _ advice: String) -> VaultFailure {
        let named = items.prefix(16).map(\.description).joined(separator: "; ")
        let more = items.count > 16 ? " and \(items.count - 16) more" : ""
        return VaultFailure(
            .itemDamaged,
            "damaged in the store (altered or damaged on disk): \(named)\(more). \(advice)",
            .init(damaged: Array(items.prefix(VaultFailure.maximumDamagedItems))))
    }

    /// What an ItemDamaged error says to do.
    static let advice =
        "Delete it (a Delete naming only its service or server and account) and add it again, or restore it from a backup; `vaultctl doctor` lists every damaged item"
}
