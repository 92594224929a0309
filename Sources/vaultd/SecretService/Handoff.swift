import CGio

/// One reference to a GObject that threads share: a GCancellable (cancelled from any
/// thread), a GDBusMessage received (GDBus locks it; only read after), released when the
/// last Swift holder lets go, whichever thread that is.
///
/// `@unchecked Sendable`: `raw` never changes, GObject reference counts are atomic, and only
/// objects of those thread-safe kinds are held.
final class GObjectReference: @unchecked Sendable {
    let raw: OpaquePointer

    /// Takes a reference of its own on `object`.
    init(retaining object: OpaquePointer) {
        raw = object
        g_object_ref(UnsafeMutableRawPointer(object))
    }

    /// Takes over the reference the caller holds (a new object's).
    init(adopting object: OpaquePointer) { raw = object }

    deinit { g_object_unref(UnsafeMutableRawPointer(raw)) }
}

/// A value one thread hands over to another, which alone uses it after (the bus thread's
/// method invocation, or a `GV` of a call's arguments: GVariants are immutable and their
/// references atomic; GDBus's reply functions may be called from any thread).
///
/// `@unchecked Sendable`: `value` never changes, and the giving thread lets go of it.
final class Handed<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
