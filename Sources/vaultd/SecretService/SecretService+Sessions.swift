import CGio
import Foundation
import SecretSession
import VaultCore
import VaultProtocol

/// Transport sessions, prompts, and running work on the bus thread.
extension SecretService {
    /// A new session ID for `sender`; `dh`, its key when encrypted. Past
    /// `maximumSessionsPerPeer` of that connection's, its oldest is closed.
    func openSession(for sender: String, dh: DHSession?) throws -> String {
        lock.withLock {
            let own = sessions.filter { $0.value.owner == sender }
            if own.count >= Self.maximumSessionsPerPeer,
                let oldest = own.min(by: { $0.value.number < $1.value.number })
            {
                sessions[oldest.key] = nil
            }
            nextID += 1
            let id = "s\(nextID)"
            sessions[id] = Session(owner: sender, dh: dh, number: nextID)
            return id
        }
    }

    func closeSession(_ id: String, for sender: String) throws {
        try lock.withLock {
            guard sessions[id]?.owner == sender else {
                throw BusError.noSuchObject("no such session")
            }
            sessions[id] = nil
        }
    }

    /// Session `path`, which `sender` must have opened (NoSession otherwise).
    func session(_ path: String, for sender: String) throws -> Session {
        guard case .session(let id)? = SecretServicePath(path),
            let s = lock.withLock({ sessions[id] }), s.owner == sender
        else {
            throw BusError.noSession("the session \(path) is not one this connection opened")
        }
        return s
    }

    /// A prompt for `sender` that completes with `objects` once the vault is unlocked.
    func makePrompt(for sender: String, objects: [String], vaultSession: VaultSession) throws
        -> String
    {
        try lock.withLock {
            guard prompts.values.filter({ $0.owner == sender }).count < Self.maximumPromptsPerPeer
            else {
                throw BusError.limitsExceeded(
                    "at most \(Self.maximumPromptsPerPeer) prompts per connection")
            }
            nextID += 1
            let id = "p\(nextID)"
            prompts[id] = Prompt(
                owner: sender, objects: objects,
                appID: vaultSession.isOwner ? nil : vaultSession.appID)
            return SecretServicePath.prompt(id).path
        }
    }

    /// Prompt.Prompt: completes at once when the vault is open, else at its unlock, or is
    /// dismissed after `promptTimeout` seconds. The prompter the `Prompter` setting chooses
    /// (a dialog of vaultd's own, or the registered agent: `PrompterAgent`) is asked for the
    /// passphrase; any unlock of the owner's (`vaultctl unlock`) completes it too.
    func startPrompt(_ id: String, window: String, for sender: String) throws {
        let deadline = MonotonicClock.nanoseconds() + UInt64(promptTimeout * 1e9)
        let start: Bool = try lock.withLock {
            guard let p = prompts[id], p.owner == sender else {
                throw BusError.noSuchObject("no such prompt")
            }
            defer { p.started = true }
            if !p.started {
                p.windowID = window.utf8.count <= Self.maximumWindowID ? window : ""
                p.deadline = deadline
            }
            return !p.started
        }
        guard start else { return }
        if vault.isKeychainOpen {
            complete(id, dismissed: false)
            return
        }
        let how =
            "the prompter chosen by Prompter \(settings.prompter.rawValue) asks for the passphrase"
        _ = Self.promptLog.log(
            "prompt", to: logger, .info,
            "secret service: a prompt waits for the vault's unlock (\(how); vaultctl unlock) for at most \(Int(promptTimeout)) s"
        )
        DispatchQueue.global().asyncAfter(deadline: .now() + promptTimeout) { [weak self] in
            self?.complete(id, dismissed: true)
        }
        prompter.enqueue(id)
    }

    /// What a prompter is told of started prompt `id`; nil once it has ended.
    func promptDetails(_ id: String) -> (windowID: String, appID: String?, deadline: UInt64)? {
        lock.withLock {
            prompts[id].flatMap { $0.started ? ($0.windowID, $0.appID, $0.deadline) : nil }
        }
    }

    /// Runs `body` on the bus thread, later (never inline, so no caller's lock is held); at
    /// `priority` 0 (G_PRIORITY_DEFAULT, GDBus's own for the calls it hands there) in turn
    /// with those calls, else after them (G_PRIORITY_DEFAULT_IDLE).
    func onBusThread(priority: Int32 = 200, _ body: @escaping () -> Void) {
        guard let context else { return }
        let source = g_idle_source_new()
        g_source_set_priority(source, gint(priority))
        g_source_set_callback(
            source,
            { data in
                Unmanaged<Thunk>.fromOpaque(data!).takeRetainedValue().body()
                return 0
            }, Unmanaged.passRetained(Thunk(body)).toOpaque(), nil)
        g_source_attach(source, context)
        g_source_unref(source)
    }

    /// A closure handed to a GLib source as its callback's data (retained until it runs).
    final class Thunk {
        let body: () -> Void
        init(_ body: @escaping () -> Void) { self.body = body }
    }

    func dismissPrompt(_ id: String, for sender: String) throws {
        guard lock.withLock({ prompts[id]?.owner == sender }) else {
            throw BusError.noSuchObject("no such prompt")
        }
        complete(id, dismissed: true)
    }

    /// Ends prompt `id` once, with the Completed signal to its owner (any thread).
    func complete(_ id: String, dismissed: Bool) {
        guard let p = lock.withLock({ prompts.removeValue(forKey: id) }) else { return }
        prompter.ended(id)
        // Dismissed: an empty list, of the type a completed Unlock gives (libsecret 0.20 waits
        // for ever on a dismissed prompt whose result is of another type).
        let result: GV = .variant(.objectPaths(dismissed ? [] : p.objects))
        emit(
            to: p.owner, path: SecretServicePath.prompt(id).path, SecretServiceIntrospection.prompt,
            "Completed", [.bool(dismissed), result])
    }

    /// The vault's lock state changed: started prompts complete once it is open, and every
    /// identified connection is told the new `Locked` of what it sees (`notify`).
    func lockStateChanged() {
        notify(.lockState)
        guard vault.isKeychainOpen else { return }
        let started = lock.withLock { prompts.filter { $0.value.started }.map(\.key) }
        for id in started { complete(id, dismissed: false) }
    }
}
