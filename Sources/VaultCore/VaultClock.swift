import Foundation
import Synchronization
import VaultProtocol

/// The time the engine and vaultd's periodic tasks go by: the failed-unlock waits, the idle
/// auto-lock, the executable scan's grace period. vaultd runs on `SystemClock`; tests pass a
/// clock they move themselves, so they wait for what the time brings (a wait ending, a lock,
/// an uninstall), not through it.
public protocol VaultClock: Sendable {
    /// The wall-clock time: what is stored and compared across restarts (the last failed
    /// unlock, when an executable went missing).
    var now: Date { get }
    /// Nanoseconds since an arbitrary start, never moved back by a change of the wall clock:
    /// for intervals (the time since the last call).
    var monotonicNanoseconds: UInt64 { get }
}

/// The system's clocks: `Date()` and CLOCK_MONOTONIC.
public struct SystemClock: VaultClock {
    public init() {}
    public var now: Date { Date() }
    public var monotonicNanoseconds: UInt64 { MonotonicClock.nanoseconds() }
}

/// The system's clocks moved ahead by an offset that only grows: both the wall clock and
/// the monotonic one are `offset` ahead of the system's. vaultd's test clock
/// (`VAULTD_TEST_CLOCK_FILE`, debug builds only) and the engine tests' clock. With an offset
/// of 0 it is `SystemClock`.
public final class OffsetClock: VaultClock {
    /// The offset in nanoseconds.
    private let offset = Atomic<UInt64>(0)

    public init() {}

    public var now: Date { Date().addingTimeInterval(offsetSeconds) }
    public var monotonicNanoseconds: UInt64 {
        MonotonicClock.nanoseconds() &+ offset.load(ordering: .acquiring)
    }

    /// How far ahead of the system's clocks this one is, in seconds.
    public var offsetSeconds: Double { Double(offset.load(ordering: .acquiring)) / 1e9 }

    /// Moves the clock `seconds` ahead (a negative or non-finite number moves nothing).
    public func advance(by seconds: Double) {
        guard seconds.isFinite, seconds > 0 else { return }
        offset.add(Self.nanoseconds(seconds), ordering: .acquiringAndReleasing)
    }

    /// Sets the offset to `seconds` ahead of the system's clocks, when that is no less than the
    /// offset now: the clock never goes back, so an interval measured on it is never negative.
    /// Returns false, changing nothing, for a smaller offset or one that is not a finite
    /// number from 0 to 10⁹ s.
    @discardableResult
    public func setOffset(_ seconds: Double) -> Bool {
        guard seconds.isFinite, seconds >= 0, seconds <= 1e9 else { return false }
        let wanted = Self.nanoseconds(seconds)
        var current = offset.load(ordering: .acquiring)
        while wanted >= current {
            let (exchanged, original) = offset.compareExchange(
                expected: current, desired: wanted, ordering: .acquiringAndReleasing)
            if exchanged { return true }
            current = original
        }
        return false
    }

    private static func nanoseconds(_ seconds: Double) -> UInt64 { UInt64(min(seconds, 1e9) * 1e9) }
}
