internal import CSQLite
import Foundation
import Synchronization
import VaultProtocol

/// Checkpoints the WAL on a thread and SQLite connection of its own, so no writer pays for
/// copying pages. SQLite's automatic checkpoint runs inside the COMMIT that crosses 1000 WAL
/// pages: copying those pages into the database and syncing it took a few milliseconds,
/// under the engine lock, every few group commits.
///
/// A cycle:
/// 1. once the WAL holds `thresholdFrames` more frames than at the last background
///    checkpoint, a PASSIVE checkpoint copies them beside the writer;
/// 2. the WAL can only start over once a writer begins while every frame is copied, which a
///    busy writer never does: it commits again before the background checkpoint ends. So
///    the checkpointer copies again what was committed meanwhile until at most
///    `writerShare` frames are left; the writer's next commit checkpoints those few on its
///    own connection (a RESTART checkpoint, which briefly waits for readers still on the
///    cycle's frames: see `checkpointerWALHook`), and its next transaction restarts the WAL.
///    (Otherwise every commit past the threshold would set off another background
///    checkpoint and database fsync, several per durable add.)
/// 3. should the checkpointer fall behind (or fail, as on a full disk), the writer
///    checkpoints itself (RESTART) from `writerFallbackFrames` on, as SQLite's own would
///    (PASSIVE) at 1000.
///
/// Sendable: its counters, flags and connection are in `state`, a `Monitor` (`caughtUp` is
/// atomic); its own thread alone runs the checkpoints.
final class Checkpointer: Sendable {
    /// A background checkpoint starts once the WAL holds this many frames (4 MiB of 4 KiB
    /// pages, SQLite's own automatic checkpoint size). This is also about how much space a
    /// full disk needs freed before writes work again: the frames not yet copied must reach
    /// the database file before the WAL can start over. A larger threshold would need more
    /// freed than the 4 MiB the full-disk test frees; a smaller one costs more CPU per add
    /// (more checkpoints, each with a database sync).
    static let thresholdFrames: Int32 = 1000
    /// At most this many frames are left for the writer to copy when it ends a cycle (under
    /// the engine lock: more show as a pause in every writer's latency; the database sync
    /// that follows writes them back scattered over the file). Small, since a larger share
    /// lengthens durable adds' tail latency with many clients and gains no throughput.
    static let writerShare: Int32 = 16
    /// From this many frames on the committing writer checkpoints itself.
    static let writerFallbackFrames: Int32 = 2 * thresholdFrames

    private let path: String
    /// Set when a background checkpoint left at most `writerShare` frames uncopied: the
    /// writer finishes the cycle.
    private let caughtUp = Atomic<Bool>(false)
    /// The WAL's runs (its frames from one start to the next) that ended so far: how many,
    /// how many ended before `writerFallbackFrames` (the cycle at work), the longest.
    struct Runs: Equatable {
        var ended = 0
        var endedBeforeFallback = 0
        var longest: Int32 = 0
    }
    private struct State {
        var pendingFrames: Int32 = 0
        /// The WAL's frame count when the last background checkpoint was asked for.
        var triggeredAt: Int32 = 0
        /// The WAL's frame count after the latest commit.
        var latestFrames: Int32 = 0
        var runs = Runs()
        var stopping = false
        var running = false
        /// Set while a background round copies frames; `excluding` waits for it to end.
        var inRound = false
        /// Set while `excluding` runs its body: no round starts meanwhile.
        var excluded = false
        /// The checkpointer's own connection: opened by `start`, then used by its thread
        /// alone, and closed by `stop` once that thread ended.
        var handle: OpaquePointer?
    }
    private let state = Monitor(State())

    /// The writer's watch on the store's files: each checkpoint runs through it.
    let identity: StoreIdentity

    init(path: String, identity: StoreIdentity) {
        self.path = path
        self.identity = identity
    }

    /// Opens the checkpointer's connection and starts its thread. Without a connection there
    /// is nothing to start: the writer's fallback still bounds the WAL.
    func start() {
        var h: OpaquePointer?
        guard
            sqlite3_open_v2(path, &h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, Database.vfs)
                == SQLITE_OK
        else {
            sqlite3_close_v2(h)
            return
        }
        sqlite3_busy_handler(h, Database.busyHandler, nil)
        sqlite3_exec(h, "PRAGMA synchronous=FULL", nil, nil, nil)
        state.withLock {
            $0.handle = h
            $0.running = true
        }
        let t = Thread { [self] in loop() }
        t.name = "vaultd-checkpoint"
        t.stackSize = 256 << 10
        t.start()
    }

    /// Called after each commit with the WAL's frame count (also below the threshold: a
    /// drop in the count is how a restart is seen). `mayStartRound`: false when the
    /// committing writer checkpoints itself (the fallback): a background round woken then
    /// would take SQLite's checkpoint lock first, and the writer's checkpoint would fail
    /// until that round ended.
    func committed(frames: Int32, mayStartRound: Bool = true) {
        let startsRound = state.withLock { state in
            // A smaller count than last time: the WAL started over.
            if frames < state.latestFrames {
                state.runs.ended += 1
                if state.latestFrames < Self.writerFallbackFrames {
                    state.runs.endedBeforeFallback += 1
                }
                state.runs.longest = max(state.runs.longest, state.latestFrames)
            }
            state.latestFrames = frames
            if frames < state.triggeredAt { state.triggeredAt = 0 }
            guard mayStartRound, frames >= state.triggeredAt + Self.thresholdFrames else {
                return false
            }
            state.triggeredAt = frames
            state.pendingFrames = frames
            return true
        }
        if startsRound { state.broadcast() }
    }

    /// The WAL's runs so far (for tests and diagnostics).
    var endedRuns: Runs { state.withLock { $0.runs } }

    /// True once after a background checkpoint caught up: the writer's cue to checkpoint
    /// the frames committed since, so its next transaction restarts the WAL.
    func takeCaughtUp() -> Bool {
        caughtUp.load(ordering: .relaxed)
            && caughtUp.exchange(false, ordering: .acquiringAndReleasing)
    }

    /// Gives back a cue the writer could not act on.
    func caughtUpAgain() { caughtUp.store(true, ordering: .releasing) }

    private func loop() {
        let handle = state.withLock { $0.handle }
        while true {
            let stops = state.withLock(when: {
                ($0.pendingFrames > 0 && !$0.excluded) || $0.stopping
            }) { state in
                if state.stopping {
                    state.running = false
                    return true
                }
                state.pendingFrames = 0
                state.inRound = true
                return false
            }
            if stops {
                state.broadcast()
                return
            }
            copy(handle)
            state.withLock { $0.inRound = false }
            state.broadcast()
        }
    }

    /// One background checkpoint: rounds of PASSIVE checkpoints, each copying what the
    /// writers committed during the one before, a smaller set each time, until at most
    /// `writerShare` frames are left for the writer.
    private func copy(_ handle: OpaquePointer?) {
        for round in 0..<8 {
            // Past the fallback the writer checkpoints itself, and its RESTART fails while a
            // round here holds SQLite's checkpoint lock: no more chasing then (under load,
            // rounds chasing a writer would let the WAL grow past the fallback).
            if round > 0, state.withLock({ $0.latestFrames }) >= Self.writerFallbackFrames {
                break
            }
            var logFrames: Int32 = 0
            var copied: Int32 = 0
            // Never into a file that is not the store's any more (`StoreIdentity`).
            guard
                identity.checkpoint({
                    sqlite3_wal_checkpoint_v2(
                        handle, nil, SQLITE_CHECKPOINT_PASSIVE, &logFrames, &copied)
                }) == SQLITE_OK,
                logFrames > 0, copied == logFrames
            else { break }
            if state.withLock({ $0.latestFrames }) - copied <= Self.writerShare {
                caughtUp.store(true, ordering: .releasing)
                break
            }
        }
    }

    /// Runs `body` with no background round in progress and none starting until it returns:
    /// a checkpoint of the writer's own that must not find SQLite's checkpoint lock taken
    /// (a TRUNCATE checkpoint gets SQLITE_BUSY at once then, without waiting).
    func excluding<T>(_ body: () throws -> T) rethrows -> T {
        // Excluded first, so no round starts while this waits for the one in progress.
        state.withLock { $0.excluded = true }
        state.withLock(when: { !$0.inRound }) { _ in }
        defer {
            state.withLock { $0.excluded = false }
            state.broadcast()
        }
        return try body()
    }

    /// Stops the thread (after a checkpoint in progress) and closes its connection.
    func stop() {
        state.withLock { $0.stopping = true }
        state.broadcast()
        let handle = state.withLock(when: { !$0.running }) { state in
            defer { state.handle = nil }
            return state.handle
        }
        if let handle { sqlite3_close_v2(handle) }
    }
}

/// sqlite3_wal_hook's callback: hands the frame count to the checkpointer, or checkpoints on
/// the writer's own connection when the background checkpoint has caught up (to end the
/// cycle) or the WAL has grown past the fallback.
///
/// That checkpoint is a RESTART: it waits for the lookups still reading frames of the
/// cycle, so that the next transaction can start the WAL over. (A PASSIVE one stops short
/// of any such reader: under readers that never pause, the WAL would grow without end.)
/// The wait is short, as every writer waits with it (the engine
/// lock): 2 ms at the end of a cycle, 50 ms at the fallback. A lookup that outlasts it, or
/// one that begins before the next transaction, holds the restart up; then the next commit
/// tries again, and under lookups that never pause the WAL runs to about
/// `writerFallbackFrames`.
let checkpointerWALHook:
    @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?, UnsafePointer<CChar>?, Int32) -> Int32 =
        {
            context, db, name, frames in
            guard let context else { return SQLITE_OK }
            let checkpointer = Unmanaged<Checkpointer>.fromOpaque(context).takeUnretainedValue()
            let fallback = frames >= Checkpointer.writerFallbackFrames
            checkpointer.committed(frames: frames, mayStartRound: !fallback)
            let endOfCycle = checkpointer.takeCaughtUp()
            guard fallback || endOfCycle else { return SQLITE_OK }
            var deadline = MonotonicClock.nanoseconds() + (fallback ? 50_000_000 : 2_000_000)
            let rc = withUnsafeMutablePointer(to: &deadline) { d in
                sqlite3_busy_handler(db, restartBusyHandler, d)
                defer { sqlite3_busy_handler(db, Database.busyHandler, nil) }
                return checkpointer.identity.checkpoint(waiting: false) {
                    sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_RESTART, nil, nil)
                } ?? SQLITE_BUSY
            }
            // Busy (a background round is copying, or a reader outlasted the wait): the next commit
            // tries again.
            if rc != SQLITE_OK { checkpointer.caughtUpAgain() }
            return SQLITE_OK
        }

/// The writer's busy handler during that RESTART: yields the CPU until the deadline (a
/// CLOCK_MONOTONIC nanosecond count behind the pointer), then gives up.
private let restartBusyHandler: @convention(c) (UnsafeMutableRawPointer?, Int32) -> Int32 = {
    context, _ in
    guard let deadline = context?.load(as: UInt64.self), MonotonicClock.nanoseconds() < deadline
    else { return 0 }
    sched_yield()
    return 1
}
