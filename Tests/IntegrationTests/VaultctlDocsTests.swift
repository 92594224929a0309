import Foundation
import Testing

/// `vaultctl --version`, the shell completions and the man pages, against vaultctl's own usage.
@Suite struct VaultctlDocsTests {
    static let env = ["PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "MANWIDTH": "200"]

    /// "command verb" for every usage line of `vaultctl --help` (and "command" for those
    /// without a verb): what the completions and the man page must know.
    static func usageCommands() throws -> [String] {
        let help = try ChildProcess.run(Paths.tool("vaultctl"), ["--help"], environment: env)
        var out: [String] = []
        for line in help.stdoutText.split(separator: "\n") {
            guard line.hasPrefix("  "), !line.hasPrefix("   "), let first = line.dropFirst(2).first, first.isLowercase else { continue }
            for alternative in line.dropFirst(2).components(separatedBy: "   ")[0].components(separatedBy: " | ") {
                let words = alternative.split(separator: " ")
                guard let c = words.first, c.first?.isLowercase == true else { continue }
                let verb = words.dropFirst().first.flatMap { $0.first?.isLowercase == true && $0.allSatisfy { $0.isLowercase || $0 == "-" } ? $0 : nil }
                let name = verb.map { "\(c) \($0)" } ?? String(c)
                if !out.contains(name) { out.append(name) }
            }
        }
        return out
    }

    @Test func versionIsVaultdsVersion() throws {
        let d = try Daemon()
        defer { d.close() }
        let v = d.ctl(["--version"])
        let status = d.statusJSON()
        #expect(v.status == 0 && v.stdoutText == "vaultctl \(status?["version"] as? String ?? "?")\n", "\(v)")
    }

    /// The completions know every command and verb of the usage; bash's completes a command,
    /// a verb and an option when sourced into a real bash.
    @Test func completionsAreGeneratedFromTheUsage() throws {
        let commands = try Self.usageCommands()
        try #require(commands.contains("item add") && commands.contains("defaults read-type") && commands.contains("completions"), "\(commands)")
        for shell in ["bash", "zsh", "fish"] {
            let r = try ChildProcess.run(Paths.tool("vaultctl"), ["completions", shell], environment: Self.env)
            #expect(r.status == 0 && !r.stdout.isEmpty, "\(shell): \(r)")
            let tokens = Set(r.stdoutText.split(whereSeparator: { !($0.isLetter || $0.isNumber || $0 == "-") }).map(String.init))
            for c in commands {
                for w in c.split(separator: " ") { #expect(tokens.contains(String(w)), "\(shell) lacks \(c)") }
            }
        }
        let script = try ChildProcess.run(Paths.tool("vaultctl"), ["completions", "bash"], environment: Self.env).stdoutText
        func complete(_ line: [String]) throws -> [String] {
            let words = line.map { "'\($0)'" }.joined(separator: " ")
            let probe = script + "\nCOMP_WORDS=(vaultctl \(words)); COMP_CWORD=\(line.count); _vaultctl; printf '%s\\n' \"${COMPREPLY[@]}\"\n"
            let r = try ChildProcess.run("/bin/bash", ["-c", probe], environment: Self.env)
            #expect(r.status == 0 && r.stderr.isEmpty, "\(r)")
            return r.stdoutText.split(separator: "\n").map(String.init)
        }
        #expect(try complete(["ke"]) == ["keyring"])
        #expect(try complete(["--socket", "/x", "item", ""]) == ["add", "get", "update", "delete", "list"])
        #expect(try complete(["item", "delete", "--service", "s", "--d"]).sorted() == ["--description", "--dry-run"])
        #expect(try complete(["item", "update", "--set-acc"]).sorted() == ["--set-access-group", "--set-accessible", "--set-account"])
        #expect(try complete(["completions", ""]) == ["bash", "zsh", "fish"])
        #expect(try complete(["init", "--p"]) == ["--passphrase-fd"])
    }

    /// The man pages render without warnings, vaultctl(1) names every command its usage
    /// lists and the exit statuses, and installed as scripts/setup installs them
    /// (scripts/install-docs) `man vaultctl`, `man 8 vaultd` and `man git-credential-vault` work.
    @Test func theManPagesRenderAndListEveryCommand() throws {
        let man = Paths.repoRoot.appendingPathComponent("dist/man").path
        for page in ["vaultctl.1", "vaultd.8", "git-credential-vault.1"] {
            let lint = try ChildProcess.run("/usr/bin/groff", ["-man", "-Tutf8", "-ww", "-z", man + "/" + page], environment: Self.env)
            #expect(lint.status == 0 && lint.stderr.isEmpty, "\(page): \(lint)")
        }
        let rendered = try ChildProcess.run("/usr/bin/man", ["-l", man + "/vaultctl.1"], environment: Self.env)
        try #require(rendered.status == 0, "\(rendered)")
        // As rendered: hyphens may come out as U+2010 and words be spread; compare words.
        let text = rendered.stdoutText.replacingOccurrences(of: "\u{2010}", with: "-").split(whereSeparator: { $0 == " " || $0 == "\n" }).joined(separator: " ")
        for c in try Self.usageCommands() { #expect(text.contains(c), "vaultctl(1) lacks '\(c)'") }
        for status in ["36", "44", "45", "64", "65", "69", "77"] { #expect(text.contains(status), "exit status \(status)") }

        let prefix = try TemporaryDirectory.make(prefix: "vaultd-man")
        defer { TemporaryDirectory.remove(prefix) }
        var env = Self.env
        env["PREFIX"] = prefix
        let install = try ChildProcess.run(Paths.repoRoot.appendingPathComponent("scripts/install-docs").path, [Paths.tool("vaultctl")], environment: env)
        try #require(install.status == 0, "\(install)")
        env["MANPATH"] = prefix + "/share/man"
        for (args, title) in [(["vaultctl"], "VAULTCTL(1)"), (["8", "vaultd"], "VAULTD(8)"), (["git-credential-vault"], "GIT-CREDENTIAL-VAULT(1)")] {
            let r = try ChildProcess.run("/usr/bin/man", args, environment: env)
            #expect(r.status == 0 && r.stdoutText.hasPrefix(title), "man \(args): \(r)")
        }
        for file in ["bash-completion/completions/vaultctl", "zsh/site-functions/_vaultctl", "fish/vendor_completions.d/vaultctl.fish"] {
            #expect(FileManager.default.fileExists(atPath: prefix + "/share/" + file), "\(file)")
        }
    }
}
