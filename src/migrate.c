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
 */
#include "af_usmc.h"
#include "clc.h"
#include "epoll.h"
#include "log.h"
#include "migrate.h"
#include "real.h"
#include "rx.h"
#include "sock.h"
#include "stats.h"
#include "sys.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <poll.h>
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
 * The peer left: where its TCP bytes start in our receive ring (it publishes
 * that right after CDC_F_MIGRATE, in the same locked section; a peer that
 * dies in between closes its TCP end).  Everything from there on comes on
 * TCP: what we read of it already is dropped from TCP
 * (usmc_migrate_skip_dup), the rest is read there, not from the ring.  A
 * client that left before the server answered publishes its prod (the old
 * rule: nothing on TCP, the ring is read to its end).
 */
#ifndef USMC_MIGFROM_WAIT_MS
#define USMC_MIGFROM_WAIT_MS	1000	/* fuzz builds: 0 */
#endif

static void peer_from(struct usmc_sock *sk, int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };
	uint64_t from, head, prod, deadline = 0;

	/* An honest peer stores the two flags a few instructions apart; one
	 * that raises only the first (or is stopped between them) gets its
	 * connection reset after a bound, never an endless wait. */
	while (!(LOAD_ACQUIRE(&sk->rx_p->flags) & CDC_F_MIGFROM)) {
		uint64_t now = usmc_now_ns();

		if (real.poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
			return;
		if (!deadline) {
			deadline = now + USMC_MIGFROM_WAIT_MS * 1000000ull;
		} else if (now >= deadline) {
			usmc_sock_abort(sk, USMC_A_PROTOCOL);
			return;
		}
		sched_yield();
	}
	if (usmc_family_lock(&sk->sh->rx_lock))
		return;
	/* Pairs with the release of CDC_F_MIGFROM in usmc_conn_to_tcp(). */
	from = LOAD_RELAXED(&sk->rx_p->mig_from);
	if (!usmc_rx_view(sk, &head, &prod) || from > prod) {
		usmc_sock_abort(sk, USMC_A_PROTOCOL);
	} else if (from <= head || head == prod) {
		usmc_dbg(1, "fd %d: peer's TCP starts at %llu, ring head %llu prod %llu", fd,
			 (unsigned long long)from, (unsigned long long)head, (unsigned long long)prod);
		STORE_RELAXED(&sk->sh->tcp_dup_from, from);
		STORE_RELAXED(&sk->sh->tcp_dup_end, from <= head ? head : from);
		sk_set_flag(sk, SKF_TCP_DUP);
		/* The ring is done: its bytes are on TCP.  Our own copy only;
		 * the peer reads our line no more. */
		STORE_RELAXED(&sk->sh->rx_cons, prod);
	}
	usmc_family_unlock(&sk->sh->rx_lock);
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

/* An orphaned move (move_orphaned): reset, and TCP from now on. */
static void move_take_over(struct usmc_sock *sk, int fd)
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
static bool move_orphaned(struct usmc_sock *sk)
{
	uint32_t m = sk_mode(sk);

	return sk_flag(sk, SKF_MOVING) && (m == USMC_MODE_SMCD || m == USMC_MODE_PROPOSED);
}

/* Until the move another thread or process of ours claimed is under way
 * (MIGRATING) or done: the claimer holds move_lock until then. */
static void wait_moved(struct usmc_sock *sk, int fd)
{
	if (usmc_family_lock(&sk->sh->move_lock))
		return;		/* a handler interrupted the claimer: it goes on */
	if (move_orphaned(sk)) {
		usmc_family_unlock(&sk->sh->move_lock);
		move_take_over(sk, fd);
		return;
	}
	usmc_family_unlock(&sk->sh->move_lock);
}

/* The peer raised CDC_F_MIGRATE: follow it.  Caller: usmc_sock_refresh. */
void usmc_migrate_follow(struct usmc_sock *sk, int fd)
{
	if (!(LOAD_ACQUIRE(&sk->tx_c->flags) & CDC_F_MIGRATE))
		return;
	/* Another thread of ours leaving (usmc_conn_to_tcp) claimed the
	 * move first: the peer's flag is its to handle (it sees it), and
	 * the pump below waits for it.  Not waiting for move_lock here:
	 * sk->lock is taken under it. */
	if (usmc_family_trylock(&sk->sh->move_lock))
		goto pump;
	pthread_mutex_lock(&sk->lock);
	if (move_orphaned(sk)) {
		pthread_mutex_unlock(&sk->lock);
		usmc_family_unlock(&sk->sh->move_lock);
		move_take_over(sk, fd);
		return;
	}
	if ((sk_mode(sk) == USMC_MODE_SMCD || sk_mode(sk) == USMC_MODE_PROPOSED) &&
	    !(atomic_fetch_or(&sk->sh->flags, SKF_MOVING) & SKF_MOVING)) {
		/* Their cons is final now (stored before the flag, release). */
		sk->migrate_pos = LOAD_ACQUIRE(&sk->tx_c->cons);
		sk->migrate_end = MIGRATE_END_UNKNOWN;
		sk->tx_done = false;
		STORE_RELAXED(&sk->sh->reason, USMC_R_PEER_MIGRATED);
		peer_from(sk, fd);
		sk_set_mode(sk, USMC_MODE_MIGRATING);
		usmc_dbg(1, "fd %d: peer moved the connection to TCP", fd);
	}
	pthread_mutex_unlock(&sk->lock);
	usmc_family_unlock(&sk->sh->move_lock);
pump:
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
	/* Moves it, or waits for a move another thread of ours started. */
	usmc_conn_to_tcp(sk, fd, reason);
	if (sk_mode(sk) == USMC_MODE_MIGRATING) {
		usmc_migrate_pump(sk, fd, true);
		/* What we read of the peer's TCP copy is not the next holder's. */
		while (sk_flag(sk, SKF_TCP_DUP) && usmc_migrate_skip_dup(sk, fd, false) == -EINTR)
			;
	}
}

/*
 * Leaving: send our ring bytes [from, end) on TCP, and drop the peer's TCP
 * copy of what we read from its ring, both at once (two ends leaving
 * together each wait for the other's bytes).  Blocks: our next TCP byte
 * may only follow them.
 */
static int leave_exchange(struct usmc_sock *sk, int fd, uint64_t from, uint64_t end)
{
	struct pollfd p = { .fd = fd };
	int rc;

	for (;;) {
		if (from < end) {
			size_t len = ring_span(sk->size, from, (size_t)(end - from));
			ssize_t n = real.send(fd, sk->tx_ring + (from & (sk->size - 1)), len,
					      MSG_NOSIGNAL | MSG_DONTWAIT);

			if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				return -errno;
			if (n > 0)
				from += (uint64_t)n;
		}
		rc = usmc_tcp_skip_wake(sk, fd, true);
		if (rc && rc != -EAGAIN && rc != -EINTR)
			return rc;
		/* Still owed with nothing to wait for (0): the peer's EOF came
		 * before its wake byte, which never will; readers see EOF. */
		if (from == end && (!sk_flag(sk, SKF_WAKEBYTE) || !rc) &&
		    !sk_flag(sk, SKF_TCP_DUP))
			return 0;
		p.events = (short)((from < end ? POLLOUT : 0) | POLLIN);
		if (real.poll(&p, 1, -1) < 0 && errno != EINTR)
			return -errno;
	}
}

/*
 * We leave shared memory (exec without libusmc, or an option SMC cannot
 * honour).  What the peer sent and we did not read, it sends again on TCP;
 * what we sent beyond its cons as we load it after our flag, we send on
 * TCP before returning (blocking), and drop what we read of its copy.
 */
int usmc_conn_to_tcp(struct usmc_sock *sk, int fd, int reason)
{
	uint32_t m = sk_mode(sk);
	uint64_t end, from;
	bool peer_left, held;

	if (m != USMC_MODE_SMCD && m != USMC_MODE_PROPOSED)
		return m == USMC_MODE_TCP ? 0 : -EINVAL;
	if (usmc_family_lock(&sk->sh->tx_lock))
		return -EIO;
	if (usmc_family_lock(&sk->sh->rx_lock)) {
		usmc_family_unlock(&sk->sh->tx_lock);
		return -EIO;
	}
	if (sk_mode(sk) != m) {		/* another thread moved it meanwhile */
		usmc_family_unlock(&sk->sh->rx_lock);
		usmc_family_unlock(&sk->sh->tx_lock);
		return 0;
	}
	/* Shedding descriptors (shed.c) moves only a connection whose peer
	 * read all of ours: looked at here, under tx_lock, so no send slips
	 * in and leave_exchange never waits for room on TCP inside the
	 * application's socket() or accept(). */
	if (reason == USMC_R_LIMIT &&
	    (m != USMC_MODE_SMCD || !usmc_tx_view(sk, &from, &end) || from != end)) {
		usmc_family_unlock(&sk->sh->rx_lock);
		usmc_family_unlock(&sk->sh->tx_lock);
		return -EBUSY;
	}
	/* One move per connection: another thread of ours that follows the
	 * peer, or leaves too, may be at it already (a fork moving every
	 * connection while a thread reads one).  Its move is ours. */
	held = !usmc_family_trylock(&sk->sh->move_lock);
	if (!held || atomic_fetch_or(&sk->sh->flags, SKF_MOVING) & SKF_MOVING) {
		if (held)
			usmc_family_unlock(&sk->sh->move_lock);
		usmc_family_unlock(&sk->sh->rx_lock);
		usmc_family_unlock(&sk->sh->tx_lock);
		wait_moved(sk, fd);
		return 0;
	}
	/* After our last prod and our last cons: release pairs with the
	 * peer's acquire of the flags in usmc_migrate_follow()/rx.  Dekker
	 * with a peer leaving at the same time (seq_cst flag, fence, load of
	 * its flag): at least one of us sees the other. */
	cdc_prod_flags(sk->tx_p, CDC_F_MIGRATE, memory_order_seq_cst);
	cdc_cons_flags(sk->rx_c, CDC_F_MIGRATE, memory_order_seq_cst);
	atomic_thread_fence(memory_order_seq_cst);
	peer_left = LOAD_ACQUIRE(&sk->tx_c->flags) & CDC_F_MIGRATE;
	/* Proposed, and the server left already: it accepted, and left
	 * without seeing our flag (else it reads our ring up to our cut),
	 * so it counts on us for what it did not read, as a server we had
	 * seen accept would (usmc_migrate_follow() trusts the flag the same
	 * way).  Two ends of one process leaving at a fork met this. */
	if (m == USMC_MODE_PROPOSED && peer_left && reason != USMC_R_UNBOUND)
		m = USMC_MODE_SMCD;
	/* We send on TCP what the peer had not read of ours, from its cons
	 * loaded now: a peer still reading drops what it reads beyond it
	 * (it sees our flag: it had not raised its own before our load of
	 * it, or its cons is final and this is it).  A proposal not yet
	 * answered keeps the old rule: the server reads the ring.  One
	 * answered by someone who does not hold the server end (unbound):
	 * all of it, from the start (a proposed ring is never reused, tx.c);
	 * a usmc server that took it after all drops what it read. */
	end = LOAD_RELAXED(&sk->sh->tx_prod);
	from = m == USMC_MODE_SMCD ? ring_head(LOAD_ACQUIRE(&sk->tx_c->cons),
					       LOAD_RELAXED(&sk->sh->tx_skip), end) :
	       reason == USMC_R_UNBOUND ? 0 : end;
	if (!ring_valid(end, from, sk->size))
		from = end;	/* a broken peer: nothing of ours for it */
	cdc_pub_mig_from(sk->tx_p, from);
	/* Pairs with the acquire in peer_from(). */
	cdc_prod_flags(sk->tx_p, CDC_F_MIGFROM, memory_order_release);
	usmc_family_unlock(&sk->sh->rx_lock);
	usmc_family_unlock(&sk->sh->tx_lock);
	/* The peer counts on exactly one wake byte before any TCP data. */
	if (sk->role == 'C')
		usmc_client_send_wake(sk, fd);
	usmc_ring_peer(sk);
	/* Both left: what it had not read of ours is ours to send, and what
	 * we read beyond where it starts sending, ours to drop. */
	if (peer_left && m == USMC_MODE_SMCD)
		peer_from(sk, fd);
	if (leave_exchange(sk, fd, from, end))
		usmc_sock_abort(sk, USMC_A_PEER_RESET);
	pthread_mutex_lock(&sk->lock);
	usmc_sock_set_tcp(sk, reason);
	pthread_mutex_unlock(&sk->lock);
	usmc_family_unlock(&sk->sh->move_lock);
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
	usmc_conn_uncount(sk);
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
