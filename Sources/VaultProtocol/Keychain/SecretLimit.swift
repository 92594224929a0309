/// The largest secret a keychain item holds. vaultd refuses a bigger one, and
/// `VaultClient` refuses it before sending: base64 makes a secret over about 6 MiB a message
/// over varlink's 8 MiB limit, which vaultd could only refuse as a malformed message.
public enum SecretLimit {
    /// 1 MiB, in bytes.
    public static let maximumBytes = 1 << 20

    /// Throws `SecretTooLarge` (status -50, with the limit) when a secret of `count` bytes is
    /// over the limit.
    public static func check(_ count: Int) throws {
        guard count <= maximumBytes else {
            throw VaultError(.secretTooLarge, refusal(count), extra: ["limit": JSON(maximumBytes)])
        }
    }

    /// What a refusal of a secret of `count` bytes says.
    public static func refusal(_ count: Int) -> String {
        "the secret is \(count) bytes; the limit is \(maximumBytes) bytes (1 MiB)"
    }
}
