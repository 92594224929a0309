import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// git-credential-vault through real git (`credential.helper = vault`, found on PATH).
@Suite struct GitCredentialTests {
    /// A daemon with an initialised (unlocked) vault and a private git configuration whose
    /// helper is `vault`.
    final class Git {
        let d: Daemon
        let env: [String: String]

        /// `config`: vaultd's config.plist settings.
        init(config: [String: Any]? = nil) throws {
            d = try Daemon(start: false)
            do { try d.start(config: config) } catch {
                d.close()
                throw error
            }
            let i = d.initialize()
            try #require(i.status == 0, "\(i)")
            env = [
                "GIT_CONFIG_GLOBAL": d.root + "/gitconfig", "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_TERMINAL_PROMPT": "0",
                "GIT_ASKPASS": "", "SSH_ASKPASS": "",
                "PATH": Paths.binaries + ":"
                    + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"),
            ]
            try #require(git(["config", "--global", "credential.helper", "vault"]).status == 0)
        }

        func close() { d.close() }

        func git(_ args: [String], _ input: String = "") -> ProcessResult {
            d.run("git", args, stdin: Data(input.utf8), environment: env)
        }

        /// `git credential fill`: the fields git answered with.
        func fill(_ input: String) -> (ProcessResult, [String: String]) {
            let r = git(["credential", "fill"], input + "\n")
            var fields: [String: String] = [:]
            for line in r.stdoutText.split(separator: "\n") {
                if let eq = line.firstIndex(of: "=") {
                    fields[String(line[..<eq])] = String(line[line.index(after: eq)...])
                }
            }
            return (r, fields)
        }

        func approve(_ input: String) -> ProcessResult {
            git(["credential", "approve"], input + "\n")
        }
        func reject(_ input: String) -> ProcessResult {
            git(["credential", "reject"], input + "\n")
        }

        /// Runs the helper directly with raw bytes.
        func helper(_ action: String, _ input: [UInt8]) -> ProcessResult {
            d.run("git-credential-vault", [action], stdin: Data(input), environment: env)
        }

        func internetItems() -> [[String: Any]] {
            let r = d.ctl(["item", "list", "internet", "--json"])
            return (try? JSONSerialization.jsonObject(with: r.stdout) as? [[String: Any]]) ?? []
        }
    }

    @Test func twoAccountsOnOneHost() throws {
        let g = try Git()
        defer { g.close() }
        #expect(
            g.approve("protocol=https\nhost=example.org\nusername=bob\npassword=pb").status == 0)
        #expect(
            g.approve("protocol=https\nhost=example.org\nusername=alice\npassword=pa").status == 0)

        let (bob, fb) = g.fill("url=https://bob@example.org/repo.git")
        #expect(bob.status == 0, "\(bob)")
        #expect(fb["username"] == "bob" && fb["password"] == "pb", "\(bob)")
        let (_, fa) = g.fill("url=https://alice@example.org/repo.git")
        #expect(fa["username"] == "alice" && fa["password"] == "pa")

        // Without a username: the most recently stored one.
        let (_, latest) = g.fill("protocol=https\nhost=example.org")
        #expect(latest["username"] == "alice" && latest["password"] == "pa", "\(latest)")
        // A port makes another host: nothing, and git asks (prompts are off here, so it fails).
        let (other, _) = g.fill("protocol=https\nhost=example.org:8443")
        #expect(other.status != 0 && !other.stdoutText.contains("password="), "\(other)")

        // The items: internet passwords, host without port, account = username, group git.
        let items = g.internetItems()
        #expect(items.count == 2, "\(items)")
        for item in items {
            #expect(item["server"] as? String == "example.org")
            #expect(item["protocol"] as? String == "https")
            #expect(item["accessGroup"] as? String == "git")
        }

        // A port is split out of host and kept.
        #expect(
            g.approve("protocol=https\nhost=example.org:8443\nusername=bob\npassword=p8443").status
                == 0)
        let (_, f8443) = g.fill("protocol=https\nhost=example.org:8443")
        #expect(f8443["password"] == "p8443")
        #expect(
            g.internetItems().contains {
                $0["port"] as? Int == 8443 && $0["server"] as? String == "example.org"
            })
        let (_, still) = g.fill("url=https://bob@example.org/")
        #expect(still["password"] == "pb")

        // store replaces the password of the same account.
        #expect(
            g.approve("protocol=https\nhost=example.org\nusername=bob\npassword=pb2").status == 0)
        let (_, updated) = g.fill("url=https://bob@example.org/")
        #expect(updated["password"] == "pb2")
        #expect(g.internetItems().count == 3)
    }

    @Test func useHttpPathKeepsReposApartAndEraseRemovesOnlyTheMatch() throws {
        let g = try Git()
        defer { g.close() }
        #expect(g.git(["config", "--global", "credential.useHttpPath", "true"]).status == 0)
        #expect(g.approve("url=https://carol@example.com/a.git\npassword=p-a").status == 0)
        #expect(g.approve("url=https://carol@example.com/b.git\npassword=p-b").status == 0)

        let (_, a) = g.fill("url=https://carol@example.com/a.git")
        let (_, b) = g.fill("url=https://carol@example.com/b.git")
        #expect(a["password"] == "p-a", "\(a)")
        #expect(b["password"] == "p-b", "\(b)")
        #expect(Set(g.internetItems().compactMap { $0["path"] as? String }) == ["a.git", "b.git"])

        // erase with a password that is not the stored one removes nothing.
        #expect(g.reject("url=https://carol@example.com/a.git\npassword=stale").status == 0)
        #expect(g.internetItems().count == 2)
        // erase of a: only a goes.
        #expect(g.reject("url=https://carol@example.com/a.git\npassword=p-a").status == 0)
        let (afterA, _) = g.fill("url=https://carol@example.com/a.git")
        #expect(afterA.status != 0 && !afterA.stdoutText.contains("password="), "\(afterA)")
        let (_, stillB) = g.fill("url=https://carol@example.com/b.git")
        #expect(stillB["password"] == "p-b")
        #expect(g.internetItems().count == 1)
    }

    /// erase matches what get matches, as git's credential-store does: a field git does not
    /// send (path, username) matches any value. So the credential get just offered, found
    /// under a path git no longer sends, goes when git rejects it.
    @Test func eraseRemovesWhatGetReturnedWhenGitSendsNoPath() throws {
        let g = try Git()
        defer { g.close() }
        #expect(g.git(["config", "--global", "credential.useHttpPath", "true"]).status == 0)
        #expect(g.approve("url=https://bob@host.test/org/r2.git\npassword=p2").status == 0)
        #expect(g.git(["config", "--global", "credential.useHttpPath", "false"]).status == 0)
        // Same account and password elsewhere: another port, another host. These stay.
        #expect(
            g.approve("protocol=https\nhost=host.test:8443\nusername=bob\npassword=p2").status == 0)
        #expect(g.approve("protocol=https\nhost=other.test\nusername=bob\npassword=p2").status == 0)

        let (_, got) = g.fill("url=https://host.test/")
        #expect(got["username"] == "bob" && got["password"] == "p2", "\(got)")

        // A password that is not the stored one removes nothing, path and username left open.
        #expect(g.reject("protocol=https\nhost=host.test\npassword=stale").status == 0)
        #expect(
            g.reject("protocol=https\nhost=host.test\nusername=bob\npassword=stale").status == 0)
        #expect(g.internetItems().count == 3)

        // Rejecting what get returned removes it: it is not offered again.
        #expect(g.reject("protocol=https\nhost=host.test\nusername=bob\npassword=p2").status == 0)
        let (again, _) = g.fill("url=https://host.test/")
        #expect(again.status != 0 && !again.stdoutText.contains("password="), "\(again)")
        let left = g.internetItems()
        #expect(left.count == 2, "\(left)")
        #expect(
            !left.contains {
                $0["server"] as? String == "host.test" && ($0["port"] as? Int ?? 0) == 0
            }, "\(left)")
    }

    /// Erase with a password keeps an item whose password differs from it only in Unicode
    /// normalisation: to the server that is another password (git's credential-store compares
    /// bytes too). Swift's `!=` equated `café` (U+00E9) and `cafe` + U+0301 and erased it.
    @Test func eraseKeepsAPasswordDifferingOnlyInNormalisation() throws {
        let g = try Git()
        defer { g.close() }
        #expect(
            g.helper(
                "store",
                Array("protocol=https\nhost=host.test\nusername=bob\npassword=cafe\u{301}\n\n".utf8)
            ).status == 0)
        #expect(
            g.helper(
                "erase",
                Array("protocol=https\nhost=host.test\nusername=bob\npassword=caf\u{E9}\n\n".utf8)
            ).status == 0)
        #expect(g.internetItems().count == 1)
        let got = g.helper("get", Array("protocol=https\nhost=host.test\n\n".utf8))
        #expect(Array(got.stdout) == Array("username=bob\npassword=cafe\u{301}\n".utf8), "\(got)")
        // The very password erases it.
        #expect(
            g.helper(
                "erase",
                Array("protocol=https\nhost=host.test\nusername=bob\npassword=cafe\u{301}\n\n".utf8)
            ).status == 0)
        #expect(g.internetItems().isEmpty)
    }

    /// `url=` in the helper's own input is read as git's credential_read reads it: it resets the
    /// fields and sets protocol, host (with port), path, username and password from the URL,
    /// %XX-decoded; a later field overrides. Each answer is compared with git's credential-store.
    @Test func urlInTheHelpersInputIsReadAsGitReadsIt() throws {
        let g = try Git()
        defer { g.close() }
        let file = g.d.root + "/git-credentials"
        func both(_ action: String, _ input: String) -> (vault: ProcessResult, store: ProcessResult)
        {
            (
                g.helper(action, Array((input + "\n\n").utf8)),
                g.git(["credential-store", "--file", file, action], input + "\n\n")
            )
        }

        for input in [
            "url=https://bob@example.org/\npassword=pb",
            "url=https://alice:pa@example.org:8443/",
            "url=https://carol%40corp@example.com/x/repo.git/\npassword=pc",
        ] {
            let (v, s) = both("store", input)
            #expect(v.status == 0 && s.status == 0, "\(input): \(v) \(s)")
        }
        // git keeps what precedes a component's first ':' undecoded, and never decodes %00
        // (url_decode_mem; what git itself then sends a helper: checked with a capturing
        // helper). credential-store cannot be the judge here: its own file does not round-trip.
        let dave = g.helper(
            "store", Array("url=https://dave:p%41:x@ex%61mple.net:8443/a%20b:c%20d/e%00f\n\n".utf8))
        #expect(dave.status == 0, "\(dave)")
        let daveItem = g.internetItems().first { $0["account"] as? String == "dave" }
        #expect(
            daveItem?["server"] as? String == "ex%61mple.net" && daveItem?["port"] as? Int == 8443,
            "\(String(describing: daveItem))")
        #expect(
            daveItem?["path"] as? String == "a%20b:c d/e%00f", "\(String(describing: daveItem))")
        let daveGet = g.helper(
            "get",
            Array(
                "protocol=https\nhost=ex%61mple.net:8443\npath=a%20b:c d/e%00f\nusername=dave\n\n"
                    .utf8))
        #expect(daveGet.stdoutText == "username=dave\npassword=p%41:x\n", "\(daveGet)")
        #expect(
            g.helper("erase", Array("url=https://dave@ex%61mple.net:8443/\n\n".utf8)).status == 0)
        #expect(g.internetItems().count == 3, "\(g.internetItems())")
        #expect(
            g.internetItems().contains {
                $0["account"] as? String == "carol@corp" && $0["path"] as? String == "x/repo.git"
            })

        let expected: [(String, String)] = [
            ("url=https://bob@example.org/", "username=bob\npassword=pb\n"),
            ("url=https://example.org:8443/", "username=alice\npassword=pa\n"),
            (
                "url=https://carol%40corp@example.com/x/repo.git",
                "username=carol@corp\npassword=pc\n"
            ),
            // url resets
            ("username=alice\nurl=https://bob@example.org/", "username=bob\npassword=pb\n"),
            // later wins
            ("url=https://alice@example.org/\nusername=bob", "username=bob\npassword=pb\n"),
            ("url=https://bob@example.org/other.git", ""),  // a path the item has not
            ("url=https://bob@example.org:8443/", ""),  // another port
        ]
        for (input, output) in expected {
            let (v, s) = both("get", input)
            #expect(s.stdoutText == output, "credential-store: \(input): \(s)")
            #expect(v.status == 0 && v.stdoutText == output, "\(input): \(v)")
        }

        // erase through url=: only bob on example.org goes, in both.
        let (ev, es) = both("erase", "url=https://bob@example.org/\npassword=pb")
        #expect(ev.status == 0 && es.status == 0, "\(ev) \(es)")
        let (gv, gs) = both("get", "url=https://bob@example.org/")
        #expect(gv.stdoutText.isEmpty && gs.stdoutText.isEmpty, "\(gv) \(gs)")
        #expect(g.internetItems().count == 2)

        // A URL git cannot parse, or one whose decoded fields hold LF or CR: rejected
        // whole, nothing stored or returned (git dies on the first two as well).
        for input in [
            "url=example.org\nusername=bob\npassword=x",
            "url=https://bob%0a@example.org/\npassword=x",
            "url=https://bob%0d@example.org/\npassword=x",
            "url=https://bob@exam%0dple.org/\npassword=x",
        ] {
            let r = g.helper("store", Array((input + "\n\n").utf8))
            #expect(r.status != 0 && r.stderr.contains("rejected"), "\(input): \(r)")
        }
        #expect(g.internetItems().count == 2, "\(g.internetItems())")
        let getBad = g.helper("get", Array("url=https://alice%0a@example.org:8443/\n\n".utf8))
        #expect(getBad.stdout.isEmpty, "\(getBad)")
    }

    @Test func controlCharactersAreRejectedAndNothingIsStoredOrReturned() throws {
        let g = try Git()
        defer { g.close() }
        // Through git: a CR in the password.
        let cr = g.approve("protocol=https\nhost=example.org\nusername=bob\npassword=a\rb")
        #expect(cr.stderr.contains("rejected") || cr.status != 0, "\(cr)")
        #expect(g.internetItems().isEmpty)

        // Directly: CR, LF (a line that is not key=value) or NUL in any field.
        let bad: [[UInt8]] = [
            Array("protocol=https\nhost=example.org\nusername=bob\r\npassword=pw\n\n".utf8),
            Array("protocol=https\nhost=example.org\nusername=bob\npassword=p\nw\n\n".utf8),
            Array("protocol=https\nhost=exam".utf8) + [0]
                + Array("ple.org\nusername=bob\npassword=pw\n\n".utf8),
            Array(
                "protocol=https\nhost=example.org\npath=a\rb\nusername=bob\npassword=pw\n\n".utf8),
            Array(
                "protocol=https\nhost=example.org\nusername=bob\npassword=pw\npassword_expiry_utc=1\r\n\n"
                    .utf8),
        ]
        for input in bad {
            let r = g.helper("store", input)
            #expect(r.status != 0 && r.stderr.contains("rejected"), "\(r)")
        }
        #expect(g.internetItems().isEmpty, "\(g.internetItems())")

        // get with a bad field returns nothing, even when a credential exists.
        #expect(
            g.approve("protocol=https\nhost=example.org\nusername=bob\npassword=pw").status == 0)
        let getCR = g.helper(
            "get", Array("protocol=https\nhost=example.org\r\nusername=bob\n\n".utf8))
        #expect(getCR.stdout.isEmpty, "\(getCR)")
        let getNUL = g.helper(
            "get",
            Array("protocol=https\nhost=example.org\nusername=bob".utf8) + [0] + Array("\n\n".utf8))
        #expect(getNUL.stdout.isEmpty, "\(getNUL)")
        // erase with a bad field erases nothing.
        _ = g.helper(
            "erase", Array("protocol=https\nhost=example.org\nusername=bob\npassword=pw\r\n\n".utf8)
        )
        #expect(g.internetItems().count == 1)

        // A stored item whose values git could not read back is never returned.
        let add = g.d.ctl(
            [
                "item", "add", "internet", "--access-group", "git", "--server", "evil.example",
                "--protocol", "https", "--account", "mallory",
            ],
            stdin: Data("line1\nusername=root".utf8))
        #expect(add.status == 0, "\(add)")
        let evil = g.helper("get", Array("protocol=https\nhost=evil.example\n\n".utf8))
        #expect(evil.status == 0 && evil.stdout.isEmpty, "\(evil)")
    }

    /// A field the helper does not read may hold bytes that are not UTF-8: `wwwauth[]` (git
    /// 2.41 and later pass the server's WWW-Authenticate headers to helpers; a realm may be
    /// Latin-1). The helper refused the whole request ("the input is not UTF-8"), so git asked
    /// for the password at every fetch from that server; git's credential-store answers. A
    /// field the helper reads (a Latin-1 password) is still refused.
    @Test func aFieldTheHelperDoesNotReadMayHoldAnyBytes() throws {
        let g = try Git()
        defer { g.close() }
        #expect(
            g.approve("protocol=https\nhost=example.org\nusername=bob\npassword=pb").status == 0)
        let file = g.d.root + "/git-credentials"
        #expect(
            g.git(
                ["credential-store", "--file", file, "store"],
                "protocol=https\nhost=example.org\nusername=bob\npassword=pb\n\n"
            ).status == 0)
        let input =
            Array("protocol=https\nhost=example.org\nwwwauth[]=Basic realm=\"caf".utf8) + [0xE9]
            + Array("\"\ncapability[]=authtype\n\n".utf8)
        let store = g.d.run(
            "git", ["credential-store", "--file", file, "get"], stdin: Data(input),
            environment: g.env)
        #expect(store.stdoutText == "username=bob\npassword=pb\n", "\(store)")
        let vault = g.helper("get", input)
        #expect(vault.status == 0 && vault.stdoutText == store.stdoutText, "\(vault)")
        let latin1 = g.helper(
            "store",
            Array("protocol=https\nhost=example.org\nusername=bob\npassword=caf".utf8) + [0xE9]
                + Array("\n\n".utf8))
        #expect(latin1.status == 65 && latin1.stderr.contains("not UTF-8"), "\(latin1)")
        #expect(g.fill("protocol=https\nhost=example.org").1["password"] == "pb")
    }

    /// An operation the helper does not know (git may add some) is ignored silently, exit 0,
    /// as gitcredentials(7) asks; `--help` prints the usage on stdout, exit 0; no operation
    /// at all is a usage error.
    @Test func unknownOperationsAreIgnoredAndHelpIsHelp() throws {
        let g = try Git()
        defer { g.close() }
        let unknown = g.helper("capability", Array("protocol=https\nhost=example.org\n\n".utf8))
        #expect(
            unknown.status == 0 && unknown.stdout.isEmpty && unknown.stderr.isEmpty, "\(unknown)")
        let help = g.helper("--help", [])
        #expect(
            help.status == 0
                && help.stdoutText.hasPrefix("usage: git-credential-vault get|store|erase"),
            "\(help)")
        let none = g.d.run("git-credential-vault", [], stdin: Data(), environment: g.env)
        #expect(none.status == 64 && none.stderr.hasPrefix("usage:"), "\(none)")
        #expect(g.internetItems().isEmpty)
    }

    /// While the vault is locked the helper changes nothing and exits 0 (git then asks);
    /// `get` says nothing, as without a helper, while `store` and `erase` say on stderr that
    /// nothing was stored or erased (a credential git saved would otherwise be missing later
    /// without a word), never repeating the password; `git credential approve` shows the line.
    @Test func aLockedVaultMakesTheHelperANoOpThatSaysSoOnStore() throws {
        let g = try Git()
        defer { g.close() }
        #expect(
            g.approve("protocol=https\nhost=example.org\nusername=bob\npassword=pb").status == 0)
        try #require(g.d.ctl(["lock"]).status == 0)

        // get: nothing printed, exit 0; git falls back to asking (and fails: prompts are off).
        let get = g.helper("get", Array("protocol=https\nhost=example.org\nusername=bob\n\n".utf8))
        #expect(get.status == 0 && get.stdout.isEmpty && get.stderr.isEmpty, "\(get)")
        let (fill, _) = g.fill("url=https://bob@example.org/")
        #expect(fill.status != 0 && !fill.stdoutText.contains("password="), "\(fill)")

        // store and erase change nothing while locked.
        let store = g.helper(
            "store",
            Array("protocol=https\nhost=example.org\nusername=bob\npassword=overwritten\n\n".utf8))
        #expect(store.status == 0 && store.stdout.isEmpty, "\(store)")
        #expect(
            store.stderr
                == "git-credential-vault: store: the vault is locked; nothing stored (vaultctl unlock, then run the git command again)\n",
            "\(store)")
        let approve = g.approve(
            "protocol=https\nhost=example.org\nusername=bob\npassword=overwritten")
        #expect(
            approve.status == 0
                && approve.stderr.contains("store: the vault is locked; nothing stored")
                && !approve.stderr.contains("overwritten"), "\(approve)")
        #expect(g.reject("protocol=https\nhost=example.org\nusername=bob\npassword=pb").status == 0)
        let erase = g.helper(
            "erase", Array("protocol=https\nhost=example.org\nusername=bob\n\n".utf8))
        #expect(
            erase.status == 0
                && erase.stderr.hasPrefix(
                    "git-credential-vault: erase: the vault is locked; nothing erased"),
            "\(erase)")

        try #require(g.d.unlock().status == 0)
        let (_, after) = g.fill("url=https://bob@example.org/")
        #expect(after["password"] == "pb", "nothing was erased or overwritten: \(after)")
        #expect(g.internetItems().count == 1)
    }

    @Test func aVaultdThatDoesNotAnswerDoesNotHangGit() throws {
        let g = try Git()
        defer { g.close() }
        #expect(
            g.approve("protocol=https\nhost=example.org\nusername=bob\npassword=pb").status == 0)
        // A stopped vaultd still accepts connections (the kernel queues them) but never answers.
        let pid = try #require(g.d.pid)
        try #require(kill(pid, SIGSTOP) == 0)
        defer { kill(pid, SIGCONT) }

        let started = Date()
        let fill = g.d.run(
            "git", ["credential", "fill"], stdin: Data("url=https://bob@example.org/\n\n".utf8),
            environment: g.env, timeout: 40)
        let took = Date().timeIntervalSince(started)
        #expect(!fill.timedOut && took < 30, "git waited \(took) s: \(fill)")
        #expect(fill.status != 0 && !fill.stdoutText.contains("password="), "\(fill)")
        #expect(fill.stderr.contains("vaultd did not answer"), "\(fill)")
        // store gives up the same way (erase shares its path).
        let store = g.d.run(
            "git-credential-vault", ["store"],
            stdin: Data("protocol=https\nhost=example.org\nusername=bob\npassword=other\n\n".utf8),
            environment: g.env, timeout: 40)
        #expect(
            !store.timedOut && store.status == 69 && store.stderr.contains("did not answer"),
            "\(store)")

        // Once vaultd runs again the credential is there, unchanged.
        try #require(kill(pid, SIGCONT) == 0)
        let (_, after) = g.fill("url=https://bob@example.org/")
        #expect(after["password"] == "pb", "\(after)")
    }

    /// A client certificate's passphrase (http.sslCertPasswordProtected): git asks with
    /// `protocol=cert`, the certificate's path and an empty host and username, as git's own
    /// credential-store keeps it. Another certificate's path gets nothing.
    @Test func aClientCertificatePassphraseIsKeptByItsPath() throws {
        let g = try Git()
        defer { g.close() }
        let cert = "protocol=cert\nhost=\nusername=\npath=/home/u/client.p12"
        #expect(g.approve(cert + "\npassword=certpass").status == 0)
        let items = g.internetItems()
        #expect(
            items.count == 1 && items.first?["path"] as? String == "/home/u/client.p12"
                && items.first?["protocol"] as? String == "cert", "\(items)")
        let (r, got) = g.fill(cert)
        #expect(r.status == 0 && got["password"] == "certpass", "\(r)")
        let (other, _) = g.fill("protocol=cert\nhost=\nusername=\npath=/home/u/other.p12")
        #expect(other.status != 0, "another certificate got a passphrase: \(other)")
        // Without a path there is nothing to name: no answer, nothing stored.
        #expect(
            g.helper("store", Array("protocol=cert\nhost=\nusername=\npassword=x\n\n".utf8)).status
                == 0)
        #expect(g.internetItems().count == 1)
        #expect(g.reject(cert + "\npassword=certpass").status == 0)
        #expect(g.internetItems().isEmpty)
    }

    @Test func expiryAndRefreshTokenPassThrough() throws {
        let g = try Git()
        defer { g.close() }
        // git 2.39 does not forward these fields itself; speak to the helper as newer git does.
        let store = g.helper(
            "store",
            Array(
                "protocol=https\nhost=example.org\nusername=bob\npassword=pb\npassword_expiry_utc=2000000000\noauth_refresh_token=rt-1\n\n"
                    .utf8))
        #expect(store.status == 0, "\(store)")
        let get = g.helper("get", Array("protocol=https\nhost=example.org\n\n".utf8))
        #expect(
            get.stdoutText
                == "username=bob\npassword=pb\npassword_expiry_utc=2000000000\noauth_refresh_token=rt-1\n",
            "\(get)")
        // A new store without them drops them.
        _ = g.helper(
            "store", Array("protocol=https\nhost=example.org\nusername=bob\npassword=pb2\n\n".utf8))
        let again = g.helper("get", Array("protocol=https\nhost=example.org\n\n".utf8))
        #expect(again.stdoutText == "username=bob\npassword=pb2\n", "\(again)")
    }

    /// An expired password (`password_expiry_utc` in the past: an OAuth access token) is not
    /// offered: git 2.39 would use it (it does not know the field), later git drops it and
    /// asks no further, hiding a valid match. The next match is offered instead; an expiry
    /// git would not read as one (0, not a number) is none, as in git's credential_read.
    @Test func anExpiredPasswordIsNotOffered() throws {
        let g = try Git()
        defer { g.close() }
        let later = Int(Date().timeIntervalSince1970) + 3600
        for input in [
            "protocol=https\nhost=example.org\nusername=bob\npassword=pb-valid\npassword_expiry_utc=\(later)",
            "protocol=https\nhost=example.org\nusername=alice\npassword=pa-expired\npassword_expiry_utc=1000",
            "protocol=https\nhost=zero.example\nusername=carol\npassword=pc\npassword_expiry_utc=0",
            "protocol=https\nhost=junk.example\nusername=dave\npassword=pd\npassword_expiry_utc=soon",
        ] {
            #expect(g.helper("store", Array((input + "\n\n").utf8)).status == 0, "\(input)")
        }
        // alice's is the newest, but expired: bob's is offered.
        let (r, latest) = g.fill("protocol=https\nhost=example.org")
        #expect(
            r.status == 0 && latest["username"] == "bob" && latest["password"] == "pb-valid", "\(r)"
        )
        // Asked for alice: nothing, so git asks (and fails: prompts are off).
        let (alice, _) = g.fill("url=https://alice@example.org/")
        #expect(alice.status != 0 && !alice.stdoutText.contains("pa-expired"), "\(alice)")
        let direct = g.helper(
            "get", Array("protocol=https\nhost=example.org\nusername=alice\n\n".utf8))
        #expect(direct.status == 0 && direct.stdout.isEmpty, "\(direct)")
        let (_, carol) = g.fill("protocol=https\nhost=zero.example")
        #expect(carol["password"] == "pc", "\(carol)")
        let (_, dave) = g.fill("protocol=https\nhost=junk.example")
        #expect(dave["password"] == "pd", "\(dave)")
        // The expired item is still there (a store replaces it; reject removes it).
        #expect(g.internetItems().count == 4)
    }

    /// An empty password is a password: git approves it (a token sent as the username, say)
    /// and git's credential-store keeps it and gives it back, so git asks no one. The helper
    /// keeps it too; a store without a password line stores nothing.
    @Test func anEmptyPasswordIsStoredAndGivenBackAsGitsCredentialStoreDoes() throws {
        let g = try Git()
        defer { g.close() }
        #expect(
            g.approve("protocol=https\nhost=example.org\nusername=tok-123\npassword=").status == 0)
        let items = g.internetItems()
        #expect(items.count == 1 && items.first?["account"] as? String == "tok-123", "\(items)")
        let (r, got) = g.fill("protocol=https\nhost=example.org")
        #expect(r.status == 0 && got["username"] == "tok-123" && got["password"] == "", "\(r)")
        // The same answer as git's credential-store.
        let file = g.d.root + "/git-credentials"
        let input = "protocol=https\nhost=example.org\nusername=tok-123\npassword=\n\n"
        #expect(g.git(["credential-store", "--file", file, "store"], input).status == 0)
        let store = g.git(
            ["credential-store", "--file", file, "get"], "protocol=https\nhost=example.org\n\n")
        let vault = g.helper("get", Array("protocol=https\nhost=example.org\n\n".utf8))
        #expect(
            vault.status == 0 && vault.stdoutText == store.stdoutText
                && vault.stdoutText == "username=tok-123\npassword=\n", "\(vault) \(store)")
        // No password line: nothing to store.
        #expect(
            g.helper("store", Array("protocol=https\nhost=other.example\nusername=u\n\n".utf8))
                .status == 0)
        #expect(g.internetItems().count == 1)
        // reject with the empty password removes it.
        #expect(
            g.reject("protocol=https\nhost=example.org\nusername=tok-123\npassword=").status == 0)
        #expect(g.internetItems().isEmpty, "\(g.internetItems())")
    }

    /// An empty username git approved (`username=`, as from `https://@host/`) comes back as
    /// `username=`, as git's credential-store gives it: without the line git would ask for a
    /// username (here, without a terminal, git would fail). A port is split out only as git
    /// writes it: `host:0443` and `host:+443` are other hosts than `host:443` for git and its
    /// credential-store, so the helper must not read all three as port 443.
    @Test func anEmptyUsernameAndAnOddlyWrittenPortAreWhatGitsCredentialStoreMakesOfThem() throws {
        let g = try Git()
        defer { g.close() }
        let file = g.d.root + "/git-credentials"
        func both(_ action: String, _ input: String) -> (vault: ProcessResult, store: ProcessResult)
        {
            (
                g.helper(action, Array((input + "\n\n").utf8)),
                g.git(["credential-store", "--file", file, action], input + "\n\n")
            )
        }
        #expect(g.approve("protocol=https\nhost=e.example\nusername=\npassword=tok").status == 0)
        let (r, got) = g.fill("protocol=https\nhost=e.example")
        #expect(r.status == 0 && got["username"] == "" && got["password"] == "tok", "\(r)")
        for input in [
            "protocol=https\nhost=e.example\nusername=\npassword=tok",
            "protocol=https\nhost=q.example:0443\nusername=u\npassword=p0443",
        ] {
            let (v, s) = both("store", input)
            #expect(v.status == 0 && s.status == 0, "\(input): \(v) \(s)")
        }
        for (input, output) in [
            ("protocol=https\nhost=e.example", "username=\npassword=tok\n"),
            ("protocol=https\nhost=q.example:0443", "username=u\npassword=p0443\n"),
            ("protocol=https\nhost=q.example:443", ""),
            ("protocol=https\nhost=q.example:+443", ""),
        ] {
            let (v, s) = both("get", input)
            #expect(s.stdoutText == output, "credential-store: \(input): \(s)")
            #expect(v.status == 0 && v.stdoutText == output, "\(input): \(v)")
        }
        #expect(
            g.internetItems().contains {
                $0["server"] as? String == "q.example:0443" && ($0["port"] as? Int ?? 0) == 0
            }, "\(g.internetItems())")
        // An item without an account that the helper did not store leaves the username to git.
        let add = g.d.ctl(
            [
                "item", "add", "internet", "--access-group", "git", "--server", "n.example",
                "--protocol", "https",
            ], stdin: Data("np".utf8))
        try #require(add.status == 0, "\(add)")
        #expect(
            g.helper("get", Array("protocol=https\nhost=n.example\n\n".utf8)).stdoutText
                == "password=np\n")
    }

    /// An OAuth refresh token is a secret (longer-lived than the password it refreshes): it is
    /// kept with the password, in the item's secret, as git's own libsecret helper keeps it,
    /// never in an attribute, which `vaultctl item list --json` prints for every item and
    /// which is encrypted only under the metadata key. get, and erase with the password,
    /// work as before; an item stored with the token in `generic` still gives it back.
    @Test func theRefreshTokenIsKeptInTheSecretNotInAnAttribute() throws {
        let g = try Git()
        defer { g.close() }
        let store = g.helper(
            "store",
            Array(
                "protocol=https\nhost=example.org\nusername=bob\npassword=pb\npassword_expiry_utc=2000000000\noauth_refresh_token=rt-secret-1\n\n"
                    .utf8))
        #expect(store.status == 0, "\(store)")
        let list = g.d.ctl(["item", "list", "internet", "--json"])
        // `generic` is shown as text when it is UTF-8 (the helper keeps JSON there).
        let generic = list.jsonArray?.first?["generic"] as? String ?? ""
        #expect(
            list.status == 0 && !list.stdoutText.contains("rt-secret")
                && !generic.contains("rt-secret"), "\(list) generic: \(generic)")
        #expect(generic.contains("2000000000"), "the expiry is no secret: \(generic)")
        let get = g.helper("get", Array("protocol=https\nhost=example.org\n\n".utf8))
        #expect(
            get.stdoutText
                == "username=bob\npassword=pb\npassword_expiry_utc=2000000000\noauth_refresh_token=rt-secret-1\n",
            "\(get)")
        let (_, filled) = g.fill("url=https://bob@example.org/")
        #expect(filled["password"] == "pb", "\(filled)")
        // erase compares the password, not what is kept beside it.
        #expect(
            g.reject("protocol=https\nhost=example.org\nusername=bob\npassword=other").status == 0)
        #expect(g.internetItems().count == 1)
        #expect(g.reject("protocol=https\nhost=example.org\nusername=bob\npassword=pb").status == 0)
        #expect(g.internetItems().isEmpty, "\(g.internetItems())")

        // An item stored by an earlier helper, the token in generic: still given back.
        let add = g.d.ctl(
            [
                "item", "add", "internet", "--access-group", "git", "--server", "old.example",
                "--protocol", "https", "--account", "carol",
                "--generic",
                #"{"oauth_refresh_token":"rt-old","password_expiry_utc":"2000000000"}"#,
            ],
            stdin: Data("pc".utf8))
        #expect(add.status == 0, "\(add)")
        let oldGet = g.helper("get", Array("protocol=https\nhost=old.example\n\n".utf8))
        #expect(
            oldGet.stdoutText
                == "username=carol\npassword=pc\npassword_expiry_utc=2000000000\noauth_refresh_token=rt-old\n",
            "\(oldGet)")
    }

    @Test func theReadmeAppInstallLineGivesTheHelperItsGroup() throws {
        let g = try Git()
        defer { g.close() }
        let exe = URL(fileURLWithPath: Paths.tool("git-credential-vault")).resolvingSymlinksInPath()
            .path
        let install = g.d.ctl([
            "app", "install", "org.git-scm.credential-vault", "--exe", exe, "--access-group", "git",
        ])
        try #require(install.status == 0, "\(install)")
        #expect(
            g.approve("protocol=https\nhost=example.org\nusername=bob\npassword=pb").status == 0)
        let (_, f) = g.fill("url=https://bob@example.org/")
        #expect(f["password"] == "pb", "\(f)")
        #expect(g.internetItems().first?["accessGroup"] as? String == "git")
    }

    /// docs/git.md's `app install` line for the helper keeps git's credentials over a reinstall:
    /// The helper's executable gone and back (a package removed and installed again, `make
    /// uninstall install`) within the grace period is the same install; past it, an uninstall
    /// and a reinstall, whose first launch without `--keep-credentials-on-reinstall` would wipe
    /// every credential the helper had stored (the `git` group is no other app's). Run here as
    /// docs/git.md writes it (a line ending in `\` goes on on the next), with the default
    /// UninstallGraceSeconds (600 s) passed on vaultd's test clock, so both happen.
    @Test func theDocumentedAppInstallLineKeepsGitsCredentialsOverAReinstall() throws {
        let g = try Git()
        defer { g.close() }
        let page = try String(
            contentsOf: Paths.repoRoot.appendingPathComponent("docs/git.md"), encoding: .utf8
        )
        .replacingOccurrences(of: "\\\n", with: " ")
        let line = try #require(
            page.split(separator: "\n").first {
                $0.hasPrefix("    vaultctl app install org.git-scm.credential-vault ")
            })
        let dir = g.d.root + "/usr-local-bin"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let exe = dir + "/git-credential-vault"
        try FileManager.default.copyItem(atPath: Paths.tool("git-credential-vault"), toPath: exe)
        let words = line.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        try #require(
            words.first == "vaultctl" && words.contains("/usr/local/bin/git-credential-vault"),
            "\(line)")
        let install = g.d.ctl(
            words.dropFirst().map { $0 == "/usr/local/bin/git-credential-vault" ? exe : $0 })
        try #require(install.status == 0, "\(install)")
        func helper(_ verb: String, _ input: String) -> ProcessResult {
            g.git(
                ["-c", "credential.helper=", "-c", "credential.helper=" + exe, "credential", verb],
                input + "\n")
        }
        #expect(
            helper("approve", "protocol=https\nhost=example.org\nusername=bob\npassword=pb").status
                == 0)
        #expect(g.internetItems().count == 1)

        try #require(rename(exe, exe + ".aside") == 0)
        try g.d.tick()
        #expect(g.d.appShow("org.git-scm.credential-vault")?["missingSince"] is String)
        try g.d.advanceClock(by: 601)
        #expect(g.d.appShow("org.git-scm.credential-vault")?["installed"] as? Bool == false)
        try #require(rename(exe + ".aside", exe) == 0)
        try g.d.tick()
        #expect(g.d.appShow("org.git-scm.credential-vault")?["installed"] as? Bool == true)
        let fill = helper("fill", "protocol=https\nhost=example.org\n")
        #expect(fill.status == 0 && fill.stdoutText.contains("password=pb\n"), "\(fill)")
        #expect(g.internetItems().count == 1)
    }

    /// An endless or huge input is refused past 1 MiB (git sends a few short lines): the
    /// helper read stdin without a bound, growing for as long as it was fed.
    @Test func anInputOverOneMiBIsRefusedNotReadForEver() throws {
        let g = try Git()
        defer { g.close() }
        let r = g.d.run(
            "sh",
            ["-c", "head -c 2000000 /dev/zero | \"$0\" get", Paths.tool("git-credential-vault")],
            environment: g.env)
        #expect(
            r.status == 1
                && r.stderr.hasPrefix(
                    "git-credential-vault: cannot read standard input: File too large"),
            "\(r)")
    }

    /// The helper's output that cannot be written is a failure git can see, as vaultctl's is:
    /// exit 1 and 'git-credential-vault: cannot write to standard output' on stderr. It wrote
    /// with Foundation's FileHandle: `get` to a full disk crashed it (SIGILL, 132), as did any
    /// message on a stderr that could not take it, and with stdout closed its answer could go
    /// to the next file it opened as fd 1 (its socket to vaultd).
    @Test func helperOutputThatCannotBeWrittenIsAFailure() throws {
        let g = try Git()
        defer { g.close() }
        try #require(
            g.approve("protocol=https\nhost=out.example\nusername=u\npassword=sekrit-pw").status
                == 0)
        let input = Data("protocol=https\nhost=out.example\n\n".utf8)
        func helper(_ redirect: String, _ args: String = "get") -> ProcessResult {
            g.d.run(
                "sh", ["-c", "\"$0\" \(args) \(redirect)", Paths.tool("git-credential-vault")],
                stdin: input, environment: g.env)
        }
        for redirect in [">/dev/full", ">&-"] {
            let r = helper(redirect)
            #expect(r.status == 1, "get \(redirect): \(r)")
            #expect(
                r.stderr.hasPrefix("git-credential-vault: cannot write to standard output"),
                "get \(redirect): \(r)")
            #expect(
                !r.stderr.contains("Fatal error") && !r.stderr.contains("sekrit"),
                "get \(redirect): \(r)")
        }
        // stderr that cannot be written: the usage error and a rejected input still exit as
        // they should, not with a crash.
        #expect(helper("2>/dev/full", "").status == 64)
        let rejected = g.d.run(
            "sh", ["-c", "\"$0\" store 2>/dev/full", Paths.tool("git-credential-vault")],
            stdin: Data("host=a\r\n".utf8), environment: g.env)
        #expect(rejected.status == 65, "\(rejected)")
        #expect(helper(">/dev/full 2>/dev/full").status == 1)
        #expect(helper(">&- 2>&-").status == 1)
        // --help to a full disk is a failure too.
        #expect(helper(">/dev/full", "--help").status == 1)
        // Written whole, it is still 0 and the credential.
        let ok = helper("")
        #expect(
            ok.status == 0 && ok.stdoutText == "username=u\npassword=sekrit-pw\n"
                && ok.stderr.isEmpty, "\(ok)")
    }
}
