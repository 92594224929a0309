import Foundation
import Synchronization
import Testing
import VaultProtocol

@testable import VaultCore

/// A verifier that answers as told and counts the checks it was asked for.
final class ScriptedPresence: PresenceVerifier {
    let answer: PresenceOutcome
    let asked = Mutex<[RequestingProcess]>([])

    init(_ answer: PresenceOutcome) { self.answer = answer }

    func verifyPresence(of process: RequestingProcess) -> PresenceOutcome {
        asked.withLock { $0.append(process) }
        return answer
    }

    var count: Int { asked.withLock { $0.count } }
}

/// The policy core's user-presence decision (`Policy/Presence.swift`) through the session, with
/// a verifier that answers as told; the real polkit is PresenceTests' (IntegrationTests).
@Suite("User presence (policy)")
struct PresencePolicyTests {
    static let process = RequestingProcess(pid: 4242, startTime: 77, uid: 1000, mayWait: true)

    /// Adds a presence-protected item and a plain one, and returns the owner's session for
    /// `process`.
    func protectedVault(
        _ vault: Vault, verifier: ScriptedPresence?, grace: Int = 10,
        process: RequestingProcess? = PresencePolicyTests.process
    ) throws -> VaultSession {
        vault.presence.verifier = verifier
        vault.presence.setGrace(seconds: grace)
        var a = ItemAttributes(service: "svc", account: "guarded")
        a.accessControl = .userPresence
        let s = try vault.session(for: .owner)
        let stored = try s.addItem(.genericPassword, attributes: a, secret: secret("pw-1"))
        #expect(stored.accessControl == .userPresence)
        _ = try s.addItem(
            .genericPassword, attributes: ItemAttributes(service: "svc", account: "plain"),
            secret: secret("pw-2"))
        return process.map(s.requested(by:)) ?? s
    }

    func read(_ s: VaultSession, _ account: String) throws -> [UInt8]? {
        plain(
            try s.copyMatching(
                ItemQuery(attributes: ItemAttributes(service: "svc", account: account)),
                returnData: true
            ).first?.data)
    }

    @Test func aConfirmedCheckReleasesTheSecretAndTheGraceSparesTheNext() throws {
        try withVault { vault, _ in
            let v = ScriptedPresence(.confirmed)
            let s = try protectedVault(vault, verifier: v)
            #expect(try read(s, "guarded") == Array("pw-1".utf8))
            #expect(v.count == 1)
            #expect(v.asked.withLock { $0 } == [Self.process])
            // Within the window: not asked again.
            #expect(try read(s, "guarded") == Array("pw-1".utf8))
            #expect(v.count == 1)
            // Another process (same pid, another start time: the pid was reused) is asked.
            let other = s.requested(
                by: RequestingProcess(pid: 4242, startTime: 78, uid: 1000, mayWait: true))
            #expect(try read(other, "guarded") == Array("pw-1".utf8))
            #expect(v.count == 2)
        }
    }

    @Test func graceZeroAsksEveryTime() throws {
        try withVault { vault, _ in
            let v = ScriptedPresence(.confirmed)
            let s = try protectedVault(vault, verifier: v, grace: 0)
            _ = try read(s, "guarded")
            _ = try read(s, "guarded")
            #expect(v.count == 2)
        }
    }

    @Test func aRefusalIsInteractionNotAllowedAndSaysWhy() throws {
        try withVault { vault, _ in
            let v = ScriptedPresence(.notConfirmed("a wrong password"))
            let s = try protectedVault(vault, verifier: v)
            let e = expectFailure(.interactionNotAllowed) { _ = try read(s, "guarded") }
            #expect(e?.message.contains("a wrong password") == true)
            // A refusal is not remembered: the next read asks again.
            expectFailure(.interactionNotAllowed) { _ = try read(s, "guarded") }
            #expect(v.count == 2)
        }
    }

    @Test func searchesAttributesAndPlainItemsAreNotGated() throws {
        try withVault { vault, _ in
            let v = ScriptedPresence(.notConfirmed("no agent"))
            let s = try protectedVault(vault, verifier: v)
            #expect(try read(s, "plain") == Array("pw-2".utf8))
            let found = try s.copyMatching(
                ItemQuery(attributes: ItemAttributes(service: "svc"), matchAll: true),
                returnData: false)
            #expect(found.count == 2)
            #expect(found.filter { $0.attributes.accessControl == .userPresence }.count == 1)
            // Matching on the access control itself.
            var q = ItemAttributes()
            q.accessControl = .userPresence
            let protected = try s.copyMatching(
                ItemQuery(attributes: q, matchAll: true), returnData: false)
            #expect(protected.map(\.attributes.account) == ["guarded"])
            #expect(v.count == 0)
        }
    }

    @Test func noVerifierOrNoProcessFailClosedAndABusThreadIsToldToHandOver() throws {
        try withVault { vault, _ in
            let s = try protectedVault(vault, verifier: nil)
            expectFailure(.interactionNotAllowed) { _ = try read(s, "guarded") }
            let v = ScriptedPresence(.confirmed)
            vault.presence.verifier = v
            let anonymous = try vault.session(for: .owner)
            expectFailure(.interactionNotAllowed) { _ = try read(anonymous, "guarded") }
            // A thread that may not wait: told so, nothing asked; then where it may.
            let bus = s.requested(
                by: RequestingProcess(pid: 9, startTime: 1, uid: 1000, mayWait: false))
            var toldToHandOver = false
            do { _ = try read(bus, "guarded") } catch is PresenceWouldWait { toldToHandOver = true }
            #expect(toldToHandOver)
            #expect(v.count == 0)
            #expect(try read(bus.waiting(.wait), "guarded") == Array("pw-1".utf8))
            #expect(v.count == 1)
            // Within the window, the thread that may not wait is served.
            #expect(try read(bus, "guarded") == Array("pw-1".utf8))
            #expect(v.count == 1)
        }
    }

    @Test func synchronizableWithAnAccessControlIsParam() throws {
        try withVault { vault, _ in
            let s = try protectedVault(vault, verifier: ScriptedPresence(.confirmed))
            var a = ItemAttributes(service: "svc", account: "sync", synchronizable: true)
            a.accessControl = .userPresence
            expectFailure(.param) {
                _ = try s.addItem(.genericPassword, attributes: a, secret: secret("x"))
            }
            // Nor may an Update make a protected item synchronizable.
            expectFailure(.param) {
                _ = try s.updateItems(
                    ItemQuery(attributes: ItemAttributes(service: "svc", account: "guarded")),
                    changes: ItemAttributes(synchronizable: true), secret: nil)
            }
            // An Update can add it, and absent in an Update changes nothing.
            var add = ItemAttributes()
            add.accessControl = .userPresence
            #expect(
                try s.updateItems(
                    ItemQuery(attributes: ItemAttributes(service: "svc", account: "plain")),
                    changes: add, secret: nil) == 1)
            _ = try s.updateItems(
                ItemQuery(attributes: ItemAttributes(service: "svc", account: "guarded")),
                changes: ItemAttributes(label: "renamed"), secret: nil)
            let all = try s.copyMatching(
                ItemQuery(attributes: ItemAttributes(service: "svc"), matchAll: true),
                returnData: false)
            #expect(all.allSatisfy { $0.attributes.accessControl == .userPresence })
        }
    }

    @Test func aBackupAsksForPresenceAndKeepsTheAccessControl() throws {
        try withVault { vault, dir in
            let refused = ScriptedPresence(.notConfirmed("no agent"))
            let s = try protectedVault(vault, verifier: refused)
            let path = dir + "/../backup.age"
            let recipient = Age.Recipient.passphrase(secret("backup words"), workFactor: 10)
            let identity = Age.Identity.passphrase(secret("backup words"))
            expectFailure(.interactionNotAllowed) {
                _ = try s.backup(
                    to: path, recipients: [recipient], includeDeviceBound: false)
            }
            vault.presence.verifier = ScriptedPresence(.confirmed)
            _ = try s.backup(to: path, recipients: [recipient], includeDeviceBound: false)
            try withVault { restored, _ in
                let r = try restored.session(for: .owner)
                _ = try r.restore(
                    from: path, identities: [identity], newPassphrase: nil, merge: true)
                let found = try r.copyMatching(
                    ItemQuery(attributes: ItemAttributes(service: "svc", account: "guarded")),
                    returnData: false)
                #expect(found.first?.attributes.accessControl == .userPresence)
            }
        }
    }

    /// Per-program access and presence together (docs/keychain.md, "With per-program access"):
    /// the access decision comes first, so a refused program raises no presence check; a
    /// session that may not wait is told to run again for either question, the access one
    /// first; one that waits asks both in turn.
    @Test func theAccessDecisionComesBeforePresence() throws {
        try withVault { vault, _ in
            let v = ScriptedPresence(.confirmed)
            vault.presence.verifier = v
            vault.presence.setGrace(seconds: 0)
            typealias Engine = ProgramAccessEngineTests
            let writer = try vault.session(for: Engine.caller(Engine.program("/usr/bin/writer")))
            var a = ItemAttributes(service: "svc", account: "guarded")
            a.accessControl = .userPresence
            _ = try writer.addItem(.genericPassword, attributes: a, secret: secret("pw-1"))
            let reader = try vault.session(for: Engine.caller(Engine.program("/usr/bin/reader")))
                .requested(by: Self.process)
            let asker = Engine.Asker(.deny)
            vault.accessGate.asker = asker
            expectFailure(.authFailed) { _ = try read(reader, "guarded") }
            #expect(asker.count == 1)
            #expect(v.count == 0)

            // Deferred (the Secret Service's first run): the access question is the one told.
            vault.accessGate.forgetDenials()
            asker.answer = .allowOnce
            var toldToAsk = false
            do {
                _ = try read(reader.waiting(.deferred), "guarded")
            } catch is AccessConfirmationNeeded { toldToAsk = true }
            #expect(toldToAsk)
            #expect(v.count == 0)
            // Run again where it may wait: asked, then presence checked, then released.
            #expect(
                try read(reader.waiting(.deferred).waiting(.wait), "guarded") == Array("pw-1".utf8))
            #expect(asker.count == 2)
            #expect(v.count == 1)

            // Always allowed: a deferred run passes the access decision and is told to wait
            // for presence instead.
            asker.answer = .alwaysAllow
            #expect(try read(reader, "guarded") == Array("pw-1".utf8))
            #expect(v.count == 2)
            var toldToWait = false
            do { _ = try read(reader.waiting(.deferred), "guarded") } catch is PresenceWouldWait {
                toldToWait = true
            }
            #expect(toldToWait)
            #expect(asker.count == 3)
            #expect(v.count == 2)
        }
    }
}
