// SPDX-License-Identifier: MIT
/*
 * shed.c - usmc gives its own descriptors back when the application runs
 * out of them.
 *
 * Accelerated connections keep descriptors TCP does not have (a link
 * group's file and doorbells, threads' waitsets), placed at the top of
 * RLIMIT_NOFILE (ifd.c).  A program that needs more of its table than TCP
 * leaves it would see EMFILE where TCP would not.  So when a call that
 * makes a descriptor fails with EMFILE (socket, accept, dup, open, pipe...:
 * SHED_RETRY, interpose.h), the wrapper asks usmc_shed() for room and
 * tries once more:
 *
 *   1. the sock_diag socket of the handshake's checks (clc_bind.c), this
 *      thread's idle waitsets (waitset.c), doorbells of link groups
 *      no connection of ours uses, and link groups nothing uses (lgr.c; an owned one only once the server
 *      side let go of every slot: a closed client's unread bytes need
 *      its files);
 *   2. else the accelerated connections of one link group move to TCP
 *      (migrate.c, reason limit_reached: the peer follows, every byte in
 *      order) until the last user lets go of its doorbells, and they go.  Its epoll
 *      registrations let go of the doorbell first, so no kernel entry
 *      outlives its descriptor and none is ever taken for a number the
 *      application gets next.
 *
 * New connections whose descriptors find no room stay TCP already
 * (usmc_conn_resources).  Locking: the descriptor table is walked with
 * references (usmc_fd_get); the connection moves under its own locks.
 *
 * Doorbell numbers are loaded without sk->lock (wait, poll, epoll_wait,
 * the kicks, close), by calls that hold a reference on the socket.  At
 * EMFILE the number we close is the only free one, so the retried call is
 * certain to get it, and a late drain or signal through a stale copy would
 * read or write the application's new socket.  So nothing is closed while
 * any call holds a socket that may have had doorbells (usmc_fd_quiet):
 * whoever let go of them stored -1 before our fence, so a call that starts
 * later never sees the number.  Otherwise this shed gives nothing back and
 * the application sees EMFILE, as it would have before usmc shed anything.
 * Numbers handed to a socket not yet in the table (accept, adoption) are
 * counted users from the moment they are handed out (usmc_lgr_bells).
 *
 * A signal handler may call open() or pipe() at EMFILE while its thread
 * is inside usmc holding a lock the shed needs: every lock a shed takes
 * first is taken bounded (usmc_lock_bounded); one that cannot be had gives
 * nothing back.  The locks it then takes (sk->lock, the family locks) are
 * held only by calls holding a reference, which usmc_fd_quiet excluded.
 */
#include "clc.h"
#include "clc_bind.h"
#include "conn.h"
#include "epoll.h"
#include "fdtab.h"
#include "lgr.h"
#include "log.h"
#include "migrate.h"
#include "shed.h"
#include "sock.h"
#include "stats.h"
#include "sys.h"
#include "tcp.h"
#include "waitset.h"

/* Close what usmc_lgr_shed may, if no call holds a socket that may have
 * had doorbells (but mine: the caller's own reference). */
static int shed_quiet(const struct usmc_sock *mine)
{
	/* After the -1 stores of whoever let go of doorbells (ours in
	 * shed_conn); pairs with a call's reference before its loads. */
	FENCE(memory_order_seq_cst);
	return usmc_fd_quiet(mine) ? usmc_lgr_shed() : 0;
}

/* A candidate: a connection with doorbells, accelerated or moved to TCP
 * by an earlier shed that could not let go of them.  Whether the peer
 * read all of ours (the move then sends nothing, so it never waits for
 * room on TCP inside the application's call) is checked under tx_lock by
 * usmc_conn_to_tcp (USMC_R_LIMIT: -EBUSY otherwise). */
static bool shed_candidate(struct usmc_sock *sk)
{
	uint32_t m = sk_mode(sk);

	return sk->kind == SK_CONN && (m == USMC_MODE_SMCD || m == USMC_MODE_TCP) && sk->lgr &&
	       sk->bell_own >= 0;
}

/* The connection is on TCP: its epoll registrations let go of the
 * doorbell, then so does the socket (the numbers close in shed_quiet). */
static bool shed_bells(struct usmc_sock *sk)
{
	if (!usmc_epoll_sock_resync(sk))
		return false;
	pthread_mutex_lock(&sk->lock);
	if (sk->lgr && sk->bell_own >= 0) {
		usmc_lgr_bells_put(sk->lgr);
		__atomic_store_n(&sk->bell_own, -1, __ATOMIC_SEQ_CST);
		__atomic_store_n(&sk->bell_peer, -1, __ATOMIC_SEQ_CST);
	}
	pthread_mutex_unlock(&sk->lock);
	return true;
}

/*
 * Move the connections of one link group to TCP until its doorbells close:
 * they are the link group's, so only its last user gives them back (a
 * group of one moves one connection).  Only while no other call holds a
 * socket (a call in progress would keep what we free: move nothing to TCP
 * for nothing); the group is the first the walk from the top meets.
 */
static bool shed_conn(void)
{
	long lim = usmc_nofile_limit(false), fd;
	const struct usmc_lgr *lg = NULL;

	for (fd = lim - 1; fd >= 0; fd--) {
		struct usmc_sock *sk = usmc_fd_get((int)fd);
		bool done = false;

		if (!sk)
			continue;
		if (shed_candidate(sk) && (!lg || sk->lgr == lg) && usmc_fd_quiet(sk)) {
			if (sk_mode(sk) == USMC_MODE_SMCD &&
			    !usmc_conn_to_tcp(sk, (int)fd, USMC_R_LIMIT))
				usmc_dbg(1, "fd %ld: moved to TCP to give descriptors back "
					 "(limit_reached)", fd);
			/* Its doorbells stay cached in the link group (users
			 * 0) if a call holds a socket now: a later shed
			 * closes them. */
			if (sk_mode(sk) == USMC_MODE_TCP) {
				lg = sk->lgr;
				done = shed_bells(sk) && shed_quiet(sk) > 0;
			}
		}
		usmc_sock_put(sk);
		if (done)
			return true;
	}
	return false;
}

/*
 * RLIMIT_AS was lowered (interpose_rlimit.c).  Every mapping counts against
 * it, and a link group reserves nslots x 2 rings (512 MiB by default), so
 * a child that lowers the limit after the fork (vsftpd's session: 200 MB)
 * would see its own mmap fail where TCP leaves room.  A server end that
 * runs on TCP by now never reads the client's link group again (rx.c in
 * TCP mode), so it lets go of it, as its last close would, and link
 * groups nothing uses go (usmc_lgr_shed).  Only while no call holds a
 * socket: calls load sk->lgr and the bell numbers without sk->lock.
 * Connections still on shared memory keep theirs: the budget of lgr.c
 * keeps new link groups within an eighth of the limit, and our listeners'
 * clients size them for it (usmc_lgr_fit).
 */
void usmc_shed_address_space(void)
{
	long lim = usmc_nofile_limit(false), fd;

	usmc_lgr_fit_forget();
	if (!usmc_fd_quiet(NULL))
		return;
	for (fd = 0; fd < lim; fd++) {
		struct usmc_sock *sk = usmc_fd_get((int)fd);

		if (!sk)
			continue;
		/* Clients size link groups for what we can map now. */
		if (sk->kind == SK_LISTEN && __atomic_load_n(&sk->lst, __ATOMIC_ACQUIRE))
			usmc_clc_ln_fit_lower(sk->lst, usmc_lgr_fit());
		if (sk->kind == SK_CONN && sk->role == 'S' && sk->lgr &&
		    sk_mode(sk) == USMC_MODE_TCP && usmc_epoll_sock_resync(sk)) {
			pthread_mutex_lock(&sk->lock);
			usmc_conn_detach_lgr(sk);
			pthread_mutex_unlock(&sk->lock);
		}
		usmc_sock_put(sk);
	}
	if (shed_quiet(NULL))
		usmc_dbg(1, "RLIMIT_AS lowered: unused link groups released");
}

bool usmc_shed(void)
{
	int n = usmc_bind_shed() + usmc_waitset_shed() + shed_quiet(NULL);

	if (n) {
		usmc_dbg(1, "out of descriptors: %d of usmc's closed", n);
		return true;
	}
	return shed_conn();
}
