import Foundation
import VaultProtocol

/// Emits preference and lock-state events in the order their changes were made. Each
/// change takes a number under the engine lock once it is made (`Ticket.take`), and
/// publishes its events (none when it failed after all) afterwards; events wait here until
/// every change numbered before theirs has published. Lock-state changes take numbers too,
/// so a preference event's `sequence` may skip some.
final class OrderedEvents: @unchecked Sendable {
    /// One write's place in the order (nil until it takes one).
    final class Ticket: @unchecked Sendable {
        private let events: OrderedEvents
        fileprivate var number: UInt64?
        init(_ events: OrderedEvents) { self.events = events }
        /// The write's place in the order (from `start` + 1), once taken.
        var sequence: UInt64 { number ?? 0 }
        /// Takes the next number; call it under the engine lock, once the change is made
        /// (later calls keep the first number).
        func take() {
            if number == nil {
                number = events.lock.withLock {
                    events.taken += 1
                    return events.taken
                }
            }
        }
        /// Events of a change already made that must go out even if the rest of the call then
        /// fails (`inEventOrder` publishes them when it throws; its result's events replace them).
        var madeSoFar: [VaultEvent] = []
    }

    private let lock = NSLock()
    /// The number before this run's first.
    let start: UInt64
    private var taken: UInt64
    private var nextToEmit: UInt64

    /// Numbers changes from `start` + 1.
    init(after start: UInt64 = 0) {
        self.start = start
        taken = start
        nextToEmit = start + 1
    }

    /// Where a vaultd run starts numbering: the wall clock in microseconds since 1970, so a
    /// run numbers its writes above an earlier run's (which made fewer than one write per
    /// microsecond it ran) and a client still holding the earlier run's numbers does not
    /// take the new run's writes for old ones (a `Defaults` write just after a restart
    /// would miss its own copy). 0 on a clock before 1970.
    static func runStart() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return now.tv_sec < 0 ? 0 : UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec / 1000)
    }
    private var waiting: [UInt64: [VaultEvent]] = [:]
    /// Set while a thread hands out events (under `lock`): one at a time, so they stay in order.
    private var emitting = false

    /// Publishes a ticket's events (nothing when it took no number): `emit` gets them, and
    /// those of later tickets waiting for this one, in order. One thread emits at a time;
    /// a ticket published meanwhile is left to it. `emit` runs outside the lock: a write
    /// takes its number (`Ticket.take`) holding the engine lock and then this lock, so a
    /// handler that needed either (one that reads the lock state, or writes a preference)
    /// waited for itself or for a writer that waited for it.
    func publish(_ ticket: Ticket, _ events: [VaultEvent], emit: ([VaultEvent]) -> Void) {
        guard let n = ticket.number else { return }
        lock.lock()
        waiting[n] = events
        if emitting {
            lock.unlock()
            return
        }
        emitting = true
        while let ready = waiting.removeValue(forKey: nextToEmit) {
            nextToEmit += 1
            lock.unlock()
            emit(ready)
            lock.lock()
        }
        emitting = false
        lock.unlock()
    }
}

/// Something that changed in the vault, for observers.
public enum VaultEvent: Sendable {
    /// The lock state changed.
    case lockState(LockState)
    /// A preference was set (value) or removed (nil). `sequence`: the write's place in the
    /// commit order of this vaultd's run (`OrderedEvents`; increasing, not consecutive), also
    /// in the writer's reply.
    case preference(domain: String, key: String, value: PlistValue?, sequence: UInt64)
    /// Files were purged from an app's cache.
    case cachePurge(appID: String, freedBytes: Int64)
    /// Keychain items were added, updated or deleted (sync exports the synchronizable ones;
    /// no subscription is sent it).
    case keychainChanged
    /// These items were made, changed or deleted, by one committed write (after
    /// `keychainChanged`, when that is sent too). The Secret Service front-end signals its
    /// items' changes from it, whichever front-end made them; no subscription is sent it.
    case itemsChanged([ItemChange])
}
