import Foundation

/// State behind a mutex with one condition variable (a monitor): `Mutex`'s `withLock`, plus
/// waiting under the lock until the state is as a thread needs it (a free reader, no sync in
/// flight, a checkpoint round over). `Mutex` from Synchronization has no wait.
///
/// Waiters test their condition again after every wake-up (`withLock(when:)`), so a
/// broadcast that wakes threads waiting for different things is always safe; `signal` wakes
/// one thread only, for a change that only one waiter can use and every waiter waits for.
///
/// `@unchecked Sendable`: `state` is read and written only inside `withLock`'s bodies, under
/// `condition`'s lock (a pthread mutex and condition variable). A value taken out of the
/// state is the caller's to share safely, as with `Mutex`.
public final class Monitor<State>: @unchecked Sendable {
    // Inlinable (with its storage) so that callers in other modules get `withLock`
    // specialized for their state, as `Mutex`'s is, not a generic call per use.
    @usableFromInline let condition = NSCondition()
    @usableFromInline var state: State

    public init(_ initial: State) { state = initial }

    /// Runs `body` with the state, under the lock.
    @inlinable public func withLock<R>(_ body: (inout State) throws -> R) rethrows -> R {
        condition.lock()
        defer { condition.unlock() }
        return try body(&state)
    }

    /// Waits until `ready` holds for the state, then runs `body` in the same hold of the lock.
    @inlinable public func withLock<R>(
        when ready: (State) -> Bool, _ body: (inout State) throws -> R
    )
        rethrows -> R
    {
        condition.lock()
        defer { condition.unlock() }
        while !ready(state) { condition.wait() }
        return try body(&state)
    }

    /// As `withLock(when:)`, waiting no later than `deadline`: `body` runs either way, and
    /// tests the state itself.
    @inlinable public func withLock<R>(
        when ready: (State) -> Bool, deadline: Date, _ body: (inout State) throws -> R
    ) rethrows -> R {
        condition.lock()
        defer { condition.unlock() }
        while !ready(state) {
            if !condition.wait(until: deadline) { break }
        }
        return try body(&state)
    }

    /// Wakes every waiting thread to test its condition again: after a change (inside a
    /// `withLock` body or after it).
    @inlinable public func broadcast() { condition.broadcast() }

    /// Wakes one waiting thread: for a change that any one waiter can take (a reader given
    /// back), where every waiter waits for the same thing.
    @inlinable public func signal() { condition.signal() }
}
