internal import CSQLite
import Foundation
import Synchronization
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// The WAL file's own descriptor, for `Database.syncWAL()`: fdatasync flushes the file's
/// pages whichever descriptor asks. Opened at the first sync and kept: SQLite deletes or
/// replaces the WAL only when the last connection to the database closes, and `Database`
/// closes this descriptor with its connections. Nothing stats the file per sync: on a kernel
/// with multigrain timestamps, a stat makes the next write take a fine-grained mtime, which
/// dirties the inode, and ext4 then writes the inode synchronously in every fdatasync.
final class WALSync: Sendable {
    private let path: String
    private struct State {
        var fd: Int32 = -1
        var closed = false
        /// Syncs running through `fd`: `close()` waits for them, so the number is not reused
        /// under them.
        var syncing = 0
    }
    private let state = Monitor(State())

    init(path: String) { self.path = path }

    func sync() throws {
        let fd: Int32 = try state.withLock { state in
            guard !state.closed else {
                throw VaultFailure(.internalError, "the store is closed")
            }
            if state.fd < 0 {
                do {
                    state.fd = try SystemCall.open(path, O_RDONLY | O_CLOEXEC)
                } catch let e as Errno {
                    throw VaultFailure(
                        .internalError,
                        "cannot open the write-ahead log to sync it: \(String(cString: strerror(e.code)))"
                    )
                }
            }
            state.syncing += 1
            return state.fd
        }
        defer {
            state.withLock { $0.syncing -= 1 }
            state.broadcast()
        }
        let probe = Self.probe.withLock { $0 }
        let token = probe?.willSync(path)
        do {
            try SystemCall.fdatasync(fd)
        } catch {
            let reason = String(cString: strerror(error.code))
            throw VaultFailure(
                .storageFull, "cannot make the write durable on the vault's disk (\(reason))")
        }
        if let probe, !probe.didSync(path, token) {
            throw VaultFailure(
                .storageFull, "cannot make the write durable on the vault's disk (power cut)")
        }
    }

    /// A power-cut test's view of this fdatasync, which SQLite's VFS does not see: told
    /// before it starts (`willSync`, whose token `didSync` gets) and after it succeeded
    /// (`didSync`: false makes the sync fail, as on a machine that lost power meanwhile).
    struct Probe: Sendable {
        var willSync: @Sendable (_ path: String) -> UInt64?
        var didSync: @Sendable (_ path: String, _ token: UInt64?) -> Bool
    }

    /// The probe every sync reports to (nil outside power-cut tests).
    static let probe = Mutex<Probe?>(nil)

    func close() {
        // Closed first, so no sync starts while this waits for those in flight.
        state.withLock { $0.closed = true }
        state.withLock(when: { $0.syncing == 0 }) { state in
            if state.fd >= 0 { SystemCall.close(state.fd) }
            state.fd = -1
        }
    }
}
