import Foundation
import Testing
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Floods and slow peers: the connection cap holds while the clients already
/// admitted keep being served; a peer that sends half a message and stalls (or trickles it
/// byte by byte) is dropped after the partial-message timeout and blocks nobody.
@Suite struct ReliabilityFloodTests {
    static let cap = 16
    static let environment = ["VAULTD_MAX_CONNECTIONS": "\(cap)", "VAULTD_PARTIAL_TIMEOUT": "1"]

    /// A connection vaultd admitted and answers (retrying while the slots of connections
    /// that just closed are being given back).
    static func admittedConnection(_ d: CustomDaemon, within seconds: Double = 10) throws
        -> ExactClient
    {
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            let c = try d.connect()
            if c.call("io.vaultd.Vault.Status", timeout: 10).parameters != nil { return c }
            c.close()
            guard Date() < deadline else {
                throw HarnessError("no connection admitted within \(seconds) s")
            }
            usleep(50_000)
        }
    }

    @Test(.timeLimit(.minutes(3))) func capHoldsWhileAdmittedClientsAreServed() throws {
        let d = try CustomDaemon()
        defer { d.close() }
        try d.start(environment: Self.environment)
        let pid = try #require(d.pid)
        try Wire.initWithoutPassphrase(try Self.admittedConnection(d))

        let admitted = try (0..<Self.cap).map { _ in try Self.admittedConnection(d) }
        let threadsAtCap = ProcStatus.threads(pid) ?? 0

        // The admitted clients keep writing and reading while a flood of connections arrives.
        let callsPerClient = Stress.count(40)
        let failures = LockedList()
        let flood = Stress.count(300)
        var refused = 0
        var answeredOverCap = 0
        let group = DispatchGroup()
        for (i, c) in admitted.enumerated() {
            group.enter()
            Thread {
                defer { group.leave() }
                for n in 0..<callsPerClient {
                    let set = c.call(
                        "io.vaultd.Preferences.Set",
                        [
                            "domain": "com.example.flood", "key": .string("c\(i)"),
                            "value": ["integer": JSON(n)],
                        ])
                    let get = c.call(
                        "io.vaultd.Preferences.Get",
                        ["domain": "com.example.flood", "key": .string("c\(i)")])
                    if set.parameters == nil || get.parameters?["value"] != ["integer": JSON(n)] {
                        failures.append("admitted client \(i), call \(n): \(set) / \(get)")
                        return
                    }
                }
            }.start()
        }
        for _ in 0..<flood {
            guard let c = try? d.connect() else {
                refused += 1  // not even accepted: the backlog is full, also a refusal
                continue
            }
            switch c.call("io.vaultd.Vault.Status", timeout: 10) {
            // Told why (the call reached vaultd before the close), or closed (it did not:
            // the send failed, and the refusal waits unread).
            case .error("io.vaultd.Vault.RateLimited", _), .closed: refused += 1
            case let other:
                answeredOverCap += 1
                failures.append("connection over the cap: \(other)")
            }
            c.close()
        }
        #expect(
            group.wait(timeout: .now() + 120) == .success,
            "admitted clients stalled during the flood")
        for f in failures.all.prefix(10) { Issue.record("\(f)") }
        #expect(refused == flood && answeredOverCap == 0)
        #expect(d.isRunning, "vaultd died; log:\n\(d.log)")
        // The refusals are logged, once for the whole flood (at most once a minute).
        #expect(
            d.log.components(separatedBy: "refused a connection: \(Self.cap) are open").count - 1
                == 1, "log:\n\(d.log)")
        let threadsAfterFlood = ProcStatus.threads(pid) ?? 0
        #expect(
            threadsAfterFlood <= threadsAtCap + 8,
            "vaultd's threads grew from \(threadsAtCap) to \(threadsAfterFlood) under the flood")

        // A slot given back is a slot a new client gets.
        admitted[0].close()
        let late = try Self.admittedConnection(d, within: 5)
        #expect(late.call("io.vaultd.Vault.Status").parameters != nil)
        // And every other admitted client is still served.
        for c in admitted.dropFirst() {
            #expect(c.call("io.vaultd.Vault.Status").parameters != nil)
        }
        ReliabilityReport.record(
            "flood: cap \(Self.cap): \(refused) of \(flood) connections over the cap closed at once while \(Self.cap) admitted clients made \(Self.cap * callsPerClient * 2) calls; vaultd threads \(threadsAtCap) at the cap, \(threadsAfterFlood) after the flood"
        )
    }

    /// Anything over a limit gets an error. A connection over the cap is told so
    /// (RateLimited, naming VAULTD_MAX_CONNECTIONS) before it is closed, whether its first
    /// call reached vaultd before the close or not, so vaultctl does not report only "vaultd
    /// closed the connection: send: Broken pipe".
    @Test func aConnectionOverTheCapIsToldWhy() throws {
        let d = try CustomDaemon()
        defer { d.close() }
        try d.start(environment: ["VAULTD_MAX_CONNECTIONS": "1"])
        let admitted = try Self.admittedConnection(d)
        defer { admitted.close() }

        // Nothing sent yet: the refusal is waiting to be read.
        let over = try d.connect()
        let refusal = over.receive(timeout: 10)
        #expect(refusal.errorName == "io.vaultd.Vault.RateLimited", "\(refusal)")
        if case .error(_, let p) = refusal {
            #expect(
                p["message"]?.stringValue?.contains("VAULTD_MAX_CONNECTIONS") == true, "\(refusal)")
            #expect(p["retryAfter"] != nil, "\(refusal)")
        }
        #expect(over.receive(timeout: 10).isClosed)
        over.close()

        // vaultctl says so too: its first send meets either the refusal or a closed socket.
        let env = isolatedEnvironment(root: d.root, socket: d.socketPath)
        for _ in 0..<3 {
            let r = try ChildProcess.run(
                Paths.tool("vaultctl"), ["status"], environment: env, timeout: 30)
            #expect(
                r.status == 1 && r.stderr.contains("io.vaultd.Vault.RateLimited")
                    && r.stderr.contains("VAULTD_MAX_CONNECTIONS"), "\(r)")
        }
        #expect(admitted.call("io.vaultd.Vault.Status").parameters != nil)
    }

    /// Unfinished messages from many connections at once: vaultd holds at most 64 MiB of
    /// messages in flight past each one's first 64 KiB (256 connections, each with 8 MiB and
    /// no end, held 2 GB). The message that would pass the budget is RateLimited and its
    /// connection closed; ordinary calls still work; once the holders go, large messages
    /// work again.
    @Test(.timeLimit(.minutes(3))) func unfinishedMessagesAreHeldWithinABudget() throws {
        let d = try CustomDaemon()
        defer { d.close() }
        try d.start(environment: ["VAULTD_PARTIAL_TIMEOUT": "60"])
        let pid = try #require(d.pid)
        try Wire.initWithoutPassphrase(try Self.admittedConnection(d))
        let opening = Array(#"{"method":"io.vaultd.Vault.Status","parameters":{"pad":""#.utf8)
        // Just under the 8 MiB message limit, without the end: 8 of these hold 63.5 MiB of
        // the budget, the 9th passes it.
        let unfinished =
            opening + [UInt8](repeating: UInt8(ascii: "x"), count: (8 << 20) - 1 - opening.count)
        var holders: [ExactClient] = []
        defer { for h in holders { h.close() } }
        for i in 0..<8 {
            let h = try ExactClient(path: d.socketPath)
            try #require(h.send(unfinished), "holder \(i) could not send its unfinished message")
            holders.append(h)
        }
        // Every byte sent is read (so counted) before the next call's count is judged.
        for (i, h) in holders.enumerated() {
            try #require(
                h.waitUntilRead(), "vaultd did not read holder \(i)'s bytes (\(h.unreadBytes) left)"
            )
        }
        // A whole 7 MiB call over the budget: vaultd reads it to its end without keeping it
        // (so the sender's write completes, as a client's must to read the answer), then
        // answers RateLimited and closes.
        let over = try ExactClient(path: d.socketPath)
        let whole =
            opening + [UInt8](repeating: UInt8(ascii: "x"), count: 7 << 20) + Array(#""}}"#.utf8)
            + [0]
        #expect(over.send(whole), "vaultd stopped reading the call it refused")
        let refusal = over.receive(timeout: 20)
        guard case .error(let name, let parameters) = refusal else {
            Issue.record("the message over the budget: \(refusal)")
            return
        }
        #expect(name == "io.vaultd.Vault.RateLimited")
        #expect(parameters["retryAfter"] == JSON(1.0))
        #expect(parameters["message"]?.stringValue?.contains("64 MiB") == true, "\(parameters)")
        #expect(over.closes(within: 10))
        over.close()
        let rssMiB = (ProcStatus.rss(pid) ?? 0) >> 10
        #expect(
            rssMiB > 0 && rssMiB < 250,
            "vaultd's RSS is \(rssMiB) MiB holding 8 unfinished messages")

        // Ordinary calls fit each connection's allowance and are served meanwhile.
        let bystander = try Self.admittedConnection(d)
        let set = bystander.call(
            "io.vaultd.Preferences.Set",
            [
                "domain": "com.example.budget", "key": "k",
                "value": ["string": .string(String(repeating: "v", count: 32 << 10))],
            ])
        #expect(set.parameters != nil, "\(set)")
        #expect(
            d.log.contains("-byte call: messages in flight for other connections hold 64 MiB"),
            "log:\n\(d.log)")

        // Once the holders are gone, a large message is taken again.
        for h in holders { h.close() }
        holders.removeAll()
        let big = String(repeating: "b", count: 3 << 20)
        var taken: ExactClient.Outcome = .timedOut
        for _ in 0..<50 {
            taken = bystander.call(
                "io.vaultd.Preferences.Set",
                ["domain": "com.example.budget", "key": "big", "value": ["string": .string(big)]])
            if taken.errorName != "io.vaultd.Vault.RateLimited" { break }
            usleep(100_000)  // the holders' connections are still being closed
        }
        #expect(taken.parameters != nil, "a 3 MiB message after the holders left: \(taken)")
        // And the memory they took is given back (buffers this large get pages of their own).
        let rssAfterMiB = (ProcStatus.rss(pid) ?? 0) >> 10
        #expect(
            rssAfterMiB > 0 && rssAfterMiB < 80,
            "vaultd's RSS is \(rssAfterMiB) MiB after the holders left (\(rssMiB) MiB while they held)"
        )

        // A stream outlives its call, but not the call's bytes: eight Observe calls of
        // nearly 8 MiB each (8,150 keys of 1 KiB: 63.4 MiB of the budget, were they held), left
        // open, hold nothing, and a 3 MiB call goes through meanwhile.
        let keys = JSON.array(
            (0..<8150).map {
                .string(String(format: "%05d", $0) + String(repeating: "k", count: 1019))
            })
        var streams: [ExactClient] = []
        defer { for c in streams { c.close() } }
        for i in 0..<8 {
            let c = try ExactClient(path: d.socketPath)
            let observe = JSON.object([
                "method": "io.vaultd.Preferences.Observe",
                "parameters": ["domains": ["com.example.budget"], "keys": keys], "more": true,
            ])
            try #require(c.send(observe.serialized() + [0]), "stream \(i)")
            streams.append(c)
        }
        // Each stream open: its call read whole and its first reply (the snapshot) sent.
        for (i, c) in streams.enumerated() {
            let first = c.receive(timeout: 20)
            try #require(first.parameters != nil, "stream \(i): \(first)")
        }
        let during = bystander.call(
            "io.vaultd.Preferences.Set",
            ["domain": "com.example.budget2", "key": "big", "value": ["string": .string(big)]])
        #expect(
            during.parameters != nil,
            "a 3 MiB message while 8 streams of nearly 8 MiB calls are open: \(during)")
        #expect(d.isRunning, "vaultd died; log:\n\(d.log)")
        ReliabilityReport.record(
            "unfinished messages: 8 × 8 MiB held, the 9th refused with RateLimited; vaultd RSS \(rssMiB) MiB meanwhile"
        )
    }

    @Test(.timeLimit(.minutes(3))) func stallingAndTricklingPeersAreDroppedAndBlockNobody() throws {
        let d = try CustomDaemon()
        defer { d.close() }
        try d.start(environment: Self.environment)
        try Wire.initWithoutPassphrase(try Self.admittedConnection(d))
        let bystander = try Self.admittedConnection(d)
        let half = Array(
            #"{"method":"io.vaultd.Keychain.Add","parameters":{"class":"genericPassword","attributes":{"acc"#
                .utf8)

        // Half a message, then silence.
        let staller = try d.connect()
        staller.send(half)
        let stallStart = Date()
        // A trickler: the other half never comes, but a byte arrives every 0.3 s.
        let trickler = try d.connect()
        trickler.send(half)
        let trickleStart = Date()
        var trickled = 0
        var worstLatency = 0.0
        var stallerDropped: Double?
        var tricklerDropped: Double?
        while Date().timeIntervalSince(stallStart) < 8
            && (stallerDropped == nil || tricklerDropped == nil)
        {
            // The bystander is served while they hang on.
            let t0 = Date()
            let r = bystander.call(
                "io.vaultd.Preferences.Set",
                ["domain": "com.example.slow", "key": "k", "value": ["integer": JSON(trickled)]])
            worstLatency = max(worstLatency, Date().timeIntervalSince(t0))
            #expect(r.parameters != nil, "the bystander was not served: \(r)")
            if tricklerDropped == nil {
                if trickler.send(Array("x".utf8)) { trickled += 1 }
                if case .closed = trickler.receive(timeout: 0.001) {
                    tricklerDropped = Date().timeIntervalSince(trickleStart)
                }
            }
            if stallerDropped == nil, case .closed = staller.receive(timeout: 0.001) {
                stallerDropped = Date().timeIntervalSince(stallStart)
            }
            usleep(300_000)
        }
        let stall = try #require(
            stallerDropped, "a peer that stalled on half a message was not dropped within 8 s")
        let trickle = try #require(
            tricklerDropped,
            "a peer trickling half a message was not dropped within 8 s (\(trickled) bytes trickled)"
        )
        #expect(stall >= 0.9 && stall < 4, "staller dropped after \(stall) s with a 1 s timeout")
        #expect(
            trickle >= 0.9 && trickle < 4, "trickler dropped after \(trickle) s with a 1 s timeout")
        #expect(worstLatency < 1, "a bystander call took \(worstLatency) s while peers stalled")

        // Stallers filling every slot are all dropped, and then the slots are free again.
        bystander.close()
        var stallers: [ExactClient] = []
        for _ in 0..<Self.cap {
            let s = try d.connect()
            s.send(half)
            stallers.append(s)
        }
        let filled = Date()
        var allDropped = true
        for s in stallers where !s.closes(within: 6) { allDropped = false }
        #expect(allDropped, "stallers holding every slot were not all dropped")
        let late = try Self.admittedConnection(d, within: 5)
        #expect(late.call("io.vaultd.Vault.Status").parameters != nil)
        #expect(d.isRunning)
        ReliabilityReport.record(
            String(
                format:
                    "slow peers: 1 s timeout: staller dropped after %.1f s, trickler (%d bytes) after %.1f s, %d stallers at the cap all gone after %.1f s; worst bystander call %.0f ms",
                stall, trickled, trickle, Self.cap, Date().timeIntervalSince(filled),
                worstLatency * 1000))
    }

    @Test func invalidLimitsAreRefusedAtStart() throws {
        for (k, v) in [
            ("VAULTD_MAX_CONNECTIONS", "0"), ("VAULTD_MAX_CONNECTIONS", "many"),
            ("VAULTD_PARTIAL_TIMEOUT", "-1"),
            // Below the largest reply's reservation, no CopyMatching of all items could run.
            ("VAULTD_REPLY_BUDGET_MIB", "34"), ("VAULTD_REPLY_BUDGET_MIB", "1.5"),
        ] {
            let d = try CustomDaemon()
            defer { d.close() }
            let env = isolatedEnvironment(root: d.root, socket: nil).merging([k: v]) { $1 }
            let r = try ChildProcess.run(
                d.command[0], Array(d.command.dropFirst()), environment: env, timeout: 20)
            #expect(r.status == 64 && r.stderr.contains(k), "\(k)=\(v): \(r)")
        }
    }
}
