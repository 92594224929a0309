import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A deliberately tiny varlink client over a raw AF_UNIX socket, written with Glibc calls
/// only (not VaultProtocol's transport), so the tests see exactly the bytes vaultd sends and
/// can send bytes no well-behaved client would.
final class VarlinkConnection {
    private(set) var fd: Int32
    private var buffer: [UInt8] = []
    /// No NUL before this index of `buffer` (so a big reply is scanned once, not per chunk).
    private var scanned = 0

    /// What one read of a reply gave.
    enum Outcome: CustomStringConvertible {
        /// A complete NUL-terminated message that parsed as a JSON object.
        case reply([String: Any])
        /// A complete message that is not a JSON object (a protocol violation by vaultd).
        case garbage(Data)
        /// The peer closed the connection (EOF, ECONNRESET or EPIPE).
        case closed
        /// Nothing complete arrived in time.
        case timedOut

        var description: String {
            switch self {
            case .reply(let r): return "reply \(r)"
            case .garbage(let d): return "garbage \(String(decoding: d.prefix(200), as: UTF8.self))"
            case .closed: return "closed"
            case .timedOut: return "timed out"
            }
        }

        var reply: [String: Any]? {
            if case .reply(let r) = self { return r }
            return nil
        }

        /// The varlink error name of a reply, if it is an error.
        var errorName: String? { reply?["error"] as? String }

        /// The reply's `parameters` object.
        var parameters: [String: Any]? { reply?["parameters"] as? [String: Any] }
    }

    init(path: String) throws {
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket: \(String(cString: strerror(errno)))") }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else {
            close()
            throw HarnessError("socket path too long: \(path)")
        }
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            for (i, b) in bytes.enumerated() { raw[i] = b }
        }
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard rc == 0 else {
            let e = errno
            // close(), which forgets the fd: every stored property is set by now, so deinit
            // runs for this instance too and would close the same number again, by then
            // perhaps another thread's file (Daemon.answers polls with failing connects while
            // a daemon starts: a crash test's copy of the WAL failed with EBADF under load).
            close()
            throw HarnessError("connect \(path): \(String(cString: strerror(e)))")
        }
    }

    deinit { close() }

    func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }

    /// Sends all bytes (MSG_NOSIGNAL: a closed peer is an answer, not a SIGPIPE). Returns
    /// false when the peer closed the connection before everything was sent.
    @discardableResult
    func send(_ bytes: [UInt8]) throws -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { raw in
                Glibc.send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
            }
            if n < 0 {
                if errno == EINTR { continue }
                if errno == EPIPE || errno == ECONNRESET { return false }
                throw HarnessError("send: \(String(cString: strerror(errno)))")
            }
            offset += n
        }
        return true
    }

    /// Sends one JSON message followed by NUL.
    @discardableResult
    func send(json: [String: Any]) throws -> Bool {
        let data = try JSONSerialization.data(withJSONObject: json, options: [.sortedKeys])
        return try send(Array(data) + [0])
    }

    /// Builds a call message.
    static func message(_ method: String, _ parameters: [String: Any]? = nil) -> [String: Any] {
        var m: [String: Any] = ["method": method]
        if let parameters { m["parameters"] = parameters }
        return m
    }

    /// Sends a call and reads its reply.
    func call(_ method: String, _ parameters: [String: Any]? = nil, timeout: Double = 10) throws
        -> Outcome
    {
        guard try send(json: Self.message(method, parameters)) else { return .closed }
        return receive(timeout: timeout)
    }

    /// Reads the next NUL-terminated message.
    func receive(timeout: Double = 10) -> Outcome {
        switch receiveFrame(timeout: timeout) {
        case .frame(let bytes):
            let frame = Data(bytes)
            if let o = try? JSONSerialization.jsonObject(with: frame) as? [String: Any] {
                return .reply(o)
            }
            return .garbage(frame)
        case .closed: return .closed
        case .timedOut: return .timedOut
        }
    }

    /// What one read of a raw message gave.
    enum Frame {
        /// The bytes of a complete message, without its NUL.
        case frame([UInt8])
        /// The peer closed the connection (EOF, ECONNRESET or EPIPE).
        case closed
        /// Nothing complete arrived in time.
        case timedOut
    }

    /// Reads the next NUL-terminated message, undecoded (for clients that decode replies
    /// their own way). Only newly received bytes are scanned for the NUL, so a multi-MB
    /// reply costs one pass, not one per chunk.
    func receiveFrame(timeout: Double = 10) -> Frame {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let nul = buffer[scanned...].firstIndex(of: 0) {
                let frame = Array(buffer[..<nul])
                buffer.removeSubrange(...nul)
                scanned = 0
                return .frame(frame)
            }
            scanned = buffer.count
            let left = deadline.timeIntervalSinceNow
            if left <= 0 { return .timedOut }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let r = poll(&pfd, 1, Int32(min(left, 1) * 1000) + 1)
            if r < 0 && errno != EINTR { return .closed }
            if r <= 0 { continue }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let n = recv(fd, &chunk, chunk.count, 0)
            if n == 0 { return .closed }
            if n < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                return .closed
            }
            buffer.append(contentsOf: chunk[0..<n])
        }
    }

    /// True when the peer has closed the connection (waits up to `timeout` for EOF,
    /// discarding anything that arrives before it).
    func waitForClose(timeout: Double) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while deadline.timeIntervalSinceNow > 0 {
            switch receiveFrame(timeout: deadline.timeIntervalSinceNow) {
            case .closed: return true
            case .timedOut: return false
            default: continue
            }
        }
        return false
    }
}
