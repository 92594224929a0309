import Foundation
import TestSupport
import Testing
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Identity: a peer of another uid is refused; the socket directory, the socket and
/// the data files have the documented modes; a second vaultd on the same socket exits while
/// the first keeps serving; a stale socket from a killed vaultd does not stop a restart.
@Suite struct ReliabilityIdentityTests {
    static func permissions(_ path: String) -> (type: mode_t, mode: mode_t, uid: uid_t)? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        return (st.st_mode & S_IFMT, st.st_mode & 0o7777, st.st_uid)
    }

    static let python =
        FileManager.default.isExecutableFile(atPath: "/usr/bin/python3")
        ? "/usr/bin/python3" : "python3"

    /// Connects to `socket` as uid/gid 65534, sends a Status call and prints what came back.
    static let foreignClient = """
        import socket, sys
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(sys.argv[1])
        except OSError as e:
            print("connect failed:", e); sys.exit(2)
        print("connected")
        s.settimeout(10)
        try:
            s.sendall(b'{"method":"io.vaultd.Vault.Status"}\\0')
        except OSError as e:
            print("send failed:", e)
        data = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk: break
                data += chunk
        except socket.timeout:
            print("timed out"); sys.exit(3)
        except OSError as e:
            print("recv failed:", e)
        print("received", len(data), "bytes:", data[:200])
        """

    @Test(
        .tags(.system), .enabled(if: getuid() == 0, "needs root to act as another user (setpriv)"))
    func peerOfAnotherUserIsRefused() throws {
        let d = try Daemon()
        defer { d.close() }
        // Make the socket reachable, so the uid check in vaultd is what refuses, not a mode.
        chmod(d.root, 0o755)
        chmod(d.root + "/run", 0o755)
        chmod(d.socketPath, 0o666)
        let r = try ChildProcess.run(
            "setpriv",
            [
                "--reuid=65534", "--regid=65534", "--clear-groups", Self.python, "-c",
                Self.foreignClient, d.socketPath,
            ],
            environment: ["PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"], timeout: 30)
        #expect(r.status == 0, "\(r)")
        #expect(
            r.stdoutText.contains("connected"),
            "the foreign peer could not even connect, so the test proves nothing: \(r)")
        #expect(
            r.stdoutText.contains("received 0 bytes"), "a peer of another uid got a reply: \(r)")
        // The refusal is logged, and the owner is still served.
        let deadline = Date().addingTimeInterval(5)
        while !d.log.contains("refused a connection from another user") && Date() < deadline {
            usleep(50_000)
        }
        #expect(d.log.contains("refused a connection from another user"), "log:\n\(d.log)")
        #expect(Daemon.answers(d.socketPath))
    }

    @Test func socketDirectorySocketAndDataFilesHaveTheirModes() throws {
        // The default socket path under XDG_RUNTIME_DIR (the strict case), and the data files
        // after some writes (WAL included).
        let d = try CustomDaemon()
        defer { d.close() }
        let runtime = d.root + "/xdg-run"
        let socket = runtime + "/vaultd/vaultd.sock"
        let env = isolatedEnvironment(root: d.root, socket: nil)
        let p = try ChildProcess.spawn(
            Paths.tool("vaultd"), ["--data-dir", d.dataDirectory], environment: env, inputs: [:],
            stdout: .file(d.logPath, append: true),
            stderr: .file(d.logPath, append: true))
        defer {
            kill(p, SIGKILL)
            _ = ChildProcess.wait(p, timeout: 10)
        }
        let deadline = Date().addingTimeInterval(15)
        while !Daemon.answers(socket) && Date() < deadline { usleep(20_000) }
        let c = try ExactClient(path: socket)
        try Wire.initWithoutPassphrase(c)
        #expect(
            c.call(
                "io.vaultd.Keychain.Add",
                [
                    "class": "genericPassword", "attributes": ["account": "m"],
                    "data": Wire.base64([1, 2, 3]),
                ]
            ).parameters != nil)
        #expect(
            c.call(
                "io.vaultd.Preferences.Set",
                ["domain": "com.example.m", "key": "k", "value": ["bool": true]]
            ).parameters != nil)

        let dir = try #require(Self.permissions(runtime + "/vaultd"))
        #expect(
            dir.type == S_IFDIR && dir.mode == 0o700 && dir.uid == getuid(),
            "socket directory \(String(dir.mode, radix: 8))")
        let sock = try #require(Self.permissions(socket))
        #expect(
            sock.type == S_IFSOCK && sock.mode == 0o600, "socket \(String(sock.mode, radix: 8))")
        let data = try #require(Self.permissions(d.dataDirectory))
        #expect(data.mode == 0o700, "data directory \(String(data.mode, radix: 8))")
        for f in try FileManager.default.contentsOfDirectory(atPath: d.dataDirectory) {
            let m = try #require(Self.permissions(d.dataDirectory + "/" + f))
            if m.type == S_IFREG {
                #expect(
                    m.mode & 0o077 == 0, "\(f) is \(String(m.mode, radix: 8)): readable by others")
            }
        }
        for f in ["device.key", "vault.sqlite", "vault.sqlite-wal"] {
            #expect(Self.permissions(d.dataDirectory + "/" + f)?.mode == 0o600, "\(f)")
        }
    }

    @Test func socketDirectoryOpenToOthersIsRefused() throws {
        let d = try CustomDaemon()
        defer { d.close() }
        let runtime = d.root + "/xdg-run"
        mkdir(runtime + "/vaultd", 0o755)
        chmod(runtime + "/vaultd", 0o755)
        let r = try ChildProcess.run(
            Paths.tool("vaultd"), ["--data-dir", d.dataDirectory],
            environment: isolatedEnvironment(root: d.root, socket: nil), timeout: 20)
        #expect(!r.timedOut && r.status != 0, "vaultd served from a 0755 socket directory: \(r)")
        #expect(r.stderr.contains("700") || r.stderr.contains("mode"), "no clear message: \(r)")
    }

    @Test func secondDaemonExitsWhileTheFirstKeepsServing() throws {
        let d = try Daemon()
        defer { d.close() }
        let c = try ExactClient(path: d.socketPath)
        try Wire.initWithoutPassphrase(c)
        // A client of the first vaultd keeps calling while the second one tries to start.
        let done = Locked(false)
        let served = Locked(0)
        let failures = LockedList()
        let group = DispatchGroup()
        group.enter()
        Thread {
            defer { group.leave() }
            var n = 0
            while !done.get {
                let r = c.call(
                    "io.vaultd.Preferences.Set",
                    ["domain": "com.example.first", "key": "k", "value": ["integer": JSON(n)]])
                if r.parameters == nil {
                    failures.append("\(r)")
                    return
                }
                n += 1
                served.withLock { $0 = n }
            }
        }.start()
        let second = try ChildProcess.run(
            Paths.tool("vaultd"), ["--socket", d.socketPath, "--data-dir", d.root + "/data2"],
            environment: isolatedEnvironment(root: d.root, socket: nil), timeout: 20)
        // The first vaultd serves on after the second one's exit: more calls answered since.
        let atExit = served.get
        #expect(
            eventually(timeout: 20) { served.get >= atExit + 5 || !failures.all.isEmpty },
            "served \(served.get) calls, \(atExit) at the second vaultd's exit")
        done.withLock { $0 = true }
        group.wait()
        #expect(!second.timedOut && second.status != 0, "the second vaultd did not exit: \(second)")
        #expect(second.stderr.contains("already"), "no clear message: \(second)")
        #expect(failures.all.isEmpty, "the first vaultd's client failed: \(failures.all)")
        #expect(served.get > 0)
        #expect(d.isRunning && Daemon.answers(d.socketPath))
        #expect(Self.permissions(d.socketPath)?.type == S_IFSOCK)
    }

    @Test func staleSocketFromAKilledDaemonDoesNotStopARestart() throws {
        let d = try Daemon()
        defer { d.close() }
        let c = try ExactClient(path: d.socketPath)
        try Wire.initWithoutPassphrase(c)
        #expect(
            c.call(
                "io.vaultd.Preferences.Set",
                ["domain": "com.example.stale", "key": "k", "value": ["integer": 7]]
            ).parameters != nil)
        c.close()
        d.kill()
        try #require(
            Self.permissions(d.socketPath)?.type == S_IFSOCK,
            "SIGKILL should leave the socket behind")
        #expect(!Daemon.answers(d.socketPath))
        try d.start()
        #expect(d.log.contains("stale"), "log:\n\(d.log)")
        let again = try ExactClient(path: d.socketPath)
        #expect(
            again.call("io.vaultd.Preferences.Get", ["domain": "com.example.stale", "key": "k"])
                .parameters?["value"] == ["integer": 7])
        #expect(Self.permissions(d.socketPath)?.mode == 0o600)
    }

    /// A server of another user posing as vaultd: it listens on the path a client would use
    /// (/tmp/vaultd-$UID squatted before the owner's vaultd started, a VAULTD_SOCKET in a
    /// shared directory), answers every call and keeps what it gets. vaultd refuses peers of
    /// another uid, but the clients trusted whatever answered: `vaultctl item add` sent it
    /// the secret, `git-credential-vault store` the password. A client must check the
    /// server's uid (SO_PEERCRED) before it sends anything, and say why it stops.
    @Test(
        .tags(.system), .enabled(if: getuid() == 0, "needs root to act as another user (setpriv)"))
    func aServerOfAnotherUserIsNotSentAnything() throws {
        let root = try TemporaryDirectory.make(prefix: "vaultd-impostor")
        defer { TemporaryDirectory.remove(root) }
        chmod(root, 0o755)
        let shared = root + "/shared"
        mkdir(shared, 0o777)
        chmod(shared, 0o1777)
        let socket = shared + "/vaultd.sock"
        let received = shared + "/received"
        let server = """
            import socket, sys
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(sys.argv[1]); s.listen(8)
            import os; os.chmod(sys.argv[1], 0o666)
            while True:
                c, _ = s.accept()
                buf = b""
                while True:
                    chunk = c.recv(65536)
                    if not chunk: break
                    with open(sys.argv[2], "ab") as f: f.write(chunk)
                    buf += chunk
                    while b"\\0" in buf:
                        _, buf = buf.split(b"\\0", 1)
                        c.sendall(b'{"parameters":{"lock":{"state":"unlocked","unlockedSinceStart":true,"hasPassphrase":false},"items":[],"count":1}}\\0')
                c.close()
            """
        let p = try ChildProcess.spawn(
            "setpriv",
            [
                "--reuid=65534", "--regid=65534", "--clear-groups", Self.python, "-c", server,
                socket, received,
            ],
            environment: ["PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"], inputs: [:],
            stdout: .devNull, stderr: .file(root + "/server.log", append: true))
        defer {
            kill(p, SIGKILL)
            _ = ChildProcess.wait(p, timeout: 10)
        }
        let up = eventually(timeout: 10) { access(socket, F_OK) == 0 }
        try #require(
            up,
            "the impostor did not start: \((try? String(contentsOfFile: root + "/server.log", encoding: .utf8)) ?? "")"
        )

        var env = isolatedEnvironment(root: root, socket: socket)
        env["VAULTCTL_TIMEOUT"] = "5"
        let add = try ChildProcess.run(
            Paths.tool("vaultctl"), ["item", "add", "--service", "impostor", "--account", "a"],
            environment: env, stdin: Data("imp-secret-1".utf8),
            timeout: 30)
        #expect(add.status == 69 && add.stderr.contains("uid 65534"), "\(add)")
        let git = try ChildProcess.run(
            Paths.tool("git-credential-vault"), ["store"], environment: env,
            stdin: Data(
                "protocol=https\nhost=example.org\nusername=bob\npassword=imp-secret-2\n\n".utf8),
            timeout: 30)
        // The helper stays quiet when it cannot reach vaultd (git then asks as without it).
        #expect(!git.timedOut, "\(git)")
        let got = (try? Data(contentsOf: URL(fileURLWithPath: received))) ?? Data()
        #expect(
            got.isEmpty,
            "the impostor got \(got.count) bytes: \(String(decoding: got, as: UTF8.self).prefix(400))"
        )
    }
}
