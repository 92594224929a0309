extension VarlinkInterfaces {
    static let sync = """
        # Sync of synchronizable keychain items between the owner's devices, end-to-end
        # encrypted, through a folder an engine such as Syncthing replicates (docs/sync.md).
        # Owner only. Errors: org.varlink.service.InvalidParameter and io.vaultd.Keychain.Param
        # for bad input, io.vaultd.Vault.NotInitialized when this device is not in a group,
        # io.vaultd.Vault.InteractionNotAllowed before the vault's first unlock.
        interface io.vaultd.Sync

        # One device whose directory is in the sync folder.
        type SyncDevice (
          # 32 hex digits: the name of its directory, devices/DEVICE_ID/.
          deviceID: string,
          thisDevice: bool,
          # Segment files in its directory.
          segments: int,
          # Segments not merged here yet (not read yet, or refused).
          pending: int,
          # Segments refused: they failed to authenticate or are malformed (logged).
          rejected: int,
          # The latest change read from it (its hybrid clock's wall time, ISO 8601), or null.
          lastSeen: ?string,
          # member, removed (it left or was removed), or unknown (not approved, as far as
          # this device has read).
          membership: string
        )

        # Makes a new sync group in `folder` (an existing directory, absolute): the group key
        # and this device's directory. `fingerprint` identifies the group key (compare it on
        # every device).
        method Init(folder: string) -> (deviceID: string, fingerprint: string)

        # Asks to join the group syncing through `folder`: writes this device's public key
        # there and returns the pairing code to give Approve on a device of the group.
        method Join(folder: string) -> (deviceID: string, code: string)

        # Seals the group key to the device whose pairing code this is, in the folder.
        method Approve(code: string) -> (deviceID: string)

        # The sync state: off, joining (waiting for an approval), member or removed.
        method Status() -> (
          state: string,
          folder: ?string,
          deviceID: ?string,
          fingerprint: ?string,
          # The generation of the group key this device writes under, or null.
          keyGeneration: ?int,
          devices: []SyncDevice,
          # Live synchronized items of the merged group.
          items: ?int,
          # Why the last pass did not finish, or null.
          problem: ?string,
          # When the last pass finished (ISO 8601), or null.
          lastPass: ?string
        )

        # Stops syncing here: records the leaving in the folder, then forgets the group keys
        # and the sync state (the items stay).
        method Leave() -> ()

        # Removes another device from the group: its later segments are ignored, and a new
        # group key (of `generation`) sealed to the remaining members keeps it out of what is
        # written from now on.
        method Remove(device: string) -> (deviceID: string, generation: int)

        """
}
