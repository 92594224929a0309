import Foundation
import VaultCore
import VaultProtocol

// The engine's typed results in the shapes of the varlink interfaces
// (`Sources/VaultProtocol/Interfaces/*.varlink`): every field name of a reply the engine's
// values make is written here, and the reply checks of debug builds hold them against the
// IDL. Nulls are written where the IDL's field is optional and the engine has no value.

extension JSON {
    fileprivate init(optional s: String?) { self = s.map { .string($0) } ?? .null }
    fileprivate init(optional n: Int?) { self = n.map { JSON($0) } ?? .null }
    fileprivate init(optional d: Date?) { self = d.map { .string(PlistDate.format($0)) } ?? .null }
}

extension LockState {
    /// io.vaultd.Vault `LockState`.
    var wire: JSON {
        [
            "state": .string(state.rawValue), "unlockedSinceStart": .bool(unlockedSinceStart),
            "hasPassphrase": .bool(hasPassphrase),
        ]
    }
}

extension VaultStatus {
    /// io.vaultd.Vault.Status's reply, less `version` (the daemon's, added by the dispatcher).
    var wire: JSONObject {
        [
            "lock": lock.wire, "items": JSON(items), "unavailableItems": JSON(unavailableItems),
            "domains": JSON(domains),
            "retryAfter": JSON(retryAfter), "dataDirectory": JSON(optional: dataDirectory),
            "deviceKey": JSON(optional: deviceKey?.kind.rawValue),
            "deviceKeyProblem": JSON(optional: deviceKey?.problem),
            "recoveryKey": recoveryKey.map { .bool($0) } ?? .null,
            "secretAccess": JSON(optional: secretAccess?.rawValue),
            "secretAccessSource": JSON(
                optional: secretAccessConfigured.map { $0 ? "config" : "vault" }),
        ]
    }
}

extension ProgramIdentity {
    /// io.vaultd.Keychain `Program`.
    var wire: JSON {
        var o: JSONObject = ["kind": .string(kind.rawValue), "path": .string(path)]
        if let script { o["script"] = .string(script) }
        if kind == .executable || kind == .interpreter { o["userWritable"] = .bool(userWritable) }
        return .object(o)
    }
}

extension AccessGrant {
    /// io.vaultd.Keychain `AccessGrant`.
    var wire: JSON {
        [
            "program": program.wire, "class": .string(itemClass.rawValue),
            "attributes": item.json,
            "grantedAt": .string(ISO8601DateFormatter().string(from: grantedAt)),
        ]
    }
}

extension DamagedItem {
    /// io.vaultd.Keychain and io.vaultd.Vault `DamagedItem`.
    var wire: JSON {
        var o: JSONObject = [
            "id": JSON(Int(id)), "uuid": .string(uuid), "damaged": .string(part.rawValue),
        ]
        if let itemClass { o["class"] = .string(itemClass) }
        if let accessGroup { o["accessGroup"] = .string(accessGroup) }
        return .object(o)
    }

    /// A list of them, at most `VaultFailure.maximumDamagedItems` (the rest are counted in
    /// the message or the log, never sent: a reply stays bounded).
    static func wire(_ items: [DamagedItem]) -> JSON {
        .array(items.prefix(VaultFailure.maximumDamagedItems).map(\.wire))
    }
}

extension DamagedValue {
    /// io.vaultd.Vault `DamagedValue`.
    var wire: JSON { ["domain": .string(domain), "key": .string(key)] }

    /// A list of them, at most `VaultFailure.maximumDamagedItems` (a reply stays bounded).
    static func wire(_ values: [DamagedValue]) -> JSON {
        .array(values.prefix(VaultFailure.maximumDamagedItems).map(\.wire))
    }
}

extension BackupSummary {
    /// io.vaultd.Vault.Backup's reply.
    var wire: JSONObject {
        var o: JSONObject = [
            "items": JSON(items), "deviceBoundItems": JSON(deviceBoundItems),
            "leftOutItems": JSON(leftOutItems),
            "preferences": JSON(preferences), "domains": JSON(domains), "apps": JSON(apps),
            "bytes": JSON(bytes),
        ]
        if !damagedItems.isEmpty { o["damagedItems"] = DamagedItem.wire(damagedItems) }
        if !damagedValues.isEmpty { o["damagedValues"] = DamagedValue.wire(damagedValues) }
        return o
    }
}

extension RestoreSummary.Counts {
    var wire: JSON { ["added": JSON(added), "replaced": JSON(replaced), "kept": JSON(kept)] }
}

extension RestoreSummary {
    /// io.vaultd.Vault.Restore's reply.
    var wire: JSONObject {
        [
            "items": items.wire, "preferences": preferences.wire, "apps": apps.wire,
            "unavailableItems": JSON(unavailableItems),
            "lock": lock.wire,
        ]
    }
}

extension StoreCheck {
    /// io.vaultd.Vault.Check's reply.
    var wire: JSONObject {
        [
            "integrity": .array(integrity.map { .string($0) }), "items": JSON(items),
            "secretsUnchecked": JSON(secretsUnchecked),
            "damaged": DamagedItem.wire(damaged), "setAside": JSON(setAside),
            "preferences": JSON(preferences), "damagedValues": DamagedValue.wire(damagedValues),
        ]
    }
}

extension AppRecord {
    /// io.vaultd.Apps `App`.
    var wire: JSON {
        [
            "appID": .string(appID), "executable": JSON(optional: executable),
            "flatpak": .bool(flatpak),
            "accessGroups": .array(accessGroups.map { .string($0) }),
            "appGroups": .array(appGroups.map { .string($0) }),
            "keepCredentialsOnReinstall": .bool(keepCredentialsOnReinstall),
            "installed": .bool(installed),
            "generation": .string(generation),
            "installedAt": .string(PlistDate.format(installedAt)),
            "keychainAccessGroups": .array(keychainAccessGroups.map { .string($0) }),
            "launchedGeneration": JSON(optional: launchedGeneration),
            "missingSince": JSON(optional: missingSince),
            "uninstallAt": JSON(optional: uninstallAt),
        ]
    }
}

extension SyncEnrolment {
    /// io.vaultd.Sync Init's, Join's, Approve's and Remove's replies: the fields each fills.
    var wire: JSONObject {
        var o: JSONObject = ["deviceID": .string(deviceID)]
        if let fingerprint { o["fingerprint"] = .string(fingerprint) }
        if let code { o["code"] = .string(code) }
        if let keyGeneration { o["generation"] = JSON(keyGeneration) }
        return o
    }
}

extension SyncStatus {
    /// A time sync records in milliseconds since 1970, as ISO 8601 UTC with the milliseconds
    /// (`2026-12-06T22:11:51.224Z`, or whole seconds: `…:51Z`). `PlistDate.format` writes the
    /// Double's exact decimal, which for a millisecond count is `51.2239999771118164`.
    static func millisecondText(_ d: Date) -> String {
        let ms = (d.timeIntervalSince1970 * 1000).rounded()
        let seconds = (ms / 1000).rounded(.down)
        let fraction = Int(ms - seconds * 1000)
        var text = PlistDate.format(Date(timeIntervalSince1970: seconds))
        guard fraction > 0, text.hasSuffix("Z") else { return text }
        text.removeLast()
        let digits = String(fraction)
        return text + "." + String(repeating: "0", count: 3 - digits.count) + digits + "Z"
    }

    /// io.vaultd.Sync.Status's reply: the state and no device when this device does not sync.
    var wire: JSONObject {
        guard let folder, let deviceID else {
            return ["state": .string(state), "devices": .array([])]
        }
        let devices: [JSON] = self.devices.map { d in
            [
                "deviceID": .string(d.deviceID), "thisDevice": .bool(d.thisDevice),
                "segments": JSON(d.segments),
                "pending": JSON(d.pending), "rejected": JSON(d.rejected),
                "membership": .string(d.membership),
                "lastSeen": d.lastSeen.map { .string(Self.millisecondText($0)) } ?? .null,
            ]
        }
        return [
            "state": .string(state), "folder": .string(folder), "deviceID": .string(deviceID),
            "fingerprint": JSON(optional: fingerprint),
            "keyGeneration": JSON(optional: keyGeneration), "devices": .array(devices),
            "items": JSON(optional: items), "problem": JSON(optional: problem),
            "lastPass": lastPass.map { .string(Self.millisecondText($0)) } ?? .null,
            "damaged": DamagedItem.wire(damaged), "ignoredDevices": JSON(ignoredDevices),
            "rolledBack": .array(
                rolledBack.map {
                    [
                        "deviceID": .string($0.device.description),
                        "present": JSON(Int($0.present)),
                        "acknowledged": JSON(Int($0.acknowledged)),
                        "acknowledgedBy": .string($0.acknowledgedBy.description),
                    ]
                }),
        ]
    }
}

extension SyncConflict {
    /// io.vaultd.Sync `SyncConflict`; the secret's values only with `showSecrets`, as the
    /// call's reply place-holders when it has them (`CallSecrets`: the base64 is made in
    /// secure memory as the reply is sent), as Keychain.CopyMatching's `data`.
    func wire(showSecrets: Bool, secrets: CallSecrets?) -> JSONObject {
        func shown(_ f: SyncField, _ v: SyncValue??) -> JSON {
            guard f == .secret else { return JSON(optional: Self.shown(f, v ?? nil)) }
            guard showSecrets, case .secret(let s)?? = v else { return .null }
            return secrets?.replyPlaceholder(for: s)
                ?? .string(s.withUnsafeBytes { Data($0).base64EncodedString() })
        }
        let fields: [JSON] = values.keys.sorted().map { f in
            [
                "field": .string(f.name), "value": shown(f, values[f]),
                "current": shown(f, current[f]),
            ]
        }
        return [
            "id": .string(id), "class": .string(key.itemClass.rawValue),
            "accessGroup": .string(key.accessGroup),
            "attributes": .object(JSONObject(identity.mapValues { JSON.string($0) })),
            "deviceID": .string(timestamp.device.description),
            "written": .string(SyncStatus.millisecondText(written)),
            "winner": .string(winner.description), "fields": .array(fields),
        ]
    }
}
