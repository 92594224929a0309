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
    func syncLeave(_ r: Request) throws -> JSONObject {
        try requireSync(r).leave(in: r.session)
        return [:]
    }
}
