import Foundation
import TestSupport
import Testing
import VaultClient
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// The preferences tier: the corpus through plistutil, defaults(1) verbs, a
/// thousand observed and durable writes, exact values, limits, concurrent writers, and the
/// `Defaults` search list — through the real socket, vaultctl and vault-example processes,
/// and the VaultClient library in this process.
@Suite struct PreferencesTierTests {
    // MARK: corpus: plistutil reads what vaultd exports

    @Test(arguments: PlistCorpusTests.dictionaryFiles)
    func corpusImportedFromStdinExportsFilesPlistutilReads(_ name: String) throws {
        let d = try Daemon()
        defer { d.close() }
        let original = PlistCorpusTests.corpus.appendingPathComponent(name).path
        let bytes = try #require(FileManager.default.contents(atPath: original))
        let domain = "com.example.corpus"

        // Import from stdin (PlistCorpusTests imports from a path).
        let imported = d.ctl(["defaults", "import", domain, "-"], stdin: bytes)
        try #require(imported.status == 0, "\(imported)")

        let binary = d.root + "/export.plist"
        try #require(d.ctl(["defaults", "export", domain, binary]).status == 0)
        #expect(PlistCorpusTests.compare(d, original: original, copy: binary) == "EQUAL")
        let fromBinary = d.run("plistutil", ["-i", binary, "-o", d.root + "/plistutil.xml"])
        #expect(fromBinary.status == 0, "plistutil cannot read the binary export: \(fromBinary)")
        #expect((FileManager.default.contents(atPath: d.root + "/plistutil.xml")?.count ?? 0) > 0)

        // The file whose U+0019 XML 1.0 cannot carry is refused as XML with a clear error
        // (no parser could read it back), and nothing is written to stdout.
        let xml = d.ctl(["defaults", "export", domain, "-"])
        if PlistCorpusTests.notRepresentableInXML.contains(name) {
            #expect(xml.status == 65, "\(xml)")
            #expect(xml.stderr.contains("io.vaultd.Preferences.InvalidPropertyList"), "\(xml)")
            #expect(xml.stderr.contains("U+0019"), "\(xml)")
            #expect(xml.stdout.isEmpty)
            return
        }
        try #require(xml.status == 0, "\(xml)")
        let xmlPath = d.root + "/export.xml"
        try xml.stdout.write(to: URL(fileURLWithPath: xmlPath))
        let fromXML = d.run("plistutil", ["-i", xmlPath, "-o", d.root + "/plistutil.bin"])
        #expect(fromXML.status == 0, "plistutil cannot read the XML export: \(fromXML)")
        #expect((FileManager.default.contents(atPath: d.root + "/plistutil.bin")?.count ?? 0) > 0)
    }

    // MARK: defaults(1) verbs

    /// defaults(1)'s `write DOMAIN '{ … }'`: the domain becomes that dictionary (its old keys
    /// go); anything but a dictionary is refused and changes nothing.
    @Test func writingAWholeDomainReplacesIt() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initializeWithoutPassphrase().status == 0)
        let domain = "com.example.whole"
        #expect(d.ctl(["defaults", "write", domain, "old", "-int", "1"]).status == 0)
        let w = d.ctl([
            "defaults", "write", domain, "{ name = \"a b\"; list = (x, y); nested = { k = v; }; }",
        ])
        #expect(w.status == 0, "\(w)")
        let vault = try d.client()
        let values = try vault.preferences.values(domain: domain)
        #expect(
            values == [
                "name": .string("a b"), "list": .array([.string("x"), .string("y")]),
                "nested": .dict(["k": .string("v")]),
            ], "\(values)")
        for bad in ["(x, y)", "plain", "{ unclosed"] {
            let r = d.ctl(["defaults", "write", domain, bad])
            #expect(r.status == 65, "\(bad): \(r)")
        }
        #expect(try vault.preferences.values(domain: domain) == values)
    }

    @Test func arrayAddAndDictAddCreateOrExtendAndRefuseOtherTypes() throws {
        let d = try Daemon()
        defer { d.close() }
        let prefs = try d.client().preferences
        let domain = "com.example.verbs"
        func value(_ key: String) throws -> PlistValue? {
            try prefs.value(domain: domain, key: key)
        }

        let create = d.ctl(["defaults", "write", domain, "list", "-array-add", "x"])
        #expect(create.status == 0, "\(create)")
        #expect(try value("list") == .array([.string("x")]))
        #expect(d.ctl(["defaults", "read-type", domain, "list"]).stdoutText == "Type is array\n")
        #expect(
            d.ctl(["defaults", "write", domain, "list", "-array-add", "y", "-int", "3"]).status == 0
        )
        #expect(try value("list") == .array([.string("x"), .string("y"), .integer(3)]))

        #expect(d.ctl(["defaults", "write", domain, "name", "-string", "hello"]).status == 0)
        let notArray = d.ctl(["defaults", "write", domain, "name", "-array-add", "x"])
        #expect(notArray.status == 65 && notArray.stderr.contains("not an array"), "\(notArray)")
        #expect(
            try value("name") == .string("hello"), "a refused -array-add must not change the value")

        #expect(d.ctl(["defaults", "write", domain, "dict", "-dict-add", "a", "1"]).status == 0)
        #expect(try value("dict") == .dict(["a": .string("1")]))
        #expect(
            d.ctl(["defaults", "write", domain, "dict", "-dict-add", "b", "2", "a", "3"]).status
                == 0)
        #expect(try value("dict") == .dict(["a": .string("3"), "b": .string("2")]))
        let notDict = d.ctl(["defaults", "write", domain, "name", "-dict-add", "k", "v"])
        #expect(notDict.status == 65 && notDict.stderr.contains("not a dictionary"), "\(notDict)")
        #expect(try value("name") == .string("hello"))
        let listNotDict = d.ctl(["defaults", "write", domain, "list", "-dict-add", "k", "v"])
        #expect(listNotDict.status == 65, "\(listNotDict)")
        #expect(try value("list") == .array([.string("x"), .string("y"), .integer(3)]))
        let odd = d.ctl(["defaults", "write", domain, "dict", "-dict-add", "k"])
        #expect(odd.status == 64, "\(odd)")
        #expect(try value("dict") == .dict(["a": .string("3"), "b": .string("2")]))
    }

    @Test func renameDeleteFindReadTypeAndTheGlobalDomain() throws {
        let d = try Daemon()
        defer { d.close() }
        let prefs = try d.client().preferences
        let domain = "com.example.verbs"

        // rename
        try #require(d.ctl(["defaults", "write", domain, "name", "-string", "hello"]).status == 0)
        let rename = d.ctl(["defaults", "rename", domain, "name", "greeting"])
        #expect(rename.status == 0, "\(rename)")
        #expect(try prefs.value(domain: domain, key: "greeting") == .string("hello"))
        #expect(try prefs.value(domain: domain, key: "name") == nil)
        let renameMissing = d.ctl(["defaults", "rename", domain, "name", "other"])
        #expect(
            renameMissing.status == 44 && renameMissing.stderr.contains("does not exist"),
            "\(renameMissing)")
        #expect(try prefs.value(domain: domain, key: "other") == nil)

        // read-type for every type
        let typed: [(String, [String], String)] = [
            ("string", ["-string", "text"], "string"), ("bare", ["bare words"], "string"),
            ("integer", ["-int", "-9223372036854775808"], "integer"),
            ("unsigned", ["-int", "18446744073709551615"], "integer"),
            ("float", ["-float", "-1.5e-300"], "float"), ("boolean", ["-bool", "NO"], "boolean"),
            ("date", ["-date", "2001-01-01T00:00:00.5Z"], "date"),
            ("data", ["-data", "00"], "data"),
            ("array", ["-array"], "array"), ("dictionary", ["-dict"], "dictionary"),
        ]
        for (key, args, type) in typed {
            let w = d.ctl(["defaults", "write", domain, key] + args)
            #expect(w.status == 0, "\(key): \(w)")
            let t = d.ctl(["defaults", "read-type", domain, key])
            #expect(t.stdoutText == "Type is \(type)\n", "\(key): \(t)")
        }
        #expect(try prefs.value(domain: domain, key: "unsigned") == .unsignedInteger(.max))
        #expect(try prefs.value(domain: domain, key: "integer") == .integer(.min))
        #expect(
            d.ctl(["defaults", "read", domain, "unsigned"]).stdoutText == "18446744073709551615\n")
        #expect(try prefs.value(domain: domain, key: "array") == .array([]))
        #expect(try prefs.value(domain: domain, key: "dictionary") == .dict([:]))
        let missingType = d.ctl(["defaults", "read-type", domain, "absent"])
        #expect(
            missingType.status == 44 && missingType.stderr.contains("does not exist"),
            "\(missingType)")

        // delete KEY
        #expect(d.ctl(["defaults", "delete", domain, "greeting"]).status == 0)
        #expect(try prefs.value(domain: domain, key: "greeting") == nil)
        let deleteMissing = d.ctl(["defaults", "delete", domain, "greeting"])
        #expect(
            deleteMissing.status == 44 && deleteMissing.stderr.contains("does not exist"),
            "\(deleteMissing)")

        // find WORD: in keys, values, nested values and domain names; case-insensitive.
        try #require(
            d.ctl(["defaults", "write", "com.example.values", "k", "-string", "a NEEDLE here"])
                .status == 0)
        try #require(
            d.ctl(["defaults", "write", "com.example.keys", "theNeedleKey", "v"]).status == 0)
        try #require(
            d.ctl(["defaults", "write", "com.example.nested", "k", "-array", "hay", "needles"])
                .status == 0)
        try #require(d.ctl(["defaults", "write", "com.example.needle", "k", "v"]).status == 0)
        try #require(d.ctl(["defaults", "write", "com.example.none", "hay", "stack"]).status == 0)
        let find = d.ctl(["defaults", "find", "needle"])
        #expect(find.status == 0, "\(find)")
        for hit in [
            "com.example.values", "com.example.keys", "com.example.nested", "com.example.needle",
        ] {
            #expect(
                find.stdoutText.contains("Found 1 keys in domain '\(hit)'"),
                "\(hit): \(find.stdoutText)")
        }
        #expect(
            !find.stdoutText.contains("com.example.none") && !find.stdoutText.contains(domain),
            "\(find.stdoutText)")
        #expect(find.stderr.isEmpty, "\(find)")
        let nothing = d.ctl(["defaults", "find", "zzzz"])
        #expect(
            nothing.status == 0 && nothing.stdoutText.isEmpty
                && nothing.stderr == "No domain, key, nor value containing 'zzzz'\n", "\(nothing)")

        // -g and its spellings name NSGlobalDomain.
        #expect(d.ctl(["defaults", "write", "-g", "tier.global", "yes"]).status == 0)
        #expect(try prefs.value(domain: "NSGlobalDomain", key: "tier.global") == .string("yes"))
        #expect(d.ctl(["defaults", "read", "NSGlobalDomain", "tier.global"]).stdoutText == "yes\n")
        #expect(d.ctl(["defaults", "read", "-g", "tier.global"]).stdoutText == "yes\n")
        #expect(
            d.ctl(["defaults", "read-type", "-globalDomain", "tier.global"]).stdoutText
                == "Type is string\n")
        // `domains` lists every domain but the global one, sorted, as defaults(1).
        let domains = d.ctl(["defaults", "domains"]).stdoutText
        #expect(!domains.contains("NSGlobalDomain"), "\(domains)")
        let listed = domains.trimmingCharacters(in: .newlines).components(separatedBy: ", ")
        #expect(
            listed == listed.sorted() && listed.contains("com.example.needle")
                && listed.contains(domain), "\(domains)")
        #expect(d.ctl(["defaults", "delete", "-g", "tier.global"]).status == 0)
        #expect(try prefs.value(domain: "NSGlobalDomain", key: "tier.global") == nil)

        // delete DOMAIN
        let deleteDomain = d.ctl(["defaults", "delete", domain])
        #expect(deleteDomain.status == 0, "\(deleteDomain)")
        #expect(try prefs.values(domain: domain).isEmpty)
        #expect(!(try prefs.domains().contains(domain)))
        #expect(!d.ctl(["defaults", "domains"]).stdoutText.contains(domain))
        let readGone = d.ctl(["defaults", "read", domain])
        #expect(readGone.status == 44 && readGone.stderr.contains("does not exist"), "\(readGone)")
        let deleteAgain = d.ctl(["defaults", "delete", domain])
        #expect(deleteAgain.status == 44, "\(deleteAgain)")
        #expect(
            try prefs.value(domain: "com.example.values", key: "k") == .string("a NEEDLE here"),
            "other domains stay")
    }

    // MARK: a thousand keys, observed and durable

    /// The in-process copy follows vaultd through a restart: the Observe stream connects
    /// again, the new snapshot replaces the copy, and watchers hear of what changed
    /// meanwhile (the copy had stopped updating for good).
    @Test func theInProcessCopyFollowsVaultdThroughARestart() throws {
        let d = try Daemon()
        defer { d.close() }
        let domain = "com.example.restart"
        #expect(d.ctl(["defaults", "write", domain, "before", "1"]).status == 0)
        let defaults = try Defaults(vault: try d.client(), suiteName: domain, arguments: [])
        #expect(defaults.object(forKey: "before") == .string("1"))
        let heard = Shared<ExactDictionary<PlistValue?>>([:])
        let changes = defaults.changes()
        let watcher = Task(executorPreference: DedicatedExecutor("restart-changes")) {
            for await change in changes where change.domain == domain {
                heard.update { $0[change.key] = change.value }
            }
        }
        defer { watcher.cancel() }

        try d.restart()
        #expect(d.ctl(["defaults", "write", domain, "after", "2"]).status == 0)
        #expect(d.ctl(["defaults", "delete", domain, "before"]).status == 0)
        #expect(
            eventually(timeout: 10) {
                defaults.object(forKey: "after") == .string("2")
                    && defaults.object(forKey: "before") == nil
            })
        #expect(
            eventually(timeout: 10) {
                heard.value["after"] == .some(.string("2")) && heard.value.keys.contains("before")
            }, "\(heard.value)")
    }

    @Test func aThousandKeysFromAWriterProcessAreAllObservedAndSurviveKill9() throws {
        let d = try Daemon()
        defer { d.close() }
        let domain = "com.example.fill"
        let count = 1000
        let vault = try d.client()
        let defaults = try Defaults(vault: vault, suiteName: domain, arguments: [])
        let latest = Shared<PlistDictionary>([:])
        let changes = defaults.changes()
        let watcher = Task(executorPreference: DedicatedExecutor("defaults-changes")) {
            for await change in changes where change.domain == domain {
                latest.update { $0[change.key] = change.value }
            }
        }
        defer { watcher.cancel() }

        // Pass 1: one writer process, watched by this process.
        let started = Date()
        let fill = d.run(
            "vault-example",
            [
                "defaults", "fill", String(count), "--suite", domain, "--prefix", "k", "--value",
                "v",
            ], timeout: 120)
        try #require(fill.status == 0, "\(fill)")
        let took = Date().timeIntervalSince(started)
        print("vault-example wrote \(count) keys in \(String(format: "%.1f", took)) s")
        func allSeen(_ prefix: String) -> Bool {
            let l = latest.value
            return (0..<count).allSatisfy { l["k\($0)"] == .string("\(prefix)\($0)") }
        }
        let seen = eventually(timeout: 20) { allSeen("v") }
        let missing = (0..<count).filter { latest.value["k\($0)"] != .string("v\($0)") }
        #expect(
            seen, "the observer missed \(missing.count) final values, e.g. \(missing.prefix(5))")
        #expect(
            (0..<count).allSatisfy { defaults.object(forKey: "k\($0)") == .string("v\($0)") },
            "Defaults' copy is behind")

        // Pass 2: new values; vaultd is killed (SIGKILL) as soon as the writer has its last
        // acknowledgement and exits. Everything acknowledged must be there after a restart.
        let second = d.run(
            "vault-example",
            [
                "defaults", "fill", String(count), "--suite", domain, "--prefix", "k", "--value",
                "w",
            ], timeout: 120)
        d.kill()
        try #require(second.status == 0, "\(second)")
        try d.start()
        let stored = try d.client().preferences.values(domain: domain)
        #expect(stored.count == count)
        let lost = (0..<count).filter { stored["k\($0)"] != .string("w\($0)") }
        #expect(
            lost.isEmpty,
            "\(lost.count) acknowledged writes lost after kill -9, e.g. \(lost.prefix(5))")
    }

    // MARK: exact values

    static let year1: TimeInterval = -63_113_904_000  // 0001-01-01T00:00:00Z
    static let year4001: TimeInterval = 63_113_904_000  // 4001-01-01T00:00:00Z

    static let exactValues: PlistDictionary = [
        "int.min": .integer(.min), "int.max": .integer(.max), "int.zero": .integer(0),
        "int.minusOne": .integer(-1),
        "uint.aboveInt64Max": .unsignedInteger(UInt64(Int64.max) + 1),
        "uint.max": .unsignedInteger(.max),
        "real.inf": .real(.infinity), "real.-inf": .real(-.infinity), "real.nan": .real(.nan),
        "real.-0": .real(-0.0), "real.0": .real(0.0),
        "real.leastSubnormal": .real(.leastNonzeroMagnitude),
        "real.-greatestSubnormal": .real(-Double.leastNormalMagnitude.nextDown),
        "real.leastNormal": .real(.leastNormalMagnitude),
        "real.max": .real(.greatestFiniteMagnitude), "real.tenth": .real(0.1),
        "real.third": .real(1.0 / 3),
        "real.2^53+2": .real(9_007_199_254_740_994),
        "date.year1": .date(Date(timeIntervalSinceReferenceDate: year1)),
        "date.year1.half": .date(Date(timeIntervalSinceReferenceDate: year1 + 0.5)),
        "date.2038": .date(Date(timeIntervalSince1970: 2_147_483_648.123456)),
        "date.year4000.last": .date(Date(timeIntervalSinceReferenceDate: year4001 - 0.25)),
        "date.reference.-quarter": .date(Date(timeIntervalSinceReferenceDate: -0.25)),
        "date.micro": .date(Date(timeIntervalSinceReferenceDate: 0.000_001)),
        "date.tiny": .date(Date(timeIntervalSinceReferenceDate: 1e-300)),
        "date.fraction": .date(Date(timeIntervalSinceReferenceDate: 788_918_400.123_456_789)),
        "data.nuls": .data(Data([0, 0, 1, 0, 0xFF, 0])), "data.empty": .data(Data()),
        "string.empty": .string(""), "string.nul": .string("a\0b\0"),
        "string.unicode": .string("łódź € 𝄞 e\u{301}"),
        "string.controls": .string("\u{1}\t\n\r\u{1f}\u{7f}"),
        "": .string("the empty key"), "com.example.dotted.key": .string("dots"),
        "path/with/slashes": .string("slashes"),
        "../../etc": .string("not a path"), " spaced key ": .string("spaces"),
        "bool.true": .bool(true), "bool.false": .bool(false),
        "empty.array": .array([]), "empty.dict": .dict([:]),
        "nested": .dict([
            "array": .array([
                .integer(1), .array([.dict(["deep": .array([.array([])])])]), .dict([:]),
                .string(""),
            ]),
            "": .string("empty key inside"), "a.b/c": .unsignedInteger(.max), "nan": .real(.nan),
            "dates": .array([
                .date(Date(timeIntervalSinceReferenceDate: year1 + 0.5)),
                .date(Date(timeIntervalSinceReferenceDate: -0.25)),
            ]),
        ]),
    ]

    /// Values compared one by one, with a message naming the key.
    private func expectEqual(_ got: PlistDictionary, _ expected: PlistDictionary, _ when: String) {
        #expect(
            Set(got.keys) == Set(expected.keys),
            "\(when): keys differ: \(Set(got.keys).symmetricDifference(expected.keys))")
        for (k, v) in expected {
            #expect(
                got[k] == v,
                "\(when): \(k.debugDescription): got \(String(describing: got[k])), expected \(v)")
        }
    }

    @Test func valuesRoundTripExactlyThroughTheSocketAndDefaults() throws {
        let d = try Daemon()
        defer { d.close() }
        let vault = try d.client()
        let prefs = vault.preferences

        // Through io.vaultd.Preferences.Set/Get/Domain.
        for (k, v) in Self.exactValues { try prefs.set(v, domain: "com.example.exact", key: k) }
        for (k, v) in Self.exactValues {
            let got = try prefs.value(domain: "com.example.exact", key: k)
            #expect(got == v, "Get \(k.debugDescription): \(String(describing: got))")
        }
        expectEqual(try prefs.values(domain: "com.example.exact"), Self.exactValues, "Domain")

        // Through Defaults: written by one instance, read (from its snapshot and from change
        // events) by another.
        let reader = try Defaults(
            vault: vault, suiteName: "com.example.exact.defaults", arguments: [])
        let writer = try Defaults(
            vault: try d.client(), suiteName: "com.example.exact.defaults", arguments: [])
        for (k, v) in Self.exactValues { try writer.set(v, forKey: k) }
        for (k, v) in Self.exactValues {
            #expect(writer.object(forKey: k) == v, "writer \(k.debugDescription)")
        }
        #expect(
            eventually(timeout: 10) {
                Self.exactValues.allSatisfy { reader.object(forKey: $0.key) == $0.value }
            })
        for (k, v) in Self.exactValues {
            #expect(
                reader.object(forKey: k) == v,
                "reader \(k.debugDescription): \(String(describing: reader.object(forKey: k)))")
        }
        let snapshot = try Defaults(vault: vault, suiteName: "com.example.exact", arguments: [])
        for (k, v) in Self.exactValues {
            #expect(snapshot.object(forKey: k) == v, "snapshot \(k.debugDescription)")
        }

        // On the wire: integers as exact literals, reals as tagged specials.
        let raw = try VaultConnection(socketPath: d.socketPath)
        func wire(_ key: String) throws -> JSON? {
            try raw.call(
                "io.vaultd.Preferences.Get", ["domain": "com.example.exact", "key": .string(key)])[
                    "value"]
        }
        #expect(try wire("int.min") == ["integer": .number("-9223372036854775808")])
        #expect(try wire("uint.max") == ["integer": .number("18446744073709551615")])
        #expect(try wire("real.nan") == ["real": "nan"])
        #expect(try wire("real.-inf") == ["real": "-inf"])
        #expect(try wire("real.-0")?["real"]?.doubleValue?.bitPattern == (-0.0).bitPattern)
        #expect(try wire("date.year1.half") == ["date": "0001-01-01T00:00:00.5Z"])
        #expect(try wire("date.year4000.last") == ["date": "4000-12-31T23:59:59.75Z"])
        #expect(try wire("date.reference.-quarter") == ["date": "2000-12-31T23:59:59.75Z"])

        // And after a restart.
        #expect(try d.restart() == 0)
        expectEqual(
            try d.client().preferences.values(domain: "com.example.exact"), Self.exactValues,
            "after restart")
        expectEqual(
            try d.client().preferences.values(domain: "com.example.exact.defaults"),
            Self.exactValues, "Defaults' writes after restart")
    }

    @Test func exactValuesSurviveABinaryExportAndImport() throws {
        let d = try Daemon()
        defer { d.close() }
        let prefs = try d.client().preferences
        // A key holding a NUL cannot be an XML plist key, but is fine in a binary one.
        for (k, v) in Self.exactValues { try prefs.set(v, domain: "com.example.export", key: k) }
        let path = d.root + "/exact.plist"
        let export = d.ctl(["defaults", "export", "com.example.export", path])
        try #require(export.status == 0, "\(export)")
        let check = d.run("plistutil", ["-i", path, "-o", d.root + "/exact.xml"])
        #expect(check.status == 0, "plistutil: \(check)")
        let imported = d.ctl(["defaults", "import", "com.example.imported", path])
        try #require(imported.status == 0, "\(imported)")
        expectEqual(
            try prefs.values(domain: "com.example.imported"), Self.exactValues,
            "binary export, then import")
    }

    /// A domain within the 4 MiB limit, with many small keys, exports as XML and as binary
    /// through vaultctl, whatever size the plist takes: its XML (160,000 keys, about 7.7 MB,
    /// 10 MB in base64) was one Export reply over the 8 MiB message limit, and `defaults
    /// export D -` failed with ReplyTooLarge on a domain that reads whole.
    @Test func aDomainOfManySmallKeysExportsAsXMLAndBinary() throws {
        let d = try Daemon()
        defer { d.close() }
        let domain = "com.example.manykeys"
        var values: [String: Any] = [:]
        for i in 0..<160_000 { values[String(format: "key%06d", i)] = 100_000 + i }
        let plist = try PropertyListSerialization.data(
            fromPropertyList: values, format: .binary, options: 0)
        #expect(try d.client().preferences.importDomain(domain, plist: plist) == values.count)

        func check(_ data: Data, _ what: String) {
            var format = PropertyListSerialization.PropertyListFormat.binary
            let read =
                (try? PropertyListSerialization.propertyList(
                    from: data, options: [], format: &format)) as? [String: Any]
            #expect(read?.count == values.count, "\(what): \(read?.count ?? -1) keys")
            #expect(
                (read?["key000000"] as? NSNumber)?.intValue == 100_000
                    && (read?["key159999"] as? NSNumber)?.intValue == 259_999, "\(what)")
        }
        let xml = d.ctl(["defaults", "export", domain, "-"])
        #expect(xml.status == 0 && xml.stderr.isEmpty, "\(xml.status) \(xml.stderr)")
        #expect(
            xml.stdout.starts(with: Data("<?xml".utf8)) && xml.stdout.count > 7_000_000,
            "\(xml.stdout.count) bytes")
        check(xml.stdout, "XML export")
        let path = d.root + "/many.plist"
        let binary = d.ctl(["defaults", "export", domain, path])
        #expect(binary.status == 0, "\(binary)")
        check((try? Data(contentsOf: URL(fileURLWithPath: path))) ?? Data(), "binary export")
    }

    /// A domain holding arrays and dictionaries, written as defaults(1)'s `'{ … }'` text, exports
    /// as a binary plist file that reads back whole. Release vaultctl (the Swift runtime
    /// linked statically) failed both: Foundation's binary writer refused a dictionary holding
    /// a container there ("An error occurred in the destination for the data"), and both the
    /// text write and the export went through it in vaultctl (the newcomer pass; scripts/
    /// release-smoke runs this with the release binaries, which these tests do not use).
    @Test func nestedContainersWriteAndExportAsBinary() throws {
        let d = try Daemon()
        defer { d.close() }
        let written = d.ctl([
            "defaults", "write", "com.example.nested",
            "{ A = (1, 2); B = { c = (x, { d = y; }); }; }",
        ])
        #expect(written.status == 0, "\(written)")
        let expected: PlistValue = .dict([
            "A": .array([.string("1"), .string("2")]),
            "B": .dict(["c": .array([.string("x"), .dict(["d": .string("y")])])]),
        ])
        let path = d.root + "/nested.plist"
        let exported = d.ctl(["defaults", "export", "com.example.nested", path])
        #expect(exported.status == 0, "\(exported)")
        let file = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(file.starts(with: Array("bplist00".utf8)), "not a binary plist")
        #expect(try PropertyListCodec.decode(file) == expected)
    }

    /// `defaults import D -` reads as much as `defaults import D FILE`: a domain within 4 MiB
    /// whose XML is over 16 MiB (3.4 MiB of '&', each `&amp;` as XML) imports from stdin too
    /// (it stopped at 16 MiB: "input on fd 0 is larger than 16 MiB", while the same file
    /// imported), and both refuse past 64 MiB saying so.
    @Test func aLargeXMLImportsFromStdinAsFromAFile() throws {
        let d = try Daemon()
        defer { d.close() }
        let values: PlistDictionary = ["amps": .string(String(repeating: "&", count: 3_400_000))]
        let plist = try PropertyListCodec.encode(.dict(values), format: .xml)
        try #require(plist.count > 16 << 20, "\(plist.count) bytes")
        let imported = d.ctl(["defaults", "import", "com.example.stdin", "-"], stdin: plist)
        #expect(imported.status == 0, "\(imported)")
        #expect(try d.client().preferences.values(domain: "com.example.stdin") == values)
        let huge = d.root + "/huge.plist"
        try Data(count: (64 << 20) + 1).write(to: URL(fileURLWithPath: huge))
        for source in [huge, "-"] {
            let r = d.ctl(
                ["defaults", "import", "com.example.huge", source],
                stdin: source == "-" ? Data(count: (64 << 20) + 1) : nil)
            #expect(
                r.status == 1
                    && r.stderr.contains("File too large (a plist to import may be at most 64 MiB)"),
                "\(source): \(r)")
        }
    }

    /// A real plist file of a domain within the 4 MiB limit imports whatever size the file
    /// takes: XML of 160,000 small keys (7.7 MB) or of 3 MB of text full of `&` (15 MB, as
    /// `&amp;`) was sent to vaultd whole in base64, over the 8 MiB message limit, and the
    /// import failed with "invalid parameter 'message'" (so a domain exported as XML could
    /// not be imported back).
    @Test func aDomainWhoseXMLIsLargeImportsFromTheFile() throws {
        let d = try Daemon()
        defer { d.close() }
        let prefs = try d.client().preferences
        var small: PlistDictionary = [:]
        for i in 0..<160_000 { small[String(format: "key%06d", i)] = .integer(Int64(100_000 + i)) }
        let ampersands = String(repeating: "a&b", count: 333_333)
        let text: PlistDictionary = [
            "t1": .string(ampersands), "t2": .string(ampersands + "<"),
            "t3": .string(ampersands + ">"),
        ]
        for (name, values) in [("small", small), ("text", text)] {
            let path = d.root + "/\(name).plist"
            let plist = try PropertyListCodec.encode(.dict(values), format: .xml)
            try #require(plist.count > 6_500_000, "\(name): \(plist.count) bytes")
            try plist.write(to: URL(fileURLWithPath: path))
            let domain = "com.example.\(name)"
            let imported = d.ctl(["defaults", "import", domain, path])
            #expect(imported.status == 0, "\(name): \(imported)")
            let stored = try prefs.values(domain: domain)
            #expect(
                stored.count == values.count && stored == values, "\(name): \(stored.count) keys")
            // And back: exported as XML, imported again from stdin.
            let xml = d.ctl(["defaults", "export", domain, "-"])
            let again = d.ctl(["defaults", "import", domain + ".again", "-"], stdin: xml.stdout)
            #expect(xml.status == 0 && again.status == 0, "\(name): \(again)")
            #expect(try prefs.values(domain: domain + ".again") == values, "\(name) again")
        }
        // A file whose domain is over 4 MiB (6 MB) is still refused as such, naming the
        // domain, and changes nothing.
        for copies in [2] {
            let long = String(repeating: ampersands, count: copies)
            let over: PlistDictionary = [
                "t1": .string(long), "t2": .string(long), "t3": .string(long),
            ]
            let path = d.root + "/over.plist"
            try PropertyListCodec.encode(.dict(over), format: .xml).write(
                to: URL(fileURLWithPath: path))
            let refused = d.ctl(["defaults", "import", "com.example.text", path])
            #expect(
                refused.status == 65
                    && refused.stderr.contains("io.vaultd.Preferences.DomainTooLarge")
                    && refused.stderr.contains("com.example.text"), "\(refused)")
            #expect(try prefs.values(domain: "com.example.text") == text)
        }
    }

    @Test func keysWithANULAreKeptWhole() throws {
        let d = try Daemon()
        defer { d.close() }
        let prefs = try d.client().preferences
        try prefs.set(.string("first"), domain: "com.example.nul", key: "a\0b")
        try prefs.set(.string("second"), domain: "com.example.nul", key: "a\0c")
        try prefs.set(.string("plain"), domain: "com.example.nul", key: "a")
        #expect(try prefs.value(domain: "com.example.nul", key: "a\0b") == .string("first"))
        #expect(try prefs.value(domain: "com.example.nul", key: "a\0c") == .string("second"))
        #expect(try prefs.value(domain: "com.example.nul", key: "a") == .string("plain"))
        let all = try prefs.values(domain: "com.example.nul")
        #expect(
            Set(all.keys.map { Array($0.utf8) })
                == Set([Array("a\0b".utf8), Array("a\0c".utf8), Array("a".utf8)]),
            "\(all.keys.map(\.debugDescription))")
        try prefs.remove(domain: "com.example.nul", key: "a\0b")
        #expect(try prefs.value(domain: "com.example.nul", key: "a\0c") == .string("second"))
        #expect(try prefs.value(domain: "com.example.nul", key: "a") == .string("plain"))
    }

    // MARK: limits

    @Test func aDomainOverFourMiBIsRefusedNamingDomainAndSizeAndNothingIsWritten() throws {
        let d = try Daemon()
        defer { d.close() }
        let vault = try d.client()
        let prefs = vault.preferences
        let domain = "com.example.big"
        let limit = 4 << 20
        let mib = pseudoRandomBytes(count: 1 << 20, seed: 42)
        for i in 1...3 { try prefs.set(.data(mib), domain: domain, key: "blob\(i)") }
        try prefs.set(.string("small"), domain: domain, key: "small")
        let before = try prefs.values(domain: domain)

        let refused = vaultError { try prefs.set(.data(mib), domain: domain, key: "blob4") }
        #expect(
            refused?.code == .domainTooLarge
                && refused?.name == "io.vaultd.Preferences.DomainTooLarge",
            "\(String(describing: refused))")
        #expect(refused?.parameters["domain"] == .string(domain))
        let size = refused?.parameters["size"]?.intValue ?? 0
        #expect(size > limit && size < limit + (2 << 20), "size \(size)")
        #expect(refused?.parameters["limit"]?.intValue == limit)
        #expect(
            refused?.message.contains(domain) == true
                && refused?.message.contains(String(size)) == true, "\(refused?.message ?? "")")
        #expect(try prefs.value(domain: domain, key: "blob4") == nil)
        expectEqual(try prefs.values(domain: domain), before, "after the refused Set")

        // Replacing a value counts the new size, not both.
        try prefs.set(
            .data(pseudoRandomBytes(count: 1 << 20, seed: 43)), domain: domain, key: "blob1")
        let growing = vaultError {
            try prefs.set(
                .data(pseudoRandomBytes(count: 2 << 20, seed: 44)), domain: domain, key: "blob2")
        }
        #expect(growing?.code == .domainTooLarge)
        #expect(try prefs.value(domain: domain, key: "blob2") == .data(mib))

        // Through Defaults: refused, and the in-process copy unchanged.
        let defaults = try Defaults(vault: vault, suiteName: domain, arguments: [])
        #expect(vaultError { try defaults.set(mib, forKey: "blob5") }?.code == .domainTooLarge)
        #expect(defaults.object(forKey: "blob5") == nil)

        // Through vaultctl: an import over the limit is refused, the domain keeps what it had.
        let now = try prefs.values(domain: domain)
        var big: [String: Any] = [:]
        for i in 0..<5 {
            big["part\(i)"] = pseudoRandomBytes(count: 1 << 20, seed: UInt64(100 + i))
        }
        let file = d.root + "/big.plist"
        try PropertyListSerialization.data(fromPropertyList: big, format: .binary, options: 0)
            .write(to: URL(fileURLWithPath: file))
        let imported = d.ctl(["defaults", "import", domain, file])
        #expect(
            imported.status == 65
                && imported.stderr.contains("io.vaultd.Preferences.DomainTooLarge")
                && imported.stderr.contains(domain), "\(imported)")
        expectEqual(try prefs.values(domain: domain), now, "after the refused import")
        // The same into a new domain creates nothing.
        let fresh = d.ctl(["defaults", "import", "com.example.big2", file])
        #expect(fresh.status == 65, "\(fresh)")
        #expect(!(try prefs.domains().contains("com.example.big2")))
    }

    /// A domain whose values take far more on the wire than in a plist (JSON writes a control
    /// character in six bytes) is limited by that too, so reading it whole always fits one
    /// message: 4 MB of them were accepted, then no client could read the domain.
    @Test func aDomainTheWireCannotCarryIsRefusedAndWhatIsKeptReads() throws {
        let d = try Daemon()
        defer { d.close() }
        let prefs = try d.client().preferences
        let domain = "com.example.control"
        let controls = String(repeating: "\u{1}", count: 1_000_000)
        try prefs.set(.string(controls), domain: domain, key: "k1")
        let refused = vaultError { try prefs.set(.string(controls), domain: domain, key: "k2") }
        #expect(refused?.code == .domainTooLarge, "\(String(describing: refused))")
        #expect(try prefs.values(domain: domain) == ["k1": .string(controls)])
        let read = d.ctl(["defaults", "read", domain, "k1"])
        #expect(read.status == 0, "\(read.stderr)")
    }

    @Test func keysOverOneKiBAreRefused() throws {
        let d = try Daemon()
        defer { d.close() }
        let prefs = try d.client().preferences
        let domain = "com.example.keys"
        let exact = String(repeating: "k", count: 1024)
        try prefs.set(.string("fits"), domain: domain, key: exact)
        #expect(try prefs.value(domain: domain, key: exact) == .string("fits"))

        let over = String(repeating: "k", count: 1025)
        let e = vaultError { try prefs.set(.string("x"), domain: domain, key: over) }
        #expect(
            e?.code == .invalidValue && e?.name == "io.vaultd.Preferences.InvalidValue",
            "\(String(describing: e))")
        // 342 characters, 1026 bytes: the limit is in bytes.
        let euros = String(repeating: "€", count: 342)
        #expect(
            vaultError { try prefs.set(.string("x"), domain: domain, key: euros) }?.code
                == .invalidValue)
        let ctl = d.ctl(["defaults", "write", domain, over, "x"])
        #expect(
            ctl.status == 65 && ctl.stderr.contains("io.vaultd.Preferences.InvalidValue"), "\(ctl)")
        // Nor through an import.
        let file = d.root + "/longkey.plist"
        try PropertyListSerialization.data(
            fromPropertyList: [over: "x", "short": "y"], format: .xml, options: 0
        ).write(to: URL(fileURLWithPath: file))
        let imported = d.ctl(["defaults", "import", domain, file])
        #expect(imported.status == 65 && imported.stderr.contains("InvalidValue"), "\(imported)")
        #expect(try prefs.values(domain: domain) == [exact: .string("fits")])
    }

    // MARK: concurrent writers

    @Test func concurrentWriterProcessesToOneDomainLoseNoKey() throws {
        let d = try Daemon()
        defer { d.close() }
        let domain = "com.example.shared"
        let writers = 4
        let each = 250
        var pids: [pid_t] = []
        for w in 0..<writers {
            let pid = try ChildProcess.spawn(
                Paths.tool("vault-example"),
                [
                    "defaults", "fill", String(each), "--suite", domain, "--prefix", "w\(w).",
                    "--value", "v\(w).",
                ],
                environment: d.environment, inputs: [:],
                stdout: .file(d.root + "/writer\(w).out", append: false),
                stderr: .file(d.root + "/writer\(w).err", append: false))
            pids.append(pid)
        }
        // And vaultctl processes writing single keys meanwhile.
        var ctlFailures: [String] = []
        for i in 0..<10 {
            let r = d.ctl(["defaults", "write", domain, "ctl.\(i)", "-int", String(i)])
            if r.status != 0 { ctlFailures.append("\(r)") }
        }
        for (w, pid) in pids.enumerated() {
            let status = ChildProcess.wait(pid, timeout: 120)
            #expect(
                status == 0,
                "writer \(w): \(String(describing: status)) \((try? String(contentsOfFile: d.root + "/writer\(w).err", encoding: .utf8)) ?? "")"
            )
        }
        #expect(ctlFailures.isEmpty, "\(ctlFailures)")
        let stored = try d.client().preferences.values(domain: domain)
        #expect(stored.count == writers * each + 10)
        var lost: [String] = []
        for w in 0..<writers {
            for i in 0..<each where stored["w\(w).\(i)"] != .string("v\(w).\(i)") {
                lost.append("w\(w).\(i)")
            }
        }
        for i in 0..<10 where stored["ctl.\(i)"] != .integer(Int64(i)) { lost.append("ctl.\(i)") }
        #expect(lost.isEmpty, "lost \(lost.count): \(lost.prefix(10))")
    }

    // MARK: Defaults

    @Test func defaultsSearchListArgumentsAppGlobalRegistration() throws {
        let d = try Daemon()
        defer { d.close() }
        let app = "com.example.app"
        for (domain, key, value) in [
            (app, "shared", "app"), (app, "appOnly", "a"), ("-g", "shared", "global"),
            ("-g", "globalOnly", "g"),
            ("-g", "globalAndRegistered", "g2"),
        ] {
            try #require(d.ctl(["defaults", "write", domain, key, value]).status == 0)
        }
        let vault = try d.client()
        let defaults = try Defaults(
            vault: vault, suiteName: app,
            arguments: [
                "/usr/bin/app", "-shared", "argument", "-argOnly", "(1, 2)", "--long-option", "x",
                "-argDict", "{k = v;}",
            ])
        defaults.register(defaults: [
            "shared": .string("registered"), "registeredOnly": .string("r"),
            "globalAndRegistered": .string("r2"),
        ])

        #expect(defaults.domainName == app)
        #expect(
            defaults.object(forKey: "shared") == .string("argument"),
            "the argument domain comes first")
        #expect(defaults.object(forKey: "argOnly") == .array([.string("1"), .string("2")]))
        #expect(defaults.object(forKey: "argDict") == .dict(["k": .string("v")]))
        #expect(
            defaults.object(forKey: "long-option") == nil
                && defaults.object(forKey: "-long-option") == nil)
        #expect(defaults.object(forKey: "appOnly") == .string("a"))
        #expect(defaults.object(forKey: "globalOnly") == .string("g"))
        #expect(
            defaults.object(forKey: "globalAndRegistered") == .string("g2"),
            "NSGlobalDomain before the registration domain")
        #expect(defaults.object(forKey: "registeredOnly") == .string("r"))
        #expect(defaults.object(forKey: "absent") == nil)
        let expected: PlistDictionary = [
            "shared": .string("argument"), "argOnly": .array([.string("1"), .string("2")]),
            "argDict": .dict(["k": .string("v")]),
            "appOnly": .string("a"), "globalOnly": .string("g"),
            "globalAndRegistered": .string("g2"), "registeredOnly": .string("r"),
        ]
        #expect(defaults.dictionaryRepresentation() == expected)

        // The registration domain is never stored.
        #expect(try vault.preferences.values(domain: app).keys.sorted() == ["appOnly", "shared"])
        #expect(try vault.preferences.value(domain: "NSGlobalDomain", key: "registeredOnly") == nil)
        #expect(d.ctl(["defaults", "read", app, "registeredOnly"]).status == 44)
        let other = try Defaults(vault: vault, suiteName: app, arguments: ["/usr/bin/app"])
        // The registration domain is the process's, shared by every instance (as UserDefaults').
        #expect(other.object(forKey: "registeredOnly") == .string("r"))
        #expect(
            other.object(forKey: "shared") == .string("app"),
            "without the argument, the app domain wins")

        // removeObject removes from the app's domain (durably); the global value shows through,
        // then the registered one when the global value goes too.
        try other.removeObject(forKey: "shared")
        #expect(other.object(forKey: "shared") == .string("global"))
        #expect(try vault.preferences.value(domain: app, key: "shared") == nil)
        other.register(defaults: ["shared": .string("registered")])
        try #require(d.ctl(["defaults", "delete", "-g", "shared"]).status == 0)
        #expect(
            eventually(timeout: 10) { other.object(forKey: "shared") == .string("registered") },
            "\(String(describing: other.object(forKey: "shared")))")
        try other.removeObject(forKey: "never-set")  // no error
        // Writes go to the app's domain.
        try other.set("written", forKey: "newKey")
        #expect(d.ctl(["defaults", "read", app, "newKey"]).stdoutText == "written\n")
        #expect(defaults.object(forKey: "shared") == .string("argument"))
    }

    /// As Foundation's argument domain, a word starting with "-" is never a value: a switch
    /// given without one (`-Verbose -Count 5`) sets nothing and the next pair still counts.
    /// "-Count" was taken as Verbose's value, and Count was never set.
    @Test func anArgumentSwitchWithoutAValueLeavesTheNextPairIntact() throws {
        let d = try Daemon()
        defer { d.close() }
        let defaults = try Defaults(
            vault: try d.client(), suiteName: "com.example.arguments",
            arguments: ["/usr/bin/app", "-Verbose", "-Count", "5", "-Name", "x", "-Trailing"])
        #expect(defaults.object(forKey: "Verbose") == nil)
        #expect(defaults.object(forKey: "Count") == .string("5"))
        #expect(defaults.integer(forKey: "Count") == 5)
        #expect(defaults.object(forKey: "Name") == .string("x"))
        #expect(defaults.object(forKey: "Trailing") == nil)
        // (The registration domain is the process's: other tests' registrations show too.)
        let all = defaults.dictionaryRepresentation()
        #expect(
            all["Count"] == .string("5") && all["Name"] == .string("x") && all["Verbose"] == nil
                && all["Trailing"] == nil)
    }

    @Test func aRegisteredAppReadsItsDomainThenTheGlobalDomain() throws {
        let d = try Daemon()
        defer { d.close() }
        let exe = URL(fileURLWithPath: Paths.tool("vault-example")).resolvingSymlinksInPath().path
        let install = d.ctl(["app", "install", "com.example.tierapp", "--exe", exe])
        try #require(install.status == 0, "\(install)")
        for (domain, key, value) in [
            ("com.example.tierapp", "shared", "app"), ("-g", "shared", "global"),
            ("-g", "globalOnly", "g"),
        ] {
            try #require(d.ctl(["defaults", "write", domain, key, value]).status == 0)
        }
        func get(_ key: String) -> String {
            d.run("vault-example", ["defaults", "get", key]).stdoutText
        }
        #expect(get("shared") == "app\n")
        #expect(get("globalOnly") == "g\n")
        let set = d.run("vault-example", ["defaults", "set", "globalOnly", "mine"])
        #expect(set.status == 0, "\(set)")
        #expect(get("globalOnly") == "mine\n")
        #expect(
            d.ctl(["defaults", "read", "com.example.tierapp", "globalOnly"]).stdoutText == "mine\n")
        #expect(
            d.ctl(["defaults", "read", "-g", "globalOnly"]).stdoutText == "g\n",
            "an app's write goes to its own domain")
    }

    /// An observer that reads nothing while a burst of 120,000 changes goes out (the import
    /// of a large domain) is dropped once 4 MiB of them wait: its stream ends after what was
    /// already on its socket, with RateLimited (observe again), so a client that connects
    /// again starts from a snapshot. (vaultd dropped the oldest events and went on: the
    /// observer's copy missed them for good.)
    @Test func anObserverTooFarBehindIsClosedRatherThanLeftWithAGap() throws {
        let d = try Daemon()
        defer { d.close() }
        let domain = "com.example.flood"
        let observer = try VarlinkConnection(path: d.socketPath)
        defer { observer.close() }
        _ = try observer.send(json: [
            "method": "io.vaultd.Preferences.Observe", "parameters": ["domains": [domain]],
            "more": true,
        ])
        guard case .reply(let snapshot) = observer.receive(), snapshot["error"] == nil else {
            Issue.record("no snapshot")
            return
        }

        let count = 120_000
        var values: [String: Any] = [:]
        for i in 0..<count { values["k\(i)"] = i }
        let plist = try PropertyListSerialization.data(
            fromPropertyList: values, format: .binary, options: 0)
        #expect(try d.client().preferences.importDomain(domain, plist: plist) == count)

        var events = 0
        var ended = false
        var told: String?
        reading: while true {
            switch observer.receive(timeout: 20) {
            case .reply(let r) where r["error"] == nil: events += 1
            case .reply(let r) where told == nil: told = r["error"] as? String
            case .closed:
                ended = true
                break reading
            default: break reading
            }
        }
        #expect(ended, "the stream went on after \(events) events")
        #expect(told == "io.vaultd.Vault.RateLimited", "\(String(describing: told))")
        #expect(events > 0 && events < count, "\(events)")
        let defaults = try Defaults(vault: try d.client(), suiteName: domain, arguments: [])
        #expect(
            defaults.integer(forKey: "k0") == 0
                && defaults.integer(forKey: "k\(count - 1)") == count - 1)
        #expect(d.log.contains("an observer fell 4 MiB of events behind"), "\(d.log.suffix(500))")
    }

    @Test func typedGettersConvertAsUserDefaults() throws {
        let d = try Daemon()
        defer { d.close() }
        let defaults = try Defaults(
            vault: try d.client(), suiteName: "com.example.typed", arguments: [])
        let date = Date(timeIntervalSinceReferenceDate: 1234.5)
        let values: PlistDictionary = [
            "int": .integer(42), "zero": .integer(0), "negative": .integer(-7), "real": .real(3.75),
            "huge": .real(1e300),
            "nan": .real(.nan), "true": .bool(true), "false": .bool(false), "str42": .string("42"),
            "str2.5": .string("2.5"),
            "strYES": .string("YES"), "strNo": .string("no"), "strText": .string("hello"),
            "uint": .unsignedInteger(.max),
            "date": .date(date), "data": .data(Data([1, 2])), "array": .array([.integer(1)]),
            "dict": .dict(["k": .integer(1)]),
            // Strings convert by their leading number, as NSString's integerValue / doubleValue.
            "s42abc": .string("42abc"), "sSpace7": .string(" \t7"), "s1e3": .string("1e3"),
            "sHex": .string("0x10"),
            "sInf": .string("inf"), "sNan": .string("nan"), "sNeg": .string("-12.5e1xyz"),
            "sDot5": .string(".5"),
            "sBig": .string("99999999999999999999"), "sNegBig": .string("-99999999999999999999"),
            "s1e999": .string("1e999"),
        ]
        for (k, v) in values { try defaults.set(v, forKey: k) }

        #expect(defaults.integer(forKey: "int") == 42)
        #expect(defaults.integer(forKey: "real") == 3)
        #expect(defaults.integer(forKey: "true") == 1 && defaults.integer(forKey: "false") == 0)
        #expect(defaults.integer(forKey: "str42") == 42 && defaults.integer(forKey: "str2.5") == 2)
        #expect(defaults.integer(forKey: "strText") == 0 && defaults.integer(forKey: "absent") == 0)
        #expect(defaults.integer(forKey: "date") == 0 && defaults.integer(forKey: "nan") == 0)
        // Out of Int's range: saturates (never traps).
        #expect(defaults.integer(forKey: "huge") == Int.max)
        let integers = [
            "s42abc", "sSpace7", "s1e3", "sHex", "sInf", "sNan", "sNeg", "sDot5", "sBig", "sNegBig",
        ].map { defaults.integer(forKey: $0) }
        #expect(integers == [42, 7, 1, 0, 0, 0, -12, 0, .max, .min])
        let doubles = [
            "s42abc", "sSpace7", "s1e3", "sHex", "sInf", "sNan", "sNeg", "sDot5", "s1e999",
        ].map { defaults.double(forKey: $0) }
        #expect(doubles == [42, 7, 1000, 0, 0, 0, -125, 0.5, .infinity])
        let bools = ["s42abc", "sSpace7", "sHex", "sInf", "sDot5", "sNeg"].map {
            defaults.bool(forKey: $0)
        }
        #expect(bools == [true, true, false, false, false, true])

        #expect(defaults.double(forKey: "int") == 42 && defaults.double(forKey: "real") == 3.75)
        #expect(defaults.double(forKey: "str2.5") == 2.5 && defaults.double(forKey: "true") == 1)
        #expect(
            defaults.double(forKey: "uint") == Double(UInt64.max)
                && defaults.double(forKey: "absent") == 0)

        #expect(defaults.bool(forKey: "true") && !defaults.bool(forKey: "false"))
        #expect(
            defaults.bool(forKey: "int") && !defaults.bool(forKey: "zero")
                && defaults.bool(forKey: "negative"))
        #expect(defaults.bool(forKey: "real") && defaults.bool(forKey: "uint"))
        #expect(
            defaults.bool(forKey: "strYES") && !defaults.bool(forKey: "strNo")
                && defaults.bool(forKey: "str42"))
        #expect(
            !defaults.bool(forKey: "strText") && !defaults.bool(forKey: "absent")
                && !defaults.bool(forKey: "date"))

        #expect(defaults.string(forKey: "strText") == "hello")
        #expect(defaults.string(forKey: "int") == "42" && defaults.string(forKey: "real") == "3.75")
        #expect(defaults.string(forKey: "uint") == "18446744073709551615")
        #expect(defaults.string(forKey: "true") == "1" && defaults.string(forKey: "false") == "0")
        #expect(defaults.string(forKey: "date") == nil && defaults.string(forKey: "array") == nil)

        #expect(defaults.date(forKey: "date") == date && defaults.date(forKey: "int") == nil)
        #expect(
            defaults.data(forKey: "data") == Data([1, 2]) && defaults.data(forKey: "strText") == nil
        )
        #expect(
            defaults.array(forKey: "array") == [.integer(1)]
                && defaults.array(forKey: "dict") == nil)
        #expect(
            defaults.dictionary(forKey: "dict") == ["k": .integer(1)]
                && defaults.dictionary(forKey: "array") == nil)

        #expect(
            defaults.float(forKey: "real") == 3.75 && defaults.float(forKey: "s1e999") == .infinity)
        try defaults.set(.array([.string("a"), .string("b")]), forKey: "strings")
        try defaults.set(.array([.string("a"), .integer(1)]), forKey: "mixed")
        #expect(
            defaults.stringArray(forKey: "strings") == ["a", "b"]
                && defaults.stringArray(forKey: "mixed") == nil)
        #expect(
            defaults.stringArray(forKey: "strText") == nil
                && defaults.stringArray(forKey: "absent") == nil)
        let web = try #require(URL(string: "https://example.com/a?b=c#d"))
        try defaults.set(web, forKey: "web")
        try defaults.set(URL(fileURLWithPath: "/tmp/some file"), forKey: "file")
        try defaults.set("/var/log", forKey: "path")
        try defaults.set("~/notes", forKey: "tilde")
        #expect(
            defaults.url(forKey: "web") == web
                && defaults.string(forKey: "web") == "https://example.com/a?b=c#d")
        #expect(
            defaults.url(forKey: "file")?.path == "/tmp/some file"
                && defaults.url(forKey: "file")?.isFileURL == true)
        #expect(defaults.url(forKey: "path") == URL(fileURLWithPath: "/var/log"))
        #expect(defaults.url(forKey: "tilde") == URL(fileURLWithPath: NSHomeDirectory() + "/notes"))
        #expect(
            defaults.url(forKey: "strText") == nil && defaults.url(forKey: "int") == nil
                && defaults.url(forKey: "absent") == nil)
        // A ~user that does not expand leaves a relative path: nil, as "notes/x" is (not a
        // file URL relative to the reader's working directory).
        try defaults.set("~no-such-user-of-vaultd/notes", forKey: "tildeUnknown")
        try defaults.set("notes/x", forKey: "relative")
        #expect(
            defaults.url(forKey: "tildeUnknown") == nil,
            "\(String(describing: defaults.url(forKey: "tildeUnknown")))")
        #expect(defaults.url(forKey: "relative") == nil)
        // Stored as text, so vaultctl (and defaults(1) users) read it as a string.
        #expect(
            try d.client().preferences.value(domain: "com.example.typed", key: "file")
                == .string("file:///tmp/some%20file"))
    }

    @Test func readsAreInMemoryAndFollowOtherProcesses() throws {
        let d = try Daemon()
        defer { d.close() }
        let domain = "com.example.live"
        let defaults = try Defaults(vault: try d.client(), suiteName: domain, arguments: [])
        #expect(defaults.object(forKey: "live") == nil)

        let write = d.ctl(["defaults", "write", domain, "live", "-int", "1"])
        try #require(write.status == 0, "\(write)")
        #expect(
            eventually(timeout: 5) { defaults.object(forKey: "live") == .integer(1) },
            "a value another process set did not show up")
        try #require(d.ctl(["defaults", "write", "-g", "globalLive", "yes"]).status == 0)
        #expect(eventually(timeout: 5) { defaults.object(forKey: "globalLive") == .string("yes") })

        // With vaultd stopped (SIGSTOP), reads still answer at once: they never call it.
        d.sendSignal(SIGSTOP)
        defer { d.sendSignal(SIGCONT) }
        let answered = Shared<[PlistValue?]?>(nil)
        let reader = Thread {
            let r: [PlistValue?] = [
                defaults.object(forKey: "live"), defaults.object(forKey: "globalLive"),
                defaults.dictionaryRepresentation()["live"],
                defaults.string(forKey: "globalLive").map { .string($0) },
                .integer(Int64(defaults.integer(forKey: "live"))),
            ]
            answered.update { $0 = r }
        }
        reader.start()
        let quick = eventually(timeout: 5) { answered.value != nil }
        d.sendSignal(SIGCONT)
        #expect(quick, "reads blocked while vaultd was stopped: they call vaultd")
        if quick {
            #expect(
                answered.value! == [
                    .integer(1), .string("yes"), .integer(1), .string("yes"), .integer(1),
                ])
        }
        _ = eventually(timeout: 10) { answered.value != nil }

        // Removal by another process shows up too.
        try #require(d.ctl(["defaults", "delete", domain, "live"]).status == 0)
        #expect(eventually(timeout: 5) { defaults.object(forKey: "live") == nil })
    }
}

/// An observer of one domain hears that domain's writes only, not those of a domain whose
/// name differs only in Unicode normalisation (`group.café` with U+00E9, and with `e` +
/// U+0301): two suites to the store, one to a Swift `Set<String>`, so an app observing its
/// own suite heard another app's writes to the twin suite, values included.
@Suite struct ObserveNormalisationTests {
    @Test func anObserverHearsItsOwnDomainNotItsNormalisationTwin() throws {
        let d = try Daemon()
        defer { d.close() }
        let mine = "group.cafe\u{301}"
        let twin = "group.caf\u{E9}"
        let observer = try ExactClient(path: d.socketPath)
        defer { observer.close() }
        #expect(
            observer.send(
                JSON.object([
                    "method": "io.vaultd.Preferences.Observe",
                    "parameters": ["domains": [.string(mine)], "keys": ["k", "caf\u{E9}"]],
                    "more": true,
                ]).serialized() + [0]))
        let snapshot = observer.receive()
        #expect(snapshot.parameters?["domain"] == .string(mine), "\(snapshot)")
        #expect(d.ctl(["defaults", "write", twin, "k", "-string", "not yours"]).status == 0)
        #expect(
            d.ctl(["defaults", "write", mine, "cafe\u{301}", "-string", "a key not asked for"])
                .status == 0)
        #expect(d.ctl(["defaults", "write", mine, "k", "-string", "yours"]).status == 0)
        let event = observer.receive(timeout: 10)
        #expect(event.parameters?["domain"] == .string(mine), "\(event)")
        #expect(event.parameters?["value"] == ["string": "yours"], "\(event)")
    }
}
