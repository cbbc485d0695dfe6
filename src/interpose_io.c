// SPDX-License-Identifier: MIT
/*
 * interpose_io.c - the data path wrappers: read/write, send/recv and their
 * vector, message and batch forms, sendfile and splice.
 *
 * A tracked connection on the shared-memory path goes to rx.c/tx.c; any
 * other descriptor is passed to libc untouched, with only the counters
 * updated for sockets usmc tracks.
 */
#include "interpose.h"
#include "epoll.h"
#include "fdtab.h"
#include "guard.h"
#include "handover.h"
#include "lgr.h"
#include "log.h"
#include "migrate.h"
#include "options.h"
#include "poll.h"
#include "real.h"
#include "registry.h"
#include "rx.h"
#include "sock.h"
#include "stats.h"
#include "sys.h"
#include "tcp.h"
#include "tx.h"

#include <dirent.h>
#include <limits.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>


/* ---- data path -------------------------------------------------------- */

/*
 * Every exported entry point calls the internal implementation, never
 * another exported wrapper: a call between two of ours through the PLT
 * would reach whatever another preloaded library put under that name
 * (__read_chk must not end in someone else's read), and would look the
 * descriptor up again (recvmmsg, sendmmsg).  INTERNAL bodies are inlined
 * into each entry point, so read() itself is the same code as before.
 */
#define INTERNAL static inline __attribute__((always_inline))

/* Receive into iov on a tracked socket; USMC_PASS when it is plain TCP. */
static ssize_t sk_rx(struct usmc_sock *sk, int fd, const struct iovec *iov, int cnt, int flags)
{
	if (sk_is_smc_path(sk)) {
		ssize_t r = usmc_rx(sk, fd, iov, cnt, flags);

		/* USMC_PASS: on TCP now, or migrating with the ring drained. */
		if (r != USMC_PASS)
			return r;
	}
	/* Declined after the client had closed with bytes queued in shared
	 * memory: they are lost, say so as TCP would (RST). */
	if (unlikely(sk_flag(sk, SKF_LOST)) &&
	    (atomic_fetch_and(&sk->sh->flags, ~SKF_LOST) & SKF_LOST))
		return -ECONNRESET;
	/* Our ring bytes moved to TCP late: a reset for them before a FIN
	 * that the peer's close sent ahead of them (migrate.c). */
	if (unlikely(sk_flag(sk, SKF_RESENT)) && !(flags & (MSG_OOB | MSG_ERRQUEUE))) {
		int rc = usmc_migrate_resent_check(sk, fd);

		if (rc)
			return rc;
	}
	/* The CLC wake or DECLINE message ahead of the peer's first TCP byte is
	 * never the application's, not even for a peek; urgent data and the
	 * error queue are not in the stream. */
	if (unlikely(sk_flag(sk, SKF_WAKEBYTE | SKF_TCP_DUP)) && !(flags & (MSG_OOB | MSG_ERRQUEUE))) {
		int rc = usmc_tcp_skip_wake(sk, fd, (flags & MSG_DONTWAIT) ||
					    sk_flag(sk, SKF_NONBLOCK));

		if (rc)
			return rc;
	}
	return USMC_PASS;
}

static bool iov_empty(const struct iovec *iov, int cnt)
{
	int i;

	for (i = 0; i < cnt; i++)
		if (iov[i].iov_len)
			return false;
	return true;
}

static ssize_t sk_tx(struct usmc_sock *sk, int fd, const struct iovec *iov, int cnt, int flags)
{
	if (!sk_is_smc_path(sk)) {
		if (unlikely(sk_flag(sk, SKF_RESENT)))
			usmc_migrate_resent_acked(sk, fd);
		return USMC_PASS;
	}
	return usmc_tx(sk, fd, iov, cnt, flags);
}

/* One buffer: the fast path (sock.h) first, then the general one. */
static inline __attribute__((always_inline)) ssize_t sk_rx1(struct usmc_sock *sk, int fd,
							     void *buf, size_t n, int flags)
{
	struct iovec v = { buf, n };
	ssize_t r = usmc_rx_fast(sk, fd, buf, n, flags);

	return likely(r != USMC_SLOW) ? r : sk_rx(sk, fd, &v, 1, flags);
}

static inline __attribute__((always_inline)) ssize_t sk_tx1(struct usmc_sock *sk, int fd,
							     const void *buf, size_t n, int flags)
{
	struct iovec v = { (void *)buf, n };
	ssize_t r = usmc_tx_fast(sk, fd, buf, n, flags);

	return likely(r != USMC_SLOW) ? r : sk_tx(sk, fd, &v, 1, flags);
}

INTERNAL ssize_t io_read(int fd, void *buf, size_t n)
{
	struct usmc_sock *sk;
	ssize_t r;

	ENSURE_REAL(read);
	sk = usmc_fd_get(fd);
	if (likely(!sk))
		return real.read(fd, buf, n);
	/* read(2) of nothing returns 0 at once (recv(2) would wait). */
	r = n ? sk_rx1(sk, fd, buf, n, 0) : USMC_PASS;
	if (r == USMC_PASS) {
		r = real.read(fd, buf, n);
		usmc_tcp_count(sk, r, false);
	} else {
		r = ret(r);
	}
	usmc_sock_put(sk);
	return r;
}

EXPORT ssize_t read(int fd, void *buf, size_t n)
{
	return io_read(fd, buf, n);
}

INTERNAL ssize_t io_write(int fd, const void *buf, size_t n)
{
	struct usmc_sock *sk;
	ssize_t r;

	ENSURE_REAL(write);
	sk = usmc_fd_get(fd);
	if (likely(!sk))
		return real.write(fd, buf, n);
	r = sk_tx1(sk, fd, buf, n, 0);
	if (r == USMC_PASS) {
		r = real.write(fd, buf, n);
		usmc_tcp_count(sk, r, true);
	} else {
		r = ret(r);
	}
	usmc_sock_put(sk);
	return r;
}

EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	return io_write(fd, buf, n);
}

ssize_t usmc_write_fd(int fd, const void *buf, size_t n)
{
	return io_write(fd, buf, n);
}

EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
	struct usmc_sock *sk;
	ssize_t r;

	ENSURE_REAL(readv);
	sk = usmc_fd_get(fd);
	if (likely(!sk))
		return real.readv(fd, iov, cnt);
	r = cnt < 0 || cnt > IOV_MAX ? -EINVAL :
	    iov_empty(iov, cnt) ? USMC_PASS : sk_rx(sk, fd, iov, cnt, 0);
	if (r == USMC_PASS) {
		r = real.readv(fd, iov, cnt);
		usmc_tcp_count(sk, r, false);
	} else {
		r = ret(r);
	}
	usmc_sock_put(sk);
	return r;
}

EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	struct usmc_sock *sk;
	ssize_t r;

	ENSURE_REAL(writev);
	sk = usmc_fd_get(fd);
	if (likely(!sk))
		return real.writev(fd, iov, cnt);
	r = cnt < 0 || cnt > IOV_MAX ? -EINVAL : sk_tx(sk, fd, iov, cnt, 0);
	if (r == USMC_PASS) {
		r = real.writev(fd, iov, cnt);
		usmc_tcp_count(sk, r, true);
	} else {
		r = ret(r);
	}
	usmc_sock_put(sk);
	return r;
}

INTERNAL ssize_t io_recv(int fd, void *buf, size_t n, int flags)
{
	struct usmc_sock *sk;
	ssize_t r;

	ENSURE_REAL(recv);
	sk = usmc_fd_get(fd);
	if (likely(!sk))
		return real.recv(fd, buf, n, flags);
	r = sk_rx1(sk, fd, buf, n, flags);
	if (r == USMC_PASS) {
		r = real.recv(fd, buf, n, flags);
		if (!(flags & MSG_PEEK))
			usmc_tcp_count(sk, r, false);
	} else {
		r = ret(r);
	}
	usmc_sock_put(sk);
	return r;
}

EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	return io_recv(fd, buf, n, flags);
}

EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	struct usmc_sock *sk;
	ssize_t r;

	ENSURE_REAL(send);
	sk = usmc_fd_get(fd);
	if (likely(!sk))
		return real.send(fd, buf, n, flags);
	r = sk_tx1(sk, fd, buf, n, flags);
	if (r == USMC_PASS) {
		r = real.send(fd, buf, n, flags);
		usmc_tcp_count(sk, r, true);
	} else {
		r = ret(r);
	}
	usmc_sock_put(sk);
	return r;
}

INTERNAL ssize_t io_recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *sa,
			     socklen_t *salen)
{
	struct usmc_sock *sk;
	ssize_t r;

	ENSURE_REAL(recvfrom);
	sk = usmc_fd_get(fd);
	if (likely(!sk))
		return real.recvfrom(fd, buf, n, flags, sa, salen);
	r = sk_rx1(sk, fd, buf, n, flags);
	if (r == USMC_PASS) {
		r = real.recvfrom(fd, buf, n, flags, sa, salen);
		if (!(flags & MSG_PEEK))
			usmc_tcp_count(sk, r, false);
	} else {
		/* A stream socket reports no source address. */
		if (r >= 0 && sa && salen)
			*salen = 0;
		r = ret(r);
	}
	usmc_sock_put(sk);
	return r;
}

EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *sa,
			socklen_t *salen)
{
	return io_recvfrom(fd, buf, n, flags, sa, salen);
}

EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa,
		      socklen_t salen)
{
	struct usmc_sock *sk;
	ssize_t r;

	ENSURE_REAL(sendto);
	sk = usmc_fd_get(fd);
	if (likely(!sk))
		return real.sendto(fd, buf, n, flags, sa, salen);
	r = sk_tx1(sk, fd, buf, n, flags);
	if (r == USMC_PASS) {
		r = real.sendto(fd, buf, n, flags, sa, salen);
		usmc_tcp_count(sk, r, true);
	} else {
		r = ret(r);
	}
	usmc_sock_put(sk);
	return r;
}

/*
 * TCP_INQ on a ring read: the control message tcp_recvmsg() adds, written
 * as put_cmsg() writes it (no room for a header: MSG_CTRUNC alone; room
 * for less than all of it: as much as fits, and MSG_CTRUNC).  The
 * option's state is the kernel's (setsockopt passes it on), asked once
 * per connection and kept in step by our setsockopt.
 */
static void msg_inq(struct usmc_sock *sk, int fd, struct msghdr *msg)
{
	struct cmsghdr cm = { .cmsg_level = SOL_TCP, .cmsg_type = TCP_CM_INQ };
	size_t room = msg->msg_control ? msg->msg_controllen : 0, len = CMSG_LEN(sizeof(int));
	int inq;

	msg->msg_controllen = 0;
	if (unlikely(!sk_flag(sk, SKF_INQ_KNOWN))) {
		socklen_t l = sizeof(inq);

		if (real.getsockopt(fd, IPPROTO_TCP, TCP_INQ, &inq, &l))
			return;
		atomic_fetch_or(&sk->sh->flags, SKF_INQ_KNOWN | (inq ? SKF_INQ : 0));
	}
	if (!sk_flag(sk, SKF_INQ))
		return;
	if (room < sizeof(cm)) {
		msg->msg_flags |= MSG_CTRUNC;
		return;
	}
	inq = usmc_rx_inq_hint(sk);
	if (inq < 0 && real.ioctl(fd, FIONREAD, &inq))
		inq = 0;
	if (room < len) {
		msg->msg_flags |= MSG_CTRUNC;
		len = room;
	}
	cm.cmsg_len = len;
	memcpy(msg->msg_control, &cm, sizeof(cm));
	memcpy(CMSG_DATA((struct cmsghdr *)msg->msg_control), &inq, len - sizeof(cm));
	msg->msg_controllen = MIN(CMSG_SPACE(sizeof(int)), room);
}

/* recvmsg(2) on a tracked socket: one call, or one message of recvmmsg. */
static ssize_t msg_rx(struct usmc_sock *sk, int fd, struct msghdr *msg, int flags)
{
	ssize_t r;

	r = !msg || msg->msg_iovlen > IOV_MAX ? -EINVAL :
	    sk_rx(sk, fd, msg->msg_iov, (int)msg->msg_iovlen, flags);
	if (r == USMC_PASS) {
		r = real.recvmsg(fd, msg, flags);
		if (r < 0)
			return -errno;
		if (!(flags & MSG_PEEK))
			usmc_tcp_count(sk, r, false);
	} else if (r >= 0) {
		msg->msg_namelen = 0;
		msg->msg_flags = 0;
		msg_inq(sk, fd, msg);
	}
	return r;
}

EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	struct usmc_sock *sk;
	ssize_t r;

	ENSURE_REAL(recvmsg);
	sk = usmc_fd_get(fd);
	if (likely(!sk))
		return unlikely(msg && msg->msg_controllen) ? usmc_scm_recvmsg(fd, msg, flags) :
							       real.recvmsg(fd, msg, flags);
	r = msg_rx(sk, fd, msg, flags);
	usmc_sock_put(sk);
	return ret(r);
}

/* sendmsg(2) on a tracked socket: one call, or one message of sendmmsg. */
static ssize_t msg_tx(struct usmc_sock *sk, int fd, const struct msghdr *msg, int flags)
{
	ssize_t r;

	r = !msg || msg->msg_iovlen > IOV_MAX ? -EINVAL :
	    sk_tx(sk, fd, msg->msg_iov, (int)msg->msg_iovlen, flags);
	if (r == USMC_PASS) {
		r = real.sendmsg(fd, msg, flags);
		if (r < 0)
			return -errno;
		usmc_tcp_count(sk, r, true);
	}
	return r;
}

EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	struct usmc_sock *sk;
	ssize_t r;

	ENSURE_REAL(sendmsg);
	sk = usmc_fd_get(fd);
	if (likely(!sk))
		return unlikely(msg && msg->msg_controllen) ? usmc_scm_sendmsg(fd, msg, flags) :
							       real.sendmsg(fd, msg, flags);
	usmc_handover_send(msg);
	r = msg_tx(sk, fd, msg, flags);
	usmc_sock_put(sk);
	return ret(r);
}

#define NSEC_PER_SEC	1000000000LL

/*
 * recvmmsg(2) on shared memory, as the kernel runs it (net/socket.c): each
 * message is one recvmsg with the caller's flags, so each waits as the
 * socket would; only MSG_WAITFORONE makes the ones after the first
 * non-blocking.  The timeout is looked at after each message (it never
 * cuts a wait short), set to what is left, and ends the call once spent.
 * An error after the first message ends it with what was received.
 */
static ssize_t mmsg_rx(struct usmc_sock *sk, int fd, struct mmsghdr *v, unsigned int n,
		       int flags, struct timespec *t)
{
	uint64_t end = 0, now;
	unsigned int i;
	ssize_t r = 0;

	if (t) {
		if (t->tv_sec < 0 || t->tv_nsec < 0 || t->tv_nsec >= NSEC_PER_SEC)
			return -EINVAL;
		/* A zero timeout ends the call after the first message. */
		if (t->tv_sec || t->tv_nsec)
			end = usmc_now_ns() +
			      (uint64_t)MIN(t->tv_sec, (time_t)(INT64_MAX / NSEC_PER_SEC / 2)) *
			      NSEC_PER_SEC + (uint64_t)t->tv_nsec;
	}
	n = MIN(n, (unsigned int)IOV_MAX);
	for (i = 0; i < n; i++) {
		r = msg_rx(sk, fd, &v[i].msg_hdr, flags & ~MSG_WAITFORONE);
		if (r < 0)
			break;
		v[i].msg_len = (unsigned int)r;
		if (flags & MSG_WAITFORONE)
			flags |= MSG_DONTWAIT;
		if (t) {
			now = usmc_now_ns();
			if (now >= end) {
				t->tv_sec = 0;
				t->tv_nsec = 0;
				i++;
				break;
			}
			t->tv_sec = (time_t)((end - now) / NSEC_PER_SEC);
			t->tv_nsec = (long)((end - now) % NSEC_PER_SEC);
		}
	}
	return i ? (ssize_t)i : r;
}

EXPORT int recvmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags, struct timespec *t)
{
	struct usmc_sock *sk;
	ssize_t r;

	ENSURE_REAL(recvmmsg);
	sk = usmc_fd_get(fd);
	if (likely(!sk))
		return usmc_scm_recvmmsg(fd, v, n, flags, t);
	r = sk_is_smc_path(sk) ? mmsg_rx(sk, fd, v, n, flags, t) : USMC_PASS;
	if (r == USMC_PASS) {
		r = real.recvmmsg(fd, v, n, flags, t);
		if (r < 0)
			r = -errno;
		else if (!(flags & MSG_PEEK))
			for (unsigned int i = 0; i < (unsigned int)r; i++)
				usmc_tcp_count(sk, v[i].msg_len, false);
	}
	usmc_sock_put(sk);
	return (int)ret(r);
}

static size_t msg_len(const struct msghdr *msg)
{
	size_t len = 0, i;

	for (i = 0; i < msg->msg_iovlen; i++)
		len += msg->msg_iov[i].iov_len;
	return len;
}

/*
 * sendmmsg(2) on shared memory, as the kernel runs it: one sendmsg per
 * message, until an error or a message that went out short.
 */
static ssize_t mmsg_tx(struct usmc_sock *sk, int fd, struct mmsghdr *v, unsigned int n,
		       int flags)
{
	unsigned int i;
	ssize_t r = 0;

	n = MIN(n, (unsigned int)IOV_MAX);
	for (i = 0; i < n; i++) {
		r = msg_tx(sk, fd, &v[i].msg_hdr, flags);
		if (r < 0)
			break;
		v[i].msg_len = (unsigned int)r;
		if ((size_t)r < msg_len(&v[i].msg_hdr)) {
			i++;
			break;
		}
	}
	return i ? (ssize_t)i : r;
}

EXPORT int sendmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags)
{
	struct usmc_sock *sk;
	ssize_t r;

	ENSURE_REAL(sendmmsg);
	sk = usmc_fd_get(fd);
	if (likely(!sk))
		return usmc_scm_sendmmsg(fd, v, n, flags);
	usmc_handover_sendmm(v, n);
	r = sk_is_smc_path(sk) ? mmsg_tx(sk, fd, v, n, flags) : USMC_PASS;
	if (r == USMC_PASS) {
		r = real.sendmmsg(fd, v, n, flags);
		if (r < 0)
			r = -errno;
		else
			for (unsigned int i = 0; i < (unsigned int)r; i++)
				usmc_tcp_count(sk, v[i].msg_len, true);
	}
	usmc_sock_put(sk);
	return (int)ret(r);
}

INTERNAL ssize_t io_sendfile(int out, int in, off_t *off, size_t count)
{
	struct usmc_sock *sk;
	ssize_t r;

	ENSURE_REAL(sendfile);
	sk = usmc_fd_get(out);
	if (likely(!sk))
		return real.sendfile(out, in, off, count);
	r = sk_is_smc_path(sk) ? usmc_tx_from_fd(sk, out, in, off, count, false) : USMC_PASS;
	if (r == USMC_PASS) {
		r = real.sendfile(out, in, off, count);
		usmc_tcp_count(sk, r, true);
	} else {
		r = ret(r);
	}
	usmc_sock_put(sk);
	return r;
}

EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t count)
{
	return io_sendfile(out, in, off, count);
}

EXPORT ssize_t sendfile64(int out, int in, off_t *off, size_t count)
{
	return io_sendfile(out, in, off, count);
}

EXPORT ssize_t splice(int in, off_t *off_in, int out, off_t *off_out, size_t len,
		      unsigned int flags)
{
	struct usmc_sock *si, *so;
	ssize_t r = USMC_PASS;

	ENSURE_REAL(splice);
	si = usmc_fd_get(in);
	so = usmc_fd_get(out);
	if (so && sk_is_smc_path(so) && !off_in)
		r = usmc_tx_from_fd(so, out, in, NULL, len, flags & SPLICE_F_NONBLOCK);
	else if (si && sk_is_smc_path(si) && !off_out)
		r = usmc_rx_to_fd(si, in, out, len, (int)flags);
	if (r == USMC_PASS)
		r = real.splice(in, off_in, out, off_out, len, flags);
	else
		r = ret(r);
	if (si)
		usmc_sock_put(si);
	if (so)
		usmc_sock_put(so);
	return r;
}

/* ---- fortified variants (_FORTIFY_SOURCE builds call these) ------------ */

extern void __chk_fail(void) __attribute__((noreturn));
ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
		       struct sockaddr *sa, socklen_t *salen);

EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	if (n > buflen)
		__chk_fail();
	return io_read(fd, buf, n);
}

EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
	if (n > buflen)
		__chk_fail();
	return io_recv(fd, buf, n, flags);
}

EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
			      struct sockaddr *sa, socklen_t *salen)
{
	if (n > buflen)
		__chk_fail();
	return io_recvfrom(fd, buf, n, flags, sa, salen);
}
