import Foundation
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// When vaultd purges caches (docs/caches.md). Sizes in bytes.
public struct CachePolicy: Sendable, Equatable {
    /// Purge when free space on the cache volume falls below this.
    public var freeLowWater: Int64?
    /// …and then until free space is at least this.
    public var freeHighWater: Int64?
    /// Purge when all caches together exceed this (nil: no budget).
    public var budget: Int64?
    /// …and then until they take at most this.
    public var budgetHighWater: Int64?

    public init(
        freeLowWater: Int64? = nil, freeHighWater: Int64? = nil, budget: Int64? = nil,
        budgetHighWater: Int64? = nil
    ) {
        self.freeLowWater = freeLowWater
        self.freeHighWater = freeHighWater
        self.budget = budget
        self.budgetHighWater = budgetHighWater
    }

    /// Free inodes count as free space too (a cache of many small files can use up a
    /// volume's inodes first, and then nothing can be written however many bytes are free):
    /// vaultd purges when fewer than `inodeLowWaterPercent` % of the volume's inodes are free,
    /// until `inodeHighWaterPercent` % are (not on a filesystem without an inode count).
    public static let inodeLowWaterPercent: UInt64 = 5
    public static let inodeHighWaterPercent: UInt64 = 10

    /// The marks in force for a volume of `capacity` bytes: defaults are 5 % free (low) and
    /// 10 % free (high) of the volume, and 80 % of the budget. A high mark left to its default
    /// is at least 5 % of the volume above a low mark set higher (were they equal, each purge
    /// would stop just where the next begins, one file at a time).
    func resolved(capacity: Int64) -> (low: Int64, high: Int64, budget: Int64?, budgetHigh: Int64?)
    {
        let low = freeLowWater ?? capacity / 20
        let high =
            freeHighWater.map { max($0, low) }
            ?? min(max(capacity / 10, low + capacity / 20), capacity)
        let budgetHigh = budget.map { b in min(budgetHighWater ?? b * 4 / 5, b) }
        return (low, high, budget, budgetHigh)
    }
}

/// One app's cache usage.
public struct CacheUsage: Sendable, Equatable {
    public var appID: String
    /// Bytes allocated on disk.
    public var bytes: Int64
    public var files: Int
}

/// What one purge removed.
public struct PurgeReport: Sendable, Equatable {
    public var freedBytes: Int64 = 0
    public var removedFiles = 0
    /// Inodes freed: removed entries that were their file's last name.
    var freedInodes: UInt64 = 0
    /// Apps whose caches lost files, with the bytes freed in each.
    public var apps: [String: Int64] = [:]

    /// Counts one removed file of `bytes` from `app`'s cache; `lastName`: its inode is freed.
    mutating func add(_ bytes: Int64, of app: String, lastName: Bool) {
        freedBytes += bytes
        removedFiles += 1
        if lastName { freedInodes += 1 }
        apps[app, default: 0] += bytes
    }
}

/// Per-app cache directories under one root, and the purge that empties them safely: no
/// symlink is ever followed, nothing outside the root is touched, the app directories
/// themselves stay so apps can write again at once.
///
/// `root` never changes, and a purge or a walk runs under `lock`.
public final class CacheStore: Sendable {
    public let root: String
    /// Told of what a walk skipped.
    let logger: Logger
    private let lock = NSLock()

    public init(root: String, logger: Logger) {
        self.root = root
        self.logger = logger
    }

    /// The cache directory of `appID`, created 0700 (with the root) when absent.
    /// Throws InternalError when it cannot be created or is not a plain directory.
    public func directory(for appID: String) throws -> String {
        try AppRecord.validate(appID: appID)
        try makeRoot()
        let path = root + "/" + appID
        do {
            try SystemCall.mkdir(path, 0o700)
        } catch  where error.code != Errno.exists {
            throw VaultFailure(
                .internalError,
                "cannot create the cache directory of \(appID): \(String(cString: strerror(error.code)))"
            )
        } catch {}
        // Created 0700 and owned by the user, also when it was there already: a
        // directory someone else owns is refused, a wider mode is narrowed. Through an
        // O_NOFOLLOW fd, so a symlink put there is refused, never followed.
        let raw: Int32
        do {
            raw = try SystemCall.open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        } catch {
            throw VaultFailure(
                .internalError,
                "the cache path of \(appID) is not a directory (\(String(cString: strerror(error.code))))"
            )
        }
        let fd = FileDescriptor(adopting: raw)
        guard let st = try? fd.status(), st.st_uid == getuid() else {
            throw VaultFailure(
                .internalError, "the cache directory of \(appID) is not owned by this user")
        }
        if st.st_mode & 0o7777 != 0o700 {
            do {
                try fd.setMode(0o700)
            } catch {
                throw VaultFailure(
                    .internalError,
                    "cannot make the cache directory of \(appID) mode 0700: \(String(cString: strerror(error.code)))"
                )
            }
        }
        return path
    }

    /// What a cache directory tag holds (https://bford.info/cachedir/): backup tools
    /// (`tar --exclude-caches`, borg, restic, …) leave out the directory that has one.
    static let cacheDirectoryTag = """
        Signature: 8a477f597d28d172789f06886806bc55
        # This file is a cache directory tag created by vaultd.
        # For information about cache directory tags, see:
        #\thttps://bford.info/cachedir/

        """

    /// Makes the root (0700) and its `CACHEDIR.TAG`, so that caches are never part of a
    /// backup wherever the root is (`--cache-dir`), not only where backup tools leave out
    /// `~/.cache` by name. With each `Directory` (a root without a tag gets it then); a tag
    /// that cannot be written (a full disk) is written at the next.
    func makeRoot() throws {
        try FileSystem.makeDirectory(root, mode: 0o700)
        guard
            let fd = try? FileDescriptor(
                opening: root + "/CACHEDIR.TAG",
                O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode: 0o600)
        else { return }
        if (try? fd.writeAll(Data(Self.cacheDirectoryTag.utf8))) == nil {
            try? SystemCall.unlink(root + "/CACHEDIR.TAG")
        }
    }

    /// Removes an app's whole cache directory (at uninstall), however deep, if `still()`,
    /// which is asked under the cache lock (so after any removal that was under way), says so.
    func removeDirectory(of appID: String, if still: () -> Bool = { true }) {
        guard (try? AppRecord.validate(appID: appID)) != nil else { return }
        lock.withLock {
            guard still() else { return }
            SafeRemoval.removeTree(root + "/" + appID, label: appID, logger: logger)
        }
    }

    /// A file in a cache, for the purge's ordering.
    struct CachedFile {
        var appID: String
        /// Which entry it is: its directory's st_ino, its raw NUL-terminated name, its own st_ino.
        var key: EntryKey
        /// Bytes allocated on disk; 0 for a further name of a file met before (as `du`).
        var bytes: Int64
        /// The later of access and modification time (seconds).
        var lastUsed: Double
        /// Its file has no other name (st_nlink 1): removing it frees its inode.
        var onlyName: Bool
    }

    /// The app directories under the root: directories named as app IDs (not a file such as
    /// `CACHEDIR.TAG`, whose name is also one, nor a symlink, which no walk follows).
    private func appDirectories() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []).filter { name in
            guard (try? AppRecord.validate(appID: name)) != nil,
                let st = try? SystemCall.lstat(root + "/" + name)
            else { return false }
            return st.st_mode & S_IFMT == S_IFDIR
        }.sorted()
    }

    /// Every non-directory entry in every app's cache, or in app `only`'s (symlinks, FIFOs and
    /// sockets included, as entries to remove; their targets are never followed), on the
    /// cache's own filesystem, at any depth (`TreeWalk`). A file with several names (hard
    /// links) counts its bytes at the first name met only, as `du` does. `grantAccess`: give
    /// the owner access to directories the app made unreadable or unwritable, on the way.
    func files(of only: String? = nil, grantAccess: Bool = false) -> [CachedFile] {
        var out: [CachedFile] = []
        var counted: Set<ino_t> = []
        for app in appDirectories() where only == nil || app == only {
            let fd = TreeWalk.openDirectory(root + "/" + app, grantAccess: grantAccess)
            guard fd >= 0 else { continue }
            TreeWalk.walk(fd, label: app, logger: logger, grantAccess: grantAccess) {
                _, name, st, directory in
                let used = max(
                    Double(st.st_atim.tv_sec) + Double(st.st_atim.tv_nsec) / 1e9,
                    Double(st.st_mtim.tv_sec) + Double(st.st_mtim.tv_nsec) / 1e9)
                let key = EntryKey(directory: directory, name: name, inode: st.st_ino)
                let first = st.st_nlink < 2 || counted.insert(st.st_ino).inserted
                out.append(
                    CachedFile(
                        appID: app, key: key, bytes: first ? Int64(st.st_blocks) * 512 : 0,
                        lastUsed: used, onlyName: st.st_nlink < 2))
            }
        }
        return out
    }

    /// Bytes and files per app (apps with an empty cache included).
    public func usage() -> [CacheUsage] {
        var byApp: [String: CacheUsage] = [:]
        for app in appDirectories() { byApp[app] = CacheUsage(appID: app, bytes: 0, files: 0) }
        for f in files() {
            byApp[f.appID, default: CacheUsage(appID: f.appID, bytes: 0, files: 0)].bytes += f.bytes
            byApp[f.appID]!.files += 1
        }
        return byApp.values.sorted { $0.appID < $1.appID }
    }

    /// Free and total bytes of the cache volume (`statvfs`; free as available to us).
    public func volumeSpace() -> (free: Int64, capacity: Int64)? {
        try? FileSystem.makeDirectory(root, mode: 0o700)
        guard let s = try? SystemCall.statvfs(root) else { return nil }
        return (Int64(s.f_bavail) * Int64(s.f_frsize), Int64(s.f_blocks) * Int64(s.f_frsize))
    }

    /// Free and total inodes of the cache volume (free as available to us); nil when it
    /// cannot be asked or the filesystem has no inode count (f_files 0, as btrfs).
    func volumeInodes() -> (free: UInt64, total: UInt64)? {
        guard let s = try? SystemCall.statvfs(root), s.f_files > 0 else { return nil }
        return (UInt64(s.f_favail), UInt64(s.f_files))
    }

    /// An entry in a cache as one walk saw it, to find it again in the next: the st_ino of its
    /// directory, its raw NUL-terminated name, and its own st_ino (so that a file put in its
    /// place since is not taken for it).
    struct EntryKey: Hashable {
        var directory: ino_t
        var name: [CChar]
        var inode: ino_t
    }

    /// Removes the files in `chosen` that are still there, with one walk (`TreeWalk`) of each
    /// of their apps' directories, whatever their depth; adds what it removed to `report`, each
    /// file with the bytes its removal freed: all it has on disk then if this was its last
    /// name, else none.
    private func remove(_ chosen: [CachedFile], into report: inout PurgeReport) {
        for (app, files) in Dictionary(grouping: chosen, by: \.appID).sorted(by: { $0.key < $1.key }
        ) {
            var wanted: Set<EntryKey> = []
            for f in files { wanted.insert(f.key) }
            let fd = TreeWalk.openDirectory(root + "/" + app, grantAccess: true)
            guard fd >= 0 else { continue }
            TreeWalk.walk(fd, label: app, logger: logger, grantAccess: true) {
                directoryFD, name, st, directory in
                let key = EntryKey(directory: directory, name: name, inode: st.st_ino)
                guard wanted.contains(key), TreeWalk.unlink(directoryFD, name) else { return }
                wanted.remove(key)
                report.add(
                    st.st_nlink == 1 ? Int64(st.st_blocks) * 512 : 0, of: app,
                    lastName: st.st_nlink == 1)
            }
        }
    }

    /// Removes files in purge order until `enough` says so: files of apps not in `running`
    /// first, then the rest; least recently used first within each. `only` limits the purge
    /// to one app. A file some process holds open or has mapped (`OpenFiles`) stays: removing
    /// it would free nothing while it is open (yet count as freed), and the app writing or
    /// reading it would lose it. In rounds: the next files in that order, as many as would be enough were
    /// they all removed, go with one walk per app (removing each file from the top of its
    /// app's directory would cost a walk down per file: depth² for a deep chain of files). Another
    /// round follows only when some of them had gone already (the app removed or replaced them).
    func purge(only: String? = nil, running: Set<String>, until enough: (PurgeReport) -> Bool)
        -> PurgeReport
    {
        lock.withLock {
            var report = PurgeReport()
            // Into directories the app made unreadable too, and out of unwritable ones: as
            // the app's owner vaultd may, and a cache it cannot purge is no cache (running as
            // the user, not root, such files stayed for good, yet counted in its usage).
            // Only the app purged: another app's modes are left as that app set them.
            var all = files(of: only, grantAccess: true)
            if !all.isEmpty, let st = try? SystemCall.stat(root) {
                let inUse = OpenFiles.inodes(on: st.st_dev)
                all.removeAll { inUse.contains($0.key.inode) }
            }
            var candidates = all.sorted { a, b in
                let ra = running.contains(a.appID)
                let rb = running.contains(b.appID)
                if ra != rb { return !ra }
                return a.lastUsed < b.lastUsed
            }[...]
            while !enough(report), !candidates.isEmpty {
                var planned = report
                var chosen: [CachedFile] = []
                while let f = candidates.first, !enough(planned) {
                    chosen.append(f)
                    planned.add(f.bytes, of: f.appID, lastName: f.onlyName)
                    candidates.removeFirst()
                }
                remove(chosen, into: &report)
            }
            return report
        }
    }

    /// Purges when a mark is crossed (free space below low-water, free inodes below
    /// `CachePolicy.inodeLowWaterPercent`, or usage above the budget), until the matching
    /// high-water mark; otherwise does nothing, so a purge never thrashes. Returns nil when
    /// no purge was needed.
    public func enforce(_ policy: CachePolicy, running: Set<String>) -> PurgeReport? {
        guard let space = volumeSpace() else { return nil }
        let marks = policy.resolved(capacity: space.capacity)
        // The total is a walk of every cache: only when there is a budget to compare it with.
        let total = marks.budget == nil ? 0 : usage().reduce(0) { $0 + $1.bytes }
        let lowSpace = space.free < marks.low
        let overBudget = marks.budget.map { total > $0 } ?? false
        let inodes = volumeInodes()
        let lowInodes =
            inodes.map { $0.free < $0.total * CachePolicy.inodeLowWaterPercent / 100 } ?? false
        guard lowSpace || overBudget || lowInodes else { return nil }
        return purge(running: running) { r in
            let spaceOK = !lowSpace || space.free + r.freedBytes >= marks.high
            let inodesOK =
                !lowInodes
                || inodes.map {
                    $0.free + r.freedInodes >= $0.total * CachePolicy.inodeHighWaterPercent / 100
                } ?? true
            let budgetOK = !overBudget || total - r.freedBytes <= marks.budgetHigh!
            return spaceOK && inodesOK && budgetOK
        }
    }
}
