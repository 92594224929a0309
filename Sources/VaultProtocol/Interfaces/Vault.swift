extension VarlinkInterfaces {
    static let vault = """
        # The vault as a whole: who is calling, its lock state, its passphrase.
        interface io.vaultd.Vault

        # Lock state: uninitialized, locked (before or after the first unlock), unlocked.
        type LockState (
          # "uninitialized", "locked" or "unlocked".
          state: string,
          # Whether the vault has been unlocked since vaultd started (afterFirstUnlock items usable).
          unlockedSinceStart: bool,
          # Whether the vault has a passphrase (false: always unlocked).
          hasPassphrase: bool
        )

        # Who the caller is, as the kernel tells vaultd, and its launch information.
        method Hello() -> (
          # The caller's app ID, or null for an unidentified peer (the owner's tools).
          appID: ?string,
          # The app's install generation (a UUID), or null.
          generation: ?string,
          # True on the first Hello of a new generation.
          firstLaunch: bool,
          # Credentials wiped on this first launch.
          wipedCredentials: int,
          # The keychain access group an Add without one uses: the app's first access group,
          # or "user" for the owner's tools.
          defaultAccessGroup: ?string,
          # The caller's ThisDeviceOnly items made with another device.key (a data directory
          # moved here, or a backup restored here): NotAvailableOnThisDevice; an Add with the
          # same primary key replaces one, a Delete removes it.
          unavailableItems: int
        )

        # The vault's state and figures.
        method Status() -> (
          lock: LockState,
          # vaultd's version.
          version: string,
          # Keychain items stored (for an app: those in its access groups).
          items: int,
          # Of those, ThisDeviceOnly items made with another device.key (NotAvailableOnThisDevice).
          unavailableItems: int,
          # Preference domains stored (for an app: those it may read).
          domains: int,
          # Seconds to wait before the next Unlock is accepted (rate limit), 0 when none.
          retryAfter: float,
          # The data directory (for the owner's tools; null for apps).
          dataDirectory: ?string
        )

        # Creates the vault. Without a passphrase the vault is always unlocked.
        method Init(passphrase: ?string) -> (lock: LockState)

        # Unlocks with the passphrase (Argon2id). Wrong passphrases are rate-limited.
        method Unlock(passphrase: string) -> (lock: LockState)

        # Unlocks with the passphrase remembered in the login keyring (vaultctl unlock
        # --remember: schema io.vaultd.Unlock, attribute vault = the data directory). Never
        # prompts: a locked or absent keyring is KeyringUnavailable. Owner only.
        method UnlockFromKeyring() -> (lock: LockState)

        # Locks: whenUnlocked class keys are wiped from memory.
        method Lock() -> (lock: LockState)

        # Changes, sets (old null) or removes (new null) the passphrase. Class keys are
        # re-wrapped; items are untouched, except that removing it deletes
        # whenPasscodeSetThisDeviceOnly items.
        method ChangePassphrase(old: ?string, new: ?string) -> (lock: LockState, deletedItems: int)

        # Streams lock-state changes (call with more): the current state first, then each change.
        method Observe() -> (lock: LockState)

        # What a restore did to one kind of record: added (absent before), replaced (an older
        # one, by modification date), kept (the vault's was as new or newer).
        type RestoreCounts (added: int, replaced: int, kept: int)

        # Writes a backup of the whole vault to path (absolute, in vaultd's file system),
        # taken in one read transaction while writers go on: every item with its attributes
        # and dates, every preference, the app registrations and their generations; never
        # caches or device.key. Encrypted in vaultd as an age v1 file (scrypt with
        # passphrase, or to the age1… recipients), written atomically with mode 0600.
        # ThisDeviceOnly items only with includeDeviceBound, still sealed by this device's
        # key. A locked vault is InteractionNotAllowed, and nothing is written. Owner only.
        method Backup(path: string, passphrase: ?string, recipients: ?[]string, includeDeviceBound: ?bool) -> (
          # Items written (device-bound ones included).
          items: int,
          # ThisDeviceOnly items written, sealed by this device's key.
          deviceBoundItems: int,
          # ThisDeviceOnly items left out (without includeDeviceBound, or unavailable here).
          leftOutItems: int,
          preferences: int,
          domains: int,
          apps: int,
          # The file's size in bytes.
          bytes: int,
          # Damaged items left out of the backup (the rest is written); absent when none.
          damagedItems: ?[]DamagedItem
        )

        # An item that cannot be read (as io.vaultd.Keychain's DamagedItem): its row is
        # malformed, or its attributes or secret fail authentication.
        type DamagedItem (id: int, uuid: string, class: ?string, accessGroup: ?string, damaged: string)

        # Checks the store (vaultctl doctor): SQLite's integrity check (its first 100 lines;
        # ["ok"] when sound) and every item's row, attributes and, for the classes whose key
        # is in memory, secret. Names damaged items by what their rows hold in clear, never
        # their secrets. Owner only.
        method Check() -> (
          # PRAGMA integrity_check's lines, at most 100: ["ok"] when the file is sound.
          integrity: []string,
          # Item rows read.
          items: int,
          # Items whose secret was not checked: their class key is not in memory (locked),
          # or another device's (NotAvailableOnThisDevice).
          secretsUnchecked: int,
          damaged: []DamagedItem,
          # Rows the primary key's uniqueness set aside when it was added (a second row of
          # one primary key; kept in items_set_aside, not served).
          setAside: int
        )

        # Restores the backup at path: the whole file is opened and checked (authentication,
        # format, counts) before anything changes, then applied in one transaction. Into an
        # uninitialised vault (a new device), which newPassphrase then protects (null: none);
        # into an initialised empty one; or, with merge, into one holding data (the newer
        # modification date wins per item and per preference key; apps absent are added).
        # passphrase opens a passphrase backup, identity (an age identity file's text) one
        # made to a recipient. Owner only.
        method Restore(path: string, passphrase: ?string, identity: ?string, newPassphrase: ?string, merge: ?bool) -> (
          items: RestoreCounts,
          preferences: RestoreCounts,
          apps: RestoreCounts,
          # ThisDeviceOnly items from the backup that were sealed by another device's key:
          # stored, NotAvailableOnThisDevice.
          unavailableItems: int,
          lock: LockState
        )

        # The vault has not been initialised yet.
        error NotInitialized (message: string)
        # Init on a vault that exists.
        error AlreadyInitialized (message: string)
        # Wrong passphrase (status -25293).
        error AuthFailed (status: int, message: string)
        # Too many failed unlocks, or vaultd holds its limit of other connections' messages in
        # flight (64 MiB of calls being received and replies being sent) and cannot take or
        # send a large one now, or the caller's identity has its share of connections open, or
        # an Observe stream fell a few MiB of events behind unread (observe again): wait
        # retryAfter seconds.
        error RateLimited (retryAfter: float, message: string)
        # The vault has no passphrase (it is always unlocked), so it cannot be locked or unlocked.
        error NoPassphrase (message: string)
        # The login keyring cannot give the remembered passphrase (no session bus or Secret
        # Service, keyring locked, nothing remembered, no answer in time); the message says which.
        error KeyringUnavailable (message: string)
        # The disk holding the data directory is full; nothing was written.
        error StorageFull (message: string)
        # The write would take the app past its storage quota (bytes of the items it added and
        # of its own preferences domain; 64 MiB unless configured); nothing was written.
        error QuotaExceeded (appID: string, size: int, limit: int, message: string)
        # The caller may not use this method (e.g. an app calling an owner-only method).
        error PermissionDenied (message: string)
        # The backup file cannot be read as one: not an age file, malformed, altered,
        # truncated, over the size limits, or not a vaultd backup; nothing was changed.
        error BackupUnreadable (message: string)
        # The passphrase or identity given does not open the backup file; nothing was changed.
        error BackupAuthFailed (message: string)
        # Restore without merge into a vault that holds items, preferences or apps.
        error NotEmpty (message: string)
        # vaultd found its database file replaced or truncated underneath it while it ran;
        # it serves no more writes until it is restarted (the message says what it saw).
        error StoreReplaced (message: string)
        # SQLite reports the store malformed: vaultd writes nothing more until it restarts,
        # and does not start on such a store; the message says what to do (restore a backup).
        error StoreDamaged (message: string)
        # vaultd failed in a way it did not expect; the message says where.
        error InternalError (message: string)
        # The answer to a call would be a message over the size limit (8 MiB; e.g. the secrets
        # of many large items at once): nothing was sent. Narrow the call (matchLimit one,
        # no data, fewer items).
        error ReplyTooLarge (size: int, limit: int, message: string)

        """
}
