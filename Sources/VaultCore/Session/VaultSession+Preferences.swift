import Foundation
import VaultProtocol

/// Preferences (UserDefaults), as the session's caller may use them: a nil domain is the
/// caller's own (the owner must name one).
extension VaultSession {
    /// One key; see `Vault.preference`.
    public func preference(domain: String?, key: String, reply: ReplyReserving? = nil) throws
        -> PlistValue?
    {
        try vault.preference(domain: domain, key: key, caller: caller, reply: reply)
    }

    /// Every key that reads; see `Vault.preferenceDomain`.
    public func preferenceDomain(_ domain: String?, reply: ReplyReserving? = nil) throws
        -> PlistDictionary
    {
        try vault.preferenceDomain(domain, caller: caller, reply: reply)
    }

    /// The values that read and the keys of those that do not; see
    /// `Vault.preferenceDomainReportingDamage`.
    public func preferenceDomainReportingDamage(_ domain: String?, reply: ReplyReserving? = nil)
        throws -> DomainValues
    {
        try vault.preferenceDomainReportingDamage(domain, caller: caller, reply: reply)
    }

    /// The stored domains the caller may read.
    public func preferenceDomains() throws -> [String] {
        try vault.preferenceDomains(caller: caller)
    }

    /// See `Vault.setPreference`.
    @discardableResult
    public func setPreference(domain: String?, key: String, value: PlistValue) throws -> UInt64 {
        try vault.setPreference(domain: domain, key: key, value: value, caller: caller)
    }

    /// See `Vault.removePreference`.
    @discardableResult
    public func removePreference(domain: String?, key: String) throws -> UInt64 {
        try vault.removePreference(domain: domain, key: key, caller: caller)
    }

    /// See `Vault.removeDomain`.
    public func removeDomain(_ domain: String?) throws -> Int {
        try vault.removeDomain(domain, caller: caller)
    }

    /// See `Vault.importDomain(_:plist:caller:)`.
    public func importDomain(_ domain: String?, plist: Data) throws -> Int {
        try vault.importDomain(domain, plist: plist, caller: caller)
    }

    /// See `Vault.importDomain(_:values:caller:)`.
    public func importDomain(_ domain: String?, values: PlistDictionary) throws -> Int {
        try vault.importDomain(domain, values: values, caller: caller)
    }

    /// See `Vault.exportDomain`.
    public func exportDomain(
        _ domain: String?, format: PropertyListCodec.Format, reply: ReplyReserving? = nil
    ) throws -> Data {
        try vault.exportDomain(domain, format: format, caller: caller, reply: reply)
    }

    /// See `Vault.exportDomainReportingDamage`.
    public func exportDomainReportingDamage(
        _ domain: String?, format: PropertyListCodec.Format, reply: ReplyReserving? = nil
    ) throws -> (plist: Data, damaged: [String]) {
        try vault.exportDomainReportingDamage(domain, format: format, caller: caller, reply: reply)
    }
}
