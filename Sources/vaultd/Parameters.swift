import Foundation
import VaultCore
import VaultProtocol

/// Typed access to a call's parameters; a missing or mistyped one throws
/// `org.varlink.service.InvalidParameter` naming it.
struct Parameters {
    let values: JSONObject

    private func present(_ name: String) -> JSON? {
        guard let v = values[name], !v.isNull else { return nil }
        return v
    }

    func string(_ name: String) throws -> String {
        guard let s = try optionalString(name) else { throw VaultError.invalidParameter(name, "missing") }
        return s
    }

    func optionalString(_ name: String) throws -> String? {
        guard let v = present(name) else { return nil }
        guard let s = v.stringValue else { throw VaultError.invalidParameter(name, "must be a string") }
        return s
    }

    func optionalBool(_ name: String) throws -> Bool? {
        guard let v = present(name) else { return nil }
        guard let b = v.boolValue else { throw VaultError.invalidParameter(name, "must be a boolean") }
        return b
    }

    func json(_ name: String) throws -> JSON {
        guard let v = present(name) else { throw VaultError.invalidParameter(name, "missing") }
        return v
    }

    func optionalJSON(_ name: String) -> JSON? { present(name) }

    /// A base64 parameter decoded straight into secure memory.
    func secret(_ name: String) throws -> SecureBytes {
        guard let s = try optionalSecret(name) else { throw VaultError.invalidParameter(name, "missing") }
        return s
    }

    func optionalSecret(_ name: String) throws -> SecureBytes? {
        guard let text = try optionalString(name) else { return nil }
        guard var bytes = Data(base64Encoded: text).map(Array.init) else {
            throw VaultError.invalidParameter(name, "must be base64")
        }
        defer { bytes.wipe() }
        return SecureBytes(copying: bytes)
    }

    /// A UTF-8 passphrase parameter in secure memory.
    func passphrase(_ name: String) throws -> SecureBytes? {
        guard let text = try optionalString(name) else { return nil }
        return SecureBytes(copying: text.utf8)
    }

    func itemClass(_ name: String) throws -> ItemClass? {
        try optionalString(name).map { try ItemClass(wire: $0) }
    }
}
