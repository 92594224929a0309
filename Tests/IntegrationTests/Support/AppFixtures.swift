import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Copies of `vault-example` acting as separate apps (vaultd tells them apart by executable
/// path), and the steps the apps and caches tests share.
extension Daemon {
    /// Copies vault-example to `ROOT/apps/NAME/app` (a real copy: `/proc/PID/exe` resolves
    /// symlinks) and returns the path.
    func placeExample(_ name: String) throws -> String {
        try AppCopy.place(name, under: root + "/apps")
    }

    /// Runs an app copy (any executable path) against this daemon.
    func app(_ path: String, _ arguments: [String], stdin: Data? = nil, timeout: Double = 60)
        -> ProcessResult
    {
        do {
            return try ChildProcess.run(
                path, arguments, environment: environment, stdin: stdin, timeout: timeout)
        } catch {
            return ProcessResult(status: -1, stdout: Data(), stderr: "harness: \(error)")
        }
    }

    /// Starts vaultd with `config` written as its config.plist (`--config`); no config: plain `start`.
    func start(config: [String: Any]?) throws {
        guard let config else { return try start() }
        let path = root + "/config.plist"
        try PropertyListSerialization.data(fromPropertyList: config, format: .xml, options: 0)
            .write(to: URL(fileURLWithPath: path))
        try start(extraArguments: ["--config", path])
    }

    /// `vaultctl app install ID --exe PATH EXTRA... --json`; the app's JSON.
    @discardableResult
    func install(_ appID: String, exe: String, _ extra: [String] = []) throws -> [String: Any] {
        let r = ctl(["app", "install", appID, "--exe", exe, "--json"] + extra)
        guard r.status == 0, let j = r.jsonObject else {
            throw HarnessError("app install \(appID) failed: \(r)")
        }
        return j
    }

    /// `vaultctl app show ID --json`, or nil when it fails.
    func appShow(_ appID: String) -> [String: Any]? {
        let r = ctl(["app", "show", appID, "--json"])
        return r.status == 0 ? r.jsonObject : nil
    }

    /// The launch info an app prints (`vault-example launch`).
    func launch(_ path: String) throws -> Launch {
        let r = app(path, ["launch"])
        guard r.status == 0, let j = r.jsonObject else { throw HarnessError("launch failed: \(r)") }
        return Launch(j)
    }
}

/// `vault-example launch` output.
struct Launch: Equatable, CustomStringConvertible {
    var appID: String?
    var generation: String?
    var firstLaunch: Bool
    var wiped: Int

    init(_ j: [String: Any]) {
        appID = j["appID"] as? String
        generation = j["generation"] as? String
        firstLaunch = j["firstLaunch"] as? Bool ?? false
        wiped = (j["wipedCredentials"] as? NSNumber)?.intValue ?? -1
    }

    var description: String {
        "appID \(appID ?? "null") generation \(generation ?? "null") firstLaunch \(firstLaunch) wiped \(wiped)"
    }
}

enum AppCopy {
    /// Copies vault-example to `DIR/NAME/app`, mode 0755 (directories 0755 too, so another
    /// uid or a sandbox can reach it).
    static func place(_ name: String, under directory: String) throws -> String {
        let fm = FileManager.default
        let dir = directory + "/" + name
        try fm.createDirectory(
            atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        let path = dir + "/app"
        if fm.fileExists(atPath: path) { try fm.removeItem(atPath: path) }
        try fm.copyItem(atPath: Paths.tool("vault-example"), toPath: path)
        chmod(path, 0o755)
        return path
    }
}

extension ProcessResult {
    /// Stdout parsed as one JSON object (nil when it is not).
    var jsonObject: [String: Any]? {
        try? JSONSerialization.jsonObject(with: stdout) as? [String: Any]
    }
    /// Stdout parsed as a JSON array of objects.
    var jsonArray: [[String: Any]]? {
        try? JSONSerialization.jsonObject(with: stdout) as? [[String: Any]]
    }
}

/// Polls `condition` every 50 ms until it holds or `timeout` seconds pass. Returns whether it held.
@discardableResult
func eventually(timeout: Double, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while true {
        if try condition() { return true }
        if Date() > deadline { return false }
        usleep(50_000)
    }
}
