import Testing
import VaultProtocol

@testable import VaultCore

/// The secret portal's decisions (`Policy.decidePortalRequest`) and its engine operation
/// (`Vault.portalSecret`): only the system's xdg-desktop-portal, only for the app that asked,
/// 64 bytes per app, the same each time.
@Suite struct PortalPolicyTests {
    /// What the kernel says of the real xdg-desktop-portal.
    static let portal = PortalPeer(
        executable: "/usr/libexec/xdg-desktop-portal", onHost: true, runsThatFile: true,
        fileOwner: 0, fileMode: 0o100755, pathOnlyRootWritable: true, injected: nil)

    static func flatpakApp(_ vault: Vault, _ id: String) throws -> Caller {
        try vault.caller(flatpakAppID: id, executable: nil, isRegisteredFile: { _ in false })
    }

    @Test func onlyTheSystemsPortalMayCall() {
        var peers: [PortalPeer] = []
        var p = Self.portal
        p.executable = "/usr/bin/python3"
        peers.append(p)
        p = Self.portal
        p.executable = "/home/u/xdg-desktop-portal"
        peers.append(p)
        p = Self.portal
        p.onHost = false
        peers.append(p)
        p = Self.portal
        p.runsThatFile = false
        peers.append(p)
        p = Self.portal
        p.fileOwner = 1000
        peers.append(p)
        p = Self.portal
        p.fileMode = 0o100775
        peers.append(p)
        p = Self.portal
        p.pathOnlyRootWritable = false
        peers.append(p)
        p = Self.portal
        p.injected = "LD_PRELOAD is set"
        peers.append(p)
        for peer in peers {
            _ = expectFailure(.permissionDenied) { try Policy.requireDesktopPortal(peer) }
        }
        #expect(throws: Never.self) { try Policy.requireDesktopPortal(Self.portal) }
        var arch = Self.portal
        arch.executable = "/usr/lib/xdg-desktop-portal"
        #expect(throws: Never.self) { try Policy.requireDesktopPortal(arch) }
    }

    @Test func theAppNamedMustBeTheAppThatAsked() {
        let a = Caller(appID: "org.example.A", accessGroups: ["org.example.A"])
        #expect(throws: Never.self) {
            try Policy.decidePortalRequest(
                appID: "org.example.A", requester: a, portal: Self.portal)
        }
        _ = expectFailure(.permissionDenied) {
            try Policy.decidePortalRequest(
                appID: "org.example.B", requester: a, portal: Self.portal)
        }
        _ = expectFailure(.permissionDenied) {
            try Policy.decidePortalRequest(appID: "", requester: .owner, portal: Self.portal)
        }
        _ = expectFailure(.permissionDenied) {
            try Policy.decidePortalRequest(
                appID: "org.example.A", requester: .owner, portal: Self.portal)
        }
    }

    @Test func eachAppGetsItsOwnSecretTheSameEachTime() throws {
        try withVault { vault, _ in
            let a = try Self.flatpakApp(vault, "org.example.A")
            let b = try Self.flatpakApp(vault, "org.example.B")
            let first = try vault.portalSecret(
                appID: "org.example.A", requester: a, portal: Self.portal)
            let again = try vault.portalSecret(
                appID: "org.example.A", requester: a, portal: Self.portal)
            let other = try vault.portalSecret(
                appID: "org.example.B", requester: b, portal: Self.portal)
            #expect(first.count == 64 && other.count == 64)
            #expect(first.constantTimeEquals(again) && !first.constantTimeEquals(other))
            // The app's own item: it sees it, the other app does not.
            let query = ItemQuery(
                itemClass: .genericPassword,
                attributes: ItemAttributes(service: Vault.portalService))
            let seen = try vault.copyMatching(query, returnData: true, caller: a)
            #expect(seen.count == 1 && seen[0].data?.constantTimeEquals(first) == true)
            #expect(seen[0].attributes.accessGroup == "org.example.A")
            let byB = try vault.copyMatching(
                ItemQuery(
                    itemClass: .genericPassword,
                    attributes: ItemAttributes(service: Vault.portalService), matchAll: true),
                returnData: false, caller: b)
            #expect(byB.count == 1 && byB[0].attributes.account == "org.example.B")
            // Another caller than the portal, or another app than the one that asked: nothing.
            var python = Self.portal
            python.executable = "/usr/bin/python3"
            _ = expectFailure(.permissionDenied) {
                _ = try vault.portalSecret(appID: "org.example.A", requester: a, portal: python)
            }
            _ = expectFailure(.permissionDenied) {
                _ = try vault.portalSecret(
                    appID: "org.example.A", requester: b, portal: Self.portal)
            }
        }
    }

    /// The secret is `afterFirstUnlock`: a vault locked since vaultd started answers
    /// InteractionNotAllowed (the portal's response 2), no prompt; once unlocked, the app
    /// gets its secret, also after the vault is locked again.
    @Test func aLockedVaultAnswersOnlyAfterItsFirstUnlock() throws {
        try withTemporaryDirectory { tmp in
            let dir = tmp + "/data"
            var made: [UInt8]?
            do {
                let vault = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
                defer { vault.close() }
                _ = try vault.initialize(passphrase: secret("p1"), caller: .owner)
                let a = try Self.flatpakApp(vault, "org.example.A")
                made = plain(
                    try vault.portalSecret(
                        appID: "org.example.A", requester: a, portal: Self.portal))
            }
            let vault = try Vault(dataDirectory: dir, passphrasePolicy: .tests)
            defer { vault.close() }
            let a = try Self.flatpakApp(vault, "org.example.A")
            _ = expectFailure(.interactionNotAllowed) {
                _ = try vault.portalSecret(
                    appID: "org.example.A", requester: a, portal: Self.portal)
            }
            _ = try vault.unlock(passphrase: secret("p1"), caller: .owner)
            _ = try vault.lockVault(caller: .owner)
            let after = try vault.portalSecret(
                appID: "org.example.A", requester: a, portal: Self.portal)
            #expect(plain(after) == made && made?.count == 64)
        }
    }
}
