import Foundation
import Testing
import VaultProtocol

@testable import VaultCore

/// Vaults with a passphrase (at the tests' MIN Argon2id cost: `PassphrasePolicy.tests`).
@Suite("Lock states, passphrases and device binding")
struct LockTests {
    /// Adds one item per accessibility class, service = the class name, secret = "secret-<class>".
    static func addOnePerClass(_ vault: Vault, except: Set<Accessibility> = []) throws {
        for a in Accessibility.allCases where !except.contains(a) {
            try vault.addGeneric(
                service: a.rawValue, account: "acct", secret: Array("secret-\(a.rawValue)".utf8),
                accessible: a)
        }
    }

    static func expectReadable(
        _ vault: Vault, _ a: Accessibility, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(
            (try? vault.readGeneric(service: a.rawValue, account: "acct"))
                == Array("secret-\(a.rawValue)".utf8),
            "\(a.rawValue) should be readable", sourceLocation: sourceLocation)
    }

    /// A durable add fetches its keys and encrypts before it joins a group commit. Should the
    /// passphrase change meanwhile, dropping or replacing the item's class key, its insert is
    /// refused: stored, the item could never be decrypted again.
    @Test func anAddWhoseClassKeyChangedMeanwhileIsRefused() throws {
        try withVault(initialize: false) { vault, _ in
            _ = try vault.initialize(passphrase: secret("p1"), caller: .owner)
            let a = Accessibility.whenPasscodeSetThisDeviceOnly
            // What addItem does before its group commit: keys fetched, the item encrypted.
            func prepared() throws -> (values: [SQLValue], classKey: SecureBytes) {
                let stored = try KeychainStore.addedAttributes(
                    itemClass: .genericPassword,
                    attributes: ItemAttributes(service: "race", account: "a", accessible: a),
                    secretSize: 1, accessGroup: Caller.ownerAccessGroup)
                let keys = try vault.locked { try vault.keychain.writeKeys(accessible: a) }
                return (
                    try KeychainStore.encrypt(
                        itemClass: .genericPassword, attributes: stored, secret: secret([7]),
                        keys: keys), keys.classKey
                )
            }
            func insert(_ p: (values: [SQLValue], classKey: SecureBytes)) throws {
                try vault.write { db in
                    try vault.keychain.insert(
                        p.values, generation: nil, classKey: p.classKey, accessible: a, in: db)
                }
            }
            // Removing the passphrase drops the class key.
            let early = try prepared()
            _ = try vault.changePassphrase(old: secret("p1"), new: nil, caller: .owner)
            expectFailure(.authFailed) { try insert(early) }
            // Setting one again makes a new key of that class.
            _ = try vault.changePassphrase(old: nil, new: secret("p2"), caller: .owner)
            expectFailure(.interactionNotAllowed) { try insert(early) }
            #expect(try vault.read { try vault.keychain.count(in: $0) } == 0)
            // Fetched after the change, the keys are current.
            try insert(try prepared())
            #expect(try vault.readGeneric(service: "race") == [7])
        }
    }

    @Test func lockRestartWrongAndRightPassphrase() throws {
        try withTemporaryDirectory { tmp in
            let dir = tmp + "/data"
            do {
                let vault = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
                defer { vault.close() }
                let state = try vault.initialize(
                    passphrase: secret("correct horse"), caller: .owner)
                #expect(state.state == .unlocked)
                #expect(state.hasPassphrase)
                try Self.addOnePerClass(vault)
                for a in Accessibility.allCases { Self.expectReadable(vault, a) }

                let locked = try vault.lockVault(caller: .owner)
                #expect(locked.state == .locked)
                #expect(locked.unlockedSinceStart)
                // afterFirstUnlock classes still read; whenUnlocked classes are InteractionNotAllowed.
                Self.expectReadable(vault, .afterFirstUnlock)
                Self.expectReadable(vault, .afterFirstUnlockThisDeviceOnly)
                for a in [
                    Accessibility.whenUnlocked, .whenUnlockedThisDeviceOnly,
                    .whenPasscodeSetThisDeviceOnly,
                ] {
                    let e = expectFailure(.interactionNotAllowed) {
                        _ = try vault.readGeneric(service: a.rawValue)
                    }
                }
                // Locked is never reported as not found: not for delete, update or add either.
                let wu = ItemQuery(
                    attributes: ItemAttributes(service: Accessibility.whenUnlocked.rawValue))
                expectFailure(.interactionNotAllowed) {
                    _ = try vault.deleteItems(wu, caller: .owner)
                }
                expectFailure(.interactionNotAllowed) {
                    _ = try vault.updateItems(
                        wu, changes: ItemAttributes(label: "x"), secret: nil, caller: .owner)
                }
                expectFailure(.interactionNotAllowed) {
                    try vault.addGeneric(
                        service: "new", account: "acct", secret: [1], accessible: .whenUnlocked)
                }
                try vault.addGeneric(
                    service: "new-afu", account: "acct", secret: [2], accessible: .afterFirstUnlock)
                #expect(try vault.status(caller: .owner).items == Accessibility.allCases.count + 1)
            }

            // Restart: a new engine on the same directory has never been unlocked.
            let vault = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
            defer { vault.close() }
            #expect(vault.lockState.state == .locked)
            #expect(vault.lockState.unlockedSinceStart == false)
            for a in Accessibility.allCases {
                expectFailure(.interactionNotAllowed) {
                    _ = try vault.readGeneric(service: a.rawValue)
                }
            }
            expectFailure(.interactionNotAllowed) {
                try vault.addGeneric(
                    service: "x", account: "acct", secret: [1], accessible: .afterFirstUnlock)
            }

            let wrong = expectFailure(.wrongPassphrase) {
                _ = try vault.unlock(passphrase: secret("correct horsE"), caller: .owner)
            }
            #expect(vault.lockState.state == .locked)
            Self.expectReadableNot(vault, .afterFirstUnlock)

            let state = try vault.unlock(passphrase: secret("correct horse"), caller: .owner)
            #expect(state.state == .unlocked)
            #expect(state.unlockedSinceStart)
            for a in Accessibility.allCases { Self.expectReadable(vault, a) }
            #expect(try vault.readGeneric(service: "new-afu", account: "acct") == [2])
            #expect(try vault.status(caller: .owner).retryAfter == 0)
        }
    }

    static func expectReadableNot(
        _ vault: Vault, _ a: Accessibility, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        expectFailure(.interactionNotAllowed, sourceLocation: sourceLocation) {
            _ = try vault.readGeneric(service: a.rawValue)
        }
    }

    @Test func changeAndRemovePassphrase() throws {
        try withTemporaryDirectory { tmp in
            let dir = tmp + "/data"
            do {
                let vault = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
                defer { vault.close() }
                _ = try vault.initialize(passphrase: secret("p1"), caller: .owner)
                try Self.addOnePerClass(vault)
                try vault.addGeneric(
                    service: "second-passcode", account: "acct", secret: [9],
                    accessible: .whenPasscodeSetThisDeviceOnly)

                // Change: the old passphrase stops working, the new one opens everything.
                expectFailure(.wrongPassphrase) {
                    _ = try vault.changePassphrase(
                        old: secret("not p1"), new: secret("p2"), caller: .owner)
                }
                let change = try vault.changePassphrase(
                    old: secret("p1"), new: secret("p2"), caller: .owner)
                #expect(change.deletedItems == 0)
                #expect(change.lock.hasPassphrase)
                _ = try vault.lockVault(caller: .owner)
                expectFailure(.wrongPassphrase) {
                    _ = try vault.unlock(passphrase: secret("p1"), caller: .owner)
                }
                _ = try vault.unlock(passphrase: secret("p2"), caller: .owner)
                for a in Accessibility.allCases { Self.expectReadable(vault, a) }

                // Only the owner may change it.
                expectFailure(.permissionDenied) {
                    _ = try vault.changePassphrase(
                        old: secret("p2"), new: nil,
                        caller: try vault.registeredApp("org.example.A"))
                }

                // Remove: deletes exactly the whenPasscodeSet items.
                let removed = try vault.changePassphrase(
                    old: secret("p2"), new: nil, caller: .owner)
                #expect(removed.deletedItems == 2)
                #expect(removed.lock.hasPassphrase == false)
                #expect(removed.lock.state == .unlocked)
                expectFailure(.itemNotFound) {
                    _ = try vault.readGeneric(
                        service: Accessibility.whenPasscodeSetThisDeviceOnly.rawValue)
                }
                expectFailure(.itemNotFound) {
                    _ = try vault.readGeneric(service: "second-passcode")
                }
                for a in Accessibility.allCases where a != .whenPasscodeSetThisDeviceOnly {
                    Self.expectReadable(vault, a)
                }
                #expect(try vault.status(caller: .owner).items == Accessibility.allCases.count - 1)
                expectFailure(.noPassphrase) { _ = try vault.lockVault(caller: .owner) }
                expectFailure(.authFailed) {
                    try vault.addGeneric(
                        service: "p", account: "acct", secret: [1],
                        accessible: .whenPasscodeSetThisDeviceOnly)
                }
                // Removing it again: there is none (NoPassphrase, not "0 deleted", whatever
                // `old` holds).
                expectFailure(.noPassphrase) {
                    _ = try vault.changePassphrase(
                        old: secret("anything"), new: nil, caller: .owner)
                }
            }
            // After a restart the vault without a passphrase is unlocked, every remaining class opens.
            do {
                let vault = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
                defer { vault.close() }
                #expect(vault.lockState.state == .unlocked)
                #expect(vault.lockState.hasPassphrase == false)
                for a in Accessibility.allCases where a != .whenPasscodeSetThisDeviceOnly {
                    Self.expectReadable(vault, a)
                }
                // Setting a passphrase again (no old one) makes whenPasscodeSet usable again.
                let set = try vault.changePassphrase(old: nil, new: secret("p3"), caller: .owner)
                #expect(set.lock.hasPassphrase)
                try vault.addGeneric(
                    service: Accessibility.whenPasscodeSetThisDeviceOnly.rawValue, account: "acct",
                    secret: Array("secret-whenPasscodeSetThisDeviceOnly".utf8),
                    accessible: .whenPasscodeSetThisDeviceOnly)
            }
            let vault = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
            defer { vault.close() }
            #expect(vault.lockState.state == .locked)
            _ = try vault.unlock(passphrase: secret("p3"), caller: .owner)
            for a in Accessibility.allCases { Self.expectReadable(vault, a) }
        }
    }

    /// ChangePassphrase checks the current passphrase: failures there count against the same
    /// rate limit as Unlock, or it would be an unlimited passphrase-guessing oracle.
    @Test func wrongPassphrasesInChangePassphraseAreRateLimited() throws {
        try withTemporaryDirectory { tmp in
            let vault = try Vault(dataDirectory: tmp + "/data", passphrasePolicy: .tests)
            defer { vault.close() }
            _ = try vault.initialize(passphrase: secret("right"), caller: .owner)
            for guess in ["guess1", "guess2", "guess3"] {
                expectFailure(.wrongPassphrase) {
                    _ = try vault.changePassphrase(
                        old: secret(guess), new: secret("mine"), caller: .owner)
                }
            }
            let limited = expectFailure(.rateLimited) {
                _ = try vault.changePassphrase(
                    old: secret("guess4"), new: secret("mine"), caller: .owner)
            }
            #expect((limited?.details.retryAfter ?? 0) > 0)
            expectFailure(.rateLimited) {
                _ = try vault.unlock(passphrase: secret("right"), caller: .owner)
            }
            #expect((try vault.status(caller: .owner).retryAfter ?? 0) > 0)
            // The wait survives a restart.
            vault.close()
            let restarted = try Vault(dataDirectory: tmp + "/data", passphrasePolicy: .tests)
            defer { restarted.close() }
            expectFailure(.rateLimited) {
                _ = try restarted.unlock(passphrase: secret("right"), caller: .owner)
            }
        }
    }

    /// Setting or changing the passphrase leaves nothing in the data directory that opens the
    /// keys without the new one: neither the no-passphrase KEK nor the keys wrapped under the
    /// old KEK, not in the WAL's old frames either (a crash leaves the WAL behind for a copied
    /// data directory or a stolen disk; with few writes its frames stay there for long).
    @Test func aNewPassphraseLeavesNoOldKeyMaterialOnDisk() throws {
        try withVault(initialize: false) { vault, dir in
            _ = try vault.initialize(passphrase: nil, caller: .owner)
            try vault.addGeneric(service: "s", account: "a", secret: [1])
            func keyMaterial() throws -> [String: [UInt8]] {
                var m: [String: [UInt8]] = [:]
                for r in try vault.read({ try $0.rows("SELECT key, value FROM vault_meta") }) {
                    if let k = r[0].text, let v = r[1].blob,
                        k == "kek.nopassphrase" || k.hasPrefix("wrapped.")
                    {
                        m[k] = v
                    }
                }
                return m
            }
            func expectGone(_ old: [String: [UInt8]], _ when: String) throws {
                let files = try FileManager.default.contentsOfDirectory(atPath: dir).filter {
                    $0.hasPrefix("vault.sqlite")
                }
                for f in files {
                    let data = try Data(contentsOf: URL(fileURLWithPath: dir + "/" + f))
                    for (k, v) in old {
                        #expect(
                            data.range(of: Data(v)) == nil, "\(when): the old \(k) is still in \(f)"
                        )
                    }
                }
            }
            let withoutPassphrase = try keyMaterial()
            #expect(withoutPassphrase["kek.nopassphrase"] != nil)
            _ = try vault.changePassphrase(old: nil, new: secret("p1"), caller: .owner)
            try expectGone(withoutPassphrase, "after setting a passphrase")
            let withP1 = try keyMaterial()
            _ = try vault.changePassphrase(old: secret("p1"), new: secret("p2"), caller: .owner)
            try expectGone(withP1, "after changing it")
            _ = try vault.lockVault(caller: .owner)
            _ = try vault.unlock(passphrase: secret("p2"), caller: .owner)
            #expect(try vault.readGeneric(service: "s") == [1])
        }
    }

    /// A vault with the passphrase "right" after three wrong guesses, its last failure then
    /// an hour ahead of now: as if the clock went back an hour since.
    static func failThriceThenSetTheClockBack(_ vault: Vault) throws {
        _ = try vault.initialize(passphrase: secret("right"), caller: .owner)
        for guess in ["guess1", "guess2", "guess3"] {
            expectFailure(.wrongPassphrase) {
                _ = try vault.unlock(passphrase: secret(guess), caller: .owner)
            }
        }
        let record: JSON = ["count": 3, "last": JSON(vault.clock.now.timeIntervalSince1970 + 3600)]
        _ = try vault.write { db in
            try db.run(
                "UPDATE vault_meta SET value = ? WHERE key = 'unlock.failures'",
                [.blob(record.serialized())])
        }
    }

    /// The wait after failed unlocks is at most the documented one (1 s after three failures),
    /// also when the wall clock went back after the failures (NTP correcting a clock that ran
    /// ahead, a machine booted with a wrong time): the failures are then in the future, and
    /// the wait counted from them locked the owner out for as long as the clock had gone back.
    @Test func theUnlockWaitNeverExceedsItsDelayWhenTheClockGoesBack() throws {
        let clock = ManualClock()
        try withVault(initialize: false, clock: clock) { vault, _ in
            try Self.failThriceThenSetTheClockBack(vault)
            // Counted from now (the clock stands still): exactly the 1 s three failures impose.
            let wait = try vault.status(caller: .owner).retryAfter
            #expect(wait == 1, "retryAfter \(wait) s after three failures")
            clock.advance(by: 0.5)
            expectFailure(.rateLimited) {
                _ = try vault.unlock(passphrase: secret("right"), caller: .owner)
            }
            #expect(try vault.status(caller: .owner).retryAfter == 0.5)
            clock.advance(by: 0.5)
            #expect(try vault.status(caller: .owner).retryAfter == 0)
            _ = try vault.unlock(passphrase: secret("right"), caller: .owner)
            #expect(vault.lockState.state == .unlocked)
        }
    }

    /// Status only looks: with the last failure in the future (the clock went back) and a
    /// store that cannot be written (a full disk), it still answers, with the wait counted
    /// from now. It wrote the corrected failure record on the way and failed with the write.
    @Test func statusAnswersWhenTheClockWentBackAndTheStoreCannotBeWritten() throws {
        try withVault(initialize: false) { vault, _ in
            try Self.failThriceThenSetTheClockBack(vault)
            // Every write of the writer's connection fails from here on, as on a full disk.
            _ = try vault.exclusive { try $0.db.execute("PRAGMA query_only=ON") }
            defer { _ = try? vault.exclusive { try $0.db.execute("PRAGMA query_only=OFF") } }
            let status = try vault.status(caller: .owner)
            let wait = status.retryAfter
            #expect(wait > 0 && wait <= 1, "retryAfter \(wait) s after three failures")
            #expect(status.lock.state == .unlocked)
        }
    }

    /// A ChangePassphrase whose right old passphrase unlocked a locked vault and whose change
    /// then failed (a full disk) leaves the vault unlocked, and observers are told so (they
    /// were not: no event, and they showed it locked). An Unlock whose failed-unlock count
    /// cannot be cleared still unlocks (it threw, leaving the vault unlocked unannounced).
    @Test func anUnlockThatHappenedIsAnnouncedEvenWhenTheRestFails() throws {
        try withVault(initialize: false) { vault, _ in
            _ = try vault.initialize(passphrase: secret("right"), caller: .owner)
            _ = try vault.lockVault(caller: .owner)
            let states = LockedList()
            _ = vault.addObserver { event in
                if case .lockState(let s) = event { states.append(s.state.rawValue) }
            }
            // Every write of the writer's connection fails from here on, as on a full disk.
            _ = try vault.exclusive { try $0.db.execute("PRAGMA query_only=ON") }
            defer { _ = try? vault.exclusive { try $0.db.execute("PRAGMA query_only=OFF") } }
            let change = Result {
                try vault.changePassphrase(old: secret("right"), new: secret("new"), caller: .owner)
            }
            #expect((try? change.get()) == nil, "the change cannot be written: \(change)")
            #expect(vault.lockState.state == .unlocked)
            #expect(states.items == ["unlocked"])
            _ = try vault.lockVault(caller: .owner)
            // One failure recorded first, so the right passphrase has a count to clear.
            _ = try vault.exclusive { try $0.db.execute("PRAGMA query_only=OFF") }
            expectFailure(.wrongPassphrase) {
                _ = try vault.unlock(passphrase: secret("wrong"), caller: .owner)
            }
            _ = try vault.exclusive { try $0.db.execute("PRAGMA query_only=ON") }
            let state = try vault.unlock(passphrase: secret("right"), caller: .owner)
            #expect(state.state == .unlocked)
            #expect(states.items == ["unlocked", "locked", "unlocked"])
        }
    }

    /// A passphrase change whose COMMIT fails (a disk filling at that very commit) leaves the
    /// keys in memory as the store has them: it left the memory changed (no passphrase, the
    /// whenPasscodeSet key gone) over a rolled-back store, until a restart.
    @Test func aPassphraseChangeThatDoesNotCommitChangesNothingInMemory() throws {
        try withVault(initialize: false) { vault, dir in
            _ = try vault.initialize(passphrase: secret("p1"), caller: .owner)
            try vault.addGeneric(
                service: "wps", account: "a", secret: [7],
                accessible: .whenPasscodeSetThisDeviceOnly)
            _ = try? vault.exclusive { $0.db.failNextCommit() }
            let removal = Result {
                try vault.changePassphrase(old: secret("p1"), new: nil, caller: .owner)
            }
            #expect((try? removal.get()) == nil, "the removal cannot commit: \(removal)")
            #expect(vault.lockState.hasPassphrase == true)
            #expect(try vault.readGeneric(service: "wps") == [7])
            _ = try vault.lockVault(caller: .owner)
            expectFailure(.wrongPassphrase) {
                _ = try vault.unlock(passphrase: secret("p2"), caller: .owner)
            }
            _ = try vault.unlock(passphrase: secret("p1"), caller: .owner)
            // A change that does not commit: the old passphrase stays the one.
            _ = try? vault.exclusive { $0.db.failNextCommit() }
            let change = Result {
                try vault.changePassphrase(old: secret("p1"), new: secret("p2"), caller: .owner)
            }
            #expect((try? change.get()) == nil, "the change cannot commit: \(change)")
            _ = try vault.lockVault(caller: .owner)
            _ = try vault.unlock(passphrase: secret("p1"), caller: .owner)
            #expect(try vault.readGeneric(service: "wps") == [7])
        }
    }

    @Test func thisDeviceOnlyItemsDoNotOpenWithAnotherDeviceKey() throws {
        try withTemporaryDirectory { tmp in
            let original = tmp + "/original"
            let copy = tmp + "/copy"
            do {
                let vault = try Vault(dataDirectory: original, passphrasePolicy: .tests)
                defer { vault.close() }
                _ = try vault.initialize(passphrase: secret("pass"), caller: .owner)
                try Self.addOnePerClass(vault)
            }
            try FileManager.default.copyItem(atPath: original, toPath: copy)
            let otherKey = (0..<32).map { _ in UInt8.random(in: 0...255) }
            let originalKey = try Data(contentsOf: URL(fileURLWithPath: original + "/device.key"))
            #expect(originalKey.count == 32)
            #expect(Array(originalKey) != otherKey)
            try Data(otherKey).write(to: URL(fileURLWithPath: copy + "/device.key"))

            do {
                let moved = try Vault(dataDirectory: copy, passphrasePolicy: .tests)
                defer { moved.close() }
                #expect(moved.lockState.state == .locked)
                _ = try moved.unlock(passphrase: secret("pass"), caller: .owner)
                #expect(moved.lockState.state == .unlocked)
                Self.expectReadable(moved, .whenUnlocked)
                Self.expectReadable(moved, .afterFirstUnlock)
                for a in Accessibility.allCases where a.isThisDeviceOnly {
                    let e = expectFailure(.notAvailableOnThisDevice) {
                        _ = try moved.readGeneric(service: a.rawValue)
                    }
                }
            }
            // The original, with its own device key, still opens everything.
            let vault = try Vault(dataDirectory: original, passphrasePolicy: .tests)
            defer { vault.close() }
            _ = try vault.unlock(passphrase: secret("pass"), caller: .owner)
            for a in Accessibility.allCases { Self.expectReadable(vault, a) }
        }
    }

    @Test func damagedDeviceKeyIsRefused() throws {
        try withTemporaryDirectory { tmp in
            let dir = tmp + "/data"
            do {
                let v = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
                v.close()
            }
            try Data(repeating: 1, count: 31).write(to: URL(fileURLWithPath: dir + "/device.key"))
            expectFailure(.internalError) {
                _ = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
            }
        }
    }

    @Test func dataDirectoryAndKeyFilesArePrivate() throws {
        try withVault { vault, dir in
            try vault.addGeneric(service: "s", account: "a", secret: [1])
            func mode(_ path: String) throws -> Int {
                (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions]
                    as? NSNumber)?.intValue ?? -1
            }
            #expect(try mode(dir) == 0o700)
            #expect(try mode(dir + "/device.key") == 0o600)
            #expect(try mode(dir + "/vault.sqlite") == 0o600)
        }
    }
}
