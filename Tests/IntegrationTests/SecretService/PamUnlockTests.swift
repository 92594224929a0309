import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A login through the real PAM stack (`pamtester` → libpam → `pam_exec.so expose_authtok` →
/// `dist/pam/vaultd-pam-unlock`) against a vaultd running as a throwaway user.
///
/// The user is created by the fixture (`useradd --system`) so that the helper, run by
/// pam_exec as root, has to drop to that user's uid to reach the vault: its vaultd listens on
/// the default socket in `/run/user/UID`, as the user's systemd would start it, and refuses
/// peers of any other uid. Everything is removed afterwards: the service file, the runtime
/// directory, the user.
///
/// `@unchecked Sendable`: set up and torn down by the suite's one thread (the suite is
/// serialized); its tests only read it.
final class PamLogin: @unchecked Sendable {
    static let helper = Paths.repoRoot.appendingPathComponent("dist/pam/vaultd-pam-unlock").path
    /// The helper's bound on an unlock (its `--timeout`), in seconds.
    static let helperTimeout = 3

    let name: String
    let uid: uid_t
    let gid: gid_t
    /// Owned by the user: `home/` and vaultd's `data/`.
    let root: String
    /// Owned by root: the PAM log (pam_exec's `log=`) and vaultd's log.
    let adminRoot: String
    let runtimeDirectory: String
    let service: String
    private(set) var vaultd: pid_t?

    var serviceFile: String { "/etc/pam.d/" + service }
    var pamLogPath: String { adminRoot + "/pam.log" }
    var vaultdLogPath: String { adminRoot + "/vaultd.log" }
    var pamLog: String { (try? String(contentsOfFile: pamLogPath, encoding: .utf8)) ?? "" }
    var vaultdLog: String { (try? String(contentsOfFile: vaultdLogPath, encoding: .utf8)) ?? "" }

    init() throws {
        var bytes = [UInt8](repeating: 0, count: 5)
        arc4random_buf(&bytes, bytes.count)
        name = "vpam" + bytes.map { String(format: "%02x", $0) }.joined()
        service = "vaultd-test-" + name
        adminRoot = try TemporaryDirectory.make(prefix: "vpam-admin")
        root = try TemporaryDirectory.make(prefix: "vpam")
        let add = try ChildProcess.run(
            "useradd",
            [
                "--system", "--user-group", "--no-create-home", "--home-dir", root + "/home",
                "--shell", "/usr/sbin/nologin", name,
            ],
            environment: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"])
        guard add.status == 0, let pw = getpwnam(name) else {
            TemporaryDirectory.remove(root)
            TemporaryDirectory.remove(adminRoot)
            throw HarnessError("useradd \(name): \(add)")
        }
        uid = pw.pointee.pw_uid
        gid = pw.pointee.pw_gid
        runtimeDirectory = "/run/user/\(uid)"
        do {
            for d in [root, root + "/home"] {
                if d != root { mkdir(d, 0o700) }
                guard chown(d, uid, gid) == 0 else {
                    throw HarnessError("chown \(d): \(String(cString: strerror(errno)))")
                }
            }
            // As pam_systemd/logind make it: 0700, the user's. A directory left from another
            // user of the same uid would not be ours to reuse.
            guard mkdir("/run/user", 0o755) == 0 || errno == EEXIST,
                mkdir(runtimeDirectory, 0o700) == 0,
                chown(runtimeDirectory, uid, gid) == 0
            else { throw HarnessError("\(runtimeDirectory): \(String(cString: strerror(errno)))") }
        } catch {
            close()
            throw error
        }
    }

    deinit { close() }

    /// The environment of the user's own processes (vaultd, vaultctl): its home and runtime
    /// directory, nothing of the test's.
    var userEnvironment: [String: String] {
        [
            "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": root + "/home",
            "XDG_RUNTIME_DIR": runtimeDirectory,
            "LC_ALL": "C.UTF-8", "VAULTD_ARGON2_TEST_COST": "min",
        ]
    }

    /// `setpriv` to the user, then `command`.
    func asUser(_ command: [String]) -> [String] {
        ["--reuid=\(uid)", "--regid=\(gid)", "--clear-groups", "--"] + command
    }

    /// vaultctl as the user, on its default socket.
    func ctl(_ arguments: [String], fds: [Int32: Data] = [:]) -> ProcessResult {
        do {
            return try ChildProcess.run(
                "setpriv", asUser([Paths.tool("vaultctl")] + arguments),
                environment: userEnvironment, extraFDs: fds, timeout: 30)
        } catch {
            return ProcessResult(status: -1, stdout: Data(), stderr: "harness: \(error)")
        }
    }

    /// Starts vaultd as the user on its default socket and waits until `vaultctl status`
    /// answers; then `vaultctl init` with `passphrase` and `vaultctl lock`, as a vault is
    /// before a login.
    func startLockedVault(passphrase: String) throws {
        let p = try ChildProcess.spawn(
            "setpriv", asUser([Paths.tool("vaultd"), "--data-dir", root + "/data"]),
            environment: userEnvironment, inputs: [:],
            stdout: .file(vaultdLogPath, append: true), stderr: .file(vaultdLogPath, append: true))
        vaultd = p
        let deadline = Date().addingTimeInterval(20)
        while ctl(["status"]).status != 0 {
            guard ChildProcess.isAlive(p), Date() < deadline else {
                throw HarnessError("vaultd as \(name) did not answer; log:\n\(vaultdLog)")
            }
            usleep(50_000)
        }
        let initialized = ctl(
            ["init", "--passphrase-fd", "3"], fds: [3: Data((passphrase + "\n").utf8)])
        guard initialized.status == 0 else { throw HarnessError("init: \(initialized)") }
        let locked = ctl(["lock"])
        guard locked.status == 0, locked.stdoutText.contains("state: locked") else {
            throw HarnessError("lock: \(locked)")
        }
    }

    /// The vault's state as `vaultctl status` prints it (`unlocked`; `locked (after first
    /// unlock)` for the vault `startLockedVault` leaves).
    func state() -> String {
        let r = ctl(["status"])
        let line = r.stdoutText.split(separator: "\n").first { $0.hasPrefix("state: ") }
        return line.map { String($0.dropFirst("state: ".count)) } ?? "no state: \(r)"
    }

    /// Writes the service file: the helper, optional, as a login's common-auth would run it,
    /// then pam_permit (so the stack's result is the helper's only when it wrongly fails it).
    func writeService() throws {
        let text = """
            auth optional pam_exec.so expose_authtok quiet log=\(pamLogPath) \(PamLogin.helper) --timeout \(PamLogin.helperTimeout) \(Paths.tool("vaultctl"))
            auth required pam_permit.so

            """
        try text.write(toFile: serviceFile, atomically: false, encoding: .utf8)
    }

    /// `pamtester SERVICE USER authenticate` with `password` typed at pam_exec's prompt (its
    /// stdin), and how long it took, in seconds.
    func login(password: String) throws -> (ProcessResult, Double) {
        let start = Date()
        let r = try ChildProcess.run(
            "pamtester", [service, name, "authenticate"],
            environment: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"],
            stdin: Data((password + "\n").utf8), timeout: 60)
        return (r, Date().timeIntervalSince(start))
    }

    func signalVaultd(_ signal: Int32) { if let p = vaultd { kill(p, signal) } }

    /// SIGTERM and wait: vaultd removes its socket as it stops.
    func stopVaultd() {
        guard let p = vaultd else { return }
        kill(p, SIGCONT)
        kill(p, SIGTERM)
        if ChildProcess.wait(p, timeout: 20) == nil {
            kill(p, SIGKILL)
            _ = ChildProcess.wait(p, timeout: 10)
        }
        vaultd = nil
    }

    func close() {
        if let p = vaultd {
            kill(p, SIGCONT)
            kill(p, SIGKILL)
            _ = ChildProcess.wait(p, timeout: 10)
            vaultd = nil
        }
        unlink(serviceFile)
        try? FileManager.default.removeItem(atPath: runtimeDirectory)
        _ = try? ChildProcess.run(
            "userdel", [name], environment: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"])
        TemporaryDirectory.remove(root)
        TemporaryDirectory.remove(adminRoot)
    }
}

/// The PAM stack can be tested where the test may add a service file and a user (root on CI).
private let pamWritable = getuid() == 0 && access("/etc/pam.d", W_OK) == 0

/// One test at a time: useradd and userdel lock /etc/passwd and fail when another holds it.
@Suite(
    "PamUnlock", .serialized, .tags(.system),
    .enabled(
        if: pamWritable,
        "needs root and a writable /etc/pam.d (a service file and a test user are added, then removed)"
    ))
struct PamUnlockTests {
    static let password = "login pass, with spaces"

    @Test func theLoginPasswordUnlocksTheVault() throws {
        let login = try PamLogin()
        try login.startLockedVault(passphrase: Self.password)
        try login.writeService()
        #expect(login.state() == "locked (after first unlock)")
        let (r, _) = try login.login(password: Self.password)
        #expect(r.status == 0, "\(r)")
        #expect(r.stdoutText.contains("successfully authenticated"), "\(r)")
        #expect(
            login.state() == "unlocked",
            "pam log:\n\(login.pamLog)\nvaultd log:\n\(login.vaultdLog)")
        #expect(
            login.pamLog.contains("vaultd-pam-unlock: the vault of \(login.name) is unlocked"),
            "\(login.pamLog)")
        // The password is in no log.
        #expect(!login.pamLog.contains(Self.password))
        #expect(!login.vaultdLog.contains(Self.password))
    }

    @Test func aWrongPasswordLeavesTheVaultLockedAndTheLoginSucceeds() throws {
        let login = try PamLogin()
        try login.startLockedVault(passphrase: Self.password)
        try login.writeService()
        let (r, _) = try login.login(password: "not the vault passphrase")
        #expect(r.status == 0, "\(r)")
        #expect(r.stdoutText.contains("successfully authenticated"), "\(r)")
        #expect(login.state() == "locked (after first unlock)")
        #expect(
            login.pamLog.contains(
                "the login password did not unlock the vault of \(login.name), which stays locked"),
            "\(login.pamLog)")
        #expect(!login.pamLog.contains("not the vault passphrase"))
        // One login, one failed check, as vaultd counts them.
        #expect(
            login.vaultdLog.contains("failed: wrong passphrase (1 failed in a row)"),
            "\(login.vaultdLog)")
        // The vault still opens with its own passphrase: nothing was changed.
        let unlocked = login.ctl(
            ["unlock", "--passphrase-fd", "3"], fds: [3: Data((Self.password + "\n").utf8)])
        #expect(
            unlocked.status == 0 && unlocked.stdoutText.contains("state: unlocked"), "\(unlocked)")
    }

    @Test func anUnlockedVaultIsLeftAloneAndNoPasswordIsTried() throws {
        let login = try PamLogin()
        try login.startLockedVault(passphrase: Self.password)
        try login.writeService()
        let unlocked = login.ctl(
            ["unlock", "--passphrase-fd", "3"], fds: [3: Data((Self.password + "\n").utf8)])
        #expect(unlocked.status == 0, "\(unlocked)")
        // A lock screen whose password is not the vault's: nothing is sent, nothing counted.
        for _ in 0..<4 {
            let (r, _) = try login.login(password: "another password")
            #expect(r.status == 0 && r.stdoutText.contains("successfully authenticated"), "\(r)")
        }
        #expect(login.state() == "unlocked")
        #expect(
            login.pamLog.components(separatedBy: "the vault of \(login.name) is already unlocked")
                .count == 5, "\(login.pamLog)")
        #expect(!login.vaultdLog.contains("wrong passphrase"), "\(login.vaultdLog)")
    }

    /// Older Linux-PAM wrote a NUL after the password; the helper removes it. Run as
    /// pam_exec runs it (root, PAM_TYPE and PAM_USER set), with such a stdin.
    @Test func aPasswordFollowedByANULAsOlderPamExecWritesItUnlocks() throws {
        let login = try PamLogin()
        try login.startLockedVault(passphrase: Self.password)
        let r = try ChildProcess.run(
            PamLogin.helper, ["--timeout", "\(PamLogin.helperTimeout)", Paths.tool("vaultctl")],
            environment: [
                "PATH": "/usr/bin:/bin", "PAM_TYPE": "auth", "PAM_USER": login.name,
                "PAM_SERVICE": login.service,
            ],
            stdin: Data(Self.password.utf8) + [0], timeout: 30)
        #expect(r.status == 0, "\(r)")
        #expect(r.stderr == "vaultd-pam-unlock: the vault of \(login.name) is unlocked\n", "\(r)")
        #expect(login.state() == "unlocked")
    }

    @Test func noVaultdRunningLetsTheLoginThroughAtOnce() throws {
        let login = try PamLogin()
        try login.startLockedVault(passphrase: Self.password)
        try login.writeService()
        login.stopVaultd()
        #expect(
            !FileManager.default.fileExists(atPath: login.runtimeDirectory + "/vaultd/vaultd.sock"))
        let (r, seconds) = try login.login(password: Self.password)
        #expect(r.status == 0 && r.stdoutText.contains("successfully authenticated"), "\(r)")
        #expect(
            login.pamLog.contains(
                "vaultd is not running for \(login.name) (no socket at \(login.runtimeDirectory)/vaultd/vaultd.sock); the vault stays locked"
            ), "\(login.pamLog)")
        // Nothing to wait for: well under the helper's own bound.
        #expect(seconds < Double(PamLogin.helperTimeout), "took \(seconds) s")
    }

    @Test func aHungVaultdHoldsTheLoginOnlyForTheBound() throws {
        let login = try PamLogin()
        try login.startLockedVault(passphrase: Self.password)
        try login.writeService()
        // Stopped, its socket still there: connections are queued and never answered.
        login.signalVaultd(SIGSTOP)
        let (r, seconds) = try login.login(password: Self.password)
        login.signalVaultd(SIGCONT)
        #expect(r.status == 0 && r.stdoutText.contains("successfully authenticated"), "\(r)")
        #expect(!r.timedOut)
        // One call's bound (the status call gives up; no unlock is tried), plus the backstop's
        // 2 s and the processes' start.
        #expect(seconds < Double(PamLogin.helperTimeout + 3), "took \(seconds) s")
        // vaultctl gave up at its VAULTCTL_TIMEOUT; timeout(1) did not have to kill it.
        #expect(
            login.pamLog.contains(
                "vaultd-pam-unlock: vaultd of \(login.name) did not answer; the vault stays locked"),
            "\(login.pamLog)")
        #expect(login.state() == "locked (after first unlock)")
    }
}
