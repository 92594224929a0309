// swift-tools-version:6.0
import Foundation
import PackageDescription

/// The interface descriptions, one file per interface (Sources/VaultProtocol/Interfaces/*.varlink).
let interfaceFiles =
    ((try? FileManager.default.contentsOfDirectory(
        atPath: Context.packageDirectory + "/Sources/VaultProtocol/Interfaces")) ?? [])
    .filter { $0.hasSuffix(".varlink") }.sorted().map { "Interfaces/" + $0 }

let package = Package(
    name: "vaultd",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "VaultClient", targets: ["VaultClient"]),
        // The types VaultClient takes and throws (ItemAttributes, PlistValue, VaultError, …).
        .library(name: "VaultProtocol", targets: ["VaultProtocol"]),
        .executable(name: "vaultd", targets: ["vaultd"]),
        .executable(name: "vaultctl", targets: ["vaultctl"]),
        .executable(name: "git-credential-vault", targets: ["git-credential-vault"]),
    ],
    targets: [
        // C libraries from Debian packages, one systemLibrary target each.
        .systemLibrary(
            name: "CSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        .systemLibrary(
            name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(
            name: "CSecret", pkgConfig: "libsecret-1", providers: [.apt(["libsecret-1-dev"])]),
        // GLib's GDBus: vaultd's Secret Service front-end on the session bus.
        .systemLibrary(name: "CGio", pkgConfig: "gio-2.0", providers: [.apt(["libglib2.0-dev"])]),
        // libgcrypt: the Secret Service's DH session (1024-bit MODP, AES-128-CBC), which libsodium lacks.
        .systemLibrary(
            name: "CGcrypt", pkgConfig: "libgcrypt", providers: [.apt(["libgcrypt20-dev"])]),
        // What Glibc does not import into Swift (struct ucred, prctl).
        // tpm2-tss: the ESAPI, the TCTI loader, the response-code decoder and the marshalling
        // of TPM structures, which seal the device key to the TPM (VaultCore/DeviceKey).
        .systemLibrary(
            name: "CTSS2", pkgConfig: "tss2-esys", providers: [.apt(["libtss2-dev"])]),
        .target(name: "CVaultSys"),

        // CSodium for sodium_memzero: message buffers that carried secrets are wiped.
        // The interface descriptions (Interfaces/*.varlink) are compiled in, as
        // Interfaces/Texts/*.swift (scripts/generate-interfaces; a test holds the two
        // together), not shipped as a resource bundle: installed binaries and the fuzzer's
        // swiftc build then need nothing beside them (docs/architecture.md).
        .target(
            name: "VaultProtocol", dependencies: ["CSodium", "CVaultSys"],
            exclude: ["Interfaces/README.md"] + interfaceFiles),
        .target(
            name: "VaultCore",
            dependencies: ["VaultProtocol", "CSodium", "CSQLite", "CVaultSys", "CTSS2"]),
        // The desktop keyring (Secret Service) through libsecret: for vaultctl and vaultd.
        .target(name: "DesktopKeyring", dependencies: ["CSecret", "VaultProtocol"]),
        // The Secret Service's encrypted session: its key exchange and cipher.
        .target(name: "SecretSession", dependencies: ["VaultCore", "CGcrypt", "CSodium"]),
        .executableTarget(
            name: "vaultd",
            dependencies: [
                "VaultCore", "VaultProtocol", "CVaultSys", "CSecret", "CGio", "SecretSession",
                "DesktopKeyring",
            ]),
        .target(name: "VaultClient", dependencies: ["VaultProtocol"]),
        // Release builds link the Swift runtime and Foundation statically, so a vaultctl
        // process does not spend its start loading and relocating them (a CLI starts once
        // per command, and should start no slower than secret-tool).
        .executableTarget(
            name: "vaultctl", dependencies: ["VaultClient", "DesktopKeyring", "CGcrypt"],
            linkerSettings: [
                .unsafeFlags(["-static-stdlib"], .when(configuration: .release)),
                // What static Foundation needs that autolinking does not name here.
                .linkedLibrary("CoreFoundation", .when(configuration: .release)),
                .linkedLibrary("_FoundationICU", .when(configuration: .release)),
                .linkedLibrary("_FoundationCShims", .when(configuration: .release)),
                .linkedLibrary("_FoundationCollections", .when(configuration: .release)),
                .linkedLibrary("swiftSynchronization", .when(configuration: .release)),
                // FoundationXML (the import readers' XMLParser), static: its CoreFoundation
                // half and libxml2 (Debian's libxml2-dev).
                .linkedLibrary("_CFXMLInterface", .when(configuration: .release)),
                .linkedLibrary("xml2", .when(configuration: .release)),
            ]),
        .executableTarget(name: "git-credential-vault", dependencies: ["VaultClient"]),
        // An app that uses VaultClient as a real one would; tests copy it to act as several apps.
        .executableTarget(
            name: "vault-example", dependencies: ["VaultClient"], path: "Examples/vault-example"),
        // The benchmark: vaultd against gnome-keyring (libsecret) and the bare socket round trip.
        .executableTarget(
            name: "vault-bench",
            dependencies: ["VaultClient", "VaultProtocol", "DesktopKeyring", "CSecret"],
            path: "Benchmarks/vault-bench"),

        .target(name: "TestSupport", path: "Tests/TestSupport"),
        // The power-cut tests' SQLite VFS (after SQLite's own crash tests), in C as a VFS is.
        .target(name: "CCrashVFS", dependencies: ["CSQLite"], path: "Tests/CCrashVFS"),
        .testTarget(name: "VaultProtocolTests", dependencies: ["VaultProtocol", "TestSupport"]),
        .testTarget(
            name: "VaultCoreTests",
            dependencies: ["VaultCore", "SecretSession", "TestSupport", "CCrashVFS"]),
        .testTarget(
            name: "IntegrationTests",
            // VaultCore and vaultd for the operations and the front-ends' method tables only:
            // the tests call vaultd through the socket and the bus.
            dependencies: ["VaultClient", "VaultProtocol", "VaultCore", "vaultd", "TestSupport"]
        ),
        // vaultd's own code that needs no socket: the wire mapping of the engine's results and failures.
        .testTarget(
            name: "VaultdTests",
            dependencies: ["vaultd", "VaultCore", "VaultProtocol", "TestSupport"]),
    ],
    // Complete concurrency checking: each `@unchecked Sendable` says which lock or queue
    // makes it safe.
    swiftLanguageModes: [.v6]
)
