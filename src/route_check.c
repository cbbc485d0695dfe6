// SPDX-License-Identifier: MIT
/*
 * route_check.c - route truth at connect: a client matched to a listener
 * in another namespace keeps its proposal only where the kernel's next hop
 * is one of that namespace's interfaces (route.c asks the kernel, the
 * registry lists the interfaces).
 */
#include "af_usmc.h"
#include "log.h"
#include "registry.h"
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

/*
 * A non-blocking connect that completed to somewhere the route does not
 * prove: take the proposal back before any byte or wake byte follows it
 * (a server that answered it already did get us: then it stands).  Under
 * sk->lock: another thread settling the same connect waits for the
 * verdict before it sends the wake byte.
 */
void usmc_route_check_connected(struct usmc_sock *sk)
{
	pthread_mutex_lock(&sk->lock);
	if (sk->route_ns && !usmc_route_proven(sk, sk->route_ns) && usmc_proposal_take_back(sk)) {
		sk_clear_flag(sk, SKF_WAKE_SEND);
		usmc_conn_uncount(sk);
		usmc_conn_unbind_slot(sk, false);
		usmc_sock_set_tcp(sk, USMC_R_UNCERTAIN);
	}
	sk->route_ns = 0;
	pthread_mutex_unlock(&sk->lock);
}
