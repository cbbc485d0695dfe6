// SPDX-License-Identifier: MIT
/*
 * tx.c - send side: application buffers straight into the peer's DMB.
 *
 * Locking: sh->tx_lock serialises senders of one socket (threads and forked
 * processes); it is never held while sleeping.  Our producer line and the
 * ring space between prod and cons + size are ours alone.
 */
#include "accept.h"
#include "af_usmc.h"
#include "conn.h"
#include "log.h"
#include "guard.h"
#include "migrate.h"
#include "real.h"
#include "sigrestart.h"
#include "sock.h"
#include "sys.h"
#include "tcp.h"
#include "tx.h"
#include "tx_int.h"
#include "wait.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

/*
 * A device that cannot map the peer's DMB (sk->tx_move, dev.h): the n bytes
 * just written to our sndbuf at cursor from go to the peer's DMB at the
 * same ring offsets, before the cursor that covers them is published.  The
 * sndbuf keeps them: a move to TCP sends from there (migrate.c).  Caller
 * holds tx_lock; 0, or -errno: the connection is broken.
 */
int usmc_tx_move_slow(struct usmc_sock *sk, uint64_t from, size_t n)
{
	struct usmc_lgr *l = sk->lgr;
	uint32_t off = (uint32_t)(from & (sk->size - 1));
	size_t first = ring_span(sk->size, from, n);
	int rc;

	rc = l->dev->move_data(l, sk->slot, usmc_tx_dir(sk), off, (uint32_t)first);
	if (!rc && first < n)
		rc = l->dev->move_data(l, sk->slot, usmc_tx_dir(sk), 0, (uint32_t)(n - first));
	return rc;
}

/* Copy from an iovec cursor into the ring; advances the cursor. */
struct iov_cursor {
	const struct iovec *iov;
	int cnt;
	size_t off;		/* offset inside iov[0] */
};

/*
 * USMC_DMB_COPY=1 (the seeds' dmb_copy, for measuring what no-copy saves):
 * stage the bytes in a private send buffer first, then copy them into the
 * peer's DMB, as an SMC-D device without no-copy support does.
 */
#define STAGE_LEN	65536
static __thread uint8_t *stage;
static pthread_key_t stage_key;
static pthread_once_t stage_once = PTHREAD_ONCE_INIT;

static void stage_key_init(void)
{
	pthread_key_create(&stage_key, free);	/* freed when the thread exits */
}

static bool stage_get(void)
{
	if (stage)
		return true;
	pthread_once(&stage_once, stage_key_init);
	stage = malloc(STAGE_LEN);
	if (stage)
		pthread_setspecific(stage_key, stage);
	return stage;
}

static void iov_to_ring_staged(struct iov_cursor *ic, uint8_t *ring, uint32_t size,
			       uint64_t pos, size_t len)
{
	while (len) {
		size_t chunk = MIN(len, (size_t)STAGE_LEN), got = 0;

		while (got < chunk) {
			size_t n = MIN(chunk - got, ic->iov->iov_len - ic->off);

			memcpy(stage + got, (const uint8_t *)ic->iov->iov_base + ic->off, n);
			got += n;
			ic->off += n;
			if (ic->off == ic->iov->iov_len) {
				ic->iov++;
				ic->cnt--;
				ic->off = 0;
			}
		}
		ring_put(ring, size, pos, stage, chunk);
		pos += chunk;
		len -= chunk;
	}
}

static void iov_to_ring(struct iov_cursor *ic, uint8_t *ring, uint32_t size, uint64_t pos,
			size_t len)
{
	if (unlikely(usmc_opt.dmb_copy) && stage_get()) {
		iov_to_ring_staged(ic, ring, size, pos, len);
		return;
	}
	/* len <= what is left in the iovec: the count is a second bound. */
	while (len && ic->cnt > 0) {
		size_t n = MIN(len, ic->iov->iov_len - ic->off);

		ring_put(ring, size, pos, (const uint8_t *)ic->iov->iov_base + ic->off, n);
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

static size_t iov_total(const struct iovec *iov, int cnt)
{
	size_t t = 0;
	int i;

	for (i = 0; i < cnt; i++)
		t += iov[i].iov_len;
	return t;
}

/* A reset's error: ECONNRESET once (the one call that takes it), then EPIPE. */
static int tx_reset_error(struct usmc_sock *sk, bool take)
{
	uint32_t f = take ? atomic_fetch_or(&sk->sh->flags, SKF_ERR_TAKEN) :
			    LOAD_ACQUIRE(&sk->sh->flags);

	return f & SKF_ERR_TAKEN ? -EPIPE : -sk_reset_errno(sk);
}

/*
 * Errors a send must report before writing, as TCP would:
 *  - reset (either side)                -> ECONNRESET once, then EPIPE
 *  - our shutdown(SHUT_WR)              -> EPIPE
 *  - the peer closed (will never read)  -> the first send goes out on TCP
 *    (tx_to_gone), whose RST comes back; every later one fails with EPIPE.
 *  - the peer died with our bytes unread -> ECONNRESET once, then EPIPE
 * Returns 0, a negative errno, or 1 for "swallow this send".  take: the
 * reset is reported by this call (false: bytes of it went already, so the
 * call returns those and the next one reports it, as TCP's pending error).
 */
static int tx_state(struct usmc_sock *sk, bool take)
{
	uint32_t f = LOAD_ACQUIRE(&sk->sh->flags);
	uint32_t pf = LOAD_ACQUIRE(&sk->tx_c->flags);

	if (pf & CDC_F_ABORT && !(f & SKF_ABORTED)) {
		usmc_sock_abort(sk, USMC_A_PEER_RESET);
		f |= SKF_ABORTED;
	}
	if (f & SKF_ABORTED)
		return tx_reset_error(sk, take);
	if (f & SKF_SHUT_WR)
		return -EPIPE;
	if (pf & CDC_F_CLOSED) {
		if (!(atomic_fetch_or(&sk->sh->flags, SKF_RST_SEEN) & SKF_RST_SEEN))
			return 1;
		atomic_fetch_or(&sk->sh->flags, SKF_ERR_TAKEN);
		return -EPIPE;
	}
	if (f & SKF_TCP_EOF) {
		uint64_t head, prod;

		/* The peer died without closing through usmc.  With bytes of
		 * ours unread its kernel would have sent RST at once (as rx.c
		 * reads it): reset.  Without, a FIN: this is a write to a
		 * closed peer. */
		if (!usmc_tx_view(sk, &head, &prod) || prod != head) {
			usmc_sock_abort(sk, USMC_A_PEER_DIED);
			return tx_reset_error(sk, take);
		}
		if (!(atomic_fetch_or(&sk->sh->flags, SKF_RST_SEEN) & SKF_RST_SEEN))
			return 1;
		atomic_fetch_or(&sk->sh->flags, SKF_ERR_TAKEN);
		return -EPIPE;
	}
	return 0;
}

static ssize_t tx_fail(ssize_t err, int flags)
{
	if (err == -EPIPE && !(flags & MSG_NOSIGNAL))
		raise(SIGPIPE);
	return err;
}

/*
 * The first send to a peer that is gone (closed, or died with nothing of
 * ours unread) goes out on the TCP socket: the peer's kernel answers it
 * with the RST TCP's would draw, and the kernel then holds what TCP shows
 * afterwards (TCP_INFO's CLOSE, getpeername's ENOTCONN).  The kernel takes
 * what its send buffer holds and says so, as TCP's last send.  The rest of
 * the call's bytes from the cursor, at most max (a ring: what a peer can
 * make us send on TCP stays bounded); the count, or -errno.
 */
static ssize_t tx_to_gone(int fd, const struct iov_cursor *ic, size_t max, int flags)
{
	struct iovec v[64];
	struct msghdr m = { .msg_iov = v };
	ssize_t n;
	int i;

	for (i = 0; i < ic->cnt && i < (int)ARRAY_SIZE(v) && max; i++) {
		v[i] = ic->iov[i];
		if (!i) {
			v[0].iov_base = (char *)v[0].iov_base + ic->off;
			v[0].iov_len -= ic->off;
		}
		v[i].iov_len = MIN(v[i].iov_len, max);
		max -= v[i].iov_len;
	}
	m.msg_iovlen = (size_t)i;
	n = real.sendmsg(fd, &m, flags | MSG_NOSIGNAL);
	return n < 0 ? -errno : n;
}

/*
 * send() from a signal handler (async-signal-safe, TCP allows it) that
 * interrupted this very thread inside usmc_tx on the same socket, holding
 * tx_lock: taking it again would deadlock, and the interrupted copy is
 * half done.  The kernel delivers signals only outside its locks, when the
 * system call returns; we do the same for the handler's bytes: they wait
 * in a per-thread buffer (the handler's send returns their count), and
 * the frame that holds the lock passes them on as soon as it lets go.
 *
 * tx_held[] is the stack of sockets whose tx_lock this thread holds or
 * is flushing for (a handler that sends on another socket nests one
 * deeper).  An entry is pushed before locking and popped after unlocking,
 * so a handler that finds its socket there never needs the lock.  Push
 * and pop keep the entry at tx_depth - 1 NULL while tx_depth counts it: a
 * handler in between sees nothing of ours and pushes above it.  Every
 * handler leaves tx_depth as it found it.
 *
 * The queue belongs to one socket (tx_defer_sh) until it is empty again.
 * Its bytes are sent from tx_defer_off, by the frame that holds that
 * socket, only after its own; a frame that lets go checks the queue with
 * signals blocked, so nothing is queued between its last look and the
 * pop.  A send on a socket nobody holds whose bytes are still queued (a
 * handler that came just after such a pop) sends them first: order kept.
 */
#define TX_DEFER_MAX	4096
#define TX_NEST		4
/* What every send touches is initial-exec TLS (one %fs-relative load, no
 * __tls_get_addr call; libusmc.so is preloaded, so the static TLS block
 * has room); the rarely used buffer stays general-dynamic. */
#define TLS_FAST	__attribute__((tls_model("initial-exec")))
static __thread uint32_t tx_depth TLS_FAST;
static __thread struct usmc_sock_sh *tx_held[TX_NEST] TLS_FAST;
static __thread uint32_t tx_defer_len TLS_FAST;
static __thread uint32_t tx_defer_off;
static __thread struct usmc_sock_sh *tx_defer_sh;
static __thread uint8_t tx_defer_buf[TX_DEFER_MAX];

static ssize_t tx_send(struct usmc_sock *sk, int fd, const struct iovec *iov, int iovcnt,
		       int flags, bool flushing);

static inline __attribute__((always_inline)) bool tx_push(struct usmc_sock_sh *sh)
{
	uint32_t d = tx_depth;

	if (unlikely(d >= TX_NEST))
		return false;
	tx_depth = d + 1;
	atomic_signal_fence(memory_order_seq_cst);
	tx_held[d] = sh;
	atomic_signal_fence(memory_order_seq_cst);
	return true;
}

static inline __attribute__((always_inline)) void tx_pop(void)
{
	uint32_t d = tx_depth - 1;

	tx_held[d] = NULL;
	atomic_signal_fence(memory_order_seq_cst);
	tx_depth = d;
	atomic_signal_fence(memory_order_seq_cst);
}

static bool tx_is_held(const struct usmc_sock_sh *sh)
{
	uint32_t i, d = tx_depth;

	for (i = 0; i < d && i < TX_NEST; i++)
		if (tx_held[i] == sh)
			return true;
	return false;
}

/* In the handler: queue what fits (none, or the queue is another
 * socket's: -EAGAIN, we cannot wait here). */
static ssize_t tx_defer_add(struct usmc_sock *sk, const struct iovec *iov, int iovcnt,
			    size_t total)
{
	uint32_t at = tx_defer_len;
	size_t n = MIN(total, (size_t)(TX_DEFER_MAX - at)), got = 0;
	int i;

	if (!n || (at && tx_defer_sh != sk->sh))
		return -EAGAIN;
	/* Reserve first: a handler nesting in ours appends behind it. */
	tx_defer_sh = sk->sh;
	tx_defer_len = at + (uint32_t)n;
	atomic_signal_fence(memory_order_seq_cst);
	for (i = 0; i < iovcnt && got < n; i++) {
		size_t k = MIN(iov[i].iov_len, n - got);

		memcpy(tx_defer_buf + at + got, iov[i].iov_base, k);
		got += k;
	}
	return (ssize_t)n;
}

/*
 * Let go of sk, the top of the stack, unless handlers queued bytes for it
 * since the last look (false); drop: forget them.  Signals are blocked
 * between the look and the pop.
 */
static bool tx_release(struct usmc_sock *sk, bool drop)
{
	sigset_t all, old;
	bool done;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	done = drop || tx_defer_sh != sk->sh || tx_defer_off == tx_defer_len;
	if (done) {
		if (tx_defer_sh == sk->sh) {
			tx_defer_len = 0;
			tx_defer_off = 0;
			tx_defer_sh = NULL;
		}
		tx_pop();
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return done;
}

/* sk on top of the stack, its lock not held: send what handlers queued
 * for it (those that run meanwhile queue behind), then let go. */
static void tx_flush_deferred(struct usmc_sock *sk, int fd)
{
	for (;;) {
		uint32_t off = tx_defer_off;
		uint32_t len = *(volatile uint32_t *)&tx_defer_len;
		struct iovec v;
		ssize_t n;

		if (off >= len || tx_defer_sh != sk->sh) {
			if (tx_release(sk, false))
				return;
			continue;
		}
		v.iov_base = tx_defer_buf + off;
		v.iov_len = len - off;
		n = tx_send(sk, fd, &v, 1, MSG_NOSIGNAL, true);
		if (n == USMC_PASS)	/* moved to TCP meanwhile */
			n = real.send(fd, v.iov_base, v.iov_len, MSG_NOSIGNAL);
		/* Failed: the handlers were told they went; lost as what TCP
		 * had buffered is lost on a reset. */
		tx_defer_off = n > 0 ? off + (uint32_t)n : len;
	}
}

static int tx_lock(struct usmc_sock *sk, bool flushing)
{
	int rc;

	if (!flushing && !tx_push(sk->sh))
		return -EAGAIN;		/* handlers nested past TX_NEST */
	rc = usmc_family_lock(&sk->sh->tx_lock);
	if (rc && !flushing)
		tx_release(sk, true);	/* the socket is unusable: queued bytes go too */
	return rc;
}

/* Returns true if queued handler bytes went out after ours. */
static inline __attribute__((always_inline)) bool tx_unlock(struct usmc_sock *sk, int fd,
							      bool flushing)
{
	usmc_family_unlock(&sk->sh->tx_lock);
	atomic_signal_fence(memory_order_seq_cst);
	if (flushing)
		return false;
	if (likely(!tx_defer_len)) {
		tx_pop();
		if (likely(!*(volatile uint32_t *)&tx_defer_len) || tx_defer_sh != sk->sh)
			return false;
		/* Queued just before the pop: ours to send (a handler that
		 * sent on this socket since has sent them first). */
		if (!tx_push(sk->sh))
			return false;
	} else if (tx_defer_sh != sk->sh) {
		tx_pop();		/* an outer frame's socket: it sends them */
		return false;
	}
	tx_flush_deferred(sk, fd);
	return true;
}

/*
 * The fast path (sock.h): all of it fits now.  The sender's rules are
 * tx_send()'s: the lazy view, the rewind, the backed room.
 */
ssize_t usmc_tx_fast(struct usmc_sock *sk, int fd, const void *buf, size_t n, int flags)
{
	struct usmc_flock *l = &sk->sh->tx_lock;
	uint64_t head, prod;

	if (unlikely((flags & ~(MSG_DONTWAIT | MSG_NOSIGNAL)) || !n || usmc_opt.dmb_copy))
		return USMC_SLOW;
	if (unlikely(!usmc_fast_ok(sk, l) || tx_depth || tx_defer_len ||
		     (LOAD_ACQUIRE(&sk->tx_c->flags) & (CDC_F_CLOSED | CDC_F_ABORT))))
		return USMC_SLOW;
	/* tx_look() without its locks (a handler may have interrupted a
	 * holder of sk->lock): a peek that finds anything on TCP leaves it
	 * to the slow path's look. */
	if (unlikely(tx_look_due(sk))) {
		int saved = errno;
		char c;
		bool quiet = real.recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) < 0 &&
			     (errno == EAGAIN || errno == EWOULDBLOCK);

		errno = saved;
		if (!quiet)
			return USMC_SLOW;
		sk_peer_seen(sk);
	}
	/* tx_lock(), where usmc_fast_ok() checked that the flag will do */
	tx_push(sk->sh);
	usmc_family_hold(l);
	if (unlikely(!usmc_tx_view_lazy(sk, &head, &prod, n)))
		goto slow;
	tx_rewind(sk, &head, &prod);
	/* usmc_tx_room()'s answer when the write lies in the backed part. */
	if (unlikely(ring_free(prod, head, sk->size) < n))
		goto slow;
	if (unlikely((prod & (sk->size - 1)) + n > LOAD_RELAXED(&sk->sh->tx_hw)) &&
	    LOAD_RELAXED(&sk->sh->tx_hw) < sk->size && usmc_tx_room(sk, prod, head, n) < n)
		goto slow;
	ring_put(sk->tx_ring, sk->size, prod, buf, n);
	if (unlikely(tx_to_dmb(sk, prod, n) || usmc_guard_poisoned(sk->lgr->guard)))
		goto slow;
	/* Publish after the copy; pairs with the reader's acquire. */
	usmc_tx_publish(sk, prod + n);
	usmc_kick_data(sk);
	if (sk->st)
		usmc_stat_add(&sk->st->tx_bytes, n);
	tx_unlock(sk, fd, false);
	STAT_ADD(tx_bytes, n);
	STAT_CALL(tx, n);
	STAT_INC(tx_fast);
	return (ssize_t)n;
slow:
	/* Handlers' bytes queued meanwhile go first: as if their signal
	 * had come just before this call. */
	tx_unlock(sk, fd, false);
	return USMC_SLOW;
}

static bool zerocopy_on(int fd)
{
	socklen_t len = sizeof(int);
	int on = 0;

	return !real.getsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &on, &len) && on;
}

/*
 * The connection left shared memory: what our ring still holds for the
 * peer goes out on TCP first (migrate.c), then the caller's bytes, which
 * the kernel sends (USMC_PASS).  Called without tx_lock.
 */
static ssize_t tx_moved(struct usmc_sock *sk, int fd, bool nonblock, int flags)
{
	int rc;

	/* Shut down while moving: our FIN may still wait for the ring's
	 * bytes (close.c), and nothing may go after it. */
	if (sk_flag(sk, SKF_SHUT_WR)) {
		usmc_migrate_pump(sk, fd, false);
		return tx_fail(-EPIPE, flags);
	}
	rc = usmc_migrate_pump(sk, fd, !nonblock);
	return rc ? rc : USMC_PASS;
}

ssize_t usmc_tx(struct usmc_sock *sk, int fd, const struct iovec *iov, int iovcnt, int flags)
{
	return tx_send(sk, fd, iov, iovcnt, flags, false);
}

static ssize_t tx_send(struct usmc_sock *sk, int fd, const struct iovec *iov, int iovcnt,
		       int flags, bool flushing)
{
	struct iov_cursor ic = { iov, iovcnt, 0 };
	size_t total = iov_total(iov, iovcnt), done = 0;
	bool nonblock = (flags & MSG_DONTWAIT) || sk_flag(sk, SKF_NONBLOCK), fresh = false;
	int timeout = -1, rc;
	ssize_t ret;

	if (unlikely(tx_depth | tx_defer_len) && !flushing) {
		if (tx_is_held(sk->sh))		/* in a handler */
			return total ? tx_defer_add(sk, iov, iovcnt, total) : 0;
		/* Handlers' bytes still queued for this socket go first. */
		if (tx_defer_len && tx_defer_sh == sk->sh && tx_push(sk->sh))
			tx_flush_deferred(sk, fd);
	}
	usmc_server_resolve(sk, fd, true);
	usmc_sock_refresh(sk, fd);
	tx_look(sk, fd);
	if (sk_flag(sk, SKF_CONNECTING)) {
		if (nonblock)
			return -EAGAIN;
		rc = usmc_sock_connect_done(sk, fd);
		while (rc == -EINPROGRESS) {
			struct pollfd p = { .fd = fd, .events = POLLOUT };

			if (real.poll(&p, 1, -1) < 0)
				return -errno;
			rc = usmc_sock_connect_done(sk, fd);
		}
		if (rc == USMC_CONNECT_FAILED)
			return USMC_PASS;	/* the kernel reports the error */
		if (rc)
			return rc;
	}
	/* Urgent data is TCP's alone: the connection moves there first,
	 * every byte in order (migrate.c), and the kernel sends this one. */
	if (unlikely(flags & MSG_OOB) &&
	    (sk_mode(sk) == USMC_MODE_SMCD || sk_mode(sk) == USMC_MODE_PROPOSED)) {
		rc = usmc_conn_to_tcp(sk, fd, USMC_R_OOB);
		if (rc)
			return rc;
	}
	/* Zero-copy sends complete on the kernel's error queue, which the
	 * ring never feeds (a program waiting for its buffers back would
	 * wait forever): with SO_ZEROCOPY on, the connection moves to TCP
	 * first; without it the kernel ignores the flag, and so do we. */
	if (unlikely(flags & MSG_ZEROCOPY) &&
	    (sk_mode(sk) == USMC_MODE_SMCD || sk_mode(sk) == USMC_MODE_PROPOSED) &&
	    zerocopy_on(fd)) {
		rc = usmc_conn_to_tcp(sk, fd, USMC_R_SOCKOPT);
		if (rc)
			return rc;
	}
	if (sk_mode(sk) == USMC_MODE_MIGRATING || sk_mode(sk) == USMC_MODE_TCP) {
moved:
		return tx_moved(sk, fd, nonblock, flags);
	}
	if (!total)
		return 0;

	rc = tx_lock(sk, flushing);
	if (rc)
		return rc;
	for (;;) {
		uint64_t prod, head, space;

		/* Moved to TCP since we looked: the pump fixed the end of the
		 * ring under this lock (migrate.c); nothing more goes into it. */
		if (unlikely(sk_mode(sk) == USMC_MODE_MIGRATING || sk_mode(sk) == USMC_MODE_TCP)) {
			if (done)
				break;
			tx_unlock(sk, fd, flushing);
			goto moved;
		}
		/* Another thread of ours is moving it (tcp.c usmc_conn_to_tcp:
		 * a fork's walk, MSG_OOB): its cut was taken under this lock,
		 * and what went into the ring now nobody would send, nor the
		 * peer read (a fork per connection lost a request so).  Ours
		 * follow its bytes on TCP once it is done. */
		if (unlikely(sk_flag(sk, SKF_MOVING))) {
			if (done)
				break;
			tx_unlock(sk, fd, flushing);
			rc = usmc_move_wait(sk, fd, nonblock);
			if (rc)
				return rc;
			goto moved;
		}

		rc = tx_state(sk, !done);
		if (rc) {
			if (rc == 1) {
				ssize_t k = tx_to_gone(fd, &ic, (size_t)usmc_tx_cap(sk), flags);

				if (k > 0 || done) {
					done += k > 0 ? (size_t)k : 0;
					break;
				}
				tx_unlock(sk, fd, flushing);
				return tx_fail(k, flags);
			}
			if (done)
				break;
			tx_unlock(sk, fd, flushing);
			return tx_fail(rc, flags);
		}
		/* cons pairs with the reader's release store; want SIZE_MAX
		 * is never met by an old cons: load it */
		if (unlikely(!tx_unproven(sk, &head, &prod) &&
			     !usmc_tx_view_lazy(sk, &head, &prod, fresh ? SIZE_MAX : total - done))) {
			usmc_sock_abort(sk, USMC_A_PROTOCOL);
			continue;
		}
		tx_rewind(sk, &head, &prod);
		space = tx_want(sk, prod, head, total - done);
		if (unlikely(space < total) && !done && total <= usmc_tx_whole(usmc_tx_cap(sk)))
			space = 0;	/* whole or not at all (tx.h) */
		space = usmc_tx_room(sk, prod, head, (size_t)space);
		if (space) {
			size_t n = (size_t)space;

			iov_to_ring(&ic, sk->tx_ring, sk->size, prod, n);
			if (unlikely(tx_to_dmb(sk, prod, n) ||
				     usmc_guard_poisoned(sk->lgr->guard))) {
				/* The peer truncated our shared memory (guard.c),
				 * or the device could not move the bytes. */
				usmc_sock_abort(sk, USMC_A_PROTOCOL);
				continue;
			}
			/* Publish after the copy; pairs with the reader's acquire. */
			usmc_tx_publish(sk, prod + n);
			done += n;
			/* Also while PROPOSED: the server may have accepted and
			 * be asleep on its first read already. */
			usmc_kick_data(sk);
			fresh = false;
			if (done == total)
				break;
			continue;
		}
		/* No room by an old cons (or by what is backed: a rewind needs
		 * the ring seen empty): look at the reader's line before
		 * giving up or sleeping on what wait_ready() sees as free. */
		if (!fresh) {
			fresh = true;
			continue;
		}
		STAT_INC(tx_full);
		tx_nospace(sk);
		if (nonblock)
			break;
		/* A handler's bytes now follow ours: what we sent is all. */
		if (tx_unlock(sk, fd, flushing) && done)
			return (ssize_t)done;
		if (timeout == -1)
			timeout = usmc_sock_timeout(sk, fd, SO_SNDTIMEO);
		rc = usmc_wait(sk, fd, USMC_WAIT_TX, timeout);
		/* Interrupted: TCP returns what it has sent, SA_RESTART or
		 * not; with nothing sent, EINTR or a restart, as the kernel. */
		if (rc == -EINTR && !done && !usmc_sig_should_eintr(timeout))
			rc = 0;
		usmc_sock_refresh(sk, fd);
		if (sk_mode(sk) == USMC_MODE_MIGRATING || sk_mode(sk) == USMC_MODE_TCP) {
			/* Moved to TCP while we waited: the rest goes there,
			 * behind what the ring still holds. */
			if (done || rc)
				return done ? (ssize_t)done : rc;
			goto moved;
		}
		if (rc)
			return done ? (ssize_t)done : rc;
		if (tx_lock(sk, flushing))
			return done ? (ssize_t)done : -EIO;
	}
	/* The connection's counter under tx_lock: one writer, also when
	 * forked processes share the socket (stats.h). */
	if (done && sk->st)
		usmc_stat_add(&sk->st->tx_bytes, done);
	tx_unlock(sk, fd, flushing);
	ret = done ? (ssize_t)done : -EAGAIN;
	if (done) {
		STAT_ADD(tx_bytes, done);
		STAT_CALL(tx, done);
	}
	return ret;
}

/* ---- for tx_splice.c (tx_int.h) ------------------------------------------ */

bool usmc_tx_held(const struct usmc_sock_sh *sh)
{
	return unlikely(tx_depth) && tx_is_held(sh);
}

int usmc_tx_lock(struct usmc_sock *sk)
{
	return tx_lock(sk, false);
}

void usmc_tx_unlock(struct usmc_sock *sk, int fd)
{
	tx_unlock(sk, fd, false);
}

int usmc_tx_state(struct usmc_sock *sk, bool take)
{
	return tx_state(sk, take);
}

ssize_t usmc_tx_moved(struct usmc_sock *sk, int fd, bool nonblock, int flags)
{
	return tx_moved(sk, fd, nonblock, flags);
}

ssize_t usmc_tx_fail(ssize_t err, int flags)
{
	return tx_fail(err, flags);
}
