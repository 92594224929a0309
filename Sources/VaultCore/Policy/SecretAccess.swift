import VaultProtocol

/// The `SecretAccess` setting (issue 40 §2, docs/access.md): what happens when a program
/// asks for the secret of an item another program created. Searching and attributes are
/// never gated, as on macOS; secrets are.
public enum SecretAccessMode: String, Sendable, CaseIterable {
    /// Every program of the owner reads every secret (vaultd before issue 40).
    case open
    /// The user is asked, through the prompter: Deny, Allow once, Always allow.
    case confirm
    /// Denied without asking, unless the owner granted it (`vaultctl access grant`).
    case strict
}

/// What the policy says about releasing one item's secret to a program.
enum SecretRelease: Equatable {
    case allow
    /// Refused (why, for the error and the log).
    case deny(String)
    /// The user must confirm (`SecretAccessMode.confirm`).
    case ask
}

extension Policy {
    /// Decides whether `caller` may have the secret of an item created by `creator` (nil:
    /// unknown, an item added before vaultd recorded creators), given whether the owner
    /// granted it to the caller's program (`granted`) and the mode in force.
    /// - Apps: their access groups are their access list (as iOS's keychain), decided by
    ///   `decide` already: allowed.
    /// - vaultd's own actions (no program): allowed.
    /// - `open`: allowed.
    /// - A peer that could pass for another program (`Caller.impersonationRisk`): denied,
    ///   even for its own items, whatever was granted (it would get what the program it
    ///   passes for gets).
    /// - The creator itself (same `ProgramIdentity.matchKey`), or a program granted: allowed.
    ///   An unknown creator is never the reader.
    /// - Otherwise: `confirm` asks, `strict` denies.
    static func secretRelease(
        to caller: Caller, creator: ProgramIdentity?, granted: Bool, mode: SecretAccessMode
    ) -> SecretRelease {
        guard caller.isOwner, let program = caller.program, mode != .open else { return .allow }
        if let risk = caller.impersonationRisk {
            return .deny("\(program.displayName) could pass for another program (\(risk))")
        }
        if let creator, creator.matchKey.sameBytes(program.matchKey) { return .allow }
        if granted { return .allow }
        switch mode {
        case .open: return .allow
        case .confirm: return .ask
        case .strict:
            return .deny(
                "SecretAccess is strict and \(program.displayName) was not granted access to this item"
            )
        }
    }
}
