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
#include "guard.h"
#include "log.h"
#include "rundir.h"
#include "sandbox.h"
#include "sys.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>

/* Up to the end of the last counter (stats.h: new ones go last, and here). */
#define NCOUNTERS (offsetof(struct usmc_counters, clc_inband_rx) / sizeof(uint64_t) + 1)
BUILD_BUG_ON(offsetof(struct usmc_counters, fallback) % sizeof(uint64_t));
BUILD_BUG_ON(NCOUNTERS * sizeof(uint64_t) > sizeof(struct usmc_counters));

static struct usmc_counters dummy_ctr;
_Atomic(struct usmc_counters *) usmc_ctr = &dummy_ctr;

static struct usmc_stats_file *stats_file;
static int stats_fd = -1;
/* guard.c handle of stats_file's mapping (read lock-free per connection) */
static _Atomic int stats_guard = -1;
static _Atomic int my_slot = -1;	/* published after usmc_ctr (seq_cst) */
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;

struct usmc_stats_file *usmc_stats_self(int *slot)
{
	int s = LOAD_ACQUIRE(&my_slot);

	*slot = s;
	return s >= 0 ? stats_file : NULL;
}

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

/* Guard a mapping of the file before its first access: anyone who can
 * open it can truncate it; then the counters are lost, not the process. */
static int stats_guard_add(struct usmc_stats_file *f)
{
	return usmc_guard_add(f, sizeof(*f));
}

static void stats_unmap(struct usmc_stats_file *f, int guard)
{
	usmc_guard_del(guard);
	munmap(f, sizeof(*f));
}

/*
 * Open (creating atomically on first use) and map the statistics file;
 * returns its descriptor, *guard the mapping's guard handle.  repair (the
 * CLI): a published file of the wrong size was truncated by someone (ours
 * are always created full size under a private name) and is replaced by a
 * fresh one, so counting resumes.
 */
static int stats_open(struct usmc_stats_file **out, int *guard, bool repair)
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
create:
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
		*guard = stats_guard_add(f);
		f->version = USMC_PROTO_VERSION;
		f->nprocs = USMC_STATS_PROCS;
		f->nconns = USMC_STATS_CONNS;
		f->created_ns = realtime_ns();
		STORE_RELEASE((_Atomic uint64_t *)&f->magic, USMC_STATS_MAGIC);
		if (renameat2(usmc_rundir_fd(), tmp, usmc_rundir_fd(), USMC_STATS_FILE,
			      repair ? 0 : RENAME_NOREPLACE)) {
			/* Someone else published first: use theirs. */
			stats_unmap(f, *guard);
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
	if (fstat(fd, &st)) {
		usmc_ifd_close(fd);
		return -EBADMSG;
	}
	if ((size_t)st.st_size != len) {
		usmc_ifd_close(fd);
		if (repair) {
			usmc_dbg(1, "%s truncated: starting a fresh one", USMC_STATS_FILE);
			fd = -ENOENT;
			goto create;
		}
		return -EBADMSG;
	}
	f = stats_map(fd, len);
	if (!f) {
		rc = errno ? -errno : -ENOMEM;
		usmc_ifd_close(fd);
		return rc;
	}
	*guard = stats_guard_add(f);
	if (LOAD_ACQUIRE((_Atomic uint64_t *)&f->magic) != USMC_STATS_MAGIC ||
	    f->version != USMC_PROTO_VERSION || f->nprocs != USMC_STATS_PROCS ||
	    f->nconns != USMC_STATS_CONNS || usmc_guard_poisoned(*guard)) {
		stats_unmap(f, *guard);
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
	for (c = 0; LOAD_ACQUIRE(&p->nconns) && c < USMC_STATS_CONNS; c++) {
		struct usmc_stats_conn *e = &f->conns[c];

		if (LOAD_ACQUIRE(&e->state) == 1 && LOAD_RELAXED(&e->proc) == i)
			STORE_RELEASE(&e->state, 0);
	}
	STORE_RELAXED(&p->nconns, 0);
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
		memset(p->ux_read, 0, sizeof(p->ux_read));
		STORE_RELAXED(&p->nconns, 0);
		p->pid = (uint32_t)usmc_getpid();
		memset(p->comm, 0, sizeof(p->comm));
		usmc_sys(SYS_prctl, PR_GET_NAME, p->comm, 0);	/* not the wrapper (sandbox.c) */
		p->start_ns = realtime_ns();
		STORE_RELEASE(&p->state, 1);
		return i;
	}
	return -ENOSPC;
}

static int attach_locked(void)
{
	struct usmc_stats_file *f = stats_file;
	int fd, slot, guard = -1;

	fd = stats_open(&f, &guard, false);
	if (fd < 0)
		return fd;
	slot = claim_slot(f, fd);
	if (slot < 0) {
		stats_unmap(f, guard);
		usmc_ifd_close(fd);
		return slot;
	}
	stats_file = f;
	stats_fd = fd;
	stats_guard = guard;
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
	/* Runs single-threaded in the child.  The inherited description (and
	 * with it the parent's slot lock) must not keep the parent "alive". */
	struct usmc_stats_file *old = stats_file;
	int old_guard = stats_guard;

	pthread_mutex_init(&stats_lock, NULL);
	if (my_slot < 0)
		return;
	usmc_ctr = &dummy_ctr;
	if (usmc_sandboxed()) {
		/* No system call of ours under a filter: the parent's slot and
		 * its descriptor stay as inherited, unused. */
		my_slot = -1;
		return;
	}
	usmc_ifd_close(stats_fd);
	stats_file = NULL;
	stats_fd = -1;
	my_slot = -1;
	/* Inherited connections keep their entries (sk->st) in the old
	 * mapping: it stays, with its guard, and the file is mapped again on
	 * a description of our own, then moved onto the old address. */
	if (attach_locked())
		return;
	if (stats_file != old &&
	    mmap(old, sizeof(*old), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, stats_fd,
		 0) == old) {
		stats_unmap(stats_file, stats_guard);
		stats_file = old;
		stats_guard = old_guard;
		usmc_ctr = &old->procs[my_slot].c;
	}
}

void usmc_stats_detach(void)
{
	struct usmc_stats_file *f = stats_file;
	uint32_t live = 1;

	/* Under a seccomp filter the slot stays live (and counted) until the
	 * process is gone and its lock with it; then the next attach or
	 * `usmc stat` folds it (usmc_stats_gc). */
	if (my_slot < 0 || usmc_sandboxed())
		return;
	usmc_ctr = &dummy_ctr;
	if (atomic_compare_exchange_strong(&f->procs[my_slot].state, &live, 2))
		fold_slot(f, my_slot);
	usmc_lock_drop(stats_fd, USMC_STATS_LOCK_BASE + my_slot);
	my_slot = -1;
}

/*
 * The file was truncated under us (guard.c put zero pages in its place):
 * count into the dummy, let go of the file (the mapping stays: other
 * threads may still be writing into it) and attach afresh later, once
 * `usmc stat` replaced the file.  The counters of the old one are lost.
 */
static void stats_drop_poisoned(void)
{
	pthread_mutex_lock(&stats_lock);
	if (my_slot >= 0 && usmc_guard_poisoned(stats_guard)) {
		usmc_dbg(1, "%s truncated under us: counters lost", USMC_STATS_FILE);
		usmc_ctr = &dummy_ctr;
		my_slot = -1;
		usmc_guard_del(stats_guard);
		stats_guard = -1;
		stats_file = NULL;
		usmc_ifd_close(stats_fd);
		stats_fd = -1;
	}
	pthread_mutex_unlock(&stats_lock);
}

/* Where the next entry is looked for: after the last one made, or the
 * last one freed here (the pages touched stay those of the most entries
 * at once, not the whole table). */
static _Atomic unsigned int conn_hint;

struct usmc_stats_conn *usmc_stats_conn_alloc(void)
{
	struct usmc_stats_file *f = stats_file;
	unsigned int start, k;

	if (unlikely(usmc_guard_poisoned(LOAD_RELAXED(&stats_guard)))) {
		stats_drop_poisoned();
		return NULL;
	}
	if (!f || my_slot < 0)
		return NULL;
	start = atomic_fetch_add_explicit(&conn_hint, 1, memory_order_relaxed);
	for (k = 0; k < USMC_STATS_CONNS; k++) {
		struct usmc_stats_conn *e = &f->conns[(start + k) % USMC_STATS_CONNS];
		uint32_t free_ = 0;

		if (LOAD_RELAXED(&e->state))
			continue;
		if (!atomic_compare_exchange_strong(&e->state, &free_, 2))
			continue;
		/* state 2: being filled; the caller publishes it with state 1 */
		atomic_fetch_add(&f->procs[my_slot].nconns, 1);
		STORE_RELAXED(&e->proc, (uint16_t)my_slot);
		e->pid = (uint32_t)usmc_getpid();
		STORE_RELAXED(&e->start_ns, realtime_ns());
		STORE_RELAXED(&e->tx_bytes, 0);
		STORE_RELAXED(&e->rx_bytes, 0);
		STORE_RELAXED(&e->abort, 0);
		STORE_RELAXED(&e->closing, 0);
		return e;
	}
	return NULL;
}

void usmc_stats_conn_free(struct usmc_stats_conn *c, uint64_t start)
{
	struct usmc_stats_file *f = stats_file;

	uint16_t proc;

	/* Released once: folding the owner's slot may have done it, and the
	 * slot may be another connection's already (its alloc writes proc
	 * and start_ns: read before our exchange frees it, relaxed). */
	if (!c || LOAD_RELAXED(&c->start_ns) != start)
		return;
	proc = LOAD_RELAXED(&c->proc);
	if (atomic_exchange(&c->state, 0) && f && proc < USMC_STATS_PROCS) {
		atomic_fetch_sub(&f->procs[proc].nconns, 1);
		if (c >= f->conns && c < f->conns + USMC_STATS_CONNS)
			STORE_RELAXED(&conn_hint, (unsigned int)(c - f->conns));
	}
}

uint32_t usmc_stats_conn_index(const struct usmc_stats_conn *c)
{
	return (uint32_t)(c - stats_file->conns);
}

struct usmc_stats_conn *usmc_stats_conn_at(uint32_t idx)
{
	struct usmc_stats_file *f = stats_file;

	return f && idx < USMC_STATS_CONNS ? &f->conns[idx] : NULL;
}

struct usmc_stats_file *usmc_stats_map(void)
{
	struct usmc_stats_file *f = NULL;
	int guard = -1, fd = stats_open(&f, &guard, true);

	if (fd < 0) {
		errno = -fd;
		return NULL;
	}
	stats_fd = fd;
	stats_file = f;
	stats_guard = guard;
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
