// SPDX-License-Identifier: MIT
/*
 * stats.c - process slots, folding of ended processes, connection entries.
 *
 * Concurrency: a slot's counters have one writer (its process) and are read
 * by `usmc stat` with relaxed loads; totals are only ever atomically added to
 * (folding) or exchanged with zero (reset).  Slot ownership is an OFD lock,
 * so a SIGKILLed process's slot is recognised and folded by the next one.
 */
#include "stats.h"
#include "log.h"
#include "rundir.h"
#include "sys.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>

#define NCOUNTERS (offsetof(struct usmc_counters, fallback) / sizeof(uint64_t) + USMC_R_MAX)
BUILD_BUG_ON(offsetof(struct usmc_counters, fallback) % sizeof(uint64_t));

static struct usmc_counters dummy_ctr;
_Atomic(struct usmc_counters *) usmc_ctr = &dummy_ctr;

static struct usmc_stats_file *stats_file;
static int stats_fd = -1;
static _Atomic int my_slot = -1;	/* published after usmc_ctr (seq_cst) */
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;

int usmc_stats_fd(void)
{
	return stats_fd;
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Open (creating atomically on first use) and map the statistics file. */
/* Not usmc_map_shared(): the counters must survive USMC_FAULT=mmap, which
 * tests use to check that the fallbacks are counted. */
static struct usmc_stats_file *stats_map(int fd, size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	return p == MAP_FAILED ? NULL : p;
}

static int stats_open(struct usmc_stats_file **out)
{
	size_t len = sizeof(struct usmc_stats_file);
	struct usmc_stats_file *f;
	char tmp[64];
	struct stat st;
	int fd, rc;

	rc = usmc_rundir_init();
	if (rc)
		return rc;
	fd = usmc_rundir_open(USMC_STATS_FILE, O_RDWR, 0);
	if (fd == -ENOENT) {
		/* Build it under a private name, then publish it with one rename. */
		snprintf(tmp, sizeof(tmp), "t-stats-%016llx", (unsigned long long)usmc_random64());
		fd = usmc_rundir_open(tmp, O_RDWR | O_CREAT, 0600);
		if (fd < 0)
			return fd;
		/* Fully backed: a full tmpfs must never turn an access into SIGBUS. */
		if (fallocate(fd, 0, 0, (off_t)len)) {
			rc = -errno;
			goto err_tmp;
		}
		f = stats_map(fd, len);
		if (!f) {
			rc = errno ? -errno : -ENOMEM;
			goto err_tmp;
		}
		f->version = USMC_PROTO_VERSION;
		f->nprocs = USMC_STATS_PROCS;
		f->nconns = USMC_STATS_CONNS;
		f->created_ns = realtime_ns();
		STORE_RELEASE((_Atomic uint64_t *)&f->magic, USMC_STATS_MAGIC);
		if (renameat2(usmc_rundir_fd(), tmp, usmc_rundir_fd(), USMC_STATS_FILE, RENAME_NOREPLACE)) {
			/* Someone else published first: use theirs. */
			munmap(f, len);
			usmc_ifd_close(fd);
			usmc_rundir_unlink(tmp, false);
			fd = usmc_rundir_open(USMC_STATS_FILE, O_RDWR, 0);
			if (fd < 0)
				return fd;
		} else {
			*out = f;
			return fd;
		}
	} else if (fd < 0) {
		return fd;
	}
	if (fstat(fd, &st) || (size_t)st.st_size < len) {
		usmc_ifd_close(fd);
		return -EBADMSG;
	}
	f = stats_map(fd, len);
	if (!f) {
		rc = errno ? -errno : -ENOMEM;
		usmc_ifd_close(fd);
		return rc;
	}
	if (LOAD_ACQUIRE((_Atomic uint64_t *)&f->magic) != USMC_STATS_MAGIC ||
	    f->version != USMC_PROTO_VERSION || f->nprocs != USMC_STATS_PROCS ||
	    f->nconns != USMC_STATS_CONNS) {
		munmap(f, len);
		usmc_ifd_close(fd);
		return -EBADMSG;
	}
	*out = f;
	return fd;

err_tmp:
	usmc_ifd_close(fd);
	usmc_rundir_unlink(tmp, false);
	return rc;
}

#define CTR(x)	((_Atomic uint64_t *)(x))

/* What slot p counted since the last reset, counter i.  A base above the
 * counter is a reset's late store into a slot claimed again since (the
 * claim zeroed both): count from zero. */
static uint64_t slot_value(struct usmc_stats_proc *p, size_t i)
{
	uint64_t c = LOAD_RELAXED(&CTR(&p->c)[i]), b = LOAD_RELAXED(&CTR(&p->base)[i]);

	return c >= b ? c - b : c;
}

/* Fold slot i (whose owner ended) into the totals; caller won the CAS. */
static void fold_slot(struct usmc_stats_file *f, int i)
{
	struct usmc_stats_proc *p = &f->procs[i];
	size_t k;
	int c;

	for (k = 0; k < NCOUNTERS; k++) {
		uint64_t v = slot_value(p, k);

		if (v)
			atomic_fetch_add_explicit(&CTR(&f->totals)[k], v, memory_order_relaxed);
	}
	for (c = 0; c < USMC_STATS_CONNS; c++) {
		struct usmc_stats_conn *e = &f->conns[c];

		if (LOAD_ACQUIRE(&e->state) == 1 && e->proc == i)
			STORE_RELEASE(&e->state, 0);
	}
	p->pid = 0;
	STORE_RELEASE(&p->state, 0);
}

int usmc_stats_gc(struct usmc_stats_file *f, int fd)
{
	int i, n = 0;

	for (i = 0; i < USMC_STATS_PROCS; i++) {
		uint32_t live = 1;

		if (LOAD_ACQUIRE(&f->procs[i].state) != 1)
			continue;
		if (usmc_lock_held(fd, USMC_STATS_LOCK_BASE + i))
			continue;
		if (atomic_compare_exchange_strong(&f->procs[i].state, &live, 2)) {
			fold_slot(f, i);
			n++;
		}
	}
	return n;
}

static int claim_slot(struct usmc_stats_file *f, int fd)
{
	int start = (int)(usmc_getpid() % USMC_STATS_PROCS), k;

	if (!f)
		return -EINVAL;
	for (k = 0; k < USMC_STATS_PROCS; k++) {
		int i = (start + k) % USMC_STATS_PROCS;
		struct usmc_stats_proc *p = &f->procs[i];
		uint32_t st = LOAD_ACQUIRE(&p->state);

		if (st == 2)
			continue;
		/* The lock, not the state word, says who owns a slot. */
		if (usmc_lock_take(fd, USMC_STATS_LOCK_BASE + i))
			continue;
		if (st == 1) {
			uint32_t live = 1;

			/* Previous owner died without folding: fold it now. */
			if (atomic_compare_exchange_strong(&p->state, &live, 2))
				fold_slot(f, i);
		}
		/* Ours alone until state 1 (the sum skips it). */
		memset(&p->c, 0, sizeof(p->c));
		memset(&p->base, 0, sizeof(p->base));
		p->pid = (uint32_t)usmc_getpid();
		memset(p->comm, 0, sizeof(p->comm));
		prctl(PR_GET_NAME, p->comm);
		p->start_ns = realtime_ns();
		STORE_RELEASE(&p->state, 1);
		return i;
	}
	return -ENOSPC;
}

static int attach_locked(void)
{
	struct usmc_stats_file *f = stats_file;
	int fd, slot;

	fd = stats_open(&f);
	if (fd < 0)
		return fd;
	slot = claim_slot(f, fd);
	if (slot < 0) {
		munmap(f, sizeof(*f));
		usmc_ifd_close(fd);
		return slot;
	}
	stats_file = f;
	stats_fd = fd;
	my_slot = slot;
	usmc_ctr = &f->procs[slot].c;
	return 0;
}

int usmc_stats_attach(void)
{
	static struct usmc_retry retry;
	int rc;

	if (my_slot >= 0)
		return 0;
	rc = usmc_retry_check(&retry);
	if (rc)
		return rc;
	pthread_mutex_lock(&stats_lock);
	if (my_slot < 0)
		rc = usmc_retry_note(&retry, attach_locked());
	pthread_mutex_unlock(&stats_lock);
	if (rc)
		usmc_dbg(1, "statistics unavailable: %s", strerror(-rc));
	return rc;
}

/*
 * Runs single-threaded in the child.  The inherited description, which
 * the old mapping holds too, must not keep the parent's slot lock (its
 * "alive") after the parent is gone, so both go.  Inherited connections
 * keep pointers into the old mapping (sk->st): the new one takes its
 * place at the same address (mremap MREMAP_FIXED replaces it in one
 * step), or, if the file at the name is not the same one any more (or
 * cannot be attached), private zeroed memory does, which they then
 * count into.  A new mapping lands elsewhere whenever the hole the old
 * one leaves is too tight for its alignment, or a higher one is free.
 */
void usmc_stats_after_fork(void)
{
	struct usmc_stats_file *old = stats_file;
	size_t len = sizeof(*stats_file);
	struct stat a = { 0 }, b;

	pthread_mutex_init(&stats_lock, NULL);
	if (my_slot < 0)
		return;
	usmc_ctr = &dummy_ctr;
	(void)fstat(stats_fd, &a);	/* zeroed if it fails: never the same file */
	usmc_ifd_close(stats_fd);
	stats_file = NULL;
	stats_fd = -1;
	my_slot = -1;
	if (attach_locked())
		goto scratch;
	/* A handler counting meanwhile must not follow the moving mapping. */
	usmc_ctr = &dummy_ctr;
	if (!fstat(stats_fd, &b) && b.st_ino == a.st_ino && b.st_dev == a.st_dev &&
	    mremap(stats_file, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, old) == old)
		stats_file = old;
	usmc_ctr = &stats_file->procs[my_slot].c;
	if (stats_file == old)
		return;
scratch:
	if (mmap(old, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
	    MAP_FAILED)
		munmap(old, len);
}

void usmc_stats_detach(void)
{
	struct usmc_stats_file *f = stats_file;
	uint32_t live = 1;

	if (my_slot < 0)
		return;
	usmc_ctr = &dummy_ctr;
	if (atomic_compare_exchange_strong(&f->procs[my_slot].state, &live, 2))
		fold_slot(f, my_slot);
	usmc_lock_drop(stats_fd, USMC_STATS_LOCK_BASE + my_slot);
	my_slot = -1;
}

struct usmc_stats_conn *usmc_stats_conn_alloc(void)
{
	static _Atomic unsigned int hint;
	struct usmc_stats_file *f = stats_file;
	unsigned int start, k;

	if (!f || my_slot < 0)
		return NULL;
	start = atomic_fetch_add_explicit(&hint, 1, memory_order_relaxed);
	for (k = 0; k < USMC_STATS_CONNS; k++) {
		struct usmc_stats_conn *e = &f->conns[(start + k) % USMC_STATS_CONNS];
		uint32_t free_ = 0;

		if (LOAD_RELAXED(&e->state))
			continue;
		if (!atomic_compare_exchange_strong(&e->state, &free_, 2))
			continue;
		/* state 2: being filled; the caller publishes it with state 1 */
		e->proc = (uint16_t)my_slot;
		e->pid = (uint32_t)usmc_getpid();
		e->start_ns = realtime_ns();
		STORE_RELAXED(&e->tx_bytes, 0);
		STORE_RELAXED(&e->rx_bytes, 0);
		STORE_RELAXED(&e->abort, 0);
		STORE_RELAXED(&e->closing, 0);
		return e;
	}
	return NULL;
}

void usmc_stats_conn_free(struct usmc_stats_conn *c)
{
	if (c)
		STORE_RELEASE(&c->state, 0);
}

struct usmc_stats_file *usmc_stats_map(void)
{
	struct usmc_stats_file *f = NULL;
	int fd = stats_open(&f);

	if (fd < 0) {
		errno = -fd;
		return NULL;
	}
	stats_fd = fd;
	stats_file = f;
	return f;
}

void usmc_stats_sum(struct usmc_stats_file *f, struct usmc_counters_snapshot *out)
{
	_Atomic uint64_t *t = (_Atomic uint64_t *)&f->totals;
	size_t i;
	int p;

	memset(out, 0, sizeof(*out));
	for (i = 0; i < NCOUNTERS; i++)
		out->v[i] = LOAD_RELAXED(&t[i]);
	for (p = 0; p < USMC_STATS_PROCS; p++) {
		if (LOAD_ACQUIRE(&f->procs[p].state) != 1)
			continue;
		for (i = 0; i < NCOUNTERS; i++)
			out->v[i] += slot_value(&f->procs[p], i);
	}
}

/*
 * Live slots are written by their processes only, without atomic RMWs
 * (stats.h): a reset moves their base up to what they count now.  A
 * process folding itself into the totals at this very moment may carry
 * counts from before the reset over; nothing else does.
 */
void usmc_stats_reset(struct usmc_stats_file *f)
{
	size_t i;
	int p;

	for (i = 0; i < NCOUNTERS; i++)
		atomic_exchange_explicit(&CTR(&f->totals)[i], 0, memory_order_relaxed);
	for (p = 0; p < USMC_STATS_PROCS; p++) {
		struct usmc_stats_proc *s = &f->procs[p];

		if (LOAD_ACQUIRE(&s->state) != 1)
			continue;
		for (i = 0; i < NCOUNTERS; i++)
			STORE_RELAXED(&CTR(&s->base)[i], LOAD_RELAXED(&CTR(&s->c)[i]));
	}
	atomic_fetch_add(&f->resets, 1);
}
