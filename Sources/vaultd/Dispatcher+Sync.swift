import Foundation
import VaultCore
import VaultProtocol

extension Dispatcher {
    /// io.vaultd.Sync's methods (docs/protocol.md): the engine's `SyncService` authorizes each.
    func handleSync(_ method: String, _ p: Parameters, caller: Caller) throws -> JSONObject {
        guard let sync else { throw VaultError(.methodNotFound, "no method \(method)", extra: ["method": .string(method)]) }
        switch method {
        case "io.vaultd.Sync.Init": return try sync.initialize(folder: try p.string("folder"), caller: caller)
        case "io.vaultd.Sync.Join": return try sync.join(folder: try p.string("folder"), caller: caller)
        case "io.vaultd.Sync.Approve": return try sync.approve(code: try p.string("code"), caller: caller)
        case "io.vaultd.Sync.Status": return try sync.status(caller: caller)
        case "io.vaultd.Sync.Remove": return try sync.remove(device: try p.string("device"), caller: caller)
        case "io.vaultd.Sync.Leave":
            try sync.leave(caller: caller)
            return [:]
        default: throw VaultError(.methodNotFound, "no method \(method)", extra: ["method": .string(method)])
        }
    }
}
