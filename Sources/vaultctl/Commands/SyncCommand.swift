import Foundation
import VaultClient
import VaultProtocol

/// `vaultctl sync init FOLDER | join FOLDER | approve CODE | status [--json] | leave | remove DEVICE
/// | conflicts [--json] [--secrets] | conflicts restore|dismiss ID`: the io.vaultd.Sync methods
/// (docs/sync.md).
struct SyncCommand: Command {
    enum Action: String, CaseIterable {
        case `init`, join, approve, status, leave, remove, conflicts
    }
    var action: Action
    var argument: String?
    var json = false
    /// `sync conflicts --secrets`: the secrets' values shown too.
    var secrets = false
    /// `sync conflicts restore|dismiss ID`.
    var settle: String?
    /// `sync approve --wait SECONDS`: how long to wait for the join request to arrive in the
    /// folder (Syncthing carries it some seconds after `sync join` wrote it); 0: not at all.
    var wait = 120.0

    /// What vaultd says when the folder does not hold the join request of the code yet.
    static let notArrived = "no join request of device"

    init(_ a: inout Arguments) throws {
        action = try a.verb(of: "sync")
        if action == .status { json = a.flag("--json") }
        switch action {
        case .`init`, .join:
            guard let folder = a.positional() else {
                throw UsageError(message: "sync \(action.rawValue) needs a FOLDER")
            }
            // vaultd resolves nothing against vaultctl's working directory: the path goes absolute.
            argument =
                folder.hasPrefix("/")
                ? folder : FileManager.default.currentDirectoryPath + "/" + folder
        case .approve:
            if let w = try a.option("--wait") {
                guard let seconds = Double(w), seconds.isFinite, seconds >= 0 else {
                    throw UsageError(
                        message: "--wait needs a number of seconds, not '\(w.prefix(20))'")
                }
                wait = seconds
            }
            guard let code = a.positional() else {
                throw UsageError(message: "sync approve needs the CODE sync join printed")
            }
            argument = code
        case .remove:
            guard let device = a.positional() else {
                throw UsageError(message: "sync remove needs the DEVICE ID sync status shows")
            }
            argument = device
        case .conflicts:
            json = a.flag("--json")
            secrets = a.flag("--secrets")
            if let verb = a.positional(oneOf: ["restore", "dismiss"]) {
                guard let id = a.positional() else {
                    throw UsageError(
                        message: "sync conflicts \(verb) needs the ID sync conflicts lists")
                }
                settle = verb
                argument = id
            }
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
            print(
                "Next, on another device whose copy of the folder Syncthing keeps: vaultctl sync join FOLDER"
            )
        case .join:
            let r = try c.call(.syncJoin, ["folder": .string(argument!)])
            print(
                "asked to join the sync group in \(argument!) as device \(r["deviceID"]?.stringValue ?? "?")"
            )
            print("On a device of the group, run:")
            print("  vaultctl sync approve \(r["code"]?.stringValue ?? "?")")
        case .approve:
            let r = try approveWhenArrived(c)
            print(
                "approved device \(r["deviceID"]?.stringValue ?? "?"); it joins once the folder has carried the approval to it"
            )
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
            print(
                "sync: \(state == "joining" ? "joining (waiting for sync approve on a device of the group)" : state == "removed" ? "removed (this device left or was removed; run sync leave)" : "member")"
            )
            print("folder: \(r["folder"]?.stringValue ?? "?")")
            print("this device: \(r["deviceID"]?.stringValue ?? "?")")
            if let f = r["fingerprint"]?.stringValue { print("group fingerprint: \(f)") }
            if let g = r["keyGeneration"]?.intValue { print("group key generation: \(g)") }
            if let n = r["items"]?.intValue { print("synchronized items: \(n)") }
            if let p = r["problem"]?.stringValue { print("problem: \(p)") }
            if let n = r["ignoredDevices"]?.intValue, n > 0 {
                print(
                    "ignored device directories: \(n) (the folder holds more than 256; this device's and the members' are read first)"
                )
            }
            for b in r["rolledBack"]?.arrayValue ?? [] {
                print(
                    "rolled back or withheld: device \(b["deviceID"]?.stringValue ?? "?")'s segments in the folder end at \(b["present"]?.intValue ?? 0), but device \(b["acknowledgedBy"]?.stringValue ?? "?") acknowledged \(b["acknowledged"]?.intValue ?? 0) (or they have not arrived yet)"
                )
            }
            let damaged = r["damaged"]?.arrayValue ?? []
            if !damaged.isEmpty {
                print(
                    "damaged items held, not synced: \(damaged.count) (vaultctl doctor lists them; deleting one here takes the group's copy back)"
                )
                for d in damaged { print("  damaged: \(Keychain.describeDamaged(d))") }
            }
            print("devices:")
            for d in r["devices"]?.arrayValue ?? [] {
                let id = d["deviceID"]?.stringValue ?? "?"
                let standing = d["membership"]?.stringValue ?? ""
                let me =
                    d["thisDevice"]?.boolValue == true
                    ? " (this device)"
                    : ["removed", "left"].contains(standing) ? " (\(standing))" : ""
                let seen = d["lastSeen"]?.stringValue ?? "never"
                let rejected = d["rejected"]?.intValue ?? 0
                print(
                    "  \(id)\(me)\tlast seen \(seen)\t\(d["segments"]?.intValue ?? 0) segments, \(d["pending"]?.intValue ?? 0) pending\(rejected > 0 ? ", \(rejected) rejected" : "")"
                )
            }
        case .conflicts:
            try runConflicts(c)
        case .leave:
            _ = try c.call(.syncLeave)
            print("this device no longer syncs; its items stay in its keychain")
        case .remove:
            let r = try c.call(.syncRemove, ["device": .string(argument!)])
            print(
                "removed device \(r["deviceID"]?.stringValue ?? "?"); the group key is now generation \(r["generation"]?.intValue ?? 0), which it does not have"
            )
        }
    }

    /// Approves the code, waiting up to `wait` seconds for its join request to arrive in the
    /// folder: `sync join` writes it on the other device, and Syncthing brings it here after
    /// its watcher's delay (10 s by default) and the transfer. Asks vaultd again once a second,
    /// having said once on stderr what it waits for; past the bound, the error says what to check.
    func approveWhenArrived(_ c: VaultConnection) throws -> JSONObject {
        let deadline = Date().addingTimeInterval(wait)
        var said = false
        while true {
            do {
                return try c.call(.syncApprove, ["code": .string(argument!)])
            } catch let e as VaultError where e.message.hasPrefix(Self.notArrived) && wait > 0 {
                guard Date() < deadline else {
                    throw VaultError(
                        e.code,
                        "\(e.message): none arrived within \(Int(wait)) s (is the folder shared with the joining device, and has Syncthing finished syncing it?)"
                    )
                }
                if !said {
                    StandardOutput.writeError(
                        "vaultctl: waiting up to \(Int(wait)) s for the join request to arrive in the folder (Syncthing carries it after its watcher delay, 10 s by default)...\n"
                    )
                    said = true
                }
                usleep(UInt32(min(1.0, max(0.05, deadline.timeIntervalSinceNow)) * 1_000_000))
            }
        }
    }
}
