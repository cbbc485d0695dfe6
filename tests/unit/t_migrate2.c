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
 *
 *   writer_while_moving  one thread writes a stream while another moves the
 *                      connection to TCP (O_ASYNC): a write that took the
 *                      ring after the move's cut went into the ring, which
 *                      nobody sent or read any more, and both ends waited
 *                      for each other (a fork per connection, whose walk
 *                      moves connections on the copy device, lost a
 *                      request so: t_inherit fork_churn).
 *   shut_while_moving  a client writes 1 MB into its ring, proposed; the
 *                      server (another process) declines, and its socket
 *                      takes little at once; the client sees the decline,
 *                      its bytes start moving to TCP, and it calls
 *                      shutdown(SHUT_WR) before they are all out.  The
 *                      server must read every byte, then EOF: the kernel's
 *                      FIN used to go at once, ending the stream short of
 *                      them (test_exhaustion::test_decline_half_closed_client
 *                      saw it once in a while as an empty stream).
 *   send_after_decline  the server declines first; then the client sends
 *                      and waits for the server's exit, never touching the
 *                      socket again: its bytes must reach the server (they
 *                      sat in the ring until the client's next wait on the
 *                      socket, and the server waited on TCP for ever).
 *   fionread_declined  a server that declines (USMC_FAULT=memfd) a client
 *                      whose proposal came late (USMC_FAULT=late: it sends
 *                      the CLC wake byte) asks FIONREAD before it greets,
 *                      as postfix's smtpd does: 0, as over TCP (it said 1,
 *                      the wake byte, and smtpd's read then waited for
 *                      ever while the client waited for the greeting).
 *   poll_declined      the same, both ends waiting with poll (epoll_declined:
 *   epoll_declined     epoll, level-triggered) and reading without
 *                      blocking: every wake-up has bytes, as over TCP (the
 *                      client's wake byte woke the server, recv: EAGAIN).
 *   idle_close         the client writes, then never looks at its socket
 *                      until it closes, while the server's end moved to TCP:
 *                      its ring bytes reach the server before the EOF.
 *   idle_exit          the same, the client leaving with _exit() and its
 *                      socket still open.
 *   mover_killed       a forked process of ours starts the move to TCP
 *                      (MSG_OOB) with our ring full and the peer not
 *                      reading, so the move blocks on TCP; it is killed
 *                      there.  Our own MSG_OOB must not wait for the dead
 *                      mover (it waited for ever): the connection resets,
 *                      for us and for the peer, which reads a prefix of
 *                      the stream and then ECONNRESET, never a clean EOF.
 */
#include "t_util.h"

#include <pthread.h>

#include <sys/epoll.h>
#include <sys/ioctl.h>

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

/* Role "decliner" (argv: port, bytes): a server whose usmc cannot take a
 * connection (USMC_FAULT=memfd: it declines every proposal) and whose
 * socket takes little at once; it accepts one client, lets it run ahead,
 * then must read exactly that many pattern bytes, then EOF. */
/* A role's listener on the port the test picked (rcvbuf: SO_RCVBUF, or 0). */
static int listen_on(uint16_t port, int rcvbuf)
{
	struct sockaddr_in a = t_addr(port);
	int lfd = t_ok(socket(AF_INET, SOCK_STREAM, 0)), on = 1;

	t_ok(setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)));
	if (rcvbuf)
		t_ok(setsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)));
	t_ok(bind(lfd, (struct sockaddr *)&a, sizeof(a)));
	t_ok(listen(lfd, 4));
	return lfd;
}

static int decliner(uint16_t port, size_t want, bool quick)
{
	static char buf[65536];
	int lfd = listen_on(port, 65536), s;
	size_t got = 0;
	ssize_t n;

	if (!quick)
		t_msleep(200);	/* the client's bytes go into its ring */
	s = t_accept(lfd);	/* declined */
	if (quick) {
		/* Tell the client it may send now (T_SYNC_FD: a pipe). */
		int sync = atoi(getenv("T_SYNC_FD") ? getenv("T_SYNC_FD") : "-1");

		t_assert(sync >= 0 && write(sync, "a", 1) == 1, "sync: %s", strerror(errno));
	} else {
		t_msleep(1500);	/* the client half-closes meanwhile */
	}
	while ((!quick || got < want) && (n = recv(s, buf, sizeof(buf), 0)) > 0) {
		if (t_pat_check(7, got, buf, (size_t)n) >= 0)
			return 2;
		got += (size_t)n;
	}
	if ((!quick && n < 0) || got != want) {
		fprintf(stderr, "decliner: %zu of %zu bytes, then %s\n", got, want,
			n < 0 ? strerror(errno) : "EOF");
		return 1;
	}
	close(s);
	return 0;
}

/* Connect to a decliner that listens on port (retrying until it does). */
static int connect_decliner(uint16_t port)
{
	int c = -1, tries;

	for (tries = 0; tries < 500 && c < 0; tries++) {
		struct sockaddr_in a = t_addr(port);

		c = t_ok(socket(AF_INET, SOCK_STREAM, 0));
		if (connect(c, (struct sockaddr *)&a, sizeof(a))) {
			close(c);
			c = -1;
			t_msleep(10);
		}
	}
	t_assert(c >= 0, "decliner never listened");
	return c;
}

static void check_shut_while_moving(void)
{
	static char buf[65536];
	size_t len = 4 << 20, off;
	uint16_t port;
	int lfd = t_listen(&port), c, small = 65536;
	pid_t pid;
	ssize_t n;

	close(lfd);		/* the decliner listens on it */
	setenv("USMC_FAULT", "memfd", 1);
	pid = t_start_role("decliner", port, (long)len, false);
	unsetenv("USMC_FAULT");
	c = connect_decliner(port);
	for (off = 0; off < len; off += sizeof(buf)) {
		t_pat_fill(7, off, buf, sizeof(buf));
		t_write_all(c, buf, sizeof(buf));	/* into the ring: proposed */
	}
	/* From now on TCP takes little at once on this side too (the ring
	 * holds the megabyte already). */
	t_ok(setsockopt(c, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)));
	t_msleep(400);
	/* Sees the decline: the ring's bytes start moving, more than the
	 * two sockets take at once. */
	{
		struct pollfd pc = { .fd = c, .events = POLLIN };

		t_ok(poll(&pc, 1, 300));	/* nothing to read: the decline is usmc's */
	}
	n = recv(c, buf, 1, MSG_DONTWAIT);
	t_assert(n < 0 && errno == EAGAIN, "recv: %zd %s", n, strerror(errno));
	t_ok(shutdown(c, SHUT_WR));
	/* One thread: the rest moves when c is called (TCP would send it in
	 * the background); the decliner closes once it read it all. */
	t_set_nonblock(c, true);
	while ((n = recv(c, buf, sizeof(buf), 0)) < 0 && errno == EAGAIN) {
		struct pollfd pc = { .fd = c, .events = POLLIN };

		t_ok(poll(&pc, 1, 10));
	}
	t_assert(n == 0, "after the decliner closed: %zd %s", n, n < 0 ? strerror(errno) : "");
	t_assert(send(c, "x", 1, MSG_NOSIGNAL) < 0 && errno == EPIPE,
		 "send after shutdown: %s", strerror(errno));
	close(c);
	t_wait_child(pid, "decliner (it read every byte, then EOF)");
	t_tcp_conns = -1;	/* declined: how each end counts is test_exhaustion's */
}

static void check_send_after_decline(void)
{
	static char buf[4000];
	uint16_t port;
	int lfd = t_listen(&port), c, sync[2];
	char num[16], b;
	pid_t pid;

	close(lfd);		/* the decliner listens on it */
	t_ok(pipe(sync));
	snprintf(num, sizeof(num), "%d", sync[1]);
	setenv("T_SYNC_FD", num, 1);
	setenv("USMC_FAULT", "memfd", 1);
	pid = t_start_role("decliner_quick", port, (long)sizeof(buf), false);
	unsetenv("USMC_FAULT");
	unsetenv("T_SYNC_FD");
	close(sync[1]);
	c = connect_decliner(port);
	/* The decliner accepted (and declined, unless its listener could not
	 * even be published: then we are plain TCP, which must work too). */
	t_assert(read(sync[0], &b, 1) == 1, "the decliner never accepted");
	close(sync[0]);
	t_pat_fill(7, 0, buf, sizeof(buf));
	t_write_all(c, buf, sizeof(buf));
	t_wait_child(pid, "decliner (it must get every byte without our help)");
	close(c);
	t_tcp_conns = -1;
}

static void check_mover_killed(void)
{
	static char buf[65536];
	uint16_t port;
	int lfd = t_listen(&port), c, s, small = 4096, st;
	size_t sent = 0, got = 0;
	pid_t pid;
	ssize_t n;
	char m[32];

	if (!t_accel()) {	/* over TCP all along the sends below block as well */
		fprintf(stderr, "t_migrate2: mover_killed: shared memory only\n");
		return;
	}
	/* The peer's TCP takes little: set before the connection exists. */
	t_ok(setsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)));
	t_pair_on(lfd, port, &c, &s);
	close(lfd);
	t_xfer(c, s, "settle");
	t_xfer(s, c, "settle back");
	if (t_accel())
		t_assert(!strcmp(t_fd_mode(c, m, sizeof(m)), "SMCD"), "mode \"%s\"", m);
	/* Fill our ring (shared memory takes it all; TCP would stop sooner). */
	t_set_nonblock(c, true);
	for (;;) {
		t_pat_fill(9, sent, buf, sizeof(buf));
		n = send(c, buf, sizeof(buf), MSG_NOSIGNAL);
		if (n <= 0)
			break;
		sent += (size_t)n;
	}
	t_assert(n < 0 && errno == EAGAIN, "filling: %s", strerror(errno));
	t_set_nonblock(c, false);
	t_ok(setsockopt(c, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)));
	pid = t_ok(fork());
	if (!pid) {
		/* Moves the ring to TCP: blocks, TCP takes a few KiB. */
		send(c, "!", 1, MSG_OOB | MSG_NOSIGNAL);
		_exit(0);
	}
	t_msleep(300);
	t_assert(waitpid(pid, &st, WNOHANG) == 0,
		 "the mover finished: %zu bytes fitted in TCP, nothing to test", sent);
	t_ok(kill(pid, SIGKILL));
	t_ok(waitpid(pid, &st, 0));
	alarm(10);	/* the old library waited here for ever */
	n = send(c, "?", 1, MSG_OOB | MSG_NOSIGNAL);
	t_assert(n < 0 && (errno == ECONNRESET || errno == EPIPE),
		 "send after the mover died: %zd %s", n, n < 0 ? strerror(errno) : "");
	/* The peer: a prefix of the stream, then the reset. */
	while ((n = recv(s, buf, sizeof(buf), 0)) > 0) {
		long bad = t_pat_check(9, got, buf, (size_t)n);

		t_assert(bad < 0, "wrong byte at offset %zu", got + (size_t)bad);
		got += (size_t)n;
	}
	t_assert(n < 0 && errno == ECONNRESET && got < sent,
		 "peer: %zu of %zu bytes, then %s", got, sent, n < 0 ? strerror(errno) : "EOF");
	alarm(0);
	close(c);
	close(s);
	t_tcp_conns = -1;	/* reset mid-move: counted as internal_error */
}

/*
 * Wait for len bytes as an event loop does (how: 1 poll, 2 epoll, level
 * triggered), reading without blocking: readable must mean readable.
 * Returns how many wake-ups found nothing to read (a CLC wake or decline
 * byte woke it, as TCP never would).
 */
static int wait_read(int fd, long how, const char *expect, size_t len)
{
	int ep = -1, spurious = 0;
	char b[16];
	size_t got = 0;

	t_set_nonblock(fd, true);
	if (how == 2) {
		struct epoll_event ev = { .events = EPOLLIN };

		ep = t_ok(epoll_create1(0));
		t_ok(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));
	}
	while (got < len) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		struct epoll_event ev;
		ssize_t n;

		if (how == 2)
			t_assert(epoll_wait(ep, &ev, 1, 5000) == 1, "nothing came");
		else
			t_assert(poll(&p, 1, 5000) == 1, "nothing came");
		n = recv(fd, b + got, len - got, 0);
		if (n < 0 && errno == EAGAIN)
			spurious++;
		else
			got += (size_t)t_ok(n);
	}
	t_assert(!memcmp(b, expect, len), "got [%.*s]", (int)len, b);
	if (ep >= 0)
		close(ep);
	t_set_nonblock(fd, false);
	return spurious;
}

/* Role "greeter" (argv: port, how): asks FIONREAD (how 0), greets, then
 * waits for QUIT (how: as wait_read); exit 3 when FIONREAD counted a byte
 * the client never sent, 4 when a wait woke for nothing. */
static int greeter(uint16_t port, long how)
{
	int lfd = listen_on(port, 0), s, q = -1, spurious = 0;

	s = t_accept(lfd);
	t_msleep(300);		/* the late proposal, declined, and its wake byte */
	if (how)
		q = 0;		/* FIONREAD would take the wake byte */
	else
		t_ok(ioctl(s, FIONREAD, &q));
	t_write_all(s, "220 hi\r\n", 8);
	if (how)
		spurious = wait_read(s, how, "QUIT", 4);
	else
		t_recv_exact(s, "QUIT", 4);
	close(s);
	close(lfd);
	return q ? 3 : spurious ? 4 : 0;
}

/* Role "greeted" (argv: port, how): waits for the greeting (0: in a
 * blocking read, else greeted_wait), says QUIT. */
static int greeted(uint16_t port, long how)
{
	int c, spurious = 0;

	alarm(10);
	c = connect_decliner(port);
	if (how)
		spurious = wait_read(c, how, "220 hi\r\n", 8);
	else
		t_recv_exact(c, "220 hi\r\n", 8);
	t_write_all(c, "QUIT", 4);
	close(c);
	return spurious ? 4 : 0;
}

static void greet_declined(long how, const char *client)
{
	uint16_t port;
	int lfd = t_listen(&port);
	pid_t srv, cl;

	close(lfd);		/* the greeter listens on it */
	setenv("USMC_FAULT", "memfd", 1);
	srv = t_start_role("greeter", port, how, false);
	setenv("USMC_FAULT", "late", 1);
	cl = t_start_role("greeted", port, how, false);
	unsetenv("USMC_FAULT");
	t_wait_child(cl, client);
	t_wait_child(srv, "greeter (exit 3: FIONREAD before the client spoke; 4: woke for nothing)");
	t_tcp_conns = -1;	/* declined: how each end counts is test_exhaustion's */
}

static void check_fionread_declined(void)
{
	greet_declined(0, "client (it reads the greeting)");
}

static void check_poll_declined(void)
{
	greet_declined(1, "poll client (readable before the greeting: exit 4)");
}

static void check_epoll_declined(void)
{
	greet_declined(2, "epoll client (readable before the greeting: exit 4)");
}

/*
 * The client writes and then never touches its socket again until it
 * closes; meanwhile the server's end moves to TCP (O_ASYNC here; a
 * hand-over to another process in CPython's multiprocessing).  The bytes
 * still in the client's ring must reach the server before the EOF (the
 * close sent the FIN without them: the server read a clean, empty stream).
 */
static void idle_peer(bool leave_by_exit)
{
	uint16_t port;
	int lfd = t_listen(&port), p[2], s, c, fl;
	char b[16];
	size_t got = 0;
	ssize_t n;
	pid_t kid;

	t_ok(pipe(p));
	kid = t_fork_helper();
	if (kid == 0) {
		close(p[1]);
		c = t_connect(port);
		t_write_all(c, "hello", 5);
		t_assert(read(p[0], b, 1) == 1, "no go");
		if (!leave_by_exit)
			close(c);
		_exit(0);
	}
	close(p[0]);
	s = t_accept(lfd);
	t_assert(t_wait_fd(s, POLLIN, 5000) & POLLIN, "nothing arrived");
	fl = t_ok(fcntl(s, F_GETFL));
	t_ok(fcntl(s, F_SETFL, fl | O_ASYNC));
	t_expect_moved(s, "async_io");
	t_write_all(p[1], "x", 1);
	while (got < sizeof(b) && (n = recv(s, b + got, sizeof(b) - got, 0)) != 0) {
		t_assert(n > 0, "recv: %s after %zu bytes", t_errname(errno), got);
		got += (size_t)n;
	}
	t_assert(got == 5 && !memcmp(b, "hello", 5), "%zu bytes [%.*s], then EOF", got,
		 (int)got, b);
	t_wait_child(kid, "client");
	close(p[1]);
	close(s);
	close(lfd);
	t_tcp_conns = -1;
}

#define WRITER_ROUNDS	40
#define WRITER_BYTES	(256u << 10)
#define WRITER_PIECE	16	/* small writes: one is always near */

struct pat_writer {
	int fd;
	uint32_t id;
};

static void *pat_writer_main(void *p)
{
	struct pat_writer *w = p;
	char buf[WRITER_PIECE];
	size_t off;

	for (off = 0; off < WRITER_BYTES; off += sizeof(buf)) {
		t_pat_fill(w->id, off, buf, sizeof(buf));
		t_write_all(w->fd, buf, sizeof(buf));
	}
	return NULL;
}

static void check_writer_while_moving(void)
{
	struct pat_writer w;
	pthread_t t;
	int c, s, i;

	for (i = 0; i < WRITER_ROUNDS; i++) {
		t_pair_smc(&c, &s);
		w = (struct pat_writer){ c, (uint32_t)(40 + i) };
		t_assert(!pthread_create(&t, NULL, pat_writer_main, &w));
		usleep((useconds_t)(i * 50));	/* the move lands at another write each round */
		t_ok(fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_ASYNC));
		t_recv_pat(s, w.id, WRITER_BYTES);
		t_assert(!pthread_join(t, NULL));
		close(c);
		t_expect_eof(s);
		close(s);
	}
	t_tcp_conns = -1;
}

static void check_idle_close(void)
{
	idle_peer(false);
}

static void check_idle_exit(void)
{
	idle_peer(true);
}

static const struct t_check checks[] = {
	{ "both_leave", check_both_leave },
	{ "one_leaves", check_one_leaves },
	{ "writer_while_moving", check_writer_while_moving },
	{ "shut_while_moving", check_shut_while_moving },
	{ "send_after_decline", check_send_after_decline },
	{ "fionread_declined", check_fionread_declined },
	{ "poll_declined", check_poll_declined },
	{ "epoll_declined", check_epoll_declined },
	{ "mover_killed", check_mover_killed },
	{ "idle_close", check_idle_close },
	{ "idle_exit", check_idle_exit },
};

int main(int argc, char **argv)
{
	t_name = "t_migrate2";
	if (argc == 4 && !strcmp(argv[1], "decliner"))
		return decliner((uint16_t)atoi(argv[2]), (size_t)atol(argv[3]), false);
	if (argc == 4 && !strcmp(argv[1], "greeter"))
		return greeter((uint16_t)atoi(argv[2]), atol(argv[3]));
	if (argc == 4 && !strcmp(argv[1], "greeted"))
		return greeted((uint16_t)atoi(argv[2]), atol(argv[3]));
	if (argc == 4 && !strcmp(argv[1], "decliner_quick"))
		return decliner((uint16_t)atoi(argv[2]), (size_t)atol(argv[3]), true);
	rounds = (int)t_env_long("T_ROUNDS", ROUNDS_DEFAULT);
	signal(SIGPIPE, SIG_IGN);
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
