import Foundation
import Testing
import VaultClient
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// No peer can starve or bloat vaultd: connections are capped per identity and idle ones
/// closed; a message's parse tree is counted before it is built; an Observe stream that is
/// not read is dropped within a few MiB; replies not read give the budget back within about
/// a second; a client gives up on a hung vaultd in bounded time.
@Suite struct ReliabilityLimitsTests {
    /// vaultd's threads serving a connection (named vaultd-conn in /proc).
    static func connectionThreads(_ pid: pid_t) -> Int {
        let tasks =
            (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return tasks.filter {
            (try? String(contentsOfFile: "/proc/\(pid)/task/\($0)/comm", encoding: .utf8))?
                .hasPrefix("vaultd-conn") == true
        }.count
    }

    /// A call's outcome under the reply budget: what `ok` says of its reply ("ok" when it is
    /// right), "limited" for RateLimited naming the reply budget, else the outcome itself.
    static func budgetOutcome(_ r: ExactClient.Outcome, _ ok: (JSONObject) -> String) -> String {
        switch r {
        case .ok(let p): return ok(p)
        case .error(let name, let p) where name == "io.vaultd.Vault.RateLimited":
            return (p["message"]?.stringValue ?? "").contains("reply budget")
                ? "limited" : "unclear: \(r)"
        default: return "\(r)"
        }
    }

    /// `n` connections to `d` each make one call (`body`, its `budgetOutcome`) at once. Every
    /// outcome must be "ok" or "limited", and one at least "ok"; returns how many of each.
    static func atOnce(
        _ n: Int, on d: CustomDaemon, _ body: @escaping @Sendable (ExactClient) -> String
    ) -> (served: Int, limited: Int) {
        let outcomes = Locked<[String]>([])
        onThreads(n) { _ in
            guard let client = try? d.connect() else {
                return outcomes.withLock { $0.append("no connection") }
            }
            defer { client.close() }
            let outcome = body(client)
            outcomes.withLock { $0.append(outcome) }
        }
        let all = outcomes.get
        let served = all.filter { $0 == "ok" }.count
        let limited = all.filter { $0 == "limited" }.count
        #expect(
            served + limited == n,
            "outcomes other than the reply or RateLimited: \(all.filter { $0 != "ok" && $0 != "limited" })"
        )
        #expect(served >= 1, "no caller got its reply: \(all)")
        return (served, limited)
    }

    static func seconds(_ body: () throws -> Void) rethrows -> Double {
        let start = Date()
        try body()
        return Date().timeIntervalSince(start)
    }

    /// One registered app holds 300 idle connections (never a call): it keeps its share (32),
    /// the rest are refused at once, and the owner's `vaultctl status` and another app are
    /// served within a second.
    @Test(.timeLimit(.minutes(10))) func idleConnectionsOfOneAppLeaveRoomForEveryoneElse() throws {
        let d = try Daemon()
        defer { d.close() }
        #expect(d.initialize().status == 0)
        let hog = try d.placeExample("hog")
        try d.install("org.example.Hog", exe: hog)
        let other = try d.placeExample("other")
        try d.install("org.example.Other", exe: other)
        let pid = try #require(d.pid)

        // The hog keeps its connections until it is killed.
        let out = d.root + "/hog.out"
        let child = try ChildProcess.spawn(
            hog, ["hold", "300"], environment: d.environment, inputs: [:],
            stdout: .file(out, append: false), stderr: .file(out + ".err", append: false))
        defer {
            kill(child, SIGKILL)
            _ = ChildProcess.wait(child, timeout: 10)
        }
        let held = eventually(timeout: 60) {
            ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").contains("\"held\":300")
        }
        try #require(
            held,
            "the app did not open its 300 connections: \((try? String(contentsOfFile: out + ".err", encoding: .utf8)) ?? "")"
        )
        // vaultd has identified all 300 and closed those over the app's share (its Hello
        // connection and 31 more are served).
        let settled = eventually(timeout: 30) { Self.connectionThreads(pid) <= 32 }
        let threads = Self.connectionThreads(pid)
        #expect(settled, "vaultd still serves \(threads) connections for one app")
        #expect(threads >= 31, "the app's own share was not kept: \(threads) connections served")

        var status = ProcessResult(status: -1, stdout: Data(), stderr: "")
        let ownerTime = Self.seconds { status = d.ctl(["status"]) }
        #expect(status.status == 0, "vaultctl status: \(status)")
        #expect(
            ownerTime < 1, "vaultctl status took \(ownerTime) s while an app holds 300 connections")
        var otherStatus = ProcessResult(status: -1, stdout: Data(), stderr: "")
        let otherTime = Self.seconds { otherStatus = d.app(other, ["status"]) }
        #expect(otherStatus.status == 0, "another app: \(otherStatus)")
        #expect(otherTime < 1, "another app took \(otherTime) s while an app holds 300 connections")
        // The hog itself is told why it gets no more.
        let refused = d.app(hog, ["status"])
        #expect(
            refused.status != 0 && refused.stderr.contains("RateLimited"),
            "the app's 301st connection: \(refused)")
        #expect(d.log.contains("refused connections of app org.example.Hog"), "log:\n\(d.log)")
        ReliabilityReport.record(
            "idle connections: an app holding 300 kept \(threads) served; vaultctl status \(String(format: "%.3f", ownerTime)) s, another app \(String(format: "%.3f", otherTime)) s"
        )
    }

    /// Idle connections (no call, no stream) are closed after VAULTD_IDLE_TIMEOUT; a stream
    /// is not idle. The connection over an identity's share is answered RateLimited at once.
    @Test(.timeLimit(.minutes(10))) func idleConnectionsCloseAndTheOneOverTheShareIsToldWhy() throws
    {
        let d = try CustomDaemon()
        defer { d.close() }
        // 5 s: long enough that the idle connections are still open when the one over the
        // share arrives on a loaded machine (the refusal proves they were).
        try d.start(environment: [
            "VAULTD_IDLE_TIMEOUT": "5", "VAULTD_MAX_CONNECTIONS_PER_PEER": "4",
        ])
        // The start's own probe has gone (its thread gave the slot back).
        let pid = try #require(d.pid)
        #expect(eventually(timeout: 10) { Self.connectionThreads(pid) == 0 })
        let observer = try d.connect()
        try #require(
            observer.send(
                JSON.object(["method": "io.vaultd.Vault.Observe", "more": true]).serialized() + [0])
        )
        try #require(observer.receive(timeout: 10).parameters != nil)
        // One call each, so each is admitted (counted in its identity's share) before the
        // next connects: connections are identified on their own threads, in any order.
        let idle = try (0..<3).map { _ in try d.connect() }
        for c in idle { try #require(c.call("org.varlink.service.GetInfo").parameters != nil) }
        let over = try d.connect()
        let refusal = over.receive(timeout: 10)
        #expect(
            refusal.errorName == "io.vaultd.Vault.RateLimited", "the 5th connection: \(refusal)")
        #expect(over.closes(within: 10))
        var closed = 0
        let took = Self.seconds { closed = idle.filter { $0.closes(within: 20) }.count }
        #expect(closed == 3, "\(closed) of 3 idle connections closed")
        #expect(took < 15, "idle connections closed \(took) s after the refusal (timeout 5 s)")
        // The observer, idle as long, still streams: a lock-state change reaches it.
        let c = try d.connect()
        try Wire.initWithoutPassphrase(c)
        let event = observer.receive(timeout: 10)
        #expect(
            event.parameters?["lock"] != nil, "the observer after the idle ones closed: \(event)")
        ReliabilityReport.record(
            "idle timeout 5 s: 3 idle connections closed within \(String(format: "%.2f", took)) s; the observer stays"
        )
    }

    /// An unregistered program (a copy of vault-example no app is registered with: a program
    /// of the owner's) opening 300 connections and holding them locks no other program out:
    /// vaultd serves it its share (32), and vaultctl, another executable of the same user, is
    /// still served at once. The share is per executable file (device and inode of
    /// /proc/PID/exe), not the owner's tools together.
    @Test(.timeLimit(.minutes(10))) func oneProgramHoldingItsShareLeavesVaultctlServed() throws {
        let d = try Daemon()
        defer { d.close() }
        #expect(d.initialize().status == 0)
        let hog = try d.placeExample("unregistered-hog")
        let pid = try #require(d.pid)
        let out = d.root + "/hog.out"
        let child = try ChildProcess.spawn(
            hog, ["hold", "300"], environment: d.environment, inputs: [:],
            stdout: .file(out, append: false), stderr: .file(out + ".err", append: false))
        defer {
            kill(child, SIGKILL)
            _ = ChildProcess.wait(child, timeout: 10)
        }
        let held = eventually(timeout: 60) {
            ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").contains("\"held\":300")
        }
        try #require(
            held,
            "the program did not open its 300 connections: \((try? String(contentsOfFile: out + ".err", encoding: .utf8)) ?? "")"
        )
        let settled = eventually(timeout: 30) { Self.connectionThreads(pid) <= 32 }
        let threads = Self.connectionThreads(pid)
        #expect(
            settled && threads >= 31,
            "vaultd serves \(threads) connections for one program (its share is 32)")
        #expect(d.log.contains("refused connections of a program of the owner's"), "log:\n\(d.log)")

        var status = ProcessResult(status: -1, stdout: Data(), stderr: "")
        let ownerTime = Self.seconds { status = d.ctl(["status"]) }
        #expect(
            status.status == 0, "vaultctl status while another program holds its share: \(status)")
        #expect(ownerTime < 1, "vaultctl status took \(ownerTime) s")
        let add = d.ctl(["item", "add", "--service", "s", "--account", "a"], stdin: Data("v".utf8))
        #expect(add.status == 0, "\(add)")
        // The hog itself is told why it gets no more.
        let refused = d.app(hog, ["status"])
        #expect(
            refused.status != 0 && refused.stderr.contains("RateLimited")
                && refused.stderr.contains("connections of this program are open"), "\(refused)")
        ReliabilityReport.record(
            "per-program share: an unregistered program holding 300 kept \(threads) served; vaultctl status \(String(format: "%.3f", ownerTime)) s"
        )
    }

    /// Four 8 MiB messages of tiny JSON values at once (`[{},{},…]` and kin): each is
    /// refused before its tree is built, and vaultd's peak RSS stays under 256 MiB. A
    /// smaller one of the same kind is parsed and answered.
    @Test(.timeLimit(.minutes(10))) func messagesOfManyTinyValuesAreCountedBeforeTheyAreParsed()
        throws
    {
        let d = try CustomDaemon()
        defer { d.close() }
        try d.start()
        let pid = try #require(d.pid)
        let before = ProcStatus.rss(pid) ?? 0
        @Sendable func message(_ element: String, bytes: Int) -> [UInt8] {
            let head = Array(
                #"{"method":"io.vaultd.Preferences.Set","parameters":{"domain":"com.example.tiny","key":"k","value":{"array":["#
                    .utf8)
            let tail = Array("]}}}".utf8)
            let e = Array(element.utf8)
            let n = (bytes - head.count - tail.count) / (e.count + 1)
            var m = head
            m.reserveCapacity(bytes + 1)
            for i in 0..<n {
                if i > 0 { m.append(UInt8(ascii: ",")) }
                m += e
            }
            return m + tail + [0]
        }
        let size = Varlink.maximumMessageSize - 16
        let kinds = ["{}", "[]", "0", "\"\""]
        let outcomes = Locked<[String]>([])
        onThreads(kinds.count) { i in
            guard let c = try? d.connect() else {
                return outcomes.withLock { $0.append("\(kinds[i]): no connection") }
            }
            defer { c.close() }
            let m = message(kinds[i], bytes: size)
            let sent = c.send(m)
            let r = c.receive(timeout: 60)
            outcomes.withLock { $0.append("\(kinds[i]) sent \(sent): \(r.errorName ?? "\(r)")") }
        }
        let peak = (ProcStatus.peakRSS(pid) ?? 0) / 1024
        for o in outcomes.get {
            #expect(o.hasSuffix("org.varlink.service.InvalidParameter"), "\(o)")
        }
        #expect(d.isRunning, "vaultd died; log:\n\(d.log)")
        #expect(peak < 256, "vaultd's peak RSS was \(peak) MiB")
        // The same kind, small enough for the budget, is parsed: the engine refuses its value.
        let c = try d.connect()
        try #require(c.send(message("{}", bytes: 1 << 20)))
        let small = c.receive(timeout: 60)
        #expect(small.errorName == "io.vaultd.Preferences.InvalidValue", "a 1 MiB [{},…]: \(small)")
        ReliabilityReport.record(
            "tiny values: four 8 MiB messages ([{},…], [[],…], [0,…], [\"\",…]) at once refused before parsing; vaultd RSS \(before / 1024) MiB before, peak \(peak) MiB"
        )
    }

    /// 20 Observe subscribers that never read while 300 writes of 512 KiB land: each is
    /// dropped once it is a few MiB behind, vaultd's peak RSS stays under 256 MiB, every
    /// write is acknowledged, and all of them are there after kill -9 and a restart.
    @Test(.timeLimit(.minutes(10))) func observersThatDoNotReadAreDroppedAndEveryWriteStays() throws
    {
        let d = try CustomDaemon()
        defer { d.close() }
        try d.start()
        let pid = try #require(d.pid)
        let writer = try d.connect()
        try Wire.initWithoutPassphrase(writer)
        // 6 values of 512 KiB per domain (a domain holds up to 4 MiB).
        let writes = 300
        let domains = (0..<(writes + 5) / 6).map { "com.example.observed\($0)" }
        let observers = try (0..<20).map { _ in try d.connect() }
        defer { for o in observers { o.close() } }
        for o in observers {
            let call = JSON.object([
                "method": "io.vaultd.Preferences.Observe", "more": true,
                "parameters": ["domains": .array(domains.map { .string($0) })],
            ])
            try #require(o.send(call.serialized() + [0]))
        }
        // Each took its stream (vaultd serves it on the connection's thread).
        #expect(eventually(timeout: 30) { Self.connectionThreads(pid) >= 21 })
        func value(_ i: Int) -> [UInt8] {
            var v = [UInt8](repeating: 0, count: 512 << 10)
            for j in stride(from: 0, to: v.count, by: 4096) {
                v[j] = UInt8(truncatingIfNeeded: i &* 31 &+ j / 4096)
            }
            v[0] = UInt8(truncatingIfNeeded: i)
            v[1] = UInt8(truncatingIfNeeded: i >> 8)
            return v
        }
        var acknowledged = 0
        let took = try Self.seconds {
            for i in 0..<writes {
                let r = writer.call(
                    "io.vaultd.Preferences.Set",
                    [
                        "domain": .string(domains[i / 6]), "key": .string("k\(i % 6)"),
                        "value": ["data": Wire.base64(value(i))],
                    ], timeout: 60)
                try #require(r.parameters?["sequence"] != nil, "write \(i): \(r)")
                acknowledged += 1
            }
        }
        let peak = (ProcStatus.peakRSS(pid) ?? 0) / 1024
        #expect(acknowledged == writes)
        #expect(peak < 256, "vaultd's peak RSS was \(peak) MiB")
        // Every subscriber was dropped (it fell behind); none is still served.
        var dropped = 0
        for o in observers where o.closes(within: 30) { dropped += 1 }
        #expect(dropped == 20, "\(dropped) of 20 subscribers that never read were dropped")

        d.kill()
        try d.start()
        let reader = try d.connect()
        var intact = 0
        for i in 0..<writes {
            let r = reader.call(
                "io.vaultd.Preferences.Get",
                ["domain": .string(domains[i / 6]), "key": .string("k\(i % 6)")], timeout: 60)
            if r.parameters?["value"]?["data"] == Wire.base64(value(i)) { intact += 1 }
        }
        #expect(
            intact == writes, "\(intact) of \(writes) acknowledged writes read back after kill -9")
        ReliabilityReport.record(
            "observers: 20 never reading, \(writes) writes of 512 KiB in \(String(format: "%.1f", took)) s: \(dropped) dropped, vaultd peak RSS \(peak) MiB, \(intact)/\(writes) durable after kill -9"
        )
    }

    /// Ten peers ask for a 5 MiB reply and never read it: each is given up within about a
    /// second (not the 30 s send timeout), so a client that reads gets the same large reply.
    @Test(.timeLimit(.minutes(10))) func peersThatDoNotReadTheirRepliesHoldTheBudgetAboutASecond()
        throws
    {
        let d = try CustomDaemon()
        defer { d.close() }
        try d.start()
        let c = try d.connect()
        try Wire.initWithoutPassphrase(c)
        for i in 0..<5 {
            let secret = [UInt8](repeating: UInt8(i), count: 1 << 20)
            let r = c.call(
                "io.vaultd.Keychain.Add",
                [
                    "class": "genericPassword",
                    "attributes": ["service": "big", "account": .string("a\(i)")],
                    "data": Wire.base64(secret),
                ])
            try #require(r.parameters != nil, "\(r)")
        }
        let ask =
            JSON.object([
                "method": "io.vaultd.Keychain.CopyMatching",
                "parameters": [
                    "class": "genericPassword", "query": ["service": "big"], "matchLimit": "all",
                    "returnData": true,
                ],
            ]).serialized() + [0]
        let query: JSONObject = [
            "class": "genericPassword", "query": ["service": "big"], "matchLimit": "all",
            "returnData": true,
        ]
        // The same reply with nobody holding the budget, for comparison.
        var alone = ExactClient.Outcome.timedOut
        let baseline = Self.seconds { alone = c.call("io.vaultd.Keychain.CopyMatching", query) }
        try #require(
            alone.parameters?["items"]?.arrayValue?.count == 5, "\(alone.errorName ?? "\(alone)")")
        let stalled = try (0..<10).map { _ in try d.connect() }
        defer { for s in stalled { s.close() } }
        for s in stalled { try #require(s.send(ask)) }
        // Once vaultd is sending their replies (the first bytes wait in their sockets), they
        // hold the budget: a client that reads asks for the same.
        var waiting = stalled.map { pollfd(fd: $0.fd, events: Int16(POLLIN), revents: 0) }
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            _ = poll(&waiting, nfds_t(waiting.count), 100)
            if waiting.filter({ $0.revents & Int16(POLLIN) != 0 }).count >= 8 { break }
        }
        var reply = ExactClient.Outcome.timedOut
        let took = Self.seconds { reply = c.call("io.vaultd.Keychain.CopyMatching", query) }
        #expect(
            reply.parameters?["items"]?.arrayValue?.count == 5,
            "the reading client: \(reply.errorName ?? "\(reply)")")
        #expect(took < 10, "the reading client waited \(took) s")
        // Each peer that was being sent a reply it did not read was dropped; one that waited
        // for the budget meanwhile was told RateLimited instead (and stays connected). One
        // whose reply began only as the others were dropped may still be in its first
        // second when it is read here, and then reads it whole: at most two such.
        var dropped = 0
        var toldToWait = 0
        var readWhole = 0
        let droppedIn = Self.seconds {
            for s in stalled {
                switch s.receive(timeout: 10) {
                case .closed: dropped += 1
                case .error(let name, _) where name == "io.vaultd.Vault.RateLimited":
                    toldToWait += 1
                case .ok: readWhole += 1
                default: break
                }
            }
        }
        #expect(
            dropped + toldToWait >= 8 && dropped + toldToWait + readWhole == 10,
            "of 10 peers not reading: \(dropped) dropped, \(toldToWait) told RateLimited, \(readWhole) read their reply late"
        )
        ReliabilityReport.record(
            "unread replies: 10 peers not reading 7 MB replies; a reading client's 7 MB reply in \(String(format: "%.2f", took)) s (\(String(format: "%.2f", baseline)) s with nobody holding the budget); \(dropped) dropped, \(toldToWait) told RateLimited, within \(String(format: "%.2f", droppedIn)) s more"
        )
    }

    /// 24 connections at once ask for five 1 MiB items with their data (a 7 MB reply each):
    /// each call reserves the most its reply can take against the reply budget before the
    /// lookup (VAULTD_REPLY_BUDGET_MIB 40: room for one such reply at a time), so vaultd's
    /// peak RSS grows by well under what 24 replies built at once take, while every caller
    /// gets the five items whole or RateLimited naming the reply budget.
    @Test(.timeLimit(.minutes(10))) func largeRepliesAreCountedBeforeTheyAreBuilt() throws {
        let d = try CustomDaemon()
        defer { d.close() }
        try d.start(environment: ["VAULTD_REPLY_BUDGET_MIB": "40"])
        let pid = try #require(d.pid)
        let c = try d.connect()
        try Wire.initWithoutPassphrase(c)
        @Sendable func secret(_ i: Int) -> [UInt8] {
            (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ i &* 7) }
        }
        for i in 0..<5 {
            let r = c.call(
                "io.vaultd.Keychain.Add",
                [
                    "class": "genericPassword",
                    "attributes": ["service": "large", "account": .string("a\(i)")],
                    "data": Wire.base64(secret(i)),
                ])
            try #require(r.parameters != nil, "\(r)")
        }
        let expected = Set((0..<5).map { Data(secret($0)).base64EncodedString() })
        let query: JSONObject = [
            "class": "genericPassword", "query": ["service": "large"], "matchLimit": "all",
            "returnData": true,
        ]
        let alone = c.call("io.vaultd.Keychain.CopyMatching", query, timeout: 60)
        let one = try #require(alone.parameters?["items"]?.arrayValue, "\(alone)")
        #expect(Set(one.compactMap { $0["data"]?.stringValue }) == expected)
        c.close()
        // The peak from here on (writing 5 to clear_refs resets VmHWM to the current RSS).
        try "5".write(toFile: "/proc/\(pid)/clear_refs", atomically: false, encoding: .utf8)
        let before = ProcStatus.peakRSS(pid) ?? 0
        let (served, limited) = Self.atOnce(24, on: d) { client in
            Self.budgetOutcome(client.call("io.vaultd.Keychain.CopyMatching", query, timeout: 120))
            { p in
                let data = p["items"]?.arrayValue?.compactMap { $0["data"]?.stringValue } ?? []
                return data.count == 5 && Set(data) == expected
                    ? "ok" : "wrong items: \(data.count)"
            }
        }
        let grew = ((ProcStatus.peakRSS(pid) ?? 0) - before) >> 10
        // One reply at a time takes about 15 MiB (the sealed rows, the secrets, the reply in
        // secure memory); 24 built at once, with a budget too large to hold any back, took
        // more than ten times that.
        #expect(grew < 128, "vaultd's peak RSS grew by \(grew) MiB")
        #expect(d.log.contains("hold the 40 MiB reply budget") == (limited > 0), "log:\n\(d.log)")
        ReliabilityReport.record(
            "reply budget 40 MiB: 24 concurrent CopyMatching of 5 x 1 MiB with data: \(served) served whole, \(limited) told RateLimited; vaultd peak RSS +\(grew) MiB"
        )
    }

    /// One preference value of 200,000 empty dictionaries (under 2 MB as the domain limit
    /// counts it, and about 100 MiB of JSON objects to answer with): 8 connections ask for it
    /// at once. Each read reserves the most its reply can take before the value is read (here
    /// more than the whole reply budget, so each is built alone), so vaultd's peak RSS grows
    /// by about one such reply, not eight; each caller gets the value or RateLimited naming
    /// the reply budget, and a small domain is read meanwhile. The same for 8 Observe streams
    /// of the domain, whose first reply is its snapshot.
    @Test(.timeLimit(.minutes(10))) func preferenceRepliesAreCountedBeforeTheyAreBuilt() throws {
        let d = try CustomDaemon()
        defer { d.close() }
        try d.start()
        let pid = try #require(d.pid)
        let c = try d.connect()
        try Wire.initWithoutPassphrase(c)
        let members = 200_000
        var nested = JSONObject(minimumCapacity: members)
        for i in 0..<members { nested[String(i, radix: 16)] = ["dict": .object([:])] }
        let set = c.call(
            "io.vaultd.Preferences.Set",
            ["domain": "com.example.nested", "key": "k", "value": ["dict": .object(nested)]],
            timeout: 120)
        try #require(set.parameters != nil, "\(set)")
        nested = [:]
        try #require(
            c.call(
                "io.vaultd.Preferences.Set",
                ["domain": "com.example.small", "key": "k", "value": ["integer": 7]]
            ).parameters != nil)
        try "5".write(toFile: "/proc/\(pid)/clear_refs", atomically: false, encoding: .utf8)
        let before = ProcStatus.peakRSS(pid) ?? 0
        let (served, limited) = Self.atOnce(8, on: d) { client in
            Self.budgetOutcome(
                client.call(
                    "io.vaultd.Preferences.Get", ["domain": "com.example.nested", "key": "k"],
                    timeout: 120)
            ) { p in
                let n = p["value"]?["dict"]?.objectValue?.count
                return n == members ? "ok" : "wrong value: \(n.map(String.init) ?? "none") members"
            }
        }
        let small = c.call("io.vaultd.Preferences.Domain", ["domain": "com.example.small"])
        #expect(small.parameters?["values"]?["k"]?["integer"] == JSON(7), "\(small)")
        let grew = ((ProcStatus.peakRSS(pid) ?? 0) - before) >> 10
        // One such reply takes about 100 MiB; eight built at once took over 800.
        #expect(grew < 256, "vaultd's peak RSS grew by \(grew) MiB")

        // The same for 8 Observe streams of the domain starting at once: their first reply
        // is its snapshot, reserved before it is built and given back once sent.
        try "5".write(toFile: "/proc/\(pid)/clear_refs", atomically: false, encoding: .utf8)
        let beforeObserve = ProcStatus.peakRSS(pid) ?? 0
        let observe =
            JSON.object([
                "method": "io.vaultd.Preferences.Observe",
                "parameters": ["domains": ["com.example.nested"]], "more": true,
            ]).serialized() + [0]
        let (observed, observeLimited) = Self.atOnce(8, on: d) { client in
            guard client.send(observe) else { return "closed" }
            return Self.budgetOutcome(client.receive(timeout: 120)) { p in
                let n = p["values"]?["k"]?["dict"]?.objectValue?.count
                return p["domain"] == "com.example.nested" && n == members
                    ? "ok" : "wrong snapshot: \(n.map(String.init) ?? "none") members"
            }
        }
        let grewObserving = ((ProcStatus.peakRSS(pid) ?? 0) - beforeObserve) >> 10
        #expect(grewObserving < 256, "vaultd's peak RSS grew by \(grewObserving) MiB")
        ReliabilityReport.record(
            "reply budget: 8 concurrent Preferences.Get of 200,000 empty dictionaries: \(served) served, \(limited) told RateLimited; vaultd peak RSS +\(grew) MiB; 8 Observe of it: \(observed) snapshots sent, \(observeLimited) RateLimited, +\(grewObserving) MiB"
        )
    }

    /// A hung vaultd (SIGSTOP): VaultClient calls fail with ConnectionFailed within the
    /// reply timeout (VAULT_TIMEOUT), from an app (vault-example), from vaultctl, and on a
    /// connection made before the hang.
    @Test(.timeLimit(.minutes(10))) func aHungVaultdFailsEveryCallInBoundedTime() throws {
        let d = try Daemon()
        defer {
            if let p = d.pid { kill(p, SIGCONT) }
            d.close()
        }
        #expect(d.initialize().status == 0)
        let pid = try #require(d.pid)
        let app = try d.placeExample("client")
        let open = try VaultConnection(socketPath: d.socketPath, replyTimeout: 1)
        try open.call("io.vaultd.Vault.Status")
        try #require(kill(pid, SIGSTOP) == 0)
        let env = d.environment.merging(["VAULT_TIMEOUT": "1"]) { $1 }
        var example = ProcessResult(status: -1, stdout: Data(), stderr: "")
        let exampleTime = try Self.seconds {
            example = try ChildProcess.run(app, ["status"], environment: env, timeout: 30)
        }
        #expect(
            example.status != 0 && example.stderr.contains("ConnectionFailed"),
            "vault-example: \(example)")
        var ctl = ProcessResult(status: -1, stdout: Data(), stderr: "")
        let ctlTime = try Self.seconds {
            ctl = try ChildProcess.run(
                Paths.tool("vaultctl"), ["status"], environment: env, timeout: 30)
        }
        #expect(ctl.status != 0 && ctl.stderr.contains("did not answer"), "vaultctl: \(ctl)")
        var thrown: Error?
        let openTime = Self.seconds {
            do { try open.call("io.vaultd.Vault.Status") } catch { thrown = error }
        }
        #expect((thrown as? VaultError)?.code == .connectionFailed, "\(String(describing: thrown))")
        for t in [exampleTime, ctlTime, openTime] {
            #expect(t < 5, "a call to a hung vaultd took \(t) s (timeout 1 s)")
        }
        try #require(kill(pid, SIGCONT) == 0)
        #expect(try ChildProcess.run(app, ["status"], environment: env, timeout: 30).status == 0)
        ReliabilityReport.record(
            "hung vaultd, VAULT_TIMEOUT=1: vault-example failed in \(String(format: "%.2f", exampleTime)) s, vaultctl \(String(format: "%.2f", ctlTime)) s, an open connection \(String(format: "%.2f", openTime)) s"
        )
    }

    /// An app writing past its storage quota (AppStorageQuotaBytes, 4 MiB here) gets
    /// QuotaExceeded, and nothing it stored before is lost; another app still writes; a
    /// delete gives room back; the count survives kill -9 (it is kept in the store).
    @Test(.timeLimit(.minutes(10))) func anAppPastItsQuotaIsRefusedAndOthersStillWrite() throws {
        let d = try Daemon(start: false)
        defer { d.close() }
        let quota = 4 << 20
        let config = d.root + "/home/.config/vaultd"
        try FileManager.default.createDirectory(atPath: config, withIntermediateDirectories: true)
        try PropertyListCodec.encode(
            .dict(["AppStorageQuotaBytes": .integer(Int64(quota))]), format: .xml
        )
        .write(to: URL(fileURLWithPath: config + "/config.plist"))
        try d.start()
        #expect(d.initialize().status == 0)
        let filler = try d.placeExample("filler")
        try d.install("org.example.Filler", exe: filler)
        let other = try d.placeExample("other")
        try d.install("org.example.Other", exe: other)
        func secret(_ i: Int) -> Data {
            Data((0..<(900 << 10)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ i) })
        }
        func add(_ app: String, _ group: String, _ i: Int) -> ProcessResult {
            d.app(
                app,
                [
                    "item", "add", "--access-group", group, "--service", "fill", "--account",
                    "a\(i)",
                ], stdin: secret(i))
        }
        // 900 KiB each: four fit in 4 MiB, the fifth does not.
        var stored = 0
        var refusal: ProcessResult?
        for i in 0..<8 {
            let r = add(filler, "org.example.Filler", i)
            if r.status == 0 {
                stored += 1
                continue
            }
            refusal = r
            break
        }
        #expect(stored == 4, "\(stored) items of 900 KiB stored under a 4 MiB quota")
        #expect(
            refusal?.stderr.contains("io.vaultd.Vault.QuotaExceeded") == true,
            "\(String(describing: refusal))")
        #expect(
            refusal?.stderr.contains("quota is \(quota) bytes") == true,
            "\(String(describing: refusal))")
        // Nothing stored before is lost.
        for i in 0..<stored {
            let r = d.app(filler, ["item", "get", "--service", "fill", "--account", "a\(i)"])
            #expect(
                r.status == 0 && r.stdout == secret(i),
                "item a\(i) after the refusal: \(r.status) \(r.stderr)")
        }
        // Its own preferences count too: ten values of 100 KB do not fit in what is left.
        let big = String(repeating: "p", count: 100_000)
        let fill = d.app(filler, ["defaults", "fill", "10", "--value", big])
        #expect(
            fill.status != 0 && fill.stderr.contains("QuotaExceeded"),
            "preferences past the quota: \(fill)")
        #expect(
            d.app(filler, ["defaults", "get", "key0"]).stdoutText.hasPrefix(big),
            "the first value written before the refusal")
        // With the room left under 100 KB, a larger secret (1 MiB) for a stored item is refused too, and leaves it as it was.
        let grow = d.app(
            filler, ["item", "update", "--service", "fill", "--account", "a0"],
            stdin: Data(count: 1 << 20))
        #expect(
            grow.status != 0 && grow.stderr.contains("QuotaExceeded"),
            "update to a larger secret: \(grow)")
        #expect(
            d.app(filler, ["item", "get", "--service", "fill", "--account", "a0"]).stdout
                == secret(0))
        // Another app still writes; so does the owner.
        #expect(add(other, "org.example.Other", 0).status == 0, "another app's write")
        let owner = d.ctl(
            ["item", "add", "--service", "owner", "--account", "o"], stdin: secret(9))
        #expect(owner.status == 0, "the owner's write: \(owner)")
        // The count is kept in the store: after kill -9 the app is still at its quota, and a
        // delete gives room back.
        d.kill()
        try d.start()
        #expect(d.unlock().status == 0)
        #expect(
            add(filler, "org.example.Filler", 20).stderr.contains("QuotaExceeded"),
            "after a restart")
        for a in ["a1", "a2"] {
            #expect(
                d.app(filler, ["item", "delete", "--service", "fill", "--account", a]).status == 0)
        }
        let again = add(filler, "org.example.Filler", 21)
        #expect(again.status == 0, "after a delete: \(again)")
        ReliabilityReport.record(
            "quota 4 MiB: \(stored) items of 900 KiB stored, the next refused with QuotaExceeded; other apps and the owner still write"
        )
    }

    @Test func theReplyTimeoutComesFromVAULT_TIMEOUT() throws {
        #expect(
            try VaultConnection.replyTimeout(environment: [:])
                == VaultConnection.defaultReplyTimeout)
        #expect(VaultConnection.defaultReplyTimeout == 60)
        #expect(try VaultConnection.replyTimeout(environment: ["VAULT_TIMEOUT": "2.5"]) == 2.5)
        #expect(try VaultConnection.replyTimeout(environment: ["VAULT_TIMEOUT": "0"]) == 0)
        for bad in ["5s", "-1", "inf", "nan"] {
            #expect(throws: VaultError.self) {
                try VaultConnection.replyTimeout(environment: ["VAULT_TIMEOUT": bad])
            }
        }
    }
}
