// SPDX-License-Identifier: MIT
/*
 * clc_ln.c - a listener's CLC index as a file: created and published by
 * the server, joined by other processes that listen on the same socket,
 * opened and cached by clients, switched off and on; the proposals in it
 * are clc.c's.
 *
 * Lifetime: every process that listens on the socket holds a read lock on
 * its own description of ln-<id>; clients take it as alive while some lock
 * is held (usmc_lock_held) and drop a cached index that is closed,
 * unlocked or truncated.
 */
#include "clc.h"
#include "guard.h"
#include "options.h"
#include "rundir.h"
#include "sys.h"
#include "vmbudget.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>

static struct usmc_clc_ln *ln_cache;
static pthread_mutex_t ln_cache_lock = PTHREAD_MUTEX_INITIALIZER;

/* Map the index and guard the mapping (guard.c): from then on a truncation
 * by anyone poisons it instead of killing us.  Within usmc's share of the
 * address space (vmbudget.h; check: -E2BIG if it does not fit). */
static int ln_map(struct usmc_clc_ln *ln, int fd, bool check)
{
	size_t len = sizeof(struct usmc_clc_index);
	int rc = usmc_vm_take(len, check);

	if (rc)
		return rc;
	ln->idx = usmc_map_shared(fd, len);
	if (!ln->idx) {
		rc = errno ? -errno : -ENOMEM;
		usmc_vm_give(len);
		return rc;
	}
	ln->guard = usmc_guard_add(ln->idx, len);
	return 0;
}

static void ln_unmap(struct usmc_clc_ln *ln)
{
	usmc_guard_del(ln->guard);
	munmap(ln->idx, sizeof(struct usmc_clc_index));
	usmc_vm_give(sizeof(struct usmc_clc_index));
	ln->idx = NULL;
}

static void ln_name(char *buf, size_t len, uint64_t id, bool tmp)
{
	snprintf(buf, len, "%sln-%016llx", tmp ? "t-" : "", (unsigned long long)id);
}

int usmc_clc_ln_create(struct usmc_clc_ln **out)
{
	size_t len = sizeof(struct usmc_clc_index);
	char tmp[64], name[64];
	struct usmc_clc_ln *ln;
	int fd, rc;

	ln = calloc(1, sizeof(*ln));
	if (!ln)
		return -ENOMEM;
	ln->guard = -1;
	ln->id = usmc_random64();
	ln_name(tmp, sizeof(tmp), ln->id, true);
	ln_name(name, sizeof(name), ln->id, false);
	fd = usmc_rundir_open_kept(tmp, O_RDWR | O_CREAT, 0600);
	if (fd < 0) {
		rc = fd;
		goto err_free;
	}
	/* The header page is written now: backed first, so a full tmpfs
	 * fails the listener's registration instead of faulting. */
	if (ftruncate(fd, (off_t)len) || fallocate(fd, 0, 0, 4096)) {
		rc = -errno;
		goto err_unlink;
	}
	atomic_fetch_or(&ln->backed[0], 1);
	rc = ln_map(ln, fd, true);
	if (rc)
		goto err_unlink;
	/* A read lock: processes that listen on the same socket later each
	 * take one on their own description (usmc_clc_ln_join); any of them
	 * keeps the index alive (usmc_lock_held asks for a write lock). */
	rc = usmc_lock_share(fd, 0);
	if (rc)
		goto err_unmap;
	ln->idx->version = USMC_PROTO_VERSION;
	ln->idx->ways = USMC_CLC_WAYS;
	ln->idx->id = ln->id;
	STORE_RELEASE((_Atomic uint64_t *)&ln->idx->magic, USMC_CLC_MAGIC);
	/* Locked before it gets its public name: an unlocked ln- is dead. */
	rc = usmc_rundir_rename(tmp, name);
	if (rc)
		goto err_unmap;
	ln->fd = fd;
	STORE_RELAXED(&ln->refs, 1);
	*out = ln;
	return 0;

err_unmap:
	ln_unmap(ln);
err_unlink:
	usmc_ifd_close(fd);
	usmc_rundir_unlink(tmp, false);
err_free:
	free(ln);
	return rc;
}

void usmc_clc_ln_unpublish(struct usmc_clc_ln *ln)
{
	char name[64];

	STORE_RELEASE(&ln->idx->closed, 1);
	ln_name(name, sizeof(name), ln->id, false);
	usmc_rundir_unlink(name, false);
}

void usmc_clc_ln_busy(struct usmc_clc_ln *ln, bool busy)
{
	bool now = LOAD_RELAXED(&ln->idx->degraded) & CLC_LN_BUSY;

	if (busy && !now)
		atomic_fetch_or(&ln->idx->degraded, CLC_LN_BUSY);
	else if (!busy && now)
		atomic_fetch_and(&ln->idx->degraded, ~CLC_LN_BUSY);
}

void usmc_clc_ln_off(struct usmc_clc_ln *ln, int reason)
{
	uint32_t want = reason > 0 && reason < USMC_R_MAX ?
			CLC_LN_OFF | ((uint32_t)reason << 8) | (usmc_ctl_gen() << 16) : 0;
	uint32_t d = LOAD_RELAXED(&ln->idx->degraded);
	unsigned int tries;

	for (tries = 0; tries < CLC_CAS_TRIES; tries++) {
		if ((d & CLC_LN_OFF_BITS) == want)
			return;
		if (atomic_compare_exchange_weak(&ln->idx->degraded, &d,
						 (d & ~CLC_LN_OFF_BITS) | want))
			return;
	}
}

void usmc_clc_ln_wake_always(struct usmc_clc_ln *ln, bool on)
{
	if ((LOAD_RELAXED(&ln->idx->wake_always) != 0) != on)
		STORE_RELEASE(&ln->idx->wake_always, on ? 1u : 0u);
}

void usmc_clc_ln_fit_lower(struct usmc_clc_ln *ln, size_t bytes)
{
	uint32_t kib = (uint32_t)MIN(MAX(bytes >> 10, (size_t)1), (size_t)UINT32_MAX);
	uint32_t cur = LOAD_RELAXED(&ln->idx->lgr_fit_kib);
	unsigned int tries;

	for (tries = 0; bytes && tries < CLC_CAS_TRIES && (!cur || kib < cur); tries++)
		if (atomic_compare_exchange_weak(&ln->idx->lgr_fit_kib, &cur, kib))
			return;
}

size_t usmc_clc_ln_fit(const struct usmc_clc_ln *ln)
{
	return (size_t)LOAD_RELAXED(&ln->idx->lgr_fit_kib) << 10;
}

int usmc_clc_ln_off_reason(const struct usmc_clc_ln *ln)
{
	uint32_t d = LOAD_RELAXED(&ln->idx->degraded);

	return d & CLC_LN_OFF ? (int)CLC_LN_OFF_REASON(d) : 0;
}

struct usmc_clc_ln *usmc_clc_ln_ref(struct usmc_clc_ln *ln)
{
	atomic_fetch_add(&ln->refs, 1);
	return ln;
}

/* Drop n references at once. */
static void ln_drop(struct usmc_clc_ln *ln, int n)
{
	if (!ln || atomic_fetch_sub(&ln->refs, n) != n)
		return;
	ln_unmap(ln);
	usmc_ifd_close(ln->fd);
	free(ln);
}

void usmc_clc_ln_put(struct usmc_clc_ln *ln)
{
	ln_drop(ln, 1);
}

/* The header is owner-written and immutable after publication. */
static bool ln_header_ok(const struct usmc_clc_ln *ln, uint64_t id)
{
	return LOAD_ACQUIRE((_Atomic uint64_t *)&ln->idx->magic) == USMC_CLC_MAGIC &&
	       ln->idx->version == USMC_PROTO_VERSION && ln->idx->id == id &&
	       !usmc_clc_ln_poisoned(ln);
}

static int ln_open(uint64_t id, bool fresh, struct usmc_clc_ln **out)
{
	size_t len = sizeof(struct usmc_clc_index);
	struct usmc_clc_ln *ln;
	char name[64];
	struct stat st;
	int fd, rc;

	ln_name(name, sizeof(name), id, false);
	fd = fresh ? usmc_rundir_open_kept(name, O_RDWR, 0) : usmc_rundir_open(name, O_RDWR, 0);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) || (size_t)st.st_size != len) {
		usmc_ifd_close(fd);
		return -EBADMSG;
	}
	ln = calloc(1, sizeof(*ln));
	if (!ln) {
		usmc_ifd_close(fd);
		return -ENOMEM;
	}
	rc = ln_map(ln, fd, fresh);
	if (rc) {
		usmc_ifd_close(fd);
		free(ln);
		return rc;
	}
	if (!ln_header_ok(ln, id)) {
		ln_unmap(ln);
		usmc_ifd_close(fd);
		free(ln);
		return -EBADMSG;
	}
	ln->id = id;
	ln->fd = fd;
	STORE_RELAXED(&ln->refs, 1);	/* the cache's reference */
	*out = ln;
	return 0;
}

int usmc_clc_ln_adopt(uint64_t id, int fd, struct usmc_clc_ln **out)
{
	size_t len = sizeof(struct usmc_clc_index);
	struct usmc_clc_ln *ln;
	struct stat st;

	if (usmc_rundir_check(fd, false, &st) || (size_t)st.st_size != len)
		return -EBADMSG;
	ln = calloc(1, sizeof(*ln));
	if (!ln)
		return -ENOMEM;
	if (ln_map(ln, fd, false)) {
		free(ln);
		return -EBADMSG;
	}
	if (!ln_header_ok(ln, id)) {
		ln_unmap(ln);
		free(ln);
		return -EBADMSG;
	}
	usmc_ifd_mark(fd);
	sys_fcntl(fd, F_SETFD, FD_CLOEXEC);
	ln->id = id;
	ln->fd = fd;
	STORE_RELAXED(&ln->refs, 1);
	*out = ln;
	return 0;
}

int usmc_clc_ln_join(uint64_t id, struct usmc_clc_ln **out)
{
	struct usmc_clc_ln *ln;
	/* A listener that exists: counted, never refused (vmbudget.h). */
	int rc = ln_open(id, false, &ln);

	if (rc)
		return rc;
	/* Our own liveness token; the header is checked after it is held: a
	 * listener closed (or an index truncated) before that is not joined. */
	rc = usmc_lock_share(ln->fd, 0);
	if (!rc && (usmc_clc_ln_poisoned(ln) || LOAD_ACQUIRE(&ln->idx->closed)))
		rc = -ESRCH;
	if (rc) {
		usmc_clc_ln_put(ln);
		return rc;
	}
	*out = ln;
	return 0;
}

/* A cached index whose listener is gone: closed, poisoned, or (look):
 * its owner family let go of the lock. */
static bool ln_gone(const struct usmc_clc_ln *ln, bool look)
{
	return usmc_clc_ln_poisoned(ln) || LOAD_ACQUIRE(&ln->idx->closed) ||
	       (look && !usmc_lock_held(ln->fd, 0));
}

/*
 * Drop the cache's reference to indexes of listeners that are gone
 * (holders keep theirs): each costs a descriptor and its mapping, and a
 * program that connects to a new listener now and then (FTP data
 * connections, test suites) would otherwise run out of descriptors where
 * TCP does not.  On every miss; owners that died are looked for then
 * only, a lock test each.  Caller holds ln_cache_lock.
 */
static void ln_cache_prune(void)
{
	struct usmc_clc_ln *ln, **pp = &ln_cache;

	while ((ln = *pp)) {
		if (ln_gone(ln, true)) {
			*pp = ln->next;
			usmc_clc_ln_put(ln);
		} else {
			pp = &ln->next;
		}
	}
}

int usmc_clc_ln_get(uint64_t id, bool fresh, struct usmc_clc_ln **out)
{
	struct usmc_clc_ln *ln, **pp;
	int rc = 0, n = 1;

	pthread_mutex_lock(&ln_cache_lock);
	for (ln = ln_cache; ln; ln = ln->next)
		if (ln->id == id)
			break;
	if (!ln) {
		ln_cache_prune();
		rc = ln_open(id, fresh, &ln);
		if (rc) {
			pthread_mutex_unlock(&ln_cache_lock);
			return rc;
		}
		ln->next = ln_cache;
		ln_cache = ln;
	}
	ln = usmc_clc_ln_ref(ln);
	pthread_mutex_unlock(&ln_cache_lock);
	/* Liveness: the owner family holds the lock for as long as it lives.
	 * Asked outside ln_cache_lock (a system call): every connect of every
	 * thread comes here.  A truncated index or a dead owner's is dropped
	 * from the cache, if still there: the next lookup opens it afresh. */
	if (!ln_gone(ln, true)) {
		*out = ln;
		return 0;
	}
	rc = usmc_clc_ln_poisoned(ln) ? -EBADMSG : -ESRCH;
	pthread_mutex_lock(&ln_cache_lock);
	for (pp = &ln_cache; *pp; pp = &(*pp)->next)
		if (*pp == ln) {
			*pp = ln->next;
			n = 2;		/* and the cache's */
			break;
		}
	pthread_mutex_unlock(&ln_cache_lock);
	ln_drop(ln, n);
	return rc;
}

/* Fork child (atfork.c): the only thread now; a parent thread may have
 * held ln_cache_lock at the fork. */
void usmc_clc_ln_after_fork(void)
{
	pthread_mutex_init(&ln_cache_lock, NULL);
}
