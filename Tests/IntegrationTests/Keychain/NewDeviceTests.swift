import Foundation
import Testing
import VaultClient
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// A data directory moved to a new device (`vaultd --new-device-key`): its ThisDeviceOnly
/// items made with the old key are counted alike by status, Hello and item list as
/// unavailable, can be deleted, and an add with the same primary key replaces one.
@Suite("new device")
struct NewDeviceTests {
    @Test func unavailableItemsAreConsistentEverywhere() throws {
        let d = try Daemon()
        defer { d.close() }
        try #require(d.initialize().status == 0)
        let app = d.ctl(["app", "install", "org.example.Mover", "--exe", "/usr/bin/true"])
        try #require(app.status == 0, "\(app)")
        let v = try d.client()
        for s in ["a", "b"] {
            _ = try v.keychain.add(
                attributes: ItemAttributes(
                    service: s, account: "x", accessGroup: "org.example.Mover",
                    accessible: .afterFirstUnlockThisDeviceOnly), data: Data("old-\(s)".utf8))
        }
        _ = try v.keychain.add(
            attributes: ItemAttributes(service: "moves", account: "x"), data: Data("m".utf8))
        #expect(try d.client().launch.unavailableItems == 0)
        #expect(d.stop() == 0)
        // The data directory on a new device: another device.key.
        try FileManager.default.removeItem(atPath: d.dataDirectory + "/device.key")
        try d.start(extraArguments: ["--new-device-key"])
        try #require(d.unlock().status == 0)

        let status = try #require(d.statusJSON())
        #expect(
            status["items"] as? Int == 3 && status["unavailableItems"] as? Int == 2, "\(status)")
        #expect(
            d.ctl(["status"]).stdoutText.contains(
                "items: 3 (2 made on another device, not available on this one)"))
        #expect(try d.client().launch.unavailableItems == 2, "the owner's Hello counts every item")
        let list = d.ctl(["item", "list"])
        #expect(
            list.status == 0 && list.stdoutText.contains("service=\"moves\"")
                && !list.stdoutText.contains("service=\"a\""), "\(list)")
        #expect(
            list.stderr.contains(
                "2 ThisDeviceOnly item(s) made on another device are not available"), "\(list)")
        let get = d.ctl(["item", "get", "--service", "a"])
        #expect(get.status == 1 && get.stderr.contains("NotAvailableOnThisDevice"), "\(get)")

        // An add with the same primary key replaces the unavailable item (no DuplicateItem).
        let add = d.ctl(
            [
                "item", "add", "--service", "a", "--account", "x", "--access-group",
                "org.example.Mover", "--accessible", "afterFirstUnlockThisDeviceOnly",
                "--secret-fd", "3",
            ], fds: [3: Data("new-a".utf8)])
        #expect(add.status == 0, "\(add)")
        #expect(d.ctl(["item", "get", "--service", "a"]).stdoutText == "new-a")
        // A delete removes one.
        #expect(d.ctl(["item", "delete", "--service", "b", "--yes"]).status == 0)
        let after = try #require(d.statusJSON())
        #expect(after["items"] as? Int == 2 && after["unavailableItems"] as? Int == 0, "\(after)")
        // An add over an available item is still DuplicateItem.
        let dup = d.ctl(
            [
                "item", "add", "--service", "a", "--account", "x", "--access-group",
                "org.example.Mover", "--accessible", "afterFirstUnlockThisDeviceOnly",
                "--secret-fd", "3",
            ], fds: [3: Data("again".utf8)])
        #expect(dup.status == 45, "\(dup)")
    }
}
