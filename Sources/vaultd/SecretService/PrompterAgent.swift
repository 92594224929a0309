import CGio
import Foundation
import Synchronization
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// The Secret Service's prompter agent: a program of the owner's on the session bus (a
/// desktop's passphrase dialog) that registers itself with `io.vaultd.Secret.Prompting.
/// RegisterPrompter(o path)` on vaultd's service object, and that vaultd then asks for the
/// vault's passphrase when a client's prompt waits for the vault to be unlocked
/// (docs/secret-service.md#the-prompter-agent). vaultd calls, on that connection and path:
///
/// - `io.vaultd.Secret.Prompter.AskPassphrase(o prompt, s window_id, a{sv} details) → (b
///   dismissed, ay passphrase)`: details `message` (s), `warning` (s, after a wrong
///   passphrase), `attempt` and `attempts` (u), `app-id` (s, when a registered app asked);
/// - `io.vaultd.Secret.Prompter.Cancel(o prompt)`, no reply wanted, when a prompt it was
///   asked for ended otherwise (dismissed by its client, timed out, the vault unlocked).
///
/// The passphrase unlocks through `Vault.unlock(passphrase:caller:)` with the prompter's own
/// identity, as `vaultctl unlock` does, so the policy decides (the owner only) and the
/// vault's rate limit counts each wrong one. One prompt is asked for at a time, the others
/// queue; a wrong passphrase is asked for again, at most `maximumAttempts` times, then the
/// prompt is dismissed, as it is when the prompter dismisses it. A prompter that fails to
/// answer (an error, no reply before the prompt's deadline) leaves the prompt as if no
/// prompter were registered: it completes at any unlock or is dismissed at its timeout.
///
/// Every call to the prompter is asynchronous (its reply comes on the bus thread), bounded by
/// the prompt's own deadline; unlocking (Argon2id) runs off the bus thread.
///
/// The `Prompter` setting decides who is asked (`PromptDialogs.choose`): this agent, or one
/// of vaultd's own dialogs (gcr's system prompter, pinentry: `PromptDialogs`), which take
/// the prompts from the same queue, one at a time.
///
/// `@unchecked Sendable`: the agent, the queue of prompts and `asking` are read and written
/// under `lock` (GLib's reply callbacks reach it through an unmanaged pointer).
final class PrompterAgent: @unchecked Sendable {
    static let interface = "io.vaultd.Secret.Prompter"
    /// Passphrases asked for per prompt.
    static let maximumAttempts = 3
    /// The longest passphrase taken from a prompter (bytes); a longer one dismisses the prompt.
    static let maximumPassphrase = 64 << 10

    /// AskPassphrase's reply type, made once (a type string lent by Swift lives only for
    /// the call it is passed to). `nonisolated(unsafe)`: never written after, and GLib only
    /// reads it.
    nonisolated(unsafe) static let replyType = g_variant_type_new("(bay)")

    unowned let service: SecretService

    /// Guards everything below; never held across a bus or engine call.
    private let lock = NSLock()
    /// The registered prompter: its connection's unique name and object path.
    private var agent: (sender: String, path: String)?
    /// Started prompts not yet asked for, in the order they started.
    private var queue: [String] = []
    private var asking: Asking?
    private var nextToken: UInt64 = 0
    /// The prompt a dialog of vaultd's own asks for, and its ticket (cancelled when the
    /// prompt ends otherwise).
    private var dialog: (prompt: String, ticket: DialogTicket)?

    /// The prompt being asked for: which attempt, and the pending call's cancellable (changed
    /// under the agent's lock; behind a mutex of its own, as it goes to the unlocking thread).
    final class Asking: Sendable {
        let prompt: String
        let agent: (sender: String, path: String)
        let token: UInt64
        private struct Progress {
            var attempt = 1
            var unlocking = false
            var cancellable: GObjectReference?
        }
        private let progress = Mutex(Progress())
        init(prompt: String, agent: (sender: String, path: String), token: UInt64) {
            self.prompt = prompt
            self.agent = agent
            self.token = token
        }
        var attempt: Int {
            get { progress.withLock { $0.attempt } }
            set { progress.withLock { $0.attempt = newValue } }
        }
        /// Set while its passphrase is being tried (no call pending).
        var unlocking: Bool {
            get { progress.withLock { $0.unlocking } }
            set { progress.withLock { $0.unlocking = newValue } }
        }
        /// The pending AskPassphrase call's cancellable.
        var cancellable: GObjectReference? {
            get { progress.withLock { $0.cancellable } }
            set { progress.withLock { $0.cancellable = newValue } }
        }
    }

    /// What one pending AskPassphrase call's reply is matched against.
    final class Reply: Sendable {
        let agent: PrompterAgent
        let token: UInt64
        init(_ agent: PrompterAgent, _ token: UInt64) {
            self.agent = agent
            self.token = token
        }
    }

    init(service: SecretService) { self.service = service }

    var isRegistered: Bool { lock.withLock { agent != nil } }

    // MARK: registration (bus thread)

    /// RegisterPrompter from `sender`: the policy lets only the owner's program be it. A
    /// later registration replaces an earlier one (a restarted desktop shell); prompts
    /// already waiting are asked for at once.
    func register(sender: String, path: String, vaultSession: VaultSession) throws {
        try vaultSession.registerPrompter()
        let previous: Asking? = lock.withLock {
            agent = (sender, path)
            defer { asking = nil }
            if let a = asking, !a.unlocking {
                queue.insert(a.prompt, at: 0)
                return a
            }
            return nil
        }
        if let previous { cancel(previous) }
        service.logger.notice(
            "secret service: a prompter registered (connection \(sender), object \(logField(path))): locked prompts ask it for the passphrase"
        )
        askNext()
    }

    /// UnregisterPrompter: only the registered prompter's own connection may.
    func unregister(sender: String, vaultSession: VaultSession) throws {
        try vaultSession.registerPrompter()
        guard lock.withLock({ agent?.sender == sender }) else {
            throw BusError.noSuchObject("this connection is not the registered prompter")
        }
        drop(reason: "unregistered")
    }

    /// A connection left the bus: when it was the prompter, prompts wait as without one.
    func connectionLeft(_ sender: String) {
        if lock.withLock({ agent?.sender == sender }) { drop(reason: "left the bus") }
    }

    private func drop(reason: String) {
        let pending: Asking? = lock.withLock {
            agent = nil
            defer { asking = nil }
            if let a = asking, !a.unlocking { return a }
            return nil
        }
        if let pending { cancel(pending) }
        service.logger.notice(
            "secret service: the prompter \(reason): prompts wait for vaultctl unlock")
    }

    // MARK: prompts

    /// A prompt started on a locked vault (bus thread).
    func enqueue(_ id: String) {
        lock.withLock { queue.append(id) }
        askNext()
    }

    /// Prompt `id` ended (completed, dismissed, its owner gone): it is asked for no more, and
    /// a question about it still pending is cancelled. Any thread.
    func ended(_ id: String) {
        let ticket: DialogTicket? = lock.withLock {
            dialog?.prompt == id ? dialog?.ticket : nil
        }
        ticket?.cancel()
        let pending: Asking? = lock.withLock {
            queue.removeAll { $0 == id }
            guard let a = asking, a.prompt == id, !a.unlocking else { return nil }
            asking = nil
            return a
        }
        guard let pending else { return }
        cancel(pending)
        service.onBusThread { [weak self] in self?.askNext() }
    }

    /// Cancels `a`'s pending call and tells the prompter to close its dialog.
    private func cancel(_ a: Asking) {
        if let c = a.cancellable { g_cancellable_cancel(UnsafeMutablePointer(c.raw)) }
        // No reply wanted (no callback): GDBus sends it with NO_REPLY_EXPECTED.
        GV.tuple([.objectPath(SecretServicePath.prompt(a.prompt).path)]).pass {
            g_dbus_connection_call(
                service.connection, a.agent.sender, a.agent.path, Self.interface, "Cancel", $0, nil,
                G_DBUS_CALL_FLAGS_NO_AUTO_START,
                SecretService.busCallTimeout, nil, nil, nil)
        }
    }

    /// Asks the prompter for the first queued prompt that still waits, unless a question is
    /// pending or the vault is open (its unlock completes them all). Bus thread.
    private func askNext() {
        // Read before the lock: the engine's lock-state event, which ends prompts (`ended`),
        // may come while the engine holds its own.
        guard !service.vault.isKeychainOpen else { return }
        let waiting = lock.withLock { asking == nil && dialog == nil && !queue.isEmpty }
        guard waiting else { return }
        switch service.dialogs.choose(agentRegistered: isRegistered) {
        case .none: return
        case .agent: break
        case let choice:
            askInDialog(choice)
            return
        }
        let next: Asking? = lock.withLock {
            guard asking == nil, dialog == nil, let agent else { return nil }
            while let id = queue.first, service.promptDetails(id) == nil { queue.removeFirst() }
            guard let id = queue.first else { return nil }
            queue.removeFirst()
            nextToken += 1
            let a = Asking(prompt: id, agent: agent, token: nextToken)
            asking = a
            return a
        }
        if let next { ask(next, warning: nil) }
    }

    /// Asks for the first queued prompt that still waits in a dialog of vaultd's own
    /// (`choice`: gcr or pinentry), which unlocks the vault itself; the prompt is completed
    /// when the dialog ends (its unlock completes every started prompt). Bus thread.
    private func askInDialog(_ choice: PromptDialogs.Choice) {
        let next: (String, DialogTicket, (windowID: String, appID: String?, deadline: UInt64))? =
            lock.withLock {
                guard asking == nil, dialog == nil else { return nil }
                while let id = queue.first {
                    queue.removeFirst()
                    if let details = service.promptDetails(id) {
                        let ticket = DialogTicket(deadline: details.deadline)
                        dialog = (id, ticket)
                        return (id, ticket, details)
                    }
                }
                return nil
            }
        guard let (id, ticket, details) = next else { return }
        service.dialogs.unlock(
            vault: service.vault, appID: details.appID, windowID: details.windowID,
            choice: choice, ticket: ticket
        ) { [self] unlocked in
            service.complete(id, dismissed: !unlocked)
            service.onBusThread { [self] in
                lock.withLock { if dialog?.prompt == id { dialog = nil } }
                askNext()
            }
        }
    }

    /// One AskPassphrase call for `a`, asynchronous, bounded by the prompt's deadline. Bus thread.
    private func ask(_ a: Asking, warning: String?) {
        guard let details = service.promptDetails(a.prompt) else { return }
        let now = MonotonicClock.nanoseconds()
        guard details.deadline > now else { return }
        let timeout = Int32(clamping: (details.deadline - now) / 1_000_000 + 1)
        var entries: [GV] = [
            .dictEntry(
                .string("message"),
                .variant(
                    .string(
                        details.appID.map { "\($0) asks for the vault to be unlocked" }
                            ?? "A program asks for the vault to be unlocked"))),
            .dictEntry(
                .string("attempt"), .variant(GV(new: g_variant_new_uint32(guint32(a.attempt))))),
            .dictEntry(
                .string("attempts"),
                .variant(GV(new: g_variant_new_uint32(guint32(Self.maximumAttempts))))),
        ]
        if let warning {
            entries.append(.dictEntry(.string("warning"), .variant(.string(warning))))
        }
        if let app = details.appID {
            entries.append(.dictEntry(.string("app-id"), .variant(.string(app))))
        }
        let cancellable = GObjectReference(adopting: OpaquePointer(g_cancellable_new()))
        lock.withLock { a.cancellable = cancellable }
        let reply = Unmanaged.passRetained(Reply(self, a.token)).toOpaque()
        GV.tuple([
            .objectPath(SecretServicePath.prompt(a.prompt).path), .string(details.windowID),
            .array("{sv}", entries),
        ]).pass {
            g_dbus_connection_call(
                service.connection, a.agent.sender, a.agent.path, Self.interface, "AskPassphrase",
                $0, Self.replyType,
                G_DBUS_CALL_FLAGS_NO_AUTO_START, timeout, UnsafeMutablePointer(cancellable.raw),
                { source, result, data in
                    let r = Unmanaged<Reply>.fromOpaque(data!).takeRetainedValue()
                    var err: UnsafeMutablePointer<GError>?
                    let value = g_dbus_connection_call_finish(OpaquePointer(source), result, &err)
                        .map { GV(owned: $0) }
                    r.agent.answered(token: r.token, value, err)
                    if let err { g_error_free(err) }
                }, reply)
        }
    }

    /// AskPassphrase's reply (or error) for question `token`. Bus thread.
    private func answered(token: UInt64, _ value: GV?, _ error: UnsafeMutablePointer<GError>?) {
        // The passphrase, copied into sodium memory, and its bytes in GLib's message wiped.
        var passphrase: SecureBytes?
        var dismissed = true
        if let value, value.count == 2 {
            dismissed = value.child(0).bool
            let bytes = value.child(1)
            bytes.withBytes { b in
                if !dismissed, b.count <= Self.maximumPassphrase {
                    passphrase = SecureBytes(copying: b)
                }
                if let base = b.baseAddress {
                    memset(UnsafeMutableRawPointer(mutating: base), 0, b.count)
                }
            }
        }
        let current: Asking? = lock.withLock {
            guard let a = asking, a.token == token else { return nil }
            if passphrase != nil { a.unlocking = true } else { asking = nil }
            return a
        }
        guard let a = current else { return }
        if value == nil {
            // Cancelled calls never get here: `ended` cleared `asking` first.
            let name = cg_error_dbus_name(error).map { p in
                defer { g_free(p) }
                return String(cString: p)
            }
            service.logger.warning(
                "secret service: the prompter did not answer (\(logField(name ?? String(cString: cg_error_message(error))))): the prompt waits for vaultctl unlock"
            )
        } else if let passphrase {
            DispatchQueue.global().async { [self] in tryUnlock(a, passphrase) }
            return
        } else {
            service.logger.info(
                dismissed
                    ? "secret service: the prompter dismissed a prompt"
                    : "secret service: the prompter's passphrase is over \(Self.maximumPassphrase) bytes: the prompt is dismissed"
            )
            service.complete(a.prompt, dismissed: true)
        }
        askNext()
    }

    /// Unlocks with the prompter's passphrase, as the prompter (off the bus thread): the
    /// vault's unlock event completes every started prompt; a wrong passphrase is asked for
    /// again up to `maximumAttempts`; anything else dismisses the prompt.
    private func tryUnlock(_ a: Asking, _ passphrase: SecureBytes) {
        var retry: String?
        do {
            let vaultSession = try service.identify(a.agent.sender)
            _ = try vaultSession.unlock(passphrase: passphrase)
            service.logger.notice(
                "secret service: the vault was unlocked with the prompter's passphrase")
            service.complete(a.prompt, dismissed: false)
        } catch let e as VaultFailure
            where e.code == .wrongPassphrase && a.attempt < Self.maximumAttempts
        {
            retry = "The passphrase was wrong (attempt \(a.attempt + 1) of \(Self.maximumAttempts))"
        } catch {
            service.logger.warning(
                "secret service: the prompter's passphrase did not unlock the vault (\(BusError(error).message)): the prompt is dismissed"
            )
            service.complete(a.prompt, dismissed: true)
        }
        service.onBusThread { [self] in
            let again: Bool = lock.withLock {
                guard asking === a else { return false }
                guard retry != nil, service.promptDetails(a.prompt) != nil,
                    agent?.sender == a.agent.sender
                else {
                    asking = nil
                    return false
                }
                a.attempt += 1
                a.unlocking = false
                return true
            }
            if again, let retry { ask(a, warning: retry) } else { askNext() }
        }
    }
}
