// SPDX-License-Identifier: MIT
/*
 * t_sendfile.c - sendfile(2) and splice(2) on accelerated sockets.
 *
 *   sendfile_off      file -> socket with an offset pointer: the offset
 *                     advances, the file position does not move
 *   sendfile_pos      offset NULL: the file position advances
 *   sendfile_range    a range in the middle; a count past EOF stops at EOF
 *   sendfile_nb       non-blocking socket, peer not reading: a short count or
 *                     EAGAIN, then everything arrives once the peer reads
 *   splice_in         pipe -> socket (a writer thread feeds the pipe)
 *   splice_in_short   pipe -> socket asking for more than the pipe holds,
 *                     its writer still open: what the pipe holds, at once
 *                     (the kernel's splice does not wait to fill the count:
 *                     it waited for ever); an empty pipe with
 *                     SPLICE_F_NONBLOCK: EAGAIN
 *   splice_out        socket -> pipe (a reader thread drains the pipe);
 *                     an empty O_NONBLOCK socket: EAGAIN; SPLICE_F_NONBLOCK
 *                     alone still waits for the socket (it is about the
 *                     pipe); EOF: 0
 *   splice_out_full   socket -> pipe, more queued than the pipe holds and
 *                     nobody draining it: what fits, as the kernel does (it
 *                     blocked for ever), then the rest in order
 *
 * Every byte is pattern-checked by the receiver.  Each check runs in its own
 * process and must leave its connections on shared memory, and the rings
 * must have carried the bytes (tx_bytes grows by at least the payload).
 *
 * usage: t_sendfile [check...]     (T_BYTES: payload size, default 3 MiB)
 */
#include "t_util.h"

#include <pthread.h>
#include <sys/sendfile.h>

static size_t payload = 3u << 20;

/* A temporary file holding pattern id bytes 0..len. */
static int pattern_file(uint32_t id, size_t len)
{
	char path[] = "/tmp/t_sendfile.XXXXXX";
	int fd = t_ok(mkstemp(path));
	char buf[65536];
	size_t off = 0;

	unlink(path);
	while (off < len) {
		size_t n = len - off < sizeof(buf) ? len - off : sizeof(buf);

		t_pat_fill(id, off, buf, n);
		if (write(fd, buf, n) != (ssize_t)n)
			t_fail("write file: %s", strerror(errno));
		off += n;
	}
	t_ok(lseek(fd, 0, SEEK_SET));
	return fd;
}

/* Reader thread: verify len bytes of stream id starting at stream offset off. */
struct reader {
	int fd;
	uint32_t id;
	uint64_t off;
	size_t len;
};

static void *read_range(void *arg)
{
	struct reader *r = arg;
	char buf[65536];
	size_t got = 0;

	while (got < r->len) {
		size_t n = r->len - got < sizeof(buf) ? r->len - got : sizeof(buf);
		long bad;

		t_read_all(r->fd, buf, n);
		bad = t_pat_check(r->id, r->off + got, buf, n);
		if (bad >= 0)
			t_fail("stream %u: wrong byte at %llu", r->id,
			       (unsigned long long)(r->off + got + (size_t)bad));
		got += n;
	}
	return NULL;
}

static pthread_t start_reader(struct reader *r)
{
	pthread_t th;

	if (pthread_create(&th, NULL, read_range, r))
		t_fail("pthread_create");
	return th;
}

static void expect_ring_bytes(const struct t_stats *before, size_t bytes)
{
	struct t_stats now;

	if (!t_accel())
		return;
	t_stats_get(&now);
	if ((uint64_t)(now.tx_bytes - before->tx_bytes) < bytes)
		t_fail("rings carried %lld bytes, %zu were sent", now.tx_bytes - before->tx_bytes,
		       bytes);
}

/* ---- checks ------------------------------------------------------------- */

static void check_sendfile_off(void)
{
	struct t_stats before;
	struct reader r;
	pthread_t th;
	int c, s, f = pattern_file(1, payload);
	off_t off = 0;

	t_pair_smc(&c, &s);
	if (t_accel())
		t_stats_get(&before);
	r = (struct reader){ s, 1, 0, payload };
	th = start_reader(&r);
	while ((size_t)off < payload) {
		ssize_t n = sendfile(c, f, &off, payload - (size_t)off);

		if (n <= 0)
			t_fail("sendfile at %lld: %zd %s", (long long)off, n, strerror(errno));
	}
	pthread_join(th, NULL);
	t_assert((size_t)off == payload, "offset %lld", (long long)off);
	t_assert(lseek(f, 0, SEEK_CUR) == 0, "the file position moved");
	expect_ring_bytes(&before, payload);
	close(f);
	close(c);
	close(s);
}

static void check_sendfile_pos(void)
{
	struct reader r;
	pthread_t th;
	int c, s, f = pattern_file(2, payload);
	size_t done = 0;

	t_pair_smc(&c, &s);
	r = (struct reader){ s, 2, 0, payload };
	th = start_reader(&r);
	while (done < payload) {
		ssize_t n = sendfile(c, f, NULL, payload - done);

		if (n <= 0)
			t_fail("sendfile at %zu: %zd %s", done, n, strerror(errno));
		done += (size_t)n;
	}
	pthread_join(th, NULL);
	t_assert(lseek(f, 0, SEEK_CUR) == (off_t)payload, "file position %lld",
		 (long long)lseek(f, 0, SEEK_CUR));
	{
		ssize_t n = sendfile(c, f, NULL, 100);

		t_assert(n == 0, "sendfile at EOF: %zd %s", n, n < 0 ? t_errname(errno) : "");
	}
	close(f);
	close(c);
	close(s);
}

static void check_sendfile_range(void)
{
	size_t len = 100000, start = 12345;
	struct reader r;
	pthread_t th;
	int c, s, f = pattern_file(3, payload);
	off_t off = (off_t)start;
	size_t done = 0;

	t_pair_smc(&c, &s);
	r = (struct reader){ s, 3, start, len };
	th = start_reader(&r);
	while (done < len) {
		ssize_t n = sendfile(c, f, &off, len - done);

		if (n <= 0)
			t_fail("sendfile: %zd %s", n, strerror(errno));
		done += (size_t)n;
	}
	pthread_join(th, NULL);
	t_assert((size_t)off == start + len);
	/* Past EOF: what is left, then 0. */
	off = (off_t)(payload - 1000);
	r = (struct reader){ s, 3, payload - 1000, 1000 };
	th = start_reader(&r);
	done = 0;
	while (done < 1000) {
		ssize_t n = sendfile(c, f, &off, 5000);

		if (n <= 0)
			t_fail("sendfile near EOF: %zd %s", n, strerror(errno));
		done += (size_t)n;
	}
	pthread_join(th, NULL);
	t_assert(done == 1000 && (size_t)off == payload);
	{
		ssize_t n = sendfile(c, f, &off, 5000);

		t_assert(n == 0, "sendfile at EOF: %zd %s", n, n < 0 ? t_errname(errno) : "");
	}
	close(f);
	close(c);
	close(s);
}

static void check_sendfile_nb(void)
{
	int c, s, f = pattern_file(4, 16u << 20);
	off_t off = 0;
	bool eagain = false;
	struct reader r;
	pthread_t th;
	size_t total = 16u << 20;

	t_pair_smc(&c, &s);
	t_set_nonblock(c, true);
	/* The peer does not read: fill until EAGAIN. */
	for (;;) {
		ssize_t n = sendfile(c, f, &off, total - (size_t)off);

		if (n < 0 && errno == EAGAIN) {
			eagain = true;
			break;
		}
		if (n <= 0)
			t_fail("sendfile: %zd %s", n, strerror(errno));
		if ((size_t)off == total)
			break;
	}
	t_assert(eagain, "16 MiB went into a socket nobody reads");
	t_assert(off > 0, "nothing accepted");
	/* Now read, and push the rest as space frees up. */
	r = (struct reader){ s, 4, 0, total };
	th = start_reader(&r);
	while ((size_t)off < total) {
		ssize_t n = sendfile(c, f, &off, total - (size_t)off);

		if (n < 0 && errno == EAGAIN) {
			t_wait_fd(c, POLLOUT, 1000);
			continue;
		}
		if (n <= 0)
			t_fail("sendfile: %zd %s", n, strerror(errno));
	}
	pthread_join(th, NULL);
	close(f);
	close(c);
	close(s);
}

struct feeder {
	int fd;
	uint32_t id;
	size_t len;
};

static void *feed(void *arg)
{
	struct feeder *fd = arg;

	t_send_pat(fd->fd, fd->id, fd->len);
	return NULL;
}

/* The same, after 100 ms. */
static void *feed_late(void *arg)
{
	t_msleep(100);
	return feed(arg);
}

static void check_splice_in(void)
{
	struct t_stats before;
	struct feeder fe;
	struct reader r;
	pthread_t tf, tr;
	int c, s, p[2];
	size_t done = 0;

	t_pair_smc(&c, &s);
	if (t_accel())
		t_stats_get(&before);
	t_ok(pipe(p));
	fe = (struct feeder){ p[1], 5, payload };
	r = (struct reader){ s, 5, 0, payload };
	if (pthread_create(&tf, NULL, feed, &fe))
		t_fail("pthread_create");
	tr = start_reader(&r);
	while (done < payload) {
		ssize_t n = splice(p[0], NULL, c, NULL, payload - done, SPLICE_F_MOVE);

		if (n <= 0)
			t_fail("splice pipe->socket at %zu: %zd %s", done, n, strerror(errno));
		done += (size_t)n;
	}
	pthread_join(tf, NULL);
	pthread_join(tr, NULL);
	expect_ring_bytes(&before, payload);
	close(p[0]);
	close(p[1]);
	close(c);
	close(s);
}

static void check_splice_out(void)
{
	struct feeder fe;
	struct reader r;
	pthread_t tf, tr;
	int c, s, p[2];
	size_t done = 0;
	ssize_t n;

	t_pair_smc(&c, &s);
	t_ok(pipe(p));
	/* An empty non-blocking socket: EAGAIN (SPLICE_F_NONBLOCK alone only
	 * concerns the pipe; the kernel still blocks on the socket). */
	t_set_nonblock(c, true);
	errno = 0;
	n = splice(c, NULL, p[1], NULL, 4096, SPLICE_F_NONBLOCK);
	t_assert(n == -1 && errno == EAGAIN, "splice from an empty socket: %zd %s", n,
		 t_errname(errno));
	t_set_nonblock(c, false);
	/* On a blocking socket SPLICE_F_NONBLOCK does not make the socket side
	 * non-blocking: the call waits for the data written a little later. */
	{
		struct feeder late = { s, 66, 100 };
		struct reader rr = { p[0], 66, 0, 100 };
		pthread_t tl;

		if (pthread_create(&tl, NULL, feed_late, &late))
			t_fail("pthread_create");
		n = splice(c, NULL, p[1], NULL, 100, SPLICE_F_NONBLOCK);
		t_assert(n > 0, "SPLICE_F_NONBLOCK on a blocking socket: %zd %s", n,
			 n < 0 ? t_errname(errno) : "");
		while (n < 100) {
			ssize_t m = splice(c, NULL, p[1], NULL, 100 - (size_t)n, 0);

			t_assert(m > 0, "splice: %zd", m);
			n += m;
		}
		pthread_join(tl, NULL);
		read_range(&rr);
	}
	fe = (struct feeder){ s, 6, payload };
	r = (struct reader){ p[0], 6, 0, payload };
	if (pthread_create(&tf, NULL, feed, &fe))
		t_fail("pthread_create");
	tr = start_reader(&r);
	while (done < payload) {
		n = splice(c, NULL, p[1], NULL, 65536, SPLICE_F_MOVE);
		if (n <= 0)
			t_fail("splice socket->pipe at %zu: %zd %s", done, n, strerror(errno));
		done += (size_t)n;
	}
	pthread_join(tf, NULL);
	pthread_join(tr, NULL);
	t_ok(shutdown(s, SHUT_WR));
	n = splice(c, NULL, p[1], NULL, 4096, 0);
	t_assert(n == 0, "splice at EOF: %zd %s", n, n < 0 ? strerror(errno) : "");
	close(p[0]);
	close(p[1]);
	close(c);
	close(s);
}

static void check_splice_in_short(void)
{
	char buf[100];
	int c, s, p[2];
	ssize_t n;

	t_pair_smc(&c, &s);
	t_ok(pipe(p));
	t_write_all(p[1], "splicedata", 10);
	n = splice(p[0], NULL, c, NULL, sizeof(buf), 0);
	t_assert(n == 10, "splice of a pipe holding 10 bytes, asked 100: %zd %s", n,
		 n < 0 ? strerror(errno) : "");
	t_recv_exact(s, "splicedata", 10);
	n = splice(p[0], NULL, c, NULL, sizeof(buf), SPLICE_F_NONBLOCK);
	t_assert(n < 0 && errno == EAGAIN, "SPLICE_F_NONBLOCK, empty pipe: %zd %s", n,
		 n < 0 ? strerror(errno) : "");
	t_write_all(p[1], "more", 4);
	close(p[1]);
	n = splice(p[0], NULL, c, NULL, sizeof(buf), 0);
	t_assert(n == 4, "then 4 bytes: %zd", n);
	n = splice(p[0], NULL, c, NULL, sizeof(buf), 0);
	t_assert(n == 0, "writer closed, pipe empty: %zd", n);
	t_recv_exact(s, "more", 4);
	t_assert_smc(c);
	close(p[0]);
	close(c);
	close(s);
}

/*
 * socket -> pipe with more queued than the pipe holds, nobody draining it:
 * what fits, at once, as the kernel's splice (the rest waited for room
 * that only this thread could make: it never returned); the rest follows
 * in order once the pipe is read.
 */
static void check_splice_out_full(void)
{
	static char buf[200000], got[sizeof(buf)];
	int c, s, p[2], cap;
	size_t have = 0;
	ssize_t n;

	t_pair_smc(&c, &s);
	t_ok(pipe(p));
	cap = t_ok(fcntl(p[0], F_GETPIPE_SZ));
	t_pat_fill(21, 0, buf, sizeof(buf));
	t_write_all(c, buf, sizeof(buf));
	while (have < sizeof(buf)) {
		alarm(10);	/* the old library never returned */
		n = splice(s, NULL, p[1], NULL, 1 << 20, 0);
		alarm(0);
		t_assert(n > 0 && n <= cap, "splice: %zd (%s), pipe of %d", n,
			 n < 0 ? t_errname(errno) : "", cap);
		t_read_all(p[0], got + have, (size_t)n);
		have += (size_t)n;
	}
	t_assert(t_pat_check(21, 0, got, have) < 0, "wrong bytes through the pipe");
	close(p[0]);
	close(p[1]);
	close(c);
	close(s);
}

static const struct t_check checks[] = {
	{ "sendfile_off", check_sendfile_off },
	{ "sendfile_pos", check_sendfile_pos },
	{ "sendfile_range", check_sendfile_range },
	{ "sendfile_nb", check_sendfile_nb },
	{ "splice_in", check_splice_in },
	{ "splice_in_short", check_splice_in_short },
	{ "splice_out", check_splice_out },
	{ "splice_out_full", check_splice_out_full },
};

int main(int argc, char **argv)
{
	t_name = "t_sendfile";
	payload = (size_t)t_env_long("T_BYTES", (long)payload);
	signal(SIGPIPE, SIG_IGN);
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
