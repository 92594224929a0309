import Foundation
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// Typed access to a call's parameters; a missing or mistyped one throws
/// `org.varlink.service.InvalidParameter` naming it.
struct Parameters {
    let values: JSONObject

    private func present(_ name: String) -> JSON? {
        guard let v = values[name], !v.isNull else { return nil }
        return v
    }

    func string(_ name: String) throws -> String {
        guard let s = try optionalString(name) else {
            throw VaultError.invalidParameter(name, "missing")
        }
        return s
    }

    func optionalString(_ name: String) throws -> String? {
        guard let v = present(name) else { return nil }
        guard let s = v.stringValue else {
            throw VaultError.invalidParameter(name, "must be a string")
        }
        return s
    }

    func optionalBool(_ name: String) throws -> Bool? {
        guard let v = present(name) else { return nil }
        guard let b = v.boolValue else {
            throw VaultError.invalidParameter(name, "must be a boolean")
        }
        return b
    }

    func json(_ name: String) throws -> JSON {
        guard let v = present(name) else { throw VaultError.invalidParameter(name, "missing") }
        return v
    }

    func optionalJSON(_ name: String) -> JSON? { present(name) }

    /// The secret parameters `CallSecrets.parse` decoded from the message (nil: a call made
    /// some other way; its secrets are then in `values`).
    var secrets: CallSecrets?

    init(values: JSONObject, secrets: CallSecrets? = nil) {
        self.values = values
        self.secrets = secrets
    }

    /// A base64 parameter, in secure memory.
    func secret(_ name: String) throws -> SecureBytes {
        guard let s = try optionalSecret(name) else {
            throw VaultError.invalidParameter(name, "missing")
        }
        return s
    }

    func optionalSecret(_ name: String) throws -> SecureBytes? {
        if let decoded = secrets?.request[name] { return try decoded.get() }
        guard let text = try optionalString(name) else { return nil }
        var t = text
        return try t.withUTF8 { b in
            guard let s = SecureBytes.decodingBase64(b) else {
                throw VaultError.invalidParameter(name, "must be base64")
            }
            return s
        }
    }

    /// A UTF-8 passphrase parameter, in secure memory.
    func passphrase(_ name: String) throws -> SecureBytes? {
        if let decoded = secrets?.request[name] { return try decoded.get() }
        guard let text = try optionalString(name) else { return nil }
        return SecureBytes(copying: text.utf8)
    }

    func itemClass(_ name: String) throws -> ItemClass? {
        try optionalString(name).map { try ItemClass(wire: $0) }
    }
}

/// One call's secrets, kept out of every `String`, `Data` and `[UInt8]`: the secret
/// parameters, decoded from the message's bytes straight into secure memory (`parse`), and
/// the secrets the reply carries, written into it only as it is sent (`replyPlaceholder`,
/// `reply(substitutedInto:)`).
final class CallSecrets {
    enum Encoding {
        /// base64 (`sodium_base642bin`), as a keychain item's `data`.
        case base64
        /// The string's UTF-8, as a passphrase.
        case text
    }

    /// The secret parameters of each method (each declared as a string).
    static let parameters: [String: [String: Encoding]] = [
        VarlinkMethod.vaultInit.name: ["passphrase": .text],
        VarlinkMethod.vaultUnlock.name: ["passphrase": .text],
        VarlinkMethod.vaultChangePassphrase.name: ["old": .text, "new": .text],
        VarlinkMethod.vaultBackup.name: ["passphrase": .text],
        VarlinkMethod.vaultRestore.name: [
            "passphrase": .text, "identity": .text, "newPassphrase": .text,
        ],
        VarlinkMethod.keychainAdd.name: ["data": .base64],
        VarlinkMethod.keychainUpdate.name: ["data": .base64],
    ]
    /// Every name a secret parameter has, whatever the method (the parser does not know the
    /// method yet when it meets `parameters`).
    static let names: Set<String> = Set(parameters.values.flatMap(\.keys))

    /// The secret parameters given, decoded, or the error that says why one is not (not base64).
    private(set) var request: [String: Result<SecureBytes, VaultError>] = [:]

    /// The names of the secret parameters given: present in the call, as strings, though not
    /// in its `parameters` (`VarlinkValidation.callRefusal`).
    var names: VarlinkValidation.SecretNames {
        request.isEmpty ? [] : Set(request.keys.map { ExactString($0) })
    }

    /// The secrets to write into the reply, by their place-holder's number.
    private var replySecrets: [SecureBytes] = []
    /// 128 random bits in hex, drawn once per process, in every place-holder: an attribute
    /// value cannot be mistaken for one, since no peer ever sees the token (every
    /// place-holder is replaced before its reply is sent, or the reply is not sent). Drawn
    /// once, so a call costs no `getrandom`.
    private static let token: String = String(lowercaseHex: Sodium.randomBytes(16))
    /// `"vaultd.secret.TOKEN.`: what each place-holder starts with, its opening quote included.
    private static let quotedPrefix: [UInt8] = Array("\"vaultd.secret.\(token).".utf8)

    /// Parses a call's message (`JSON.parseCall`), decoding its secret parameters from
    /// `frame` into secure memory. A member that is a secret's name but not the method's
    /// secret goes into the call as the string it is. Throws as `VarlinkCall(json:)` and
    /// `JSON.parse`. The caller wipes `frame` afterwards.
    static func parse(_ frame: [UInt8]) throws -> (VarlinkCall, CallSecrets) {
        let secrets = CallSecrets()
        let call = try frame.withUnsafeBufferPointer { b -> VarlinkCall in
            let (parsed, raws) = try JSON.parseCall(b, rawMembers: names)
            var json = parsed
            let declared = json["method"]?.stringValue.flatMap { parameters[$0] } ?? [:]
            var others: JSONObject = [:]
            for raw in raws {
                let text = UnsafeBufferPointer(rebasing: b[raw.range])
                switch declared[raw.name] {
                case .text?:
                    secrets.request[raw.name] = .success(
                        raw.escaped
                            ? SecureBytes.unescapingJSONString(text) : SecureBytes(copying: text))
                case .base64?:
                    let unescaped = raw.escaped ? SecureBytes.unescapingJSONString(text) : nil
                    let decoded =
                        unescaped.map { u in
                            u.withUnsafeBytes {
                                SecureBytes.decodingBase64($0.bindMemory(to: UInt8.self))
                            }
                        }
                        ?? SecureBytes.decodingBase64(text)
                    secrets.request[raw.name] =
                        decoded.map { .success($0) }
                        ?? .failure(.invalidParameter(raw.name, "must be base64"))
                case nil:
                    var bytes = [UInt8](repeating: 0, count: text.count)
                    let n = bytes.withUnsafeMutableBufferPointer {
                        JSON.unescape(text, into: $0.baseAddress!)
                    }
                    others[raw.name] = .string(String(decoding: bytes[..<n], as: UTF8.self))
                }
            }
            if !others.isEmpty, case .object(var o) = json, case .object(var p)? = o["parameters"] {
                for (k, v) in others { p[k] = v }
                o["parameters"] = .object(p)
                json = .object(o)
            }
            return try VarlinkCall(json: json)
        }
        return (call, secrets)
    }

    /// What the reply carries in place of `secret` until it is sent: a string that
    /// `reply(substitutedInto:)` replaces with the secret's base64.
    func replyPlaceholder(for secret: SecureBytes) -> JSON {
        replySecrets.append(secret)
        return .string("vaultd.secret.\(Self.token).\(replySecrets.count - 1)")
    }

    var carriesReplySecrets: Bool { !replySecrets.isEmpty }

    /// `reply` (a serialized reply holding this call's place-holders) with each place-holder
    /// replaced by its secret's base64 and a NUL after it: built in secure memory, so the
    /// secrets never reach memory that is freed unwiped. Nil when `reply` holds none.
    func reply(substitutedInto reply: [UInt8]) -> SecureBytes? {
        guard !replySecrets.isEmpty else { return nil }
        let prefix = Self.quotedPrefix
        // The place-holders in `reply`: where each starts and ends (its quotes included) and its number.
        var found: [(range: Range<Int>, secret: Int)] = []
        reply.withUnsafeBufferPointer { r in
            var i = 0
            while i + prefix.count <= r.count {
                // The next '"' (memchr), then whether the prefix starts there (memcmp).
                guard let quote = memchr(r.baseAddress! + i, Int32(UInt8(ascii: "\"")), r.count - i)
                else { break }
                let start = r.baseAddress!.distance(to: quote.assumingMemoryBound(to: UInt8.self))
                guard start + prefix.count <= r.count,
                    memcmp(r.baseAddress! + start, prefix, prefix.count) == 0
                else {
                    i = start + 1
                    continue
                }
                var j = start + prefix.count
                var n = 0
                while j < r.count, r[j] >= UInt8(ascii: "0"), r[j] <= UInt8(ascii: "9") {
                    n = n * 10 + Int(r[j] - UInt8(ascii: "0"))
                    j += 1
                }
                if j < r.count, r[j] == UInt8(ascii: "\""), n < replySecrets.count {
                    found.append((start..<(j + 1), n))
                }
                i = j
            }
        }
        var size = reply.count + 1
        for f in found {
            size += SecureBytes.base64Length(of: replySecrets[f.secret].count) + 2 - f.range.count
        }
        let out = SecureBytes(count: size)
        out.withUnsafeMutableBytes { o in
            reply.withUnsafeBytes { r in
                var from = 0
                var to = 0
                func copy(_ range: Range<Int>) {
                    o.baseAddress!.advanced(by: to).copyMemory(
                        from: r.baseAddress! + range.lowerBound, byteCount: range.count)
                    to += range.count
                }
                for f in found {
                    copy(from..<f.range.lowerBound)
                    o[to] = UInt8(ascii: "\"")
                    let secret = replySecrets[f.secret]
                    secret.writeBase64(to: o.baseAddress! + to + 1)
                    to += SecureBytes.base64Length(of: secret.count) + 1
                    o[to] = UInt8(ascii: "\"")
                    to += 1
                    from = f.range.upperBound
                }
                copy(from..<r.count)
                o[to] = 0
            }
        }
        return out
    }
}
