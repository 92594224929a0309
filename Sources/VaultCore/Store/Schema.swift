/// The store's schema, as named migrations. Never edit a shipped migration: append one.
enum Schema {
    static var migrator: Migrator {
        var m = Migrator()
        m.register("2026-11-29-initial", initial)
        m.register("2026-11-29-apps", apps)
        m.register("2026-11-30-items-uuid-unindexed", itemsUUIDUnindexed)
        m.register("2026-11-30-preferences-wire-size", preferencesWireSize)
        m.register("2026-11-30-apps-unreported-launch-wipe", appsUnreportedLaunchWipe)
        m.register("2026-11-30-app-generations", appGenerations)
        m.register("2026-11-30-items-lookup-index", itemsLookupIndex)
        m.register("2026-11-30-items-lookup-in-memory", itemsLookupInMemory)
        m.register("2026-12-01-apps-missing-since", appsMissingSince)
        m.register("2026-12-01-app-usage", appUsage)
        m.register("2026-12-01-preferences-modified", preferencesModified)
        m.register("2026-12-01-item-lookup-attributes", itemLookupAttributes)
        m.register("2026-12-02-sync-baseline", syncBaseline)
        m.register("2026-12-02-items-primary-key-unique", itemsPrimaryKeyUnique)
        m.register("2026-12-06-collection-labels", collectionLabels)
        m.register("2026-12-07-item-creators", itemCreators)
        return m
    }

    /// The first schema: the vault's metadata, the keychain's items and the preferences.
    private static func initial(_ db: MigrationDatabase) throws {
        try db.execute(
            """
            CREATE TABLE vault_meta (
              key TEXT PRIMARY KEY NOT NULL,
              value BLOB NOT NULL
            );
            CREATE TABLE items (
              id INTEGER PRIMARY KEY,
              uuid BLOB NOT NULL UNIQUE,              -- random identity, bound into every ciphertext
              item_class TEXT NOT NULL,               -- genericPassword | internetPassword
              access_group TEXT NOT NULL,
              accessible TEXT NOT NULL,
              synchronizable INTEGER NOT NULL,
              primary_key_hash BLOB NOT NULL UNIQUE,  -- keyed BLAKE2b of class, group, sync, primary key
              service_hash BLOB,                      -- keyed hashes for indexed lookups
              account_hash BLOB,
              server_hash BLOB,
              attributes BLOB NOT NULL,               -- AEAD under the metadata key
              wrapped_key BLOB NOT NULL,              -- the item key, AEAD under its class key
              secret BLOB NOT NULL,                   -- AEAD under the item key
              generation TEXT                         -- install generation of the app that added it
            );
            CREATE INDEX items_service ON items (service_hash);
            CREATE INDEX items_account ON items (account_hash);
            CREATE INDEX items_server ON items (server_hash);
            CREATE INDEX items_group ON items (access_group);
            CREATE TABLE preferences (
              domain TEXT NOT NULL,
              key TEXT NOT NULL,
              value BLOB NOT NULL,                    -- tagged JSON property-list value
              size INTEGER NOT NULL,                  -- bytes counted against the domain limit
              PRIMARY KEY (domain, key)
            ) WITHOUT ROWID;
            """)
    }

    /// Registered apps, and the items found by the install generation that added them.
    private static func apps(_ db: MigrationDatabase) throws {
        try db.execute(
            """
            CREATE TABLE apps (
              app_id TEXT PRIMARY KEY NOT NULL,
              executable TEXT,                        -- identifies the app through /proc/PID/exe
              flatpak INTEGER NOT NULL,               -- identified through /.flatpak-info instead
              access_groups TEXT NOT NULL,            -- JSON array
              app_groups TEXT NOT NULL,               -- JSON array of group.*
              keep_credentials INTEGER NOT NULL,
              installed INTEGER NOT NULL,
              generation TEXT NOT NULL,               -- current install generation (UUID)
              installed_at REAL NOT NULL,             -- Unix time
              launched_generation TEXT,               -- generation whose first launch happened
              executable_missing INTEGER NOT NULL DEFAULT 0  -- uninstalled because the executable vanished
            );
            CREATE INDEX items_generation ON items (generation);
            """)
    }

    /// An index on a random key costs each added item a page of its own in the WAL. No
    /// query looks items up by uuid; it only binds the ciphertexts to their row, and 128
    /// random bits are unique without an index. The table is rebuilt without it (SQLite
    /// cannot drop a column constraint), as https://sqlite.org/lang_altertable.html#otheralter
    /// describes: no foreign key, view or trigger refers to `items`, and ids are kept.
    private static func itemsUUIDUnindexed(_ db: MigrationDatabase) throws {
        try db.execute(
            """
            CREATE TABLE items_rebuilt (
              id INTEGER PRIMARY KEY,
              uuid BLOB NOT NULL,                     -- random identity, bound into every ciphertext
              item_class TEXT NOT NULL,               -- genericPassword | internetPassword
              access_group TEXT NOT NULL,
              accessible TEXT NOT NULL,
              synchronizable INTEGER NOT NULL,
              primary_key_hash BLOB NOT NULL UNIQUE,  -- keyed BLAKE2b of class, group, sync, primary key
              service_hash BLOB,                      -- keyed hashes for indexed lookups
              account_hash BLOB,
              server_hash BLOB,
              attributes BLOB NOT NULL,               -- AEAD under the metadata key
              wrapped_key BLOB NOT NULL,              -- the item key, AEAD under its class key
              secret BLOB NOT NULL,                   -- AEAD under the item key
              generation TEXT                         -- install generation of the app that added it
            );
            INSERT INTO items_rebuilt (id, uuid, item_class, access_group, accessible, synchronizable, primary_key_hash,
              service_hash, account_hash, server_hash, attributes, wrapped_key, secret, generation)
            SELECT id, uuid, item_class, access_group, accessible, synchronizable, primary_key_hash,
              service_hash, account_hash, server_hash, attributes, wrapped_key, secret, generation FROM items;
            DROP TABLE items;
            ALTER TABLE items_rebuilt RENAME TO items;
            CREATE INDEX items_service ON items (service_hash);
            CREATE INDEX items_account ON items (account_hash);
            CREATE INDEX items_server ON items (server_hash);
            CREATE INDEX items_group ON items (access_group);
            CREATE INDEX items_generation ON items (generation);
            """)
    }

    /// Entries count their wire size against the domain limit too (`entrySize`): rows an
    /// earlier vaultd wrote are counted again, so a domain that fits reads whole. A value
    /// that no longer decodes keeps its count.
    private static func preferencesWireSize(_ db: MigrationDatabase) throws {
        for r in try db.rows("SELECT domain, key, value FROM preferences") {
            guard let domain = r[0].text, let key = r[1].text, let blob = r[2].blob,
                let value = PreferencesStore.decode(blob)
            else { continue }
            try db.run(
                "UPDATE preferences SET size = ? WHERE domain = ? AND key = ?",
                [
                    .integer(
                        Int64(PreferencesStore.entrySize(key: key, value: value, stored: blob))),
                    .text(domain), .text(key),
                ])
        }
    }

    /// A first launch that began with a call other than Hello wipes at once (an app must
    /// not read leftovers by skipping Hello) and leaves its report to the first Hello.
    private static func appsUnreportedLaunchWipe(_ db: MigrationDatabase) throws {
        try db.execute("ALTER TABLE apps ADD COLUMN unreported_launch_wipe INTEGER")
    }

    /// Which app each install generation was: a reinstall's first launch can then wipe its
    /// earlier installs' items also in groups it no longer has. Items made before this
    /// know only a generation, which the apps' current ones cover from here on.
    private static func appGenerations(_ db: MigrationDatabase) throws {
        try db.execute(
            """
            CREATE TABLE app_generations (generation TEXT PRIMARY KEY NOT NULL, app_id TEXT NOT NULL);
            INSERT OR IGNORE INTO app_generations (generation, app_id) SELECT generation, app_id FROM apps;
            """)
    }

    /// With many writers, a group commit's transaction is most of a durable add's time,
    /// and most of it goes to indexes on random keys (service, account, primary key),
    /// each writing a page of its own per added item to the WAL. So one index serves
    /// lookups and the primary key's uniqueness:
    /// `lookup_hash` is the keyed hash of the service (generic passwords) or the server
    /// (internet passwords), which every item has, so a query naming either, with or
    /// without the account, finds its rows through the index's prefix. A query naming
    /// only the account scans that index (it covers `account_hash`). The hashes are the
    /// ones stored before (same key, same domain labels), so no key is needed here: the
    /// vault may be locked while it migrates. A primary key (class, group, sync, service
    /// or server, account, …) determines all three columns, so the three are unique
    /// exactly when `primary_key_hash` is. Ids are kept; the rebuild follows
    /// https://sqlite.org/lang_altertable.html#otheralter as the uuid migration does.
    private static func itemsLookupIndex(_ db: MigrationDatabase) throws {
        try db.execute(
            """
            CREATE TABLE items_rebuilt (
              id INTEGER PRIMARY KEY,
              uuid BLOB NOT NULL,                     -- random identity, bound into every ciphertext
              item_class TEXT NOT NULL,               -- genericPassword | internetPassword
              access_group TEXT NOT NULL,
              accessible TEXT NOT NULL,
              synchronizable INTEGER NOT NULL,
              primary_key_hash BLOB NOT NULL,         -- keyed BLAKE2b of class, group, sync, primary key
              lookup_hash BLOB,                       -- keyed hash of the service (generic) or server (internet)
              account_hash BLOB,                      -- keyed hash of the account
              attributes BLOB NOT NULL,               -- AEAD under the metadata key
              wrapped_key BLOB NOT NULL,              -- the item key, AEAD under its class key
              secret BLOB NOT NULL,                   -- AEAD under the item key
              generation TEXT                         -- install generation of the app that added it
            );
            INSERT INTO items_rebuilt (id, uuid, item_class, access_group, accessible, synchronizable, primary_key_hash,
              lookup_hash, account_hash, attributes, wrapped_key, secret, generation)
            SELECT id, uuid, item_class, access_group, accessible, synchronizable, primary_key_hash,
              coalesce(service_hash, server_hash), account_hash, attributes, wrapped_key, secret, generation FROM items;
            DROP TABLE items;
            ALTER TABLE items_rebuilt RENAME TO items;
            CREATE UNIQUE INDEX items_lookup ON items (lookup_hash, account_hash, primary_key_hash);
            CREATE INDEX items_group ON items (access_group);
            CREATE INDEX items_generation ON items (generation);
            """)
    }

    /// `items_lookup` would cost each added item a page of its own in the WAL (its key is
    /// a random hash), so the index is kept in memory (`ItemIndex`), built from the table
    /// at each start. The uniqueness of `primary_key_hash` is checked there too.
    private static func itemsLookupInMemory(_ db: MigrationDatabase) throws {
        try db.execute("DROP INDEX items_lookup")
    }

    /// An executable that went missing starts a grace period (`missing_since`, Unix
    /// time) instead of uninstalling at once: a rebuild or an upgrade that removes, then
    /// writes the file keeps its app installed.
    private static func appsMissingSince(_ db: MigrationDatabase) throws {
        try db.execute("ALTER TABLE apps ADD COLUMN missing_since REAL")
    }

    /// Each app's storage quota (`StorageQuota`): the bytes of the items it added, kept by
    /// triggers in the transaction of every change to `items` (a rebuild of `items` drops
    /// them: make them again after one).
    private static func appUsage(_ db: MigrationDatabase) throws {
        try db.execute(
            """
            CREATE TABLE app_usage (
              app_id TEXT PRIMARY KEY NOT NULL,
              bytes INTEGER NOT NULL                  -- attributes, wrapped key and secret of the items it added
            );
            INSERT INTO app_usage (app_id, bytes)
              SELECT g.app_id, SUM(length(i.attributes) + length(i.wrapped_key) + length(i.secret))
              FROM items i JOIN app_generations g ON g.generation = i.generation GROUP BY g.app_id;
            CREATE TRIGGER items_usage_insert AFTER INSERT ON items WHEN NEW.generation IS NOT NULL BEGIN
              INSERT INTO app_usage (app_id, bytes)
                SELECT app_id, length(NEW.attributes) + length(NEW.wrapped_key) + length(NEW.secret)
                FROM app_generations WHERE generation = NEW.generation
                ON CONFLICT (app_id) DO UPDATE SET bytes = bytes + excluded.bytes;
            END;
            CREATE TRIGGER items_usage_delete AFTER DELETE ON items WHEN OLD.generation IS NOT NULL BEGIN
              UPDATE app_usage SET bytes = bytes - (length(OLD.attributes) + length(OLD.wrapped_key) + length(OLD.secret))
                WHERE app_id = (SELECT app_id FROM app_generations WHERE generation = OLD.generation);
            END;
            CREATE TRIGGER items_usage_update AFTER UPDATE OF attributes, wrapped_key, secret, generation ON items BEGIN
              UPDATE app_usage SET bytes = bytes - (length(OLD.attributes) + length(OLD.wrapped_key) + length(OLD.secret))
                WHERE OLD.generation IS NOT NULL AND app_id = (SELECT app_id FROM app_generations WHERE generation = OLD.generation);
              INSERT INTO app_usage (app_id, bytes)
                SELECT app_id, length(NEW.attributes) + length(NEW.wrapped_key) + length(NEW.secret)
                FROM app_generations WHERE generation = NEW.generation
                ON CONFLICT (app_id) DO UPDATE SET bytes = bytes + excluded.bytes;
            END;
            """)
    }

    /// When each preference was last written (Unix time; NULL for those written before):
    /// a restore that merges keeps, per key, the one written last.
    private static func preferencesModified(_ db: MigrationDatabase) throws {
        try db.execute("ALTER TABLE preferences ADD COLUMN modified REAL")
    }

    /// The Secret Service's lookup attributes (`ItemAttributes.lookupAttributes`): a keyed
    /// hash of each name and value of an item (`KeychainStore.lookupAttributeHashes`),
    /// by which a search finds the items having all of those it names, exactly. Rows go
    /// with their item (the trigger; a rebuild of `items` drops it: make it again).
    private static func itemLookupAttributes(_ db: MigrationDatabase) throws {
        try db.execute(
            """
            CREATE TABLE item_lookup_attributes (
              hash BLOB NOT NULL,                     -- keyed BLAKE2b of one name and value
              item_id INTEGER NOT NULL,               -- items.id
              PRIMARY KEY (hash, item_id)
            ) WITHOUT ROWID;
            CREATE INDEX item_lookup_attributes_item ON item_lookup_attributes (item_id);
            CREATE TRIGGER items_lookup_attributes_delete AFTER DELETE ON items BEGIN
              DELETE FROM item_lookup_attributes WHERE item_id = OLD.id;
            END;
            """)
    }

    /// Sync (docs/sync.md): each synchronized item's fields after the last pass (the
    /// timestamp of the write that won each, and its value's hash), by the hash of its key
    /// (hashes keyed with the index key: nothing of an item in clear), from which a pass
    /// tells local changes from merged ones, and writes the folder lost from those it had.
    private static func syncBaseline(_ db: MigrationDatabase) throws {
        try db.execute(
            """
            CREATE TABLE sync_baseline (
              key_hash BLOB PRIMARY KEY NOT NULL,     -- keyed BLAKE2b of the item's sync key
              fields BLOB NOT NULL                    -- per field: u8 tag, the winning write's timestamp, 16-byte keyed BLAKE2b of its value
            ) WITHOUT ROWID;
            """)
    }

    /// One item per primary key, held by SQLite again (`ItemIndex` stays the fast path
    /// DuplicateItem is found by; this index catches what a fault in it would let
    /// through, `KeychainStore.store`). `primary_key_hash` is keyed over the class, group,
    /// synchronizable and the class's key attributes, so it is unique per class. A store
    /// that already holds several rows of one primary key keeps the one added last (the
    /// highest id: the app's last write, which its Add was told had succeeded) and moves
    /// the others, as they were (still encrypted and bound to their uuid), to
    /// `items_set_aside`: nothing is deleted; the log says how many, `vaultctl doctor`
    /// lists them. The vault may be locked here: nothing is decrypted.
    private static func itemsPrimaryKeyUnique(_ db: MigrationDatabase) throws {
        try db.execute(
            """
            CREATE TABLE items_set_aside (
              id INTEGER PRIMARY KEY,                 -- its id in items
              kept_id INTEGER NOT NULL,               -- the row of the same primary key left in items
              set_aside_at REAL NOT NULL,             -- Unix time
              uuid BLOB, item_class TEXT, access_group TEXT, accessible TEXT, synchronizable INTEGER,
              primary_key_hash BLOB, lookup_hash BLOB, account_hash BLOB,
              attributes BLOB, wrapped_key BLOB, secret BLOB, generation TEXT
            );
            CREATE TEMP TABLE kept AS
              SELECT primary_key_hash AS hash, max(id) AS id FROM items GROUP BY primary_key_hash HAVING count(*) > 1;
            INSERT INTO items_set_aside (id, kept_id, set_aside_at, uuid, item_class, access_group, accessible, synchronizable,
              primary_key_hash, lookup_hash, account_hash, attributes, wrapped_key, secret, generation)
            SELECT i.id, k.id, (julianday('now') - 2440587.5) * 86400.0, i.uuid, i.item_class, i.access_group, i.accessible, i.synchronizable,
              i.primary_key_hash, i.lookup_hash, i.account_hash, i.attributes, i.wrapped_key, i.secret, i.generation
            FROM items i JOIN kept k ON k.hash = i.primary_key_hash WHERE i.id < k.id;
            DELETE FROM items WHERE id IN (SELECT id FROM items_set_aside);
            DROP TABLE kept;
            CREATE UNIQUE INDEX items_primary_key ON items (primary_key_hash);
            """)
        let moved = try db.row("SELECT count(*) FROM items_set_aside")?[0].int64 ?? 0
        if moved > 0 {
            db.logger.warning(
                "keychain: \(moved) item row(s) had the primary key of a later one; the later one of each is kept, the others were moved to items_set_aside (see `vaultctl doctor`)"
            )
        }
    }

    /// The Secret Service's collection labels (`Vault.setCollectionLabel`): a display
    /// name beside an access group, which keeps its name. A group without a row is
    /// labelled with its name. The label is what a user typed, so it is sealed under the
    /// metadata key as items' attributes are, bound to its access group
    /// (`Vault.collectionLabelAssociatedData`); the group is in the clear, as
    /// `items.access_group` is.
    private static func collectionLabels(_ db: MigrationDatabase) throws {
        try db.execute(
            """
            CREATE TABLE collection_labels (
              access_group TEXT PRIMARY KEY NOT NULL,
              label BLOB NOT NULL                     -- AEAD under the metadata key, bound to access_group
            ) WITHOUT ROWID;
            """)
    }

    /// Per-program access to secrets (issue 40 §2, docs/access.md). `item_creators`: the
    /// program that added each item (`ProgramIdentity`'s JSON sealed under the metadata
    /// key: a script's path may hold what the user typed); an item without a row was
    /// added before this migration, by a program nobody recorded, which never counts as
    /// the reader's own. `access_grants`: the programs the owner allowed to use an item's
    /// secret (Always allow, `vaultctl access grant`), keyed by a keyed hash of the
    /// program's match key (`ProgramIdentity.matchKey`) and sealed for listing. Both follow
    /// their item: deleted with it, moved with its uuid (a replace gives it a new one).
    /// `vault_meta` 'access.default': the mode in force when config.plist sets no
    /// `SecretAccess`; a vault initialised before this keeps `open` (no script breaks on
    /// an upgrade), a vault initialised later gets `confirm` (`Vault.initialize`); a mode
    /// already recorded is kept.
    private static func itemCreators(_ db: MigrationDatabase) throws {
        try db.execute(
            """
            CREATE TABLE item_creators (
              uuid BLOB PRIMARY KEY NOT NULL,         -- items.uuid
              creator BLOB NOT NULL                   -- AEAD under the metadata key
            ) WITHOUT ROWID;
            CREATE TABLE access_grants (
              item_uuid BLOB NOT NULL,                -- items.uuid
              program_hash BLOB NOT NULL,             -- keyed BLAKE2b of the program's match key
              program BLOB NOT NULL,                  -- AEAD under the metadata key
              granted_at REAL NOT NULL,               -- Unix time
              PRIMARY KEY (item_uuid, program_hash)
            ) WITHOUT ROWID;
            CREATE TRIGGER items_access_deleted AFTER DELETE ON items BEGIN
              DELETE FROM item_creators WHERE uuid = old.uuid;
              DELETE FROM access_grants WHERE item_uuid = old.uuid;
            END;
            CREATE TRIGGER items_access_moved AFTER UPDATE OF uuid ON items
              WHEN old.uuid IS NOT new.uuid BEGIN
              UPDATE item_creators SET uuid = new.uuid WHERE uuid = old.uuid;
              UPDATE access_grants SET item_uuid = new.uuid WHERE item_uuid = old.uuid;
            END;
            INSERT OR IGNORE INTO vault_meta (key, value)
              SELECT 'access.default', CAST('open' AS BLOB)
              WHERE EXISTS (SELECT 1 FROM vault_meta WHERE key = 'wrapped.metadata');
            """)
    }
}
