// SPDX-License-Identifier: MIT
/*
 * fdtab.c - two-level descriptor table with lock-free lookups.
 *
 * Lookup: load the entry, take a reference only if the object is still
 * live (inc-not-zero), then re-check the entry; objects are type-stable
 * (sock.c), so a stale pointer is never freed memory.  Updates (install,
 * remove, dup) serialise on fdtab_lock.
 */
#include "conn.h"
#include "fdtab.h"
#include "sys.h"

#include <fcntl.h>
#include <stdlib.h>

_Atomic(usmc_fdslot_t *) usmc_fdt_root[FDT_ROOT];
static pthread_mutex_t fdtab_lock = PTHREAD_MUTEX_INITIALIZER;

static usmc_fdslot_t *fdt_slot(int fd, bool create)
{
	unsigned int hi = (unsigned int)fd >> FDT_SHIFT;
	usmc_fdslot_t *leaf;

	if (fd < 0 || hi >= FDT_ROOT)
		return NULL;
	leaf = atomic_load_explicit(&usmc_fdt_root[hi], memory_order_acquire);
	if (!leaf && create) {
		leaf = calloc(FDT_LEAF, sizeof(*leaf));
		if (!leaf)
			return NULL;
		/* Only created under fdtab_lock; readers see NULL or a zeroed leaf. */
		atomic_store_explicit(&usmc_fdt_root[hi], leaf, memory_order_release);
	}
	return leaf ? &leaf[(unsigned int)fd & (FDT_LEAF - 1)] : NULL;
}

static bool ref_get_live(struct usmc_sock *sk)
{
	int r = atomic_load_explicit(&sk->ref, memory_order_relaxed);

	while (r > 0)
		if (local_cas_int(&sk->ref, &r, r + 1))
			return true;
	return false;
}

/* usmc_fd_get() when its first try lost a race (a close, a reuse). */
struct usmc_sock *usmc_fd_get_slow(int fd)
{
	usmc_fdslot_t *s = fdt_slot(fd, false);
	struct usmc_sock *sk;

	if (!s)
		return NULL;
	for (;;) {
		sk = atomic_load_explicit(s, memory_order_acquire);
		if (!sk)
			return NULL;
		if (!ref_get_live(sk))
			return NULL;
		if (atomic_load_explicit(s, memory_order_acquire) == sk)
			return sk;
		usmc_sock_put(sk);
	}
}

int usmc_fd_install(int fd, struct usmc_sock *sk)
{
	struct usmc_sock *old;
	usmc_fdslot_t *s;

	pthread_mutex_lock(&fdtab_lock);
	s = fdt_slot(fd, true);
	if (!s) {
		pthread_mutex_unlock(&fdtab_lock);
		return -ENOMEM;
	}
	old = atomic_exchange(s, sk);
	pthread_mutex_unlock(&fdtab_lock);
	/* A stale entry means the kernel reused fd behind our back: drop it. */
	if (old)
		usmc_sock_put(old);
	return 0;
}

struct usmc_sock *usmc_fd_remove(int fd)
{
	struct usmc_sock *sk = NULL;
	usmc_fdslot_t *s;

	pthread_mutex_lock(&fdtab_lock);
	s = fdt_slot(fd, false);
	if (s)
		sk = atomic_exchange(s, NULL);
	pthread_mutex_unlock(&fdtab_lock);
	return sk;
}

void usmc_fd_dup(int oldfd, int newfd)
{
	struct usmc_sock *sk = usmc_fd_get(oldfd);

	if (!sk) {
		/* newfd now refers to an untracked file: forget what it was. */
		sk = usmc_fd_remove(newfd);
		if (sk)
			usmc_sock_put(sk);
		return;
	}
	/* The reference from usmc_fd_get becomes newfd's reference. */
	if (usmc_fd_install(newfd, sk))
		usmc_sock_put(sk);
}

void usmc_fd_foreach(void (*fn)(int fd, struct usmc_sock *sk, void *arg), void *arg)
{
	unsigned int hi, lo;

	for (hi = 0; hi < FDT_ROOT; hi++) {
		usmc_fdslot_t *leaf = atomic_load_explicit(&usmc_fdt_root[hi], memory_order_acquire);

		if (!leaf)
			continue;
		for (lo = 0; lo < FDT_LEAF; lo++) {
			struct usmc_sock *sk = atomic_load(&leaf[lo]);

			if (sk)
				fn((int)(hi << FDT_SHIFT | lo), sk, arg);
		}
	}
}

static void quiet_zero(int fd __unused, struct usmc_sock *sk, void *arg __unused)
{
	sk->shed_entries = 0;
}

static void quiet_count(int fd __unused, struct usmc_sock *sk, void *arg __unused)
{
	sk->shed_entries++;
}

struct quiet_ctx {
	const struct usmc_sock *mine;
	bool quiet;
};

static void quiet_check(int fd __unused, struct usmc_sock *sk, void *arg)
{
	struct quiet_ctx *q = arg;

	/* Listeners never have doorbells; a connection that went back to
	 * SK_TCP may have had them. */
	if (sk->kind != SK_LISTEN &&
	    atomic_load(&sk->ref) != sk->shed_entries + (sk == q->mine))
		q->quiet = false;
}

/*
 * Entries only change under fdtab_lock, so the counts hold; references
 * rise without it (usmc_fd_get), but a call that takes one after our load
 * loads what the caller stored before its fence (its reference is a
 * seq_cst read-modify-write before its loads).
 */
bool usmc_fd_quiet(const struct usmc_sock *mine)
{
	struct quiet_ctx q = { .mine = mine, .quiet = true };

	/* A signal handler's call at EMFILE may interrupt this thread inside
	 * the lock: then nothing is quiet (shed.c gives nothing back). */
	if (!usmc_lock_bounded(&fdtab_lock))
		return false;
	usmc_fd_foreach(quiet_zero, NULL);
	usmc_fd_foreach(quiet_count, NULL);
	usmc_fd_foreach(quiet_check, &q);
	pthread_mutex_unlock(&fdtab_lock);
	return q.quiet;
}

struct find_ctx {
	struct usmc_sock *sk;
	int fd;
};

static void find_fd(int fd, struct usmc_sock *sk, void *arg)
{
	struct find_ctx *c = arg;

	if (sk == c->sk && c->fd < 0)
		c->fd = fd;
}

/* The caller holds sk (a reference, or ep_lock over a record of it), so a
 * slot equal to sk is sk's: no reference needed, and none dropped (which
 * could be another socket's last). */
static int app_fd(struct usmc_sock *sk, int hint)
{
	struct find_ctx c = { sk, -1 };

	if (hint >= 0 && usmc_fd_peek(hint) == sk)
		return hint;
	usmc_fd_foreach(find_fd, &c);
	return c.fd;
}

int usmc_sock_live_fd(struct usmc_sock *sk, int hint)
{
	int fd;

	/* Our own duplicate is sk's for as long as it is held. */
	if (hint >= 0 && hint == LOAD_RELAXED(&sk->held_fd))
		return hint;
	fd = app_fd(sk, hint);

	/* The application closed (or reused) that number and has no other:
	 * the duplicate that keeps the socket alive for calls in progress. */
	return fd >= 0 ? fd : LOAD_RELAXED(&sk->held_fd);
}

int usmc_sock_app_fd(struct usmc_sock *sk, int hint)
{
	return app_fd(sk, hint);
}

/* sk->held_fd, made from fd if there is none (*made); -1: none. */
static int hold_fd(struct usmc_sock *sk, int fd, bool *made)
{
	int own = LOAD_RELAXED(&sk->held_fd), none = -1;

	*made = false;
	if (own >= 0)
		return own;
	own = usmc_ifd_dup(fd);
	if (own < 0)
		return -1;
	/* Still sk's after the dup: the dup is its file. */
	if (usmc_fd_peek(fd) != sk) {
		usmc_ifd_close(own);
		return -1;
	}
	if (atomic_compare_exchange_strong(&sk->held_fd, &none, own)) {
		*made = true;
		return own;
	}
	usmc_ifd_close(own);	/* a close in progress left its own */
	return none;
}

/* What hold_fd made goes while the application still has a descriptor
 * of sk (else the last reference's put closes it). */
static void unhold_fd(struct usmc_sock *sk, int fd, int own, bool made)
{
	if (made && app_fd(sk, fd) >= 0 && atomic_compare_exchange_strong(&sk->held_fd, &own, -1))
		usmc_ifd_close(own);
}

void usmc_fd_with_held(int fd, void (*fn)(struct usmc_sock *sk, int d, void *arg), void *arg)
{
	struct usmc_sock *sk = usmc_fd_get(fd);
	bool made;
	int own;

	if (!sk)
		return;
	own = hold_fd(sk, fd, &made);
	if (own >= 0) {
		fn(sk, own, arg);
		unhold_fd(sk, fd, own, made);
	} else if (usmc_fd_peek(fd) == sk) {
		fn(sk, fd, arg);	/* out of descriptors */
	}
	usmc_sock_put(sk);
}

static unsigned int fork_gen;
static pthread_t fork_owner;	/* thread holding fdtab_lock across fork() */
static bool fork_locked;

/* Each socket once: one more process will hold it. */
static void fork_ref(int fd __unused, struct usmc_sock *sk, void *arg)
{
	int delta = *(int *)arg;

	if (sk->fork_gen == fork_gen)
		return;
	sk->fork_gen = fork_gen;
	atomic_fetch_add(&sk->sh->refs, delta);
}

/*
 * fork(): the child's descriptors must be counted in the shared reference
 * before the parent can close its own copy, so this happens in the parent,
 * before the fork, with the table locked (no descriptor can come or go
 * until both processes have their copy).  From glibc's atfork handlers,
 * registered first (interpose.c): the program's own prepare handlers have
 * run before, its parent and child handlers run after, so that a handler
 * that closes a descriptor (gRPC's) does not wait for the lock its own
 * thread holds.
 */
void usmc_fd_fork_prepare(void)
{
	int one = 1;

	pthread_mutex_lock(&fdtab_lock);
	fork_owner = pthread_self();
	fork_locked = true;
	fork_gen++;
	usmc_fd_foreach(fork_ref, &one);
}

void usmc_fd_fork_parent(void)
{
	if (!fork_locked || !pthread_equal(fork_owner, pthread_self()))
		return;
	fork_locked = false;
	pthread_mutex_unlock(&fdtab_lock);
}

/* The fork failed: there is no child to hold the copies counted for it.
 * (A close on another thread since the parent handler let go of the table
 * took them for the child's: a failed fork racing with a close.) */
void usmc_fd_fork_failed(void)
{
	int minus = -1;

	pthread_mutex_lock(&fdtab_lock);
	fork_gen++;
	usmc_fd_foreach(fork_ref, &minus);
	pthread_mutex_unlock(&fdtab_lock);
}

static void zero_ref(int fd __unused, struct usmc_sock *sk, void *arg __unused)
{
	STORE_RELAXED(&sk->ref, 0);
	pthread_mutex_init(&sk->lock, NULL);
}

static void count_ref(int fd __unused, struct usmc_sock *sk, void *arg __unused)
{
	atomic_fetch_add(&sk->ref, 1);
}

void usmc_fd_after_fork(void)
{
	/* Single-threaded child: in-flight references of other parent threads
	 * do not exist here; recount from the table.  Our fork() left the
	 * table locked by this very thread: unlock it as its owner.  A fork
	 * that bypassed our wrapper while another thread held it leaves a lock
	 * nobody here owns: start over. */
	if (fork_locked && pthread_equal(fork_owner, pthread_self())) {
		fork_locked = false;
		pthread_mutex_unlock(&fdtab_lock);
	} else {
		pthread_mutex_init(&fdtab_lock, NULL);
	}
	usmc_fd_foreach(zero_ref, NULL);
	usmc_fd_foreach(count_ref, NULL);
}

struct once_ctx {
	unsigned int gen;
	void (*fn)(int fd, struct usmc_sock *sk, void *arg);
	void *arg;
};

static void once_one(int fd, struct usmc_sock *sk, void *arg)
{
	struct once_ctx *o = arg;

	if (sk->fork_gen == o->gen)
		return;
	sk->fork_gen = o->gen;
	o->fn(fd, sk, o->arg);
}

void usmc_fd_foreach_sock(void (*fn)(int fd, struct usmc_sock *sk, void *arg), void *arg)
{
	struct once_ctx o = { .gen = ++fork_gen, .fn = fn, .arg = arg };

	usmc_fd_foreach(once_one, &o);
}
