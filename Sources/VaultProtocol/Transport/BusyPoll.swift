import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Adaptive busy polling before a blocking receive, as an adaptive mutex spins before it
/// sleeps. A thread that sleeps in a receive and is woken a few microseconds later pays for
/// the sleep twice: the scheduler's wake-up, and on a virtual machine whose idle vCPUs halt
/// the hypervisor's (each way, on the order of a whole bare AF_UNIX round trip). When the
/// next message is about to arrive, polling for it briefly keeps the CPU awake and skips both.
///
/// The poll is bounded and backs off, so it costs only where it pays:
/// - it lasts at most `window` nanoseconds, yielding the CPU to any runnable thread
///   between polls;
/// - a poll that ends without data doubles the number of following receives that block at
///   once (up to 64), so a peer that calls once a second makes its connection poll only
///   about once a minute; a poll that succeeds resets that;
/// - at most `limit` threads of the process poll at once, and none on a single CPU
///   (`Limit.oneLessThanCPUs`): under load the CPUs have real work, and a blocked
///   receive is woken at once anyway.
public struct BusyPoll: Sendable {
    /// How many threads of the process may poll at the same time.
    public enum Limit: Sendable {
        /// One fewer than the CPUs online (none on one CPU): a daemon's connections.
        case oneLessThanCPUs
        /// One, if there are several CPUs: a client library inside an app.
        case one
        /// One, if there are several CPUs, counted apart from every other `BusyPoll` of the
        /// process (a poller no other thread can crowd out, as in tests).
        case ownOne

        var count: Int {
            let cpus = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
            switch self {
            case .oneLessThanCPUs: return max(0, cpus - 1)
            case .one, .ownOne: return cpus > 1 ? 1 : 0
            }
        }
    }

    /// Longest poll, in nanoseconds (0: never poll).
    public let window: UInt64
    private let limit: Int
    private let counter: SpinnerCount
    private var skip = 0
    private var backoff = 0

    /// How many coming receives block without polling (the back-off).
    public var receivesWithoutPolling: Int { skip }

    /// Whether any thread of the process may poll here (a window and several CPUs).
    public var isEnabled: Bool { window > 0 && limit > 0 }

    /// `windowMicroseconds`: the longest poll (0 turns polling off); `limit`: how many
    /// threads of the process may poll at once.
    public init(windowMicroseconds: Int, limit: Limit) {
        window = UInt64(max(0, windowMicroseconds)) * 1000
        self.limit = limit.count
        switch limit {
        case .oneLessThanCPUs: counter = SpinnerCount.servers
        case .one: counter = SpinnerCount.clients
        case .ownOne: counter = SpinnerCount()
        }
    }

    /// The window from the environment variable `name` (microseconds; 0 turns polling off),
    /// else `default`.
    public static func window(fromEnvironment name: String, default value: Int) -> Int {
        guard let raw = getenv(name), let v = Int(String(cString: raw)), v >= 0 else {
            return value
        }
        return min(v, 1000)
    }

    /// Returns once `fd` is readable, or the poll is over (or not worth starting): true
    /// when it saw `fd` readable (data, or the peer gone), so the receive need not wait.
    /// The caller then receives as usual, blocking if nothing came.
    ///
    /// `othersBusy`: other threads of the process have work in progress (a daemon's other
    /// calls); then the CPU is theirs, and nothing is polled.
    public mutating func awaitReadable(_ fd: Int32, othersBusy: Bool = false) -> Bool {
        guard isEnabled, !othersBusy else { return false }
        if skip > 0 {
            skip -= 1
            return false
        }
        guard counter.enter(limit: limit) else { return false }
        defer { counter.leave() }
        let deadline = MonotonicClock.nanoseconds() &+ window
        while true {
            // Readable, or hung up: the receive returns at once.
            if (try? SystemCall.poll(fd, events: Int16(POLLIN), timeout: 0)) ?? 0 != 0 {
                backoff = 0
                return true
            }
            if MonotonicClock.nanoseconds() >= deadline { break }
            sched_yield()
        }
        backoff = min(max(1, backoff * 2), 64)
        skip = backoff
        return false
    }
}

/// The threads of this process polling right now, per kind of user.
final class SpinnerCount: Sendable {
    static let servers = SpinnerCount()
    static let clients = SpinnerCount()
    private let active = Atomic<Int>(0)

    func enter(limit: Int) -> Bool {
        if active.add(1, ordering: .acquiring).newValue <= limit { return true }
        active.subtract(1, ordering: .releasing)
        return false
    }

    func leave() { active.subtract(1, ordering: .releasing) }
}
