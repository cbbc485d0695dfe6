/* SPDX-License-Identifier: MIT */
/*
 * fdtab.h - descriptor -> struct usmc_sock, the one lookup every wrapper does.
 *
 * A miss (any descriptor that is not a TCP socket we track) costs two
 * loads and a branch; that is the whole overhead usmc adds to files,
 * pipes, UDP and UNIX sockets.
 */
#ifndef USMC_FDTAB_H
#define USMC_FDTAB_H

#include "sock.h"

#define FDT_SHIFT	10
#define FDT_LEAF	(1u << FDT_SHIFT)
#define FDT_ROOT	2048		/* 2M descriptors */

typedef _Atomic(struct usmc_sock *) usmc_fdslot_t;

/* Leaves are created (zeroed) under the table's lock, never freed. */
extern _Atomic(usmc_fdslot_t *) usmc_fdt_root[FDT_ROOT];
struct usmc_sock *usmc_fd_get_slow(int fd);

/*
 * Returns the socket with a reference held, or NULL.  The reference is
 * taken only while the count is not zero (a socket on its way out is
 * never brought back), and holds only if fd still names the socket after
 * it (a close and a reuse in between, by another thread or a handler).
 */
static inline struct usmc_sock *usmc_fd_get(int fd)
{
	unsigned int hi = (unsigned int)fd >> FDT_SHIFT;
	usmc_fdslot_t *leaf, *s;
	struct usmc_sock *sk;
	int r;

	if (unlikely(hi >= FDT_ROOT))
		return NULL;
	leaf = atomic_load_explicit(&usmc_fdt_root[hi], memory_order_acquire);
	if (!leaf)
		return NULL;
	s = &leaf[(unsigned int)fd & (FDT_LEAF - 1)];
	sk = atomic_load_explicit(s, memory_order_acquire);
	if (likely(!sk))
		return NULL;
	r = atomic_load_explicit(&sk->ref, memory_order_relaxed);
	if (likely(r > 0 && local_cas_int(&sk->ref, &r, r + 1))) {
		if (likely(atomic_load_explicit(s, memory_order_acquire) == sk))
			return sk;
		usmc_sock_put(sk);
	}
	return usmc_fd_get_slow(fd);
}
/* The socket at fd now, without a reference: for comparing with one the
 * caller holds, never to use (callers under ep_lock, where dropping a
 * reference could be the last, and the last close takes ep_lock). */
static inline struct usmc_sock *usmc_fd_peek(int fd)
{
	unsigned int hi = (unsigned int)fd >> FDT_SHIFT;
	usmc_fdslot_t *leaf;

	if (hi >= FDT_ROOT)
		return NULL;
	leaf = atomic_load_explicit(&usmc_fdt_root[hi], memory_order_acquire);
	return leaf ? atomic_load_explicit(&leaf[(unsigned int)fd & (FDT_LEAF - 1)],
					   memory_order_acquire) : NULL;
}
/* Install sk at fd (takes over one reference). */
int usmc_fd_install(int fd, struct usmc_sock *sk);
/* Remove fd's entry; returns the socket whose reference the caller drops. */
struct usmc_sock *usmc_fd_remove(int fd);
/* dup: newfd refers to the same socket as oldfd (no-op when untracked). */
void usmc_fd_dup(int oldfd, int newfd);
/* Call fn for every tracked descriptor (fork, exec, exit). */
void usmc_fd_foreach(void (*fn)(int fd, struct usmc_sock *sk, void *arg), void *arg);
/* A descriptor that still refers to sk: hint if it does, else any, or -1. */
int usmc_sock_live_fd(struct usmc_sock *sk, int hint);
/* fn(sk, d, arg) for fd's socket, with a reference, d the descriptor it
 * keeps for calls in progress (sk->held_fd, made from fd if there is
 * none; fd itself if none could be made and fd is still sk's): it stays
 * sk's while the program's other threads close fd and reuse its number,
 * so a walk over every descriptor (a fork's, an exec's) works on it.
 * Nothing if fd is no tracked socket (any more). */
void usmc_fd_with_held(int fd, void (*fn)(struct usmc_sock *sk, int d, void *arg), void *arg);
/* The program's number for sk (hint first), -1 if it has none: a walk
 * (fork, exec) works through sk->held_fd, usmc's own number, and what
 * depends on the program's number asks here. */
int usmc_sock_app_fd(struct usmc_sock *sk, int hint);
/* Whether one of the application's descriptors still refers to sk (hint
 * first); the duplicate held for calls in progress does not count. */
static inline bool usmc_sock_app_open(struct usmc_sock *sk, int hint)
{
	return usmc_sock_app_fd(sk, hint) >= 0;
}
/* No call of this process holds a socket of the table that may have had
 * doorbells (every reference is a table entry; mine: one more, the
 * caller's own).  Caller: a full fence after its stores callers must see. */
bool usmc_fd_quiet(const struct usmc_sock *mine);
void usmc_fd_after_fork(void);
/* fn for each socket of the table once (several descriptors may name one);
 * not concurrently with a fork's count (the same marks). */
void usmc_fd_foreach_sock(void (*fn)(int fd, struct usmc_sock *sk, void *arg), void *arg);
void usmc_fd_fork_prepare(void);
void usmc_fd_fork_parent(void);
void usmc_fd_fork_failed(void);

#endif
