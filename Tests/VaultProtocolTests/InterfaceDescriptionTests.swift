import Foundation
import Testing
import VaultProtocol

/// The interface descriptions as data: the `.varlink` files, the texts compiled from them, the
/// IDL parser, the method names everyone uses, and the checks of calls and replies.
@Suite struct InterfaceDescriptionTests {
    /// The repository root, from this file's path (Tests/VaultProtocolTests/InterfaceDescriptionTests.swift).
    static let repoRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()
    static let directory = repoRoot.appendingPathComponent("Sources/VaultProtocol/Interfaces")

    static func varlinkFiles() throws -> [String: String] {
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter {
            $0.hasSuffix(".varlink")
        }
        var files: [String: String] = [:]
        for n in names {
            files[String(n.dropLast(".varlink".count))] = try String(
                contentsOf: directory.appendingPathComponent(n), encoding: .utf8)
        }
        return files
    }

    /// The texts vaultd serves are its files' bytes: Interfaces/Texts/ is up to date
    /// (scripts/generate-interfaces writes it), and every file is served.
    @Test func compiledTextsAreTheVarlinkFilesByteForByte() throws {
        let files = try Self.varlinkFiles()
        #expect(
            Set(files.keys) == Set(VarlinkInterfaces.names),
            "files: \(files.keys.sorted()); served: \(VarlinkInterfaces.names)")
        for (name, text) in files {
            let served = VarlinkInterfaces.description(of: name)
            #expect(
                served.map { Array($0.utf8) } == Array(text.utf8),
                "\(name).varlink differs from Interfaces/Texts/: run scripts/generate-interfaces"
            )
        }
    }

    @Test func everyDescriptionParsesAndNamesItsFile() throws {
        for (name, text) in try Self.varlinkFiles() {
            let i = try VarlinkIDL.parse(text)
            #expect(i.name == name)
            #expect(!i.methods.isEmpty)
        }
        #expect(VarlinkInterfaces.parsed.map(\.name) == VarlinkInterfaces.names)
    }

    /// `VarlinkMethod`, the names vaultd's table, VaultClient and vaultctl use, is exactly
    /// the methods the descriptions declare: one added to a file but not to the enum fails here
    /// (and vaultd's table, an exhaustive switch over the enum, then cannot leave it out).
    @Test func methodNamesAreTheDeclaredMethodsBothWays() {
        let declared = VarlinkInterfaces.methodNames
        let named = VarlinkMethod.allCases.map(\.name)
        #expect(Set(declared).count == declared.count)
        #expect(
            Set(named).subtracting(declared).isEmpty,
            "named but not declared: \(Set(named).subtracting(declared).sorted())")
        #expect(
            Set(declared).subtracting(named).isEmpty,
            "declared but not named: \(Set(declared).subtracting(named).sorted())")
        // In the same order too: the enum reads as the descriptions do.
        #expect(named == declared)
        #expect(VarlinkMethod.keychainAdd.interface == "io.vaultd.Keychain")
    }

    // MARK: The parser

    static let sample = """
        # A comment before the interface line.
        interface org.example.more-test

        # An enum type, and a struct of every kind of field.
        type Colour (red, green, blue_ish)
        type Everything (
          b: bool, i: int, f: float, s: string, o: object,  # a comment in a struct
          e: (one, two), st: (first: int, second: ?string),
          a: []string, m: [string]int, set: [string](), n: ?string,
          na: ?[](x: int), other: Colour, deep: [][string]?Colour
        )
        method Do(what: Everything, count: ?int) -> ()
        method Ping() -> (pong: bool)
        error Failed (reason: string)
        error Plain ()
        """

    @Test func parsesEveryKindOfTypeOfTheGrammar() throws {
        let i = try VarlinkIDL.parse(Self.sample)
        #expect(i.name == "org.example.more-test")
        #expect(i.types["Colour"] == .enumeration(["red", "green", "blue_ish"]))
        guard case .structure(let fields)? = i.types["Everything"] else {
            Issue.record("Everything is not a struct: \(String(describing: i.types["Everything"]))")
            return
        }
        let t = Dictionary(uniqueKeysWithValues: fields.map { ($0.name, $0.type) })
        #expect(
            fields.map(\.name) == [
                "b", "i", "f", "s", "o", "e", "st", "a", "m", "set", "n", "na", "other", "deep",
            ])
        #expect(
            t["b"] == .bool && t["i"] == .int && t["f"] == .float && t["s"] == .string
                && t["o"] == .object)
        #expect(t["e"] == .enumeration(["one", "two"]))
        #expect(
            t["st"]
                == .structure([
                    .init(name: "first", type: .int),
                    .init(name: "second", type: .optional(.string)),
                ]))
        #expect(
            t["a"] == .array(.string) && t["m"] == .map(.int) && t["set"] == .map(.structure([])))
        #expect(
            t["n"] == .optional(.string)
                && t["na"] == .optional(.array(.structure([.init(name: "x", type: .int)]))))
        #expect(
            t["other"] == .named("Colour") && t["deep"] == .array(.map(.optional(.named("Colour"))))
        )
        #expect(i.methodOrder == ["Do", "Ping"])
        #expect(
            i.methods["Do"]?.input.map(\.name) == ["what", "count"] && i.methods["Do"]?.output == []
        )
        #expect(i.methods["Ping"]?.output == [.init(name: "pong", type: .bool)])
        #expect(
            i.errors["Failed"]?.parameters == [.init(name: "reason", type: .string)]
                && i.errors["Plain"]?.parameters == [])
        #expect(i.text == Self.sample)
    }

    @Test(arguments: [
        ("", "a description starts with 'interface'"),
        ("interface example", "not an interface name"),
        ("interface org.example\nmethod lower() -> ()", "expected a method name"),
        ("interface org.example\nmethod A() -> ()\nerror A ()", "'A' is declared twice"),
        ("interface org.example\nmethod A(x: Missing) -> ()", "type 'Missing' is not declared"),
        ("interface org.example\nmethod A(x: int, x: int) -> ()", "'x' appears twice"),
        ("interface org.example\nmethod A(x: ??int) -> ()", "'??' is not a type"),
        ("interface org.example\nmethod A(x: int, y) -> ()", "a struct's fields all have types"),
        ("interface org.example\nmethod A(_x: int) -> ()", "not a field name"),
        ("interface org.example\nmethod A(x: int) (y: int)", "expected '->'"),
        ("interface org.example\nmethod A(x: integer) -> ()", "expected a type"),
        ("interface org.example\nmethod A(x: int) -> (a, b)", "not an enum"),
        ("interface org.example\nsignal A()", "expected 'type', 'method' or 'error'"),
        ("interface org.example\nmethod A(x: int -> ()", "expected ')'"),
        // Nesting is bounded: the parser recurses once per level.
        (
            "interface org.example\nmethod A(x: " + String(repeating: "[]", count: 100_000)
                + "int) -> ()", "nest deeper than 64"
        ),
        (
            "interface org.example\nmethod A(x: " + String(repeating: "(a: ", count: 100_000)
                + "int) -> ()", "nest deeper than 64"
        ),
    ])
    func refusesWhatTheGrammarDoesNot(_ text: String, _ reason: String) {
        do {
            _ = try VarlinkIDL.parse(text)
            Issue.record("parsed: \(text)")
        } catch let e as VarlinkIDL.ParseError {
            #expect(e.reason.contains(reason), "\(e)")
        } catch {
            Issue.record("\(error)")
        }
    }

    @Test func aParseErrorSaysWhere() {
        #expect(
            throws: VarlinkIDL.ParseError(line: 3, column: 13, reason: "expected a type, found ''")
        ) {
            try VarlinkIDL.parse("interface org.example\n# comment\nmethod A(x: ) -> ()")
        }
    }

    // MARK: Calls

    static func refusal(_ method: String, _ parameters: JSONObject, secrets: Set<ExactString> = [])
        -> VaultError?
    {
        VarlinkValidation.callRefusal(
            VarlinkCall(method: method, parameters: parameters), secrets: secrets)
    }

    @Test func aMatchingCallPasses() {
        #expect(Self.refusal("io.vaultd.Preferences.Get", ["domain": "d", "key": "k"]) == nil)
        #expect(
            Self.refusal("io.vaultd.Preferences.Get", ["domain": nil, "key": "k"]) == nil,
            "an optional field may be null")
        #expect(Self.refusal("io.vaultd.Preferences.Get", ["key": "k"]) == nil, "or absent")
        #expect(
            Self.refusal(
                "io.vaultd.Keychain.Add",
                [
                    "class": "genericPassword",
                    "attributes": ["account": "a", "port": 443, "lookupAttributes": ["x": "y"]],
                    "data": "eA==",
                ]) == nil)
        #expect(Self.refusal("io.vaultd.Caches.Purge", ["bytes": 5]) == nil)
        #expect(
            Self.refusal(
                "io.vaultd.Preferences.Import", ["domain": "d", "values": ["k": ["string": "v"]]])
                == nil)
        #expect(
            Self.refusal(
                "io.vaultd.Apps.Install",
                ["appID": "a.b", "accessGroups": ["g"], "keepCredentialsOnReinstall": true]) == nil)
        // Methods no interface declares are MethodNotFound's business.
        #expect(Self.refusal("io.vaultd.Vault.Nope", ["x": 1]) == nil)
        #expect(Self.refusal("com.example.Other.Call", ["x": 1]) == nil)
    }

    /// Refused with the standard InvalidParameter, naming the parameter.
    @Test(arguments: [
        // Undeclared parameters: the first in sorted order, before anything else.
        (
            "io.vaultd.Preferences.Get", #"{"domain":"d","key":5,"zzz":1,"extra":2}"#, "extra",
            "not a parameter of io.vaultd.Preferences.Get"
        ),
        ("io.vaultd.Vault.Status", #"{"bogus":1}"#, "bogus", "not a parameter"),
        // Missing, or null where the type is not optional.
        ("io.vaultd.Preferences.Get", #"{"domain":"d"}"#, "key", "missing"),
        ("io.vaultd.Preferences.Get", #"{"domain":"d","key":null}"#, "key", "missing"),
        ("org.varlink.service.GetInterfaceDescription", "{}", "interface", "missing"),
        // Wrong types, at the top and inside.
        ("io.vaultd.Preferences.Get", #"{"domain":"d","key":5}"#, "key", "must be a string"),
        ("io.vaultd.Preferences.Get", #"{"domain":5,"key":"k"}"#, "domain", "must be a string"),
        (
            "io.vaultd.Keychain.CopyMatching", #"{"returnData":"yes"}"#, "returnData",
            "must be a boolean"
        ),
        ("io.vaultd.Caches.Purge", #"{"bytes":1.5}"#, "bytes", "must be an integer"),
        (
            "io.vaultd.Caches.Purge", #"{"bytes":99999999999999999999}"#, "bytes",
            "must be an integer"
        ),
        ("io.vaultd.Caches.Purge", #"{"bytes":"5"}"#, "bytes", "must be an integer"),
        ("io.vaultd.Preferences.Set", #"{"key":"k","value":5}"#, "value", "must be an object"),
        (
            "io.vaultd.Apps.Install", #"{"appID":"a.b","accessGroups":"x"}"#, "accessGroups",
            "must be an array"
        ),
        (
            "io.vaultd.Apps.Install", #"{"appID":"a.b","accessGroups":["x",5]}"#, "accessGroups",
            "[1]: must be a string"
        ),
        (
            "io.vaultd.Apps.Install", #"{"appID":"a.b","accessGroups":[null]}"#, "accessGroups",
            "[0]: must not be null"
        ),
        (
            "io.vaultd.Keychain.Add",
            #"{"class":"genericPassword","attributes":"a","data":"eA=="}"#, "attributes",
            "must be an object"
        ),
        (
            "io.vaultd.Keychain.Add",
            #"{"class":"genericPassword","attributes":{"account":"a","colour":"red"},"data":"eA=="}"#,
            "attributes", "'colour' is not a field of it"
        ),
        (
            "io.vaultd.Keychain.Add",
            #"{"class":"genericPassword","attributes":{"port":"443"},"data":"eA=="}"#, "attributes",
            "port: must be an integer"
        ),
        (
            "io.vaultd.Keychain.Add",
            #"{"class":"genericPassword","attributes":{"lookupAttributes":{"a":1}},"data":"eA=="}"#,
            "attributes", "lookupAttributes[…]: must be a string"
        ),
        (
            "io.vaultd.Preferences.Import", #"{"domain":"d","values":{"k":[]}}"#, "values",
            "[…]: must be an object"
        ),
    ])
    func aMismatchIsInvalidParameterNamingIt(
        _ method: String, _ parameters: String, _ name: String, _ why: String
    ) throws {
        let p = try #require(try JSON.parse(parameters).objectValue)
        let e = try #require(Self.refusal(method, p))
        #expect(e.code == .invalidParameter && e.parameters["parameter"] == .string(name), "\(e)")
        #expect(e.message.contains(why), "\(e)")
    }

    /// A secret parameter is present (a string) though `CallSecrets` took it out of the
    /// parameters; with it, Add is complete; without it, `data` is missing.
    @Test func secretParametersCountAsGivenStrings() {
        let p: JSONObject = ["class": "genericPassword", "attributes": ["account": "a"]]
        #expect(Self.refusal("io.vaultd.Keychain.Add", p, secrets: ["data"]) == nil)
        #expect(Self.refusal("io.vaultd.Keychain.Add", p)?.parameters["parameter"] == "data")
        #expect(Self.refusal("io.vaultd.Vault.Unlock", [:], secrets: ["passphrase"]) == nil)
    }

    /// A long undeclared field name is quoted cut short in the message (the parameter's own
    /// name is sent whole, as the parameter field says which).
    @Test func longFieldNamesAreCutInMessages() throws {
        let long = String(repeating: "x", count: 10_000)
        let e = try #require(
            Self.refusal("io.vaultd.Keychain.Delete", ["query": .object([long: "v"])]))
        #expect(
            e.parameters["parameter"] == "query" && e.message.utf8.count < 300,
            "\(e.message.utf8.count)")
    }

    /// The work is linear: 200,000 array elements and 100,000 object members are each looked
    /// at once (this is not timed; a quadratic check would take minutes here).
    @Test func largeParametersAreCheckedInOnePass() {
        let groups = JSON.array((0..<200_000).map { _ in .string("g") })
        #expect(
            Self.refusal("io.vaultd.Apps.Install", ["appID": "a.b", "accessGroups": groups]) == nil)
        var many = JSONObject()
        for n in 0..<100_000 { many["k\(n)"] = ["string": "v"] }
        #expect(
            Self.refusal("io.vaultd.Preferences.Import", ["domain": "d", "values": .object(many)])
                == nil)
        var wide = JSONObject()
        for n in 0..<100_000 { wide["f\(n)"] = "v" }
        #expect(
            Self.refusal("io.vaultd.Keychain.Delete", ["query": .object(wide)])?.parameters[
                "parameter"] == "query")
    }

    // MARK: Replies

    @Test func repliesAreCheckedAgainstTheOutput() {
        let lock: JSON = ["state": "unlocked", "unlockedSinceStart": true, "hasPassphrase": false]
        #expect(
            VarlinkValidation.replyProblem(
                method: "io.vaultd.Vault.Lock", parameters: ["lock": lock]) == nil)
        #expect(
            VarlinkValidation.replyProblem(method: "io.vaultd.Vault.Lock", parameters: [:])?
                .contains("lock: missing") == true)
        #expect(
            VarlinkValidation.replyProblem(
                method: "io.vaultd.Vault.Lock", parameters: ["lock": ["state": "unlocked"]])?
                .contains("lock.unlockedSinceStart: missing") == true)
        #expect(
            VarlinkValidation.replyProblem(
                method: "io.vaultd.Vault.Lock", parameters: ["lock": lock, "extra": 1])?.contains(
                    "'extra' is not a field") == true)
        #expect(
            VarlinkValidation.replyProblem(
                method: "io.vaultd.Preferences.Get", parameters: ["value": nil]) == nil)
        #expect(
            VarlinkValidation.replyProblem(method: "io.vaultd.Sync.Leave", parameters: [:]) == nil)
        #expect(
            VarlinkValidation.replyProblem(method: "io.vaultd.Vault.Nope", parameters: [:]) != nil)
    }

    @Test func errorRepliesAreCheckedAgainstTheirDeclaration() throws {
        func problem(_ e: VaultError) throws -> String? {
            let sent = VarlinkReply(error: e).json
            return VarlinkValidation.errorProblem(
                name: e.name, parameters: try #require(sent["parameters"]?.objectValue))
        }
        #expect(try problem(.invalidParameter("key", "missing")) == nil)
        #expect(try problem(VaultError(.itemNotFound, "nothing")) == nil)
        #expect(
            try problem(VaultError(.rateLimited, "wait", extra: ["retryAfter": JSON(1.5)])) == nil)
        #expect(
            try problem(VaultError(.expectedMore, "call it with more")) == nil,
            "the message goes to the extension member")
        #expect(
            try problem(VaultError(.rateLimited, "wait"))?.contains("retryAfter: missing") == true)
        #expect(
            try problem(VaultError(.secretTooLarge, "big", extra: ["limit": "many"]))?.contains(
                "limit: must be an integer") == true)
        #expect(
            VarlinkValidation.errorProblem(name: "io.vaultd.Keychain.Nope", parameters: [:])?
                .contains("not declared") == true)
        #expect(
            VarlinkValidation.errorProblem(name: "Nope", parameters: [:])?.contains("not declared")
                == true)
    }

    // MARK: Error names

    /// Every error vaultd can send is declared by an interface it serves. Its errors are the
    /// `VaultError.Code` constants (vaultd and the engine build no error from a name of their
    /// own: checked below in their sources); those only clients raise are named here.
    @Test func everyErrorVaultdCanSendIsDeclared() throws {
        let source = try String(
            contentsOf: Self.repoRoot.appendingPathComponent(
                "Sources/VaultProtocol/VaultError.swift"), encoding: .utf8)
        let names = Self.matches(#"Code\("([A-Za-z.]+)"\)"#, in: source)
        #expect(names.count >= 30, "\(names)")
        let clientOnly: Set<String> = [
            "io.vaultd.Preferences.KeyNotFound", "io.vaultd.Client.ConnectionFailed",
            "io.vaultd.Client.ProtocolViolation",
        ]
        for name in names where !clientOnly.contains(name) {
            #expect(
                VarlinkInterfaces.errorParameters[name] != nil,
                "\(name) is a VaultError.Code but no interface declares it")
        }
        // The server side builds errors only from those codes, and never a client-only one.
        for dir in ["Sources/vaultd", "Sources/VaultCore", "Sources/SecretSession"] {
            let root = Self.repoRoot.appendingPathComponent(dir)
            for case let file as String in FileManager.default.enumerator(atPath: root.path)!
            where file.hasSuffix(".swift") {
                let text = try String(
                    contentsOf: root.appendingPathComponent(file), encoding: .utf8)
                for pattern in [
                    #"VaultError\(name:"#, #"Code\(""#,
                    #"\.(keyNotFound|connectionFailed|protocolViolation|permissionDeniedVarlink)\b"#,
                ] {
                    #expect(
                        Self.matches("(" + pattern + ")", in: text).isEmpty,
                        "\(dir)/\(file) uses \(pattern)")
                }
            }
        }
    }

    /// The engine speaks no protocol: VaultCore throws no varlink error (its failures are
    /// `VaultFailure`, which the front-ends map) and its public declarations take and
    /// return no JSON (docs/architecture.md, "The engine's API").
    @Test func theEngineNamesNoWireErrorAndNoJSONInItsAPI() throws {
        let root = Self.repoRoot.appendingPathComponent("Sources/VaultCore")
        var files = 0
        for case let file as String in FileManager.default.enumerator(atPath: root.path)!
        where file.hasSuffix(".swift") {
            files += 1
            let text = try String(contentsOf: root.appendingPathComponent(file), encoding: .utf8)
            #expect(
                Self.matches(#"(\bVaultError\b)"#, in: text).isEmpty,
                "Sources/VaultCore/\(file) names VaultError")
            let publicJSON = Self.matches(#"(public [^\n{]*\bJSON(Object)?\b[^\n{]*)"#, in: text)
            #expect(publicJSON.isEmpty, "Sources/VaultCore/\(file): \(publicJSON)")
        }
        #expect(files > 40)
        // The Secret Service front-end gets the engine's failures as they are (`VaultFailure`),
        // never as varlink errors: a `catch` of a VaultError there would never match.
        let secretService = Self.repoRoot.appendingPathComponent("Sources/vaultd/SecretService")
        for case let file as String in FileManager.default.enumerator(atPath: secretService.path)!
        where file.hasSuffix(".swift") {
            let text = try String(
                contentsOf: secretService.appendingPathComponent(file), encoding: .utf8)
            #expect(
                Self.matches(#"(as\?? VaultError)"#, in: text).isEmpty,
                "Sources/vaultd/SecretService/\(file) matches a VaultError")
        }
    }

    static func matches(_ pattern: String, in text: String) -> [String] {
        let re = try! NSRegularExpression(pattern: pattern)
        return re.matches(in: text, range: NSRange(text.startIndex..., in: text)).compactMap { m in
            Range(m.range(at: 1), in: text).map { String(text[$0]) }
        }
    }
}
