internal import CSodium

#if canImport(Glibc)
import Glibc
#endif

/// Splits a byte stream into NUL-terminated varlink frames. It knows nothing of what the
/// frames mean (framing apart from logic, as sd-varlink's JsonStream).
///
/// Messages carry secrets and passphrases, so no byte received outlives its use in memory
/// this reader gives back: a frame's bytes are wiped (`sodium_memzero`) as it is returned,
/// the buffer grows by hand (Array's own growth frees the old storage as it is), compaction
/// wipes what it leaves behind, and `reset` wipes what is pending. The frames returned are
/// copies the caller wipes (`Array.wipe`) once it has parsed them.
public struct FrameReader: Sendable {
    /// A frame (without its NUL) may be at most this many bytes.
    public let maximumFrameSize: Int
    private var buffer: [UInt8] = []
    /// Bytes before this index were returned already (dropped in bulk, not per frame, so
    /// many pipelined frames in one chunk cost linear time).
    private var start = 0
    /// No NUL before this index.
    private var scanned = 0

    public init(maximumFrameSize: Int = Varlink.maximumMessageSize - 1) {
        self.maximumFrameSize = maximumFrameSize
    }

    /// Bytes received but not yet returned as a frame.
    public var pendingByteCount: Int { buffer.count - start }

    public enum Failure: Error, Equatable, Sendable {
        /// The peer sent more than `maximumFrameSize` bytes without a NUL.
        case frameTooLarge(Int)
    }

    /// Beyond this, the buffer's memory is given back once it is empty again (a connection
    /// that once sent a big message does not keep megabytes for the rest of its life).
    private static let retainedCapacity = 1 << 16

    public mutating func append<C: Collection>(_ bytes: C) where C.Element == UInt8 {
        if start > 0 && (start >= Self.retainedCapacity || start * 2 >= buffer.count) {
            // The returned frames before `start` are wiped already; the pending bytes move to
            // the front, and the copies they leave behind are wiped before they are dropped.
            let pending = buffer.count - start
            buffer.withUnsafeMutableBytes { b in
                memmove(b.baseAddress!, b.baseAddress! + start, pending)
                sodium_memzero(b.baseAddress! + pending, b.count - pending)
            }
            buffer.removeLast(start)
            scanned -= start
            start = 0
        }
        let needed = buffer.count + bytes.count
        if needed > buffer.capacity {
            var grown: [UInt8] = []
            grown.reserveCapacity(max(needed, buffer.capacity * 2))
            grown.append(contentsOf: buffer)
            buffer.wipe()
            buffer = grown
        }
        buffer.append(contentsOf: bytes)
    }

    /// Wipes and drops every pending byte (a connection that ends or is given up with half
    /// a message received).
    public mutating func reset() {
        buffer.wipe()
        buffer = []
        start = 0
        scanned = 0
    }

    /// The next complete frame, or nil when more bytes are needed.
    /// Throws `Failure.frameTooLarge` once the pending bytes exceed the limit without a NUL.
    public mutating func nextFrame() throws -> [UInt8]? {
        if let nul = Self.firstNUL(in: buffer, from: max(scanned, start)) {
            guard nul - start <= maximumFrameSize else { throw Failure.frameTooLarge(nul - start) }
            let frame = Array(buffer[start..<nul])
            buffer.withUnsafeMutableBytes { b in
                sodium_memzero(b.baseAddress! + start, nul + 1 - start)
            }
            start = nul + 1
            scanned = start
            if start == buffer.count {
                if buffer.capacity > Self.retainedCapacity {
                    buffer = []
                } else {
                    buffer.removeAll(keepingCapacity: true)
                }
                start = 0
                scanned = 0
            }
            return frame
        }
        scanned = buffer.count
        if pendingByteCount > maximumFrameSize { throw Failure.frameTooLarge(pendingByteCount) }
        return nil
    }

    /// The index of the first NUL in `bytes` at or after `from`: `memchr`, where the
    /// generic `firstIndex(of:)` goes byte by byte through the generic iterator, on every
    /// frame.
    private static func firstNUL(in bytes: [UInt8], from: Int) -> Int? {
        bytes.withUnsafeBufferPointer { b in
            guard from < b.count, let base = b.baseAddress,
                let hit = memchr(base + from, 0, b.count - from)
            else { return nil }
            return base.distance(to: hit.assumingMemoryBound(to: UInt8.self))
        }
    }
}
