// SPDX-License-Identifier: MIT
/*
 * close.c - shutdown(2) and the close protocol of a shared-memory connection.
 *
 * Mirrors TCP:
 *   shutdown(SHUT_WR)          -> CDC_F_DONE on our producer line (FIN):
 *                                 the peer reads what is queued, then 0
 *   shutdown(SHUT_RD)          -> local only, reads return 0
 *   close, nothing unread      -> DONE + CLOSED: peer reads the rest, then 0;
 *                                 its next send is swallowed, later ones EPIPE
 *   close with unread data,    -> ABORT (RST): the peer gets ECONNRESET
 *   or SO_LINGER {1, 0}
 * The real TCP socket is left alone until the last descriptor closes; its
 * FIN then doubles as the peer's wake-up and proof that we let go.
 */
#include "af_usmc.h"
#include "close.h"
#include "epoll.h"
#include "lgr.h"
#include "migrate.h"
#include "real.h"
#include "sock.h"

/*
 * shutdown(SHUT_WR) while our ring's bytes are still moving to TCP: the
 * kernel's FIN now would end the peer's stream short of them (a declined
 * client half-closing while its recv() moves them, seen as an empty
 * stream and EPIPE in test_decline_half_closed_client).  The pump sends
 * it after the last of them (SKF_SHUT_WR, migrate.c), now or in a later
 * call; if the move ended meanwhile, it goes here, once (SKF_TCP_SHUT).
 */
static int shutdown_moving(struct usmc_sock *sk, int fd, int how)
{
	atomic_fetch_or(&sk->sh->flags, SKF_SHUT_WR);
	usmc_migrate_pump(sk, fd, false);
	if (sk_mode(sk) != USMC_MODE_MIGRATING &&
	    !(atomic_fetch_or(&sk->sh->flags, SKF_TCP_SHUT) & SKF_TCP_SHUT) &&
	    real.shutdown(fd, SHUT_WR))
		return -errno;
	if (how == SHUT_RDWR) {
		sk_set_flag(sk, SKF_SHUT_RD);
		if (real.shutdown(fd, SHUT_RD))
			return -errno;
	}
	return 0;
}

int usmc_sock_shutdown(struct usmc_sock *sk, int fd, int how)
{
	uint32_t mode;

	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return -EINVAL;
	usmc_server_resolve(sk, fd, true);
	mode = sk_mode(sk);
	if (mode == USMC_MODE_MIGRATING && how != SHUT_RD)
		return shutdown_moving(sk, fd, how);
	if (mode != USMC_MODE_SMCD && mode != USMC_MODE_PROPOSED)
		return USMC_PASS;
	if (sk_flag(sk, SKF_CONNECTING))
		return -ENOTCONN;
	if (how != SHUT_WR) {
		sk_set_flag(sk, SKF_SHUT_RD);
		/* Wake our own sleepers: reads now return 0. */
		usmc_ring_own(sk);
	}
	if (how != SHUT_RD && !(atomic_fetch_or(&sk->sh->flags, SKF_SHUT_WR) & SKF_SHUT_WR)) {
		/* Writers serialise on tx_lock: DONE lands after the last byte. */
		if (!usmc_family_lock(&sk->sh->tx_lock)) {
			cdc_prod_flags(sk->tx_p, CDC_F_DONE, memory_order_release);
			usmc_family_unlock(&sk->sh->tx_lock);
		}
		usmc_kick_data(sk);
		usmc_ring_own(sk);
	}
	usmc_epoll_sock_edge(sk);
	(void)fd;
	return 0;
}

void usmc_conn_close_protocol(struct usmc_sock *sk)
{
	uint32_t mode = sk_mode(sk);
	uint64_t prod, head;

	if (mode != USMC_MODE_SMCD && mode != USMC_MODE_PROPOSED)
		return;
	if (sk_flag(sk, SKF_ABORTED))
		goto kick;
	if (!usmc_rx_view(sk, &head, &prod) || prod != head || sk_flag(sk, SKF_LINGER0)) {
		usmc_sock_abort(sk, USMC_A_LOCAL);
		return;
	}
	cdc_prod_flags(sk->tx_p, CDC_F_DONE, memory_order_release);
	cdc_cons_flags(sk->rx_c, CDC_F_CLOSED, memory_order_release);
kick:
	usmc_kick_data(sk);
	usmc_kick_space(sk);
}

/*
 * Process exit of the last process holding a connection (usmc_fd_exit):
 * what its last close would have told the peer and done to the slot,
 * with atomics only (exit() may interrupt one of our calls).  A client
 * whose proposal is still unanswered closes in its ring as well: the
 * server that takes the proposal reads what was queued, then EOF, and
 * its first send meets TCP's reset, as over TCP (it used to find a ring
 * nobody would read: every send succeeded, the read said ECONNRESET).
 * Anything else not settled (an undecided server, bytes moving to TCP)
 * is left to the kernel's FIN.
 */
void usmc_conn_exit(struct usmc_sock *sk)
{
	uint32_t mode = sk_mode(sk);

	/* Moved to TCP (done moving): neither end touches the slot again but
	 * to let go of it, which the last close would have done; left busy,
	 * the client's link group never hands it out again while we live
	 * (a forking server whose child outlived the parent's close, on a
	 * device that moves forked connections to TCP, piled up link groups
	 * until every fork slowed to a crawl). */
	if (sk->lgr && (mode == USMC_MODE_SMCD || mode == USMC_MODE_TCP ||
			(mode == USMC_MODE_PROPOSED && sk->role == 'C'))) {
		if (mode != USMC_MODE_TCP)
			usmc_conn_close_protocol(sk);
		if (sk->role == 'S')
			cdc_release_gen(&sk->ctrl->s, sk->gen);
		else
			usmc_lgr_slot_release(sk->lgr, sk->slot, sk->gen,
					      !sk_flag(sk, SKF_DECLINED));
	}
	usmc_stats_conn_free(sk->st, sk->st_start);
	sk->st = NULL;
}
