// SPDX-License-Identifier: MIT
/*
 * interpose_poll.c - the readiness wrappers: poll, select and epoll.
 *
 * poll.c translates sets that contain accelerated sockets; epoll.c keeps
 * its own registrations for them.  Sets without any are passed to libc.
 */
#include "interpose.h"
#include "epoll.h"
#include "fdtab.h"
#include "guard.h"
#include "lgr.h"
#include "log.h"
#include "options.h"
#include "poll.h"
#include "real.h"
#include "registry.h"
#include "shed.h"
#include "sock.h"
#include "stats.h"
#include "sys.h"

#include <dirent.h>
#include <limits.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>


/* ---- readiness -------------------------------------------------------- */

/* The fortified entry points below call these, never poll()/ppoll()
 * through the PLT (interpose_io.c says why). */
static inline __attribute__((always_inline)) int io_poll(struct pollfd *fds, nfds_t n,
							  int timeout)
{
	ENSURE_REAL(poll);
	return (int)ret(usmc_poll(fds, n, timeout, NULL, false));
}

static inline __attribute__((always_inline)) int io_ppoll(struct pollfd *fds, nfds_t n,
							   const struct timespec *ts,
							   const sigset_t *mask)
{
	int t = -1;

	ENSURE_REAL(ppoll);
	if (ts)
		t = (int)MIN((long long)ts->tv_sec * 1000 + (ts->tv_nsec + 999999) / 1000000,
			     (long long)0x7fffffff);
	return (int)ret(usmc_poll(fds, n, t, mask, true));
}

EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	return io_poll(fds, n, timeout);
}

EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask)
{
	return io_ppoll(fds, n, ts, mask);
}

EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
	bool handled;
	int rc, t = -1;

	ENSURE_REAL(select);
	if (tv)
		t = (int)MIN((long long)tv->tv_sec * 1000 + (tv->tv_usec + 999) / 1000,
			     (long long)0x7fffffff);
	rc = usmc_select(nfds, r, w, e, t, NULL, false, &handled);
	if (!handled)
		return real.select(nfds, r, w, e, tv);
	if (tv && rc >= 0 && rc == 0) {
		tv->tv_sec = 0;
		tv->tv_usec = 0;
	}
	return (int)ret(rc);
}

EXPORT int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts,
		   const sigset_t *mask)
{
	bool handled;
	int rc, t = -1;

	ENSURE_REAL(pselect);
	if (ts)
		t = (int)MIN((long long)ts->tv_sec * 1000 + (ts->tv_nsec + 999999) / 1000000,
			     (long long)0x7fffffff);
	rc = usmc_select(nfds, r, w, e, t, mask, true, &handled);
	if (!handled)
		return real.pselect(nfds, r, w, e, ts, mask);
	return (int)ret(rc);
}

EXPORT int epoll_create(int size)
{
	int fd;

	ENSURE_REAL(epoll_create);
	fd = SHED_RETRY(real.epoll_create(size));
	if (fd >= 0)
		usmc_epoll_created(fd);
	return fd;
}

EXPORT int epoll_create1(int flags)
{
	int fd;

	ENSURE_REAL(epoll_create1);
	fd = SHED_RETRY(real.epoll_create1(flags));
	if (fd >= 0)
		usmc_epoll_created(fd);
	return fd;
}

EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	int rc;

	ENSURE_REAL(epoll_ctl);
	rc = usmc_epoll_ctl(epfd, op, fd, ev);
	if (rc == USMC_PASS)
		return real.epoll_ctl(epfd, op, fd, ev);
	return (int)ret(rc);
}

EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
	int rc;

	ENSURE_REAL(epoll_wait);
	rc = usmc_epoll_wait(epfd, ev, max, timeout, NULL, NULL, USMC_EPW_WAIT);
	return (int)ret(rc);
}

EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout,
		       const sigset_t *mask)
{
	int rc;

	ENSURE_REAL(epoll_pwait);
	rc = usmc_epoll_wait(epfd, ev, max, timeout, NULL, mask, USMC_EPW_PWAIT);
	return (int)ret(rc);
}

EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *ts,
			const sigset_t *mask)
{
	int rc, t = -1;

	ENSURE_REAL(epoll_pwait2);
	if (ts)
		t = (int)MIN((long long)ts->tv_sec * 1000 + (ts->tv_nsec + 999999) / 1000000,
			     (long long)0x7fffffff);
	rc = usmc_epoll_wait(epfd, ev, max, t, ts, mask, USMC_EPW_PWAIT2);
	return (int)ret(rc);
}

/* ---- fortified variants ------------------------------------------------ */

extern void __chk_fail(void) __attribute__((noreturn));
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);
int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts,
		const sigset_t *mask, size_t fdslen);

EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	return io_poll(fds, n, timeout);
}

EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts,
		       const sigset_t *mask, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	return io_ppoll(fds, n, ts, mask);
}
