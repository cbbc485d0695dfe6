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

static int server_accept(struct usmc_sock *sk, int fd, const struct usmc_clc_prop *p)
{
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof(ss);
	struct usmc_cdc_ctrl *c;
	struct usmc_addr srv;
	struct usmc_lgr *l;
	int reason, rc;

	/* Our controls declined after the client proposed: decline it. */
	reason = usmc_clc_ln_off_reason(sk->ln);
	if (reason)
		return reason;
	/* stdin, stdout or stderr: stdio writes past us (stdstream.c). */
	if (fd <= STDERR_FILENO)
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
	reason = usmc_conn_resources(sk, fd);
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
 * run out of), then one byte on TCP that wakes the client wherever it
 * sleeps; it consumes that byte (clc.h).  Best effort: tell the client's
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
	static const char decline_byte = 0;
	struct pollfd pf = { .fd = fd, .events = POLLRDHUP };
	bool gone, queued = false, closed = false;
	struct usmc_lgr *l;

	gone = sys_poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR));
	if (!usmc_clc_answer(ln, &p->client, reason))
		return -1;
	real.send(fd, &decline_byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (usmc_lgr_attach(p->lgr_id, p->devs[0], &l))
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

/* Act on a match result; caller holds sk->lock (installed) or owns sk
 * exclusively (at accept: fd not handed to the application yet).  What
 * came on TCP meanwhile is looked at by the caller once it dropped the
 * lock (installed): a peer that moved to TCP already is followed, which
 * takes the lock (usmc_migrate_follow). */
static void server_settle(struct usmc_sock *sk, int fd, int reason, const struct usmc_clc_prop *p,
			  bool installed)
{
	if (!reason) {
		reason = server_accept(sk, fd, p);
		if (reason == USMC_R_UNBOUND) {
			/* Posted by someone else: consumed without a decline
			 * byte, and no wake byte will come from the client. */
			usmc_clc_answer(sk->ln, &p->client, reason);
		} else if (reason && reason != USMC_R_WITHDRAWN) {
			int lost = server_decline(sk->ln, fd, p, reason);

			if (lost < 0)
				reason = USMC_R_WITHDRAWN;
			else if (lost)
				sk_set_flag(sk, SKF_LOST);	/* reads: ECONNRESET */
		}
		/* Either way a client we made wait sent (or will send) one
		 * wake byte. */
		if (p->wake && reason != USMC_R_UNBOUND)
			sk_set_flag(sk, SKF_WAKEBYTE);
		/* On stdin, stdout or stderr stdio's reads are not ours:
		 * the wake byte must be gone before they begin. */
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
 * its wake byte, if it sends one, must not reach the application: wait for
 * it here.
 */
static void server_untracked(struct usmc_sock *lsk, int nfd, const struct sockaddr *sa,
			     socklen_t salen)
{
	struct usmc_clc_prop prop;
	struct usmc_addr peer;
	char c;

	usmc_stats_attach();
	STAT_INC(tcp_conns);
	STAT_INC(fallback[USMC_R_MEM]);
	STAT_INC(fallback_server[USMC_R_MEM]);
	if (!lsk->lst || usmc_addr_from_sa(&peer, sa, salen) ||
	    usmc_clc_match(lsk->lst, &peer, &prop, CLC_DECIDE))
		return;
	if (server_decline(lsk->lst, nfd, &prop, USMC_R_MEM) < 0 || !prop.wake)
		return;
	for (;;) {
		struct pollfd p = { .fd = nfd, .events = POLLIN };

		if (real.recv(nfd, &c, 1, MSG_DONTWAIT) >= 0 || (errno != EAGAIN && errno != EINTR))
			return;
		sys_poll(&p, 1, -1);
	}
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
		 * undecided, which would leave a late client's wake byte to
		 * stdio's reads, which are not ours. */
		reason = usmc_clc_match(sk->ln, &sk->peer, &prop,
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
	reason = usmc_clc_match(sk->ln, &sk->peer, &prop, decide ? CLC_DECIDE : CLC_PEEK);
	if (reason == USMC_CLC_PENDING) {
		/* No proposal: TCP bytes, EOF or an error from a client that is
		 * not usmc (or proposed too late) settle it; nothing settles
		 * nothing.  A look, not a peek: a peek would move the program's
		 * SO_PEEK_OFF (copied from the listener). */
		struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };

		if (sys_poll(&p, 1, 0) <= 0)
			goto out;
		reason = usmc_clc_match(sk->ln, &sk->peer, &prop, CLC_DECIDE);
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
