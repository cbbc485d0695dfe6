/* SPDX-License-Identifier: MIT */
/*
 * tx_int.h - the send side's own rules, shared by tx.c (send, write,
 * writev) and tx_splice.c (sendfile, splice).  Everything here runs with
 * tx_lock held unless it says otherwise.  Not for other layers: they go
 * through tx.h.
 */
#ifndef USMC_TX_INT_H
#define USMC_TX_INT_H

#include "sock.h"
#include "tcp.h"
#include "tx.h"
#include "wait.h"

int usmc_tx_move_slow(struct usmc_sock *sk, uint64_t from, size_t n);

/*
 * A peer gone while nobody looked (an idle connection whose peer exited
 * with threads still running, or was killed: only its kernel's FIN says
 * so) must not take our sends for ever: over TCP the first send after
 * that FIN draws a reset, and the next one fails with EPIPE.  A send
 * looks at TCP first (outside tx_lock) when the peer was last seen
 * TX_LOOK_NS ago or more (sock.h sk_peer_seen: the connection's start, or
 * a look that found no FIN), so sends into a gone peer fail as TCP's do,
 * from the second one, once that much passed since it was last seen (a
 * Java client's writes to a server that had called System.exit all
 * succeeded, up to the ring's 4 MiB).  A steady sender pays one
 * recv(MSG_PEEK) per TX_LOOK_NS, and each send a coarse clock read.
 */
#define TX_LOOK_NS	(8ull * 1000 * 1000)

static inline bool tx_look_due(const struct usmc_sock *sk)
{
	return usmc_coarse_ns() - LOAD_RELAXED(&sk->alive_ns) >= TX_LOOK_NS;
}

static inline void tx_look(struct usmc_sock *sk, int fd)
{
	if (sk_mode(sk) == USMC_MODE_SMCD && tx_look_due(sk))
		usmc_check_tcp(sk, fd);
}

/* Empty ring: start the next message at offset 0 (cdc.h).  Caller holds
 * tx_lock; the lazy view's window starts again there (sock.h). */
static inline void tx_rewind(struct usmc_sock *sk, uint64_t *head, uint64_t *prod)
{
	if (*head != *prod || !(*prod & (sk->size - 1)))
		return;
	*prod = *head = ring_rewind(*prod, sk->size);
	usmc_tx_publish_skip(sk, *prod);
	STORE_RELAXED(&sk->sh->tx_stuck, 0);
	sk->sh->tx_cons_at = *prod;
}

/* Proposed: the ring is never reused before the accept is proven (sock.h
 * usmc_unproven), whatever its reader's line says: our bytes count from
 * the first one, cursor 0 (no rewind comes before a reuse).  True with
 * that view.  Caller holds tx_lock. */
static inline bool tx_unproven(const struct usmc_sock *sk, uint64_t *head, uint64_t *prod)
{
	if (!usmc_unproven(sk))
		return false;
	*head = 0;
	*prod = LOAD_RELAXED(&sk->sh->tx_prod);
	return true;
}

static inline __attribute__((always_inline)) int tx_to_dmb(struct usmc_sock *sk, uint64_t from,
							   size_t n)
{
	return likely(!sk->tx_move) ? 0 : usmc_tx_move_slow(sk, from, n);
}

/* A send ran out of room: an edge-triggered EPOLLOUT is due once there is
 * room again (epoll_wait.c's reg_news).  Caller holds tx_lock. */
static inline void tx_nospace(struct usmc_sock *sk)
{
	STORE_RELAXED(&sk->sh->tx_nospace, LOAD_RELAXED(&sk->sh->tx_nospace) + 1);
}

/* want, cut to what the buffer sizes leave room for (usmc_tx_cap). */
static inline size_t tx_want(const struct usmc_sock *sk, uint64_t prod, uint64_t head, size_t want)
{
	uint64_t cap = usmc_tx_cap(sk);

	return prod - head >= cap ? 0 : (size_t)MIN((uint64_t)want, cap - (prod - head));
}

/* A handler that interrupted a send on sh in this thread holds its lock. */
bool usmc_tx_held(const struct usmc_sock_sh *sh);
/* tx_lock for a sender that may sleep between (not for handlers' flush). */
int usmc_tx_lock(struct usmc_sock *sk);
void usmc_tx_unlock(struct usmc_sock *sk, int fd);
/* Errors a send reports before writing, as TCP: 0, -errno, or 1 (the peer
 * is gone: this send is its last, tx.c). */
int usmc_tx_state(struct usmc_sock *sk, bool take);
/* Left shared memory: the ring's bytes first, then USMC_PASS.  No lock. */
ssize_t usmc_tx_moved(struct usmc_sock *sk, int fd, bool nonblock, int flags);
/* EPIPE raises SIGPIPE unless MSG_NOSIGNAL, as the kernel's send. */
ssize_t usmc_tx_fail(ssize_t err, int flags);

#endif
