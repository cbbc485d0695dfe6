// SPDX-License-Identifier: MIT
/*
 * semantics_io.h - t_semantics scenarios about moving data: blocking and
 * non-blocking I/O, MSG_PEEK, MSG_WAITALL, partial and large writes, EOF,
 * FIONREAD, writev limits (the ends of a connection: semantics_close.h).
 *
 * Not a general header: it is included by t_semantics.c alone, after that
 * file's helpers (struct ctx, say(), RV(), settle(), drain_pat()...) and
 * before its scenario table.  Its functions are static on purpose: exactly
 * one translation unit includes it, and every one of them is used there.
 */
#ifndef SEMANTICS_IO_H
#define SEMANTICS_IO_H

/* Blocking read/write, readv/writev, send/recv, sendto/recvfrom, sendmsg/recvmsg. */
static void basic_io_c(struct ctx *c)
{
	char a[2], b[3], d[10], buf[100];
	struct iovec iov[3] = { { a, sizeof(a) }, { b, sizeof(b) }, { d, sizeof(d) } };
	struct sockaddr_storage ss;
	char ctl[64];
	struct msghdr m;
	struct sockaddr_in other = t_addr(9);
	long n;

	say(c, "write=%s", RV(write(c->fd, "hello", 5)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	settle();
	memset(d, 0, sizeof(d));
	n = readv(c->fd, iov, 3);
	say(c, "readv=%s", RVN(n));
	say(c, "readv iov0=%.2s iov1=%.3s iov2=%.*s", a, b, (int)(n > 5 ? n - 5 : 0), d);
	say(c, "send=%s", RV(send(c->fd, "xyz", 3, 0)));
	say(c, "sendto=%s", RV(sendto(c->fd, "to", 2, 0, NULL, 0)));
	/* An address on a connected stream socket is ignored. */
	say(c, "sendto(addr)=%s",
	    RV(sendto(c->fd, "TO", 2, 0, (struct sockaddr *)&other, sizeof(other))));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	settle();
	memset(&m, 0, sizeof(m));
	iov[0].iov_base = buf;
	iov[0].iov_len = 4;
	iov[1].iov_base = buf + 4;
	iov[1].iov_len = sizeof(buf) - 4;
	m.msg_iov = iov;
	m.msg_iovlen = 2;
	m.msg_name = &ss;
	m.msg_namelen = sizeof(ss);
	m.msg_control = ctl;
	m.msg_controllen = sizeof(ctl);
	n = recvmsg(c->fd, &m, 0);
	say(c, "recvmsg=%s %s", RVN(n), shown(buf, n));
	say(c, "recvmsg namelen=%u controllen=%zu flags=%#x", m.msg_namelen,
	    (size_t)m.msg_controllen, m.msg_flags);
	say(c, "write(0)=%s read(0)=%s", RV(write(c->fd, buf, 0)), RV(read(c->fd, buf, 0)));
	say(c, "send(0)=%s", RV(send(c->fd, buf, 0, 0)));
	/* TCP: a zero-length recv waits for data like any other (target 1). */
	say(c, "recv(0, DONTWAIT) empty=%s", RV(recv(c->fd, buf, 0, MSG_DONTWAIT)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
}

static void basic_io_s(struct ctx *c)
{
	char buf[100], e[] = "ef";
	struct iovec iov[3] = { { (char *)"ab", 2 }, { (char *)"cd", 2 }, { e, 2 } };
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct msghdr m;
	long n;

	t_sync_wait(c->sync);
	settle();
	n = read(c->fd, buf, sizeof(buf));
	say(c, "read=%s %s", RVN(n), shown(buf, n));
	say(c, "writev=%s", RV(writev(c->fd, iov, 3)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	settle();
	n = recv(c->fd, buf, 3, 0);
	say(c, "recv=%s %s", RVN(n), shown(buf, n));
	n = recvfrom(c->fd, buf, sizeof(buf), 0,
							   (struct sockaddr *)&ss, &sl);
	say(c, "recvfrom=%s %s salen=%u", RVN(n),
	    shown(buf, n), sl);
	memset(&m, 0, sizeof(m));
	iov[0].iov_base = (char *)"msg-";
	iov[0].iov_len = 4;
	iov[1].iov_base = (char *)"body";
	iov[1].iov_len = 4;
	m.msg_iov = iov;
	m.msg_iovlen = 2;
	say(c, "sendmsg=%s", RV(sendmsg(c->fd, &m, 0)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	say(c, "write(0)=%s read(0)=%s", RV(write(c->fd, buf, 0)), RV(read(c->fd, buf, 0)));
	t_sync_post(c->sync);
}

/* Non-blocking: every read flavour says EAGAIN on an empty socket. */
static void nonblock_io_c(struct ctx *c)
{
	char buf[64];
	long n;
	struct iovec iov = { buf, sizeof(buf) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };

	t_set_nonblock(c->fd, true);
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	say(c, "recv=%s", RV(recv(c->fd, buf, sizeof(buf), 0)));
	say(c, "readv=%s", RV(readv(c->fd, &iov, 1)));
	say(c, "recvfrom=%s", RV(recvfrom(c->fd, buf, sizeof(buf), 0, NULL, NULL)));
	say(c, "recvmsg=%s", RV(recvmsg(c->fd, &m, 0)));
	t_sync_wait(c->sync);	/* the server checked MSG_DONTWAIT */
	say(c, "write=%s", RV(write(c->fd, "w1", 2)));
	iov.iov_base = (char *)"v2";
	iov.iov_len = 2;
	say(c, "writev=%s", RV(writev(c->fd, &iov, 1)));
	say(c, "send=%s", RV(send(c->fd, "s3", 2, 0)));
	say(c, "sendto=%s", RV(sendto(c->fd, "t4", 2, MSG_DONTWAIT, NULL, 0)));
	iov.iov_base = (char *)"m5";
	say(c, "sendmsg=%s", RV(sendmsg(c->fd, &m, 0)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	settle();
	iov.iov_base = buf;
	iov.iov_len = sizeof(buf);
	n = recvmsg(c->fd, &m, 0);
	say(c, "recvmsg=%s %s", RVN(n), shown(buf, n));
	say(c, "read again=%s", RV(read(c->fd, buf, sizeof(buf))));
}

static void nonblock_io_s(struct ctx *c)
{
	char buf[64];
	long n;

	say(c, "recv(DONTWAIT)=%s", RV(recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT)));
	say(c, "recvfrom(DONTWAIT)=%s", RV(recvfrom(c->fd, buf, sizeof(buf), MSG_DONTWAIT, NULL, NULL)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	settle();
	n = read(c->fd, buf, sizeof(buf));
	say(c, "read=%s %s", RVN(n), shown(buf, n));
	say(c, "recv(DONTWAIT)=%s", RV(recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT)));
	say(c, "send(DONTWAIT)=%s", RV(send(c->fd, "reply", 5, MSG_DONTWAIT)));
	t_sync_post(c->sync);
}

/* MSG_PEEK leaves data in place; FIONREAD follows. */
static void peek_c(struct ctx *c)
{
	say(c, "write=%s", RV(write(c->fd, "abcdefgh", 8)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	say(c, "write=%s", RV(write(c->fd, "12345", 5)));
	t_sync_post(c->sync);
	t_msleep(150);
	say(c, "write=%s", RV(write(c->fd, "67890", 5)));
	t_sync_wait(c->sync);
}

static void peek_s(struct ctx *c)
{
	char buf[100], x[3], y[100];
	struct iovec iov[2] = { { x, sizeof(x) }, { y, sizeof(y) } };
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = 2 };
	int q = -1;
	long n;

	t_sync_wait(c->sync);
	settle();
	n = recv(c->fd, buf, 3, MSG_PEEK);
	say(c, "peek3=%s %s", RVN(n), shown(buf, n));
	n = recv(c->fd, buf, sizeof(buf), MSG_PEEK);
	say(c, "peek100=%s %s", RVN(n), shown(buf, n));
	n = recvmsg(c->fd, &m, MSG_PEEK);
	say(c, "peekmsg=%s %.3s|%s", RVN(n), x,
	    shown(y, n > 3 ? n - 3 : 0));
	say(c, "fionread=%s %d", RV(ioctl(c->fd, FIONREAD, &q)), q);
	n = read(c->fd, buf, 4);
	say(c, "read4=%s %s", RVN(n), shown(buf, n));
	n = recv(c->fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
	say(c, "peek(DONTWAIT)=%s %s", RVN(n),
	    shown(buf, n));
	n = read(c->fd, buf, sizeof(buf));
	say(c, "read=%s %s", RVN(n), shown(buf, n));
	say(c, "peek(DONTWAIT) empty=%s", RV(recv(c->fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT)));
	ioctl(c->fd, FIONREAD, &q);
	say(c, "fionread=%d", q);
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	settle();
	/* PEEK|WAITALL: 5 bytes are there, 5 more come later. */
	n = recv(c->fd, buf, 10, MSG_PEEK | MSG_WAITALL);
	say(c, "peek(WAITALL)=%s %s", RVN(n),
	    shown(buf, n));
	n = recv(c->fd, buf, 10, MSG_WAITALL);
	say(c, "recv(WAITALL)=%s %s", RVN(n), shown(buf, n));
	t_sync_post(c->sync);
}

/* MSG_WAITALL gathers several writes; EOF ends it early. */
static void waitall_c(struct ctx *c)
{
	char buf[1000];
	int i;

	for (i = 0; i < 4; i++) {
		t_pat_fill(1, (uint64_t)i * sizeof(buf), buf, sizeof(buf));
		say(c, "write=%s", RV(write(c->fd, buf, sizeof(buf))));
		t_msleep(40);
	}
	t_sync_wait(c->sync);
	say(c, "write=%s", RV(write(c->fd, buf, 500)));
	say(c, "shutdown(WR)=%s", RV(shutdown(c->fd, SHUT_WR)));
	t_sync_wait(c->sync);
}

static void waitall_s(struct ctx *c)
{
	char buf[4000];
	long n;

	n = recv(c->fd, buf, sizeof(buf), MSG_WAITALL);
	say(c, "recv(WAITALL 4000)=%s", RVN(n));
	say(c, "pattern ok=%d", n == 4000 && t_pat_check(1, 0, buf, 4000) < 0);
	t_sync_post(c->sync);
	say(c, "recv(WAITALL 1000)=%s", RV(recv(c->fd, buf, 1000, MSG_WAITALL)));
	say(c, "recv after EOF=%s", RV(recv(c->fd, buf, 1000, MSG_WAITALL)));
	t_sync_post(c->sync);
}

/* Non-blocking writes to a peer that does not read: EAGAIN, then all arrives. */
static void partial_write_c(struct ctx *c)
{
	static char buf[65536];
	uint64_t total = 0;
	struct pollfd p = { .fd = c->fd, .events = POLLOUT };
	long n = 0;
	int writes = 0;

	t_set_nonblock(c->fd, true);
	for (;;) {
		t_pat_fill(2, total, buf, sizeof(buf));
		n = write(c->fd, buf, sizeof(buf));
		if (n < 0)
			break;
		total += (uint64_t)n;
		if (++writes > 100000)
			t_fail("never got EAGAIN");
	}
	say(c, "write until full: last=-1 %s accepted>0:%d", t_errname(errno), total > 0);
	say(c, "send(DONTWAIT)=%s", RV(send(c->fd, buf, 1, MSG_DONTWAIT)));
	say(c, "poll(OUT, 0)=%d", poll(&p, 1, 0));
	t_sync_send(c->sync, &total, sizeof(total));
	t_sync_wait(c->sync);		/* the server read everything */
	n = poll(&p, 1, 2000);
	say(c, "poll(OUT)=%ld revents=%#x", n, p.revents);
	t_pat_fill(2, total, buf, 100);
	say(c, "write=%s", RV(write(c->fd, buf, 100)));
	say(c, "shutdown(WR)=%s", RV(shutdown(c->fd, SHUT_WR)));
}

static void partial_write_s(struct ctx *c)
{
	static char buf[65536];
	uint64_t total, got = 0;
	size_t rest;

	t_sync_recv(c->sync, &total, sizeof(total));
	while (got < total) {
		long n = read(c->fd, buf, MIN(sizeof(buf), total - got));

		if (n <= 0)
			t_fail("read: %ld %s", n, strerror(errno));
		if (t_pat_check(2, got, buf, (size_t)n) >= 0)
			t_fail("wrong bytes near offset %llu", (unsigned long long)got);
		got += (uint64_t)n;
	}
	say(c, "read every accepted byte intact=1");
	t_sync_post(c->sync);
	rest = 0;
	for (;;) {
		long n = read(c->fd, buf, sizeof(buf));

		if (n <= 0) {
			say(c, "final read=%s", fmt_rv(n, errno));
			break;
		}
		if (t_pat_check(2, got + rest, buf, (size_t)n) >= 0)
			t_fail("wrong tail bytes");
		rest += (size_t)n;
	}
	say(c, "tail=%zu", rest);
}

/* One blocking write larger than any buffer returns the full count. */
static void big_write_c(struct ctx *c)
{
	size_t len = 8u << 20;
	char *buf = malloc(len);

	t_pat_fill(3, 0, buf, len);
	say(c, "write(8M)=%s", RV(write(c->fd, buf, len)));
	say(c, "close=%s", RV(close(c->fd)));
	free(buf);
}

static void big_write_s(struct ctx *c)
{
	t_msleep(50);	/* let the writer block on a full buffer first */
	say(c, "received=%zu", drain_pat(c->fd, 3, 100000));
}

/* EOF only after every byte; the other direction keeps working. */
static void eof_c(struct ctx *c)
{
	char buf[16];
	long n;

	t_send_pat(c->fd, 4, 300000);
	say(c, "shutdown(WR)=%s", RV(shutdown(c->fd, SHUT_WR)));
	n = send(c->fd, "x", 1, MSG_NOSIGNAL);
	say(c, "send after SHUT_WR=%s sigpipes=%d", RVN(n), (int)sigpipes);
	n = send(c->fd, "x", 1, 0);
	say(c, "send after SHUT_WR=%s sigpipes=%d", RVN(n), (int)sigpipes);
	t_sync_post(c->sync);
	n = recv(c->fd, buf, 3, MSG_WAITALL);
	say(c, "read=%s %s", RVN(n), shown(buf, n));
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	say_poll(c, "after EOF", c->fd, 0);
}

static void eof_s(struct ctx *c)
{
	char buf[16];

	t_sync_wait(c->sync);
	say(c, "received=%zu", drain_pat(c->fd, 4, 7000));
	say(c, "read again=%s", RV(read(c->fd, buf, sizeof(buf))));
	say_poll(c, "at EOF", c->fd, 0);
	say(c, "write=%s", RV(write(c->fd, "bye", 3)));
	say(c, "close=%s", RV(close(c->fd)));
}

/* SIOCOUTQ (SIOCOUTQNSD: which) once the peer's side has had up to 2 s to
 * take our bytes: on loopback they are acked as soon as they sit in the
 * peer's receive buffer, read or not (a ring is that buffer). */
static int outq_settled(int fd, unsigned long which)
{
	int q = -1, i;

	for (i = 0; i < 200; i++) {
		if (ioctl(fd, which, &q) || !q)
			break;
		t_msleep(10);
	}
	return q;
}

/* FIONREAD follows the queue; SIOCOUTQ does not count what the peer has. */
static void fionread_c(struct ctx *c)
{
	static char buf[1234];
	int q = -1;

	say(c, "fionread=%s %d", RV(ioctl(c->fd, FIONREAD, &q)), q);
	t_pat_fill(5, 0, buf, sizeof(buf));
	say(c, "write=%s", RV(write(c->fd, buf, sizeof(buf))));
	say(c, "outq=%d outqnsd=%d", outq_settled(c->fd, SIOCOUTQ),
	    outq_settled(c->fd, SIOCOUTQNSD));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	say(c, "shutdown(WR)=%s", RV(shutdown(c->fd, SHUT_WR)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
}

static void fionread_s(struct ctx *c)
{
	char buf[1234];
	int q = -1;

	t_sync_wait(c->sync);
	settle();
	say(c, "fionread=%s %d", RV(ioctl(c->fd, FIONREAD, &q)), q);
	say(c, "read=%s", RV(read(c->fd, buf, 1000)));
	ioctl(c->fd, FIONREAD, &q);
	say(c, "fionread=%d", q);
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	q = -1;
	ioctl(c->fd, FIONREAD, &q);
	say(c, "fionread=%d", q);
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	settle();
	q = -1;
	say(c, "fionread at EOF=%s %d", RV(ioctl(c->fd, FIONREAD, &q)), q);
	t_sync_post(c->sync);
}

/* writev of IOV_MAX iovecs; more is EINVAL. */
static void writev_many_c(struct ctx *c)
{
	static struct iovec iov[IOV_MAX + 1];
	static char buf[IOV_MAX * 200];
	volatile int minus_one = -1;	/* hidden from the compiler's checks */
	size_t off = 0;
	int i;

	t_pat_fill(9, 0, buf, sizeof(buf));
	for (i = 0; i <= IOV_MAX; i++) {
		size_t len = (size_t)(i * 7 % 200);

		iov[i].iov_base = buf + off;
		iov[i].iov_len = len;
		if (i < IOV_MAX)
			off += len;
	}
	say(c, "writev(IOV_MAX+1)=%s", RV(writev(c->fd, iov, IOV_MAX + 1)));
	say(c, "writev(-1)=%s", RV(writev(c->fd, iov, minus_one)));
	say(c, "writev(0)=%s", RV(writev(c->fd, iov, 0)));
	say(c, "writev(IOV_MAX)=%s expected=%zu", RV(writev(c->fd, iov, IOV_MAX)), off);
	close(c->fd);
}

static void writev_many_s(struct ctx *c)
{
	static struct iovec iov[IOV_MAX];
	static char buf[IOV_MAX * 200];
	size_t off = 0;
	int i;

	for (;;) {
		long n;

		for (i = 0; i < IOV_MAX; i++) {
			iov[i].iov_base = buf + off + (size_t)i * 3;
			iov[i].iov_len = 3;
		}
		if (off + IOV_MAX * 3 > sizeof(buf))
			t_fail("too much data");
		n = readv(c->fd, iov, IOV_MAX);
		if (n < 0)
			t_fail("readv: %s", strerror(errno));
		if (n == 0)
			break;
		off += (size_t)n;
	}
	say(c, "received=%zu intact=%d", off, t_pat_check(9, 0, buf, off) < 0);
}

/* Blocking writes from a sender while the receiver is slow: no byte lost. */
static void dontwait_full_c(struct ctx *c)
{
	static char buf[65536];
	uint64_t total = 0;
	long n;

	for (;;) {
		t_pat_fill(10, total, buf, sizeof(buf));
		n = send(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n < 0)
			break;
		total += (uint64_t)n;
	}
	say(c, "send(DONTWAIT) until full: -1 %s", t_errname(errno));
	say(c, "nonblock flag untouched=%d", !(fcntl(c->fd, F_GETFL) & O_NONBLOCK));
	t_sync_send(c->sync, &total, sizeof(total));
	close(c->fd);
}

static void dontwait_full_s(struct ctx *c)
{
	uint64_t total;

	t_sync_recv(c->sync, &total, sizeof(total));
	say(c, "all arrived=%d", drain_pat(c->fd, 10, 65536) == total);
}

/*
 * POLLOUT as TCP reports it: not after the reader took a little of a full
 * buffer (TCP wants a third free), and again once it took everything.
 * socat -b 65536 selected writable, wrote 64 KiB and blocked there with
 * both directions full under usmc (it reported one free byte).
 */
static void pollout_c(struct ctx *c)
{
	static char buf[65536];
	char b[64];
	struct pollfd p = { .fd = c->fd, .events = POLLOUT };
	int n;

	while (send(c->fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
		;
	say(c, "full: send -1 %s, poll=%d", t_errname(errno), poll(&p, 1, 0));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);		/* the reader took 4 KiB */
	settle();
	p.revents = 0;
	say(c, "after 4 KiB read: poll=%d", poll(&p, 1, 0));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);		/* the reader took everything */
	p.revents = 0;
	n = poll(&p, 1, 2000);
	say(c, "after all read: poll=%d revents=%s", n, revents_str(p.revents, b, sizeof(b)));
	t_sync_post(c->sync);
}

static void pollout_s(struct ctx *c)
{
	static char buf[65536];
	int i;

	t_sync_wait(c->sync);
	t_read_all(c->fd, buf, 4096);
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	/* Everything, until a few quiet looks in a row. */
	for (i = 0; i < 5; i++) {
		if (recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
			i = -1;
		else
			settle();
	}
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	say(c, "drained");
}

#endif /* SEMANTICS_IO_H */
