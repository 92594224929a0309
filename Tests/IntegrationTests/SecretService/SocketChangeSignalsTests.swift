import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Changes made through the socket are heard on the bus: a long-lived libsecret client (the
/// one `SecretServiceClientTests` runs) follows Secret Service items that `vaultctl item`
/// adds, renames, moves and deletes, from vaultd's signals alone, as it follows changes made
/// on the bus.
@Suite(.tags(.system)) struct SocketChangeSignalsTests {
    typealias Client = SecretServiceClientTests

    @Test func aLibsecretClientFollowsItemsChangedThroughTheSocket() throws {
        let k = try SecretServiceTests.fixture(passphrase: true)
        defer { k.close() }
        let (client, out) = try Client.startLibsecretClient(k)
        defer { kill(client, SIGKILL) }
        var seen = try #require(
            Client.waitForLine(out, "locked=False label=user items=", from: 0),
            "\(Client.text(out)) \(Client.text(out + ".err"))")
        func expect(_ items: String, after what: String) throws {
            let line = "locked=False label=user items=\(items)"
            let found = Client.waitForLine(out, line, from: seen)
            try #require(
                found != nil,
                "after \(what): no `\(line)`; the client printed:\n\(Client.text(out))\(Client.text(out + ".err"))\n\(k.log)"
            )
            seen = found!
        }
        func ctl(_ arguments: [String], stdin: String? = nil) throws {
            let r = k.ctl(arguments, stdin: stdin.map { Data($0.utf8) })
            try #require(r.status == 0, "\(r)")
        }
        // A Secret Service item: a generic password of service org.freedesktop.secrets.
        func item(_ id: String, group: String = "user") -> [String] {
            ["--service", "org.freedesktop.secrets", "--account", id, "--access-group", group]
        }
        try ctl(["item", "add", "--label", "made1"] + item("0a01"), stdin: "s1")
        try expect("made1", after: "vaultctl item add")
        try ctl(["item", "add", "--label", "made2"] + item("0a02"), stdin: "s2")
        try expect("made1,made2", after: "a second vaultctl item add")
        try ctl(["item", "update"] + item("0a01") + ["--set-label", "renamed1"])
        try expect("made2,renamed1", after: "vaultctl item update --set-label")
        // Moved to another access group: gone from this collection.
        try ctl(["item", "update"] + item("0a02") + ["--set-access-group", "elsewhere"])
        try expect("renamed1", after: "vaultctl item update --set-access-group")
        // An item of another service is no Secret Service item: nothing to tell.
        try ctl(
            ["item", "add", "--label", "other", "--service", "other", "--account", "x"],
            stdin: "o")
        try ctl(["item", "delete"] + item("0a01"))
        try expect("", after: "vaultctl item delete")
        // The lines came from signals: the client was never restarted.
        #expect(kill(client, 0) == 0)
        #expect(!Client.text(out).contains("other"), "\(Client.text(out))")
    }
}
