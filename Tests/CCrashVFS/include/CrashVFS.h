#ifndef VAULTD_CRASH_VFS_H
#define VAULTD_CRASH_VFS_H

#include <stdint.h>

/// A SQLite VFS for power-cut tests, after SQLite's own crash tests (src/test6.c): it passes
/// every call to the VFS named `base` and remembers, per file, the writes and truncations the
/// disk has not yet been told to keep (no xSync of that file, and no fdatasync reported through
/// `crash_vfs_sync_begin`/`_end`, since it ran). `crash_vfs_power_cut` then plays the cut: each
/// file goes back to what its last sync kept, and a random subset of the later writes lands
/// again, some whole and some torn (a random subset of their 512-byte sectors), as a disk that
/// reorders and loses its cache would leave them.
///
/// Registers the VFS under `name` (not as the default). Returns SQLITE_OK or an error code.
int crash_vfs_register(const char *name, const char *base);

/// The files the cut applies to: those whose path starts with `prefix` (NULL: none). Every
/// other file passes through the VFS untouched and uncounted.
void crash_vfs_watch(const char *prefix);

/// Arms the cut: after `operations` more writes, truncations and syncs, the machine "dies":
/// that operation and every later one fails (SQLITE_IOERR) without touching the disk, and so
/// does every sync reported through `crash_vfs_sync_begin`/`_end`. 0 disarms.
void crash_vfs_arm(uint64_t operations);

/// Whether the machine died since it was armed.
int crash_vfs_dead(void);

/// Writes, truncations and syncs seen since the last cut (to size `crash_vfs_arm`'s count).
uint64_t crash_vfs_operations(void);

/// For an fdatasync made outside SQLite, on its own descriptor, of the file at `path`:
/// `begin` before it (returns a token, or UINT64_MAX when the machine is dead: the sync must
/// then fail), `end` after it succeeded (returns 0 when the machine died meanwhile: the sync
/// must then fail). Writes made before `begin` are then kept by a cut.
uint64_t crash_vfs_sync_begin(const char *path);
int crash_vfs_sync_end(const char *path, uint64_t token);

/// The cut: every connection through the VFS must be closed. Rewrites each file the VFS saw as
/// the cut would leave it (random choices from `seed`), forgets everything and disarms.
/// Returns the number of unsynced writes that were dropped or torn.
uint64_t crash_vfs_power_cut(uint64_t seed);

#endif
