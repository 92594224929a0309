import Foundation
import TestSupport
import Testing
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Malformed input: a corpus of bad frames, each on its own connection, each
/// answered with a varlink error or a closed connection; then random mutations of good calls;
/// then the big ones (10,000-deep nesting, a 100 MB stream without a NUL, huge base64
/// secrets). vaultd never crashes, keeps serving a bystander, and its peak RSS stays bounded.
@Suite struct ReliabilityMalformedInputTests {
    struct BadFrame {
        var name: String
        var bytes: [UInt8]
    }

    static func frame(_ name: String, _ text: String) -> BadFrame {
        BadFrame(name: name, bytes: Array(text.utf8) + [0])
    }
    static func call(_ name: String, _ method: String, _ parameters: String) -> BadFrame {
        frame(name, #"{"method":""# + method + #"","parameters":"# + parameters + "}")
    }

    static let status = #"{"method":"io.vaultd.Vault.Status","parameters":{}}"#
    static let add =
        #"{"method":"io.vaultd.Keychain.Add","parameters":{"class":"genericPassword","attributes":{"service":"svc","account":"acc","label":"a label"},"data":"c2VjcmV0"}}"#

    /// The hand-made corpus. Every frame here must get an error or a close, never a success.
    static let corpus: [BadFrame] = {
        var c: [BadFrame] = []
        // Not JSON, or JSON that is not a call.
        for (n, t) in [
            ("empty frame", ""), ("whitespace", "  \t\n "), ("word", "hello"), ("open brace", "{"),
            ("close brace", "}"),
            ("array", "[1,2,3]"), ("string", #""io.vaultd.Vault.Status""#), ("number", "42"),
            ("null", "null"), ("true", "true"),
            ("unquoted key", #"{method:"io.vaultd.Vault.Status"}"#),
            ("single quotes", "{'method':'io.vaultd.Vault.Status'}"),
            ("trailing comma", #"{"method":"io.vaultd.Vault.Status",}"#),
            ("comment", #"/*c*/{"method":"io.vaultd.Vault.Status"}"#),
            (
                "two documents",
                #"{"method":"io.vaultd.Vault.Status"}{"method":"io.vaultd.Vault.Status"}"#
            ),
            (
                "duplicate key",
                #"{"method":"io.vaultd.Vault.Status","method":"io.vaultd.Vault.Lock"}"#
            ),
            ("missing colon", #"{"method" "io.vaultd.Vault.Status"}"#),
            ("missing value", #"{"method":}"#),
            ("leading zero", #"{"method":"io.vaultd.Vault.Status","parameters":{"a":01}}"#),
            ("bare dot", #"{"method":"io.vaultd.Vault.Status","parameters":{"a":1.}}"#),
            ("lone minus", #"{"method":"io.vaultd.Vault.Status","parameters":{"a":-}}"#),
            ("bare exponent", #"{"method":"io.vaultd.Vault.Status","parameters":{"a":1e}}"#),
            ("plus sign", #"{"method":"io.vaultd.Vault.Status","parameters":{"a":+1}}"#),
            ("NaN", #"{"method":"io.vaultd.Vault.Status","parameters":{"a":NaN}}"#),
            ("Infinity", #"{"method":"io.vaultd.Vault.Status","parameters":{"a":Infinity}}"#),
            ("hex number", #"{"method":"io.vaultd.Vault.Status","parameters":{"a":0x10}}"#),
            ("bad escape", #"{"method":"io.vaultd.Vault.Status\x"}"#),
            ("short unicode escape", #"{"method":"io.vaultd.Vault.Status\u12"}"#),
            (
                "lone high surrogate",
                #"{"method":"io.vaultd.Vault.Status","parameters":{"a":"\ud800"}}"#
            ),
            (
                "lone low surrogate",
                #"{"method":"io.vaultd.Vault.Status","parameters":{"a":"\udc00"}}"#
            ),
            (
                "high surrogate + letter",
                #"{"method":"io.vaultd.Vault.Status","parameters":{"a":"\ud800\u0041"}}"#
            ),
            ("truncated literal", #"{"method":"io.vaultd.Vault.Status","oneway":tru}"#),
            ("unknown literal", #"{"method":"io.vaultd.Vault.Status","oneway":yes}"#),
        ] {
            c.append(frame("not JSON: \(n)", t))
        }
        c.append(
            BadFrame(
                name: "not JSON: byte order mark",
                bytes: [0xEF, 0xBB, 0xBF] + Array(status.utf8) + [0]))
        c.append(
            frame(
                "not JSON: 100,000-digit number",
                #"{"method":"io.vaultd.Vault.Status","parameters":{"a":"#
                    + String(repeating: "9", count: 100_000) + "}}"))
        for ch: UInt8 in [0x01, 0x0A, 0x1F] {
            c.append(
                BadFrame(
                    name: "raw control character \(ch) in a string",
                    bytes: Array(#"{"method":"io.vaultd.Vault."#.utf8) + [ch]
                        + Array(#"Status"}"#.utf8) + [0]))
        }
        // Truncated: a good call cut short, then its NUL.
        let addBytes = Array(add.utf8)
        for cut in [1, 2, 10, 11, 12, 30, 40, 60, 90, 120, addBytes.count - 2, addBytes.count - 1] {
            c.append(BadFrame(name: "truncated at \(cut)", bytes: Array(addBytes[..<cut]) + [0]))
        }
        // Invalid UTF-8, in a string, in a key, and outside strings.
        let invalid: [(String, [UInt8])] = [
            ("0xFF", [0xFF]), ("0xFE", [0xFE]), ("lone continuation", [0x80]),
            ("overlong NUL", [0xC0, 0x80]),
            ("overlong slash", [0xE0, 0x80, 0xAF]), ("encoded surrogate", [0xED, 0xA0, 0x80]),
            ("beyond U+10FFFF", [0xF4, 0x90, 0x80, 0x80]), ("truncated sequence", [0xE2, 0x82]),
            ("5-byte form", [0xF8, 0x88, 0x80, 0x80, 0x80]),
        ]
        for (n, b) in invalid {
            c.append(
                BadFrame(
                    name: "invalid UTF-8 (\(n)) in the method",
                    bytes: Array(#"{"method":"io.vaultd.Vault.Sta"#.utf8) + b
                        + Array(#"tus"}"#.utf8) + [0]))
            c.append(
                BadFrame(
                    name: "invalid UTF-8 (\(n)) in a parameter",
                    bytes: Array(
                        #"{"method":"io.vaultd.Preferences.Get","parameters":{"domain":"com.example.x","key":""#
                            .utf8) + b + Array(#""}}"#.utf8) + [0]))
            c.append(
                BadFrame(
                    name: "invalid UTF-8 (\(n)) in a key",
                    bytes: Array(#"{"method":"io.vaultd.Vault.Status","parameters":{""#.utf8) + b
                        + Array(#"":1}}"#.utf8) + [0]))
        }
        c.append(
            BadFrame(
                name: "invalid UTF-8 between tokens",
                bytes: Array(#"{"method":"io.vaultd.Vault.Status""#.utf8) + [0xFF] + Array("}".utf8)
                    + [0]))
        // NUL inside a string: raw (ends the frame early: a truncated frame, then junk), escaped.
        c.append(
            BadFrame(
                name: "raw NUL inside the method",
                bytes: Array(#"{"method":"io.vaultd.Vault.Sta"#.utf8) + [0] + Array(#"tus"}"#.utf8)
                    + [0]))
        c.append(
            BadFrame(
                name: "raw NUL inside a secret",
                bytes: Array(
                    #"{"method":"io.vaultd.Keychain.Add","parameters":{"class":"genericPassword","attributes":{"account":"a"},"data":"c2Vj"#
                        .utf8) + [0] + Array(#"cmV0"}}"#.utf8) + [0]))
        c.append(frame("escaped NUL in the method", #"{"method":"io.vaultd.Vault.Status\u0000"}"#))
        c.append(
            call(
                "escaped NUL in an interface name", "org.varlink.service.GetInterfaceDescription",
                #"{"interface":"io.vaultd.Vault\u0000"}"#))
        c.append(
            call(
                "escaped NUL in a class", "io.vaultd.Keychain.CopyMatching",
                #"{"class":"genericPassword\u0000"}"#))
        c.append(
            call(
                "escaped NUL in a domain", "io.vaultd.Preferences.Set",
                #"{"domain":"com.example\u0000x","key":"k","value":{"string":"v"}}"#))
        // Wrong types in the call itself.
        for (n, t) in [
            ("method a number", #"{"method":5}"#), ("method null", #"{"method":null}"#),
            ("method an array", #"{"method":["io.vaultd.Vault.Status"]}"#),
            ("method an object", #"{"method":{}}"#), ("method empty", #"{"method":""}"#),
            ("method true", #"{"method":true}"#),
            ("parameters an array", #"{"method":"io.vaultd.Vault.Status","parameters":[]}"#),
            ("parameters a string", #"{"method":"io.vaultd.Vault.Status","parameters":"x"}"#),
            ("parameters a number", #"{"method":"io.vaultd.Vault.Status","parameters":5}"#),
            ("oneway a string", #"{"method":"io.vaultd.Vault.Status","oneway":"yes"}"#),
            ("oneway a number", #"{"method":"io.vaultd.Vault.Status","oneway":1}"#),
            ("more a string", #"{"method":"io.vaultd.Vault.Status","more":"true"}"#),
            ("upgrade a string", #"{"method":"io.vaultd.Vault.Status","upgrade":"yes"}"#),
        ] {
            c.append(frame("wrong type: \(n)", t))
        }
        // Wrong types in parameters.
        let kc = "io.vaultd.Keychain.Add"
        for (n, p) in [
            ("class a number", #"{"class":5,"attributes":{"account":"a"},"data":"eA=="}"#),
            (
                "unknown class",
                #"{"class":"certificate","attributes":{"account":"a"},"data":"eA=="}"#
            ),
            ("attributes a string", #"{"class":"genericPassword","attributes":"a","data":"eA=="}"#),
            ("attributes an array", #"{"class":"genericPassword","attributes":[],"data":"eA=="}"#),
            (
                "data a number",
                #"{"class":"genericPassword","attributes":{"account":"a"},"data":5}"#
            ),
            (
                "data not base64",
                #"{"class":"genericPassword","attributes":{"account":"a"},"data":"not base64!!"}"#
            ),
            (
                "service a number",
                #"{"class":"genericPassword","attributes":{"service":5},"data":"eA=="}"#
            ),
            (
                "port a string",
                #"{"class":"internetPassword","attributes":{"server":"h","port":"443"},"data":"eA=="}"#
            ),
            (
                "port negative",
                #"{"class":"internetPassword","attributes":{"server":"h","port":-1},"data":"eA=="}"#
            ),
            (
                "port too big",
                #"{"class":"internetPassword","attributes":{"server":"h","port":70000},"data":"eA=="}"#
            ),
            (
                "port fractional",
                #"{"class":"internetPassword","attributes":{"server":"h","port":1.5},"data":"eA=="}"#
            ),
            (
                "port 1e400",
                #"{"class":"internetPassword","attributes":{"server":"h","port":1e400}, "data":"eA=="}"#
            ),
            (
                "synchronizable a string",
                #"{"class":"genericPassword","attributes":{"account":"a","synchronizable":"true"},"data":"eA=="}"#
            ),
            (
                "accessible always",
                #"{"class":"genericPassword","attributes":{"account":"a","accessible":"always"},"data":"eA=="}"#
            ),
            (
                "accessible unknown",
                #"{"class":"genericPassword","attributes":{"account":"a","accessible":"sometimes"},"data":"eA=="}"#
            ),
            (
                "synchronizable this-device-only",
                #"{"class":"genericPassword","attributes":{"account":"a","synchronizable":true,"accessible":"whenUnlockedThisDeviceOnly"},"data":"eA=="}"#
            ),
        ] {
            c.append(call("Keychain.Add: \(n)", kc, p))
        }
        for (n, p) in [
            ("matchLimit a number", #"{"matchLimit":3}"#),
            ("matchLimit two", #"{"matchLimit":"two"}"#),
            ("returnData a string", #"{"returnData":"yes"}"#), ("query an array", #"{"query":[]}"#),
            ("class null-ish string", #"{"class":"null"}"#),
        ] {
            c.append(call("Keychain.CopyMatching: \(n)", "io.vaultd.Keychain.CopyMatching", p))
        }
        let set = "io.vaultd.Preferences.Set"
        for (n, v) in [
            ("untagged number", "5"), ("integer as a string", #"{"integer":"5"}"#),
            ("fractional integer", #"{"integer":1.5}"#),
            ("integer beyond Int64", #"{"integer":99999999999999999999}"#),
            ("real a word", #"{"real":"foo"}"#),
            ("date not a date", #"{"date":"yesterday"}"#), ("data not base64", #"{"data":"!!"}"#),
            ("array a number", #"{"array":5}"#),
            ("dict an array", #"{"dict":[]}"#), ("two tags", #"{"string":"a","integer":1}"#),
            ("unknown tag", #"{"uuid":"x"}"#),
            ("empty object", "{}"), ("null", "null"),
            ("array with an untagged element", #"{"array":[1]}"#),
            ("bool a string", #"{"bool":"true"}"#), ("string a number", #"{"string":5}"#),
        ] {
            c.append(
                call(
                    "Preferences.Set: \(n)", set,
                    #"{"domain":"com.example.bad","key":"k","value":"# + v + "}"))
        }
        for (n, p) in [
            ("key a number", #"{"domain":"com.example.bad","key":5,"value":{"bool":true}}"#),
            ("key an array", #"{"domain":"com.example.bad","key":[],"value":{"bool":true}}"#),
            ("domain a number", #"{"domain":5,"key":"k","value":{"bool":true}}"#),
            ("domain empty", #"{"domain":"","key":"k","value":{"bool":true}}"#),
            ("domain with a slash", #"{"domain":"../../etc","key":"k","value":{"bool":true}}"#),
        ] {
            c.append(call("Preferences.Set: \(n)", set, p))
        }
        c.append(
            call(
                "Vault.Unlock: passphrase a number", "io.vaultd.Vault.Unlock", #"{"passphrase":42}"#
            ))
        c.append(
            call("Vault.Init: passphrase an array", "io.vaultd.Vault.Init", #"{"passphrase":[]}"#))
        c.append(
            call(
                "Apps.Install: accessGroups a string", "io.vaultd.Apps.Install",
                #"{"appID":"com.example.a","accessGroups":"x"}"#))
        c.append(call("Caches.Purge: bytes negative", "io.vaultd.Caches.Purge", #"{"bytes":-1}"#))
        c.append(call("Caches.Purge: bytes a string", "io.vaultd.Caches.Purge", #"{"bytes":"x"}"#))
        // Unknown fields, at the top and among parameters.
        c.append(
            frame("unknown top-level field", #"{"method":"io.vaultd.Vault.Status","bogus":1}"#))
        c.append(
            frame(
                "vendor extension that is not an object",
                #"{"method":"io.vaultd.Vault.Status","com.example.x":1}"#))
        c.append(call("unknown parameter of Status", "io.vaultd.Vault.Status", #"{"bogus":1}"#))
        c.append(
            call(
                "unknown parameter of Keychain.Add", kc,
                #"{"class":"genericPassword","attributes":{"account":"a"},"data":"eA==","sneaky":true}"#
            ))
        c.append(
            call(
                "unknown parameter of Preferences.Get", "io.vaultd.Preferences.Get",
                #"{"domain":"com.example.x","key":"k","extra":null}"#))
        c.append(
            call(
                "unknown attribute", kc,
                #"{"class":"genericPassword","attributes":{"account":"a","colour":"red"},"data":"eA=="}"#
            ))
        // Missing fields.
        for (n, m, p) in [
            (
                "Preferences.Get without key", "io.vaultd.Preferences.Get",
                #"{"domain":"com.example.x"}"#
            ),
            ("Preferences.Set without value", set, #"{"domain":"com.example.x","key":"k"}"#),
            (
                "Keychain.Add without data", kc,
                #"{"class":"genericPassword","attributes":{"account":"a"}}"#
            ),
            ("Keychain.Add without class", kc, #"{"attributes":{"account":"a"},"data":"eA=="}"#),
            ("Keychain.Add without attributes", kc, #"{"class":"genericPassword","data":"eA=="}"#),
            (
                "GetInterfaceDescription without interface",
                "org.varlink.service.GetInterfaceDescription", "{}"
            ),
            ("Unlock without passphrase", "io.vaultd.Vault.Unlock", "{}"),
            ("Apps.Show without appID", "io.vaultd.Apps.Show", "{}"),
        ] {
            c.append(call("missing: \(n)", m, p))
        }
        c.append(frame("missing: no method", #"{"parameters":{}}"#))
        // Unknown names.
        c.append(frame("unknown method", #"{"method":"io.vaultd.Vault.Explode"}"#))
        c.append(frame("unknown interface", #"{"method":"com.example.Nothing.Here"}"#))
        c.append(frame("method without interface", #"{"method":"Status"}"#))
        c.append(
            frame("streaming method without more", #"{"method":"io.vaultd.Preferences.Observe"}"#))
        // Deep nesting: 10,000 levels of arrays, of objects, and unclosed.
        let deep = 10_000
        c.append(
            frame(
                "10,000-deep arrays",
                #"{"method":"io.vaultd.Vault.Status","parameters":{"a":"#
                    + String(repeating: "[", count: deep) + String(repeating: "]", count: deep)
                    + "}}"))
        c.append(
            frame(
                "10,000-deep objects",
                #"{"method":"io.vaultd.Vault.Status","parameters":"#
                    + String(repeating: #"{"a":"#, count: deep) + "1"
                    + String(repeating: "}", count: deep + 1)))
        c.append(frame("10,000 unclosed brackets", String(repeating: "[", count: deep)))
        c.append(
            call(
                "10,000-deep preference value", set,
                #"{"domain":"com.example.bad","key":"k","value":"#
                    + String(repeating: #"{"array":["#, count: deep)
                    + String(repeating: "]}", count: deep) + "}"))
        // Sizes: a secret over 1 MiB; a 4+ MiB preference value; a frame over 8 MiB with its NUL.
        c.append(
            call(
                "secret of 1 MiB + 1", kc,
                #"{"class":"genericPassword","attributes":{"account":"big"},"data":""#
                    + Data(count: (1 << 20) + 1).base64EncodedString() + #""}"#))
        c.append(
            call(
                "secret of 5.5 MiB", kc,
                #"{"class":"genericPassword","attributes":{"account":"huge"},"data":""#
                    + Data(count: 5_767_168).base64EncodedString() + #""}"#))
        c.append(
            call(
                "preference value over 4 MiB", set,
                #"{"domain":"com.example.bad","key":"k","value":{"string":""#
                    + String(repeating: "x", count: 4_300_000) + #""}}"#))
        c.append(
            frame(
                "frame over 8 MiB",
                #"{"method":"io.vaultd.Vault.Status","parameters":{"pad":""#
                    + String(repeating: "x", count: 8 << 20) + #""}}"#))
        return c
    }()

    /// Good calls whose mutations make the random part of the corpus (harmless methods: none
    /// streams, locks or deletes).
    static let seeds: [String] = [
        status, add, #"{"method":"org.varlink.service.GetInfo"}"#,
        #"{"method":"org.varlink.service.GetInterfaceDescription","parameters":{"interface":"io.vaultd.Keychain"}}"#,
        #"{"method":"io.vaultd.Keychain.CopyMatching","parameters":{"class":"genericPassword","query":{"service":"svc"},"matchLimit":"all","returnData":true}}"#,
        #"{"method":"io.vaultd.Preferences.Set","parameters":{"domain":"com.example.fuzz","key":"k","value":{"array":[{"integer":-9223372036854775808},{"real":"nan"},{"date":"2024-02-29T12:00:00.5Z"},{"data":"AAE="},{"dict":{"x":{"bool":true}}}]}}}"#,
        #"{"method":"io.vaultd.Preferences.Get","parameters":{"domain":"com.example.fuzz","key":"k"}}"#,
        #"{"method":"io.vaultd.Keychain.Update","parameters":{"class":"internetPassword","query":{"server":"example.org","port":443},"attributes":{"label":"l"}}}"#,
    ]

    /// One random mutation of `seed` (flips, inserts, deletes, duplications, truncation,
    /// splices of JSON punctuation).
    static func mutate(_ seed: [UInt8], _ random: inout SeededRandom) -> [UInt8] {
        var b = seed
        let specials: [UInt8] =
            Array(#"{}[]":,\ 0123456789-.eEtrufalsn"#.utf8) + [0x00, 0x80, 0xC3, 0xFF]
        for _ in 0..<Int.random(in: 1...4, using: &random) where !b.isEmpty {
            let i = Int.random(in: 0..<b.count, using: &random)
            switch Int.random(in: 0..<7, using: &random) {
            case 0: b[i] ^= UInt8(1) << UInt8.random(in: 0...7, using: &random)
            case 1: b[i] = specials.randomElement(using: &random)!
            case 2: b.insert(specials.randomElement(using: &random)!, at: i)
            case 3: b.remove(at: i)
            case 4: b = Array(b[..<i])
            case 5:
                let j = Int.random(in: i...min(b.count, i + 40), using: &random)
                b.insert(contentsOf: b[i..<j], at: i)
            default:
                let j = Int.random(in: i...min(b.count, i + 20), using: &random)
                b.removeSubrange(i..<j)
            }
        }
        return b
    }

    enum Verdict { case errorOrClose, anyWellFormed }

    /// Sends `bytes` on a new connection, half-closes it, and reads until vaultd closes.
    /// Returns a problem, or nil when the outcome is acceptable.
    static func probe(_ d: Daemon, _ bytes: [UInt8], _ verdict: Verdict) throws -> String? {
        let c = try ExactClient(path: d.socketPath)
        defer { c.close() }
        c.send(bytes)
        shutdown(c.fd, Int32(SHUT_WR))
        var replies = 0
        while true {
            switch c.receive(timeout: 20) {
            case .closed: return nil
            case .timedOut: return "no close within 20 s after \(replies) replies"
            case .garbage(let g):
                return
                    "a reply that is not a JSON object: \(String(decoding: g.prefix(200), as: UTF8.self))"
            case .ok(let p):
                if verdict == .errorOrClose {
                    return "accepted: \(JSON.object(p).text.prefix(200))"
                }
                replies += 1
            case .error:
                replies += 1
            }
        }
    }

    @Test(.timeLimit(.minutes(5))) func badFramesGetAnErrorOrACloseAndMemoryStaysBounded() throws {
        let d = try Daemon()
        defer { d.close() }
        let pid = try #require(d.pid)
        do {
            let c = try ExactClient(path: d.socketPath)
            try Wire.initWithoutPassphrase(c)
            #expect(
                c.call(
                    "io.vaultd.Keychain.Add",
                    [
                        "class": "genericPassword",
                        "attributes": ["service": "keep", "account": "me"],
                        "data": Wire.base64(Array("kept".utf8)),
                    ]
                ).parameters != nil)
        }
        let bystander = try ExactClient(path: d.socketPath)
        #expect(bystander.call("io.vaultd.Vault.Status").parameters != nil)
        let rssAtStart = ProcStatus.peakRSS(pid) ?? 0

        // 1. The hand-made corpus.
        var tried = 0
        for f in Self.corpus {
            if let problem = try Self.probe(d, f.bytes, .errorOrClose) {
                Issue.record("\(f.name): \(problem)")
            }
            tried += 1
            try #require(d.isRunning, "vaultd died on '\(f.name)'; log:\n\(d.log)")
        }
        let rssAfterCorpus = ProcStatus.peakRSS(pid) ?? 0

        // 2. Random mutations of good calls (these may be valid: any well-formed reply will do).
        let seed = Stress.seed()
        var random = SeededRandom(seed: seed)
        let mutations = Stress.count(1500)
        let deadline = Date().addingTimeInterval(Stress.seconds(60))
        var mutated = 0
        for _ in 0..<mutations where Date() < deadline {
            let bytes =
                Self.mutate(Array(Self.seeds.randomElement(using: &random)!.utf8), &random) + [0]
            if let problem = try Self.probe(d, bytes, .anyWellFormed) {
                Issue.record(
                    "mutation (seed \(seed)) \(String(decoding: bytes.prefix(300), as: UTF8.self)): \(problem)"
                )
            }
            mutated += 1
            if mutated % 100 == 0 {
                try #require(
                    d.isRunning, "vaultd died during mutations (seed \(seed)); log:\n\(d.log)")
            }
        }
        tried += mutated

        // 3. 100 MB without a NUL, in 1 MiB writes: vaultd must stop reading at its 8 MiB
        // limit, answer with an error and/or close, and not keep the bytes.
        var streamed = 0
        do {
            let c = try ExactClient(path: d.socketPath)
            let chunk = [UInt8](repeating: UInt8(ascii: "a"), count: 1 << 20)
            c.send(Array(#"{"method":"io.vaultd.Keychain.Add","parameters":{"data":""#.utf8))
            let total = 100_000_000
            while streamed < total {
                let n = min(chunk.count, total - streamed)
                guard (try? c.connection.send(Array(chunk[..<n]))) == true else { break }
                streamed += n
            }
            let outcome = c.receive(timeout: 20)
            switch outcome {
            case .closed: break
            case .error(let name, _):
                #expect(name == "org.varlink.service.InvalidParameter", "\(outcome)")
                #expect(
                    c.closes(within: 20),
                    "the connection should be closed after an oversized message")
            default: Issue.record("100 MB stream: \(outcome)")
            }
            #expect(
                streamed < 100_000_000,
                "vaultd read all 100 MB of a message it must refuse at 8 MiB")
            c.close()
            tried += 1
        }
        let rssAfterStream = ProcStatus.peakRSS(pid) ?? 0

        // 4. Several oversized and huge-secret messages at once.
        let huge =
            Array(
                (#"{"method":"io.vaultd.Keychain.Add","parameters":{"class":"genericPassword","attributes":{"account":"huge"},"data":""#
                    + Data(count: 5_767_168).base64EncodedString() + #""}}"#).utf8) + [0]
        let problems = LockedList()
        onThreads(4) { i in
            do {
                let bytes =
                    i % 2 == 0 ? huge : [UInt8](repeating: UInt8(ascii: "["), count: 9 << 20)
                if let p = try Self.probe(d, bytes, .errorOrClose) {
                    problems.append("concurrent big message \(i): \(p)")
                }
            } catch { problems.append("concurrent big message \(i): \(error)") }
        }
        for p in problems.all { Issue.record("\(p)") }
        tried += 4
        try #require(d.isRunning, "vaultd died; log:\n\(d.log)")

        // Still serving: the bystander, a new client, and what was stored before.
        #expect(
            bystander.call("io.vaultd.Vault.Status").parameters != nil,
            "the bystander's connection broke")
        let c = try ExactClient(path: d.socketPath)
        let items = try Wire.allGenericPasswords(c).filter { $0.service == "keep" }
        #expect(
            items.map(\.account) == ["me"] && items.first?.secret == Array("kept".utf8),
            "stored items changed: \(items)")
        let peak = ProcStatus.peakRSS(pid) ?? 0
        // One message at a time (the corpus, the 100 MB stream) stays well under 200 MiB; four
        // maximal messages at once cost about 35 MiB each on top.
        #expect(
            rssAfterStream > 0 && rssAfterStream < 200 * 1024,
            "peak RSS \(rssAfterStream / 1024) MiB after the corpus and the 100 MB stream")
        #expect(
            peak > 0 && peak < 320 * 1024,
            "peak RSS \(peak / 1024) MiB after four maximal messages at once")
        ReliabilityReport.record(
            "malformed: \(tried) bad frames tried (\(Self.corpus.count) hand-made, \(mutated) mutations, seed \(seed); 100 MB stream cut after \(streamed >> 20) MiB sent); "
                + "peak RSS \(rssAtStart / 1024) MiB at start, \(rssAfterCorpus / 1024) MiB after the corpus, \(rssAfterStream / 1024) MiB after the 100 MB stream, \(peak / 1024) MiB at the end"
        )
    }
}
