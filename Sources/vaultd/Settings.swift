import Foundation
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Settings from the optional `config.plist` (XML or binary; docs/configuration.md). Keys:
/// - `AutoLockSeconds` (a number of seconds): lock after this long without a call; 0 = never (default).
///   Hello, Status and org.varlink.service calls only look and do not count.
/// - `CacheFreeLowWaterBytes`, `CacheFreeHighWaterBytes` (integer): purge when free space on the
///   cache volume falls below the low mark, until it reaches the high mark (defaults: 5 % and
///   10 % of the volume; a default high mark is at least 5 % of the volume above the low one).
///   Free inodes count too: under 5 % of them free, until 10 %.
/// - `CacheBudgetBytes`, `CacheBudgetHighWaterBytes` (integer): purge when all caches exceed
///   the budget, until they take at most the high mark (default: no budget; 80 %).
/// - `CacheCheckIntervalSeconds` (real): how often the policy is checked (default 5).
/// - `UninstallGraceSeconds` (number): how long a registered app's executable may be absent
///   ("no such file") before the app counts as uninstalled (default 600; see
///   `AppSettings.uninstallGraceSeconds`).
/// - `MaximumAutoRegisteredApps` (integer): the most Flatpak apps registered on first
///   contact (default 256; see `AppSettings.maximumAutoRegisteredApps`).
/// - `AppStorageQuotaBytes` (integer): what each app may store in the items it adds and its
///   own preferences domain (default 64 MiB; 0 = no limit; the owner has none). Writes past
///   it are refused with QuotaExceeded. See `StorageQuota` for what counts.
/// - `SecretService` (boolean): serve the Secret Service on the session bus, as
///   `--secret-service` (default false). Read at start only.
/// - `SecretServicePromptTimeoutSeconds` (number): how long a Secret Service prompt waits
///   for the vault's unlock before it is dismissed (default 60); a dialog of vaultd's own
///   prompter ends by then too.
/// - `Prompter` (string): who asks the user: `auto` (default), `gcr`, `pinentry`, `agent` or
///   `none` (`PromptDialogs.choose`).
/// - `SecretAccess` (string): what happens when a program asks for the secret of an item
///   another program created (docs/access.md): `open` (every program of the owner's reads
///   every secret), `confirm` (the user is asked through the prompter) or `strict` (denied
///   unless granted). Unset: the vault's own default, `confirm` for a vault initialised
///   with this vaultd, `open` for one made before (`SecretAccessMode`).
/// - `PinentryProgram` (string): the pinentry run when pinentry asks: a path, or a name
///   looked up in PATH (default `pinentry`, the system's choice).
/// - `DeviceKeyTPM` (string): where the device key is kept: `auto` (default: sealed by the
///   system's TPM when `/dev/tpmrm0` exists, else a file), `none` (a file), or a tpm2-tss
///   TCTI string naming the TPM (`device:/dev/tpmrm0`, `swtpm:host=127.0.0.1,port=2321`).
///   Read at start only (`DeviceKey`).
/// - `PresenceGraceSeconds` (number): how long a process that proved user presence is not
///   asked again (default 10; 0 = every time; `PresenceGate`).
/// - `PresenceTimeoutSeconds` (number): how long a presence check waits for the user
///   before polkit's check is cancelled (default 45, under the clients' 60 s reply timeout;
///   at most 3600; `PolkitPresence`).
/// - `LogLevel` (string): the least important lines logged: `error`, `warning`, `notice`,
///   `info` (default) or `debug` (`LogLevel`). Read at start and at SIGHUP.
struct Settings {
    var autoLockSeconds: Double = 0
    var uninstallGraceSeconds: Double = 600
    var maximumAutoRegisteredApps = 256
    var appStorageQuota: Int64 = StorageQuota.defaultBytes
    var cachePolicy = CachePolicy()
    var cacheCheckInterval: Double = 5
    var secretService = false
    var secretServicePromptTimeout: Double = 60
    var deviceKeyTPM: DeviceKeyTPM = .auto
    var prompter: PromptDialogs.Setting = .auto
    var pinentryProgram = "pinentry"
    var presenceGraceSeconds: Double = 10
    var presenceTimeoutSeconds: Double = 45
    var logLevel: LogLevel = .info
    /// nil: the vault's own default.
    var secretAccess: SecretAccessMode?
    /// Keys of the file that name no setting (a misspelt `AutoLockSecs`, say): ignored, and
    /// named in the log at start and at SIGHUP (`unknownKeysMessage`), so a setting that
    /// does not take effect is seen.
    var unknownKeys: [String] = []

    /// Every key `load` reads.
    static let knownKeys: [String] = [
        "AutoLockSeconds", "CacheCheckIntervalSeconds", "UninstallGraceSeconds",
        "MaximumAutoRegisteredApps",
        "AppStorageQuotaBytes", "CacheFreeLowWaterBytes", "CacheFreeHighWaterBytes",
        "CacheBudgetBytes",
        "CacheBudgetHighWaterBytes", "SecretService", "SecretServicePromptTimeoutSeconds",
        "DeviceKeyTPM",
        "Prompter", "PinentryProgram", "PresenceGraceSeconds", "PresenceTimeoutSeconds",
        "SecretAccess", "LogLevel",
    ]

    /// The largest config file read (bytes).
    static let maximumFileSize = 1 << 20

    /// The largest number of seconds a setting takes (about 31 years): timers take it in
    /// nanoseconds as an Int64.
    static let maximumSeconds: Double = 1_000_000_000
    /// The largest number of bytes a setting takes (4 EiB, within Int64).
    static let maximumBytes: Double = 4_611_686_018_427_387_904

    /// Reads `path`; an absent file gives the defaults, unless it was named (`explicit`).
    /// Throws `StartupError` for a file that cannot be read (a directory, no permission) or
    /// is not a property-list dictionary or holds a wrong type.
    static func load(_ path: String?, explicit: Bool = false) throws -> Settings {
        var s = Settings()
        guard let path else { return s }
        func unreadable(_ code: Int32) -> StartupError {
            StartupError(
                description:
                    "cannot read the config file \(path): \(String(cString: strerror(code)))")
        }
        let data: Data
        do {
            // A settings file is a few hundred bytes: `--config /dev/zero` (or a log file named
            // by mistake) must not be read for ever.
            data = try FileDescriptor.readFile(path, limit: Self.maximumFileSize)
        } catch let e as Errno {
            if e.code == Errno.notFound && e.call == "open" && !explicit { return s }
            throw unreadable(e.code)
        }
        guard case .dict(let d) = try PropertyListCodec.decode(data) else {
            throw StartupError(description: "\(path): the root must be a dictionary")
        }
        // A number from 0 to `limit`: a negative budget purged every cache at each check, and
        // a value past Int64 (bytes) or past what a timer takes (seconds), such as 1e30, made
        // vaultd crash on a conversion trap at start or at the SIGHUP that read it. NaN fails
        // the range check too.
        func number(_ key: String, atMost limit: Double) throws -> Double? {
            let value: Double
            switch d[key] {
            case nil: return nil
            case .integer(let i)?: value = Double(i)
            case .real(let r)?: value = r
            default: throw StartupError(description: "\(path): \(key) must be a number")
            }
            guard value >= 0 && value <= limit else {
                throw StartupError(
                    description: "\(path): \(key) must be a number from 0 to \(Int64(limit))")
            }
            return value
        }
        func seconds(_ key: String) throws -> Double? {
            try number(key, atMost: Self.maximumSeconds)
        }
        func bytes(_ key: String) throws -> Int64? {
            try number(key, atMost: Self.maximumBytes).map { Int64($0) }
        }
        s.autoLockSeconds = try seconds("AutoLockSeconds") ?? 0
        s.cacheCheckInterval = max(0.2, try seconds("CacheCheckIntervalSeconds") ?? 5)
        s.uninstallGraceSeconds = try seconds("UninstallGraceSeconds") ?? 600
        s.maximumAutoRegisteredApps = Int(
            try number("MaximumAutoRegisteredApps", atMost: 1_000_000) ?? 256)
        s.appStorageQuota = try bytes("AppStorageQuotaBytes") ?? StorageQuota.defaultBytes
        switch d["SecretService"] {
        case nil: break
        case .bool(let b)?: s.secretService = b
        default: throw StartupError(description: "\(path): SecretService must be a boolean")
        }
        s.secretServicePromptTimeout = try seconds("SecretServicePromptTimeoutSeconds") ?? 60
        s.presenceGraceSeconds = try number("PresenceGraceSeconds", atMost: 86400) ?? 10
        s.presenceTimeoutSeconds = max(1, try number("PresenceTimeoutSeconds", atMost: 3600) ?? 45)
        try s.loadNamedValues(d, path: path)
        s.cachePolicy = CachePolicy(
            freeLowWater: try bytes("CacheFreeLowWaterBytes"),
            freeHighWater: try bytes("CacheFreeHighWaterBytes"),
            budget: try bytes("CacheBudgetBytes"),
            budgetHighWater: try bytes("CacheBudgetHighWaterBytes"))
        // Compared byte for byte, as the lookups above compare them.
        s.unknownKeys = d.keys.filter { k in
            !Self.knownKeys.contains { $0.utf8.elementsEqual(k.utf8) }
        }.sorted()
        return s
    }

    /// Reads the settings whose values are names (`load`, from the file at `path`, whose
    /// dictionary is `d`): DeviceKeyTPM, Prompter, PinentryProgram, SecretAccess and LogLevel.
    private mutating func loadNamedValues(_ d: PlistDictionary, path: String) throws {
        switch d["DeviceKeyTPM"] {
        case nil: break
        case .string(let t)?:
            guard let v = DeviceKeyTPM(setting: t) else {
                throw StartupError(
                    description:
                        "\(path): DeviceKeyTPM must be auto, none or a TCTI string such as device:/dev/tpmrm0 (printable ASCII, at most 256 bytes)"
                )
            }
            deviceKeyTPM = v
        default: throw StartupError(description: "\(path): DeviceKeyTPM must be a string")
        }
        switch d["Prompter"] {
        case nil: break
        case .string(let v)? where PromptDialogs.Setting(rawValue: v) != nil:
            prompter = PromptDialogs.Setting(rawValue: v)!
        default:
            throw StartupError(
                description:
                    "\(path): Prompter must be one of \(PromptDialogs.Setting.allCases.map(\.rawValue).joined(separator: ", "))"
            )
        }
        switch d["PinentryProgram"] {
        case nil: break
        case .string(let v)? where !v.isEmpty && v.utf8.count <= 4096 && !v.utf8.contains(0):
            pinentryProgram = v
        default:
            throw StartupError(
                description: "\(path): PinentryProgram must be a program's name or path")
        }
        switch d["SecretAccess"] {
        case nil: break
        case .string(let v)? where SecretAccessMode(rawValue: v) != nil:
            secretAccess = SecretAccessMode(rawValue: v)!
        default:
            throw StartupError(description: "\(path): SecretAccess must be open, confirm or strict")
        }
        switch d["LogLevel"] {
        case nil: break
        case .string(let v)? where LogLevel(name: v) != nil:
            logLevel = LogLevel(name: v)!
        default:
            throw StartupError(
                description:
                    "\(path): LogLevel must be one of \(LogLevel.allCases.map(\.name).joined(separator: ", "))"
            )
        }
    }

    /// Logs the settings in force that say how vaultd behaves, at debug level (at start and
    /// after a reload): fields, in the file's names.
    func logInForce(_ logger: Logger) {
        logger.debug(
            "settings in force",
            [
                "LogLevel": logLevel.name, "AutoLockSeconds": autoLockSeconds,
                "SecretService": secretService, "Prompter": prompter.rawValue,
                "SecretAccess": secretAccess?.rawValue ?? "the vault's",
                "AppStorageQuotaBytes": appStorageQuota,
            ])
    }

    /// The log line naming `unknownKeys` (each with the setting it is closest to, when one is
    /// within three edits or differs only in case), or nil when every key is known. At most
    /// 20 keys are named, each escaped and bounded (`logField`): the file is the user's, but
    /// it may be anything.
    func unknownKeysMessage(_ path: String) -> String? {
        guard !unknownKeys.isEmpty else { return nil }
        let named = unknownKeys.prefix(20).map { key -> String in
            let guess = Self.knownKeys.min {
                Self.editDistance(key, $0) < Self.editDistance(key, $1)
            }
            if let guess,
                key.lowercased() == guess.lowercased() || Self.editDistance(key, guess) <= 3
            {
                return "\(logField(key)) (did you mean \(guess)?)"
            }
            return logField(key)
        }
        let more = unknownKeys.count > 20 ? " and \(unknownKeys.count - 20) more" : ""
        return
            "\(logField(path)): ignored \(unknownKeys.count == 1 ? "a key that is no setting" : "keys that are no settings"): \(named.joined(separator: ", "))\(more)"
    }

    /// Levenshtein distance over Unicode scalars, for suggestions only (keys of at most 64
    /// scalars are compared; a longer one is no near miss).
    static func editDistance(_ a: String, _ b: String) -> Int {
        let x = Array(a.unicodeScalars)
        let y = Array(b.unicodeScalars)
        guard x.count <= 64, y.count <= 64 else { return Int.max }
        guard !x.isEmpty, !y.isEmpty else { return max(x.count, y.count) }
        var previous = Array(0...y.count)
        for i in 1...x.count {
            var current = [i] + [Int](repeating: 0, count: y.count)
            for j in 1...y.count {
                current[j] = min(
                    previous[j] + 1, current[j - 1] + 1,
                    previous[j - 1] + (x[i - 1] == y[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return previous[y.count]
    }

    /// Puts the settings the engine reads into force.
    func apply(to vault: Vault) {
        vault.appSettings.uninstallGraceSeconds = uninstallGraceSeconds
        vault.appSettings.maximumAutoRegisteredApps = maximumAutoRegisteredApps
        vault.quota.bytesPerApp = appStorageQuota
        vault.presence.setGrace(seconds: Int(presenceGraceSeconds))
        vault.presence.verifier = PolkitPresence(timeout: presenceTimeoutSeconds)
        // The tests' mode (debug builds only; refused at start otherwise: `TestSecretAccess`).
        let testMode = try? TestSecretAccess.mode(from: ProcessInfo.processInfo.environment)
        vault.accessGate.configuredMode = secretAccess ?? testMode
        vault.accessGate.timeout = secretServicePromptTimeout
    }
}
