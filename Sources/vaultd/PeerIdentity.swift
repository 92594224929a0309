import CVaultSys
import Foundation
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// `O_PATH`: a descriptor that names a file without opening it (no FIFO blocks, no device acts).
private let openPathOnly = vault_o_path()

/// What the kernel says about a peer process beyond SO_PEERCRED (docs/apps.md): its Flatpak
/// app ID, checked against the host's record of the Flatpak instance, and its executable.
/// Nothing the client sends is consulted, and every failure to find out refuses the peer:
/// it never makes it the owner.
enum PeerIdentity {
    /// Where a peer runs, from `/proc/PID/root`.
    enum Sandbox: Equatable {
        /// vaultd's own root directory and no `/.flatpak-info`: a host process.
        case none
        /// A Flatpak app with this ID, confirmed by the host's instance record.
        case flatpak(String)
        /// A root directory not vaultd's (a bubblewrap sandbox, a container, a chroot) and no
        /// `/.flatpak-info`: a sandbox vaultd cannot name. It can neither run the host's
        /// vaultctl nor be told apart from another app, so it gets nothing
        /// (docs/threat-model.md).
        case unnamed
        /// A `/.flatpak-info` vaultd does not accept (why).
        case refused(String)
        /// vaultd may not look at the process's root (`errno`; a process that made itself
        /// non-dumpable, say): it cannot be placed, so it gets nothing.
        case unreadable(Int32)
    }

    /// The largest `.flatpak-info` read (bytes); Flatpak's are a few KiB. A bigger file is
    /// refused without being read.
    static let maximumInfoSize = 64 << 10

    /// A `.flatpak-info` keyfile's bytes and its identity.
    struct InfoFile {
        var bytes: [UInt8]
        var file: FileID
    }

    enum InfoRead: Error {
        /// No file there (ENOENT).
        case absent
        /// Not a regular file, or over `maximumInfoSize` (what it is).
        case unacceptable(String)
        /// Another error (errno).
        case failed(Int32)
    }

    /// Reads `name` in directory `dirfd` without following a symlink, without opening
    /// anything but a regular file (a FIFO would block, a device could be endless or act on
    /// open) and without reading more than `maximumInfoSize` bytes. The name is opened
    /// Opened O_PATH first, looked at, and only a regular file is opened for reading (through
    /// /proc/self/fd, the same inode). `owner`: the file must belong to this uid.
    static func readBounded(_ dirfd: Int32, _ name: String, owner: uid_t? = nil) throws(InfoRead)
        -> InfoFile
    {
        let pathFD: Int32
        do {
            pathFD = try SystemCall.openat(dirfd, name, openPathOnly | O_NOFOLLOW | O_CLOEXEC)
        } catch {
            throw error.code == Errno.notFound ? .absent : .failed(error.code)
        }
        defer { SystemCall.close(pathFD) }
        let st: stat
        do { st = try SystemCall.fstat(pathFD) } catch { throw .failed(error.code) }
        switch st.st_mode & S_IFMT {
        case S_IFREG: break
        case S_IFLNK: throw .unacceptable("a symlink")
        case S_IFIFO: throw .unacceptable("a FIFO")
        case S_IFCHR, S_IFBLK: throw .unacceptable("a device")
        case S_IFDIR: throw .unacceptable("a directory")
        default: throw .unacceptable("not a regular file")
        }
        if let owner, st.st_uid != owner { throw .unacceptable("owned by uid \(st.st_uid)") }
        guard st.st_size <= maximumInfoSize else {
            throw .unacceptable("\(st.st_size) bytes, over \(maximumInfoSize)")
        }
        let fd: Int32
        do {
            fd = try SystemCall.open(
                "/proc/self/fd/\(pathFD)", O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
        } catch { throw .failed(error.code) }
        defer { SystemCall.close(fd) }
        guard let opened = try? SystemCall.fstat(fd), FileID(opened) == FileID(st),
            opened.st_mode & S_IFMT == S_IFREG
        else {
            throw .unacceptable("replaced while it was opened")
        }
        // One byte more than the limit: a file that grew past it since the fstat is refused.
        var bytes = [UInt8](repeating: 0, count: maximumInfoSize + 1)
        var count = 0
        while count < bytes.count {
            let n: Int
            do {
                n = try bytes.withUnsafeMutableBytes {
                    try SystemCall.read(
                        fd, into: UnsafeMutableRawBufferPointer(rebasing: $0[count...]))
                }
            } catch let e as Errno {
                throw .failed(e.code)
            } catch { throw .failed(Errno.ioError) }
            if n == 0 { break }
            count += n
        }
        guard count <= maximumInfoSize else { throw .unacceptable("over \(maximumInfoSize) bytes") }
        bytes.removeSubrange(count...)
        return InfoFile(bytes: bytes, file: FileID(st))
    }

    /// vaultd's own runtime directory (`XDG_RUNTIME_DIR`), where Flatpak keeps its record of
    /// each running instance (`.flatpak/INSTANCE/info`). Without one, no Flatpak identity
    /// can be checked, and every sandbox is refused.
    static let runtimeDirectory: String? = {
        guard let dir = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"], dir.hasPrefix("/")
        else { return nil }
        return dir
    }()

    /// Checks a sandbox's `/.flatpak-info` against the host: Flatpak writes each instance's
    /// info to `$XDG_RUNTIME_DIR/.flatpak/INSTANCE/info` on the host (outside the sandbox,
    /// which sees it read-only at most) and puts a copy of its bytes at `/.flatpak-info`
    /// (`bwrap --file` and `--ro-bind-data`: never the host file itself, so its device and
    /// inode never match the record's), as xdg-desktop-portal relies on. Accepted only when
    /// the sandbox's `[Instance] instance-id` names such a directory, owned by vaultd's uid,
    /// whose `info` holds the same bytes, and, for a peer on vaultd's socket, when the peer
    /// runs in that instance's sandbox (`instanceMismatch`). A sandbox that writes its own
    /// file (with another app's name, or pointing at another app's instance), or shows a copy
    /// of another instance's record (or that record itself, bound in), is refused. Returns the
    /// app ID, or why not.
    enum Verification {
        case accepted(String)
        case refused(String)
    }

    static func verifiedFlatpakID(_ info: InfoFile, peer: PeerCredentials) -> Verification {
        guard let name = FlatpakInfo.value(info.bytes, group: "Application", key: "name") else {
            return .refused("its .flatpak-info names no app ([Application] name)")
        }
        guard let instance = FlatpakInfo.value(info.bytes, group: "Instance", key: "instance-id"),
            FlatpakInfo.isInstanceID(instance)
        else {
            return .refused(
                "its .flatpak-info (app \(logField(name))) has no usable [Instance] instance-id")
        }
        guard let runtime = runtimeDirectory else {
            return .refused(
                "vaultd has no XDG_RUNTIME_DIR, so no Flatpak instance can be checked (app \(logField(name)))"
            )
        }
        let me = getuid()
        var fd = (try? SystemCall.open(runtime, openPathOnly | O_DIRECTORY | O_CLOEXEC)) ?? -1
        for component in [".flatpak", instance] {
            guard fd >= 0 else { break }
            let next =
                (try? SystemCall.openat(
                    fd, component, openPathOnly | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) ?? -1
            SystemCall.close(fd)
            fd = next
            if fd >= 0 && (try? SystemCall.fstat(fd))?.st_uid != me {
                SystemCall.close(fd)
                fd = -1
            }
        }
        guard fd >= 0 else {
            return .refused(
                "no Flatpak instance \(logField(instance)) of vaultd's user runs (app \(logField(name)))"
            )
        }
        defer { SystemCall.close(fd) }
        let host: InfoFile
        do {
            host = try readBounded(fd, "info", owner: me)
        } catch {
            return .refused(
                "Flatpak instance \(logField(instance))'s host record cannot be read (\(error)) (app \(logField(name)))"
            )
        }
        guard host.bytes == info.bytes else {
            return .refused(
                "its .flatpak-info (app \(logField(name))) is not Flatpak's record of instance \(logField(instance))"
            )
        }
        // A D-Bus peer of a Flatpak app is its xdg-dbus-proxy, which Flatpak runs in a sandbox
        // of its own (another mount namespace) with a copy of the record: only the bytes
        // confirm it (docs/threat-model.md).
        if peer.socketFD >= 0, let why = instanceMismatch(fd, pid: peer.pid) {
            return .refused("\(why) (app \(logField(name)), instance \(logField(instance)))")
        }
        return .accepted(name)
    }

    /// Why process `pid` does not run in the sandbox of the Flatpak instance whose directory
    /// is `dir`, nil when it does. bwrap records the sandbox's first process there
    /// (`bwrapinfo.json`'s `child-pid`, written through `--info-fd` before that process
    /// runs); the peer must share its mount namespace (the device and inode of
    /// `/proc/PID/ns/mnt`). Another sandbox showing a copy of the instance's record, or the
    /// record itself bound in, has a mount namespace of its own.
    static func instanceMismatch(_ dir: Int32, pid: pid_t) -> String? {
        let record: InfoFile
        do {
            record = try readBounded(dir, "bwrapinfo.json", owner: getuid())
        } catch {
            return "its instance's bwrapinfo.json cannot be read (\(error))"
        }
        guard let child = (try? JSON.parse(record.bytes))?["child-pid"]?.int64Value, child > 0,
            child <= Int64(Int32.max)
        else {
            return "its instance's bwrapinfo.json names no child-pid"
        }
        guard let sandbox = FileID(path: "/proc/\(child)/ns/mnt"),
            let peer = FileID(path: "/proc/\(pid)/ns/mnt")
        else {
            return "its instance's sandbox (pid \(child)) is not running, or may not be looked at"
        }
        guard sandbox == peer else {
            return
                "it does not run in its instance's sandbox (another mount namespace than pid \(child))"
        }
        return nil
    }

    /// Where the peer runs. Only a sandbox can put a file at `/.flatpak-info` (the host's `/`
    /// is root's), so its presence means a sandbox; the file is read through a directory
    /// handle on the peer's root (`readBounded`), then checked against the host.
    static func sandbox(_ peer: PeerCredentials) -> Sandbox {
        let root: Int32
        let peerRoot: stat
        do {
            root = try SystemCall.open(
                "/proc/\(peer.pid)/root", openPathOnly | O_DIRECTORY | O_CLOEXEC)
        } catch {
            return .unreadable(error.code)
        }
        defer { SystemCall.close(root) }
        do { peerRoot = try SystemCall.fstat(root) } catch { return .unreadable(error.code) }
        let info: InfoFile
        do throws(InfoRead) {
            info = try readBounded(root, ".flatpak-info")
        } catch {
            switch error {
            case .absent:
                guard let ownRoot = try? SystemCall.stat("/"), FileID(peerRoot) == FileID(ownRoot)
                else {
                    return .unnamed
                }
                return .none
            case .unacceptable(let what):
                return .refused("its /.flatpak-info is \(what)")
            case .failed(let code):
                return .unreadable(code)
            }
        }
        switch verifiedFlatpakID(info, peer: peer) {
        case .accepted(let id): return .flatpak(id)
        case .refused(let why): return .refused(why)
        }
    }

    /// Whether the peer's executable path, a registered app's, names the very file the peer
    /// runs. In vaultd's own mount namespace the path the kernel gives is the truth (also
    /// "(deleted)": an app whose binary a package upgrade replaced is still that app until
    /// vaultd notices the reinstall); in another, something may be mounted over that path,
    /// so the files are compared (device and inode).
    static func runsRegisteredFile(pid: pid_t, path: String) -> Bool {
        if sameFile("/proc/\(pid)/ns/mnt", "/proc/self/ns/mnt") { return true }
        return sameFile("/proc/\(pid)/exe", path)
    }

    /// Whether two paths name the same file (device and inode; false when either cannot be
    /// looked at). `/proc/PID/…` links lead to the peer's own file whatever its mount
    /// namespace shows at that path.
    static func sameFile(_ a: String, _ b: String) -> Bool {
        guard let fa = FileID(path: a), let fb = FileID(path: b) else { return false }
        return fa == fb
    }

    /// The target of `/proc/PID/exe`, without the " (deleted)" suffix the kernel adds to a
    /// deleted file (one with no link left); a file whose name ends so keeps its name. Nil
    /// when it cannot be read (the process exited, or may not be looked at).
    static func executable(pid: pid_t) -> String? {
        guard var path = try? SystemCall.readlink("/proc/\(pid)/exe"), !path.isEmpty else {
            return nil
        }
        if path.hasSuffix(" (deleted)") {
            guard let st = try? SystemCall.stat("/proc/\(pid)/exe") else { return nil }
            if st.st_nlink == 0 { path.removeLast(" (deleted)".count) }
        }
        return path
    }

    /// Refusals are logged at most about ten a minute per reason, with a count of the rest.
    static let refusals = RateLimitedLog()

    /// The session for a connected peer, made for the caller vaultd identified it as; a
    /// refusal (logged) when it cannot be identified:
    /// a `/proc` read that fails, a process gone or changed (exec) before the reads were
    /// confirmed, a sandbox vaultd cannot name or confirm. An identified host program that
    /// is no registered app is the owner's tool.
    static func session(for peer: PeerCredentials, vault: Vault) -> Result<VaultSession, VaultError>
    {
        let pid = peer.pid
        // Logged (rate-limited per reason), and told to the peer before the close, so its
        // client reports why rather than a reset connection. The message names only what
        // the peer's own sandbox or process shows, escaped where the peer chose it.
        func refuse(
            _ reason: String, _ message: String, code: VaultError.Code = .permissionDenied,
            extra: JSONObject = [:]
        ) -> Result<VaultSession, VaultError> {
            refusals.log(reason, to: vault.logger, .warning, "refused pid \(pid): \(message)")
            return .failure(
                VaultError(code, "vaultd does not serve this process: \(message)", extra: extra))
        }
        var flatpakID: String?
        switch sandbox(peer) {
        case .none: break
        case .flatpak(let id):
            // Only what an app ID can hold (ASCII letters, digits, '.', '_', '-'; at most 255
            // bytes) goes on: every message below names it as it is, never the file's raw text.
            let fits =
                id.utf8.count <= 255
                && id.utf8.allSatisfy {
                    $0 < 0x80 && (isalnum(Int32($0)) != 0 || $0 == 0x2E || $0 == 0x5F || $0 == 0x2D)
                }
            guard fits else {
                return refuse(
                    "flatpak-info",
                    "its .flatpak-info names \(logField(id)), which is not a reverse-DNS app ID")
            }
            flatpakID = id
        case .unnamed:
            return refuse(
                "unnamed",
                "a sandbox vaultd cannot name (its root directory is not vaultd's and it has no .flatpak-info)"
            )
        case .refused(let why):
            return refuse("flatpak-info", "a sandbox vaultd does not accept: \(why)")
        case .unreadable(Errno.notFound), .unreadable(Errno.noSuchProcess):
            return refuse("exited", "the process exited before vaultd could identify it")
        case .unreadable(let code):
            return refuse(
                "unreadable",
                "vaultd may not look at the process (/proc/\(pid)/root: \(String(cString: strerror(code))))"
            )
        }
        // The program, as a path (what apps are registered by) and as a file (to notice an
        // exec before the first message).
        guard let exe = executable(pid: pid), let exeFile = peer.currentExecutable else {
            return refuse(
                "exited",
                "its executable cannot be read (/proc/\(pid)/exe): the process exited or may not be looked at"
            )
        }
        // The program, for a host peer that is no registered app (an app's is the app), and
        // what could make it pass for another (issue 40 §2).
        let program = flatpakID == nil ? Self.program(pid: pid, exe: exe) : nil
        let risk = flatpakID == nil ? impersonationRisk(pid: pid, program: program) : nil
        let session: VaultSession
        do {
            session = try vault.session(
                flatpakAppID: flatpakID, executable: exe,
                isRegisteredFile: { runsRegisteredFile(pid: pid, path: $0) },
                program: program, impersonationRisk: risk)
        } catch let e as VaultFailure where e.code == .rateLimited {
            // With the error's declared parameters (its retryAfter).
            return refuse(
                "registration-cap", e.message, code: .rateLimited,
                extra: VaultError(e).parameters.filter { $0.key != "message" })
        } catch {
            return refuse("identity", "\(VaultError.wire(error))")
        }
        peer.identifiedExecutable = exeFile
        // Checked at the first message (`confirmAtFirstMessage`), before anything is served:
        // once is enough, and it costs a sock_diag query and a walk of /proc/PID/fd.
        peer.mustHoldConnection = session.appID != nil && flatpakID == nil
        // Whom a presence-protected secret is released to (polkit's subject), read before the
        // liveness check below confirms it. A peer of vaultd's socket is served on its
        // connection's own thread, which may wait for the user; a bus peer is not.
        let process = ProcessStartTime.requestingProcess(peer, mayWait: peer.socketFD >= 0)
        // Everything above was read through `pid`: it was about the connector only if the
        // connector is still alive now (a pid is not reused while its process lives), and
        // still runs the program it ran at the first read.
        guard peer.isAlive else {
            return refuse("exited", "the process exited while vaultd identified it")
        }
        guard peer.currentExecutable == exeFile else {
            return refuse("exec", "the process ran another program while vaultd identified it")
        }
        return .success(process.map(session.requested(by:)) ?? session)
    }
}

extension PeerIdentity.InfoRead: CustomStringConvertible {
    var description: String {
        switch self {
        case .absent: return "absent"
        case .unacceptable(let what): return what
        case .failed(let code): return String(cString: strerror(code))
        }
    }
}

// MARK: the program a peer runs (issue 40 §2)

extension PeerIdentity {
    /// Interpreters whose program is the script they run, by the executable's file name
    /// (after the last '/'): python, python3, python3.11..., node, nodejs, perl, perl5.36...,
    /// ruby, ruby3.1..., php, lua, and the shells sh, bash, dash, zsh, ksh, fish.
    static func isInterpreter(_ exe: String) -> Bool {
        let name = exe.split(separator: "/").last.map(String.init) ?? exe
        for prefix in ["python", "perl", "ruby", "php", "lua"] where name.hasPrefix(prefix) {
            let rest = name.dropFirst(prefix.count)
            if rest.allSatisfy({ $0.isNumber || $0 == "." }) { return true }
        }
        return ["node", "nodejs", "sh", "bash", "dash", "zsh", "ksh", "mksh", "fish"].contains(name)
    }

    /// The most bytes of `/proc/PID/cmdline`, `environ` and `status` read (an environment
    /// past it cannot be read: refused, `impersonationRisk`).
    static let maximumProcText = 1 << 20

    /// `/proc/PID/NAME` split at NULs, at most `maximumProcText` bytes; nil when unreadable.
    static func procStrings(_ pid: pid_t, _ name: String) -> [String]? {
        guard
            let bytes = try? FileDescriptor.readFile("/proc/\(pid)/\(name)", limit: maximumProcText)
        else { return nil }
        return bytes.split(separator: 0, omittingEmptySubsequences: false).map {
            String(decoding: $0, as: UTF8.self)
        }
    }

    /// The script an interpreter runs: its first argument after the interpreter's own
    /// options (those starting with '-'; `-c CODE`, `-e`, `-m MODULE`: no script file, the
    /// code itself is named, bounded), made absolute against the process's working
    /// directory. What the process says: the weak part of an interpreter's identity.
    static func script(pid: pid_t) -> String? {
        guard let argv = procStrings(pid, "cmdline"), argv.count > 1 else { return nil }
        var i = 1
        while i < argv.count, argv[i].hasPrefix("-") {
            let flag = argv[i]
            if ["-c", "-e", "-m", "--eval", "-E", "-r"].contains(flag), i + 1 < argv.count {
                return "\(flag) \(String(argv[i + 1].prefix(200)))"
            }
            i += 1
        }
        guard i < argv.count, !argv[i].isEmpty else { return nil }
        let s = argv[i]
        if s.hasPrefix("/") { return s }
        guard let cwd = try? SystemCall.readlink("/proc/\(pid)/cwd"), !cwd.isEmpty else {
            return s
        }
        return (cwd == "/" ? "" : cwd) + "/" + s
    }

    /// The unregistered program `pid` runs, from the kernel (`ProgramIdentity`): its
    /// executable `exe` (read through `/proc/PID/exe`, whose file is stat'ed: device, inode,
    /// owner) and, for an interpreter, its script. Nil when the file cannot be looked at.
    static func program(pid: pid_t, exe: String) -> ProgramIdentity? {
        guard let st = try? SystemCall.stat("/proc/\(pid)/exe") else { return nil }
        let interpreter = isInterpreter(exe)
        return ProgramIdentity(
            kind: interpreter ? .interpreter : .executable, path: exe,
            script: interpreter ? script(pid: pid) : nil, device: UInt64(st.st_dev),
            inode: UInt64(st.st_ino), ownerUID: st.st_uid,
            userWritable: userMayReplace(exe, st))
    }

    /// Whether vaultd's user may replace the file at `path` (stat `st`): it owns it, may
    /// write it, or may write its directory (and so rename another file over it).
    static func userMayReplace(_ path: String, _ st: stat) -> Bool {
        if st.st_uid == getuid() { return true }
        if SystemCall.access(path, W_OK) { return true }
        let dir = (path as NSString).deletingLastPathComponent
        return SystemCall.access(dir.isEmpty ? "/" : dir, W_OK)
    }

    /// Loader variables that make a program run code it does not hold (glibc's ld.so:
    /// preloads, audit modules, library search paths).
    static let loaderVariables = [
        "LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH", "LD_ORIGIN_PATH", "LD_PROFILE",
        "LD_DEBUG_OUTPUT", "LD_DYNAMIC_WEAK", "LD_BIND_NOT", "GCONV_PATH", "LD_ASSUME_KERNEL",
    ]

    /// Why process `pid` could pass for another program, nil when nothing is seen: traced
    /// (`TracerPid` in `/proc/PID/status`: a debugger or an injector drives it), a loader
    /// variable in its environment (`/proc/PID/environ`, as it was at exec), its executable
    /// deleted or replaced since it started (`" (deleted)"`). An environment that cannot be
    /// read counts as a risk (fail closed). Interpreter variables (PYTHONPATH, NODE_OPTIONS,
    /// PERL5LIB...) count too for an interpreter: they choose the code it runs.
    static func impersonationRisk(pid: pid_t, program: ProgramIdentity?) -> String? {
        guard let status = procStrings(pid, "status")?.first else {
            return "its /proc status cannot be read"
        }
        for line in status.split(separator: "\n") where line.hasPrefix("TracerPid:") {
            let tracer = line.dropFirst("TracerPid:".count).trimmingCharacters(in: .whitespaces)
            if tracer != "0" { return "it is traced by process \(tracer)" }
        }
        guard let environ = procStrings(pid, "environ") else {
            return "its environment cannot be read"
        }
        var watched = loaderVariables
        if program?.kind == .interpreter {
            watched += [
                "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "NODE_OPTIONS", "NODE_PATH",
                "PERL5LIB", "PERL5OPT", "PERLLIB", "RUBYLIB", "RUBYOPT", "BASH_ENV", "ENV",
            ]
        }
        for entry in environ {
            guard let eq = entry.firstIndex(of: "=") else { continue }
            let name = String(entry[..<eq])
            if watched.contains(name), !entry[entry.index(after: eq)...].isEmpty {
                return "its environment sets \(name)"
            }
        }
        if let link = try? SystemCall.readlink("/proc/\(pid)/exe"), link.hasSuffix(" (deleted)"),
            let st = try? SystemCall.stat("/proc/\(pid)/exe"), st.st_nlink == 0
        {
            return "its executable was deleted or replaced since it started"
        }
        return nil
    }
}

extension PeerIdentity {
    /// The program the owner names in `vaultctl access grant`: the executable at `path`
    /// (absolute; symlinks resolved, as `/proc/PID/exe` shows a running one), with `script`
    /// for an interpreter. Throws InvalidParameter for a path that is not an executable
    /// file, a relative one, or a script given to a program that is no interpreter.
    static func program(path: String, script: String?) throws -> ProgramIdentity {
        guard path.hasPrefix("/") else {
            throw VaultError.invalidParameter("program", "must be an absolute path")
        }
        let exe: String
        do {
            exe = try SystemCall.realpath(path)
        } catch {
            throw VaultError.invalidParameter(
                "program", "cannot be looked at: \(String(cString: strerror(error.code)))")
        }
        guard let st = try? SystemCall.stat(exe), st.st_mode & S_IFMT == S_IFREG,
            SystemCall.access(exe, X_OK)
        else {
            throw VaultError.invalidParameter("program", "is not an executable file")
        }
        let interpreter = isInterpreter(exe)
        if let script {
            guard interpreter else {
                throw VaultError.invalidParameter(
                    "script", "\(exe) is not an interpreter (python, node, perl, sh...)")
            }
            guard script.hasPrefix("/") else {
                throw VaultError.invalidParameter("script", "must be an absolute path")
            }
        }
        return ProgramIdentity(
            kind: interpreter ? .interpreter : .executable, path: exe,
            script: interpreter ? script : nil, device: UInt64(st.st_dev),
            inode: UInt64(st.st_ino), ownerUID: st.st_uid, userWritable: userMayReplace(exe, st))
    }
}
