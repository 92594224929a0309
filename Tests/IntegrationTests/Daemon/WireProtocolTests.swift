import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The protocol (docs/protocol.md) on the wire, with a raw AF_UNIX client: bad input gets a
/// varlink error or a closed connection, never a crash, and vaultd keeps serving everyone else.
@Suite struct WireProtocolTests {
    /// What a malformed message must get.
    enum Expected: Sendable {
        /// This varlink error, with `parameters[key] == value` when given; the connection
        /// stays usable afterwards (the error belongs to one call).
        case error(String, key: String? = nil, value: String? = nil)
        /// A varlink error or a closed connection (the stream itself is broken).
        case errorOrClose
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var bytes: [UInt8]
        var expected: Expected
        var testDescription: String { name }

        static func json(_ name: String, _ text: String, _ expected: Expected) -> Case {
            Case(name: name, bytes: Array(text.utf8) + [0], expected: expected)
        }
    }

    static let invalidParameter = "org.varlink.service.InvalidParameter"

    static let cases: [Case] = [
        .json("not JSON", "this is not JSON {", .errorOrClose),
        .json("JSON but not an object", "[1, 2, 3]", .errorOrClose),
        .json("an object without a method", #"{"parameters": {}}"#, .errorOrClose),
        Case(
            name: "invalid UTF-8",
            bytes: Array(#"{"method":"io.vaultd.Vault.Status","parameters":{"x":""#.utf8) + [
                0xFF, 0xFE,
            ] + Array(#""}}"#.utf8) + [0],
            expected: .errorOrClose),
        .json(
            "unknown method", #"{"method":"io.vaultd.Vault.NoSuchMethod"}"#,
            .error(
                "org.varlink.service.MethodNotFound", key: "method",
                value: "io.vaultd.Vault.NoSuchMethod")),
        .json(
            "unknown interface", #"{"method":"io.vaultd.NoSuchInterface.Status"}"#,
            .error(
                "org.varlink.service.InterfaceNotFound", key: "interface",
                value: "io.vaultd.NoSuchInterface")),
        .json(
            "missing parameter",
            #"{"method":"io.vaultd.Preferences.Get","parameters":{"domain":"com.example.d"}}"#,
            .error(invalidParameter, key: "parameter", value: "key")),
        .json(
            "missing parameter of org.varlink.service",
            #"{"method":"org.varlink.service.GetInterfaceDescription","parameters":{}}"#,
            .error(invalidParameter, key: "parameter", value: "interface")),
        .json(
            "wrong parameter type (number for string)",
            #"{"method":"io.vaultd.Preferences.Get","parameters":{"domain":"com.example.d","key":5}}"#,
            .error(invalidParameter, key: "parameter", value: "key")),
        .json(
            "wrong parameter type (number for passphrase)",
            #"{"method":"io.vaultd.Vault.Unlock","parameters":{"passphrase":42}}"#,
            .error(invalidParameter, key: "parameter", value: "passphrase")),
        .json(
            "parameters not an object", #"{"method":"io.vaultd.Vault.Status","parameters":"yes"}"#,
            .errorOrClose),
    ]

    @Test(arguments: cases) func malformedMessageGetsAnErrorAndVaultdKeepsServing(_ c: Case) throws
    {
        let d = try Daemon()
        defer { d.close() }
        // Another client, connected before the bad one, must be unaffected.
        let bystander = try d.connect()
        #expect(try bystander.call("io.vaultd.Vault.Status").parameters?["lock"] != nil)

        let bad = try d.connect()
        try bad.send(c.bytes)
        let outcome = bad.receive(timeout: 15)
        switch c.expected {
        case .error(let name, let key, let value):
            #expect(outcome.errorName == name, "\(c.name): \(outcome)")
            if let key {
                #expect(outcome.parameters?[key] as? String == value, "\(c.name): \(outcome)")
            }
            // A call-level error leaves the connection usable.
            let next = try bad.call("io.vaultd.Vault.Status")
            #expect(next.parameters?["lock"] != nil, "connection unusable after \(c.name): \(next)")
        case .errorOrClose:
            switch outcome {
            case .closed: break
            case .reply(let r):
                #expect(r["error"] is String, "\(c.name): a reply that is not an error: \(r)")
            default:
                Issue.record("\(c.name): neither an error nor a close: \(outcome)")
            }
        }
        try expectStillServing(d, bystander: bystander)
    }

    /// 9 MiB without a NUL: over the 8 MiB limit. vaultd answers with an error and/or closes,
    /// without reading on forever and without crashing.
    @Test func oversizedMessageIsRefused() throws {
        let d = try Daemon()
        defer { d.close() }
        let bystander = try d.connect()
        let bad = try d.connect()
        let big = [UInt8](repeating: UInt8(ascii: "x"), count: 9 << 20)
        let sentAll = try bad.send(big)
        let outcome = bad.receive(timeout: 30)
        switch outcome {
        case .closed: break
        case .reply(let r):
            #expect(r["error"] as? String == Self.invalidParameter, "\(r)")
            #expect(
                bad.waitForClose(timeout: 15),
                "the connection should be closed after an oversized message")
        default:
            Issue.record(
                "oversized message: neither an error nor a close (sent all: \(sentAll)): \(outcome)"
            )
        }
        try expectStillServing(d, bystander: bystander)
    }

    /// Observe with a key no preference can have (over the 1 KiB key limit) is refused as
    /// Set would refuse it, instead of a stream that can never report anything for it.
    @Test func observingAKeyOverTheKeyLimitIsInvalidValue() throws {
        let d = try Daemon()
        defer { d.close() }
        let c = try d.connect()
        for (length, refused) in [(1024, false), (1025, true)] {
            let key = String(repeating: "k", count: length)
            let o = try d.connect()
            try #require(
                try o.send(json: [
                    "method": "io.vaultd.Preferences.Observe",
                    "parameters": ["domains": ["com.example.keys"], "keys": [key]], "more": true,
                ]))
            let r = o.receive(timeout: 10)
            if refused {
                #expect(
                    r.errorName == "io.vaultd.Preferences.InvalidValue", "\(length)-byte key: \(r)")
            } else {
                #expect(
                    r.errorName == nil && r.parameters?["domain"] as? String == "com.example.keys",
                    "\(length)-byte key: \(r)")
            }
            o.close()
        }
        try expectStillServing(d, bystander: c)
    }

    /// A client that sends half a message and vanishes.
    @Test func truncatedMessageAndHangUp() throws {
        let d = try Daemon()
        defer { d.close() }
        let bad = try d.connect()
        try bad.send(Array(#"{"method":"io.vaultd.Vault.Sta"#.utf8))
        bad.close()
        try expectStillServing(d, bystander: nil)
    }

    /// Two calls in one write: two replies, in order.
    @Test func pipelinedCallsAreAnsweredInOrder() throws {
        let d = try Daemon()
        defer { d.close() }
        let c = try d.connect()
        let two =
            #"{"method":"io.vaultd.Vault.Status"}"# + "\0"
            + #"{"method":"org.varlink.service.GetInfo"}"# + "\0"
        try c.send(Array(two.utf8))
        let first = c.receive()
        let second = c.receive()
        #expect(first.parameters?["lock"] != nil, "first reply should answer Status: \(first)")
        #expect(first.parameters?["interfaces"] == nil)
        #expect(
            (second.parameters?["interfaces"] as? [String])?.contains("io.vaultd.Keychain") == true,
            "second reply should answer GetInfo: \(second)")
    }

    /// Calls pipelined behind durable adds, on connections whose adds share group commits,
    /// are answered one by one in order, each seeing the writes before it: the add, a lookup
    /// of it, the same add again (DuplicateItem), Status. (So an add is answered before its
    /// connection's next call is taken: answered from the thread that settles its group
    /// commit while the connection's thread read on, replies would come out of order.)
    @Test func pipelinedAddsAndReadsKeepTheirOrderWhileOthersWrite() throws {
        let d = try Daemon()
        defer { d.close() }
        let initialized = d.initializeWithoutPassphrase()
        try #require(initialized.status == 0, "\(initialized)")
        let failures = LockedList()
        onThreads(4) { c in
            do {
                let conn = try d.connect()
                for i in 0..<25 {
                    let account = "c\(c)-\(i)"
                    let secret = Data("secret of \(account)".utf8).base64EncodedString()
                    let attributes = ["service": "pipelined", "account": account]
                    let add =
                        #"{"method":"io.vaultd.Keychain.Add","parameters":{"class":"genericPassword","attributes":\#(Self.json(attributes)),"data":"\#(secret)"}}"#
                    let get =
                        #"{"method":"io.vaultd.Keychain.CopyMatching","parameters":{"class":"genericPassword","query":\#(Self.json(attributes)),"returnData":true}}"#
                    let status = #"{"method":"io.vaultd.Vault.Status"}"#
                    _ = try conn.send(
                        Array([add, get, add, status].map { $0 + "\0" }.joined().utf8))
                    let replies = (0..<4).map { _ in conn.receive() }
                    let added =
                        (replies[0].parameters?["attributes"] as? [String: Any])?["account"]
                        as? String
                    let found =
                        ((replies[1].parameters?["items"] as? [[String: Any]])?.first?["data"])
                        as? String
                    if added != account || found != secret
                        || replies[2].errorName != "io.vaultd.Keychain.DuplicateItem"
                        || replies[3].parameters?["lock"] == nil
                    {
                        failures.append("client \(c) round \(i): \(replies)")
                    }
                }
            } catch {
                failures.append("client \(c): \(error)")
            }
        }
        #expect(failures.all.isEmpty, "\(failures.all.prefix(3))")
    }

    /// A peer that sends an add and closes at once: the add is kept (it was sent whole) and
    /// vaultd goes on serving; the reply it could not deliver harms no one.
    @Test func anAddWhosePeerLeftIsKeptAndVaultdServesOn() throws {
        let d = try Daemon()
        defer { d.close() }
        let initialized = d.initializeWithoutPassphrase()
        try #require(initialized.status == 0, "\(initialized)")
        for i in 0..<20 {
            let c = try d.connect()
            let add =
                #"{"method":"io.vaultd.Keychain.Add","parameters":{"class":"genericPassword","attributes":{"service":"left","account":"a\#(i)"},"data":"c2VjcmV0"}}"#
            _ = try c.send(Array((add + "\0").utf8))
            c.close()
        }
        let probe = try d.connect()
        var listed: [[String: Any]] = []
        for _ in 0..<50 {
            let r = try probe.call(
                "io.vaultd.Keychain.CopyMatching",
                ["class": "genericPassword", "query": ["service": "left"], "matchLimit": "all"])
            listed = (r.parameters?["items"] as? [[String: Any]]) ?? []
            if listed.count == 20 { break }
            usleep(20_000)
        }
        #expect(listed.count == 20, "items kept of 20 adds whose peers left: \(listed.count)")
    }

    static func json(_ o: [String: String]) -> String {
        String(
            decoding: try! JSONSerialization.data(withJSONObject: o, options: [.sortedKeys]),
            as: UTF8.self)
    }

    /// Framing does not depend on write boundaries: a call dribbled in one byte per write,
    /// then two calls and a half-close (SHUT_WR), as `socat` or a shell client would do.
    @Test func framingIgnoresWriteBoundariesAndHalfClose() throws {
        let d = try Daemon()
        defer { d.close() }
        let c = try d.connect()
        for byte in Array(#"{"method":"org.varlink.service.GetInfo"}"#.utf8) + [0] {
            try c.send([byte])
            usleep(1_000)
        }
        #expect(c.receive().parameters?["interfaces"] != nil)

        let h = try d.connect()
        try h.send(
            Array(
                (#"{"method":"io.vaultd.Vault.Status"}"# + "\0"
                    + #"{"method":"org.varlink.service.GetInfo"}"# + "\0").utf8))
        shutdown(h.fd, Int32(SHUT_WR))
        #expect(h.receive().parameters?["lock"] != nil)
        #expect(h.receive().parameters?["interfaces"] != nil)
        #expect(h.waitForClose(timeout: 5), "vaultd should close after the peer's EOF")
    }

    /// A longer pipeline: errors and a oneway call (no reply) in the middle keep the order.
    @Test func pipelineWithErrorsAndOnewayKeepsOrder() throws {
        let d = try Daemon()
        defer { d.close() }
        let c = try d.connect()
        let messages = [
            #"{"method":"io.vaultd.Vault.Status"}"#,
            #"{"method":"io.vaultd.Vault.Nope"}"#,
            #"{"method":"io.vaultd.Vault.Status","oneway":true}"#,
            // oneway wins over more: no reply, no stream holding the connection.
            #"{"method":"io.vaultd.Vault.Observe","oneway":true,"more":true}"#,
            #"{"method":"org.varlink.service.GetInterfaceDescription","parameters":{"interface":"io.vaultd.Keychain"}}"#,
            #"{"method":"org.varlink.service.GetInfo"}"#,
        ]
        try c.send(Array(messages.map { $0 + "\0" }.joined().utf8))
        let replies = (0..<4).map { _ in c.receive() }
        #expect(replies[0].parameters?["lock"] != nil, "\(replies[0])")
        #expect(replies[1].errorName == "org.varlink.service.MethodNotFound", "\(replies[1])")
        #expect(
            (replies[2].parameters?["description"] as? String)?.contains(
                "interface io.vaultd.Keychain") == true, "\(replies[2])")
        #expect(replies[3].parameters?["interfaces"] != nil, "\(replies[3])")
        // Nothing more: the oneway call got no reply.
        if case .reply(let extra) = c.receive(timeout: 0.5) {
            Issue.record("unexpected extra reply \(extra)")
        }
    }

    /// A `more` call refused before it streams gets one error reply without `continues`:
    /// that is the call's final reply (varlink.org/Method-Call), so the connection is free
    /// for the next call, as after any other error. vaultd closed it instead, so a call
    /// pipelined behind the Observe (or sent after the error) was never answered.
    @Test(arguments: [
        "a key over the key limit", "a domain that is not a string", "an empty domain",
    ])
    func refusedStreamingCallLeavesTheConnectionUsable(_ refusal: String) throws {
        let parameters = [
            "a key over the key limit":
                #"{"domains":["com.example.a"],"keys":["\#(String(repeating: "k", count: 1025))"]}"#,
            "a domain that is not a string": #"{"domains":[5]}"#,
            "an empty domain": #"{"domains":[""]}"#,
        ][refusal]!
        let d = try Daemon()
        defer { d.close() }
        let c = try d.connect()
        let observe =
            #"{"method":"io.vaultd.Preferences.Observe","more":true,"parameters":"# + parameters
            + "}"
        try c.send(Array((observe + "\0" + #"{"method":"io.vaultd.Vault.Status"}"# + "\0").utf8))
        let refused = c.receive()
        #expect(refused.errorName != nil && refused.reply?["continues"] == nil, "\(refused)")
        let next = c.receive()
        #expect(
            next.parameters?["lock"] != nil,
            "the call pipelined behind the refused Observe: \(next)")
        let after = try c.call("io.vaultd.Vault.Status")
        #expect(after.parameters?["lock"] != nil, "a call after the refused Observe: \(after)")
    }

    /// `upgrade` asks for the connection to be handed to another protocol after a reply that
    /// confirms it (varlink.org/Method-Call). vaultd offers no upgrade and refuses the call
    /// with InvalidParameter `upgrade`; that refusal confirms nothing, so the connection is
    /// still varlink and the calls behind it are answered. vaultd closed it after the
    /// refusal, even for a oneway call (whose refusal it sent all the same).
    @Test func refusedUpgradeLeavesTheConnectionUsable() throws {
        let d = try Daemon()
        defer { d.close() }
        let c = try d.connect()
        let messages = [
            #"{"method":"io.vaultd.Vault.Status","upgrade":true}"#,
            #"{"method":"io.vaultd.Vault.Status"}"#,
            #"{"method":"io.vaultd.Vault.Observe","more":true,"upgrade":true}"#,
            #"{"method":"io.vaultd.Vault.Status","oneway":true,"upgrade":true}"#,
            #"{"method":"io.vaultd.Vault.NoSuch","upgrade":true}"#,
            #"{"method":"org.varlink.service.GetInfo"}"#,
        ]
        try c.send(Array(messages.map { $0 + "\0" }.joined().utf8))
        let replies = (0..<5).map { _ in c.receive(timeout: 5) }
        for i in [0, 2] {
            #expect(
                replies[i].errorName == Self.invalidParameter
                    && replies[i].parameters?["parameter"] as? String == "upgrade",
                "\(i): \(replies[i])")
            #expect(replies[i].reply?["continues"] == nil, "\(replies[i])")
        }
        #expect(replies[1].parameters?["lock"] != nil, "\(replies[1])")
        #expect(replies[3].errorName == "org.varlink.service.MethodNotFound", "\(replies[3])")
        #expect(replies[4].parameters?["interfaces"] != nil, "\(replies[4])")
        if case .reply(let extra) = c.receive(timeout: 0.5) {
            Issue.record("unexpected extra reply \(extra)")
        }
    }

    /// A subscriber with nothing more to send may shut down its writing side (SHUT_WR, as
    /// `socat` or `nc -N` do at the end of their input); it still reads, so its stream goes
    /// on (varlink.org/Method-Call: a client no longer interested closes the connection).
    /// vaultd took the half-close for a close and ended the stream within a second, after
    /// the snapshot: the subscriber saw no change. A full close still ends the stream.
    @Test func aHalfClosedSubscriberStillGetsItsStream() throws {
        let d = try Daemon()
        defer { d.close() }
        let domain = "com.example.halfclose"
        let s = try d.connect()
        try s.send(json: [
            "method": "io.vaultd.Preferences.Observe", "parameters": ["domains": [domain]],
            "more": true,
        ])
        shutdown(s.fd, Int32(SHUT_WR))
        let snapshot = s.receive()
        #expect(
            snapshot.parameters?["values"] != nil && snapshot.reply?["continues"] as? Bool == true,
            "\(snapshot)")
        // The stream checks its peer after each batch it sends: the first event, received,
        // is followed by a check that sees the half-close, and the second event shows that the
        // stream went on past it.
        let writer = try d.connect()
        for value in [6, 7] {
            let set = try writer.call(
                "io.vaultd.Preferences.Set",
                ["domain": domain, "key": "k", "value": ["integer": value]])
            #expect(set.parameters?["sequence"] != nil, "\(set)")
            let event = s.receive(timeout: 5)
            #expect(
                event.parameters?["key"] as? String == "k"
                    && event.reply?["continues"] as? Bool == true, "\(event)")
            #expect(
                (event.parameters?["value"] as? [String: Any])?["integer"] as? Int == value,
                "\(event)")
        }

        // A subscriber that closes is gone: its connection's thread ends. (Connection threads
        // only: libdispatch starts and ends worker threads of its own at any time.)
        let threads = { () -> Int in
            let tasks = "/proc/\(d.pid ?? 0)/task"
            let ids = (try? FileManager.default.contentsOfDirectory(atPath: tasks)) ?? []
            return ids.filter {
                (try? String(contentsOfFile: "\(tasks)/\($0)/comm", encoding: .utf8))
                    == "vaultd-conn\n"
            }.count
        }
        let before = threads()
        #expect(before == 2, "the subscriber's and the writer's connection threads: \(before)")
        s.close()
        #expect(
            eventually(timeout: 5) { threads() < before },
            "the closed subscriber's thread stayed (\(threads()) of \(before))")
    }

    /// vaultd is alive, a bystander's connection still works, and a new connection gets a
    /// Status reply.
    private func expectStillServing(
        _ d: Daemon, bystander: VarlinkConnection?,
        sourceLocation: SourceLocation = #_sourceLocation
    )
        throws
    {
        #expect(d.isRunning, "vaultd died; log:\n\(d.log)", sourceLocation: sourceLocation)
        if let bystander {
            let r = try bystander.call("io.vaultd.Vault.Status")
            #expect(
                r.parameters?["lock"] != nil, "the other client's connection broke: \(r)",
                sourceLocation: sourceLocation)
        }
        let fresh = try d.connect()
        let r = try fresh.call("io.vaultd.Vault.Status")
        #expect(
            r.parameters?["lock"] != nil, "a new connection gets no Status: \(r)",
            sourceLocation: sourceLocation)
    }
}
