// SPDX-License-Identifier: MIT
/*
 * tx_splice.c - sendfile(2) and splice(2) into a shared-memory connection:
 * the input is read(2) straight into the peer's DMB, under the send side's
 * rules (tx_int.h): the same lock, errors, room and wake-ups as a send.
 */
#include "accept.h"
#include "af_usmc.h"
#include "conn.h"
#include "migrate.h"
#include "sigrestart.h"
#include "sock.h"
#include "sys.h"
#include "tx_int.h"
#include "wait.h"

#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * Input that can run dry without ending (a pipe, a socket): a splice
 * returns what it moved once the input has nothing more at hand, and
 * waits only while it moved nothing (not even then with in_nonblock:
 * SPLICE_F_NONBLOCK), as the kernel's splice does.  True: stop reading.
 */
static bool input_dry(int in_fd, bool stream, bool in_nonblock, size_t done, int *rc)
{
	struct pollfd p = { .fd = in_fd, .events = POLLIN };

	if (!stream || (!done && !in_nonblock))
		return false;
	if (sys_poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)))
		return false;
	if (!done)
		*rc = -EAGAIN;
	return true;
}

/* sendfile(2) and splice(2) into a shared-memory connection: read(2)
 * straight into the DMB. */
ssize_t usmc_tx_from_fd(struct usmc_sock *sk, int fd, int in_fd, off_t *off, size_t len,
			bool in_nonblock)
{
	bool nonblock = sk_flag(sk, SKF_NONBLOCK), eof = false, stream;
	size_t done = 0;
	struct stat st;
	int rc;

	if (usmc_tx_held(sk->sh))
		return -EAGAIN;		/* from a handler that interrupted a send on it */
	usmc_server_resolve(sk, fd, true);
	usmc_sock_refresh(sk, fd);
	tx_look(sk, fd);
	if (sk_mode(sk) != USMC_MODE_SMCD && sk_mode(sk) != USMC_MODE_PROPOSED)
		return usmc_tx_moved(sk, fd, nonblock, 0);
	stream = !fstat(in_fd, &st) && !S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode);
	rc = usmc_tx_lock(sk);
	if (rc)
		return rc;
	while (done < len) {
		uint64_t prod, head;
		size_t n;
		ssize_t r;

		/* Moved to TCP while we waited: the pump fixed the end of the
		 * ring under this lock (migrate.c); nothing more goes into it. */
		if (unlikely(sk_mode(sk) != USMC_MODE_SMCD && sk_mode(sk) != USMC_MODE_PROPOSED)) {
			if (done)
				break;
			usmc_tx_unlock(sk, fd);
			return usmc_tx_moved(sk, fd, nonblock, 0);
		}
		/* Another thread of ours is moving it (tx.c). */
		if (unlikely(sk_flag(sk, SKF_MOVING))) {
			if (done)
				break;
			usmc_tx_unlock(sk, fd);
			rc = usmc_move_wait(sk, fd, nonblock);
			return rc ? rc : usmc_tx_moved(sk, fd, nonblock, 0);
		}
		rc = usmc_tx_state(sk, !done);
		if (rc == 1) {
			/* The peer closed: as TCP's first send after that, what
			 * the socket buffer would take counts as sent, and the
			 * input is consumed as far (never the whole request: a
			 * caller that trusts the count seeks its file by it). */
			size_t k = (size_t)MIN((uint64_t)(len - done),
					       MIN(usmc_tx_cap(sk), (uint64_t)sk->size));

			if (off)
				*off += (off_t)k;
			else if (lseek(in_fd, (off_t)k, SEEK_CUR) < 0)
				k = 0;
			done += k;
			break;
		}
		if (rc)
			break;
		if (!tx_unproven(sk, &head, &prod) && !usmc_tx_view(sk, &head, &prod)) {
			usmc_sock_abort(sk, USMC_A_PROTOCOL);
			continue;
		}
		tx_rewind(sk, &head, &prod);
		n = ring_span(sk->size, prod, usmc_tx_room(sk, prod, head,
							   tx_want(sk, prod, head, len - done)));
		if (!n) {
			tx_nospace(sk);
			if (nonblock || done)
				break;
			usmc_tx_unlock(sk, fd);
			rc = usmc_wait(sk, fd, USMC_WAIT_TX, usmc_sock_timeout(sk, fd, SO_SNDTIMEO));
			if (rc == -EINTR && !usmc_sig_should_eintr(-1))
				rc = 0;
			if (rc || usmc_tx_lock(sk))
				return done ? (ssize_t)done : rc;
			continue;
		}
		if (input_dry(in_fd, stream, in_nonblock, done, &rc))
			break;
		if (off) {
			r = pread(in_fd, sk->tx_ring + (prod & (sk->size - 1)), n, *off);
			if (r < 0)
				r = -errno;
		} else {
			r = sys_read(in_fd, sk->tx_ring + (prod & (sk->size - 1)), n);
		}
		if (r <= 0) {
			rc = (int)r;
			eof = !r;
			break;
		}
		if (unlikely(tx_to_dmb(sk, prod, (size_t)r))) {
			/* Read from the input, never sent: as a reset TCP's. */
			usmc_sock_abort(sk, USMC_A_PROTOCOL);
			continue;
		}
		if (off)
			*off += r;
		usmc_tx_publish(sk, prod + (uint64_t)r);
		done += (size_t)r;
		usmc_kick_data(sk);
	}
	if (done && sk->st)
		usmc_stat_add(&sk->st->tx_bytes, done);	/* under tx_lock, as above */
	usmc_tx_unlock(sk, fd);
	if (done) {
		STAT_ADD(tx_bytes, done);
		STAT_CALL(tx, done);
		return (ssize_t)done;
	}
	if (rc < 0)
		return usmc_tx_fail(rc, 0);
	if (eof || !len)
		return 0;	/* end of the input file */
	return rc ? rc : -EAGAIN;
}
