import Foundation
import TestSupport
import Testing
import VaultClient
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Socket paths and modes (docs/configuration.md), one daemon per socket, stale sockets,
/// clean shutdown.
@Suite struct DaemonLifecycleTests {
    /// The default socket directory /tmp/vaultd-$UID made first by another user (a shared
    /// /tmp), or left with loose permissions: vaultd refuses it and says how to get past it
    /// (not only "not owned by uid N"). In a mount namespace of its own with a private
    /// /tmp, vaultd running as nobody (a copy of it, made inside: the build may itself be
    /// under the /tmp the tmpfs hides).
    @Test(
        .tags(.system),
        .enabled(
            if: getuid() == 0, "needs root for a mount namespace and to act as nobody (setpriv)"))
    func aSquattedDefaultSocketDirectoryIsRefusedWithTheWayOut() throws {
        let script = """
            set -e
            exec 3<"$0"
            mount -t tmpfs tmpfs /tmp
            cat <&3 >/tmp/vaultd; chmod 755 /tmp/vaultd
            mkdir -m 700 /tmp/vaultd-65534; mkdir -m 777 /tmp/h
            run() { setpriv --reuid=65534 --regid=65534 --clear-groups env -i HOME=/tmp/h XDG_DATA_HOME=/tmp/h/d XDG_CACHE_HOME=/tmp/h/c /tmp/vaultd 2>&1 || true; }
            run
            chown 65534 /tmp/vaultd-65534; chmod 755 /tmp/vaultd-65534
            run
            """
        let r = try ChildProcess.run(
            "unshare", ["-m", "sh", "-c", script, Paths.tool("vaultd")],
            environment: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"], timeout: 20)
        #expect(
            r.stdoutText.contains(
                "refusing socket directory /tmp/vaultd-65534: it is owned by uid 0, not 65534"),
            "\(r)")
        #expect(r.stdoutText.contains("remove it, or set XDG_RUNTIME_DIR or VAULTD_SOCKET"), "\(r)")
        #expect(
            r.stdoutText.contains("mode 755, expected 700 (chmod 700 /tmp/vaultd-65534)"), "\(r)")
    }

    /// vaultd in the foreground on `d`'s socket and data directory (plus `arguments`), to be
    /// refused at start: its outcome.
    static func runVaultd(on d: Daemon, _ arguments: [String] = [], timeout: Double) throws
        -> ProcessResult
    {
        try ChildProcess.run(
            Paths.tool("vaultd"),
            ["--socket", d.socketPath, "--data-dir", d.dataDirectory] + arguments,
            environment: isolatedEnvironment(root: d.root, socket: nil), timeout: timeout)
    }

    /// For the device-key tests: initialises `d`, adds a ThisDeviceOnly item (`dk`/`a`,
    /// "bound") and stops it; returns the device key's path and contents.
    static func stoppedWithABoundItem(_ d: Daemon) throws -> (keyPath: String, original: Data) {
        try #require(d.initialize().status == 0)
        try #require(
            d.ctl(
                [
                    "item", "add", "--service", "dk", "--account", "a", "--accessible",
                    "whenUnlockedThisDeviceOnly",
                ], stdin: Data("bound".utf8)
            ).status == 0)
        #expect(d.stop() == 0)
        let keyPath = d.dataDirectory + "/device.key"
        return (keyPath, try Data(contentsOf: URL(fileURLWithPath: keyPath)))
    }

    /// Puts the device key `original` back at `keyPath` (0600), starts `d` and unlocks it, and
    /// expects the item of `stoppedWithABoundItem` to read.
    static func putBack(_ original: Data, at keyPath: String, andRead d: Daemon) throws {
        try original.write(to: URL(fileURLWithPath: keyPath))
        chmod(keyPath, 0o600)
        try d.start()
        try #require(d.unlock().status == 0)
        let get = d.ctl(["item", "get", "--service", "dk", "--account", "a"])
        #expect(get.status == 0 && get.stdout == Data("bound".utf8), "\(get)")
    }

    static func mode(_ path: String) -> (type: mode_t, permissions: mode_t)? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        return (st.st_mode & S_IFMT, st.st_mode & 0o7777)
    }

    /// A stopped (or hung) vaultd still accepts connections, the kernel queues them, but
    /// never answers: vaultctl gives up after `VAULTCTL_TIMEOUT` seconds with ConnectionFailed
    /// and exit 69 (vaultd not reachable), as a script needs, instead of waiting for ever.
    @Test func vaultctlGivesUpOnAVaultdThatDoesNotAnswer() throws {
        try Self.withStoppedDaemon { d, _ in
            let started = Date()
            let r = d.run(
                "vaultctl", ["status"], environment: ["VAULTCTL_TIMEOUT": "1"], timeout: 40)
            let took = Date().timeIntervalSince(started)
            #expect(!r.timedOut && r.status == 69, "\(r)")
            #expect(
                r.stderr.contains("ConnectionFailed")
                    && r.stderr.contains("did not answer within 1"), "\(r)")
            #expect(took < 30, "vaultctl waited \(took) s")
        }
    }

    /// Runs `body` with an initialised vaultd stopped (SIGSTOP), then resumes it and expects
    /// it to serve again.
    static func withStoppedDaemon(_ body: (Daemon, pid_t) throws -> Void) throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        let pid = try #require(d.pid)
        try #require(kill(pid, SIGSTOP) == 0)
        defer { kill(pid, SIGCONT) }
        try #require(stopped(pid))
        try body(d, pid)
        try #require(kill(pid, SIGCONT) == 0)
        let after = d.ctl(["status"])
        #expect(
            after.status == 0 && after.stdoutText.contains("unlocked"),
            "vaultd serves again once resumed: \(after)")
    }

    /// Fills the listen backlog of a stopped vaultd at `path` with connections that are then
    /// closed, as timed-out clients do; returns how many it queued.
    static func fillBacklog(of path: String) throws -> Int {
        var queued = 0
        while queued < 10_000 {
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            try #require(fd >= 0)
            var addr = sockaddr_un()
            addr.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &addr.sun_path) { p in
                for (i, b) in path.utf8.enumerated() { p[i] = b }
            }
            let rc = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
            let e = errno
            close(fd)
            if rc != 0 {
                try #require(e == EAGAIN, "connect: \(String(cString: strerror(e)))")
                break
            }
            queued += 1
        }
        return queued
    }

    /// A stopped vaultd's listen backlog fills up: each connection the kernel queued stays
    /// queued after its client gave up and closed it, so after some 129 timed-out calls
    /// (a status bar polling vaultctl for a few minutes) `connect` itself blocks. The reply
    /// timeout must bound that wait too (SO_SNDTIMEO bounds an AF_UNIX connect's wait, when
    /// it is set before the connect).
    @Test func vaultctlGivesUpWhenAStoppedVaultdsBacklogIsFull() throws {
        try Self.withStoppedDaemon { d, _ in
            let queued = try Self.fillBacklog(of: d.socketPath)
            try #require(queued > 0 && queued < 10_000, "backlog \(queued)")
            let started = Date()
            let r = d.run(
                "vaultctl", ["status"], environment: ["VAULTCTL_TIMEOUT": "1"], timeout: 20)
            let took = Date().timeIntervalSince(started)
            #expect(
                !r.timedOut && r.status == 69 && r.stderr.contains("ConnectionFailed"),
                "after \(queued) queued connections: \(r)")
            #expect(took < 15, "vaultctl waited \(took) s")
        }
    }

    /// Any finite VAULTCTL_TIMEOUT is taken (a huge one is "for ever" in effect), not a crash
    /// converting it to a timeval.
    @Test func vaultctlTakesAHugeTimeout() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        for t in ["1e300", "9.3e18"] {
            let r = d.run("vaultctl", ["status"], environment: ["VAULTCTL_TIMEOUT": t], timeout: 30)
            #expect(
                r.status == 0 && r.stdoutText.contains("state: unlocked"),
                "VAULTCTL_TIMEOUT=\(t): \(r)")
        }
    }

    /// Waits (up to 5 s) until `pid` is stopped: a signal is delivered after `kill` returns,
    /// and a thread of vaultd polling for a call can still answer meanwhile.
    static func stopped(_ pid: pid_t) -> Bool {
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            // /proc/PID/stat: "PID (comm) STATE …"; comm may hold spaces, not ") ".
            if let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let end = stat.range(of: ") ", options: .backwards),
                stat[end.upperBound...].hasPrefix("T")
            {
                return true
            }
            usleep(5_000)
        }
        return false
    }

    /// `replyTimeout` can be changed on an open connection (vaultctl lifts it for a cache
    /// purge, which may take minutes): lifted, a call waits past the old bound; set again, it
    /// bounds the calls after.
    @Test func aConnectionsReplyTimeoutCanBeLiftedAndSetAgain() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        let vault = try Vault.connect(socketPath: d.socketPath, replyTimeout: 1)
        vault.connection.replyTimeout = 0
        let pid = try #require(d.pid)
        try #require(kill(pid, SIGSTOP) == 0)
        defer { kill(pid, SIGCONT) }
        try #require(Self.stopped(pid))
        DispatchQueue.global().asyncAfter(deadline: .now() + 2.5) { kill(pid, SIGCONT) }
        let started = Date()
        let status = try vault.status()
        let waited = Date().timeIntervalSince(started)
        #expect(waited >= 2 && status.lock.state == .unlocked, "waited \(waited) s: \(status)")
        vault.connection.replyTimeout = 1
        try #require(kill(pid, SIGSTOP) == 0)
        try #require(Self.stopped(pid))
        #expect {
            try vault.status()
        } throws: { error in
            (error as? VaultError)?.code == .connectionFailed
                && "\(error)".contains("did not answer within 1")
        }
    }

    @Test func socketDirectoryIs0700AndSocket0600() throws {
        let d = try Daemon()
        defer { d.close() }
        let dir = try #require(Self.mode(d.root + "/run"))
        #expect(dir.type == S_IFDIR)
        #expect(
            dir.permissions == 0o700, "socket directory mode \(String(dir.permissions, radix: 8))")
        let socket = try #require(Self.mode(d.socketPath))
        #expect(socket.type == S_IFSOCK)
        #expect(socket.permissions == 0o600, "socket mode \(String(socket.permissions, radix: 8))")
        let data = try #require(Self.mode(d.dataDirectory))
        #expect(
            data.permissions == 0o700, "data directory mode \(String(data.permissions, radix: 8))")
    }

    @Test func secondDaemonOnTheSameSocketExitsAndTheFirstKeepsServing() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(
            d.ctl(["defaults", "write", "com.example.first", "k", "-string", "v"]).status == 0)

        // Another data directory, then the same one (two vaultds started with the same defaults).
        for dataDirectory in [d.root + "/data2", d.dataDirectory] {
            let second = try ChildProcess.run(
                Paths.tool("vaultd"), ["--socket", d.socketPath, "--data-dir", dataDirectory],
                environment: isolatedEnvironment(root: d.root, socket: nil), timeout: 20)
            #expect(!second.timedOut, "the second vaultd kept running: \(second)")
            #expect(second.status != 0, "\(second)")
            #expect(
                second.stderr.contains(d.socketPath)
                    || second.stderr.lowercased().contains("already"), "no clear message: \(second)"
            )
        }

        #expect(d.isRunning)
        #expect(
            Self.mode(d.socketPath)?.type == S_IFSOCK,
            "the second vaultd removed the first one's socket")
        let read = d.ctl(["defaults", "read", "com.example.first", "k"])
        #expect(
            read.status == 0 && read.stdoutText == "v\n",
            "the first vaultd no longer serves: \(read)")
    }

    /// vaultd holds its store exclusively (SQLite's unix-excl VFS): a second vaultd on the
    /// same data directory, even on another socket, exits at once and says why.
    @Test func secondDaemonOnTheSameDataDirectoryExitsAndTheFirstKeepsServing() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(
            d.ctl(["defaults", "write", "com.example.first", "k", "-string", "v"]).status == 0)
        let started = Date()
        let second = try ChildProcess.run(
            Paths.tool("vaultd"),
            ["--socket", d.root + "/run/other.sock", "--data-dir", d.dataDirectory],
            environment: isolatedEnvironment(root: d.root, socket: nil), timeout: 20)
        #expect(!second.timedOut && second.status != 0, "\(second)")
        #expect(
            Date().timeIntervalSince(started) < 5,
            "refused only after \(Date().timeIntervalSince(started)) s")
        #expect(second.stderr.contains("in use by another process"), "no clear message: \(second)")
        #expect(
            Self.mode(d.root + "/run/other.sock") == nil, "the refused vaultd left a socket behind")
        let write = d.ctl(["defaults", "write", "com.example.first", "k2", "-int", "2"])
        let read = d.ctl(["defaults", "read", "com.example.first", "k"])
        #expect(
            write.status == 0 && read.status == 0 && read.stdoutText == "v\n",
            "the first vaultd no longer serves: \(write) \(read)")
    }

    @Test func staleSocketFromAKilledDaemonDoesNotStopARestart() throws {
        let d = try Daemon()
        defer { d.close() }
        // Acknowledged writes are durable, even across a SIGKILL.
        try #require(
            d.ctl(["defaults", "write", "com.example.stale", "k", "-int", "42"]).status == 0)
        d.kill()
        #expect(d.lastExitStatus == 128 + SIGKILL)
        try #require(
            Self.mode(d.socketPath)?.type == S_IFSOCK, "SIGKILL should leave the socket file behind"
        )
        #expect(!Daemon.answers(d.socketPath))

        try d.start()
        let read = d.ctl(["defaults", "read", "com.example.stale", "k"])
        #expect(read.status == 0 && read.stdoutText == "42\n", "\(read)")
        #expect(Self.mode(d.socketPath)?.permissions == 0o600)
    }

    @Test func sigtermRemovesTheSocketAndExitsZero() throws {
        let d = try Daemon()
        defer { d.close() }
        // With a client connected and idle: shutdown must not wait for it forever.
        let idle = try d.connect()
        _ = try idle.call("io.vaultd.Vault.Status")
        let started = Date()
        let status = d.stop()
        #expect(status == 0, "log:\n\(d.log)")
        #expect(Date().timeIntervalSince(started) < 15)
        #expect(Self.mode(d.socketPath) == nil, "the socket file is still there after SIGTERM")
        #expect(idle.waitForClose(timeout: 5), "the idle client's connection should be closed")
    }

    /// Socket activation (dist/systemd): systemd keeps the listening socket and
    /// starts vaultd again on it when a client comes after a stop (`systemctl --user restart
    /// vaultd`, or a stop). Were vaultd's SIGTERM to shut the socket down, it would be shut on
    /// systemd's copy too: every later connect refused and the vault unreachable until the
    /// socket unit is restarted. A stop must leave the shared socket taking connections, for
    /// the next vaultd.
    @Test func aStopLeavesSystemdsSocketTakingConnectionsForTheNextVaultd() throws {
        let root = try TemporaryDirectory.make(prefix: "vaultd-activation")
        defer { TemporaryDirectory.remove(root) }
        mkdir(root + "/home", 0o700)
        mkdir(root + "/xdg-run", 0o700)
        let path = root + "/activated.sock"
        let systemd = try UnixSocket()  // as systemd's vaultd.socket holds it
        try systemd.bindAndListen(path: path)
        let log = root + "/vaultd.log"
        var env = isolatedEnvironment(root: root, socket: nil)
        env["LISTEN_FDS"] = "1"
        func activate() throws -> pid_t {
            let p = try ChildProcess.spawn(
                "/bin/sh",
                [
                    "-c", "export LISTEN_PID=$$; exec \"$0\" \"$@\"", Paths.tool("vaultd"),
                    "--data-dir", root + "/data",
                ],
                environment: env, inputs: [:], passing: [3: systemd.fd],
                stdout: .file(log, append: true), stderr: .file(log, append: true))
            try Daemon.waitUntilServing(
                p, socketPath: path, timeout: 10,
                log: { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
            ) { _ in }
            return p
        }
        func ctl(_ args: [String]) throws -> ProcessResult {
            try ChildProcess.run(
                Paths.tool("vaultctl"), args,
                environment: isolatedEnvironment(root: root, socket: path).merging([
                    "VAULTCTL_TIMEOUT": "5"
                ]) { $1 }, timeout: 30)
        }
        let first = try activate()
        try #require(
            try ctl(["defaults", "write", "com.example.activated", "k", "-int", "7"]).status == 0)
        kill(first, SIGTERM)
        #expect(ChildProcess.wait(first, timeout: 20) == 0)
        #expect(
            Self.mode(path)?.type == S_IFSOCK, "the stopped vaultd removed systemd's socket file")

        // A client now: systemd would queue it and start vaultd; the connect must succeed.
        let client = try UnixSocket()
        var connectError: Error?
        do { try client.connect(path: path) } catch { connectError = error }
        #expect(
            connectError == nil,
            "connect to systemd's socket after the stop: \(String(describing: connectError))")
        let second = try activate()
        defer {
            kill(second, SIGKILL)
            _ = ChildProcess.wait(second, timeout: 10)
        }
        let read = try ctl(["defaults", "read", "com.example.activated", "k"])
        #expect(
            read.status == 0 && read.stdoutText == "7\n",
            "the next vaultd on systemd's socket: \(read)")
    }

    /// SIGHUP, as systemd-era daemons take it (`systemctl --user reload`), reads config.plist
    /// again; a file that does not load keeps the settings in force. It killed vaultd (the
    /// default action): no clean stop, in-flight calls cut, the socket file left behind.
    @Test func sighupReloadsTheSettingsAndKeepsServing() throws {
        let d = try Daemon(start: false)
        defer { d.close() }
        let config = d.root + "/config.plist"
        try Data("not a property list".utf8).write(to: URL(fileURLWithPath: config))
        try d.start()
        try #require(d.initialize().status == 0)
        d.stop()
        try PropertyListSerialization.data(
            fromPropertyList: [String: Any](), format: .xml, options: 0
        ).write(to: URL(fileURLWithPath: config))
        try d.start(extraArguments: ["--config", config])
        try #require(d.unlock().status == 0)

        // A broken file: nothing changes, vaultd says so and serves on.
        try Data("<plist><dict><key>AutoLockSeconds</key><string>soon</string></dict></plist>".utf8)
            .write(to: URL(fileURLWithPath: config))
        d.sendSignal(SIGHUP)
        let refused = eventually(timeout: 10) { d.log.contains("SIGHUP: settings not reloaded") }
        #expect(refused && d.isRunning, "log:\n\(d.log)")
        // Then AutoLockSeconds = 1: it applies without a restart.
        try PropertyListSerialization.data(
            fromPropertyList: ["AutoLockSeconds": 1], format: .xml, options: 0
        ).write(to: URL(fileURLWithPath: config))
        let vault = try d.client()
        d.sendSignal(SIGHUP)
        let locked = try eventually(timeout: 20) { try vault.status().lock.state == .locked }
        #expect(locked && d.isRunning, "not locked by the reloaded AutoLockSeconds; log:\n\(d.log)")
        #expect(
            d.log.contains("SIGHUP: settings reloaded")
                && d.log.contains("locked after 1 s without a call"), "\(d.log)")
        #expect(d.stop() == 0)
        #expect(Self.mode(d.socketPath) == nil)
    }

    /// A key of config.plist that names no setting (a misspelt one) is named in the log, at
    /// start and at SIGHUP, with the setting it is closest to; the known ones still apply, and
    /// a key with a control character is logged escaped, on one line.
    @Test func unknownSettingsAreNamedInTheLogAtStartAndAtSIGHUP() throws {
        let d = try Daemon(start: false)
        defer { d.close() }
        let config = d.root + "/config.plist"
        try PropertyListSerialization.data(
            fromPropertyList: [
                "AutoLockSecs": 5, "CacheCheckIntervalSeconds": 5, "cachebudgetbytes": 1,
                "Weird\nKey": 1,
            ], format: .xml, options: 0
        ).write(to: URL(fileURLWithPath: config))
        try d.start(extraArguments: ["--config", config])
        let named = eventually(timeout: 10) { d.log.contains("AutoLockSecs") }
        #expect(named, "log:\n\(d.log)")
        let line =
            d.log.split(separator: "\n").first { $0.contains("AutoLockSecs") }.map(String.init)
            ?? ""
        #expect(line.contains("\"AutoLockSecs\" (did you mean AutoLockSeconds?)"), "\(line)")
        #expect(line.contains("\"cachebudgetbytes\" (did you mean CacheBudgetBytes?)"), "\(line)")
        #expect(line.contains("\"Weird\\nKey\""), "\(line)")
        #expect(!line.contains("\"CacheCheckIntervalSeconds\""), "\(line)")
        d.sendSignal(SIGHUP)
        let again = eventually(timeout: 10) {
            d.log.contains("SIGHUP: ")
                && d.log.split(separator: "\n").contains {
                    $0.hasPrefix("vaultd: SIGHUP: ") && $0.contains("AutoLockSecs")
                }
        }
        #expect(again, "log:\n\(d.log)")
        #expect(d.isRunning)
    }

    /// SIGHUP with no config file at the default path reloads the defaults and says so: the
    /// log said "settings reloaded from PATH" of a file that was not there.
    @Test func sighupWithoutAConfigFileSaysTheDefaultsApply() throws {
        let d = try Daemon()
        defer { d.close() }
        d.sendSignal(SIGHUP)
        let said = eventually(timeout: 10) { d.log.contains("SIGHUP: settings reloaded") }
        #expect(
            said && d.log.contains("is absent: the defaults") && !d.log.contains("reloaded from"),
            "\(d.log)")
    }

    /// A path option given an empty value (`--cache-dir "$DIR"` with DIR unset) is a usage
    /// error naming it. With `--cache-dir ""` vaultd served, and every cache call then failed
    /// with "cannot create directory : The operation could not be completed"; an empty
    /// `--data-dir` or `--socket` stopped it with an error naming an empty path.
    @Test(arguments: [["--cache-dir", ""], ["--cache-dir="], ["--data-dir="], ["--socket", ""]])
    func aPathOptionWithAnEmptyValueIsAUsageError(option: [String]) throws {
        let d = try Daemon(start: false)
        defer { d.close() }
        let arguments = ["--socket", d.socketPath, "--data-dir", d.dataDirectory] + option
        let r = d.run("vaultd", arguments, timeout: 5)
        let name = option[0].split(separator: "=")[0]
        #expect(
            r.status == 64 && r.stderr.hasPrefix("vaultd: \(name) needs a value"),
            "vaultd \(option): \(r)")
    }

    /// A VAULTD_BUSY_POLL_US that is no whole number from 0 is a usage error naming it, as
    /// VAULTD_MAX_CONNECTIONS is: it fell back to the default silently.
    @Test(arguments: ["abc", "-5", "1.5", "30us"])
    func aBusyPollSettingThatIsNoNumberIsAUsageError(value: String) throws {
        let d = try Daemon(start: false)
        defer { d.close() }
        let r = d.run(
            "vaultd", ["--socket", d.socketPath, "--data-dir", d.dataDirectory],
            environment: ["VAULTD_BUSY_POLL_US": value], timeout: 5)
        #expect(
            r.status == 64 && r.stderr.contains("VAULTD_BUSY_POLL_US must be a whole number"),
            "VAULTD_BUSY_POLL_US=\(value): \(r)")
    }

    /// `--socket NAME`, a bare file name, is a socket in the current directory, as `./NAME`
    /// is: vaultd took its directory to be "" and stopped at start with "cannot create : No
    /// such file or directory".
    @Test func aSocketGivenAsABareFileNameIsInTheCurrentDirectory() throws {
        let d = try Daemon(start: false)
        defer { d.close() }
        let dir = d.root + "/cwd"
        try #require(mkdir(dir, 0o700) == 0)
        let script = """
            ( cd "$1" && exec "$0" --socket vaultd.sock --data-dir data 2>vaultd.log ) & pid=$!
            for _ in $(seq 100); do [ -S "$1/vaultd.sock" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
            VAULTD_SOCKET="$1/vaultd.sock" "$2" status; s=$?
            kill $pid 2>/dev/null; wait $pid; cat "$1/vaultd.log" >&2; exit $s
            """
        let r = d.run("sh", ["-c", script, Paths.tool("vaultd"), dir, Paths.tool("vaultctl")])
        #expect(r.status == 0 && r.stdoutText.contains("state: uninitialized"), "\(r)")
        #expect(r.stderr.contains("vaultd: serving vaultd.sock"), "\(r.stderr)")
    }

    /// A setting out of range is a config error that names it, at start and at SIGHUP, never
    /// a crash or a surprise: `CacheBudgetBytes` 1e30 and `CacheCheckIntervalSeconds` 1e300
    /// made vaultd die at start on a Swift conversion trap (SIGILL, a crash report instead of
    /// the reason); `AutoLockSeconds` 1e300 started, then killed the running vaultd at the
    /// SIGHUP that read it (its log line made an Int of it); a `CacheBudgetBytes` of -1 was
    /// taken, and every cache was purged at each check.
    @Test(arguments: [
        ("CacheBudgetBytes", "<real>1e30</real>"),
        ("CacheCheckIntervalSeconds", "<real>1e300</real>"),
        ("CacheBudgetBytes", "<integer>-1</integer>"),
        ("AutoLockSeconds", "<real>1e300</real>"),
    ])
    func aSettingOutOfRangeIsAConfigErrorAtStartAndAtSIGHUP(key: String, value: String) throws {
        let d = try Daemon(start: false)
        defer { d.close() }
        let config = d.root + "/config.plist"
        let bad = Data("<plist><dict><key>\(key)</key>\(value)</dict></plist>".utf8)
        try bad.write(to: URL(fileURLWithPath: config))
        let started = (try? d.start(extraArguments: ["--config", config])) != nil
        #expect(
            !started && d.lastExitStatus == 1,
            "\(key) \(value): started \(started), exit \(d.lastExitStatus.map(String.init) ?? "none"); log:\n\(d.log)"
        )
        #expect(d.log.contains("config.plist: \(key) must be a number from 0 to"), "\(d.log)")
        if started { d.stop() }

        // Read again by a running vaultd: refused, and it serves on with the settings in force.
        try PropertyListSerialization.data(
            fromPropertyList: [String: Any](), format: .xml, options: 0
        ).write(to: URL(fileURLWithPath: config))
        try d.start(extraArguments: ["--config", config])
        try bad.write(to: URL(fileURLWithPath: config))
        d.sendSignal(SIGHUP)
        let refused = eventually(timeout: 10) {
            d.log.contains("SIGHUP: settings not reloaded") || !d.isRunning
        }
        #expect(refused && d.isRunning, "log:\n\(d.log)")
        #expect(
            d.log.contains(
                "SIGHUP: settings not reloaded, the ones in force stay: \(config): \(key) must be a number from 0 to"
            ), "\(d.log)")
        #expect(
            d.isRunning && (try? d.client().status()) != nil,
            "vaultd stopped serving; log:\n\(d.log)")
    }

    /// A status poller (a panel applet, a script waiting for a state) runs `vaultctl status`
    /// now and then: that must not keep the vault unlocked (Status only looks). vaultctl, as
    /// every VaultClient connection, says Hello first, and Hello counted as use: a poll every
    /// few seconds kept the vault unlocked for ever despite AutoLockSeconds. The time passes
    /// on vaultd's test clock, in steps of a third of the auto-lock's delay, each checked by
    /// the auto-lock at once (`advanceClock`).
    @Test func pollingVaultctlStatusDoesNotHoldOffTheIdleAutoLock() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        let config = d.root + "/config.plist"
        try PropertyListSerialization.data(
            fromPropertyList: ["AutoLockSeconds": 600], format: .xml, options: 0
        ).write(to: URL(fileURLWithPath: config))
        d.stop()
        try d.start(extraArguments: ["--config", config])
        try #require(d.unlock().status == 0)
        // Polled after each step: unlocked for the first two (400 s without a call), locked
        // once the third makes 600 s; the polls in between did not count.
        var states: [String] = []
        for _ in 0..<3 {
            try d.advanceClock(by: 200)
            let poll = d.ctl(["status", "--json"])
            #expect(poll.status == 0, "\(poll)")
            states.append(
                poll.stdoutText.contains("\"state\":\"locked\"")
                    ? "locked"
                    : poll.stdoutText.contains("\"state\":\"unlocked\"")
                        ? "unlocked" : poll.stdoutText)
        }
        #expect(
            states == ["unlocked", "unlocked", "locked"],
            "polled every 200 s with AutoLockSeconds 600; log:\n\(d.log)")
        #expect(d.log.contains("locked after 600 s without a call"), "\(d.log)")
        // A real call is use: it is the one that keeps an unlocked vault unlocked.
        try #require(d.unlock().status == 0)
        for step in 0..<4 {
            #expect(d.ctl(["defaults", "read", "-g"]).status != -1)
            try d.advanceClock(by: 400)
            #expect(
                d.statusJSON()?["state"] as? String == "unlocked",
                "locked although used every 400 s (step \(step)); log:\n\(d.log)")
        }
    }

    /// The test clock (`VAULTD_TEST_CLOCK_FILE`, debug builds) only goes forward: a smaller
    /// number, or one that is not a number, is refused, said in the log, and leaves the clock
    /// where it was, so an interval measured on it (the time since the last call) never goes
    /// negative. A relative path stops vaultd at start, as a bad test variable does.
    @Test func theTestClockOnlyGoesForward() throws {
        let d = try Daemon()
        defer { d.close() }
        #expect(
            d.log.contains("test settings: the clock runs 0.0 s ahead of the system's"), "\(d.log)")
        try d.advanceClock(by: 100)
        #expect(d.log.contains("test clock: 100.0 s ahead of the system's"), "\(d.log)")
        for (text, said) in [
            (
                "50",
                "test clock: refused \"50\" s (from 0 to 1e9, and the clock does not go back); it stays 100.0 s ahead"
            ), ("soon", "does not hold a number of seconds; the clock stays 100.0 s ahead"),
        ] {
            try Data(text.utf8).write(
                to: URL(fileURLWithPath: TestClock.path(root: d.root)), options: .atomic)
            try d.tick()
            #expect(d.log.contains(said), "\(text): \(d.log)")
        }
        try Data("250.5".utf8).write(
            to: URL(fileURLWithPath: TestClock.path(root: d.root)), options: .atomic)
        try d.tick()
        #expect(d.log.contains("test clock: 250.5 s ahead of the system's"), "\(d.log)")
        // Kept across a restart: read at start.
        try d.restart()
        #expect(
            d.log.contains("test settings: the clock runs 250.5 s ahead of the system's"),
            "\(d.log)")

        d.stop()
        let relative = try ChildProcess.run(
            Paths.tool("vaultd"), ["--socket", d.socketPath, "--data-dir", d.dataDirectory],
            environment: isolatedEnvironment(root: d.root, socket: nil).merging([
                "VAULTD_TEST_CLOCK_FILE": "test-clock"
            ]) { $1 }, timeout: 20)
        #expect(
            !relative.timedOut && relative.status == 64
                && relative.stderr.contains(
                    "VAULTD_TEST_CLOCK_FILE (for tests only) must be an absolute path"),
            "\(relative)")
    }

    /// A debug vaultd honours the tests' passphrase cost (`VAULTD_ARGON2_TEST_COST=min`, and
    /// says so in its log) and stops at start, with the usage status and the reason, for any
    /// other value. (A release vaultd refuses it whatever its value: scripts/release-smoke.)
    @Test func theTestPassphraseCostIsMinOrRefused() throws {
        let d = try Daemon()
        defer { d.close() }
        #expect(d.log.contains("test settings: Argon2id cost min"), "\(d.log)")
        d.stop()
        for value in ["moderate", "0"] {
            let r = try ChildProcess.run(
                Paths.tool("vaultd"), ["--socket", d.socketPath, "--data-dir", d.dataDirectory],
                environment: isolatedEnvironment(root: d.root, socket: nil).merging([
                    "VAULTD_ARGON2_TEST_COST": value
                ]) { $1 }, timeout: 20)
            #expect(
                !r.timedOut && r.status == 64
                    && r.stderr.contains(
                        "VAULTD_ARGON2_TEST_COST (for tests only) must be min, not '\(value)'"),
                "\(r)")
            #expect(Self.mode(d.socketPath) == nil, "\(value): vaultd served")
        }
    }

    /// SIGHUP and SIGUSR1 sent once each the moment vaultd first answers are both handled:
    /// their handlers are in place before the socket serves. (They were made after it, while
    /// both signals were ignored: a reload sent as soon as vaultd answered was lost.) Each is
    /// sent once, with no resending, over several starts.
    @Test func signalsSentAsSoonAsVaultdAnswersAreHandled() throws {
        let d = try Daemon(start: false)
        defer { d.close() }
        for run in 1...5 {
            let reloads = d.log.components(separatedBy: "SIGHUP: settings reloaded").count
            try d.start()
            d.sendSignal(SIGHUP)
            d.sendSignal(SIGUSR1)
            let handled = eventually(timeout: 20) {
                d.log.components(separatedBy: "SIGHUP: settings reloaded").count == reloads + 1
                    && d.log.components(separatedBy: "SIGUSR1: periodic tasks ran (1)").count == run
                        + 1
            }
            #expect(
                handled,
                "start \(run): a signal sent as vaultd first answered was lost; log:\n\(d.log)")
            #expect(d.stop() == 0)
        }
    }

    /// device.key deleted (or left out of a restore) under an initialised vault: a new key
    /// made without a word would make every ThisDeviceOnly item NotAvailableOnThisDevice for
    /// good, and the old key put back later would no longer open what was added meanwhile. It
    /// must refuse to start and say what to do; `--new-device-key` is the deliberate move.
    @Test func aMissingDeviceKeyUnderAnInitialisedVaultIsRefusedNotReplaced() throws {
        let d = try Daemon()
        defer { d.close() }
        let (keyPath, original) = try Self.stoppedWithABoundItem(d)
        try #require(unlink(keyPath) == 0)

        let refused = try Self.runVaultd(on: d, timeout: 20)
        #expect(!refused.timedOut && refused.status == 1, "\(refused)")
        #expect(
            refused.stderr.contains("device.key is missing")
                && refused.stderr.contains("--new-device-key"), "no clear message: \(refused)")
        #expect(!FileManager.default.fileExists(atPath: keyPath), "a new device.key was made")
        #expect(Self.mode(d.socketPath) == nil, "the refused vaultd left a socket")

        // The key put back: everything opens, as before.
        try Self.putBack(original, at: keyPath, andRead: d)

        // A deliberate move to a new device: a new key, said in the log.
        #expect(d.stop() == 0)
        try #require(unlink(keyPath) == 0)
        try d.start(extraArguments: ["--new-device-key"])
        #expect(d.log.contains("made a new device key"), "\(d.log)")
        try #require(d.unlock().status == 0)
        let moved = d.ctl(["item", "get", "--service", "dk", "--account", "a"])
        #expect(moved.status == 1 && moved.stderr.contains("NotAvailableOnThisDevice"), "\(moved)")
    }

    /// A second vaultd on the socket of a stopped (or hung) one whose listen backlog is full
    /// (a panel polled it meanwhile): its check for a live daemon connected with no bound and
    /// waited for ever, saying nothing. It must give up within seconds, leave the socket
    /// alone and say why.
    @Test func aSecondVaultdDoesNotHangOnAStoppedOnesFullBacklog() throws {
        try Self.withStoppedDaemon { d, _ in
            let queued = try Self.fillBacklog(of: d.socketPath)
            try #require(queued > 0 && queued < 10_000, "backlog \(queued)")
            let started = Date()
            let second = try ChildProcess.run(
                Paths.tool("vaultd"), ["--socket", d.socketPath, "--data-dir", d.root + "/data2"],
                environment: isolatedEnvironment(root: d.root, socket: nil), timeout: 30)
            #expect(!second.timedOut && second.status == 1, "\(second)")
            #expect(Date().timeIntervalSince(started) < 15)
            #expect(second.stderr.contains("stopped or hung"), "no clear message: \(second)")
            #expect(
                Self.mode(d.socketPath)?.type == S_IFSOCK, "the first vaultd's socket was removed")
        }
    }

    /// HOME unset for a uid without a passwd entry (a container's arbitrary uid): vaultd
    /// crashed (a nil passwd entry unwrapped) even with every path given on the command line.
    /// It must serve when the paths are given, and otherwise say which one it lacks.
    @Test(
        .tags(.system),
        .enabled(if: getuid() == 0, "needs root to run as a uid without a passwd entry (setpriv)"))
    func vaultdWithoutAHomeServesWhenThePathsAreGivenAndSaysWhatIsMissingOtherwise() throws {
        let uid = 54321
        try #require(getpwuid(uid_t(uid)) == nil, "uid \(uid) has a passwd entry here")
        let root = try TemporaryDirectory.make(prefix: "vaultd-nohome")
        defer { TemporaryDirectory.remove(root) }
        chmod(root, 0o755)
        let own = root + "/own"
        mkdir(own, 0o700)
        chown(own, uid_t(uid), gid_t(uid))
        var env = isolatedEnvironment(root: root, socket: nil)
        for k in ["HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR"] {
            env[k] = nil
        }
        let asUID = ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", Paths.tool("vaultd")]

        let log = own + "/vaultd.log"
        let p = try ChildProcess.spawn(
            "setpriv",
            asUID + [
                "--socket", own + "/s.sock", "--data-dir", own + "/data", "--cache-dir",
                own + "/cache",
            ],
            environment: env, inputs: [:], stdout: .file(log, append: true),
            stderr: .file(log, append: true))
        defer {
            kill(p, SIGKILL)
            _ = ChildProcess.wait(p, timeout: 10)
        }
        let serving = eventually(timeout: 10) {
            ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("serving")
                || !ChildProcess.isAlive(p)
        }
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(
            serving && ChildProcess.isAlive(p) && text.contains("serving \(own)/s.sock"),
            "log:\n\(text)")
        #expect(Self.mode(own + "/s.sock")?.type == S_IFSOCK)
        kill(p, SIGTERM)
        #expect(ChildProcess.wait(p, timeout: 20) == 0)

        // Without --data-dir there is no default for it: said, not a crash.
        let missing = try ChildProcess.run(
            "setpriv", asUID + ["--socket", own + "/s.sock"], environment: env, timeout: 20)
        #expect(
            missing.status == 64 && missing.stderr.contains("HOME is not set")
                && missing.stderr.contains("--data-dir"), "\(missing)")
        #expect(!missing.stderr.contains("Fatal error"), "\(missing)")
    }

    /// vaultd's log is only a log: a stderr that cannot take a line (its log file on a full
    /// disk, as scripts/start keeps it in the home; a terminal gone; closed) must not stop
    /// it. Each log line was written with Foundation's FileHandle, whose failure is a fatal
    /// error: vaultd died (SIGILL) at its first line, "serving", or at the next one later
    /// (an auto-lock, a refused peer), cutting the calls in progress and leaving its socket.
    /// With fds 0-2 closed, a client's socket could also become fd 2 and get log lines.
    @Test func vaultdKeepsServingWhenItsLogCannotBeWritten() throws {
        for (name, script) in [
            ("stderr on a full disk", "exec \"$0\" \"$@\" </dev/null >/dev/full 2>/dev/full"),
            ("stdio closed", "exec \"$0\" \"$@\" <&- >&- 2>&-"),
        ] {
            let d = try Daemon(start: false)
            defer { d.close() }
            let config = d.root + "/config.plist"
            try PropertyListSerialization.data(
                fromPropertyList: ["AutoLockSeconds": 0], format: .xml, options: 0
            ).write(to: URL(fileURLWithPath: config))
            let p = try ChildProcess.spawn(
                "/bin/sh",
                [
                    "-c", script, Paths.tool("vaultd"), "--socket", d.socketPath, "--data-dir",
                    d.dataDirectory, "--config", config,
                ],
                environment: isolatedEnvironment(root: d.root, socket: nil).merging(
                    TestClock.environment(root: d.root)
                ) { $1 }, inputs: [:],
                stdout: .devNull, stderr: .devNull)
            defer {
                kill(p, SIGKILL)
                _ = ChildProcess.wait(p, timeout: 10)
            }
            var exited: Int32?? = nil
            do {
                try Daemon.waitUntilServing(p, socketPath: d.socketPath, timeout: 10, log: { "" }) {
                    exited = $0
                }
            } catch {
                Issue.record("\(name): \(error); exit \(String(describing: exited))")
                continue
            }
            // Calls, a refused second vaultd's stale-socket check, a SIGHUP: each logs or connects.
            #expect(d.initialize().status == 0, "\(name)")
            for _ in 0..<3 {
                let add = d.ctl(["defaults", "write", "com.example.log", "k", "-int", "1"])
                #expect(
                    add.status == 0 && add.stdout.isEmpty && add.stderr.isEmpty, "\(name): \(add)")
            }
            // The SIGHUP turns the auto-lock on; its log line cannot be read here, so the
            // event waited for is its effect: the auto-lock, run by SIGUSR1 with vaultd's
            // clock moved past the delay, locks the vault (and logs that too).
            try PropertyListSerialization.data(
                fromPropertyList: ["AutoLockSeconds": 60], format: .xml, options: 0
            ).write(to: URL(fileURLWithPath: config))
            kill(p, SIGHUP)
            let locked = eventually(timeout: 10) {
                try? TestClock.advance(root: d.root, by: 120)
                kill(p, SIGUSR1)
                return d.statusJSON()?["state"] as? String == "locked"
            }
            #expect(locked, "\(name): the settings SIGHUP read did not lock the vault")
            let read = d.ctl(["defaults", "read", "com.example.log", "k"])
            #expect(read.status == 0 && read.stdoutText == "1\n", "\(name): \(read)")
            kill(p, SIGTERM)
            #expect(ChildProcess.wait(p, timeout: 20) == 0, "\(name)")
            #expect(Self.mode(d.socketPath) == nil, "\(name): socket left behind")
        }
    }

    /// A config file vaultd cannot read is an error, not "no settings": `--config` naming a
    /// missing file (a typo) or a directory, or a config.plist it cannot open, started vaultd
    /// on the defaults without a word, so an AutoLockSeconds the user set never locked the
    /// vault. Only the default path may be absent. (SIGHUP reads the same way.)
    @Test func aConfigFileThatCannotBeReadIsRefusedNotIgnored() throws {
        let d = try Daemon(start: false)
        defer { d.close() }
        func vaultd(_ args: [String]) throws -> ProcessResult {
            try Self.runVaultd(on: d, args, timeout: 5)
        }
        // (/dev/zero: read for ever before; now refused past 1 MiB.)
        for (what, path) in [
            ("a missing file", d.root + "/config.plsit"), ("a directory", d.root + "/home"),
            ("an endless file", "/dev/zero"),
        ] {
            let r = try vaultd(["--config", path])
            #expect(!r.timedOut && r.status == 1 && r.stderr.contains(path), "\(what): \(r)")
            #expect(Self.mode(d.socketPath) == nil, "\(what): vaultd served")
        }
        // The default config.plist as a directory: the same.
        let defaultDir = d.root + "/home/.config/vaultd/config.plist"
        try FileManager.default.createDirectory(
            atPath: defaultDir, withIntermediateDirectories: true)
        let r = try vaultd([])
        #expect(!r.timedOut && r.status == 1 && r.stderr.contains(defaultDir), "\(r)")
        // Absent at the default path: the defaults, as before.
        try FileManager.default.removeItem(atPath: defaultDir)
        try d.start()
        #expect(Daemon.answers(d.socketPath))
    }

    /// A stop removes the socket file this vaultd bound, not whatever the path holds by then:
    /// with its own socket removed (a cleaner of /tmp, a user's rm) and another vaultd (on
    /// another data directory) serving the path since, the first one's SIGTERM removed the
    /// second's socket, leaving that vaultd running and unreachable.
    @Test func aStopRemovesOnlyItsOwnSocketFile() throws {
        let first = try Daemon()
        defer { first.close() }
        try #require(unlink(first.socketPath) == 0)
        let log = first.root + "/second.log"
        let second = try ChildProcess.spawn(
            Paths.tool("vaultd"),
            ["--socket", first.socketPath, "--data-dir", first.root + "/data2"],
            environment: isolatedEnvironment(root: first.root, socket: nil), inputs: [:],
            stdout: .file(log, append: true), stderr: .file(log, append: true))
        defer {
            kill(second, SIGKILL)
            _ = ChildProcess.wait(second, timeout: 10)
        }
        try Daemon.waitUntilServing(
            second, socketPath: first.socketPath, timeout: 10,
            log: { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
        ) { _ in }
        #expect(first.stop() == 0)
        #expect(
            Self.mode(first.socketPath)?.type == S_IFSOCK,
            "the first vaultd's stop removed the second one's socket")
        #expect(Daemon.answers(first.socketPath), "the second vaultd is unreachable")
    }

    /// Failed passphrase checks left no trace in vaultd's log: someone guessing passphrases
    /// (Unlock, ChangePassphrase's current one) was invisible in the journal. Each failure is
    /// logged with its count and the wait it imposes, a guess refused during the wait too, and
    /// never the passphrase tried.
    @Test func failedPassphraseChecksAreLoggedWithoutThePassphrase() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        try #require(d.ctl(["lock"]).status == 0)
        let guesses = ["guess-one-Qx", "guess-two-Qx", "guess-three-Qx", "guess-four-Qx"]
        for g in guesses.prefix(3) {
            let r = d.unlock(passphrase: g)
            try #require(r.status == 1 && r.stderr.contains("AuthFailed"), "\(r)")
        }
        // Within the 1 s wait the third failure imposes (vaultd's clock stands still but for
        // the test's moves): refused unchecked, still logged.
        let limited = d.unlock(passphrase: guesses[3])
        try #require(limited.status == 1 && limited.stderr.contains("RateLimited"), "\(limited)")
        try d.advanceClock(by: 1)
        let change = d.ctl(
            ["passphrase", "change", "--passphrase-fd", "3", "--new-passphrase-fd", "4"],
            fds: [3: passphraseLine(guesses[3]), 4: passphraseLine("new-one-Qx")])
        try #require(change.status == 1 && change.stderr.contains("AuthFailed"), "\(change)")

        let lines = d.log.split(separator: "\n").map(String.init)
        let failures = lines.filter { $0.contains("failed: wrong passphrase") }
        #expect(
            failures == [
                "vaultd: Unlock failed: wrong passphrase (1 failed in a row)",
                "vaultd: Unlock failed: wrong passphrase (2 failed in a row)",
                "vaultd: Unlock failed: wrong passphrase (3 failed in a row; the next check is allowed in 1 s)",
                "vaultd: ChangePassphrase failed: wrong passphrase (4 failed in a row; the next check is allowed in 2 s)",
            ], "\(d.log)")
        // Said once (it read "too many failed passphrase checks; too many failed unlocks; …").
        #expect(
            lines.contains {
                $0.hasPrefix("vaultd: Unlock refused: too many failed unlocks; try again in ")
                    && $0.components(separatedBy: "too many").count == 2
            }, "\(d.log)")
        for secret in guesses + ["new-one-Qx", Daemon.passphrase] {
            #expect(!d.log.contains(secret), "the log holds a passphrase: \(d.log)")
        }
        // The right one still unlocks (after the wait), and clears the count.
        let early = d.unlock()
        #expect(early.status == 1 && early.stderr.contains("RateLimited"), "\(early)")
        try d.advanceClock(by: 2)
        #expect(d.unlock().status == 0)
    }

    /// A device.key of the wrong length (`cat device.key device.key > k; mv k device.key`, a
    /// truncated copy, an empty file) was accepted silently: vaultd used its first 32 bytes,
    /// or failed only for a short one. It must refuse to start, saying the file is damaged,
    /// and leave the file as it is.
    @Test func aDeviceKeyOfTheWrongLengthIsRefusedAsDamaged() throws {
        let d = try Daemon()
        defer { d.close() }
        let (keyPath, original) = try Self.stoppedWithABoundItem(d)
        try #require(original.count == 32)
        for damaged in [original + original, original + Data([0x0A]), original.prefix(16), Data()] {
            try damaged.write(to: URL(fileURLWithPath: keyPath))
            chmod(keyPath, 0o600)
            let refused = try Self.runVaultd(on: d, timeout: 10)
            #expect(!refused.timedOut && refused.status == 1, "\(damaged.count) bytes: \(refused)")
            #expect(
                refused.stderr.contains(
                    "\(keyPath) is damaged: it holds \(damaged.count) bytes, a device key is exactly 32"
                ), "\(damaged.count) bytes: \(refused)")
            #expect(
                try Data(contentsOf: URL(fileURLWithPath: keyPath)) == damaged,
                "\(damaged.count) bytes: device.key was changed")
            #expect(
                Self.mode(d.socketPath) == nil,
                "\(damaged.count) bytes: the refused vaultd left a socket")
        }
        try Self.putBack(original, at: keyPath, andRead: d)
    }

    /// A device.key others may read or write (0644, 0660, 0604) was used as it was. vaultd
    /// refuses it as ssh refuses such a private key, naming the file and the fix, and leaves
    /// its mode alone; at 0600 (or 0400) it serves.
    @Test func aDeviceKeyAccessibleByOthersIsRefusedWithTheFix() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        #expect(d.stop() == 0)
        let keyPath = d.dataDirectory + "/device.key"
        #expect(Self.mode(keyPath)?.permissions == 0o600)
        for loose: mode_t in [0o644, 0o660, 0o604, 0o640] {
            try #require(chmod(keyPath, loose) == 0)
            let refused = try Self.runVaultd(on: d, timeout: 10)
            #expect(
                !refused.timedOut && refused.status == 1, "\(String(loose, radix: 8)): \(refused)")
            #expect(
                refused.stderr.contains("\(keyPath) has permissions \(String(loose, radix: 8))")
                    && refused.stderr.contains("chmod 600 \(keyPath)"),
                "\(String(loose, radix: 8)): \(refused)")
            #expect(Self.mode(keyPath)?.permissions == loose, "the mode was changed")
        }
        try #require(chmod(keyPath, 0o400) == 0)
        try d.start()
        #expect(d.unlock().status == 0)
    }

    /// A first start on a full disk left an empty vault.sqlite with mode 0644 (SQLite's) in the
    /// 0700 data directory, as the store was tightened only after it had been set up. Every
    /// file vaultd leaves in its data directory is 0600 from its creation, also when it stops
    /// half-way. (Root and a private mount namespace: a full tmpfs.)
    @Test(.enabled(if: ReliabilityFullDiskTests.available))
    func aFirstStartOnAFullDiskLeavesOnlyPrivateFiles() throws {
        let d = try Daemon(start: false)
        defer { d.close() }
        let disk = d.root + "/disk"
        try #require(mkdir(disk, 0o700) == 0)
        let script = """
            d=$1; shift
            umask 022
            mount -t tmpfs -o size=256k,mode=0700 tmpfs "$d" || exit 90
            mkdir -m 0700 "$d/data" || exit 91
            head -c 1048576 /dev/zero > "$d/filler" 2>/dev/null
            "$@" --data-dir "$d/data" 2>&1
            echo "exit=$?"
            for f in "$d/data"/*; do [ -e "$f" ] && stat -c 'file %n %a' "$f"; done
            """
        let r = try ChildProcess.run(
            "unshare",
            ["-m", "sh", "-c", script, "sh", disk, Paths.tool("vaultd"), "--socket", d.socketPath],
            environment: isolatedEnvironment(root: d.root, socket: nil), timeout: 30)
        let out = r.stdoutText
        #expect(
            r.status == 0 && out.contains("exit=") && !out.contains("exit=0"),
            "vaultd did not stop on the full disk: \(r)")
        let files = out.split(separator: "\n").filter { $0.hasPrefix("file ") }
        #expect(
            files.contains { $0.contains("/vault.sqlite ") }, "no vault.sqlite left to check: \(r)")
        for f in files { #expect(f.hasSuffix(" 600"), "not 0600: \(f)") }
    }
}
