#define _GNU_SOURCE
#include "CVaultSys.h"
#include <sys/socket.h>
#include <sys/prctl.h>
#include <malloc.h>
#include <fcntl.h>
#include <sys/stat.h>

int vault_peer_cred(int fd, pid_t *pid, uid_t *uid, gid_t *gid) {
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -1;
    *pid = cred.pid;
    *uid = cred.uid;
    *gid = cred.gid;
    return 0;
}

int vault_set_thread_name(const char *name) {
    return prctl(PR_SET_NAME, name, 0, 0, 0);
}

int vault_set_nondumpable(void) {
    return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

int vault_set_mmap_threshold(int bytes) {
    return mallopt(M_MMAP_THRESHOLD, bytes);
}

int vault_mount_id(int fd, unsigned long long *id) {
    struct statx stx;
    if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &stx) != 0) return -1;
    if (!(stx.stx_mask & STATX_MNT_ID)) return -1;
    *id = stx.stx_mnt_id;
    return 0;
}
