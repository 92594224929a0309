import Foundation
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

extension Vault {
    /// The cache directory of the calling app (or, for the owner, of `appID`), created 0700.
    /// Throws InvalidParameter when the owner names no app, InvalidAppID, AppNotFound when
    /// the owner names an app that is not installed (an uninstall removed its directory; a
    /// query must not make it again), MissingEntitlement when an app names another app.
    func cacheDirectory(for appID: String?, caller: Caller) throws -> String {
        let target = try authorize(.cacheDirectory(appID: appID), for: caller).appID!
        if caller.isOwner {
            try AppRecord.validate(appID: target)
            guard try isInstalled(target) else {
                throw VaultFailure(.appNotFound, "no installed app \(target)")
            }
        }
        let path = try caches.directory(for: target)
        // An uninstall between the check and the mkdir removed the directory before it was
        // made again: it goes (whoever asked).
        guard try isInstalled(target) else {
            caches.removeDirectory(of: target) { (try? self.isInstalled(target)) != true }
            if caller.appID != nil { try admit(caller) }  // MissingEntitlement: the install is over
            throw VaultFailure(.appNotFound, "no installed app \(target)")
        }
        return path
    }

    /// Purges one app's cache (or all), entirely or until `bytes` are freed; apps in
    /// `running` go last; a file a process holds open or has mapped stays. `bytes` counts
    /// bytes allocated on disk. Owner only (else PermissionDenied); InvalidAppID for a
    /// malformed `appID`, AppNotFound for one neither installed nor with a cache. Observers get a `cachePurge` event per app.
    func purgeCaches(appID: String?, bytes: Int64?, running: Set<String>, caller: Caller)
        throws -> PurgeReport
    {
        _ = try authorize(.purgeCaches, for: caller)
        if let appID {
            try AppRecord.validate(appID: appID)
            // As `Directory`: an app that is not installed is AppNotFound (a mistyped app ID
            // must not "free 0 bytes", exit 0). A cache directory left there without an
            // install can still be purged.
            if try !isInstalled(appID), (try? SystemCall.lstat(caches.root + "/" + appID)) == nil {
                throw VaultFailure(.appNotFound, "no installed app \(appID)")
            }
        }
        let report = caches.purge(only: appID, running: running) { r in
            bytes.map { r.freedBytes >= $0 } ?? false
        }
        announce(report)
        return report
    }

    /// The cache usage of every app the caller sees (an app: its own; `Policy.seesCache`).
    func cacheUsage(caller: Caller) throws -> [CacheUsage] {
        let grant = try authorize(.cacheUsage, for: caller)
        return caches.usage().filter { Policy.seesCache(of: $0.appID, grant.caller) }
    }

    /// Applies the purge policy (free-space marks and budget); returns what it purged, if anything.
    @discardableResult
    public func enforceCachePolicy(_ policy: CachePolicy, running: Set<String>) -> PurgeReport? {
        guard let report = caches.enforce(policy, running: running) else { return nil }
        if report.removedFiles > 0 {
            logger.info(
                "cache purge: freed \(report.freedBytes) bytes in \(report.removedFiles) file(s) of \(report.apps.count) app(s)"
            )
        }
        announce(report)
        return report
    }

    private func announce(_ report: PurgeReport) {
        for (app, freed) in report.apps.sorted(by: { $0.key < $1.key }) {
            emit(.cachePurge(appID: app, freedBytes: freed))
        }
    }
}
