import Foundation
import Synchronization
import Testing
import VaultProtocol

@testable import VaultCore

/// Lookups read through `ReaderPool` connections and take their keys under the keys lock:
/// they wait neither for a group commit's transaction nor for each other.
@Suite struct ReaderTests {
    @Test func aReaderSeesCommittedWritesAndWritesNothing() throws {
        try withTemporaryDirectory { tmp in
            let db = try Database(path: tmp + "/p.sqlite")
            defer { db.close() }
            try db.execute("CREATE TABLE t (x INTEGER)")
            try db.run("INSERT INTO t VALUES (1)")
            let pool = ReaderPool(path: db.path, logger: db.logger, capacity: 1)
            #expect(try pool.read { try $0.rows("SELECT x FROM t").count } == 1)
            // A commit after the reader opened is in the next read's snapshot.
            try db.run("INSERT INTO t VALUES (2)")
            #expect(
                try pool.read { try $0.rows("SELECT x FROM t ORDER BY x").map { $0[0].int64 } } == [
                    1, 2,
                ])
            // Readers are query_only.
            #expect(throws: VaultFailure.self) {
                _ = try pool.read { try $0.run("INSERT INTO t VALUES (3)") }
            }
            #expect(try db.rows("SELECT x FROM t").count == 2)
            pool.close()
            #expect(try pool.read { _ in 0 } == nil)
        }
    }

    /// A read that finds every reader lent out waits for one to come back (rather than read
    /// under the engine lock, behind a group commit); closing the pool sends it there.
    @Test func aReadWaitsForABusyReaderAndCloseReleasesIt() throws {
        try withTemporaryDirectory { tmp in
            let db = try Database(path: tmp + "/p.sqlite")
            defer { db.close() }
            try db.execute("CREATE TABLE t (x INTEGER)")
            try db.run("INSERT INTO t VALUES (7)")
            let pool = ReaderPool(path: db.path, logger: db.logger, capacity: 1)
            let outcome = Mutex<[Int?]>([])
            for round in 0..<2 {
                let inside = DispatchSemaphore(value: 0)
                let release = DispatchSemaphore(value: 0)
                Thread.detachNewThread {
                    _ = try? pool.read { _ in
                        inside.signal()
                        release.wait()
                    }
                }
                inside.wait()
                let second = DispatchSemaphore(value: 0)
                Thread.detachNewThread {
                    let x = try? pool.read {
                        try $0.rows("SELECT x FROM t")[0][0].int64.map(Int.init) ?? nil
                    }
                    outcome.withLock { $0.append(x ?? nil) }
                    second.signal()
                }
                #expect(
                    second.wait(timeout: .now() + 0.2) == .timedOut,
                    "a read did not wait for the only reader")
                if round == 0 {
                    release.signal()  // the reader comes back: the waiting read gets it
                    #expect(second.wait(timeout: .now() + 10) == .success)
                    #expect(outcome.withLock { $0 } == [7])
                } else {
                    // Closing wakes the waiting read, which gets nil (the engine lock's turn).
                    Thread.detachNewThread { pool.close() }
                    #expect(second.wait(timeout: .now() + 10) == .success)
                    #expect(outcome.withLock { $0 } == [7, nil])
                    release.signal()
                }
            }
        }
    }

    @Test func closeWaitsForALentReaderAndNoReaderCreatesTheStore() throws {
        try withTemporaryDirectory { tmp in
            let db = try Database(path: tmp + "/p.sqlite")
            defer { db.close() }
            try db.execute("CREATE TABLE t (x INTEGER)")
            let pool = ReaderPool(path: db.path, logger: db.logger, capacity: 2)
            let inside = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                _ = try? pool.read { _ in
                    inside.signal()
                    release.wait()
                }
            }
            inside.wait()
            let closed = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                pool.close()
                closed.signal()
            }
            #expect(
                closed.wait(timeout: .now() + 0.2) == .timedOut,
                "close returned while a reader was lent out")
            release.signal()
            #expect(closed.wait(timeout: .now() + 10) == .success)
            #expect(try pool.read { _ in 1 } == nil)
            // A reader opens only an existing store (else the caller reads on the writer's).
            let missing = tmp + "/missing.sqlite"
            #expect(try ReaderPool(path: missing, logger: Logger()).read { _ in 1 } == nil)
            #expect(!FileManager.default.fileExists(atPath: missing))
        }
    }

    /// While a write transaction holds the engine lock, lookups by the owner and by an app
    /// (whose registration is read too) and a preference read still answer.
    @Test func lookupsDoNotWaitForAWriteTransaction() throws {
        try withVault { vault, _ in
            let app = try vault.installApp(
                "org.example.Reader", executable: "/usr/bin/true", accessGroups: ["shared"],
                caller: .owner)
            try vault.addGeneric(service: "s", account: "a", secret: [1], accessGroup: "shared")
            // Its first launch writes (it wipes what earlier installs left): done before.
            #expect(try vault.hello(app.caller).firstLaunch)
            try vault.setPreference(
                domain: "org.example.Reader", key: "k", value: .string("v"), caller: .owner)
            let inside = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            let writerDone = DispatchSemaphore(value: 0)
            let written = Atomic<Bool>(false)
            Thread.detachNewThread {
                do {
                    try vault.write { db in
                        inside.signal()
                        release.wait()
                        _ = try db.run(
                            "INSERT INTO vault_meta (key, value) VALUES ('reader-test', x'00')")
                    }
                    written.store(true, ordering: .releasing)
                } catch {}
                writerDone.signal()
            }
            inside.wait()
            let found = Mutex<[[UInt8]?]>([])
            let lookedUp = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                for caller in [Caller.owner, app.caller] {
                    let query = ItemQuery(
                        itemClass: .genericPassword, attributes: ItemAttributes(service: "s"))
                    let data = try? vault.copyMatching(query, returnData: true, caller: caller)
                        .first.flatMap { plain($0.data) }
                    found.withLock { $0.append(data) }
                }
                let preference = try? vault.preference(
                    domain: "org.example.Reader", key: "k", caller: .owner)
                found.withLock { $0.append(preference == .string("v") ? [2] : nil) }
                lookedUp.signal()
            }
            let answered = lookedUp.wait(timeout: .now() + 10) == .success
            let writtenDuringLookups = written.load(ordering: .acquiring)
            #expect(!writtenDuringLookups, "the transaction was still open during the lookups")
            release.signal()
            writerDone.wait()
            if !answered { lookedUp.wait() }
            #expect(answered, "the lookups waited for the write transaction")
            let results = found.withLock { $0 }
            let writtenAfter = written.load(ordering: .acquiring)
            #expect(results == [[1], [1], [2]])
            #expect(writtenAfter)
        }
    }
}
