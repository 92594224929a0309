import Foundation
import VaultClient
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

// vaultctl: the vault's command line, for people and scripts. Exit statuses: `ExitCode` (a
// usage error prints the reason, then that command's usage lines). Secrets are read from fds,
// stdin or a prompt, never from argv (`Terminal.read`).

let toolUsage = """
    usage: vaultctl [--socket PATH] COMMAND ...

    Vault:
      status [--json]                       lock state and figures
      init [--no-passphrase | --passphrase-fd N]
      unlock [--passphrase-fd N] [--remember]   --remember: keep it in the login keyring
      unlock --from-keyring                 vaultd unlocks with the remembered passphrase
      unlock --recovery-key-fd N            with the recovery key (forgotten passphrase)
      forget                                remove the remembered passphrase
      lock
      passphrase change --passphrase-fd N --new-passphrase-fd M
      passphrase set --new-passphrase-fd M
      passphrase remove --passphrase-fd N
      passphrase reset --recovery-key-fd N --new-passphrase-fd M
        a forgotten passphrase replaced, the recovery key proving you may
      recovery-key create [--passphrase-fd N]   show a new recovery key once (replaces any)
      recovery-key remove                   the recovery key no longer opens the vault
      backup FILE [--passphrase-fd N | --recipient age1...]... [--include-device-bound] [--json]
        an age file (age -d opens it) of every item, preference and app; the backup passphrase
        is asked twice; ThisDeviceOnly items only with --include-device-bound (this device only)
      restore FILE [--passphrase-fd N | --identity KEYFILE] [--merge]
              [--new-passphrase-fd M | --no-passphrase] [--json]
        into a new vault (then its new passphrase), an empty one, or --merge: newer one wins
      doctor [--json]                       check the store: SQLite's integrity check, every item
                                            (damaged ones named; exit 1 when any)
    Keychain (CLASS is generic or internet, right after the verb; without it, internet when
        --server, --protocol, --port, --path, --authentication-type or --security-domain is
        given, else generic, and list lists both; --service is a generic password's only):
      item add [CLASS] ATTRIBUTES [--secret-fd N] [--update] [--allow-empty] [--raw] [--json]
        --update: replace the secret and given attributes of an item with that key (security -U)
      item get [CLASS] FILTERS [--json]                  prints the secret exactly (--json: attributes)
      item update [CLASS] FILTERS [--set-ATTRIBUTE V]... [--secret-fd N | --secret-stdin]
                  [--allow-empty] [--raw] [--yes] [--dry-run]
      item delete [CLASS] FILTERS [--yes] [--dry-run]   several matches: listed, asked (--yes: not)
      item list [CLASS] [FILTERS] [--json]
      ATTRIBUTES / FILTERS: --service --account --label --comment --description
        --access-group --accessible --synchronizable[=yes|no] --server --protocol --port --path
        --authentication-type --security-domain --generic TEXT --generic-base64 B64
        --require-presence: the secret only after you prove presence (polkit: your password,
          fingerprint or key); get exits 36 when not confirmed; not with --synchronizable
    Access (which programs may use which secrets; docs/access.md):
      access list [--json]                  the programs allowed, by item
      access grant [CLASS] --program PATH [--script PATH] FILTERS
        let that program (an interpreter: running that script) use the matching items' secrets;
        in SecretAccess confirm or strict, vaultd asks you in a dialog first
      access revoke [CLASS] [--program PATH [--script PATH]] [FILTERS]   ask again from now on
    Desktop keyring (Secret Service):
      keyring import --access-group G [--secret-service] [--collection NAME] [--dry-run] [--json]
      keyring export [CLASS] [FILTERS] [--all-groups] [--collection NAME] [--dry-run] [--json]
        NAME: an alias (default, login), a label or an object path; default: the default collection
        without --access-group or --all-groups: the owner's groups only (user, and those of no app)
    Import (from where secrets live today; docs/import.md):
      import gnome-keyring|keepassxc|pass|kwallet [PATH] [--access-group G] [--passphrase-fd N]
             [--key-file KEYFILE] [--dry-run] [--json]
        gnome-keyring: a keyring file, read offline (default: the login keyring's); keepassxc: a
        .kdbx database through keepassxc-cli; pass: a password store (default: ~/.password-store)
        through gpg; kwallet: a wallet exported as XML, or through kwallet-query. G: default user
    Apps:
      app install APP_ID --exe PATH [--access-group G]... [--app-group group.X]...
                  [--keep-credentials-on-reinstall]
      app uninstall APP_ID [--dry-run] | app show APP_ID [--json] | app list [--json]
    Caches:
      cache path APP_ID | cache usage [--json] | cache purge [APP_ID] [--bytes N] [--dry-run]
    Sync (synchronizable items between your devices, through a folder Syncthing replicates):
      sync init FOLDER                      make a sync group in FOLDER, on the first device
      sync join FOLDER                      ask to join the group in FOLDER; prints the pairing code
      sync approve CODE [--wait SECONDS]    on a device of the group: let the joining one in
                                            (waits up to 120 s for its request to arrive; 0: not)
      sync status [--json]                  devices, last seen, pending segments
      sync leave                            stop syncing on this device (its items stay)
      sync remove DEVICE                    on a device that stays: remove another, rotating the group key
      sync conflicts [--json] [--secrets]   values that lost to a concurrent edit (--secrets: show secrets)
      sync conflicts restore|dismiss ID     make a losing value current again, or drop it (syncs)
    Preferences (as defaults(1); DOMAIN may be -g for NSGlobalDomain, or -app NAME for an app's;
        -currentHost or -host NAME before the verb: that host's by-host preferences):
      defaults read [DOMAIN [KEY]] [--json]
      defaults read-type DOMAIN KEY
      defaults write DOMAIN KEY [-string|-int|-float|-bool|-date|-data] VALUE
                 (-float: a finite decimal number, e.g. 0.8, -2, 1e-3)
      defaults write DOMAIN KEY -array V... | -array-add V... | -dict K V... | -dict-add K V...
      defaults write DOMAIN '{ KEY = VALUE; ... }'   (the domain becomes this dictionary)
      defaults delete DOMAIN [KEY]
      defaults rename DOMAIN OLD NEW
      defaults domains [--json]
      defaults find WORD [--json]
      defaults import DOMAIN PATH|-
      defaults export DOMAIN PATH|-         (- writes XML to stdout; a path gets binary)
    Shell:
      completions bash|zsh|fish             the completion script for that shell
      --version                             vaultctl's version

    Secrets and passphrases: from the fd of --secret-fd / --passphrase-fd / --new-passphrase-fd,
        else stdin when it is not a terminal, else a prompt (a new one is asked twice). One final
        newline of fd or stdin input is removed (--raw: none); empty is refused (--allow-empty).
    Exit status: 0 ok, 1 other failure, 36 locked, 44 not found, 45 duplicate item, 64 usage,
        65 bad input, 69 vaultd not reachable, 77 not permitted

    Environment: VAULTD_SOCKET (default $XDG_RUNTIME_DIR/vaultd/vaultd.sock, else /tmp/vaultd-$UID/vaultd.sock)
                 VAULTCTL_TIMEOUT seconds each call may wait for vaultd (default VAULT_TIMEOUT, else 60,
                   and for ever for cache purge and app uninstall, which remove files one by one; 0: for ever)
                 VAULT_BUSY_POLL_US microseconds to poll for a reply before sleeping (default 200; 0: never)
    """

/// Connects on first use, so `--help` and usage errors need no daemon.
final class Context {
    let socketPath: String?
    private var connected: Vault?

    init(socketPath: String?) { self.socketPath = socketPath }

    /// Seconds each call may wait for vaultd: a stopped or hung vaultd still accepts the
    /// connection, and a script must not wait on it for ever (`VAULTCTL_TIMEOUT`, else
    /// VaultClient's `VAULT_TIMEOUT`; nil when neither is set). `checkTimeoutSetting`
    /// refuses one that is no number of seconds.
    static let configuredTimeout: Double? = {
        let env = ProcessInfo.processInfo.environment
        return (env["VAULTCTL_TIMEOUT"] ?? env["VAULT_TIMEOUT"]).flatMap(seconds)
    }()

    private static func seconds(_ text: String) -> Double? {
        guard let s = Double(text), s.isFinite, s >= 0 else { return nil }
        return s
    }

    /// Throws a UsageError for a `VAULTCTL_TIMEOUT` that is not a number of seconds ≥ 0: it
    /// fell back to 60 s without a word, so a script's `VAULTCTL_TIMEOUT=5s` waited 60.
    static func checkTimeoutSetting() throws {
        // An empty VAULT_TIMEOUT is unset, as VaultClient takes it; an empty VAULTCTL_TIMEOUT
        // is no number (as it always was).
        for name in ["VAULTCTL_TIMEOUT", "VAULT_TIMEOUT"] {
            if let v = ProcessInfo.processInfo.environment[name],
                name == "VAULTCTL_TIMEOUT" || !v.isEmpty, seconds(v) == nil
            {
                throw UsageError(
                    message:
                        "\(name) must be a number of seconds (0 or more; 0: for ever), not '\(v.prefix(20))'"
                )
            }
        }
    }
    /// 60 s by default (VaultClient's `defaultReplyTimeout`): more than an unlock's Argon2id
    /// or any call but those removing files.
    static let replyTimeout: Double = configuredTimeout ?? VaultConnection.defaultReplyTimeout

    /// For a call that removes files one by one (`cache purge`, `app uninstall`): hundreds
    /// of thousands of files can take minutes on a loaded machine, so it waits as long as
    /// that takes, unless `VAULTCTL_TIMEOUT` is set. The connection and its Hello keep the
    /// usual bound.
    func vaultForRemovingFiles() throws -> Vault {
        let v = try vault()
        v.connection.fileRemovalTimeout =
            ProcessInfo.processInfo.environment["VAULTCTL_TIMEOUT"].flatMap(Self.seconds) ?? 0
        return v
    }

    func vault() throws -> Vault {
        if let v = connected { return v }
        let v = try Vault.connect(socketPath: socketPath, replyTimeout: Self.replyTimeout)
        connected = v
        return v
    }
}

/// A command that reads a passphrase or a secret: a stray word on its command line may be
/// one, and its usage error does not repeat it (`Arguments.finish`).
protocol ReadsSecret {}
extension InitCommand: ReadsSecret {}
extension UnlockCommand: ReadsSecret {}
extension PassphraseCommand: ReadsSecret {}
extension RecoveryKeyCommand: ReadsSecret {}
extension BackupCommand: ReadsSecret {}
extension RestoreCommand: ReadsSecret {}
extension ItemCommand: ReadsSecret {}
extension ImportCommand: ReadsSecret {}

/// A subcommand: parses and validates its arguments in `init`, acts in `run`.
protocol Command {
    init(_ arguments: inout Arguments) throws
    func run(_ context: Context) throws
}

/// The usage lines of `command` (those that begin with it, with the lines indented under
/// them); none when no usage line begins with that word.
func usageLines(of command: String?) -> [Substring] {
    var lines: [Substring] = []
    var within = false
    for line in toolUsage.split(separator: "\n") {
        let text = line.drop { $0 == " " }
        let indent = line.count - text.count
        // (A line at the commands' indent in capitals, ATTRIBUTES / FILTERS, explains the ones above.)
        if indent < 2 || (indent == 2 && text.first?.isLowercase == true) {
            within = indent == 2 && command.map { text == $0 || text.hasPrefix($0 + " ") } == true
        }
        if within { lines.append(line) }
    }
    return lines
}

/// What a usage error prints after its message: the usage lines of `command`, or the synopsis
/// when no command was recognised, and where the rest is. The whole text would bury the one
/// line that says what is wrong.
func usage(of command: String?) -> String {
    let lines = usageLines(of: command)
    let synopsis =
        lines.isEmpty
        ? "usage: vaultctl [--socket PATH] COMMAND ...\n"
        : "usage:\n" + lines.joined(separator: "\n") + "\n"
    return synopsis + "Run 'vaultctl --help' for every command."
}

func printError(_ message: String) {
    StandardOutput.writeError("vaultctl: \(message)\n")
}

func parseCommand(_ args: inout Arguments) throws -> Command {
    guard let word = args.positional() else { throw UsageError(message: "a command is needed") }
    switch word {
    case "status": return try StatusCommand(&args)
    case "init": return try InitCommand(&args)
    case "unlock": return try UnlockCommand(&args)
    case "lock": return try LockCommand(&args)
    case "forget": return try ForgetCommand(&args)
    case "keyring": return try KeyringCommand(&args)
    case "import": return try ImportCommand(&args)
    case "passphrase": return try PassphraseCommand(&args)
    case "recovery-key": return try RecoveryKeyCommand(&args)
    case "backup": return try BackupCommand(&args)
    case "restore": return try RestoreCommand(&args)
    case "doctor": return try DoctorCommand(&args)
    case "item": return try ItemCommand(&args)
    case "defaults": return try DefaultsCommand(&args)
    case "app": return try AppCommand(&args)
    case "access": return try AccessCommand(&args)
    case "cache": return try CacheCommand(&args)
    case "sync": return try SyncCommand(&args)
    case "completions": return try CompletionsCommand(&args)
    case CompleteCommand.name: return try CompleteCommand(&args)
    default:
        let hint =
            Arguments.closest(to: word, among: CommandTable.parse(toolUsage).commands).map {
                " (did you mean \($0)?)"
            } ?? ""
        throw UsageError(message: "unknown command '\(word)'\(hint)")
    }
}

// Neither a core file nor a crash report holds the passphrase or secret this process holds.
// (Not non-dumpable like vaultd: vaultd identifies a peer through its /proc/PID/exe, which a
// non-dumpable process hides from a vaultd that is not root.)
CrashOutput.keepSecretsOut()
StandardOutput.occupyClosedDescriptors()

var arguments = Arguments(Array(CommandLine.arguments.dropFirst()))
/// Whether the command line is being parsed (a usage error then may come from a mistyped option).
var parsing = false
if arguments.words.first == "--help" || arguments.words.first == "-h"
    || arguments.words.first == "help"
{
    print(toolUsage)
    StandardOutput.exit(0, program: "vaultctl")
}
if arguments.words == ["--version"] || arguments.words == ["-V"] {
    print("vaultctl \(VaultVersion.current)")
    StandardOutput.exit(0, program: "vaultctl")
}
// `vaultctl item add --help`: that command's usage lines (as `git commit --help` gives its own).
let optionWords = arguments.words.prefix { $0 != "--" }
if optionWords.contains("--help"),
    let named = optionWords.first(where: { !$0.hasPrefix("-") && !usageLines(of: $0).isEmpty })
{
    print(usage(of: named))
    StandardOutput.exit(0, program: "vaultctl")
}
do {
    try Context.checkTimeoutSetting()
    let socket = try arguments.option("--socket")
    // `--socket "$DIR/s"` with DIR unset is "/s"; with the whole value unset, "": no path.
    if socket?.isEmpty == true {
        throw UsageError(message: "--socket needs a value (a socket path)")
    }
    parsing = true
    let command = try parseCommand(&arguments)
    try arguments.finish(showingWords: !(command is ReadsSecret))
    parsing = false
    try command.run(Context(socketPath: socket))
    StandardOutput.exit(0, program: "vaultctl")
} catch var e as UsageError {
    // The command: the first word with usage lines of its own ("lock" has no argument after it).
    let named = CommandLine.arguments.dropFirst().first {
        !$0.hasPrefix("-") && !usageLines(of: $0).isEmpty
    }
    // A mistyped option (`item get --servce x`) leaves the command without what it needs ("needs
    // at least one filter"): the option no usage line names is the reason given, with the one
    // meant. A command reading a secret names only a word shaped like an option's name.
    if parsing,
        let unknown = arguments.unknownOption(
            showingWords: ![
                "init", "unlock", "passphrase", "recovery-key", "backup", "restore", "item",
                "import",
            ].contains(
                named ?? ""),
            knownOptions: CommandTable.parse(toolUsage).allOptions)
    {
        e = unknown
    }
    printError("\(e.message)\n\(usage(of: named))")
    StandardOutput.exit(ExitCode.usage.rawValue, program: "vaultctl")
} catch let e as VaultError {
    // The varlink error, its message, and the Keychain Services OSStatus where one applies.
    printError(e.status.map { "\(e.description) (OSStatus \($0))" } ?? e.description)
    StandardOutput.exit(ExitCode(e).rawValue, program: "vaultctl")
} catch let e as ImportFailure {
    printError("import: \(e.description)")
    StandardOutput.exit(ExitCode.failure.rawValue, program: "vaultctl")
} catch let e as KeyringFailure {
    printError(e.description)
    StandardOutput.exit(e.exitCode.rawValue, program: "vaultctl")
} catch let e as InputError {
    printError(e.message)
    StandardOutput.exit(ExitCode.badInput.rawValue, program: "vaultctl")
} catch {
    printError("\(error)")
    StandardOutput.exit(ExitCode.failure.rawValue, program: "vaultctl")
}
