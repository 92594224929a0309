/// The object paths of vaultd's Secret Service, as the specification names them:
/// `/org/freedesktop/secrets` (the service), `.../collection/GROUP` (an access group),
/// `.../collection/GROUP/ID` (an item: its `account`), `.../aliases/NAME`, `.../session/ID`,
/// `.../prompt/ID`. A path element holds only `[A-Za-z0-9_]`, so a group or item ID is
/// written with every other byte, and `_`, as `_` and two lowercase hex digits (`encode`).
/// A damaged item whose ID does not read (it is in its attributes) is
/// `.../collection/GROUP/damaged_itemROW`, by its row id: `_i` is no escape `encode` writes,
/// so that element is never an item ID's.
enum SecretServicePath: Equatable {
    case service
    case collection(String)
    case item(collection: String, id: String)
    /// A damaged item of the collection, by its row id (`items.id`).
    case damaged(collection: String, row: Int64)
    case alias(String)
    case session(String)
    case prompt(String)
    /// A path under the service that is no object (`.../collection` itself).
    case inner

    static let root = "/org/freedesktop/secrets"
    static let collectionRoot = root + "/collection"
    static let aliasRoot = root + "/aliases"
    static let sessionRoot = root + "/session"
    static let promptRoot = root + "/prompt"
    /// The aliases every caller has: both name its default access group.
    static let aliases = ["default", "login"]
    /// The start of a damaged item's path element (its row id follows, in decimal).
    static let damagedPrefix = "damaged_item"

    /// Reads an object path; nil for one outside the service or one no element decodes.
    init?(_ path: String) {
        if path == Self.root {
            self = .service
            return
        }
        guard let parts = Self.elements(path) else { return nil }
        switch (parts.first, parts.count) {
        case ("collection", 1), ("aliases", 1), ("session", 1), ("prompt", 1): self = .inner
        case ("collection", 2):
            guard let g = Self.decode(parts[1]) else { return nil }
            self = .collection(g)
        case ("collection", 3):
            guard let g = Self.decode(parts[1]) else { return nil }
            if parts[2].hasPrefix(Self.damagedPrefix) {
                let digits = parts[2].dropFirst(Self.damagedPrefix.count)
                // Decimal as `path` writes it: no sign, no leading zero (one damaged item has
                // one path, as every object has).
                guard !digits.isEmpty, digits.count <= 18, digits.first != "0" || digits == "0",
                    digits.allSatisfy({ $0.isASCII && $0.isNumber }), let row = Int64(digits)
                else { return nil }
                self = .damaged(collection: g, row: row)
                return
            }
            guard let id = Self.decode(parts[2]) else { return nil }
            self = .item(collection: g, id: id)
        case ("aliases", 2): self = .alias(parts[1])
        case ("session", 2): self = .session(parts[1])
        case ("prompt", 2): self = .prompt(parts[1])
        default: return nil
        }
    }

    /// The elements of `path` under `root + "/"` (empty ones too), nil for a path outside it
    /// or with more than three: no object of the service is deeper. Split on the bytes: a
    /// path is ASCII, and this runs for every call.
    private static func elements(_ path: String) -> [String]? {
        let bytes = Array(path.utf8)
        let prefix = rootElementPrefix
        guard bytes.count >= prefix.count, bytes[..<prefix.count].elementsEqual(prefix) else {
            return nil
        }
        var parts: [String] = []
        var start = prefix.count
        for i in prefix.count...bytes.count where i == bytes.count || bytes[i] == UInt8(ascii: "/")
        {
            guard parts.count < 3 else { return nil }
            parts.append(String(decoding: bytes[start..<i], as: UTF8.self))
            start = i + 1
        }
        return parts
    }
    private static let rootElementPrefix = Array((root + "/").utf8)

    var path: String {
        switch self {
        case .service: Self.root
        case .collection(let g): Self.collectionRoot + "/" + Self.encode(g)
        case .item(let g, let id):
            Self.collectionRoot + "/" + Self.encode(g) + "/" + Self.encode(id)
        case .damaged(let g, let row):
            Self.collectionRoot + "/" + Self.encode(g) + "/" + Self.damagedPrefix + String(row)
        case .alias(let a): Self.aliasRoot + "/" + Self.encode(a)
        case .session(let s): Self.sessionRoot + "/" + s
        case .prompt(let p): Self.promptRoot + "/" + p
        case .inner: Self.root
        }
    }

    /// A string as a path element: ASCII letters and digits as they are, every other byte as
    /// `_XX`; "" as "_".
    static func encode(_ s: String) -> String {
        if s.isEmpty { return "_" }
        let hex = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(s.utf8.count)
        for b in s.utf8 {
            if (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) {
                out.append(b)
            } else {
                out += [UInt8(ascii: "_"), hex[Int(b >> 4)], hex[Int(b & 15)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// `encode`'s inverse; nil for an element it does not make (or bytes that are not UTF-8).
    static func decode(_ element: String) -> String? {
        if element == "_" { return "" }
        // No element is empty (`encode` writes "" as "_").
        if element.isEmpty { return nil }
        var out: [UInt8] = []
        var it = Array(element.utf8)[...]
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case 0x30...0x39: c - 0x30
            case 0x61...0x66: c - 0x61 + 10
            default: nil
            }
        }
        while let c = it.popFirst() {
            if c == UInt8(ascii: "_") {
                guard let h = it.popFirst().flatMap(nibble), let l = it.popFirst().flatMap(nibble)
                else { return nil }
                let b = h << 4 | l
                // Only what `encode` escapes: an escaped letter or digit is another spelling.
                if (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
                {
                    return nil
                }
                out.append(b)
            } else if (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A)
                || (c >= 0x61 && c <= 0x7A)
            {
                out.append(c)
            } else {
                return nil
            }
        }
        return String(validating: out, as: UTF8.self)
    }
}
