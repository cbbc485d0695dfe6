// SPDX-License-Identifier: MIT
/*
 * conn.c - a connection's state below the handshake: which path it is on
 * (usmc_sock_set_tcp, usmc_conn_established), its link group slot, its
 * listing in the statistics and its counts, the buffer sizes the program
 * set, and a reset.  Nothing here looks at TCP or talks to the peer's
 * process beyond the rings' flags: connect (af_usmc.c), accept
 * (accept.c), the move to TCP (migrate.c) and close (close.c) call it.
 */
#include "conn.h"
#include "log.h"
#include "real.h"
#include "sock.h"
#include "sys.h"

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
	sk->st_start = LOAD_RELAXED(&st->start_ns);
	STORE_RELAXED(&sk->sh->st_start, sk->st_start);
	STORE_RELEASE(&sk->sh->st_idx, usmc_stats_conn_index(st) + 1);
}

void usmc_conn_stats_close(struct usmc_sock *sk)
{
	uint32_t idx = atomic_exchange(&sk->sh->st_idx, 0);
	struct usmc_stats_conn *last = idx ? usmc_stats_conn_at(idx - 1) : NULL;

	usmc_stats_conn_free(sk->st, sk->st_start);
	/* The connection's latest entry, whoever made it, goes with it too
	 * (once: the start check): an adopter's after a hand-over, or ours
	 * when this copy was forked before we made it (a forking server
	 * whose client is a thread of its own: the child that left last
	 * left the entry listed). */
	if (last && last != sk->st)
		usmc_stats_conn_free(last, LOAD_RELAXED(&sk->sh->st_start));
	sk->st = NULL;
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
		sk_watch_changed(sk);
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
#define TX_FIRST_RESERVE	USMC_DMB_FLOOR	/* a page: idle connections cost little (tx.c grows it) */

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
	/* A cached limit may be stale: only the fresh one refuses.  fd < 0:
	 * the program holds it by no number (only a call in progress). */
	if (fd >= 0 && (long)fd + USMC_CONN_FDS >= usmc_ifd_base(false) &&
	    (long)fd + USMC_CONN_FDS >= usmc_ifd_base(true))
		return USMC_R_LIMIT;
	return 0;
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
