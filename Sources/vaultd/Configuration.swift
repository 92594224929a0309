import Foundation
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// vaultd's settings: command line, then environment, then XDG defaults (docs/configuration.md).
struct Configuration {
    var socketPath: String
    /// True when the socket path was chosen by the defaults (then its directory must
    /// be ours and 0700).
    var socketPathIsDefault: Bool
    var dataDirectory: String
    var cacheDirectory: String
    var configFile: String?
    /// The config file was named (`--config`): it must exist. The default one may be absent.
    var configFileIsExplicit = false
    /// `--new-device-key`: make a new device.key for an initialised vault whose key is missing
    /// (a data directory moved to a new device on purpose).
    var newDeviceKey = false
    /// `--secret-service`: serve the Secret Service on the session bus (also the config
    /// file's `SecretService`); `--replace`: take `org.freedesktop.secrets` over from the
    /// provider that owns it.
    var secretService = false
    var replaceSecretService = false

    static let usage = """
        usage: vaultd [--socket PATH] [--data-dir DIR] [--cache-dir DIR] [--config FILE] [--new-device-key]
                     [--secret-service [--replace]]

        Serves the vault on a Unix socket (varlink). Runs in the foreground, logs to stderr.
        SIGTERM or SIGINT: finish the calls in progress and stop. SIGHUP: read the config file again.
        --new-device-key: the data directory was moved to a new device on purpose and has no
        device.key: make one (ThisDeviceOnly items made with the old key stay unavailable).
        --secret-service: also be the desktop's Secret Service (org.freedesktop.secrets on the
        session bus; docs/secret-service.md); --replace: take the name over from its owner.
        Environment: VAULTD_SOCKET, VAULTD_DATA_DIR, VAULTD_CACHE_DIR, XDG_RUNTIME_DIR,
        XDG_DATA_HOME, XDG_CACHE_HOME, XDG_CONFIG_HOME; LISTEN_FDS/LISTEN_PID (socket activation);
        VAULTD_MAX_CONNECTIONS (default 256), VAULTD_MAX_CONNECTIONS_PER_PEER (one app's or
        one program's of the owner, default 32), VAULTD_PARTIAL_TIMEOUT (seconds a peer may leave half a
        message unfinished, default 10), VAULTD_IDLE_TIMEOUT (seconds an idle connection stays
        open, default 60), VAULTD_BUSY_POLL_US (microseconds a connection polls for the next call
        before it sleeps, default 30; 0: never), VAULTD_SECRET_SERVICE_INLINE (0: every Secret
        Service call goes through GDBus to vaultd's bus thread, for comparing; by default
        lookups' reads are answered on the bus relay's thread).
        """

    struct UsageError: Error { var message: String }

    static func parse(_ args: [String], environment env: [String: String]) throws -> Configuration {
        var options: [String: String] = [:]
        var newDeviceKey = false
        var secretService = false
        var replace = false
        var i = 0
        while i < args.count {
            let a = args[i]
            switch a {
            case "-h", "--help": throw UsageError(message: "")
            case "--new-device-key":
                newDeviceKey = true
                i += 1
            case "--secret-service":
                secretService = true
                i += 1
            case "--replace":
                replace = true
                i += 1
            case "--socket", "--data-dir", "--cache-dir", "--config":
                // An empty value too (`--cache-dir "$DIR"` with DIR unset): with an empty cache
                // directory vaultd served, and every cache call then failed ("cannot create
                // directory : ..."); an empty socket or data directory failed as obscurely.
                guard i + 1 < args.count, !args[i + 1].isEmpty else {
                    throw UsageError(message: "\(a) needs a value")
                }
                options[a] = args[i + 1]
                i += 2
            default:
                if let eq = a.firstIndex(of: "="), a.hasPrefix("--"),
                    ["--socket", "--data-dir", "--cache-dir", "--config"].contains(String(a[..<eq]))
                {
                    guard eq < a.index(before: a.endIndex) else {
                        throw UsageError(message: "\(a[..<eq]) needs a value")
                    }
                    options[String(a[..<eq])] = String(a[a.index(after: eq)...])
                    i += 1
                } else {
                    throw UsageError(message: "unknown argument '\(a)'")
                }
            }
        }
        func nonEmpty(_ k: String) -> String? { env[k].flatMap { $0.isEmpty ? nil : $0 } }
        // HOME, else the passwd entry's; neither (a container's uid without an entry, HOME
        // unset) is fine when every path is given, and otherwise a clear error.
        let home =
            nonEmpty("HOME")
            ?? getpwuid(getuid()).flatMap { $0.pointee.pw_dir.map { String(cString: $0) } }.flatMap
        { $0.isEmpty ? nil : $0 }
        func underHome(_ xdg: String, _ fallback: String, for what: String) throws -> String {
            if let base = nonEmpty(xdg) { return base }
            guard let home else {
                throw UsageError(
                    message:
                        "HOME is not set and uid \(getuid()) has no home in the passwd database, so there is no default \(what): set HOME or \(xdg), or give --\(what)"
                )
            }
            return home + fallback
        }
        let explicitSocket = options["--socket"] ?? nonEmpty("VAULTD_SOCKET")
        let socket = explicitSocket ?? defaultSocketPath(environment: env)
        let data =
            try options["--data-dir"] ?? nonEmpty("VAULTD_DATA_DIR")
            ?? (underHome("XDG_DATA_HOME", "/.local/share", for: "data-dir") + "/vaultd")
        let cache =
            try options["--cache-dir"] ?? nonEmpty("VAULTD_CACHE_DIR")
            ?? (underHome("XDG_CACHE_HOME", "/.cache", for: "cache-dir") + "/vaultd")
        // The config file is optional: without a home for it there is none.
        let config =
            options["--config"]
            ?? (try? underHome("XDG_CONFIG_HOME", "/.config", for: "config")).map {
                $0 + "/vaultd/config.plist"
            }
        guard !replace || secretService else {
            throw UsageError(message: "--replace goes with --secret-service")
        }
        return Configuration(
            socketPath: socket, socketPathIsDefault: explicitSocket == nil, dataDirectory: data,
            cacheDirectory: cache,
            configFile: config, configFileIsExplicit: options["--config"] != nil,
            newDeviceKey: newDeviceKey,
            secretService: secretService, replaceSecretService: replace)
    }

    /// `$XDG_RUNTIME_DIR/vaultd/vaultd.sock`, else `/tmp/vaultd-$UID/vaultd.sock`.
    static func defaultSocketPath(environment env: [String: String]) -> String {
        if let run = env["XDG_RUNTIME_DIR"], !run.isEmpty { return run + "/vaultd/vaultd.sock" }
        return "/tmp/vaultd-\(getuid())/vaultd.sock"
    }
}
