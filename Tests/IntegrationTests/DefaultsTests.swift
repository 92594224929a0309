import Foundation
import Testing

/// `vaultctl defaults` as defaults(1): typed writes, read-type, read, and durability across
/// a restart.
@Suite struct DefaultsTests {
    struct Value {
        var key: String
        var write: [String]
        var type: String
        /// What `defaults read D KEY` prints (defaults(1)'s text form), without the final newline.
        var printed: String
    }

    static let values: [Value] = [
        Value(key: "int", write: ["-int", "9223372036854775807"], type: "integer", printed: "9223372036854775807"),
        Value(key: "float", write: ["-float", "0.1"], type: "float", printed: "0.1"),
        Value(key: "bool", write: ["-bool", "yes"], type: "boolean", printed: "1"),
        Value(key: "date", write: ["-date", "2038-01-19 03:14:08 +0000"], type: "date", printed: "2038-01-19 03:14:08 +0000"),
        Value(key: "data", write: ["-data", "00ff00"], type: "data", printed: "{length = 3, bytes = 0x00ff00}"),
        Value(key: "array", write: ["-array", "a", "b"], type: "array", printed: "(\n    a,\n    b\n)"),
        Value(key: "dict", write: ["-dict", "k", "v"], type: "dictionary", printed: "{\n    k = v;\n}"),
    ]

    static let domain = "com.example.defaults"

    @Test func typedValuesReadBackAndSurviveARestart() throws {
        let d = try Daemon()
        defer { d.close() }
        for v in Self.values {
            let w = d.ctl(["defaults", "write", Self.domain, v.key] + v.write)
            #expect(w.status == 0, "write \(v.key): \(w)")
        }
        check(d, "before restart")
        #expect(try d.restart() == 0)
        check(d, "after restart")
    }

    private func check(_ d: Daemon, _ when: String) {
        for v in Self.values {
            let t = d.ctl(["defaults", "read-type", Self.domain, v.key])
            #expect(t.status == 0, "\(when) read-type \(v.key): \(t)")
            #expect(t.stdoutText == "Type is \(v.type)\n", "\(when) read-type \(v.key): \(t)")
            let r = d.ctl(["defaults", "read", Self.domain, v.key])
            #expect(r.status == 0, "\(when) read \(v.key): \(r)")
            #expect(r.stdoutText == v.printed + "\n", "\(when) read \(v.key)")
        }
    }

    /// The values on the wire are exact (tagged JSON, DESIGN §6): full Int64, the Double 0.1,
    /// the bytes 00 ff 00.
    @Test func wireValuesAreExact() throws {
        let d = try Daemon()
        defer { d.close() }
        for v in Self.values { try #require(d.ctl(["defaults", "write", Self.domain, v.key] + v.write).status == 0) }
        let c = try d.connect()
        func value(_ key: String) throws -> [String: Any]? {
            try c.call("io.vaultd.Preferences.Get", ["domain": Self.domain, "key": key]).parameters?["value"] as? [String: Any]
        }
        #expect((try value("int")?["integer"] as? NSNumber)?.int64Value == Int64.max)
        #expect((try value("float")?["real"] as? NSNumber)?.doubleValue.bitPattern == (0.1).bitPattern)
        #expect(try value("bool")?["bool"] as? Bool == true)
        #expect(try value("data")?["data"] as? String == Data([0, 0xFF, 0]).base64EncodedString())
        let array = try value("array")?["array"] as? [[String: Any]]
        #expect(array?.compactMap { $0["string"] as? String } == ["a", "b"])
    }

    @Test func missingKeyIsAnError() throws {
        let d = try Daemon()
        defer { d.close() }
        let r = d.ctl(["defaults", "read", Self.domain, "absent"])
        #expect(r.status == 1, "\(r)")
        #expect(r.stdout.isEmpty)
        #expect(r.stderr.contains("does not exist"), "\(r)")
    }
}
