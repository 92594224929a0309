import Foundation
import Testing

/// `vaultctl --version`, the shell completions and the man pages, against vaultctl's own usage.
@Suite struct VaultctlDocsTests {
    static let env = ["PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "MANWIDTH": "200"]

    /// "command verb" for every usage line of `vaultctl --help` (and "command" for those
    /// without a verb): what the completions and the man page must know.
    static func usageCommands() throws -> [String] {
        let help = try ChildProcess.run(Paths.tool("vaultctl"), ["--help"], environment: env)
        return commands(inUsage: help.stdoutText)
    }

    /// "command verb" (or "command") for every line of a usage text as `vaultctl --help`
    /// prints it: a command's line is indented two spaces, its continuations more.
    static func commands(inUsage text: String) -> [String] {
        var out: [String] = []
        for line in text.split(separator: "\n") {
            guard line.hasPrefix("  "), !line.hasPrefix("   "), let first = line.dropFirst(2).first,
                first.isLowercase
            else { continue }
            for alternative in line.dropFirst(2).components(separatedBy: "   ")[0].components(
                separatedBy: " | ")
            {
                let words = alternative.split(separator: " ")
                guard let c = words.first, c.first?.isLowercase == true else { continue }
                let verb = words.dropFirst().first.flatMap {
                    $0.first?.isLowercase == true && $0.allSatisfy { $0.isLowercase || $0 == "-" }
                        ? $0 : nil
                }
                let name = verb.map { "\(c) \($0)" } ?? String(c)
                if !out.contains(name) { out.append(name) }
            }
        }
        return out
    }

    /// The commands of the usage docs/cli.md shows (its code block from `usage: vaultctl`).
    static func documentedCommands() throws -> [String] {
        let cli = try String(
            contentsOf: Paths.repoRoot.appendingPathComponent("docs/cli.md"), encoding: .utf8)
        let lines = cli.components(separatedBy: "\n")
        guard let start = lines.firstIndex(where: { $0.hasPrefix("    usage: vaultctl") }) else {
            return []
        }
        let block = lines[(start + 1)...].prefix { $0.hasPrefix("    ") || $0.isEmpty }.map {
            String($0.dropFirst(4))
        }
        return commands(inUsage: block.joined(separator: "\n"))
    }

    /// A new directory with the man pages and completions installed under it as scripts/setup
    /// installs them (scripts/install-docs with PREFIX); the caller removes it.
    static func installDocs() throws -> String {
        let prefix = try TemporaryDirectory.make(prefix: "vaultd-docs")
        var env = Self.env
        env["PREFIX"] = prefix
        let install = try ChildProcess.run(
            Paths.repoRoot.appendingPathComponent("scripts/install-docs").path,
            [Paths.tool("vaultctl")], environment: env)
        guard install.status == 0 else {
            TemporaryDirectory.remove(prefix)
            throw HarnessError("scripts/install-docs: \(install)")
        }
        return prefix
    }

    /// Types LINE and Tab into an interactive zsh on a pty, then ^X, bound to a widget that
    /// prints the end marker. Each match compadd accepts is printed between markers (built
    /// from two strings, so the echo of the definitions never matches).
    static let zshProbe = """
        zmodload zsh/zpty
        zpty z zsh -f -i
        zpty -w z "PS1='' PS2=''; fpath=(${(q)1} \\$fpath); autoload -Uz compinit; compinit -u -D"
        zpty -w z 'compadd () {
          if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\\ * ]]; then builtin compadd "$@"; return $?; fi
          local -a __hits; builtin compadd -A __hits "$@"; local h
          for h in $__hits; do print -r -- "<ma""tch>$h</ma""tch>"; done
          builtin compadd "$@"
        }'
        zpty -w z 'finish() { print -r -- "<do""ne>"; }; zle -N finish; bindkey "^X" finish'
        zpty -n -w z "$2"$'\\t\\C-x'
        out=
        while zpty -r z line; do
          out+=$line
          [[ $line == *'<done>'* ]] && break
        done
        zpty -d z
        print -r -- $out
        """

    /// What the installed zsh completion offers for `line` (sorted, once each).
    static func zshComplete(_ line: String, fpath: String, env: [String: String]) throws -> [String]
    {
        let r = try ChildProcess.run(
            "/usr/bin/zsh", ["-f", "-c", zshProbe, "zsh", fpath, line], environment: env,
            timeout: 30)
        #expect(r.status == 0 && r.stdoutText.contains("<done>"), "zsh on '\(line)': \(r)")
        var seen: [String] = []
        for part in r.stdoutText.components(separatedBy: "<match>").dropFirst() {
            guard let end = part.range(of: "</match>") else { continue }
            let m = String(part[..<end.lowerBound])
            if !seen.contains(m) { seen.append(m) }
        }
        return seen.sorted()
    }

    /// What the installed fish completion offers for `line` (sorted).
    static func fishComplete(_ line: String, env: [String: String]) throws -> [String] {
        let r = try ChildProcess.run(
            "/usr/bin/fish", ["-c", "complete --do-complete $argv[1]", line], environment: env,
            timeout: 30)
        #expect(r.status == 0 && r.stderr.isEmpty, "fish on '\(line)': \(r)")
        return r.stdoutText.split(separator: "\n").map {
            String($0.split(separator: "\t").first ?? "")
        }.sorted()
    }

    /// A user's shell environment for the completions installed under `prefix`: vaultctl on
    /// PATH (fish loads a command's completions once it is one), an empty home, the prefix
    /// among the data directories (where fish finds vendor completions).
    static func shellEnvironment(prefix: String) -> [String: String] {
        var env = Self.env
        env["PATH"] =
            URL(fileURLWithPath: Paths.tool("vaultctl")).deletingLastPathComponent().path + ":"
            + Self.env["PATH"]!
        env["HOME"] = prefix
        env["XDG_CONFIG_HOME"] = prefix + "/config"
        env["XDG_DATA_HOME"] = prefix + "/data"
        env["XDG_DATA_DIRS"] = prefix + "/share:/usr/share"
        env["TERM"] = "xterm"
        return env
    }

    /// The completions offer names from the running vaultd (the hidden `vaultctl __complete`):
    /// domains where a `defaults` verb takes one, services after `--service`, servers after
    /// `--server`, app IDs after `app show`, `cache path` and `-app`; in bash as
    /// bash-completion loads it, zsh and fish as installed. With no vaultd at the socket they
    /// offer nothing for those, print nothing on stderr, and `__complete` exits 0 at once.
    @Test func completionsOfferNamesFromTheRunningVaultd() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        #expect(d.ctl(["defaults", "write", "com.example.alpha", "k", "v"]).status == 0)
        #expect(d.ctl(["defaults", "write", "com.example.beta", "k", "v"]).status == 0)
        #expect(
            d.ctl(
                ["item", "add", "--service", "api.example.com", "--account", "a"],
                stdin: Data("x".utf8)
            ).status == 0)
        #expect(
            d.ctl(
                [
                    "item", "add", "--server", "git.example.org", "--protocol", "https",
                    "--account", "a",
                ], stdin: Data("x".utf8)
            ).status == 0)
        let exe = try d.placeExample("c")
        #expect(d.ctl(["app", "install", "org.example.Comp", "--exe", exe]).status == 0)
        let domains = d.ctl(["__complete", "domains"])
        #expect(
            domains.status == 0
                && domains.stdoutText == "-g\ncom.example.alpha\ncom.example.beta\n", "\(domains)")
        let names = d.ctl(["__complete", "services"])
        #expect(names.status == 0 && names.stdoutText == "api.example.com\n", "\(names)")

        let prefix = try Self.installDocs()
        defer { TemporaryDirectory.remove(prefix) }
        var env = Self.shellEnvironment(prefix: prefix)
        env["VAULTD_SOCKET"] = d.socketPath
        let fpath = prefix + "/share/zsh/site-functions"
        // bash as bash-completion loads it: from share/bash-completion/completions, on first use.
        func bash(_ line: String) throws -> [String] {
            let probe = """
                source /usr/share/bash-completion/bash_completion
                BASH_COMPLETION_USER_DIR=\(prefix)/share/bash-completion
                __load_completion vaultctl || exit 3
                read -ra COMP_WORDS <<<"$1"
                [[ $1 == *' ' ]] && COMP_WORDS+=('')
                COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
                COMP_LINE=$1 COMP_POINT=${#1}
                _vaultctl
                printf '%s\\n' "${COMPREPLY[@]}"
                """
            let r = try ChildProcess.run(
                "/bin/bash", ["-c", probe, "bash", line], environment: env, timeout: 30)
            #expect(r.status == 0 && r.stderr.isEmpty, "bash on '\(line)': \(r)")
            return r.stdoutText.split(separator: "\n").map(String.init).sorted()
        }
        let cases: [(String, [String])] = [
            ("vaultctl defaults read ", ["-g", "com.example.alpha", "com.example.beta"]),
            ("vaultctl defaults export com.example.a", ["com.example.alpha"]),
            ("vaultctl item get --service ", ["api.example.com"]),
            ("vaultctl item delete internet --server g", ["git.example.org"]),
            ("vaultctl app show ", ["org.example.Comp"]),
            ("vaultctl cache path org.", ["org.example.Comp"]),
            ("vaultctl defaults read -app ", ["org.example.Comp"]),
        ]
        for (line, expected) in cases {
            #expect(try bash(line) == expected, "bash: '\(line)'")
            #expect(
                try Self.zshComplete(line, fpath: fpath, env: env) == expected, "zsh: '\(line)'")
            #expect(try Self.fishComplete(line, env: env) == expected, "fish: '\(line)'")
        }

        // No vaultd at the socket: nothing offered, nothing said, at once.
        env["VAULTD_SOCKET"] = d.root + "/nowhere.sock"
        let quiet = try ChildProcess.run(
            Paths.tool("vaultctl"), ["__complete", "domains"], environment: env, timeout: 10)
        #expect(quiet.status == 0 && quiet.stdout.isEmpty && quiet.stderr.isEmpty, "\(quiet)")
        for line in ["vaultctl defaults read ", "vaultctl item get --service "] {
            #expect(try bash(line) == [], "bash: '\(line)'")
            #expect(try Self.zshComplete(line, fpath: fpath, env: env) == [], "zsh: '\(line)'")
            #expect(try Self.fishComplete(line, env: env) == [], "fish: '\(line)'")
        }
    }

    @Test func versionIsVaultdsVersion() throws {
        let d = try Daemon()
        defer { d.close() }
        let v = d.ctl(["--version"])
        let status = d.statusJSON()
        #expect(
            v.status == 0 && v.stdoutText == "vaultctl \(status?["version"] as? String ?? "?")\n",
            "\(v)")
    }

    /// The completions know every command and verb of the usage; bash's completes a command,
    /// a verb and an option when sourced into a real bash.
    @Test func completionsAreGeneratedFromTheUsage() throws {
        let commands = try Self.usageCommands()
        try #require(
            commands.contains("item add") && commands.contains("defaults read-type")
                && commands.contains("completions"), "\(commands)")
        for shell in ["bash", "zsh", "fish"] {
            let r = try ChildProcess.run(
                Paths.tool("vaultctl"), ["completions", shell], environment: Self.env)
            #expect(r.status == 0 && !r.stdout.isEmpty, "\(shell): \(r)")
            let tokens = Set(
                r.stdoutText.split(whereSeparator: { !($0.isLetter || $0.isNumber || $0 == "-") })
                    .map(String.init))
            for c in commands {
                for w in c.split(separator: " ") {
                    #expect(tokens.contains(String(w)), "\(shell) lacks \(c)")
                }
            }
        }
        let script = try ChildProcess.run(
            Paths.tool("vaultctl"), ["completions", "bash"], environment: Self.env
        ).stdoutText
        func complete(_ line: [String]) throws -> [String] {
            let words = line.map { "'\($0)'" }.joined(separator: " ")
            let probe =
                script
                + "\nCOMP_WORDS=(vaultctl \(words)); COMP_CWORD=\(line.count); _vaultctl; printf '%s\\n' \"${COMPREPLY[@]}\"\n"
            let r = try ChildProcess.run("/bin/bash", ["-c", probe], environment: Self.env)
            #expect(r.status == 0 && r.stderr.isEmpty, "\(r)")
            return r.stdoutText.split(separator: "\n").map(String.init)
        }
        #expect(try complete(["ke"]) == ["keyring"])
        #expect(
            try complete(["--socket", "/x", "item", ""]) == [
                "add", "get", "update", "delete", "list",
            ])
        #expect(
            try complete(["item", "delete", "--service", "s", "--d"]).sorted() == [
                "--description", "--dry-run",
            ])
        #expect(
            try complete(["item", "update", "--set-acc"]).sorted() == [
                "--set-access-group", "--set-accessible", "--set-account",
            ])
        #expect(try complete(["completions", ""]) == ["bash", "zsh", "fish"])
        #expect(try complete(["init", "--p"]) == ["--passphrase-fd"])
    }

    /// Installed by scripts/install-docs (zsh's site-functions, fish's vendor completions),
    /// the zsh and fish completions load in the real shells and complete
    /// a command, a verb and options as bash's does: zsh through compinit on a pty (zpty; the
    /// matches are what compadd accepts for the word typed), fish with `complete --do-complete`.
    @Test func zshAndFishCompleteFromTheirInstalledScripts() throws {
        let prefix = try Self.installDocs()
        defer { TemporaryDirectory.remove(prefix) }
        let env = Self.shellEnvironment(prefix: prefix)
        let fpath = prefix + "/share/zsh/site-functions"
        func zsh(_ line: String) throws -> [String] {
            try Self.zshComplete(line, fpath: fpath, env: env)
        }
        func fish(_ line: String) throws -> [String] { try Self.fishComplete(line, env: env) }
        let cases: [(String, [String])] = [
            ("vaultctl ke", ["keyring"]),
            ("vaultctl --socket /x item ", ["add", "delete", "get", "list", "update"]),
            ("vaultctl item delete --service s --d", ["--description", "--dry-run"]),
            (
                "vaultctl item update --set-acc",
                ["--set-access-group", "--set-accessible", "--set-account"]
            ),
            ("vaultctl completions ", ["bash", "fish", "zsh"]),
            ("vaultctl init --p", ["--passphrase-fd"]),
            ("vaultctl defaults write d k -ar", ["-array", "-array-add"]),
        ]
        for (line, expected) in cases {
            #expect(try zsh(line) == expected, "zsh: '\(line)'")
            #expect(try fish(line) == expected, "fish: '\(line)'")
        }
    }

    /// The man pages render without warnings, vaultctl(1) names every command its usage
    /// lists and the exit statuses, and installed as scripts/setup installs them
    /// (scripts/install-docs) `man vaultctl`, `man 8 vaultd` and `man git-credential-vault` work.
    @Test func theManPagesRenderAndListEveryCommand() throws {
        let man = Paths.repoRoot.appendingPathComponent("dist/man").path
        for page in ["vaultctl.1", "vaultd.8", "git-credential-vault.1"] {
            let lint = try ChildProcess.run(
                "/usr/bin/groff", ["-man", "-Tutf8", "-ww", "-z", man + "/" + page],
                environment: Self.env)
            #expect(lint.status == 0 && lint.stderr.isEmpty, "\(page): \(lint)")
        }
        let rendered = try ChildProcess.run(
            "/usr/bin/man", ["-l", man + "/vaultctl.1"], environment: Self.env)
        try #require(rendered.status == 0, "\(rendered)")
        // As rendered: hyphens may come out as U+2010 and words be spread; compare words.
        let text = rendered.stdoutText.replacingOccurrences(of: "\u{2010}", with: "-").split(
            whereSeparator: { $0 == " " || $0 == "\n" }).joined(separator: " ")
        for c in try Self.usageCommands() { #expect(text.contains(c), "vaultctl(1) lacks '\(c)'") }
        for status in ["36", "44", "45", "64", "65", "69", "74", "77"] {
            #expect(text.contains(status), "exit status \(status)")
        }

        let prefix = try Self.installDocs()
        defer { TemporaryDirectory.remove(prefix) }
        var env = Self.env
        env["MANPATH"] = prefix + "/share/man"
        for (args, title) in [
            (["vaultctl"], "VAULTCTL(1)"), (["8", "vaultd"], "VAULTD(8)"),
            (["git-credential-vault"], "GIT-CREDENTIAL-VAULT(1)"),
        ] {
            let r = try ChildProcess.run("/usr/bin/man", args, environment: env)
            #expect(r.status == 0 && r.stdoutText.hasPrefix(title), "man \(args): \(r)")
        }
        for file in [
            "bash-completion/completions/vaultctl", "zsh/site-functions/_vaultctl",
            "fish/vendor_completions.d/vaultctl.fish",
        ] {
            #expect(FileManager.default.fileExists(atPath: prefix + "/share/" + file), "\(file)")
        }
        // `man -M DIR vaultctl`, as a user names the directory: the page, its NAME section,
        // and every command of the usage docs/cli.md shows.
        let page = try ChildProcess.run(
            "/usr/bin/man", ["-M", prefix + "/share/man", "vaultctl"], environment: Self.env)
        try #require(
            page.status == 0 && page.stdoutText.hasPrefix("VAULTCTL(1)"), "man -M: \(page)")
        let pageLines = page.stdoutText.components(separatedBy: "\n")
        let name = pageLines.firstIndex(of: "NAME").map { pageLines[($0 + 1)...].first ?? "" } ?? ""
        #expect(
            name.trimmingCharacters(in: .whitespaces).hasPrefix("vaultctl"),
            "NAME section: '\(name)'")
        let documented = try Self.documentedCommands()
        #expect(
            documented.contains("keyring export") && documented.contains("defaults read")
                && documented.count > 20, "\(documented)")
        let pageText = page.stdoutText.replacingOccurrences(of: "\u{2010}", with: "-").split(
            whereSeparator: { $0 == " " || $0 == "\n" }).joined(separator: " ")
        for c in documented {
            #expect(pageText.contains(c), "man -M vaultctl lacks '\(c)' of docs/cli.md")
        }
    }
}
