// SPDX-License-Identifier: MIT
/*
 * ifd.c - which descriptors belong to usmc itself (a lock-free bitmap).
 *
 * Pages of the bitmap are allocated on first use and never freed, so a
 * concurrent reader never sees a dangling pointer.
 */
#include "conn.h"
#include "sys.h"
#include "usmc.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/resource.h>

#define IFD_PAGE_BITS	(1u << 15)
#define IFD_PAGES	64		/* 2M descriptors */

static _Atomic(_Atomic uint64_t *) ifd_pages[IFD_PAGES];

static _Atomic uint64_t *ifd_word(int fd, bool create)
{
	unsigned int page = (unsigned int)fd / IFD_PAGE_BITS, bit = (unsigned int)fd % IFD_PAGE_BITS;
	_Atomic uint64_t *p, *expect = NULL;

	if (fd < 0 || page >= IFD_PAGES)
		return NULL;
	p = atomic_load_explicit(&ifd_pages[page], memory_order_acquire);
	if (!p && create) {
		p = calloc(IFD_PAGE_BITS / 64, sizeof(*p));
		if (!p)
			return NULL;
		if (!atomic_compare_exchange_strong(&ifd_pages[page], &expect, p)) {
			free(p);
			p = expect;
		}
	}
	return p ? &p[bit / 64] : NULL;
}

void usmc_ifd_mark(int fd)
{
	_Atomic uint64_t *w = ifd_word(fd, true);

	if (w)
		atomic_fetch_or(w, 1ULL << ((unsigned int)fd % 64));
}

void usmc_ifd_unmark(int fd)
{
	_Atomic uint64_t *w = ifd_word(fd, false);

	if (w)
		atomic_fetch_and(w, ~(1ULL << ((unsigned int)fd % 64)));
}

bool usmc_ifd_is(int fd)
{
	_Atomic uint64_t *w = ifd_word(fd, false);

	return w && (LOAD_RELAXED(w) >> ((unsigned int)fd % 64)) & 1;
}

/*
 * usmc's descriptors must not change the numbers the application gets:
 * programs size tables by their connection count (wrk's and redis' event
 * loops refuse a descriptor beyond it), TCP gives them small, dense
 * numbers, and a program that needs the numbers below ours must never see
 * EMFILE because of us.  So ours move to the lowest free number from the
 * top sixteenth of the limit up (at least 64 numbers, at most half of it;
 * from 65536 at most, so a huge limit does not grow the kernel's table to
 * match): a link group's file and its two doorbells serve 64 connections,
 * so 20,000 descriptors leave the program 18,750 and us room for 26,000
 * connections.  With no room there, a required one (a doorbell) is given
 * up, -EMFILE, and its connection falls back (limit_reached); any other
 * stays where it is.
 */
#define IFD_HIGH_MAX	65536L
#define IFD_RESERVE_MIN	64L

/*
 * Asked twice per connection, so cached for NOFILE_TTL_NS.  A stale value
 * never costs the application a descriptor or a connection: a refusal
 * (usmc_conn_resources) asks again before it refuses, and a placement that
 * fails with EINVAL (a base at or above a lowered limit) asks again and
 * retries.  A raised limit only places doorbells lower than it could, for
 * at most the TTL.  No setrlimit wrapper: sanitizer runtimes call it
 * before anything can run.
 */
#define NOFILE_TTL_NS	1000000000ull

static _Atomic long nofile_cur;		/* 0: not known */
static _Atomic uint64_t nofile_at;	/* when it was read */

long usmc_nofile_limit(bool fresh)
{
	long v = LOAD_RELAXED(&nofile_cur);
	uint64_t now = usmc_now_ns();
	struct rlimit rl;

	if (likely(v) && !fresh && now - LOAD_RELAXED(&nofile_at) < NOFILE_TTL_NS)
		return v;
	if (getrlimit(RLIMIT_NOFILE, &rl))
		return LONG_MAX;
	v = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > LONG_MAX ? LONG_MAX :
	    rl.rlim_cur ? (long)rl.rlim_cur : 1;
	STORE_RELAXED(&nofile_cur, v);
	STORE_RELAXED(&nofile_at, now);
	return v;
}

long usmc_ifd_base(bool fresh)
{
	long lim = usmc_nofile_limit(fresh);

	return MIN(IFD_HIGH_MAX, lim - MIN(lim / 2, MAX(IFD_RESERVE_MIN, lim / 16)));
}

int usmc_ifd_dup(int fd)
{
	long base = usmc_ifd_base(false);
	int nfd = sys_fcntl(fd, F_DUPFD_CLOEXEC, base);

	if (nfd == -EINVAL || nfd == -EMFILE)
		nfd = sys_fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (nfd >= 0)
		usmc_ifd_mark(nfd);
	return nfd;
}

int usmc_ifd_move_high(int fd, bool required)
{
	bool fresh = false;
	long base;
	int nfd;

again:
	base = usmc_ifd_base(fresh);
	if (fd >= base)
		return fd;
	nfd = sys_fcntl(fd, F_DUPFD_CLOEXEC, base);
	if (nfd == -EINVAL && !fresh) {
		fresh = true;		/* the limit went down meanwhile */
		goto again;
	}
	if (nfd < 0 && !required)
		return fd;
	usmc_ifd_close(fd);
	if (nfd < 0)
		return nfd == -EINVAL ? -EMFILE : nfd;
	usmc_ifd_mark(nfd);
	return nfd;
}
