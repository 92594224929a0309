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

/// `VAULTD_TEST_SECRET_ACCESS=open|confirm|strict` (docs/development.md): the per-program access
/// mode when config.plist sets none, so the tests that are not about per-program access read
/// one program's items with another. Debug builds only, as `VAULTD_ARGON2_TEST_COST`: a
/// release vaultd started with it set stops, so no environment of a production vaultd can
/// open the vault's secrets to every program.
enum TestSecretAccess {
    static let variable = "VAULTD_TEST_SECRET_ACCESS"

    /// The mode the environment asks for (nil: none). Throws for a value that is no mode, and
    /// in a release build for any value but empty.
    static func mode(from env: [String: String]) throws -> SecretAccessMode? {
        guard let value = env[variable], !value.isEmpty else { return nil }
        #if DEBUG
        guard let mode = SecretAccessMode(rawValue: value) else {
            throw TestCost.Refused(
                description: "\(variable) must be open, confirm or strict, not \(value)")
        }
        return mode
        #else
        throw TestCost.Refused(
            description:
                "\(variable) is for tests, and only debug builds of vaultd honour it; this one is a release build: unset it"
        )
        #endif
    }
}
