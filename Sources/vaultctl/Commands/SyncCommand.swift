import Foundation
import VaultClient
import VaultProtocol

/// `vaultctl sync init FOLDER | join FOLDER | approve CODE | status [--json] | leave | remove DEVICE`: the
/// io.vaultd.Sync methods (docs/sync.md).
struct SyncCommand: Command {
    enum Action: String, CaseIterable { case `init`, join, approve, status, leave, remove }
    var action: Action
    var argument: String?
    var json = false

    init(_ a: inout Arguments) throws {
        action = try a.verb(of: "sync")
        if action == .status { json = a.flag("--json") }
        switch action {
        case .`init`, .join:
            guard let folder = a.positional() else { throw UsageError(message: "sync \(action.rawValue) needs a FOLDER") }
            // vaultd resolves nothing against vaultctl's working directory: the path goes absolute.
            argument = folder.hasPrefix("/") ? folder : FileManager.default.currentDirectoryPath + "/" + folder
        case .approve:
            guard let code = a.positional() else { throw UsageError(message: "sync approve needs the CODE sync join printed") }
            argument = code
        case .remove:
            guard let device = a.positional() else { throw UsageError(message: "sync remove needs the DEVICE ID sync status shows") }
            argument = device
        case .status, .leave:
            break
        }
    }

    func run(_ context: Context) throws {
        let c = try context.vault().connection
        switch action {
        case .`init`:
            let r = try c.call(.syncInit, ["folder": .string(argument!)])
            print("made a sync group in \(argument!)")
            print("this device: \(r["deviceID"]?.stringValue ?? "?")")
            print("group fingerprint: \(r["fingerprint"]?.stringValue ?? "?")")
            print("Next, on another device whose copy of the folder Syncthing keeps: vaultctl sync join FOLDER")
        case .join:
            let r = try c.call(.syncJoin, ["folder": .string(argument!)])
            print("asked to join the sync group in \(argument!) as device \(r["deviceID"]?.stringValue ?? "?")")
            print("On a device of the group, run:")
            print("  vaultctl sync approve \(r["code"]?.stringValue ?? "?")")
        case .approve:
            let r = try c.call(.syncApprove, ["code": .string(argument!)])
            print("approved device \(r["deviceID"]?.stringValue ?? "?"); it joins once the folder has carried the approval to it")
        case .status:
            let r = try c.call(.syncStatus)
            if json {
                print(JSON.object(r).text)
                return
            }
            let state = r["state"]?.stringValue ?? "?"
            guard state != "off" else {
                print("sync: off (vaultctl sync init FOLDER or sync join FOLDER)")
                return
            }
            print("sync: \(state == "joining" ? "joining (waiting for sync approve on a device of the group)" : state == "removed" ? "removed (this device left or was removed; run sync leave)" : "member")")
            print("folder: \(r["folder"]?.stringValue ?? "?")")
            print("this device: \(r["deviceID"]?.stringValue ?? "?")")
            if let f = r["fingerprint"]?.stringValue { print("group fingerprint: \(f)") }
            if let g = r["keyGeneration"]?.intValue { print("group key generation: \(g)") }
            if let n = r["items"]?.intValue { print("synchronized items: \(n)") }
            if let p = r["problem"]?.stringValue { print("problem: \(p)") }
            if let n = r["ignoredDevices"]?.intValue, n > 0 {
                print("ignored device directories: \(n) (the folder holds more than 256; this device's and the members' are read first)")
            }
            let damaged = r["damaged"]?.arrayValue ?? []
            if !damaged.isEmpty {
                print("damaged items held, not synced: \(damaged.count) (vaultctl doctor lists them; deleting one here takes the group's copy back)")
                for d in damaged { print("  damaged: \(Keychain.describeDamaged(d))") }
            }
            print("devices:")
            for d in r["devices"]?.arrayValue ?? [] {
                let id = d["deviceID"]?.stringValue ?? "?"
                let standing = d["membership"]?.stringValue ?? ""
                let me = d["thisDevice"]?.boolValue == true ? " (this device)" : ["removed", "left"].contains(standing) ? " (\(standing))" : ""
                let seen = d["lastSeen"]?.stringValue ?? "never"
                let rejected = d["rejected"]?.intValue ?? 0
                print(
                    "  \(id)\(me)\tlast seen \(seen)\t\(d["segments"]?.intValue ?? 0) segments, \(d["pending"]?.intValue ?? 0) pending\(rejected > 0 ? ", \(rejected) rejected" : "")"
                )
            }
        case .leave:
            _ = try c.call(.syncLeave)
            print("this device no longer syncs; its items stay in its keychain")
        case .remove:
            let r = try c.call(.syncRemove, ["device": .string(argument!)])
            print("removed device \(r["deviceID"]?.stringValue ?? "?"); the group key is now generation \(r["generation"]?.intValue ?? 0), which it does not have")
        }
    }
}
