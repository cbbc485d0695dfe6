// SPDX-License-Identifier: MIT
/*
 * af_usmc.c - connect: where a TCP connection is discovered to have a usmc
 * peer and moved onto shared memory (or not).
 *
 * Client: connect() looks the destination up in the registry; only when it
 * certainly reaches a usmc listener does it reserve a link group slot, start
 * the TCP connect without blocking (the source port exists once the SYN is
 * sent) and post its CLC proposal, normally before the server can accept.
 * The server side of the handshake is in accept.c, the listener's
 * publication in listener.c.  Anything uncertain or
 * failing ends on TCP with a counted reason.
 */
#include "af_usmc.h"
#include "clc_bind.h"
#include "epoll.h"
#include "fdtab.h"
#include "log.h"
#include "migrate.h"
#include "options.h"
#include "real.h"
#include "registry.h"
#include "rundir.h"
#include "sock.h"
#include "sys.h"
#include "wait.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>

void usmc_conn_stats_open(struct usmc_sock *sk, int fd)
{
	struct usmc_stats_conn *st;

	if (sk->st || usmc_stats_attach())
		return;
	st = usmc_stats_conn_alloc();
	if (!st)
		return;
	st->fd = fd;
	st->role = (uint8_t)sk->role;
	st->local = sk->local;
	st->peer = sk->peer;
	st->lgr_id = sk->lgr ? sk->lgr->id : 0;
	st->slot = sk->slot;
	st->ring_size = sk->size;
	STORE_RELAXED(&st->mode, (uint8_t)sk_mode(sk));
	STORE_RELAXED(&st->reason, (uint8_t)LOAD_RELAXED(&sk->sh->reason));
	STORE_RELEASE(&st->state, 1);
	sk->st = st;
	sk->st_start = st->start_ns;
}

static const char *role_name(const struct usmc_sock *sk)
{
	return sk->role == 'C' ? "connect" : "accept";
}

/* A TCP-mode connect that was in progress: count it once it connected. */
void usmc_sock_count_late(struct usmc_sock *sk, int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (!(atomic_fetch_and(&sk->sh->flags, ~SKF_COUNT_LATER) & SKF_COUNT_LATER))
		return;
	if (getpeername(fd, (struct sockaddr *)&ss, &len))
		return;		/* never connected */
	usmc_sock_set_tcp(sk, (int)LOAD_RELAXED(&sk->sh->reason));
}

void usmc_sock_set_tcp(struct usmc_sock *sk, int reason)
{
	char a[64], b[64];

	STORE_RELAXED(&sk->sh->reason, (uint32_t)reason);
	if (sk->st)
		STORE_RELAXED(&sk->st->reason, (uint8_t)reason);
	sk_set_mode(sk, USMC_MODE_TCP);
	if (reason == USMC_R_NONE || sk_flag(sk, SKF_COUNT_LATER))
		return;		/* not a connection (yet): nothing to count */
	if (!(atomic_fetch_or(&sk->sh->flags, SKF_FB_COUNTED) & SKF_FB_COUNTED)) {
		STAT_INC(tcp_conns);
		STAT_INC(fallback[reason]);
		if (sk->role == 'S')
			STAT_INC(fallback_server[reason]);
	}
	usmc_dbg(1, "%s %s %s %s: TCP (%s: %s)", role_name(sk),
		 usmc_addr_str(&sk->local, a, sizeof(a)), sk->role == 'C' ? "->" : "<-",
		 usmc_addr_str(&sk->peer, b, sizeof(b)), usmc_reason_name(reason),
		 usmc_reason_desc(reason));
}

void usmc_conn_uncount(struct usmc_sock *sk)
{
	if (atomic_fetch_and(&sk->sh->flags, ~SKF_COUNTED) & SKF_COUNTED) {
		STAT_ADD(smc_conns, -1);
		STAT_ADD(smc_client, -1);
	}
}

void usmc_conn_established(struct usmc_sock *sk)
{
	char a[64], b[64];

	sk_set_mode(sk, USMC_MODE_SMCD);
	if (sk->role == 'S')
		sk_peer_seen(sk);
	/* Where we run, for the peer's spin decisions (wait.c), before
	 * either side first waits. */
	usmc_publish_cpu(sk, sched_getcpu());
	if (!(atomic_fetch_or(&sk->sh->flags, SKF_COUNTED) & SKF_COUNTED)) {
		STAT_INC(smc_conns);
		if (sk->role == 'C')
			STAT_INC(smc_client);
		else
			STAT_INC(smc_server);
	}
	/* Once per endpoint: established is reached once (accept, or the
	 * client's first look at the answer). */
	STAT_INC(ring_hist[usmc_ring_bucket(sk->size)]);
	usmc_dbg(1, "%s %s %s %s: SMC-D %s (link group %016llx slot %u, %u-byte DMBs)",
		 role_name(sk), usmc_addr_str(&sk->local, a, sizeof(a)),
		 sk->role == 'C' ? "->" : "<-", usmc_addr_str(&sk->peer, b, sizeof(b)),
		 sk->lgr->dev->name, (unsigned long long)sk->lgr->id, sk->slot, sk->size);
}

/* ---- socket buffer sizes ---------------------------------------------- */

/*
 * TCP holds at most what the sender's SO_SNDBUF and the receiver's
 * SO_RCVBUF let it (each about half of what the kernel reports: the rest
 * is its bookkeeping), and a program that sets them counts on it: a
 * sender blocks, and learns when the peer goes away in the middle.  The
 * ring is much larger, so once the application set either size, what we
 * have in flight is held to the same: our SO_SNDBUF (sh->sndbuf) plus the
 * receiver's SO_RCVBUF, which it publishes in its consumer line
 * (CDC_F_RCVLIM).  A size not set is the ring's (TCP would grow it).
 * A receiver's size set after its peer sent is applied from then on.
 */
uint64_t usmc_tx_cap_slow(const struct usmc_sock *sk)
{
	uint32_t snd = LOAD_RELAXED(&sk->sh->sndbuf), rcv = 0;
	uint64_t cap;

	if (LOAD_ACQUIRE(&sk->tx_c->flags) & CDC_F_RCVLIM)
		rcv = LOAD_RELAXED(&sk->tx_c->rcvbuf);	/* after the flag (acquire) */
	cap = (uint64_t)(snd ? snd / 2 : sk->size) + (rcv ? rcv / 2 : sk->size);
	return cap < 1 ? 1 : MIN(cap, (uint64_t)sk->size);
}

/* Our SO_RCVBUF to the sender, if set and connected on shared memory. */
static void rcvbuf_publish(struct usmc_sock *sk)
{
	uint32_t v = LOAD_RELAXED(&sk->sh->rcvbuf);

	if (!v || !sk->rx_c)
		return;
	cdc_pub_rcvbuf(sk->rx_c, v);
	/* Release: the value before the flag (usmc_tx_cap_slow's acquire). */
	cdc_cons_flags(sk->rx_c, CDC_F_RCVLIM, memory_order_release);
	usmc_kick_space(sk);	/* it may have grown: a sender waiting for room */
}

void usmc_sock_bufsize(struct usmc_sock *sk, int fd, int name)
{
	socklen_t l = sizeof(int);
	int v = 0;

	if (name == SO_SNDBUFFORCE)
		name = SO_SNDBUF;
	else if (name == SO_RCVBUFFORCE)
		name = SO_RCVBUF;
	if ((name != SO_SNDBUF && name != SO_RCVBUF && name != SO_RCVLOWAT) ||
	    real.getsockopt(fd, SOL_SOCKET, name, &v, &l) || v <= 0)
		return;
	if (name == SO_RCVLOWAT) {
		/* The value before the flag: readers load the flag first. */
		STORE_RELAXED(&sk->sh->rcvlowat, (uint32_t)v);
		if (v > 1)
			sk_set_flag(sk, SKF_LOWAT);
		else
			sk_clear_flag(sk, SKF_LOWAT);
		usmc_epoll_sock_changed(sk);
		return;
	}
	if (name == SO_SNDBUF) {
		STORE_RELAXED(&sk->sh->sndbuf, (uint32_t)v);
		sk_set_flag(sk, SKF_BUFLIM);
		usmc_dbg(2, "fd %d: SO_SNDBUF %d: at most %d bytes in flight of ours", fd, v,
			 v / 2);
		return;
	}
	STORE_RELAXED(&sk->sh->rcvbuf, (uint32_t)v);
	if (sk->kind == SK_CONN && (sk_mode(sk) == USMC_MODE_SMCD ||
				    sk_mode(sk) == USMC_MODE_PROPOSED)) {
		pthread_mutex_lock(&sk->lock);
		rcvbuf_publish(sk);
		pthread_mutex_unlock(&sk->lock);
	}
}

/* An accepted socket has its listener's sizes, as in TCP. */
void usmc_sock_buf_inherit(struct usmc_sock *sk, const struct usmc_sock *lsk)
{
	uint32_t snd = LOAD_RELAXED(&lsk->sh->sndbuf);

	STORE_RELAXED(&sk->sh->rcvbuf, LOAD_RELAXED(&lsk->sh->rcvbuf));
	if (LOAD_RELAXED(&lsk->sh->flags) & SKF_LOWAT) {
		STORE_RELAXED(&sk->sh->rcvlowat, LOAD_RELAXED(&lsk->sh->rcvlowat));
		sk_set_flag(sk, SKF_LOWAT);
	}
	if (snd) {
		STORE_RELAXED(&sk->sh->sndbuf, snd);
		sk_set_flag(sk, SKF_BUFLIM);
	}
}

/* Point the connection at its slot: our lines, the peer's lines, rings. */
#define TX_FIRST_RESERVE	4096u	/* a page: idle connections cost little (tx.c grows it) */

int usmc_conn_bind_slot(struct usmc_sock *sk, struct usmc_lgr *l, uint32_t slot, uint32_t gen,
			bool fresh)
{
	struct usmc_cdc_ctrl *c = usmc_lgr_ctrl(l, slot);
	struct usmc_cdc_prod *p[2] = { &c->c2s_p, &c->s2c_p };
	struct usmc_cdc_cons *k[2] = { &c->c2s_c, &c->s2c_c };
	int rc, tx = usmc_tx_dir(sk);

	rc = usmc_lgr_bells(l, &sk->bell_own, &sk->bell_peer);
	if (rc)
		return rc;
	sk->lgr = l;
	sk->slot = slot;
	sk->gen = gen;
	sk->size = l->ring_size;
	sk->ctrl = c;
	sk->tx_p = p[tx];
	sk->tx_c = k[tx];
	sk->rx_p = p[!tx];
	sk->rx_c = k[!tx];
	sk->tx_ring = usmc_lgr_ring(l, slot, tx);
	sk->rx_ring = usmc_lgr_ring(l, slot, !tx);
	/* A device that cannot map the peer's DMB: our sndbuf (tx.c tx_to_dmb). */
	sk->tx_move = !usmc_dev_can(l->dev, USMC_DEV_F_MAPPED);
	if (sk->tx_move)
		sk->tx_ring = usmc_lgr_sndbuf(l, slot);
	sk->sh->data_rung = sk->sh->space_rung = 0;
	sk->sh->tx_cons = sk->sh->tx_cons_at = sk->sh->tx_cons_rx = 0;	/* checked at every use */
	/* A new connection's cursors start at 0 (the client reset the slot's
	 * lines).  An exec'd process adopting a live one (exec.c) shares sh
	 * with the processes that keep writing it: leave them alone. */
	if (fresh) {
		STORE_RELAXED(&sk->sh->tx_prod, 0);
		STORE_RELAXED(&sk->sh->tx_skip, 0);
		STORE_RELAXED(&sk->sh->rx_cons, 0);
	}
	/* Back the start of our ring now: if even that fails, decline (the
	 * runtime directory's tmpfs is full) rather than fault later. */
	STORE_RELAXED(&sk->sh->tx_hw, MIN(TX_FIRST_RESERVE, l->ring_size));
	STORE_RELAXED(&sk->sh->tx_stuck, 0);
	if (l->dev->dmb_reserve(l, slot, usmc_tx_dir(sk), 0, LOAD_RELAXED(&sk->sh->tx_hw))) {
		usmc_lgr_bells_put(l);
		sk->bell_own = sk->bell_peer = -1;
		return -ENOSPC;
	}
	usmc_publish_cpu(sk, sched_getcpu());
	if (fresh)
		rcvbuf_publish(sk);
	return 0;
}

void usmc_conn_unbind_slot(struct usmc_sock *sk, bool server_attached)
{
	if (!sk->lgr)
		return;
	if (sk->bell_own >= 0)
		usmc_lgr_bells_put(sk->lgr);
	if (sk->role == 'C')
		usmc_lgr_slot_put(sk->lgr, sk->slot, sk->gen, server_attached);
	else
		usmc_lgr_put(sk->lgr);
	sk->lgr = NULL;
	sk->ctrl = NULL;
	sk->bell_own = sk->bell_peer = -1;
}

/*
 * May this connection use shared memory at all?  A socket without fork-
 * shared state (sock.c) cannot.  Descriptors: usmc's own (a link group's
 * file and doorbells, three per 64 connections by default) live at the top
 * of RLIMIT_NOFILE (usmc_ifd_base), so we accelerate only while the socket
 * itself is below them.  A program that needs no more than the numbers
 * below that (at least half of its table) over TCP therefore never sees
 * EMFILE because of usmc (tests/integration/test_exhaustion.py); beyond
 * that, a call that runs out gets them back (shed.c).
 */
int usmc_conn_resources(const struct usmc_sock *sk, int fd)
{
	if (LOAD_RELAXED(&sk->sh->in_use) == USMC_SH_PRIVATE)
		return USMC_R_MEM;
	if (usmc_fault(USMC_FAULT_FDS))
		return USMC_R_LIMIT;
	/* A cached limit may be stale: only the fresh one refuses. */
	if ((long)fd + USMC_CONN_FDS >= usmc_ifd_base(false) &&
	    (long)fd + USMC_CONN_FDS >= usmc_ifd_base(true))
		return USMC_R_LIMIT;
	return 0;
}

/* Which listener does dst reach, and may we propose to it? */
static int client_match(const struct usmc_addr *dst, struct usmc_clc_ln **ln, uint64_t *route_ns,
			const struct usmc_dev_ops **dev)
{
	struct usmc_reg_listener rec;
	int reason, rc;

	reason = usmc_policy_check(dst->port, NULL);
	if (reason)
		return reason;
	if (usmc_registry_attach())
		return USMC_R_RUNDIR;
	usmc_stats_attach();
	reason = usmc_registry_match(dst, &rec);
	if (reason)
		return reason;
	*dev = usmc_dev_pick(rec.devs);	/* ours, that the listener offers too */
	if (!*dev)
		return USMC_R_NO_DEVICE;
	/* In another namespace: the kernel must be seen to take us there. */
	*route_ns = rec.netns != usmc_netns_self() ? rec.netns : 0;
	rc = usmc_clc_ln_get(rec.id, ln);
	if (rc == -ESRCH || rc == -ENOENT || rc == -EINVAL) {
		/* Registered but dead, or its index planted (no regular
		 * file): clean up so the next connect is quick. */
		usmc_registry_gc();
		return rc == -EINVAL ? USMC_R_RUNDIR : USMC_R_PEER_GONE;
	}
	if (rc)
		return USMC_R_RUNDIR;	/* truncated, untrusted: its owner lives */
	return 0;
}

int usmc_sock_connect(struct usmc_sock *sk, int fd, const struct sockaddr *sa, socklen_t len)
{
	const struct usmc_dev_ops *dev = NULL;
	struct usmc_clc_ln *ln = NULL;
	struct sockaddr_storage ss;
	struct usmc_clc_prop prop;
	socklen_t sslen = sizeof(ss);
	struct usmc_lgr *l = NULL;
	uint32_t slot, gen;
	int reason, rc, err, cslot = -1;
	uint64_t epoch = 0;
	bool wake = false;

	if (sk->kind != SK_TCP || usmc_addr_from_sa(&sk->peer, sa, len))
		return real.connect(fd, sa, len);
	sk->kind = SK_CONN;
	sk->role = 'C';
	usmc_stats_attach();

	/* TCP_FASTOPEN_CONNECT: the kernel sends the SYN with the first
	 * write, and ours would go to the ring: no SYN, no server, ever.
	 * A receive option rings cannot honour (interpose.c): TCP too.
	 * Descriptors 0-2 are stdio's, which writes past us (stdstream.c). */
	reason = sk_flag(sk, SKF_TFO | SKF_RXOPT) ? USMC_R_SOCKOPT :
		 fd <= STDERR_FILENO ? USMC_R_STDIO : usmc_conn_resources(sk, fd);
	if (!reason)
		reason = client_match(&sk->peer, &ln, &sk->route_ns, &dev);
	/* SIGIO is raised for TCP data only (interpose.c). */
	if (!reason && sk_flag(sk, SKF_ASYNC))
		reason = USMC_R_ASYNC_IO;
	if (!reason)
		reason = usmc_lgr_slot_get(ln->id, dev, &l, &slot, &gen);
	if (!reason && (rc = usmc_conn_bind_slot(sk, l, slot, gen, true))) {
		usmc_lgr_slot_put(l, slot, gen, false);
		reason = rc == -EMFILE || rc == -ENFILE ? USMC_R_LIMIT : USMC_R_MEM;
	}
	/* Our mark before the SYN (clc_bind.c): the server takes our
	 * proposal only from a client end that carries it. */
	if (!reason && usmc_bind_mark(fd, USMC_BIND_DECIDED))
		reason = USMC_R_INTERNAL;
	/* Announced before the SYN: a server that must decide first waits
	 * for our proposal instead of missing it (clc.c, wait_connecting). */
	cslot = !reason && ln ? usmc_clc_connect_begin(ln, l->id, &epoch) : -1;
	rc = real.connect(fd, sa, len);
	err = rc ? errno : 0;
	if (rc && err != EINPROGRESS) {
		/* Refused, unreachable, interrupted: not a connection (yet). */
		if (ln)
			usmc_clc_connect_end(ln, cslot);
		usmc_clc_ln_put(ln);
		usmc_conn_unbind_slot(sk, false);
		if (err == EINTR) {
			/* The kernel goes on connecting; we stay on TCP for it. */
			usmc_conn_stats_open(sk, fd);
			usmc_sock_set_tcp(sk, reason ? reason : USMC_R_PEER_NOT_USMC);
		} else {
			sk->kind = SK_TCP;
			usmc_sock_set_tcp(sk, USMC_R_NONE);
		}
		errno = err;
		return rc;
	}
	if (!getsockname(fd, (struct sockaddr *)&ss, &sslen))
		usmc_addr_from_sa(&sk->local, (struct sockaddr *)&ss, sslen);
	else if (!reason)
		reason = USMC_R_INTERNAL;
	/* Connected already: the route is known before we propose. */
	if (!reason && !rc && !usmc_route_proven(sk, sk->route_ns))
		reason = USMC_R_UNCERTAIN;
	if (!rc)
		sk->route_ns = 0;
	if (!reason) {
		usmc_clc_connect_port(ln, cslot, sk->local.port);
		cdc_slot_ids(&sk->ctrl->c, &sk->local, &sk->peer, (uint32_t)usmc_getpid());
		memset(&prop, 0, sizeof(prop));
		prop.epoch = epoch;
		prop.lgr_id = sk->lgr->id;
		prop.slot = sk->slot;
		prop.gen = sk->gen;
		prop.version = USMC_PROTO_VERSION;
		prop.uid = (uint32_t)geteuid();
		prop.pid = (uint32_t)usmc_getpid();
		usmc_dev_list(prop.devs, sk->lgr->dev->id);
		prop.client = sk->local;
		if (usmc_fault(USMC_FAULT_LATE))
			usleep(50000);	/* a client descheduled inside connect() */
		reason = usmc_clc_propose(ln, &prop, &wake);
	}
	if (ln)
		usmc_clc_connect_end(ln, cslot);
	usmc_conn_stats_open(sk, fd);
	if (reason) {
		usmc_clc_ln_put(ln);
		usmc_conn_unbind_slot(sk, false);
		/* In progress: not a connection until it connects; count then. */
		if (rc)
			sk_set_flag(sk, SKF_COUNT_LATER);
		usmc_sock_set_tcp(sk, reason);
		errno = err;
		return rc;
	}
	sk->ln = ln;
	/* A wake byte only for a server that accepted us undecided (clc.h). */
	sk_set_flag(sk, (wake ? SKF_WAKE_SEND : 0) | (rc ? SKF_CONNECTING : 0));
	sk_set_mode(sk, USMC_MODE_PROPOSED);
	sk_peer_seen(sk);
	/* From here our bytes go through shared memory: count the endpoint
	 * now (a client may never look at the answer before it exits). */
	if (!(atomic_fetch_or(&sk->sh->flags, SKF_COUNTED) & SKF_COUNTED)) {
		STAT_INC(smc_conns);
		STAT_INC(smc_client);
	}
	usmc_dbg(2, "connect fd %d: proposal posted (link group %016llx slot %u gen %u)",
		 fd, (unsigned long long)sk->lgr->id, sk->slot, sk->gen);
	if (!rc) {
		usmc_connect_check_done(sk);
		usmc_client_send_wake(sk, fd);
	}
	errno = err;
	return rc;
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
static int connect_settle(struct usmc_sock *sk, int fd, unsigned int revents)
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
	return connect_settle(sk, fd, (unsigned int)p.revents);
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
		moved = true;
	}
	pthread_mutex_unlock(&sk->lock);
	if (moved)
		usmc_dbg(1, "fd %d: reset before the server accepted it: plain TCP", fd);
	return moved;
}

/*
 * The wake (or decline) byte is taken exactly once: by whoever holds the
 * TCP look (wait.c), after checking the flag under it.  Two threads that
 * both saw the flag would otherwise take two bytes, the second one the
 * peer's.  Never blocks holding it: it waits for the byte outside.
 */
int usmc_tcp_skip_wake(struct usmc_sock *sk, int fd, bool nonblock)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t n;
	int err;
	char c;

	while (sk_flag(sk, SKF_WAKEBYTE)) {
		bool mine = usmc_tcp_look_mine(sk);

		n = -1;
		err = EAGAIN;
		if (mine || usmc_tcp_look_take(sk)) {
			if (sk_flag(sk, SKF_WAKEBYTE)) {
				n = real.recv(fd, &c, 1, MSG_DONTWAIT);
				err = errno;
				if (n == 1)
					sk_clear_flag(sk, SKF_WAKEBYTE);
			}
			if (!mine)
				usmc_tcp_look_give(sk, fd);
		}
		if (n == 0)
			break;		/* EOF first: the reader sees it */
		if (n < 0 && err != EAGAIN && err != EWOULDBLOCK && err != EINTR)
			return -err;
		if (!sk_flag(sk, SKF_WAKEBYTE))
			break;
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
 * the peer is committed to send them (its wake byte after PROPOSED+W, the
 * server's decline byte after DECLINED, a leaver's ring from its published
 * point).  Wait for them here when the next reader will not skip them:
 * a process the socket is handed to, a new image without libusmc, glibc's
 * stdio, whose reads are its own (stdstream.c).  A peer that ends or
 * resets first: the reader sees that instead.
 */
void usmc_tcp_take_owed_ms(struct usmc_sock *sk, int fd, uint32_t owed, int ms)
{
	uint64_t deadline = ms < 0 ? 0 : usmc_now_ns() + (uint64_t)ms * 1000000;

	while (sk_flag(sk, owed)) {
		struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };
		int rc = usmc_tcp_skip_wake(sk, fd, true), left = ms < 0 ? -1 :
								 (int)usmc_ms_left(deadline);

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

void usmc_sock_refresh_seen(struct usmc_sock *sk, int fd, int tcp_ev)
{
	bool unbound = false;
	uint64_t ans;
	char a[64];

	if (sk_flag(sk, SKF_CONNECTING)) {
		if (tcp_ev < 0)
			usmc_sock_connect_done(sk, fd);
		else
			connect_settle(sk, fd, (unsigned int)tcp_ev);
	}
	if (unlikely(sk_peer_moved(sk)))
		usmc_migrate_follow(sk, fd);
	/* Declined in the index: our queued bytes move to TCP now, not at
	 * our next wait for the server's answer (a client that sends and
	 * then waits on something else would wait forever: the server reads
	 * TCP).  One load while proposed. */
	if (unlikely(sk_mode(sk) == USMC_MODE_PROPOSED) && sk->role == 'C' && sk->ln &&
	    usmc_clc_is_declined(sk->ln, &sk->local)) {
		pthread_mutex_lock(&sk->lock);
		usmc_migrate_declined(sk);
		pthread_mutex_unlock(&sk->lock);
	}
	if (unlikely(sk_mode(sk) == USMC_MODE_MIGRATING)) {
		uint64_t head, prod;

		/* Keep the bytes moving whatever the application waits for. */
		usmc_migrate_pump(sk, fd, false);
		if (sk_mode(sk) == USMC_MODE_MIGRATING && sk->tx_done &&
		    (!sk->rx_p || (usmc_rx_view(sk, &head, &prod) && head == prod)))
			usmc_migrate_finish(sk);
		return;
	}
	if (sk_mode(sk) == USMC_MODE_UNDECIDED) {
		/* Cheap: one shared-memory load unless a proposal arrived. */
		usmc_server_resolve_quick(sk, fd);
		return;
	}
	if (sk_mode(sk) != USMC_MODE_PROPOSED)
		return;
	ans = LOAD_ACQUIRE(&sk->ctrl->s.answer);
	if (CDC_ANS_GEN(ans) != sk->gen || CDC_ANS_KIND(ans) == CDC_ANS_NONE) {
		/* Unanswered: one look at TCP for a reset (a system call
		 * per look until the server answers), unless the caller
		 * knows what TCP says: then only if it says error. */
		if (tcp_ev < 0 || (tcp_ev & (POLLERR | POLLHUP)))
			usmc_sock_proposal_reset(sk, fd);
		return;
	}
	pthread_mutex_lock(&sk->lock);
	if (sk_mode(sk) == USMC_MODE_PROPOSED) {
		if (CDC_ANS_KIND(ans) == CDC_ANS_ACCEPT) {
			unbound = !usmc_accept_proven(sk);
			if (!unbound)
				usmc_conn_established(sk);
		} else {
			unsigned int r = CDC_ANS_REASON(ans);

			if (!r || r >= USMC_R_MAX)
				r = USMC_R_INTERNAL;
			STORE_RELAXED(&sk->sh->reason, r);
			sk->migrate_pos = LOAD_RELAXED(&sk->tx_c->cons);
			sk->migrate_end = MIGRATE_END_UNKNOWN;
			sk_set_mode(sk, USMC_MODE_MIGRATING);
			STAT_INC(late_declines);
			usmc_conn_uncount(sk);
			usmc_dbg(1, "connect %s: declined by server (%s), queued bytes move to TCP",
				 usmc_addr_str(&sk->peer, a, sizeof(a)), usmc_reason_name((int)r));
		}
	}
	pthread_mutex_unlock(&sk->lock);
	/* Every byte we queued goes to whoever holds the server end, on TCP. */
	if (unbound) {
		usmc_conn_uncount(sk);
		usmc_conn_to_tcp(sk, fd, USMC_R_UNBOUND);
	}
}

void usmc_sock_check_reset(struct usmc_sock *sk)
{
	uint32_t m = sk_mode(sk);

	if ((m != USMC_MODE_SMCD && m != USMC_MODE_PROPOSED) || !sk->rx_p)
		return;
	if ((LOAD_ACQUIRE(&sk->rx_p->flags) | LOAD_ACQUIRE(&sk->tx_c->flags)) & CDC_F_ABORT)
		usmc_sock_abort(sk, USMC_A_PEER_RESET);
}

void usmc_sock_abort(struct usmc_sock *sk, int abort_reason)
{
	if (atomic_fetch_or(&sk->sh->flags, SKF_ABORTED) & SKF_ABORTED)
		return;
	STORE_RELAXED(&sk->sh->abort, (uint32_t)abort_reason);
	if (sk->st)
		STORE_RELAXED(&sk->st->abort, (uint8_t)abort_reason);
	STAT_INC(aborts[abort_reason]);
	if (sk->tx_p) {
		/* Tell the peer: RST in both directions. */
		cdc_prod_flags(sk->tx_p, CDC_F_ABORT, memory_order_seq_cst);
		cdc_cons_flags(sk->rx_c, CDC_F_ABORT | CDC_F_CLOSED, memory_order_seq_cst);
		if (sk->lgr)
			usmc_ring_peer(sk);
	}
	usmc_dbg(1, "fd %d: connection reset (%s)", sk->fd0, usmc_abort_name(abort_reason));
}
