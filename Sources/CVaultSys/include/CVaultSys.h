#ifndef CVAULTSYS_H
#define CVAULTSYS_H
#include <stdio.h>
#include <sys/types.h>

/// C's stdout and stderr streams. glibc declares them as mutable globals, which Swift 6 refuses
/// to read; they are set before main and never reassigned, and each FILE has its own lock.
static inline FILE *vault_stdout(void) { return stdout; }
static inline FILE *vault_stderr(void) { return stderr; }

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

/// The peer of a connected AF_UNIX socket as a pidfd: SO_PEERCRED (pid, uid, gid) and
/// SO_PEERPIDFD (Linux 6.5), which names the very process that connected however its pid is
/// reused later. On a kernel without SO_PEERPIDFD, `vault_pidfd_open(pid)`, with
/// `*fallback` set to 1: that descriptor names whatever process has the pid now, which may
/// already be another (the connector gone and its pid reused). Returns 0 with `*pidfd` open
/// (FD_CLOEXEC; the caller closes it), or -1 (errno set) when neither is possible.
int vault_peer_pidfd(int fd, pid_t *pid, uid_t *uid, gid_t *gid, int *pidfd, int *fallback);

/// pidfd_open(pid) (Linux 5.3), FD_CLOEXEC: a pidfd for whatever process has `pid` now (the
/// caller checks afterwards that it is the one it meant). Where pidfd_open is missing
/// (ENOSYS: a kernel before 5.3, or valgrind 3.19, which does not implement it), the
/// process's `/proc/PID` directory opened instead, the same kind of reference: it keeps
/// naming that process, `vault_pidfd_alive` and pidfd_send_signal(2) take it. Returns the
/// descriptor, or -1 (errno set).
int vault_pidfd_open(pid_t pid);

/// Whether the process `pidfd` names has not terminated: a pidfd polls readable once its
/// process exits (pidfd_open(2)), so a zombie counts as gone. For a `/proc/PID` descriptor
/// (see `vault_pidfd_open`), its `stat`'s state, zombies gone too. A failing poll or read
/// counts as gone (fails closed). Returns 1 or 0.
int vault_pidfd_alive(int pidfd);

/// pidfd_send_signal(pidfd, sig): signals the process `pidfd` names, never another that got
/// its pid. Returns 0, or -1 (errno set).
int vault_pidfd_signal(int pidfd, int sig);

/// setsockopt(SO_PASSCRED): every message received on `fd` then carries the kernel's record
/// of the process that sent it (SCM_CREDENTIALS). Returns 0 or -1 (errno set).
int vault_set_passcred(int fd);

/// recvmsg of up to `len` bytes: `*sender` is the pid (in vaultd's pid namespace) of the
/// process that sent them, from SCM_CREDENTIALS, or 0 when the kernel attached none. On an
/// AF_UNIX stream socket with SO_PASSCRED, one call never returns bytes of two senders.
/// Descriptors passed with the data (SCM_RIGHTS) are closed. Returns the byte count, 0 at
/// the end, or -1 (errno set).
ssize_t vault_recv_from(int fd, void *buf, size_t len, pid_t *sender);

/// The inode of the socket at the other end of the connected AF_UNIX socket `fd`
/// (sock_diag, UNIX_DIAG_PEER: what `ss -x` shows), as /proc/PID/fd shows it
/// ("socket:[INODE]"). Returns 0, or -1 (errno set; ENOENT: the kernel named no peer).
int vault_unix_peer_inode(int fd, unsigned long long *peer);

/// O_PATH (which Glibc does not import into Swift): an fd that names a file without opening it.
int vault_o_path(void);


/// The most descriptors one message passes (SCM_MAX_FD, the kernel's limit for one sendmsg).
#define VAULT_MAX_PASSED_FDS 253

/// recvmsg of up to `len` bytes without blocking, keeping the descriptors passed with them
/// (SCM_RIGHTS, FD_CLOEXEC): up to `max_fds` go to `fds` (`*n_fds` of them; the caller owns
/// them), any more are closed. Returns the byte count, 0 at the end, or -1 (errno set:
/// EAGAIN when nothing is there).
ssize_t vault_recv_fds(int fd, void *buf, size_t len, int *fds, int max_fds, int *n_fds);

/// sendmsg of `len` bytes without blocking (MSG_NOSIGNAL), passing `n_fds` descriptors with
/// them (SCM_RIGHTS; at most VAULT_MAX_PASSED_FDS; they stay the caller's to close). Returns
/// the bytes sent (the descriptors went with the first of them), or -1 (errno set).
ssize_t vault_send_fds(int fd, const void *buf, size_t len, const int *fds, int n_fds);

/// pipe2(fds, O_CLOEXEC) (a GNU extension Glibc does not import). Returns 0 or -1 (errno set).
int vault_pipe_cloexec(int fds[2]);

/// accept4(fd, NULL, NULL, SOCK_CLOEXEC | flags): the connection, or -1 (errno set).
int vault_accept_cloexec(int fd, int flags);

/// mkostemp(template, O_CLOEXEC): the new file's descriptor (`template`'s XXXXXX replaced),
/// or -1 (errno set).
int vault_mkstemp_cloexec(char *template_);

#endif
