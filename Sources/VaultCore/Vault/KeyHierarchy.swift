import Foundation
import VaultProtocol

/// The vault's key hierarchy (docs/keychain.md) and lock state. Every key is 32 bytes, every wrapping
/// XChaCha20-Poly1305-IETF (`Sodium.seal`) with the key's `vault_meta` name bound in as
/// associated data (`ad`).
///
/// - The device key: 32 random bytes, never exported, sealed by the TPM (`device.key.tpm`)
///   or in a file of the data directory (`device.key`, 0600); see `DeviceKey`. Nil while the
///   TPM cannot unseal it: ThisDeviceOnly classes are then NotAvailableOnThisDevice, and
///   nothing that would need it is rewritten.
/// - KEK (key-encryption key): with a passphrase, Argon2id (`crypto_pwhash`, ALG_ARGON2ID13)
///   of the passphrase, with the salt, passes and memory stored in `vault_meta` `kdf` (the
///   KEK itself is never stored; new ones at `Sodium.KDFCost.moderate`, and a vault stored
///   with less is re-wrapped at its next unlock: `Vault.unlock`). Without a passphrase, a
///   random KEK stored in `vault_meta` `kek.nopassphrase` beside the keys it wraps: such a
///   vault is protected by nothing but the file permissions of the data directory (and, for
///   ThisDeviceOnly classes, of `device.key`); whoever can read `vault.sqlite` (and
///   `device.key`) can read every secret. When a TPM seals the device key, that KEK is stored
///   wrapped by the device key instead (`kek.nopassphrase.sealed`, as systemd-cryptenroll
///   --tpm2-device binds a disk to its TPM): a copy of the data directory opens nowhere else.
/// - The recovery key's wrapping (`KeyHierarchy+Recovery.swift`), beside the passphrase's.
/// - Class keys, one per accessibility class, random, wrapped by the KEK; the ThisDeviceOnly
///   ones by BLAKE2b of the KEK keyed with the device key (`wrappingKey`), so they open on
///   this device only. A data directory moved to another device (another `device.key`) gets
///   there, on its first unlock, a ThisDeviceOnly key of that device's own per class
///   (`class.NAME@DEVICE`), as a restored iPhone starts its ThisDeviceOnly items afresh: the
///   other device's items stay NotAvailableOnThisDevice, new ones are that device's.
/// - The metadata key (encrypts items' attributes) and the index key (keyed BLAKE2b hashes
///   of items' primary keys, services, servers and accounts, for uniqueness and lookups),
///   wrapped by the KEK: available from the first unlock.
/// - Below them (`KeychainStore`): one random item key per item, wrapped by its class key,
///   encrypting the item's secret.
///
/// Not thread-safe: `Vault` changes it holding both its engine and keys locks, and reads it
/// holding either. It holds no connection: what reads or writes `vault_meta` takes the one
/// it is handed (`in db:`, or an `exclusive` section's, `DatabasePool.Exclusive`).
final class KeyHierarchy {
    typealias State = LockState.State

    /// How `openAll` stores a key it made: in the caller's transaction when it has one (the
    /// vault being created), or in one of its own on the write path (an Unlock, a start).
    typealias Store = (_ write: (Database) throws -> Void) throws -> Void

    let deviceKey: SecureBytes?
    /// The device key is sealed by a TPM: a vault without a passphrase keeps its KEK wrapped
    /// by the device key (`kek.nopassphrase.sealed`), not in clear.
    let sealsNoPassphraseKEK: Bool
    /// The key that wraps the KEK for the recovery key (`recovery.kek`), opened at each unlock
    /// from `recovery.key` (wrapped by the KEK) and wiped at Lock: a passphrase change re-wraps
    /// the KEK for it without the recovery key itself. Nil without a recovery key.
    var recoveryWrapping: SecureBytes?
    private(set) var classKeys: [Accessibility: SecureBytes] = [:]
    /// Classes with a wrapped key made on another device (one that does not open with this
    /// device key, or another device's `class.NAME@DEVICE`): their items made on another
    /// device are NotAvailableOnThisDevice (`isForeign`).
    private(set) var foreignClasses: Set<Accessibility> = []
    /// The `vault_meta` name (after `wrapped.`) this device's key of each class is wrapped
    /// under: `class.NAME`, or `class.NAME@DEVICE` on a device the data directory moved to.
    private var localNames: [Accessibility: String] = [:]
    private(set) var metadataKey: SecureBytes?
    private(set) var indexKey: SecureBytes?
    private(set) var state: State = .uninitialized
    private(set) var unlockedSinceStart = false
    private(set) var hasPassphrase = false

    /// The keys and states held in memory (`snapshot`), to put back (`restore`) when the
    /// transaction that changed them did not commit: the store is then as it was, and the
    /// memory must be too.
    struct Snapshot {
        fileprivate let classKeys: [Accessibility: SecureBytes]
        fileprivate let foreignClasses: Set<Accessibility>
        fileprivate let localNames: [Accessibility: String]
        fileprivate let metadataKey: SecureBytes?
        fileprivate let indexKey: SecureBytes?
        fileprivate let state: State
        fileprivate let unlockedSinceStart: Bool
        fileprivate let hasPassphrase: Bool
        fileprivate let recoveryWrapping: SecureBytes?
    }

    func snapshot() -> Snapshot {
        Snapshot(
            classKeys: classKeys, foreignClasses: foreignClasses, localNames: localNames,
            metadataKey: metadataKey, indexKey: indexKey,
            state: state, unlockedSinceStart: unlockedSinceStart, hasPassphrase: hasPassphrase,
            recoveryWrapping: recoveryWrapping)
    }

    func restore(_ s: Snapshot) {
        classKeys = s.classKeys
        foreignClasses = s.foreignClasses
        localNames = s.localNames
        metadataKey = s.metadataKey
        indexKey = s.indexKey
        state = s.state
        unlockedSinceStart = s.unlockedSinceStart
        hasPassphrase = s.hasPassphrase
        recoveryWrapping = s.recoveryWrapping
    }

    /// Reads the stored keys' state through `x` (the writer's, under the engine lock).
    /// `deviceKey`: nil while the TPM sealing it cannot unseal it. `sealsNoPassphraseKEK`: a TPM
    /// seals the device key (a KEK without a passphrase stored in clear is then wrapped by it).
    init(in x: DatabasePool.Exclusive, deviceKey: SecureBytes?, sealsNoPassphraseKEK: Bool = false)
        throws
    {
        let db = x.db
        self.deviceKey = deviceKey
        self.sealsNoPassphraseKEK = sealsNoPassphraseKEK && deviceKey != nil
        if try meta(db, "wrapped.metadata") != nil {
            hasPassphrase = try meta(db, "kdf") != nil
            state = .locked
            if !hasPassphrase {
                // Always unlocked. A failure here (a damaged store) must not stop vaultd from
                // serving the rest: it stays locked and says why.
                do {
                    let kek = try noPassphraseKEK(db)
                    try openAll(kek: kek, in: db, store: { try x.write($0) })
                    try sealNoPassphraseKEK(kek, in: x)
                } catch {
                    x.db.logger.error(
                        "the vault has no passphrase but its keys do not open: \(error)")
                }
            }
        }
    }

    var lockState: LockState {
        LockState(
            state: state, unlockedSinceStart: unlockedSinceStart, hasPassphrase: hasPassphrase)
    }

    // MARK: vault_meta

    func meta(_ db: Database, _ key: String) throws -> [UInt8]? {
        try db.row("SELECT value FROM vault_meta WHERE key = ?", [.text(key)])?[0].blob
    }

    func setMeta(_ db: Database, _ key: String, _ value: [UInt8]?) throws {
        if let value {
            try db.run(
                "INSERT OR REPLACE INTO vault_meta (key, value) VALUES (?, ?)",
                [.text(key), .blob(value)])
        } else {
            try db.run("DELETE FROM vault_meta WHERE key = ?", [.text(key)])
        }
    }

    // MARK: keys

    /// The KEK of a vault without a passphrase: random, stored in `vault_meta` beside the keys
    /// it wraps (there is no secret to derive it from), so migratable items move with the data
    /// dir while ThisDeviceOnly ones stay bound to `device.key`. `create` makes a new one.
    /// With a TPM (`sealsNoPassphraseKEK`), it is stored wrapped by the device key instead
    /// (`kek.nopassphrase.sealed`), and opens only where that TPM unseals the device key.
    private func noPassphraseKEK(_ db: Database, create: Bool = false) throws -> SecureBytes {
        if !create, let sealed = try meta(db, "kek.nopassphrase.sealed") {
            guard let deviceKey else {
                throw VaultFailure(
                    .notAvailableOnThisDevice,
                    "the vault has no passphrase and its key is sealed by the TPM, which cannot unseal the device key now"
                )
            }
            guard
                let kek = Sodium.open(
                    sealed, key: Self.noPassphraseSealKey(deviceKey),
                    associatedData: Array("vaultd kek.nopassphrase.sealed v1".utf8))
            else {
                throw VaultFailure(
                    .notAvailableOnThisDevice,
                    "the vault has no passphrase and its key was sealed by another device key (another TPM, or a device key made anew)"
                )
            }
            return kek
        }
        if !create, let stored = try meta(db, "kek.nopassphrase"), stored.count == Sodium.keyLength
        {
            return SecureBytes(copying: stored)
        }
        guard create else {
            throw VaultFailure(.internalError, "the vault's key-encryption key is missing")
        }
        let kek = SecureBytes.random(count: Sodium.keyLength)
        try storeNoPassphraseKEK(kek, in: db)
        return kek
    }

    /// The key the KEK of a vault without a passphrase is wrapped by when a TPM seals the
    /// device key.
    private static func noPassphraseSealKey(_ deviceKey: SecureBytes) -> SecureBytes {
        Sodium.combine(SecureBytes(count: 0), key: deviceKey, context: "vaultd kek.nopassphrase v1")
    }

    /// Stores the KEK of a vault without a passphrase: wrapped by the device key when a TPM
    /// seals it, else in clear; the other form is removed.
    private func storeNoPassphraseKEK(_ kek: SecureBytes, in db: Database) throws {
        if sealsNoPassphraseKEK, let deviceKey {
            try setMeta(
                db, "kek.nopassphrase.sealed",
                Sodium.seal(
                    kek, key: Self.noPassphraseSealKey(deviceKey),
                    associatedData: Array("vaultd kek.nopassphrase.sealed v1".utf8)))
            try setMeta(db, "kek.nopassphrase", nil)
        } else {
            try setMeta(db, "kek.nopassphrase", kek.withUnsafeBytes { Array($0) })
            try setMeta(db, "kek.nopassphrase.sealed", nil)
        }
    }

    /// A vault without a passphrase whose KEK is still in clear, opened now that a TPM seals
    /// the device key: the KEK is stored wrapped by the device key, the clear copy removed
    /// and the write-ahead log truncated (its old frames held it). Failures are logged; the
    /// next start tries again.
    private func sealNoPassphraseKEK(_ kek: SecureBytes, in x: DatabasePool.Exclusive) throws {
        guard sealsNoPassphraseKEK, try meta(x.db, "kek.nopassphrase") != nil else { return }
        do {
            try x.write { db in try storeNoPassphraseKEK(kek, in: db) }
            try x.truncateWAL()
            x.db.logger.notice(
                "the vault has no passphrase: its key is now sealed with the device key, which the TPM seals"
            )
        } catch {
            x.db.logger.warning(
                "could not seal the key of the vault (no passphrase) with the TPM's device key: \(error)"
            )
        }
    }

    private func kdfParameters(_ db: Database) throws -> Sodium.KDFParameters? {
        guard let raw = try meta(db, "kdf"), let j = try? JSON.parse(raw),
            let ops = j["opsLimit"]?.uint64Value,
            let mem = j["memLimit"]?.uint64Value, let saltText = j["salt"]?.stringValue,
            let salt = Data(base64Encoded: saltText)
        else { return nil }
        return Sodium.KDFParameters(opsLimit: ops, memLimit: mem, salt: Array(salt))
    }

    private func storeKDF(_ db: Database, _ p: Sodium.KDFParameters?) throws {
        guard let p else { return try setMeta(db, "kdf", nil) }
        let j: JSON = [
            "opsLimit": JSON(p.opsLimit), "memLimit": JSON(p.memLimit),
            "salt": .string(Data(p.salt).base64EncodedString()), "algorithm": "argon2id13",
        ]
        try setMeta(db, "kdf", j.serialized())
    }

    /// The key that wraps key `name`: the KEK, or for a ThisDeviceOnly class the KEK combined
    /// with the device key (nil while the TPM cannot unseal it).
    private func wrappingKey(for name: String, kek: SecureBytes, deviceBound: Bool) -> SecureBytes?
    {
        guard deviceBound else { return kek }
        guard let deviceKey else { return nil }
        return Sodium.combine(kek, key: deviceKey, context: "vaultd device-bound v1")
    }

    /// Throws NotAvailableOnThisDevice, saying why, while the device key is not available
    /// (`operation`: what is refused).
    func requireDeviceKey(for operation: String) throws {
        guard deviceKey == nil else { return }
        throw VaultFailure(
            .notAvailableOnThisDevice,
            "the TPM cannot unseal the device key now (vaultctl status says why), so \(operation) is refused: it would leave ThisDeviceOnly keys behind"
        )
    }

    private static func ad(_ name: String) -> [UInt8] { Array("vaultd class key v1 \(name)".utf8) }

    private static func name(_ a: Accessibility) -> String { "class.\(a.rawValue)" }

    /// The name this device's key of ThisDeviceOnly class `a` is wrapped under when the
    /// class's own key was made on another device: `class.NAME@` and a keyed hash of the
    /// device key (which it does not reveal).
    private func deviceName(_ a: Accessibility) -> String {
        Self.deviceNamePrefix(a) + deviceID
    }

    /// This device's name among devices: a keyed hash of its device key (which it does not
    /// reveal), 32 hex digits.
    /// Empty while the device key is not available.
    var deviceID: String {
        guard let deviceKey else { return "" }
        return String(
            lowercaseHex: Sodium.keyedHash(
                Array("vaultd device id v1".utf8), key: deviceKey, length: 16))
    }

    /// The key a backup seals ThisDeviceOnly secrets under: derived from the device key
    /// alone, so such a record opens only where the same `device.key` is, whatever the
    /// vault's passphrase there.
    /// Throws NotAvailableOnThisDevice while the device key is not available.
    func deviceBackupKey() throws -> SecureBytes {
        try requireDeviceKey(for: "backing up or restoring ThisDeviceOnly items")
        return Sodium.combine(
            SecureBytes(count: 0), key: deviceKey!, context: "vaultd backup device-bound v1")
    }

    /// Records that ThisDeviceOnly class `a` holds items another device (`id`, its
    /// `deviceID`) made, as a data directory moved from there leaves a `class.NAME@DEVICE`
    /// key behind: the class becomes foreign, and its items whose key does not open here
    /// are NotAvailableOnThisDevice (`isForeign`). A restore of such items stores them so.
    /// The entry is a placeholder (that device's key is not known here); like a moved
    /// directory's, it is never opened nor re-wrapped. Runs inside the caller's transaction.
    func noteForeignDevice(_ a: Accessibility, deviceID id: String, in db: Database) throws {
        precondition(a.isThisDeviceOnly)
        let name = Self.deviceNamePrefix(a) + id
        guard name != deviceName(a) else { return }
        if try meta(db, "wrapped.\(name)") == nil {
            try setMeta(db, "wrapped.\(name)", Sodium.randomBytes(72))
        }
        foreignClasses.insert(a)
    }

    /// What every device's own key of class `a` is named with (`deviceName`): `class.NAME@`.
    private static func deviceNamePrefix(_ a: Accessibility) -> String { name(a) + "@" }

    /// The `SELECT`/`DELETE` condition on `vault_meta.key` and its arguments matching the
    /// wrapped keys of class `a` that other devices made (`deviceName`), and this device's
    /// unless `excludingOwn`.
    private func deviceKeysCondition(_ a: Accessibility, excludingOwn: Bool) -> (String, [SQLValue])
    {
        let prefix = "wrapped." + Self.deviceNamePrefix(a)
        var sql = "substr(key, 1, ?) = ?"
        var args: [SQLValue] = [.integer(Int64(prefix.utf8.count)), .text(prefix)]
        if excludingOwn {
            sql += " AND key != ?"
            args.append(.text("wrapped." + deviceName(a)))
        }
        return (sql, args)
    }

    private func wrap(
        _ db: Database, _ key: SecureBytes, name: String, kek: SecureBytes, deviceBound: Bool
    ) throws {
        guard let wrapping = wrappingKey(for: name, kek: kek, deviceBound: deviceBound) else {
            try requireDeviceKey(for: "storing a ThisDeviceOnly key")
            return
        }
        let box = Sodium.seal(key, key: wrapping, associatedData: Self.ad(name))
        try setMeta(db, "wrapped.\(name)", box)
    }

    private func unwrap(_ db: Database, name: String, kek: SecureBytes, deviceBound: Bool) throws
        -> SecureBytes?
    {
        guard let box = try meta(db, "wrapped.\(name)"),
            let wrapping = wrappingKey(for: name, kek: kek, deviceBound: deviceBound)
        else { return nil }
        return Sodium.open(box, key: wrapping, associatedData: Self.ad(name))
    }

    /// The classes that have a key: all, except whenPasscodeSet without a passphrase.
    private func classes(withPassphrase: Bool) -> [Accessibility] {
        Accessibility.allCases.filter { withPassphrase || $0 != .whenPasscodeSetThisDeviceOnly }
    }

    /// Opens every key with `kek`. Throws `AuthFailed` when the metadata key does not open
    /// (wrong passphrase). Classes that do not open are recorded as foreign; a ThisDeviceOnly
    /// one gets this device's own key (`deviceName`), made and stored on the first unlock here,
    /// and made anew when the stored one no longer opens (wrapped under a passphrase since
    /// changed on another device, which cannot rewrap it: the items it opened are lost either
    /// way, and are then NotAvailableOnThisDevice and deletable). A class whose key opens but
    /// for which other devices made keys of their own (the data directory moved away and back)
    /// is foreign too: the items those devices made are NotAvailableOnThisDevice here.
    ///
    /// While the device key is not available (the TPM cannot unseal it), every ThisDeviceOnly
    /// class is foreign with no key of this device's: its items are NotAvailableOnThisDevice,
    /// and no key is made or stored for it.
    func openAll(kek: SecureBytes, in db: Database, store: Store) throws {
        guard let metadata = try unwrap(db, name: "metadata", kek: kek, deviceBound: false),
            let index = try unwrap(db, name: "index", kek: kek, deviceBound: false)
        else { throw VaultFailure(.wrongPassphrase, "wrong passphrase") }
        metadataKey = metadata
        indexKey = index
        foreignClasses = []
        localNames = [:]
        for a in Accessibility.allCases {
            let name = Self.name(a)
            guard try meta(db, "wrapped.\(name)") != nil else { continue }
            if a.isThisDeviceOnly && deviceKey == nil {
                classKeys[a] = nil
                foreignClasses.insert(a)
                continue
            }
            if let k = try unwrap(db, name: name, kek: kek, deviceBound: a.isThisDeviceOnly) {
                classKeys[a] = k
                localNames[a] = name
                if a.isThisDeviceOnly {
                    let (condition, args) = deviceKeysCondition(a, excludingOwn: true)
                    if try db.row("SELECT 1 FROM vault_meta WHERE \(condition) LIMIT 1", args)
                        != nil
                    {
                        foreignClasses.insert(a)
                    }
                }
                continue
            }
            foreignClasses.insert(a)
            guard a.isThisDeviceOnly else { continue }
            let own = deviceName(a)
            var k = try unwrap(db, name: own, kek: kek, deviceBound: true)
            if k == nil {
                let fresh = SecureBytes.random(count: Sodium.keyLength)
                // In the caller's transaction, or (an Unlock, a start) one of its own.
                try store { db in try wrap(db, fresh, name: own, kek: kek, deviceBound: true) }
                k = fresh
            }
            classKeys[a] = k
            localNames[a] = own
        }
        recoveryWrapping = try openRecoveryWrapping(kek: kek, in: db)
        state = .unlocked
        unlockedSinceStart = true
    }

    /// A new passphrase's KEK with the Argon2id parameters (a fresh salt) it was derived with.
    struct PassphraseKEK {
        let kek: SecureBytes
        let parameters: Sodium.KDFParameters

        /// Derives it at `cost` (Argon2id: at MODERATE, 256 MiB and about a second): before
        /// any lock is taken.
        init(deriving passphrase: SecureBytes, cost: Sodium.KDFCost) throws {
            parameters = Sodium.KDFParameters.fresh(cost)
            kek = try Sodium.argon2id(passphrase: passphrase, parameters: parameters)
        }
    }

    /// Creates the vault: new class, metadata and index keys, wrapped by the KEK of
    /// `passphrase` (or of the device key when nil). Runs inside the caller's transaction.
    func initialize(passphrase: PassphraseKEK?, in db: Database) throws {
        guard state == .uninitialized else {
            throw VaultFailure(.alreadyInitialized, "the vault is already initialised")
        }
        try requireDeviceKey(for: "creating the vault")
        let kdf = passphrase?.parameters
        let kek = try passphrase?.kek ?? noPassphraseKEK(db, create: true)
        try storeKDF(db, kdf)
        try wrap(
            db, SecureBytes.random(count: Sodium.keyLength), name: "metadata", kek: kek,
            deviceBound: false)
        try wrap(
            db, SecureBytes.random(count: Sodium.keyLength), name: "index", kek: kek,
            deviceBound: false)
        for a in classes(withPassphrase: passphrase != nil) {
            try wrap(
                db, SecureBytes.random(count: Sodium.keyLength), name: Self.name(a), kek: kek,
                deviceBound: a.isThisDeviceOnly)
        }
        hasPassphrase = passphrase != nil
        state = .locked
        try openAll(kek: kek, in: db, store: { try $0(db) })
    }

    /// Throws NotInitialized before `initialize`.
    func requireInitialized() throws {
        guard state != .uninitialized else {
            throw VaultFailure(.notInitialized, "the vault is not initialised: run vaultctl init")
        }
    }

    /// The Argon2id parameters to derive the KEK from the passphrase with. Throws
    /// NotInitialized, or NoPassphrase when the vault has none.
    func passphraseParameters(in db: Database) throws -> Sodium.KDFParameters {
        try requireInitialized()
        guard let p = try kdfParameters(db) else {
            throw VaultFailure(
                .noPassphrase, "the vault has no passphrase, so it is always unlocked")
        }
        return p
    }

    /// Whether the stored Argon2id parameters cost less than `cost` (a vault made before the
    /// cost was raised): its keys are to be re-wrapped under a KEK derived at `cost`
    /// (`rewrap`). False without a passphrase.
    func kdfIsWeaker(than cost: Sodium.KDFCost, in db: Database) throws -> Bool {
        try kdfParameters(db)?.isWeaker(than: cost) ?? false
    }

    /// Unlocks with the KEK derived with `passphraseParameters`. Throws `Vault.AuthFailed` when it is wrong.
    /// A ThisDeviceOnly key it makes (the first unlock on this device) is stored through
    /// `x.write`, in a transaction of its own.
    func unlock(kek: SecureBytes, in x: DatabasePool.Exclusive) throws {
        try openAll(kek: kek, in: x.db, store: { try x.write($0) })
    }

    /// Wipes the keys of classes usable only while unlocked. Throws NoPassphrase on a vault
    /// without a passphrase (it is always unlocked).
    func lock() throws {
        try requireInitialized()
        guard hasPassphrase else {
            throw VaultFailure(
                .noPassphrase,
                "the vault has no passphrase, so it is always unlocked; set one with vaultctl passphrase set"
            )
        }
        for a in Accessibility.allCases where !a.isAfterFirstUnlock { classKeys[a] = nil }
        recoveryWrapping = nil
        state = .locked
    }

    /// Re-wraps this device's keys under the KEK of `newPassphrase` (nil: no passphrase);
    /// another device's ThisDeviceOnly keys (a moved data directory) cannot be opened here and
    /// stay as they were. The vault must be unlocked (all class keys in memory): throws
    /// NotInitialized before `initialize`, InteractionNotAllowed while locked. Adding a
    /// passphrase creates the whenPasscodeSet class key; removing it drops every key of that
    /// class, other devices' too (the caller deletes all its items).
    func rewrap(newPassphrase: PassphraseKEK?, in db: Database) throws {
        try requireInitialized()
        guard state == .unlocked, let metadataKey, let indexKey else {
            throw VaultFailure(
                .interactionNotAllowed, "unlock the vault before changing its passphrase")
        }
        try requireDeviceKey(for: "changing the passphrase")
        let kdf = newPassphrase?.parameters
        let kek = try newPassphrase?.kek ?? noPassphraseKEK(db, create: true)
        if newPassphrase != nil {
            try setMeta(db, "kek.nopassphrase", nil)
            try setMeta(db, "kek.nopassphrase.sealed", nil)
        }
        try rewrapRecovery(newKEK: newPassphrase?.kek, in: db)
        try storeKDF(db, kdf)
        try wrap(db, metadataKey, name: "metadata", kek: kek, deviceBound: false)
        try wrap(db, indexKey, name: "index", kek: kek, deviceBound: false)
        if newPassphrase == nil {
            // Every key of the class, other devices' too: their items are deleted with it.
            let wps = Accessibility.whenPasscodeSetThisDeviceOnly
            classKeys[wps] = nil
            localNames[wps] = nil
            foreignClasses.remove(wps)
            let (condition, args) = deviceKeysCondition(wps, excludingOwn: false)
            try db.run(
                "DELETE FROM vault_meta WHERE key = ? OR \(condition)",
                [.text("wrapped.\(Self.name(wps))")] + args)
        } else if classKeys[.whenPasscodeSetThisDeviceOnly] == nil {
            classKeys[.whenPasscodeSetThisDeviceOnly] = SecureBytes.random(count: Sodium.keyLength)
        }
        // This device's keys only: another device's cannot be opened here, so they stay
        // wrapped as they were (their items are NotAvailableOnThisDevice anyway).
        for (a, key) in classKeys {
            let name = localNames[a] ?? (foreignClasses.contains(a) ? deviceName(a) : Self.name(a))
            try wrap(db, key, name: name, kek: kek, deviceBound: a.isThisDeviceOnly)
            localNames[a] = name
        }
        hasPassphrase = newPassphrase != nil
    }

    /// Whether class `a` has a key made on another device, so that its items may be another
    /// device's: those whose item key does not open with `classKey(a)`.
    func isForeign(_ a: Accessibility) -> Bool { foreignClasses.contains(a) }

    /// The key of class `a` (this device's), or the error that says why it is unavailable.
    func classKey(_ a: Accessibility) throws -> SecureBytes {
        if let k = classKeys[a] { return k }
        if foreignClasses.contains(a) && localNames[a] == nil {
            throw KeychainStore.otherDeviceError(a)
        }
        if a == .whenPasscodeSetThisDeviceOnly && !hasPassphrase && state != .uninitialized {
            throw VaultFailure(
                .authFailed, "whenPasscodeSetThisDeviceOnly items need a vault passphrase")
        }
        throw interactionNotAllowed()
    }

    func interactionNotAllowed() -> VaultFailure {
        switch state {
        case .uninitialized:
            VaultFailure(.notInitialized, "the vault is not initialised: run vaultctl init")
        default: VaultFailure(.interactionNotAllowed, "the vault is locked")
        }
    }

    /// Metadata and index keys, available from the first unlock.
    func metadataKeys() throws -> (metadata: SecureBytes, index: SecureBytes) {
        guard let m = metadataKey, let i = indexKey else { throw interactionNotAllowed() }
        return (m, i)
    }
}
