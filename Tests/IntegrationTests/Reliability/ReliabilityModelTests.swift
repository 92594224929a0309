import Foundation
import TestSupport
import Testing
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Concurrency: 16 clients make random keychain and preference calls against
/// vaultd and, at the same time, against an in-memory model of the same semantics. Every
/// reply must be the one the model predicts; at the end vaultd's whole state must equal the
/// model's.
///
/// The model is exact where one client owns the keys (each client has its own accounts and
/// its own preferences domain: Add/CopyMatching/Update (also renaming the account, which can
/// collide)/Delete, Set/Remove/Get). Where clients race on shared keys it checks what racing
/// cannot change: for shared keychain items, that successful Adds minus successful Deletes
/// equal whether the item exists, and that its secret is one some successful Add wrote; for
/// shared preference keys, that the final value is the last write by real time order where
/// that order is known (a write that was acknowledged before another was sent cannot win).
@Suite struct ReliabilityModelTests {
    static let clients = 16
    static let service = "model"
    static let sharedService = "shared"
    static let sharedDomain = "com.example.model.shared"
    static let sharedAccounts = (0..<4).map { "s\($0)" }
    static let sharedKeys = (0..<3).map { "s\($0)" }

    static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    /// A random property-list value: every type, nested a little, with awkward corners
    /// (Int64 extremes, -0.0, nan, inf, fractional dates, decomposed Unicode, empty data).
    static func randomValue(_ r: inout SeededRandom, depth: Int = 0) -> PlistValue {
        switch Int.random(in: 0..<(depth < 2 ? 9 : 7), using: &r) {
        case 0:
            let pool = [
                "", "plain", "caf\u{E9}", "cafe\u{301}", "\u{1F510} key", "tab\tnew\nline",
                "quote\"back\\slash", "\u{0}nul",
            ]
            return .string(
                pool.randomElement(using: &r)! + String(Int.random(in: 0...999, using: &r)))
        case 1:
            return .integer(
                [Int64.min, Int64.max, 0, -1, Int64.random(in: Int64.min...Int64.max, using: &r)]
                    .randomElement(using: &r)!)
        case 2:
            return .real(
                [
                    -0.0, .infinity, -.infinity, .nan, .ulpOfOne,
                    Double.random(in: -1e300...1e300, using: &r), 0.1,
                ].randomElement(using: &r)!)
        case 3: return .bool(Bool.random(using: &r))
        case 4:
            return .date(
                Date(
                    timeIntervalSinceReferenceDate: Double(
                        Int.random(in: -2_000_000_000...2_000_000_000, using: &r)) + [
                            0, 0.5, 0.125, 0.001,
                        ].randomElement(using: &r)!))
        case 5: return .data(Data(r.bytes(Int.random(in: 0...64, using: &r))))
        case 6: return .string(String(repeating: "v", count: Int.random(in: 0...200, using: &r)))
        case 7:
            return .array(
                (0..<Int.random(in: 0...4, using: &r)).map { _ in randomValue(&r, depth: depth + 1)
                })
        default:
            var d: PlistDictionary = [:]
            for i in 0..<Int.random(in: 0...4, using: &r) {
                d["k\(i)"] = randomValue(&r, depth: depth + 1)
            }
            return .dict(d)
        }
    }

    /// `@unchecked Sendable`: each client is run by one thread, and read by the test once that
    /// thread has stopped.
    final class Client: @unchecked Sendable {
        struct Item: Equatable {
            var secret: [UInt8]
            var label: String
        }
        struct SharedWrite {
            var key: String
            var value: PlistValue?
            var sent: UInt64
            var acknowledged: UInt64
        }

        let id: Int
        var random: SeededRandom
        var items: [String: Item] = [:]
        var values: PlistDictionary = [:]
        /// Shared keychain: secrets of successful Adds, and counts, per account.
        var sharedAdded: [String: [[UInt8]]] = [:]
        var sharedDeleted: [String: Int] = [:]
        var sharedWrites: [SharedWrite] = []
        var mismatches: [String] = []
        /// Replies by kind (ok, or the error's name), to show the races and collisions happened.
        var outcomes: [String: Int] = [:]
        var calls = 0
        var sequence = 0

        init(id: Int, seed: UInt64) {
            self.id = id
            random = SeededRandom(seed: seed &+ UInt64(id) &* 104_729)
        }

        var domain: String { "com.example.model.c\(id)" }
        var accounts: [String] { (0..<6).map { "c\(id)-a\($0)" } }
        var keys: [String] { (0..<5).map { "p\($0)" } }

        func query(_ account: String, service: String = ReliabilityModelTests.service) -> JSON {
            ["service": .string(service), "account": .string(account)]
        }

        func secret() -> [UInt8] {
            sequence += 1
            return Array("c\(id)#\(sequence):".utf8)
                + random.bytes(Int.random(in: 1...1500, using: &random))
        }

        func expect(_ what: String, _ ok: Bool, _ outcome: ExactClient.Outcome) {
            outcomes[
                outcome.errorName.map { String($0.split(separator: ".").last ?? "") } ?? "ok",
                default: 0] += 1
            if !ok { mismatches.append("client \(id) call \(calls) \(what): got \(outcome)") }
        }

        func isError(_ o: ExactClient.Outcome, _ name: String) -> Bool { o.errorName == name }

        /// One random call, checked against the model.
        func step(_ c: ExactClient) {
            calls += 1
            let a = accounts.randomElement(using: &random)!
            let k = keys.randomElement(using: &random)!
            switch Int.random(in: 0..<100, using: &random) {
            case 0..<14:  // Add
                let item = Item(secret: secret(), label: "label \(sequence)")
                let o = c.call(
                    "io.vaultd.Keychain.Add",
                    [
                        "class": "genericPassword",
                        "attributes": [
                            "service": .string(ReliabilityModelTests.service),
                            "account": .string(a), "label": .string(item.label),
                        ], "data": Wire.base64(item.secret),
                    ])
                if items[a] != nil {
                    expect(
                        "Add \(a) over an existing item",
                        isError(o, "io.vaultd.Keychain.DuplicateItem"), o)
                } else {
                    expect("Add \(a)", o.parameters?["attributes"]?["account"]?.stringValue == a, o)
                    if o.parameters != nil { items[a] = item }
                }
            case 14..<26:  // CopyMatching one, with data and attributes
                let o = c.call(
                    "io.vaultd.Keychain.CopyMatching",
                    [
                        "class": "genericPassword", "query": query(a), "returnData": true,
                        "returnAttributes": true,
                    ])
                if let want = items[a] {
                    let got = o.parameters?["items"]?.arrayValue
                    let data = got?.first?["data"]?.stringValue.flatMap { Data(base64Encoded: $0) }
                        .map(Array.init)
                    let label = got?.first?["attributes"]?["label"]?.stringValue
                    expect(
                        "CopyMatching \(a)",
                        got?.count == 1 && data == want.secret && label == want.label, o)
                } else {
                    expect(
                        "CopyMatching absent \(a)", isError(o, "io.vaultd.Keychain.ItemNotFound"), o
                    )
                }
            case 26..<36:  // Update secret and/or label
                var changes: JSONObject = [:]
                var new = items[a] ?? Item(secret: [], label: "")
                var p: JSONObject = ["class": "genericPassword", "query": query(a)]
                if Bool.random(using: &random) {
                    new.label = "relabel \(calls)"
                    changes["label"] = .string(new.label)
                    p["attributes"] = .object(changes)
                }
                if changes.isEmpty || Bool.random(using: &random) {
                    new.secret = secret()
                    p["data"] = Wire.base64(new.secret)
                }
                let o = c.call("io.vaultd.Keychain.Update", p)
                if items[a] != nil {
                    expect("Update \(a)", o.parameters?["count"] == 1, o)
                    if o.parameters != nil { items[a] = new }
                } else {
                    expect("Update absent \(a)", isError(o, "io.vaultd.Keychain.ItemNotFound"), o)
                }
            case 36..<44:  // Update that renames the account (can collide)
                let to = accounts.randomElement(using: &random)!
                let o = c.call(
                    "io.vaultd.Keychain.Update",
                    [
                        "class": "genericPassword", "query": query(a),
                        "attributes": ["account": .string(to)],
                    ])
                if items[a] == nil {
                    expect("rename absent \(a)", isError(o, "io.vaultd.Keychain.ItemNotFound"), o)
                } else if to != a && items[to] != nil {
                    expect(
                        "rename \(a) onto existing \(to)",
                        isError(o, "io.vaultd.Keychain.DuplicateItem"), o)
                } else {
                    expect("rename \(a) to \(to)", o.parameters?["count"] == 1, o)
                    if o.parameters != nil {
                        let item = items.removeValue(forKey: a)
                        items[to] = item
                    }
                }
            case 44..<52:  // Delete
                let o = c.call(
                    "io.vaultd.Keychain.Delete", ["class": "genericPassword", "query": query(a)])
                if items[a] != nil {
                    expect("Delete \(a)", o.parameters?["count"] == 1, o)
                    if o.parameters != nil { items[a] = nil }
                } else {
                    expect("Delete absent \(a)", isError(o, "io.vaultd.Keychain.ItemNotFound"), o)
                }
            case 52..<56:  // all of mine, attributes only
                let o = c.call(
                    "io.vaultd.Keychain.CopyMatching",
                    [
                        "class": "genericPassword",
                        "query": ["service": .string(ReliabilityModelTests.service)],
                        "matchLimit": "all",
                    ])
                let mine = Set(
                    (o.parameters?["items"]?.arrayValue ?? []).compactMap {
                        $0["attributes"]?["account"]?.stringValue
                    }.filter { $0.hasPrefix("c\(id)-") })
                if o.errorName == "io.vaultd.Keychain.ItemNotFound" {
                    expect("CopyMatching all (none at all)", items.isEmpty, o)
                } else {
                    expect(
                        "CopyMatching all: \(mine.sorted()) vs \(items.keys.sorted())",
                        mine == Set(items.keys), o)
                }
            case 56..<68:  // Preferences.Set
                let v = ReliabilityModelTests.randomValue(&random)
                let o = c.call(
                    "io.vaultd.Preferences.Set",
                    ["domain": .string(domain), "key": .string(k), "value": v.tagged])
                expect("Set \(k)", o.parameters != nil, o)
                if o.parameters != nil { values[k] = v }
            case 68..<73:  // Preferences.Remove
                let o = c.call(
                    "io.vaultd.Preferences.Remove", ["domain": .string(domain), "key": .string(k)])
                expect("Remove \(k)", o.parameters != nil, o)
                if o.parameters != nil { values[k] = nil }
            case 73..<82:  // Preferences.Get
                let o = c.call(
                    "io.vaultd.Preferences.Get", ["domain": .string(domain), "key": .string(k)])
                let got: PlistValue?? = o.parameters.map { p in
                    guard let v = p["value"], !v.isNull else { return nil }
                    return try? PlistValue(tagged: v)
                }
                expect(
                    "Get \(k) (want \(values[k].map { "\($0)" } ?? "nil"))",
                    got.map { $0 == values[k] } ?? false, o)
            case 82..<88:  // shared keychain item: Add
                let s = ReliabilityModelTests.sharedAccounts.randomElement(using: &random)!
                let secret = secret()
                let o = c.call(
                    "io.vaultd.Keychain.Add",
                    [
                        "class": "genericPassword",
                        "attributes": query(s, service: ReliabilityModelTests.sharedService),
                        "data": Wire.base64(secret),
                    ])
                if o.parameters != nil {
                    sharedAdded[s, default: []].append(secret)
                } else {
                    expect("shared Add \(s)", isError(o, "io.vaultd.Keychain.DuplicateItem"), o)
                }
            case 88..<92:  // shared keychain item: Delete
                let s = ReliabilityModelTests.sharedAccounts.randomElement(using: &random)!
                let o = c.call(
                    "io.vaultd.Keychain.Delete",
                    [
                        "class": "genericPassword",
                        "query": query(s, service: ReliabilityModelTests.sharedService),
                    ])
                if let n = o.parameters?["count"]?.intValue {
                    expect("shared Delete \(s) count", n == 1, o)
                    sharedDeleted[s, default: 0] += n
                } else {
                    expect("shared Delete \(s)", isError(o, "io.vaultd.Keychain.ItemNotFound"), o)
                }
            default:  // shared preference: Set or Remove, timed
                let s = ReliabilityModelTests.sharedKeys.randomElement(using: &random)!
                let value: PlistValue? =
                    Int.random(in: 0..<5, using: &random) == 0
                    ? nil : .string("client \(id) write \(calls)")
                let sent = ReliabilityModelTests.now()
                let o =
                    value.map {
                        c.call(
                            "io.vaultd.Preferences.Set",
                            [
                                "domain": .string(ReliabilityModelTests.sharedDomain),
                                "key": .string(s), "value": $0.tagged,
                            ])
                    }
                    ?? c.call(
                        "io.vaultd.Preferences.Remove",
                        ["domain": .string(ReliabilityModelTests.sharedDomain), "key": .string(s)])
                let acknowledged = ReliabilityModelTests.now()
                expect("shared Set \(s)", o.parameters != nil, o)
                if o.parameters != nil {
                    sharedWrites.append(
                        SharedWrite(key: s, value: value, sent: sent, acknowledged: acknowledged))
                }
            }
        }
    }

    @Test(.timeLimit(.minutes(5))) func sixteenRacingClientsAgreeWithTheModel() throws {
        let d = try Daemon()
        defer { d.close() }
        let seed = Stress.seed()
        try Wire.initWithoutPassphrase(try ExactClient(path: d.socketPath))
        let callsPerClient = Stress.count(400)
        let deadline = Date().addingTimeInterval(Stress.seconds(75))
        let clients = (0..<Self.clients).map { Client(id: $0, seed: seed) }
        let path = d.socketPath
        let started = Date()
        onThreads(Self.clients) { i in
            let m = clients[i]
            guard let c = try? ExactClient(path: path) else {
                m.mismatches.append("client \(i): cannot connect")
                return
            }
            while m.calls < callsPerClient && Date() < deadline && m.mismatches.count < 5 {
                m.step(c)
            }
        }
        let elapsed = Date().timeIntervalSince(started)
        for m in clients { for x in m.mismatches.prefix(5) { Issue.record("seed \(seed): \(x)") } }

        // The end state, all of it.
        let c = try ExactClient(path: d.socketPath)
        let stored = try Wire.allGenericPasswords(c)
        var own: [String: Client.Item] = [:]
        var shared: [String: [UInt8]] = [:]
        for item in stored {
            switch item.service {
            case Self.service:
                own[item.account] = Client.Item(secret: item.secret, label: item.label ?? "")
            case Self.sharedService: shared[item.account] = item.secret
            default: Issue.record("an item nobody wrote: \(item)")
            }
        }
        var expected: [String: Client.Item] = [:]
        for m in clients { expected.merge(m.items) { a, _ in a } }
        #expect(
            own == expected,
            "seed \(seed): keychain differs from the model: extra \(Set(own.keys).subtracting(expected.keys).sorted()), missing \(Set(expected.keys).subtracting(own.keys).sorted()), changed \(own.keys.filter { expected[$0] != nil && expected[$0] != own[$0] }.sorted())"
        )
        for s in Self.sharedAccounts {
            let added = clients.reduce(0) { $0 + ($1.sharedAdded[s]?.count ?? 0) }
            let deleted = clients.reduce(0) { $0 + ($1.sharedDeleted[s] ?? 0) }
            #expect(
                added - deleted == (shared[s] == nil ? 0 : 1),
                "seed \(seed): shared \(s): \(added) adds, \(deleted) deletes, exists: \(shared[s] != nil)"
            )
            if let secret = shared[s] {
                #expect(
                    clients.contains { $0.sharedAdded[s]?.contains(secret) == true },
                    "shared \(s): a secret no successful Add wrote")
            }
        }
        for m in clients {
            let values = try Wire.domain(c, m.domain).mapValues { try PlistValue(tagged: $0) }
            #expect(
                values == m.values,
                "seed \(seed): domain \(m.domain) differs: \(values.keys.sorted()) vs \(m.values.keys.sorted())"
            )
        }
        let domains = Set(
            (c.call("io.vaultd.Preferences.Domains").parameters?["domains"]?.arrayValue ?? [])
                .compactMap(\.stringValue))
        for m in clients {
            #expect(
                domains.contains(m.domain) == !m.values.isEmpty, "Domains and \(m.domain) disagree")
        }
        let sharedValues = try Wire.domain(c, Self.sharedDomain).mapValues {
            try PlistValue(tagged: $0)
        }
        let writes = clients.flatMap(\.sharedWrites)
        for s in Self.sharedKeys {
            let mine = writes.filter { $0.key == s }
            let final = sharedValues[s]
            if mine.isEmpty {
                #expect(final == nil)
                continue
            }
            // A write can be the last one only if no other write was sent after it was acknowledged.
            let latestSend = mine.map(\.sent).max()!
            let candidates = mine.filter { $0.acknowledged >= latestSend }
            #expect(
                candidates.contains { $0.value == final },
                "seed \(seed): shared key \(s) ends as \(final.map { "\($0)" } ?? "absent"), not one of the \(candidates.count) writes that could have been last"
            )
        }
        let calls = clients.reduce(0) { $0 + $1.calls }
        let outcomes = clients.reduce(into: [String: Int]()) { all, m in
            all.merge(m.outcomes, uniquingKeysWith: +)
        }
        .sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        #expect(
            calls >= Self.clients * min(callsPerClient, 50), "only \(calls) calls in \(elapsed) s")
        ReliabilityReport.record(
            String(
                format:
                    "model: %d clients, %d calls checked against the model in %.1f s (%.0f calls/s), end state equal (%d items, %d shared-key writes; replies: %@), seed %llu",
                Self.clients, calls, elapsed, Double(calls) / elapsed, stored.count, writes.count,
                outcomes, seed))
    }
}
