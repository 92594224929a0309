import Foundation
import Testing
import VaultProtocol

@testable import VaultCore

/// One write path: every mutation of the vault goes through `GroupCommit` (a group's
/// transaction, `DatabasePool.write`, or `writeHoldingDatabase`, `Exclusive.write`), and the
/// writer's connection refuses, in debug builds, a write anywhere else.
@Suite struct WritePathTests {
    static let insert =
        "INSERT OR REPLACE INTO vault_meta (key, value) VALUES ('write-path-test', x'01')"

    static func stored(_ vault: Vault) throws -> Bool {
        try vault.read { try $0.row("SELECT 1 FROM vault_meta WHERE key = 'write-path-test'") }
            != nil
    }

    #if DEBUG
    /// On the writer's connection, outside the write path's transaction: in autocommit, in a
    /// transaction of `Database.write`, in a read transaction. Each is refused and leaves
    /// nothing; the same statement through `write` and through `Exclusive.write` is stored.
    @Test func aWriteOutsideTheWritePathIsRefused() throws {
        try withVault { vault, _ in
            expectFailure(.internalError) {
                try vault.exclusive { x in _ = try x.db.run(Self.insert) }
            }
            expectFailure(.internalError) {
                try vault.exclusive { x in try x.db.write { db in _ = try db.run(Self.insert) } }
            }
            expectFailure(.internalError) {
                try vault.exclusive { x in
                    try x.db.readTransaction { db in _ = try db.run(Self.insert) }
                }
            }
            #expect(try Self.stored(vault) == false)
            #expect(
                try vault.exclusive { x in x.db.isInTransaction } == false,
                "a refused write left a transaction open")
            try vault.write { db in _ = try db.run(Self.insert) }
            #expect(try Self.stored(vault))
            _ = try vault.write { db in
                try db.run("DELETE FROM vault_meta WHERE key = 'write-path-test'")
            }
            #expect(try Self.stored(vault) == false)
            try vault.exclusive { x in try x.write { db in _ = try db.run(Self.insert) } }
            #expect(try Self.stored(vault))
        }
    }
    #endif

    /// Each mutating operation of the engine takes the write path: the write transactions
    /// `GroupCommit` ended grow with each, and what it changed is there to read.
    @Test func everyMutationGoesThroughTheGroupCommit() throws {
        try withVault(initialize: false) { vault, _ in
            func expectWrites(_ what: String, _ body: () throws -> Void) throws {
                let before = vault.store.writeTransactions
                try body()
                #expect(
                    vault.store.writeTransactions > before,
                    "\(what) wrote nothing through GroupCommit")
            }
            let domain = "org.example.WritePath"
            try expectWrites("initialize") {
                _ = try vault.initialize(passphrase: secret("p1"), caller: .owner)
            }
            try expectWrites("setPreference") {
                try vault.setPreference(
                    domain: domain, key: "a", value: .string("1"), caller: .owner)
            }
            try expectWrites("removePreference") {
                try vault.removePreference(domain: domain, key: "a", caller: .owner)
            }
            try expectWrites("importDomain") {
                _ = try vault.importDomain(
                    domain, values: ["b": .integer(2), "c": .bool(true)], caller: .owner)
            }
            #expect(
                try vault.preferenceDomain(domain, caller: .owner) == [
                    "b": .integer(2), "c": .bool(true),
                ])
            try expectWrites("removeDomain") {
                let removed = try vault.removeDomain(domain, caller: .owner)
                #expect(removed == 2)
            }
            try expectWrites("addItem") {
                _ = try vault.addGeneric(service: "wp", account: "a", secret: [1])
            }
            let query = ItemQuery(
                itemClass: .genericPassword, attributes: ItemAttributes(service: "wp"))
            try expectWrites("updateItems") {
                let updated = try vault.updateItems(
                    query, changes: ItemAttributes(), secret: secret([2]), caller: .owner)
                #expect(updated == 1)
            }
            #expect(try vault.readGeneric(service: "wp") == [2])
            try expectWrites("installApp") {
                _ = try vault.installApp(
                    "org.example.WritePathApp", executable: "/bin/true", caller: .owner)
            }
            try expectWrites("uninstallApp") {
                _ = try vault.uninstallApp("org.example.WritePathApp", caller: .owner)
            }
            try expectWrites("changePassphrase") {
                _ = try vault.changePassphrase(old: secret("p1"), new: secret("p2"), caller: .owner)
            }
            _ = try vault.lockVault(caller: .owner)
            try expectWrites("a failed unlock (its count)") {
                expectFailure(.wrongPassphrase) {
                    _ = try vault.unlock(passphrase: secret("p1"), caller: .owner)
                }
            }
            try expectWrites("an unlock (the count cleared)") {
                _ = try vault.unlock(passphrase: secret("p2"), caller: .owner)
            }
            try expectWrites("deleteItems") {
                let deleted = try vault.deleteItems(query, caller: .owner)
                #expect(deleted == 1)
            }
        }
    }
}
