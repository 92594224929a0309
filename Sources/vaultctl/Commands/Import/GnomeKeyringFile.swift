import CGcrypt
import Foundation
// Fuzz/run.sh compiles this file into its keyring target, against VaultProtocol.
import VaultProtocol

/// gnome-keyring's keyring files (`~/.local/share/keyrings/NAME.keyring`), read without a
/// running gnome-keyring. Two formats, as gnome-keyring's sources write them:
/// - the encrypted one (pkcs11/secret-store/gkm-secret-binary.c; `binary`), for a keyring
///   with a password;
/// - the plain one (gkm-secret-textual.c, a GKeyFile; `KeyringTextFile`), for a keyring
///   whose password is empty.
/// Every length and count in a file is bounded by the bytes that remain and by the caps
/// below before it is used: a hostile file gets an error, never a crash or a huge allocation.
struct KeyringFile {
    struct Item {
        /// The item's number in the keyring (its object path's last element).
        var id: UInt32
        /// gnome-keyring's compatibility item type (0 generic, 1 network password, ...).
        var type: UInt32
        var label: String
        var secret: [UInt8]
        /// Seconds since 1970.
        var created: UInt64
        var modified: UInt64
        /// Every attribute; a uint32 attribute as its decimal digits (as gnome-keyring shows it).
        var attributes: ExactDictionary<String>

        /// The item's schema as gnome-keyring reports it: its `xdg:schema` attribute, else
        /// the name of its compatibility type (`gkm_secret_compat_format_item_type`).
        var schema: String {
            attributes["xdg:schema"] ?? KeyringFile.typeNames[type] ?? KeyringFile.genericSchema
        }
    }

    var label: String
    var encrypted: Bool
    var items: [Item]

    static let genericSchema = "org.freedesktop.Secret.Generic"
    /// gnome-keyring's compatibility item types and the schemas it names them by.
    static let typeNames: [UInt32: String] = [
        0: genericSchema, 1: "org.gnome.keyring.NetworkPassword", 2: "org.gnome.keyring.Note",
        3: "org.gnome.keyring.ChainedKeyring", 4: "org.gnome.keyring.EncryptionKey",
        0x100: "org.gnome.keyring.PkStorage",
    ]

    /// The encrypted format's first 16 bytes.
    static let magic: [UInt8] = Array("GnomeKeyring\n\r\u{0}\n".utf8)

    /// A file no keyring is that large: gnome-keyring holds its keyrings in memory.
    static let maximumFileBytes = 64 << 20
    /// More items or attributes than any keyring holds; the remaining bytes bound them too.
    static let maximumItems = 1 << 20
    static let maximumAttributes = 4096
    /// gnome-keyring writes 1000 to 1999 iterations; a file asking for billions of SHA-256
    /// rounds would hold the command for minutes.
    static let maximumIterations: UInt32 = 1_000_000

    enum Failure: Error, CustomStringConvertible {
        case notAKeyring
        case wrongPassword
        case damaged(String)
        case unsupported(String)

        var description: String {
            switch self {
            case .notAKeyring:
                return
                    "is not a gnome-keyring keyring file (neither \"GnomeKeyring\" encrypted nor a plain [keyring] file)"
            case .wrongPassword:
                return "the password does not open this keyring (or the file is damaged)"
            case .damaged(let why): return "is damaged: \(why)"
            case .unsupported(let why): return "uses \(why), which this reader does not know"
            }
        }
    }

    /// Whether `bytes` are the encrypted format (else, perhaps, the plain one).
    static func isEncrypted(_ bytes: [UInt8]) -> Bool {
        bytes.count >= magic.count && Array(bytes[0..<magic.count]) == magic
    }

    /// Reads the encrypted format with `password` (the keyring's, as typed; empty for none).
    static func binary(_ bytes: [UInt8], password: [UInt8]) throws -> KeyringFile {
        guard isEncrypted(bytes) else { throw Failure.notAKeyring }
        var r = ByteReader(bytes, from: magic.count)
        let (major, minor, crypto, hash) = (try r.byte(), try r.byte(), try r.byte(), try r.byte())
        guard major == 0, minor == 0 else { throw Failure.unsupported("format \(major).\(minor)") }
        guard crypto == 0, hash == 0 else {
            throw Failure.unsupported("cipher \(crypto) and hash \(hash) (only 0: AES, MD5)")
        }
        let label = try r.string("the keyring's name") ?? ""
        _ = try r.time()  // created
        _ = try r.time()  // modified
        _ = try r.uint32()  // flags: lock on idle, lock after
        _ = try r.uint32()  // lock timeout
        let iterations = try r.uint32()
        guard iterations >= 1, iterations <= maximumIterations else {
            throw Failure.damaged("\(iterations) hash iterations")
        }
        let salt = try r.bytes(8)
        for _ in 0..<4 { _ = try r.uint32() }  // reserved
        // The items' ids and types, and their attributes hashed (not needed: the encrypted
        // part holds them in clear).
        let count = try r.count(of: "items", cap: maximumItems, minimumBytesEach: 12)
        var header: [(id: UInt32, type: UInt32)] = []
        for _ in 0..<count {
            header.append((try r.uint32(), try r.uint32()))
            _ = try readAttributes(&r)
        }
        let size = Int(try r.uint32())
        guard size >= 16, size % 16 == 0, size <= r.remaining else {
            throw Failure.damaged("its encrypted part is \(size) bytes of \(r.remaining) left")
        }
        var plain = try KeyringFileCrypto.decrypt(
            Array(try r.bytes(size)), password: password, salt: Array(salt),
            iterations: Int(iterations))
        defer { plain.wipe() }
        // The first 16 bytes are the MD5 of the rest: a wrong password gives other bytes.
        guard KeyringFileCrypto.md5(plain[16...]) == Array(plain[0..<16]) else {
            throw Failure.wrongPassword
        }
        return KeyringFile(
            label: label, encrypted: true, items: try items(decrypted: plain, header: header))
    }

    /// The items of the decrypted part (after its 16-byte MD5), one for each of the
    /// header's ids and types, in order.
    static func items(decrypted plain: [UInt8], header: [(id: UInt32, type: UInt32)]) throws
        -> [Item]
    {
        var p = ByteReader(plain, from: 16)
        var items: [Item] = []
        for (id, type) in header {
            items.append(try readItem(&p, id: id, type: type))
        }
        return items
    }

    /// One item of the encrypted part: label, secret, times, reserved fields, attributes, ACL.
    private static func readItem(_ p: inout ByteReader, id: UInt32, type: UInt32) throws -> Item {
        let label = try p.string("an item's label") ?? ""
        let secret = try p.byteArray("an item's secret") ?? []
        let created = try p.time()
        let modified = try p.time()
        _ = try p.string("an item's reserved string")
        for _ in 0..<4 { _ = try p.uint32() }
        let attributes = try readAttributes(&p)
        // The access control list of gnome-keyring 2 (kept by gnome-keyring, unused).
        let acl = try p.count(of: "ACL entries", cap: maximumAttributes, minimumBytesEach: 20)
        for _ in 0..<acl {
            _ = try p.uint32()
            for what in ["name", "path", "reserved"] { _ = try p.string("an ACL's \(what)") }
            _ = try p.uint32()
        }
        return Item(
            id: id, type: type, label: label, secret: secret, created: created,
            modified: modified, attributes: attributes)
    }

    /// A list of attributes: name, type (0 string, 1 uint32), value.
    private static func readAttributes(_ r: inout ByteReader) throws -> ExactDictionary<String> {
        let n = try r.count(of: "attributes", cap: maximumAttributes, minimumBytesEach: 12)
        var out = ExactDictionary<String>()
        for _ in 0..<n {
            let name = try r.string("an attribute's name") ?? ""
            switch try r.uint32() {
            case 0: out[name] = try r.string("an attribute's value") ?? ""
            case 1: out[name] = String(try r.uint32())
            case let t: throw Failure.damaged("attribute type \(t)")
            }
        }
        return out
    }
}

/// Big-endian fields of a keyring file, each checked against the bytes that remain.
struct ByteReader {
    let bytes: [UInt8]
    private(set) var offset: Int
    var remaining: Int { bytes.count - offset }

    init(_ bytes: [UInt8], from offset: Int) {
        self.bytes = bytes
        self.offset = min(offset, bytes.count)
    }

    mutating func bytes(_ n: Int) throws -> ArraySlice<UInt8> {
        guard n >= 0, n <= remaining else {
            throw KeyringFile.Failure.damaged(
                "it ends early (\(n) bytes wanted, \(remaining) left)")
        }
        defer { offset += n }
        return bytes[offset..<(offset + n)]
    }

    mutating func byte() throws -> UInt8 { try bytes(1).first! }

    mutating func uint32() throws -> UInt32 {
        try bytes(4).reduce(0) { $0 << 8 | UInt32($1) }
    }

    /// A time: two uint32s, high then low (seconds since 1970).
    mutating func time() throws -> UInt64 {
        UInt64(try uint32()) << 32 | UInt64(try uint32())
    }

    /// A count of things that each take at least `minimumBytesEach` bytes: bounded by the
    /// bytes that remain and by `cap`.
    mutating func count(of what: String, cap: Int, minimumBytesEach: Int) throws -> Int {
        let n = Int(try uint32())
        guard n <= cap, n <= remaining / minimumBytesEach else {
            throw KeyringFile.Failure.damaged("it claims \(n) \(what), more than it can hold")
        }
        return n
    }

    /// A length-prefixed byte string; 0xffffffff is none (nil).
    mutating func byteArray(_ what: String) throws -> [UInt8]? {
        let n = try uint32()
        if n == 0xffff_ffff { return nil }
        guard n < 0x7fff_ffff, Int(n) <= remaining else {
            throw KeyringFile.Failure.damaged("\(what) is \(n) bytes, past the end")
        }
        return Array(try bytes(Int(n)))
    }

    /// A length-prefixed UTF-8 string without NUL (as gnome-keyring reads one).
    mutating func string(_ what: String) throws -> String? {
        guard let b = try byteArray(what) else { return nil }
        guard !b.contains(0), let s = String(validating: b, as: UTF8.self) else {
            throw KeyringFile.Failure.damaged("\(what) is not UTF-8 text")
        }
        return s
    }
}

/// The encrypted format's cryptography, all through libgcrypt: the key and IV derived as
/// gnome-keyring's `egg_symkey_generate_simple` does for AES-128 with SHA-256 (one pass:
/// SHA-256 of password then salt, hashed again `iterations - 1` times; the key is the
/// digest's first 16 bytes, the IV its last 16), AES-128-CBC, and MD5 for the check.
enum KeyringFileCrypto {
    static func decrypt(_ ciphertext: [UInt8], password: [UInt8], salt: [UInt8], iterations: Int)
        throws -> [UInt8]
    {
        guard cg_gcrypt_init() == 1 else {
            throw KeyringFile.Failure.unsupported("a libgcrypt that would not initialise")
        }
        var seed = password + salt
        var digest = sha256(seed)
        seed.wipe()
        var next = [UInt8](repeating: 0, count: 32)
        for _ in 1..<max(iterations, 1) {
            gcry_md_hash_buffer(Int32(GCRY_MD_SHA256.rawValue), &next, digest, digest.count)
            swap(&digest, &next)
        }
        defer {
            digest.wipe()
            next.wipe()
        }
        var h: gcry_cipher_hd_t?
        guard
            gcry_cipher_open(
                &h, Int32(GCRY_CIPHER_AES.rawValue), Int32(GCRY_CIPHER_MODE_CBC.rawValue), 0)
                == 0
        else { throw KeyringFile.Failure.unsupported("AES-128, which libgcrypt refused") }
        defer { gcry_cipher_close(h) }
        var out = ciphertext
        let ok = digest.withUnsafeBufferPointer { d in
            gcry_cipher_setkey(h, d.baseAddress, 16) == 0
                && gcry_cipher_setiv(h, d.baseAddress! + 16, 16) == 0
                && out.withUnsafeMutableBytes {
                    gcry_cipher_decrypt(h, $0.baseAddress, $0.count, nil, 0)
                } == 0
        }
        guard ok else {
            out.wipe()
            throw KeyringFile.Failure.damaged("its encrypted part does not decrypt")
        }
        return out
    }

    static func sha256(_ input: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        gcry_md_hash_buffer(Int32(GCRY_MD_SHA256.rawValue), &out, input, input.count)
        return out
    }

    static func md5(_ input: ArraySlice<UInt8>) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 16)
        input.withUnsafeBufferPointer {
            gcry_md_hash_buffer(Int32(GCRY_MD_MD5.rawValue), &out, $0.baseAddress, $0.count)
        }
        return out
    }
}
