internal import CSQLite
import Foundation

/// Checkpoints the WAL on a thread and SQLite connection of its own, so no writer pays for
/// it. SQLite's automatic checkpoint runs inside the COMMIT that crosses 1000 WAL pages:
/// copying those pages into the database and syncing it took a few milliseconds, under the
/// engine lock, every few group commits (issue #8's profile of durable adds). Here a PASSIVE
/// checkpoint starts beside the writer at those same 1000 pages; should it fall behind (or
/// fail, as on a full disk), the writer checkpoints itself from 4000 on, as SQLite's own
/// would at 1000, but finds most pages already copied. (A background start at 250 pages, tried
/// first, copied the same hot index pages four times as often: a single writer's adds
/// spent a fifth more CPU and were a tenth slower.)
final class Checkpointer: @unchecked Sendable {
    /// A background checkpoint starts once the WAL holds this many frames.
    static let thresholdFrames: Int32 = 1000
    /// From this many frames on the committing writer checkpoints itself.
    static let writerFallbackFrames: Int32 = 4 * thresholdFrames

    private let path: String
    private let condition = NSCondition()
    private var pendingFrames: Int32 = 0
    private var stopping = false
    private var running = false
    private var handle: OpaquePointer?

    init(path: String) {
        self.path = path
    }

    /// Opens the checkpointer's connection and starts its thread. Without a connection there
    /// is nothing to start: the writer's fallback still bounds the WAL.
    func start() {
        var h: OpaquePointer?
        guard sqlite3_open_v2(path, &h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nil) == SQLITE_OK else {
            sqlite3_close_v2(h)
            return
        }
        sqlite3_busy_timeout(h, 5000)
        sqlite3_exec(h, "PRAGMA synchronous=FULL", nil, nil, nil)
        handle = h
        running = true
        let t = Thread { [self] in loop() }
        t.name = "vaultd-checkpoint"
        t.stackSize = 256 << 10
        t.start()
    }

    /// Called after each commit with the WAL's frame count.
    func committed(frames: Int32) {
        guard frames >= Self.thresholdFrames else { return }
        condition.withLock {
            pendingFrames = frames
            condition.signal()
        }
    }

    private func loop() {
        while true {
            condition.lock()
            while pendingFrames == 0 && !stopping { condition.wait() }
            if stopping {
                running = false
                condition.broadcast()
                condition.unlock()
                return
            }
            pendingFrames = 0
            condition.unlock()
            _ = sqlite3_wal_checkpoint_v2(handle, nil, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
        }
    }

    /// Stops the thread (after a checkpoint in progress) and closes its connection.
    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        while running { condition.wait() }
        condition.unlock()
        if let h = handle { sqlite3_close_v2(h) }
        handle = nil
    }
}

/// sqlite3_wal_hook's callback: hands the frame count to the checkpointer, or checkpoints on
/// the writer's own connection when the WAL has grown past the fallback.
let checkpointerWALHook: @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?, UnsafePointer<CChar>?, Int32) -> Int32 = {
    context, db, name, frames in
    if frames >= Checkpointer.writerFallbackFrames {
        _ = sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
    } else if let context {
        Unmanaged<Checkpointer>.fromOpaque(context).takeUnretainedValue().committed(frames: frames)
    }
    return SQLITE_OK
}
