import Foundation
import VaultClient
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Helpers for tests that use the VaultClient library in-process beside vaultctl processes.
extension Daemon {
    /// A VaultClient `Vault` connected to this daemon (the test process is the owner).
    func client() throws -> Vault { try Vault.connect(socketPath: socketPath) }

    /// `vaultctl init --no-passphrase`: a vault that is always unlocked.
    func initializeWithoutPassphrase() -> ProcessResult { ctl(["init", "--no-passphrase"]) }

    /// `vaultctl status --json`, parsed (nil when it failed).
    func statusJSON() -> [String: Any]? {
        let r = ctl(["status", "--json"])
        guard r.status == 0 else { return nil }
        return (try? JSONSerialization.jsonObject(with: r.stdout)) as? [String: Any]
    }

    /// Sends a signal to the running vaultd (SIGSTOP / SIGCONT / SIGKILL ...).
    func sendSignal(_ sig: Int32) {
        if let p = pid { Glibc.kill(p, sig) }
    }
}

/// The bytes of a passphrase as `--passphrase-fd N` reads them (first line).
func passphraseLine(_ p: String) -> Data { Data((p + "\n").utf8) }

/// The `VaultError` a call throws, or nil when it succeeds. Other errors become InternalError
/// with their description, so a test sees them.
func vaultError<T>(_ body: () throws -> T) -> VaultError? {
    do {
        _ = try body()
        return nil
    } catch let e as VaultError {
        return e
    } catch {
        return VaultError(.internalError, "not a VaultError: \(error)")
    }
}

/// A value shared between a test and the threads or tasks it starts.
final class Shared<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: T
    init(_ value: T) { stored = value }
    var value: T { lock.withLock { stored } }
    func update<R>(_ body: (inout T) -> R) -> R { lock.withLock { body(&stored) } }
}

/// A task executor with a thread of its own, so a task that consumes an AsyncStream keeps
/// running while the test's thread blocks (in waitpid, usleep) and the shared cooperative
/// pool (two threads on a two-core machine) is busy with other tests.
final class DedicatedExecutor: TaskExecutor, @unchecked Sendable {
    private let queue: DispatchQueue

    init(_ label: String) { queue = DispatchQueue(label: label) }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
