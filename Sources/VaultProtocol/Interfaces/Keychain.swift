extension VarlinkInterfaces {
    static let keychain = """
        # Keychain items, as Keychain Services' SecItemAdd / SecItemCopyMatching /
        # SecItemUpdate / SecItemDelete. Binary values travel as base64 strings.
        interface io.vaultd.Keychain

        # An item's attributes. In a query, an absent attribute matches anything.
        type Attributes (
          # kSecAttrService (generic passwords; part of their primary key).
          service: ?string,
          # kSecAttrAccount (part of the primary key of both classes).
          account: ?string,
          # kSecAttrLabel: a user-visible name.
          label: ?string,
          # kSecAttrComment.
          comment: ?string,
          # kSecAttrDescription: the kind of item.
          description: ?string,
          # kSecAttrGeneric: application data, base64.
          generic: ?string,
          # kSecAttrAccessGroup. Add without it uses the caller's default group.
          accessGroup: ?string,
          # kSecAttrAccessible: whenUnlocked (default), afterFirstUnlock,
          # whenUnlockedThisDeviceOnly, afterFirstUnlockThisDeviceOnly,
          # whenPasscodeSetThisDeviceOnly.
          accessible: ?string,
          # kSecAttrSynchronizable (part of the primary key).
          synchronizable: ?bool,
          # kSecAttrServer (internet passwords).
          server: ?string,
          # kSecAttrProtocol, e.g. "https".
          protocol: ?string,
          # kSecAttrPort, 0...65535.
          port: ?int,
          # kSecAttrPath.
          path: ?string,
          # kSecAttrAuthenticationType, e.g. "default", "httpBasic".
          authenticationType: ?string,
          # kSecAttrSecurityDomain.
          securityDomain: ?string,
          # kSecAttrCreationDate, ISO 8601; kept by vaultd, ignored on input.
          creationDate: ?string,
          # kSecAttrModificationDate, ISO 8601; kept by vaultd, ignored on input.
          modificationDate: ?string,
          # The Secret Service's lookup attributes (at most 64). In a query, an item
          # matches when it has every name and value given, exactly.
          lookupAttributes: ?[string]string
        )

        # One result of CopyMatching.
        type Item (
          # "genericPassword" or "internetPassword".
          class: string,
          # Present when returnAttributes was set.
          attributes: ?Attributes,
          # The secret, base64; present when returnData was set.
          data: ?string
        )

        # An item that cannot be read: its row is malformed, or its attributes or secret
        # fail authentication (the store was altered or damaged on disk). Named by what its
        # row holds in clear, never by its attributes or secret.
        type DamagedItem (
          # Its row id in the store.
          id: int,
          # The uuid its ciphertexts are bound to, hex ("" when unreadable).
          uuid: string,
          # As stored; absent when unreadable.
          class: ?string,
          accessGroup: ?string,
          # "row" (malformed columns), "attributes" or "secret".
          damaged: string
        )

        # Adds an item (SecItemAdd). data is the secret, base64, at most 1 MiB decoded.
        method Add(class: string, attributes: Attributes, data: string) -> (attributes: Attributes)

        # Finds items (SecItemCopyMatching). class null matches both classes. matchLimit is
        # "one" (default) or "all". Without returnData and returnAttributes, attributes are returned.
        # damaged: the damaged items the query may match (whose clear columns match), left
        # out of items; absent when none. Only damaged ones match: ItemDamaged.
        method CopyMatching(
          class: ?string,
          query: ?Attributes,
          matchLimit: ?string,
          returnData: ?bool,
          returnAttributes: ?bool
        ) -> (items: []Item, damaged: ?[]DamagedItem)

        # Changes every matching item (SecItemUpdate): attributes given in `attributes` are
        # set, and the secret is replaced when data is given.
        method Update(class: ?string, query: ?Attributes, attributes: ?Attributes, data: ?string) -> (count: int)

        # Deletes every matching item (SecItemDelete).
        method Delete(class: ?string, query: ?Attributes) -> (count: int)

        # An item with the same primary key exists (errSecDuplicateItem, -25299).
        error DuplicateItem (status: int, message: string)
        # Nothing matches (errSecItemNotFound, -25300).
        error ItemNotFound (status: int, message: string)
        # The item's class key is unavailable: the vault is locked (errSecInteractionNotAllowed, -25308).
        error InteractionNotAllowed (status: int, message: string)
        # The caller is not a member of the access group (errSecMissingEntitlement, -34018).
        error MissingEntitlement (status: int, message: string)
        # Authentication failed, or a whenPasscodeSet item without a passphrase (errSecAuthFailed, -25293).
        error AuthFailed (status: int, message: string)
        # Malformed or contradictory request (errSecParam, -50).
        error Param (status: int, message: string)
        # A ThisDeviceOnly item whose class key was made on another device (errSecNotAvailable, -25291).
        error NotAvailableOnThisDevice (status: int, message: string)
        # The only matches are damaged, an Add collides with a damaged item, or an Update
        # would change one (errSecDecode, -26275); nothing was changed. A Delete naming only
        # service or server, account, accessGroup, accessible or synchronizable removes them.
        error ItemDamaged (status: int, message: string, items: []DamagedItem)
        # The secret is larger than 1 MiB (errSecParam, -50).
        error SecretTooLarge (status: int, message: string, limit: int)

        """
}
