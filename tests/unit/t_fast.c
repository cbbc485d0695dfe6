// SPDX-License-Identifier: MIT
/*
 * t_fast.c - the data path's fast path (sock.h: usmc_rx_fast/usmc_tx_fast)
 * and every way out of it.  Each check counts, with the tx_fast/rx_fast
 * counters, which calls took it, so a fast path that silently stopped
 * being taken fails as surely as one that loses a byte.
 *
 *   pingpong      2 x 2000 small messages between two ends of one thread:
 *                 every data call after the handshake is a fast one
 *   threaded      the same, then a thread is created (and joined): from
 *                 then on the process is not single-threaded, every call
 *                 goes the general way, and the bytes still match
 *   forked        a fork() (the child exits at once) makes the sockets
 *                 reachable from two processes: the general way, with
 *                 the lock as a mutex, from then on
 *   detours       calls the fast path hands to the general one, mixed
 *                 with fast ones on one connection: MSG_PEEK, MSG_WAITALL,
 *                 readv/writev of two buffers, zero-length read and write,
 *                 an empty non-blocking read (EAGAIN), MSG_DONTWAIT with
 *                 bytes there (fast), a write larger than the ring
 *   eof_wait      a reader in another process waits (spinning, then
 *                 asleep) inside the fast path's read for 200 messages sent
 *                 1 ms apart, then for the EOF of a close: all bytes, in
 *                 order, then 0, and most reads were fast
 *   handler_send  a signal handler sends one byte ('H') on the connection
 *                 every 50 us while the main loop sends 8-byte records:
 *                 a handler that interrupts a fast send has its byte
 *                 queued and sent right after that send, never inside a
 *                 record; the reader (another process) checks every
 *                 record and counts the handler's bytes
 *
 * usage: t_fast [check...]
 */
#include "t_util.h"

#include <pthread.h>
#include <sys/single_threaded.h>
#include <sys/time.h>
#include <sys/uio.h>

struct fast_ctr {
	long long tx_calls, rx_calls, tx_fast, rx_fast;
};

static void fast_ctr_get(struct fast_ctr *c)
{
	char *j = t_stats_json();

	c->tx_calls = t_json_int(j, "tx_calls");
	c->rx_calls = t_json_int(j, "rx_calls");
	c->tx_fast = t_json_int(j, "tx_fast");
	c->rx_fast = t_json_int(j, "rx_fast");
	if (c->tx_calls < 0 || c->tx_fast < 0 || c->rx_fast < 0)
		t_fail("cannot parse the counters: %.300s", j);
	free(j);
}

/*
 * Counters since *b: fast calls in [lo, hi], general ones at least gen.
 * A process with threads from the start (the TSan runtime has one) takes
 * the general way only: every call expected fast is a general one there.
 */
static bool single_at_start;

static void fast_expect(const struct fast_ctr *b, long long lo, long long hi, long long gen)
{
	struct fast_ctr a;
	long long tf, rf, tg, rg;

	if (!t_accel())
		return;
	if (!single_at_start) {
		gen += lo;
		lo = hi = 0;
	}
	fast_ctr_get(&a);
	tf = a.tx_fast - b->tx_fast;
	rf = a.rx_fast - b->rx_fast;
	tg = a.tx_calls - b->tx_calls - tf;
	rg = a.rx_calls - b->rx_calls - rf;
	t_info("fast tx %lld rx %lld, general tx %lld rx %lld", tf, rf, tg, rg);
	t_assert(tf >= lo && tf <= hi && rf >= lo && rf <= hi,
		 "fast calls tx %lld rx %lld, expected %lld..%lld", tf, rf, lo, hi);
	t_assert(tg >= gen && rg >= gen, "general calls tx %lld rx %lld, expected >= %lld",
		 tg, rg, gen);
}

/* n round trips of 14-byte messages numbered from seq, checked. */
static void rounds(int c, int s, int n, int seq)
{
	char out[15], in[15];
	int i;

	for (i = 0; i < n; i++) {
		snprintf(out, sizeof(out), "m%013d", seq + i);
		t_assert(write(c, out, 14) == 14, "write: %s", strerror(errno));
		t_assert(read(s, in, 14) == 14, "read: %s", strerror(errno));
		t_assert(!memcmp(in, out, 14), "request %d corrupted", seq + i);
		t_assert(send(s, in, 14, 0) == 14, "send: %s", strerror(errno));
		t_assert(recv(c, in, 14, 0) == 14, "recv: %s", strerror(errno));
		t_assert(!memcmp(in, out, 14), "reply %d corrupted", seq + i);
	}
}

static void check_pingpong(void)
{
	struct fast_ctr b;
	int c, s;

	single_at_start = __libc_single_threaded;
	fast_ctr_get(&b);
	t_pair_smc(&c, &s);
	rounds(c, s, 2000, 0);
	/* The handshake's own calls may go either way. */
	fast_expect(&b, 4000, 4002, 0);
	close(c);
	close(s);
}

static void *nothing(void *arg)
{
	return arg;
}

static void make_thread(void)
{
	pthread_t t;

	t_assert(!pthread_create(&t, NULL, nothing, NULL), "pthread_create");
	pthread_join(t, NULL);
}

static void fork_child(void)
{
	pid_t pid = t_fork_helper();

	if (pid == 0)
		_exit(0);
	t_wait_child(pid, "child");
}

/* 100 round trips, event(), 100 more: only the first ones fast. */
static void fast_until(void (*event)(void))
{
	struct fast_ctr b;
	int c, s;

	single_at_start = __libc_single_threaded;
	fast_ctr_get(&b);
	t_pair_smc(&c, &s);
	rounds(c, s, 100, 0);
	event();
	rounds(c, s, 100, 100);
	fast_expect(&b, 200, 202, 200);
	close(c);
	close(s);
}

static void check_threaded(void)
{
	fast_until(make_thread);
}

static void check_forked(void)
{
	fast_until(fork_child);
}

static void check_detours(void)
{
	char buf[300000], a[4], bb[6];
	struct iovec v[2] = { { a, sizeof(a) }, { bb, sizeof(bb) } };
	struct fast_ctr b;
	size_t i;
	int c, s;

	single_at_start = __libc_single_threaded;
	fast_ctr_get(&b);
	t_pair_smc(&c, &s);
	rounds(c, s, 10, 0);
	/* peek, then the same bytes again */
	t_write_all(c, "peekaboo", 8);
	t_assert(recv(s, buf, 4, MSG_PEEK) == 4 && !memcmp(buf, "peek", 4), "peek");
	t_assert(read(s, buf, 8) == 8 && !memcmp(buf, "peekaboo", 8), "read after peek");
	/* MSG_WAITALL over three writes */
	t_write_all(c, "one", 3);
	t_write_all(c, "two", 3);
	t_write_all(c, "six", 3);
	t_assert(recv(s, buf, 9, MSG_WAITALL) == 9 && !memcmp(buf, "onetwosix", 9), "waitall");
	/* two buffers each way */
	v[0].iov_base = (void *)"abcd";
	v[1].iov_base = (void *)"efghij";
	t_assert(writev(c, v, 2) == 10, "writev");
	v[0].iov_base = a;
	v[1].iov_base = bb;
	t_assert(readv(s, v, 2) == 10 && !memcmp(a, "abcd", 4) && !memcmp(bb, "efghij", 6),
		 "readv");
	/* nothing, both ways */
	t_assert(write(c, buf, 0) == 0, "write of 0");
	t_assert(read(s, buf, 0) == 0, "read of 0");
	/* empty, non-blocking */
	t_assert(recv(s, buf, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN, "empty DONTWAIT: %s",
		 strerror(errno));
	t_set_nonblock(s, true);
	t_assert(read(s, buf, 1) < 0 && errno == EAGAIN, "empty O_NONBLOCK: %s",
		 strerror(errno));
	t_write_all(c, "x", 1);
	t_assert(read(s, buf, 10) == 1 && buf[0] == 'x', "O_NONBLOCK with a byte there");
	t_set_nonblock(s, false);
	t_write_all(c, "y", 1);
	t_assert(recv(s, buf, 10, MSG_DONTWAIT) == 1 && buf[0] == 'y', "DONTWAIT, a byte there");
	/* more than a ring holds: the writer's rest waits for the reader */
	t_set_nonblock(c, true);
	for (i = 0; i < sizeof(buf); i++)
		buf[i] = (char)(i * 7 + 1);
	{
		size_t sent = 0, got = 0;
		char in[65536];

		while (got < sizeof(buf)) {
			ssize_t n;

			if (sent < sizeof(buf)) {
				n = write(c, buf + sent, sizeof(buf) - sent);
				t_assert(n > 0 || errno == EAGAIN, "big write: %s", strerror(errno));
				if (n > 0)
					sent += (size_t)n;
			}
			n = read(s, in, sizeof(in));
			t_assert(n > 0, "big read: %s", strerror(errno));
			t_assert(!memcmp(in, buf + got, (size_t)n), "big transfer corrupted at %zu",
				 got);
			got += (size_t)n;
		}
	}
	t_set_nonblock(c, false);
	rounds(c, s, 10, 10);
	/* 20 rounds (40 calls each way) fast, and the reads with bytes there;
	 * MSG_WAITALL and readv, writev and the big writes the general way
	 * (peeks, empty reads and zero lengths are not counted as calls) */
	fast_expect(&b, 40, 100000, 2);
	close(c);
	close(s);
}

#define EOF_MSGS	200

static void check_eof_wait(void)
{
	struct fast_ctr b;
	uint16_t port;
	char in[64], want[15];
	int lfd, fd, i;
	ssize_t n;
	pid_t pid;

	single_at_start = __libc_single_threaded;
	fast_ctr_get(&b);
	lfd = t_listen(&port);
	pid = t_fork_helper();
	if (pid == 0) {
		int c = t_connect(port);

		for (i = 0; i < EOF_MSGS; i++) {
			snprintf(want, sizeof(want), "e%013d", i);
			t_write_all(c, want, 14);
			usleep(1000);
		}
		close(c);
		_exit(0);
	}
	fd = t_accept(lfd);
	close(lfd);
	t_smc_pairs++;
	for (i = 0; i < EOF_MSGS; i++) {
		snprintf(want, sizeof(want), "e%013d", i);
		t_read_all(fd, in, 14);
		t_assert(!memcmp(in, want, 14), "message %d corrupted", i);
	}
	n = read(fd, in, sizeof(in));
	t_assert(n == 0, "after the last message: %zd (%s), expected EOF", n,
		 n < 0 ? strerror(errno) : "bytes");
	t_wait_child(pid, "sender");
	/* the reader's: all but the first (undecided) few are fast */
	if (t_accel()) {
		struct fast_ctr a;

		fast_ctr_get(&a);
		t_assert(single_at_start ? a.rx_fast - b.rx_fast >= EOF_MSGS - 2 :
					   a.rx_fast == b.rx_fast, "fast reads %lld of %d",
			 a.rx_fast - b.rx_fast, EOF_MSGS);
	}
	close(fd);
}

#define REC_LEN		8
#define RECORDS		40000

static int hs_fd;
static volatile sig_atomic_t hs_sent, hs_failed;

static void hs_handler(int sig)
{
	int e = errno;

	(void)sig;
	if (send(hs_fd, "H", 1, MSG_NOSIGNAL) == 1)
		hs_sent++;
	else
		hs_failed++;
	errno = e;
}

/* The reader: records in order, each whole, 'H' bytes only between them. */
static int hs_reader(uint16_t port)
{
	static char buf[1 << 16];
	char rec[16], want[16];
	long hs = 0, recs = 0, trailer = -1;
	size_t have = 0, len, i;
	int fd = t_connect(port);
	ssize_t n;

	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		for (i = 0; i < (size_t)n; i++) {
			char ch = buf[i];

			if (have == 0 && ch == 'H') {
				hs++;
				continue;
			}
			rec[have++] = ch;
			if (have < REC_LEN)
				continue;
			have = 0;
			rec[REC_LEN] = '\0';
			if (rec[0] == 'E') {
				trailer = strtol(rec + 1, NULL, 10);
				continue;
			}
			len = (size_t)snprintf(want, sizeof(want), "R%07ld", recs);
			if (len != REC_LEN || memcmp(rec, want, REC_LEN)) {
				fprintf(stderr, "record %ld: got \"%s\"\n", recs, rec);
				return 1;
			}
			recs++;
		}
	}
	if (n < 0 || have || recs != RECORDS || trailer != hs) {
		fprintf(stderr, "reader: n %zd, partial %zu, records %ld, handler bytes %ld, "
			"trailer %ld\n", n, have, recs, hs, trailer);
		return 1;
	}
	return 0;
}

static void check_handler_send(void)
{
	struct itimerval it = { { 0, 50 }, { 0, 50 } }, off = { { 0, 0 }, { 0, 0 } };
	struct sigaction sa = { .sa_handler = hs_handler, .sa_flags = SA_RESTART };
	char rec[16];
	struct fast_ctr b;
	uint16_t port;
	int lfd, i;
	pid_t pid;

	single_at_start = __libc_single_threaded;
	fast_ctr_get(&b);
	lfd = t_listen(&port);
	pid = t_fork_helper();
	if (pid == 0)
		_exit(hs_reader(port));
	hs_fd = t_accept(lfd);
	close(lfd);
	t_smc_pairs++;
	sigemptyset(&sa.sa_mask);
	t_ok(sigaction(SIGALRM, &sa, NULL));
	t_ok(setitimer(ITIMER_REAL, &it, NULL));
	for (i = 0; i < RECORDS; i++) {
		snprintf(rec, sizeof(rec), "R%07d", i);
		t_write_all(hs_fd, rec, REC_LEN);
	}
	t_ok(setitimer(ITIMER_REAL, &off, NULL));
	signal(SIGALRM, SIG_IGN);
	snprintf(rec, sizeof(rec), "E%07d", (int)hs_sent);
	t_write_all(hs_fd, rec, REC_LEN);
	t_info("handler sends: %d ok, %d failed", (int)hs_sent, (int)hs_failed);
	close(hs_fd);
	t_wait_child(pid, "reader");
	t_assert(hs_sent > 0, "the timer never fired");
	if (t_accel()) {
		struct fast_ctr a;

		fast_ctr_get(&a);
		t_assert(single_at_start ? a.tx_fast - b.tx_fast >= RECORDS / 2 :
					   a.tx_fast == b.tx_fast, "fast sends %lld of %d",
			 a.tx_fast - b.tx_fast, RECORDS);
	}
}

static const struct t_check checks[] = {
	{ "pingpong", check_pingpong },
	{ "threaded", check_threaded },
	{ "forked", check_forked },
	{ "detours", check_detours },
	{ "eof_wait", check_eof_wait },
	{ "handler_send", check_handler_send },
};

int main(int argc, char **argv)
{
	t_name = "t_fast";
	signal(SIGPIPE, SIG_IGN);
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
