#if canImport(Glibc)
import Glibc
#endif

/// CLOCK_MONOTONIC: for intervals (polling windows, idle time, benchmark timings), which a
/// change of the wall clock must not move.
public enum MonotonicClock {
    /// Nanoseconds since an arbitrary start (boot).
    @inlinable
    public static func nanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }
}
