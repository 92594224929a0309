import Foundation
import Testing
import VaultProtocol

/// Dictionary keys differing only in Unicode normalisation must be two
/// keys or be refused, on every way a property list comes in, never silently merged.
@Suite("Twin keys on every way a property list comes in")
struct PlistTwinKeyTests {
    static let nfc = "caf\u{E9}", nfd = "cafe\u{301}"

    /// nil when `data` decodes to both keys or is refused as InvalidPropertyList.
    static func keepsBothOrRefuses(_ data: Data) -> String? {
        do {
            let v = try PropertyListCodec.decode(data)
            guard case .dict(let d) = v else { return "not a dictionary: \(v)" }
            return d.count == 2 ? nil : "merged into \(d.count) key(s): \(d)"
        } catch let e as VaultError {
            return e.code == .invalidPropertyList ? nil : "\(e)"
        } catch {
            return "\(error)"
        }
    }

    static func xml(_ body: String, encoding: String = "UTF-8") -> String {
        "<?xml version=\"1.0\" encoding=\"\(encoding)\"?>\n<plist version=\"1.0\"><dict>\(body)</dict></plist>\n"
    }

    /// `defaults write D K '{…}'`, `-dict` values, `-key value` arguments (parseText).
    @Test func openStepTextKeepsBothKeys() {
        let v = PropertyListCodec.parseText(
            "{ \"\(Self.nfc)\" = 1; \"\(Self.nfd)\" = (\"\(Self.nfd)\", \"\(Self.nfc)\"); }")
        guard case .dict(let d) = v else {
            Issue.record("\(v)")
            return
        }
        #expect(d.count == 2, "\(d)")
        #expect(d[Self.nfc] == .string("1"), "\(d)")
        guard case .array(let a)? = d[Self.nfd], a.count == 2, case .string(let first) = a[0],
            case .string(let second) = a[1]
        else {
            Issue.record("\(d)")
            return
        }
        #expect(
            Array(first.utf8) == Array(Self.nfd.utf8) && Array(second.utf8) == Array(Self.nfc.utf8),
            "every string keeps its bytes")
    }

    /// The same through `\U` escapes, in either quote: an escape names the scalar it names, a
    /// surrogate pair of escapes one scalar, and an escaped backslash stays text.
    @Test func openStepEscapesKeepTwinsApartAndStringsExact() {
        let v = PropertyListCodec.parseText(
            #"{ "caf\U00e9" = a; 'cafe\U0301' = b; "\\U00e9" = c; e = "\UD83D\UDE00"; k = "\U00e9\"x"; }"#
        )
        guard case .dict(let d) = v else {
            Issue.record("\(v)")
            return
        }
        #expect(d.count == 5, "\(d)")
        #expect(d[Self.nfc] == .string("a") && d[Self.nfd] == .string("b"), "\(d)")
        #expect(d[#"\U00e9"#] == .string("c"), "\(d)")
        #expect(d["e"] == .string("\u{1F600}"), "\(d)")
        #expect(d["k"] == .string("\u{E9}\"x"), "\(d)")
        // Private-use scalars of the text itself come back as they were.
        let pua = "\u{F0001}\u{F1001}\u{F0000}"
        #expect(
            PropertyListCodec.parseText("(\"\(pua)\", \"\(Self.nfd)\")")
                == .array([.string(pua), .string(Self.nfd)]))
        // What does not parse is still the plain string, unchanged.
        #expect(PropertyListCodec.parseText("{ \(Self.nfd) = ") == .string("{ \(Self.nfd) = "))
    }

    @Test func xmlKeyInCDATA() {
        let body =
            "<key><![CDATA[\(Self.nfc)]]></key><integer>1</integer><key>\(Self.nfd)</key><integer>2</integer>"
        let r = Self.keepsBothOrRefuses(Data(Self.xml(body).utf8))
        #expect(r == nil, "\(r ?? "")")
    }

    @Test func xmlKeyWithAComment() {
        let body =
            "<key>\(Self.nfc)<!-- x --></key><integer>1</integer><key>\(Self.nfd)</key><integer>2</integer>"
        let r = Self.keepsBothOrRefuses(Data(Self.xml(body).utf8))
        #expect(r == nil, "\(r ?? "")")
    }

    @Test func xmlInUTF16() {
        let body =
            "<key>\(Self.nfc)</key><integer>1</integer><key>\(Self.nfd)</key><integer>2</integer>"
        var data = Data([0xFE, 0xFF])
        data.append(Self.xml(body, encoding: "UTF-16").data(using: .utf16BigEndian)!)
        let r = Self.keepsBothOrRefuses(data)
        #expect(r == nil, "\(r ?? "")")
    }

    @Test func xmlInLatin1() {
        var data = Data(
            "<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?>\n<plist version=\"1.0\"><dict><key>caf"
                .utf8)
        data.append(0xE9)
        data.append(
            Data(
                "</key><integer>1</integer><key>cafe&#x301;</key><integer>2</integer></dict></plist>\n"
                    .utf8))
        let r = Self.keepsBothOrRefuses(data)
        #expect(r == nil, "\(r ?? "")")
    }

    /// What the check reads in these ways is still imported when it holds no twins.
    @Test func noTwinsStillImport() throws {
        let cdata = Self.xml(
            "<key><![CDATA[\(Self.nfc) <&>]]></key><integer>1</integer><key>\(Self.nfc)x</key><integer>2</integer>"
        )
        guard case .dict(let d) = try PropertyListCodec.decode(Data(cdata.utf8)) else {
            Issue.record("not a dict")
            return
        }
        #expect(d.count == 2 && d["\(Self.nfc) <&>"] == .integer(1), "\(d)")
        var latin1 = Data(
            "<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?>\n<plist version=\"1.0\"><dict><key>caf"
                .utf8)
        latin1.append(0xE9)
        latin1.append(Data("</key><integer>1</integer></dict></plist>\n".utf8))
        guard case .dict(let l) = try PropertyListCodec.decode(latin1) else {
            Issue.record("not a dict")
            return
        }
        #expect(l[Self.nfc] == .integer(1), "\(l)")
        // Unclosed keys and comments are not the check's to refuse (Foundation does), and
        // reading them takes one pass.
        let unclosed = Data(
            ("\u{E9}" + String(repeating: "<key>", count: 20_000)
                + String(repeating: "<!--", count: 20_000)).utf8)
        #expect(throws: VaultError.self) { _ = try PropertyListCodec.decode(unclosed) }
    }
}
