import Foundation
import Testing
import VaultProtocol

@testable import VaultCore

/// The Secret Service's lookup attributes on keychain items: exact matching through keyed
/// hashes, encrypted at rest, kept in step by update and delete, and within the caller's groups.
@Suite struct LookupAttributesTests {
    static func add(
        _ vault: Vault, _ id: String, _ attributes: [String: String], group: String? = nil,
        caller: Caller = .owner
    ) throws {
        var a = ItemAttributes(
            service: Vault.secretServiceService, account: id, label: id, accessGroup: group)
        a.lookupAttributes = ExactDictionary(attributes)
        _ = try vault.addItem(
            .genericPassword, attributes: a, secret: secret("secret of " + id), caller: caller)
    }

    static func search(_ vault: Vault, _ attributes: [String: String], caller: Caller = .owner)
        throws -> [String]
    {
        var a = ItemAttributes(service: Vault.secretServiceService)
        a.lookupAttributes = ExactDictionary(attributes)
        do {
            return try vault.copyMatching(
                ItemQuery(itemClass: .genericPassword, attributes: a, matchAll: true),
                returnData: false, includingLocked: true, caller: caller
            )
            .compactMap { $0.attributes.account }.sorted()
        } catch let e as VaultFailure where e.code == .itemNotFound {
            return []
        }
    }

    @Test func searchesMatchEveryNamedPairExactly() throws {
        try withVault { vault, _ in
            try Self.add(
                vault, "one",
                ["xdg:schema": "org.example.Password", "user": "alice", "host": "a.example"])
            try Self.add(
                vault, "two",
                ["xdg:schema": "org.example.Password", "user": "bob", "host": "a.example"])
            try Self.add(vault, "three", ["user": "alice"])
            #expect(try Self.search(vault, ["user": "alice"]) == ["one", "three"])
            #expect(try Self.search(vault, ["host": "a.example"]) == ["one", "two"])
            #expect(try Self.search(vault, ["host": "a.example", "user": "bob"]) == ["two"])
            #expect(try Self.search(vault, [:]) == ["one", "three", "two"])
            // Never a pattern: a prefix, another case, a value under another name.
            #expect(try Self.search(vault, ["user": "ali"]).isEmpty)
            #expect(try Self.search(vault, ["user": "Alice"]).isEmpty)
            #expect(try Self.search(vault, ["host": "alice"]).isEmpty)
            // A name and value split differently hash differently ("a" + "b=c" is not "a=b" + "c").
            try Self.add(vault, "split", ["a": "b=c"])
            #expect(try Self.search(vault, ["a=b": "c"]).isEmpty)
            #expect(try Self.search(vault, ["a": "b=c"]) == ["split"])
        }
    }

    @Test func updatesAndDeletesKeepTheHashesInStep() throws {
        try withVault { vault, _ in
            try Self.add(vault, "one", ["k": "old"])
            var changes = ItemAttributes()
            changes.lookupAttributes = ["k": "new"]
            let q = ItemQuery(
                itemClass: .genericPassword,
                attributes: ItemAttributes(service: Vault.secretServiceService, account: "one"))
            #expect(try vault.updateItems(q, changes: changes, secret: nil, caller: .owner) == 1)
            #expect(try Self.search(vault, ["k": "old"]).isEmpty)
            #expect(try Self.search(vault, ["k": "new"]) == ["one"])
            #expect(try vault.deleteItems(q, caller: .owner) == 1)
            #expect(try Self.search(vault, ["k": "new"]).isEmpty)
            try Self.add(vault, "again", ["k": "new"])
            #expect(try Self.search(vault, ["k": "new"]) == ["again"])
        }
    }

    /// An update that keeps an item's key columns (its secret, its label) writes only the
    /// sealed columns; one that changes a key column (the account, the accessibility) writes
    /// the whole row. Either way the item is found by its lookup attributes and keys as they
    /// are now, and by nothing it no longer has.
    @Test func updatesOfSealedColumnsAndOfKeysAreBothFoundAfterwards() throws {
        try withVault { vault, _ in
            try Self.add(vault, "one", ["k": "v"])
            try Self.add(vault, "other", ["k": "w"])
            func query(_ account: String) -> ItemQuery {
                ItemQuery(
                    itemClass: .genericPassword,
                    attributes: ItemAttributes(
                        service: Vault.secretServiceService, account: account))
            }
            func secretOf(_ account: String) throws -> [UInt8]? {
                try vault.copyMatching(
                    query(account), returnData: true, includingLocked: false, caller: .owner
                ).first.flatMap { plain($0.data) }
            }
            var label = ItemAttributes()
            label.label = "renamed"
            #expect(
                try vault.updateItems(query("one"), changes: label, secret: nil, caller: .owner)
                    == 1)
            #expect(
                try vault.updateItems(
                    query("one"), changes: ItemAttributes(), secret: secret("new secret"),
                    caller: .owner) == 1)
            #expect(try Self.search(vault, ["k": "v"]) == ["one"])
            #expect(try secretOf("one") == Array("new secret".utf8))

            var account = ItemAttributes()
            account.account = "uno"
            #expect(
                try vault.updateItems(query("one"), changes: account, secret: nil, caller: .owner)
                    == 1)
            #expect(try Self.search(vault, ["k": "v"]) == ["uno"])
            #expect(try secretOf("uno") == Array("new secret".utf8))
            expectFailure(.itemNotFound) { _ = try secretOf("one") }

            var accessible = ItemAttributes()
            accessible.accessible = .afterFirstUnlock
            #expect(
                try vault.updateItems(
                    query("uno"), changes: accessible, secret: nil, caller: .owner) == 1)
            #expect(try Self.search(vault, ["k": "v"]) == ["uno"])
            #expect(try secretOf("uno") == Array("new secret".utf8))
            #expect(try Self.search(vault, ["k": "w"]) == ["other"])
            #expect(try secretOf("other") == Array("secret of other".utf8))
        }
    }

    @Test func anAppSearchesOnlyItsOwnGroups() throws {
        try withVault { vault, _ in
            let a = try vault.registeredApp("org.example.A")
            let b = try vault.registeredApp("org.example.B")
            try Self.add(vault, "a1", ["svc": "shared"], caller: a)
            try Self.add(vault, "b1", ["svc": "shared"], caller: b)
            #expect(try Self.search(vault, ["svc": "shared"], caller: a) == ["a1"])
            #expect(try Self.search(vault, ["svc": "shared"], caller: b) == ["b1"])
            #expect(try Self.search(vault, ["svc": "shared"]) == ["a1", "b1"])
            #expect(try vault.accessGroups(caller: a) == ["org.example.A"])
            #expect(
                try vault.accessGroups(caller: .owner) == [
                    "user", "org.example.A", "org.example.B",
                ])
            expectFailure(.missingEntitlement) {
                _ = try vault.accessGroup("org.example.B", caller: a)
            }
        }
    }

    /// A search lists the rows of its rarest pair first: a pair on one item (or none) goes
    /// first whatever the others hold; when every pair is on several items, the fewest does,
    /// counted up to `rarityCap`; equal counts, and the pairs after the first, keep their
    /// order.
    @Test func theRarestLookupPairGoesFirst() throws {
        try withTemporaryDirectory { tmp in
            let db = try Database(path: tmp + "/t.sqlite")
            defer { db.close() }
            try db.execute(
                "CREATE TABLE item_lookup_attributes (hash BLOB NOT NULL, item_id INTEGER NOT NULL, PRIMARY KEY (hash, item_id)) WITHOUT ROWID"
            )
            // Pair k is on `counts[k]` items.
            let counts = [100, 70, 5, 1, 0, 5, 3]
            let pairs = counts.indices.map { [UInt8(ascii: "p"), UInt8($0)] }
            for (pair, n) in zip(pairs, counts) {
                for id in 0..<n {
                    try db.run(
                        "INSERT INTO item_lookup_attributes VALUES (?, ?)",
                        [.blob(pair), .integer(Int64(id))])
                }
            }
            func order(_ ks: [Int]) throws -> [Int] {
                try KeychainStore.rarestFirst(ks.map { pairs[$0] }, in: db).map { Int($0[1]) }
            }
            #expect(try order([0, 3]) == [3, 0])
            #expect(try order([3, 0]) == [3, 0])
            #expect(try order([0, 1, 4, 3]) == [4, 0, 1, 3])
            #expect(try order([0, 1, 2]) == [2, 0, 1])
            #expect(try order([2, 1, 6, 0]) == [6, 2, 1, 0])
            // Over the cap, 100 and 70 count alike: their order stays.
            #expect(try order([0, 1]) == [0, 1])
            #expect(try order([1, 0]) == [1, 0])
            #expect(try order([5, 2]) == [5, 2])
            #expect(try order([2, 5]) == [2, 5])
            #expect(try order([0]) == [0])
            #expect(try KeychainStore.rowCount(ofPair: pairs[0], upTo: 64, in: db) == 64)
            #expect(try KeychainStore.rowCount(ofPair: pairs[2], upTo: 64, in: db) == 5)
        }
    }

    /// The owner's collections come from the stored groups' loose index scan: the same
    /// groups, in the same byte order, as DISTINCT gives, Unicode-equivalent names kept
    /// apart, and a group gone once its last item is.
    @Test func storedAccessGroupsAreTheDistinctGroupsInByteOrder() throws {
        try withVault { vault, _ in
            let a = try vault.registeredApp("org.example.A")
            for (i, group) in ["user", "\u{e9}", "e\u{301}", "zz", "user", "\u{e9}"].enumerated() {
                try Self.add(vault, "o\(i)", ["n": "\(i)"], group: group)
            }
            try Self.add(vault, "a1", ["n": "a"], caller: a)
            func both() throws -> ([String], [String]) {
                try vault.read { db in
                    (
                        try db.rows(Vault.storedAccessGroupsSQL).compactMap { $0[0].text },
                        try db.rows("SELECT DISTINCT access_group FROM items ORDER BY access_group")
                            .compactMap { $0[0].text }
                    )
                }
            }
            var (scanned, distinct) = try both()
            #expect(scanned.elementsEqual(distinct) { $0.sameBytes($1) })
            #expect(scanned.count == 5)
            #expect(
                scanned.map { Array($0.utf8) }
                    == scanned.map { Array($0.utf8) }.sorted { $0.lexicographicallyPrecedes($1) })
            var zz = ItemAttributes(service: Vault.secretServiceService, accessGroup: "zz")
            zz.account = "o3"
            #expect(
                try vault.deleteItems(
                    ItemQuery(itemClass: .genericPassword, attributes: zz), caller: .owner) == 1)
            (scanned, distinct) = try both()
            #expect(scanned.elementsEqual(distinct) { $0.sameBytes($1) })
            #expect(!scanned.contains("zz"))
            #expect(scanned.count == 4)
        }
    }

    @Test func sessionItemsAreEachCallersOwn() throws {
        try withVault { vault, _ in
            let a = try vault.registeredApp("org.example.A")
            let b = try vault.registeredApp("org.example.B")
            let idA = try vault.addSessionItem(
                label: "a", attributes: ["k": "v"], secret: secret("sa"), replace: true, caller: a)
            _ = try vault.addSessionItem(
                label: "b", attributes: ["k": "v"], secret: secret("sb"), replace: true, caller: b)
            // Replace: the same attributes of the same caller's are one item.
            #expect(
                try vault.addSessionItem(
                    label: "a2", attributes: ["k": "v"], secret: secret("sa2"), replace: true,
                    caller: a) == idA)
            let seenByA = try vault.sessionItems(matching: ["k": "v"], secrets: true, caller: a)
            #expect(seenByA.map { plain($0.data) } == [Array("sa2".utf8)])
            #expect(seenByA.first?.attributes.label == "a2")
            #expect(
                try vault.sessionItems(matching: [:], secrets: false, caller: .owner).count == 2)
            // B can neither change nor delete A's.
            expectFailure(.itemNotFound) {
                try vault.updateSessionItem(idA, secret: secret("x"), caller: b)
            }
            #expect(try vault.deleteSessionItems(idA, caller: b) == 0)
            #expect(try vault.deleteSessionItems(nil, caller: b) == 1)
            #expect(
                try vault.sessionItems(matching: [:], secrets: false, caller: .owner).count == 1)
            #expect(
                try vault.sessionItems(matching: ["k": "other"], secrets: false, caller: a).isEmpty)
        }
    }

    @Test func theAttributesAreNotInTheStoreInClear() throws {
        try withVault { vault, dir in
            try Self.add(vault, "one", ["distinctive-name-q7": "distinctive-value-z9"])
            for file in ["vault.sqlite", "vault.sqlite-wal"] {
                guard let bytes = FileManager.default.contents(atPath: dir + "/" + file) else {
                    continue
                }
                for needle in ["distinctive-name-q7", "distinctive-value-z9"] {
                    #expect(bytes.range(of: Data(needle.utf8)) == nil, "\(needle) in \(file)")
                }
            }
        }
    }

    @Test func tooManyAttributesAreRefused() throws {
        try withVault { vault, _ in
            var many: [String: String] = [:]
            for i in 0...ItemAttributes.maximumLookupAttributes { many["k\(i)"] = "v" }
            var a = ItemAttributes(service: Vault.secretServiceService, account: "x")
            a.lookupAttributes = ExactDictionary(many)
            // The wire form is what bounds them (the engine takes what its front-ends parsed).
            #expect(throws: VaultError.self) { _ = try ItemAttributes(json: a.json) }
        }
    }
}
