import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Install state against what a running instance of an earlier install does at the same
/// time (docs/apps.md): an instance connected before an uninstall or reinstall loses the app
/// tier, and nothing it does reaches the next install.
extension AppsTests {
    /// A raw client (the copied python3 registered as org.example.Raw) that says Hello, then
    /// calls `method` with `params` back to back until one fails; prints "ready" after 20
    /// calls and the failing reply at the end.
    static let hammerScript = rawClientScript(
        imports: "json, socket, sys",
        """
        call("io.vaultd.Vault.Hello", {})
        method, params = sys.argv[2], json.loads(sys.argv[3])
        n = 0
        while True:
            p = dict(params)
            if "key" in p: p["key"] = "k%d" % n
            r = call(method, p)
            if "error" in r:
                print(json.dumps(r), flush=True)
                break
            n += 1
            if n == 20: print("ready", flush=True)
        """)

    /// A raw observer: `Preferences.Observe` with the parameters in argv[2] (JSON), each reply
    /// printed on a line; it stops at the end of the stream, after 15 s without a reply
    /// (printing "timeout"), or, when argv[3] is not empty, after the first change of a key.
    static let observeScript = """
        import json, socket, sys
        s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); buf = b''
        s.sendall(json.dumps({"method": "io.vaultd.Preferences.Observe", "parameters": json.loads(sys.argv[2]), "more": True}).encode() + b'\\0')
        s.settimeout(15)
        try:
            while True:
                d = s.recv(65536)
                if not d: break
                buf += d
                while b'\\0' in buf:
                    m, _, buf = buf.partition(b'\\0'); print(m.decode(), flush=True)
                    if sys.argv[3] and '"key"' in m.decode(): sys.exit(0)
        except socket.timeout:
            print("timeout", flush=True)
        """

    /// Runs the hammer with `method` while the app is uninstalled; returns its last line (the
    /// refusal).
    static func hammerThroughAnUninstall(
        _ d: Daemon, _ python: String, _ method: String, _ params: String, round: Int
    ) throws -> String {
        try d.install("org.example.Raw", exe: python)
        let out = d.root + "/hammer-\(round).out"
        let pid = try ChildProcess.spawn(
            python, ["-c", hammerScript, d.socketPath, method, params], environment: d.environment,
            inputs: [:],
            stdout: .file(out, append: false), stderr: .file(out + ".err", append: false))
        let read = { (try? String(contentsOfFile: out, encoding: .utf8)) ?? "" }
        #expect(
            eventually(timeout: 20) { read().contains("ready") },
            "\((try? String(contentsOfFile: out + ".err", encoding: .utf8)) ?? "")")
        let uninstall = d.ctl(["app", "uninstall", "org.example.Raw"])
        #expect(uninstall.status == 0, "\(uninstall)")
        if ChildProcess.wait(pid, timeout: 20) == nil {
            kill(pid, SIGKILL)
            _ = ChildProcess.wait(pid, timeout: 5)
        }
        let last = read().split(separator: "\n").last.map(String.init) ?? ""
        #expect(last.contains(Self.missingEntitlement), "round \(round): \(read())")
        return last
    }

    /// A preference write the app sent as it was being uninstalled either landed before the
    /// uninstall (and went with the domain) or is refused: it never re-creates the domain
    /// the uninstall removed (were the check and the write two steps, it could, and the
    /// next install would read the key). Timing-dependent: several rounds.
    @Test func aPreferenceSetRacingAnUninstallDoesNotReviveTheDomain() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let python = try Self.rawPythonApp(d)
        for round in 1...5 {
            _ = try Self.hammerThroughAnUninstall(
                d, python, "io.vaultd.Preferences.Set",
                #"{"key": "", "value": {"string": "zombie"}}"#, round: round)
            let left = d.ctl(["defaults", "read", "org.example.Raw"])
            #expect(
                left.status != 0 && !left.stdoutText.contains("zombie"),
                "round \(round): the uninstalled app's domain came back: \(left)")
        }
        // And the next install starts with none.
        try d.install("org.example.Raw", exe: python)
        #expect(d.ctl(["defaults", "read", "org.example.Raw"]).stdoutText.isEmpty)
    }

    /// An instance of the earlier install keeps its cache path and writes there after the
    /// uninstall (making the directory again, as `createDirectory(withIntermediateDirectories:)`
    /// does), or vaultd was killed before the uninstall had removed every file: the next
    /// install's cache is empty all the same.
    @Test func aReinstallFindsNoCacheFileAnEarlierInstallLeft() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        try d.install(Self.appA, exe: a)
        let path = d.app(a, ["cache", "path"]).stdoutText.trimmingCharacters(in: .newlines)
        try #require(path.hasPrefix(d.root + "/"), "\(path)")
        #expect(d.ctl(["app", "uninstall", Self.appA]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: path))
        // The instance still running writes its file.
        try FileManager.default.createDirectory(
            atPath: path + "/sub", withIntermediateDirectories: true)
        try Data("of the earlier install".utf8).write(
            to: URL(fileURLWithPath: path + "/sub/leftover"))

        try d.install(Self.appA, exe: a)
        #expect(try d.launch(a).firstLaunch)
        let again = d.app(a, ["cache", "path"]).stdoutText.trimmingCharacters(in: .newlines)
        #expect(again == path)
        let seen = (try? FileManager.default.subpathsOfDirectory(atPath: again)) ?? []
        #expect(seen.isEmpty, "the new install sees the earlier install's cache: \(seen)")
        let usage = d.ctl(["cache", "usage", "--json"])
        #expect(
            CacheUsageReport(try #require(usage.jsonObject, "\(usage)")).files(Self.appA) == 0,
            "\(usage)")
    }

    /// A Preferences.Observe stream opened by an instance of the earlier install ends with
    /// MissingEntitlement once the app is uninstalled and installed again: it went on
    /// receiving every value the new install wrote to the domain.
    @Test func anObserveStreamOfAnEarlierInstallSeesNothingOfTheNextOne() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let python = try Self.rawPythonApp(d)
        try d.install("org.example.Raw", exe: python)
        let out = d.root + "/observe.out"
        let pid = try ChildProcess.spawn(
            python, ["-c", Self.observeScript, d.socketPath, "{}", ""], environment: d.environment,
            inputs: [:], stdout: .file(out, append: false),
            stderr: .file(out + ".err", append: false))
        let read = { (try? String(contentsOfFile: out, encoding: .utf8)) ?? "" }
        #expect(
            eventually(timeout: 10) { read().contains("\"values\"") },
            "the stream did not start: \(read())")
        #expect(d.ctl(["app", "uninstall", "org.example.Raw"]).status == 0)
        try d.install("org.example.Raw", exe: python)
        let set = d.app(
            python,
            [
                "-c",
                Self.rawClientScript(
                    imports: "json, socket, sys",
                    """
                    print(json.dumps(call("io.vaultd.Preferences.Set", {"key": "of-the-new-install", "value": {"string": "NEW"}})))
                    """), d.socketPath,
            ])
        #expect(set.status == 0 && !set.stdoutText.contains("error"), "\(set)")
        if ChildProcess.wait(pid, timeout: 20) == nil {
            kill(pid, SIGKILL)
            _ = ChildProcess.wait(pid, timeout: 5)
        }
        let lines = read()
        #expect(
            !lines.contains("of-the-new-install"),
            "the earlier install's stream got the new install's value: \(lines)")
        #expect(lines.contains(Self.missingEntitlement) && !lines.contains("timeout"), "\(lines)")
    }

    /// An uninstall removes the app's preferences domain; an observer of that domain (the
    /// owner's, here) is told each key went, as for any other removal: it was told nothing
    /// and kept the values the uninstall had deleted.
    @Test func anUninstallTellsObserversOfTheAppsDomainThatItsKeysWent() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        try d.install(Self.appA, exe: a)
        #expect(d.app(a, ["defaults", "set", "colour", "blue"]).status == 0)
        let out = d.root + "/observe.out"
        let pid = try ChildProcess.spawn(
            "/usr/bin/python3",
            [
                "-c", Self.observeScript, d.socketPath, #"{"domains": ["\#(Self.appA)"]}"#,
                "stop at a key",
            ], environment: d.environment, inputs: [:],
            stdout: .file(out, append: false), stderr: .file(out + ".err", append: false))
        let read = { (try? String(contentsOfFile: out, encoding: .utf8)) ?? "" }
        #expect(
            eventually(timeout: 10) { read().contains("blue") },
            "the stream did not start: \(read())")
        #expect(d.ctl(["app", "uninstall", Self.appA]).status == 0)
        if ChildProcess.wait(pid, timeout: 20) == nil {
            kill(pid, SIGKILL)
            _ = ChildProcess.wait(pid, timeout: 5)
        }
        let last = read().split(separator: "\n").last.map(String.init) ?? ""
        #expect(last.contains("\"key\":\"colour\"") && last.contains("\"value\":null"), "\(read())")
    }
}
