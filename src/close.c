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
 * FIN then doubles as the peer's wake-up and proof that we let go.  That
 * last close (the socket's release, in whichever process it happens) settles
 * what is still open: an undecided server end, the peer's CLC message, bytes
 * moving to TCP, the slot.
 */
#include "accept.h"
#include "close.h"
#include "conn.h"
#include "listener.h"
#include "migrate.h"
#include "real.h"
#include "sock.h"
#include "tcp.h"



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
		/* Moved meanwhile (our look at the mode above was before it):
		 * the peer reads TCP now.  A move of ours (usmc_conn_to_tcp)
		 * or a pump that ended one (under tx_lock, taken above) is TCP
		 * here, and one still under way sees our flag (above). */
		atomic_thread_fence(memory_order_seq_cst);
		mode = sk_mode(sk);
		if (mode == USMC_MODE_MIGRATING)
			return shutdown_moving(sk, fd, how);
		if (mode == USMC_MODE_TCP) {
			usmc_conn_fin_to_tcp(sk, fd);
			if (how == SHUT_RDWR)
				real.shutdown(fd, SHUT_RD);	/* reads come from TCP now */
		}
	}
	sk_watch_edge(sk);
	return 0;
}

/* Would the close be an orderly one (DONE + CLOSED), not a reset? */
static bool close_is_orderly(const struct usmc_sock *sk)
{
	uint64_t prod, head;

	return !sk_flag(sk, SKF_ABORTED) && !sk_flag(sk, SKF_LINGER0) &&
	       usmc_rx_view(sk, &head, &prod) && prod == head;
}

/*
 * The last close of a connection.  An orderly close of a shared-memory
 * connection sends the kernel's FIN before the ring says CLOSED: the peer,
 * woken by either, closes after our FIN reached its socket, so its close
 * is the passive one (LAST_ACK) and only this end goes through TIME_WAIT,
 * as over TCP.  Flags first made every close a simultaneous one: both
 * kernels in TIME_WAIT, twice TCP's count (a client opening connections
 * to one server port across namespaces runs out of ports that much
 * sooner).  The peer that sees the FIN first reads the ring to its end,
 * then 0 (rx.c: the FIN of a peer whose bytes we all read).
 */
void usmc_conn_close(struct usmc_sock *sk, int fd)
{
	if (fd >= 0 && sk_mode(sk) == USMC_MODE_SMCD && close_is_orderly(sk))
		real.shutdown(fd, SHUT_WR);
	usmc_conn_close_protocol(sk);
}

void usmc_conn_close_protocol(struct usmc_sock *sk)
{
	uint32_t mode = sk_mode(sk);

	if (mode != USMC_MODE_SMCD && mode != USMC_MODE_PROPOSED)
		return;
	if (sk_flag(sk, SKF_ABORTED))
		goto kick;
	if (!close_is_orderly(sk)) {
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
 * Process exit of the last process holding a connection (usmc_socks_exit):
 * what its last close would have told the peer and done to the slot,
 * with atomics and the FIN's shutdown only (exit() may interrupt one of
 * our calls).  A client
 * whose proposal is still unanswered closes in its ring as well: the
 * server that takes the proposal reads what was queued, then EOF, and
 * its first send meets TCP's reset, as over TCP (it used to find a ring
 * nobody would read: every send succeeded, the read said ECONNRESET).
 * Anything else not settled (an undecided server, bytes moving to TCP)
 * is left to the kernel's FIN.
 */
void usmc_conn_exit(struct usmc_sock *sk, int fd)
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
			usmc_conn_close(sk, fd);
		if (sk->role == 'S')
			cdc_release_gen(&sk->ctrl->s, sk->gen);
		else
			usmc_lgr_slot_release(sk->lgr, sk->slot, sk->gen,
					      !sk_flag(sk, SKF_DECLINED));
	}
	usmc_conn_stats_close(sk);
}

/*
 * A side that only ever wrote closes with the peer's CLC message unread (a
 * declined client, the server's DECLINE message; a server, the client's wake
 * byte): the kernel's close would reset the connection for it, and the
 * peer's read of our last bytes would say ECONNRESET (vsftpd: 426 after a
 * whole upload; lftp then slept through its reconnect delay).  The byte
 * is sent right after what told us it is owed: a short wait, bounded (a
 * peer stopped in between costs a second, not a hang).
 */
#define CLOSE_OWED_WAIT_MS	1000

/* From the last descriptor's close (in whichever process it happens). */
void usmc_conn_release(struct usmc_sock *sk, int fd)
{
	/* Undecided at close: closing is acting, so decide; a usmc client's
	 * proposal (waited for if in flight) is accepted, and the client sees
	 * an orderly SMC close rather than a vanished peer. */
	if (sk_mode(sk) == USMC_MODE_UNDECIDED && fd >= 0)
		usmc_server_resolve(sk, fd, true);
	if (sk_flag(sk, SKF_COUNT_LATER))
		usmc_sock_count_late(sk, fd);
	/* A client's connect that failed (refused, or reset before the
	 * server took the proposal) and was closed without a look: no server
	 * will ever take the proposal.  Take it back as the look would have
	 * (uncounted, its slot free again); still connecting, or connected:
	 * it stays (below). */
	if (fd >= 0 && sk->role == 'C' && sk_mode(sk) == USMC_MODE_PROPOSED)
		usmc_sock_proposal_reset(sk, fd);
	/* Never close with the peer's CLC message unread (above). */
	if (fd >= 0 && sk_close_owes_byte(sk))
		usmc_tcp_take_owed_ms(sk, fd, SKF_WAKEBYTE, CLOSE_OWED_WAIT_MS);
	if (sk->lgr) {
		bool attached = true, aborted;
		uint32_t mode;

		/* The peer moved to TCP while we never looked (handed over to
		 * another process, exec...): the bytes it had not read from
		 * our ring follow it there before our FIN. */
		if (fd >= 0 && sk_peer_moved(sk))
			usmc_migrate_follow(sk, fd);
		/* A proposed client leaves its proposal: the server may still
		 * match it and read the bytes we queued (then see our close),
		 * unless it declined already.  A moving end sends what it can. */
		if (fd >= 0 && (sk->role == 'C' || sk_mode(sk) == USMC_MODE_MIGRATING))
			usmc_migrate_on_close(sk, fd);
		mode = sk_mode(sk);
		aborted = sk_flag(sk, SKF_ABORTED);
		/* The server's end sent its FIN without a usmc close (killed,
		 * or exited with threads): ask whether anyone holds it, before
		 * our FIN (after it, an end still held goes to TIME_WAIT too). */
		if (sk->role == 'C' && mode == USMC_MODE_SMCD && sk_flag(sk, SKF_TCP_EOF))
			usmc_lgr_slot_ask(sk->lgr, sk->slot, sk->gen);
		usmc_conn_close(sk, fd);
		/* Closed with the peer's bytes unread: TCP resets, and so does
		 * our kernel socket, so that the peer's kernel shows what TCP's
		 * would (CLOSE in TCP_INFO, ENOTCONN from getpeername). */
		if (fd >= 0 && !aborted && mode == USMC_MODE_SMCD && sk_flag(sk, SKF_ABORTED))
			real.setsockopt(fd, SOL_SOCKET, SO_LINGER, &(struct linger){ 1, 0 },
					sizeof(struct linger));
		/* Declined (still moving bytes to TCP, or done with that):
		 * the server let go, and may not even be able to map our
		 * link group to say so in the slot (another user). */
		if (sk->role == 'C' && (mode == USMC_MODE_MIGRATING || sk_flag(sk, SKF_DECLINED)))
			attached = false;
		if (sk->role == 'S')
			cdc_release_gen(&sk->ctrl->s, sk->gen);
		usmc_conn_unbind_slot(sk, attached);
	}
	if (sk->ln)
		usmc_clc_ln_put(sk->ln);
	sk->ln = NULL;
	usmc_conn_stats_close(sk);
}

static void sock_release(struct usmc_sock *sk, int fd)
{
	if (sk->kind == SK_LISTEN)
		usmc_listen_release(sk);
	else if (sk->kind == SK_CONN)
		usmc_conn_release(sk, fd);
}

/* Given to every socket usmc makes (sock.h struct usmc_sock_ops). */
const struct usmc_sock_ops usmc_sock_ops = {
	.release = sock_release,
};
