import Foundation
import VaultClient
import VaultProtocol

/// vaultctl's commands, verbs and options as its usage text lists them: what the shell
/// completions are generated from, so they cannot list a command the usage does not or miss
/// one it does.
struct CommandTable {
    struct Entry {
        var command: String
        /// nil for a command without verbs (`status`, `init`).
        var verb: String?
        var options: [String]
        /// Words completed where an argument goes (`generic`, `internet`; `bash`, `zsh`, `fish`).
        var words: [String] = []
    }
    var entries: [Entry] = []

    /// Options every command takes, before the command.
    static let globalOptions = ["--socket", "--help", "--version"]

    var commands: [String] {
        var seen: [String] = []
        for e in entries where !seen.contains(e.command) { seen.append(e.command) }
        return seen
    }

    func verbs(of command: String) -> [String] {
        var seen: [String] = []
        for e in entries where e.command == command {
            if let v = e.verb, !seen.contains(v) { seen.append(v) }
        }
        return seen
    }

    /// Every option and word of `command` (and `verb`), in their order of first appearance.
    func completions(_ command: String, _ verb: String?) -> [String] {
        var out: [String] = []
        for e in entries where e.command == command && e.verb == verb {
            for w in e.words + e.options where !out.contains(w) { out.append(w) }
        }
        return out
    }

    /// The item attributes' options, which `--set-ATTRIBUTE` stands for.
    static var attributeNames: [String] {
        ItemCommand.stringOptions.map { "--" + $0.0 } + [
            "--accessible", "--port", "--synchronizable", "--generic", "--generic-base64",
            "--require-presence",
        ]
    }

    /// The options `text` names, each once, in order; `--set-ATTRIBUTE` as each attribute's.
    static func options(_ text: Substring) -> [String] {
        var out: [String] = []
        for m in text.matches(of: #/--[a-z][a-z0-9-]*(?:[A-Z]+)?/#) {
            let o = String(m.output)
            // `--set-ATTRIBUTE`: each attribute option with that prefix.
            if o.hasSuffix("-ATTRIBUTE") {
                out += attributeNames.map { "--set-" + $0.dropFirst(2) }
            } else if !out.contains(o) {
                out.append(o)
            }
        }
        return out
    }

    /// Reads the table from a usage text: a line at indent 2 beginning with a lowercase word
    /// starts a command (`command verb ...`, or alternatives joined by " | "), lines indented
    /// deeper continue it, and the `ATTRIBUTES / FILTERS:` block gives the options of every
    /// command line that names ATTRIBUTES or FILTERS.
    static func parse(_ usage: String) -> CommandTable {
        var table = CommandTable()
        var attributeOptions: [String] = []
        var takesAttributes: [Int] = []
        var current: Int?
        var inAttributes = false
        for line in usage.split(separator: "\n") {
            let text = line.drop { $0 == " " }
            let indent = line.count - text.count
            if indent < 2 {
                current = nil
                inAttributes = false
                continue
            }
            if indent == 2 && text.hasPrefix("ATTRIBUTES / FILTERS:") {
                inAttributes = true
                current = nil
                attributeOptions += options(text)
                continue
            }
            if indent == 2, let first = text.first, first.isLowercase {
                inAttributes = false
                // A comment after two or more spaces is not part of the synopsis.
                let synopsis =
                    text.components(separatedBy: "   ").first.map { Substring($0) } ?? text
                for alternative in synopsis.components(separatedBy: " | ") {
                    let words = alternative.split(separator: " ")
                    guard let w0 = words.first, w0.first?.isLowercase == true else {
                        if let c = current {
                            table.entries[c].options += options(Substring(alternative))
                        }
                        continue
                    }
                    var verb: String?
                    var rest = words.dropFirst()
                    var argumentWords: [String] = []
                    if let w1 = rest.first, w1.first?.isLowercase == true,
                        w1.allSatisfy({ $0.isLowercase || $0 == "-" })
                    {
                        verb = String(w1)
                        rest = rest.dropFirst()
                    } else if let w1 = rest.first, w1.contains("|"), !w1.hasPrefix("-"),
                        !w1.hasPrefix("[")
                    {
                        // `completions bash|zsh|fish`
                        argumentWords = w1.split(separator: "|").map(String.init)
                        rest = rest.dropFirst()
                    }
                    if rest.contains("[CLASS]") { argumentWords += ["generic", "internet"] }
                    table.entries.append(
                        Entry(
                            command: String(w0), verb: verb,
                            options: options(rest.joined(separator: " ")[...]), words: argumentWords
                        ))
                    current = table.entries.count - 1
                    if alternative.contains("ATTRIBUTES") || alternative.contains("FILTERS") {
                        takesAttributes.append(current!)
                    }
                }
                continue
            }
            if inAttributes {
                attributeOptions += options(text)
            } else if let c = current, indent > 2 {
                table.entries[c].options += options(
                    text.components(separatedBy: ":").first.map { Substring($0) } ?? text)
            }
        }
        for i in takesAttributes {
            for o in attributeOptions where !table.entries[i].options.contains(o) {
                table.entries[i].options.append(o)
            }
        }
        table.addDefaultsTypeFlags()
        return table
    }

    /// `defaults write` takes single-dash type flags, as defaults(1).
    mutating func addDefaultsTypeFlags() {
        for i in entries.indices
        where entries[i].command == "defaults" && entries[i].verb == "write" {
            entries[i].words = [
                "-string", "-int", "-float", "-bool", "-date", "-data", "-array", "-array-add",
                "-dict", "-dict-add",
            ]
        }
    }

    /// Every option some usage line names, and the global ones.
    var allOptions: Set<String> {
        Set(entries.flatMap { $0.options.filter { $0.hasPrefix("--") } } + Self.globalOptions)
    }

    /// The commands that take a verb after them.
    var commandsWithVerbs: [String] { commands.filter { !verbs(of: $0).isEmpty } }

    /// Each `COMMAND/VERB` pattern the bash and zsh scripts match (`/`: no command yet;
    /// `COMMAND/`: no verb yet), in order, with the words completed there.
    var completionCases: [(pattern: String, words: [String])] {
        var cases = [(pattern: "/", words: commands + Self.globalOptions)]
        for c in commands {
            let vs = verbs(of: c)
            if vs.isEmpty {
                cases.append(("\(c)/", completions(c, nil)))
            } else {
                cases.append(("\(c)/", vs))
                for v in vs { cases.append(("\(c)/\(v)", completions(c, v))) }
            }
        }
        return cases
    }

    // MARK: names from vaultd

    /// Options whose value is a name vaultd knows, and which (`vaultctl __complete KIND`).
    var dynamicOptions: [(option: String, kind: String)] {
        [
            ("--service", "services"), ("--set-service", "services"), ("--server", "servers"),
            ("--set-server", "servers"), ("-app", "apps"),
        ]
    }

    /// The `COMMAND/VERB` patterns whose first argument is a name vaultd knows, and which.
    var dynamicArguments: [(pattern: String, kind: String)] {
        var out: [(String, String)] = []
        for v in verbs(of: "defaults") where v != "domains" && v != "find" {
            out.append(("defaults/\(v)", "domains"))
        }
        for v in verbs(of: "app") where v != "install" && v != "list" {
            out.append(("app/\(v)", "apps"))
        }
        for v in verbs(of: "cache") where v != "usage" { out.append(("cache/\(v)", "apps")) }
        return out
    }

    /// The shell command that prints names of `kind` from the vaultd the command line names
    /// (`--socket`), and nothing on any failure.
    static func names(_ kind: String, shell: String) -> String {
        shell == "zsh"
            ? "${(f)\"$($exe ${socket:+--socket \"$socket\"} __complete \(kind) 2>/dev/null)\"}"
            : "$(\"${COMP_WORDS[0]}\" ${socket:+--socket \"$socket\"} __complete \(kind) 2>/dev/null)"
    }

    /// `case` branches (bash, zsh) setting `names` after an option that takes a name.
    func dynamicOptionCases(shell: String) -> String {
        let byKind = Dictionary(grouping: dynamicOptions, by: { $0.kind })
        return byKind.keys.sorted().map { k in
            let patterns = byKind[k]!.map { $0.option }.joined(separator: "|")
            return shell == "zsh"
                ? "        (\(patterns)) dynamic=1; names=(\(Self.names(k, shell: shell))) ;;\n"
                : "        \(patterns)) dynamic=1; names=\(Self.names(k, shell: shell)) ;;\n"
        }.joined()
    }

    /// `case` branches (bash, zsh) setting `names` where a command's first argument is a name.
    func dynamicArgumentCases(shell: String) -> String {
        let byKind = Dictionary(grouping: dynamicArguments, by: { $0.kind })
        return byKind.keys.sorted().map { k in
            let patterns = byKind[k]!.map { $0.pattern }.joined(separator: "|")
            return shell == "zsh"
                ? "                    (\(patterns)) dynamic=1; names=(\(Self.names(k, shell: shell))) ;;\n"
                : "                    \(patterns)) dynamic=1; names=\(Self.names(k, shell: shell)) ;;\n"
        }.joined()
    }

    // MARK: scripts

    /// Words as a shell word list.
    private func list(_ words: [String]) -> String { words.joined(separator: " ") }

    func bash() -> String {
        let cases = completionCases.map {
            "        \($0.pattern)) words=\"\(list($0.words))\" ;;\n"
        }.joined()
        return """
            # bash completion for vaultctl (generated by `vaultctl completions bash`)
            _vaultctl() {
                local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd= verb= i w words= socket= args=0 names= dynamic=
                for ((i = 1; i < COMP_CWORD; i++)); do
                    w=${COMP_WORDS[i]}
                    [[ ${COMP_WORDS[i-1]} == --socket ]] && socket=$w
                    [[ $w == -* || ${COMP_WORDS[i-1]} == --socket || ${COMP_WORDS[i-1]} == -app ]] && continue
                    if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $verb ]]; then verb=$w; else ((args++)); fi
                done
                case $cmd in
                    \(list(commandsWithVerbs).replacingOccurrences(of: " ", with: "|"))) ;;
                    *) verb= ;;
                esac
                case $cmd/$verb in
            \(cases)    esac
                # Names from the running vaultd (none when it does not run): after an option
                # that takes one, or where a command's first argument is one.
                case $prev in
            \(dynamicOptionCases(shell: "bash"))        *)
                        if [[ $cur != -* && $args == 0 ]]; then
                            case $cmd/$verb in
            \(dynamicArgumentCases(shell: "bash"))                esac
                        fi ;;
                esac
                if [[ $prev == --socket ]]; then
                    COMPREPLY=($(compgen -f -- "$cur"))
                elif [[ -n $dynamic ]]; then
                    local IFS=$'\\n'
                    COMPREPLY=($(compgen -W "$names" -- "$cur"))
                else
                    COMPREPLY=($(compgen -W "$words" -- "$cur"))
                fi
            }
            complete -F _vaultctl vaultctl

            """
    }

    func zsh() -> String {
        let cases = completionCases.map {
            "        (\($0.pattern)) compadd -- \(list($0.words)) ;;\n"
        }.joined()
        return """
            #compdef vaultctl
            # zsh completion for vaultctl (generated by `vaultctl completions zsh`)
            _vaultctl() {
                local cmd= verb= i w socket= args=0 dynamic= prev=${words[CURRENT-1]} cur=${words[CURRENT]} exe=${words[1]}
                local -a names
                for ((i = 2; i < CURRENT; i++)); do
                    w=${words[i]}
                    [[ ${words[i-1]} == --socket ]] && socket=$w
                    [[ $w == -* || ${words[i-1]} == --socket || ${words[i-1]} == -app ]] && continue
                    if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $verb ]]; then verb=$w; else ((args++)); fi
                done
                case $cmd in
                    (\(list(commandsWithVerbs).replacingOccurrences(of: " ", with: "|")))) ;;
                    (*) verb= ;;
                esac
                if [[ $prev == --socket ]]; then
                    _files
                    return
                fi
                # Names from the running vaultd (none when it does not run): after an option
                # that takes one, or where a command's first argument is one.
                case $prev in
            \(dynamicOptionCases(shell: "zsh"))        (*)
                        if [[ $cur != -* && $args == 0 ]]; then
                            case $cmd/$verb in
            \(dynamicArgumentCases(shell: "zsh"))                esac
                        fi ;;
                esac
                if [[ -n $dynamic ]]; then
                    compadd -- $names
                    return
                fi
                case $cmd/$verb in
            \(cases)    esac
            }
            _vaultctl "$@"

            """
    }

    func fish() -> String {
        var out =
            "# fish completion for vaultctl (generated by `vaultctl completions fish`)\ncomplete -c vaultctl -f\n"
        // Names from the running vaultd (nothing when none runs), and whether the word being
        // completed is a command's first argument (after the command and its verb).
        out += """
            function __vaultctl_names
                set -l line (commandline -opc)
                set -l socket
                set -l i (contains -i -- --socket $line); and set socket --socket $line[(math $i + 1)]
                $line[1] $socket __complete $argv[1] 2>/dev/null
            end
            function __vaultctl_first_argument
                set -l line (commandline -opc)
                contains -- $line[-1] --socket -app; and return 1
                set -l n 0
                set -l prev
                for w in $line[2..-1]
                    if not string match -q -- '-*' $w; and not contains -- $prev --socket -app
                        set n (math $n + 1)
                    end
                    set prev $w
                end
                test $n -eq 2
            end

            """
        for (option, kind) in dynamicOptions where option.hasPrefix("--") {
            out +=
                "complete -c vaultctl -l \(option.dropFirst(2)) -x -a '(__vaultctl_names \(kind))'\n"
        }
        out +=
            "complete -c vaultctl -n '__fish_seen_subcommand_from defaults' -o app -x -a '(__vaultctl_names apps)'\n"
        for (pattern, kind) in dynamicArguments {
            let parts = pattern.split(separator: "/")
            out +=
                "complete -c vaultctl -n '__fish_seen_subcommand_from \(parts[0]); and __fish_seen_subcommand_from \(parts[1]); and __vaultctl_first_argument' -a '(__vaultctl_names \(kind))'\n"
        }
        out += "complete -c vaultctl -n __fish_use_subcommand -l socket -r -F -d 'vaultd socket'\n"
        out +=
            "complete -c vaultctl -n __fish_use_subcommand -l help\ncomplete -c vaultctl -n __fish_use_subcommand -l version\n"
        out +=
            "complete -c vaultctl -n __fish_use_subcommand -a '\(commands.joined(separator: " "))'\n"
        func add(_ condition: String, _ words: [String]) {
            let longs = words.filter { $0.hasPrefix("--") }.map { String($0.dropFirst(2)) }
            let others = words.filter { !$0.hasPrefix("--") }
            if !others.isEmpty {
                out +=
                    "complete -c vaultctl -n '\(condition)' -a '\(others.joined(separator: " "))'\n"
            }
            for l in longs { out += "complete -c vaultctl -n '\(condition)' -l \(l)\n" }
        }
        for c in commands {
            let verbs = verbs(of: c)
            if verbs.isEmpty {
                add("__fish_seen_subcommand_from \(c)", completions(c, nil))
            } else {
                add(
                    "__fish_seen_subcommand_from \(c); and not __fish_seen_subcommand_from \(verbs.joined(separator: " "))",
                    verbs)
                for v in verbs {
                    add(
                        "__fish_seen_subcommand_from \(c); and __fish_seen_subcommand_from \(v)",
                        completions(c, v))
                }
            }
        }
        return out
    }
}

/// `vaultctl completions bash|zsh|fish`: prints that shell's completion script.
struct CompletionsCommand: Command {
    enum Shell: String, CaseIterable { case bash, zsh, fish }
    var shell: Shell

    init(_ a: inout Arguments) throws { shell = try a.verb(of: "completions") }

    func run(_ context: Context) throws {
        let table = CommandTable.parse(toolUsage)
        switch shell {
        case .bash: StandardOutput.write(Data(table.bash().utf8))
        case .zsh: StandardOutput.write(Data(table.zsh().utf8))
        case .fish: StandardOutput.write(Data(table.fish().utf8))
        }
    }
}

/// `vaultctl __complete domains|services|servers|apps`: the names the completion scripts offer
/// from the running vaultd, one a line (preference domains, the services and servers of the
/// items, the registered apps' IDs). Not in the usage: the scripts call it. It fails quietly:
/// no vaultd, a locked vault or any error prints nothing and exits 0, within two seconds, so a
/// Tab never prints an error into the command line or hangs.
struct CompleteCommand: Command {
    static let name = "__complete"
    enum Kind: String, CaseIterable { case domains, services, servers, apps }
    var kind: Kind?

    init(_ a: inout Arguments) throws {
        kind = a.positional().flatMap(Kind.init(rawValue:))
        _ = a.rest()
    }

    func run(_ context: Context) throws {
        guard let kind,
            let vault = try? Vault.connect(socketPath: context.socketPath, replyTimeout: 2)
        else { return }
        var names: [String] = []
        switch kind {
        case .domains:
            names = (try? vault.preferences.domains()) ?? []
            if !names.isEmpty { names.append("-g") }
        case .apps:
            names = ((try? vault.apps.list()) ?? []).map(\.appID)
        case .services, .servers:
            let items =
                (try? vault.keychain.copyMatching(
                    Query(
                        kind == .services ? ItemClass.genericPassword : ItemClass.internetPassword,
                        matchAll: true))) ?? []
            names = items.compactMap {
                kind == .services ? $0.attributes?.service : $0.attributes?.server
            }
        }
        // Words a shell can take: one a line, so none with a line break.
        var seen: ExactSet = []
        let words = names.filter {
            !$0.isEmpty && !$0.contains(where: \.isNewline) && seen.insert(ExactString($0)).inserted
        }
        StandardOutput.write(
            Data(words.sorted { $0.bytesPrecede($1) }.map { $0 + "\n" }.joined().utf8))
    }
}
