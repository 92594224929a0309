import Foundation
import Testing

@testable import vaultd

/// The Secret Service's object paths as vaultd reads them (`SecretServicePath`): every object
/// has one path, which reads back as it; what no object has reads as nothing. The fuzz target
/// Fuzz/targets/SecretServiceFuzzer.swift checks the same on arbitrary input.
@Suite struct SecretServicePathTests {
    @Test func everyObjectHasOnePath() {
        let objects: [SecretServicePath] = [
            .service, .collection("login"), .collection(""), .collection("team.shared"),
            .item(collection: "team.shared", id: "ann@example.org"),
            .item(collection: "g", id: "café/_x"), .damaged(collection: "user", row: 2),
            .damaged(collection: "user", row: 0),
        ]
        for o in objects {
            #expect(SecretServicePath(o.path) == o, "\(o.path)")
        }
        #expect(
            SecretServicePath.item(collection: "team.shared", id: "ann@example.org").path
                == "/org/freedesktop/secrets/collection/team_2eshared/ann_40example_2eorg")
    }

    /// A damaged item's row in another spelling (leading zeros, a sign), or an empty element,
    /// is no path. An empty element read as the collection or item "" (whose path is `_`):
    /// the fuzz target's round trip (one object, one path) found it on its first input;
    /// `damaged_item007` read as row 7, a second path of that item, seen while writing it.
    @Test func anotherSpellingNamesNothing() {
        for path in [
            "/org/freedesktop/secrets/collection/user/damaged_item007",
            "/org/freedesktop/secrets/collection/user/damaged_item+7",
            "/org/freedesktop/secrets/collection/user/damaged_item",
            "/org/freedesktop/secrets/collection/user/damaged_item1234567890123456789",
            "/org/freedesktop/secrets/collection/te_2Eam",
            "/org/freedesktop/secrets/collection/_61",
            "/org/freedesktop/secrets/collection/", "/org/freedesktop/secrets/collection/login/",
            "/org/freedesktop/secretsx", "/org/freedesktop/secrets/collection/a/b/c",
            "/org/freedesktop/secrets/", "/org/freedesktop/secrets//collection",
            "/org/freedesktop/secret", "", "/", "/org/freedesktop/secrets/other",
            "/org/freedesktop/secrets/session/a/b",
        ] {
            #expect(SecretServicePath(path) == nil, "\(path)")
        }
    }

    /// The folders themselves are paths under the service that are no object.
    @Test func theFoldersAreInner() {
        for folder in ["collection", "aliases", "session", "prompt"] {
            #expect(SecretServicePath("/org/freedesktop/secrets/" + folder) == .inner, "\(folder)")
        }
        #expect(SecretServicePath("/org/freedesktop/secrets/session/7") == .session("7"))
        #expect(SecretServicePath("/org/freedesktop/secrets/aliases/default") == .alias("default"))
    }
}
