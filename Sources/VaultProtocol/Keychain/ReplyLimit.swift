/// What a keychain lookup's reply may cost vaultd in memory while it is built and sent, and
/// the upper bound vaultd counts against its reply budget before it starts (so a peer asking
/// for large result sets on many connections cannot make vaultd build many large replies at
/// once). The figures are upper bounds of what one found item holds at the reply's peak:
/// its decoded attributes, their JSON tree, the serialized reply and its copy in secure
/// memory with the secrets in (`CallSecrets.reply`), each about the attributes' serialized
/// size; the secret itself in secure memory and in base64 in that copy.
public enum ReplyLimit {
    /// An item's attributes, serialized, may take at most this many bytes (64 KiB); an add
    /// or update past it is refused (Param).
    public static let maximumAttributesBytes = 64 << 10

    /// The memory one reply's items may take, as `itemBytes` counts it, before the lookup
    /// stops with ReplyTooLarge (32 MiB): about 10,000 items of typical attributes without
    /// their data. (A reply is also at most `Varlink.maximumMessageSize` on the wire.)
    public static let maximumBuildBytes = 32 << 20

    /// The most one serialized reply may take (8 MiB, the protocol's message limit): the
    /// secrets of one lookup, in base64, must fit in it.
    public static let maximumReplyBytes = Varlink.maximumMessageSize

    /// Bytes one item with `attributes` bytes of stored (serialized or sealed) attributes and
    /// a secret of `secret` bytes (0: without its data) takes in a reply being built: four
    /// copies of its attributes, 2 KiB of JSON objects and strings around them, and the secret
    /// in secure memory (with a page of rounding) and in base64.
    public static func itemBytes(attributes: Int, secret: Int) -> Int {
        let attributeBytes = 4 * attributes + 2048
        guard secret > 0 else { return attributeBytes }
        return attributeBytes + secret + (secret + 2) / 3 * 4 + 4096
    }

    /// The most a CopyMatching reply can take while it is built and sent: one item at its
    /// limits (`matchAll` false), or `maximumBuildBytes` and the item that passed it
    /// (counted before it is dropped). `returnData`: the secrets are in the reply.
    public static func copyMatchingBytes(matchAll: Bool, returnData: Bool) -> Int {
        // Sealed attributes are their serialized bytes and a 40-byte nonce and tag.
        let one = itemBytes(
            attributes: maximumAttributesBytes + 40,
            secret: returnData ? SecretLimit.maximumBytes : 0)
        return matchAll ? maximumBuildBytes + one : one
    }
}
