// SPDX-License-Identifier: MIT
/*
 * interpose.c - every libc entry point libusmc replaces.
 *
 * Each wrapper finds the descriptor's socket (fdtab.c) and dispatches; a
 * descriptor usmc does not track goes straight to libc.  Wrappers are the
 * only place errno is set.  Nothing else in the library is exported
 * (libusmc.map).
 */
#include "accept.h"
#include "atfork.h"
#include "conn.h"
#include "exec.h"
#include "interpose.h"
#include "clc_bind.h"
#include "clc_inband.h"
#include "close.h"
#include "epoll.h"
#include "fdtab.h"
#include "guard.h"
#include "handover.h"
#include "lgr.h"
#include "listener.h"
#include "log.h"
#include "migrate.h"
#include "options.h"
#include "poll.h"
#include "real.h"
#include "registry.h"
#include "rx.h"
#include "sandbox.h"
#include "scm_peer.h"
#include "shed.h"
#include "sigrestart.h"
#include "sock.h"
#include "stats.h"
#include "stdstream.h"
#include "sys.h"
#include "tcp.h"
#include "waitset.h"

#include <dirent.h>
#include <netinet/tcp.h>
#include <limits.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>

void usmc_tcp_count(struct usmc_sock *sk, ssize_t n, bool tx)
{
	if (n <= 0)
		return;
	if (unlikely(sk_flag(sk, SKF_COUNT_LATER)))
		usmc_sock_count_late(sk, sk->fd0);
	if (tx)
		STAT_ADD(tcp_tx_bytes, n);
	else
		STAT_ADD(tcp_rx_bytes, n);
	if (sk->st)
		atomic_fetch_add_explicit(tx ? &sk->st->tx_bytes : &sk->st->rx_bytes,
					  (uint64_t)n, memory_order_relaxed);
}

EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	ENSURE_REAL(sigaction);
	if (sig == SIGBUS && usmc_guard_sigaction(act, old))
		return 0;
	if (real.sigaction(sig, act, old))
		return -1;
	usmc_sig_track(sig, act);
	return 0;
}

EXPORT sighandler_t signal(int sig, sighandler_t h)
{
	struct sigaction sa = { .sa_handler = h, .sa_flags = SA_RESTART };

	ENSURE_REAL(signal);
	if (sig == SIGBUS) {
		struct sigaction old;

		if (usmc_guard_sigaction(&sa, &old))
			return old.sa_handler;
	}
	usmc_sig_track(sig, &sa);	/* glibc's signal() has BSD semantics: SA_RESTART */
	return real.signal(sig, h);
}

/* ---- sockets ---------------------------------------------------------- */

static bool is_tcp(int domain, int type, int protocol)
{
	return (domain == AF_INET || domain == AF_INET6) && (type & 0xf) == SOCK_STREAM &&
	       (protocol == 0 || protocol == IPPROTO_TCP);
}

static struct usmc_sock *track_new(int fd, int nonblock)
{
	struct usmc_sock *sk = usmc_sock_new(fd, SK_TCP, &usmc_sock_ops);

	if (!sk)
		return NULL;
	if (nonblock)
		sk_set_flag(sk, SKF_NONBLOCK);
	if (usmc_fd_install(fd, sk)) {
		usmc_sock_put(sk);
		return NULL;
	}
	return sk;
}

/* A TCP socket we did not see created (inherited, passed, pre-load). */
static struct usmc_sock *adopt(int fd)
{
	int domain = 0, type = 0, proto = 0, fl;
	socklen_t l = sizeof(int);
	struct usmc_sock *sk;

	if (usmc_sandboxed() || real.getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &l))
		return NULL;
	l = sizeof(int);
	real.getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l);
	l = sizeof(int);
	real.getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &l);
	if (!is_tcp(domain, type, proto))
		return NULL;
	fl = real.fcntl(fd, F_GETFL);
	if (!track_new(fd, fl >= 0 && (fl & O_NONBLOCK)))
		return NULL;
	sk = usmc_fd_get(fd);
	return sk;
}

EXPORT int socket(int domain, int type, int protocol)
{
	int fd;

	ENSURE_REAL(socket);
	fd = SHED_RETRY(real.socket(domain, type, protocol));
	if (fd >= 0 && is_tcp(domain, type, protocol))
		track_new(fd, type & SOCK_NONBLOCK);
	return fd;
}

EXPORT int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	struct usmc_sock *sk;
	int rc;

	ENSURE_REAL(connect);
	sk = usmc_fd_get(fd);
	if (!sk && sa && (sa->sa_family == AF_INET || sa->sa_family == AF_INET6))
		sk = adopt(fd);
	if (!sk)
		return real.connect(fd, sa, len);
	rc = usmc_sock_connect(sk, fd, sa, len);
	usmc_sock_put(sk);
	return rc;
}

EXPORT int listen(int fd, int backlog)
{
	struct usmc_sock *sk;
	int rc;

	ENSURE_REAL(listen);
	sk = usmc_fd_get(fd);
	if (!sk)
		sk = adopt(fd);
	if (!sk)
		return usmc_scm_listen(fd, backlog);
	rc = usmc_sock_listen(sk, fd, backlog);
	usmc_sock_put(sk);
	return rc;
}

static int sock_accept(int fd, struct sockaddr *sa, socklen_t *salen, int flags)
{
	struct usmc_sock *sk;
	int rc;

	ENSURE_REAL(accept4);
	sk = usmc_fd_get(fd);
	/* Made a listener by another process that holds it (listener.c). */
	if (sk && sk->kind == SK_TCP)
		usmc_listen_follow(sk, fd);
	if (!sk || sk->kind != SK_LISTEN) {
		if (sk)
			usmc_sock_put(sk);
		return SHED_RETRY(real.accept4(fd, sa, salen, flags));
	}
	rc = SHED_RETRY(usmc_sock_accept(sk, fd, sa, salen, flags));
	usmc_sock_put(sk);
	return rc;
}

EXPORT int accept4(int fd, struct sockaddr *sa, socklen_t *salen, int flags)
{
	return sock_accept(fd, sa, salen, flags);
}

EXPORT int accept(int fd, struct sockaddr *sa, socklen_t *salen)
{
	return sock_accept(fd, sa, salen, 0);
}

EXPORT int shutdown(int fd, int how)
{
	struct usmc_sock *sk;
	long rc = USMC_PASS;

	ENSURE_REAL(shutdown);
	sk = usmc_fd_get(fd);
	if (!sk)
		return real.shutdown(fd, how);
	usmc_sock_refresh(sk, fd);
	if (sk_is_smc_path(sk))
		rc = usmc_sock_shutdown(sk, fd, how);
	if (rc == USMC_PASS) {
		rc = real.shutdown(fd, how) ? -errno : 0;
		if (!rc && how != SHUT_WR)
			usmc_listen_shutdown(sk, fd);
	}
	usmc_sock_put(sk);
	return (int)ret(rc);
}

/* ---- descriptor lifetime --------------------------------------------- */

/* Forget fd (its socket may be released: close protocol before the FIN). */
static void fd_forget(int fd)
{
	struct usmc_sock *sk = usmc_fd_remove(fd);

	if (sk)
		usmc_sock_put_closing(sk, fd);
	usmc_epoll_closed(fd);
}

/* close(2) of an application descriptor: 0 or -errno. */
static int close_fd(int fd)
{
	if (unlikely(usmc_ifd_is(fd)))
		return -EBADF;	/* not the application's descriptor */
	fd_forget(fd);
	return real.close(fd) ? -errno : 0;
}

EXPORT int close(int fd)
{
	ENSURE_REAL(close);
	return (int)ret(close_fd(fd));
}

EXPORT int fclose(FILE *f)
{
	ENSURE_REAL(fclose);
	if (f)
		fd_forget(fileno(f));
	return real.fclose(f);
}

static void close_range_ours(unsigned int first, unsigned int last)
{
	DIR *d;
	struct dirent *de;

	if (usmc_sandboxed() && real.close_range(first, last, 0) == 0)
		return;		/* the program's own call, nothing of ours tracked */
	d = real.opendir("/proc/self/fd");	/* never our wrapper: no shed here */
	if (!d)
		return;
	while ((de = readdir(d))) {
		char *end;
		long fd = strtol(de->d_name, &end, 10);

		if (*end || fd < (long)first || fd > (long)last || fd == dirfd(d))
			continue;
		if (usmc_ifd_is((int)fd))
			continue;
		fd_forget((int)fd);
		real.close((int)fd);
	}
	closedir(d);
}

static int close_range_fds(unsigned int first, unsigned int last, int flags)
{
	if (flags & CLOSE_RANGE_CLOEXEC)
		return real.close_range(first, last, flags) ? -errno : 0;
	if (first > last || (flags & ~(CLOSE_RANGE_CLOEXEC | CLOSE_RANGE_UNSHARE)))
		return -EINVAL;
	/* Our own descriptors in the range must survive: close one by one. */
	close_range_ours(first, last);
	return 0;
}

EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
	ENSURE_REAL(close_range);
	return (int)ret(close_range_fds(first, last, flags));
}

#ifdef USMC_RAW_SYSCALL
/*
 * syscall(2), as the kernel takes it: six arguments (glibc's syscall()
 * reads six whatever the caller passed, the last ones from the caller's
 * stack, hence no AddressSanitizer check).  Programs that close through
 * it (libuv: syscall(SYS_close)) must not leave usmc a stale record for a
 * number the kernel reuses; a seccomp filter installed through it makes
 * usmc step aside first (sandbox.c).  Everything else goes to the kernel.
 */
EXPORT __attribute__((no_sanitize_address)) long syscall(long nr, ...)
{
	long a[6], r;
	va_list ap;
	int i;

	va_start(ap, nr);
	for (i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	switch (nr) {
	case SYS_close:
		ENSURE_REAL(close);
		return ret(close_fd((int)a[0]));
	case SYS_close_range:
		ENSURE_REAL(close_range);
		return ret(close_range_fds((unsigned int)a[0], (unsigned int)a[1], (int)a[2]));
	case SYS_seccomp:
	case SYS_prctl:
		usmc_sandbox_syscall(nr, a[0], a[1]);
		break;
	case SYS_io_uring_setup:
		/* libuv (1.45 on: node 20, uvloop) registers its epoll
		 * watchers through an io_uring ring (IORING_OP_EPOLL_CTL),
		 * which usmc never sees: its epoll_wait missed every byte
		 * that arrived in a ring.  Refused as by a kernel without
		 * io_uring; libuv then calls epoll_ctl (docs/design.md,
		 * Limits). */
		if (!usmc_opt.disable) {
			errno = ENOSYS;
			return -1;
		}
		break;
	default:
		break;
	}
	r = usmc_sys6(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
	/* Only -4095..-1 are errors (as glibc's syscall() reads them). */
	if ((unsigned long)r > -4096UL) {
		errno = (int)-r;
		return -1;
	}
	return r;
}
#endif

EXPORT void closefrom(int lowfd)
{
	ENSURE_REAL(close);
	if (lowfd < 0)
		lowfd = 0;
	close_range_ours((unsigned int)lowfd, ~0U);
}

static int dup_common(int oldfd, int rc)
{
	if (rc < 0)
		return rc;
	usmc_fd_dup(oldfd, rc);
	usmc_epoll_dup(oldfd, rc);
	/* stdin, stdout or stderr now: glibc's streams may use it. */
	if (unlikely(rc <= STDERR_FILENO))
		usmc_stdio_leave(rc);
	return rc;
}

EXPORT int dup(int fd)
{
	ENSURE_REAL(dup);
	return dup_common(fd, SHED_RETRY(real.dup(fd)));
}

static bool dup_target_ok(int oldfd, int newfd)
{
	if (oldfd == newfd || !usmc_ifd_is(newfd))
		return true;
	usmc_dbg(1, "dup2 onto internal descriptor %d refused", newfd);
	errno = EBUSY;
	return false;
}

EXPORT int dup2(int oldfd, int newfd)
{
	int rc;

	ENSURE_REAL(dup2);
	if (!dup_target_ok(oldfd, newfd))
		return -1;
	if (oldfd != newfd && !usmc_sandboxed() && sys_fcntl(oldfd, F_GETFD, 0) >= 0)
		fd_forget(newfd);
	rc = real.dup2(oldfd, newfd);
	if (rc < 0 || oldfd == newfd)
		return rc;
	return dup_common(oldfd, rc);
}

EXPORT int dup3(int oldfd, int newfd, int flags)
{
	int rc;

	ENSURE_REAL(dup3);
	if (!dup_target_ok(oldfd, newfd))
		return -1;
	if (oldfd != newfd && !usmc_sandboxed() && sys_fcntl(oldfd, F_GETFD, 0) >= 0)
		fd_forget(newfd);
	rc = real.dup3(oldfd, newfd, flags);
	return dup_common(oldfd, rc);
}

/*
 * O_ASYNC: SIGIO is the kernel's, raised for TCP data only.  A connection
 * on shared memory moves to TCP first (migrate.c); one not connected yet
 * stays TCP when it connects (af_usmc.c).  A connection already migrating
 * gets no new ring data: what is left in its ring was there before.
 */
static void async_set(struct usmc_sock *sk, int fd, bool on)
{
	if (!on) {
		sk_clear_flag(sk, SKF_ASYNC);
		return;
	}
	sk_set_flag(sk, SKF_ASYNC);
	if (sk->kind != SK_CONN)
		return;
	if (sk_mode(sk) == USMC_MODE_UNDECIDED)
		usmc_server_resolve(sk, fd, true);
	usmc_conn_to_tcp(sk, fd, USMC_R_ASYNC_IO);
}

static int fcntl_common(int fd, int cmd, long arg)
{
	struct usmc_sock *sk;
	int rc;

	ENSURE_REAL(fcntl);
	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
		rc = SHED_RETRY(real.fcntl(fd, cmd, arg));
	else
		rc = real.fcntl(fd, cmd, arg);
	if (rc < 0)
		return rc;
	switch (cmd) {
	case F_DUPFD:
	case F_DUPFD_CLOEXEC:
		return dup_common(fd, rc);
	case F_SETFL:
		sk = usmc_fd_get(fd);
		if (sk) {
			if (arg & O_NONBLOCK)
				sk_set_flag(sk, SKF_NONBLOCK);
			else
				sk_clear_flag(sk, SKF_NONBLOCK);
			async_set(sk, fd, arg & O_ASYNC);
			usmc_sock_put(sk);
		}
		break;
	}
	return rc;
}

EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	long arg;

	va_start(ap, cmd);
	arg = va_arg(ap, long);
	va_end(ap);
	return fcntl_common(fd, cmd, arg);
}

EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	long arg;

	va_start(ap, cmd);
	arg = va_arg(ap, long);
	va_end(ap);
	return fcntl_common(fd, cmd, arg);
}

/*
 * FIONREAD over TCP while a CLC message is owed (a server that declined,
 * or has not decided; a declined client): it is not the application's,
 * and a program that reads because FIONREAD counted it would wait for
 * ever (postfix's smtpd, checking for a client that talks first).  It
 * comes first on TCP, whole or in part, when it is there at all.
 */
static int fionread_tcp(struct usmc_sock *sk, int fd, int *arg)
{
	int n;

	usmc_tcp_skip_wake(sk, fd, true);
	if (real.ioctl(fd, FIONREAD, &n))
		return -1;
	if (n > 0 && sk_flag(sk, SKF_WAKEBYTE))
		n = n > USMC_CLC_MSG_LEN ? n - USMC_CLC_MSG_LEN : 0;
	*arg = n;
	return 0;
}

EXPORT int ioctl(int fd, unsigned long req, ...)
{
	struct usmc_sock *sk;
	va_list ap;
	void *arg;
	int rc = USMC_PASS;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	ENSURE_REAL(ioctl);
	sk = usmc_fd_get(fd);
	if (!sk)
		return real.ioctl(fd, req, arg);
	if (req == FIONBIO && arg) {
		if (*(int *)arg)
			sk_set_flag(sk, SKF_NONBLOCK);
		else
			sk_clear_flag(sk, SKF_NONBLOCK);
	} else if (req == FIOASYNC && arg) {
		/* Before the kernel's: no SIGIO for the bytes moved to TCP. */
		async_set(sk, fd, *(int *)arg);
	} else if (sk->kind == SK_CONN && arg &&
		   (req == FIONREAD || req == SIOCOUTQ || req == SIOCOUTQNSD)) {
		usmc_sock_refresh(sk, fd);
		/* Undecided (a server before its first act): no rings yet, and
		 * what there is to read is on TCP, as the kernel counts it.
		 * Our bytes in the ring sit in the peer's receive buffer, where
		 * loopback TCP has them acked: nothing is outstanding. */
		if (sk_is_smc_path(sk) && sk_mode(sk) != USMC_MODE_MIGRATING &&
		    sk_mode(sk) != USMC_MODE_UNDECIDED) {
			*(int *)arg = req == FIONREAD ? usmc_sock_inq(sk) : 0;
			rc = 0;
		} else if (req == FIONREAD && sk_flag(sk, SKF_WAKEBYTE)) {
			rc = fionread_tcp(sk, fd, arg);
		}
	} else if (req == SIOCATMARK && arg && sk->kind == SK_CONN) {
		/* Urgent data only comes on TCP (tx.c), behind what is left
		 * in the ring: not at the mark while the ring holds bytes. */
		usmc_sock_refresh(sk, fd);
		if (sk_mode(sk) == USMC_MODE_SMCD || sk_mode(sk) == USMC_MODE_PROPOSED ||
		    (sk_mode(sk) == USMC_MODE_MIGRATING && sk->rx_p && usmc_sock_inq(sk) > 0)) {
			*(int *)arg = 0;
			rc = 0;
		}
	}
	usmc_sock_put(sk);
	if (rc == USMC_PASS)
		return real.ioctl(fd, req, arg);
	return rc;
}

EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	struct usmc_sock *sk;
	bool smc;
	int err;

	ENSURE_REAL(getsockopt);
	if (unlikely(usmc_bind_is_mark_option(level, name)) && val && len &&
	    (sk = usmc_fd_get(fd))) {
		err = usmc_bind_getsockopt(sk, fd, name, val, len);
		usmc_sock_put(sk);
		return err;
	}
	if (level != SOL_SOCKET || name != SO_ERROR || !val || !len || *len < sizeof(int))
		return real.getsockopt(fd, level, name, val, len);
	sk = usmc_fd_get(fd);
	if (!sk)
		return real.getsockopt(fd, level, name, val, len);
	usmc_sock_refresh(sk, fd);
	usmc_sock_check_reset(sk);
	/* A failed connect left its error in the kernel (af_usmc.c): only
	 * a shared-memory reset is ours to report. */
	err = sk_flag(sk, SKF_ABORTED | SKF_RST_SEEN) &&
	      !(atomic_fetch_or(&sk->sh->flags, SKF_ERR_TAKEN) & SKF_ERR_TAKEN) ?
	      (sk_flag(sk, SKF_ABORTED) ? sk_reset_errno(sk) : EPIPE) : 0;
	smc = sk_mode(sk) == USMC_MODE_SMCD || sk_mode(sk) == USMC_MODE_PROPOSED;
	usmc_sock_put(sk);
	/* On shared memory the TCP socket's own errors are not the
	 * connection's: only what we emulate is reported. */
	if (!err && !smc)
		return real.getsockopt(fd, level, name, val, len);
	*(int *)val = err;
	*len = sizeof(int);
	return 0;
}

/*
 * Options a ring cannot honour on receive: a peek offset (SO_PEEK_OFF),
 * timestamps with every read.  (TCP_INQ's control message is the ring's
 * to write: interpose_io.c.)  Turned on for
 * a connection on shared memory, it moves to TCP (unsupported_option),
 * every byte in order; set before connect() or on a listener, what it
 * connects or accepts stays TCP (the same reason).
 */
static bool ring_option(int level, int name, const void *val, socklen_t len)
{
	int on = val && len >= (socklen_t)sizeof(int) ? *(const int *)val : 0;

	if (level != SOL_SOCKET)
		return false;
	switch (name) {
	case SO_PEEK_OFF:
		return on >= 0;
	case SO_TIMESTAMP_OLD:
	case SO_TIMESTAMPNS_OLD:
	case SO_TIMESTAMP_NEW:
	case SO_TIMESTAMPNS_NEW:
	case SO_TIMESTAMPING_OLD:
	case SO_TIMESTAMPING_NEW:
		return on != 0;
	default:
		return false;
	}
}

static void sockopt_to_tcp(struct usmc_sock *sk, int fd)
{
	/* Not connected yet, or a listener (the kernel copies these to the
	 * sockets it accepts): what it connects or accepts stays TCP. */
	if (sk->kind != SK_CONN) {
		sk_set_flag(sk, SKF_RXOPT);
		if (sk->kind == SK_LISTEN && sk->lst)
			usmc_clc_ln_off(sk->lst, USMC_R_SOCKOPT);
		return;
	}
	if (sk_mode(sk) == USMC_MODE_UNDECIDED)
		usmc_server_resolve(sk, fd, true);
	if (sk_mode(sk) == USMC_MODE_SMCD || sk_mode(sk) == USMC_MODE_PROPOSED)
		usmc_conn_to_tcp(sk, fd, USMC_R_SOCKOPT);
}

EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	struct usmc_sock *sk;
	int rc;

	ENSURE_REAL(setsockopt);
	if (unlikely(usmc_bind_is_mark_option(level, name)) && (sk = usmc_fd_get(fd))) {
		rc = usmc_bind_setsockopt(sk, fd, name, val, len);
		usmc_sock_put(sk);
		return rc;
	}
	rc = real.setsockopt(fd, level, name, val, len);
	if (rc || (level != SOL_SOCKET && (level != IPPROTO_TCP ||
					   (name != TCP_DEFER_ACCEPT && name != TCP_FASTOPEN_CONNECT &&
					    name != TCP_INQ))))
		return rc;
	sk = usmc_fd_get(fd);
	if (!sk)
		return rc;
	if (ring_option(level, name, val, len)) {
		sockopt_to_tcp(sk, fd);
		usmc_sock_put(sk);
		return rc;
	}
	if (level == IPPROTO_TCP) {
		/* As the kernel took it (rc 0: an int was given). */
		if (name == TCP_INQ) {
			if (!*(const int *)val)
				atomic_fetch_and(&sk->sh->flags, ~SKF_INQ);
			atomic_fetch_or(&sk->sh->flags,
					SKF_INQ_KNOWN | (*(const int *)val ? SKF_INQ : 0));
		}
		if (name == TCP_DEFER_ACCEPT && sk->kind == SK_LISTEN)
			usmc_listen_defer(sk, fd);
		/* Fast Open: connect() returns without a SYN, which only the
		 * first TCP write sends; ours go to the ring (af_usmc.c). */
		if (name == TCP_FASTOPEN_CONNECT && len >= sizeof(int) && *(const int *)val)
			sk_set_flag(sk, SKF_TFO);
		else if (name == TCP_FASTOPEN_CONNECT)
			sk_clear_flag(sk, SKF_TFO);
		usmc_sock_put(sk);
		return rc;
	}
	/* Whatever it was (SO_RCVTIMEO and its _NEW/_OLD forms...). */
	atomic_fetch_add_explicit(&sk->sh->timeo_ver, 1, memory_order_release);
	if (name == SO_SNDBUF || name == SO_RCVBUF || name == SO_SNDBUFFORCE ||
	    name == SO_RCVBUFFORCE || name == SO_RCVLOWAT)
		usmc_sock_bufsize(sk, fd, name);
	if (name == SO_LINGER && len >= sizeof(struct linger)) {
		const struct linger *l = val;

		if (l->l_onoff && !l->l_linger)
			sk_set_flag(sk, SKF_LINGER0);
		else
			sk_clear_flag(sk, SKF_LINGER0);
	}
	usmc_sock_put(sk);
	return rc;
}

/* ---- process lifetime ------------------------------------------------- */

/* fork() as our wrapper runs it, and vfork() (for_exec: the child only
 * execs or exits). */
static pid_t usmc_fork(bool for_exec)
{
	pid_t pid;

	ENSURE_REAL(fork);
	/* Parent and child share every connection from now on; a vfork
	 * child, only what its exec lets through (POSIX: it may call
	 * nothing else), which the new image takes over while we go on. */
	if (for_exec)
		usmc_conns_unshare(USMC_DEV_F_FORK | USMC_DEV_F_EXEC, true);
	else
		usmc_conns_unshare(USMC_DEV_F_FORK, false);
	pid = real.fork();	/* runs the atfork handlers below */
	if (pid < 0)
		usmc_fd_fork_failed();
	return pid;
}

EXPORT pid_t fork(void)
{
	return usmc_fork(false);
}

/*
 * vfork(): the child borrows this process's memory until it execs or
 * exits, and every call it makes through us before that (close_range,
 * dup2, close, execve: what a spawning library does there) would update
 * the parent's descriptor table, reference counts and rings as if they
 * were its own: Python's subprocess, closing the child's descriptors,
 * reset every accelerated connection of its parent.  POSIX allows vfork()
 * to be fork(), and so it is here: the child gets its own copy, the
 * atfork handlers count its references as for any fork, and an exec
 * hands its sockets over as after fork().  Not covered: a child that
 * reports back through the memory it assumes it shares (it writes its
 * own copy), and glibc's posix_spawn()/system(), whose child calls
 * nothing of ours.
 */
EXPORT pid_t vfork(void)
{
	return usmc_fork(true);
}

pid_t __vfork(void);

EXPORT pid_t __vfork(void)
{
	return usmc_fork(true);
}

__attribute__((constructor)) static void usmc_init(void)
{
	usmc_options_load();
	usmc_real_init();
	usmc_waitset_init();
	/* Before anything of the program's (atfork.c). */
	pthread_atfork(usmc_atfork_prepare, usmc_fd_fork_parent, usmc_atfork_child);
	usmc_sandbox_init();
	if (!usmc_sandboxed())
		usmc_exec_adopt();
}

__attribute__((destructor)) static void usmc_fini(void)
{
	usmc_process_exit(true);
}
