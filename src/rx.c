// SPDX-License-Identifier: MIT
/*
 * rx.c - receive side: from our DMB into application buffers.
 *
 * Locking: sh->rx_lock serialises readers of one socket; never held while
 * sleeping.  Our consumer line is ours alone; the peer's prod is loaded
 * once per step and validated before any byte is copied.
 */
#include "accept.h"
#include "af_usmc.h"
#include "conn.h"
#include "migrate.h"
#include "real.h"
#include "rx.h"
#include "sigrestart.h"
#include "sock.h"
#include "sys.h"
#include "tcp.h"
#include "wait.h"

#include <fcntl.h>
#include <sys/ioctl.h>

struct iov_wcursor {
	const struct iovec *iov;
	int cnt;
	size_t off;
};

static void ring_to_iov(struct iov_wcursor *ic, const uint8_t *ring, uint32_t size,
			uint64_t pos, size_t len)
{
	while (len) {
		size_t n = MIN(len, ic->iov->iov_len - ic->off);

		ring_get(ring, size, pos, (uint8_t *)ic->iov->iov_base + ic->off, n);
		pos += n;
		len -= n;
		ic->off += n;
		if (ic->off == ic->iov->iov_len) {
			ic->iov++;
			ic->cnt--;
			ic->off = 0;
		}
	}
}

/* Proposed: nothing in the ring is ours to read before the accept is
 * proven (sock.h usmc_unproven), whatever its writer's line says: an empty
 * view at our cons, the twin of tx.c's tx_unproven.  True with that view.
 * Caller holds rx_lock. */
static bool rx_unproven(const struct usmc_sock *sk, uint64_t *head, uint64_t *prod)
{
	if (!usmc_unproven(sk))
		return false;
	*head = *prod = LOAD_RELAXED(&sk->sh->rx_cons);
	return true;
}

/*
 * What a read returns when the ring is empty, as TCP would:
 *   0 when the peer shut down / closed and we drained everything, or after
 *   our own shutdown(SHUT_RD); ECONNRESET once after a reset; 1 to wait.
 */
static int rx_empty_state(struct usmc_sock *sk)
{
	uint32_t f = LOAD_ACQUIRE(&sk->sh->flags);
	uint32_t pf = usmc_unproven(sk) ? 0 : LOAD_ACQUIRE(&sk->rx_p->flags);

	/* The peer's FIN came before its reset (a shutdown, then a close
	 * with our bytes unread, as the JDK's close does): TCP's reads end
	 * at the FIN, only sends see the reset. */
	if ((pf & (CDC_F_ABORT | CDC_F_DONE)) == (CDC_F_ABORT | CDC_F_DONE) &&
	    (!(f & SKF_ABORTED) || sk_fin_then_reset(sk)))
		return 0;
	if (pf & CDC_F_ABORT && !(f & SKF_ABORTED)) {
		usmc_sock_abort(sk, USMC_A_PEER_RESET);
		f |= SKF_ABORTED;
	}
	if (f & SKF_ABORTED) {
		if (!(atomic_fetch_or(&sk->sh->flags, SKF_ERR_TAKEN) & SKF_ERR_TAKEN))
			return -ECONNRESET;
		return 0;
	}
	if (pf & CDC_F_DONE) {
		uint64_t head, prod;

		/* DONE is stored after the last prod (release); our first look at
		 * prod may predate both: look again before calling it EOF. */
		if (usmc_rx_view(sk, &head, &prod) && prod != head)
			return 1;
		return 0;
	}
	if (f & SKF_SHUT_RD)
		return 0;
	if (f & SKF_TCP_EOF) {
		/* The peer's FIN: it closed (an orderly close sends it before
		 * its ring's flags, close.c) or died.  Its last bytes came
		 * before its FIN, but our look at prod may predate both: look
		 * again.  TCP would have sent RST if it died with our bytes
		 * unread. */
		uint64_t prod, head;

		if (usmc_rx_view(sk, &head, &prod) && prod != head)
			return 1;
		if (!usmc_tx_view(sk, &head, &prod) || prod != head) {
			usmc_sock_abort(sk, USMC_A_PEER_DIED);
			atomic_fetch_or(&sk->sh->flags, SKF_ERR_TAKEN);
			return -ECONNRESET;
		}
		return 0;
	}
	return 1;
}

/*
 * MIGRATING, before a receive: our queued bytes go out on TCP first (the
 * peer may wait for them before it answers), without ever blocking on
 * them while the peer's bytes wait for us (both ends sending first would
 * deadlock; TCP sends in the background).  0: read the ring (bytes there);
 * USMC_PASS: read TCP; or -errno.
 */
static int migrate_rx_ready(struct usmc_sock *sk, int fd, bool nonblock, int *timeout)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN | POLLOUT };
		uint64_t head, prod;
		int rc;

		/* A reset peer fails the pump's send (EPIPE): a receive says
		 * what TCP says of it instead (below: the ring, then recv). */
		rc = usmc_migrate_pump(sk, fd, false);
		if (rc && rc != -EAGAIN && rc != -EPIPE && rc != -ECONNRESET)
			return rc;
		if (sk_mode(sk) != USMC_MODE_MIGRATING)
			return USMC_PASS;
		if (sk->rx_p) {
			/* The peer wrote our receive cursors: nothing in that
			 * ring is read again (rx loop), nor waited for here. */
			if (LOAD_RELAXED(&sk->sh->abort) == USMC_A_PROTOCOL)
				return -ECONNRESET;
			rc = usmc_rx_view_locked(sk, &head, &prod);
			if (rc == -EPROTO) {
				usmc_sock_abort(sk, USMC_A_PROTOCOL);
				return -ECONNRESET;
			}
			if (rc || head != prod)
				return 0;	/* read the ring (under the lock) */
		}
		if (sk->tx_done) {
			usmc_migrate_finish(sk);
			return USMC_PASS;
		}
		/* Still sending ours, nothing in the ring: TCP data, or room
		 * to send more, whichever comes first. */
		if (nonblock)
			return USMC_PASS;
		if (*timeout == -1)
			*timeout = usmc_sock_timeout(sk, fd, SO_RCVTIMEO);
		rc = real.poll(&p, 1, *timeout);
		if (rc == 0)
			return -EAGAIN;
		if (rc < 0 && (errno != EINTR || usmc_sig_should_eintr(*timeout)))
			return -errno;
		if (rc > 0 && (p.revents & (POLLIN | POLLERR | POLLHUP)))
			return USMC_PASS;
	}
}

ssize_t usmc_rx(struct usmc_sock *sk, int fd, const struct iovec *iov, int iovcnt, int flags)
{
	struct iov_wcursor ic = { iov, iovcnt, 0 };
	bool nonblock = (flags & MSG_DONTWAIT) || sk_flag(sk, SKF_NONBLOCK);
	bool peek = flags & MSG_PEEK, waitall = flags & MSG_WAITALL;
	size_t total = 0, done = 0, target;
	int timeout = -1, rc, i;

	for (i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	/* What a blocking read waits for, as tcp_recvmsg(): the whole length
	 * (MSG_WAITALL), else SO_RCVLOWAT bytes of it; EOF, an error or a
	 * signal end the wait with what came. */
	target = waitall ? total : MIN(total, (size_t)usmc_rcvlowat(sk, LOAD_RELAXED(&sk->sh->flags)));
	usmc_sock_refresh(sk, fd);
	/* Urgent data only ever travels on TCP (tx.c), and its receive
	 * never blocks: the kernel answers, whatever the mode.  So does the
	 * error queue (timestamps, zero-copy completions): never the stream. */
	if (unlikely(flags & (MSG_OOB | MSG_ERRQUEUE)))
		return USMC_PASS;
	if (sk_flag(sk, SKF_CONNECTING) && nonblock)
		return -EAGAIN;
	while (sk_mode(sk) == USMC_MODE_UNDECIDED) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		usmc_server_resolve(sk, fd, false);
		if (sk_mode(sk) != USMC_MODE_UNDECIDED)
			break;
		if (nonblock)
			return -EAGAIN;
		if (timeout == -1)
			timeout = usmc_sock_timeout(sk, fd, SO_RCVTIMEO);
		if (usmc_sock_nonblock_now(sk, fd))
			return -EAGAIN;
		rc = real.poll(&p, 1, timeout);
		if (rc == 0)
			return -EAGAIN;
		if (rc < 0 && (errno != EINTR || usmc_sig_should_eintr(timeout)))
			return -errno;
	}
	if (sk_mode(sk) == USMC_MODE_TCP) {
		rc = usmc_tcp_skip_wake(sk, fd, nonblock);
		return rc ? rc : USMC_PASS;
	}
migrating:
	if (sk_mode(sk) == USMC_MODE_MIGRATING) {
		rc = migrate_rx_ready(sk, fd, nonblock, &timeout);
		if (rc)
			return rc;
	}
	rc = usmc_family_lock(&sk->sh->rx_lock);
	if (rc)
		return rc;
	for (;;) {
		uint64_t head, prod;	/* prod pairs with the writer's release */
		size_t avail;

		/* After a reset TCP still hands out what had arrived, then the
		 * error; a corrupted ring is never read again, and an invalid
		 * view is never read at all, whatever reset came first. */
		if (unlikely(!rx_unproven(sk, &head, &prod) && !usmc_rx_view(sk, &head, &prod))) {
			usmc_sock_abort(sk, USMC_A_PROTOCOL);
			prod = head;
		}
		if (LOAD_RELAXED(&sk->sh->abort) == USMC_A_PROTOCOL)
			prod = head;
		avail = (size_t)(prod - head);
		/* A peek waits for its target as a read does (TCP); a
		 * zero-length read waits for data like any other read. */
		if (avail && (!peek || avail >= target || !total)) {
			size_t n = MIN(avail, total - done);

			ring_to_iov(&ic, sk->rx_ring, sk->size, head, n);
			if (unlikely(usmc_guard_poisoned(sk->lgr->guard))) {
				/* Truncated under us: what we copied is zeros. */
				usmc_sock_abort(sk, USMC_A_PROTOCOL);
				continue;
			}
			done += n;
			if (peek || !total)
				break;
			/* Release: our copy-out finished before the writer may reuse it. */
			usmc_rx_publish(sk, head + n);
			usmc_kick_space(sk);
			if (done >= target)
				break;
			continue;
		}
		if (unlikely(sk_mode(sk) == USMC_MODE_MIGRATING) && !avail) {
			/* The ring is drained: the rest comes on TCP. */
			if (done)
				break;
			usmc_family_unlock(&sk->sh->rx_lock);
			goto migrating;
		}
		rc = rx_empty_state(sk);
		if (rc == 1 && !avail && !usmc_unproven(sk) && usmc_rx_view(sk, &head, &prod) &&
		    prod != head &&
		    LOAD_RELAXED(&sk->sh->abort) != USMC_A_PROTOCOL)
			continue;	/* the last bytes landed just before DONE */
		if (rc <= 0) {
			if (avail && peek) {
				/* EOF or reset behind a short peek: show what is there. */
				ring_to_iov(&ic, sk->rx_ring, sk->size, head, avail);
				done = avail;
				break;
			}
			if (done)
				break;
			usmc_family_unlock(&sk->sh->rx_lock);
			return rc;
		}
		if (done && done >= target)
			break;
		if (nonblock) {
			if (!total && !done) {
				usmc_family_unlock(&sk->sh->rx_lock);
				return -EAGAIN;
			}
			break;
		}
		usmc_family_unlock(&sk->sh->rx_lock);
		if (timeout == -1)
			timeout = usmc_sock_timeout(sk, fd, SO_RCVTIMEO);
		rc = usmc_wait(sk, fd, USMC_WAIT_RX, timeout);
		/* Interrupted: TCP returns what it has copied (MSG_WAITALL),
		 * else EINTR, or restarts where the kernel would. */
		if (rc == -EINTR && !done && !usmc_sig_should_eintr(timeout))
			rc = 0;
		usmc_sock_refresh(sk, fd);
		if (sk_mode(sk) == USMC_MODE_MIGRATING)
			return done ? (ssize_t)done : (rc ? rc : usmc_rx(sk, fd, iov, iovcnt, flags));
		if (sk_mode(sk) == USMC_MODE_TCP)	/* moved to TCP meanwhile */
			return done ? (ssize_t)done : (rc ? rc : USMC_PASS);
		if (rc)
			return done ? (ssize_t)done : rc;
		rc = usmc_family_lock(&sk->sh->rx_lock);
		if (rc)
			return done ? (ssize_t)done : rc;
	}
	/* The connection's counter under rx_lock: one writer (stats.h). */
	if (done && !peek && sk->st)
		usmc_stat_add(&sk->st->rx_bytes, done);
	usmc_family_unlock(&sk->sh->rx_lock);
	if (unlikely(sk->in_nested))
		sk_watch_changed(sk);
	if (!total)
		return 0;
	if (!done)
		return -EAGAIN;
	if (!peek) {
		STAT_ADD(rx_bytes, done);
		STAT_CALL(rx, done);
	}
	return (ssize_t)done;
}

/*
 * The fast path (sock.h): bytes there, or spun for and there.  The wait is
 * the general one; after it every condition is looked at again.
 */
ssize_t usmc_rx_fast(struct usmc_sock *sk, int fd, void *buf, size_t n, int flags)
{
	struct usmc_flock *l = &sk->sh->rx_lock;
	int timeout = -1, rc;
	uint64_t head, prod;
	size_t len;

	if (unlikely((flags & ~MSG_DONTWAIT) || !n))
		return USMC_SLOW;
	for (;;) {
		if (unlikely(!usmc_fast_ok(sk, l)))
			return USMC_SLOW;
		usmc_family_hold(l);	/* usmc_fast_ok() checked it may */
		if (unlikely(!usmc_rx_view(sk, &head, &prod)))
			goto slow;
		if (likely(prod != head))
			break;
		/* Empty: EOF, a reset and EAGAIN are the general path's. */
		if ((flags & MSG_DONTWAIT) || sk_flag(sk, SKF_NONBLOCK) ||
		    (LOAD_ACQUIRE(&sk->rx_p->flags) & (CDC_F_DONE | CDC_F_ABORT)))
			goto slow;
		usmc_family_unlock(l);
		if (timeout == -1)
			timeout = usmc_sock_timeout(sk, fd, SO_RCVTIMEO);
		rc = usmc_wait(sk, fd, USMC_WAIT_RX, timeout);
		if (rc == -EINTR && !usmc_sig_should_eintr(timeout))
			rc = 0;
		if (unlikely(rc)) {
			/* As the general path after its wait. */
			usmc_sock_refresh(sk, fd);
			if (sk_mode(sk) == USMC_MODE_MIGRATING)
				return USMC_SLOW;
			return rc;
		}
	}
	len = MIN((size_t)(prod - head), n);
	ring_get(sk->rx_ring, sk->size, head, buf, len);
	if (unlikely(usmc_guard_poisoned(sk->lgr->guard)))
		goto slow;
	/* Release: our copy-out finished before the writer may reuse it. */
	usmc_rx_publish(sk, head + len);
	usmc_kick_space(sk);
	if (sk->st)
		usmc_stat_add(&sk->st->rx_bytes, len);
	usmc_family_unlock(l);
	STAT_ADD(rx_bytes, len);
	STAT_CALL(rx, len);
	STAT_INC(rx_fast);
	return (ssize_t)len;
slow:
	usmc_family_unlock(l);
	return USMC_SLOW;
}

/*
 * How much a write into pipe fd may carry without blocking: 0 when the pipe
 * is full.  Pipe buffers are page-granular, so this is an estimate; it only
 * serves SPLICE_F_NONBLOCK, where the kernel would return EAGAIN.
 */
static size_t pipe_room(int fd, size_t want)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	int cap, queued = 0;

	if (sys_poll(&p, 1, 0) <= 0 || !(p.revents & POLLOUT))
		return 0;
	cap = sys_fcntl(fd, F_GETPIPE_SZ, 0);
	if (cap <= 0 || sys_ioctl(fd, FIONREAD, &queued) || queued >= cap)
		return want;
	return MIN(want, (size_t)(cap - queued));
}

/*
 * Write up to n ring bytes into pipe fd without blocking on it, as the
 * kernel's splice moves what fits: all of them into an empty pipe that
 * holds them (its pages are free), else through a non-blocking open file
 * description of the same pipe (ours: the program's flags stay as they
 * are), which takes what fits or says -EAGAIN.
 */
static ssize_t pipe_write_nb(int fd, const void *buf, size_t n)
{
	int cap = sys_fcntl(fd, F_GETPIPE_SZ, 0), queued = -1, nb;
	size_t room;
	char path[32];
	ssize_t r;

	if (cap > 0 && !sys_ioctl(fd, FIONREAD, &queued) && !queued && n <= (size_t)cap)
		return sys_write(fd, buf, n);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	nb = sys_openat(AT_FDCWD, path, O_WRONLY | O_NONBLOCK | O_CLOEXEC, 0);
	if (nb < 0) {	/* no reader (the write says EPIPE), or no /proc */
		room = pipe_room(fd, n);
		return sys_write(fd, buf, room ? room : n);
	}
	r = sys_write(nb, buf, n);
	sys_close(nb);
	return r;
}

/* splice(2) out of a shared-memory connection into a pipe. */
ssize_t usmc_rx_to_fd(struct usmc_sock *sk, int fd, int out_fd, size_t len, int flags)
{
	/* As tcp_splice_read(): SPLICE_F_NONBLOCK concerns the pipe only; the
	 * socket side blocks unless the socket itself is non-blocking. */
	bool nonblock = sk_flag(sk, SKF_NONBLOCK);
	ssize_t r = 0;
	int rc;

	usmc_server_resolve(sk, fd, true);
	usmc_sock_refresh(sk, fd);
	if (sk_mode(sk) == USMC_MODE_TCP) {
		rc = usmc_tcp_skip_wake(sk, fd, nonblock);
		return rc ? rc : USMC_PASS;
	}
	if (sk_mode(sk) != USMC_MODE_SMCD && sk_mode(sk) != USMC_MODE_PROPOSED)
		return USMC_PASS;
	rc = usmc_family_lock(&sk->sh->rx_lock);
	if (rc)
		return rc;
	for (;;) {
		uint64_t head, prod;

		if (!rx_unproven(sk, &head, &prod) && !usmc_rx_view(sk, &head, &prod)) {
			usmc_sock_abort(sk, USMC_A_PROTOCOL);
			prod = head;
		}
		if (LOAD_RELAXED(&sk->sh->abort) == USMC_A_PROTOCOL)
			prod = head;
		if (prod != head) {
			size_t n = ring_span(sk->size, head, MIN((size_t)(prod - head), len));
			struct pollfd p = { .fd = out_fd, .events = POLLOUT };

			r = pipe_write_nb(out_fd, sk->rx_ring + (head & (sk->size - 1)), n);
			if (r == -EAGAIN && !(flags & SPLICE_F_NONBLOCK)) {
				/* A full pipe: wait for room, as the kernel does. */
				usmc_family_unlock(&sk->sh->rx_lock);
				if (sys_poll(&p, 1, -1) < 0 && errno == EINTR &&
				    usmc_sig_should_eintr(-1))
					return -EINTR;
				rc = usmc_family_lock(&sk->sh->rx_lock);
				if (rc)
					return rc;
				continue;
			}
			if (r > 0) {
				usmc_rx_publish(sk, head + (uint64_t)r);
				usmc_kick_space(sk);
				STAT_ADD(rx_bytes, r);
				STAT_CALL(rx, r);
				if (sk->st)
					usmc_stat_add(&sk->st->rx_bytes, (uint64_t)r);
			}
			break;
		}
		rc = rx_empty_state(sk);
		if (rc <= 0) {
			r = rc;
			break;
		}
		if (nonblock) {
			r = -EAGAIN;
			break;
		}
		usmc_family_unlock(&sk->sh->rx_lock);
		rc = usmc_wait(sk, fd, USMC_WAIT_RX, usmc_sock_timeout(sk, fd, SO_RCVTIMEO));
		if (rc == -EINTR && !usmc_sig_should_eintr(-1))
			rc = 0;
		if (rc)
			return rc;
		rc = usmc_family_lock(&sk->sh->rx_lock);
		if (rc)
			return rc;
	}
	usmc_family_unlock(&sk->sh->rx_lock);
	return r;
}

/*
 * Writable as TCP says it (sk_stream_is_writeable): free room at least half
 * of what is queued, i.e. a third of the buffer free.  A program that
 * selects for writing and then writes a large block counts on it: with
 * "one byte free" it blocked in the write with the peer's ring full too,
 * where over TCP it would have read first (socat -b 65536 shut-down).
 */
static inline bool tx_writable(uint64_t used, uint64_t cap)
{
	return used < cap && cap - used >= used / 2;
}

unsigned int usmc_sock_poll(struct usmc_sock *sk)
{
	uint32_t mode = sk_mode(sk), f, pf, cf;
	unsigned int ev = 0;
	uint64_t prod, head;

	f = LOAD_ACQUIRE(&sk->sh->flags);
	if (mode == USMC_MODE_MIGRATING) {
		/* Ring first, then TCP (check_tcp saw bytes or EOF there). */
		if (sk->rx_p && (!usmc_rx_view(sk, &head, &prod) || prod != head))
			ev |= POLLIN | POLLRDNORM;
		if (f & (SKF_TCP_DATA | SKF_TCP_EOF))
			ev |= POLLIN | POLLRDNORM;
		if (sk->tx_done)
			ev |= POLLOUT | POLLWRNORM;
		return ev;
	}
	if (mode != USMC_MODE_SMCD && mode != USMC_MODE_PROPOSED)
		return 0;
	if (f & SKF_CONNECTING)
		return 0;	/* TCP tells: connect completion is a TCP event */
	pf = LOAD_ACQUIRE(&sk->rx_p->flags);
	cf = LOAD_ACQUIRE(&sk->tx_c->flags);
	/* A reset: the error shows until a read, a write or SO_ERROR took
	 * it (sk_err: SKF_ERR_TAKEN), the hang-up for good. */
	if ((pf | cf) & CDC_F_ABORT || f & SKF_ABORTED)
		return POLLIN | POLLOUT | POLLHUP | POLLRDHUP | (f & SKF_ERR_TAKEN ? 0 : POLLERR);
	if (!usmc_rx_view(sk, &head, &prod) || prod - head >= usmc_rcvlowat(sk, f))
		ev |= POLLIN | POLLRDNORM;
	if (pf & CDC_F_DONE || f & SKF_SHUT_RD)
		ev |= POLLIN | POLLRDNORM | POLLRDHUP;
	if (!usmc_tx_view(sk, &head, &prod) || tx_writable(prod - head, usmc_tx_cap(sk)) ||
	    cf & CDC_F_CLOSED || f & SKF_SHUT_WR)
		ev |= POLLOUT | POLLWRNORM;
	if (f & SKF_TCP_EOF) {
		/* Peer gone: readable (EOF), writable (the next write fails).
		 * Gone with our bytes unread is TCP's RST: error and hang-up. */
		ev |= POLLIN | POLLRDNORM | POLLRDHUP | POLLOUT | POLLWRNORM;
		if (prod != head)
			ev |= POLLHUP | (f & SKF_ERR_TAKEN ? 0 : POLLERR);
	}
	/* Hang-up, as TCP: both directions shut (their FIN, and our FIN or
	 * the RST our write to a closed peer drew). */
	if ((pf & CDC_F_DONE || f & (SKF_TCP_EOF | SKF_SHUT_RD)) && (f & (SKF_SHUT_WR | SKF_RST_SEEN)))
		ev |= POLLHUP;
	/* Our send to a gone peer drew its RST (tx.c tx_to_gone): TCP's
	 * error until a send or SO_ERROR takes it. */
	if ((f & (SKF_RST_SEEN | SKF_ERR_TAKEN)) == SKF_RST_SEEN)
		ev |= POLLERR;
	return ev;
}

int usmc_sock_inq(struct usmc_sock *sk)
{
	uint64_t prod, head;

	return usmc_rx_view(sk, &head, &prod) ? (int)(prod - head) : 0;
}

int usmc_rx_inq_hint(struct usmc_sock *sk)
{
	int n = usmc_sock_inq(sk);

	if (n || !sk->rx_p)
		return n;
	if (sk_mode(sk) == USMC_MODE_MIGRATING)
		return -1;
	return (LOAD_ACQUIRE(&sk->rx_p->flags) & CDC_F_DONE) ? 1 : 0;
}
