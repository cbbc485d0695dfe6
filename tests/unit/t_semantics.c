// SPDX-License-Identifier: MIT
/*
 * t_semantics.c - differential TCP semantics: what an application observes
 * on a usmc connection must be what it observes on plain TCP.
 *
 * Each scenario runs a server and a client in two forked processes over
 * 127.0.0.1 and logs every observable, transport-independent result
 * (return values, errno names, bytes, poll revents, SO_ERROR, ...) as one
 * transcript line.  tests/test_unit.py runs the program with USMC_DISABLE=1
 * (TCP through the same interposition) and normally (shared memory) and
 * requires identical transcripts.  In the accelerated run every scenario
 * also checks with `usmc stat` that its connections went through shared
 * memory (no fallback), and fails otherwise.
 *
 * Never printed: ports, byte counts that depend on buffer sizes (partial
 * non-blocking writes), timings.  Where an observation depends on the peer
 * having acted, the two processes synchronise over a socketpair and then
 * let things settle with a short sleep; no assertion depends on time.
 *
 * usage: t_semantics [scenario...]   (default: all; T_VERBOSE=1 to trace)
 * Output: the transcript on stdout; failures on stderr; exit 0/1.
 */
#include "t_util.h"

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/uio.h>

#define SETTLE_MS	30

struct ctx {
	const char *name;
	char side;			/* 'S' server, 'C' client */
	int fd;				/* the connection (harness-made unless OWN) */
	int lfd;			/* server: listener */
	uint16_t port;			/* listener port */
	int sync;			/* socketpair to the other side */
	char *log;
	size_t len, cap;
};

#define S_OWN_ACCEPT	0x1	/* server function accepts itself */
#define C_OWN_CONNECT	0x2	/* client function connects itself */
#define NO_SERVER	0x4	/* no server process at all */

struct scenario {
	const char *name;
	void (*server)(struct ctx *);
	void (*client)(struct ctx *);
	int flags;
	int smc;		/* endpoints expected on shared memory */
};

static volatile sig_atomic_t sigpipes;

static void on_sigpipe(int sig)
{
	(void)sig;
	sigpipes++;
}

static __attribute__((format(printf, 2, 3))) void say(struct ctx *c, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	n = snprintf(line, sizeof(line), "%s %c: ", c->name, c->side);
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	if (c->len + (size_t)n + 1 > c->cap) {
		c->cap = (c->cap + (size_t)n) * 2 + 4096;
		c->log = realloc(c->log, c->cap);
		if (!c->log)
			t_fail("realloc");
	}
	memcpy(c->log + c->len, line, (size_t)n);
	c->len += (size_t)n;
	c->log[c->len] = '\0';
	t_info("%.*s", n - 1, line);
}

/*
 * "5", or "-1 EAGAIN": a return value and its errno.  RV(call) makes the
 * call and formats at once; RVN(n) formats a value just returned (errno
 * still fresh).  Arguments of one say() are evaluated in any order, so a
 * say() never holds two calls whose order matters.
 */
static const char *fmt_rv(long r, int err)
{
	static char bufs[8][48];
	static unsigned int next;
	char *s = bufs[next++ % 8];

	if (r < 0)
		snprintf(s, 48, "%ld %s", r, t_errname(err));
	else
		snprintf(s, 48, "%ld", r);
	return s;
}

#define RV(call) ({ long r_; errno = 0; r_ = (long)(call); fmt_rv(r_, errno); })
#define RVN(n) fmt_rv((long)(n), errno)

static const char *revents_str(short ev, char *buf, size_t len)
{
	static const struct { short bit; const char *name; } names[] = {
		{ POLLIN, "IN" }, { POLLPRI, "PRI" }, { POLLOUT, "OUT" }, { POLLERR, "ERR" },
		{ POLLHUP, "HUP" }, { POLLNVAL, "NVAL" }, { POLLRDHUP, "RDHUP" },
	};
	size_t i, n = 0;

	buf[0] = '\0';
	for (i = 0; i < ARRAY_LEN(names); i++)
		if (ev & names[i].bit)
			n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? "|" : "", names[i].name);
	if (!n)
		snprintf(buf, len, "0");
	return buf;
}

/* poll once (timeout ms) for IN|OUT|RDHUP and describe what came back. */
static void say_poll(struct ctx *c, const char *what, int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLOUT | POLLRDHUP };
	char b[64];
	int r = poll(&p, 1, ms);

	say(c, "%s poll=%d revents=%s", what, r, r > 0 ? revents_str(p.revents, b, sizeof(b)) : "-");
}

/* Printable form of received bytes (short ones verbatim). */
static const char *shown(const char *buf, long n)
{
	static char out[160];
	long i;

	if (n <= 0)
		return "";
	if (n > 64) {
		snprintf(out, sizeof(out), "<%ld bytes>", n);
		return out;
	}
	out[0] = '\'';
	for (i = 0; i < n; i++)
		out[i + 1] = buf[i] >= 32 && buf[i] < 127 ? buf[i] : '.';
	out[n + 1] = '\'';
	out[n + 2] = '\0';
	return out;
}

static int so_error(int fd)
{
	int e = -1;
	socklen_t l = sizeof(e);

	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l))
		return -errno;
	return e;
}

static void settle(void)
{
	t_msleep(SETTLE_MS);
}

/*
 * Drain until EOF, checking pattern id from offset 0; returns the count.
 * A wrong byte fails the process, or clears *intact when given.
 */
static size_t drain_pat_ok(int fd, uint32_t id, size_t bufsz, bool *intact)
{
	char *buf = malloc(bufsz);
	size_t off = 0;

	for (;;) {
		ssize_t n = read(fd, buf, bufsz);
		long bad;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			t_fail("drain: %s after %zu bytes", strerror(errno), off);
		if (n == 0)
			break;
		bad = t_pat_check(id, off, buf, (size_t)n);
		if (bad >= 0 && !intact)
			t_fail("stream %u: wrong byte at %zu", id, off + (size_t)bad);
		if (bad >= 0)
			*intact = false;
		off += (size_t)n;
	}
	free(buf);
	return off;
}

static size_t drain_pat(int fd, uint32_t id, size_t bufsz)
{
	return drain_pat_ok(fd, id, bufsz, NULL);
}

/* ---- scenarios ---------------------------------------------------------- */

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

/* Read after the peer closed: the data, then 0; a blocked reader wakes. */
static void read_after_close_c(struct ctx *c)
{
	say(c, "write=%s", RV(write(c->fd, "last words", 10)));
	say(c, "close=%s", RV(close(c->fd)));
	t_sync_post(c->sync);
}

static void read_after_close_s(struct ctx *c)
{
	char buf[64];
	long n;

	t_sync_wait(c->sync);
	settle();
	say_poll(c, "peer closed", c->fd, 0);
	n = read(c->fd, buf, sizeof(buf));
	say(c, "read=%s %s", RVN(n), shown(buf, n));
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	say(c, "so_error=%d", so_error(c->fd));
}

static void close_wakes_reader_c(struct ctx *c)
{
	char buf[8];

	t_sync_post(c->sync);
	say(c, "blocked read=%s", RV(read(c->fd, buf, sizeof(buf))));
}

static void close_wakes_reader_s(struct ctx *c)
{
	t_sync_wait(c->sync);
	t_msleep(100);
	say(c, "close=%s", RV(close(c->fd)));
}

/* Write after the peer closed: first write "succeeds", then EPIPE + SIGPIPE. */
static void write_after_close_c(struct ctx *c)
{
	long n;

	t_sync_wait(c->sync);
	settle();
	say_poll(c, "peer closed", c->fd, 0);
	n = write(c->fd, "hello", 5);
	say(c, "write=%s sigpipes=%d", RVN(n), (int)sigpipes);
	settle();
	n = write(c->fd, "hello", 5);
	say(c, "write=%s sigpipes=%d", RVN(n), (int)sigpipes);
	n = send(c->fd, "hello", 5, MSG_NOSIGNAL);
	say(c, "send(NOSIGNAL)=%s sigpipes=%d", RVN(n), (int)sigpipes);
	n = send(c->fd, "hello", 5, 0);
	say(c, "send=%s sigpipes=%d", RVN(n), (int)sigpipes);
	n = writev(c->fd, &(struct iovec){ (char *)"v", 1 }, 1);
	say(c, "writev=%s sigpipes=%d", RVN(n), (int)sigpipes);
	say(c, "read=%s", RV(read(c->fd, (char[8]){ 0 }, 8)));
	say(c, "so_error=%d", so_error(c->fd));
}

static void write_after_close_s(struct ctx *c)
{
	say(c, "close=%s", RV(close(c->fd)));
	t_sync_post(c->sync);
}

/* Closing with unread data resets the connection: ECONNRESET once. */
static void reset_c(struct ctx *c)
{
	char buf[16];

	say(c, "write=%s", RV(write(c->fd, "unread data", 11)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	settle();
	say_poll(c, "after reset", c->fd, 0);
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	say(c, "send(NOSIGNAL)=%s", RV(send(c->fd, "x", 1, MSG_NOSIGNAL)));
	say(c, "so_error=%d", so_error(c->fd));
}

static void reset_s(struct ctx *c)
{
	t_sync_wait(c->sync);
	settle();
	say(c, "close with unread=%s", RV(close(c->fd)));
	t_sync_post(c->sync);
}

/* ... and SO_ERROR takes the error first. */
static void reset_soerror_c(struct ctx *c)
{
	char buf[16];

	say(c, "write=%s", RV(write(c->fd, "unread data", 11)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	settle();
	say(c, "so_error=%s", t_errname(so_error(c->fd)));
	say(c, "so_error=%s", t_errname(so_error(c->fd)));
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	say(c, "send(NOSIGNAL)=%s", RV(send(c->fd, "x", 1, MSG_NOSIGNAL)));
}

/* ... and a writer learns it too. */
static void reset_writer_c(struct ctx *c)
{
	say(c, "write=%s", RV(write(c->fd, "unread data", 11)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	settle();
	say(c, "send(NOSIGNAL)=%s", RV(send(c->fd, "x", 1, MSG_NOSIGNAL)));
	say(c, "send(NOSIGNAL)=%s", RV(send(c->fd, "x", 1, MSG_NOSIGNAL)));
	say(c, "read=%s", RV(read(c->fd, (char[8]){ 0 }, 8)));
	say(c, "sigpipes=%d", (int)sigpipes);
}

/* SO_LINGER {1, 0}: close sends RST even with nothing unread. */
static void linger0_c(struct ctx *c)
{
	t_sync_wait(c->sync);
	settle();
	say(c, "read=%s", RV(read(c->fd, (char[8]){ 0 }, 8)));
	say(c, "read=%s", RV(read(c->fd, (char[8]){ 0 }, 8)));
}

static void linger0_s(struct ctx *c)
{
	struct linger l = { 1, 0 };

	say(c, "SO_LINGER=%s", RV(setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l))));
	say(c, "close=%s", RV(close(c->fd)));
	t_sync_post(c->sync);
}

/* FIONREAD follows the queue. */
static void fionread_c(struct ctx *c)
{
	static char buf[1234];
	int q = -1;

	say(c, "fionread=%s %d", RV(ioctl(c->fd, FIONREAD, &q)), q);
	t_pat_fill(5, 0, buf, sizeof(buf));
	say(c, "write=%s", RV(write(c->fd, buf, sizeof(buf))));
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

/* Addresses and socket options are those of the TCP connection. */
struct addrs {
	struct sockaddr_in local, peer;
	socklen_t llen, plen;
};

static void get_addrs(int fd, struct addrs *a)
{
	a->llen = a->plen = sizeof(a->local);
	if (getsockname(fd, (struct sockaddr *)&a->local, &a->llen) ||
	    getpeername(fd, (struct sockaddr *)&a->peer, &a->plen))
		t_fail("getsockname/getpeername: %s", strerror(errno));
}

static bool sa_eq(const struct sockaddr_in *x, const struct sockaddr_in *y)
{
	return x->sin_family == y->sin_family && x->sin_port == y->sin_port &&
	       x->sin_addr.s_addr == y->sin_addr.s_addr;
}

static void sockopts(struct ctx *c)
{
	int v = -1, on = 1;
	socklen_t l = sizeof(v);

	say(c, "so_error=%d", so_error(c->fd));
	getsockopt(c->fd, SOL_SOCKET, SO_TYPE, &v, &l);
	say(c, "so_type=%d", v);
	l = sizeof(v);
	getsockopt(c->fd, SOL_SOCKET, SO_DOMAIN, &v, &l);
	say(c, "so_domain=%d", v);
	l = sizeof(v);
	getsockopt(c->fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l);
	say(c, "so_acceptconn=%d", v);
	say(c, "TCP_NODELAY set=%s", RV(setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on))));
	l = sizeof(v);
	getsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &v, &l);
	say(c, "TCP_NODELAY=%d", v != 0);
}

static void addresses_c(struct ctx *c)
{
	struct addrs me, srv;

	get_addrs(c->fd, &me);
	t_sync_recv(c->sync, &srv, sizeof(srv));
	say(c, "family=%d len=%u/%u", me.local.sin_family, me.llen, me.plen);
	say(c, "local==server.peer:%d peer==server.local:%d peer.port==listen port:%d",
	    sa_eq(&me.local, &srv.peer), sa_eq(&me.peer, &srv.local),
	    ntohs(me.peer.sin_port) == c->port);
	say(c, "local addr loopback:%d", me.local.sin_addr.s_addr == htonl(INADDR_LOOPBACK));
	sockopts(c);
}

static void addresses_s(struct ctx *c)
{
	struct addrs me;
	struct sockaddr_in a;
	socklen_t al = sizeof(a);

	get_addrs(c->fd, &me);
	t_sync_send(c->sync, &me, sizeof(me));
	say(c, "family=%d len=%u/%u local.port==listen port:%d", me.local.sin_family, me.llen,
	    me.plen, ntohs(me.local.sin_port) == c->port);
	getsockname(c->lfd, (struct sockaddr *)&a, &al);
	say(c, "listener so_error=%d", so_error(c->lfd));
	sockopts(c);
}

/* O_NONBLOCK (fcntl and FIONBIO) switches a connection both ways. */
static void nonblock_toggle_c(struct ctx *c)
{
	char buf[16];
	int on = 1, off = 0;
	long n;

	say(c, "nonblock=%d", !!(fcntl(c->fd, F_GETFL) & O_NONBLOCK));
	t_set_nonblock(c->fd, true);
	say(c, "nonblock=%d", !!(fcntl(c->fd, F_GETFL) & O_NONBLOCK));
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	t_set_nonblock(c->fd, false);
	say(c, "FIONBIO=%s", RV(ioctl(c->fd, FIONBIO, &on)));
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	say(c, "nonblock=%d", !!(fcntl(c->fd, F_GETFL) & O_NONBLOCK));
	say(c, "FIONBIO=%s", RV(ioctl(c->fd, FIONBIO, &off)));
	say(c, "nonblock=%d", !!(fcntl(c->fd, F_GETFL) & O_NONBLOCK));
	t_sync_post(c->sync);
	n = read(c->fd, buf, sizeof(buf));
	say(c, "blocking read=%s %s", RVN(n), shown(buf, n));
}

static void nonblock_toggle_s(struct ctx *c)
{
	t_sync_wait(c->sync);
	t_msleep(100);
	say(c, "write=%s", RV(write(c->fd, "late", 4)));
}

/* accept4 flags, and EAGAIN from a non-blocking listener. */
static void accept4_s(struct ctx *c)
{
	char buf[16];
	long n;
	int fd;

	t_set_nonblock(c->lfd, true);
	say(c, "accept4(empty)=%s", RV(accept4(c->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)));
	t_sync_post(c->sync);
	say(c, "listener poll=%#x", t_wait_fd(c->lfd, POLLIN, 5000));
	fd = accept4(c->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		t_fail("accept4: %s", strerror(errno));
	say(c, "accept4 ok");
	say(c, "nonblock=%d cloexec=%d", !!(fcntl(fd, F_GETFL) & O_NONBLOCK),
	    !!(fcntl(fd, F_GETFD) & FD_CLOEXEC));
	say(c, "read=%s", RV(read(fd, buf, sizeof(buf))));
	t_sync_post(c->sync);
	say(c, "poll=%#x", t_wait_fd(fd, POLLIN, 5000));
	n = read(fd, buf, sizeof(buf));
	say(c, "read=%s %s", RVN(n), shown(buf, n));
	close(fd);
}

static void accept4_c(struct ctx *c)
{
	t_sync_wait(c->sync);
	c->fd = t_connect(c->port);
	t_sync_wait(c->sync);
	say(c, "write=%s", RV(write(c->fd, "data", 4)));
}

/* Non-blocking connect: EINPROGRESS, writable, SO_ERROR 0. */
static void connect_nb_c(struct ctx *c)
{
	struct sockaddr_in a = t_addr(c->port);
	struct pollfd p;
	char buf[8];
	long n;
	int r;

	c->fd = t_ok(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
	say(c, "connect=%s", RV(connect(c->fd, (struct sockaddr *)&a, sizeof(a))));
	p.fd = c->fd;
	p.events = POLLOUT;
	r = poll(&p, 1, 5000);
	say(c, "poll=%d revents=%#x", r, p.revents);
	say(c, "so_error=%d", so_error(c->fd));
	say(c, "connect again=%s", RV(connect(c->fd, (struct sockaddr *)&a, sizeof(a))));
	say(c, "write=%s", RV(write(c->fd, "hi", 2)));
	t_set_nonblock(c->fd, false);
	n = read(c->fd, buf, sizeof(buf));
	say(c, "read=%s %s", RVN(n), shown(buf, n));
}

static void connect_nb_s(struct ctx *c)
{
	char buf[8];
	long n;

	n = recv(c->fd, buf, 2, MSG_WAITALL);
	say(c, "read=%s %s", RVN(n), shown(buf, n));
	say(c, "write=%s", RV(write(c->fd, "ok", 2)));
	t_msleep(20);
}

/* Request/response, the client speaking first. */
static void client_first_c(struct ctx *c)
{
	say(c, "request=%s", RV(write(c->fd, "GET / HTTP/1.0\r\n\r\n", 18)));
	say(c, "response bytes=%zu", drain_pat(c->fd, 6, 5000));
}

static void client_first_s(struct ctx *c)
{
	char buf[18];
	long n;

	n = recv(c->fd, buf, sizeof(buf), MSG_WAITALL);
	say(c, "request=%s %s", RVN(n), shown(buf, n));
	t_send_pat(c->fd, 6, 100000);
	say(c, "close=%s", RV(close(c->fd)));
}

/* The server speaks first (SMTP, MySQL...): the greeting goes out right
 * after accept, racing the client's connect(). Repeated: every one of
 * these connections must be accelerated. */
#define SERVER_FIRST_N 12

static void server_first_s(struct ctx *c)
{
	char buf[16];
	long n;
	int i;

	for (i = 0; i < SERVER_FIRST_N; i++) {
		int fd = t_accept(c->lfd);

		n = write(fd, "220 welcome\r\n", 13);
		if (i == 0)
			say(c, "greeting=%s", fmt_rv(n, errno));
		n = recv(fd, buf, 6, MSG_WAITALL);
		if (i == 0)
			say(c, "command=%s %s", fmt_rv(n, errno), shown(buf, n));
		n = write(fd, "221 bye\r\n", 9);
		close(fd);
	}
}

static void server_first_c(struct ctx *c)
{
	char buf[32];
	long n;
	int i;

	for (i = 0; i < SERVER_FIRST_N; i++) {
		int fd = t_connect(c->port);

		n = recv(fd, buf, 13, MSG_WAITALL);
		if (i == 0)
			say(c, "greeting=%s %s", fmt_rv(n, errno), shown(buf, n));
		write(fd, "QUIT\r\n", 6);
		n = recv(fd, buf, sizeof(buf), MSG_WAITALL);
		if (i == 0)
			say(c, "until EOF=%s %s", fmt_rv(n, errno), shown(buf, n));
		close(fd);
	}
}

/* Data written before the server accept()ed. */
static void early_data_c(struct ctx *c)
{
	char buf[8];
	long n;

	t_send_pat(c->fd, 7, 16000);
	say(c, "wrote 16000 before accept");
	t_sync_post(c->sync);
	n = recv(c->fd, buf, 2, MSG_WAITALL);
	say(c, "reply=%s %s", RVN(n), shown(buf, n));
}

static void early_data_s(struct ctx *c)
{
	t_sync_wait(c->sync);
	settle();
	c->fd = t_accept(c->lfd);
	t_recv_pat(c->fd, 7, 16000);
	say(c, "received 16000 intact");
	say(c, "write=%s", RV(write(c->fd, "ok", 2)));
	close(c->fd);
}

/* ECONNREFUSED, blocking and not; then the same socket connects for real. */
static uint16_t closed_port(void)
{
	struct sockaddr_in a = t_addr(0);
	int fd = t_ok(socket(AF_INET, SOCK_STREAM, 0));
	uint16_t port;

	t_ok(bind(fd, (struct sockaddr *)&a, sizeof(a)));
	port = t_sock_port(fd, false);
	close(fd);
	return port;
}

static void refused_c(struct ctx *c)
{
	struct sockaddr_in a = t_addr(closed_port()), good = t_addr(c->port);
	char buf[8];
	int fd = t_ok(socket(AF_INET, SOCK_STREAM, 0));
	int nb = t_ok(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
	long n;

	say(c, "connect=%s", RV(connect(fd, (struct sockaddr *)&a, sizeof(a))));
	say(c, "so_error=%d", so_error(fd));
	say(c, "connect=%s", RV(connect(nb, (struct sockaddr *)&a, sizeof(a))));
	say_poll(c, "refused", nb, 5000);
	say(c, "so_error=%s", t_errname(so_error(nb)));
	say(c, "so_error=%s", t_errname(so_error(nb)));
	say(c, "read=%s", RV(read(nb, buf, sizeof(buf))));
	close(nb);
	/* A refused socket may connect again. */
	say(c, "connect to listener=%s", RV(connect(fd, (struct sockaddr *)&good, sizeof(good))));
	say(c, "write=%s", RV(write(fd, "again", 5)));
	n = recv(fd, buf, 2, MSG_WAITALL);
	say(c, "read=%s %s", RVN(n), shown(buf, n));
	close(fd);
}

static void refused_s(struct ctx *c)
{
	char buf[8];
	long n;

	c->fd = t_accept(c->lfd);
	n = recv(c->fd, buf, 5, MSG_WAITALL);
	say(c, "read=%s %s", RVN(n), shown(buf, n));
	say(c, "write=%s", RV(write(c->fd, "ok", 2)));
	close(c->fd);
}

/* Calls on a socket that never connected. */
static void unconnected_c(struct ctx *c)
{
	int fd = t_ok(socket(AF_INET, SOCK_STREAM, 0));
	struct sockaddr_in a;
	socklen_t l = sizeof(a);
	char buf[4];

	say(c, "read=%s", RV(read(fd, buf, sizeof(buf))));
	say(c, "send(NOSIGNAL)=%s", RV(send(fd, "x", 1, MSG_NOSIGNAL)));
	say(c, "shutdown=%s", RV(shutdown(fd, SHUT_RDWR)));
	say(c, "getpeername=%s", RV(getpeername(fd, (struct sockaddr *)&a, &l)));
	say(c, "so_error=%d", so_error(fd));
	say_poll(c, "unconnected", fd, 0);
	close(fd);
}

/* SO_RCVTIMEO / SO_SNDTIMEO: EAGAIN after the timeout. */
static void timeo_c(struct ctx *c)
{
	struct timeval tv = { 0, 150000 };
	static char buf[65536];
	uint64_t total = 0;
	long n;

	say(c, "SO_RCVTIMEO=%s", RV(setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv))));
	say(c, "read=%s", RV(read(c->fd, buf, 16)));
	say(c, "recv=%s", RV(recv(c->fd, buf, 16, 0)));
	say(c, "recv(WAITALL)=%s", RV(recv(c->fd, buf, 16, MSG_WAITALL)));
	tv.tv_usec = 100000;
	say(c, "SO_SNDTIMEO=%s", RV(setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv))));
	for (;;) {
		t_pat_fill(8, total, buf, sizeof(buf));
		n = write(c->fd, buf, sizeof(buf));
		if (n < 0)
			break;
		total += (uint64_t)n;
	}
	say(c, "write until timeout: -1 %s", t_errname(errno));
	t_sync_send(c->sync, &total, sizeof(total));
	say(c, "shutdown(WR)=%s", RV(shutdown(c->fd, SHUT_WR)));
	tv.tv_sec = 5;
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	n = recv(c->fd, buf, 2, MSG_WAITALL);
	say(c, "reply=%s %s", RVN(n), shown(buf, n));
}

static void timeo_s(struct ctx *c)
{
	uint64_t total;
	size_t got;

	t_sync_recv(c->sync, &total, sizeof(total));
	got = drain_pat(c->fd, 8, 65536);
	say(c, "all accepted bytes arrived=%d", got == total);
	say(c, "write=%s", RV(write(c->fd, "ok", 2)));
}

/* shutdown(SHUT_RD): queued data is still read, then 0; writing goes on. */
static void shut_rd_c(struct ctx *c)
{
	char buf[32];
	long n;

	say(c, "write=%s", RV(write(c->fd, "before", 6)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	n = recv(c->fd, buf, 15, MSG_WAITALL);
	say(c, "read=%s %s", RVN(n), shown(buf, n));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
}

static void shut_rd_s(struct ctx *c)
{
	char buf[32];
	long n;

	t_sync_wait(c->sync);
	settle();
	say(c, "shutdown(RD)=%s", RV(shutdown(c->fd, SHUT_RD)));
	say_poll(c, "after SHUT_RD", c->fd, 0);
	n = read(c->fd, buf, sizeof(buf));
	say(c, "read=%s %s", RVN(n), shown(buf, n));
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	say(c, "write=%s", RV(write(c->fd, "still can write", 15)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	say(c, "shutdown(WR)=%s", RV(shutdown(c->fd, SHUT_WR)));
	say_poll(c, "after SHUT_RD+WR", c->fd, 0);
	t_sync_post(c->sync);
}

/* shutdown(SHUT_RDWR) on one side. */
static void shut_rdwr_c(struct ctx *c)
{
	char buf[8];

	say(c, "shutdown(RDWR)=%s", RV(shutdown(c->fd, SHUT_RDWR)));
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	say(c, "send(NOSIGNAL)=%s", RV(send(c->fd, "x", 1, MSG_NOSIGNAL)));
	say_poll(c, "self", c->fd, 0);
	say(c, "shutdown(RDWR) again=%s", RV(shutdown(c->fd, SHUT_RDWR)));
	say(c, "shutdown(bad how)=%s", RV(shutdown(c->fd, 7)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
}

static void shut_rdwr_s(struct ctx *c)
{
	char buf[8];

	t_sync_wait(c->sync);
	settle();
	say_poll(c, "peer shut", c->fd, 0);
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
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

/* The peer shut down with a little data queued: readable, RDHUP at once. */
static void rdhup_data_c(struct ctx *c)
{
	say(c, "write=%s", RV(write(c->fd, "0123456789", 10)));
	say(c, "shutdown(WR)=%s", RV(shutdown(c->fd, SHUT_WR)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
}

static void rdhup_data_s(struct ctx *c)
{
	char buf[32];
	long n;
	int q = -1;

	t_sync_wait(c->sync);
	settle();
	say_poll(c, "data+FIN queued", c->fd, 0);
	ioctl(c->fd, FIONREAD, &q);
	say(c, "fionread=%d", q);
	n = read(c->fd, buf, sizeof(buf));
	say(c, "read=%s %s", RVN(n), shown(buf, n));
	say_poll(c, "drained", c->fd, 0);
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	t_sync_post(c->sync);
}

/*
 * The client writes and closes at once, the server reads only afterwards
 * (echo data | nc; a request followed by close).  Repeated, since whether
 * the server's accept() saw the client's proposal yet varies: every byte
 * must arrive, on shared memory each time.
 */
#define WRITE_CLOSE_N 16

static void write_close_c(struct ctx *c)
{
	int i;

	for (i = 0; i < WRITE_CLOSE_N; i++) {
		int fd = t_connect(c->port);

		t_send_pat(fd, 11 + (uint32_t)i, 1000 + (size_t)i * 1000);
		close(fd);
		t_sync_post(c->sync);
	}
	say(c, "%d connections written and closed", WRITE_CLOSE_N);
}

static void write_close_s(struct ctx *c)
{
	int i, bad = 0;

	for (i = 0; i < WRITE_CLOSE_N; i++) {
		int fd = t_accept(c->lfd);
		bool intact = true;
		size_t got;

		t_sync_wait(c->sync);
		settle();
		got = drain_pat_ok(fd, 11 + (uint32_t)i, 4096, &intact);
		if (got != 1000 + (size_t)i * 1000 || !intact) {
			fprintf(stderr, "t_semantics: write_close: connection %d: %zu bytes "
				"arrived (%s), %zu were written\n", i, got,
				intact ? "intact" : "CORRUPT", 1000 + (size_t)i * 1000);
			bad++;
		}
		close(fd);
	}
	say(c, "connections with every byte intact: %d of %d", WRITE_CLOSE_N - bad,
	    WRITE_CLOSE_N);
}

static const struct scenario scenarios[] = {
	{ "basic_io", basic_io_s, basic_io_c, 0, 2 },
	{ "nonblock_io", nonblock_io_s, nonblock_io_c, 0, 2 },
	{ "peek", peek_s, peek_c, 0, 2 },
	{ "waitall", waitall_s, waitall_c, 0, 2 },
	{ "partial_write", partial_write_s, partial_write_c, 0, 2 },
	{ "dontwait_full", dontwait_full_s, dontwait_full_c, 0, 2 },
	{ "big_write", big_write_s, big_write_c, 0, 2 },
	{ "eof", eof_s, eof_c, 0, 2 },
	{ "rdhup_data", rdhup_data_s, rdhup_data_c, 0, 2 },
	{ "read_after_close", read_after_close_s, read_after_close_c, 0, 2 },
	{ "close_wakes_reader", close_wakes_reader_s, close_wakes_reader_c, 0, 2 },
	{ "write_after_close", write_after_close_s, write_after_close_c, 0, 2 },
	{ "reset", reset_s, reset_c, 0, 2 },
	{ "reset_soerror", reset_s, reset_soerror_c, 0, 2 },
	{ "reset_writer", reset_s, reset_writer_c, 0, 2 },
	{ "linger0", linger0_s, linger0_c, 0, 2 },
	{ "fionread", fionread_s, fionread_c, 0, 2 },
	{ "addresses", addresses_s, addresses_c, 0, 2 },
	{ "nonblock_toggle", nonblock_toggle_s, nonblock_toggle_c, 0, 2 },
	{ "accept4", accept4_s, accept4_c, S_OWN_ACCEPT | C_OWN_CONNECT, 2 },
	{ "connect_nonblock", connect_nb_s, connect_nb_c, C_OWN_CONNECT, 2 },
	{ "client_first", client_first_s, client_first_c, 0, 2 },
	{ "server_first", server_first_s, server_first_c, S_OWN_ACCEPT | C_OWN_CONNECT,
	  2 * SERVER_FIRST_N },
	{ "write_close", write_close_s, write_close_c, S_OWN_ACCEPT | C_OWN_CONNECT,
	  2 * WRITE_CLOSE_N },
	{ "early_data", early_data_s, early_data_c, S_OWN_ACCEPT, 2 },
	{ "refused", refused_s, refused_c, S_OWN_ACCEPT | C_OWN_CONNECT, 2 },
	{ "unconnected", NULL, unconnected_c, NO_SERVER | C_OWN_CONNECT, 0 },
	{ "timeo", timeo_s, timeo_c, 0, 2 },
	{ "shut_rd", shut_rd_s, shut_rd_c, 0, 2 },
	{ "shut_rdwr", shut_rdwr_s, shut_rdwr_c, 0, 2 },
	{ "writev_many", writev_many_s, writev_many_c, 0, 2 },
};

/* ---- harness -------------------------------------------------------------- */

static void side_main(const struct scenario *sc, char side, int sync, int logfd)
{
	struct ctx c = { .name = sc->name, .side = side, .fd = -1, .lfd = -1, .sync = sync };
	struct sigaction sa = { .sa_handler = on_sigpipe, .sa_flags = SA_RESTART };

	alarm(30);	/* a hang kills this side; the harness reports it */
	sigaction(SIGPIPE, &sa, NULL);
	if (side == 'S') {
		c.lfd = t_listen(&c.port);
		t_sync_send(sync, &c.port, sizeof(c.port));
		if (!(sc->flags & S_OWN_ACCEPT))
			c.fd = t_accept(c.lfd);
		sc->server(&c);
	} else {
		if (!(sc->flags & NO_SERVER) && !t_sync_recv(sync, &c.port, sizeof(c.port)))
			t_fail("no port from the server");
		if (!(sc->flags & C_OWN_CONNECT))
			c.fd = t_connect(c.port);
		sc->client(&c);
	}
	/* Both sides stay (sockets open) until both are done. */
	if (!(sc->flags & NO_SERVER)) {
		char d = 'D';

		t_sync_send(sync, &d, 1);
		do
			if (!t_sync_recv(sync, &d, 1))
				t_fail("barrier: the other side went away");
		while (d != 'D');
	}
	if (c.len)
		t_sync_send(logfd, c.log, c.len);
	_exit(0);
}

static char *slurp(int fd)
{
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);
	ssize_t n;

	while ((n = read(fd, buf + len, cap - len - 1)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		len += (size_t)n;
		if (cap - len < 2)
			buf = realloc(buf, cap *= 2);
	}
	buf[len] = '\0';
	return buf;
}

static pid_t spawn_side(const struct scenario *sc, char side, int sv[2], int lp[2])
{
	pid_t pid = t_fork_helper();

	if (pid == 0) {
		close(lp[0]);
		close(side == 'S' ? sv[0] : sv[1]);
		side_main(sc, side, side == 'S' ? sv[1] : sv[0], lp[1]);
	}
	close(lp[1]);
	return pid;
}

static bool side_ok(pid_t pid, const char *scen, char side)
{
	int st;

	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return false;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return true;
	fprintf(stderr, "t_semantics: %s %c: %s %d\n", scen, side,
		WIFSIGNALED(st) ? "killed by signal" : "exit status",
		WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	return false;
}

/* One scenario; false on failure (reported on stderr). */
static bool run_scenario(const struct scenario *sc)
{
	int sv[2], lps[2], lpc[2];
	pid_t ps = -1, pc;
	struct t_stats before, now;
	char *logc, *logs = NULL;
	bool ok = true;

	if (t_accel())
		t_stats_get(&before);
	t_sync_pair(sv);
	t_ok(pipe(lps));
	t_ok(pipe(lpc));
	if (!(sc->flags & NO_SERVER))
		ps = spawn_side(sc, 'S', sv, lps);
	else
		close(lps[1]);
	pc = spawn_side(sc, 'C', sv, lpc);
	close(sv[0]);
	close(sv[1]);
	logc = slurp(lpc[0]);
	if (ps > 0)
		logs = slurp(lps[0]);
	close(lpc[0]);
	close(lps[0]);
	ok &= side_ok(pc, sc->name, 'C');
	if (ps > 0)
		ok &= side_ok(ps, sc->name, 'S');
	printf("%s%s", logs ? logs : "", logc);
	fflush(stdout);
	free(logs);
	free(logc);

	if (t_accel()) {
		t_stats_get(&now);
		if (now.smc_conns - before.smc_conns != sc->smc ||
		    now.fallback != before.fallback) {
			fprintf(stderr, "t_semantics: %s: expected %d shared-memory endpoints and no "
				"fallback, got %lld and %lld fallbacks (reasons so far: {%s})\n",
				sc->name, sc->smc, now.smc_conns - before.smc_conns,
				now.fallback - before.fallback, now.fallback_names);
			ok = false;
		}
	}
	return ok;
}

int main(int argc, char **argv)
{
	int failed = 0, ran = 0, i, j;

	t_name = "t_semantics";
	signal(SIGPIPE, SIG_IGN);	/* the harness itself never writes to a socket */
	setvbuf(stdout, NULL, _IOFBF, 1 << 16);
	for (i = 0; i < (int)ARRAY_LEN(scenarios); i++) {
		const struct scenario *sc = &scenarios[i];
		bool want = argc < 2;

		for (j = 1; j < argc; j++)
			want |= !strcmp(argv[j], sc->name);
		if (!want)
			continue;
		ran++;
		if (!run_scenario(sc)) {
			failed++;
			fprintf(stderr, "t_semantics: %s: FAILED\n", sc->name);
		}
	}
	if (!ran)
		t_fail("no such scenario");
	fprintf(stderr, "t_semantics: %d scenarios, %d failed (%s)\n", ran, failed,
		t_accel() ? "shared memory" : "TCP");
	return failed ? T_EXIT_FAIL : T_EXIT_PASS;
}
