import Foundation
import Testing
import VaultProtocol

@testable import VaultCore

@Suite struct DatabaseTests {
    /// Text is bound as its UTF-8 bytes with their count: empty text stays empty text (not
    /// NULL), a NUL inside is kept, and two spellings of "é" stay two values.
    @Test func textIsBoundByteForByte() throws {
        try withTemporaryDirectory { tmp in
            let db = try Database(path: tmp + "/t.sqlite")
            defer { db.close() }
            try db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, x TEXT)")
            let values = [
                "", "a\0b", "caf\u{E9}", "cafe\u{301}", String(repeating: "x", count: 100_000),
            ]
            for (i, v) in values.enumerated() {
                try db.run("INSERT INTO t VALUES (?, ?)", [.integer(Int64(i)), .text(v)])
            }
            let back = try db.rows(
                "SELECT x, typeof(x), length(CAST(x AS BLOB)) FROM t ORDER BY id")
            #expect(back.map { $0[1].text } == Array(repeating: "text", count: values.count))
            #expect(back.map { $0[2].int64 } == values.map { Int64($0.utf8.count) })
            for (row, value) in zip(back, values) { #expect(row[0].text?.sameBytes(value) == true) }
            #expect(
                try db.rows("SELECT id FROM t WHERE x = ?", [.text("cafe\u{301}")]).map {
                    $0[0].int64
                } == [3])
        }
    }

    /// `execute` runs one statement and refuses a text of several, running none of it (a
    /// semicolon inside a literal is not a separator); `executeScript` runs a script whole.
    @Test func executeRunsOneStatementAndScriptsAreExplicit() throws {
        try withTemporaryDirectory { tmp in
            let db = try Database(path: tmp + "/t.sqlite")
            defer { db.close() }
            try db.execute("CREATE TABLE t (x TEXT);")
            try db.execute("INSERT INTO t VALUES ('a;b')")
            let e = expectFailure(.internalError) {
                try db.execute("INSERT INTO t VALUES ('c'); DROP TABLE t")
            }
            #expect(e?.message.contains("more than one statement") == true)
            #expect(try db.rows("SELECT x FROM t").map { $0[0].text } == ["a;b"])
            try db.executeScript("INSERT INTO t VALUES ('d'); INSERT INTO t VALUES ('e;f');")
            #expect(
                try db.rows("SELECT x FROM t ORDER BY x").map { $0[0].text } == ["a;b", "d", "e;f"])
        }
    }

    /// A file SQLite finds malformed in the middle of a query (its table's page zeroed
    /// underneath): StoreDamaged, saying what to do, not a crash; the connection begins no
    /// write afterwards; `quickCheck` does not pass it.
    @Test func damageMetAtRuntimeIsStoreDamagedAndStopsWrites() throws {
        try withTemporaryDirectory { tmp in
            let path = tmp + "/t.sqlite"
            do {
                let db = try Database(path: path)
                try db.execute("CREATE TABLE t (x BLOB)")
                try db.write { db in
                    for _ in 0..<50 { try db.run("INSERT INTO t VALUES (randomblob(200))") }
                }
                db.close()
            }
            let root = try { () -> Int in
                let db = try Database(path: path)
                defer { db.close() }
                return Int(
                    try #require(
                        try db.row("SELECT rootpage FROM sqlite_master WHERE name = 't'")?[0].int64)
                )
            }()
            var file = try Data(contentsOf: URL(fileURLWithPath: path))
            let at = (root - 1) * 4096
            file.replaceSubrange(at..<at + 12, with: Data(count: 12))
            try file.write(to: URL(fileURLWithPath: path))
            let db = try Database(path: path)
            defer { db.close() }
            let e = expectFailure(.storeDamaged) {
                _ = try db.rows("SELECT count(*), sum(length(x)) FROM t")
            }
            #expect(e?.message.contains("restore a backup") == true, "\(String(describing: e))")
            #expect(db.damageSeen)
            expectFailure(.storeDamaged) {
                _ = try db.write { db in try db.run("INSERT INTO t VALUES (x'00')") }
            }
            // It reports the page, or cannot read it (StoreDamaged): never "ok".
            #expect((try? db.quickCheck()) != ["ok"])
        }
    }

    /// A statement cached by shape is made once and answers as the same text does.
    @Test func statementsCachedByShapeAreMadeOnce() throws {
        try withTemporaryDirectory { tmp in
            let db = try Database(path: tmp + "/t.sqlite")
            defer { db.close() }
            try db.execute("CREATE TABLE t (x INTEGER)")
            for x in 1...3 { try db.run("INSERT INTO t VALUES (?)", [.integer(Int64(x))]) }
            var made = 0
            let sql = { () -> String in
                made += 1
                return "SELECT x FROM t WHERE x >= ? ORDER BY x"
            }
            #expect(try db.rows(shape: 7, sql: sql, [.integer(2)]).map { $0[0].int64 } == [2, 3])
            #expect(try db.rows(shape: 7, sql: sql, [.integer(3)]).map { $0[0].int64 } == [3])
            #expect(made == 1)
            #expect(
                try db.rows("SELECT x FROM t WHERE x >= ? ORDER BY x", [.integer(1)]).count == 3)
        }
    }
}
