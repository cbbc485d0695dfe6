// SPDX-License-Identifier: MIT
/*
 * clc_proof.c - what a client proves before its proposal stands: the
 * kernel routes the connection into the listener's namespace (route.c,
 * with the interfaces the registry lists), and the connection's server
 * end belongs to a usmc listener, as the kernel reports it (clc_bind.c);
 * and, before it takes an accept, that the holder of that end decided.
 * Taking a proposal back, and sending it on TCP, live here too.
 */
#include "clc_bind.h"
#include "clc_inband.h"
#include "clc_proof.h"
#include "conn.h"
#include "lgr.h"
#include "log.h"
#include "registry.h"
#include "real.h"
#include "route.h"
#include "sock.h"

#include <string.h>

/*
 * Route truth (route.c): a listener in another namespace is ours only if
 * the kernel sends our packets to one of that namespace's interfaces.
 * Looked at once connected, when the next hop is resolved.
 */
bool usmc_route_proven(struct usmc_sock *sk, uint64_t ns)
{
	uint8_t mac[6];
	int rc;

	if (!ns)
		return true;
	rc = usmc_route_nexthop_mac(&sk->peer, mac);
	if (!rc && usmc_registry_netns_has_mac(ns, mac))
		return true;
	usmc_dbg(1, "fd %d: the route to the listener's namespace is not proven (%s)", sk->fd0,
		 rc ? strerror(-rc) : "next hop not one of its interfaces");
	return false;
}

/* The server end carries mark, or is where the kernel cannot tell us
 * (another namespace): only a plain "no" is proof against it.  Seeing
 * that the server decided already spares the look at its answer.
 * *pending (if asked, right after connect): the connection is not
 * established on the server's side (SYN_RECV), or has no socket there
 * beside a usmc listener of our namespace (clc_bind.h). */
static bool server_end_marked(struct usmc_sock *sk, int mark, bool *pending)
{
	int rc = usmc_bind_peer_marks(&sk->local, &sk->peer);
	char a[64];

	if (pending) {
		*pending = rc > 0 && (rc & USMC_BIND_PENDING);
		if (rc == -ENOENT && usmc_bind_listener_here(&sk->local, &sk->peer)) {
			*pending = true;
			rc = USMC_BIND_LISTENER;
		}
	}
	if (rc > 0 && (rc & USMC_BIND_DECIDED))
		sk->accept_proven = true;
	if (rc < 0 || (rc & mark))
		return true;
	usmc_dbg(1, "fd %d: the server end of %s is not a usmc %s: a record or answer we did not "
		 "get from it", sk->fd0, usmc_addr_str(&sk->peer, a, sizeof(a)),
		 mark == USMC_BIND_LISTENER ? "listener's" : "server's that accepted us");
	return false;
}

/*
 * A connect completed with our proposal posted (at once for a blocking
 * one: the proposal goes first, so a server already in accept() finds
 * it; the check costs it nothing): a route not proven, or a server end
 * that no usmc listener holds, takes the proposal back before any byte or
 * wake message follows it (a server that answered it already did get us:
 * then it stands, and its answer is checked as any).  So does a connection
 * the kernel has not established on the server's side (the listener's
 * accept queue was full: the handshake's last ACK was dropped, or a SYN
 * cookie answered): only a TCP segment from us completes it, as a TCP
 * client's request would, and a proposed client sends nothing on TCP (it
 * was never accepted, its client waited for ever: a proxy's backend with
 * listen(5), curl -Z hung).  On TCP (backlog_full) the request completes
 * it.  Unless we send the wake message anyway (a TCP_DEFER_ACCEPT listener's
 * connections stay in SYN_RECV until data comes, by design): that byte
 * completes it.  Under sk->lock:
 * another thread settling the same connect waits for the verdict before
 * it sends the wake message.
 */
void usmc_connect_check_done(struct usmc_sock *sk)
{
	bool pending = false;
	int reason = 0;

	pthread_mutex_lock(&sk->lock);
	/* Once per connect: af_usmc.c may check a non-blocking one early. */
	if (sk->connect_checked) {
		pthread_mutex_unlock(&sk->lock);
		return;
	}
	sk->connect_checked = true;
	if (sk_mode(sk) == USMC_MODE_PROPOSED) {
		reason = !usmc_route_proven(sk, sk->route_ns) ? USMC_R_UNCERTAIN :
			 !server_end_marked(sk, USMC_BIND_LISTENER, &pending) ? USMC_R_UNBOUND :
			 pending && !sk_flag(sk, SKF_WAKE_SEND) ? USMC_R_BACKLOG : 0;
	}
	/* No usmc listener holds the server end: whatever answered, no wake
	 * byte goes to it (an answer that stands is checked as any). */
	if (reason == USMC_R_UNBOUND)
		sk_clear_flag(sk, SKF_WAKE_SEND);
	if (reason && usmc_proposal_take_back(sk)) {
		sk_clear_flag(sk, SKF_WAKE_SEND);
		usmc_conn_uncount(sk);
		usmc_conn_unbind_slot(sk, false);
		usmc_sock_set_tcp(sk, reason);
	}
	sk->route_ns = 0;
	pthread_mutex_unlock(&sk->lock);
}

bool usmc_accept_proven(struct usmc_sock *sk)
{
	/* Decided (seen at connect): the answer there is its, whoever
	 * stored the same word first. */
	return sk->accept_proven || server_end_marked(sk, USMC_BIND_DECIDED, NULL);
}

/*
 * Take our proposal back while the server has not answered it (a server
 * that answered did get us: then it stands).  Caller holds sk->lock.
 */
bool usmc_proposal_take_back(struct usmc_sock *sk)
{
	uint64_t ans = LOAD_ACQUIRE(&sk->ctrl->s.answer);

	return sk_mode(sk) == USMC_MODE_PROPOSED &&
	       (CDC_ANS_GEN(ans) != sk->gen || CDC_ANS_KIND(ans) == CDC_ANS_NONE) &&
	       usmc_clc_withdraw(sk->ln, &sk->local);
}

void usmc_client_prop(const struct usmc_sock *sk, struct usmc_clc_prop *p)
{
	memset(p, 0, sizeof(*p));
	if (sk->lgr) {
		p->lgr_id = sk->lgr->id;
		p->slot = sk->slot;
		p->gen = sk->gen;
		usmc_dev_list(p->devs, sk->lgr->dev->id);
		p->inband = !usmc_dev_can(sk->lgr->dev, USMC_DEV_F_CLC_INDEX);
	}
	p->version = USMC_PROTO_VERSION;
	p->uid = (uint32_t)geteuid();
	p->pid = (uint32_t)usmc_getpid();
	p->client = sk->local;
}

/*
 * The proposal on TCP (clc_inband.h), sent once after it landed in the
 * index: the wake of a server that waits for it (+W), or, on a device
 * without USMC_DEV_F_CLC_INDEX, the only copy of its body.
 */
void usmc_client_send_wake(struct usmc_sock *sk, int fd)
{
	struct usmc_clc_msg m = { .type = USMC_CLC_MSG_PROPOSAL };

	if (!(atomic_fetch_and(&sk->sh->flags, ~SKF_WAKE_SEND) & SKF_WAKE_SEND))
		return;
	usmc_client_prop(sk, &m.p);
	if (sk->clc_inband && usmc_fault(USMC_FAULT_BODY_LATE))
		usleep(1500000);	/* a client stopped between its proposal and its body */
	if (usmc_clc_msg_send(fd, &m))
		return;
	if (sk->clc_inband)
		STAT_INC(clc_inband_tx);
	else
		STAT_INC(wake_bytes);
	STAT_INC(clc_msgs_tx);
}
