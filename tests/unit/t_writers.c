// SPDX-License-Identifier: MIT
/*
 * t_writers.c - one accelerated connection written and read by several
 * threads or processes at once.
 *
 *   threads        one thread sends while another receives on the same fd,
 *                  on both ends, every byte checked
 *   writer_threads two threads write records to one connection at once:
 *                  each arrives whole, in its writer's order (the send
 *                  lock is taken whenever someone else can reach the
 *                  socket, and skipped otherwise)
 *   writer_threads_full  the same with a small send buffer and a reader
 *                  that starts once the writers filled it: a record that
 *                  does not fit whole waits whole (it tore when the ring's
 *                  last bytes took its start); under usmc only: TCP with a
 *                  buffer that small tears records as well
 *   writer_procs   the same with two forked children of a process that
 *                  never had a second thread
 *
 * Each check runs in its own process and must leave the counters with its
 * connections on shared memory.
 *
 * usage: t_writers [check...]
 */
#include "t_util.h"

#include <pthread.h>

/* ---- threads ------------------------------------------------------------- */

struct stream {
	int fd;
	uint32_t id;
	size_t len;
	bool send;
};

static void *stream_thread(void *arg)
{
	struct stream *st = arg;

	if (st->send)
		t_send_pat(st->fd, st->id, st->len);
	else
		t_recv_pat(st->fd, st->id, st->len);
	return NULL;
}

static void check_threads(void)
{
	struct stream st[4];
	pthread_t th[4];
	int c, s, i;
	size_t len = 6u << 20;	/* more than a ring: both ends block and wake */

	t_pair_smc(&c, &s);
	st[0] = (struct stream){ c, 1, len, true };
	st[1] = (struct stream){ c, 2, len, false };
	st[2] = (struct stream){ s, 2, len, true };
	st[3] = (struct stream){ s, 1, len, false };
	for (i = 0; i < 4; i++)
		if (pthread_create(&th[i], NULL, stream_thread, &st[i]))
			t_fail("pthread_create");
	for (i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	close(c);
	t_expect_eof(s);
	close(s);
}

/*
 * Two writers at once on one connection, each sending REC_N records of
 * REC_LEN bytes with one write() each: every record must arrive whole (a
 * small write is copied under the socket's send lock), each writer's in
 * its order, none lost or doubled.  Writers that shared the ring without
 * the lock would tear records and lose cursor updates.
 */
#define REC_LEN	48
#define REC_N	50000

static void rec_send(int fd, char who)
{
	char r[REC_LEN];
	unsigned int i;

	for (i = 0; i < REC_N; i++) {
		memset(r, who, sizeof(r));
		memcpy(r + 1, &i, sizeof(i));
		t_write_all(fd, r, sizeof(r));
	}
}

struct rec_writer {
	int fd;
	char who;
};

static void *rec_thread(void *arg)
{
	struct rec_writer *w = arg;

	rec_send(w->fd, w->who);
	return NULL;
}

/* The counters saw every record once each way: exact, though the writers
 * count without atomic RMWs when single-threaded (stats.h). */
static void rec_counted(const struct t_stats *before)
{
	long long want = 2LL * REC_N * REC_LEN;
	struct t_stats now;

	if (!t_accel())
		return;
	t_stats_get(&now);
	if (now.tx_bytes - before->tx_bytes != want || now.rx_bytes - before->rx_bytes != want)
		t_fail("counters: tx %lld rx %lld bytes, sent %lld", now.tx_bytes - before->tx_bytes,
		       now.rx_bytes - before->rx_bytes, want);
}

/* Read both writers' records as they come (the ring may be smaller). */
static void rec_check(int s, char a, char b)
{
	unsigned int next[2] = { 0, 0 }, i, seq;
	char r[REC_LEN];

	for (i = 0; i < 2 * REC_N; i++) {
		int w;

		t_read_all(s, r, sizeof(r));
		w = r[0] == a ? 0 : r[0] == b ? 1 : -1;
		memcpy(&seq, r + 1, sizeof(seq));
		if (w < 0 || seq != next[w])
			t_fail("record %u: writer %c seq %u, expected %c %u or %c %u", i, r[0], seq,
			       a, next[0], b, next[1]);
		for (int k = 1 + (int)sizeof(seq); k < REC_LEN; k++)
			if (r[k] != r[0])
				t_fail("record %u (%c %u): torn at byte %d", i, r[0], seq, k);
		next[w]++;
	}
}

/* A pair on shared memory, pinged, and the counters before the records. */
static void rec_pair(int *c, int *s, struct t_stats *before)
{
	t_pair_smc(c, s);
	t_ping_smc(*c, *s);
	if (t_accel())
		t_stats_get(before);
}

/* Threads: the socket was made while the process had one.  full: a small
 * send buffer, no multiple of a record, and a reader that starts late, so
 * that the writers find it full again and again. */
static void writer_threads(bool full)
{
	struct rec_writer w[2];
	struct t_stats before = { 0 };
	pthread_t th[2];
	int c, s, i;

	rec_pair(&c, &s, &before);
	if (full) {
		int sz = 10000;		/* a buffer no multiple of a record */

		t_ok(setsockopt(c, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz)));
	}
	for (i = 0; i < 2; i++) {
		w[i] = (struct rec_writer){ c, i ? 'U' : 'T' };
		if (pthread_create(&th[i], NULL, rec_thread, &w[i]))
			t_fail("pthread_create");
	}
	if (full)
		t_msleep(300);
	rec_check(s, 'T', 'U');
	for (i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	rec_counted(&before);
	close(c);
	t_expect_eof(s);
	close(s);
}

static void check_writer_threads(void)
{
	writer_threads(false);
}

/* usmc's own rule (tx.h USMC_TX_WHOLE): TCP with a buffer this small
 * tears records too, when its buffer has room for part of one. */
static void check_writer_threads_full(void)
{
	if (!t_accel())
		return;
	writer_threads(true);
}

/* Processes that never had a second thread: two children inherit one
 * connection. */
static void check_writer_procs(void)
{
	struct t_stats before = { 0 };
	pid_t kid[2];
	int c, s, i;

	rec_pair(&c, &s, &before);
	for (i = 0; i < 2; i++) {
		kid[i] = t_fork_helper();
		if (kid[i] == 0) {
			close(s);
			rec_send(c, i ? 'B' : 'A');
			close(c);
			_exit(0);
		}
	}
	close(c);	/* the children hold the last copies: EOF when both are done */
	rec_check(s, 'A', 'B');
	t_expect_eof(s);
	t_wait_child(kid[0], "writer A");
	t_wait_child(kid[1], "writer B");
	rec_counted(&before);	/* the children's slots, folded after _exit */
	close(s);
}

static const struct t_check checks[] = {
	{ "threads", check_threads },
	{ "writer_threads", check_writer_threads },
	{ "writer_threads_full", check_writer_threads_full },
	{ "writer_procs", check_writer_procs },
};

int main(int argc, char **argv)
{
	t_name = "t_writers";
	signal(SIGPIPE, SIG_IGN);
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
