// The power-cut VFS (include/CrashVFS.h). Every write, truncation and sync goes to the base
// VFS at once, so reads see them; what the VFS adds is the record of what a power cut could
// still take away: per file (by device and inode), the operations since its last sync, each
// with the bytes it replaced, so the file's synced image can be rebuilt at the cut.
#include "CrashVFS.h"

#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { SECTOR = 512 };

/// One operation the disk was not yet told to keep. A write: `offset`, `length`, `data`; a
/// truncation: `offset` is the new size, `length` 0. Both: `old_size` (the file's size before)
/// and `old` (the bytes it replaced: for a write, those of [offset, offset + old_length) that
/// existed; for a truncation, those it cut off, [offset, old_size)).
typedef struct Pending {
    uint64_t seq;
    int truncation;
    sqlite3_int64 offset;
    int length;
    unsigned char *data;
    sqlite3_int64 old_size;
    sqlite3_int64 old_length;
    unsigned char *old;
    struct Pending *next;
} Pending;

/// A file the VFS wrote to, by identity, with its unsynced operations in order.
typedef struct Tracked {
    dev_t dev;
    ino_t ino;
    char *path;
    Pending *first, *last;
    struct Tracked *next;
} Tracked;

typedef struct CrashFile {
    sqlite3_file base;
    Tracked *tracked;  // NULL for a file the cut need not know (temporary files)
    sqlite3_file *real;  // the base VFS's file, allocated right after this struct
} CrashFile;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static sqlite3_vfs crash_vfs;
static sqlite3_vfs *base_vfs;
static Tracked *files;
static uint64_t sequence;  // operations seen since the last cut
static uint64_t deadline;  // the operation that dies (0: disarmed)
static int dead;
static char *watched;  // the path prefix of the files the cut applies to (NULL: none)

/// Whether the file at `path` is one the cut applies to (under the watched prefix); every
/// other file passes through untouched and uncounted, as other tests' stores do.
static int is_watched(const char *path) {
    return path && watched && strncmp(path, watched, strlen(watched)) == 0;
}

static void free_pending(Pending *p) {
    free(p->data);
    free(p->old);
    free(p);
}

/// Forgets `t`'s operations up to (excluding) `seq`: they are on the disk.
static void synced(Tracked *t, uint64_t seq) {
    while (t->first && t->first->seq < seq) {
        Pending *p = t->first;
        t->first = p->next;
        free_pending(p);
    }
    if (!t->first) t->last = NULL;
}

static Tracked *tracked_file(dev_t dev, ino_t ino, const char *path, int create) {
    for (Tracked *t = files; t; t = t->next)
        if (t->dev == dev && t->ino == ino) return t;
    if (!create) return NULL;
    Tracked *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->dev = dev;
    t->ino = ino;
    t->path = strdup(path);
    t->next = files;
    files = t;
    return t;
}

/// Counts one operation; returns 0 when the machine is (or now becomes) dead.
static int alive(void) {
    if (dead) return 0;
    sequence++;
    if (deadline && sequence >= deadline) {
        dead = 1;
        return 0;
    }
    return 1;
}

static void append(Tracked *t, Pending *p) {
    p->seq = sequence;
    if (t->last) t->last->next = p; else t->first = p;
    t->last = p;
}

// MARK: the file's methods

static int x_close(sqlite3_file *f) {
    CrashFile *c = (CrashFile *)f;
    return c->real->pMethods ? c->real->pMethods->xClose(c->real) : SQLITE_OK;
}

static int x_read(sqlite3_file *f, void *buf, int n, sqlite3_int64 off) {
    CrashFile *c = (CrashFile *)f;
    return c->real->pMethods->xRead(c->real, buf, n, off);
}

/// A record of what `c`'s next write or truncation at `offset` replaces: the file's size and
/// the bytes of [offset, offset + length) that exist (length -1: to the file's end). SQLITE_OK
/// with `*out` set, or an error. Called with `lock` held.
static int prepare(CrashFile *c, sqlite3_int64 offset, sqlite3_int64 length, Pending **out) {
    sqlite3_int64 size = 0;
    int rc = c->real->pMethods->xFileSize(c->real, &size);
    if (rc != SQLITE_OK) return rc;
    Pending *p = calloc(1, sizeof *p);
    if (!p) return SQLITE_NOMEM;
    sqlite3_int64 end = length < 0 || offset + length > size ? size : offset + length;
    p->offset = offset;
    p->old_size = size;
    p->old_length = end > offset ? end - offset : 0;
    p->old = malloc(p->old_length ? p->old_length : 1);
    rc = p->old ? SQLITE_OK : SQLITE_NOMEM;
    if (rc == SQLITE_OK && p->old_length)
        rc = c->real->pMethods->xRead(c->real, p->old, (int)p->old_length, offset);
    if (rc != SQLITE_OK) {
        free_pending(p);
        return rc;
    }
    *out = p;
    return SQLITE_OK;
}

/// Ends a write or truncation begun with `prepare`: its record is kept when it succeeded.
/// Releases `lock`.
static int settle(CrashFile *c, Pending *p, int rc) {
    if (p && rc == SQLITE_OK) append(c->tracked, p);
    else if (p) free_pending(p);
    pthread_mutex_unlock(&lock);
    return rc;
}

static int x_write(sqlite3_file *f, const void *buf, int n, sqlite3_int64 off) {
    CrashFile *c = (CrashFile *)f;
    if (!c->tracked) return c->real->pMethods->xWrite(c->real, buf, n, off);
    pthread_mutex_lock(&lock);
    Pending *p = NULL;
    int rc = alive() ? prepare(c, off, n, &p) : SQLITE_IOERR_WRITE;
    if (rc == SQLITE_OK) {
        p->length = n;
        p->data = malloc(n ? n : 1);
        rc = p->data ? SQLITE_OK : SQLITE_NOMEM;
    }
    if (rc == SQLITE_OK) {
        memcpy(p->data, buf, n);
        rc = c->real->pMethods->xWrite(c->real, buf, n, off);
    }
    return settle(c, p, rc);
}

static int x_truncate(sqlite3_file *f, sqlite3_int64 size) {
    CrashFile *c = (CrashFile *)f;
    if (!c->tracked) return c->real->pMethods->xTruncate(c->real, size);
    pthread_mutex_lock(&lock);
    Pending *p = NULL;
    int rc = alive() ? prepare(c, size, -1, &p) : SQLITE_IOERR_TRUNCATE;
    if (rc == SQLITE_OK) {
        p->truncation = 1;
        rc = c->real->pMethods->xTruncate(c->real, size);
    }
    return settle(c, p, rc);
}

static int x_sync(sqlite3_file *f, int flags) {
    CrashFile *c = (CrashFile *)f;
    if (!c->tracked) return c->real->pMethods->xSync(c->real, flags);
    pthread_mutex_lock(&lock);
    int rc = SQLITE_IOERR_FSYNC;
    if (alive()) {
        rc = c->real->pMethods->xSync(c->real, flags);
        if (rc == SQLITE_OK) synced(c->tracked, sequence + 1);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int x_file_size(sqlite3_file *f, sqlite3_int64 *size) {
    CrashFile *c = (CrashFile *)f;
    return c->real->pMethods->xFileSize(c->real, size);
}

static int x_lock(sqlite3_file *f, int level) {
    CrashFile *c = (CrashFile *)f;
    return c->real->pMethods->xLock(c->real, level);
}

static int x_unlock(sqlite3_file *f, int level) {
    CrashFile *c = (CrashFile *)f;
    return c->real->pMethods->xUnlock(c->real, level);
}

static int x_check_reserved_lock(sqlite3_file *f, int *out) {
    CrashFile *c = (CrashFile *)f;
    return c->real->pMethods->xCheckReservedLock(c->real, out);
}

static int x_file_control(sqlite3_file *f, int op, void *arg) {
    CrashFile *c = (CrashFile *)f;
    return c->real->pMethods->xFileControl(c->real, op, arg);
}

static int x_sector_size(sqlite3_file *f) {
    CrashFile *c = (CrashFile *)f;
    return c->real->pMethods->xSectorSize(c->real);
}

static int x_device_characteristics(sqlite3_file *f) {
    CrashFile *c = (CrashFile *)f;
    return c->real->pMethods->xDeviceCharacteristics(c->real);
}

static int x_shm_map(sqlite3_file *f, int page, int size, int extend, void volatile **out) {
    CrashFile *c = (CrashFile *)f;
    return c->real->pMethods->xShmMap(c->real, page, size, extend, out);
}

static int x_shm_lock(sqlite3_file *f, int offset, int n, int flags) {
    CrashFile *c = (CrashFile *)f;
    return c->real->pMethods->xShmLock(c->real, offset, n, flags);
}

static void x_shm_barrier(sqlite3_file *f) {
    CrashFile *c = (CrashFile *)f;
    c->real->pMethods->xShmBarrier(c->real);
}

static int x_shm_unmap(sqlite3_file *f, int delete_flag) {
    CrashFile *c = (CrashFile *)f;
    return c->real->pMethods->xShmUnmap(c->real, delete_flag);
}

// Memory-mapped reads are left off (xFetch gives no page): every read goes through xRead,
// which sees the file as the writes left it.
static int x_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **out) {
    (void)f, (void)off, (void)n;
    *out = NULL;
    return SQLITE_OK;
}

static int x_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p) {
    (void)f, (void)off, (void)p;
    return SQLITE_OK;
}

static const sqlite3_io_methods io_methods = {
    3, x_close, x_read, x_write, x_truncate, x_sync, x_file_size, x_lock, x_unlock,
    x_check_reserved_lock, x_file_control, x_sector_size, x_device_characteristics, x_shm_map,
    x_shm_lock, x_shm_barrier, x_shm_unmap, x_fetch, x_unfetch,
};

// MARK: the VFS's methods

static int v_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *f, int flags,
                  int *out_flags) {
    (void)vfs;
    CrashFile *c = (CrashFile *)f;
    c->real = (sqlite3_file *)(c + 1);
    c->tracked = NULL;
    int rc = base_vfs->xOpen(base_vfs, name, c->real, flags, out_flags);
    if (rc != SQLITE_OK) {
        c->base.pMethods = NULL;
        return rc;
    }
    c->base.pMethods = &io_methods;
    struct stat st;
    pthread_mutex_lock(&lock);
    if (is_watched(name)
        && (flags & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_WAL | SQLITE_OPEN_MAIN_JOURNAL))
        && stat(name, &st) == 0)
        c->tracked = tracked_file(st.st_dev, st.st_ino, name, 1);
    pthread_mutex_unlock(&lock);
    return SQLITE_OK;
}

static int v_delete(sqlite3_vfs *vfs, const char *name, int sync_dir) {
    (void)vfs;
    pthread_mutex_lock(&lock);
    if (!is_watched(name)) {
        pthread_mutex_unlock(&lock);
        return base_vfs->xDelete(base_vfs, name, sync_dir);
    }
    int rc = SQLITE_IOERR_DELETE;
    if (alive()) {
        struct stat st;
        Tracked *t = stat(name, &st) == 0 ? tracked_file(st.st_dev, st.st_ino, name, 0) : NULL;
        rc = base_vfs->xDelete(base_vfs, name, sync_dir);
        // The file is gone: nothing of it is left to a cut (a deletion a cut could undo is
        // not modelled).
        if (rc == SQLITE_OK && t) synced(t, UINT64_MAX);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int v_access(sqlite3_vfs *vfs, const char *name, int flags, int *out) {
    (void)vfs;
    return base_vfs->xAccess(base_vfs, name, flags, out);
}

static int v_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out) {
    (void)vfs;
    return base_vfs->xFullPathname(base_vfs, name, n, out);
}

static void *v_dl_open(sqlite3_vfs *vfs, const char *name) {
    (void)vfs;
    return base_vfs->xDlOpen(base_vfs, name);
}

static void v_dl_error(sqlite3_vfs *vfs, int n, char *out) {
    (void)vfs;
    base_vfs->xDlError(base_vfs, n, out);
}

static void (*v_dl_sym(sqlite3_vfs *vfs, void *h, const char *sym))(void) {
    (void)vfs;
    return base_vfs->xDlSym(base_vfs, h, sym);
}

static void v_dl_close(sqlite3_vfs *vfs, void *h) {
    (void)vfs;
    base_vfs->xDlClose(base_vfs, h);
}

static int v_randomness(sqlite3_vfs *vfs, int n, char *out) {
    (void)vfs;
    return base_vfs->xRandomness(base_vfs, n, out);
}

static int v_sleep(sqlite3_vfs *vfs, int us) {
    (void)vfs;
    return base_vfs->xSleep(base_vfs, us);
}

static int v_current_time(sqlite3_vfs *vfs, double *out) {
    (void)vfs;
    return base_vfs->xCurrentTime(base_vfs, out);
}

static int v_get_last_error(sqlite3_vfs *vfs, int n, char *out) {
    (void)vfs;
    return base_vfs->xGetLastError ? base_vfs->xGetLastError(base_vfs, n, out) : 0;
}

static int v_current_time_int64(sqlite3_vfs *vfs, sqlite3_int64 *out) {
    (void)vfs;
    return base_vfs->xCurrentTimeInt64(base_vfs, out);
}

int crash_vfs_register(const char *name, const char *base) {
    pthread_mutex_lock(&lock);
    int rc = SQLITE_OK;
    if (!base_vfs) {
        base_vfs = sqlite3_vfs_find(base);
        if (!base_vfs || base_vfs->iVersion < 2) {
            base_vfs = NULL;
            rc = SQLITE_ERROR;
        } else {
            crash_vfs = (sqlite3_vfs){
                2, (int)sizeof(CrashFile) + base_vfs->szOsFile, base_vfs->mxPathname, NULL,
                strdup(name), NULL, v_open, v_delete, v_access, v_full_pathname, v_dl_open,
                v_dl_error, v_dl_sym, v_dl_close, v_randomness, v_sleep, v_current_time,
                v_get_last_error, v_current_time_int64,
            };
            rc = sqlite3_vfs_register(&crash_vfs, 0);
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

void crash_vfs_watch(const char *prefix) {
    pthread_mutex_lock(&lock);
    free(watched);
    watched = prefix ? strdup(prefix) : NULL;
    pthread_mutex_unlock(&lock);
}

void crash_vfs_arm(uint64_t operations) {
    pthread_mutex_lock(&lock);
    deadline = operations ? sequence + operations : 0;
    pthread_mutex_unlock(&lock);
}

int crash_vfs_dead(void) {
    pthread_mutex_lock(&lock);
    int d = dead;
    pthread_mutex_unlock(&lock);
    return d;
}

uint64_t crash_vfs_operations(void) {
    pthread_mutex_lock(&lock);
    uint64_t n = sequence;
    pthread_mutex_unlock(&lock);
    return n;
}

uint64_t crash_vfs_sync_begin(const char *path) {
    pthread_mutex_lock(&lock);
    uint64_t token = !is_watched(path) ? 0 : alive() ? sequence : UINT64_MAX;
    pthread_mutex_unlock(&lock);
    return token;
}

int crash_vfs_sync_end(const char *path, uint64_t token) {
    pthread_mutex_lock(&lock);
    if (!is_watched(path)) {
        pthread_mutex_unlock(&lock);
        return 1;
    }
    int ok = !dead && token != UINT64_MAX;
    struct stat st;
    if (ok && stat(path, &st) == 0) {
        Tracked *t = tracked_file(st.st_dev, st.st_ino, path, 0);
        if (t) synced(t, token);
    }
    pthread_mutex_unlock(&lock);
    return ok;
}

// MARK: the cut

/// A small generator for the cut's choices (splitmix64), so a seed replays a cut.
static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void write_all(int fd, const unsigned char *p, sqlite3_int64 n, sqlite3_int64 off) {
    while (n > 0) {
        ssize_t w = pwrite(fd, p, (size_t)n, off);
        if (w <= 0) return;
        p += w, n -= w, off += w;
    }
}

/// Puts `p` back: its old bytes where it wrote or cut, and the size the file had.
static void undo(int fd, const Pending *p) {
    if (p->old_length) write_all(fd, p->old, p->old_length, p->offset);
    if (ftruncate(fd, p->old_size) != 0) return;
}

/// Lands `p` again: whole, or (a write, when `torn`) only a random subset of its sectors.
/// Returns whether any of it was left out.
static int redo(int fd, const Pending *p, int torn, uint64_t *random) {
    if (p->truncation) {
        if (ftruncate(fd, p->offset) != 0) return 1;
        return 0;
    }
    if (!torn) {
        write_all(fd, p->data, p->length, p->offset);
        return 0;
    }
    int left_out = 0;
    for (int at = 0; at < p->length; at += SECTOR) {
        int n = p->length - at < SECTOR ? p->length - at : SECTOR;
        if (next_random(random) & 1) write_all(fd, p->data + at, n, p->offset + at);
        else left_out = 1;
    }
    return left_out;
}

uint64_t crash_vfs_power_cut(uint64_t seed) {
    pthread_mutex_lock(&lock);
    uint64_t random = seed, lost = 0;
    while (files) {
        Tracked *t = files;
        files = t->next;
        int fd = t->first ? open(t->path, O_RDWR | O_CLOEXEC) : -1;
        if (fd >= 0) {
            // Back to the synced image: undo from the newest to the oldest.
            size_t n = 0;
            for (Pending *p = t->first; p; p = p->next) n++;
            Pending **order = calloc(n, sizeof *order);
            if (order) {
                size_t i = 0;
                for (Pending *p = t->first; p; p = p->next) order[i++] = p;
                for (size_t k = n; k > 0; k--) undo(fd, order[k - 1]);
                free(order);
            }
            // Then each later operation lands whole (half of them), is dropped (a quarter),
            // or is torn (a quarter), in the order they were made.
            for (Pending *p = t->first; p; p = p->next) {
                uint64_t r = next_random(&random) % 4;
                if (r == 0) lost++;
                else if (redo(fd, p, r == 1 && !p->truncation, &random)) lost++;
            }
            close(fd);
        }
        synced(t, UINT64_MAX);
        free(t->path);
        free(t);
    }
    sequence = 0;
    deadline = 0;
    dead = 0;
    pthread_mutex_unlock(&lock);
    return lost;
}
