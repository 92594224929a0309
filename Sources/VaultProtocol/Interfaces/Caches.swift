extension VarlinkInterfaces {
    static let caches = """
        # Per-app cache directories that vaultd may purge when disk space runs low (docs/caches.md).
        interface io.vaultd.Caches

        # One app's cache usage. (Not named Usage: a type and a method may not share a name,
        # and varlink clients such as python's keep both in one namespace.)
        type AppUsage (
          appID: string,
          # Bytes allocated on disk.
          bytes: int,
          files: int
        )

        # The caller's cache directory (apps), or appID's (the owner); created 0700.
        # The owner naming an app that is not installed gets io.vaultd.Apps.AppNotFound.
        method Directory(appID: ?string) -> (path: string)

        # Usage per app, and the cache volume's free and total bytes.
        method Usage() -> (apps: []AppUsage, totalBytes: int, freeBytes: int, capacityBytes: int)

        # Purges one app's cache (or every app's), entirely or until `bytes` are freed.
        # Apps with no open connection go first, then least recently used files. Owner only.
        method Purge(appID: ?string, bytes: ?int) -> (freedBytes: int, removedFiles: int)

        # Streams purge events (call with more): apps see their own, the owner every app's.
        method Observe() -> (appID: string, freedBytes: int)

        """
}
