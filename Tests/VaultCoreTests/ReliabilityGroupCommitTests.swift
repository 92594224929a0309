import Foundation
import Testing
import VaultProtocol

@testable import VaultCore

/// Issue #9's full-disk test found it through vaultd: when the disk fills in the middle of a
/// group commit, SQLite rolls the whole transaction back. Every write of that group must then
/// fail with StorageFull, and none may be stored. (`max_page_count` makes SQLite report
/// SQLITE_FULL exactly as a full disk does, without needing one.)
@Suite struct ReliabilityGroupCommitTests {
    final class Outcomes: @unchecked Sendable {
        let lock = NSLock()
        var results: [Int: Result<Void, Error>] = [:]
        func set(_ i: Int, _ r: Result<Void, Error>) { lock.withLock { results[i] = r } }
    }

    @Test func diskFullInTheMiddleOfAGroupFailsTheWholeGroupWithStorageFull() throws {
        try withTemporaryDirectory { dir in
            let db = try Database(path: dir + "/t.sqlite")
            try db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)")
            let pages = try #require(try db.row("PRAGMA page_count")?[0].int64)
            try db.execute("PRAGMA max_page_count = \(pages + 40)")  // ~160 KiB more
            let engine = NSLock()
            let group = GroupCommit()
            let outcomes = Outcomes()
            @Sendable func write(_ i: Int, bytes: Int, hold: Double = 0) {
                do {
                    try group.write(
                        db,
                        withDatabase: { run in
                            // The first leader holds on, so the next three queue up and are
                            // committed together.
                            if hold > 0 { Thread.sleep(forTimeInterval: hold) }
                            try engine.withLock { try run() }
                        },
                        { _ = try db.run("INSERT INTO t (id, v) VALUES (?, ?)", [.integer(Int64(i)), .blob([UInt8](repeating: 1, count: bytes))]) })
                    outcomes.set(i, .success(()))
                } catch {
                    outcomes.set(i, .failure(error))
                }
            }
            let done = DispatchGroup()
            for (i, bytes, delay, hold) in [(1, 100, 0.0, 0.4), (2, 100, 0.1, 0), (3, 1 << 20, 0.15, 0), (4, 100, 0.2, 0)] {
                done.enter()
                Thread {
                    Thread.sleep(forTimeInterval: delay)
                    write(i, bytes: bytes, hold: hold)
                    done.leave()
                }.start()
            }
            done.wait()
            #expect((try? outcomes.results[1]?.get()) != nil, "the first, lone write should succeed: \(String(describing: outcomes.results[1]))")
            for i in 2...4 {
                switch outcomes.results[i] {
                case .failure(let e as VaultError)?:
                    #expect(e.code == .storageFull, "write \(i): \(e)")
                case let other:
                    Issue.record("write \(i) of the group that ran out of space: \(String(describing: other))")
                }
            }
            let stored = try db.rows("SELECT id FROM t ORDER BY id").compactMap { $0[0].int64 }
            #expect(stored == [1], "rows stored: \(stored)")
            // And the store is usable afterwards.
            try group.write(db, withDatabase: { run in try engine.withLock { try run() } }) {
                _ = try db.run("INSERT INTO t (id, v) VALUES (5, x'00')")
            }
            #expect(try db.rows("SELECT id FROM t ORDER BY id").compactMap { $0[0].int64 } == [1, 5])
        }
    }
}
