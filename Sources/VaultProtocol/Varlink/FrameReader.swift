/// Splits a byte stream into NUL-terminated varlink frames. It knows nothing of what the
/// frames mean (framing apart from logic, as sd-varlink's JsonStream).
public struct FrameReader: Sendable {
    /// A frame (without its NUL) may be at most this many bytes.
    public let maximumFrameSize: Int
    private var buffer: [UInt8] = []
    private var scanned = 0

    public init(maximumFrameSize: Int = Varlink.maximumMessageSize - 1) {
        self.maximumFrameSize = maximumFrameSize
    }

    /// Bytes received but not yet returned as a frame.
    public var pendingByteCount: Int { buffer.count }

    public enum Failure: Error, Equatable, Sendable {
        /// The peer sent more than `maximumFrameSize` bytes without a NUL.
        case frameTooLarge(Int)
    }

    public mutating func append<C: Collection>(_ bytes: C) where C.Element == UInt8 {
        buffer.append(contentsOf: bytes)
    }

    /// The next complete frame, or nil when more bytes are needed.
    /// Throws `Failure.frameTooLarge` once the pending bytes exceed the limit without a NUL.
    public mutating func nextFrame() throws -> [UInt8]? {
        if let nul = buffer[scanned...].firstIndex(of: 0) {
            guard nul <= maximumFrameSize else { throw Failure.frameTooLarge(nul) }
            let frame = Array(buffer[..<nul])
            buffer.removeSubrange(...nul)
            scanned = 0
            return frame
        }
        scanned = buffer.count
        if buffer.count > maximumFrameSize { throw Failure.frameTooLarge(buffer.count) }
        return nil
    }
}
