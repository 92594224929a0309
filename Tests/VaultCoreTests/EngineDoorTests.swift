import Foundation
import Testing

/// The session is the only door into the engine (docs/architecture.md): no public VaultCore
/// function or initializer takes a `Caller`, but `Vault.session(for:)`, which admits it. An
/// engine method that took one publicly could be called by a front-end without the session,
/// so this test reads the sources' declarations, as the compiler would see their signatures.
@Suite struct EngineDoorTests {
    /// VaultCore's sources, relative to this file.
    static let sources = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Sources/VaultCore")

    /// Every `public` (or `open`, or `package`: other modules of the package see it)
    /// function, initializer and subscript declaration in `text`:
    /// its name and its parameter list, however many lines the list spans.
    static func publicDeclarations(_ text: String) -> [(name: String, parameters: String)] {
        let declaration = try! Regex(
            #"(?m)^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:public|open|package)\s+(?:(?:static|class|final|override|mutating|nonisolated|convenience|required)\s+)*(func\s+[^\s(<]+|init[?!]?|subscript)\s*(?:<[^>]*>)?\("#
        )
        var out: [(String, String)] = []
        for match in text.matches(of: declaration) {
            var depth = 1
            var end = match.range.upperBound
            while end < text.endIndex, depth > 0 {
                if text[end] == "(" { depth += 1 }
                if text[end] == ")" { depth -= 1 }
                end = text.index(after: end)
            }
            let name = String(match.output[1].substring ?? "")
            out.append((name, String(text[match.range.upperBound..<end])))
        }
        return out
    }

    @Test func noPublicEngineMethodTakesACallerButTheSessionsCreation() throws {
        let files = try FileManager.default.subpathsOfDirectory(atPath: Self.sources.path)
            .filter { $0.hasSuffix(".swift") }
        #expect(files.count > 40, "VaultCore's sources were not found at \(Self.sources.path)")
        var takers: [String] = []
        var declarations = 0
        for file in files {
            let text = try String(
                contentsOf: Self.sources.appendingPathComponent(file), encoding: .utf8)
            for d in Self.publicDeclarations(text) {
                declarations += 1
                guard d.parameters.contains(/\bCaller\b/) else { continue }
                if file == "Session/VaultSession.swift" && d.name == "func session"
                    && d.parameters.hasPrefix("for caller: Caller)")
                {
                    continue
                }
                takers.append("\(file): \(d.name)(\(d.parameters)")
            }
        }
        #expect(declarations > 100, "only \(declarations) public declarations read")
        #expect(takers.isEmpty, "public engine methods that take a Caller: \(takers)")
    }

    /// The scan sees a multi-line signature, so the test above could fail.
    @Test func theScanFindsACallerInAMultiLineSignature() {
        let found = Self.publicDeclarations(
            """
            extension Vault {
                public func addItem(
                    _ itemClass: ItemClass, secret: SecureBytes, caller: Caller
                ) throws {}
                func internalOne(caller: Caller) {}
                package func packageOne(caller: Caller) {}
            }
            """)
        #expect(found.map(\.name) == ["func addItem", "func packageOne"])
        #expect(found.first?.parameters.contains("caller: Caller") == true)
    }
}
