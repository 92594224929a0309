internal import CSQLite
import Foundation

/// A value bound to or read from SQLite.
public enum SQLValue: Equatable, Sendable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])

    public var int64: Int64? {
        if case .integer(let i) = self { return i }
        return nil
    }
    public var text: String? {
        if case .text(let s) = self { return s }
        return nil
    }
    public var blob: [UInt8]? {
        switch self {
        case .blob(let b): return b
        case .null: return nil
        case .text(let s): return Array(s.utf8)
        default: return nil
        }
    }
    public var real: Double? {
        switch self {
        case .real(let d): return d
        case .integer(let i): return Double(i)
        default: return nil
        }
    }
}

public typealias Row = [SQLValue]

extension SQLValue {
    /// An SQL function's argument (`Database.createFunction`), copied.
    init(_ value: OpaquePointer?) {
        switch sqlite3_value_type(value) {
        case SQLITE_INTEGER: self = .integer(sqlite3_value_int64(value))
        case SQLITE_FLOAT: self = .real(sqlite3_value_double(value))
        case SQLITE_TEXT:
            let count = Int(sqlite3_value_bytes(value))
            self = .text(
                sqlite3_value_text(value).map {
                    String(decoding: UnsafeBufferPointer(start: $0, count: count), as: UTF8.self)
                } ?? "")
        case SQLITE_BLOB:
            let count = Int(sqlite3_value_bytes(value))
            self = .blob(
                sqlite3_value_blob(value).map {
                    Array(UnsafeRawBufferPointer(start: $0, count: count))
                } ?? [])
        default: self = .null
        }
    }
}

/// A prepared statement owned by its `Database`; finalized in deinit.
public final class Statement {
    private let handle: OpaquePointer
    private unowned let database: Database

    init(handle: OpaquePointer, database: Database) {
        self.handle = handle
        self.database = database
    }

    deinit { sqlite3_finalize(handle) }

    func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    /// Whether it makes no direct change to the database file (sqlite3_stmt_readonly).
    var isReadOnly: Bool { sqlite3_stmt_readonly(handle) != 0 }

    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    func bind(_ arguments: [SQLValue]) throws {
        for (i, a) in arguments.enumerated() {
            let idx = Int32(i + 1)
            let rc: Int32
            switch a {
            case .null: rc = sqlite3_bind_null(handle, idx)
            case .integer(let v): rc = sqlite3_bind_int64(handle, idx, v)
            case .real(let v): rc = sqlite3_bind_double(handle, idx, v)
            case .text(var v):
                // With its byte count, so a NUL inside the text is kept rather than ending it
                // (and its UTF-8 in place: `withCString` copied it).
                rc = v.withUTF8 { b in
                    b.withMemoryRebound(to: CChar.self) { c in
                        // An empty text has no address; a null pointer would bind NULL.
                        guard let p = c.baseAddress else {
                            return sqlite3_bind_text(handle, idx, "", 0, Statement.transient)
                        }
                        return sqlite3_bind_text(
                            handle, idx, p, Int32(c.count), Statement.transient)
                    }
                }
            case .blob(let v):
                rc = v.withUnsafeBytes { b in
                    sqlite3_bind_blob(
                        handle, idx, b.baseAddress ?? UnsafeRawPointer(bitPattern: 1),
                        Int32(b.count), Statement.transient)
                }
            }
            try database.check(rc, "bind")
        }
    }

    /// Advances; true when a row is available.
    func step() throws -> Bool {
        let rc = sqlite3_step(handle)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        if rc & 0xFF == SQLITE_CONSTRAINT { throw ConstraintViolation(code: rc) }
        try database.check(rc, "step")
        return false
    }

    /// Column `i` of the current row as an integer (0 when NULL).
    func int64(_ i: Int32) -> Int64 { sqlite3_column_int64(handle, i) }

    /// Column `i` of the current row as bytes, valid only inside `body` (nil when NULL):
    /// no copy, for reading many rows.
    func withBlob<T>(_ i: Int32, _ body: (UnsafeRawBufferPointer?) -> T) -> T {
        guard sqlite3_column_type(handle, i) != SQLITE_NULL else { return body(nil) }
        let count = Int(sqlite3_column_bytes(handle, i))
        guard let p = sqlite3_column_blob(handle, i) else {
            return body(UnsafeRawBufferPointer(start: nil, count: 0))
        }
        return body(UnsafeRawBufferPointer(start: p, count: count))
    }

    func row() -> Row {
        let n = sqlite3_column_count(handle)
        var r: Row = []
        r.reserveCapacity(Int(n))
        for i in 0..<n {
            switch sqlite3_column_type(handle, i) {
            case SQLITE_INTEGER: r.append(.integer(sqlite3_column_int64(handle, i)))
            case SQLITE_FLOAT: r.append(.real(sqlite3_column_double(handle, i)))
            case SQLITE_TEXT:
                // Every byte, NULs included (text is bound with its length).
                let p = sqlite3_column_text(handle, i)
                let count = Int(sqlite3_column_bytes(handle, i))
                r.append(
                    .text(
                        p.map {
                            String(
                                decoding: UnsafeBufferPointer(start: $0, count: count),
                                as: UTF8.self)
                        } ?? ""))
            case SQLITE_BLOB:
                let count = Int(sqlite3_column_bytes(handle, i))
                if let p = sqlite3_column_blob(handle, i) {
                    r.append(.blob(Array(UnsafeRawBufferPointer(start: p, count: count))))
                } else {
                    r.append(.blob([]))
                }
            default: r.append(.null)
            }
        }
        return r
    }
}

/// A UNIQUE / CHECK / FOREIGN KEY constraint failed.
public struct ConstraintViolation: Error {
    /// SQLite's extended result code.
    public var code: Int32
    /// A UNIQUE index (or PRIMARY KEY) refused a second row with its key.
    /// (SQLITE_CONSTRAINT_UNIQUE, SQLITE_CONSTRAINT_PRIMARYKEY: macros Swift does not import.)
    public var isUniqueness: Bool {
        code == SQLITE_CONSTRAINT | (8 << 8) || code == SQLITE_CONSTRAINT | (6 << 8)
    }
}
