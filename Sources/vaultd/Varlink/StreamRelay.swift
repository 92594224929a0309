import Foundation
import Synchronization
import VaultCore
import VaultProtocol

/// Turns engine events into one stream's replies. Events that arrive before the
/// subscription is ready are held and replayed, so none falls between observing and the
/// snapshot the stream starts with.
///
/// `queue` is an `EventQueue`, safe on its own.
final class StreamRelay: Sendable {
    let queue: EventQueue
    /// The reply maker once started, and the events held until then. A struct, not a tuple:
    /// a closure in a tuple is stored at the generic `Mutex`'s abstraction, and each access
    /// through `withLock` would wrap it in one more reabstraction thunk.
    private struct State {
        var reply: (@Sendable (VaultEvent) -> JSONObject?)?
        var held: [VaultEvent] = []
    }
    private let state = Mutex(State())

    init(capacityBytes: Int) { queue = EventQueue(capacityBytes: capacityBytes) }

    func receive(_ event: VaultEvent) {
        state.withLock {
            guard let reply = $0.reply else { return $0.held.append(event) }
            if let r = reply(event) { queue.push(Self.message(r)) }
        }
    }

    func start(_ reply: @escaping @Sendable (VaultEvent) -> JSONObject?) {
        state.withLock {
            $0.reply = reply
            for e in $0.held { if let r = reply(e) { queue.push(Self.message(r)) } }
            $0.held.removeAll()
        }
    }

    /// A stream reply, serialized (without its NUL): what it costs while it waits is its size.
    private static func message(_ parameters: JSONObject) -> [UInt8] {
        VarlinkReply(parameters: parameters, continues: true).json.serialized()
    }
}

/// Replies waiting to be streamed to one observer, serialized.
final class EventQueue: Sendable {
    private struct State {
        var items: [[UInt8]] = []
        /// Bytes of `items`, each counted with a 64-byte overhead (so a flood of tiny events
        /// is bounded too).
        var bytes = 0
        var overflowed = false
    }
    private let state = Monitor(State())
    /// An observer this far behind (bytes: not reading its stream, during a burst such as
    /// the import of a large domain) is dropped: its stream ends, and a client that connects
    /// again starts from a snapshot. (Dropping the oldest events instead left its copy
    /// missing changes for good.) Counted in bytes, not events: 100,000 events of 512 KiB
    /// values would have been 50 GB.
    let capacityBytes: Int

    init(capacityBytes: Int) { self.capacityBytes = capacityBytes }

    func push(_ item: [UInt8]) {
        state.withLock { state in
            guard !state.overflowed else { return }
            state.items.append(item)
            state.bytes += item.count + 64
            if state.bytes > capacityBytes {
                state.overflowed = true
                state.items = []
                state.bytes = 0
            }
        }
        state.signal()
    }

    /// The replies queued, waiting up to `seconds` for one; nil once the queue overflowed
    /// (the stream is to end).
    func drain(waitingUpTo seconds: Double) -> [[UInt8]]? {
        state.withLock(
            when: { !$0.items.isEmpty || $0.overflowed },
            deadline: Date().addingTimeInterval(seconds)
        ) { state in
            if state.overflowed { return nil }
            defer {
                state.items = []
                state.bytes = 0
            }
            return state.items
        }
    }
}
