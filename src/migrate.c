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
 *    using the rings, raises CDC_F_MIGRATE on both of its lines, loads the
 *    peer's cons and publishes it (mig_from, CDC_F_MIGFROM), and sends its
 *    ring from there on TCP before anything new.  The other end, leaving
 *    too or not, does the same for its own ring once it sees the flag: each
 *    sender moves exactly what its own ring holds beyond the cut, and only
 *    the sender still has those bytes for sure.  A receiver that read past
 *    the cut before it noticed (it was still reading when the cut was
 *    taken) drops that many bytes from TCP; the cut is taken after the
 *    sender's flag and a full fence, so a receiver that left at the same
 *    moment without seeing the flag had its cons final already, and one
 *    that did not finish leaving sees the flag (Dekker).  No byte is lost,
 *    reordered or duplicated.
 * The decisions (usmc_conn_to_tcp: the cut and its exchange; following a
 * peer that moved) are tcp.c's; here is what moves the bytes: the pump,
 * the duplicate a receiver drops, and the claim on a move (move_lock).
 */
#include "conn.h"
#include "log.h"
#include "migrate.h"
#include "real.h"
#include "sock.h"
#include "sys.h"

#include <linux/sockios.h>
#include <sys/ioctl.h>

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
	if (sk->migrate_end == MIGRATE_END_UNKNOWN) {
		sk->migrate_end = LOAD_RELAXED(&sk->sh->tx_prod);
		if (sk->migrate_end != sk->migrate_pos)
			atomic_fetch_or(&sk->sh->flags, SKF_RESENT);
	}
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
			if (((LOAD_RELAXED(&sk->tx_p->flags) & CDC_F_DONE) ||
			     sk_flag(sk, SKF_SHUT_WR)) &&
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

/*
 * Bytes the application wrote into the ring before we knew the peer had
 * left went out on TCP afterwards (usmc_migrate_pump).  On TCP all along
 * they would have been in the peer's socket when it closed, and its close
 * would have sent a reset, not a FIN.  A peer socket closed before they
 * arrived (passed to a process that died with the message unread, for
 * one) sent its FIN first and answers them with a reset now, which the
 * kernel queues behind the FIN: a read would see EOF.  So until they are
 * acknowledged (nothing unacknowledged left once every one was sent), a
 * receive first asks whether the connection was reset, and reports that
 * as TCP would have.  On loopback the reset comes back inside our send.
 */
int usmc_migrate_resent_check(struct usmc_sock *sk, int fd)
{
	struct pollfd p = { .fd = fd, .events = 0 };
	int err = 0, outq = 1, inq = 1;
	socklen_t l = sizeof(err);

	/* Bytes the peer sent before it closed are read first, as TCP
	 * delivers what it queued before a reset. */
	if (sys_poll(&p, 1, 0) == 1 && (p.revents & POLLERR) &&
	    !real.ioctl(fd, SIOCINQ, &inq) && !inq &&
	    !real.getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) && err) {
		atomic_fetch_and(&sk->sh->flags, ~SKF_RESENT);
		/* Over TCP all along, that peer's close with our bytes unread
		 * was a reset without a FIN: ECONNRESET.  The kernel says
		 * EPIPE for an RST after the FIN it saw (tcp_reset(),
		 * CLOSE_WAIT), which no receive returns under plain TCP. */
		return err == EPIPE ? -ECONNRESET : -err;
	}
	if (sk_mode(sk) == USMC_MODE_TCP && !real.ioctl(fd, SIOCOUTQ, &outq) && !outq)
		atomic_fetch_and(&sk->sh->flags, ~SKF_RESENT);
	return 0;
}

void usmc_migrate_resent_acked(struct usmc_sock *sk, int fd)
{
	int outq = 1;

	/* Before a TCP send: a reset for bytes sent from now on, once the
	 * moved ones are acknowledged, is TCP's own (EOF first if a FIN
	 * came before it). */
	if (sk_mode(sk) == USMC_MODE_TCP && !real.ioctl(fd, SIOCOUTQ, &outq) && !outq)
		atomic_fetch_and(&sk->sh->flags, ~SKF_RESENT);
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

/*
 * Drop the peer's TCP bytes that we read from the ring already: the TCP
 * stream starts at ring cursor tcp_dup_from, and everything below
 * tcp_dup_end we read from the ring before.  More than one ring only if the
 * peer broke the rules: then the connection is reset.
 */
int usmc_migrate_skip_dup(struct usmc_sock *sk, int fd, bool nonblock)
{
	char buf[4096];
	int rc;

	rc = usmc_family_lock(&sk->sh->rx_lock);
	if (rc)
		return rc;
	while (sk_flag(sk, SKF_TCP_DUP)) {
		uint64_t from = LOAD_RELAXED(&sk->sh->tcp_dup_from);
		uint64_t cons = LOAD_RELAXED(&sk->sh->tcp_dup_end);
		ssize_t n;

		if (from >= cons) {
			sk_clear_flag(sk, SKF_TCP_DUP);
			break;
		}
		if (cons - from > sk->size) {
			usmc_sock_abort(sk, USMC_A_PROTOCOL);
			rc = -ECONNRESET;
			break;
		}
		usmc_dbg(1, "fd %d: dropping %llu..%llu from TCP", fd, (unsigned long long)from,
			 (unsigned long long)cons);
		n = real.recv(fd, buf, (size_t)MIN(cons - from, sizeof(buf)),
			      nonblock ? MSG_DONTWAIT : 0);
		if (n < 0) {
			rc = -errno;
			if (rc == -EINTR && !nonblock)
				continue;
			break;
		}
		if (n == 0) {
			/* The peer ended before its copy: it never comes. */
			usmc_sock_abort(sk, USMC_A_PEER_RESET);
			rc = -ECONNRESET;
			break;
		}
		STORE_RELAXED(&sk->sh->tcp_dup_from, from + (uint64_t)n);
	}
	usmc_family_unlock(&sk->sh->rx_lock);
	return rc == -EWOULDBLOCK ? -EAGAIN : rc;
}

/* Reset the TCP connection under a descriptor that may live on elsewhere
 * (connect(AF_UNSPEC) disconnects: RST) and on shared memory, so every
 * holder and the peer read ECONNRESET; why goes to the log. */
void usmc_conn_reset_tcp(struct usmc_sock *sk, int fd, const char *why)
{
	struct sockaddr sa = { .sa_family = AF_UNSPEC };

	real.connect(fd, &sa, sizeof(sa));
	usmc_sock_abort(sk, USMC_A_LOCAL);
	usmc_log_write("fd %d: %s: reset", fd, why);
}

/* An orphaned move (usmc_move_orphaned): reset, and TCP from now on. */
void usmc_move_take_over(struct usmc_sock *sk, int fd)
{
	usmc_conn_reset_tcp(sk, fd, "a process of ours died while moving the connection to TCP");
	pthread_mutex_lock(&sk->lock);
	if (sk_mode(sk) != USMC_MODE_TCP)
		usmc_sock_set_tcp(sk, USMC_R_INTERNAL);
	pthread_mutex_unlock(&sk->lock);
}

/*
 * Claimed (SKF_MOVING) and still on shared memory, seen under move_lock,
 * which its claimer holds from the claim until the mode moved on: the
 * claimer died mid-move (the robust lock came back to us).  What it had
 * sent of our ring on TCP nobody knows, so the connection is reset.
 */
bool usmc_move_orphaned(struct usmc_sock *sk)
{
	uint32_t m = sk_mode(sk);

	return sk_flag(sk, SKF_MOVING) && (m == USMC_MODE_SMCD || m == USMC_MODE_PROPOSED);
}

/* Until the move another thread or process of ours claimed is under way
 * (MIGRATING) or done: the claimer holds move_lock until then. */
int usmc_move_wait(struct usmc_sock *sk, int fd, bool nonblock)
{
	if (nonblock ? usmc_family_trylock(&sk->sh->move_lock) :
		       usmc_family_lock(&sk->sh->move_lock))
		/* Not blocking: still moving.  Blocking: a handler
		 * interrupted the claimer, and it goes on. */
		return nonblock ? -EAGAIN : 0;
	if (usmc_move_orphaned(sk)) {
		usmc_family_unlock(&sk->sh->move_lock);
		usmc_move_take_over(sk, fd);
		return 0;
	}
	usmc_family_unlock(&sk->sh->move_lock);
	return 0;
}
