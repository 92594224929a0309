import CVaultSys
import Foundation
import Synchronization
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// A file's identity: device and inode.
struct FileID: Equatable, Sendable {
    var device: UInt64
    var inode: UInt64

    init(_ st: stat) {
        device = UInt64(st.st_dev)
        inode = UInt64(st.st_ino)
    }

    /// The file `path` leads to (symlinks followed, as `/proc/PID/exe` is), nil when it
    /// cannot be looked at.
    init?(path: String) {
        guard let st = try? SystemCall.stat(path) else { return nil }
        self.init(st)
    }
}

/// The kernel's record of a connected peer: SO_PEERCRED's pid, uid and gid, and a pidfd for
/// the process that connected (SO_PEERPIDFD). Every `/proc/PID` read about the peer is
/// followed by a check that the pidfd's process is still alive: while it is, its pid names
/// it and no other, so what was read was about the connector, not about a process that got
/// the pid after the connector exited.
///
/// What identification leaves open (docs/threat-model.md): the code a process runs is
/// whatever a same-uid host process makes it run. A host process can start a registered
/// app's real binary with `LD_PRELOAD`, ptrace it, or exec it with a connection it made
/// before still open (not close-on-exec) and have what it sent before the exec answered as
/// that app. That is the owner's power (such a process may as well run vaultctl), so it is
/// out of scope; a sandbox cannot do it to a host app.
final class PeerCredentials: Sendable {
    let pid: pid_t
    let uid: uid_t
    let gid: gid_t
    /// The connector's pidfd (closed on deinit).
    let pidfd: Int32
    /// The kernel has no SO_PEERPIDFD (before Linux 6.5): `pidfd` came from pidfd_open(pid),
    /// so it names whoever had the pid a moment after the connect.
    let pidfdFromPID: Bool
    /// The accepted socket (not owned).
    let socketFD: Int32
    /// What the identification found, for the check at the first message. Behind a mutex,
    /// though one thread at a time uses it (the connection's, or the bus thread).
    private struct Identification {
        var executable: FileID?
        var mustHoldConnection = false
        var confirmed = false
    }
    private let identification = Mutex(Identification())

    /// The executable the peer ran when it was identified (`/proc/PID/exe`), checked again
    /// at its first message: an exec in between (another program in the same process) ends
    /// the connection.
    var identifiedExecutable: FileID? {
        get { identification.withLock { $0.executable } }
        set { identification.withLock { $0.executable = newValue } }
    }
    /// Identified as an app by its executable: at its first message, before anything is
    /// served, the process must itself hold its end of the connection (`holdsConnection`), so
    /// a connection made by one program, which then ran another (exec, descriptors closed on
    /// exec), is not taken for the second.
    var mustHoldConnection: Bool {
        get { identification.withLock { $0.mustHoldConnection } }
        set { identification.withLock { $0.mustHoldConnection = newValue } }
    }
    /// The first message has been checked (`confirmAtFirstMessage`).
    var confirmed: Bool { identification.withLock { $0.confirmed } }

    /// Nil when the kernel gives no pid or no pidfd for the peer: it cannot be identified,
    /// and is refused.
    init?(socket: UnixSocket) {
        var pid: pid_t = 0
        var uid: uid_t = 0
        var gid: gid_t = 0
        var pidfd: Int32 = -1
        var fallback: Int32 = 0
        guard
            (try? retryingOnInterrupt("getsockopt") {
                vault_peer_pidfd(socket.fd, &pid, &uid, &gid, &pidfd, &fallback)
            }) != nil, pid > 0
        else { return nil }
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.pidfd = pidfd
        self.pidfdFromPID = fallback != 0
        self.socketFD = socket.fd
    }

    /// A peer known from elsewhere than a socket of vaultd's (a D-Bus connection, whose
    /// credentials the bus gives): `pidfd` (owned) came from pidfd_open(pid), and the
    /// caller checks after the identification that `pid` still names the connection's
    /// process. There is no socket: `holdsConnection` is never true.
    init(pid: pid_t, uid: uid_t, pidfd: Int32) {
        self.pid = pid
        self.uid = uid
        self.gid = 0
        self.pidfd = pidfd
        self.pidfdFromPID = true
        self.socketFD = -1
    }

    deinit { SystemCall.close(pidfd) }

    /// Whether the connector is still alive (so `pid` still names it).
    var isAlive: Bool { vault_pidfd_alive(pidfd) == 1 }

    /// The executable `/proc/PID/exe` leads to now.
    var currentExecutable: FileID? { FileID(path: "/proc/\(pid)/exe") }

    /// Whether the peer process holds a descriptor of its end of this connection (one of
    /// `/proc/PID/fd/*` is `socket:[INODE]`, the inode of the peer's socket from sock_diag).
    /// At most `limit` descriptors are looked at: a process holding more is not confirmed.
    func holdsConnection(limit: Int = 65536) -> Bool {
        guard socketFD >= 0 else { return false }
        var peerInode: UInt64 = 0
        guard
            (try? retryingOnInterrupt("sock_diag") { vault_unix_peer_inode(socketFD, &peerInode) })
                != nil
        else { return false }
        let wanted = "socket:[\(peerInode)]"
        let base = "/proc/\(pid)/fd/"
        var seen = 0
        var found = false
        try? SystemCall.forEachEntry(ofDirectory: base) { name in
            seen += 1
            if seen > limit { return false }
            found = (try? SystemCall.readlink(base + name, capacity: 64)) == wanted
            return !found
        }
        return found
    }

    /// At the peer's first message: the same process (alive), running the program it was
    /// identified with and, for an app identified by executable, still holding its end of
    /// the connection. Returns why not, or nil.
    func confirmAtFirstMessage() -> String? {
        let (identified, mustHoldConnection) = identification.withLock {
            $0.confirmed = true
            return ($0.executable, $0.mustHoldConnection)
        }
        guard let identified else { return nil }
        guard currentExecutable == identified, isAlive else {
            return "its process ran another program (exec) or exited after it was identified"
        }
        if mustHoldConnection && !holdsConnection() {
            return
                "its process no longer holds its end of the connection (handed on, then exec or exit)"
        }
        return nil
    }
}

extension UnixSocket {
    /// `receive(polling:othersBusy:)`, for a connection from `peer`: each chunk's sender
    /// (SCM_CREDENTIALS; SO_PASSCRED is set on the listener, so every chunk carries one) must
    /// be the identified process. Data another process sent (the socket handed on, or a
    /// child that kept a copy) throws `Errno` EPERM ("recv: sender"), and the connection is
    /// to be closed. A sender the kernel names no pid for (0) is refused too.
    func receive(from peer: PeerCredentials, polling busyPoll: inout BusyPoll, othersBusy: Bool)
        throws -> (bytes: [UInt8], sender: pid_t)
    {
        guard fd >= 0 else { throw Errno(code: Errno.badFileDescriptor, call: "recv") }
        let readable = busyPoll.awaitReadable(fd, othersBusy: othersBusy)
        if !readable,
            try SystemCall.poll(fd, events: Int16(POLLIN), timeout: receiveTimeoutMilliseconds) == 0
        {
            throw Errno(code: Errno.wouldBlock, call: "recv")
        }
        var sender: pid_t = 0
        let max = 65536
        let bytes = try [UInt8](unsafeUninitializedCapacity: max) { b, n in
            n = 0
            n = try retryingOnInterrupt("recv") { vault_recv_from(fd, b.baseAddress, max, &sender) }
        }
        if !bytes.isEmpty && sender != peer.pid {
            throw Errno(code: Errno.notPermitted, call: "recv: sender")
        }
        return (bytes, sender)
    }
}
