import Foundation
import Synchronization
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// A value a peer controls (a name, a path, an app ID, a file's text), made fit for one log
/// line: in double quotes, at most `limit` bytes of it kept (the rest counted: `…(+N bytes)`),
/// and everything that could forge or garble a line escaped: `\\`, `\"`, `\n`, `\r`, `\t`,
/// other C0 controls and DEL as `\xHH`, C1 controls, line and paragraph separators and
/// bidirectional overrides as `\u{HHHH}`, and bytes that are not UTF-8 as `\xHH`. Every
/// message that names such a value passes it through here.
public func logField(_ value: String, limit: Int = 160) -> String {
    logField(bytes: Array(value.utf8), limit: limit)
}

/// `logField` for raw bytes (a path the kernel gave, which need not be UTF-8).
public func logField(bytes: [UInt8], limit: Int = 160) -> String {
    var out = "\""
    var i = 0
    var kept = 0
    func hex(_ b: UInt8) -> String {
        let digits = Array("0123456789abcdef")
        return "\\x" + String(digits[Int(b >> 4)]) + String(digits[Int(b & 15)])
    }
    while i < bytes.count && kept < limit {
        let b = bytes[i]
        // The length of the UTF-8 sequence starting here, when it is a valid one.
        var length = 0
        if b < 0x80 {
            length = 1
        } else if b >= 0xC2 && b <= 0xF4 {
            let need = b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4
            if i + need <= bytes.count,
                bytes[(i + 1)..<(i + need)].allSatisfy({ $0 & 0xC0 == 0x80 }),
                String(validating: bytes[i..<(i + need)], as: UTF8.self) != nil
            {
                length = need
            }
        }
        switch length {
        case 0:
            out += hex(b)
            i += 1
            kept += 1
        case 1:
            switch b {
            case 0x5C: out += "\\\\"
            case 0x22: out += "\\\""
            case 0x0A: out += "\\n"
            case 0x0D: out += "\\r"
            case 0x09: out += "\\t"
            case 0..<0x20, 0x7F: out += hex(b)
            default: out.unicodeScalars.append(Unicode.Scalar(b))
            }
            i += 1
            kept += 1
        default:
            let scalar = String(decoding: bytes[i..<(i + length)], as: UTF8.self).unicodeScalars
                .first!
            let v = scalar.value
            if (0x80...0x9F).contains(v) || v == 0x2028 || v == 0x2029
                || (0x202A...0x202E).contains(v) || (0x2066...0x2069).contains(v)
                || v == 0x200E || v == 0x200F || v == 0x061C || v == 0xFEFF
            {
                out += "\\u{" + String(v, radix: 16) + "}"
            } else {
                out.unicodeScalars.append(scalar)
            }
            i += length
            kept += length
        }
    }
    out += "\""
    if i < bytes.count { out += "…(+\(bytes.count - i) bytes)" }
    return out
}

/// Log lines rate-limited per reason (a token bucket each): a burst of `burst` lines, then
/// one every `interval` seconds; lines over it are counted, and the next line of that
/// reason says how many were suppressed. For refusals a peer can repeat at will (a
/// connection flood, a sandbox renaming itself): the log stays bounded. `reason` is one of
/// a few fixed words chosen by vaultd, never a peer's value.
public final class RateLimitedLog: Sendable {
    private struct Bucket {
        var tokens: Double
        var last: UInt64
        var suppressed = 0
    }
    /// Each reason's bucket.
    private let buckets = Mutex<[String: Bucket]>([:])
    let burst: Double
    let interval: Double

    public init(burst: Int = 10, interval: Double = 6) {
        self.burst = Double(burst)
        self.interval = interval
    }

    /// Logs `message` to `logger` at `level` unless `reason` is over its rate (then counts
    /// it); a line the logger's level leaves out spends nothing. Returns whether it was
    /// logged.
    @discardableResult
    public func log(
        _ reason: String, to logger: Logger, _ level: LogLevel,
        _ message: @autoclosure () -> String
    ) -> Bool {
        guard logger.writes(level) else { return false }
        let now = MonotonicClock.nanoseconds()
        let suppressed: Int? = buckets.withLock { buckets in
            var b = buckets[reason] ?? Bucket(tokens: burst, last: now)
            b.tokens = min(burst, b.tokens + Double(now &- b.last) / 1e9 / interval)
            b.last = now
            defer { buckets[reason] = b }
            guard b.tokens >= 1 else {
                b.suppressed += 1
                return nil
            }
            b.tokens -= 1
            let n = b.suppressed
            b.suppressed = 0
            return n
        }
        guard let suppressed else { return false }
        if suppressed > 0 {
            logger.log(level, "\(suppressed) similar message(s) suppressed (\(reason))")
        }
        logger.log(level, message())
        return true
    }
}

/// Writes `text` to fd 2 with write(2), whole unless it fails; failures are ignored: a line
/// that cannot be written (a log file on a full disk, a terminal gone, stderr closed) is
/// dropped, as the log must never stop the daemon (Foundation's `FileHandle.write` makes such a
/// failure a fatal error). `Logger`'s default sink.
public func writeToStandardError(_ text: String) {
    _ = try? Array(text.utf8).withUnsafeBytes {
        try SystemCall.writeAll(STDERR_FILENO, $0, inherited: true)
    }
}
