import Foundation
import VaultProtocol

/// The process a secret is released to, as the kernel named it (SO_PEERCRED, or the bus's
/// credentials, and `/proc/PID/stat`): the subject polkit is asked about, and what a
/// presence grace is kept for.
public struct RequestingProcess: Sendable, Hashable {
    /// Its pid.
    public let pid: Int32
    /// Its start time, in clock ticks since boot (field 22 of `/proc/PID/stat`, as polkit's
    /// `unix-process` subject takes it): with the pid it names one process for the life of
    /// the system, where a pid alone is reused once the process exits.
    public let startTime: UInt64
    /// Its uid (vaultd serves only its own).
    public let uid: UInt32
    /// Whether the calling thread may wait for the user (up to the verifier's timeout): a
    /// varlink connection's own thread may; the Secret Service's threads, which serve every
    /// bus client, may not: a check there that the grace does not spare throws
    /// `PresenceWouldWait`, and the front-end runs the call again on a thread of its own
    /// (`VaultSession.waiting(.wait)`, as for `AccessConfirmationNeeded`).
    public internal(set) var mayWait: Bool

    public init(pid: Int32, startTime: UInt64, uid: UInt32, mayWait: Bool) {
        self.pid = pid
        self.startTime = startTime
        self.uid = uid
        self.mayWait = mayWait
    }
}

/// Thrown, instead of a wait for the user, by a presence check on a thread that may not
/// wait (`RequestingProcess.mayWait` false): nothing was asked or released. The front-end
/// runs the call again where it may wait, with `VaultSession.waiting(.wait)`.
public struct PresenceWouldWait: Error {}

/// What a presence check answered.
public enum PresenceOutcome: Sendable, Equatable {
    case confirmed
    /// Not confirmed, and why (no system bus, no polkit, no agent, a wrong password, a
    /// cancel, the timeout): for the log and the error message, never a secret.
    case notConfirmed(String)
}

/// Asks the user to prove presence for a process: vaultd's polkit client
/// (`Sources/vaultd/Presence/`), injected with `PresenceGate.verifier`. It blocks the calling
/// thread until the answer, and never longer than its own bounded timeout.
public protocol PresenceVerifier: Sendable {
    func verifyPresence(of process: RequestingProcess) -> PresenceOutcome
}

/// User presence before a secret is released (kSecAttrAccessControl `userPresence`): the
/// verifier vaultd injects, and the grace window (`PresenceGraceSeconds`, as
/// LocalAuthentication's `touchIDAuthenticationAllowableReuseDuration`) within which a
/// process that proved presence is not asked again. The window is kept per process (pid and
/// start time) and per caller: a new process (each `vaultctl` or git run) is asked anew, and
/// an exec into another program changes the caller.
/// `@unchecked Sendable`: every `var` is read and written under `lock`.
public final class PresenceGate: @unchecked Sendable {
    private let lock = NSLock()
    private var verifierValue: (any PresenceVerifier)?
    private var graceNanoseconds: UInt64 = 10_000_000_000
    /// The monotonic time (ns) each process last proved presence, for its caller.
    private var confirmedAt: [Key: UInt64] = [:]
    /// The processes whose check is running now.
    private var pending: Set<ProcessKey> = []

    /// The most processes remembered in the window; past it the oldest are forgotten (they
    /// are asked again), so a flood of processes cannot grow vaultd's memory.
    static let maximumRemembered = 1024
    /// The most checks running at once: past it, a read fails at once (each waits on the
    /// user, who answers one prompt at a time; more would only queue prompts up).
    static let maximumPending = 8

    /// A process, whichever thread serves it.
    private struct ProcessKey: Hashable {
        var pid: Int32
        var startTime: UInt64
        var uid: UInt32

        init(_ p: RequestingProcess) { (pid, startTime, uid) = (p.pid, p.startTime, p.uid) }
    }

    /// A process and the caller it was identified as.
    private struct Key: Hashable {
        var process: ProcessKey
        var appID: String?
    }

    /// Where the outcome of each check is logged.
    let logger: Logger

    init(logger: Logger) { self.logger = logger }

    /// The verifier (nil: none, so every check fails: InteractionNotAllowed).
    public var verifier: (any PresenceVerifier)? {
        get { lock.withLock { verifierValue } }
        set { lock.withLock { verifierValue = newValue } }
    }

    /// `PresenceGraceSeconds`: 0 asks every time. Setting it forgets earlier confirmations.
    public func setGrace(seconds: Int) {
        lock.withLock {
            graceNanoseconds = UInt64(max(0, seconds)) &* 1_000_000_000
            confirmedAt = [:]
        }
    }

    /// Returns when `process` proved presence for `caller` within the window, or does now;
    /// throws InteractionNotAllowed (-25308) otherwise, in bounded time. The check runs on
    /// the calling thread, holding no lock of the engine's.
    func require(for caller: Caller, process: RequestingProcess?) throws {
        guard let process else {
            throw Self.refusal("vaultd cannot name the calling process to polkit")
        }
        let key = Key(process: ProcessKey(process), appID: caller.appID)
        guard let verifier = try begin(key, mayWait: process.mayWait) else { return }
        let outcome = verifier.verifyPresence(of: process)
        lock.withLock {
            pending.remove(key.process)
            if outcome == .confirmed && graceNanoseconds > 0 {
                if confirmedAt.count >= Self.maximumRemembered { forgetOldest() }
                confirmedAt[key] = MonotonicClock.nanoseconds()
            }
        }
        if case .notConfirmed(let why) = outcome {
            logger.info("presence: not confirmed for pid \(process.pid): \(why)")
            throw Self.refusal(why)
        }
        logger.info("presence: confirmed for pid \(process.pid)")
    }

    /// nil when `key` is within its window; else the verifier to ask, the process marked
    /// pending. Throws when no check can be made now.
    private func begin(_ key: Key, mayWait: Bool) throws -> (any PresenceVerifier)? {
        try lock.withLock {
            if graceNanoseconds > 0, let at = confirmedAt[key],
                MonotonicClock.nanoseconds() &- at < graceNanoseconds
            {
                return nil
            }
            guard let v = verifierValue else {
                throw Self.refusal("vaultd has no presence verifier (polkit)")
            }
            guard mayWait else { throw PresenceWouldWait() }
            guard pending.count < Self.maximumPending, !pending.contains(key.process) else {
                throw Self.refusal("other presence checks are in progress; try again")
            }
            pending.insert(key.process)
            return v
        }
    }

    /// Drops the earlier half of the remembered confirmations (under `lock`).
    private func forgetOldest() {
        let sorted = confirmedAt.sorted { $0.value < $1.value }
        for (k, _) in sorted.prefix(sorted.count / 2 + 1) { confirmedAt[k] = nil }
    }

    private static func refusal(_ why: String) -> VaultFailure {
        VaultFailure(.interactionNotAllowed, "user presence was not confirmed: \(why)")
    }
}

extension Vault {
    /// The secret-release point's presence check: when `items` hold a secret of an item whose
    /// access control is `userPresence`, the user must prove presence for `process` (the
    /// grace window may spare it); throws InteractionNotAllowed otherwise. Searching and
    /// attributes never come here: only items found with their data.
    func requirePresence(for items: [FoundItem], caller: Caller, process: RequestingProcess?)
        throws
    {
        guard items.contains(where: { $0.data != nil && $0.attributes.accessControl != nil })
        else { return }
        try presence.require(for: caller, process: process)
    }

    /// `requirePresence` for an operation that reads every secret (a backup, owner only):
    /// asked when any item, locked ones too, is presence-protected.
    func requirePresenceForEveryItem(caller: Caller, process: RequestingProcess?) throws {
        if try anyItemRequiresPresence() { try presence.require(for: caller, process: process) }
    }

    /// Whether any item carries the access control `userPresence`: one row's attributes at a
    /// time, never a secret, so a backup's check stays in bounded memory whatever the vault
    /// holds (the secret and wrapped-key columns are not read: `x'00'` stands in). A row
    /// that does not read counts as none: the backup leaves damaged items out.
    private func anyItemRequiresPresence() throws -> Bool {
        let (metadata, _) = try withKeys { try keychain.metadataKeys() }
        return try read { db in
            let s = try db.statement(
                "SELECT id, uuid, item_class, access_group, accessible, synchronizable, attributes, x'00', x'00' FROM items"
            )
            defer { s.reset() }
            while try s.step() {
                guard case .success(let r) = KeychainStore.stored(s.row()),
                    let plain = Sodium.openBytes(
                        r.attributes, key: metadata, associatedData: r.associatedData),
                    let a = try? ItemAttributes(jsonObject: plain)
                else { continue }
                if a.accessControl == .userPresence { return true }
            }
            return false
        }
    }
}
