import Foundation
import VaultProtocol

/// The age v1 file format (https://age-encryption.org/v1, C2SP's age specification), as
/// the `age` tool reads and writes it: a text header of recipient stanzas wrapping a random
/// 16-byte file key, authenticated by HMAC-SHA-256 under a key derived from it, then the
/// payload in STREAM form (ChaCha20-Poly1305 over 64 KiB chunks, the last one flagged).
///
/// Recipients: `scrypt` (a passphrase; it must be the file's only stanza) and `X25519` (an
/// `age1…` public key). Everything read is bounded before use: the header's size and stanza
/// count, each line's length, and scrypt's work factor (`Identity.passphrase`'s maximum),
/// so a hostile file can cost neither minutes nor gigabytes.
public enum Age {
    /// The work factor (log2 of scrypt's N) files are written with: age's own default,
    /// 256 MiB and about a second.
    public static let defaultWorkFactor = 18
    /// The largest work factor a file is opened with by default: 512 MiB and a couple of
    /// seconds. age itself goes up to 22 (4 GiB).
    public static let maximumWorkFactor = 19
    /// The header may be at most this long (64 KiB) and hold this many stanzas.
    static let maximumHeaderSize = 64 << 10
    static let maximumStanzas = 64
    /// Plaintext bytes per payload chunk.
    static let chunkSize = 64 << 10
    static let fileKeyLength = 16
    static let intro = Array("age-encryption.org/v1\n".utf8)

    /// Whom a file is encrypted to.
    public enum Recipient {
        /// A passphrase, through scrypt at `workFactor` (log2 N).
        case passphrase(SecureBytes, workFactor: Int = Age.defaultWorkFactor)
        /// An X25519 public key (32 bytes; `parseRecipient` reads `age1…`).
        case x25519([UInt8])
    }

    /// What a file is opened with.
    public enum Identity {
        /// A passphrase; a scrypt stanza over `maximumWorkFactor` is refused unopened.
        case passphrase(SecureBytes, maximumWorkFactor: Int = Age.maximumWorkFactor)
        /// An X25519 secret key (32 bytes; `parseIdentities` reads `AGE-SECRET-KEY-1…`).
        case x25519(SecureBytes)
    }

    /// Why a file does not open.
    public struct Failure: Error, Equatable, CustomStringConvertible {
        public enum Kind: Equatable, Sendable {
            /// Not an age v1 file, or its header is malformed (or over the limits).
            case malformed
            /// No identity opens any stanza: the wrong passphrase or key.
            case noMatch
            /// A scrypt stanza costs more than the identity allows.
            case workFactorTooLarge
            /// The header's MAC is wrong, or a payload chunk does not authenticate: the file
            /// was altered.
            case altered
            /// The payload ends before its last chunk.
            case truncated
        }
        public var kind: Kind
        public var message: String
        public var description: String { message }
        init(_ kind: Kind, _ message: String) {
            self.kind = kind
            self.message = message
        }
    }

    // MARK: keys in text

    /// The X25519 public key of an `age1…` recipient. Throws Param when it is not one.
    public static func parseRecipient(_ text: String) throws -> [UInt8] {
        guard let (hrp, data) = Bech32.decode(Array(text.utf8)), hrp == "age", data.count == 32,
            text == text.lowercased()
        else {
            throw VaultFailure.param("'\(text.prefix(80))' is not an age X25519 recipient (age1…)")
        }
        return data
    }

    /// The `age1…` text of an X25519 public key.
    public static func recipientText(_ publicKey: [UInt8]) -> String {
        Bech32.encode(hrp: "age", publicKey)
    }

    /// The X25519 secret keys in an identity file's text (as `age-keygen` writes it: lines
    /// of `AGE-SECRET-KEY-1…`, comments starting with `#`, blank lines). Throws Param when a
    /// line is none of those, or when there is no key.
    public static func parseIdentities(_ text: SecureBytes) throws -> [SecureBytes] {
        var keys: [SecureBytes] = []
        try text.withUnsafeBytes { raw in
            let bytes = raw.bindMemory(to: UInt8.self)
            var start = 0
            var lineNumber = 0
            while start < bytes.count {
                let end = bytes[start...].firstIndex(of: 0x0A) ?? bytes.count
                lineNumber += 1
                var line = Array(bytes[start..<end])
                defer { line.wipe() }
                if line.last == 0x0D { line.removeLast() }
                start = end + 1
                if line.isEmpty || line.first == UInt8(ascii: "#") { continue }
                guard var (hrp, data) = Bech32.decode(line), hrp == "age-secret-key-",
                    data.count == 32
                else {
                    throw VaultFailure.param(
                        "line \(lineNumber) of the identity file is not an age identity (AGE-SECRET-KEY-1…)"
                    )
                }
                keys.append(SecureBytes(copying: data))
                data.wipe()
                hrp = ""
            }
        }
        guard !keys.isEmpty else {
            throw VaultFailure.param("the identity file holds no age identity (AGE-SECRET-KEY-1…)")
        }
        return keys
    }

    /// The `AGE-SECRET-KEY-1…` text of an X25519 secret key, in secure memory (for tests
    /// and key generation).
    public static func identityText(_ secret: SecureBytes) -> SecureBytes {
        var data = secret.withUnsafeBytes { Array($0) }
        defer { data.wipe() }
        var text = Array(Bech32.encode(hrp: "age-secret-key-", data).uppercased().utf8)
        defer { text.wipe() }
        return SecureBytes(copying: text)
    }

    // MARK: base64 (RFC 4648 standard alphabet, no padding, canonical)

    static func base64(_ bytes: [UInt8]) -> String {
        var s = Data(bytes).base64EncodedString()
        while s.hasSuffix("=") { s.removeLast() }
        return s
    }

    /// Decodes unpadded base64, refusing any non-canonical text (padding, stray bits, other
    /// characters), as age does.
    static func unbase64(_ text: Substring) -> [UInt8]? {
        guard text.count % 4 != 1, !text.contains("=") else { return nil }
        let padded = String(text) + String(repeating: "=", count: (4 - text.count % 4) % 4)
        guard let d = Data(base64Encoded: padded) else { return nil }
        let bytes = [UInt8](d)
        return base64(bytes) == text ? bytes : nil
    }

    // MARK: encrypting

    /// `plaintext` encrypted to `recipients` as an age v1 file, in memory (`Age.Writer`
    /// streams one to a file). Throws as `Writer.init` does.
    public static func encrypt(_ plaintext: SecureBytes, to recipients: [Recipient]) throws
        -> [UInt8]
    {
        var out: [UInt8] = []
        let writer = try Writer(to: recipients) { out.append(contentsOf: $0) }
        try plaintext.withUnsafeBytes { try writer.write($0) }
        try writer.finish()
        return out
    }

    /// The header of a file whose `fileKey` is wrapped for each of `recipients`, up to and
    /// including its MAC line. Throws Param for a set of recipients age refuses (none, or a
    /// passphrase beside another recipient), and InternalError when scrypt cannot allocate
    /// its memory.
    static func header(wrapping fileKey: SecureBytes, for recipients: [Recipient]) throws
        -> [UInt8]
    {
        guard !recipients.isEmpty else { throw VaultFailure.param("no recipient to encrypt to") }
        let hasPassphrase = recipients.contains { if case .passphrase = $0 { true } else { false } }
        if hasPassphrase && recipients.count > 1 {
            throw VaultFailure.param(
                "a passphrase must be a file's only recipient (as age requires)")
        }
        var header = intro
        for r in recipients {
            let (type, args, body) = try stanza(wrapping: fileKey, for: r)
            header += Array(("-> " + ([type] + args).joined(separator: " ") + "\n").utf8)
            let text = base64(body)
            var i = text.startIndex
            // Lines of 64 columns; the last is shorter, empty when the body fills the one before.
            while true {
                let j = text.index(i, offsetBy: 64, limitedBy: text.endIndex) ?? text.endIndex
                header += Array(text[i..<j].utf8) + [0x0A]
                if text.distance(from: i, to: j) < 64 { break }
                i = j
            }
        }
        header += Array("---".utf8)
        let mac = headerMAC(header[...], fileKey: fileKey)
        header += Array((" " + base64(mac) + "\n").utf8)
        return header
    }

    /// HMAC-SHA-256 of the header bytes `macked` (up to and including `---`) under the key
    /// HKDF derives from the file key.
    static func headerMAC(_ macked: ArraySlice<UInt8>, fileKey: SecureBytes) -> [UInt8] {
        let macKey = AgePrimitives.hkdf(ikm: fileKey, salt: [], info: "header")
        let mac = macked.withUnsafeBytes { h in
            macKey.withUnsafeBytes { Sodium.hmacSHA256(key: $0, [h]) }
        }
        return mac.withUnsafeBytes { Array($0) }
    }

    private static func stanza(wrapping fileKey: SecureBytes, for r: Recipient) throws -> (
        String, [String], [UInt8]
    ) {
        switch r {
        case .passphrase(let passphrase, let workFactor):
            precondition(workFactor > 0 && workFactor < 64)
            let salt = Sodium.randomBytes(16)
            let key = try AgePrimitives.scrypt(
                passphrase: passphrase, salt: Array("age-encryption.org/v1/scrypt".utf8) + salt,
                logN: workFactor)
            return (
                "scrypt", [base64(salt), String(workFactor)],
                AgePrimitives.seal(fileKey, key: key, nonce: zeroNonce)
            )
        case .x25519(let recipient):
            guard recipient.count == 32 else {
                throw VaultFailure.param("an X25519 recipient is 32 bytes")
            }
            let ephemeral = SecureBytes.random(count: 32)
            let share = AgePrimitives.x25519Public(of: ephemeral)
            guard let shared = AgePrimitives.x25519(ephemeral, recipient) else {
                throw VaultFailure.param("the X25519 recipient is a low-order point")
            }
            let key = AgePrimitives.hkdf(
                ikm: shared, salt: share + recipient, info: "age-encryption.org/v1/X25519")
            return (
                "X25519", [base64(share)], AgePrimitives.seal(fileKey, key: key, nonce: zeroNonce)
            )
        }
    }

    private static let zeroNonce = [UInt8](repeating: 0, count: 12)

    /// STREAM's nonce: the chunk counter, 11 bytes big-endian, then 1 for the last chunk, else 0.
    static func chunkNonce(_ counter: UInt64, last: Bool) -> [UInt8] {
        var n = [UInt8](repeating: 0, count: 12)
        for i in 0..<8 { n[10 - i] = UInt8(truncatingIfNeeded: counter >> (8 * UInt64(i))) }
        n[11] = last ? 1 : 0
        return n
    }

    // MARK: decrypting

    struct Stanza {
        var type: String
        var args: [String]
        var body: [UInt8]
    }

    /// The header's stanzas, the bytes its MAC covers, its MAC, and where the payload starts.
    static func parseHeader(_ file: [UInt8]) throws -> (
        stanzas: [Stanza], macked: Int, mac: [UInt8], payload: Int
    ) {
        func malformed(_ why: String) -> Failure {
            Failure(.malformed, "not an age file, or its header is damaged: \(why)")
        }
        guard file.count >= intro.count, Array(file[..<intro.count]) == intro else {
            throw Failure(
                .malformed, "not an age v1 file (it does not start with age-encryption.org/v1)")
        }
        var at = intro.count
        /// The next line without its LF; throws when there is none within the header's limit.
        func line() throws -> Substring {
            let limit = min(file.count, maximumHeaderSize)
            guard at < limit, let nl = file[at..<limit].firstIndex(of: 0x0A) else {
                throw malformed(
                    file.count > maximumHeaderSize
                        ? "the header is over \(maximumHeaderSize) bytes"
                        : "it ends inside the header")
            }
            let bytes = file[at..<nl]
            guard bytes.allSatisfy({ $0 >= 0x20 && $0 <= 0x7E }) else {
                throw malformed("a header line holds a byte that is not printable ASCII")
            }
            at = nl + 1
            return Substring(String(decoding: bytes, as: UTF8.self))
        }
        var stanzas: [Stanza] = []
        while true {
            let lineStart = at
            let l = try line()
            if l.hasPrefix("---") {
                guard l.hasPrefix("--- "), let mac = unbase64(l.dropFirst(4)), mac.count == 32
                else { throw malformed("a bad MAC line") }
                return (stanzas, lineStart + 3, mac, at)
            }
            guard l.hasPrefix("-> ") else {
                throw malformed("a line that is neither a stanza nor the MAC")
            }
            let args = l.dropFirst(3).split(separator: " ", omittingEmptySubsequences: false)
            guard !args.isEmpty, args.allSatisfy({ !$0.isEmpty }) else {
                throw malformed("a stanza with an empty argument")
            }
            guard stanzas.count < maximumStanzas else {
                throw malformed("more than \(maximumStanzas) stanzas")
            }
            var body: [UInt8] = []
            while true {
                let b = try line()
                guard b.count <= 64, let decoded = unbase64(b) else {
                    throw malformed(
                        "a stanza body line that is not canonical base64 of at most 64 columns")
                }
                body += decoded
                if b.count < 64 { break }
            }
            stanzas.append(
                Stanza(type: String(args[0]), args: args.dropFirst().map(String.init), body: body))
        }
    }

    /// The file key one of `identities` unwraps from `stanzas`, or a Failure.
    static func unwrap(_ stanzas: [Stanza], _ identities: [Identity]) throws -> SecureBytes {
        let scrypt = stanzas.filter { $0.type == "scrypt" }
        if !scrypt.isEmpty && stanzas.count > 1 {
            throw Failure(
                .malformed, "the file's header is damaged: a scrypt stanza must be its only one")
        }
        var sawPassphraseFile = false
        for identity in identities {
            for s in stanzas {
                switch (identity, s.type) {
                case (.passphrase(let passphrase, let maximum), "scrypt"):
                    sawPassphraseFile = true
                    guard s.args.count == 2, let salt = unbase64(Substring(s.args[0])),
                        salt.count == 16,
                        let logN = Int(s.args[1]), String(logN) == s.args[1], logN > 0, logN < 64,
                        s.body.count == 32
                    else {
                        throw Failure(
                            .malformed, "the file's header is damaged: a bad scrypt stanza")
                    }
                    guard logN <= maximum else {
                        throw Failure(
                            .workFactorTooLarge,
                            "the file's scrypt work factor is \(logN) (\(1 << (logN - 10)) MiB); at most \(maximum) is accepted"
                        )
                    }
                    let key = try AgePrimitives.scrypt(
                        passphrase: passphrase,
                        salt: Array("age-encryption.org/v1/scrypt".utf8) + salt, logN: logN)
                    if let fileKey = AgePrimitives.open(s.body, key: key, nonce: zeroNonce) {
                        return fileKey
                    }
                case (.x25519(let secret), "X25519"):
                    guard s.args.count == 1, let share = unbase64(Substring(s.args[0])),
                        share.count == 32, s.body.count == 32
                    else {
                        throw Failure(
                            .malformed, "the file's header is damaged: a bad X25519 stanza")
                    }
                    guard let shared = AgePrimitives.x25519(secret, share) else {
                        throw Failure(
                            .malformed, "the file's header is damaged: an X25519 share of low order"
                        )
                    }
                    let key = AgePrimitives.hkdf(
                        ikm: shared, salt: share + AgePrimitives.x25519Public(of: secret),
                        info: "age-encryption.org/v1/X25519")
                    if let fileKey = AgePrimitives.open(s.body, key: key, nonce: zeroNonce) {
                        return fileKey
                    }
                default:
                    continue
                }
            }
        }
        if sawPassphraseFile {
            throw Failure(.noMatch, "the passphrase does not open this file (wrong passphrase)")
        }
        if !scrypt.isEmpty {
            throw Failure(.noMatch, "this file is encrypted with a passphrase, not to a key")
        }
        throw Failure(
            .noMatch,
            "no identity given opens this file (it was encrypted to another key, or with a passphrase)"
        )
    }

    /// Opens an age v1 file in memory with the first of `identities` that unwraps its file
    /// key, checks its header MAC and every payload chunk, and returns the plaintext in
    /// secure memory (`Age.Reader` streams one from a file). `maximumSize`: the plaintext may
    /// be at most this many bytes. Throws `Failure`, or InternalError when scrypt cannot
    /// allocate its memory.
    public static func decrypt(
        _ file: [UInt8], with identities: [Identity], maximumSize: Int = Int.max
    ) throws -> SecureBytes {
        var at = 0
        let reader = try Reader(
            source: { out in
                let n = min(out.count, file.count - at)
                file.withUnsafeBytes {
                    out.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[at..<(at + n)]))
                }
                at += n
                return n
            }, identities: identities, maximumSize: maximumSize)
        let plain = SecureWriter()
        let chunk = SecureBytes(count: chunkSize)
        while true {
            let n = try chunk.withUnsafeMutableBytes { try reader.read(into: $0) }
            if n == 0 { break }
            chunk.withUnsafeBytes { plain.append(UnsafeRawBufferPointer(rebasing: $0[..<n])) }
        }
        return plain.finish()
    }
}
