import Foundation
import Testing

/// The split scripts/test makes: a test that needs root, a mount namespace, a keyring on a
/// private bus, a sandbox or another real daemon is tagged `.system`, so the fast part never
/// runs it, and scripts/test-parts (which reads Swift Testing's own list of tests and their
/// tags) finds every tag it is given.
@Suite struct TestPartsTests {
    /// Every test source, with its lines.
    static func sources() throws -> [(path: String, lines: [Substring])] {
        let tests = Paths.repoRoot.appendingPathComponent("Tests")
        let walker = FileManager.default.enumerator(atPath: tests.path)
        var out: [(String, [Substring])] = []
        while let relative = walker?.nextObject() as? String {
            guard relative.hasSuffix(".swift"), !relative.hasPrefix("Fixtures/"),
                relative != "IntegrationTests/CLI/TestPartsTests.swift"
            else { continue }
            let text = try String(
                contentsOf: tests.appendingPathComponent(relative), encoding: .utf8)
            out.append((relative, text.split(separator: "\n", omittingEmptySubsequences: false)))
        }
        return out.sorted { $0.0 < $1.0 }
    }

    /// Each `@Suite(` or `@Test(` attribute of `lines` (`name`: "@Suite" or "@Test"), whole,
    /// however many lines it spans (up to its balancing parenthesis), with its first line's
    /// index and whether it starts at column 0.
    static func attributes(_ name: String, in lines: [Substring]) -> [(
        line: Int, topLevel: Bool, text: String
    )] {
        var out: [(Int, Bool, String)] = []
        for (i, line) in lines.enumerated() {
            guard let start = line.range(of: name + "(") else { continue }
            var text = ""
            var depth = 0
            scan: for l in lines[i...] {
                for c in (l.startIndex == line.startIndex ? l[start.lowerBound...] : l) {
                    text.append(c)
                    if c == "(" { depth += 1 }
                    if c == ")" {
                        depth -= 1
                        if depth == 0 { break scan }
                    }
                }
                text.append("\n")
            }
            out.append((i, start.lowerBound == line.startIndex, text))
        }
        return out
    }

    /// True when a `@Suite` attribute at column 0 of the file carries the tag: the whole suite
    /// is in the system part.
    static func suiteTagged(_ lines: [Substring]) -> Bool {
        attributes("@Suite", in: lines).contains {
            $0.topLevel && $0.text.contains(".tags(.system")
        }
    }

    @Test func aTestGatedOnRootIsTaggedSystem() throws {
        var untagged: [String] = []
        for (path, lines) in try Self.sources() where !Self.suiteTagged(lines) {
            for a in Self.attributes("@Test", in: lines)
            where a.text.contains("getuid() == 0") && !a.text.contains(".tags(.system") {
                untagged.append("\(path):\(a.line + 1)")
            }
        }
        #expect(untagged.isEmpty, "root-gated tests without .tags(.system): \(untagged)")
    }

    /// A file that starts a system component (a mount namespace, a private bus, a sandbox,
    /// Syncthing, PAM) tags the suite or the tests that do.
    @Test func aFileThatStartsSystemComponentsTagsThem() throws {
        let markers = [
            "CacheVolume(", "KeyringFixture", "sandboxed(", "\"unshare\"", "dbus-run-session",
            "syncthing", "pamtester",
        ]
        var untagged: [String] = []
        for (path, lines) in try Self.sources()
        where path.hasPrefix("IntegrationTests/") && !path.hasPrefix("IntegrationTests/Support/") {
            let uses = markers.filter { m in lines.contains { $0.contains(m) } }
            guard !uses.isEmpty, lines.contains(where: { $0.contains("@Test") }) else { continue }
            if !lines.contains(where: { $0.contains(".tags(.system") }) {
                untagged.append("\(path) (\(uses.joined(separator: ", ")))")
            }
        }
        #expect(untagged.isEmpty, "files with system tests but no .tags(.system): \(untagged)")
    }

    /// scripts/test-parts names one suite or test for every tag in the sources, so the fast
    /// part skips all of them and the system part runs all of them.
    @Test func theFilterNamesEveryTaggedSuiteAndTest() throws {
        let tags = try Self.sources().flatMap { source in
            (Self.attributes("@Suite", in: source.lines)
                + Self.attributes("@Test", in: source.lines))
                .filter { $0.text.contains(".tags(.system") }
        }
        let r = try ChildProcess.run(
            Paths.repoRoot.appendingPathComponent("scripts/test-parts").path, [],
            environment: ["PATH": "/usr/bin:/bin"])
        #expect(r.status == 0, "\(r)")
        let filter = r.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(filter.hasPrefix("^(") && filter.hasSuffix(")"), "\(filter)")
        let ids = filter.dropFirst(2).dropLast().split(separator: "|")
        #expect(ids.count == tags.count, "\(tags.count) tags, \(ids.count) IDs: \(ids)")
        #expect(ids.contains("IntegrationTests\\.KeyringTests/"))
        #expect(
            ids.contains(
                "IntegrationTests\\.ReliabilityIdentityTests/peerOfAnotherUserIsRefused\\("))
        #expect(
            ids.contains(
                "VaultCoreTests\\.TreeWalkTests/aBindMountOfAnAncestorIsNotACycleWithoutMountIDs\\("
            ))
        // Each ID names a declaration that exists: a suite's type or a test's function.
        let text = try Self.sources().flatMap(\.lines).joined(separator: "\n")
        for id in ids {
            let last =
                id.split(separator: "/").last.map {
                    String($0).replacingOccurrences(of: "\\(", with: "")
                } ?? ""
            let name =
                id.hasSuffix("/")
                ? String(id.dropLast().split(separator: "/").last!.split(separator: ".").last!)
                : last
            #expect(
                text.contains("struct \(name)") || text.contains("func \(name)("),
                "\(id) names nothing")
        }
    }
}
