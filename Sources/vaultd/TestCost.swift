import VaultCore

/// The passphrase KDF's cost for tests (docs/configuration.md, docs/development.md):
/// `VAULTD_ARGON2_TEST_COST=min` derives every key-encryption key at libsodium's MIN Argon2id
/// limits (`PassphrasePolicy.fromEnvironment`), so a suite that makes hundreds of vaults does
/// not spend a second and 256 MiB on each.
///
/// Only debug builds honour it: a release vaultd (what `scripts/setup` installs) started with
/// it set to anything but the empty string stops, so no environment of a production vaultd
/// can lower what guessing a passphrase costs. (Empty, it asks for the real cost, which a
/// release build always has.)
enum TestCost {
    static let variable = "VAULTD_ARGON2_TEST_COST"

    struct Refused: Error, CustomStringConvertible { var description: String }

    /// The passphrase policy the environment asks for. Throws for a value other than `min`
    /// or empty, and in a release build for any value but empty.
    static func policy(from env: [String: String]) throws -> PassphrasePolicy {
        #if DEBUG
        do {
            return try PassphrasePolicy.fromEnvironment(env)
        } catch let e as VaultFailure {
            throw Refused(description: e.message)
        }
        #else
        if let value = env[variable], !value.isEmpty {
            throw Refused(
                description:
                    "\(variable) is for tests, and only debug builds of vaultd honour it; this one is a release build: unset it"
            )
        }
        return PassphrasePolicy()
        #endif
    }
}
