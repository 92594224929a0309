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
        withKnownIssue("old-style (OpenStep) text is parsed by Foundation, which merges keys that differ only in Unicode normalisation") {
            let v = PropertyListCodec.parseText("{ \"\(Self.nfc)\" = 1; \"\(Self.nfd)\" = 2; }")
            guard case .dict(let d) = v else { Issue.record("\(v)"); return }
            #expect(d.count == 2, "\(d)")
        }
    }

    @Test func xmlKeyInCDATA() {
        let body = "<key><![CDATA[\(Self.nfc)]]></key><integer>1</integer><key>\(Self.nfd)</key><integer>2</integer>"
        let r = Self.keepsBothOrRefuses(Data(Self.xml(body).utf8))
        #expect(r == nil, "\(r ?? "")")
    }

    @Test func xmlKeyWithAComment() {
        let body = "<key>\(Self.nfc)<!-- x --></key><integer>1</integer><key>\(Self.nfd)</key><integer>2</integer>"
        let r = Self.keepsBothOrRefuses(Data(Self.xml(body).utf8))
        #expect(r == nil, "\(r ?? "")")
    }

    @Test func xmlInUTF16() {
        let body = "<key>\(Self.nfc)</key><integer>1</integer><key>\(Self.nfd)</key><integer>2</integer>"
        var data = Data([0xFE, 0xFF])
        data.append(Self.xml(body, encoding: "UTF-16").data(using: .utf16BigEndian)!)
        let r = Self.keepsBothOrRefuses(data)
        #expect(r == nil, "\(r ?? "")")
    }

    @Test func xmlInLatin1() {
        var data = Data("<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?>\n<plist version=\"1.0\"><dict><key>caf".utf8)
        data.append(0xE9)
        data.append(Data("</key><integer>1</integer><key>cafe&#x301;</key><integer>2</integer></dict></plist>\n".utf8))
        let r = Self.keepsBothOrRefuses(data)
        #expect(r == nil, "\(r ?? "")")
    }

    /// What the check reads in these ways is still imported when it holds no twins.
    @Test func noTwinsStillImport() throws {
        let cdata = Self.xml("<key><![CDATA[\(Self.nfc) <&>]]></key><integer>1</integer><key>\(Self.nfc)x</key><integer>2</integer>")
        guard case .dict(let d) = try PropertyListCodec.decode(Data(cdata.utf8)) else { Issue.record("not a dict"); return }
        #expect(d.count == 2 && d["\(Self.nfc) <&>"] == .integer(1), "\(d)")
        var latin1 = Data("<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?>\n<plist version=\"1.0\"><dict><key>caf".utf8)
        latin1.append(0xE9)
        latin1.append(Data("</key><integer>1</integer></dict></plist>\n".utf8))
        guard case .dict(let l) = try PropertyListCodec.decode(latin1) else { Issue.record("not a dict"); return }
        #expect(l[Self.nfc] == .integer(1), "\(l)")
        // Unclosed keys and comments are not the check's to refuse (Foundation does), and
        // reading them takes one pass.
        let unclosed = Data(("\u{E9}" + String(repeating: "<key>", count: 20_000) + String(repeating: "<!--", count: 20_000)).utf8)
        #expect(throws: VaultError.self) { _ = try PropertyListCodec.decode(unclosed) }
    }
}
