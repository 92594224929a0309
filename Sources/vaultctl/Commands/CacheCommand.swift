import Foundation
import VaultClient
import VaultProtocol

/// `vaultctl cache path APP_ID | usage [--json] | purge [APP_ID] [--bytes N]`
struct CacheCommand: Command {
    enum Action: String, CaseIterable { case path, usage, purge }
    var action: Action
    var appID: String?
    var bytes: Int64?
    var json = false
    /// `cache purge --dry-run`: say what the purge would remove, remove nothing.
    var dryRun = false

    init(_ a: inout Arguments) throws {
        action = try a.verb(of: "cache")
        json = a.flag("--json")
        dryRun = a.flag("--dry-run")
        if let b = try a.option("--bytes") {
            guard let n = Int64(b), n >= 0 else {
                throw UsageError(message: "--bytes needs a non-negative integer")
            }
            bytes = n
        }
        appID = a.positional()
        if action == .path && appID == nil {
            throw UsageError(message: "cache path needs an APP_ID")
        }
        if action == .usage && (appID != nil || bytes != nil) {
            throw UsageError(message: "cache usage takes only --json")
        }
        // As for usage: an option the action has no use for is an error, not ignored
        // (`cache path APP --bytes 5` printed the path; `cache purge --json` printed text).
        if action == .path && (json || bytes != nil) {
            throw UsageError(message: "cache path takes only an APP_ID")
        }
        if action == .purge && json {
            throw UsageError(message: "cache purge takes only [APP_ID] [--bytes N] [--dry-run]")
        }
        if action != .purge && dryRun { throw UsageError(message: "--dry-run is cache purge's") }
    }

    func run(_ context: Context) throws {
        let vault = try action == .purge ? context.vaultForRemovingFiles() : context.vault()
        switch action {
        case .path:
            print(try vault.cachesDirectory(appID: appID).path)
        case .usage:
            let u = try vault.cacheUsage()
            if json {
                let j: JSON = [
                    "apps": .array(
                        u.apps.map {
                            [
                                "appID": .string($0.appID), "bytes": JSON($0.bytes),
                                "files": JSON($0.files),
                            ]
                        }),
                    "totalBytes": JSON(u.apps.reduce(Int64(0)) { $0 + $1.bytes }),
                    "freeBytes": JSON(u.freeBytes),
                    "capacityBytes": JSON(u.capacityBytes),
                ]
                print(j.text)
            } else {
                for app in u.apps { print("\(app.appID)\t\(app.bytes) bytes\t\(app.files) files") }
                print("free on the cache volume: \(u.freeBytes) of \(u.capacityBytes) bytes")
            }
        case .purge where dryRun:
            // From the usage figures: a purge removes files, least recently used first, until
            // `bytes` are freed (all of them without --bytes), apps without a connection first.
            let all = try vault.cacheUsage().apps.filter { appID == nil || $0.appID == appID }
            for app in all where app.files > 0 {
                print("would purge \(app.appID): \(app.bytes) bytes in \(app.files) file(s)")
            }
            let total = all.reduce(Int64(0)) { $0 + $1.bytes }
            let files = all.reduce(0) { $0 + $1.files }
            if let bytes {
                print(
                    "dry run, nothing changed: a purge would remove the least recently used of these \(files) file(s) until \(min(bytes, total)) of their \(total) bytes are freed"
                )
            } else {
                print(
                    "dry run, nothing changed: a purge would remove \(files) file(s), \(total) bytes"
                )
            }
        case .purge:
            let r = try vault.purgeCaches(appID: appID, bytes: bytes)
            print("freed \(r.freedBytes) bytes in \(r.removedFiles) file(s)")
        }
    }
}
