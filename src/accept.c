// SPDX-License-Identifier: MIT
/*
 * accept.c - the server side of the CLC handshake.
 *
 * accept() matches the connection's 4-tuple in the listener's CLC index
 * (clc.h).  A proposal there is accepted once the client's link group is
 * attached and our side of the slot bound, and answered in the control
 * block; anything the server cannot do is declined in the index, with a
 * counted reason.  No proposal yet: the connection stays undecided until
 * the application acts on it (usmc_server_resolve()), so that a client
 * still inside connect() is not missed.
 */
#include "accept.h"
#include "clc.h"
#include "clc_bind.h"
#include "clc_inband.h"
#include "conn.h"
#include "fdtab.h"
#include "log.h"
#include "migrate.h"
#include "options.h"
#include "real.h"
#include "sock.h"
#include "stats.h"
#include "sys.h"
#include "tcp.h"
#include "wait.h"

#include <netinet/in.h>

/* A decline on TCP (clc_inband.h): the client takes it as the one
 * message owed it once it saw the decline in the index. */
static void send_decline(int fd, const struct usmc_clc_prop *p, int reason)
{
	struct usmc_clc_msg m = { .type = USMC_CLC_MSG_DECLINE, .reason = (uint32_t)reason, .p = *p };

	if (!usmc_clc_msg_send(fd, &m))
		STAT_INC(clc_msgs_tx);
}

static int server_accept(struct usmc_sock *sk, int fd, const struct usmc_clc_prop *p)
{
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof(ss);
	struct usmc_cdc_ctrl *c;
	struct usmc_addr srv;
	struct usmc_lgr *l;
	int reason, rc, app;

	/* Our controls declined after the client proposed: decline it. */
	reason = usmc_clc_ln_off_reason(sk->ln);
	if (reason)
		return reason;
	/* What depends on the program's number: a fork or exec walk settles
	 * through usmc's own duplicate (fdtab.c held_fd), high up. */
	app = usmc_ifd_is(fd) ? usmc_sock_app_fd(sk, -1) : fd;
	/* stdin, stdout or stderr: stdio writes past us (stdstream.c). */
	if (app >= 0 && app <= STDERR_FILENO)
		return USMC_R_STDIO;
	reason = usmc_clc_prop_check(p, &sk->peer);
	if (reason)
		return reason;
	/* Our address: the listener's, unless it was bound to a wildcard. */
	if (usmc_addr_is_any(&sk->local) && !getsockname(fd, (struct sockaddr *)&ss, &sslen) &&
	    !usmc_addr_from_sa(&srv, (struct sockaddr *)&ss, sslen))
		sk->local = srv;
	/* Only the holder of the client end proposes for it (clc_bind.c). */
	if (!usmc_bind_peer_marked(&sk->local, &sk->peer, USMC_BIND_DECIDED)) {
		usmc_dbg(1, "accept fd %d: a proposal the client end did not make", fd);
		return USMC_R_UNBOUND;
	}
	reason = usmc_conn_resources(sk, app);
	if (reason)
		return reason;
	/* Under an address-space limit: clients size link groups for us. */
	usmc_clc_ln_fit_lower(sk->ln, usmc_lgr_fit());
	rc = usmc_lgr_attach(p->lgr_id, p->devs[0], &l);
	if (rc) {
		/* A user the policy does not allow is a decision, not an error. */
		if (rc != -EPERM && rc != -EACCES && rc != -E2BIG)
			STAT_INC(handshake_errors);
		usmc_dbg(1, "accept fd %d: cannot attach link group %016llx: %s", fd,
			 (unsigned long long)p->lgr_id, strerror(-rc));
		return rc == -EPERM || rc == -EACCES ? USMC_R_PERMISSION :
		       rc == -ENOENT ? USMC_R_PEER_GONE :
		       rc == -EMFILE || rc == -ENFILE || rc == -E2BIG ? USMC_R_LIMIT : USMC_R_MEM;
	}
	if (p->slot >= l->nslots) {
		usmc_lgr_put(l);
		STAT_INC(handshake_errors);
		return USMC_R_INTERNAL;
	}
	c = usmc_lgr_ctrl(l, p->slot);
	/* The control block must describe exactly this connection. */
	/* (A client that already closed left the slot draining: still ours.) */
	if (LOAD_ACQUIRE(&c->c.gen) != p->gen || LOAD_RELAXED(&c->c.state) == SLOT_FREE ||
	    !usmc_addr_ip_eq(&c->c.client, &sk->peer) || c->c.client.port != sk->peer.port ||
	    !usmc_addr_ip_eq(&c->c.server, &sk->local) || c->c.server.port != sk->local.port) {
		STAT_INC(handshake_errors);
		usmc_lgr_put(l);
		return USMC_R_INTERNAL;
	}
	rc = usmc_conn_bind_slot(sk, l, p->slot, p->gen, true);
	if (rc) {
		usmc_dbg(1, "accept fd %d: slot %u of link group %016llx: %s", fd, p->slot,
			 (unsigned long long)p->lgr_id, strerror(-rc));
		usmc_lgr_put(l);
		return rc == -EMFILE || rc == -ENFILE ? USMC_R_LIMIT : USMC_R_MEM;
	}
	/* The client takes our accept only from a server end that says we
	 * decided (clc_bind.c): marked before the answer exists. */
	if (usmc_bind_mark(fd, USMC_BIND_DECIDED)) {
		usmc_conn_unbind_slot(sk, false);
		STAT_INC(handshake_errors);
		return USMC_R_INTERNAL;
	}
	/* Ready: take the proposal.  Lost only to the client withdrawing
	 * (it saw TCP bytes), which then goes on over TCP by itself. */
	if (!usmc_clc_answer(sk->ln, &sk->peer, 0)) {
		usmc_conn_unbind_slot(sk, false);
		return USMC_R_WITHDRAWN;
	}
	cdc_server_pid(&c->s, (uint32_t)usmc_getpid());
	/* The answer; pairs with the acquire load in usmc_sock_refresh(). */
	cdc_answer(&c->s, CDC_ANSWER(p->gen, CDC_ANS_ACCEPT, 0));
	usmc_conn_established(sk);
	/* The client may already sleep on its first read. */
	usmc_kick_data(sk);
	usmc_kick_space(sk);
	return 0;
}

/*
 * Decline a matched proposal: in the index entry (needs nothing we may have
 * run out of), then a DECLINE on TCP that wakes the client wherever it
 * sleeps; it takes that message (clc_inband.h).  Best effort: tell the client's
 * link group we will never use the slot, so it is free again at once.
 *
 * Returns -1 when the client withdrew first, 1 when the client can no
 * longer move the bytes it queued to TCP (reads must end in ECONNRESET, not
 * in a clean EOF short of them), else 0.  A live client never ends its TCP
 * stream while it waits for our answer (shutdown(SHUT_WR) only raises DONE
 * in the ring; its FIN follows the migrated bytes), so a hang-up seen
 * before the answer means it closed or died; after the answer it may just
 * be a client that moved its bytes and half-closed.  CLOSED on its ring
 * means it closed while still proposed: its bytes stay in the ring.
 */
static int server_decline(struct usmc_clc_ln *ln, int fd, const struct usmc_clc_prop *p,
			  int reason)
{
	struct pollfd pf = { .fd = fd, .events = POLLRDHUP };
	bool gone, queued = false, closed = false;
	struct usmc_lgr *l;

	gone = sys_poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR));
	if (!usmc_clc_answer(ln, &p->client, reason))
		return -1;
	send_decline(fd, p, reason);
	if (!p->lgr_id || usmc_lgr_attach(p->lgr_id, p->devs[0], &l))
		return gone;	/* its link group is gone: so are its bytes, if any */
	if (p->slot < l->nslots) {
		struct usmc_cdc_ctrl *c = usmc_lgr_ctrl(l, p->slot);

		if (LOAD_ACQUIRE(&c->c.gen) == p->gen) {
			queued = LOAD_ACQUIRE(&c->c2s_p.prod) != 0;
			closed = LOAD_ACQUIRE(&c->s2c_c.flags) & CDC_F_CLOSED;
			cdc_release_gen(&c->s, p->gen);
		}
	}
	usmc_lgr_put(l);
	return (gone || closed) && queued;
}

/* The client's PROPOSAL message on fd, looked for until deadline (in the
 * past: one look): 0 with *m, -ETIMEDOUT, or usmc_clc_msg_take()'s error
 * (bytes that are no such message, EOF, a reset). */
static int proposal_take(int fd, uint64_t deadline, struct usmc_clc_msg *m)
{
	for (;;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		int rc = usmc_clc_msg_take(fd, CLC_MSG_BIT(USMC_CLC_MSG_PROPOSAL), m);

		if (rc != -EAGAIN && rc != -EINPROGRESS && rc != -EINTR)
			return rc;
		if (usmc_now_ns() >= deadline)
			return -ETIMEDOUT;
		if (rc == -EINPROGRESS)
			sys_poll(NULL, 0, 1);	/* the rest is a segment behind */
		else
			sys_poll(&pf, 1, (int)usmc_ms_left(deadline));
	}
}

/*
 * The body of an in-band proposal (clc_inband.h): its client sends it on
 * TCP right after the proposal landed in the index, so once the entry says
 * PROPOSED it is on its way.  0 with p filled, or with p->inband_fail set
 * when it cannot be had (the proposal is then declined); USMC_CLC_PENDING
 * while it is not whole (how: CLC_PEEK) or did not come in time (at
 * accept: we stay undecided, and it wakes us).  At accept we wait for it
 * briefly (the client sends it right after its compare-and-swap, or once
 * its non-blocking connect is seen done), so that a server usually decides
 * at accept() as on loopback; deciding, as for a client still inside
 * connect() (clc.h): one that does not come by then (a client stopped in
 * between, or a client whose program has not looked at its connect yet)
 * is declined, and skipped when it comes.
 */
static int inband_body(int fd, struct usmc_clc_prop *p, int how)
{
	uint64_t wait = how == CLC_PEEK ? 0 : how == CLC_DECIDE ? CLC_DECIDE_WAIT_NS :
				 CLC_INBAND_ACCEPT_WAIT_NS;
	struct usmc_clc_msg m;
	int rc;

	if (!p->inband)
		return 0;
	rc = proposal_take(fd, usmc_now_ns() + wait, &m);
	if (!rc) {
		STAT_INC(clc_msgs_rx);
		STAT_INC(clc_inband_rx);
		*p = m.p;		/* taken: nothing more is owed */
		p->inband = true;
		return 0;
	}
	if (rc == -ETIMEDOUT) {
		if (how != CLC_DECIDE)
			return USMC_CLC_PENDING;
		p->inband_fail = USMC_R_SERVER_TCP;
		p->wake = true;		/* owed: skipped when it comes */
		return 0;
	}
	/* No proposal, and bytes that are the program's (a broken or
	 * hostile client), or its end before it. */
	if (rc == -EPROTO)
		STAT_INC(handshake_errors);
	p->inband_fail = rc == -EPROTO ? USMC_R_INTERNAL : USMC_R_PEER_GONE;
	p->wake = false;
	return 0;
}

/* The proposal for sk's connection, its body too when it travels on TCP
 * (how: clc.h CLC_PEEK, CLC_ACCEPT, CLC_DECIDE). */
static int server_match(struct usmc_sock *sk, int fd, struct usmc_clc_prop *p, int how)
{
	int reason = usmc_clc_match(sk->ln, &sk->peer, p, how);

	return reason ? reason : inband_body(fd, p, how);
}

/* Act on a match result; caller holds sk->lock (installed) or owns sk
 * exclusively (at accept: fd not handed to the application yet).  What
 * came on TCP meanwhile is looked at by the caller once it dropped the
 * lock (installed): a peer that moved to TCP already is followed, which
 * takes the lock (usmc_migrate_follow). */
static void server_settle(struct usmc_sock *sk, int fd, int reason, const struct usmc_clc_prop *p,
			  bool installed)
{
	if (!reason) {
		reason = p->inband_fail ? p->inband_fail : server_accept(sk, fd, p);
		if (reason == USMC_R_UNBOUND) {
			/* Posted by someone else: consumed without a decline
			 * byte, and no wake message will come from the client. */
			usmc_clc_answer(sk->ln, &p->client, reason);
		} else if (reason && reason != USMC_R_WITHDRAWN) {
			int lost = server_decline(sk->ln, fd, p, reason);

			if (lost < 0)
				reason = USMC_R_WITHDRAWN;
			else if (lost)
				sk_set_flag(sk, SKF_LOST);	/* reads: ECONNRESET */
		}
		/* Either way a client we made wait sent (or will send) one
		 * wake message. */
		if (p->wake && reason != USMC_R_UNBOUND)
			sk_set_flag(sk, SKF_WAKEBYTE);
		/* On stdin, stdout or stderr stdio's reads are not ours:
		 * the wake message must be gone before they begin. */
		if (reason == USMC_R_STDIO)
			usmc_tcp_take_owed(sk, fd);
		if (!reason) {
			if (!installed)
				usmc_check_tcp_fd(sk, fd, false);
			return;
		}
	}
	/* No proposal because we told clients we were short or off: say why. */
	if (reason == USMC_R_PEER_NOT_USMC && sk->ln && usmc_clc_ln_off_reason(sk->ln))
		reason = usmc_clc_ln_off_reason(sk->ln);
	else if (reason == USMC_R_PEER_NOT_USMC && sk->ln &&
		 (LOAD_RELAXED(&sk->ln->idx->degraded) & CLC_LN_BUSY))
		reason = USMC_R_LIMIT;
	usmc_sock_set_tcp(sk, reason);
}

/*
 * Out of memory for even a socket record: the connection stays untracked
 * plain TCP.  A client that proposed must still learn it (declined), and
 * its proposal on TCP, if it sends one, must not reach the application:
 * wait for it here, as long as a deciding server waits for a body
 * (inband_body): a client that is also this program, its connect not
 * looked at yet, sends it only once we return.  Then the application
 * reads it as data (no record to skip it with).
 */
static void server_untracked(struct usmc_sock *lsk, int nfd, const struct sockaddr *sa,
			     socklen_t salen)
{
	struct usmc_clc_prop prop;
	struct usmc_clc_msg m;
	struct usmc_addr peer;

	usmc_stats_attach();
	STAT_INC(tcp_conns);
	STAT_INC(fallback[USMC_R_MEM]);
	STAT_INC(fallback_server[USMC_R_MEM]);
	if (!lsk->lst || usmc_addr_from_sa(&peer, sa, salen) ||
	    usmc_clc_match(lsk->lst, &peer, &prop, CLC_DECIDE))
		return;
	if (server_decline(lsk->lst, nfd, &prop, USMC_R_MEM) < 0 || !prop.wake)
		return;
	(void)proposal_take(nfd, usmc_now_ns() + CLC_DECIDE_WAIT_NS, &m);
}

int usmc_sock_accept(struct usmc_sock *lsk, int lfd, struct sockaddr *sa, socklen_t *salen,
		     int flags)
{
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof(ss);
	struct usmc_clc_prop prop;
	struct usmc_sock *sk;
	int nfd, reason;

	nfd = real.accept4(lfd, (struct sockaddr *)&ss, &sslen, flags);
	if (nfd < 0)
		return nfd;
	if (sa && salen) {
		memcpy(sa, &ss, MIN((size_t)*salen, (size_t)sslen));
		*salen = sslen;
	}
	sk = usmc_sock_new(nfd, SK_CONN, lsk->ops);
	if (!sk) {
		server_untracked(lsk, nfd, (struct sockaddr *)&ss, sslen);
		return nfd;
	}
	sk->role = 'S';
	usmc_stats_attach();
	usmc_addr_from_sa(&sk->peer, (struct sockaddr *)&ss, sslen);
	sk->local = lsk->bound;
	if (flags & SOCK_NONBLOCK)
		sk_set_flag(sk, SKF_NONBLOCK);
	usmc_sock_buf_inherit(sk, lsk);
	/* The kernel copies SO_LINGER to the sockets a listener accepts. */
	if (sk_flag(lsk, SKF_LINGER0))
		sk_set_flag(sk, SKF_LINGER0);
	/* ... and the inet options (clc_bind.c). */
	sk_set_flag(sk, LOAD_RELAXED(&lsk->sh->flags) & (SKF_APP_NOPORT | SKF_APP_RFC4884));

	if (!lsk->lst) {
		reason = usmc_policy_check(lsk->bound.port, NULL);
		if (!reason)
			reason = sk_flag(lsk, SKF_HANDED) ? USMC_R_HANDOVER :
			 lsk->lst_reason ? lsk->lst_reason : USMC_R_RUNDIR;
		usmc_sock_set_tcp(sk, reason);
	} else {
		sk->ln = usmc_clc_ln_ref(lsk->lst);
		/* The controls of now (usmc ctl), and a receive option rings
		 * cannot honour set on the listener (the kernel copied it to
		 * this socket): later clients stay on TCP by themselves, one
		 * that proposed is declined (server_accept). */
		reason = usmc_policy_check(lsk->bound.port, NULL);
		if (!reason && sk_flag(lsk, SKF_RXOPT))
			reason = USMC_R_SOCKOPT;
		usmc_clc_ln_off(sk->ln, reason);
		/* Short of descriptors: later clients fall back by themselves. */
		usmc_clc_ln_busy(sk->ln, usmc_conn_resources(sk, nfd) == USMC_R_LIMIT);
		/* On stdin, stdout or stderr: TCP now (stdstream.c), not
		 * undecided, which would leave a late client's wake message to
		 * stdio's reads, which are not ours. */
		reason = server_match(sk, nfd, &prop,
				      nfd <= STDERR_FILENO ? CLC_DECIDE : CLC_ACCEPT);
		if (reason == USMC_CLC_PENDING) {
			/* Rarely: the client is still between connect() and its
			 * proposal.  Decide when the application acts. */
			sk_set_mode(sk, USMC_MODE_UNDECIDED);
		} else {
			server_settle(sk, nfd, reason, &prop, false);
		}
	}
	usmc_conn_stats_open(sk, nfd);
	if (usmc_fd_install(nfd, sk))
		usmc_sock_put(sk);
	return nfd;
}

void usmc_server_resolve_quick(struct usmc_sock *sk, int fd)
{
	if (usmc_clc_has_proposal(sk->ln, &sk->peer))
		usmc_server_resolve(sk, fd, false);
}

void usmc_server_resolve(struct usmc_sock *sk, int fd, bool decide)
{
	struct usmc_clc_prop prop;
	bool matched = false;
	int reason;

	if (sk_mode(sk) != USMC_MODE_UNDECIDED)
		return;
	pthread_mutex_lock(&sk->lock);
	if (sk_mode(sk) != USMC_MODE_UNDECIDED)
		goto out;
	reason = server_match(sk, fd, &prop, decide ? CLC_DECIDE : CLC_PEEK);
	if (reason == USMC_CLC_PENDING) {
		/* No proposal: TCP bytes, EOF or an error from a client that is
		 * not usmc (or proposed too late) settle it; nothing settles
		 * nothing.  A look, not a peek: a peek would move the program's
		 * SO_PEEK_OFF (copied from the listener). */
		struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };

		if (sys_poll(&p, 1, 0) <= 0)
			goto out;
		reason = server_match(sk, fd, &prop, CLC_DECIDE);
	}
	server_settle(sk, fd, reason, &prop, true);
	matched = !reason;
	if (sk->st) {
		/* Listed at accept() with no link group yet: now it has one. */
		if (sk->lgr) {
			sk->st->lgr_id = sk->lgr->id;
			sk->st->slot = sk->slot;
			sk->st->ring_size = sk->size;
		}
		sk->st->local = sk->local;
		STORE_RELAXED(&sk->st->mode, (uint8_t)sk_mode(sk));
	}
out:
	pthread_mutex_unlock(&sk->lock);
	/* Accepted: what came on TCP before (server_settle). */
	if (matched && sk_mode(sk) == USMC_MODE_SMCD)
		usmc_check_tcp_fd(sk, fd, true);
}
