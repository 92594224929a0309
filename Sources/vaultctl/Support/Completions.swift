import Foundation
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
        for e in entries where e.command == command { if let v = e.verb, !seen.contains(v) { seen.append(v) } }
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
        let attributeNames = ItemCommand.stringOptions.map { "--" + $0.0 } + ["--accessible", "--port", "--synchronizable", "--generic", "--generic-base64"]
        func options(_ text: Substring) -> [String] {
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
                let synopsis = text.components(separatedBy: "   ").first.map { Substring($0) } ?? text
                for alternative in synopsis.components(separatedBy: " | ") {
                    let words = alternative.split(separator: " ")
                    guard let w0 = words.first, w0.first?.isLowercase == true else {
                        if let c = current { table.entries[c].options += options(Substring(alternative)) }
                        continue
                    }
                    var verb: String?
                    var rest = words.dropFirst()
                    var argumentWords: [String] = []
                    if let w1 = rest.first, w1.first?.isLowercase == true, w1.allSatisfy({ $0.isLowercase || $0 == "-" }) {
                        verb = String(w1)
                        rest = rest.dropFirst()
                    } else if let w1 = rest.first, w1.contains("|"), !w1.hasPrefix("-"), !w1.hasPrefix("[") {
                        argumentWords = w1.split(separator: "|").map(String.init)  // `completions bash|zsh|fish`
                        rest = rest.dropFirst()
                    }
                    if rest.contains("[CLASS]") { argumentWords += ["generic", "internet"] }
                    table.entries.append(Entry(command: String(w0), verb: verb, options: options(rest.joined(separator: " ")[...]), words: argumentWords))
                    current = table.entries.count - 1
                    if alternative.contains("ATTRIBUTES") || alternative.contains("FILTERS") { takesAttributes.append(current!) }
                }
                continue
            }
            if inAttributes {
                attributeOptions += options(text)
            } else if let c = current, indent > 2 {
                table.entries[c].options += options(text.components(separatedBy: ":").first.map { Substring($0) } ?? text)
            }
        }
        for i in takesAttributes {
            for o in attributeOptions where !table.entries[i].options.contains(o) { table.entries[i].options.append(o) }
        }
        // `defaults` verbs take single-dash type flags, as defaults(1).
        for i in table.entries.indices where table.entries[i].command == "defaults" && table.entries[i].verb == "write" {
            table.entries[i].words = ["-string", "-int", "-float", "-bool", "-date", "-data", "-array", "-array-add", "-dict", "-dict-add"]
        }
        return table
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

    // MARK: scripts

    func bash() -> String {
        func list(_ words: [String]) -> String { words.joined(separator: " ") }
        let cases = completionCases.map { "        \($0.pattern)) words=\"\(list($0.words))\" ;;\n" }.joined()
        return """
            # bash completion for vaultctl (generated by `vaultctl completions bash`)
            _vaultctl() {
                local cur=${COMP_WORDS[COMP_CWORD]} cmd= verb= i w words=
                for ((i = 1; i < COMP_CWORD; i++)); do
                    w=${COMP_WORDS[i]}
                    [[ $w == -* || ${COMP_WORDS[i-1]} == --socket ]] && continue
                    if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $verb ]]; then verb=$w; fi
                done
                case $cmd in
                    \(list(commandsWithVerbs).replacingOccurrences(of: " ", with: "|"))) ;;
                    *) verb= ;;
                esac
                case $cmd/$verb in
            \(cases)    esac
                if [[ ${COMP_WORDS[COMP_CWORD-1]} == --socket ]]; then
                    COMPREPLY=($(compgen -f -- "$cur"))
                else
                    COMPREPLY=($(compgen -W "$words" -- "$cur"))
                fi
            }
            complete -F _vaultctl vaultctl

            """
    }

    func zsh() -> String {
        func list(_ words: [String]) -> String { words.joined(separator: " ") }
        let cases = completionCases.map { "        (\($0.pattern)) compadd -- \(list($0.words)) ;;\n" }.joined()
        return """
            #compdef vaultctl
            # zsh completion for vaultctl (generated by `vaultctl completions zsh`)
            _vaultctl() {
                local cmd= verb= i w
                for ((i = 2; i < CURRENT; i++)); do
                    w=${words[i]}
                    [[ $w == -* || ${words[i-1]} == --socket ]] && continue
                    if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $verb ]]; then verb=$w; fi
                done
                case $cmd in
                    (\(list(commandsWithVerbs).replacingOccurrences(of: " ", with: "|")))) ;;
                    (*) verb= ;;
                esac
                if [[ ${words[CURRENT-1]} == --socket ]]; then
                    _files
                    return
                fi
                case $cmd/$verb in
            \(cases)    esac
            }
            _vaultctl "$@"

            """
    }

    func fish() -> String {
        var out = "# fish completion for vaultctl (generated by `vaultctl completions fish`)\ncomplete -c vaultctl -f\n"
        out += "complete -c vaultctl -n __fish_use_subcommand -l socket -r -F -d 'vaultd socket'\n"
        out += "complete -c vaultctl -n __fish_use_subcommand -l help\ncomplete -c vaultctl -n __fish_use_subcommand -l version\n"
        out += "complete -c vaultctl -n __fish_use_subcommand -a '\(commands.joined(separator: " "))'\n"
        func add(_ condition: String, _ words: [String]) {
            let longs = words.filter { $0.hasPrefix("--") }.map { String($0.dropFirst(2)) }
            let others = words.filter { !$0.hasPrefix("--") }
            if !others.isEmpty { out += "complete -c vaultctl -n '\(condition)' -a '\(others.joined(separator: " "))'\n" }
            for l in longs { out += "complete -c vaultctl -n '\(condition)' -l \(l)\n" }
        }
        for c in commands {
            let verbs = verbs(of: c)
            if verbs.isEmpty {
                add("__fish_seen_subcommand_from \(c)", completions(c, nil))
            } else {
                add("__fish_seen_subcommand_from \(c); and not __fish_seen_subcommand_from \(verbs.joined(separator: " "))", verbs)
                for v in verbs { add("__fish_seen_subcommand_from \(c); and __fish_seen_subcommand_from \(v)", completions(c, v)) }
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
