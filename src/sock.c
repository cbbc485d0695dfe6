// SPDX-License-Identifier: MIT
/*
 * sock.c - struct usmc_sock lifetime.
 *
 * Objects come from a type-stable pool and are never returned to malloc:
 * fdtab.c may increment the reference of an object that is concurrently
 * being released (it re-checks the table afterwards), so the memory must
 * always stay a struct usmc_sock.
 */
#include "sandbox.h"
#include "sock.h"
#include "sys.h"

#include <fcntl.h>

#include <stdlib.h>

#define POOL_CHUNK	64

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct usmc_sock *pool_free;

const struct usmc_sock_watcher *_Atomic usmc_sock_watcher;
_Atomic uint64_t usmc_sock_mode_gen;

static struct usmc_sock *pool_get(void)
{
	struct usmc_sock *sk;
	int i;

	pthread_mutex_lock(&pool_lock);
	if (!pool_free) {
		struct usmc_sock *chunk = calloc(POOL_CHUNK, sizeof(*chunk));

		if (!chunk) {
			pthread_mutex_unlock(&pool_lock);
			return NULL;
		}
		for (i = 0; i < POOL_CHUNK; i++) {
			chunk[i].free_next = pool_free;
			pool_free = &chunk[i];
		}
	}
	sk = pool_free;
	pool_free = sk->free_next;
	pthread_mutex_unlock(&pool_lock);
	return sk;
}

static void pool_put(struct usmc_sock *sk)
{
	pthread_mutex_lock(&pool_lock);
	sk->free_next = pool_free;
	pool_free = sk;
	pthread_mutex_unlock(&pool_lock);
}

struct usmc_sock *usmc_sock_new(int fd, int kind, const struct usmc_sock_ops *ops)
{
	struct usmc_sock_sh *sh;
	struct usmc_sock *sk;

	if (usmc_sandboxed())
		return NULL;	/* never tracked under a seccomp filter */
	sh = usmc_family_alloc();

	/* No fork-shared state (memfd refused, region full): the socket stays
	 * plain TCP for its whole life, but it is tracked so the fallback is
	 * counted and a proposing client is declined. */
	if (!sh)
		sh = usmc_family_alloc_private();
	if (!sh)
		return NULL;
	sk = usmc_sock_wrap(fd, kind, sh, ops);
	if (!sk) {
		usmc_family_free(sh);
		return NULL;
	}
	STORE_RELAXED(&sh->refs, 1);
	return sk;
}

struct usmc_sock *usmc_sock_wrap(int fd, int kind, struct usmc_sock_sh *sh,
				 const struct usmc_sock_ops *ops)
{
	struct usmc_sock *sk = pool_get();

	if (!sk)
		return NULL;
	/* ref stays 0 while we fill it: lookups cannot take it yet. */
	sk->kind = kind;
	sk->ops = ops;
	sk->fd0 = fd;
	sk->sh = sh;
	pthread_mutex_init(&sk->lock, NULL);
	sk->role = 0;
	memset(&sk->local, 0, sizeof(sk->local));
	memset(&sk->peer, 0, sizeof(sk->peer));
	sk->ln = NULL;
	sk->lgr = NULL;
	sk->slot = sk->gen = sk->size = 0;
	sk->ctrl = NULL;
	sk->tx_p = sk->rx_p = NULL;
	sk->tx_c = sk->rx_c = NULL;
	sk->tx_ring = sk->rx_ring = NULL;
	sk->tx_move = false;
	sk->bell_own = sk->bell_peer = -1;
	sk->st = NULL;
	sk->st_handed = false;
	sk->st_start = 0;
	sk->migrate_pos = 0;
	sk->migrate_end = MIGRATE_END_UNKNOWN;
	sk->route_ns = 0;
	sk->accept_proven = false;
	sk->connect_checked = false;
	sk->clc_inband = false;
	sk->lst = NULL;
	sk->reg_idx = -1;
	memset(&sk->bound, 0, sizeof(sk->bound));
	sk->epregs = NULL;
	sk->in_nested = false;
	STORE_RELAXED(&sk->exit_dropped, false);
	STORE_RELAXED(&sk->held_fd, -1);
	STORE_RELEASE(&sk->ref, 1);
	return sk;
}

void usmc_sock_get(struct usmc_sock *sk)
{
	local_fetch_add_int(&sk->ref, 1);
}

bool usmc_sock_get_live(struct usmc_sock *sk)
{
	int r = atomic_load(&sk->ref);

	while (r > 0)
		if (atomic_compare_exchange_weak(&sk->ref, &r, r + 1))
			return true;
	return false;
}

/* A server end lets go of the client's link group in this process (the
 * bell numbers are stored -1 for calls that load them without sk->lock:
 * shed.c closes them only once no call holds a socket). */
void usmc_conn_detach_lgr(struct usmc_sock *sk)
{
	if (!sk->lgr || sk->role != 'S')
		return;
	if (sk->bell_own >= 0)
		usmc_lgr_bells_put(sk->lgr);
	usmc_lgr_put(sk->lgr);
	sk->lgr = NULL;
	sk->ctrl = NULL;
	__atomic_store_n(&sk->bell_own, -1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&sk->bell_peer, -1, __ATOMIC_SEQ_CST);
}

/*
 * The last descriptor of this process closed while other processes keep
 * the socket (a forking server's parent after handing it to a worker):
 * drop only what this process holds: a listener's index; a connection's
 * references to the listener index and, on the server side, to the client's link group
 * (lgr.c prunes it once idle and its owner is gone).  A client's own link
 * group stays referenced: its slot lives on in the other process.
 */
void usmc_sock_detach_local(struct usmc_sock *sk)
{
	/* A listener: our own lock on its index goes; the other processes
	 * that listen on the socket hold theirs (listener.c). */
	if (sk->kind == SK_LISTEN && sk->lst) {
		usmc_clc_ln_put(sk->lst);
		sk->lst = NULL;
	}
	if (sk->kind != SK_CONN)
		return;
	usmc_conn_detach_lgr(sk);
	if (sk->ln)
		usmc_clc_ln_put(sk->ln);
	sk->ln = NULL;
}

/*
 * fd: the descriptor being closed (still open), for the release to talk to
 * the TCP socket; -1 when the last reference goes elsewhere (then no
 * descriptor number is trusted: it may already name another file).
 */
void usmc_sock_put_closing(struct usmc_sock *sk, int fd)
{
	/* Others still hold it (a call in progress, or another descriptor):
	 * keep the TCP socket alive past this close, as the kernel does. */
	if (fd >= 0 && sk->kind == SK_CONN && LOAD_ACQUIRE(&sk->ref) > 1 &&
	    LOAD_RELAXED(&sk->held_fd) < 0) {
		int dup = usmc_ifd_dup(fd), none = -1;

		if (dup >= 0) {
			if (!atomic_compare_exchange_strong(&sk->held_fd, &none, dup))
				usmc_ifd_close(dup);
		}
	}
	if (local_fetch_add_int(&sk->ref, -1) == 1)
		usmc_sock_put_last(sk, fd);
}

/* The last reference is gone: the descriptor is gone from our table. */
void usmc_sock_put_last(struct usmc_sock *sk, int fd)
{
	int held = atomic_exchange(&sk->held_fd, -1);

	if (fd < 0)
		fd = held;
	sk_watch_forget(sk);
	/* Releasing may still decide (and lock) an undecided connection.
	 * After usmc_socks_exit (a destructor closing after ours), this
	 * process's share is gone already. */
	if (!LOAD_RELAXED(&sk->exit_dropped) && atomic_fetch_sub(&sk->sh->refs, 1) == 1) {
		sk->ops->release(sk, fd);
		usmc_family_free(sk->sh);
	} else {
		usmc_sock_detach_local(sk);
		/* Handed over: the adopter lists it; an entry of ours would
		 * stay until we exit (a node cluster's primary, which passes
		 * every connection it accepts, listed thousands). */
		if (sk->st_handed && sk->st && sk->st->pid == (uint32_t)usmc_getpid())
			usmc_stats_conn_free(sk->st, sk->st_start);
		sk->st = NULL;
	}
	if (held >= 0)
		usmc_ifd_close(held);
	pthread_mutex_destroy(&sk->lock);
	sk->sh = NULL;
	pool_put(sk);
}

/* Fork child (atfork.c): the only thread now; a parent thread may have
 * held pool_lock at the fork. */
void usmc_sock_pool_after_fork(void)
{
	pthread_mutex_init(&pool_lock, NULL);
}
