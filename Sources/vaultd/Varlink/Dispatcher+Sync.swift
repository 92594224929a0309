import Foundation
import VaultCore
import VaultProtocol

extension Dispatcher {
    // io.vaultd.Sync (docs/protocol.md): the engine's `SyncService` authorizes each method.

    /// The sync service; MethodNotFound when this vaultd serves none.
    private func requireSync(_ r: Request) throws -> SyncService {
        guard let sync else {
            throw VaultError(
                .methodNotFound, "no method \(r.method)", extra: ["method": .string(r.method)])
        }
        return sync
    }

    func syncInit(_ r: Request) throws -> JSONObject {
        try requireSync(r).initialize(folder: try r.p.string("folder"), in: r.session).wire
    }
    func syncJoin(_ r: Request) throws -> JSONObject {
        try requireSync(r).join(folder: try r.p.string("folder"), in: r.session).wire
    }
    func syncApprove(_ r: Request) throws -> JSONObject {
        try requireSync(r).approve(code: try r.p.string("code"), in: r.session).wire
    }
    func syncStatus(_ r: Request) throws -> JSONObject {
        try requireSync(r).status(in: r.session).wire
    }
    func syncRemove(_ r: Request) throws -> JSONObject {
        try requireSync(r).remove(device: try r.p.string("device"), in: r.session).wire
    }
    /// The bytes of conflicts one Conflicts reply holds at most: the rest are counted in
    /// `omitted`, so a reply stays within the 8 MiB message limit (values of 1 MiB each).
    static let conflictsReplyBudget = 6 << 20

    func syncConflicts(_ r: Request) throws -> JSONObject {
        let secrets = try r.p.optionalBool("secrets") ?? false
        let list = try requireSync(r).conflicts(in: r.session)
        var used = 0
        var shown: [JSON] = []
        for c in list {
            used += c.replyBytes(secrets: secrets)
            if used > Self.conflictsReplyBudget { break }
            shown.append(.object(c.wire(showSecrets: secrets, secrets: r.secrets)))
        }
        return ["conflicts": .array(shown), "omitted": JSON(list.count - shown.count)]
    }
    func syncSettleConflict(_ r: Request, restore: Bool) throws -> JSONObject {
        let c = try requireSync(r).settleConflict(
            id: try r.p.string("id"), restore: restore, in: r.session)
        return ["conflict": .object(c.wire(showSecrets: false, secrets: nil))]
    }
    func syncLeave(_ r: Request) throws -> JSONObject {
        try requireSync(r).leave(in: r.session)
        return [:]
    }
}
