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
#include "accept.h"
#include "af_usmc.h"
#include "clc_bind.h"
#include "clc_proof.h"
#include "conn.h"
#include "log.h"
#include "migrate.h"
#include "real.h"
#include "sock.h"
#include "tcp.h"


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
	rc = usmc_clc_ln_get(rec.id, true, ln);
	if (rc == -ESRCH || rc == -ENOENT || rc == -EINVAL) {
		/* Registered but dead, or its index planted (no regular
		 * file): clean up so the next connect is quick. */
		usmc_registry_gc();
		return rc == -EINVAL ? USMC_R_RUNDIR : USMC_R_PEER_GONE;
	}
	/* Its index does not fit our share of the address space (vmbudget.h)
	 * or of the descriptors (ifd.c). */
	if (rc == -E2BIG || rc == -EMFILE || rc == -ENFILE)
		return USMC_R_LIMIT;
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
	/* Under the lock a program's write of our mark's option takes
	 * (clc_bind.c usmc_bind_setsockopt): one that read us as not yet a
	 * client has reached the kernel before we mark below. */
	pthread_mutex_lock(&sk->lock);
	sk->kind = SK_CONN;
	sk->role = 'C';
	pthread_mutex_unlock(&sk->lock);
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
		reason = usmc_lgr_slot_get(ln->id, dev, usmc_clc_ln_fit(ln), &l, &slot, &gen);
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
		usmc_client_prop(sk, &prop);
		prop.epoch = epoch;
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
	sk->clc_inband = prop.inband;
	/* The proposal on TCP only for a server that accepted us undecided
	 * (clc.h), or as the only copy of its body (clc_inband.h). */
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
	} else if (sk_flag(sk, SKF_WAKE_SEND)) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };

		/* Our PROPOSAL is due once connected, and the server may wait
		 * for it (at accept, or when it acts): on loopback the
		 * handshake is usually over already, so send it now rather
		 * than when the program next looks at the socket (a reactor
		 * that is also the server would make its own accept wait).
		 * The connect itself stays the program's to see complete. */
		if (real.poll(&p, 1, 0) == 1 && p.revents == POLLOUT) {
			usmc_connect_check_done(sk);
			usmc_client_send_wake(sk, fd);
		}
	}
	errno = err;
	return rc;
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
			usmc_connect_settle(sk, fd, (unsigned int)tcp_ev);
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
