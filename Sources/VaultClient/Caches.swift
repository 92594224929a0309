import Foundation
import VaultProtocol

/// Files vaultd purged from a cache.
public struct PurgeEvent: Sendable, Equatable {
    /// The app whose cache was purged (reverse-DNS app ID).
    public var appID: String
    /// Bytes allocated on disk by the files removed (st_blocks × 512, as `du`).
    public var freedBytes: Int64
}

/// One app's cache usage.
public struct CacheUsage: Sendable, Equatable {
    /// The app (reverse-DNS app ID); its directory is `$XDG_CACHE_HOME/vaultd/APP_ID`.
    public var appID: String
    /// Bytes allocated on disk (st_blocks × 512, as `du`).
    public var bytes: Int64
    /// Entries other than directories (regular files, symlinks, FIFOs, sockets).
    public var files: Int
}

extension Vault {
    /// The app's cache directory, `<cache root>/<app-id>/` (created 0700 by vaultd; the root
    /// is `$XDG_CACHE_HOME/vaultd` unless vaultd was given another), as
    /// `FileManager.urls(for: .cachesDirectory, …)`. vaultd may delete files in it when disk
    /// space runs low; never store what cannot be recreated there. Owner: pass `appID` (nil:
    /// InvalidParameter `appID`; not installed: AppNotFound; not reverse-DNS: InvalidAppID).
    /// An app naming another app: MissingEntitlement.
    public func cachesDirectory(appID: String? = nil) throws -> URL {
        let r = try connection.call(.cachesDirectory, ["appID": appID.map { .string($0) } ?? .null])
        guard let path = r["path"]?.stringValue else {
            throw VaultError.protocolViolation("Directory returned no path")
        }
        return URL(fileURLWithPath: path, isDirectory: true)
    }

    /// Cache usage per app (apps see only their own; bytes allocated on disk), and the
    /// cache volume's bytes available to vaultd and total bytes (`statvfs`; 0 when unknown).
    public func cacheUsage() throws -> (apps: [CacheUsage], freeBytes: Int64, capacityBytes: Int64)
    {
        let r = try connection.call(.cachesUsage)
        let apps = (r["apps"]?.arrayValue ?? []).map {
            CacheUsage(
                appID: $0["appID"]?.stringValue ?? "", bytes: $0["bytes"]?.int64Value ?? 0,
                files: $0["files"]?.intValue ?? 0)
        }
        return (apps, r["freeBytes"]?.int64Value ?? 0, r["capacityBytes"]?.int64Value ?? 0)
    }

    /// Purges one app's cache (nil: all apps), entirely or until at least `bytes` bytes are
    /// freed: apps without an open connection first, least recently used files first.
    /// Removes files (never the app directories, never through a symlink). Returns bytes
    /// freed (allocated on disk) and files removed. Owner only: PermissionDenied for apps;
    /// InvalidAppID, InvalidParameter `bytes` (negative). A large purge can take minutes: it
    /// waits `VaultConnection.fileRemovalTimeout` (15 min by default) for its reply.
    @discardableResult
    public func purgeCaches(appID: String? = nil, bytes: Int64? = nil) throws -> (
        freedBytes: Int64, removedFiles: Int
    ) {
        let r = try connection.call(
            .cachesPurge,
            [
                "appID": appID.map { .string($0) } ?? .null,
                "bytes": bytes.map { JSON($0) } ?? .null,
            ],
            removingFiles: true)
        return (r["freedBytes"]?.int64Value ?? 0, r["removedFiles"]?.intValue ?? 0)
    }

    /// Purge events (`io.vaultd.Caches.Observe`), on a connection of its own, one per app
    /// per purge: an app sees its own, the owner every app's. Ends, without reconnecting, when
    /// vaultd stops (ConnectionFailed).
    public func purgeEvents() -> AsyncThrowingStream<PurgeEvent, Error> {
        VaultConnection.observe(
            socketPath: connection.socketPath, method: .cachesObserve, parameters: [:]
        ) {
            guard let app = $0["appID"]?.stringValue else { return nil }
            return PurgeEvent(appID: app, freedBytes: $0["freedBytes"]?.int64Value ?? 0)
        }
    }
}
