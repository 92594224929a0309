#include <sqlite3.h>

/// sqlite3_config is variadic, which Swift cannot call: this turns off SQLite's memory
/// statistics, whose global mutex every allocation of every connection takes. Call it before
/// the first connection opens (sqlite3_config fails with SQLITE_MISUSE afterwards).
static inline int vaultd_sqlite3_disable_memstatus(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}
