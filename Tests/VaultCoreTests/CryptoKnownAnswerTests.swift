import Foundation
import TestSupport
import Testing
import VaultProtocol

@testable import VaultCore

#if canImport(Glibc)
import Glibc
#endif

/// Known answers for the key hierarchy (docs/keychain.md): fixed passphrase, salt, keys and
/// nonces through each derivation, wrap and unwrap, against the bytes
/// Tests/Fixtures/crypto/known-answers.py computes without vaultd or libsodium. A change to
/// the passphrase KDF, the device binding, a domain label, associated data, the AEAD's layout
/// or a hash's encoding fails here, instead of leaving every stored vault unreadable.
@Suite struct CryptoKnownAnswerTests {
    static func seq(_ start: Int, _ n: Int) -> [UInt8] { (0..<n).map { UInt8((start + $0) % 256) } }
    static func hex(_ b: [UInt8]) -> String { b.map { String(format: "%02x", $0) }.joined() }
    static func hex(_ s: SecureBytes?) -> String { hex(plain(s) ?? []) }
    static func bytes(_ hex: String) -> [UInt8] { Hex.bytes(hex) }

    // The inputs (known-answers.py has the same).
    static let passphrase = Array("correct horse battery staple".utf8)
    static let salt = seq(0x00, 16)
    /// libsodium's INTERACTIVE limits (2 passes, 64 MiB): what vaults made before MODERATE store.
    static let kdf = Sodium.KDFParameters(opsLimit: 2, memLimit: 64 * 1024 * 1024, salt: salt)
    static let deviceKey = seq(0x20, 32)
    static let metadataKey = seq(0x40, 32)
    static let indexKey = seq(0x60, 32)
    static func classKey(_ a: Accessibility) -> [UInt8] {
        seq(0x80 + 0x10 * Accessibility.allCases.firstIndex(of: a)!, 32)
    }
    static func nonce(_ i: Int) -> [UInt8] { seq(0xC0 + i, 24) }

    // The answers.
    static let kek = "c05ce4c4dd7e0e45ee6011cc59d068ade47df1b01fc0cf9cd4678bdf68a5b7b0"
    static let deviceBoundKey = "911e6473822f4249f0e3be50e012b21df40cca7b49e7bedbb1f289d5a0287503"
    static let deviceID = "23ee6ec9b3c6c0df8b977f60e66ce24c"
    static let deviceBackupKey = "eec396d4d84f5f04f119270be19da0eafa2ab223de51e0f758c4d3cc9016c2ad"
    /// `vault_meta` `wrapped.NAME`, in the order of the nonces.
    static let wrapped: [(name: String, box: String)] = [
        (
            "metadata",
            "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d704c87edcf1bf0a33ade6dbec7fb29a3a2916c1be5b45776b18f4159e4066dd219b583f85697c01f6b1ed4dbe9041f1e5"
        ),
        (
            "index",
            "c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8ae2eacedb0b57ad594d49a278f5af0f8bb3eb0ebae324c4c80aefff742b65140995a232f3c73f7b7d7e0cd84cf7834b7"
        ),
        (
            "class.whenUnlocked",
            "c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d943836ab4e97e64d235ee1a8f8d45c11bd5fc1e811489c60fc92d3129e3b912c483793e7157567ea96548477e19d1dde5"
        ),
        (
            "class.afterFirstUnlock",
            "c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9da1a8c77a68c542accc1a5c5fc7e65a70ca4fbd585e46863f7980c05fda784b79aac16f819df8dddc8f2bf7884e2f683f1"
        ),
        (
            "class.whenUnlockedThisDeviceOnly",
            "c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbbe686c795f0599d4dfafe72220f25e64763821741b65c42a47a35af83dabfc1d77e9f7ce244328699c3535bf2ec860a3"
        ),
        (
            "class.afterFirstUnlockThisDeviceOnly",
            "c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdc4de11e2cd1ea52df12431d73323713f3c415e71dce556c8d39c5886258e456b6aec6be05d4010d10a6bf97906e990827"
        ),
        (
            "class.whenPasscodeSetThisDeviceOnly",
            "c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcddd2c3010fe6b8e63df43f28545255e30da0eb26711a1c81f10c30523f74f6f56c970bb2fa91f285d8ce350f4fab1ddeb9"
        ),
    ]
    /// The generic password's row (`KeychainStore.encrypt` with `fixed` counting from 0xE0).
    static let itemUUID = "e0e1e2e3e4e5e6e7e8e9eaebecedeeef"
    static let itemPrimaryKeyHash =
        "82d2c6e3f5cc5c8ab305bafbe485b2498f0c786f0a2add32d81e1cbf4f2e9432"
    static let itemLookupHash = "be3d73c289a37605ee3174dfbd315045"
    static let itemAccountHash = "527a055fb4c8aa2ce15ae6bfaeb678a7"
    static let itemAttributesBox =
        "101112131415161718191a1b1c1d1e1f20212223242526272969882062993d511b033347547768d46743addec544a2a161d2cb635b59453d8dcef491fdeebe158030f898406e378a2460c93848997509ae9552b0a651074f626bb6d04b48bff0c2c18bd8e4eb5cb58086f294991517e143f42b34976adc68eea9ca2b26129b5073c06a5785fd97f818a8f7ce07cc70505a57de68267552ec5244a43a59fcd10ceddd2d60f67d537b0ca3d2578d96d523579a6dddb5220f23fb"
    static let itemWrappedKey =
        "28292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f499ab889a385ce7901f9de02a9a19338c74185a3e3b347499f793a967dec456a3901a57b72ded4110b3135b005895ae1"
    static let itemSecretBox =
        "404142434445464748494a4b4c4d4e4f5051525354555657536da121547c22f0c0cd8b7464f0aa71f16209c2bb73441d6c79"
    static let itemLookupAttributeHashes =
        "1a757db894fd09ea92d4e6384827a51c4e321aeb4c3879a9f0023379d8edc1b7"
    static let itemSecret: [UInt8] = Array("hunter2 ".utf8) + [0, 0xff]
    static let itemAttributes = ItemAttributes(
        service: "kat.example", account: "alice", label: "KAT item", accessGroup: "com.example.kat",
        accessible: .whenUnlocked,
        synchronizable: false)
    /// `itemAttributes.json.serialized()`: the plaintext of the attributes' box.
    static let itemAttributesJSON =
        (try? String(
            contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent()
                .deletingLastPathComponent()
                .appendingPathComponent("Fixtures/crypto/item-attributes.json"), encoding: .utf8))?
        .trimmingCharacters(in: .newlines) ?? ""

    static func isDeviceBound(_ name: String) -> Bool { name.hasSuffix("ThisDeviceOnly") }
    static func key(named name: String) -> [UInt8] {
        switch name {
        case "metadata": metadataKey
        case "index": indexKey
        default: classKey(Accessibility(rawValue: String(name.dropFirst("class.".count)))!)
        }
    }

    @Test func passphraseKDF() throws {
        let k = try Sodium.argon2id(passphrase: secret(Self.passphrase), parameters: Self.kdf)
        #expect(Self.hex(k) == Self.kek)
        // The cost a vault is made at, and the least it keeps: libsodium's MODERATE.
        #expect(Sodium.KDFCost.moderate.limits == (3, 256 * 1024 * 1024))
        #expect(Self.kdf.isWeaker(than: .moderate) && !Self.kdf.isWeaker(than: .minimum))
    }

    @Test func deviceDerivations() {
        let device = secret(Self.deviceKey)
        #expect(
            Self.hex(
                Sodium.combine(
                    secret(Self.bytes(Self.kek)), key: device, context: "vaultd device-bound v1"))
                == Self.deviceBoundKey)
        #expect(
            Self.hex(Sodium.keyedHash(Array("vaultd device id v1".utf8), key: device, length: 16))
                == Self.deviceID)
    }

    /// Sealing with the fixed nonces gives the stored boxes (nonce ‖ ciphertext ‖ tag), and
    /// each opens to its key only with its own name as associated data.
    @Test func wrapAndUnwrapClassKeys() throws {
        let kek = secret(Self.bytes(Self.kek))
        let bound = secret(Self.bytes(Self.deviceBoundKey))
        for (i, w) in Self.wrapped.enumerated() {
            let wrapping = Self.isDeviceBound(w.name) ? bound : kek
            let ad = Array("vaultd class key v1 \(w.name)".utf8)
            let box = Sodium.seal(
                secret(Self.key(named: w.name)), key: wrapping, associatedData: ad,
                nonce: Self.nonce(i))
            #expect(Self.hex(box) == w.box, "wrapped.\(w.name)")
            #expect(
                Self.hex(Sodium.open(Self.bytes(w.box), key: wrapping, associatedData: ad))
                    == Self.hex(Self.key(named: w.name)))
            #expect(
                Sodium.open(
                    Self.bytes(w.box), key: wrapping,
                    associatedData: Array("vaultd class key v1 other".utf8)) == nil)
        }
    }

    /// A store holding exactly the known boxes: KeyHierarchy reads the KDF parameters,
    /// and the KEK of the passphrase opens every key to its known bytes.
    @Test func keyHierarchyOpensTheKnownStore() throws {
        try withTemporaryDirectory { dir in
            let store = DatabasePool(writer: try Self.knownStore(dir + "/vault.sqlite"))
            defer { store.close() }
            try store.exclusive { x in
                let keys = try KeyHierarchy(in: x, deviceKey: secret(Self.deviceKey))
                #expect(keys.state == .locked && keys.hasPassphrase)
                #expect(keys.deviceID == Self.deviceID)
                #expect(Self.hex(try keys.deviceBackupKey()) == Self.deviceBackupKey)
                let p = try keys.passphraseParameters(in: x.db)
                #expect(p == Self.kdf)
                try keys.unlock(
                    kek: try Sodium.argon2id(passphrase: secret(Self.passphrase), parameters: p),
                    in: x)
                #expect(keys.state == .unlocked && keys.foreignClasses.isEmpty)
                #expect(Self.hex(keys.metadataKey) == Self.hex(Self.metadataKey))
                #expect(Self.hex(keys.indexKey) == Self.hex(Self.indexKey))
                for a in Accessibility.allCases {
                    #expect(Self.hex(keys.classKeys[a]) == Self.hex(Self.classKey(a)), "\(a)")
                }
                // A wrong passphrase opens nothing.
                let wrong = try Sodium.argon2id(
                    passphrase: secret("correct horse battery stapler"), parameters: p)
                let other = try KeyHierarchy(in: x, deviceKey: secret(Self.deviceKey))
                expectFailure(.wrongPassphrase) { try other.unlock(kek: wrong, in: x) }
                // Another device key opens the migratable keys, not the ThisDeviceOnly ones
                // (as a data directory moved without its device.key).
                let elsewhere = try KeyHierarchy(in: x, deviceKey: secret(Self.seq(0x21, 32)))
                try elsewhere.unlock(
                    kek: try Sodium.argon2id(passphrase: secret(Self.passphrase), parameters: p),
                    in: x)
                #expect(
                    Self.hex(elsewhere.classKeys[.whenUnlocked])
                        == Self.hex(Self.classKey(.whenUnlocked)))
                #expect(
                    elsewhere.foreignClasses
                        == Set(Accessibility.allCases.filter(\.isThisDeviceOnly)))
                #expect(
                    Self.hex(elsewhere.classKeys[.whenUnlockedThisDeviceOnly])
                        != Self.hex(Self.classKey(.whenUnlockedThisDeviceOnly)))
            }
        }
    }

    /// KeyHierarchy's own wrapping (a passphrase change re-wraps every key with fresh
    /// nonces): each new box opens with the known derivation and associated data.
    @Test func keyHierarchyWrapsAsKnown() throws {
        try withTemporaryDirectory { dir in
            let store = DatabasePool(writer: try Self.knownStore(dir + "/vault.sqlite"))
            defer { store.close() }
            try store.exclusive { x in
                let db = x.db
                let keys = try KeyHierarchy(in: x, deviceKey: secret(Self.deviceKey))
                try keys.unlock(
                    kek: try Sodium.argon2id(
                        passphrase: secret(Self.passphrase), parameters: Self.kdf), in: x)
                let next = try KeyHierarchy.PassphraseKEK(
                    deriving: secret("another passphrase"), cost: .minimum)
                try x.write { db in try keys.rewrap(newPassphrase: next, in: db) }
                let bound = Sodium.combine(
                    next.kek, key: secret(Self.deviceKey), context: "vaultd device-bound v1")
                for w in Self.wrapped {
                    let box = try #require(
                        try db.row(
                            "SELECT value FROM vault_meta WHERE key = ?",
                            [.text("wrapped." + w.name)])?[0].blob)
                    #expect(box.count == 24 + 32 + 16)
                    let opened = Sodium.open(
                        box, key: Self.isDeviceBound(w.name) ? bound : next.kek,
                        associatedData: Array("vaultd class key v1 \(w.name)".utf8))
                    #expect(
                        Self.hex(opened) == Self.hex(Self.key(named: w.name)), "wrapped.\(w.name)")
                }
                let stored = try #require(
                    try db.row("SELECT value FROM vault_meta WHERE key = 'kdf'")?[0].blob)
                let j = try JSON.parse(stored)
                #expect(j["algorithm"]?.stringValue == "argon2id13")
                #expect(j["salt"]?.stringValue == Data(next.parameters.salt).base64EncodedString())
                #expect(
                    j["opsLimit"]?.uint64Value == next.parameters.opsLimit
                        && j["memLimit"]?.uint64Value == next.parameters.memLimit)
            }
        }
    }

    /// An item's row from fixed uuid, item key and nonces: hashes and ciphertexts, exactly.
    @Test func itemEncryption() throws {
        var counter = 0xE0
        let fixed: (Int) -> [UInt8] = { n in
            defer { counter = (counter + n) % 256 }
            return Self.seq(counter, n)
        }
        #expect(
            String(decoding: Self.itemAttributes.json.serialized(), as: UTF8.self)
                == Self.itemAttributesJSON)
        let keys = WriteKeys(
            metadata: secret(Self.metadataKey), index: secret(Self.indexKey),
            classKey: secret(Self.classKey(.whenUnlocked)))
        let v = try KeychainStore.encrypt(
            itemClass: .genericPassword, attributes: Self.itemAttributes,
            secret: secret(Self.itemSecret), keys: keys, fixed: fixed)
        #expect(Self.hex(v[0].blob ?? []) == Self.itemUUID)
        #expect(
            v[1].text == "genericPassword" && v[2].text == "com.example.kat"
                && v[3].text == "whenUnlocked")
        #expect(Self.hex(v[5].blob ?? []) == Self.itemPrimaryKeyHash)
        #expect(Self.hex(v[6].blob ?? []) == Self.itemLookupHash)
        #expect(Self.hex(v[7].blob ?? []) == Self.itemAccountHash)
        #expect(Self.hex(v[8].blob ?? []) == Self.itemAttributesBox)
        #expect(Self.hex(v[9].blob ?? []) == Self.itemWrappedKey)
        #expect(Self.hex(v[10].blob ?? []) == Self.itemSecretBox)
        // Lookup attributes: one 16-byte hash per pair (in no particular order).
        let hashes = KeychainStore.lookupAttributeHashes(
            ["xdg:schema": "org.example.Kat", "user": "alice"], index: secret(Self.indexKey))
        let known = Self.bytes(Self.itemLookupAttributeHashes)
        #expect(
            Set(hashes.map(Self.hex)) == [
                Self.hex(Array(known[0..<16])), Self.hex(Array(known[16..<32])),
            ])
    }

    /// A Secret Service collection's label (`Vault.sealCollectionLabel`, nonce counting from
    /// 0xA0): the known box, which opens only in its own access group's row.
    static let collectionLabelBox =
        "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b72019b58c5d81b827467ff410056dcede67f4e19f5493b8a9f5a5dcdf15a8a7"

    @Test func collectionLabelEncryption() {
        let metadata = secret(Self.metadataKey)
        let box = Vault.sealCollectionLabel(
            "Kät collection", accessGroup: "com.example.kat", metadata: metadata,
            nonce: Self.seq(0xA0, 24))
        #expect(Self.hex(box) == Self.collectionLabelBox)
        #expect(
            Vault.openCollectionLabel(
                Self.bytes(Self.collectionLabelBox), accessGroup: "com.example.kat",
                metadata: metadata) == "Kät collection")
        #expect(
            Vault.openCollectionLabel(
                Self.bytes(Self.collectionLabelBox), accessGroup: "com.example.other",
                metadata: metadata) == nil)
        #expect(
            Vault.openCollectionLabel(
                Self.bytes(Self.collectionLabelBox), accessGroup: "com.example.kat",
                metadata: secret(Self.indexKey)) == nil)
        // A random nonce otherwise: two boxes of one label differ, and each opens.
        let a = Vault.sealCollectionLabel("Work", accessGroup: "g", metadata: metadata)
        let b = Vault.sealCollectionLabel("Work", accessGroup: "g", metadata: metadata)
        #expect(a != b && a.count == 24 + 4 + 16)
        #expect(Vault.openCollectionLabel(a, accessGroup: "g", metadata: metadata) == "Work")
    }

    /// A data directory of known bytes (device.key, vault_meta, one item's row) opens through
    /// Vault: the passphrase unlocks it and the item reads back with its attributes and secret.
    @Test func vaultReadsTheKnownStore() throws {
        try withTemporaryDirectory { dir in
            let data = dir + "/data"
            mkdir(data, 0o700)
            let keyPath = data + "/device.key"
            FileManager.default.createFile(
                atPath: keyPath, contents: Data(Self.deviceKey),
                attributes: [.posixPermissions: 0o600])
            do {
                let db = try Self.knownStore(data + "/vault.sqlite")
                defer { db.close() }
                _ = try db.write { db in
                    try db.run(
                        """
                        INSERT INTO items (uuid, item_class, access_group, accessible, synchronizable, primary_key_hash, lookup_hash,
                          account_hash, attributes, wrapped_key, secret) VALUES (?, 'genericPassword', 'com.example.kat', 'whenUnlocked', 0, ?, ?, ?, ?, ?, ?)
                        """,
                        [
                            Self.itemUUID, Self.itemPrimaryKeyHash, Self.itemLookupHash,
                            Self.itemAccountHash, Self.itemAttributesBox, Self.itemWrappedKey,
                            Self.itemSecretBox,
                        ]
                        .map { .blob(Self.bytes($0)) })
                }
            }
            let vault = try Vault(dataDirectory: data, passphrasePolicy: .tests)
            defer { vault.close() }
            #expect(vault.lockStateName() == "locked")
            _ = try vault.unlock(passphrase: secret(Self.passphrase), caller: .owner)
            let found = try vault.copyMatching(
                ItemQuery(
                    itemClass: .genericPassword,
                    attributes: ItemAttributes(service: "kat.example", account: "alice")),
                returnData: true, caller: .owner)
            try #require(found.count == 1)
            #expect(found[0].attributes == Self.itemAttributes)
            #expect(plain(found[0].data) == Self.itemSecret)
        }
    }

    /// HKDF-SHA-256 (age backups, Secret Service sessions) and SHA-256.
    @Test func hkdfAndSHA256() {
        let ikm = Self.seq(0x30, 22)
        let okm = ikm.withUnsafeBytes {
            Sodium.hkdfSHA256(
                ikm: $0, salt: Self.seq(0x10, 13), info: Array("vaultd kat".utf8), length: 80)
        }
        #expect(
            Self.hex(okm)
                == "515420ccc7a243453ea1f14cf868fbbbea84b80b831fa90b731eefb7fcccc06e5d2acc6b2da0a5e40e0d9a246a7eccaba2072e9d22693ffd11369d6342b222a25cb44babc48f9693122ecd7ff3d4d724"
        )
        let noSalt = ikm.withUnsafeBytes {
            Sodium.hkdfSHA256(ikm: $0, salt: [], info: [], length: 42)
        }
        #expect(
            Self.hex(noSalt)
                == "f385b9cb75b6e074bc387a80e3f968f94ad73d2579d0fbd2774962cf2a0c12f519023279f3d67db34763"
        )
        #expect(
            Self.hex(Sodium.sha256(Array("vaultd".utf8)))
                == "1235a939ae8b6c421777813a07da90cb7438ac02bb11502c6100c8c2632d222d")
    }

    /// A migrated store at `path` whose vault_meta holds the known KDF parameters and boxes.
    static func knownStore(_ path: String) throws -> Database {
        let db = try Database(path: path)
        try Schema.migrator.migrate(db)
        try db.write { db in
            let kdf =
                #"{"algorithm":"argon2id13","memLimit":67108864,"opsLimit":2,"salt":"AAECAwQFBgcICQoLDA0ODw=="}"#
            try db.run(
                "INSERT INTO vault_meta (key, value) VALUES ('kdf', ?)", [.blob(Array(kdf.utf8))])
            for w in wrapped {
                try db.run(
                    "INSERT INTO vault_meta (key, value) VALUES (?, ?)",
                    [.text("wrapped." + w.name), .blob(bytes(w.box))])
            }
        }
        return db
    }
}
