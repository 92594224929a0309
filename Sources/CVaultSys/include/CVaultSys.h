#ifndef CVAULTSYS_H
#define CVAULTSYS_H
#include <sys/types.h>

/// getsockopt(fd, SOL_SOCKET, SO_PEERCRED): the kernel's record of the peer. Returns 0 or -1 (errno set).
int vault_peer_cred(int fd, pid_t *pid, uid_t *uid, gid_t *gid);

/// prctl(PR_SET_DUMPABLE, 0): no core dumps, no ptrace by same-uid non-root processes.
int vault_set_nondumpable(void);

/// mallopt(M_MMAP_THRESHOLD, bytes): allocations of at least `bytes` get pages of their own,
/// unmapped when freed (and glibc stops raising the threshold as they are freed). Returns 1
/// on success, 0 on failure (as mallopt).
int vault_set_mmap_threshold(int bytes);

#endif
