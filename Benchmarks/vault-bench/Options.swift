import Foundation

/// vault-bench's command line. Every count is a flag, so a run can be made tiny (the smoke
/// test) or large (`--keyring-items 10000`).
struct Options {
    /// Item counts the vault is measured at (each from its own copy of a filled vault).
    var items: [Int] = [1000, 10000, 100000]
    /// Client counts for lookups (and the floor).
    var clients: [Int] = [1, 4, 16]
    /// Client counts for durable writes (add, update, delete) and preference writes.
    var writeClients: [Int] = [1, 16]
    /// Length of one timed repetition (seconds).
    var seconds: Double = 0.5
    /// Untimed warm-up (seconds) before each timed repetition that follows another series'
    /// (`interleave`); once, when a series is measured alone.
    var warmup: Double = 0.2
    var repetitions: Int = 5
    /// Size of each stored secret (bytes).
    var secretSize: Int = 32
    /// How often whole processes (`vaultctl item get`, `secret-tool lookup`) are run.
    var processRuns: Int = 20
    /// Start-ups measured (median reported).
    var startupRuns: Int = 3
    /// Item counts the Secret Service workloads are measured at (vaultd's front-end and,
    /// with `compareKeyring`, gnome-keyring, each on a private bus).
    var ssItems: [Int] = [1000]
    var compareKeyring = false
    var keyringItems: Int = 1000
    var json = false
    var vaultdPath: String?
    var vaultctlPath: String?
    /// Where filled vaults and keyrings are kept between runs (nil: the default).
    var cacheDirectory: String?
    var useCache = true
    /// Print progress to stderr.
    var verbose = true
    /// `--only lookup,writes,prefs,process,startup,floor,keyring,ss`: run just these parts.
    var only: Set<String>?
    static let parts: Set<String> = [
        "lookup", "writes", "prefs", "process", "startup", "floor", "keyring", "ss",
    ]

    /// Whether a part of the run is selected.
    func runs(_ part: String) -> Bool { only?.contains(part) ?? true }

    // Internal modes (the bench re-executes itself).
    /// `--inner-keyring FILE`: run the keyring part on the current (private) bus, write
    /// results to FILE.
    var innerKeyringResults: String?
    /// `--keyring-have N`: the keyring file copied in already holds items 0..<N.
    var keyringHave: Int = 0
    /// `--inner-ss FILE`: run the Secret Service workloads of `ssSystem` (vaultd or keyring)
    /// at `ssCount` items on the current (private) bus, write results to FILE.
    var innerSecretServiceResults: String?
    var ssSystem = "vaultd"
    var ssCount = 1000
    /// `--pid-file FILE`: where the inner run records the bus services' pids.
    var pidFile: String?
    /// `--echo-server PATH REQUEST REPLY`: serve the floor's round trips.
    var echoServer: (path: String, request: Int, reply: Int)?

    static let usage = """
        usage: vault-bench [--items 1000,10000,100000] [--clients 1,4,16] [--write-clients 1,16]
                           [--seconds 0.5] [--warmup 0.2] [--reps 5] [--secret-size 32]
                           [--process-runs 20] [--startup-runs 3]
                           [--ss-items 1000,10000]
                           [--compare-keyring] [--keyring-items 1000]
                           [--json] [--quiet] [--vaultd PATH] [--vaultctl PATH]
                           [--only lookup,writes,prefs,process,startup,floor,keyring,ss]
                           [--cache-dir DIR | --no-cache]

        Starts its own vaultd in a temporary directory (found next to this executable, or
        --vaultd) and measures lookups, durable adds/updates/deletes, preferences, start-up
        and RSS; with --compare-keyring, also gnome-keyring-daemon (through libsecret) on a
        private dbus-run-session bus, secret-tool, and dconf when dconf-cli is installed. The
        floor is a bare AF_UNIX round trip of the lookup's request and reply sizes.

        The Secret Service workloads (ss-*) look up, store and clear through libsecret
        against vaultd --secret-service on a private bus of its own, at each --ss-items count
        (default 1000), and against gnome-keyring with --compare-keyring; ss-ping is the
        bus's round trip to the provider (Peer.Ping), their floor.

        Filled vaults (per item count) and keyrings are cached in --cache-dir (default
        $XDG_CACHE_HOME/vault-bench) and copied for each run; --no-cache fills from scratch.
        A vault is cached per vault-bench file (vaultd knows a rebuilt one as another program).
        A 10,000-item keyring takes about 40 minutes to build the first time.
        --json prints the results as JSON on stdout instead of the tables.
        """

    struct UsageError: Error, CustomStringConvertible { var description: String }

    static func parse(_ arguments: [String]) throws -> Options {
        var o = Options()
        var i = 0
        func value(_ name: String) throws -> String {
            guard i + 1 < arguments.count else {
                throw UsageError(description: "\(name) needs a value")
            }
            i += 1
            return arguments[i]
        }
        func list(_ name: String) throws -> [Int] {
            let v = try value(name)
            let parts = v.split(separator: ",").map { Int($0.trimmingCharacters(in: .whitespaces)) }
            guard !parts.isEmpty, parts.allSatisfy({ ($0 ?? 0) > 0 }) else {
                throw UsageError(
                    description: "\(name) takes positive integers separated by commas, not '\(v)'")
            }
            return parts.map { $0! }
        }
        func int(_ name: String, minimum: Int = 1) throws -> Int {
            let v = try value(name)
            guard let n = Int(v), n >= minimum else {
                throw UsageError(description: "\(name) takes an integer ≥ \(minimum), not '\(v)'")
            }
            return n
        }
        func double(_ name: String) throws -> Double {
            let v = try value(name)
            guard let d = Double(v), d.isFinite, d >= 0 else {
                throw UsageError(description: "\(name) takes a number of seconds, not '\(v)'")
            }
            return d
        }
        while i < arguments.count {
            let a = arguments[i]
            switch a {
            case "-h", "--help": throw UsageError(description: "")
            case "--items": o.items = Array(Set(try list(a))).sorted()
            case "--clients": o.clients = Array(Set(try list(a))).sorted()
            case "--write-clients": o.writeClients = Array(Set(try list(a))).sorted()
            case "--seconds": o.seconds = max(0.01, try double(a))
            case "--warmup": o.warmup = try double(a)
            case "--reps", "--repetitions": o.repetitions = try int(a)
            case "--secret-size": o.secretSize = try int(a)
            case "--process-runs": o.processRuns = try int(a)
            case "--startup-runs": o.startupRuns = try int(a)
            case "--ss-items": o.ssItems = Array(Set(try list(a))).sorted()
            case "--compare-keyring": o.compareKeyring = true
            case "--keyring-items": o.keyringItems = try int(a)
            case "--json": o.json = true
            case "--quiet": o.verbose = false
            case "--only":
                let v = try value(a)
                let parts = Set(v.split(separator: ",").map(String.init))
                guard !parts.isEmpty, parts.isSubset(of: parts.union(Options.parts)),
                    parts.isSubset(of: Options.parts)
                else {
                    throw UsageError(
                        description:
                            "--only takes some of \(Options.parts.sorted().joined(separator: ",")), not '\(v)'"
                    )
                }
                o.only = parts
            case "--vaultd": o.vaultdPath = try value(a)
            case "--vaultctl": o.vaultctlPath = try value(a)
            case "--cache-dir": o.cacheDirectory = try value(a)
            case "--no-cache": o.useCache = false
            case "--inner-keyring": o.innerKeyringResults = try value(a)
            case "--keyring-have": o.keyringHave = try int(a, minimum: 0)
            case "--inner-ss": o.innerSecretServiceResults = try value(a)
            case "--ss-system": o.ssSystem = try value(a)
            case "--ss-count": o.ssCount = try int(a)
            case "--pid-file": o.pidFile = try value(a)
            case "--echo-server":
                let path = try value(a)
                let request = try int(a)
                let reply = try int(a)
                o.echoServer = (path, request, reply)
            default: throw UsageError(description: "unknown argument '\(a)'")
            }
            i += 1
        }
        return o
    }

    /// The flags that reproduce the measurement settings (for the inner keyring run).
    var measurementArguments: [String] {
        func joined(_ l: [Int]) -> String { l.map(String.init).joined(separator: ",") }
        var a: [String] = ["--clients", joined(clients), "--write-clients", joined(writeClients)]
        a += [
            "--seconds", String(seconds), "--warmup", String(warmup), "--reps", String(repetitions),
        ]
        a += [
            "--secret-size", String(secretSize), "--process-runs", String(processRuns),
            "--keyring-items", String(keyringItems),
        ]
        if !verbose { a.append("--quiet") }
        if useCache { a += ["--cache-dir", cacheRoot] } else { a.append("--no-cache") }
        return a
    }

    /// The cache root: --cache-dir, else $XDG_CACHE_HOME/vault-bench, else ~/.cache/vault-bench.
    var cacheRoot: String {
        if let d = cacheDirectory { return d }
        let env = ProcessInfo.processInfo.environment
        if let x = env["XDG_CACHE_HOME"], !x.isEmpty { return x + "/vault-bench" }
        return (env["HOME"] ?? NSHomeDirectory()) + "/.cache/vault-bench"
    }
}

/// Progress on stderr (never on stdout, which may carry the JSON).
func progress(_ message: String) {
    guard Bench.verbose else { return }
    FileHandle.standardError.write(Data("vault-bench: \(message)\n".utf8))
}

func warn(_ message: String) {
    FileHandle.standardError.write(Data("vault-bench: \(message)\n".utf8))
}
