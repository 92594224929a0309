import CGio
import CVaultSys
import Foundation
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Owning `org.freedesktop.secrets` on the bus, and taking it over with `--replace`.
extension SecretService {
    /// Asks for `org.freedesktop.secrets`, letting a later `--replace` (of vaultd or another
    /// provider) take it. With `replace`, it is taken over: at once from an owner that lets
    /// itself be replaced, else, as gnome-keyring-daemon's `--replace` does, by stopping the
    /// owner (SIGTERM through a pidfd, to a process of vaultd's own user only) and asking
    /// again once the bus says the name is free (at most `replaceWait` seconds). Logs the
    /// outcome, naming the owner when it is another process.
    func requestName() -> Bool {
        switch askForName() {
        case .owned?:
            logger.notice("secret service: serving \(Self.busName) on the session bus")
            return true
        case nil:
            return false
        case .taken?:
            break
        }
        let owner = nameOwner()
        guard replace else {
            logger.warning(
                "secret service: \(Self.busName) is already provided by \(owner.description): not serving (vaultd --secret-service --replace takes it over)"
            )
            return false
        }
        guard let pid = owner.pid, let uid = owner.uid, uid == getuid(), pid != getpid() else {
            logger.warning(
                "secret service: \(Self.busName) is provided by \(owner.description), which vaultd may not stop: not serving"
            )
            return false
        }
        let pidfd = vault_pidfd_open(pid)
        // The pidfd is the owner's only if the bus still names that pid as the owner now.
        guard pidfd >= 0 else {
            logger.warning(
                "secret service: cannot open \(owner.description) to stop it: not serving")
            return false
        }
        defer { SystemCall.close(pidfd) }
        guard nameOwner().pid == pid, vault_pidfd_signal(pidfd, SIGTERM) == 0 else {
            logger.warning(
                "secret service: \(Self.busName)'s owner changed or cannot be stopped (\(owner.description)): not serving"
            )
            return false
        }
        let deadline = MonotonicClock.nanoseconds() + UInt64(Self.replaceWait * 1e9)
        while MonotonicClock.nanoseconds() < deadline {
            usleep(50_000)
            switch askForName() {
            case .owned?:
                logger.notice(
                    "secret service: serving \(Self.busName) on the session bus, taken over from \(owner.description) (stopped with SIGTERM)"
                )
                return true
            case nil: return false
            case .taken?: continue
            }
        }
        logger.warning(
            "secret service: \(owner.description) did not give up \(Self.busName) within \(Int(Self.replaceWait)) s of SIGTERM: not serving"
        )
        return false
    }

    /// How long `--replace` waits for a stopped owner to leave the name (seconds).
    static let replaceWait = 5.0

    private enum NameRequest { case owned, taken }

    /// RequestName (DBUS_NAME_FLAG_ALLOW_REPLACEMENT 1, REPLACE_EXISTING 2 with `replace`,
    /// DO_NOT_QUEUE 4); nil when the bus did not answer (logged).
    private func askForName() -> NameRequest? {
        let flags: UInt32 = 1 | 4 | (replace ? 2 : 0)
        do {
            let answer = try busCall(
                "RequestName", [.string(Self.busName), GV(new: g_variant_new_uint32(flags))],
                reply: "(u)"
            ).child(0).uint32
            // 1: the primary owner now; 4: already was.
            return answer == 1 || answer == 4 ? .owned : .taken
        } catch {
            logger.warning("secret service: \(BusError(error).message)")
            return nil
        }
    }

    /// The connection owning the name, its pid and uid (as the bus has them) and executable.
    private struct NameOwner: CustomStringConvertible {
        var unique: String?
        var pid: pid_t?
        var uid: uid_t?
        var executable: String?
        var description: String {
            guard let unique else { return "another connection" }
            guard let pid else { return "connection \(unique)" }
            return
                "pid \(pid)\(executable.map { " (\(logField($0)))" } ?? ""), connection \(unique)"
        }
    }

    private func nameOwner() -> NameOwner {
        guard
            let unique = try? busCall("GetNameOwner", [.string(Self.busName)], reply: "(s)").child(
                0
            ).string
        else { return NameOwner() }
        guard let c = try? credentials(unique) else { return NameOwner(unique: unique) }
        return NameOwner(
            unique: unique, pid: c.pid, uid: c.uid, executable: PeerIdentity.executable(pid: c.pid))
    }
}
