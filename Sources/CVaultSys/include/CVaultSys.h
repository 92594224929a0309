#ifndef CVAULTSYS_H
#define CVAULTSYS_H
#include <sys/types.h>

/// getsockopt(fd, SOL_SOCKET, SO_PEERCRED): the kernel's record of the peer. Returns 0 or -1 (errno set).
int vault_peer_cred(int fd, pid_t *pid, uid_t *uid, gid_t *gid);

/// prctl(PR_SET_DUMPABLE, 0): no core dumps, no ptrace by same-uid non-root processes.
int vault_set_nondumpable(void);

/// prctl(PR_SET_NAME, name): the calling thread's name in /proc/PID/task/TID/comm (at most
/// 15 bytes are kept). Returns 0 or -1 (errno set).
int vault_set_thread_name(const char *name);

/// mallopt(M_MMAP_THRESHOLD, bytes): allocations of at least `bytes` get pages of their own,
/// unmapped when freed (and glibc stops raising the threshold as they are freed). Returns 1
/// on success, 0 on failure (as mallopt).
int vault_set_mmap_threshold(int bytes);

/// statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID): the id of the mount `fd` is on (as in
/// /proc/self/mountinfo; a bind mount of a directory of the same filesystem has an id of its
/// own though its st_dev is the same). Returns 0, or -1 when the kernel does not tell (before
/// Linux 5.8) or statx failed.
int vault_mount_id(int fd, unsigned long long *id);

#endif
