import Foundation
import Testing
import VaultProtocol

@testable import VaultCore

/// The primary key's uniqueness held by SQLite (`items_primary_key`) under the in-memory
/// lookup index: what the index misses, the constraint catches, as DuplicateItem, never
/// two items; and a store that already holds two rows of one primary key migrates to one
/// item, the other set aside, nothing deleted.
@Suite("Keychain store uniqueness")
struct StoreUniquenessTests {
    @Test func theConstraintCatchesWhatTheIndexMisses() throws {
        try withVault { vault, _ in
            try vault.addGeneric(service: "svc", account: "acct", secret: [1])
            try vault.addGeneric(service: "svc", account: "other", secret: [2])
            vault.keychain.bypassIndexForTesting = true
            defer { vault.keychain.bypassIndexForTesting = false }
            // An add of the same primary key: the index is not asked, SQLite refuses the row.
            expectFailure(.duplicateItem) {
                try vault.addGeneric(service: "svc", account: "acct", secret: [3])
            }
            // An update that would give one item another's primary key.
            expectFailure(.duplicateItem) {
                _ = try vault.updateItems(
                    ItemQuery(
                        itemClass: .genericPassword,
                        attributes: ItemAttributes(service: "svc", account: "other")),
                    changes: ItemAttributes(account: "acct"), secret: nil, caller: .owner)
            }
            // Other primary keys still go in; every item is as it was.
            try vault.addGeneric(service: "svc", account: "third", secret: [4])
            #expect(try vault.readGeneric(service: "svc", account: "acct") == [1])
            #expect(try vault.readGeneric(service: "svc", account: "other") == [2])
            #expect(try vault.readGeneric(service: "svc", account: "third") == [4])
            #expect(try vault.status(caller: .owner).items == 3)
            // The same class's key in another access group, or the other class, is another item.
            try vault.addGeneric(
                service: "svc", account: "acct", secret: [5], accessGroup: "team.shared")
            _ = try vault.addItem(
                .internetPassword, attributes: ItemAttributes(account: "acct", server: "svc"),
                secret: secret([6]), caller: .owner)
            #expect(try vault.status(caller: .owner).items == 5)
        }
    }

    /// A store written before the constraint, holding a second row of one primary key (as a
    /// fault in the index could have let in): the migration keeps the later row, moves the
    /// earlier to `items_set_aside` with every column, and adds the constraint.
    @Test func aStoreHoldingTwoRowsOfOnePrimaryKeyKeepsTheLaterOne() throws {
        try withTemporaryDirectory { tmp in
            let dir = tmp + "/data"
            do {
                let v = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
                _ = try v.initialize(passphrase: nil, caller: .owner)
                try v.addGeneric(service: "svc", account: "acct", secret: Array("first".utf8))
                try v.addGeneric(service: "svc", account: "keep", secret: [7])
                v.close()
            }
            let columns =
                "uuid, item_class, access_group, accessible, synchronizable, primary_key_hash, lookup_hash, account_hash, attributes, wrapped_key, secret, generation"
            var duplicated: [SQLValue] = []
            do {
                // The store as it was before the migration, with a copy of the first item's
                // row under a later id (it decrypts: the same uuid is bound into it).
                let db = try Database(path: dir + "/vault.sqlite")
                defer { db.close() }
                try db.execute("DROP INDEX items_primary_key")
                try db.execute("DROP TABLE items_set_aside")
                try db.run(
                    "DELETE FROM schema_migrations WHERE name = '2026-12-02-items-primary-key-unique'"
                )
                try db.run(
                    "INSERT INTO items (id, \(columns)) SELECT 10, \(columns) FROM items WHERE id = 1"
                )
                duplicated = try #require(
                    try db.row("SELECT id, \(columns) FROM items WHERE id = 1"))
                #expect(try db.row("SELECT count(*) FROM items")?[0].int64 == 3)
            }
            let v = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
            defer { v.close() }
            #expect(try v.status(caller: .owner).items == 2)
            #expect(try v.readGeneric(service: "svc", account: "acct") == Array("first".utf8))
            #expect(try v.readGeneric(service: "svc", account: "keep") == [7])
            expectFailure(.duplicateItem) {
                try v.addGeneric(service: "svc", account: "acct", secret: [1])
            }
            let aside = try v.read { db in try db.rows("SELECT id, \(columns) FROM items_set_aside")
            }
            #expect(aside == [duplicated])
            let kept = try v.read { db in try db.rows("SELECT kept_id FROM items_set_aside") }
            #expect(kept == [[.integer(10)]])
            #expect(
                try v.read { db in try db.rows("SELECT id FROM items ORDER BY id") } == [
                    [.integer(2)], [.integer(10)],
                ])
        }
    }
}
