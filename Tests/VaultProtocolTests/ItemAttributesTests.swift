import Foundation
import Testing
import VaultProtocol

@Suite("ItemAttributes")
struct ItemAttributesTests {
    static func full() -> ItemAttributes {
        var a = ItemAttributes(
            service: "svc", account: "alice@example.org", label: "Label é",
            comment: "a \"comment\"\n",
            description: "web form password", generic: Data([0, 1, 2, 0xFF]),
            accessGroup: "group.example",
            accessible: .afterFirstUnlockThisDeviceOnly, synchronizable: false,
            server: "example.org", protocol: "https",
            port: 65535, path: "/login", authenticationType: "form", securityDomain: "realm")
        a.creationDate = Date(timeIntervalSinceReferenceDate: 789_912_345.678_901_2)
        a.modificationDate = Date(timeIntervalSinceReferenceDate: -0.5)
        a.accessControl = .userPresence
        return a
    }

    @Test func jsonRoundTripKeepsEveryAttribute() throws {
        let a = Self.full()
        let back = try ItemAttributes(json: try JSON.parse(a.json.serialized()))
        #expect(back == a)
        #expect(back.generic == Data([0, 1, 2, 0xFF]))
        #expect(back.port == 65535)
        #expect(back.accessible == .afterFirstUnlockThisDeviceOnly)
        #expect(back.accessControl == .userPresence)
        #expect(back.creationDate?.timeIntervalSinceReferenceDate == 789_912_345.678_901_2)
    }

    @Test func wireNamesAreTheKeychainOnes() throws {
        let o = try #require(Self.full().json.objectValue)
        #expect(
            Set(o.keys) == [
                "service", "account", "label", "comment", "description", "generic", "accessGroup",
                "accessible",
                "synchronizable", "server", "protocol", "port", "path", "authenticationType",
                "securityDomain",
                "creationDate", "modificationDate", "accessControl",
            ])
        #expect(o["accessControl"] == "userPresence")
        #expect(o["generic"] == "AAEC/w==")
        #expect(o["port"] == .number("65535"))
        #expect(o["accessible"] == "afterFirstUnlockThisDeviceOnly")
    }

    @Test func absentAttributesAreOmittedAndNullMeansAbsent() throws {
        #expect(ItemAttributes(service: "s").json.text == #"{"service":"s"}"#)
        let a = try ItemAttributes(
            json: try JSON.parse(#"{"service":"s","account":null,"port":null}"#))
        #expect(a == ItemAttributes(service: "s"))
        #expect(try ItemAttributes(json: nil) == ItemAttributes())
        #expect(try ItemAttributes(json: .null) == ItemAttributes())
    }

    @Test(arguments: [
        #"{"servic":"x"}"#, #"{"Service":"x"}"#, #"{"kSecAttrService":"x"}"#,
        #"{"password":"x"}"#,  // unknown
        #"{"port":70000}"#, #"{"port":65536}"#, #"{"port":-1}"#, #"{"port":"80"}"#,
        #"{"port":80.5}"#, #"{"port":1e2}"#,
        #"{"accessible":"always"}"#, #"{"accessible":"alwaysThisDeviceOnly"}"#,
        #"{"accessible":"whenunlocked"}"#,
        #"{"accessible":"bogus"}"#, #"{"accessible":1}"#,
        #"{"service":5}"#, #"{"account":true}"#, #"{"generic":"not base64!"}"#, #"{"generic":5}"#,
        #"{"accessControl":"biometryAny"}"#, #"{"accessControl":"UserPresence"}"#,
        #"{"accessControl":true}"#,
        #"{"synchronizable":"yes"}"#, #"{"synchronizable":1}"#, #"{"creationDate":"yesterday"}"#,
        #"["service"]"#, #""service""#,
    ])
    func invalidAttributesAreParam(text: String) throws {
        let json = try JSON.parse(text)
        let e = expectVaultError(.param) { _ = try ItemAttributes(json: json) }
        #expect(e?.status == -50)
    }

    /// The engine reads stored attributes from their bytes (`init(jsonObject:)`): the same
    /// attributes as parsing the JSON, then `init(json:)`; what either refuses, it refuses.
    @Test func parsingFromBytesMatchesParsingTheObject() throws {
        let full = Self.full().json.serialized()
        #expect(try ItemAttributes(jsonObject: full) == Self.full())
        for text in [
            #"{"service":"s","account":null,"port":null}"#, #"{}"#,
            #" { "account" : "a\u00e9\n" , "port" : 443 } "#,
            #"{"creationDate":"2001-01-01T00:00:00.5Z","synchronizable":true,"generic":"AAEC/w=="}"#,
        ] {
            let expected = try ItemAttributes(json: try JSON.parse(text))
            #expect(try ItemAttributes(jsonObject: Array(text.utf8)) == expected, "\(text)")
        }
        let refused = [
            #"{"service":"a","service":"b"}"#, #"{"port":1,"port":1}"#,
            #"{"account":null,"account":"x"}"#,
            #"{"servic":"x"}"#, #"{"port":70000}"#, #"{"service":5}"#, #"["service"]"#,
            #""service""#, "",
            #"{"service":"x",}"#, #"{"service":"x"} x"#, #"{"service":"x""#,
        ]
        for text in refused {
            #expect(throws: (any Error).self, "\(text)") {
                _ = try ItemAttributes(jsonObject: Array(text.utf8))
            }
            #expect(throws: (any Error).self, "\(text)") {
                _ = try ItemAttributes(json: try JSON.parse(text))
            }
        }
        // The bytes must be an object (`init(json:)` takes JSON null as no attributes).
        #expect(throws: JSONSyntaxError.self) {
            _ = try ItemAttributes(jsonObject: Array("null".utf8))
        }
    }

    @Test func portBoundsAreInclusive() throws {
        #expect(try ItemAttributes(json: ["port": 0]).port == 0)
        #expect(try ItemAttributes(json: ["port": 65535]).port == 65535)
    }

    @Test func deprecatedAccessibilityIsParam() {
        expectVaultError(.param) { _ = try Accessibility(wire: "always") }
        expectVaultError(.param) { _ = try Accessibility(wire: "alwaysThisDeviceOnly") }
        expectVaultError(.param) { _ = try Accessibility(wire: "") }
        #expect(
            (try? Accessibility(wire: "whenPasscodeSetThisDeviceOnly"))
                == .whenPasscodeSetThisDeviceOnly)
        expectVaultError(.param) { _ = try ItemClass(wire: "certificate") }
        #expect((try? ItemClass(wire: "internetPassword")) == .internetPassword)
    }

    @Test func accessibilityClasses() {
        #expect(
            Accessibility.allCases.filter(\.isThisDeviceOnly) == [
                .whenUnlockedThisDeviceOnly, .afterFirstUnlockThisDeviceOnly,
                .whenPasscodeSetThisDeviceOnly,
            ])
        #expect(
            Accessibility.allCases.filter(\.isAfterFirstUnlock) == [
                .afterFirstUnlock, .afterFirstUnlockThisDeviceOnly,
            ])
    }

    @Test func matchingIsByteExactAndCaseSensitive() {
        let item = ItemAttributes(service: "Svc", account: "e\u{301}", port: 443)
        #expect(item.matches(ItemAttributes()))
        #expect(item.matches(ItemAttributes(service: "Svc")))
        #expect(!item.matches(ItemAttributes(service: "svc")))
        #expect(item.matches(ItemAttributes(account: "e\u{301}")))
        #expect(!item.matches(ItemAttributes(account: "\u{e9}")))
        #expect(item.matches(ItemAttributes(port: 443)))
        #expect(!item.matches(ItemAttributes(port: 80)))
        // a set attribute never matches an absent one
        #expect(!item.matches(ItemAttributes(label: "")))
    }

    @Test func applyOverwritesOnlyWhatIsSet() {
        var a = ItemAttributes(service: "s", account: "a", label: "l", port: 1)
        a.apply(ItemAttributes(account: "b", synchronizable: true))
        #expect(
            a
                == ItemAttributes(
                    service: "s", account: "b", label: "l", synchronizable: true, port: 1))
    }
}
