/* SPDX-License-Identifier: MIT */
/*
 * tx.h - the send side: into the peer's DMB (tx.c), ring memory
 * (tx_backing.c).
 */
#ifndef USMC_TX_H
#define USMC_TX_H

#include "sock.h"

/*
 * How many bytes the sender may write at prod now: free ring space, cut at
 * the end of the backed part of the ring (dev->dmb_reserve grows it; on a
 * full tmpfs the ring just behaves as if it were smaller).  Caller holds
 * tx_lock.  (tx_backing.c)
 */
size_t usmc_tx_room(struct usmc_sock *sk, uint64_t prod, uint64_t head, size_t want);
/* tx_backing.c: the owner goes to sleep; a ring that grew gives back the
 * memory above what it holds unread.  Takes tx_lock if it is free. */
void usmc_tx_idle(struct usmc_sock *sk);
#define USMC_TX_IDLE_HW	(68u << 10)	/* the least tx_hw usmc_tx_idle() can act on */
static inline void usmc_tx_idle_check(struct usmc_sock *sk)
{
	if (unlikely(sk->sh && sk->tx_p && LOAD_RELAXED(&sk->sh->tx_hw) >= USMC_TX_IDLE_HW))
		usmc_tx_idle(sk);
}

/*
 * A write of at most this much (and at most a third of what the buffer
 * sizes allow) goes into the ring whole or waits for room: TCP copies a
 * small write whole into its buffer once there is room at all, so records
 * that writers sharing a socket write with one call each never interleave
 * (48-byte records tore when the ring's last 16 bytes took the start of
 * one and another writer got the lock while the first waited).  A waiting
 * writer is woken for that much room (wait.c), TCP's a third of the buffer.
 */
#define USMC_TX_WHOLE	4096u
static inline uint64_t usmc_tx_whole(uint64_t cap)
{
	return MIN((uint64_t)USMC_TX_WHOLE, cap / 3);
}

ssize_t usmc_tx_fast(struct usmc_sock *sk, int fd, const void *buf, size_t n, int flags);
ssize_t usmc_tx(struct usmc_sock *sk, int fd, const struct iovec *iov, int iovcnt, int flags);
/* sendfile(2)/splice(2): move up to len bytes from in_fd into the ring. */
ssize_t usmc_tx_from_fd(struct usmc_sock *sk, int fd, int in_fd, off_t *off, size_t len,
			bool in_nonblock);

#endif
