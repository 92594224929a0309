import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The README's SwiftPM snippet, as an app would paste it: its dependency on this package
/// resolves whatever the directory the package was cloned into is called (SwiftPM names a
/// path package by its directory unless the dependency gives `name:`).
@Suite struct ReadmeSnippetTests {
    /// The indented lines of the README's block holding `.package(`.
    static func snippet() throws -> [String] {
        let readme = try String(
            contentsOf: Paths.repoRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let lines = readme.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let start = try #require(
            lines.firstIndex { $0.hasPrefix("    ") && $0.contains(".package(") },
            "no .package( line in README.md")
        return Array(lines[start...].prefix { $0.hasPrefix("    ") })
    }

    @Test func theSnippetResolvesFromADirectoryOfAnyName() throws {
        let root = try TemporaryDirectory.make(prefix: "vaultd-spm")
        defer { TemporaryDirectory.remove(root) }
        // The package seen through a directory that is not called `vaultd`.
        let clone = root + "/my-checkout-of-it"
        try #require(symlink(Paths.repoRoot.path, clone) == 0)
        let app = root + "/MyApp"
        try FileManager.default.createDirectory(
            atPath: app + "/Sources/MyApp", withIntermediateDirectories: true)
        let body = try Self.snippet().joined(separator: "\n").replacingOccurrences(
            of: "/path/to/vaultd", with: clone)
        let manifest = """
            // swift-tools-version:6.0
            import PackageDescription
            let package = Package(
                name: "MyApp",
            \(body)
            )

            """
        try manifest.write(toFile: app + "/Package.swift", atomically: true, encoding: .utf8)
        try "import VaultClient\n".write(
            toFile: app + "/Sources/MyApp/main.swift", atomically: true, encoding: .utf8)
        var env = ProcessInfo.processInfo.environment
        env["PATH"] = "/opt/swift/usr/bin:" + (env["PATH"] ?? "/usr/bin:/bin")
        let r = try ChildProcess.run(
            "/usr/bin/env", ["swift", "package", "--package-path", app, "describe"],
            environment: env, timeout: 300)
        #expect(
            r.status == 0 && r.stdoutText.contains("my-checkout-of-it"),
            "Package.swift:\n\(manifest)\n\(r)")
    }
}
