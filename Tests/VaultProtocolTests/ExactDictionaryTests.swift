import Foundation
import Testing

@testable import VaultProtocol

/// `ExactDictionary` keeps up to `linearLimit` entries in an array and more in a hash table:
/// both hold the same entries, keyed by their bytes, and compare alike.
@Suite struct ExactDictionaryTests {
    /// Keys differing only in Unicode normalisation are two entries, before and after the
    /// dictionary outgrows its array; every key set is found, every key removed is gone.
    @Test(arguments: [1, 7, 8, 9, 40])
    func entriesAreKeptByTheirBytesAtEverySize(count: Int) {
        var d = ExactDictionary<Int>()
        var keys = (0..<count).map { "key\($0)" }
        keys += ["caf\u{E9}", "cafe\u{301}"]
        for (i, k) in keys.enumerated() { #expect(d.updateValue(i, forKey: k) == nil) }
        #expect(d.count == keys.count)
        for (i, k) in keys.enumerated() { #expect(d[k] == i, "\(k)") }
        #expect(d.updateValue(-1, forKey: "cafe\u{301}") == keys.count - 1)
        #expect(d["caf\u{E9}"] == keys.count - 2)
        #expect(d["cafe\u{301}"] == -1)
        #expect(d.keys.count == keys.count)
        #expect(Set(d.keys.map { Array($0.utf8) }) == Set(keys.map { Array($0.utf8) }))
        #expect(d.removeValue(forKey: "caf\u{E9}") == keys.count - 2)
        #expect(d["caf\u{E9}"] == nil)
        #expect(d["cafe\u{301}"] == -1)
        d["key0"] = nil
        #expect(d["key0"] == nil)
        #expect(d.count == keys.count - 2)
        #expect(d.sortedByKey().map(\.key) == d.keys.sorted { $0.bytesPrecede($1) })
    }

    /// Equal entries are equal dictionaries whatever order they were set in and whether
    /// one of them outgrew its array; a different value or key is not.
    @Test func equalityIgnoresOrderAndStorage() {
        var a = ExactDictionary<Int>()
        var b = ExactDictionary<Int>()
        for i in 0..<5 { a["k\(i)"] = i }
        for i in (0..<5).reversed() { b["k\(i)"] = i }
        #expect(a == b)
        // b outgrows its array, then shrinks back to a's entries: still a table.
        for i in 5..<20 { b["k\(i)"] = i }
        for i in 5..<20 { b["k\(i)"] = nil }
        #expect(a == b)
        b["k0"] = 9
        #expect(a != b)
        b["k0"] = 0
        b["caf\u{E9}"] = 1
        a["cafe\u{301}"] = 1
        #expect(a != b)
    }

    /// While the entries fit the array, iteration follows the order they were first set in
    /// (a replaced value keeps its place; a removed key set again goes last).
    @Test func smallDictionariesIterateInInsertionOrder() {
        var d: ExactDictionary<Int> = ["b": 1, "a": 2, "c": 3]
        d["a"] = 4
        d["b"] = nil
        d["b"] = 5
        #expect(d.map(\.key) == ["a", "c", "b"])
        #expect(d.map(\.value) == [4, 3, 5])
        #expect(d.first?.key == "a")
    }

    /// A JSON object of any size parses to the members it holds, and a duplicate member is
    /// refused at any size (the array and the table both see it).
    @Test(arguments: [3, 8, 9, 30])
    func jsonObjectsKeepEveryMemberAndRefuseDuplicates(count: Int) throws {
        let members = (0..<count).map { "\"m\($0)\":\($0)" }
        let object = try JSON.parse("{" + members.joined(separator: ",") + "}")
        guard case .object(let o) = object else {
            Issue.record("not an object")
            return
        }
        #expect(o.count == count)
        for i in 0..<count { #expect(o["m\(i)"] == .number("\(i)")) }
        let duplicate = "{" + (members + ["\"m\(count - 1)\":0"]).joined(separator: ",") + "}"
        #expect(throws: (any Error).self) { _ = try JSON.parse(duplicate) }
        #expect(try JSON.parse(Array(object.serialized())) == object)
    }
}
