// SPDX-License-Identifier: MIT
/*
 * migrate.c - moving a connection from shared memory to TCP, in order.
 *
 * Two cases, one mechanism (MIGRATING, then TCP):
 *  - a late decline: the client queued bytes in the ring the server never
 *    read; they go out on TCP first;
 *  - a switch of an established connection, started by one end when it
 *    cannot stay on shared memory (it exec()s a program without libusmc, or
 *    the application asks for something SMC cannot do).  That end stops
 *    using the rings and raises CDC_F_MIGRATE on both of its lines; the
 *    other end reads what is left in its receive ring, then reads TCP, and
 *    sends what the first end had not read yet (from its send ring, still
 *    intact) on TCP before anything new.  No byte is lost, reordered or
 *    duplicated: each byte goes through exactly one of the two paths.
 */
#include "af_usmc.h"
#include "clc.h"
#include "epoll.h"
#include "log.h"
#include "real.h"
#include "sock.h"
#include "stats.h"
#include "sys.h"

#include <netinet/in.h>

/* Bytes of ours the peer has not read (they go on TCP), from where. */
int usmc_migrate_pump(struct usmc_sock *sk, int fd, bool block)
{
	int rc;

	if (sk_mode(sk) != USMC_MODE_MIGRATING)
		return 0;
	rc = usmc_family_lock(&sk->sh->tx_lock);
	if (rc)
		return rc;
	/* The end of what we ever wrote into the ring: senders check the
	 * mode under tx_lock (tx.c), so none writes after this.  Our own
	 * copy (sock.h), not the line the peer could rewrite. */
	if (sk->migrate_end == MIGRATE_END_UNKNOWN)
		sk->migrate_end = LOAD_RELAXED(&sk->sh->tx_prod);
	while (sk_mode(sk) == USMC_MODE_MIGRATING) {
		uint64_t prod = sk->migrate_end;
		size_t len;
		ssize_t n;

		sk->migrate_pos = ring_head(sk->migrate_pos, LOAD_RELAXED(&sk->sh->tx_skip), prod);
		/* The peer wrote the start (its cons): never send more than
		 * one ring, or from before the start. */
		if (unlikely(!ring_valid(prod, sk->migrate_pos, sk->size))) {
			usmc_sock_abort(sk, USMC_A_PROTOCOL);
			rc = -ECONNRESET;
			break;
		}
		if (sk->migrate_pos == prod) {
			uint64_t head, rprod;

			/* Everything sent, and our FIN after it if the
			 * application had shut the ring down; what we still
			 * have to read from our ring keeps the socket
			 * translated until it is read. */
			if ((LOAD_RELAXED(&sk->tx_p->flags) & CDC_F_DONE) &&
			    !(atomic_fetch_or(&sk->sh->flags, SKF_TCP_SHUT) & SKF_TCP_SHUT))
				real.shutdown(fd, SHUT_WR);
			sk->tx_done = true;
			if (!sk->rx_p) {
				usmc_migrate_finish(sk);
			} else {
				int v = usmc_rx_view_locked(sk, &head, &rprod);

				/* A broken ring is never read again; a lock we
				 * cannot take now (EDEADLK): a later call. */
				if (v == -EPROTO || (!v && head == rprod))
					usmc_migrate_finish(sk);
			}
			break;
		}
		len = ring_span(sk->size, sk->migrate_pos, (size_t)(prod - sk->migrate_pos));
		n = real.send(fd, sk->tx_ring + (sk->migrate_pos & (sk->size - 1)), len,
			      MSG_NOSIGNAL | (block ? 0 : MSG_DONTWAIT));
		if (n < 0) {
			rc = -errno;
			if (rc == -EINTR)
				continue;
			break;
		}
		sk->migrate_pos += (uint64_t)n;
	}
	usmc_family_unlock(&sk->sh->tx_lock);
	return rc == -EWOULDBLOCK ? -EAGAIN : rc;
}

/* MIGRATING -> TCP once nothing of ours is left to send or to read. */
void usmc_migrate_finish(struct usmc_sock *sk)
{
	uint32_t r = LOAD_RELAXED(&sk->sh->reason);

	pthread_mutex_lock(&sk->lock);
	if (sk_mode(sk) == USMC_MODE_MIGRATING)
		usmc_sock_set_tcp(sk, (int)(r ? r : USMC_R_PEER_MIGRATED));
	pthread_mutex_unlock(&sk->lock);
}

/* The peer raised CDC_F_MIGRATE: follow it.  Caller: usmc_sock_refresh. */
void usmc_migrate_follow(struct usmc_sock *sk, int fd)
{
	if (!(LOAD_ACQUIRE(&sk->tx_c->flags) & CDC_F_MIGRATE))
		return;
	pthread_mutex_lock(&sk->lock);
	if (sk_mode(sk) == USMC_MODE_SMCD || sk_mode(sk) == USMC_MODE_PROPOSED) {
		/* Their cons is final now (stored before the flag, release). */
		sk->migrate_pos = LOAD_ACQUIRE(&sk->tx_c->cons);
		sk->migrate_end = MIGRATE_END_UNKNOWN;
		sk->tx_done = false;
		STORE_RELAXED(&sk->sh->reason, USMC_R_PEER_MIGRATED);
		sk_set_mode(sk, USMC_MODE_MIGRATING);
		usmc_dbg(1, "fd %d: peer moved the connection to TCP", fd);
	}
	pthread_mutex_unlock(&sk->lock);
	if (sk_flag(sk, SKF_WAKEBYTE))
		usmc_tcp_skip_wake(sk, fd, true);
	usmc_migrate_pump(sk, fd, false);
}

/*
 * A connection that must be plain TCP from now on (exec without libusmc,
 * posix_spawn): settle what cannot travel half-done, then leave shared
 * memory.
 */
void usmc_conn_leave(struct usmc_sock *sk, int fd, int reason)
{
	if (sk_mode(sk) == USMC_MODE_UNDECIDED)
		usmc_server_resolve(sk, fd, true);
	if (sk_mode(sk) == USMC_MODE_MIGRATING)
		usmc_migrate_pump(sk, fd, true);
	usmc_conn_to_tcp(sk, fd, reason);
}

/*
 * We leave shared memory (exec without libusmc, or an option SMC cannot
 * honour).  What the peer sent and we did not read, it sends again on TCP;
 * what we sent and it did not read, it still reads from the ring.
 */
int usmc_conn_to_tcp(struct usmc_sock *sk, int fd, int reason)
{
	uint32_t m = sk_mode(sk);

	if (m != USMC_MODE_SMCD && m != USMC_MODE_PROPOSED)
		return m == USMC_MODE_TCP ? 0 : -EINVAL;
	if (usmc_family_lock(&sk->sh->tx_lock))
		return -EIO;
	if (usmc_family_lock(&sk->sh->rx_lock)) {
		usmc_family_unlock(&sk->sh->tx_lock);
		return -EIO;
	}
	/* After our last prod and our last cons: release pairs with the
	 * peer's acquire of the flags in usmc_migrate_follow()/rx. */
	atomic_fetch_or_explicit(&sk->tx_p->flags, CDC_F_MIGRATE, memory_order_release);
	atomic_fetch_or_explicit(&sk->rx_c->flags, CDC_F_MIGRATE, memory_order_release);
	usmc_family_unlock(&sk->sh->rx_lock);
	usmc_family_unlock(&sk->sh->tx_lock);
	/* The peer counts on exactly one wake byte before any TCP data. */
	if (sk->role == 'C')
		usmc_client_send_wake(sk, fd);
	sk->lgr->dev->signal(sk->bell_peer);
	if (sk_flag(sk, SKF_WAKEBYTE))
		usmc_tcp_skip_wake(sk, fd, true);
	pthread_mutex_lock(&sk->lock);
	usmc_sock_set_tcp(sk, reason);
	pthread_mutex_unlock(&sk->lock);
	usmc_dbg(1, "fd %d: moved to TCP (%s)", fd, usmc_reason_name(reason));
	return 0;
}

/*
 * The server declined our proposal in the CLC index (it could not take the
 * connection; clc.h): queued bytes move to TCP, and the decline byte the
 * server sent after it is not the application's.  Caller holds sk->lock.
 */
int usmc_migrate_declined(struct usmc_sock *sk)
{
	int r;

	if (sk->role != 'C' || !sk->ln || sk_mode(sk) != USMC_MODE_PROPOSED)
		return 0;
	r = usmc_clc_declined(sk->ln, &sk->local);
	if (!r)
		return 0;
	sk_set_flag(sk, SKF_WAKEBYTE | SKF_DECLINED);
	STAT_INC(late_declines);
	/* Counted as shared memory when it proposed; it never was. */
	if (atomic_fetch_and(&sk->sh->flags, ~SKF_COUNTED) & SKF_COUNTED) {
		STAT_ADD(smc_conns, -1);
		STAT_ADD(smc_client, -1);
	}
	STORE_RELAXED(&sk->sh->reason, (uint32_t)r);
	sk->migrate_pos = LOAD_RELAXED(&sk->tx_c->cons);
	sk->migrate_end = MIGRATE_END_UNKNOWN;
	sk_set_mode(sk, USMC_MODE_MIGRATING);
	usmc_dbg(1, "fd %d: proposal declined (%s), queued bytes move to TCP", sk->fd0,
		 usmc_reason_name(r));
	return 1;
}

/*
 * Closing with our bytes still in the ring, bound for TCP.  TCP would send
 * them after close(); we cannot outlive the call, so we send what the
 * socket buffer takes now, and if that is not all, reset the connection so
 * that the peer sees ECONNRESET rather than a clean end of a stream that
 * misses bytes.
 */
void usmc_migrate_on_close(struct usmc_sock *sk, int fd)
{
	static const struct linger rst = { 1, 0 };

	if (sk_mode(sk) == USMC_MODE_PROPOSED) {
		pthread_mutex_lock(&sk->lock);
		usmc_migrate_declined(sk);
		pthread_mutex_unlock(&sk->lock);
	}
	if (sk_mode(sk) != USMC_MODE_MIGRATING)
		return;
	if (sk_flag(sk, SKF_WAKEBYTE))
		usmc_tcp_skip_wake(sk, fd, true);
	usmc_migrate_pump(sk, fd, false);
	if (sk_mode(sk) == USMC_MODE_MIGRATING && !sk->tx_done) {
		real.setsockopt(fd, SOL_SOCKET, SO_LINGER, &rst, sizeof(rst));
		usmc_dbg(1, "fd %d: closed with bytes not yet moved to TCP: reset", fd);
	}
}
