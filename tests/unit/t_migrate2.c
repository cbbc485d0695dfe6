// SPDX-License-Identifier: MIT
/*
 * t_migrate2.c - both ends of a shared-memory connection leave it for TCP at
 * (nearly) the same moment, with bytes unread in both rings.
 *
 * Each round: a fresh connection between this process and a forked peer;
 * each end writes a pattern stream, reads a part of the other's, then both
 * are released from a barrier at once and move the connection to TCP
 * (fcntl O_ASYNC: SIGIO is a TCP feature), send more of their stream on
 * TCP, and read the rest of the other's.  Every byte of both streams is
 * checked: a byte lost, duplicated or reordered by the double move shows as
 * a wrong byte or a read that never completes (alarm).
 */
#include "t_util.h"

#define ROUNDS_DEFAULT	200

static int rounds;

/* Stream id of the bytes from one end in one round. */
static uint32_t stream_id(int round, bool from_client)
{
	return (uint32_t)(round * 2 + (from_client ? 1 : 2));
}

static void send_range(int fd, uint32_t id, size_t off, size_t len)
{
	char buf[16384];

	while (len) {
		size_t n = MIN(len, sizeof(buf));

		t_pat_fill(id, off, buf, n);
		t_write_all(fd, buf, n);
		off += n;
		len -= n;
	}
}

static void recv_range(int fd, uint32_t id, size_t off, size_t len, int round)
{
	char buf[16384];

	while (len) {
		size_t n = MIN(len, sizeof(buf));
		long bad;

		t_read_all(fd, buf, n);
		bad = t_pat_check(id, off, buf, n);
		if (bad >= 0)
			t_fail("round %d: stream %u: wrong byte at offset %zu", round, id,
			       off + (size_t)bad);
		off += n;
		len -= n;
	}
}

/* Sizes of one round (the same in both processes): written before the
 * move, read before it (less), written after it. */
static void round_sizes(int round, size_t *before, size_t *early, size_t *after)
{
	uint64_t seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)round;

	*before = (size_t)t_rand_range(&seed, 1, 200000);
	*early = (size_t)t_rand_range(&seed, 0, *before - 1);
	*after = (size_t)t_rand_range(&seed, 1, 20000);
}

/* Move fd to TCP (the application asks for SIGIO). */
static void leave(int fd)
{
	int fl = t_ok(fcntl(fd, F_GETFL));

	t_ok(fcntl(fd, F_SETFL, fl | O_ASYNC));
}

/* both: both ends leave together; else only the client leaves, while the
 * server is still reading its stream from the ring (it follows). */
static bool both = true;

static void one_end(int fd, int sync, int round, bool client)
{
	uint32_t mine = stream_id(round, client), theirs = stream_id(round, !client);
	size_t before, early, after;
	char m[32];

	round_sizes(round, &before, &early, &after);
	/* A byte each way: both ends have settled the handshake. */
	if (client) {
		t_write_all(fd, "c", 1);
		t_recv_exact(fd, "s", 1);
	} else {
		t_recv_exact(fd, "c", 1);
		t_write_all(fd, "s", 1);
	}
	if (round == 0 && t_accel())
		t_assert(!strcmp(t_fd_mode(fd, m, sizeof(m)), "SMCD"), "mode \"%s\"", m);
	send_range(fd, mine, 0, before);
	if (!both && !client) {
		/* Reading while the client moves: some of it from the ring
		 * after the cut the client takes (dropped again from TCP). */
		recv_range(fd, theirs, 0, early, round);
		t_sync_post(sync);
		t_sync_wait(sync);
		send_range(fd, mine, before, after);
		recv_range(fd, theirs, early, before - early + after, round);
	} else {
		recv_range(fd, theirs, 0, early, round);
		/* Both wrote everything and read their part: leave together. */
		t_sync_post(sync);
		t_sync_wait(sync);
		leave(fd);
		send_range(fd, mine, before, after);
		recv_range(fd, theirs, early, before - early + after, round);
	}
	if (round == 0 && t_accel())
		t_assert(!strcmp(t_fd_mode(fd, m, sizeof(m)), "TCP"), "mode \"%s\"", m);
	/* Nothing more in either direction, and both done before either closes. */
	t_ok(shutdown(fd, SHUT_WR));
	t_assert(read(fd, m, 1) == 0, "round %d: bytes after the end", round);
	t_sync_post(sync);
	t_sync_wait(sync);
	close(fd);
}

static void run_rounds(void)
{
	uint16_t port;
	int lfd = t_listen(&port), sv[2], r;
	pid_t pid;

	t_sync_pair(sv);
	pid = t_fork_helper();
	if (pid == 0) {
		close(sv[0]);
		for (r = 0; r < rounds; r++)
			one_end(t_accept(lfd), sv[1], r, false);
		_exit(0);
	}
	close(sv[1]);
	for (r = 0; r < rounds; r++)
		one_end(t_connect(port), sv[0], r, true);
	t_wait_child(pid, "peer");
	close(lfd);
	close(sv[0]);
	t_smc_pairs = rounds;
	/* Every endpoint ends on TCP: both moved by themselves (async_io), or
	 * the client did and the server followed (peer_moved_to_tcp). */
	t_tcp_conns = 2 * rounds;
}

static void check_both_leave(void)
{
	both = true;
	run_rounds();
}

static void check_one_leaves(void)
{
	both = false;
	run_rounds();
}

static const struct t_check checks[] = {
	{ "both_leave", check_both_leave },
	{ "one_leaves", check_one_leaves },
};

int main(int argc, char **argv)
{
	t_name = "t_migrate2";
	rounds = (int)t_env_long("T_ROUNDS", ROUNDS_DEFAULT);
	signal(SIGPIPE, SIG_IGN);
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
