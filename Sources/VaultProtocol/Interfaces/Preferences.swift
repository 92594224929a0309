extension VarlinkInterfaces {
    static let preferences = """
        # Preferences, as UserDefaults and defaults(1). Values are tagged property-list
        # values: {"string": s}, {"integer": n}, {"real": x | "inf" | "-inf" | "nan" | "-nan"
        # | "nan(0x" 16 hex digits of a NaN's bits ")"}, {"bool": b}, {"date": "ISO 8601 UTC"}, {"data": base64}, {"array": [...]},
        # {"dict": {...}}. Domains: an app ID, a suite "group.*", or "NSGlobalDomain".
        interface io.vaultd.Preferences

        # The value of one key, or null when the domain has no such key.
        method Get(domain: ?string, key: string) -> (value: ?object)

        # Sets one key; durable when the reply arrives. `sequence`: the write's place in the
        # order of preference writes, as Observe reports it (increasing, not consecutive; a
        # vaultd run numbers from the clock's microseconds at its start, above earlier runs).
        method Set(domain: ?string, key: string, value: object) -> (sequence: int)

        # Removes one key (no error when it is absent); `sequence` as for Set.
        method Remove(domain: ?string, key: string) -> (sequence: int)

        # Every key of one domain.
        method Domain(domain: ?string) -> (values: [string]object)

        # The names of all domains holding at least one key.
        method Domains() -> (domains: []string)

        # Replaces a domain with the contents of a property list (XML or binary, base64),
        # whose root must be a dictionary; or, given `values` instead of `plist`, with those
        # tagged values (what a client sends for a file too large for one message in base64).
        method Import(domain: string, plist: ?string, values: ?[string]object) -> (keys: int)

        # A domain as a property list, base64; format "xml" or "binary".
        method Export(domain: string, format: ?string) -> (plist: string)

        # Streams changes (call with more) to keys of `domains` (apps: default their own
        # domain), or only to `keys` when given, whoever wrote them. The first reply for each
        # domain carries `values`, a snapshot, with `sequence`: the snapshot holds every write
        # numbered up to it; later replies carry `key` and its new `value` (null when
        # removed), in the order the writes committed, with the write's `sequence`
        # (increasing, also from one vaultd run to the next; a writer's Set and Remove
        # replies carry it too).
        method Observe(domains: ?[]string, keys: ?[]string) -> (
          domain: string,
          key: ?string,
          value: ?object,
          values: ?[string]object,
          sequence: ?int
        )

        # Removes a whole domain.
        method RemoveDomain(domain: string) -> (keys: int)

        # The domain would exceed 4 MiB; nothing was written.
        error DomainTooLarge (domain: string, size: int, limit: int, message: string)
        # A value that is not a valid tagged property-list value, or a key too long.
        error InvalidValue (message: string)
        # A property list that cannot be parsed, or whose root is not a dictionary.
        error InvalidPropertyList (message: string)
        # The caller may read but not write this domain.
        error ReadOnlyDomain (domain: string, message: string)

        """
}
