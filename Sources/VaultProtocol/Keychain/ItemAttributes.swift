import Foundation

/// Keychain item classes (kSecClass).
public enum ItemClass: String, CaseIterable, Sendable {
    /// kSecClassGenericPassword: primary key service + account.
    case genericPassword
    /// kSecClassInternetPassword: primary key server, protocol, port, path, account,
    /// authenticationType, securityDomain.
    case internetPassword

    /// Parses the wire name. Throws `VaultError` Param for anything else.
    public init(wire: String) throws {
        self = try .named(
            wire, "unknown item class '\(wire)': use genericPassword or internetPassword")
    }
}

extension RawRepresentable where RawValue == String {
    /// The case whose wire name is `wire`; `VaultError` Param saying `unknown` otherwise.
    static func named(_ wire: String, _ unknown: @autoclosure () -> String) throws -> Self {
        guard let c = Self(rawValue: wire) else { throw VaultError.param(unknown()) }
        return c
    }
}

/// kSecAttrAccessible: when an item's secret can be read (docs/keychain.md).
public enum Accessibility: String, CaseIterable, Sendable {
    /// Only while unlocked; migrates with the data dir. The default.
    case whenUnlocked
    /// From the first unlock until vaultd stops; migrates.
    case afterFirstUnlock
    /// Only while unlocked; bound to this device's `device.key`.
    case whenUnlockedThisDeviceOnly
    /// From the first unlock; bound to this device.
    case afterFirstUnlockThisDeviceOnly
    /// Only while unlocked and only while the vault has a passphrase; deleted when it is
    /// removed. Added to a vault without one: AuthFailed (-25293).
    case whenPasscodeSetThisDeviceOnly

    /// Bound to this device's `device.key` (a moved data directory reads such items as
    /// NotAvailableOnThisDevice, -25291); never synchronizable (Param, -50).
    public var isThisDeviceOnly: Bool {
        switch self {
        case .whenUnlocked, .afterFirstUnlock: false
        default: true
        }
    }

    /// Usable from the first unlock until vaultd stops, rather than only while unlocked.
    public var isAfterFirstUnlock: Bool {
        self == .afterFirstUnlock || self == .afterFirstUnlockThisDeviceOnly
    }

    /// Parses the wire name. The deprecated `always`/`alwaysThisDeviceOnly` and unknown
    /// names throw `VaultError` Param.
    public init(wire: String) throws {
        if wire.hasPrefix("always") {
            throw VaultError.param(
                "accessibility '\(wire)' is deprecated and not supported; use afterFirstUnlock")
        }
        guard let a = Accessibility(rawValue: wire) else {
            throw VaultError.param("unknown accessibility '\(wire)'")
        }
        self = a
    }
}

/// kSecAttrAccessControl: what an item's secret requires beyond its accessibility before it
/// is handed out (Apple's `SecAccessControlCreateWithFlags`; docs/keychain.md, "User
/// presence"). Only the attributes are read without it: searching is not gated.
public enum AccessControl: String, CaseIterable, Sendable {
    /// `.userPresence`: the user proves presence through polkit (the session's agent: a
    /// password, a fingerprint, a security key, whatever its PAM stack offers) before each
    /// release of the secret, spared within `PresenceGraceSeconds` for the same process.
    case userPresence

    /// Parses the wire name. Anything else throws `VaultError` Param.
    public init(wire: String) throws {
        self = try .named(wire, "unknown access control '\(wire)': the one value is userPresence")
    }
}

/// An item's attributes (kSecAttr…), or, in a query, the attributes to match: an absent
/// (nil) attribute matches anything. Strings compare byte-exactly and case-sensitively.
/// An item's attributes, serialized as JSON, take at most 64 KiB (more: Param, -50).
/// Internet-password attributes on a generic password, or `service` on an internet
/// password, are Param in Add and Update; a query naming one finds only items of its class.
public struct ItemAttributes: Equatable, Sendable {
    /// kSecAttrService: generic passwords; part of their primary key (absent: "").
    public var service: String?
    /// kSecAttrAccount: part of both classes' primary key (absent: "").
    public var account: String?
    /// kSecAttrLabel: a user-visible name.
    public var label: String?
    /// kSecAttrComment.
    public var comment: String?
    /// kSecAttrDescription: the kind of item.
    public var description: String?
    /// kSecAttrGeneric: application data (base64 on the wire).
    public var generic: Data?
    /// kSecAttrAccessGroup. Add without it: the caller's default group
    /// (`LaunchInfo.defaultAccessGroup`); a group not the caller's: MissingEntitlement
    /// (-34018); "": Param. A query without it searches every group the caller may use.
    public var accessGroup: String?
    /// kSecAttrAccessible. Add without it: `whenUnlocked`.
    public var accessible: Accessibility?
    /// kSecAttrSynchronizable: part of the primary key (absent: false); such items sync
    /// between the owner's devices once sync is set up (docs/sync.md). In a query nil matches
    /// both, unlike SecItem (where absent means false).
    public var synchronizable: Bool?
    /// kSecAttrAccessControl: nil, none beyond `accessible`. Set by Add or by Update (which
    /// cannot take it away: an absent attribute changes nothing, so an item keeps its access
    /// control for life); an item with one cannot be synchronizable (Param, as SecItem's
    /// "item with kSecAttrAccessControl is not synchronizable"). In a query it matches exactly.
    public var accessControl: AccessControl?
    /// kSecAttrServer: internet passwords; part of their primary key (absent: "").
    public var server: String?
    /// kSecAttrProtocol, e.g. "https": internet passwords; primary key (absent: "").
    public var `protocol`: String?
    /// kSecAttrPort, 0...65535 (otherwise Param): internet passwords; primary key (absent: 0).
    public var port: Int?
    /// kSecAttrPath: internet passwords; primary key (absent: "").
    public var path: String?
    /// kSecAttrAuthenticationType, e.g. "default": internet passwords; primary key (absent: "").
    public var authenticationType: String?
    /// kSecAttrSecurityDomain: internet passwords; primary key (absent: "").
    public var securityDomain: String?
    /// The Secret Service's content type of the secret (`text/plain; charset=utf8`,
    /// `application/octet-stream`), as its client gave it: kept with the item and given back
    /// with its secret. At most `maximumContentTypeBytes`.
    public var contentType: String?
    /// kSecAttrCreationDate: set by vaultd on Add; ignored in Add and Update input; in a
    /// query it matches exactly (to the bit, as stored).
    public var creationDate: Date?
    /// kSecAttrModificationDate: set by vaultd on Add and each Update; otherwise as
    /// `creationDate`.
    public var modificationDate: Date?
    /// The Secret Service's lookup attributes (org.freedesktop.Secret.Item `Attributes`): any
    /// names and values, byte for byte; encrypted with the other attributes, and indexed by a
    /// keyed hash per name and value, for exact matching only. In a query, an item matches
    /// when it has every pair the query names (an empty map: every item that has a map).
    /// At most `maximumLookupAttributes` pairs.
    public var lookupAttributes: ExactDictionary<String>?

    /// The most lookup attributes an item or query may name.
    public static let maximumLookupAttributes = 64

    public init(
        service: String? = nil, account: String? = nil, label: String? = nil,
        comment: String? = nil,
        description: String? = nil, generic: Data? = nil, accessGroup: String? = nil,
        accessible: Accessibility? = nil, synchronizable: Bool? = nil, server: String? = nil,
        protocol: String? = nil, port: Int? = nil, path: String? = nil,
        authenticationType: String? = nil,
        securityDomain: String? = nil
    ) {
        self.service = service
        self.account = account
        self.label = label
        self.comment = comment
        self.description = description
        self.generic = generic
        self.accessGroup = accessGroup
        self.accessible = accessible
        self.synchronizable = synchronizable
        self.server = server
        self.protocol = `protocol`
        self.port = port
        self.path = path
        self.authenticationType = authenticationType
        self.securityDomain = securityDomain
    }

    /// The string-valued attributes; the raw value is the wire name. Read and written through
    /// `self[attribute]`, a switch (key paths cost a runtime lookup per access, and every
    /// item a lookup matches, encodes or decodes goes through each attribute).
    public enum StringAttribute: String, CaseIterable, Sendable {
        case service, account, label, comment, description, accessGroup, server, `protocol`, path,
            authenticationType, securityDomain, contentType
    }

    /// The most bytes of a content type.
    public static let maximumContentTypeBytes = 1024

    /// The value of a string-valued attribute.
    public subscript(_ attribute: StringAttribute) -> String? {
        get {
            switch attribute {
            case .service: service
            case .account: account
            case .label: label
            case .comment: comment
            case .description: description
            case .accessGroup: accessGroup
            case .server: server
            case .protocol: `protocol`
            case .path: path
            case .authenticationType: authenticationType
            case .securityDomain: securityDomain
            case .contentType: contentType
            }
        }
        set {
            switch attribute {
            case .service: service = newValue
            case .account: account = newValue
            case .label: label = newValue
            case .comment: comment = newValue
            case .description: description = newValue
            case .accessGroup: accessGroup = newValue
            case .server: server = newValue
            case .protocol: `protocol` = newValue
            case .path: path = newValue
            case .authenticationType: authenticationType = newValue
            case .securityDomain: securityDomain = newValue
            case .contentType: contentType = newValue
            }
        }
    }

    /// The string-valued attributes that may only appear on internet passwords (so may `port`).
    public static let internetStringAttributes: [StringAttribute] = [
        .server, .protocol, .path, .authenticationType, .securityDomain,
    ]

    /// The attributes that may only appear on internet passwords.
    public var hasInternetAttributes: Bool {
        port != nil || Self.internetStringAttributes.contains { self[$0] != nil }
    }

    /// A port as kSecAttrPort takes it: an integer in 0...65535. Throws Param otherwise.
    public static func checkedPort(_ p: Int?) throws -> Int {
        guard let p, (0...65535).contains(p) else {
            throw VaultError.param("attribute 'port' must be an integer in 0...65535")
        }
        return p
    }

    /// True when every attribute set in `query` has the same value here (SecItem matching).
    public func matches(_ query: ItemAttributes) -> Bool {
        for k in StringAttribute.allCases {
            if let q = query[k], !(self[k]?.sameBytes(q) ?? false) {
                return false
            }
        }
        if let g = query.generic, generic != g { return false }
        if let a = query.accessible, accessible != a { return false }
        if let s = query.synchronizable, (synchronizable ?? false) != s { return false }
        if let c = query.accessControl, accessControl != c { return false }
        // Only internet passwords have a port (stored as 0 when absent): a query naming one,
        // 0 included, never matches a generic password.
        if let p = query.port, port != p { return false }
        // The dates are read-only but searchable (kSecAttrCreationDate): exact, as stored.
        if let d = query.creationDate, creationDate != d { return false }
        if let d = query.modificationDate, modificationDate != d { return false }
        if let wanted = query.lookupAttributes {
            guard let have = lookupAttributes else { return false }
            for (k, v) in wanted where !(have[k]?.sameBytes(v) ?? false) { return false }
        }
        return true
    }

    /// Overwrites every attribute set in `changes` (SecItemUpdate's attributesToUpdate);
    /// the dates are left alone.
    public mutating func apply(_ changes: ItemAttributes) {
        for k in StringAttribute.allCases where changes[k] != nil { self[k] = changes[k] }
        if let g = changes.generic { generic = g }
        if let a = changes.accessible { accessible = a }
        if let s = changes.synchronizable { synchronizable = s }
        if let c = changes.accessControl { accessControl = c }
        if let p = changes.port { port = p }
        // The whole map, as the Secret Service's `Attributes` property is set.
        if let l = changes.lookupAttributes { lookupAttributes = l }
    }

    /// The wire form (the `Attributes` type of io.vaultd.Keychain); absent attributes are omitted.
    public var json: JSON {
        // Room for the attributes set, made at once: growing from empty would rehash a
        // stored item's attributes several times, and room for all 19 would cost a query of
        // two attributes more than the rest of its serialization.
        var count = 0
        for k in StringAttribute.allCases where self[k] != nil { count += 1 }
        if generic != nil { count += 1 }
        if accessible != nil { count += 1 }
        if synchronizable != nil { count += 1 }
        if accessControl != nil { count += 1 }
        if port != nil { count += 1 }
        if creationDate != nil { count += 1 }
        if modificationDate != nil { count += 1 }
        if lookupAttributes != nil { count += 1 }
        var o = JSONObject(minimumCapacity: count)
        for k in StringAttribute.allCases {
            if let v = self[k] { o[k.rawValue] = .string(v) }
        }
        if let g = generic { o["generic"] = .string(g.base64EncodedString()) }
        if let a = accessible { o["accessible"] = .string(a.rawValue) }
        if let s = synchronizable { o["synchronizable"] = .bool(s) }
        if let c = accessControl { o["accessControl"] = .string(c.rawValue) }
        if let p = port { o["port"] = JSON(p) }
        if let d = creationDate { o["creationDate"] = .string(PlistDate.format(d)) }
        if let d = modificationDate { o["modificationDate"] = .string(PlistDate.format(d)) }
        if let l = lookupAttributes { o["lookupAttributes"] = .object(l.mapValues { .string($0) }) }
        return .object(o)
    }

    /// Parses the wire form. Unknown attribute names, wrong types, a port outside 0...65535,
    /// bad base64, an unknown or deprecated accessibility, an unknown access control, or a date that is not ISO 8601 UTC
    /// in years 0 to 9999 throw `VaultError` Param (-50). Dates are read
    /// (they are vaultd's, and the engine ignores them on input).
    public init(json: JSON?) throws {
        self.init()
        guard let json, !json.isNull else { return }
        guard case .object(let o) = json else {
            throw VaultError.param("attributes must be an object")
        }
        for (name, value) in o {
            try set(name, value, attribute: Self.attributesByName[name]?.attribute)
        }
    }

    /// Parses the wire form from its bytes (a JSON object), as `init(json:)` parses the
    /// object, without building it first: the engine reads every candidate item's stored
    /// attributes so on each lookup. Throws `JSONSyntaxError` for bytes that are
    /// not one JSON object, and what `init(json:)` throws (Param also for a name given twice).
    public init(jsonObject bytes: [UInt8]) throws {
        self.init()
        var seen: UInt32 = 0
        try JSON.parseMembers(bytes) { name, value in
            let named = Self.attributesByName[name]
            if let bit = named?.bit {
                guard seen & bit == 0 else {
                    throw VaultError.param("attribute '\(name)' is given twice")
                }
                seen |= bit
            }
            try set(name, value, attribute: named?.attribute)
        }
    }

    /// Sets `attribute` (nil: an unknown one), named `name`, from its wire value; null sets nothing.
    private mutating func set(_ name: String, _ value: JSON, attribute: Attribute?) throws {
        if value.isNull { return }
        switch attribute {
        case .string(let k)?:
            guard let s = value.stringValue else {
                throw VaultError.param("attribute '\(name)' must be a string")
            }
            if k == .contentType && s.utf8.count > Self.maximumContentTypeBytes {
                throw VaultError.param(
                    "attribute 'contentType' takes at most \(Self.maximumContentTypeBytes) bytes")
            }
            self[k] = s
        case .generic?:
            guard let s = value.stringValue, let d = Data(base64Encoded: s) else {
                throw VaultError.param("attribute 'generic' must be base64")
            }
            generic = d
        case .accessible?:
            guard let s = value.stringValue else {
                throw VaultError.param("attribute 'accessible' must be a string")
            }
            accessible = try Accessibility(wire: s)
        case .synchronizable?:
            guard let b = value.boolValue else {
                throw VaultError.param("attribute 'synchronizable' must be a boolean")
            }
            synchronizable = b
        case .accessControl?:
            guard let s = value.stringValue else {
                throw VaultError.param("attribute 'accessControl' must be a string")
            }
            accessControl = try AccessControl(wire: s)
        case .port?:
            port = try Self.checkedPort(value.intValue)
        case .creationDate?:
            creationDate = try Self.date(name, value)
        case .modificationDate?:
            modificationDate = try Self.date(name, value)
        case .lookupAttributes?:
            guard case .object(let o) = value else {
                throw VaultError.param("attribute 'lookupAttributes' must be an object of strings")
            }
            guard o.count <= Self.maximumLookupAttributes else {
                throw VaultError.param("at most \(Self.maximumLookupAttributes) lookup attributes")
            }
            var map = ExactDictionary<String>(minimumCapacity: o.count)
            for (k, v) in o {
                guard let s = v.stringValue else {
                    throw VaultError.param("lookup attribute values must be strings")
                }
                map[k] = s
            }
            lookupAttributes = map
        case nil:
            throw VaultError.param("unknown attribute '\(name)'")
        }
    }

    private static func date(_ name: String, _ value: JSON) throws -> Date {
        guard let s = value.stringValue, let d = PlistDate.parse(s) else {
            throw VaultError.param("attribute '\(name)' must be an ISO 8601 date")
        }
        return d
    }

    /// An attribute, by its wire name.
    private enum Attribute {
        case string(StringAttribute)
        case generic, accessible, synchronizable, accessControl, port, creationDate,
            modificationDate, lookupAttributes
    }

    /// Every attribute by its wire name: one hash per name, where matching a name against a
    /// `switch` of strings would compare it with each case in turn (and vaultd parses every
    /// candidate's attributes on each lookup).
    /// Each with a bit of its own, by which `init(jsonObject:)` tells a repeated name.
    private static let attributesByName: [String: (attribute: Attribute, bit: UInt32)] = {
        let others: [(String, Attribute)] = [
            ("generic", .generic), ("accessible", .accessible), ("synchronizable", .synchronizable),
            ("accessControl", .accessControl), ("port", .port),
            ("creationDate", .creationDate), ("modificationDate", .modificationDate),
            ("lookupAttributes", .lookupAttributes),
        ]
        let all = StringAttribute.allCases.map { ($0.rawValue, Attribute.string($0)) } + others
        var names: [String: (attribute: Attribute, bit: UInt32)] = [:]
        for (i, (name, attribute)) in all.enumerated() { names[name] = (attribute, 1 << UInt32(i)) }
        return names
    }()
}
