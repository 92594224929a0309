#if canImport(Glibc)
import Glibc
#endif

/// What a process holding secrets (vaultd's keys, a passphrase vaultctl read, the password
/// git gave git-credential-vault) leaves behind when it crashes: nothing with memory in it.
public enum CrashOutput {
    /// The fatal signals Swift's crash reporter handles on Linux.
    static let crashSignals = [SIGQUIT, SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGSEGV, SIGTRAP]

    /// Allows no core file (RLIMIT_CORE 0: it would hold the secrets in plaintext) and, unless
    /// `SWIFT_BACKTRACE` is set (not empty) in the environment, puts the crash signals back to their
    /// default action, taking them from Swift's crash reporter: its report prints the 16 bytes
    /// of memory each register points at, and the stack of the process, to stderr (a terminal,
    /// git's stderr, vaultd's journal). Someone debugging a crash sets `SWIFT_BACKTRACE`
    /// (`enable=yes,registers=none` prints the stacks without that memory).
    /// Call it first thing in `main`.
    public static func keepSecretsOut() {
        var noCoreFile = rlimit(rlim_cur: 0, rlim_max: 0)
        _ = setrlimit(__rlimit_resource_t(RLIMIT_CORE.rawValue), &noCoreFile)
        // Set but empty, it leaves Swift's default (enabled) as unset would.
        if let asked = getenv("SWIFT_BACKTRACE"), asked.pointee != 0 { return }
        for s in crashSignals { signal(s, SIG_DFL) }
    }
}
