import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// User presence through the real polkit (docs/keychain.md, "User presence"): polkitd on a
/// private system bus, vaultd and its clients running as a dedicated user with a known
/// password, and pkttyagent on a tmux pane answering the prompt. The scenario
/// (`Tests/Fixtures/polkit/presence-scenario.sh`) runs once, in mount and PID namespaces of its
/// own (`unshare -m -p`), and prints one
/// line per case; each test below asserts on its case.
///
/// Why a user of its own: polkit authorizes uid 0 for everything without asking, and
/// `auth_self` asks the subject's user for their own password. The user
/// (`vaultd-presence`, no home, no login shell) is made once and kept (`useradd` when missing);
/// its password is set anew at each run (`chpasswd`), a random one the scenario types.
enum PresenceScenario {
    static let user = "vaultd-presence"
    static let script = Paths.repoRoot.appendingPathComponent(
        "Tests/Fixtures/polkit/presence-scenario.sh"
    ).path
    static let policy = Paths.repoRoot.appendingPathComponent("dist/polkit/io.vaultd.policy").path
    static let environment = ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"]

    /// The scenario's lines by case name (`case=NAME ...`), and its other lines by key.
    struct Outcome: Sendable {
        var cases: [String: String] = [:]
        var values: [String: String] = [:]
        var transcript = ""
        var vaultdLog = ""
        var panes: [String: String] = [:]

        /// The `rc=` of case `name`.
        func rc(_ name: String) -> Int? {
            cases[name].flatMap { line in
                line.split(separator: " ").first { $0.hasPrefix("rc=") }.flatMap {
                    Int($0.dropFirst(3))
                }
            }
        }
        /// What case `name` printed on stdout (`out=` up to ` err=`).
        func out(_ name: String) -> String? {
            guard let line = cases[name], let o = line.range(of: " out="),
                let e = line.range(of: " err=", range: o.upperBound..<line.endIndex)
            else { return nil }
            return String(line[o.upperBound..<e.lowerBound]).trimmingCharacters(in: .whitespaces)
        }
        func err(_ name: String) -> String {
            guard let line = cases[name], let e = line.range(of: " err=") else { return "" }
            return String(line[e.upperBound...])
        }
    }

    static let outcome: Result<Outcome, HarnessError> = {
        do { return .success(try run()) } catch let e as HarnessError {
            return .failure(e)
        } catch { return .failure(HarnessError("\(error)")) }
    }()

    static func run() throws -> Outcome {
        if getpwnam(user) == nil {
            let add = try ChildProcess.run(
                "useradd",
                [
                    "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin",
                    user,
                ],
                environment: environment)
            guard add.status == 0 || getpwnam(user) != nil else {
                throw HarnessError("useradd \(user): \(add)")
            }
        }
        guard let pw = getpwnam(user) else { throw HarnessError("no user \(user)") }
        let (uid, gid) = (pw.pointee.pw_uid, pw.pointee.pw_gid)
        var bytes = [UInt8](repeating: 0, count: 9)
        arc4random_buf(&bytes, bytes.count)
        let password = "pw-" + bytes.map { String(format: "%02x", $0) }.joined()
        let set = try ChildProcess.run(
            "chpasswd", [], environment: environment, stdin: Data("\(user):\(password)\n".utf8))
        guard set.status == 0 else { throw HarnessError("chpasswd: \(set)") }

        let root = try TemporaryDirectory.make(prefix: "vpres")
        defer { TemporaryDirectory.remove(root) }
        // The user reaches the FIFOs here and owns `u` (vaultd's socket, data and home).
        chmod(root, 0o755)
        for d in [root + "/u", root + "/u/home"] {
            guard mkdir(d, 0o700) == 0, chown(d, uid, gid) == 0 else {
                throw HarnessError("\(d): \(String(cString: strerror(errno)))")
            }
        }
        try Data(password.utf8).write(to: URL(fileURLWithPath: root + "/password"))
        // A mount namespace (see the script) and a PID namespace of its own: should the run
        // be killed at its timeout, everything it started dies with its first process.
        let r = try ChildProcess.run(
            "unshare",
            [
                "-m", "-p", "--fork", "--kill-child", "--mount-proc", "sh", script, root, user,
                Paths.tool("vaultd"), Paths.tool("vaultctl"),
                Paths.tool("git-credential-vault"), policy,
            ],
            environment: environment, timeout: 300)
        var o = Outcome()
        o.transcript = String(decoding: r.stdout, as: UTF8.self) + r.stderr
        o.vaultdLog = (try? String(contentsOfFile: root + "/vaultd.log", encoding: .utf8)) ?? ""
        for name in ["right", "wrong", "cancel", "silent"] {
            o.panes[name] = try? String(contentsOfFile: root + "/pane.\(name)", encoding: .utf8)
        }
        for line in o.transcript.split(separator: "\n").map(String.init) {
            if line.hasPrefix("case=") {
                let name = line.dropFirst(5).prefix { $0 != " " }
                o.cases[String(name)] = line
            } else if let eq = line.firstIndex(of: "="), !line.hasPrefix("error") {
                o.values[String(line[..<eq])] = String(line[line.index(after: eq)...])
            }
        }
        guard r.status == 0, o.transcript.contains("\ndone") else {
            throw HarnessError(
                "the presence scenario failed (status \(r.status)): \(o.transcript)\nvaultd: \(o.vaultdLog)"
            )
        }
        return o
    }

    static func get() throws -> Outcome { try outcome.get() }
}

@Suite("User presence through polkit", .serialized, .tags(.system))
struct PresenceTests {
    /// vaultctl's exit code for InteractionNotAllowed (-25308).
    static let locked = 36

    @Test func theRightPasswordReleasesTheSecret() throws {
        let o = try PresenceScenario.get()
        #expect(o.rc("right") == 0, "\(o.cases["right"] ?? o.transcript)")
        #expect(o.out("right") == "s3cret-presence")
        #expect(o.panes["right"]?.contains("AUTHENTICATING FOR io.vaultd.user-presence") == true)
        #expect(o.vaultdLog.contains("presence: confirmed for pid"))
    }

    @Test func aWrongPasswordIsInteractionNotAllowed() throws {
        let o = try PresenceScenario.get()
        #expect(o.rc("wrong") == Self.locked, "\(o.cases["wrong"] ?? o.transcript)")
        #expect(o.out("wrong") == "")
        #expect(o.err("wrong").contains("user presence was not confirmed"))
        #expect(o.panes["wrong"]?.contains("AUTHENTICATION FAILED") == true)
    }

    @Test func aCancelledPromptIsInteractionNotAllowed() throws {
        let o = try PresenceScenario.get()
        #expect(o.rc("cancel") == Self.locked, "\(o.cases["cancel"] ?? o.transcript)")
        #expect(o.out("cancel") == "")
        #expect(o.err("cancel").contains("user presence was not confirmed"))
    }

    @Test func noAgentFailsAtOnce() throws {
        let o = try PresenceScenario.get()
        #expect(o.rc("none") == Self.locked, "\(o.cases["none"] ?? o.transcript)")
        #expect(o.out("none") == "")
        #expect(o.err("none").contains("no agent"))
    }

    @Test func noPolkitdAndNoSystemBusFailAtOnce() throws {
        let o = try PresenceScenario.get()
        #expect(o.rc("nopolkit") == Self.locked, "\(o.cases["nopolkit"] ?? o.transcript)")
        #expect(o.err("nopolkit").contains("polkit did not answer"))
        #expect(o.rc("nobus") == Self.locked, "\(o.cases["nobus"] ?? o.transcript)")
        #expect(o.err("nobus").contains("no system bus"))
        #expect(o.out("nobus") == "")
    }

    @Test func anUnansweredPromptIsCancelledAtTheTimeout() throws {
        let o = try PresenceScenario.get()
        #expect(o.rc("silent") == Self.locked, "\(o.cases["silent"] ?? o.transcript)")
        #expect(o.values["silent-prompted"] == "yes")
        // PresenceTimeoutSeconds is 8 in the scenario: the read ends soon after, not at the
        // client's 60 s.
        let seconds = Int(o.values["silent-seconds"] ?? "") ?? -1
        #expect((7...30).contains(seconds), "took \(seconds) s")
        #expect(o.err("silent").contains("no answer within 8 s"))
    }

    @Test func theGitHelperGetsThePasswordOnlyWithPresence() throws {
        let o = try PresenceScenario.get()
        #expect(o.rc("git-right") == 0, "\(o.cases["git-right"] ?? o.transcript)")
        #expect(o.out("git-right")?.contains("password=git-pw-9") == true)
        // Without an agent git is told nothing (and asks the next helper, or the user).
        #expect(o.out("git-none")?.contains("password=") == false)
        #expect(o.out("git-none")?.contains("git-pw-9") == false)
    }

    @Test func theSecretServiceWaitsForTheUserOnAWorkerOfItsOwn() throws {
        let o = try PresenceScenario.get()
        #expect(o.rc("ss-right") == 0, "\(o.cases["ss-right"] ?? o.transcript)")
        #expect(o.out("ss-right") == "ss-pw-3")
        // No agent: secret-tool finds the item but gets no secret (GetSecrets leaves it out).
        #expect(o.out("ss-none") == "")
        #expect(o.out("ss-none")?.contains("ss-pw-3") == false)
    }

    @Test func attributesAreNotGatedAndShowTheAccessControl() throws {
        let o = try PresenceScenario.get()
        #expect(o.rc("json") == 0, "\(o.cases["json"] ?? o.transcript)")
        #expect(o.out("json")?.contains("\"accessControl\":\"userPresence\"") == true)
        #expect(o.out("json")?.contains("s3cret") == false)
    }

    @Test func anAccessControlOnASynchronizableItemIsParam() throws {
        let o = try PresenceScenario.get()
        // Param (-50): vaultctl's exit code for bad input.
        #expect(o.rc("sync") == 65, "\(o.cases["sync"] ?? o.transcript)")
        #expect(o.err("sync").contains("cannot be synchronizable"))
    }

    @Test func theGraceWindowSparesASecondReadOfTheSameProcess() throws {
        let o = try PresenceScenario.get()
        #expect(o.rc("grace") == 0, "\(o.cases["grace"] ?? o.transcript)")
        #expect(o.out("grace") == "first s3cret-presence second s3cret-presence")
    }

    @Test func withoutGraceTheSecondReadIsAskedAgain() throws {
        let o = try PresenceScenario.get()
        #expect(o.rc("nograce") == 0, "\(o.cases["nograce"] ?? o.transcript)")
        let out = o.out("nograce") ?? ""
        #expect(out.hasPrefix("first s3cret-presence second "))
        // The agent is gone by then: the second check finds none.
        #expect(out.contains("io.vaultd.Keychain.InteractionNotAllowed"))
    }
}
