#!/usr/bin/env python3
"""The known answers of CryptoKnownAnswerTests, computed without vaultd or libsodium.

    python3 Tests/Fixtures/crypto/known-answers.py

Prints, for the fixed inputs below, each value of vaultd's key hierarchy (docs/keychain.md)
as hex: the Argon2id KEK, the device-bound wrapping key, the device ID and backup key, the
wrapped metadata, index and class keys, one generic password's row (hashes and the
three ciphertexts) and one Secret Service collection's sealed label. Python's
`cryptography` (Argon2id, ChaCha20-Poly1305, HKDF) and `hashlib` (BLAKE2b, SHA-256) compute
them; XChaCha20 is HChaCha20 (RFC draft
irtf-cfrg-xchacha, section 2.2, written out here) then ChaCha20-Poly1305 with the last 8
bytes of the nonce. The test asserts that vaultd computes exactly these bytes, so a change
to any derivation, wrapping or encoding cannot pass silently.
"""

import base64
import hashlib
import struct

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.argon2 import Argon2id
from cryptography.hazmat.primitives.kdf.hkdf import HKDF


def seq(start, n):
    return bytes((start + i) % 256 for i in range(n))


# The inputs (CryptoKnownAnswerTests has the same).
PASSPHRASE = b"correct horse battery staple"
SALT = seq(0x00, 16)
OPS, MEM = 2, 64 * 1024 * 1024  # libsodium's INTERACTIVE limits: 2 passes, 64 MiB
DEVICE_KEY = seq(0x20, 32)
METADATA_KEY = seq(0x40, 32)
INDEX_KEY = seq(0x60, 32)
CLASSES = ["whenUnlocked", "afterFirstUnlock", "whenUnlockedThisDeviceOnly",
           "afterFirstUnlockThisDeviceOnly", "whenPasscodeSetThisDeviceOnly"]


def class_key(i):
    return seq(0x80 + 0x10 * i, 32)


def nonce(i):
    return seq(0xC0 + i, 24)


def rotl(v, c):
    return ((v << c) & 0xFFFFFFFF) | (v >> (32 - c))


def hchacha20(key, n16):
    s = list(struct.unpack("<4I", b"expand 32-byte k")) + list(struct.unpack("<8I", key)) + list(struct.unpack("<4I", n16))

    def qr(a, b, c, d):
        s[a] = (s[a] + s[b]) & 0xFFFFFFFF; s[d] = rotl(s[d] ^ s[a], 16)
        s[c] = (s[c] + s[d]) & 0xFFFFFFFF; s[b] = rotl(s[b] ^ s[c], 12)
        s[a] = (s[a] + s[b]) & 0xFFFFFFFF; s[d] = rotl(s[d] ^ s[a], 8)
        s[c] = (s[c] + s[d]) & 0xFFFFFFFF; s[b] = rotl(s[b] ^ s[c], 7)

    for _ in range(10):
        qr(0, 4, 8, 12); qr(1, 5, 9, 13); qr(2, 6, 10, 14); qr(3, 7, 11, 15)
        qr(0, 5, 10, 15); qr(1, 6, 11, 12); qr(2, 7, 8, 13); qr(3, 4, 9, 14)
    return struct.pack("<8I", *(s[0:4] + s[12:16]))


def xchacha_seal(key, n24, plaintext, ad):
    """libsodium's crypto_aead_xchacha20poly1305_ietf_encrypt, as vaultd stores it: nonce ‖ ciphertext ‖ tag."""
    sub = hchacha20(key, n24[:16])
    return n24 + ChaCha20Poly1305(sub).encrypt(b"\0\0\0\0" + n24[16:], plaintext, ad)


def blake2b(message, key, length=32):
    return hashlib.blake2b(message, key=key, digest_size=length).digest()


def show(name, value):
    print(f"{name} = {value.hex() if isinstance(value, bytes) else value}")


def main():
    # The KEK: Argon2id13 (libsodium's crypto_pwhash: one lane, memory in KiB).
    kek = Argon2id(salt=SALT, length=32, iterations=OPS, lanes=1, memory_cost=MEM // 1024).derive(PASSPHRASE)
    show("kek", kek)
    device_bound = blake2b(b"vaultd device-bound v1" + kek, DEVICE_KEY)
    show("deviceBoundKey", device_bound)
    show("deviceID", blake2b(b"vaultd device id v1", DEVICE_KEY, 16))
    show("deviceBackupKey", blake2b(b"vaultd backup device-bound v1", DEVICE_KEY))

    # Wrapped keys, as vault_meta holds them (`wrapped.NAME`).
    boxes = [("metadata", METADATA_KEY, kek), ("index", INDEX_KEY, kek)]
    for i, c in enumerate(CLASSES):
        boxes.append((f"class.{c}", class_key(i), device_bound if c.endswith("ThisDeviceOnly") else kek))
    for i, (name, key, wrapping) in enumerate(boxes):
        show(f"wrapped.{name}", xchacha_seal(wrapping, nonce(i), key, f"vaultd class key v1 {name}".encode()))

    # One generic password (KeychainStore.encrypt): uuid, item key, then the nonces of the
    # attributes, the wrapped item key and the secret, from one counter.
    counter = [0xE0]

    def fixed(n):
        out = seq(counter[0], n)
        counter[0] = (counter[0] + n) % 256
        return out

    uuid, item_key = fixed(16), fixed(32)
    group, service, account = "com.example.kat", "kat.example", "alice"
    attributes = open(__file__.replace("known-answers.py", "item-attributes.json"), "rb").read().rstrip(b"\n")
    ad = b"vaultd item v1\0" + uuid + b"\0genericPassword\0" + group.encode() + b"\0whenUnlocked\0" + b"0"
    show("item.uuid", uuid)
    show("item.primaryKeyHash", blake2b(f'["pk","genericPassword","{group}",false,"{service}","{account}"]'.encode(), INDEX_KEY))
    show("item.lookupHash", blake2b(b"service\0" + service.encode(), INDEX_KEY, 16))
    show("item.accountHash", blake2b(b"account\0" + account.encode(), INDEX_KEY, 16))
    show("item.attributes", xchacha_seal(METADATA_KEY, fixed(24), attributes, ad))
    show("item.wrappedKey", xchacha_seal(class_key(0), fixed(24), item_key, ad))
    show("item.secret", xchacha_seal(item_key, fixed(24), b"hunter2 \x00\xff", ad))
    lookup = b""
    for name, value in [("xdg:schema", "org.example.Kat"), ("user", "alice")]:
        lookup += blake2b(b"lookup\0" + struct.pack(">I", len(name.encode())) + name.encode() + value.encode(), INDEX_KEY, 16)
    show("item.lookupAttributeHashes", lookup)

    # A Secret Service collection's label (Vault.sealCollectionLabel): its UTF-8 under the
    # metadata key, bound to its access group, with a nonce counting from 0xA0.
    label_ad = b"vaultd collection label v1\0" + group.encode()
    show("collectionLabel", xchacha_seal(METADATA_KEY, seq(0xA0, 24), "Kät collection".encode(), label_ad))

    # HKDF-SHA-256 (RFC 5869) and SHA-256, as Sodium.hkdfSHA256 and Sodium.sha256 compute them.
    show("hkdf", HKDF(algorithm=hashes.SHA256(), length=80, salt=seq(0x10, 13), info=b"vaultd kat").derive(seq(0x30, 22)))
    show("hkdf.noSalt", HKDF(algorithm=hashes.SHA256(), length=42, salt=None, info=b"").derive(seq(0x30, 22)))
    show("sha256", hashlib.sha256(b"vaultd").digest())
    show("kdf.salt.base64", base64.b64encode(SALT).decode())


if __name__ == "__main__":
    main()
