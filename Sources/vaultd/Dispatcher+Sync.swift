import Foundation
import VaultCore
import VaultProtocol

extension Dispatcher {
    // io.vaultd.Sync (docs/protocol.md): the engine's `SyncService` authorizes each method.

    /// The sync service; MethodNotFound when this vaultd serves none.
    private func requireSync(_ r: Request) throws -> SyncService {
        guard let sync else { throw VaultError(.methodNotFound, "no method \(r.method)", extra: ["method": .string(r.method)]) }
        return sync
    }

    func syncInit(_ r: Request) throws -> JSONObject { try requireSync(r).initialize(folder: try r.p.string("folder"), caller: r.caller) }
    func syncJoin(_ r: Request) throws -> JSONObject { try requireSync(r).join(folder: try r.p.string("folder"), caller: r.caller) }
    func syncApprove(_ r: Request) throws -> JSONObject { try requireSync(r).approve(code: try r.p.string("code"), caller: r.caller) }
    func syncStatus(_ r: Request) throws -> JSONObject { try requireSync(r).status(caller: r.caller) }
    func syncLeave(_ r: Request) throws -> JSONObject {
        try requireSync(r).leave(caller: r.caller)
        return [:]
    }
}
