// SPDX-License-Identifier: MIT
/*
 * tx_backing.c - how much of our ring is backed by memory: grown as a
 * connection streams, given back when it goes quiet.
 *
 * The backed part of our ring is [0, tx_hw): the sender writes from offset
 * 0 after every rewind and grows the mark ahead of itself, so its position
 * is never past tx_hw, and until tx_hw reaches the ring size no write wraps.
 * A connection starts with one page (usmc_conn_bind_slot), request/response
 * traffic rewinds and stays there, and a stream doubles the mark up to
 * TX_RESERVE_CHUNK steps: idle connections cost a page each way.
 *
 * A ring that grew gives the memory above what it still holds back to the
 * tmpfs when its owner goes to sleep (usmc_tx_idle): TCP frees a socket's
 * buffer memory once the bytes in it are read, and so do we, at the next
 * moment the owner is not sending anyway.  The ring's size (its window)
 * does not change, only its backing: the peer sees nothing of this.
 *
 * Locking: sh->tx_lock, as for every change of our producer side (tx.c).
 */
#include "conn.h"
#include "sock.h"
#include "sigrestart.h"
#include "tx.h"

#include <signal.h>

#define TX_RESERVE_CHUNK	(256u << 10)
#define TX_RESERVE_MIN		USMC_DMB_FLOOR	/* never given back (dev.h) */
/* Give back only what is worth two system calls and a fault per page to
 * get again: at least this much, and at least half of what is backed. */
#define TX_IDLE_MIN		(64u << 10)

size_t usmc_tx_room(struct usmc_sock *sk, uint64_t prod, uint64_t head, size_t want)
{
	size_t room = MIN((size_t)ring_free(prod, head, sk->size), want);
	uint32_t off = (uint32_t)(prod & (sk->size - 1)), hw = LOAD_RELAXED(&sk->sh->tx_hw);

	if (hw >= sk->size)
		return room;
	while (off + room > hw && hw < sk->size && !LOAD_RELAXED(&sk->sh->tx_stuck)) {
		uint32_t grow = MIN(MIN(TX_RESERVE_CHUNK, MAX(hw, TX_RESERVE_MIN)), sk->size - hw);

		if (sk->lgr->dev->dmb_reserve(sk->lgr, sk->slot, usmc_tx_dir(sk), hw, grow)) {
			/* tmpfs full: work within what we have until the next rewind */
			STORE_RELAXED(&sk->sh->tx_stuck, 1);
			break;
		}
		hw += grow;
		STORE_RELAXED(&sk->sh->tx_hw, hw);
	}
	if (hw >= sk->size)
		return room;
	return off >= hw ? 0 : MIN(room, (size_t)(hw - off));
}

/*
 * What of our ring must stay backed: twice the producer's position,
 * rounded up to a power of two (a connection that sends a few kilobytes a
 * time keeps room for them), at least a page.  0 when nothing
 * may go: bytes unread above that (the reader has not caught up, or the
 * writes wrapped), or too little to be worth it.
 */
static uint32_t tx_idle_keep(struct usmc_sock *sk, uint32_t hw)
{
	uint64_t head, prod;
	uint32_t off, keep;

	if (!usmc_tx_view(sk, &head, &prod))
		return 0;
	off = (uint32_t)(prod & (sk->size - 1));
	/* Unread bytes all in [0, off): the reader reads [head, prod) only. */
	if (prod - head > off)
		return 0;
	/* Room for twice what the last writes took: a connection whose
	 * messages are about one size never gives back what the next one
	 * needs (a punch and a regrowth per message). */
	keep = off < TX_RESERVE_MIN ? TX_RESERVE_MIN : 2u << (32 - __builtin_clz(off));
	if (keep > hw / 2 || hw - keep < TX_IDLE_MIN)
		return 0;
	return keep;
}

/*
 * The owner goes to sleep (wait.c, poll.c, epoll_wait.c): a ring that grew
 * gives back the memory above what it holds unread, once it went through
 * a sleep without growing (sk->idle_hw: a connection that streams in
 * bursts keeps its ring from one burst to the next).  Only if tx_lock is
 * free now (a sender at work is not idle).  The other signals are blocked
 * meanwhile: we are not on tx.c's tx_held[] stack, so a handler's send on
 * this socket would take the lock again.  The faults stay open: guard.c
 * turns a SIGBUS from a truncated link group into a reset, and a blocked
 * one would kill the process.  The peer's cons is read as usual: a peer
 * that lies about it can only lose bytes of its own connection.
 */
void usmc_tx_idle(struct usmc_sock *sk)
{
	struct usmc_flock *l = &sk->sh->tx_lock;
	uint32_t hw = LOAD_RELAXED(&sk->sh->tx_hw), keep;
	sigset_t old;

	if (hw != LOAD_RELAXED(&sk->idle_hw)) {
		STORE_RELAXED(&sk->idle_hw, hw);	/* grew since the last sleep: not yet */
		return;
	}
	if (!sk->lgr || sk_mode(sk) != USMC_MODE_SMCD || !sk->lgr->dev->dmb_release ||
	    !tx_idle_keep(sk, hw))
		return;
	usmc_sig_block_nonfault(&old);
	if (usmc_family_trylock(l))
		goto out;
	hw = LOAD_RELAXED(&sk->sh->tx_hw);
	keep = tx_idle_keep(sk, hw);
	if (keep && !(LOAD_RELAXED(&sk->tx_p->flags) & CDC_F_MIGRATE) &&
	    !sk->lgr->dev->dmb_release(sk->lgr, sk->slot, usmc_tx_dir(sk), keep,
				       hw - keep)) {
		STORE_RELAXED(&sk->sh->tx_hw, keep);
		STORE_RELAXED(&sk->sh->tx_stuck, 0);
		STORE_RELAXED(&sk->idle_hw, keep);
		STAT_ADD(ring_given_back, hw - keep);
	}
	usmc_family_unlock(l);
out:
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}
