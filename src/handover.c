// SPDX-License-Identifier: MIT
/*
 * handover.c - sockets passed to a process that will not adopt them, and
 * connections whose device cannot be shared with another process
 * (usmc_conn_unshare: before a fork, an exec, a send).
 *
 * A descriptor sent over a UNIX socket (node's cluster in round-robin
 * mode, connection brokers, haproxy's and nginx's hand-over on reload)
 * to a process that runs libusmc is adopted there, on shared memory
 * (scm_send.c, scm_recv.c).  This file is the other way, for a receiver
 * that may not run libusmc (scm_peer.c cannot vouch for it): it shares
 * none of our memory, cannot read the rings of a shared-memory
 * connection, nor answer proposals for a listener, and the kernel socket
 * outlives our last close of it (it is in flight, then in the receiver).
 * So before the message leaves:
 *
 *  - a connection on (or possibly going onto) shared memory moves to TCP,
 *    every byte in order (migrate.c; reason handed_over): a connect in
 *    progress is settled first, an undecided server connection is decided
 *    (TCP unless a proposal is there), and a CLC wake or DECLINE message still
 *    due ahead of the peer's first TCP byte is consumed here, since the
 *    receiver would read it as data.  Afterwards our copy and the
 *    receiver's are one TCP socket: closing ours, keeping it, or sending
 *    it again behave as TCP;
 *  - a listener stops taking proposals (usmc_handover_listener): clients
 *    connect over TCP, whoever accepts, and the proposals of clients still
 *    in the accept queue are declined in their control blocks, so that
 *    their queued bytes move to TCP for whoever accepts them.  Our own copy
 *    keeps accepting, on TCP.
 *
 * The send itself is not ours: if it fails, the socket stays on TCP.
 * Descriptors that are not tracked sockets (pipes, files, UNIX sockets,
 * sockets never connected) go untouched.
 *
 * In the receiving process, a listener (or a socket bound to become one)
 * that arrives without usmc's ticket is tracked but never published
 * (receive_fd).  Bytes of the peer's unread in our ring that the peer
 * cannot send again (it closed, or left shared memory first) cannot be
 * handed over: the TCP connection is reset (stranded()), so that nobody
 * reads a clean end of a stream that misses them.
 */
#include "accept.h"
#include "af_usmc.h"
#include "close.h"
#include "fdtab.h"
#include "handover.h"
#include "listener.h"
#include "log.h"
#include "migrate.h"
#include "real.h"
#include "sock.h"
#include "sys.h"
#include "tcp.h"

#include <fcntl.h>
#include <netinet/in.h>

/* Index state (clc.h degraded) raised when the listener leaves for a
 * process that cannot answer proposals: clients holding the index stop
 * proposing (limit_reached), checked after their CLAIM as for the others. */
#define CLC_LN_HANDED	4u

/* Sleep until fd shows one of events (or hangs up). */
static void wait_fd(int fd, short events)
{
	struct pollfd p = { .fd = fd, .events = events };

	sys_poll(&p, 1, -1);
}

/*
 * Bytes of the peer's in our receive ring that we never read, while the
 * peer can no longer send them again on TCP: it closed (CLOSED on its
 * consumer line, or FIN on TCP: all its processes let go), or it left
 * shared memory first (we follow, MIGRATING).  They cannot reach the
 * receiver, which must then not see a clean end of a stream short of them.
 * Likewise a connection reset on shared memory.
 */
static bool stranded(struct usmc_sock *sk, int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };
	uint64_t head, prod;

	if (!sk->rx_p || !sk->tx_c || !sk_is_smc_path(sk) || sk_mode(sk) == USMC_MODE_UNDECIDED)
		return false;
	/* Reset on shared memory stays reset (TCP under it may end in FIN). */
	if (sk_flag(sk, SKF_ABORTED) || ((LOAD_ACQUIRE(&sk->rx_p->flags) |
					  LOAD_ACQUIRE(&sk->tx_c->flags)) & CDC_F_ABORT))
		return true;
	if (usmc_rx_view(sk, &head, &prod) && head == prod)
		return false;
	return sk_mode(sk) == USMC_MODE_MIGRATING ||
	       (LOAD_ACQUIRE(&sk->tx_c->flags) & CDC_F_CLOSED) ||
	       (sys_poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)));
}

bool usmc_handover_strands(struct usmc_sock *sk, int fd)
{
	if (sk->kind != SK_CONN)
		return false;
	usmc_sock_refresh(sk, fd);
	return stranded(sk, fd);
}

static void handover_conn(struct usmc_sock *sk, int fd, int reason)
{
	bool lost;

	/* A client's wake message can only go out on a connected socket, and
	 * the peer counts on it before any TCP byte: settle the connect. */
	while (sk_flag(sk, SKF_CONNECTING) && usmc_sock_connect_done(sk, fd) == -EINPROGRESS)
		wait_fd(fd, POLLOUT);
	/* A peer that left shared memory first is followed, not left in
	 * turn: its unread bytes come from us on TCP (migrate.c). */
	usmc_sock_refresh(sk, fd);
	lost = stranded(sk, fd);
	if (sk_is_smc_path(sk))
		usmc_conn_leave(sk, fd, reason);
	/* SKF_LOST: declined after the client had left with bytes queued in
	 * shared memory; our reads say ECONNRESET, and so must the receiver's. */
	if (lost || sk_mode(sk) == USMC_MODE_MIGRATING || sk_flag(sk, SKF_LOST)) {
		usmc_conn_reset_tcp(sk, fd, "handed over with the peer's unread bytes stranded in shared memory");
		return;
	}
	/* The one CLC message the peer sends ahead of its TCP data (a wake
	 * byte, or the server's DECLINE message) must not reach the receiver. */
	usmc_tcp_take_owed(sk, fd);
}

/*
 * A proposal nobody here will match (its connection waits in the accept
 * queue for a process that cannot answer): take it from the index and
 * decline it in the control block, as a server that cannot use it would.
 * The client then sends its queued bytes on TCP, expecting no CLC message
 * (an index decline would make it wait for one), and frees the slot.
 */
static void decline_queued(struct usmc_clc_ln *ln, struct usmc_clc_entry *e)
{
	struct usmc_addr client = e->client;
	uint64_t lgr_id = e->lgr_id;
	uint32_t slot = e->slot, gen = e->gen;
	uint8_t dev = e->devs[0];
	struct usmc_cdc_ctrl *c;
	struct usmc_lgr *l;
	int own, peer;

	if (usmc_lgr_attach(lgr_id, dev, &l))
		return;		/* the client is gone: so is its connection */
	c = slot < l->nslots ? usmc_lgr_ctrl(l, slot) : NULL;
	/* Ours to answer only while it is this connection's slot and the
	 * proposal is still posted (a concurrent accept of ours may take it
	 * first: then it is simply accepted). */
	if (c && LOAD_ACQUIRE(&c->c.gen) == gen && usmc_clc_answer(ln, &client, 0)) {
		/* Pairs with the client's acquire load in usmc_sock_refresh(). */
		cdc_answer(&c->s, CDC_ANSWER(gen, CDC_ANS_DECLINE, USMC_R_HANDOVER));
		cdc_release_gen(&c->s, gen);
		if (!usmc_lgr_bells(l, &own, &peer)) {
			usmc_ring_lines(l, peer, &c->s2c_p, &c->c2s_c, &c->s2c_c, &c->c2s_p);
			usmc_lgr_bells_put(l);
		}
		usmc_dbg(1, "listener handed over: queued proposal (link group %016llx slot %u) declined",
			 (unsigned long long)lgr_id, slot);
	}
	usmc_lgr_put(l);
}

/* Wait (briefly) for a client's CLAIM of entry e to become a proposal or
 * go: it may not have seen CLC_LN_HANDED.  Returns the word. */
static uint64_t settle_claim(struct usmc_clc_entry *e, uint64_t w)
{
	uint64_t until = usmc_now_ns() + CLC_HALF_WRITTEN_NS;

	while (CLC_STATE(w) == CLC_CLAIM && usmc_now_ns() < until) {
		sched_yield();
		w = atomic_load(&e->word);
	}
	return w;
}

/*
 * Every proposal posted in ln without W (W: a connection we accepted
 * already, undecided: ours to settle) is declined.  Only the backed parts
 * of the 16 MB index are read (SEEK_DATA): reading a hole would back it.
 */
static void decline_all_queued(struct usmc_clc_ln *ln)
{
	const off_t base = (off_t)offsetof(struct usmc_clc_index, e);
	const off_t end = base + (off_t)sizeof(ln->idx->e);
	struct usmc_clc_entry *first = &ln->idx->e[0][0];
	off_t at = base, hole;

	while (at < end) {
		at = lseek(ln->fd, at, SEEK_DATA);
		if (at < 0)
			return;		/* ENXIO: no more data */
		hole = lseek(ln->fd, at, SEEK_HOLE);
		if (hole < 0 || hole > end)
			hole = end;
		if (at < base)
			at = base;
		for (at -= (at - base) % (off_t)sizeof(*first); at < hole;
		     at += (off_t)sizeof(*first)) {
			struct usmc_clc_entry *e = first + (at - base) / (off_t)sizeof(*first);
			/* Seq-cst after our store of degraded: with the
			 * clients' CAS then load of it (clc.c), one of us
			 * sees the other. */
			uint64_t w = atomic_load(&e->word);

			if (w & CLC_W)
				continue;
			if (CLC_STATE(w) == CLC_CLAIM)
				w = settle_claim(e, w);
			if (CLC_STATE(w) == CLC_PROPOSED && !(w & CLC_W))
				decline_queued(ln, e);
		}
	}
}

/* Clients stop proposing to ln, the proposals queued are declined. */
static void handover_ln(struct usmc_clc_ln *ln)
{
	if (atomic_fetch_or(&ln->idx->degraded, CLC_LN_HANDED) & CLC_LN_HANDED)
		return;		/* done before */
	decline_all_queued(ln);
}

void usmc_handover_listener(struct usmc_sock *sk)
{
	struct usmc_clc_ln *ln = sk->lst;

	/* No other holder publishes it again (listener.c). */
	usmc_listen_nopub(sk);
	if (!ln)
		return;
	usmc_listen_unpublish(sk);
	handover_ln(ln);
}

/*
 * A socket we know as bound (not listening here) goes where nobody may
 * answer proposals: no holder may publish it, and if another one listens
 * on it already (listener.c) its publication is taken down as ours would
 * be: whoever takes the connections queued there, they run on TCP.
 */
void usmc_handover_bound(struct usmc_sock *sk, int fd)
{
	struct usmc_clc_ln *ln;
	int reg_idx;

	if (!usmc_listen_nopub(sk))
		return;		/* done before */
	ln = usmc_listen_find(fd, &reg_idx);
	if (!ln)
		return;
	usmc_dbg(1, "fd %d: socket handed over while other processes listen on it: clients connect over TCP",
		 fd);
	usmc_registry_del(reg_idx, ln->id);
	usmc_clc_ln_unpublish(ln);
	handover_ln(ln);
	usmc_clc_ln_put(ln);
}

void usmc_handover_fd(int fd)
{
	struct usmc_sock *sk = usmc_fd_get(fd);

	if (!sk)
		return;
	if (sk->kind == SK_CONN) {
		handover_conn(sk, fd, USMC_R_HANDOVER);
	} else if (sk->kind == SK_LISTEN) {
		if (sk->lst)
			usmc_dbg(1, "fd %d: listener handed over: clients connect over TCP", fd);
		usmc_handover_listener(sk);
	} else if (sk->kind == SK_TCP) {
		usmc_handover_bound(sk, fd);
	}
	usmc_sock_put(sk);
}

/* fn(fd) for every descriptor msg carries (SCM_RIGHTS). */
static void each_passed_fd(const struct msghdr *msg, void (*fn)(int fd))
{
	struct msghdr *m = (struct msghdr *)msg;	/* CMSG_NXTHDR's prototype */
	struct cmsghdr *c;

	if (!m->msg_control)
		return;
	for (c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
		size_t i, n;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
		    c->cmsg_len < CMSG_LEN(0))
			continue;
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
			fn(fd);
		}
	}
}

void usmc_handover_send_slow(const struct msghdr *msg)
{
	each_passed_fd(msg, usmc_handover_fd);
}

/*
 * A TCP socket received that others may accept on (a listener, or one
 * bound to listen later, as node's cluster passes it with
 * schedulingPolicy = none): tracked as a listener that is never published
 * (usmc_sock_listen() registers only a socket that becomes one), so no
 * client proposes to us for a queue that the sender or other receivers,
 * usmc or not, also take connections from.  What we accept on it is
 * counted (handed_over).  A connection received stays untracked: its
 * sender counted it, and moved it to TCP before it left.
 */
static void receive_fd(int fd)
{
	int domain = 0, type = 0, proto = 0, acc = 0, fl;
	struct sockaddr_storage ss;
	socklen_t l = sizeof(int), sl = sizeof(ss);
	struct usmc_sock *sk = usmc_fd_get(fd);

	if (sk) {
		usmc_sock_put(sk);	/* known: ours already */
		return;
	}
	if (real.getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &l) ||
	    (domain != AF_INET && domain != AF_INET6))
		return;
	l = sizeof(int);
	real.getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l);
	l = sizeof(int);
	real.getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &l);
	if (type != SOCK_STREAM || (proto && proto != IPPROTO_TCP))
		return;
	l = sizeof(int);
	real.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l);
	if (!acc && !getpeername(fd, (struct sockaddr *)&ss, &sl))
		return;		/* connected */
	sk = usmc_sock_new(fd, SK_LISTEN, &usmc_sock_ops);
	if (!sk)
		return;
	fl = real.fcntl(fd, F_GETFL);
	sk_set_flag(sk, SKF_HANDED | (fl >= 0 && (fl & O_NONBLOCK) ? SKF_NONBLOCK : 0));
	sl = sizeof(ss);
	if (!getsockname(fd, (struct sockaddr *)&ss, &sl))
		usmc_addr_from_sa(&sk->bound, (struct sockaddr *)&ss, sl);
	usmc_stats_attach();
	if (usmc_fd_install(fd, sk))
		usmc_sock_put(sk);
	else
		usmc_dbg(1, "fd %d: received a listening socket: not published", fd);
}

void usmc_handover_recv_slow(const struct msghdr *msg)
{
	int saved = errno;

	each_passed_fd(msg, receive_fd);
	errno = saved;
}

/*
 * Moved as for a process without libusmc (handover_conn: bytes stranded
 * in our ring reset the connection rather than end it short).  An
 * undecided server connection is decided first: it may be about to take a
 * link group of a device that cannot be shared.
 */
void usmc_conn_unshare(struct usmc_sock *sk, int fd, uint32_t need)
{
	if (likely(usmc_dev_all_can(need)) || sk->kind != SK_CONN)
		return;
	if (sk_mode(sk) == USMC_MODE_UNDECIDED)
		usmc_server_resolve(sk, fd, true);
	if (!sk->lgr || usmc_dev_can(sk->lgr->dev, need) || !sk_is_smc_path(sk))
		return;
	/* Forked: a peer that closed or reset takes no byte of ours again
	 * (EPIPE, from the shared state), so there is nothing to keep apart,
	 * and TCP could not show that state (a first write would succeed).
	 * A process that adopts it (exec, SCM_RIGHTS) attaches afresh: no. */
	if (need == USMC_DEV_F_FORK && sk_mode(sk) == USMC_MODE_SMCD &&
	    ((LOAD_ACQUIRE(&sk->tx_c->flags) & (CDC_F_CLOSED | CDC_F_ABORT)) ||
	     (LOAD_ACQUIRE(&sk->rx_p->flags) & CDC_F_ABORT)))
		return;
	handover_conn(sk, fd, USMC_R_DEV_UNSHARED);
}

struct unshare_walk {
	uint32_t need;
	bool inherited;
};

/* Another thread may close fd meanwhile, and open another socket under
 * its number: we move the socket we hold a reference to, through a
 * descriptor of our own (a poll of the reused number saw an unconnected
 * socket hang up, and our reset of "this" connection disconnected the
 * other thread's new one: t_inherit fork_churn). */
static void unshare_held(struct usmc_sock *sk, int d, void *arg)
{
	const struct unshare_walk *w = arg;

	usmc_conn_unshare(sk, d, w->need);
}

static void unshare_one(int fd, struct usmc_sock *seen __unused, void *arg)
{
	const struct unshare_walk *w = arg;

	if (w->inherited && (sys_fcntl(fd, F_GETFD, 0) & FD_CLOEXEC))
		return;
	usmc_fd_with_held(fd, unshare_held, arg);
}

void usmc_conns_unshare(uint32_t need, bool inherited)
{
	struct unshare_walk w = { .need = need, .inherited = inherited };

	if (!usmc_dev_all_can(need))
		usmc_fd_foreach(unshare_one, &w);
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
