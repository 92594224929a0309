import Foundation
import TestSupport
import Testing
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Issue #22, identity that fails closed, through real processes: a sandbox's claim to be a
/// Flatpak app is checked against Flatpak's host record of the instance; `/.flatpak-info`
/// that is no regular file costs vaultd nothing; registrations on first contact and the
/// refusals' log lines are bounded; a connection made by one program that then runs
/// another (exec, a child keeping the socket) is not taken for the second.
@Suite struct IdentityFailsClosedTests {
    static let victim = "org.example.Victim"

    static func daemon(config: [String: Any]? = nil) throws -> Daemon {
        try AppsTests.daemon(config: config)
    }

    /// A sandbox with a self-written `/.flatpak-info` naming an auto-registered Flatpak app
    /// (with no host record, or pointing at another app's instance), or naming a group the
    /// owner keeps items in, reads none of their items.
    @Test(.tags(.system)) func aSelfWrittenFlatpakInfoGetsNoneOfTheItemsOfTheAppOrGroupItNames()
        throws
    {
        let d = try Self.daemon()
        defer { d.close() }
        let app = try d.placeExample("sandboxed")
        // The victim: a real Flatpak instance, registered on first contact, with a token.
        let set = try AppsTests.sandboxed(
            d, app, ["token", "set"], flatpakID: Self.victim, stdin: Data("victim-token".utf8))
        try #require(set.status == 0, "\(set)")
        #expect(d.appShow(Self.victim)?["flatpak"] as? Bool == true)
        #expect(
            try AppsTests.sandboxed(d, app, ["token", "get"], flatpakID: Self.victim).stdoutText
                == "victim-token")
        // The owner's items in a group of its own choosing.
        #expect(
            d.ctl(
                [
                    "item", "add", "--access-group", "team.example.owned", "--service", "s",
                    "--account", "a",
                ], stdin: Data("owned-secret".utf8)
            ).status == 0)
        // Another app's real instance, whose ID a fake points at.
        let attacker = try AppsTests.flatpakInstance(d, appID: "org.example.Attacker")

        for (what, source) in [
            ("no host record", AppsTests.InfoSource.selfWritten),
            ("another app's instance", .claimingInstance(attacker.id)),
        ] {
            let token = try AppsTests.sandboxed(
                d, app, ["token", "get"], flatpakID: Self.victim, info: source)
            #expect(
                token.status != 0 && !token.stdoutText.contains("victim-token"), "\(what): \(token)"
            )
            let list = try AppsTests.sandboxed(
                d, app, ["item", "list", "--access-group", Self.victim], flatpakID: Self.victim,
                info: source)
            #expect(list.status != 0 && !list.stdoutText.contains("token"), "\(what): \(list)")
            let owned = try AppsTests.sandboxed(
                d, app,
                [
                    "item", "get", "--access-group", "team.example.owned", "--service", "s",
                    "--account", "a",
                ], flatpakID: "team.example.owned",
                info: source)
            #expect(
                owned.status != 0 && !owned.stdoutText.contains("owned-secret"), "\(what): \(owned)"
            )
        }
        // Refused, logged, and nothing registered under the group's name.
        #expect(
            d.log.contains("no Flatpak instance \"1\"")
                && d.log.contains("is not Flatpak's record of instance"), "log:\n\(d.log)")
        #expect(d.appShow("team.example.owned") == nil)
        // The real instances are still served, the victim's token intact.
        #expect(
            try AppsTests.sandboxed(d, app, ["token", "get"], flatpakID: Self.victim).stdoutText
                == "victim-token")
        #expect(
            d.ctl([
                "item", "get", "--access-group", "team.example.owned", "--service", "s",
                "--account", "a",
            ]).stdoutText == "owned-secret")
    }

    /// A sandbox showing a byte-identical copy of a running Flatpak instance's host record,
    /// or that record itself bound in, is refused: it does not run in the instance's sandbox
    /// (its mount namespace is not that of the instance's first process, which bwrap records
    /// in `bwrapinfo.json`). The app's own instances are served throughout.
    @Test(.tags(.system)) func aCopyOfARunningInstancesRecordGetsNothing() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let app = try d.placeExample("sandboxed")
        let set = try AppsTests.sandboxed(
            d, app, ["token", "set"], flatpakID: Self.victim, stdin: Data("victim-token".utf8))
        try #require(set.status == 0, "\(set)")
        // An instance of the victim that keeps running (its sandbox sleeps), as flatpak run makes it.
        let instance = try AppsTests.flatpakInstance(d, appID: Self.victim)
        let sleeper = try ChildProcess.spawn(
            "sh",
            [
                "-c", #"i=$1; r=$2; shift 2; exec bwrap --info-fd 3 "$@" 3>"$i" 4<"$r""#, "sh",
                AppsTests.instanceDirectory(d, instance.id) + "/bwrapinfo.json",
                instance.info, "--die-with-parent", "--tmpfs", "/", "--ro-bind", "/usr", "/usr",
                "--symlink", "usr/lib", "/lib", "--symlink",
                "usr/lib64", "/lib64", "--ro-bind-data", "4", "/.flatpak-info", "--proc", "/proc",
                "--dev", "/dev", "/usr/bin/sleep", "600",
            ],
            environment: d.environment, inputs: [:],
            stdout: .file(d.root + "/sleeper.out", append: false),
            stderr: .file(d.root + "/sleeper.err", append: false))
        defer {
            kill(sleeper, SIGKILL)
            _ = ChildProcess.wait(sleeper, timeout: 10)
        }
        let recorded = eventually(timeout: 10) {
            ((try? String(
                contentsOfFile: AppsTests.instanceDirectory(d, instance.id) + "/bwrapinfo.json",
                encoding: .utf8)) ?? "").contains("child-pid")
        }
        try #require(recorded, "bwrap recorded no child-pid")

        for (what, source) in [
            ("a copy of its record", AppsTests.InfoSource.copyOfInstance(instance.id)),
            ("its record bound in", .recordOfInstance(instance.id)),
        ] {
            let token = try AppsTests.sandboxed(
                d, app, ["token", "get"], flatpakID: Self.victim, info: source)
            #expect(
                token.status != 0 && !token.stdoutText.contains("victim-token"), "\(what): \(token)"
            )
            #expect(
                token.stderr.contains("does not run in its instance's sandbox"), "\(what): \(token)"
            )
        }
        #expect(
            d.log.contains(
                "it does not run in its instance's sandbox (another mount namespace than pid"),
            "log:\n\(d.log)")
        // The app's own instance is served.
        #expect(
            try AppsTests.sandboxed(d, app, ["token", "get"], flatpakID: Self.victim).stdoutText
                == "victim-token")
        // Once the instance has ended, a copy of its record is refused too.
        kill(sleeper, SIGKILL)
        _ = ChildProcess.wait(sleeper, timeout: 10)
        let late = try AppsTests.sandboxed(
            d, app, ["token", "get"], flatpakID: Self.victim, info: .copyOfInstance(instance.id))
        #expect(
            late.status != 0 && late.stderr.contains("is not running"),
            "after the instance ended: \(late)")
    }

    /// Python in a sandbox: connects, sends Status, prints the seconds until vaultd closed the
    /// connection (or answered), the byte count and the bytes that came back.
    static let timedClient = """
        import socket, sys, time
        s = socket.socket(socket.AF_UNIX); s.settimeout(10)
        t = time.monotonic(); s.connect(sys.argv[1])
        try:
            s.sendall(b'{"method":"io.vaultd.Vault.Status"}\\0')
        except OSError:
            pass
        data = b''
        try:
            while True:
                c = s.recv(65536)
                if not c: break
                data += c
                if b'\\0' in data: break
        except OSError:
            pass  # ECONNRESET: vaultd closed with the call unread
        print("%.3f" % (time.monotonic() - t), len(data), data[:120])
        """

    enum BadInfo: String, CaseIterable, CustomTestStringConvertible {
        case fifo, devZero, symlinkToHostFile, sparse3GiB
        var testDescription: String { rawValue }
    }

    /// `/.flatpak-info` a FIFO, /dev/zero, a symlink to a host file, a 3 GiB sparse file: each
    /// connection refused within 1 s, vaultd's RSS grows by under 16 MiB, another client is
    /// served throughout.
    @Test(.tags(.system)) func aFlatpakInfoThatIsNoRegularFileIsRefusedAtOnce() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let pid = try #require(d.pid)
        // A real instance's record on the host: what the symlink points at.
        let real = try AppsTests.flatpakInstance(d, appID: Self.victim)
        let fifo = d.root + "/info.fifo"
        #expect(mkfifo(fifo, 0o644) == 0)
        let sparse = d.root + "/info.sparse"
        let fd = open(sparse, O_CREAT | O_WRONLY, 0o644)
        #expect(fd >= 0 && ftruncate(fd, 3 << 30) == 0)
        close(fd)
        let before = try #require(ProcStatus.rss(pid))

        // Another client, served throughout: a Status every 50 ms, each within 1 s.
        let stop = Locked(false)
        let slowest = Locked(0.0)
        let failures = Locked(0)
        let watcher = Thread {
            while !stop.withLock({ $0 }) {
                let t = Date()
                if !Daemon.answers(d.socketPath) { failures.withLock { $0 += 1 } }
                let took = Date().timeIntervalSince(t)
                slowest.withLock { $0 = max($0, took) }
                usleep(50_000)
            }
        }
        watcher.start()
        defer { stop.withLock { $0 = true } }

        var figures: [String] = []
        for bad in BadInfo.allCases {
            let bind: [String]
            switch bad {
            case .fifo: bind = ["--ro-bind", fifo, "/.flatpak-info"]
            case .devZero: bind = ["--dev-bind", "/dev/zero", "/.flatpak-info"]
            // An absolute symlink: followed by vaultd, it would lead to the host's file (the
            // victim's real record), not to one in the sandbox.
            case .symlinkToHostFile: bind = ["--symlink", real.info, "/.flatpak-info"]
            case .sparse3GiB: bind = ["--ro-bind", sparse, "/.flatpak-info"]
            }
            let r = try AppsTests.sandboxed(
                d, "/usr/bin/python3", ["-c", Self.timedClient, d.socketPath],
                inside: "/app/bin/python3", root: .unnamed, extraBwrap: bind)
            let fields = r.stdoutText.split(separator: " ")
            let seconds = fields.first.flatMap { Double($0) }
            #expect(r.status == 0 && seconds != nil && seconds! < 1, "\(bad): \(r)")
            // Told why, then closed: an error, never an answer to its call.
            #expect(
                r.stdoutText.contains("io.vaultd.Vault.PermissionDenied")
                    && !r.stdoutText.contains("\"state\""),
                "\(bad): vaultd answered a sandbox it cannot identify, or closed without saying why: \(r)"
            )
            figures.append("\(bad.rawValue) \(String(format: "%.3f", seconds ?? -1)) s")
        }
        stop.withLock { $0 = true }
        while !watcher.isFinished { usleep(10_000) }
        let after = try #require(ProcStatus.rss(pid))
        let growth = after - before
        #expect(growth < 16 << 10, "vaultd's RSS grew by \(growth) KiB")
        #expect(
            failures.withLock { $0 } == 0 && slowest.withLock { $0 } < 1,
            "the other client: \(failures.withLock { $0 }) failures, slowest \(slowest.withLock { $0 }) s"
        )
        for what in ["a FIFO", "a device", "a symlink", "3221225472 bytes, over 65536"] {
            #expect(d.log.contains("its /.flatpak-info is \(what)"), "\(what); log:\n\(d.log)")
        }
        #expect(Daemon.answers(d.socketPath))
        ReliabilityReport.record(
            "bad /.flatpak-info refused: \(figures.joined(separator: ", ")); vaultd RSS \(before) → \(after) KiB (+\(growth) KiB); other client's slowest Status \(String(format: "%.3f", slowest.withLock { $0 })) s"
        )
    }

    /// A sandbox renaming itself at every connection (each a real instance, so each passes
    /// the host check) registers at most MaximumAutoRegisteredApps apps; the rest are
    /// refused, and the log stays bounded (rate-limited, with a count of what it left out);
    /// a name made to forge log lines is escaped.
    @Test(.tags(.system)) func registrationsOnFirstContactAndTheirRefusalsAreBounded() throws {
        let d = try Self.daemon(config: ["MaximumAutoRegisteredApps": 5])
        defer { d.close() }
        let app = try d.placeExample("renamer")
        var registered = 0
        var refused = 0
        for i in 0..<40 {
            let r = try AppsTests.sandboxed(d, app, ["launch"], flatpakID: "org.example.Rename\(i)")
            if r.status == 0 { registered += 1 } else { refused += 1 }
        }
        let apps = d.ctl(["app", "list", "--json"]).jsonArray ?? []
        #expect(
            registered == 5 && apps.count == 5, "registered \(registered), listed \(apps.count)")
        #expect(
            d.log.contains("the most registered on first contact (MaximumAutoRegisteredApps"),
            "log:\n\(d.log)")
        let refusalLines = d.log.split(separator: "\n").filter { $0.contains("registered already") }
            .count
        #expect(
            refusalLines >= 1 && refusalLines <= 12,
            "\(refusalLines) refusal lines for \(refused) refusals")

        // A name with a newline and a terminal escape, in a self-written file: refused, and
        // its log line is one line, escaped.
        let forged = try AppsTests.sandboxed(
            d, app, ["launch"],
            infoText:
                "[Application]\nname=org.example.X\r\nvaultd: forged\u{1b}[2J\n\n[Instance]\ninstance-id=7\n",
            info: .selfWritten)
        #expect(forged.status != 0)
        #expect(
            !d.log.contains("\u{1b}")
                && !d.log.split(separator: "\n").contains { $0.hasPrefix("vaultd: forged") },
            "log:\n\(d.log)")
        ReliabilityReport.record(
            "rename flood: 40 names, \(registered) registered (cap 5), \(refused) refused in \(refusalLines) log lines"
        )
    }

    /// The racing peer: a registered app (a copy of python3) that connects, sends Hello, forks
    /// a child that keeps the socket, and execs app A's binary (`wait`: alive a moment). The
    /// child reads what comes back, then sends a call of its own and reads again. Prints one
    /// JSON line: what the child read.
    static let racer = """
        import json, os, socket, sys
        sock, a = sys.argv[1], sys.argv[2]
        s = socket.socket(socket.AF_UNIX); s.connect(sock)
        s.sendall(json.dumps({"method": "io.vaultd.Vault.Hello", "parameters": {}}).encode() + b'\\0')
        r, w = os.pipe()
        child = os.fork()
        if child == 0:
            os.close(w)
            os.read(r, 1)  # the parent's exec closed the pipe
            s.settimeout(5); out = []
            def reply():
                buf = b''
                try:
                    while b'\\0' not in buf:
                        c = s.recv(65536)
                        if not c: return None
                        buf += c
                except OSError:
                    return None
                return buf.partition(b'\\0')[0].decode()
            out.append(reply())
            try:
                s.sendall(json.dumps({"method": "io.vaultd.Keychain.CopyMatching", "parameters": {"query": {"class": "genericPassword", "accessGroup": "org.example.A", "service": "token", "returnData": True}}}).encode() + b'\\0')
                out.append(reply())
            except OSError:
                out.append(None)
            print(json.dumps(out), flush=True)
            os._exit(0)
        os.close(r)
        os.set_inheritable(w, False)
        os.execv(a, [a, "wait", "0.2"])
        """

    /// A connection made by one program that then execs a registered app's binary, while a
    /// child keeps the socket, is never taken for that app: 100 runs.
    @Test func aConnectThenExecRaceIsNeverTakenForTheAppItExecs() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        try d.install(AppsTests.appA, exe: a)
        #expect(d.app(a, ["token", "set"], stdin: Data("token-of-A".utf8)).status == 0)
        let python = try AppsTests.rawPythonApp(d)
        try d.install("org.example.Raw", exe: python)

        var asA = 0
        var asRacer = 0
        var refused = 0
        var leaked = 0
        let runs = 100
        for _ in 0..<runs {
            let r = d.app(python, ["-c", Self.racer, d.socketPath, a], timeout: 30)
            let line =
                r.stdoutText.split(separator: "\n").first { $0.hasPrefix("[") }.map(String.init)
                ?? ""
            let replies = (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [Any]) ?? []
            let hello = replies.first as? String ?? ""
            if hello.contains("\"appID\":\"org.example.A\"") {
                asA += 1
            } else if hello.contains("\"appID\":\"org.example.Raw\"") {
                asRacer += 1
            } else {
                refused += 1
            }
            if line.contains("dG9rZW4tb2YtQQ") || line.contains("token-of-A") { leaked += 1 }
        }
        #expect(asA == 0 && leaked == 0, "taken for A \(asA) times, A's token read \(leaked) times")
        #expect(asRacer + refused == runs)
        ReliabilityReport.record(
            "connect-then-exec race: \(runs) runs, identified as A \(asA), as the racer \(asRacer), refused \(refused), A's token read \(leaked)"
        )
    }

    // MARK: A missing executable is not an uninstall

    /// Removes `path` (renamed away) and returns a function that puts it back.
    static func takeAway(_ path: String) -> () -> Void {
        let away = path + ".away"
        #expect(rename(path, away) == 0)
        return { #expect(rename(away, path) == 0) }
    }

    /// A registered app's executable absent for 5 s, then back: the same install (generation,
    /// token, preferences, cache file), shown as missing (with its uninstall time) meanwhile.
    @Test func anExecutableAbsentForAWhileIsTheSameInstall() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        let installed = try d.install(AppsTests.appA, exe: a)
        #expect(d.app(a, ["token", "set"], stdin: Data("token-of-A".utf8)).status == 0)
        #expect(d.ctl(["defaults", "write", AppsTests.appA, "colour", "blue"]).status == 0)
        let first = try d.launch(a)

        let putBack = Self.takeAway(a)
        var shown: [String: Any] = [:]
        #expect(
            eventually(timeout: 10) {
                shown = d.appShow(AppsTests.appA) ?? [:]
                return shown["missingSince"] is String
            }, "\(shown)")
        #expect(shown["installed"] as? Bool == true && shown["uninstallAt"] is String, "\(shown)")
        let since = (shown["missingSince"] as? String).flatMap(PlistDate.parse)
        let at = (shown["uninstallAt"] as? String).flatMap(PlistDate.parse)
        if let since, let at { #expect(abs(at.timeIntervalSince(since) - 600) < 1, "\(shown)") }
        let text = d.ctl(["app", "show", AppsTests.appA]).stdoutText
        #expect(
            text.contains("executable missing since") && text.contains("counts as uninstalled at"),
            "\(text)")
        #expect(d.ctl(["app", "list"]).stdoutText.contains("installed, executable missing since"))
        // The scenario: the file stays away for several scans (a rebuild, an upgrade).
        for _ in 0..<5 { try d.tick() }
        putBack()
        #expect(
            eventually(timeout: 10) {
                shown = d.appShow(AppsTests.appA) ?? [:]
                return shown["missingSince"] is NSNull
            }, "\(shown)")
        #expect(
            shown["installed"] as? Bool == true
                && shown["generation"] as? String == installed["generation"] as? String, "\(shown)")
        #expect(d.app(a, ["token", "get"]).stdoutText == "token-of-A")
        #expect(d.ctl(["defaults", "read", AppsTests.appA, "colour"]).stdoutText.contains("blue"))
        let again = try d.launch(a)
        #expect(!again.firstLaunch && again.generation == first.generation, "\(again)")
        #expect(d.log.contains("its executable is back after about"), "log:\n\(d.log)")
    }

    /// Absent for the whole grace period (UninstallGraceSeconds, the default 600 s, passed on
    /// vaultd's test clock): uninstalled, and reinstalled (a new generation) when it comes
    /// back. An error other than "no such file" (a symlink loop: ELOOP) changes nothing,
    /// however long it lasts.
    @Test func anExecutableAbsentForTheGracePeriodIsUninstalled() throws {
        let d = try Self.daemon()
        defer { d.close() }
        let a = try d.placeExample("a")
        let installed = try d.install(AppsTests.appA, exe: a)
        #expect(d.ctl(["defaults", "write", AppsTests.appA, "colour", "blue"]).status == 0)

        // Not "no such file": stat fails with ELOOP. Three scans, each 700 s on, later: still installed.
        let away = a + ".away"
        #expect(rename(a, away) == 0 && symlink(a, a) == 0)
        for _ in 0..<3 { try d.advanceClock(by: 700) }
        let during = d.appShow(AppsTests.appA) ?? [:]
        #expect(
            during["installed"] as? Bool == true && during["missingSince"] is NSNull, "\(during)")
        #expect(unlink(a) == 0)

        // Missing from the next scan on; installed until the grace period has passed.
        try d.tick()
        var shown = d.appShow(AppsTests.appA) ?? [:]
        #expect(shown["installed"] as? Bool == true && shown["missingSince"] is String, "\(shown)")
        try d.advanceClock(by: 590)
        shown = d.appShow(AppsTests.appA) ?? [:]
        #expect(
            shown["installed"] as? Bool == true,
            "uninstalled 590 s into a grace period of 600 s: \(shown)")
        try d.advanceClock(by: 11)
        shown = d.appShow(AppsTests.appA) ?? [:]
        #expect(shown["installed"] as? Bool == false, "\(shown)")
        #expect(
            d.ctl(["defaults", "read", AppsTests.appA]).stdoutText.isEmpty,
            "the uninstall removes the preferences")
        #expect(d.log.contains("has been missing for 600 s or more"), "log:\n\(d.log)")
        #expect(rename(away, a) == 0)
        try d.tick()
        shown = d.appShow(AppsTests.appA) ?? [:]
        #expect(shown["installed"] as? Bool == true, "\(shown)")
        #expect(
            shown["generation"] as? String != installed["generation"] as? String,
            "a reinstall is a new generation")
    }
}
