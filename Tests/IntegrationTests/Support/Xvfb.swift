import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// An X server of a test's own (Xvfb, 1280x800, no TCP) on the first free display number
/// from 90, for desktop programs under test (seahorse, gcr's prompter). `environment`
/// gives a child its DISPLAY and keeps GSettings in memory and the accessibility bus away.
final class XvfbDisplay {
    let number: Int
    let pid: pid_t

    /// Starts Xvfb with `environment`, its output in `log`, and returns once its socket exists.
    init(environment: [String: String], log: String) throws {
        guard access("/usr/bin/Xvfb", X_OK) == 0 else {
            throw HarnessError("Xvfb is missing: run scripts/install-deps")
        }
        guard
            let free = (90..<190).first(where: {
                access("/tmp/.X11-unix/X\($0)", F_OK) != 0 && access("/tmp/.X\($0)-lock", F_OK) != 0
            })
        else { throw HarnessError("no free X display number from 90 to 189") }
        number = free
        pid = try ChildProcess.spawn(
            "/usr/bin/Xvfb", [":\(number)", "-screen", "0", "1280x800x24", "-nolisten", "tcp"],
            environment: environment, inputs: [:], stdout: .file(log, append: false),
            stderr: .file(log, append: false))
        let deadline = Date().addingTimeInterval(20)
        while access("/tmp/.X11-unix/X\(number)", F_OK) != 0 && Date() < deadline {
            usleep(10_000)
        }
    }

    deinit {
        kill(pid, SIGTERM)
        _ = ChildProcess.wait(pid, timeout: 10)
    }

    var display: String { ":\(number)" }

    /// `base` with this display.
    func environment(_ base: [String: String]) -> [String: String] {
        var env = base
        env["DISPLAY"] = display
        env["GSETTINGS_BACKEND"] = "memory"
        env["NO_AT_BRIDGE"] = "1"
        return env
    }
}
