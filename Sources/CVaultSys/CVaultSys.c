#define _GNU_SOURCE
#include "CVaultSys.h"
#include <sys/socket.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <unistd.h>
#include <malloc.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <linux/rtnetlink.h>

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

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

int vault_peer_pidfd(int fd, pid_t *pid, uid_t *uid, gid_t *gid, int *pidfd, int *fallback) {
    if (vault_peer_cred(fd, pid, uid, gid) != 0) return -1;
    int p = -1;
    socklen_t len = sizeof(p);
    *fallback = 0;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &p, &len) == 0 && len == sizeof(p) && p >= 0) {
        (void)fcntl(p, F_SETFD, FD_CLOEXEC);
        *pidfd = p;
        return 0;
    }
    if (errno != ENOPROTOOPT && errno != EINVAL) return -1;
    if (*pid <= 0) {
        errno = ESRCH;
        return -1;
    }
    p = vault_pidfd_open(*pid);
    if (p < 0) return -1;
    *pidfd = p;
    *fallback = 1;
    return 0;
}

/// The process's `/proc/PID` directory, opened: the process reference that predates pidfds.
/// It keeps naming the process it was opened for: once that process is reaped and its pid
/// given to another, lookups under the descriptor fail (ESRCH) rather than reach the new
/// process's entries, and pidfd_send_signal(2) accepts it as a pidfd.
static int proc_directory_open(pid_t pid) {
    char path[32];
    snprintf(path, sizeof(path), "/proc/%d", (int)pid);
    return open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/// Whether the process a `/proc/PID` descriptor names has not terminated, as a pidfd would
/// poll: its `stat` can still be read and its state (the field after the command's closing
/// parenthesis) is neither zombie (Z) nor dead (X). Anything unreadable counts as gone.
static int proc_directory_alive(int dirfd) {
    int fd = openat(dirfd, "stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char buffer[1024];
    ssize_t n;
    do {
        n = read(fd, buffer, sizeof(buffer) - 1);
    } while (n < 0 && errno == EINTR);
    close(fd);
    if (n <= 0) return 0;
    buffer[n] = 0;
    const char *close_paren = strrchr(buffer, ')');
    if (close_paren == NULL || close_paren[1] != ' ' || close_paren[2] == 0) return 0;
    char state = close_paren[2];
    return (state == 'Z' || state == 'X' || state == 'x') ? 0 : 1;
}

int vault_pidfd_open(pid_t pid) {
    if (pid <= 0) {
        errno = ESRCH;
        return -1;
    }
#ifdef SYS_pidfd_open
    int p = (int)syscall(SYS_pidfd_open, pid, 0);
    if (p >= 0) {
        (void)fcntl(p, F_SETFD, FD_CLOEXEC);
        return p;
    }
    if (errno != ENOSYS) return -1;
#endif
    return proc_directory_open(pid);
}

int vault_pidfd_signal(int pidfd, int sig) {
#ifdef SYS_pidfd_send_signal
    return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
#else
    errno = ENOSYS;
    return -1;
#endif
}

int vault_pidfd_alive(int pidfd) {
    if (pidfd < 0) return 0;  // poll(2) skips a negative descriptor: it would pass as alive
    struct pollfd p = {.fd = pidfd, .events = POLLIN, .revents = 0};
    int n;
    do {
        n = poll(&p, 1, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return 0;
    if ((p.revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) == 0) return 1;
    // A directory polls readable always: the descriptor is a `/proc/PID` one
    // (vault_pidfd_open where pidfd_open is missing), asked through its `stat` instead.
    struct stat st;
    if (fstat(pidfd, &st) == 0 && S_ISDIR(st.st_mode)) return proc_directory_alive(pidfd);
    return 0;
}

int vault_set_passcred(int fd) {
    int one = 1;
    return setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
}

/// recvmsg(2), retried on EINTR.
static ssize_t recvmsg_retrying(int fd, struct msghdr *msg, int flags) {
    ssize_t n;
    do {
        n = recvmsg(fd, msg, flags);
    } while (n < 0 && errno == EINTR);
    return n;
}

ssize_t vault_recv_from(int fd, void *buf, size_t len, pid_t *sender) {
    union {
        char bytes[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(16 * sizeof(int))];
        struct cmsghdr align;
    } control;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.bytes, .msg_controllen = sizeof(control.bytes)};
    ssize_t n = recvmsg_retrying(fd, &msg, MSG_CMSG_CLOEXEC);
    *sender = 0;
    if (n < 0) return n;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET) continue;
        if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
            struct ucred cred;
            memcpy(&cred, CMSG_DATA(c), sizeof(cred));
            *sender = cred.pid;
        } else if (c->cmsg_type == SCM_RIGHTS) {
            // Descriptors a peer passes are never used: closed at once, so they cost nothing.
            size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < count; i++) {
                int passed;
                memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                close(passed);
            }
        }
    }
    return n;
}

int vault_unix_peer_inode(int fd, unsigned long long *peer) {
    struct stat st;
    if (fstat(fd, &st) != 0) return -1;
    int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (nl < 0) return -1;
    struct {
        struct nlmsghdr header;
        struct unix_diag_req request;
    } query;
    memset(&query, 0, sizeof(query));
    query.header.nlmsg_len = sizeof(query);
    query.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    query.header.nlmsg_flags = NLM_F_REQUEST;
    query.request.sdiag_family = AF_UNIX;
    query.request.udiag_states = ~0U;
    query.request.udiag_ino = (unsigned int)st.st_ino;
    query.request.udiag_show = UDIAG_SHOW_PEER;
    query.request.udiag_cookie[0] = ~0U;
    query.request.udiag_cookie[1] = ~0U;
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    if (sendto(nl, &query, sizeof(query), 0, (struct sockaddr *)&kernel, sizeof(kernel)) != (ssize_t)sizeof(query)) {
        int e = errno;
        close(nl);
        errno = e;
        return -1;
    }
    union {
        char bytes[8192];
        struct nlmsghdr align;
    } reply;
    ssize_t n;
    do {
        n = recv(nl, reply.bytes, sizeof(reply.bytes), 0);
    } while (n < 0 && errno == EINTR);
    int e = errno;
    close(nl);
    if (n < 0) {
        errno = e;
        return -1;
    }
    for (struct nlmsghdr *h = &reply.align; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
        if (h->nlmsg_type == NLMSG_ERROR) {
            struct nlmsgerr *err = NLMSG_DATA(h);
            errno = err->error < 0 ? -err->error : EPROTO;
            return -1;
        }
        if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY) continue;
        struct unix_diag_msg *m = NLMSG_DATA(h);
        if (m->udiag_ino != (unsigned int)st.st_ino) continue;
        int left = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
        for (struct rtattr *a = (struct rtattr *)(m + 1); RTA_OK(a, left); a = RTA_NEXT(a, left)) {
            if (a->rta_type == UNIX_DIAG_PEER && RTA_PAYLOAD(a) >= sizeof(unsigned int)) {
                unsigned int ino;
                memcpy(&ino, RTA_DATA(a), sizeof(ino));
                *peer = ino;
                return 0;
            }
        }
    }
    errno = ENOENT;
    return -1;
}

int vault_o_path(void) { return O_PATH; }

ssize_t vault_recv_fds(int fd, void *buf, size_t len, int *fds, int max_fds, int *n_fds) {
    union {
        char bytes[CMSG_SPACE(VAULT_MAX_PASSED_FDS * sizeof(int))];
        struct cmsghdr align;
    } control;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.bytes, .msg_controllen = sizeof(control.bytes)};
    ssize_t n = recvmsg_retrying(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    *n_fds = 0;
    if (n < 0) return n;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int passed;
            memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (*n_fds < max_fds) fds[(*n_fds)++] = passed;
            else close(passed);
        }
    }
    return n;
}

ssize_t vault_send_fds(int fd, const void *buf, size_t len, const int *fds, int n_fds) {
    union {
        char bytes[CMSG_SPACE(VAULT_MAX_PASSED_FDS * sizeof(int))];
        struct cmsghdr align;
    } control;
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (n_fds > VAULT_MAX_PASSED_FDS) {
        errno = EINVAL;
        return -1;
    }
    if (n_fds > 0) {
        memset(control.bytes, 0, sizeof(control.bytes));
        msg.msg_control = control.bytes;
        msg.msg_controllen = CMSG_SPACE(n_fds * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(n_fds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, n_fds * sizeof(int));
    }
    ssize_t n;
    do {
        n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    return n;
}

int vault_pipe_cloexec(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

int vault_accept_cloexec(int fd, int flags) {
    return accept4(fd, NULL, NULL, SOCK_CLOEXEC | flags);
}

int vault_mkstemp_cloexec(char *template_) { return mkostemp(template_, O_CLOEXEC); }
