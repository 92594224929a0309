#include <sqlite3.h>

/// sqlite3_config is variadic, which Swift cannot call: this turns off SQLite's memory
/// statistics, whose global mutex every allocation of every connection takes. Call it before
/// the first connection opens (sqlite3_config fails with SQLITE_MISUSE afterwards).
static inline int vaultd_sqlite3_disable_memstatus(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

/// sqlite3_db_config is variadic too: this stops the connection from checkpointing its WAL
/// into the database file when it closes (SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE), for a store
/// whose database file is no longer the one the WAL belongs to.
static inline int vaultd_sqlite3_no_checkpoint_on_close(sqlite3 *db) {
    return sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)0);
}
