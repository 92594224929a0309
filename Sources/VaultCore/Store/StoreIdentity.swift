import Foundation
import Synchronization
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Notices the store's files replaced or altered underneath vaultd while it runs: a copy of
/// an old `vault.sqlite` put over the live one (in place, or renamed over it), the file
/// truncated, the WAL moved or deleted. SQLite would go on through its open descriptors:
/// writing into an unlinked file (acknowledged, then lost at the next start), or reading
/// pages of the old copy under the WAL's newer ones (`database disk image is malformed`).
///
/// What it compares: the database file's device and inode (a rename over it), its size,
/// which never shrinks while vaultd runs (no VACUUM, no auto-vacuum), and its modification
/// time, which only vaultd's own checkpoints change (in WAL mode SQLite writes the
/// database file at checkpoints only): recorded after each of them (`checkpoint`). The WAL's
/// device and inode, at each checkpoint (not at each write: a stat of the WAL on every
/// commit makes ext4 write its inode in every fdatasync, as `WALSync` says).
///
/// Once it has seen a change, it stays failed (`failure`): every later write is refused
/// with StoreReplaced, no checkpoint runs, and the writer's connection puts the WAL aside
/// (`Database.storeReplaced`). Thread-safe: its record is read and written under `recorded`
/// (`checkpointLock` keeps one check around a checkpoint at a time).
final class StoreIdentity: Sendable {
    struct Fingerprint: Equatable {
        var device: UInt64
        var inode: UInt64
        var size: Int64
        var modified: timespec

        static func == (a: Fingerprint, b: Fingerprint) -> Bool {
            a.device == b.device && a.inode == b.inode && a.size == b.size
                && a.modified.tv_sec == b.modified.tv_sec
                && a.modified.tv_nsec == b.modified.tv_nsec
        }

        init?(_ path: String) {
            guard let st = try? SystemCall.stat(path) else { return nil }
            device = UInt64(st.st_dev)
            inode = UInt64(st.st_ino)
            size = Int64(st.st_size)
            modified = st.st_mtim
        }
    }

    let path: String
    /// Held around each checkpoint of vaultd's, with its check and the record after it.
    private let checkpointLock = NSLock()
    /// The files as last recorded, and what was seen once something was.
    private struct Record {
        var database: Fingerprint?
        var wal: Fingerprint?
        var failed: String?
    }
    private let recorded: Mutex<Record>

    /// Records the files as they are now: call it once the store is open and migrated.
    init(path: String) {
        self.path = path
        recorded = Mutex(Record(database: Fingerprint(path), wal: Fingerprint(path + "-wal")))
    }

    /// The database file's inode when the store was opened.
    var openedInode: UInt64? { recorded.withLock { $0.database?.inode } }

    /// What was seen, once something was: the log line's and the error's text.
    var failure: String? { recorded.withLock { $0.failed } }

    private func fail(_ what: String) -> String {
        recorded.withLock {
            if $0.failed == nil { $0.failed = what }
            return $0.failed!
        }
    }

    /// The change `now` shows against the record; nil when there is none. `full`: compare
    /// the modification time too (no checkpoint of vaultd's is running) and the WAL's identity.
    private func change(full: Bool) -> String? {
        let (was, walWas) = recorded.withLock { ($0.database, $0.wal) }
        guard let was else { return nil }
        guard let now = Fingerprint(path) else {
            return "\(path) is gone (deleted or renamed while vaultd ran)"
        }
        if now.device != was.device || now.inode != was.inode {
            return
                "\(path) was replaced: another file (inode \(now.inode)) is at its path, not the one vaultd opened (inode \(was.inode))"
        }
        if now.size < was.size {
            return "\(path) was truncated: it holds \(now.size) bytes, it held \(was.size)"
        }
        guard full else { return nil }
        if now.modified.tv_sec != was.modified.tv_sec
            || now.modified.tv_nsec != was.modified.tv_nsec
        {
            return
                "\(path) was written by another program (modified at \(now.modified.tv_sec).\(now.modified.tv_nsec), vaultd last wrote it at \(was.modified.tv_sec).\(was.modified.tv_nsec)), as when an old copy is put over it"
        }
        if let walWas {
            guard let walNow = Fingerprint(path + "-wal") else {
                return
                    "\(path)-wal, holding the latest writes, is gone (deleted or renamed while vaultd ran)"
            }
            if walNow.device != walWas.device || walNow.inode != walWas.inode {
                return "\(path)-wal was replaced by another file"
            }
        }
        return nil
    }

    /// Before a write transaction: throws StoreReplaced once a change was seen (now or
    /// before). The modification time is compared only while no checkpoint of vaultd's runs.
    func checkWrite() throws {
        if let f = failure { throw Self.error(f) }
        let full = checkpointLock.try()
        defer { if full { checkpointLock.unlock() } }
        if let what = change(full: full) { throw Self.error(fail(what)) }
    }

    /// Runs one checkpoint of vaultd's (`body`): checked first (nothing runs once a change
    /// was seen: copying the WAL into another file would corrupt it), then the files
    /// recorded as the checkpoint left them. Returns nil when it did not run.
    /// `waiting`: false for the writer's own checkpoint under the engine lock, which must not
    /// wait for a background round (nil then, as when SQLite finds its checkpoint lock taken).
    func checkpoint<T>(waiting: Bool = true, _ body: () throws -> T) rethrows -> T? {
        if waiting {
            checkpointLock.lock()
        } else if !checkpointLock.try() {
            return nil
        }
        defer { checkpointLock.unlock() }
        if failure != nil { return nil }
        if let what = change(full: true) {
            _ = fail(what)
            return nil
        }
        let result = try body()
        let (db, w) = (Fingerprint(path), Fingerprint(path + "-wal"))
        recorded.withLock {
            $0.database = db ?? $0.database
            $0.wal = w ?? $0.wal
        }
        return result
    }

    static func error(_ what: String) -> VaultFailure {
        VaultFailure(
            .storeReplaced,
            "\(what); vaultd serves no more writes to it (restart vaultd; see its log)")
    }
}
