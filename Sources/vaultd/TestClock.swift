import Foundation
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// vaultd's clock for tests (docs/configuration.md, docs/development.md):
/// `VAULTD_TEST_CLOCK_FILE=FILE` makes vaultd's clock an `OffsetClock`, which runs ahead of
/// the system's by the number of seconds FILE holds, read at each SIGUSR1 before the periodic
/// tasks run. A test writes a larger number and sends SIGUSR1; once vaultd logs that the
/// tasks ran, the idle auto-lock, the executable scan and the failed-unlock waits have all
/// moved on by that much, and the test waits for what that brings instead of for seconds.
///
/// Only debug builds honour it: a release vaultd (what `scripts/setup` installs) started with
/// it set stops, so no environment of a production vaultd can shorten a wait. In a debug
/// build, the clock only goes forward: a smaller number is refused.
enum TestClock {
    static let variable = "VAULTD_TEST_CLOCK_FILE"

    struct Refused: Error, CustomStringConvertible { var description: String }

    /// The file the environment names, or nil (unset or empty). Throws for a relative path,
    /// and in a release build for any value.
    static func file(from env: [String: String]) throws -> String? {
        guard let path = env[variable], !path.isEmpty else { return nil }
        #if DEBUG
        guard path.hasPrefix("/") else {
            throw Refused(
                description: "\(variable) (for tests only) must be an absolute path, not '\(path)'")
        }
        return path
        #else
        throw Refused(
            description:
                "\(variable) is for tests, and only debug builds of vaultd honour it; this one is a release build: unset it"
        )
        #endif
    }

    /// Reads the offset from `path` into `clock`: a decimal number of seconds (from 0 to 10⁹,
    /// no less than the offset in force). An absent file leaves the clock as it is; a file that
    /// does not hold such a number is logged and changes nothing.
    static func update(_ clock: OffsetClock, from path: String, logger: Logger) {
        let fd: Int32
        do {
            fd = try SystemCall.open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        } catch {
            if error.code != Errno.notFound {
                logger.warning(
                    "test clock: cannot open \(logField(path)) (errno \(error.code)); the clock stays \(clock.offsetSeconds) s ahead"
                )
            }
            return
        }
        defer { SystemCall.close(fd) }
        var buffer = [UInt8](repeating: 0, count: 64)
        let n = (try? buffer.withUnsafeMutableBytes { try SystemCall.read(fd, into: $0) }) ?? -1
        let text =
            n > 0
            ? String(decoding: buffer.prefix(n), as: UTF8.self).trimmingCharacters(
                in: .whitespacesAndNewlines) : ""
        guard let seconds = Double(text) else {
            logger.warning(
                "test clock: \(logField(path)) does not hold a number of seconds; the clock stays \(clock.offsetSeconds) s ahead"
            )
            return
        }
        let before = clock.offsetSeconds
        guard seconds != before else { return }
        if clock.setOffset(seconds) {
            logger.notice("test clock: \(clock.offsetSeconds) s ahead of the system's")
        } else {
            logger.warning(
                "test clock: refused \(logField(text)) s (from 0 to 1e9, and the clock does not go back); it stays \(before) s ahead"
            )
        }
    }
}
