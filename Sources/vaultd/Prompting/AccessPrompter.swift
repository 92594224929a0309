import Foundation
import VaultCore
import VaultProtocol

/// The engine's `AccessAsker`: the access confirmation of issue 40 §2 in the dialog the
/// `Prompter` setting chooses (gcr's system prompter or pinentry, one dialog at a time for
/// the whole daemon: `PromptDialogs`). The agent interface has no confirmation: with it, or
/// with none, every question fails at once (InteractionNotAllowed). Called on the thread of
/// the call that needs the answer, never the bus thread (`SecretService+Access.swift`).
final class AccessPrompter: AccessAsker {
    let dialogs: PromptDialogs

    init(dialogs: PromptDialogs) { self.dialogs = dialogs }

    func ask(_ request: AccessRequest, timeout: Double) -> AccessChoice? {
        let (message, details) = Self.text(request)
        let answer = Locked<AccessChoice?>(nil)
        let done = DispatchSemaphore(value: 0)
        dialogs.confirm(message: message, details: details, timeout: timeout) { choice in
            answer.withLock { $0 = choice }
            done.signal()
        }
        // The dialog ends by `timeout` (its ticket's watchdog); a margin for closing it.
        guard done.wait(timeout: .now() + timeout + 10) == .success else { return nil }
        return answer.withLock { $0 }
    }

    /// The dialog's headline and details. Everything the program or the items' creators
    /// control (paths, script names, labels) goes through `PromptDialogs.shown` (control
    /// characters replaced, at most 200 characters each), inside quotation marks.
    static func text(_ r: AccessRequest) -> (message: String, details: String) {
        func q(_ s: String) -> String { "“\(PromptDialogs.shown(s))”" }
        let who = q(r.program.displayName)
        let names = r.items.prefix(3).map { q($0.name) }.joined(separator: ", ")
        let more = r.items.count > 3 ? " and \(r.items.count - 3) more" : ""
        switch r.purpose {
        case .backup:
            return (
                "Allow \(who) to write a backup of every secret in the vault?",
                "The backup holds every item's secret, readable by whoever holds its key."
            )
        case .grant(let to):
            return (
                "Allow \(who) to let \(q(to.displayName)) use the secret\(r.items.count == 1 ? "" : "s") \(names)\(more)?",
                "\(q(to.displayName)) will read \(r.items.count == 1 ? "it" : "them") without asking."
            )
        case .use:
            let creators = Set(r.items.map { $0.creator?.displayName ?? "" })
            let savedBy: String
            if creators.count == 1, let only = r.items.first?.creator {
                savedBy = ", saved by \(q(only.displayName))"
            } else if creators == [""] {
                savedBy = ", saved before vaultd recorded which program saves an item"
            } else {
                savedBy = ", saved by other programs"
            }
            let details =
                r.program.kind == .interpreter
                ? "The program is an interpreter; the script it runs is named by the program itself."
                : "Allow once lets it read \(r.items.count == 1 ? "this secret" : "these secrets") now; Always allow remembers it."
            return (
                "Allow \(who) to use the secret\(r.items.count == 1 ? "" : "s") \(names)\(more)\(savedBy)?",
                details
            )
        }
    }
}
