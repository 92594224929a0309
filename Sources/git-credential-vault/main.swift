import Foundation
import Synchronization
import VaultClient
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

// git-credential-vault: git's credential helper protocol (`get`, `store`, `erase`) over the
// vault's internet-password items. `git config --global credential.helper vault` makes git
// run `git credential-vault ACTION`, i.e. this program found on PATH.
//
// Item mapping: server = host without its port, port (0 when none), protocol, path (only when
// git sends it, i.e. with credential.useHttpPath, or for a client certificate's passphrase:
// protocol=cert, the certificate's path, no server), account = username, the password as the
// secret; password_expiry_utc is kept in `generic` as a small JSON object, and
// oauth_refresh_token, a secret, in the secret after the password (`PASSWORD\noauth_refresh_token=
// TOKEN`, as git's libsecret helper keeps it); both are given back by get, which never offers
// a password whose expiry has passed. (Items stored with the token in `generic` still give it.)
//
// Access group: registered as an app (`vaultctl app install org.git-scm.credential-vault
// --exe PATH --access-group git --keep-credentials-on-reinstall`, as docs/git.md says), the
// helper uses its own groups; run unregistered (as the owner), it uses the group `git` — the
// same items either way.
//
// Never harmful: a locked vault makes every action a no-op with exit 0, so git falls back to
// asking and nothing is erased or overwritten (`store` and `erase` say so in one line on stderr). No vaultd at the socket: `get` is as
// quiet (git prompts, as with its own helpers), while `store` and `erase` say in one line on
// stderr that nothing was stored or erased and exit 69 (`ExitCode.unavailable`), as does a
// vaultd that does not answer within `answerDeadlineSeconds`. Other failures exit with
// vaultctl's statuses (`ExitCode`). Input with CR, NUL or a line that is not key=value is rejected whole: nothing is
// stored, erased or returned.
// `url=` is read as git reads it (protocol, host with port, path, username, password), and a
// URL git would not parse, or whose decoded fields hold LF, CR or NUL, is rejected the same way.

let ownerAccessGroup = "git"

/// How long the helper waits for vaultd, connect to last reply. A vaultd that accepts but
/// does not answer (stopped, hung) must not hang git, which waits for its helper: past this
/// the helper gives up, says so, and exits 69 (git goes on as without a helper's answer).
let answerDeadlineSeconds: UInt32 = 10

/// How long the helper waits, from the moment it knows a match requires user presence, for
/// the read of its secret: the user answers a polkit prompt meanwhile (vaultd gives up
/// after `PresenceTimeoutSeconds`, 45 s by default; docs/keychain.md, "User presence").
let presenceDeadlineSeconds: UInt64 = 60

/// When the helper gives up (CLOCK_MONOTONIC, ns): `answerDeadlineSeconds` after the start,
/// moved once to `presenceDeadlineSeconds` after a presence-protected match is found.
let deadline = Mutex<UInt64>(0)

/// Ends the process once the deadline passes, whatever the main thread is blocked in.
func startDeadline(_ action: String) {
    deadline.withLock {
        $0 = MonotonicClock.nanoseconds() + UInt64(answerDeadlineSeconds) * 1_000_000_000
    }
    Thread.detachNewThread {
        while MonotonicClock.nanoseconds() < deadline.withLock({ $0 }) { usleep(100_000) }
        StandardOutput.writeError(
            "git-credential-vault: \(action): vaultd did not answer within \(answerDeadlineSeconds) s (\(presenceDeadlineSeconds) s for a secret that requires presence); gave up\n"
        )
        _exit(ExitCode.unavailable.rawValue)
    }
}

struct Credential {
    var `protocol`: String
    var server: String
    var port: Int
    var path: String?
    var username: String?
    var password: String?
    var extras: [String: String]

    static let extraKeys = credentialExtraKeys
    static let readKeys = credentialReadKeys

    /// nil when git names nothing to look for: no protocol, or no host (except for a client
    /// certificate's passphrase, `protocol=cert` with the certificate's path and an empty
    /// host, as git's http.sslCertPasswordProtected asks).
    init?(_ f: [String: String]) {
        guard let proto = f["protocol"], !proto.isEmpty else { return nil }
        let host = f["host"] ?? ""
        path = f["path"].flatMap { $0.isEmpty ? nil : $0 }
        guard !host.isEmpty || (proto == "cert" && path != nil) else { return nil }
        `protocol` = proto
        (server, port) = Credential.split(host)
        username = f["username"]
        password = f["password"]
        extras = f.filter { Credential.extraKeys.contains($0.key) }
    }

    /// `host[:port]`, `[v6]:port`: the port split out when it is a number.
    static func split(_ host: String) -> (String, Int) {
        // Only a port as git would write it back (`String(p)`): git tells hosts apart by
        // their text, so `host:0443` and `host:+443` are other hosts than `host:443`, as for
        // git's credential-store (Int() read them all as port 443, one item for the three).
        guard let colon = host.lastIndex(of: ":"), !host[host.index(after: colon)...].isEmpty,
            let p = Int(host[host.index(after: colon)...]), (1...65535).contains(p),
            String(p) == host[host.index(after: colon)...]
        else { return (host, 0) }
        let name = String(host[..<colon])
        if name.contains(":") && !(name.hasPrefix("[") && name.hasSuffix("]")) { return (host, 0) }
        return (name, p)
    }

    /// The query for this credential; `exactPath` matches items without a path when git
    /// sent none.
    func query(accessGroup: String?, exactPath: Bool) -> Query {
        var a = ItemAttributes(
            accessGroup: accessGroup, server: server, protocol: `protocol`, port: port)
        if let path { a.path = path } else if exactPath { a.path = "" }
        if let username { a.account = username }
        return Query(.internetPassword, a, matchAll: true)
    }
}

/// A value git can read back: no CR, LF or NUL.
func safe(_ s: String) -> Bool { !s.utf8.contains(where: { $0 == 0 || $0 == 0x0A || $0 == 0x0D }) }

/// The secret an item keeps: the password, and the refresh token after a LF, as git's
/// credential-libsecret keeps it (a password git sends never holds a LF).
func packedSecret(password: String, refreshToken: String?) -> Data {
    Data(password.utf8) + (refreshToken.map { Data("\noauth_refresh_token=\($0)".utf8) } ?? Data())
}

/// An item's secret as the password and the refresh token kept after it (nil: not UTF-8).
/// Anything else after a LF is no packing of ours: the whole secret is the password (and
/// then not one git can read back).
func unpackedSecret(_ data: Data) -> (password: String, refreshToken: String?)? {
    let bytes = Array(data)
    guard let text = String(validating: bytes, as: UTF8.self) else { return nil }
    let mark = Array("\noauth_refresh_token=".utf8)
    guard let nl = bytes.firstIndex(of: 0x0A), bytes[nl...].starts(with: mark) else {
        return (text, nil)
    }
    let token = String(decoding: bytes[(nl + mark.count)...], as: UTF8.self)
    guard safe(token) else { return (text, nil) }
    return (String(decoding: bytes[..<nl], as: UTF8.self), token)
}

/// An item's `generic` as the JSON object the helper (or `keyring import`) keeps there; nil
/// when it holds none (an item `vaultctl item add` made).
func genericObject(of item: Item) -> JSONObject? {
    guard let g = item.attributes?.generic, let j = try? JSON.parse(Array(g)),
        case .object(let o) = j
    else { return nil }
    return o
}

/// What `generic` keeps (`password_expiry_utc`; also the refresh token, in items an earlier
/// helper stored).
func extras(_ generic: JSONObject?) -> [String: String] {
    // Only git's own field names, which are ASCII: nothing for canonical equivalence to merge.
    var out: [String: String] = [:]
    for (k, v) in generic ?? [:] where Credential.extraKeys.contains(k) { out[k] = v.stringValue }
    return out
}

/// Whether this helper stored the item: its `generic` is the helper's JSON object (an item
/// `vaultctl item add` made has none; one `keyring import` made keeps `secretService` there).
func isOwn(_ generic: JSONObject?) -> Bool {
    guard let o = generic else { return false }
    return o["secretService"] == nil
}

func matches(_ vault: Vault, _ c: Credential, group: String?, exactPath: Bool) throws -> [Item] {
    let query = c.query(accessGroup: group, exactPath: exactPath)
    do {
        // A match whose secret needs user presence: vaultd asks the user first (a polkit
        // prompt), so the read may take as long as they take; the attributes alone never do.
        let found = try vault.keychain.copyMatching(
            query, returnData: false, returnAttributes: true)
        if found.contains(where: { $0.attributes?.accessControl != nil }) {
            deadline.withLock {
                $0 = MonotonicClock.nanoseconds() + presenceDeadlineSeconds * 1_000_000_000
            }
        }
        return try vault.keychain.copyMatching(query, returnData: true, returnAttributes: true)
    } catch let e as VaultError where e.code == .itemNotFound {
        return []
    }
}

/// Whether a `password_expiry_utc` value lies in the past, read as git reads it
/// (`parse_timestamp`, base 10): leading digits; none, 0 or out of range mean no expiry.
func isExpired(_ value: String, now: Date = Date()) -> Bool {
    let digits = value.drop(while: { $0 == " " || $0 == "\t" }).prefix(while: {
        $0.isASCII && $0.isNumber
    })
    guard let t = UInt64(digits), t != 0 else { return false }
    return Double(t) < now.timeIntervalSince1970.rounded(.down)
}

func newestFirst(_ items: [Item]) -> [Item] {
    items.sorted {
        ($0.attributes?.modificationDate ?? .distantPast)
            > ($1.attributes?.modificationDate ?? .distantPast)
    }
}

func get(_ vault: Vault, _ c: Credential, group: String?) throws {
    // Without a path from git, an item stored without one wins; else any (newest first).
    var found = try matches(vault, c, group: group, exactPath: true)
    if found.isEmpty && c.path == nil {
        found = try matches(vault, c, group: group, exactPath: false)
    }
    for item in newestFirst(found) {
        guard let data = item.data, let (password, refreshToken) = unpackedSecret(data) else {
            continue
        }
        let username = item.attributes?.account ?? ""
        let generic = genericObject(of: item)
        var more = extras(generic)
        if let refreshToken { more["oauth_refresh_token"] = refreshToken }
        guard safe(password), safe(username), more.values.allSatisfy(safe) else { continue }
        // An expired password (an OAuth access token past its password_expiry_utc) is not
        // offered: git would send it (git before 2.41 does not know the field) or drop it
        // and not ask on (2.41 and later), either way hiding a valid older match.
        if let expiry = more["password_expiry_utc"], isExpired(expiry) { continue }
        var out = ""
        // An empty username git stored (`username=`, as from `https://@host/`) is given back:
        // without it git asks for a username (or, without a terminal, fails), while its
        // credential-store answers `username=`. An item this helper did not store (no
        // `generic` of ours) and without an account leaves the username to git, as before.
        if !username.isEmpty || isOwn(generic) { out += "username=\(username)\n" }
        out += "password=\(password)\n"
        for k in Credential.extraKeys { if let v = more[k] { out += "\(k)=\(v)\n" } }
        StandardOutput.write(Data(out.utf8))
        return
    }
}

func store(_ vault: Vault, _ c: Credential, group: String?) throws {
    // An empty password is one (git approves it, and its credential-store keeps it).
    guard let username = c.username, let password = c.password else { return }
    var attributes = ItemAttributes(
        accessGroup: group, server: c.server, protocol: c.protocol,
        port: c.port == 0 ? nil : c.port, path: c.path)
    attributes.account = username
    attributes.label =
        "git: \(c.protocol)://\(username)@\(c.server)\(c.port == 0 ? "" : ":\(c.port)")\(c.path.map { "/" + $0 } ?? "")"
    // The refresh token is a secret: it goes with the password, not in an attribute (which
    // `vaultctl item list --json` shows, and which only the metadata key encrypts).
    attributes.generic = Data(
        JSON.object(
            ExactDictionary(c.extras.filter { $0.key != "oauth_refresh_token" }).mapValues {
                JSON.string($0)
            }
        ).serialized())
    let secret = packedSecret(password: password, refreshToken: c.extras["oauth_refresh_token"])
    do {
        try vault.keychain.add(.internetPassword, attributes: attributes, data: secret)
    } catch let e as VaultError where e.code == .duplicateItem {
        var exact = c
        exact.username = username
        // Item by item: each keeps what else its `generic` holds, such as the record of the
        // keyring item `vaultctl keyring import` made it from (without it, the next import
        // would take the vault's item for another one and add the keyring's old password
        // beside it, under a made-up key); only the extras git sends are replaced.
        for item in try matches(vault, exact, group: group, exactPath: true) {
            guard let key = primaryKey(of: item) else { continue }
            var changes = ItemAttributes()
            changes.generic = merged(item, extras: c.extras)
            changes.label = attributes.label
            do {
                try vault.keychain.update(
                    Query(.internetPassword, key), attributes: changes, data: secret)
            } catch let e as VaultError where e.code == .itemNotFound {
                continue  // gone meanwhile
            }
        }
    }
}

/// An item's `generic` with the extras git keeps there replaced by `extras` (the refresh
/// token, a secret, never goes there); the rest of a JSON object is kept. Anything else is
/// no `generic` of ours or of an import's, and is replaced.
func merged(_ item: Item, extras: [String: String]) -> Data {
    var o = genericObject(of: item) ?? [:]  // byte-keyed: whatever else it holds is kept as it is
    for k in Credential.extraKeys { o[k] = nil }
    for (k, v) in extras where k != "oauth_refresh_token" { o[k] = .string(v) }
    return Data(JSON.object(o).serialized())
}

/// The whole primary key of an item (docs/keychain.md), to act on it alone.
func primaryKey(of item: Item) -> ItemAttributes? {
    guard let a = item.attributes else { return nil }
    var key = ItemAttributes(
        accessGroup: a.accessGroup, server: a.server ?? "", protocol: a.protocol ?? "",
        port: a.port ?? 0, path: a.path ?? "",
        authenticationType: a.authenticationType ?? "", securityDomain: a.securityDomain ?? "")
    key.account = a.account ?? ""
    key.synchronizable = a.synchronizable ?? false
    return key
}

func erase(_ vault: Vault, _ c: Credential, group: String?) throws {
    // The items git names, matched as get matches them and as git's credential-store erases:
    // protocol, host and port exactly; a path or username git does not send matches any (so
    // the credential get just offered from under a path can be rejected); and the password
    // when git gives one (so a credential changed meanwhile by another git is kept).
    for item in try matches(vault, c, group: group, exactPath: false) {
        // Byte for byte: a password differing only in Unicode normalisation is another
        // password to the server (Swift's != equates them), so that item is kept.
        if let p = c.password, item.data.flatMap(unpackedSecret)?.password.sameBytes(p) != true {
            continue
        }
        guard let key = primaryKey(of: item) else { continue }
        do {
            try vault.keychain.delete(Query(.internetPassword, key))
        } catch let e as VaultError where e.code == .itemNotFound {
            continue  // gone meanwhile
        }
    }
}

func main() -> Int32 {
    // Neither a core file nor a crash report holds the password git gave this helper. (Not
    // non-dumpable like vaultd: vaultd identifies a peer through its /proc/PID/exe, which a
    // non-dumpable process hides from a vaultd that is not root.)
    CrashOutput.keepSecretsOut()
    // Output goes through StandardOutput, as vaultctl's: a write that fails (a full disk) is
    // exit 1 and a line on stderr, never a crash, and a closed fd 0-2 cannot become the socket.
    StandardOutput.occupyClosedDescriptors()
    signal(SIGPIPE, SIG_IGN)
    let args = Array(CommandLine.arguments.dropFirst())
    let usage =
        "usage: git-credential-vault get|store|erase   (git runs it: credential.helper = vault)\n"
    if args == ["--help"] || args == ["-h"] {
        print(usage, terminator: "")
        return 0
    }
    guard args.count == 1 else {
        StandardOutput.writeError(usage)
        return ExitCode.usage.rawValue
    }
    // Any other operation is ignored, silently, as gitcredentials(7) asks of helpers (room
    // for operations git adds later).
    guard ["get", "store", "erase"].contains(args[0]) else { return 0 }
    let action = args[0]
    let fields: [String: String]
    do {
        // git sends a few short lines; 1 MiB is far past any credential (a helper fed an
        // endless stream must not grow without bound).
        guard let input = StandardOutput.readInput(limit: 1 << 20) else {
            StandardOutput.writeError(
                "git-credential-vault: cannot read standard input: \(String(cString: strerror(errno)))\n"
            )
            return 1
        }
        fields = try parseInput(input)
    } catch let e as Rejected {
        StandardOutput.writeError(
            "git-credential-vault: rejected: \(e.message); nothing \(action == "get" ? "returned" : "changed")\n"
        )
        return ExitCode.badInput.rawValue
    } catch {
        return 1
    }
    guard let credential = Credential(fields) else { return 0 }
    startDeadline(action)
    let vault: Vault
    do {
        vault = try Vault.connect()
        // A locked vault: nothing is read, stored or erased (exit 0: git asks the user
        // instead). `get` stays quiet, as without a helper; `store` and `erase` say in one line
        // on stderr that nothing was kept or removed, or a credential git was told is saved
        // would be missing at the next `get` without a word.
        guard try vault.status().lock.state == .unlocked else {
            lockedNotice(action)
            return 0
        }
    } catch let e as VaultError where e.code == .connectionFailed && action != "get" {
        // git shows a helper's stderr: the one line says the credential was not kept (or not
        // erased). Its message is the socket path and strerror, one line.
        let why = e.message.split(whereSeparator: \.isNewline).joined(separator: " ")
        StandardOutput.writeError(
            "git-credential-vault: \(action): vaultd is not reachable (\(why)); nothing \(action == "store" ? "stored" : "erased")\n"
        )
        return ExitCode.unavailable.rawValue
    } catch {
        return 0
    }
    let group = vault.launch.appID == nil ? ownerAccessGroup : nil
    do {
        switch action {
        case "get": try get(vault, credential, group: group)
        case "store": try store(vault, credential, group: group)
        default: try erase(vault, credential, group: group)
        }
    } catch let e as VaultError where e.code == .interactionNotAllowed {
        lockedNotice(action)  // locked meanwhile
        return 0
    } catch {
        StandardOutput.writeError("git-credential-vault: \(action): \(error)\n")
        return (error as? VaultError).map { ExitCode($0).rawValue } ?? ExitCode.failure.rawValue
    }
    return 0
}

/// The line `store` and `erase` print when the vault is locked (nothing for `get`).
func lockedNotice(_ action: String) {
    guard action != "get" else { return }
    let what = action == "store" ? "nothing stored" : "nothing erased"
    StandardOutput.writeError(
        "git-credential-vault: \(action): the vault is locked; \(what) (vaultctl unlock, then run the git command again)\n"
    )
}

// Output git could not be given (a full disk, a closed stdout) is exit 1 and a line on stderr.
StandardOutput.exit(main(), program: "git-credential-vault")
