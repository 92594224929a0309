import CGio
import Foundation
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// What a dialog shows; each prompter escapes it for its own protocol.
struct DialogText: Sendable {
    var title: String
    /// The headline (gcr's `message`).
    var message: String
    /// The details (gcr's `description`).
    var description: String
    /// The passphrase field's label (pinentry's SETPROMPT).
    var prompt = "Passphrase:"
    /// Shown after a wrong passphrase.
    var warning: String?
    var okLabel: String
    var cancelLabel: String
    /// The client's window, for the dialog's parent (gcr's `caller-window`).
    var windowID = ""
}

/// A passphrase dialog's answer: the passphrase (sodium memory), or dismissed and why (for
/// the log: cancelled, timed out, the prompter gone...).
enum PassphraseAnswer {
    case passphrase(SecureBytes)
    case dismissed(String)
}

/// One open dialog of a built-in prompter: a gcr system prompt or a pinentry process. Used
/// from the dialogs' queue only, but `cancel`, which may be called from any thread and ends
/// a pending question at once as dismissed.
protocol PromptDialog: AnyObject, Sendable {
    /// Asks for a passphrase; blocks until the answer, `cancel` or `deadline`
    /// (MonotonicClock nanoseconds).
    func passphrase(_ text: DialogText, deadline: UInt64) -> PassphraseAnswer
    /// Asks to allow an access; `always` explains the always-allow choice. Nil: dismissed.
    func confirm(_ text: DialogText, always: String, deadline: UInt64) -> AccessChoice?
    func cancel()
    /// Closes the dialog (the prompter's window goes away); idempotent.
    func close()
}

/// A question waiting for, or shown in, a dialog: its deadline, and its cancellation, which
/// reaches the dialog once one is open.
final class DialogTicket: @unchecked Sendable {
    let deadline: UInt64
    /// Guards `cancelled` and `dialog`.
    private let lock = NSLock()
    private var cancelled = false
    private var dialog: PromptDialog?

    init(deadline: UInt64) { self.deadline = deadline }

    /// Ends the question: not asked when it has not been, dismissed at once when it is.
    func cancel() {
        let d: PromptDialog? = lock.withLock {
            cancelled = true
            return dialog
        }
        d?.cancel()
    }

    var isCancelled: Bool { lock.withLock { cancelled } }

    /// Makes `dialog` the one `cancel` reaches; false when cancelled already.
    func attach(_ dialog: PromptDialog?) -> Bool {
        lock.withLock {
            self.dialog = dialog
            return !cancelled
        }
    }
}

/// vaultd's built-in prompters (docs/secret-service.md#dialogs): gcr's system prompter and
/// pinentry, chosen by the `Prompter` setting, one dialog at a time for the whole daemon
/// (a serial queue; every question waits its turn and ends by its own deadline).
final class PromptDialogs: @unchecked Sendable {
    /// The `Prompter` setting.
    enum Setting: String, CaseIterable, Sendable {
        case auto, gcr, pinentry, agent, none
    }
    /// Who asks a given question.
    enum Choice: Equatable {
        case gcr, pinentry, agent, none
    }

    /// The Secret Service front-end whose bus connection gcr's prompter is reached on (nil:
    /// vaultd is not on the bus, so no gcr).
    weak var service: SecretService?
    /// One dialog at a time.
    private let queue = DispatchQueue(label: "vaultd-prompt")
    /// Failed-unlock answers asked again per question before it is dismissed.
    static let maximumAttempts = PrompterAgent.maximumAttempts

    /// Where the dialogs' outcomes are logged.
    let logger: Logger

    init(service: SecretService?, logger: Logger) {
        self.service = service
        self.logger = logger
    }

    // MARK: the choice

    /// Who asks, by the `Prompter` setting. `auto`: gcr when a display exists (DISPLAY or
    /// WAYLAND_DISPLAY) and the system prompter's name has an owner or can be activated;
    /// else pinentry when a display exists and the program is found; else the registered
    /// agent; else none. gcr is asked on the bus (a few bounded calls).
    func choose(agentRegistered: Bool) -> Choice {
        let s = settings
        switch s.prompter {
        case .none: return .none
        case .agent: return agentRegistered ? .agent : .none
        case .gcr: return service == nil ? .none : .gcr
        case .pinentry: return .pinentry
        case .auto:
            let env = ProcessInfo.processInfo.environment
            let display = [env["DISPLAY"], env["WAYLAND_DISPLAY"]].contains { !($0 ?? "").isEmpty }
            if display, let service, GcrPrompter.isAvailable(on: service.connection) { return .gcr }
            if display, Self.executable(s.pinentryProgram) != nil { return .pinentry }
            return agentRegistered ? .agent : .none
        }
    }

    /// `program` as a path that can be executed: itself when it has a slash, else the first
    /// match in PATH.
    static func executable(_ program: String) -> String? {
        if program.contains("/") { return SystemCall.access(program, X_OK) ? program : nil }
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for dir in path.split(separator: ":") where dir.hasPrefix("/") {
            let p = "\(dir)/\(program)"
            if SystemCall.access(p, X_OK) { return p }
        }
        return nil
    }

    /// Opens a dialog of `choice` (gcr or pinentry).
    private func open(_ choice: Choice, deadline: UInt64) throws -> PromptDialog {
        switch choice {
        case .gcr:
            guard let service else {
                throw GcrPrompter.Failure.unavailable("vaultd is not on the bus")
            }
            return try GcrPrompter(service: service, deadline: deadline)
        default:
            return try Pinentry(program: settings.pinentryProgram, deadline: deadline)
        }
    }

    /// Runs `body` with an open dialog of `choice`, after the questions before it, unless
    /// the ticket was cancelled or its deadline passed meanwhile (then `body` gets nil).
    /// The dialog is closed after `body`, and cancelled at the deadline whatever it waits on.
    private func run<T>(
        _ choice: Choice, _ ticket: DialogTicket, _ body: @escaping @Sendable (PromptDialog?) -> T,
        done: @escaping @Sendable (T) -> Void
    ) {
        queue.async { [self] in
            let now = MonotonicClock.nanoseconds()
            guard !ticket.isCancelled, now < ticket.deadline else { return done(body(nil)) }
            let watchdog = DispatchWorkItem { ticket.cancel() }
            DispatchQueue.global().asyncAfter(
                deadline: .now() + .nanoseconds(Int(clamping: ticket.deadline - now)),
                execute: watchdog)
            defer { watchdog.cancel() }
            let dialog: PromptDialog
            do {
                dialog = try open(choice, deadline: ticket.deadline)
            } catch {
                logger.warning("prompt: no dialog (\(error))")
                return done(body(nil))
            }
            defer { dialog.close() }
            done(body(ticket.attach(dialog) ? dialog : nil))
        }
    }

    // MARK: unlocking

    /// Asks for the vault's passphrase in a dialog of `choice` and unlocks with it, as the
    /// owner (the user typed it into vaultd's own dialog), through `Vault.unlock`, which the
    /// policy decides and the failed-unlock rate limit counts; a wrong one is asked again
    /// with a warning, at most `maximumAttempts` in all. `done(true)` once unlocked, else
    /// `done(false)` (dismissed, timed out, cancelled, rate limited). Never blocks the caller.
    func unlock(
        vault: Vault, appID: String?, windowID: String, choice: Choice, ticket: DialogTicket,
        done: @escaping @Sendable (Bool) -> Void
    ) {
        let first = DialogText(
            title: "Unlock the vault", message: "Authentication required",
            description: appID.map {
                "The app “\(Self.shown($0))” wants to use the vault's secrets, but the vault is locked."
            } ?? "A program wants to use the vault's secrets, but the vault is locked.",
            okLabel: "Unlock", cancelLabel: "Cancel", windowID: windowID)
        run(
            choice, ticket,
            { dialog -> Bool in
                guard let dialog else { return false }
                var text = first
                for attempt in 1...Self.maximumAttempts {
                    switch dialog.passphrase(text, deadline: ticket.deadline) {
                    case .dismissed(let why):
                        self.logger.info(
                            "prompt: the unlock dialog ended without a passphrase (\(why))")
                        return false
                    case .passphrase(let p):
                        do {
                            _ = try vault.daemonSession(for: .unlockDialog).unlock(passphrase: p)
                            self.logger.notice(
                                "prompt: the vault was unlocked with the passphrase typed into the dialog"
                            )
                            return true
                        } catch let e as VaultFailure
                            where e.code == .wrongPassphrase && attempt < Self.maximumAttempts
                        {
                            text.warning =
                                "The passphrase was wrong (attempt \(attempt + 1) of \(Self.maximumAttempts))"
                        } catch {
                            self.logger.warning(
                                "prompt: the dialog's passphrase did not unlock the vault (\(VaultError.wire(error)))"
                            )
                            return false
                        }
                    }
                    if ticket.isCancelled { return false }
                }
                return false
            }, done: done)
    }

    // MARK: confirming access

    /// Asks the user whether `program` may use the secret of `item` (issue 40 §2), in the
    /// prompter the setting chooses (the agent interface has no confirmation: `.none` then),
    /// within `timeout` seconds. Every text the program or the item controls is escaped and
    /// bounded (`shown`). `done` gets the choice, or nil: no prompter, dismissed, timed out.
    func confirm(
        message: String, details: String, windowID: String = "", timeout: Double,
        ticket: DialogTicket? = nil, done: @escaping @Sendable (AccessChoice?) -> Void
    ) {
        let choice = choose(agentRegistered: false)
        guard choice == .gcr || choice == .pinentry else { return done(nil) }
        let t =
            ticket ?? DialogTicket(deadline: MonotonicClock.nanoseconds() + UInt64(timeout * 1e9))
        let text = DialogText(
            title: "Allow access", message: message, description: details,
            okLabel: "Allow", cancelLabel: "Deny", windowID: windowID)
        run(
            choice, t,
            { dialog -> AccessChoice? in
                dialog?.confirm(
                    text, always: "Always allow it, without asking again?", deadline: t.deadline)
            }, done: done)
    }

    /// A text a peer controls, as a dialog shows it: control characters as U+FFFD, at most
    /// 200 characters (an ellipsis after).
    static func shown(_ s: String) -> String {
        let clean = String(
            String.UnicodeScalarView(
                s.unicodeScalars.map {
                    $0.value < 0x20 || (0x7f..<0xa0).contains($0.value) ? "\u{FFFD}" : $0
                }))
        return clean.count > 200 ? String(clean.prefix(200)) + "…" : clean
    }
}
