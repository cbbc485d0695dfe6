// SPDX-License-Identifier: MIT
/*
 * shed.c - usmc gives its own descriptors back when the application runs
 * out of them.
 *
 * An accelerated connection keeps descriptors TCP does not have (its
 * doorbells; link groups have their files), placed in the upper half of
 * RLIMIT_NOFILE (ifd.c).  A program that needs more of its table than TCP
 * leaves it would see EMFILE where TCP would not.  So when a call that
 * makes a descriptor (socket, accept) fails with EMFILE, the wrapper asks
 * usmc_shed() for room and tries once more:
 *
 *   1. doorbells cached for slots no connection of ours uses, and link
 *      groups nothing uses (lgr.c);
 *   2. else one accelerated connection moves to TCP (migrate.c, reason
 *      limit_reached: the peer follows, every byte in order) and its
 *      doorbells go.  Its epoll registrations let go of the doorbell
 *      first, so no kernel entry outlives its descriptor and none is
 *      ever taken for a number the application gets next.
 *
 * New connections whose descriptors find no room stay TCP already
 * (usmc_conn_resources).  Locking: the descriptor table is walked with
 * references (usmc_fd_get); the connection moves under its own locks.
 */
#include "af_usmc.h"
#include "epoll.h"
#include "fdtab.h"
#include "log.h"
#include "sock.h"
#include "stats.h"
#include "sys.h"

/* Nothing of ours unread by the peer: the move to TCP sends nothing, so
 * it never waits for room on TCP (the peer sends again what we did not
 * read, on its own time). */
static bool shed_candidate(struct usmc_sock *sk)
{
	struct ring_view v;

	return sk->kind == SK_CONN && sk_mode(sk) == USMC_MODE_SMCD && sk->lgr &&
	       sk->bell_own >= 0 && usmc_tx_view(sk, &v) && !rv_avail(&v);
}

/* Move one accelerated connection to TCP and close its doorbells. */
static bool shed_conn(void)
{
	long lim = usmc_nofile_limit(false), fd;

	for (fd = lim - 1; fd >= 0; fd--) {
		struct usmc_sock *sk = usmc_fd_get((int)fd);
		bool done = false;

		if (!sk)
			continue;
		if (shed_candidate(sk) && !usmc_conn_to_tcp(sk, (int)fd, USMC_R_LIMIT) &&
		    sk_mode(sk) == USMC_MODE_TCP) {
			usmc_epoll_sock_resync(sk);
			pthread_mutex_lock(&sk->lock);
			if (sk->lgr && sk->bell_own >= 0) {
				usmc_lgr_bells_use(sk->lgr, sk->slot, -1);
				sk->bell_own = sk->bell_peer = -1;
			}
			pthread_mutex_unlock(&sk->lock);
			usmc_dbg(1, "fd %ld: moved to TCP to give descriptors back (limit_reached)", fd);
			done = usmc_lgr_shed() > 0;
		}
		usmc_sock_put(sk);
		if (done)
			return true;
	}
	return false;
}

bool usmc_shed(void)
{
	int n = usmc_lgr_shed();

	if (n) {
		usmc_dbg(1, "out of descriptors: %d of usmc's closed", n);
		return true;
	}
	return shed_conn();
}
