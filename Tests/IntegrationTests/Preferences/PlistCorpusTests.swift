import Foundation
import Testing

/// The real application plists in `Tests/Fixtures/plist/` (MANIFEST.tsv names their sources) round-trip through
/// `vaultctl defaults import` / `export`, judged by Python's plistlib (an independent reader).
@Suite struct PlistCorpusTests {
    static let corpus = Paths.fixtures.appendingPathComponent("plist")

    /// Every corpus file, with whether its root is a dictionary (read with Foundation here,
    /// only to sort the files; the round trip is judged by plistlib).
    static let files: [String] = {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: corpus.path)) ?? []
        return names.filter { $0.hasSuffix(".plist") }.sorted()
    }()

    static func rootIsDictionary(_ name: String) -> Bool {
        guard
            let data = FileManager.default.contents(
                atPath: corpus.appendingPathComponent(name).path),
            let root = try? PropertyListSerialization.propertyList(from: data, format: nil)
        else { return false }
        return root is [String: Any]
    }

    static let dictionaryFiles = files.filter(rootIsDictionary)
    static let arrayFiles = files.filter { !rootIsDictionary($0) }

    /// The one corpus file whose strings hold a control character (U+0019) that XML 1.0
    /// cannot carry: its XML export cannot be read back by any XML parser, so only its binary
    /// export is checked.
    static let notRepresentableInXML: Set<String> = ["what.xGestures__DZL1943-dotfiles.plist"]

    /// Compares two plists as plistlib reads them: `==` on the whole trees, and for every
    /// leaf `type(a) is type(b)` (int stays int, float stays float, bool stays bool, bytes
    /// stay bytes). With --xml-dates, dates are compared to the second: an XML plist writes
    /// dates as `YYYY-MM-DDTHH:MM:SSZ` (whole seconds, as Apple's writer does; plistlib's
    /// reader accepts nothing finer), so sub-second parts cannot survive XML.
    static let compareScript = """
        import plistlib, sys, datetime
        xml_dates = "--xml-dates" in sys.argv
        paths = [a for a in sys.argv[1:] if not a.startswith("--")]
        def load(p):
            with open(p, "rb") as f:
                return plistlib.load(f)
        def diff(a, b, path):
            if type(a) is not type(b):
                return "%s: type %s != %s" % (path, type(a).__name__, type(b).__name__)
            if isinstance(a, dict):
                if set(a) != set(b):
                    return "%s: keys differ: %r" % (path, sorted(set(a) ^ set(b))[:5])
                for k in a:
                    r = diff(a[k], b[k], "%s.%s" % (path, k))
                    if r: return r
                return None
            if isinstance(a, list):
                if len(a) != len(b):
                    return "%s: %d != %d items" % (path, len(a), len(b))
                for i, (x, y) in enumerate(zip(a, b)):
                    r = diff(x, y, "%s[%d]" % (path, i))
                    if r: return r
                return None
            if xml_dates and isinstance(a, datetime.datetime):
                if a.replace(microsecond=0) != b.replace(microsecond=0):
                    return "%s: %r != %r" % (path, a, b)
                return None
            if a != b:
                return "%s: %r != %r" % (path, a, b)
            return None
        a, b = load(paths[0]), load(paths[1])
        r = diff(a, b, "$")
        if r is None and not xml_dates and a != b:
            r = "trees differ under =="
        print("EQUAL" if r is None else "DIFF " + r)
        """

    /// Runs the comparison; "EQUAL" or "DIFF where".
    static func compare(_ d: Daemon, original: String, copy: String, xmlDates: Bool = false)
        -> String
    {
        let script = d.root + "/compare.py"
        if !FileManager.default.fileExists(atPath: script) {
            _ = FileManager.default.createFile(atPath: script, contents: Data(compareScript.utf8))
        }
        let r = d.run("python3", [script, original, copy] + (xmlDates ? ["--xml-dates"] : []))
        return r.status == 0
            ? r.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines) : "python failed: \(r)"
    }

    @Test func corpusIsThere() {
        #expect(Self.files.count >= 10, "corpus not found at \(Self.corpus.path)")
        #expect(
            Self.arrayFiles.count == 1 && Self.arrayFiles.first?.hasPrefix("com.sogou.") == true,
            "\(Self.arrayFiles)")
    }

    @Test(arguments: dictionaryFiles) func roundTrips(_ name: String) throws {
        let d = try Daemon()
        defer { d.close() }
        let original = Self.corpus.appendingPathComponent(name).path
        let domain = "com.example.corpus"

        let imported = d.ctl(["defaults", "import", domain, original])
        try #require(imported.status == 0, "\(imported)")

        let binary = d.root + "/export.plist"
        let exported = d.ctl(["defaults", "export", domain, binary])
        try #require(exported.status == 0, "\(exported)")
        let bytes = FileManager.default.contents(atPath: binary) ?? Data()
        #expect(
            bytes.starts(with: Data("bplist00".utf8)),
            "export to a path should write a binary plist")
        #expect(Self.compare(d, original: original, copy: binary) == "EQUAL")
        // The same domain exports to the same bytes: again, after a restart of vaultd (a new
        // process, whose dictionaries iterate in another order), and after importing the
        // export itself into another domain.
        let again = d.root + "/export-again.plist"
        _ = try d.restart()
        try #require(d.ctl(["defaults", "export", domain, again]).status == 0)
        #expect(
            FileManager.default.contents(atPath: again) == bytes,
            "a second export of the unchanged domain differs")
        try #require(d.ctl(["defaults", "import", domain + ".copy", binary]).status == 0)
        let copied = d.root + "/export-copy.plist"
        try #require(d.ctl(["defaults", "export", domain + ".copy", copied]).status == 0)
        #expect(
            FileManager.default.contents(atPath: copied) == bytes,
            "the export of the imported export differs")

        guard !Self.notRepresentableInXML.contains(name) else { return }
        let xml = d.ctl(["defaults", "export", domain, "-"])
        try #require(xml.status == 0, "\(xml)")
        #expect(
            xml.stdout.starts(with: Data("<?xml".utf8)),
            "export to - should write XML: \(xml.stdoutText.prefix(100))")
        let xmlPath = d.root + "/export.xml"
        try xml.stdout.write(to: URL(fileURLWithPath: xmlPath))
        #expect(Self.compare(d, original: original, copy: xmlPath, xmlDates: true) == "EQUAL")
    }

    /// A plist whose root is an array cannot be a domain: refused, and the domain keeps
    /// what it had.
    @Test func arrayRootIsRefusedAndTheDomainIsUnchanged() throws {
        let d = try Daemon()
        defer { d.close() }
        let domain = "com.example.refusal"
        let dictionary = Self.corpus.appendingPathComponent(
            "com.knollsoft.Rectangle__Fxlipe115-config_files.plist"
        ).path
        let array = try #require(
            Self.arrayFiles.first.map { Self.corpus.appendingPathComponent($0).path })

        try #require(d.ctl(["defaults", "import", domain, dictionary]).status == 0)
        let refused = d.ctl(["defaults", "import", domain, array])
        #expect(refused.status == 65, "\(refused)")
        #expect(refused.stderr.contains("io.vaultd.Preferences.InvalidPropertyList"), "\(refused)")

        let out = d.root + "/after.plist"
        let exported = d.ctl(["defaults", "export", domain, out])
        try #require(exported.status == 0, "\(exported)")
        #expect(
            Self.compare(d, original: dictionary, copy: out) == "EQUAL",
            "the domain changed after a refused import")
    }
}
