/// Varlink message types (https://varlink.org/Method-Call): a call `{"method", "parameters",
/// "oneway", "more", "upgrade"}` and a reply `{"parameters", "continues", "error"}`.
public enum Varlink {
    /// One message, including its NUL terminator, may not exceed this (8 MiB).
    public static let maximumMessageSize = 8 << 20
}

/// A method call as it arrives from a client.
public struct VarlinkCall: Sendable, Equatable {
    /// Fully-qualified method name, e.g. `io.vaultd.Keychain.Add`.
    public var method: String
    public var parameters: JSONObject
    /// The caller wants no reply.
    public var oneway: Bool
    /// The caller accepts several replies (`continues: true` on all but the last).
    public var more: Bool
    /// The caller asks for the connection to be taken over by another protocol once the
    /// method has replied. No method of vaultd does that: vaultd refuses such a call with
    /// InvalidParameter `upgrade`, and the connection stays a varlink one.
    public var upgrade: Bool

    public init(
        method: String, parameters: JSONObject = [:], oneway: Bool = false, more: Bool = false,
        upgrade: Bool = false
    ) {
        self.method = method
        self.parameters = parameters
        self.oneway = oneway
        self.more = more
        self.upgrade = upgrade
    }

    /// The interface part of `method` (everything before the last dot).
    public var interface: String {
        guard let dot = method.lastIndex(of: ".") else { return "" }
        return String(method[..<dot])
    }

    /// Decodes a call from one frame's JSON. Throws `VaultError.invalidParameter` for a
    /// message that is JSON but not a call.
    public init(json: JSON) throws {
        guard case .object(let o) = json else {
            throw VaultError.invalidParameter("message", "a call must be an object")
        }
        guard let method = o["method"]?.stringValue, !method.isEmpty else {
            throw VaultError.invalidParameter("method", "missing or not a string")
        }
        var parameters: JSONObject = [:]
        switch o["parameters"] {
        case nil, .null?: break
        case .object(let p)?: parameters = p
        default: throw VaultError.invalidParameter("parameters", "must be an object")
        }
        func flag(_ name: String) throws -> Bool {
            switch o[name] {
            case nil, .null?: return false
            case .bool(let b)?: return b
            default: throw VaultError.invalidParameter(name, "must be a boolean")
            }
        }
        // Other members are refused, except vendor extensions, which varlink requires to be
        // objects named in reverse-domain notation ("com.example.trace": {...}).
        // The first such member in sorted order is named (sorted only then: every call passes here).
        let members = ["method", "parameters", "oneway", "more", "upgrade"]
        func isExtension(_ key: String, _ value: JSON) -> Bool {
            key.contains(".") && value.objectValue != nil
        }
        if o.contains(where: { !members.contains($0.key) && !isExtension($0.key, $0.value) }) {
            for (key, value) in o.sortedByKey()
            where !members.contains(key) && !isExtension(key, value) {
                throw VaultError.invalidParameter(key, "not a member of a varlink call")
            }
        }
        self.init(
            method: method, parameters: parameters, oneway: try flag("oneway"),
            more: try flag("more"), upgrade: try flag("upgrade"))
    }

    public var json: JSON {
        var o: JSONObject = ["method": .string(method)]
        if !parameters.isEmpty { o["parameters"] = .object(parameters) }
        if oneway { o["oneway"] = true }
        if more { o["more"] = true }
        if upgrade { o["upgrade"] = true }
        return .object(o)
    }
}

/// A reply: either parameters or an error, and whether more replies follow.
public struct VarlinkReply: Sendable, Equatable {
    public var parameters: JSONObject
    /// More replies to the same call follow.
    public var continues: Bool
    /// Fully-qualified error name, when the reply is an error.
    public var error: String?

    public init(parameters: JSONObject = [:], continues: Bool = false, error: String? = nil) {
        self.parameters = parameters
        self.continues = continues
        self.error = error
    }

    public init(error: VaultError) {
        self.init(parameters: error.parameters, error: error.name)
    }

    /// The reply member (a vendor extension, varlink.org/Method-Call) that carries an error's
    /// parameters its interface does not declare: the human `message` of the standard
    /// org.varlink.service errors, whose declarations (`ExpectedMore ()`,
    /// `InvalidParameter (parameter: string)`, ...) vaultd cannot extend.
    public static let extensionMember = "io.vaultd"

    public init(json: JSON) throws {
        guard case .object(let o) = json else {
            throw VaultError.protocolViolation("a reply must be an object")
        }
        parameters = o["parameters"]?.objectValue ?? [:]
        continues = o["continues"]?.boolValue ?? false
        error = o["error"]?.stringValue
        if error != nil, let extra = o[Self.extensionMember]?.objectValue {
            parameters.merge(extra) { declared, _ in declared }
        }
    }

    /// An error's parameters are those its interface declares; the others go to
    /// `extensionMember` (an error no served interface declares is sent as it is).
    public var json: JSON {
        var o: JSONObject = ["parameters": .object(parameters)]
        if continues { o["continues"] = true }
        if let error {
            o["error"] = .string(error)
            if let declared = VarlinkInterfaces.errorParameters[error],
                parameters.keys.contains(where: { !declared.contains($0) })
            {
                o["parameters"] = .object(parameters.filter { declared.contains($0.key) })
                o[Self.extensionMember] = .object(parameters.filter { !declared.contains($0.key) })
            }
        }
        return .object(o)
    }

    /// The error this reply carries, if it is one.
    public var vaultError: VaultError? {
        guard let error else { return nil }
        return VaultError(name: error, parameters: parameters)
    }
}
