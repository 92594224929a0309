import Foundation
import Synchronization
import TestSupport
import Testing
import VaultProtocol

@testable import VaultCore

/// The keychain's in-memory lookup index (`ItemIndex`) checked against a model of what is
/// stored: every query by service, server, account or both finds exactly the model's items,
/// with their secrets, through duplicates, colliding updates, deletes, commits that fail,
/// concurrent group commits, and a reopening (where the index is built again from the table).
@Suite("Item index")
struct ItemIndexTests {
    /// An item as the model knows it: its class, service (or server) and account.
    struct Key: Hashable, CustomStringConvertible {
        var internet: Bool
        var name: String
        var account: String
        var description: String { "\(internet ? "internet" : "generic") \(name)/\(account)" }

        var attributes: ItemAttributes {
            internet
                ? ItemAttributes(account: account, server: name)
                : ItemAttributes(service: name, account: account)
        }
    }

    /// A query as the model knows it: any of class, name, account.
    struct Query: CustomStringConvertible {
        var internet: Bool?
        var name: String?
        var account: String?
        var description: String {
            "\(internet.map { $0 ? "internet" : "generic" } ?? "any") \(name ?? "*")/\(account ?? "*")"
        }

        func matches(_ k: Key) -> Bool {
            (internet == nil || internet == k.internet) && (name == nil || name == k.name)
                && (account == nil || account == k.account)
        }

        var itemQuery: ItemQuery {
            var a = ItemAttributes(account: account)
            if let name {
                if internet == true { a.server = name } else { a.service = name }
            }
            return ItemQuery(
                itemClass: internet.map { $0 ? .internetPassword : .genericPassword },
                attributes: a, matchAll: true)
        }
    }

    static let names = ["s0", "s1", "s2", "s3"]
    static let accounts = ["a0", "a1", "a2", "a3", "a4"]

    /// What `query` finds: each item's key and secret.
    static func found(_ vault: Vault, _ query: Query) throws -> [Key: [UInt8]] {
        do {
            var out: [Key: [UInt8]] = [:]
            for f in try vault.copyMatching(query.itemQuery, returnData: true, caller: .owner) {
                let internet = f.itemClass == .internetPassword
                let k = Key(
                    internet: internet,
                    name: (internet ? f.attributes.server : f.attributes.service) ?? "?",
                    account: f.attributes.account ?? "?")
                #expect(out[k] == nil, "\(k) found twice by \(query)")
                out[k] = plain(f.data)
            }
            return out
        } catch let e as VaultFailure where e.code == .itemNotFound {
            return [:]
        }
    }

    /// Every query of the small key space finds what the model holds.
    static func expectAllQueries(_ vault: Vault, _ model: [Key: [UInt8]], _ step: String) throws {
        var queries: [Query] = [Query(internet: nil, name: nil, account: nil)]
        for internet in [false, true] {
            for name in names {
                queries.append(Query(internet: internet, name: name, account: nil))
                for account in accounts {
                    queries.append(Query(internet: internet, name: name, account: account))
                }
            }
        }
        for account in accounts {
            queries.append(Query(internet: nil, name: nil, account: account))
        }
        for q in queries {
            let expected = model.filter { q.matches($0.key) }
            let got = try found(vault, q)
            #expect(
                got == expected,
                "\(step): \(q) found \(got.keys.sorted { $0.description < $1.description }), expected \(expected.keys.sorted { $0.description < $1.description })"
            )
            if got != expected { return }
        }
    }

    @Test func randomOperationsFindWhatTheModelHoldsThroughFailuresAndReopening() throws {
        try withTemporaryDirectory { tmp in
            let dir = tmp + "/data"
            var vault = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
            _ = try vault.initialize(passphrase: nil, caller: .owner)
            var model: [Key: [UInt8]] = [:]
            var rng = SeededRandom(seed: 8)
            func randomKey() -> Key {
                Key(
                    internet: Int.random(in: 0..<4, using: &rng) == 0,
                    name: Self.names.randomElement(using: &rng)!,
                    account: Self.accounts.randomElement(using: &rng)!)
            }
            func randomQuery() -> Query {
                let k = randomKey()
                switch Int.random(in: 0..<3, using: &rng) {
                case 0: return Query(internet: k.internet, name: k.name, account: nil)
                case 1: return Query(internet: nil, name: nil, account: k.account)
                default: return Query(internet: k.internet, name: k.name, account: k.account)
                }
            }
            var counts: [String: Int] = [:]
            for step in 0..<600 {
                let label = "step \(step)"
                switch Int.random(in: 0..<10, using: &rng) {
                case 0...3:
                    let k = randomKey()
                    let bytes = [
                        UInt8(truncatingIfNeeded: step), UInt8(truncatingIfNeeded: step >> 8),
                    ]
                    let result = Result {
                        try vault.addItem(
                            k.internet ? .internetPassword : .genericPassword,
                            attributes: k.attributes, secret: secret(bytes), caller: .owner)
                    }
                    if model[k] != nil {
                        #expect(
                            code(result) == .duplicateItem,
                            "\(label): add of \(k) over an existing one: \(result)")
                        counts["duplicate", default: 0] += 1
                    } else {
                        #expect((try? result.get()) != nil, "\(label): add of \(k): \(result)")
                        model[k] = bytes
                        counts["add", default: 0] += 1
                    }
                case 4, 5:
                    // An update moves the matches to another account, or another service or
                    // server (all of them, or none when one would collide).
                    let q = randomQuery()
                    let newAccount =
                        Bool.random(using: &rng) ? Self.accounts.randomElement(using: &rng)! : nil
                    let newName = newAccount == nil ? Self.names.randomElement(using: &rng)! : nil
                    let matches = model.keys.filter { q.matches($0) }
                    let moved = matches.map { k in
                        Key(
                            internet: k.internet, name: newName ?? k.name,
                            account: newAccount ?? k.account)
                    }
                    var changes = ItemAttributes(account: newAccount)
                    if let newName {
                        // service belongs to generic passwords, server to internet ones.
                        guard q.internet != nil else { continue }
                        if q.internet! {
                            changes.server = newName
                        } else {
                            changes.service = newName
                        }
                    }
                    let result = Result {
                        try vault.updateItems(
                            q.itemQuery, changes: changes, secret: nil, caller: .owner)
                    }
                    let failed = code(result)
                    let others = Set(model.keys).subtracting(matches)
                    if matches.isEmpty {
                        #expect(failed == .itemNotFound, "\(label): update of \(q): \(result)")
                    } else if Set(moved).count < moved.count || !others.isDisjoint(with: moved) {
                        #expect(
                            failed == .duplicateItem,
                            "\(label): update of \(q) to \(moved): \(result)")
                        counts["colliding update", default: 0] += 1
                    } else {
                        #expect(
                            (try? result.get()) == matches.count,
                            "\(label): update of \(q) to \(moved): \(result)")
                        let secrets = matches.map { model[$0]! }
                        for k in matches { model[k] = nil }
                        for (k, s) in zip(moved, secrets) { model[k] = s }
                        counts["update", default: 0] += 1
                    }
                case 6, 7:
                    let q = randomQuery()
                    let matches = model.keys.filter { q.matches($0) }
                    let result = Result { try vault.deleteItems(q.itemQuery, caller: .owner) }
                    if matches.isEmpty {
                        #expect(
                            code(result) == .itemNotFound, "\(label): delete of \(q): \(result)")
                    } else {
                        #expect(
                            (try? result.get()) == matches.count,
                            "\(label): delete of \(q): \(result)")
                        for k in matches { model[k] = nil }
                        counts["delete", default: 0] += 1
                    }
                case 8:
                    // A write whose COMMIT fails (as on a disk filling then) changes nothing.
                    let q = randomQuery()
                    guard model.keys.contains(where: q.matches) else { continue }
                    _ = try? vault.exclusive { $0.db.failNextCommit() }
                    let result = Result { try vault.deleteItems(q.itemQuery, caller: .owner) }
                    #expect(
                        (try? result.get()) == nil,
                        "\(label): delete of \(q) whose commit fails: \(result)")
                    counts["failed commit", default: 0] += 1
                default:
                    // Reopened: the index is built again from the table.
                    vault.close()
                    vault = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
                    counts["reopen", default: 0] += 1
                }
                if step % 5 == 0 || step > 590 { try Self.expectAllQueries(vault, model, label) }
            }
            vault.close()
            // Every kind of step ran, several times.
            for kind in [
                "add", "duplicate", "update", "colliding update", "delete", "failed commit",
                "reopen",
            ] {
                #expect(
                    counts[kind, default: 0] >= 5, "\(kind) ran \(counts[kind, default: 0]) times")
            }
            #expect(model.count >= 5, "the model ends with \(model.count) items")
        }
    }

    /// Internet passwords of one server and account (git's, one per repository path) share
    /// the service-or-server and account listings; each has a primary-key listing naming it
    /// alone, which the DuplicateItem check of every write goes through: through the other
    /// two, each write read all of them (an Update of 10,000 such items took 140 s).
    @Test func aPrimaryKeyListsOneRowAmongManyOfOneServerAndAccount() throws {
        try withVault { vault, _ in
            let n = 300
            for i in 0..<n {
                _ = try vault.addItem(
                    .internetPassword,
                    attributes: ItemAttributes(
                        account: "bob", server: "git.example", path: "org/repo\(i).git"),
                    secret: secret([UInt8(i % 256)]), caller: .owner)
            }
            let rows = try vault.exclusive {
                try $0.db.rows("SELECT id, primary_key_hash, lookup_hash, account_hash FROM items")
            }
            #expect(rows.count == n)
            let index = vault.keychain.itemIndex
            for r in rows {
                #expect(index.candidates([(.primaryKey, r[1].blob!)]) == [r[0].int64!])
            }
            #expect(index.candidates([(.lookup, rows[0][2].blob!)]).count == n)
            #expect(index.candidates([(.account, rows[0][3].blob!)]).count == n)
        }
    }

    /// A query naming a service and an account, each held by hundreds of rows and both by
    /// one: the index names that one row (rows listed under both), not the hundreds of the
    /// shorter list, which a lookup (on a reader) or an Update or Delete (on the writer,
    /// under the engine lock) would read one by one.
    @Test func aServiceAndAnAccountOfManyRowsEachNameTheRowsHoldingBoth() throws {
        try withVault { vault, _ in
            let n = 300
            for i in 0..<n {
                try vault.addGeneric(service: "tokens", account: "user\(i)", secret: [1])
                try vault.addGeneric(service: "app\(i)", account: "bob", secret: [2])
            }
            try vault.addGeneric(service: "tokens", account: "bob", secret: [3])
            let rows = try vault.exclusive {
                try $0.db.rows(
                    "SELECT id, lookup_hash, account_hash FROM items ORDER BY id DESC LIMIT 1")
            }
            let (id, service, account) = (rows[0][0].int64!, rows[0][1].blob!, rows[0][2].blob!)
            let index = vault.keychain.itemIndex
            #expect(index.candidates([(.lookup, service)]).count == n + 1)
            #expect(index.candidates([(.account, account)]).count == n + 1)
            #expect(index.candidates([(.lookup, service), (.account, account)]) == [id])
            #expect(try vault.readGeneric(service: "tokens", account: "bob") == [3])
        }
    }

    /// Writers adding at once share group commits, each write in a savepoint of its own: of
    /// writers adding the same items, one each is stored and the others get DuplicateItem.
    @Test func concurrentAddsOfTheSameItemsStoreOneEach() throws {
        try withVault { vault, _ in
            let writers = 8
            let items = 40
            let stored = Mutex(0)
            let duplicates = Mutex(0)
            let other = Mutex([String]())
            DispatchQueue.concurrentPerform(iterations: writers) { w in
                for i in 0..<items {
                    do {
                        try vault.addGeneric(
                            service: "svc\(i % 10)", account: "acct\(i)", secret: [UInt8(w)])
                        stored.withLock { $0 += 1 }
                    } catch let e as VaultFailure where e.code == .duplicateItem {
                        duplicates.withLock { $0 += 1 }
                    } catch {
                        other.withLock { $0.append("\(error)") }
                    }
                }
            }
            #expect(other.withLock { $0 } == [])
            #expect(stored.withLock { $0 } == items)
            #expect(duplicates.withLock { $0 } == items * (writers - 1))
            func count(_ a: ItemAttributes) throws -> Int {
                try vault.copyMatching(
                    ItemQuery(attributes: a, matchAll: true), returnData: false, caller: .owner
                ).count
            }
            for i in 0..<items {
                let n = try count(ItemAttributes(service: "svc\(i % 10)", account: "acct\(i)"))
                #expect(n == 1, "item \(i)")
            }
            let inService = try count(ItemAttributes(service: "svc3"))
            #expect(inService == items / 10)
        }
    }
}

/// The `VaultFailure` code a result failed with; nil when it succeeded or failed otherwise.
private func code<T>(_ result: Result<T, Error>) -> VaultFailure.Code? {
    if case .failure(let e as VaultFailure) = result { return e.code }
    return nil
}
