import Foundation
import Testing
import VaultProtocol

@testable import VaultCore

/// Per-program access in the engine (docs/access.md): creators, the policy's decision, the
/// questions (a scripted `AccessAsker`), remembered grants and denials. The real programs,
/// dialogs and doors are in IntegrationTests' ProgramAccessTests.
@Suite struct ProgramAccessEngineTests {
    /// Answers every question with `answer`, counting them.
    final class Asker: AccessAsker, @unchecked Sendable {
        let lock = NSLock()
        var answer: AccessChoice?
        var asked: [AccessRequest] = []
        init(_ answer: AccessChoice?) { self.answer = answer }
        func ask(_ request: AccessRequest, timeout: Double) -> AccessChoice? {
            lock.withLock {
                asked.append(request)
                return answer
            }
        }
        var count: Int { lock.withLock { asked.count } }
    }

    static func program(_ path: String, writable: Bool = false, inode: UInt64 = 1)
        -> ProgramIdentity
    {
        ProgramIdentity(
            kind: .executable, path: path, device: 1, inode: inode, userWritable: writable)
    }

    static func caller(_ p: ProgramIdentity, risk: String? = nil) -> Caller {
        var c = Caller.owner
        c.program = p
        c.impersonationRisk = risk
        return c
    }

    static let query = ItemQuery(
        itemClass: .genericPassword, attributes: ItemAttributes(service: "s", account: "a"),
        matchAll: false)

    static func read(_ vault: Vault, _ c: Caller) throws -> [UInt8]? {
        plain(try vault.copyMatching(query, returnData: true, caller: c).first?.data)
    }

    @Test func aNewVaultConfirmsAndRemembers() throws {
        try withVault { vault, _ in
            let writer = Self.caller(Self.program("/usr/bin/writer"))
            let reader = Self.caller(Self.program("/usr/bin/reader"))
            #expect(try vault.secretAccessMode().mode == .confirm)
            try vault.addGeneric(service: "s", account: "a", secret: [1, 2], caller: writer)
            // The creator reads without a question; no prompter: refused at once.
            #expect(try Self.read(vault, writer) == [1, 2])
            expectFailure(.interactionNotAllowed) { _ = try Self.read(vault, reader) }
            // Searching is not gated.
            #expect(
                try vault.copyMatching(Self.query, returnData: false, caller: reader).count == 1)

            let asker = Asker(.deny)
            vault.accessGate.asker = asker
            expectFailure(.authFailed) { _ = try Self.read(vault, reader) }
            #expect(asker.count == 1)
            #expect(asker.asked.first?.items.first?.creator?.path == "/usr/bin/writer")
            // Denied: not asked again for a while.
            expectFailure(.authFailed) { _ = try Self.read(vault, reader) }
            #expect(asker.count == 1)

            vault.accessGate.forgetDenials()
            asker.answer = .allowOnce
            #expect(try Self.read(vault, reader) == [1, 2])
            #expect(try Self.read(vault, reader) == [1, 2])
            #expect(asker.count == 3)

            asker.answer = .alwaysAllow
            #expect(try Self.read(vault, reader) == [1, 2])
            asker.answer = .deny
            #expect(try Self.read(vault, reader) == [1, 2])
            #expect(asker.count == 4)
            let grants = try vault.accessGrants(caller: .owner)
            #expect(grants.map(\.program.path) == ["/usr/bin/reader"])

            // A loader variable: refused even so, without a question.
            let preloaded = Self.caller(Self.program("/usr/bin/reader"), risk: "LD_PRELOAD")
            expectFailure(.authFailed) { _ = try Self.read(vault, preloaded) }
            #expect(asker.count == 4)

            #expect(
                try vault.revokeAccess(
                    nil, programPath: "/usr/bin/reader", script: nil, caller: .owner) == 1)
            expectFailure(.authFailed) { _ = try Self.read(vault, reader) }
            #expect(asker.count == 5)
        }
    }

    @Test func strictAndOpen() throws {
        try withVault { vault, _ in
            let writer = Self.caller(Self.program("/usr/bin/writer"))
            let reader = Self.caller(Self.program("/usr/bin/reader"))
            try vault.addGeneric(service: "s", account: "a", secret: [7], caller: writer)
            let asker = Asker(.alwaysAllow)
            vault.accessGate.asker = asker
            vault.accessGate.configuredMode = .strict
            expectFailure(.authFailed) { _ = try Self.read(vault, reader) }
            #expect(asker.count == 0)
            vault.accessGate.configuredMode = .open
            #expect(try Self.read(vault, reader) == [7])
            #expect(asker.count == 0)
            let mode = try vault.secretAccessMode()
            #expect(mode.mode == .open && mode.configured)
        }
    }

    /// A program the user may replace keeps its identity only for its file; one only root
    /// may replace, by its path (an upgrade keeps its grants).
    @Test func anUpgradeKeepsOnlyRootOwnedPrograms() {
        let old = Self.program("/usr/bin/tool", inode: 1)
        let upgraded = Self.program("/usr/bin/tool", inode: 2)
        #expect(old.matchKey == upgraded.matchKey)
        let mine = Self.program("/home/u/bin/tool", writable: true, inode: 1)
        let rebuilt = Self.program("/home/u/bin/tool", writable: true, inode: 2)
        #expect(mine.matchKey != rebuilt.matchKey)
        var script = old
        script.kind = .interpreter
        script.script = "/home/u/a.py"
        var other = script
        other.script = "/home/u/b.py"
        #expect(script.matchKey != other.matchKey)
        // The key follows every change of the fields it is made of.
        #expect(script.matchKey == "interpreter\u{0}/usr/bin/tool\u{0}/home/u/a.py")
        other.userWritable = true
        #expect(other.matchKey == "interpreter\u{0}/usr/bin/tool\u{0}1:1\u{0}/home/u/b.py")
        #expect(ProgramIdentity(json: script.json) == script)
    }

    /// Items added before creators were recorded are no program's own.
    @Test func anUnknownCreatorIsNeverTheReader() {
        var reader = Caller.owner
        reader.program = Self.program("/usr/bin/reader")
        #expect(
            Policy.secretRelease(to: reader, creator: nil, granted: false, mode: .confirm) == .ask)
        #expect(
            Policy.secretRelease(to: reader, creator: nil, granted: true, mode: .strict) == .allow)
        #expect(
            Policy.secretRelease(to: .owner, creator: nil, granted: false, mode: .strict) == .allow)
    }

    /// A vault made before per-program access keeps `open` (the migration records it); a
    /// store migrated before its vault is initialised gets `confirm` at its initialisation.
    @Test func aMigratedVaultStaysOpen() throws {
        try withTemporaryDirectory { dir in
            try FileManager.default.copyItem(
                atPath: MigrationTextTests.oldestFixture.path, toPath: dir + "/old.sqlite")
            let old = try Database(path: dir + "/old.sqlite")
            defer { old.close() }
            try Schema.migrator.migrate(old)
            #expect(try AccessStore.defaultMode(in: old) == .open)
            let empty = try Database(path: dir + "/new.sqlite")
            defer { empty.close() }
            try Schema.migrator.migrate(empty)
            #expect(try empty.row("SELECT 1 FROM vault_meta WHERE key = 'access.default'") == nil)
        }
        try withVault { vault, _ in
            let mode = try vault.secretAccessMode()
            #expect(mode.mode == .confirm && !mode.configured)
        }
    }
}
