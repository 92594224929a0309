import Foundation
import VaultProtocol

/// A stored preference value that does not decode: its bytes altered or damaged on disk (or
/// an earlier vaultd let in what today's checks refuse). Named by its domain and key, never
/// by anything it holds. Reported where it is met (docs/preferences.md, "Damaged values"):
/// a Get of its key is ValueDamaged; a domain's read, an export, a backup and `checkStore`
/// leave it out and name it, so the domain's other keys and every other domain still read.
public struct DamagedValue: Sendable, Equatable {
    public var domain: String
    public var key: String

    public init(domain: String, key: String) {
        // Clear columns of a damaged row: bounded in what they put in a reply or a log
        // (a domain name is at most 255 bytes, a key 1 KiB, when they were written).
        self.domain = Self.bounded(domain, PreferencesStore.maximumDomainNameLength)
        self.key = Self.bounded(key, PreferencesStore.maximumKeyLength)
    }

    private static func bounded(_ s: String, _ bytes: Int) -> String {
        s.utf8.count <= bytes ? s : String(decoding: s.utf8.prefix(bytes), as: UTF8.self)
    }

    /// `key "Volume" of domain com.example.app`, the key quoted as JSON (it may hold anything).
    public var description: String {
        "key \(JSON.string(key).text) of domain \(JSON.string(domain).text)"
    }

    /// What a ValueDamaged error says to do.
    static let advice =
        "write it again (defaults write), delete it (defaults delete DOMAIN KEY), or restore it from a backup; `vaultctl doctor` lists every damaged value"

    /// ValueDamaged for a read of this key.
    var failure: VaultFailure {
        VaultFailure(
            .valueDamaged,
            "the stored value of \(description) does not read (altered or damaged on disk): \(Self.advice)",
            .init(domain: domain, key: key))
    }
}

/// A domain's values as a read finds them: those that decode, and the keys of those that do
/// not (`DamagedValue`), sorted by their bytes.
public struct DomainValues: Sendable, Equatable {
    public var values: PlistDictionary = [:]
    public var damaged: [String] = []

    public init(values: PlistDictionary = [:], damaged: [String] = []) {
        self.values = values
        self.damaged = damaged
    }
}
