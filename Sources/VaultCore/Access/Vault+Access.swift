import Foundation
import VaultProtocol

/// How a front-end waits for the user when a secret needs a confirmation.
public enum AccessInteraction: Sendable {
    /// On the calling thread (the socket: each connection has its own).
    case wait
    /// Not here: the call throws `AccessConfirmationNeeded`, the front-end asks off its
    /// thread (`VaultSession.confirm`) and runs the call again (the Secret Service, whose
    /// bus thread serves everybody).
    case deferred
}

/// A call needs the user's confirmation before it releases secrets (`AccessInteraction.
/// deferred`). Carries the question; `VaultSession.confirm` asks it.
public struct AccessConfirmationNeeded: Error, Sendable {
    public let request: AccessRequest
    let key: String
    let uuids: Set<[UInt8]>
    /// Whether an Always allow is stored (`Vault.release`).
    var persistent = true
}

extension Vault {
    /// The `SecretAccess` mode in force: config.plist's, else the vault's default.
    func secretAccessMode(in db: Database) throws -> SecretAccessMode {
        if let m = accessGate.configuredMode ?? accessGate.recordedMode { return m }
        // Remembered once recorded (`initialize` records it; a vault made earlier has it
        // from its migration).
        guard let m = try AccessStore.recordedMode(in: db) else { return .confirm }
        accessGate.recordedMode = m
        return m
    }

    /// The creators of `uuids`, in their order (nil: none recorded), from `accessGate`'s
    /// cache; reading and opening only those it does not hold.
    func creators(of uuids: [[UInt8]], metadata: SecureBytes, in db: Database) throws
        -> [ProgramIdentity?]
    {
        let cached = accessGate.cachedCreators(uuids)
        let missing = zip(uuids, cached).compactMap { $1 == nil ? $0 : nil }
        guard !missing.isEmpty else { return cached.map { $0 ?? nil } }
        let read = try AccessStore.creators(of: missing, metadata: metadata, in: db)
        var fresh: [[UInt8]: ProgramIdentity?] = [:]
        for u in missing { fresh[u] = .some(read[u]) }
        accessGate.cacheCreators(fresh)
        return zip(uuids, cached).map { u, c in c ?? fresh[u] ?? nil }
    }

    /// The mode in force and the creators of `uuids` (in their order; nil: none recorded).
    /// From `accessGate`'s caches when they hold them all (a lookup of an item read before),
    /// else in one read transaction.
    func modeAndCreators(of uuids: [[UInt8]], metadata: SecureBytes) throws -> (
        SecretAccessMode, [ProgramIdentity?]
    ) {
        if let mode = accessGate.configuredMode ?? accessGate.recordedMode {
            let cached = accessGate.cachedCreators(uuids)
            if cached.allSatisfy({ $0 != nil }) { return (mode, cached.map { $0 ?? nil }) }
        }
        return try read { db in
            (
                try self.secretAccessMode(in: db),
                try self.creators(of: uuids, metadata: metadata, in: db)
            )
        }
    }

    /// The mode in force and whether config.plist chose it (else the vault's default).
    func secretAccessMode() throws -> (mode: SecretAccessMode, configured: Bool) {
        if let m = accessGate.configuredMode { return (m, true) }
        return (try read { try AccessStore.defaultMode(in: $0) }, false)
    }

    /// Records `caller`'s program as the creator of the item `values` hold (`KeychainStore.
    /// encrypt`'s row; its uuid first), in the Add's transaction. An app's creator is the
    /// app; vaultd's own actions record none.
    func recordCreator(_ values: [SQLValue], sealed: [UInt8]?, in db: Database) throws {
        guard let sealed, let uuid = values.first?.blob else { return }
        try AccessStore.recordCreator(uuid: uuid, sealed: sealed, in: db)
    }

    /// One secret to release: its item (the store's uuid, or a session item's `session`,
    /// NUL, ID), its attributes (what names it in a dialog: `itemName`, made only when one
    /// is needed), its creator and whether it was granted.
    struct Subject {
        var uuid: [UInt8]
        var attributes: ItemAttributes
        var creator: ProgramIdentity?
        var granted: Bool
    }

    /// The secrets of `matches` that `caller` may have, decided by the policy
    /// (`Policy.secretRelease`) for each item whose secret is returned (`release`).
    func releaseSecrets(
        of matches: ItemMatches, to caller: Caller, interaction: AccessInteraction
    ) throws {
        guard caller.isOwner, let program = caller.program else { return }
        let withData = matches.items.filter { $0.data != nil && $0.uuid != nil }
        guard !withData.isEmpty else { return }
        let uuids = withData.map { $0.uuid! }
        let (metadata, index) = try withKeys { try keychain.metadataKeys() }
        let (mode, creators) = try modeAndCreators(of: uuids, metadata: metadata)
        // The grants are looked up only for the secrets the policy would not release without
        // one (most often none: a program reads what it created).
        let ungranted = zip(uuids, creators).compactMap { uuid, creator in
            Policy.secretRelease(to: caller, creator: creator, granted: false, mode: mode)
                == .allow ? nil : uuid
        }
        let granted =
            ungranted.isEmpty
            ? []
            : try read { db in
                try AccessStore.granted(
                    ungranted, hash: AccessStore.programHash(program, index: index), in: db)
            }
        try release(
            withData.indices.map {
                Subject(
                    uuid: uuids[$0], attributes: withData[$0].attributes, creator: creators[$0],
                    granted: !granted.isEmpty && granted.contains(uuids[$0]))
            }, mode: mode, to: caller, program: program, persistent: true,
            interaction: interaction)
    }

    /// Releases `subjects`' secrets to `caller`'s `program` as the policy decides: allowed
    /// ones pass; a refusal throws AuthFailed; a question goes to the user (`interaction`),
    /// and the answer throws (denied: AuthFailed; no answer: InteractionNotAllowed) or lets
    /// them pass. `persistent`: an Always allow is stored (the store's items), else kept in
    /// memory until vaultd stops (the session collection's, which live no longer).
    func release(
        _ subjects: [Subject], mode: SecretAccessMode, to caller: Caller,
        program: ProgramIdentity, persistent: Bool, interaction: AccessInteraction
    ) throws {
        var asked: [Subject] = []
        for s in subjects {
            switch Policy.secretRelease(
                to: caller, creator: s.creator, granted: s.granted, mode: mode)
            {
            case .allow: continue
            case .deny(let why):
                logger.notice(
                    "access: refused a secret to \(logField(program.displayName)): \(why)")
                throw VaultFailure(
                    .authFailed, "access to the secret was refused: \(why)",
                    .refused(program))
            case .ask: asked.append(s)
            }
        }
        guard !asked.isEmpty else { return }
        let key = program.matchKey
        let askedUUIDs = Set(asked.map(\.uuid))
        if accessGate.takePermit(key, covering: askedUUIDs) { return }
        if let left = accessGate.deniedFor(key) {
            throw VaultFailure(
                .authFailed,
                "access to the secret was denied by the user; \(program.displayName) is not asked again for \(Int(left.rounded(.up))) s",
                .refused(program))
        }
        let needed = AccessConfirmationNeeded(
            request: AccessRequest(
                program: program,
                items: asked.map {
                    AccessRequest.Item(name: Self.itemName($0.attributes), creator: $0.creator)
                }),
            key: key, uuids: askedUUIDs, persistent: persistent)
        switch interaction {
        case .deferred: throw needed
        case .wait: try confirm(needed, permitting: false)
        }
    }

    /// What names an item in a dialog: its label, else its service or server and account.
    static func itemName(_ a: ItemAttributes) -> String {
        if let l = a.label, !l.isEmpty { return l }
        let what = a.service ?? a.server ?? "an item"
        return a.account.map { "\(what) (\($0))" } ?? what
    }

    /// Asks the user `needed`'s question, at most one at a time per program. Returns when
    /// allowed (Always allow: remembered in the store; Allow once: a permit for the call run
    /// again when `permitting`); throws AuthFailed (denied: remembered `denialSeconds`) or
    /// InteractionNotAllowed (no prompter, one pending already, no answer in time).
    func confirm(_ needed: AccessConfirmationNeeded, permitting: Bool) throws {
        let program = needed.request.program
        guard let asker = accessGate.asker else {
            throw VaultFailure(
                .interactionNotAllowed,
                "\(program.displayName) may use this secret only if the user allows it, and no prompter can ask (Prompter in config.plist; vaultctl access grant)",
                .refused(program))
        }
        guard accessGate.begin(needed.key) else {
            throw VaultFailure(
                .interactionNotAllowed,
                "a confirmation for \(program.displayName) is already waiting for the user",
                .refused(program))
        }
        defer { accessGate.end(needed.key) }
        let timeout = accessGate.timeout
        switch asker.ask(needed.request, timeout: timeout) {
        case nil:
            logger.notice(
                "access: no answer for \(logField(program.displayName)) (no prompter, dismissed or \(Int(timeout)) s passed)"
            )
            throw VaultFailure(
                .interactionNotAllowed,
                "the user did not allow \(program.displayName) to use this secret (no prompter answered within \(Int(timeout)) s)",
                .refused(program))
        case .deny?:
            accessGate.rememberDenial(needed.key)
            logger.notice("access: the user denied \(logField(program.displayName))")
            throw VaultFailure(
                .authFailed, "the user denied access to the secret", .refused(program))
        case .allowOnce?:
            logger.notice("access: the user allowed \(logField(program.displayName)) once")
            if permitting { accessGate.permit(needed.key, needed.uuids) }
        case .alwaysAllow?:
            logger.notice("access: the user always allows \(logField(program.displayName))")
            if needed.persistent {
                try storeGrant(Array(needed.uuids), to: program)
            } else {
                accessGate.grantInMemory(needed.key, needed.uuids)
            }
            if permitting { accessGate.permit(needed.key, needed.uuids) }
        }
    }

    /// An act of the owner's tools that gives secrets away wholesale (a grant, a backup):
    /// in `confirm` and `strict`, the user confirms it through the prompter, since any
    /// program of the owner's may call it (`security` asks for the keychain's password for
    /// the same reason). A peer that could pass for another program is refused.
    func confirmOwnerAct(
        _ purpose: AccessRequest.Purpose, items: [AccessRequest.Item], caller: Caller
    ) throws {
        guard caller.isOwner, let program = caller.program, try secretAccessMode().mode != .open
        else { return }
        if let risk = caller.impersonationRisk {
            throw VaultFailure(
                .authFailed,
                "refused: \(program.displayName) could pass for another program (\(risk))",
                .refused(program))
        }
        try confirm(
            AccessConfirmationNeeded(
                request: AccessRequest(program: program, items: items, purpose: purpose),
                key: "owner-act\u{0}" + program.matchKey, uuids: []),
            permitting: false)
    }

    private func storeGrant(_ uuids: [[UInt8]], to program: ProgramIdentity) throws {
        let (metadata, index) = try withKeys { try keychain.metadataKeys() }
        let now = clock.now
        try write { db in
            try AccessStore.grant(
                uuids, to: program, metadata: metadata, index: index, at: now, in: db)
        }
    }

    // MARK: the owner's list, grant and revoke

    /// Every remembered grant, with its item's attributes (items the store cannot open are
    /// left out). Owner only.
    func accessGrants(caller: Caller) throws -> [AccessGrant] {
        _ = try authorize(.listAccess, for: caller)
        let (metadata, _) = try withKeys { try keychain.metadataKeys() }
        let rows = try read { try AccessStore.allGrants(metadata: metadata, in: $0) }
        let items = try copyMatchingReportingDamage(
            ItemQuery(itemClass: nil, attributes: ItemAttributes(), matchAll: true),
            returnData: false, includingLocked: true, caller: .owner
        ).items
        var byUUID: [[UInt8]: FoundItem] = [:]
        for i in items { if let u = i.uuid { byUUID[u] = i } }
        return rows.compactMap { r in
            guard let p = r.program, let item = byUUID[r.uuid] else { return nil }
            return AccessGrant(
                program: p, item: item.attributes, itemClass: item.itemClass, grantedAt: r.at)
        }
    }

    /// Grants `program` the secrets of the items `query` matches. Owner only; in `confirm`
    /// and `strict`, the user confirms it through the prompter first (any program of the
    /// owner may call this, and must not grant itself). Returns how many items.
    func grantAccess(_ query: ItemQuery, to program: ProgramIdentity, caller: Caller) throws
        -> Int
    {
        _ = try authorize(.grantAccess, for: caller)
        var q = query
        q.matchAll = true
        let items = try copyMatching(q, returnData: false, includingLocked: true, caller: .owner)
        let uuids = items.compactMap(\.uuid)
        try confirmOwnerAct(
            .grant(to: program),
            items: items.map { AccessRequest.Item(name: Self.itemName($0.attributes)) },
            caller: caller)
        try storeGrant(uuids, to: program)
        accessGate.forgetDenials()
        return uuids.count
    }

    /// Removes the grants to programs at `path` (and running `script`, when given; nil: to
    /// every program) of the items `query` matches (nil: every item). Owner only. Returns
    /// how many.
    func revokeAccess(
        _ query: ItemQuery?, programPath path: String?, script: String?, caller: Caller
    ) throws -> Int {
        _ = try authorize(.revokeAccess, for: caller)
        let uuids: [[UInt8]]? = try query.map { q in
            var all = q
            all.matchAll = true
            return try copyMatching(all, returnData: false, includingLocked: true, caller: .owner)
                .compactMap(\.uuid)
        }
        let (metadata, _) = try withKeys { try keychain.metadataKeys() }
        let n = try write { db in
            var hashes: [[UInt8]?] = [nil]
            if let path {
                var seen: Set<[UInt8]> = []
                for g in try AccessStore.allGrants(metadata: metadata, in: db)
                where g.program.map({ p in
                    p.path.sameBytes(path)
                        && (script.map { p.script?.sameBytes($0) == true } ?? true)
                }) == true {
                    seen.insert(g.hash)
                }
                hashes = seen.map { $0 }
            }
            return try hashes.reduce(0) { $0 + (try AccessStore.revoke(uuids, hash: $1, in: db)) }
        }
        accessGate.forgetDenials()
        return n
    }
}

extension VaultFailure.Details {
    /// The details of a per-program access refusal of `program`.
    static func refused(_ program: ProgramIdentity) -> VaultFailure.Details {
        var d = VaultFailure.Details()
        d.program = program.displayName
        return d
    }
}
