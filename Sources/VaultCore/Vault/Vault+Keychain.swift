import Foundation
import VaultProtocol

// The keychain: SecItemAdd, CopyMatching, Update and Delete, each authorized for its caller.

extension Vault {
    /// SecItemAdd. Returns the stored attributes. Throws DuplicateItem, Param, SecretTooLarge,
    /// MissingEntitlement (group not the caller's), InteractionNotAllowed (class key locked),
    /// AuthFailed (whenPasscodeSet without a passphrase).
    func addItem(
        _ itemClass: ItemClass, attributes: ItemAttributes, secret: SecureBytes, caller: Caller
    ) throws -> ItemAttributes {
        let grant = try authorize(.addItem(accessGroup: attributes.accessGroup), for: caller)
        // Checking, hashing and encrypting happen here, before the write joins a group
        // commit: the leader's transaction, under the engine lock, only runs the INSERT.
        let stored = try KeychainStore.addedAttributes(
            itemClass: itemClass, attributes: attributes, secretSize: secret.count,
            accessGroup: grant.accessGroup!)
        let accessible = stored.accessible ?? .whenUnlocked
        let keys = try withKeys { try keychain.writeKeys(accessible: accessible) }
        let values = try KeychainStore.encrypt(
            itemClass: itemClass, attributes: stored, secret: secret, keys: keys)
        // Its creator (issue 40 §2), sealed before the write as the item is.
        let creator = caller.program.map { AccessStore.seal($0, metadata: keys.metadata) }
        try write { db in
            try self.admitInWrite(caller, in: db)
            try self.keychain.insert(
                values, generation: caller.generation, classKey: keys.classKey,
                accessible: accessible, in: db)
            try self.recordCreator(values, sealed: creator, in: db)
        }
        if stored.synchronizable == true { emit(.keychainChanged) }
        // The row id is not needed: a made item is named by its attributes.
        emit(.itemsChanged([ItemChange(.created, itemClass, stored, row: 0)]))
        return stored
    }

    /// SecItemCopyMatching; see `KeychainStore.copyMatching`. The damaged items it met are
    /// left out (and logged); `copyMatchingReportingDamage` returns them too.
    /// `includingLocked`: locked matches are listed (`FoundItem.isLocked`) rather than failing.
    func copyMatching(
        _ query: ItemQuery, returnData: Bool, includingLocked: Bool = false,
        interaction: AccessInteraction = .wait, caller: Caller
    ) throws -> [FoundItem] {
        try copyMatchingReportingDamage(
            query, returnData: returnData, includingLocked: includingLocked,
            interaction: interaction, caller: caller
        ).items
    }

    /// SecItemCopyMatching, with the damaged items the query met (`ItemMatches.damaged`).
    /// Secrets are released only as the policy allows (`releaseSecrets`; `interaction`:
    /// how a question to the user is waited for).
    func copyMatchingReportingDamage(
        _ query: ItemQuery, returnData: Bool, includingLocked: Bool = false,
        interaction: AccessInteraction = .wait, caller: Caller
    ) throws -> ItemMatches {
        let matches = try lookUpMatches(
            query, returnData: returnData, includingLocked: includingLocked, caller: caller)
        if returnData { try releaseSecrets(of: matches, to: caller, interaction: interaction) }
        return matches
    }

    /// `copyMatchingReportingDamage`'s lookup, before the secrets are released.
    private func lookUpMatches(
        _ query: ItemQuery, returnData: Bool, includingLocked: Bool, caller: Caller
    ) throws -> ItemMatches {
        let grant = try authorize(
            .copyItems(accessGroup: query.attributes.accessGroup), for: caller)
        // No engine lock: the query runs on a reader connection, the keys come under the keys
        // lock, and decrypting and matching need no lock (with several clients, lookups would
        // otherwise queue on the engine lock behind each other and behind group commits).
        func lookUp() throws -> ItemMatches {
            let (metadata, index) = try withKeys { try keychain.metadataKeys() }
            let found = try read {
                try KeychainStore.candidateRows(
                    query, groups: grant.searchedAccessGroups, hashKey: index,
                    itemIndex: keychain.itemIndex, in: $0)
            }
            var candidates = KeychainStore.Candidates(
                rows: found.rows, malformed: found.malformed, metadata: metadata)
            try withKeys { try keychain.addClassKeys(to: &candidates) }
            return try KeychainStore.copyMatching(
                candidates, query, returnData: returnData, includingLocked: includingLocked,
                logger: logger)
        }
        // The rows come from one snapshot and the class keys a moment later: should the
        // passphrase be removed and set again in between (a new whenPasscodeSet key), a row
        // fails authentication (reported damaged). A second lookup reads both anew; a
        // damaged row is damaged again.
        let first: ItemMatches
        do {
            first = try lookUp()
        } catch let e as VaultFailure where e.code == .itemDamaged {
            return try lookUp()
        }
        return first.damaged.isEmpty ? first : try lookUp()
    }

    /// SecItemUpdate; see `KeychainStore.update`. All matches change, or none.
    func updateItems(
        _ query: ItemQuery, changes: ItemAttributes, secret: SecureBytes?, caller: Caller
    ) throws -> Int {
        let grant = try authorize(
            .updateItems(
                accessGroup: query.attributes.accessGroup, newAccessGroup: changes.accessGroup),
            for: caller)
        let (n, made) = try write { db in
            try self.admitInWrite(caller, in: db)
            var made: [ItemChange] = []
            let n = try self.keychain.update(
                query, changes: changes, secret: secret, groups: grant.searchedAccessGroups,
                in: db, reporting: { made.append(contentsOf: $0) })
            return (n, made)
        }
        emit(.keychainChanged)
        emit(.itemsChanged(made))
        return n
    }

    /// SecItemDelete; see `KeychainStore.delete`.
    func deleteItems(_ query: ItemQuery, caller: Caller) throws -> Int {
        let grant = try authorize(
            .deleteItems(accessGroup: query.attributes.accessGroup), for: caller)
        let (n, made) = try writeMakingRoom { db in
            try self.admitInWrite(caller, in: db)
            var made: [ItemChange] = []
            let n = try self.keychain.delete(
                query, groups: grant.searchedAccessGroups, in: db,
                reporting: { made.append(contentsOf: $0) })
            return (n, made)
        }
        emit(.keychainChanged)
        emit(.itemsChanged(made))
        return n
    }
}
