// SPDX-License-Identifier: MIT
/*
 * sandbox.c - seccomp: out of the way of a process that filters its
 * system calls.
 *
 * A seccomp filter allows what the program itself calls and kills (or
 * fails) anything else; OpenSSH's privilege-separated child allows little
 * more than read, write, poll and exit.  What libusmc does behind a socket
 * call (futexes, doorbells, ppoll, MSG_PEEK, OFD locks, memfds) is not in
 * such a list.  So from the moment a filter exists:
 *
 *  - installed while we watch (prctl(PR_SET_SECCOMP), syscall(SYS_seccomp);
 *    libseccomp uses the latter): before the filter goes on, and while any
 *    system call is still allowed, every connection moves to TCP
 *    (migrate.c: no byte lost, reordered or duplicated; reason
 *    `sandboxed`), a listener only this process holds is unpublished (its
 *    accept() will not answer proposals), every descriptor leaves the
 *    table and every epoll instance gets the program's own entries back:
 *    the wrappers find nothing and pass each call to libc as it is;
 *  - inherited: a fork child inherits the state with our memory; a
 *    program exec'ed under a filter finds it in its constructor (Seccomp:
 *    in /proc/self/status, read with the openat/read/close the dynamic
 *    loader itself just made).  Nothing is ever tracked there (sockets
 *    handed across exec are not adopted), unless USMC_TRUST_SECCOMP=1
 *    says that filter (a container's) allows what usmc does.
 *
 * The state is never left.  Nothing runs at exit (no statistics folding,
 * no link-group unpublishing: the slot and names are collected by others
 * once the process is gone, as after a kill).  The sockets of the
 * descriptors we stop tracking are kept, never released: releasing runs
 * the close protocol, which the peer would read as our close.
 *
 * Limits: a connection whose peer was moving it to TCP with bytes of the
 * peer still unread in our ring cannot finish the move before the program
 * reads them; it stays tracked (its reads come from the ring, then TCP).
 * A thread of the process inside a usmc call while another installs a
 * filter with SECCOMP_FILTER_FLAG_TSYNC is not covered.
 */
#include "conn.h"
#include "handover.h"
#include "listener.h"
#include "sandbox.h"
#include "af_usmc.h"
#include "epoll_int.h"
#include "export.h"
#include "fdtab.h"
#include "log.h"
#include "migrate.h"
#include "options.h"
#include "real.h"
#include "sock.h"
#include "sys.h"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>

static pthread_mutex_t enter_lock = PTHREAD_MUTEX_INITIALIZER;

/* Sockets of descriptors we stopped tracking: one reference each, kept. */
static struct usmc_sock **kept;
static unsigned int nkept, kept_cap;

/* ---- inherited filters ------------------------------------------------ */

/*
 * The Seccomp: line of /proc/self/status: 0 none, 1 strict, 2 filter; -1
 * unknown (no /proc, as in a chroot).  An open refused with EACCES/EPERM
 * is a filter refusing it (as OpenSSH's refuses open): 2.
 */
static int seccomp_mode(void)
{
	static const char key[] = "\nSeccomp:";
	char buf[4096], *p;
	size_t len = 0;
	ssize_t n;
	int fd;

	fd = sys_openat(AT_FDCWD, "/proc/self/status", O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return errno == EACCES || errno == EPERM ? 2 : -1;
	while (len < sizeof(buf) - 1 && (n = sys_read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
		len += (size_t)n;
	sys_close(fd);
	buf[len] = '\0';
	p = strstr(buf, key);
	if (!p)
		return -1;
	p += sizeof(key) - 1;
	while (*p == ' ' || *p == '\t')
		p++;
	return *p >= '0' && *p <= '9' ? *p - '0' : -1;
}

void usmc_sandbox_init(void)
{
	int m;

	/* Now, not in the first syscall() (a signal handler's, maybe). */
	ENSURE_REAL(prctl);
	m = seccomp_mode();
	if (m <= 0)
		return;
	if (usmc_opt.trust_seccomp) {
		usmc_dbg(1, "started under a seccomp filter (mode %d), trusted (USMC_TRUST_SECCOMP)", m);
		return;
	}
	STORE_RELAXED(&usmc_sandbox_on, true);
	usmc_dbg(1, "started under a seccomp filter (mode %d): nothing is accelerated", m);
}

/* ---- a filter installed while we watch -------------------------------- */

struct fdlist {
	int *fd;
	unsigned int n, cap;
	bool lost;		/* out of memory: some descriptors stay tracked */
};

static void collect(int fd, struct usmc_sock *sk __unused, void *arg)
{
	struct fdlist *l = arg;

	if (l->n == l->cap) {
		unsigned int cap = l->cap ? 2 * l->cap : 64;
		int *p = realloc(l->fd, sizeof(*p) * cap);

		if (!p) {
			l->lost = true;
			return;
		}
		l->fd = p;
		l->cap = cap;
	}
	l->fd[l->n++] = fd;
}

static void keep(struct usmc_sock *sk)
{
	if (nkept == kept_cap) {
		unsigned int cap = kept_cap ? 2 * kept_cap : 64;
		struct usmc_sock **p = realloc(kept, sizeof(struct usmc_sock *) * cap);

		if (!p)
			return;		/* the reference is simply never dropped */
		kept = p;
		kept_cap = cap;
	}
	kept[nkept++] = sk;
}

/*
 * OpenSSH lowers RLIMIT_FSIZE to 0 just before its filter: a diagnostic
 * written then to a stderr that is a file would raise SIGXFSZ and kill the
 * process.  Such a process gets no more diagnostics (USMC_DEBUG is a
 * single word, read without ordering).
 */
static void quiet_if_fatal(void)
{
	struct rlimit rl;
	struct stat st;

	if (!usmc_opt.debug || getrlimit(RLIMIT_FSIZE, &rl) || rl.rlim_cur == RLIM_INFINITY ||
	    fstat(2, &st) || !S_ISREG(st.st_mode))
		return;
	if ((uint64_t)st.st_size + 4096 > (uint64_t)rl.rlim_cur)
		usmc_opt.debug = 0;
}

/* Settle fd's socket for a life on TCP; false if it must stay tracked. */
static bool settle(int fd, unsigned int *moved)
{
	struct usmc_sock *sk = usmc_fd_get(fd);
	bool untrack = true;

	if (!sk)
		return true;
	if (sk->kind == SK_CONN) {
		usmc_sock_refresh(sk, fd);
		if (sk_is_smc_path(sk)) {
			usmc_conn_leave(sk, fd, USMC_R_SANDBOXED);
			(*moved)++;
		}
		if (sk_flag(sk, SKF_COUNT_LATER))
			usmc_sock_count_late(sk, fd);
		untrack = sk_mode(sk) != USMC_MODE_MIGRATING;
	} else if (sk->kind == SK_LISTEN && LOAD_RELAXED(&sk->sh->refs) == 1) {
		/* Ours alone: its accept() will not answer proposals.  A copy
		 * a parent still serves stays published for the parent. */
		usmc_listen_unpublish(sk);
	}
	usmc_sock_put(sk);
	return untrack;
}

/*
 * Every epoll instance's records back to the application's own kernel
 * entries (their sockets are on TCP now) and usmc's eventfd out of its
 * set: an instance without records passes every call through
 * (epoll_wait.c).  One that still watches a connection that must stay
 * tracked (settle()) keeps its records.  Records and eventfds are kept,
 * never released (a close of the instance would close the eventfd).
 */
static void epoll_settle(void)
{
	long max = usmc_nofile_limit(true);
	struct usmc_epreg *r, *next;
	struct usmc_ep *ep;
	int fd;

	pthread_mutex_lock(&ep_lock);
	for (fd = 0; fd < max && fd < (1 << 21); fd++) {
		ep = ep_lookup(fd);
		if (!ep)
			continue;
		/* The program's data straight in the kernel again. */
		ep_alias_restore(ep, fd);
		if (ep->nested)
			continue;
		for (r = ep->regs; r; r = next) {
			next = r->ep_next;	/* a parked record leaves the list */
			ep_reg_sync(r);
		}
		if (ep->ntranslated)
			continue;
		if (ep->selfev >= 0)
			real.epoll_ctl(fd, EPOLL_CTL_DEL, ep->selfev, NULL);
		ep->selfev = -1;
		ep->regs = ep->ready = ep->watch = NULL;
	}
	pthread_mutex_unlock(&ep_lock);
}

void usmc_sandbox_enter(void)
{
	struct fdlist l = { 0 };
	unsigned int i, moved = 0, stayed = 0;

	if (usmc_sandboxed())
		return;
	pthread_mutex_lock(&enter_lock);
	if (usmc_sandboxed()) {
		pthread_mutex_unlock(&enter_lock);
		return;
	}
	/* First: no socket made from here on is tracked (sock.c). */
	STORE_RELAXED(&usmc_sandbox_on, true);
	quiet_if_fatal();
	usmc_fd_foreach(collect, &l);
	for (i = 0; i < l.n; i++) {
		struct usmc_sock *sk;

		if (!settle(l.fd[i], &moved)) {
			stayed++;
			continue;
		}
		sk = usmc_fd_remove(l.fd[i]);
		if (sk)
			keep(sk);
	}
	epoll_settle();
	pthread_mutex_unlock(&enter_lock);
	usmc_dbg(1, "seccomp filter: %u connection(s) moved to TCP, %u descriptor(s) untracked%s%s",
		 moved, l.n - stayed, stayed ? ", some still moving stay tracked" : "",
		 l.lost ? ", some lost track of (out of memory)" : "");
	free(l.fd);
}

/* ---- entry points ------------------------------------------------------- */

static bool installs_filter_prctl(long option, unsigned long mode)
{
	return option == PR_SET_SECCOMP &&
	       (mode == SECCOMP_MODE_STRICT || mode == SECCOMP_MODE_FILTER);
}

static bool installs_filter_syscall(long nr, long a0, long a1)
{
	if (nr == SYS_seccomp)
		return a0 == SECCOMP_SET_MODE_STRICT || a0 == SECCOMP_SET_MODE_FILTER;
	return nr == SYS_prctl && installs_filter_prctl(a0, (unsigned long)a1);
}

/*
 * The filter goes on after we stepped aside; if the kernel refuses it
 * (EINVAL, EACCES without no_new_privs), we stay aside all the same: the
 * connections work on TCP.
 */
EXPORT int prctl(int option, ...)
{
	unsigned long a2, a3, a4, a5;
	va_list ap;

	va_start(ap, option);
	a2 = va_arg(ap, unsigned long);
	a3 = va_arg(ap, unsigned long);
	a4 = va_arg(ap, unsigned long);
	a5 = va_arg(ap, unsigned long);
	va_end(ap);
	ENSURE_REAL(prctl);
	if (unlikely(installs_filter_prctl(option, a2)))
		usmc_sandbox_enter();
	return real.prctl(option, a2, a3, a4, a5);
}

/* syscall(SYS_seccomp / SYS_prctl) made by the program (interpose.c). */
void usmc_sandbox_syscall(long nr, long a0, long a1)
{
	if (installs_filter_syscall(nr, a0, a1))
		usmc_sandbox_enter();
}

/* Fork child (atfork.c): the only thread now; a parent thread may have
 * held enter_lock at the fork. */
void usmc_sandbox_after_fork(void)
{
	pthread_mutex_init(&enter_lock, NULL);
}
