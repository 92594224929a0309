import Foundation
import Testing
import VaultClient
import VaultProtocol

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
        Value(
            key: "int", write: ["-int", "9223372036854775807"], type: "integer",
            printed: "9223372036854775807"),
        Value(key: "float", write: ["-float", "0.1"], type: "float", printed: "0.1"),
        Value(key: "bool", write: ["-bool", "yes"], type: "boolean", printed: "1"),
        Value(
            key: "date", write: ["-date", "2038-01-19 03:14:08 +0000"], type: "date",
            printed: "2038-01-19 03:14:08 +0000"),
        Value(
            key: "data", write: ["-data", "00ff00"], type: "data",
            printed: "{length = 3, bytes = 0x00ff00}"),
        Value(
            key: "array", write: ["-array", "a", "b"], type: "array", printed: "(\n    a,\n    b\n)"
        ),
        Value(
            key: "dict", write: ["-dict", "k", "v"], type: "dictionary", printed: "{\n    k = v;\n}"
        ),
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

    /// The values on the wire are exact (tagged JSON): full Int64, the Double 0.1,
    /// the bytes 00 ff 00.
    @Test func wireValuesAreExact() throws {
        let d = try Daemon()
        defer { d.close() }
        for v in Self.values {
            try #require(d.ctl(["defaults", "write", Self.domain, v.key] + v.write).status == 0)
        }
        let c = try d.connect()
        func value(_ key: String) throws -> [String: Any]? {
            try c.call("io.vaultd.Preferences.Get", ["domain": Self.domain, "key": key])
                .parameters?["value"] as? [String: Any]
        }
        #expect((try value("int")?["integer"] as? NSNumber)?.int64Value == Int64.max)
        #expect(
            (try value("float")?["real"] as? NSNumber)?.doubleValue.bitPattern == (0.1).bitPattern)
        #expect(try value("bool")?["bool"] as? Bool == true)
        #expect(try value("data")?["data"] as? String == Data([0, 0xFF, 0]).base64EncodedString())
        let array = try value("array")?["array"] as? [[String: Any]]
        #expect(array?.compactMap { $0["string"] as? String } == ["a", "b"])
    }

    /// `-date` takes `yyyy-MM-dd HH:mm:ss ±HHMM` and ISO 8601 with `Z` or an offset (`±HH:MM`,
    /// `±HHMM`), and `read` prints the date the wire (and export) holds: both count days in the
    /// proleptic Gregorian calendar, also before 1582, where Foundation's calendar is Julian.
    @Test(arguments: [
        ("0001-01-01T00:00:00Z", "0001-01-01 00:00:00 +0000", "0001-01-01T00:00:00Z"),
        ("1500-06-01 00:00:00 +0000", "1500-06-01 00:00:00 +0000", "1500-06-01T00:00:00Z"),
        ("1582-10-10", "1582-10-10 00:00:00 +0000", "1582-10-10T00:00:00Z"),
        ("9999-12-31 23:59:59", "9999-12-31 23:59:59 +0000", "9999-12-31T23:59:59Z"),
        ("2026-01-31T12:00:00+02:00", "2026-01-31 10:00:00 +0000", "2026-01-31T10:00:00Z"),
        ("2026-01-31T12:00:00-0130", "2026-01-31 13:30:00 +0000", "2026-01-31T13:30:00Z"),
        ("2026-01-31T12:00:00.25+01:00", "2026-01-31 11:00:00 +0000", "2026-01-31T11:00:00.25Z"),
        ("2026-01-31 00:30:00 +0100", "2026-01-30 23:30:00 +0000", "2026-01-30T23:30:00Z"),
    ])
    func datesAreProlepticGregorianAndTakeOffsets(write: String, printed: String, wire: String)
        throws
    {
        let d = try Daemon()
        defer { d.close() }
        let w = d.ctl(["defaults", "write", Self.domain, "d", "-date", write])
        try #require(w.status == 0, "\(w)")
        let r = d.ctl(["defaults", "read", Self.domain, "d"])
        #expect(r.stdoutText == printed + "\n", "\(r)")
        let c = try d.connect()
        let value =
            try c.call("io.vaultd.Preferences.Get", ["domain": Self.domain, "key": "d"])
            .parameters?["value"] as? [String: Any]
        #expect(value?["date"] as? String == wire)
    }

    @Test(arguments: [
        "-0001-12-31T23:59:59Z", "10000-01-01T00:00:00Z", "0000-01-01T00:30:00+01:00",
        "9999-12-31T23:00:00-02:00",
        "2026-01-31T12:00:00+24:00", "2026-01-31T12:00:00+0260", "2026-02-30", "2026-01-31T12:00",
    ])
    func datesOutsideYearsZeroTo9999OrMalformedAreRefused(write: String) throws {
        let d = try Daemon()
        defer { d.close() }
        let w = d.ctl(["defaults", "write", Self.domain, "d", "-date", write])
        #expect(w.status != 0, "\(w)")
        #expect(d.ctl(["defaults", "read", Self.domain, "d"]).status == 44)
    }

    /// `defaults rename D K K` leaves the value where it is, as a rename to its own name must
    /// (it wrote K and then removed K: the value was gone, and the command said it succeeded).
    /// A new name that differs only in Unicode normalisation is another key (keys are
    /// byte-exact): the value moves to it.
    @Test func renamingAKeyToItsOwnNameKeepsTheValue() throws {
        let d = try Daemon()
        defer { d.close() }
        let prefs = try d.client().preferences
        try #require(
            d.ctl(["defaults", "write", Self.domain, "name", "-string", "kept"]).status == 0)
        let same = d.ctl(["defaults", "rename", Self.domain, "name", "name"])
        #expect(same.status == 0, "\(same)")
        #expect(try prefs.value(domain: Self.domain, key: "name") == .string("kept"))
        #expect(d.ctl(["defaults", "read", Self.domain, "name"]).stdoutText == "kept\n")

        let precomposed = "caf\u{E9}"
        let decomposed = "cafe\u{301}"
        try #require(
            d.ctl(["defaults", "write", Self.domain, precomposed, "-int", "7"]).status == 0)
        let moved = d.ctl(["defaults", "rename", Self.domain, precomposed, decomposed])
        #expect(moved.status == 0, "\(moved)")
        let keys = try prefs.values(domain: Self.domain).keys.map { Array($0.unicodeScalars) }
            .sorted { $0.count < $1.count }
        #expect(
            keys == [Array("name".unicodeScalars), Array(decomposed.unicodeScalars)], "\(keys)")
    }

    /// `defaults import D PATH` of a file it cannot read says so and why, as a local failure:
    /// it said "io.vaultd.Preferences.InvalidPropertyList: cannot read PATH", a vaultd error
    /// about the property list for a file that was never read (missing, a directory, not
    /// readable). Nothing is written.
    @Test func importOfAFileThatCannotBeReadSaysWhy() throws {
        let d = try Daemon()
        defer { d.close() }
        let dir = d.root + "/a-directory"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        for (path, why) in [
            (d.root + "/absent.plist", "No such file or directory"), (dir, "Is a directory"),
        ] {
            let r = d.ctl(["defaults", "import", Self.domain, path])
            #expect(r.status == 1, "\(r)")
            #expect(r.stderr == "vaultctl: cannot read \(path): \(why)\n", "\(r)")
        }
        #expect(d.ctl(["defaults", "read", Self.domain]).status == 44, "nothing written")
    }

    /// `-data` takes hex digits only: "+f+f" and "-0-0" were read as the bytes 0f 0f and 00 00
    /// (Swift's integer parser takes a sign), "0x00" too is refused, and nothing is written.
    @Test(arguments: ["+f+f", "-0-0", "0x00", "zz", "abc"])
    func dataTakesHexDigitsOnly(text: String) throws {
        let d = try Daemon()
        defer { d.close() }
        let w = d.ctl(["defaults", "write", Self.domain, "bytes", "-data", text])
        #expect(w.status == 65 && w.stderr.hasPrefix("vaultctl: -data needs"), "\(w)")
        #expect(d.ctl(["defaults", "read", Self.domain, "bytes"]).status == 44, "nothing written")
        #expect(d.ctl(["defaults", "write", Self.domain, "bytes", "-data", "0aFF 10"]).status == 0)
        #expect(
            d.ctl(["defaults", "read", Self.domain, "bytes"]).stdoutText
                == "{length = 3, bytes = 0x0aff10}\n")
    }

    /// `defaults read` prints a domain as defaults(1) does (macOS's `defaults read
    /// com.apple.dock`): a string or number is bare only when it is ASCII letters and digits,
    /// else quoted ("com.apple.Safari", "_CFURLString", "624858776.484993", "-1"); a nested
    /// container starts after its own level's indent, also as an array element. vaultctl left
    /// '.', '_', '/' and '$' bare, never quoted numbers, and indented every nested container as
    /// if it were one level deep, so scripts written against defaults(1)'s output did not match.
    /// A single value read alone stays bare, as in defaults(1).
    @Test func aDomainPrintsAsDefaultsReadDoes() throws {
        let d = try Daemon()
        defer { d.close() }
        let safari: PlistDictionary = [
            "GUID": .integer(4_010_545_205),
            "tile-data": .dict([
                "bundle-identifier": .string("com.apple.Safari"),
                "file-data": .dict([
                    "_CFURLString": .string("file:///Applications/Safari.app/"),
                    "_CFURLStringType": .integer(15),
                ]),
                "file-label": .string("Safari\u{6d4f}\u{89c8}\u{5668}"),
            ]),
            "tile-type": .string("file-tile"),
        ]
        let dock: PlistDictionary = [
            "autohide": .bool(true), "last-messagetrace-stamp": .real(624_858_776.484993),
            "loc": .string("zh_CN:CN"),
            "mod-count": .integer(4216), "orientation": .string("right"),
            "persistent-apps": .array([.dict(safari)]),
            "preferreditemsize": .integer(-1), "recent-apps": .array([]), "tilesize": .real(52),
            "last-analytics-stamp": .array([.real(801_447_579.684121)]),
        ]
        try d.client().preferences.importDomain(
            "com.example.dock", plist: try PropertyListCodec.encode(.dict(dock), format: .binary))
        let expected = """
            {
                autohide = 1;
                "last-analytics-stamp" =     (
                    "801447579.684121"
                );
                "last-messagetrace-stamp" = "624858776.484993";
                loc = "zh_CN:CN";
                "mod-count" = 4216;
                orientation = right;
                "persistent-apps" =     (
                            {
                        GUID = 4010545205;
                        "tile-data" =             {
                            "bundle-identifier" = "com.apple.Safari";
                            "file-data" =                 {
                                "_CFURLString" = "file:///Applications/Safari.app/";
                                "_CFURLStringType" = 15;
                            };
                            "file-label" = "Safari\\U6d4f\\U89c8\\U5668";
                        };
                        "tile-type" = "file-tile";
                    }
                );
                preferreditemsize = "-1";
                "recent-apps" =     (
                );
                tilesize = 52;
            }

            """
        let read = d.ctl(["defaults", "read", "com.example.dock"])
        #expect(read.status == 0 && read.stdoutText == expected, "\(read.stdoutText)")
        // One value alone is bare.
        #expect(
            d.ctl(["defaults", "read", "com.example.dock", "last-messagetrace-stamp"]).stdoutText
                == "624858776.484993\n")
        #expect(
            d.ctl(["defaults", "read", "com.example.dock", "preferreditemsize"]).stdoutText
                == "-1\n")
        #expect(d.ctl(["defaults", "read", "com.example.dock", "loc"]).stdoutText == "zh_CN:CN\n")
        #expect(
            d.ctl(["defaults", "read", "com.example.dock", "last-analytics-stamp"]).stdoutText
                == "(\n    \"801447579.684121\"\n)\n")
    }

    /// A whole real prints without a fraction at any size, and -0.0 as "-0", as
    /// `NSNumber.stringValue` writes them (what defaults(1) prints, and what
    /// `Defaults.string(forKey:)` returns): 1e15 up to 2^53 printed as "1000000000000000.0"
    /// and -0.0 as "0", the text of an integer.
    @Test func wholeRealsPrintWithoutAFractionAndNegativeZeroKeepsItsSign() throws {
        let d = try Daemon()
        defer { d.close() }
        let reals: [(String, String)] = [
            ("1e15", "1000000000000000"), ("4503599627370496", "4503599627370496"),
            ("-1e15", "-1000000000000000"),
            ("-0", "-0"), ("3", "3"), ("0.5", "0.5"), ("1e16", "1e+16"),
            ("123456789.125", "123456789.125"),
        ]
        for (i, (value, printed)) in reals.enumerated() {
            try #require(
                d.ctl(["defaults", "write", Self.domain, "r\(i)", "-float", value]).status == 0)
            let r = d.ctl(["defaults", "read", Self.domain, "r\(i)"])
            #expect(r.status == 0 && r.stdoutText == printed + "\n", "\(value): \(r.stdoutText)")
        }
        let all = d.ctl(["defaults", "read", Self.domain]).stdoutText
        #expect(
            all.contains("    r0 = 1000000000000000;\n") && all.contains("    r3 = \"-0\";\n"),
            "\(all)")
    }

    @Test func missingKeyIsAnError() throws {
        let d = try Daemon()
        defer { d.close() }
        let r = d.ctl(["defaults", "read", Self.domain, "absent"])
        #expect(r.status == 44, "\(r)")
        #expect(r.stdout.isEmpty)
        #expect(r.stderr.contains("does not exist"), "\(r)")
    }

    /// `-dict` and `-dict-add` values take type flags, as defaults(1)'s do (the dotfiles'
    /// `FXInfoPanesExpanded -dict General -bool true OpenWith -bool true ...`): before, an odd
    /// count of words was a usage error and an even one wrote the flags as keys and strings.
    @Test func dictValuesTakeTypeFlags() throws {
        let d = try Daemon()
        defer { d.close() }
        let w = d.ctl([
            "defaults", "write", Self.domain, "panes", "-dict", "General", "-bool", "true",
            "OpenWith", "-bool", "true", "Privileges", "-bool", "false",
        ])
        try #require(w.status == 0, "\(w)")
        let two = d.ctl([
            "defaults", "write", Self.domain, "two", "-dict", "a", "-int", "1", "b", "-string",
            "x y",
        ])
        try #require(two.status == 0, "\(two)")
        let add = d.ctl([
            "defaults", "write", Self.domain, "two", "-dict-add", "c", "-float", "0.5", "d",
            "(1, 2)",
        ])
        try #require(add.status == 0, "\(add)")
        #expect(
            d.ctl(["defaults", "read", Self.domain, "panes"]).stdoutText
                == "{\n    General = 1;\n    OpenWith = 1;\n    Privileges = 0;\n}\n")
        #expect(
            d.ctl(["defaults", "read", Self.domain, "two"]).stdoutText
                == "{\n    a = 1;\n    b = \"x y\";\n    c = \"0.5\";\n    d =     (\n        1,\n        2\n    );\n}\n"
        )
        let c = try d.connect()
        let panes =
            try c.call("io.vaultd.Preferences.Get", ["domain": Self.domain, "key": "panes"])
            .parameters?["value"] as? [String: Any]
        let dict = panes?["dict"] as? [String: [String: Any]]
        #expect(
            dict?["General"]?["bool"] as? Bool == true
                && dict?["Privileges"]?["bool"] as? Bool == false, "\(String(describing: panes))")
        // A key left without its value is still a usage error, and nothing is written.
        let odd = d.ctl([
            "defaults", "write", Self.domain, "odd", "-dict", "a", "-bool", "true", "b",
        ])
        #expect(odd.status == 64, "\(odd)")
        #expect(d.ctl(["defaults", "read", Self.domain, "odd"]).status == 44)
    }

    /// A value that starts as a property list (`(`, `{`, `<`, `"`) and does not parse is
    /// refused, as defaults(1)'s "Could not parse: ...  Try single-quoting it.", not written as
    /// the string (a typo in `'{a = 1;'` must not replace a dictionary with text).
    @Test(arguments: ["{a = 1;", "(a, b", "<zz>", "\"unterminated"])
    func valuesThatDoNotParseAreRefused(text: String) throws {
        let d = try Daemon()
        defer { d.close() }
        for args in [["v", text], ["v", "-array", "ok", text], ["v", "-dict", "k", text]] {
            let w = d.ctl(["defaults", "write", Self.domain] + args)
            #expect(w.status == 65 && w.stderr.contains("Could not parse"), "\(args): \(w)")
            #expect(
                d.ctl(["defaults", "read", Self.domain, "v"]).status == 44,
                "\(args): nothing written")
        }
        let whole = d.ctl(["defaults", "write", Self.domain, text])
        #expect(whole.status == 65 && whole.stderr.contains("Could not parse"), "\(whole)")
        // Text that does not start as a property list stays a string, as in defaults(1).
        #expect(d.ctl(["defaults", "write", Self.domain, "s", "a (b"]).status == 0)
        #expect(d.ctl(["defaults", "read", Self.domain, "s"]).stdoutText == "a (b\n")
    }

    /// `-float` takes a finite decimal number only, as defaults(1) does: Double(_:) also took
    /// hexadecimal ('0x10' was written as 16), 'inf' and 'nan', and rounded '1e400' to
    /// infinity. Anything else is bad input (exit 65, as the exit-code table says of a bad
    /// value) saying what is wrong with the value (quoting
    /// it only when short) and nothing is written.
    @Test func floatTakesAFiniteDecimalNumberOnly() throws {
        let d = try Daemon()
        defer { d.close() }
        let c = try d.connect()
        func stored(_ key: String) throws -> [String: Any]? {
            try c.call("io.vaultd.Preferences.Get", ["domain": Self.domain, "key": key])
                .parameters?["value"] as? [String: Any]
        }
        let long = "1" + String(repeating: "0", count: 400)
        let refused: [(String, String)] = [
            ("0x10", "'0x10' is hexadecimal"), ("-0X1p4", "'-0X1p4' is hexadecimal"),
            ("inf", "'inf' is not finite"),
            ("-infinity", "'-infinity' is not finite"), ("nan", "'nan' is not finite"),
            ("NaN", "'NaN' is not finite"),
            ("1e400", "'1e400' is out of range"), ("-1e309", "'-1e309' is out of range"),
            (long, "the value is out of range"),
            ("1.5e", "'1.5e' is not a decimal number"), ("", "the value is empty"),
            (".", "'.' is not a decimal number"),
            (" 1", "the value is not a decimal number"), ("1,5", "'1,5' is not a decimal number"),
            ("1_0", "'1_0' is not a decimal number"),
            ("12abc" + long, "the value is not a decimal number"),
        ]
        for (i, (value, why)) in refused.enumerated() {
            let r = d.ctl(["defaults", "write", Self.domain, "bad\(i)", "-float", value])
            #expect(r.status == 65, "\(value.prefix(30)): \(r)")
            #expect(
                r.stderr.hasPrefix("vaultctl: -float needs a finite decimal number: \(why)"),
                "\(value.prefix(30)): \(r.stderr.prefix(200))")
            #expect(
                !r.stderr.contains(String(repeating: "0", count: 100)), "the long value was echoed")
            #expect(try stored("bad\(i)") == nil, "\(value.prefix(30)) was written")
        }
        let taken: [(String, Double)] = [
            ("0.5", 0.5), ("-2", -2), ("+3.25", 3.25), (".5", 0.5), ("5.", 5), ("1e3", 1000),
            ("1E-3", 0.001), ("1.7976931348623157e308", .greatestFiniteMagnitude), ("010", 10),
        ]
        for (i, (value, expected)) in taken.enumerated() {
            let r = d.ctl(["defaults", "write", Self.domain, "good\(i)", "-float", value])
            #expect(r.status == 0, "\(value): \(r)")
            #expect(
                (try stored("good\(i)")?["real"] as? NSNumber)?.doubleValue.bitPattern
                    == expected.bitPattern, "\(value)")
        }
    }
}

/// Preference keys and dictionary keys that differ only in Unicode normalisation (`é`
/// U+00E9, `e` + U+0301) are two keys, as the store (SQLite) and Apple's `defaults` keep
/// them. Swift's `[String: …]` merged them: `defaults read` showed one key with the other's
/// value, a nested dictionary lost a value, and a Set or Import with both was refused as a
/// "duplicate key".
@Suite struct DefaultsNormalisationTests {
    static let nfc = "caf\u{E9}", nfd = "cafe\u{301}"
    static let domain = "com.example.normalisation"

    @Test func keysDifferingOnlyInNormalisationAreTwoKeysEverywhere() throws {
        let d = try Daemon()
        defer { d.close() }
        #expect(d.ctl(["defaults", "write", Self.domain, Self.nfc, "-string", "a"]).status == 0)
        #expect(d.ctl(["defaults", "write", Self.domain, Self.nfd, "-string", "b"]).status == 0)
        #expect(
            d.ctl([
                "defaults", "write", Self.domain, "nested", "-dict", Self.nfc, "x", Self.nfd, "y",
            ]).status == 0)
        // Old-style text, as `defaults write D K '{…}'` takes it, keeps both too.
        #expect(
            d.ctl([
                "defaults", "write", Self.domain, "text",
                "{ \"\(Self.nfc)\" = x; \"\(Self.nfd)\" = y; }",
            ]).status == 0)
        #expect(
            d.ctl(["defaults", "read", Self.domain, "text"]).stdoutText
                == "{\n    \"cafe\\U0301\" = y;\n    \"caf\\U00e9\" = x;\n}\n")
        #expect(d.ctl(["defaults", "delete", Self.domain, "text"]).status == 0)
        #expect(d.ctl(["defaults", "read", Self.domain, Self.nfc]).stdoutText == "a\n")
        #expect(d.ctl(["defaults", "read", Self.domain, Self.nfd]).stdoutText == "b\n")
        let all = d.ctl(["defaults", "read", Self.domain])
        #expect(
            all.stdoutText
                == "{\n    \"cafe\\U0301\" = b;\n    \"caf\\U00e9\" = a;\n    nested =     {\n        \"cafe\\U0301\" = y;\n        \"caf\\U00e9\" = x;\n    };\n}\n",
            "\(all)")
        let nested = d.ctl(["defaults", "read", Self.domain, "nested"])
        #expect(
            nested.stdoutText == "{\n    \"cafe\\U0301\" = y;\n    \"caf\\U00e9\" = x;\n}\n",
            "\(nested)")

        // Over the socket: the domain holds both, each with its value.
        let c = try ExactClient(path: d.socketPath)
        defer { c.close() }
        let values = c.call("io.vaultd.Preferences.Domain", ["domain": .string(Self.domain)])
            .parameters?["values"]?.objectValue
        #expect(
            values?.count == 3 && values?[Self.nfc] == ["string": "a"]
                && values?[Self.nfd] == ["string": "b"], "\(String(describing: values))")
        // A value holding both keys, and an Import of both: no "duplicate key".
        let twins: JSON = ["dict": [Self.nfc: ["string": "x"], Self.nfd: ["string": "y"]]]
        let set = c.call(
            "io.vaultd.Preferences.Set",
            ["domain": .string(Self.domain), "key": "k", "value": twins])
        #expect(set.parameters != nil, "\(set)")
        let got = c.call("io.vaultd.Preferences.Get", ["domain": .string(Self.domain), "key": "k"])
        #expect(got.parameters?["value"] == twins, "\(got)")
        let imported = c.call(
            "io.vaultd.Preferences.Import",
            [
                "domain": "com.example.imported",
                "values": [Self.nfc: ["string": "x"], Self.nfd: ["string": "y"]],
            ])
        #expect(imported.parameters?["keys"]?.intValue == 2, "\(imported)")

        // The XML export holds both keys; a binary one, which Foundation would merge, is refused.
        let xml = d.ctl(["defaults", "export", Self.domain, "-"])
        #expect(
            xml.status == 0 && xml.stdoutText.components(separatedBy: "<key>").count == 9, "\(xml)")
        #expect(d.ctl(["defaults", "export", Self.domain, d.root + "/out.plist"]).status != 0)

        // The client library's in-memory copy keeps both too.
        let defaults = try Defaults(vault: try d.client(), suiteName: Self.domain, arguments: [])
        #expect(
            defaults.string(forKey: Self.nfc) == "a" && defaults.string(forKey: Self.nfd) == "b")
        #expect(defaults.dictionaryRepresentation().count >= 4)
    }
}

/// defaults(1)'s domain forms and `--json`: `-currentHost` and `-host NAME` (by-host
/// preferences), `-app NAME`, and JSON output of read, domains and find.
@Suite struct DefaultsDomainFormTests {
    /// A by-host write goes to `DOMAIN@host:HOST` (HOST: /etc/machine-id for -currentHost, NAME
    /// for -host NAME), apart from the domain's own values and another host's; the host option
    /// goes before the verb, and `domains` lists by-host domains only with one.
    @Test func byHostPreferencesAreKeptPerHost() throws {
        let d = try Daemon()
        defer { d.close() }
        let machineID = try String(contentsOfFile: "/etc/machine-id", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        try #require(machineID.count == 32)
        #expect(
            d.ctl(["defaults", "-currentHost", "write", "com.example.bh", "Saver", "-int", "5"])
                .status == 0)
        #expect(
            d.ctl(["defaults", "-host", "studio", "write", "com.example.bh", "Saver", "-int", "7"])
                .status == 0)
        #expect(d.ctl(["defaults", "write", "com.example.bh", "Saver", "-int", "1"]).status == 0)
        #expect(d.ctl(["defaults", "write", "com.example.plain", "K", "v"]).status == 0)

        let c = try d.connect()
        func stored(_ domain: String) throws -> Any? {
            (try c.call("io.vaultd.Preferences.Get", ["domain": domain, "key": "Saver"])
                .parameters?["value"] as? [String: Any])?["integer"]
        }
        #expect(try stored("com.example.bh@host:" + machineID) as? Int == 5)
        #expect(try stored("com.example.bh@host:studio") as? Int == 7)
        #expect(try stored("com.example.bh") as? Int == 1)

        #expect(
            d.ctl(["defaults", "-currentHost", "read", "com.example.bh", "Saver"]).stdoutText
                == "5\n")
        #expect(
            d.ctl(["defaults", "-host", "studio", "read", "com.example.bh", "Saver"]).stdoutText
                == "7\n")
        #expect(d.ctl(["defaults", "read", "com.example.bh", "Saver"]).stdoutText == "1\n")
        #expect(d.ctl(["defaults", "-currentHost", "read", "com.example.plain"]).status == 44)
        #expect(d.ctl(["defaults", "domains"]).stdoutText == "com.example.bh, com.example.plain\n")
        #expect(d.ctl(["defaults", "-currentHost", "domains"]).stdoutText == "com.example.bh\n")
        #expect(
            d.ctl(["defaults", "-host", "studio", "delete", "com.example.bh", "Saver"]).status == 0)
        #expect(
            try stored("com.example.bh@host:studio") == nil
                && stored("com.example.bh@host:" + machineID) as? Int == 5)
        let late = d.ctl(["defaults", "read", "-currentHost", "com.example.bh"])
        #expect(
            late.status == 64
                && late.stderr.hasPrefix("vaultctl: -currentHost goes before the verb"), "\(late)")
    }

    /// `-app NAME` stands for an app's domain: its ID, its executable's path or file name, or
    /// the last component of its ID; an unknown name is AppNotFound (44), as defaults(1) says
    /// it could not find the application. It was taken as the domain "-app".
    @Test func appNamesTheDomainOfAnApp() throws {
        let d = try Daemon()
        defer { d.close() }
        let exe = try d.placeExample("notes")
        let install = d.ctl(["app", "install", "org.example.Notes", "--exe", exe])
        try #require(install.status == 0, "\(install)")
        #expect(
            d.ctl(["defaults", "write", "-app", "org.example.Notes", "Font", "-string", "Menlo"])
                .status == 0)
        let c = try d.connect()
        let font =
            try c.call("io.vaultd.Preferences.Get", ["domain": "org.example.Notes", "key": "Font"])
            .parameters?["value"] as? [String: Any]
        #expect(font?["string"] as? String == "Menlo", "\(String(describing: font))")
        for name in [
            "org.example.Notes", "Notes", "notes", exe, URL(fileURLWithPath: exe).lastPathComponent,
        ] {
            let r = d.ctl(["defaults", "read", "-app", name, "Font"])
            #expect(r.status == 0 && r.stdoutText == "Menlo\n", "-app \(name): \(r)")
        }
        let missing = d.ctl(["defaults", "read", "-app", "Safari"])
        #expect(
            missing.status == 44
                && missing.stderr.contains("Couldn't find an application named \"Safari\""),
            "\(missing)")
        #expect(d.ctl(["defaults", "domains"]).stdoutText == "org.example.Notes\n")
    }

    /// `--json` on read, domains and find: values in the tagged JSON that keeps their types.
    @Test func readDomainsAndFindPrintJSON() throws {
        let d = try Daemon()
        defer { d.close() }
        #expect(
            d.ctl(["defaults", "write", "com.example.j", "Volume", "-float", "0.5"]).status == 0)
        #expect(d.ctl(["defaults", "write", "com.example.j", "Name", "-string", "x"]).status == 0)
        #expect(
            d.ctl(["defaults", "write", "com.example.k", "When", "-date", "2026-01-31"]).status == 0
        )
        func json(_ args: [String]) -> Any? {
            let r = d.ctl(["defaults"] + args)
            #expect(r.status == 0, "\(args): \(r)")
            return try? JSONSerialization.jsonObject(with: r.stdout, options: [.fragmentsAllowed])
        }
        let domain = json(["read", "com.example.j", "--json"]) as? [String: [String: Any]]
        #expect(
            domain?["Volume"]?["real"] as? Double == 0.5
                && domain?["Name"]?["string"] as? String == "x", "\(String(describing: domain))")
        let one = json(["read", "com.example.k", "When", "--json"]) as? [String: String]
        #expect(one == ["date": "2026-01-31T00:00:00Z"], "\(String(describing: one))")
        let all = json(["read", "--json"]) as? [String: [String: Any]]
        #expect(
            Set(all?.keys.map { $0 } ?? []) == ["com.example.j", "com.example.k"],
            "\(String(describing: all))")
        #expect(json(["domains", "--json"]) as? [String] == ["com.example.j", "com.example.k"])
        let found = json(["find", "volu", "--json"]) as? [String: [String: [String: Double]]]
        #expect(
            found == ["com.example.j": ["Volume": ["real": 0.5]]], "\(String(describing: found))")
        let none = d.ctl(["defaults", "find", "nothing-like-it", "--json"])
        #expect(
            none.status == 0 && none.stdoutText == "{}\n"
                && none.stderr.contains("No domain, key, nor value containing"), "\(none)")
    }
}
