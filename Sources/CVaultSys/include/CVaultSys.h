#ifndef CVAULTSYS_H
#define CVAULTSYS_H
#include <sys/types.h>

/// getsockopt(fd, SOL_SOCKET, SO_PEERCRED): the kernel's record of the peer. Returns 0 or -1 (errno set).
int vault_peer_cred(int fd, pid_t *pid, uid_t *uid, gid_t *gid);

/// prctl(PR_SET_DUMPABLE, 0): no core dumps, no ptrace by same-uid non-root processes.
int vault_set_nondumpable(void);

#endif
