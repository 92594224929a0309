import Foundation
import VaultClient
import VaultProtocol

extension SyncCommand {
    /// `sync conflicts [--json] [--secrets]`: the values that lost to a concurrent edit;
    /// `sync conflicts restore|dismiss ID`: settles one (docs/sync.md).
    func runConflicts(_ c: VaultConnection) throws {
        if let settle {
            let r = try c.call(
                settle == "restore" ? .syncRestoreConflict : .syncDismissConflict,
                ["id": .string(argument!)])
            if json {
                print(JSON.object(r).text)
                return
            }
            print(
                settle == "restore"
                    ? "restored conflict \(argument!): its values are the current ones, on every device once synced"
                    : "dismissed conflict \(argument!): the current values stay, on every device once synced"
            )
            return
        }
        let r = try c.call(.syncConflicts, secrets ? ["secrets": .bool(true)] : [:])
        if json {
            print(JSON.object(r).text)
            return
        }
        let list = r["conflicts"]?.arrayValue ?? []
        let omitted = r["omitted"]?.intValue ?? 0
        guard !list.isEmpty || omitted > 0 else {
            print("no conflicts")
            return
        }
        for x in list { print(Self.describeConflict(x, secrets: secrets)) }
        if omitted > 0 {
            print(
                "\(omitted) older conflict(s) not shown: their values do not fit in one reply (settle newer ones to list them)"
            )
        }
    }

    /// A conflict as lines of text: its ID, the item, who wrote the losing values and when,
    /// then each field's losing and current value.
    static func describeConflict(_ x: JSON, secrets: Bool) -> String {
        let attributes = (x["attributes"]?.objectValue ?? [:]).sorted { $0.key < $1.key }.map {
            "\($0.key)=\($0.value.stringValue ?? "")"
        }.joined(separator: " ")
        var lines = [
            "\(x["id"]?.stringValue ?? "?")  \(x["class"]?.stringValue ?? "?") \(attributes) (group \(x["accessGroup"]?.stringValue ?? "?"))",
            "  written by device \(x["deviceID"]?.stringValue ?? "?") at \(x["written"]?.stringValue ?? "?"); current values from device \(x["winner"]?.stringValue ?? "?")",
        ]
        for f in x["fields"]?.arrayValue ?? [] {
            let name = f["field"]?.stringValue ?? "?"
            func shown(_ key: String) -> String {
                if name == "secret" && !secrets { return "(hidden; --secrets shows it)" }
                guard let v = f[key]?.stringValue else { return "(none)" }
                // The secret comes in base64: shown as text when it is UTF-8.
                if name == "secret", let d = Data(base64Encoded: v),
                    let text = String(data: d, encoding: .utf8)
                {
                    return "'\(text)'"
                }
                return "'\(v)'"
            }
            lines.append("  \(name): \(shown("value")) (current: \(shown("current")))")
        }
        return lines.joined(separator: "\n")
    }
}
