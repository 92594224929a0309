import Testing
import VaultProtocol

@testable import VaultCore

/// The policy in the engine: owner-only operations and subscriptions, whatever front-end
/// calls (the front-ends' method tables are held to the interfaces in VaultdTests).
@Suite struct PolicyTableTests {
    /// Owner-only operations refuse an app in the engine itself, whatever front-end calls.
    @Test func theEngineRefusesAnAppEveryOwnerOnlyOperation() throws {
        try withVault { vault, _ in
            let app = try vault.registeredApp("org.example.App")
            expectFailure(.permissionDenied) {
                _ = try vault.unlock(passphrase: secret("p"), caller: app)
            }
            expectFailure(.permissionDenied) {
                _ = try vault.unlockFromKeyring(caller: app) {
                    Issue.record("the keyring was asked")
                    return secret("p")
                }
            }
            expectFailure(.permissionDenied) { _ = try vault.lockVault(caller: app) }
            expectFailure(.permissionDenied) {
                _ = try vault.initialize(passphrase: nil, caller: app)
            }
            expectFailure(.permissionDenied) {
                _ = try vault.changePassphrase(old: nil, new: secret("n"), caller: app)
            }
            expectFailure(.permissionDenied) {
                _ = try vault.createRecoveryKey(passphrase: secret("p"), caller: app)
            }
            expectFailure(.permissionDenied) { try vault.removeRecoveryKey(caller: app) }
            expectFailure(.permissionDenied) {
                _ = try vault.unlock(recoveryKey: secret("k"), caller: app)
            }
            expectFailure(.permissionDenied) {
                _ = try vault.resetPassphrase(
                    recoveryKey: secret("k"), new: secret("n"), caller: app)
            }
            expectFailure(.permissionDenied) {
                _ = try vault.purgeCaches(appID: nil, bytes: nil, running: [], caller: app)
            }
            expectFailure(.permissionDenied) {
                _ = try vault.installApp("org.example.B", executable: "/usr/bin/true", caller: app)
            }
            expectFailure(.permissionDenied) {
                _ = try vault.uninstallApp("org.example.App", caller: app)
            }
            expectFailure(.permissionDenied) { _ = try vault.allApps(caller: app) }
            expectFailure(.permissionDenied) { _ = try vault.app("org.example.App", caller: app) }
            expectFailure(.permissionDenied) {
                _ = try vault.backup(
                    to: "/nonexistent/b.age", recipients: [.passphrase(secret("p"))],
                    includeDeviceBound: false, caller: app)
            }
            expectFailure(.permissionDenied) {
                _ = try vault.restore(
                    from: "/nonexistent/b.age", identities: [], newPassphrase: nil, merge: true,
                    caller: app)
            }
            expectFailure(.permissionDenied) { try vault.setAlias(caller: app) }
            expectFailure(.permissionDenied) { try vault.registerPrompter(caller: app) }
            expectFailure(.permissionDenied) { _ = try vault.checkStore(caller: app) }
            expectFailure(.permissionDenied) { _ = try vault.accessGrants(caller: app) }
            expectFailure(.permissionDenied) {
                _ = try vault.grantAccess(
                    ItemQuery(itemClass: nil, attributes: ItemAttributes(), matchAll: true),
                    to: .app("org.example.Other"), caller: app)
            }
            expectFailure(.permissionDenied) {
                _ = try vault.revokeAccess(nil, programPath: nil, script: nil, caller: app)
            }
            let sync = SyncService(vault: vault)
            expectFailure(.permissionDenied) {
                _ = try sync.initialize(folder: "/tmp", in: vault.session(for: app))
            }
            expectFailure(.permissionDenied) {
                _ = try sync.join(folder: "/tmp", in: vault.session(for: app))
            }
            expectFailure(.permissionDenied) {
                _ = try sync.approve(code: "00", in: vault.session(for: app))
            }
            expectFailure(.permissionDenied) { _ = try sync.status(in: vault.session(for: app)) }
            expectFailure(.permissionDenied) { try sync.leave(in: vault.session(for: app)) }
            expectFailure(.permissionDenied) {
                try sync.remove(
                    device: String(repeating: "ab", count: 16), in: vault.session(for: app))
            }
            expectFailure(.permissionDenied) { _ = try sync.conflicts(in: vault.session(for: app)) }
            expectFailure(.permissionDenied) {
                _ = try sync.settleConflict(id: "00", restore: true, in: vault.session(for: app))
            }
            // The kinds refused above are exactly the owner-only ones.
            let ownerOnly = Set(VaultCore.Operation.Kind.allCases.filter { $0.audience == .owner })
            #expect(
                ownerOnly == [
                    .unlock, .unlockFromKeyring, .lock, .initialize, .changePassphrase, .backup,
                    .restore, .checkStore, .purgeCaches, .installApp, .uninstallApp,
                    .listApps, .showApp, .setAlias, .registerPrompter, .listAccess, .grantAccess,
                    .revokeAccess, .syncInit, .syncJoin, .syncApprove, .syncStatus, .syncLeave,
                    .syncRemove, .syncConflicts, .syncSettleConflict,
                ])
        }
    }

    /// What a subscription is sent is the policy's: another app's domain and cache stay unseen.
    @Test func anAppsSubscriptionSeesOnlyWhatItMayRead() throws {
        try withVault { vault, _ in
            let app = try vault.registeredApp("org.example.App", appGroups: ["group.org.example"])
            let prefs = try vault.session(for: app).subscribe(.observePreferences(domains: nil)) {
                _ in
            }.grant
            #expect(prefs.domains == ["org.example.App"])
            #expect(
                Policy.visible(
                    .preference(domain: "org.example.App", key: "k", value: nil, sequence: 1),
                    to: prefs))
            #expect(
                !Policy.visible(
                    .preference(domain: "org.example.Other", key: "k", value: nil, sequence: 1),
                    to: prefs))
            #expect(
                !Policy.visible(
                    .lockState(
                        LockState(state: .unlocked, unlockedSinceStart: true, hasPassphrase: true)),
                    to: prefs))
            expectFailure(.missingEntitlement) {
                _ = try vault.session(for: app).subscribe(
                    .observePreferences(domains: ["org.example.Other"])
                ) { _ in }
            }
            let caches = try vault.session(for: app).subscribe(.observeCachePurges) { _ in }.grant
            #expect(
                Policy.visible(.cachePurge(appID: "org.example.App", freedBytes: 1), to: caches))
            #expect(
                !Policy.visible(.cachePurge(appID: "org.example.Other", freedBytes: 1), to: caches))
            let owners = try vault.session(for: .owner).subscribe(.observeCachePurges) { _ in }
                .grant
            #expect(
                Policy.visible(.cachePurge(appID: "org.example.Other", freedBytes: 1), to: owners))
            expectFailure(.internalError) {
                _ = try vault.session(for: .owner).subscribe(.status) { _ in }
            }
        }
    }

    /// The Secret Service's signals leave the session filtered: an app's subscription is sent
    /// the lock state and the changes to items of its own groups, never another group's.
    @Test func itemChangeSubscriptionsShowOnlyTheCallersGroups() throws {
        try withVault { vault, _ in
            let app = try vault.registeredApp("org.example.App")
            let grant = try vault.session(for: app).subscribe(.observeItemChanges) { _ in }.grant
            func change(_ group: String, row: Int64) -> ItemChange {
                ItemChange(
                    .created, itemClass: .genericPassword, accessGroup: group, service: "s",
                    account: "a", row: row)
            }
            let mine = change(app.defaultAccessGroup, row: 1)
            let others = change("org.example.Other", row: 2)
            let owners = change(Caller.ownerAccessGroup, row: 3)
            guard
                case .itemsChanged(let shown)? = Policy.shown(
                    .itemsChanged([others, mine, owners]), to: grant)
            else {
                Issue.record("the app's own change was not shown")
                return
            }
            #expect(shown == [mine])
            #expect(Policy.shown(.itemsChanged([others, owners]), to: grant) == nil)
            let locked = LockState(state: .locked, unlockedSinceStart: true, hasPassphrase: true)
            #expect(Policy.visible(.lockState(locked), to: grant))
            #expect(!Policy.visible(.keychainChanged, to: grant))
            let daemon = try vault.daemonSession(for: .secretServiceSignals).subscribe(
                .observeItemChanges
            ) { _ in }.grant
            guard
                case .itemsChanged(let all)? = Policy.shown(
                    .itemsChanged([others, mine, owners]), to: daemon)
            else {
                Issue.record("vaultd's own subscription was not shown the changes")
                return
            }
            #expect(all == [others, mine, owners])
        }
    }
}
