import Foundation
import Testing
import VaultProtocol

@testable import VaultCore

@Suite("Keychain without a passphrase")
struct KeychainTests {
    @Test func copyMatchingReturnsExactBytes() throws {
        try withVault { vault, _ in
            let secrets: [(String, [UInt8])] = [
                ("plain", Array("hunter2".utf8)),
                ("empty", []),
                ("nul", [0x61, 0x00, 0x62]),
                ("allBytes", (0...255).map { UInt8($0) }),
                ("utf8", Array("pässwörd 😀".utf8)),
            ]
            for (account, bytes) in secrets {
                let stored = try vault.addGeneric(service: "svc", account: account, secret: bytes)
                #expect(stored.service == "svc")
                #expect(stored.account == account)
                #expect(stored.accessGroup == "user")
                #expect(stored.accessible == .whenUnlocked)
                #expect(stored.synchronizable == false)
                #expect(stored.creationDate != nil)
            }
            for (account, bytes) in secrets {
                #expect(
                    try vault.readGeneric(service: "svc", account: account) == bytes,
                    "account \(account)")
            }
            // The empty secret is found, and empty (not missing).
            let empty = try vault.copyMatching(
                ItemQuery(attributes: ItemAttributes(service: "svc", account: "empty")),
                returnData: true, caller: .owner)
            #expect(empty.count == 1)
            #expect(empty.first?.data?.count == 0)
            #expect(plain(empty.first?.data) == [])
            // Without returnData: attributes only.
            let attrsOnly = try vault.copyMatching(
                ItemQuery(attributes: ItemAttributes(service: "svc", account: "nul")),
                returnData: false, caller: .owner)
            #expect(attrsOnly.count == 1)
            #expect(attrsOnly.first?.data == nil)
            #expect(attrsOnly.first?.itemClass == .genericPassword)
            #expect(attrsOnly.first?.attributes.account == "nul")
            // matchLimit one vs all.
            let one = try vault.copyMatching(
                ItemQuery(attributes: ItemAttributes(service: "svc")), returnData: false,
                caller: .owner)
            #expect(one.count == 1)
            let all = try vault.copyMatching(
                ItemQuery(attributes: ItemAttributes(service: "svc"), matchAll: true),
                returnData: true, caller: .owner)
            #expect(all.count == secrets.count)
            #expect(Set(all.compactMap(\.attributes.account)) == Set(secrets.map(\.0)))
            #expect(try vault.status(caller: .owner).items == secrets.count)
        }
    }

    @Test func secretOfExactlyOneMiBIsStoredAndOneMoreByteIsRefused() throws {
        try withVault { vault, _ in
            let limit = 1 << 20
            let big = (0..<limit).map { UInt8(truncatingIfNeeded: $0 % 251) }
            try vault.addGeneric(service: "big", account: "exact", secret: big)
            #expect(try vault.readGeneric(service: "big", account: "exact") == big)

            let e = expectFailure(.secretTooLarge) {
                try vault.addGeneric(service: "big", account: "over", secret: big + [7])
            }
            expectFailure(.itemNotFound) {
                _ = try vault.readGeneric(service: "big", account: "over")
            }
            #expect(try vault.status(caller: .owner).items == 1)

            // Update with a too-large secret changes nothing either.
            expectFailure(.secretTooLarge) {
                _ = try vault.updateItems(
                    ItemQuery(attributes: ItemAttributes(service: "big", account: "exact")),
                    changes: ItemAttributes(),
                    secret: secret(big + [7]), caller: .owner)
            }
            #expect(try vault.readGeneric(service: "big", account: "exact") == big)
        }
    }

    @Test func duplicateAddIsDuplicateItemAndKeepsTheOriginal() throws {
        try withVault { vault, _ in
            try vault.addGeneric(service: "svc", account: "acct", secret: Array("first".utf8))
            let e = expectFailure(.duplicateItem) {
                try vault.addGeneric(service: "svc", account: "acct", secret: Array("second".utf8))
            }
            #expect(try vault.readGeneric(service: "svc", account: "acct") == Array("first".utf8))
            #expect(try vault.status(caller: .owner).items == 1)

            // Not duplicates: another account, another access group, synchronizable, the other class.
            try vault.addGeneric(service: "svc", account: "acct2", secret: [2])
            try vault.addGeneric(service: "svc", account: "acct", secret: [3], accessGroup: "other")
            _ = try vault.addItem(
                .genericPassword,
                attributes: ItemAttributes(service: "svc", account: "acct", synchronizable: true),
                secret: secret([4]), caller: .owner)
            _ = try vault.addItem(
                .internetPassword, attributes: ItemAttributes(account: "acct", server: "svc"),
                secret: secret([5]),
                caller: .owner)
            #expect(try vault.status(caller: .owner).items == 5)
            // Absent service/account are the empty string for uniqueness.
            try vault.addGeneric(service: "", account: "", secret: [6])
            expectFailure(.duplicateItem) {
                _ = try vault.addItem(
                    .genericPassword, attributes: ItemAttributes(), secret: secret([7]),
                    caller: .owner)
            }
        }
    }

    @Test func serviceNamesDifferingOnlyInCaseOrNormalisationAreDistinct() throws {
        try withVault { vault, _ in
            let services = ["Service", "service", "SERVICE", "caf\u{e9}", "cafe\u{301}"]
            for (i, s) in services.enumerated() {
                try vault.addGeneric(service: s, account: "a", secret: [UInt8(i)])
            }
            for (i, s) in services.enumerated() {
                #expect(
                    try vault.readGeneric(service: s, account: "a") == [UInt8(i)], "service \(s)")
            }
            expectFailure(.itemNotFound) { _ = try vault.readGeneric(service: "sERVICE") }
            #expect(try vault.status(caller: .owner).items == services.count)
        }
    }

    @Test func deleteThenCopyIsItemNotFound() throws {
        try withVault { vault, _ in
            try vault.addGeneric(service: "svc", account: "gone", secret: [1])
            try vault.addGeneric(service: "svc", account: "kept", secret: [2])
            let query = ItemQuery(
                itemClass: .genericPassword,
                attributes: ItemAttributes(service: "svc", account: "gone"))
            #expect(try vault.deleteItems(query, caller: .owner) == 1)
            let e = expectFailure(.itemNotFound) {
                _ = try vault.copyMatching(query, returnData: true, caller: .owner)
            }
            expectFailure(.itemNotFound) { _ = try vault.deleteItems(query, caller: .owner) }
            #expect(try vault.readGeneric(service: "svc", account: "kept") == [2])
            // Delete acts on every match.
            try vault.addGeneric(service: "svc", account: "x", secret: [3])
            #expect(
                try vault.deleteItems(
                    ItemQuery(attributes: ItemAttributes(service: "svc")), caller: .owner) == 2)
            #expect(try vault.status(caller: .owner).items == 0)
        }
    }

    @Test func updateChangingAccountToCollideIsDuplicateItem() throws {
        try withVault { vault, _ in
            try vault.addGeneric(service: "svc", account: "a", secret: Array("A".utf8))
            try vault.addGeneric(service: "svc", account: "b", secret: Array("B".utf8))
            let e = expectFailure(.duplicateItem) {
                _ = try vault.updateItems(
                    ItemQuery(attributes: ItemAttributes(service: "svc", account: "a")),
                    changes: ItemAttributes(account: "b"), secret: nil, caller: .owner)
            }
            #expect(try vault.readGeneric(service: "svc", account: "a") == Array("A".utf8))
            #expect(try vault.readGeneric(service: "svc", account: "b") == Array("B".utf8))

            // A non-colliding rename keeps the secret and moves the item.
            #expect(
                try vault.updateItems(
                    ItemQuery(attributes: ItemAttributes(service: "svc", account: "a")),
                    changes: ItemAttributes(account: "c", label: "renamed"), secret: nil,
                    caller: .owner) == 1)
            expectFailure(.itemNotFound) { _ = try vault.readGeneric(service: "svc", account: "a") }
            #expect(try vault.readGeneric(service: "svc", account: "c") == Array("A".utf8))
            let found = try vault.copyMatching(
                ItemQuery(attributes: ItemAttributes(service: "svc", account: "c")),
                returnData: false, caller: .owner)
            #expect(found.first?.attributes.label == "renamed")
        }
    }

    @Test func updateWithANewSecret() throws {
        try withVault { vault, _ in
            let created = try vault.addGeneric(
                service: "svc", account: "a", secret: Array("old".utf8))
            let n = try vault.updateItems(
                ItemQuery(attributes: ItemAttributes(service: "svc", account: "a")),
                changes: ItemAttributes(),
                secret: secret("new secret \u{0} with NUL"), caller: .owner)
            #expect(n == 1)
            #expect(
                try vault.readGeneric(service: "svc", account: "a")
                    == Array("new secret \u{0} with NUL".utf8))
            let attrs = try #require(
                try vault.copyMatching(
                    ItemQuery(attributes: ItemAttributes(service: "svc")), returnData: false,
                    caller: .owner
                ).first?.attributes)
            #expect(attrs.creationDate == created.creationDate)
            #expect(try #require(attrs.modificationDate) >= (try #require(created.creationDate)))
            // Updating nothing that matches.
            expectFailure(.itemNotFound) {
                _ = try vault.updateItems(
                    ItemQuery(attributes: ItemAttributes(service: "nope")),
                    changes: ItemAttributes(label: "x"),
                    secret: nil, caller: .owner)
            }
            // Nothing to change (no attribute, no secret): Param, as SecItemUpdate's
            // errSecParam, and the item is untouched (not even its modification date).
            expectFailure(.param) {
                _ = try vault.updateItems(
                    ItemQuery(attributes: ItemAttributes(service: "svc")),
                    changes: ItemAttributes(), secret: nil, caller: .owner)
            }
            let unchanged = try #require(
                try vault.copyMatching(
                    ItemQuery(attributes: ItemAttributes(service: "svc")), returnData: false,
                    caller: .owner
                ).first?.attributes)
            #expect(unchanged.modificationDate == attrs.modificationDate)
            // The dates are read-only: changing only them changes nothing, so Param too.
            var datesOnly = ItemAttributes()
            datesOnly.creationDate = Date(timeIntervalSinceReferenceDate: 0)
            expectFailure(.param) {
                _ = try vault.updateItems(
                    ItemQuery(attributes: ItemAttributes(service: "svc")), changes: datesOnly,
                    secret: nil, caller: .owner)
            }
            // They are searchable, exactly: another date matches nothing, so a Delete by it
            // deletes nothing (it had matched, and deleted, every item).
            var other = ItemAttributes()
            other.creationDate = Date(timeIntervalSinceReferenceDate: 12345)
            expectFailure(.itemNotFound) {
                _ = try vault.deleteItems(ItemQuery(attributes: other), caller: .owner)
            }
            var exact = ItemAttributes()
            exact.creationDate = attrs.creationDate
            #expect(
                try vault.copyMatching(
                    ItemQuery(attributes: exact, matchAll: true), returnData: false, caller: .owner
                ).count == 1)
        }
    }

    @Test func internetPasswordsDifferingInAnyKeyAttributeAreDistinct() throws {
        try withVault { vault, _ in
            let base = ItemAttributes(
                account: "alice", server: "example.org", protocol: "https", port: 443, path: "/",
                authenticationType: "form", securityDomain: "")
            var variants: [(String, ItemAttributes)] = [("base", base)]
            var a = base
            a.port = 8443
            variants.append(("port", a))
            a = base
            a.protocol = "http"
            variants.append(("protocol", a))
            a = base
            a.path = "/admin"
            variants.append(("path", a))
            a = base
            a.account = "bob"
            variants.append(("account", a))
            a = base
            a.authenticationType = "httpBasic"
            variants.append(("authenticationType", a))
            a = base
            a.securityDomain = "realm"
            variants.append(("securityDomain", a))
            a = base
            a.server = "Example.org"
            variants.append(("server", a))
            for (name, attrs) in variants {
                _ = try vault.addItem(
                    .internetPassword, attributes: attrs, secret: secret(name), caller: .owner)
            }
            #expect(try vault.status(caller: .owner).items == variants.count)
            expectFailure(.duplicateItem) {
                _ = try vault.addItem(
                    .internetPassword, attributes: base, secret: secret("again"), caller: .owner)
            }

            // Query by port: only that port.
            let p8443 = try vault.copyMatching(
                ItemQuery(
                    itemClass: .internetPassword,
                    attributes: ItemAttributes(server: "example.org", port: 8443), matchAll: true),
                returnData: true, caller: .owner)
            #expect(p8443.count == 1)
            #expect(p8443.first?.attributes.port == 8443)
            #expect(plain(p8443.first?.data) == Array("port".utf8))

            let p443 = try vault.copyMatching(
                ItemQuery(
                    itemClass: .internetPassword,
                    attributes: ItemAttributes(server: "example.org", port: 443), matchAll: true),
                returnData: false, caller: .owner)
            #expect(p443.count == variants.count - 2)  // not the 8443 one, not the Example.org one
            #expect(
                p443.allSatisfy {
                    $0.attributes.port == 443 && $0.attributes.server == "example.org"
                })

            expectFailure(.itemNotFound) {
                _ = try vault.copyMatching(
                    ItemQuery(itemClass: .internetPassword, attributes: ItemAttributes(port: 80)),
                    returnData: false, caller: .owner)
            }
            // Query by protocol + path.
            let admin = try vault.copyMatching(
                ItemQuery(
                    attributes: ItemAttributes(protocol: "https", path: "/admin"), matchAll: true),
                returnData: true, caller: .owner)
            #expect(admin.count == 1)
            #expect(plain(admin.first?.data) == Array("path".utf8))

            // A class-less query naming a port (0 too) finds internet passwords only: a generic
            // password has no port.
            _ = try vault.addItem(
                .genericPassword, attributes: ItemAttributes(service: "s", account: "mix"),
                secret: secret("generic"), caller: .owner)
            _ = try vault.addItem(
                .internetPassword,
                attributes: ItemAttributes(account: "mix", server: "mix.example"),
                secret: secret("internet"), caller: .owner)
            let mixed = try vault.copyMatching(
                ItemQuery(attributes: ItemAttributes(account: "mix", port: 0), matchAll: true),
                returnData: true, caller: .owner)
            #expect(mixed.map { plain($0.data) } == [Array("internet".utf8)])
            #expect(
                try vault.copyMatching(
                    ItemQuery(attributes: ItemAttributes(account: "mix"), matchAll: true),
                    returnData: false, caller: .owner
                ).count == 2)
            // The service belongs to generic passwords and the server to internet passwords: a
            // query naming one finds only its class, one naming both finds nothing.
            let byService = try vault.copyMatching(
                ItemQuery(attributes: ItemAttributes(service: "s"), matchAll: true),
                returnData: true, caller: .owner)
            #expect(byService.map { plain($0.data) } == [Array("generic".utf8)])
            let byServer = try vault.copyMatching(
                ItemQuery(
                    attributes: ItemAttributes(account: "mix", server: "mix.example"),
                    matchAll: true), returnData: true, caller: .owner)
            #expect(byServer.map { plain($0.data) } == [Array("internet".utf8)])
            expectFailure(.itemNotFound) {
                _ = try vault.copyMatching(
                    ItemQuery(
                        attributes: ItemAttributes(
                            service: "s", account: "mix", server: "mix.example")),
                    returnData: false, caller: .owner)
            }
        }
    }

    @Test func attributesOfTheWrongClassAreParam() throws {
        try withVault { vault, _ throws in
            expectFailure(.param) {
                _ = try vault.addItem(
                    .genericPassword,
                    attributes: ItemAttributes(service: "s", server: "example.org"),
                    secret: secret("x"),
                    caller: .owner)
            }
            expectFailure(.param) {
                _ = try vault.addItem(
                    .internetPassword,
                    attributes: ItemAttributes(service: "s", server: "example.org"),
                    secret: secret("x"),
                    caller: .owner)
            }
            #expect(try vault.status(caller: .owner).items == 0)
        }
    }

    @Test(arguments: [
        Accessibility.whenUnlockedThisDeviceOnly, .afterFirstUnlockThisDeviceOnly,
        .whenPasscodeSetThisDeviceOnly,
    ])
    func synchronizableThisDeviceOnlyIsParam(accessible: Accessibility) throws {
        try withVault { vault, _ in
            let e = expectFailure(.param) {
                _ = try vault.addItem(
                    .genericPassword,
                    attributes: ItemAttributes(
                        service: "s", account: "a", accessible: accessible, synchronizable: true),
                    secret: secret("x"), caller: .owner)
            }
            #expect(try vault.status(caller: .owner).items == 0)
            // Update into the contradiction is refused too (whenPasscodeSet items need a passphrase vault).
            guard accessible != .whenPasscodeSetThisDeviceOnly else { return }
            try vault.addGeneric(service: "s", account: "a", secret: [1], accessible: accessible)
            expectFailure(.param) {
                _ = try vault.updateItems(
                    ItemQuery(attributes: ItemAttributes(service: "s")),
                    changes: ItemAttributes(synchronizable: true),
                    secret: nil, caller: .owner)
            }
        }
    }

    @Test func whenPasscodeSetWithoutAPassphraseIsAuthFailed() throws {
        try withVault { vault, _ throws in
            let e = expectFailure(.authFailed) {
                try vault.addGeneric(
                    service: "s", account: "a", secret: [1],
                    accessible: .whenPasscodeSetThisDeviceOnly)
            }
            #expect(try vault.status(caller: .owner).items == 0)
        }
    }

    @Test func appsSeeOnlyTheirAccessGroups() throws {
        try withVault { vault, _ in
            let appA = try vault.registeredApp("org.example.A", appGroups: ["group.example.shared"])
            let appB = try vault.registeredApp("org.example.B", appGroups: ["group.example.shared"])
            let a = try vault.addGeneric(service: "svc", account: "a", secret: [1], caller: appA)
            #expect(a.accessGroup == "org.example.A")
            try vault.addGeneric(
                service: "svc", account: "shared", secret: [2], accessGroup: "group.example.shared",
                caller: appA)
            try vault.addGeneric(service: "svc", account: "owner", secret: [3])

            #expect(try vault.readGeneric(service: "svc", account: "a", caller: appA) == [1])
            expectFailure(.itemNotFound) {
                _ = try vault.readGeneric(service: "svc", account: "a", caller: appB)
            }
            #expect(try vault.readGeneric(service: "svc", account: "shared", caller: appB) == [2])
            expectFailure(.itemNotFound) {
                _ = try vault.readGeneric(service: "svc", account: "owner", caller: appA)
            }

            let e = expectFailure(.missingEntitlement) {
                _ = try vault.copyMatching(
                    ItemQuery(attributes: ItemAttributes(accessGroup: "user")), returnData: false,
                    caller: appA)
            }
            expectFailure(.missingEntitlement) {
                try vault.addGeneric(
                    service: "svc", account: "x", secret: [4], accessGroup: "org.example.B",
                    caller: appA)
            }
            expectFailure(.missingEntitlement) {
                _ = try vault.updateItems(
                    ItemQuery(attributes: ItemAttributes(account: "a")),
                    changes: ItemAttributes(accessGroup: "org.example.B"),
                    secret: nil, caller: appA)
            }
            // B cannot delete A's item; the owner sees everything.
            expectFailure(.itemNotFound) {
                _ = try vault.deleteItems(
                    ItemQuery(attributes: ItemAttributes(account: "a")), caller: appB)
            }
            let all = try vault.copyMatching(
                ItemQuery(matchAll: true), returnData: false, caller: .owner)
            #expect(all.count == 3)
        }
    }

    @Test func operationsBeforeInitialisationAreNotInitialized() throws {
        try withVault(initialize: false) { vault, _ in
            #expect(vault.lockStateName() == "uninitialized")
            expectFailure(.notInitialized) {
                try vault.addGeneric(service: "s", account: "a", secret: [1])
            }
            expectFailure(.notInitialized) { _ = try vault.readGeneric(service: "s") }
            expectFailure(.notInitialized) {
                _ = try vault.unlock(passphrase: secret("p"), caller: .owner)
            }
            expectFailure(.notInitialized) { _ = try vault.lockVault(caller: .owner) }
            // Not "unlock the vault first" (InteractionNotAllowed): there is nothing to unlock.
            expectFailure(.notInitialized) {
                _ = try vault.changePassphrase(old: nil, new: secret("p"), caller: .owner)
            }
            expectFailure(.notInitialized) {
                _ = try vault.changePassphrase(old: nil, new: nil, caller: .owner)
            }
            #expect(vault.lockStateName() == "uninitialized")
            _ = try vault.initialize(passphrase: nil, caller: .owner)
            #expect(vault.lockStateName() == "unlocked")
            expectFailure(.alreadyInitialized) {
                _ = try vault.initialize(passphrase: nil, caller: .owner)
            }
            expectFailure(.noPassphrase) { _ = try vault.lockVault(caller: .owner) }
            #expect(vault.lockStateName() == "unlocked")
        }
    }
}
