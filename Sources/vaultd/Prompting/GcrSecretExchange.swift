import CGio
import Foundation
import SecretSession
import VaultCore

/// gcr's secret exchange, protocol `sx-aes-1` (gcr/gcr-secret-exchange.c), the caller's side:
/// how gnome-keyring takes a passphrase from the system prompter without it crossing the bus
/// in clear. Each side's message is a GKeyFile text with one group, `[sx-aes-1]`, and base64
/// values: `public` (the sender's Diffie-Hellman public value, big-endian), and with a secret
/// `secret` (AES-128-CBC, PKCS7 padding) and `iv` (16 bytes). The group is the 1536-bit MODP
/// group of RFC 3526 (gcr's "ietf-ike-grp-modp-1536"), the shared value padded to the
/// prime's length and put through HKDF-SHA256 (no salt, no info) to a 16-byte AES key:
/// `DHSession` with group `.modp1536`, which libgcrypt and libsodium compute.
///
/// The prompter speaks first (its PromptReady carries its public value); the key is derived
/// from it (`receive`), and vaultd's public value goes out with each PerformPrompt (`send`).
/// The secret in the prompter's final reply is decrypted into wiped memory (`secret`).
final class GcrSecretExchange {
    static let protocolName = "sx-aes-1"
    /// The longest exchange text taken from a prompter (bytes): a public value (192 bytes),
    /// and a secret of at most `PrompterAgent.maximumPassphrase`, in base64, with room.
    static let maximumText = PrompterAgent.maximumPassphrase * 2

    enum Failure: Error, CustomStringConvertible {
        case malformed(String)
        var description: String {
            switch self {
            case .malformed(let why): "the prompter's secret exchange is malformed: \(why)"
            }
        }
    }

    /// The session, once the prompter's public value is known.
    private(set) var session: DHSession?

    /// Reads a prompter's exchange text: its public value fixes the key (the first time; a
    /// later one must carry the same, as gcr's does), and a `secret`, when present, is
    /// decrypted. Returns that secret, or nil when the text carries none.
    func receive(_ text: String) throws -> SecureBytes? {
        guard text.utf8.count <= Self.maximumText else { throw Failure.malformed("too long") }
        let file = g_key_file_new()
        defer { g_key_file_free(file) }
        var err: UnsafeMutablePointer<GError>?
        guard
            g_key_file_load_from_data(file, text, gsize(text.utf8.count), G_KEY_FILE_NONE, &err)
                != 0
        else {
            g_error_free(err)
            throw Failure.malformed("not a key file")
        }
        guard let peer = Self.base64(file, "public") else {
            throw Failure.malformed("no public value")
        }
        if session == nil {
            do {
                session = try DHSession(peerPublicKey: peer, group: .modp1536)
            } catch {
                throw Failure.malformed("\(error)")
            }
        }
        // Encrypted: no need to wipe it.
        guard let ciphertext = Self.base64(file, "secret") else { return nil }
        guard let iv = Self.base64(file, "iv"), let session else {
            throw Failure.malformed("a secret without an iv")
        }
        do {
            return try session.decrypt(iv: iv, ciphertext: ciphertext)
        } catch {
            throw Failure.malformed("\(error)")
        }
    }

    /// vaultd's message: its public value (after `receive`), as gcr's
    /// `gcr_secret_exchange_send (exchange, NULL, 0)` writes it.
    func send() -> String? {
        guard let session else { return nil }
        let file = g_key_file_new()
        defer { g_key_file_free(file) }
        let encoded = session.publicKey.withUnsafeBufferPointer {
            g_base64_encode($0.baseAddress, gsize($0.count))
        }
        defer { g_free(encoded) }
        g_key_file_set_value(file, Self.protocolName, "public", encoded)
        guard let data = g_key_file_to_data(file, nil, nil) else { return nil }
        defer { g_free(data) }
        return String(cString: data)
    }

    /// A base64 value of the protocol's group, decoded; nil when absent.
    private static func base64(_ file: OpaquePointer?, _ key: String) -> [UInt8]? {
        guard let value = g_key_file_get_value(file, protocolName, key, nil) else { return nil }
        defer { g_free(value) }
        var n: gsize = 0
        guard let decoded = g_base64_decode(value, &n) else { return nil }
        defer { g_free(decoded) }
        return Array(UnsafeBufferPointer(start: decoded, count: Int(n)))
    }
}
