import CVaultSys
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `vault_pidfd_alive` on both kinds of process reference vaultd pins a peer by: a pidfd, and
/// the `/proc/PID` directory `vault_pidfd_open` opens where pidfd_open(2) is missing (a
/// kernel before 5.3, valgrind 3.19). Both must say alive while the process runs and gone
/// once it has exited, zombie or reaped, so that a peer's pid is trusted only while it still
/// names the peer.
@Suite struct ProcessReferenceTests {
    /// A child that sleeps until killed, and its two references.
    private struct Child {
        let pid: pid_t
        let pidfd: Int32
        let procDirectory: Int32

        init() throws {
            var pid: pid_t = 0
            let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/sleep"), strdup("600"), nil]
            defer { for p in argv { free(p) } }
            let rc = posix_spawn(&pid, "/bin/sleep", nil, nil, argv, environ)
            try #require(rc == 0)
            self.pid = pid
            pidfd = vault_pidfd_open(pid)
            procDirectory = open("/proc/\(pid)", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            try #require(pidfd >= 0)
            try #require(procDirectory >= 0)
        }

        /// Kills the child and returns once it is a zombie (waitid with WNOWAIT: not reaped).
        func killLeavingZombie() {
            kill(pid, SIGKILL)
            var info = siginfo_t()
            while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR {}
        }

        func reap() {
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        }

        func close() {
            Glibc.close(pidfd)
            Glibc.close(procDirectory)
        }
    }

    @Test func bothReferencesSayAliveWhileTheProcessRunsAndGoneOnceItExits() throws {
        let child = try Child()
        defer { child.close() }
        #expect(vault_pidfd_alive(child.pidfd) == 1)
        #expect(vault_pidfd_alive(child.procDirectory) == 1)

        child.killLeavingZombie()
        #expect(vault_pidfd_alive(child.pidfd) == 0, "a zombie's pidfd")
        #expect(vault_pidfd_alive(child.procDirectory) == 0, "a zombie's /proc/PID")

        child.reap()
        #expect(vault_pidfd_alive(child.pidfd) == 0, "a reaped process's pidfd")
        #expect(vault_pidfd_alive(child.procDirectory) == 0, "a reaped process's /proc/PID")
    }

    /// Neither a directory other than a process's nor a descriptor that is not open passes.
    @Test func otherDescriptorsAreNotTakenForALiveProcess() throws {
        let path = FileManager.default.temporaryDirectory
            .appendingPathComponent("process-reference-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let tmp = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        try #require(tmp >= 0)
        defer { close(tmp) }
        #expect(vault_pidfd_alive(tmp) == 0)
        #expect(vault_pidfd_alive(-1) == 0)
    }

    /// A live process's own `/proc/PID` descriptor: the daemon itself, never gone.
    @Test func ownProcessDirectoryIsAlive() throws {
        let own = open("/proc/\(getpid())", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        try #require(own >= 0)
        defer { close(own) }
        #expect(vault_pidfd_alive(own) == 1)
    }
}
