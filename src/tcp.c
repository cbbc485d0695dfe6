// SPDX-License-Identifier: MIT
/*
 * tcp.c - what a shared-memory connection does on its TCP socket.
 *
 * The TCP socket stays open under every connection: its FIN or RST says
 * the peer is gone, the CLC's messages (clc_inband.h: the client's
 * proposal when the server waits for it, the server's decline) travel on
 * it, and a connection that leaves shared memory goes on over it.  Here:
 * looking at it (one thread of the family at a time: the look token),
 * taking the messages owed on it that are not the program's, a
 * non-blocking connect's end, following a peer that moved and moving
 * ourselves (usmc_conn_to_tcp: the cut and its exchange; the ring's bytes
 * then go out through migrate.c's pump).
 */
#include "clc_inband.h"
#include "clc_proof.h"
#include "conn.h"
#include "fdtab.h"
#include "log.h"
#include "migrate.h"
#include "real.h"
#include "sock.h"
#include "sys.h"
#include "tcp.h"



void usmc_check_tcp(struct usmc_sock *sk, int fd)
{
	usmc_check_tcp_fd(sk, fd, true);
}

/* The CLC message owed to us (clc_inband.h): a server is owed the
 * client's proposal, a declined client the server's decline. */
static unsigned int owed_types(const struct usmc_sock *sk)
{
	return CLC_MSG_BIT(sk->role == 'S' ? USMC_CLC_MSG_PROPOSAL : USMC_CLC_MSG_DECLINE);
}

/*
 * Take the owed CLC message once it is whole: 0 (nothing owed any more),
 * or usmc_clc_msg_take's -errno.  Bytes that are no such message came
 * from a peer that is broken or hostile: they stay for the program, as
 * the same bytes sent as data would (it breaks only its own connection).
 * Caller holds the TCP look.
 */
static int owed_take(struct usmc_sock *sk, int fd)
{
	struct usmc_clc_msg m;
	int rc = usmc_clc_msg_take(fd, owed_types(sk), &m);

	if (rc == -EPROTO) {
		STAT_INC(handshake_errors);
		usmc_dbg(1, "fd %d: the peer's CLC message does not decode: left to the program",
			 sk->fd0);
		rc = 0;
	} else if (!rc) {
		STAT_INC(clc_msgs_rx);
	}
	if (!rc)
		sk_clear_flag(sk, SKF_WAKEBYTE);
	return rc;
}

static void check_tcp_once(struct usmc_sock *sk, int fd, bool installed)
{
	char c;
	ssize_t n;

	/* A connect that failed reports it here too (POLLERR/EPOLLERR), and
	 * a peek would take the kernel's pending error: settle the connect
	 * first, so the application's SO_ERROR still finds it. */
	if (sk_flag(sk, SKF_CONNECTING) && usmc_sock_connect_done(sk, fd))
		return;
	if (usmc_sock_proposal_reset(sk, fd))
		return;
	while (!sk_flag(sk, SKF_TCP_EOF)) {
		/* The CLC message owed comes first on TCP.  A descriptor
		 * nobody else can have reused (not installed yet) or one
		 * still ours is looked at for it. */
		if (sk_flag(sk, SKF_WAKEBYTE) &&
		    (!installed || usmc_sock_live_fd(sk, fd) == fd)) {
			int rc = owed_take(sk, fd);

			if (!rc)
				continue;
			if (rc == -EAGAIN || rc == -EINPROGRESS)
				sk_peer_seen(sk);	/* not whole yet */
			else if (rc != -EINTR && rc != -EBADF && rc != -ENOTSOCK)
				sk_set_flag(sk, SKF_TCP_EOF);	/* FIN or RST first */
			return;
		}
		n = real.recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			sk_peer_seen(sk);
			return;
		}
		if (n < 0 && errno == EINTR)
			return;
		/* The application closed this number under us (another thread
		 * still in a call on the socket, as the kernel allows): not the
		 * peer's doing; the socket lives on until that call returns. */
		if ((n < 0 && (errno == EBADF || errno == ENOTSOCK)) ||
		    (installed && usmc_sock_live_fd(sk, fd) != fd))
			return;
		if (n <= 0) {
			/* FIN or RST: every process on the other side closed it. */
			sk_set_flag(sk, SKF_TCP_EOF);
			return;
		}
		if (sk_mode(sk) == USMC_MODE_PROPOSED) {
			bool declined = false;

			/* A TCP byte on a proposed connection: the server's
			 * DECLINE (its answer is in the index, clc.h), or the
			 * server is not taking part (a NAT, a listener we could
			 * not see): withdraw.  Queued bytes follow on TCP. */
			pthread_mutex_lock(&sk->lock);
			if (usmc_migrate_declined(sk)) {
				declined = true;
			} else if (sk_mode(sk) == USMC_MODE_PROPOSED &&
				   usmc_clc_withdraw(sk->ln, &sk->local)) {
				STORE_RELAXED(&sk->sh->reason, USMC_R_WITHDRAWN);
				sk->migrate_pos = LOAD_RELAXED(&sk->tx_c->cons);
				sk->migrate_end = MIGRATE_END_UNKNOWN;
				sk_set_mode(sk, USMC_MODE_MIGRATING);
				usmc_dbg(1, "fd %d: proposal withdrawn, queued bytes move to TCP", fd);
			}
			pthread_mutex_unlock(&sk->lock);
			if (declined)
				continue;	/* take the DECLINE */
			return;
		}
		if (sk_mode(sk) == USMC_MODE_MIGRATING) {
			sk_set_flag(sk, SKF_TCP_DATA);	/* the peer's bytes after the switch */
			return;
		}
		if (sk->tx_c && (LOAD_ACQUIRE(&sk->tx_c->flags) & CDC_F_MIGRATE)) {
			/* The peer moved to TCP and already sent there. */
			usmc_migrate_follow(sk, fd);
			sk_set_flag(sk, SKF_TCP_DATA);
			return;
		}
		if (sk_mode(sk) == USMC_MODE_SMCD) {
			/* An honest peer sends nothing on TCP once on SMC. */
			usmc_sock_abort(sk, USMC_A_PROTOCOL);
			sk_set_flag(sk, SKF_TCP_EOF);
		}
		return;
	}
}

/* The one thread of the family looking at TCP (tid | pid << 32), or one
 * whose holder died (a kill while looking): ours now.  Whoever consumes
 * the wake message holds it (usmc_tcp_skip_wake too). */
static uint64_t look_me(void)
{
	return (uint64_t)(uint32_t)usmc_gettid() | (uint64_t)(uint32_t)usmc_getpid() << 32;
}

bool usmc_tcp_look_mine(struct usmc_sock *sk)
{
	return LOAD_ACQUIRE(&sk->sh->tcp_looker) == look_me();
}

bool usmc_tcp_look_take(struct usmc_sock *sk)
{
	uint64_t me = look_me(), cur = 0;

	if (atomic_compare_exchange_strong(&sk->sh->tcp_looker, &cur, me))
		return true;
	if (cur == me)
		return false;	/* a handler interrupted our own look */
	return sys_ret(usmc_sys(SYS_tgkill, cur >> 32, (uint32_t)cur, 0)) && errno == ESRCH &&
	       atomic_compare_exchange_strong(&sk->sh->tcp_looker, &cur, me);
}

/*
 * Every waiter watches the TCP socket, and what it finds there may be
 * consumed (a wake message, a DECLINE message): two looking at once would take
 * one byte twice, a byte of the peer's stream.  So one looks at a time;
 * one that finds another looking leaves a mark, and the looker looks once
 * more before it lets go (news that came while it looked is not missed).
 */
void usmc_tcp_look_give(struct usmc_sock *sk, int fd)
{
	STORE_RELEASE(&sk->sh->tcp_looker, 0);
	if (LOAD_ACQUIRE(&sk->sh->tcp_relook))
		usmc_check_tcp_fd(sk, fd, true);
}

void usmc_check_tcp_fd(struct usmc_sock *sk, int fd, bool installed)
{
	do {
		STORE_RELEASE(&sk->sh->tcp_relook, 1);
		if (!usmc_tcp_look_take(sk))
			return;
		while (atomic_exchange(&sk->sh->tcp_relook, 0))
			check_tcp_once(sk, fd, installed);
		STORE_RELEASE(&sk->sh->tcp_looker, 0);
	} while (LOAD_ACQUIRE(&sk->sh->tcp_relook));
}

/*
 * Settle a non-blocking connect from the TCP socket's readiness (revents:
 * poll's, or an epoll event's for the socket's own entry, which are
 * poll's bits at the time the kernel reported them).  POLLOUT without
 * POLLERR is connected.  A failure (POLLERR) leaves the kernel's pending
 * error where it is: the socket is plain TCP from here, and the
 * application's SO_ERROR, send or recv takes the error from the kernel
 * exactly once, and epoll and poll report EPOLLERR, as they would without
 * us.
 */
int usmc_connect_settle(struct usmc_sock *sk, int fd, unsigned int revents)
{
	if (!sk_flag(sk, SKF_CONNECTING))
		return 0;
	if (!(revents & POLLERR)) {
		if (!(revents & (POLLOUT | POLLHUP)))
			return -EINPROGRESS;
		sk_clear_flag(sk, SKF_CONNECTING);
		usmc_connect_check_done(sk);
		usmc_client_send_wake(sk, fd);
		return 0;
	}
	sk_clear_flag(sk, SKF_CONNECTING | SKF_WAKE_SEND);
	pthread_mutex_lock(&sk->lock);
	if (sk_mode(sk) == USMC_MODE_PROPOSED) {
		bool withdrawn = usmc_clc_withdraw(sk->ln, &sk->local);

		usmc_conn_unbind_slot(sk, !withdrawn);
		usmc_sock_set_tcp(sk, USMC_R_NONE);
		usmc_conn_uncount(sk);	/* never a connection on shared memory */
	}
	pthread_mutex_unlock(&sk->lock);
	return USMC_CONNECT_FAILED;
}

/* A non-blocking connect finished (poll/getsockopt saw it): settle it. */
int usmc_sock_connect_done(struct usmc_sock *sk, int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };

	if (!sk_flag(sk, SKF_CONNECTING))
		return 0;
	if (real.poll(&p, 1, 0) < 0)
		return -errno;
	if (p.revents & POLLNVAL)
		return -EBADF;	/* closed under us (another thread) */
	return usmc_connect_settle(sk, fd, (unsigned int)p.revents);
}

/*
 * A proposed client whose TCP connection was reset before the server took
 * the proposal (its listener closed with us in its accept queue): there is
 * no usmc peer and never will be, so the socket is plain TCP from here.
 * Looked at with poll, which leaves the kernel's pending error in place:
 * readiness, SO_ERROR and the first read or write then come from the
 * kernel, as without us.  Bytes still in our ring were sent to a socket
 * that no longer exists; TCP drops them too.  True when it moved to TCP.
 */
bool usmc_sock_proposal_reset(struct usmc_sock *sk, int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	bool moved = false;

	if (sk->role != 'C' || sk_mode(sk) != USMC_MODE_PROPOSED)
		return false;
	if (real.poll(&p, 1, 0) != 1 || !(p.revents & POLLERR))
		return false;
	pthread_mutex_lock(&sk->lock);
	if (usmc_proposal_take_back(sk)) {
		sk_clear_flag(sk, SKF_CONNECTING | SKF_WAKE_SEND);
		usmc_conn_unbind_slot(sk, false);
		usmc_sock_set_tcp(sk, USMC_R_NONE);
		usmc_conn_uncount(sk);
		moved = true;
	}
	pthread_mutex_unlock(&sk->lock);
	if (moved)
		usmc_dbg(1, "fd %d: reset before the server accepted it: plain TCP", fd);
	return moved;
}

/*
 * The wake (or decline) byte is taken exactly once: by whoever holds the
 * TCP look (usmc_tcp_look_take), after checking the flag under it.  Two threads that
 * both saw the flag would otherwise take two bytes, the second one the
 * peer's.  Never blocks holding it: it waits for the byte outside.
 */
int usmc_tcp_skip_wake(struct usmc_sock *sk, int fd, bool nonblock)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int rc;

	while (sk_flag(sk, SKF_WAKEBYTE)) {
		bool mine = usmc_tcp_look_mine(sk);

		rc = -EAGAIN;
		if (mine || usmc_tcp_look_take(sk)) {
			if (sk_flag(sk, SKF_WAKEBYTE))
				rc = owed_take(sk, fd);
			if (!mine)
				usmc_tcp_look_give(sk, fd);
		}
		if (rc == -ENODATA)
			break;		/* EOF first: the reader sees it */
		if (rc && rc != -EAGAIN && rc != -EINPROGRESS && rc != -EINTR)
			return rc;
		if (!sk_flag(sk, SKF_WAKEBYTE))
			break;
		/* Part of it came: the rest is one segment behind (a peer
		 * that never sends it must not make us spin on POLLIN). */
		if (rc == -EINPROGRESS)
			sys_poll(NULL, 0, 1);
		if (nonblock)
			return -EAGAIN;
		/* Another thread may hold the look: look again soon. */
		if (real.poll(&p, 1, 10) < 0 && errno == EINTR)
			return -EINTR;
	}
	return unlikely(sk_flag(sk, SKF_TCP_DUP)) ? usmc_migrate_skip_dup(sk, fd, nonblock) : 0;
}

/*
 * Owed bytes (sk_owes_bytes) are on their way: each flag is set only once
 * the peer is committed to send them (its wake message after PROPOSED+W, the
 * server's DECLINE message after DECLINED, a leaver's ring from its published
 * point).  Wait for them here when the next reader will not skip them:
 * a process the socket is handed to, a new image without libusmc, glibc's
 * stdio, whose reads are its own (stdstream.c).  A peer that ends or
 * resets first: the reader sees that instead.
 */
void usmc_tcp_take_owed_ms(struct usmc_sock *sk, int fd, uint32_t owed, int ms)
{
	uint64_t deadline = ms < 0 ? 0 : usmc_now_ns() + (uint64_t)ms * 1000000;

	while (sk_flag(sk, owed)) {
		/* Another thread may close fd while we wait (a fork's move of
		 * every connection to TCP, fork_churn), and the number name a
		 * new socket: the bytes come on ours, kept open for us.  fd
		 * out of the table and none kept: the caller's own (a close
		 * in progress). */
		int lfd = usmc_sock_live_fd(sk, fd);
		struct pollfd p = { .fd = lfd < 0 ? fd : lfd, .events = POLLIN | POLLRDHUP };
		int rc = usmc_tcp_skip_wake(sk, p.fd, true),
		    left = ms < 0 ? -1 : (int)usmc_ms_left(deadline);

		if ((rc == -EAGAIN || rc == -EWOULDBLOCK) && left)
			sys_poll(&p, 1, left);
		else if (rc != -EINTR)
			break;	/* taken, an error, EOF before it, or out of time */
	}
}

void usmc_tcp_take_owed(struct usmc_sock *sk, int fd)
{
	usmc_tcp_take_owed_ms(sk, fd, SKF_WAKEBYTE | SKF_TCP_DUP, -1);
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
	if (usmc_move_orphaned(sk)) {
		pthread_mutex_unlock(&sk->lock);
		usmc_family_unlock(&sk->sh->move_lock);
		usmc_move_take_over(sk, fd);
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
		 * before its wake message, which never will; readers see EOF. */
		if (from == end && (!sk_flag(sk, SKF_WAKEBYTE) || !rc) &&
		    !sk_flag(sk, SKF_TCP_DUP))
			return 0;
		p.events = (short)((from < end ? POLLOUT : 0) | POLLIN);
		if (real.poll(&p, 1, -1) < 0 && errno != EINTR)
			return -errno;
	}
}

/*
 * On shared memory shutdown(SHUT_WR) is CDC_F_DONE in our ring only; a
 * connection that then leaves (usmc_conn_to_tcp: a fork or exec on a
 * device that cannot share it) is read by the peer on TCP, so the
 * kernel's FIN must follow the last of the ring's bytes moved there,
 * never come before them, and go exactly once (SKF_TCP_SHUT).  The mover
 * passes it on after its mode is TCP, and a shutdown that raced with the
 * move does once it sees TCP: Dekker (our mode, a full fence, the flag;
 * the flag, a full fence, the mode), so one of them always does.  Before,
 * the move sent the bytes and never the FIN: the peer, gone to TCP after
 * us, waited for EOF forever (t_epoll_threads fork_during, t_devcopy
 * shut_fork).
 */
void usmc_conn_fin_to_tcp(struct usmc_sock *sk, int fd)
{
	if (sk_flag(sk, SKF_SHUT_WR) && !sk_flag(sk, SKF_ABORTED) &&
	    !(atomic_fetch_or(&sk->sh->flags, SKF_TCP_SHUT) & SKF_TCP_SHUT))
		real.shutdown(fd, SHUT_WR);
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
		usmc_move_wait(sk, fd, false);
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
	/* The peer counts on exactly one wake message before any TCP data. */
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
	/* A shutdown(SHUT_WR) before or during the move was our ring's FIN
	 * only: it follows the bytes on TCP (usmc_conn_fin_to_tcp above;
	 * the fence pairs with the one in usmc_sock_shutdown). */
	atomic_thread_fence(memory_order_seq_cst);
	usmc_conn_fin_to_tcp(sk, fd);
	usmc_family_unlock(&sk->sh->move_lock);
	usmc_dbg(1, "fd %d: moved to TCP (%s)", fd, usmc_reason_name(reason));
	return 0;
}

/*
 * The server declined our proposal in the CLC index (it could not take the
 * connection; clc.h): queued bytes move to TCP, and the DECLINE message the
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
	sk_set_flag(sk, SKF_WAKEBYTE | SKF_DECLINED);	/* and its DECLINE on TCP */
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
