// SPDX-License-Identifier: MIT
/*
 * t_epoll_ready.c - what epoll reports and when, against the kernel's rules
 * for TCP sockets (the same program passes with USMC_DISABLE=1):
 *
 *   connect_edge   non-blocking connect() and accept(), both registered
 *                  EPOLLIN|EPOLLOUT|EPOLLET: one EPOLLOUT edge each, then
 *                  nothing (not when the shared-memory path settles, not
 *                  when the peer takes bytes of a writer that never filled
 *                  its buffer)
 *   close_edge_after   the peer's close, to an EPOLLIN|EPOLLOUT|EPOLLRDHUP|
 *   close_edge_before  EPOLLET registration made after it or before it:
 *                  one report, then nothing (the rings' close and the
 *                  TCP entry's FIN were two edges: tokio's reactor saw
 *                  the close twice)
 *   killed_edge    EPOLLIN|EPOLLOUT|EPOLLET without EPOLLRDHUP (Boost.Asio),
 *                  data reported and read to EAGAIN, then the peer is
 *                  killed: its FIN is an EPOLLIN edge (EOF), though the
 *                  events are the ones reported for the data (a review:
 *                  the edge fix above would have lost it: a hang)
 *   full_edge      an edge-triggered writer that filled its buffer gets
 *                  EPOLLOUT once the reader made room
 *   undecided      a server connection accepted before its client's
 *   undecided_et   proposal (the client sends the CLC wake byte on TCP):
 *                  the wake byte is no event, the client's first byte is
 *                  one (level- and edge-triggered)
 *   peer_moved     our request sits unread in the server's ring, our epoll
 *                  instance has looked at the connection (nothing) but not
 *                  armed, when the server moves it to TCP (O_ASYNC) and
 *                  rings; then we wait for the answer: we must follow the
 *                  move (our unread request goes to the server on TCP) and
 *                  get EPOLLIN.  The rings have nothing to report and the
 *                  ring answered no arm of ours: epoll slept, the server
 *                  waited for the request (busybox httpd's child moves the
 *                  same way by dup2 onto stdin: stdio)
 *   order          connections (and a pipe) that turn readable one after
 *                  another are reported in that order, in one epoll_wait
 *                  and across calls of two events each; those still ready
 *                  (level-triggered) come round again in the same order,
 *                  behind what turned ready before (the kernel's ready list
 *                  is first come, first served)
 *   poll_epfd      poll() and select() on the epoll descriptor itself, as
 *                  Ruby's EventMachine (thin) waits: readable for bytes in
 *                  a connection's ring, whether they came before or after
 *                  its EPOLL_CTL_ADD, and the ADD came after the first
 *                  poll (thin never answered: the descriptor turned
 *                  readable only for kernel events)
 */
#include "t_ep.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>

#define NOEV_MS		100	/* "no event" means none within this long */
#define EV_MS		5000	/* an expected event comes within this long */

static void expect_none_at(int line, int ep)
{
	struct epoll_event ev[8];
	int n = ep_wait_plain(ep, ev, 8, NOEV_MS);

	if (n)
		t_fail("line %d: expected no event, got %d (first: %#x for %llu)", line, n,
		       ev[0].events, (unsigned long long)ev[0].data.u64);
}
#define expect_none(ep) expect_none_at(__LINE__, ep)

/* ---- connect_edge -------------------------------------------------------- */

static void check_connect_edge(void)
{
	struct sockaddr_in a;
	struct epoll_event ev[8];
	uint32_t got[3] = { 0 };
	int nrep[3] = { 0 };
	uint16_t port;
	int lfd = t_listen(&port), ep = ep_new(), c, s, n, i, r;
	uint64_t t0;
	char b;

	a = t_addr(port);
	c = t_ok(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
	ep_add(ep, c, EPOLLIN | EPOLLOUT | EPOLLET, 1);
	r = connect(c, (struct sockaddr *)&a, sizeof(a));
	t_assert(r == 0 || errno == EINPROGRESS, "connect: %s", strerror(errno));
	s = t_ok(accept4(lfd, NULL, NULL, SOCK_NONBLOCK));
	ep_add(ep, s, EPOLLIN | EPOLLOUT | EPOLLET, 2);
	/* One EPOLLOUT edge each, in one call or two. */
	t0 = t_now_ms();
	while ((!nrep[1] || !nrep[2]) && t_now_ms() - t0 < EV_MS) {
		n = ep_wait_plain(ep, ev, 8, EV_MS);
		for (i = 0; i < n; i++) {
			t_assert(ev[i].data.u64 == 1 || ev[i].data.u64 == 2, "data %llu",
				 (unsigned long long)ev[i].data.u64);
			nrep[ev[i].data.u64]++;
			got[ev[i].data.u64] |= ev[i].events;
		}
	}
	t_assert(nrep[1] == 1 && got[1] == EPOLLOUT, "client: %d reports, events %#x", nrep[1],
		 got[1]);
	t_assert(nrep[2] == 1 && got[2] == EPOLLOUT, "server: %d reports, events %#x", nrep[2],
		 got[2]);
	/* Nothing more: no second edge when the connection settles. */
	expect_none(ep);
	expect_none(ep);
	/* Data still makes edges: the kernel reports the whole state. */
	t_write_all(c, "x", 1);
	n = ep_wait_plain(ep, ev, 8, EV_MS);
	t_assert(n == 1 && ev[0].data.u64 == 2 && ev[0].events == (EPOLLIN | EPOLLOUT),
		 "after the client's byte: %d events, first %#x for %llu", n, n ? ev[0].events : 0,
		 n ? (unsigned long long)ev[0].data.u64 : 0ULL);
	t_read_all(s, &b, 1);
	/* The client never ran out of room: its byte taken is no edge. */
	expect_none(ep);
	t_write_all(s, "y", 1);
	n = ep_wait_plain(ep, ev, 8, EV_MS);
	t_assert(n == 1 && ev[0].data.u64 == 1 && ev[0].events == (EPOLLIN | EPOLLOUT),
		 "after the server's byte: %d events, first %#x for %llu", n, n ? ev[0].events : 0,
		 n ? (unsigned long long)ev[0].data.u64 : 0ULL);
	t_read_all(c, &b, 1);
	t_assert_smc(c);
	t_assert_smc(s);
	t_smc_pairs++;
	close(ep);
	close(lfd);
	close(c);
	close(s);
}

/* ---- full_edge ------------------------------------------------------------ */

/* An edge-triggered writer that filled the buffer gets EPOLLOUT once the
 * reader made room; one that never filled it gets none (connect_edge). */
static void check_full_edge(void)
{
	static char buf[65536];
	struct epoll_event ev[4];
	int ep = ep_new(), c, s, n;
	size_t total = 0;
	ssize_t w;

	t_pair_smc(&c, &s);
	t_set_nonblock(c, true);
	ep_add(ep, c, EPOLLOUT | EPOLLET, 7);
	n = ep_wait_plain(ep, ev, 4, EV_MS);
	t_assert(n == 1 && ev[0].events == EPOLLOUT, "first: %d events", n);
	memset(buf, 'f', sizeof(buf));
	while ((w = write(c, buf, sizeof(buf))) > 0)
		total += (size_t)w;
	t_assert(w < 0 && errno == EAGAIN, "write: %s", strerror(errno));
	expect_none(ep);
	while (total) {
		size_t k = MIN(total, sizeof(buf));

		t_read_all(s, buf, k);
		total -= k;
	}
	n = ep_wait_plain(ep, ev, 4, EV_MS);
	t_assert(n == 1 && ev[0].data.u64 == 7 && ev[0].events == EPOLLOUT,
		 "after the reader emptied it: %d events, first %#x", n, n ? ev[0].events : 0);
	expect_none(ep);
	close(ep);
	close(c);
	close(s);
}

/* ---- order ---------------------------------------------------------------- */

#define ORD_N		6		/* connections; one pipe besides */
#define ORD_PIPE	ORD_N		/* its index in the orders below */

/* Make index i readable: a byte from the client, or into the pipe. */
static void ord_poke(const int *c, const int *pfd, int i)
{
	t_write_all(i == ORD_PIPE ? pfd[1] : c[i], "o", 1);
}

/* One epoll_wait of at most max events: exactly want[0..cnt). */
static void ord_expect(int line, int ep, int max, const int *want, int cnt)
{
	struct epoll_event ev[ORD_N + 2];
	char got[128] = "", exp[128] = "";
	int n = ep_wait_plain(ep, ev, max, EV_MS), i;
	bool ok = n == cnt;

	for (i = 0; i < n; i++) {
		snprintf(got + strlen(got), sizeof(got) - strlen(got), " %llu",
			 (unsigned long long)ev[i].data.u64 - 100);
		ok &= ev[i].data.u64 == 100 + (uint64_t)want[i] && ev[i].events == EPOLLIN;
	}
	for (i = 0; i < cnt; i++)
		snprintf(exp + strlen(exp), sizeof(exp) - strlen(exp), " %d", want[i]);
	if (!ok)
		t_fail("line %d: reported [%s ] in this order, expected [%s ]", line, got, exp);
}

static void check_order(void)
{
	static const int first[ORD_N + 1] = { 4, 1, ORD_PIPE, 5, 0, 3, 2 };
	static const int again[ORD_N] = { 4, 1, 5, 0, 3, 2 };
	static const int second[ORD_N] = { 2, 5, 3, 1, 4, 0 };
	int c[ORD_N], s[ORD_N], pfd[2], ep = ep_new(), i, k;
	char b;

	for (i = 0; i < ORD_N; i++) {
		t_pair_smc(&c[i], &s[i]);
		ep_add(ep, s[i], EPOLLIN, 100 + (uint64_t)i);
	}
	t_ok(pipe2(pfd, O_CLOEXEC | O_NONBLOCK));
	ep_add(ep, pfd[0], EPOLLIN, 100 + ORD_PIPE);
	expect_none(ep);
	/* Ready one after another (a pipe among them), all reported in one
	 * call in that order; still ready (level-triggered): again in that
	 * order. */
	for (k = 0; k <= ORD_N; k++)
		ord_poke(c, pfd, first[k]);
	ord_expect(__LINE__, ep, ORD_N + 2, first, ORD_N + 1);
	t_read_all(pfd[0], &b, 1);
	ord_expect(__LINE__, ep, ORD_N + 2, again, ORD_N);
	for (i = 0; i < ORD_N; i++)
		t_read_all(s[i], &b, 1);
	expect_none(ep);
	/* Across calls of two events each: first come, first served, and
	 * what stays ready goes behind what turned ready before it. */
	for (k = 0; k < ORD_N; k++)
		ord_poke(c, pfd, second[k]);
	for (k = 0; k < ORD_N; k += 2)
		ord_expect(__LINE__, ep, 2, second + k, 2);
	ord_expect(__LINE__, ep, 2, second, 2);
	for (i = 0; i < ORD_N; i++)
		t_read_all(s[i], &b, 1);
	expect_none(ep);
	for (i = 0; i < ORD_N; i++) {
		close(c[i]);
		close(s[i]);
	}
	close(pfd[0]);
	close(pfd[1]);
	close(ep);
}

/* ---- undecided ------------------------------------------------------------ */

/* Role "late-client PORT FD" (USMC_FAULT=late: its proposal comes after
 * the server's accept, which returns undecided, and it sends the CLC wake
 * byte): connect, say so, write one byte when told, read it back. */
static int late_client_main(const char *port, const char *fd)
{
	int sync = atoi(fd), c = t_connect((uint16_t)atoi(port));
	char b;

	t_sync_post(sync);
	t_sync_wait(sync);
	t_write_all(c, "u", 1);
	t_read_all(c, &b, 1);
	t_sync_wait(sync);
	close(c);
	return 0;
}

/* Proposals clients sent on TCP to wake a waiting server: on a device
 * whose proposals always travel there (clc_inband.h), every one. */
static long long wake_bytes(void)
{
	char *j;
	long long v;

	if (!t_accel())
		return 0;
	j = t_stats_json();
	v = t_json_int(j, t_clc_inband() ? "clc_inband_tx" : "wake_bytes");
	free(j);
	return v;
}

static void undecided(uint32_t et)
{
	struct epoll_event ev[4];
	char b;
	long long wakes = wake_bytes();
	uint16_t lport;
	int lfd = t_listen(&lport), ep = ep_new(), sync, s, n;
	pid_t pid;

	pid = t_spawn_late_client(lport, &sync);
	s = t_accept(lfd);
	t_set_nonblock(s, true);
	ep_add(ep, s, EPOLLIN | et, 9);
	t_sync_wait(sync);
	/* Its connect() returned: the wake byte is here, and is not ours. */
	expect_none(ep);
	t_sync_post(sync);
	n = ep_wait_plain(ep, ev, 4, EV_MS);
	t_assert(n == 1 && ev[0].data.u64 == 9 && ev[0].events == EPOLLIN,
		 "after the client's byte: %d events, first %#x", n, n ? ev[0].events : 0);
	t_read_all(s, &b, 1);
	t_assert(b == 'u', "read %#x", b);
	t_write_all(s, "u", 1);
	t_sync_post(sync);
	t_wait_child(pid, "late client");
	t_assert_smc(s);
	t_smc_pairs++;
	if (t_accel())
		t_assert(wake_bytes() - wakes == 1, "wake bytes: %lld", wake_bytes() - wakes);
	close(sync);
	close(ep);
	close(lfd);
	close(s);
}

static void check_undecided(void)
{
	undecided(0);
}

static void check_undecided_et(void)
{
	undecided(EPOLLET);
}

/* ---- peer_moved ----------------------------------------------------------- */

struct moved_srv {
	int s, sync;
};

/* The server: move to TCP, then read the request (it can only come on
 * TCP now) and answer it. */
static void *moved_server(void *arg)
{
	struct moved_srv *m = arg;
	char b[8];

	t_ok(fcntl(m->s, F_SETFL, fcntl(m->s, F_GETFL) | O_ASYNC));
	t_write_all(m->sync, "m", 1);
	t_read_all(m->s, b, 3);
	t_assert(!memcmp(b, "req", 3), "request");
	t_write_all(m->s, "resp", 4);
	return NULL;
}

static void check_peer_moved(void)
{
	struct moved_srv m;
	struct epoll_event ev[4];
	pthread_t th;
	int c, s, sync[2], ep, n;
	char b[8];

	signal(SIGIO, SIG_IGN);
	t_pair_smc(&c, &s);
	t_write_all(c, "req", 3);	/* into the server's ring, unread */
	ep = ep_new();
	ep_add(ep, c, EPOLLIN, 7);
	/* Looked at without sleeping: nothing, and not armed. */
	t_assert(ep_wait_plain(ep, ev, 4, 0) == 0, "an event before the move");
	t_ok(pipe(sync));
	m.s = s;
	m.sync = sync[1];
	t_assert(!pthread_create(&th, NULL, moved_server, &m), "pthread_create");
	t_read_all(sync[0], b, 1);	/* moved, and it rang: nobody had armed */
	n = ep_wait_plain(ep, ev, 4, EV_MS);
	t_assert(n == 1 && ev[0].data.u64 == 7 && (ev[0].events & EPOLLIN),
		 "epoll_wait after the peer moved: %d event(s)", n);
	t_read_all(c, b, 4);
	t_assert(!memcmp(b, "resp", 4), "answer");
	t_assert(!pthread_join(th, NULL), "pthread_join");
	close(ep);
	close(sync[0]);
	close(sync[1]);
	close(c);
	close(s);
	t_tcp_conns = 2;	/* async_io there, peer_moved_to_tcp here */
}

static bool epfd_readable(int epfd, bool use_select)
{
	struct pollfd p = { .fd = epfd, .events = POLLIN };
	struct timeval tv = { 0, NOEV_MS * 1000 };
	fd_set r;

	if (!use_select)
		return t_ok(poll(&p, 1, NOEV_MS)) == 1 && (p.revents & POLLIN);
	FD_ZERO(&r);
	FD_SET(epfd, &r);
	return t_ok(select(epfd + 1, &r, NULL, NULL, &tv)) == 1 && FD_ISSET(epfd, &r);
}

static void check_poll_epfd(void)
{
	struct epoll_event ev = { .events = EPOLLIN }, out;
	int epfd = t_ok(epoll_create1(EPOLL_CLOEXEC)), c, s, c2, s2;
	char b[8];

	t_assert(!epfd_readable(epfd, false), "empty epoll readable");
	/* Bytes first, then the ADD (the poll above came before both). */
	t_pair_smc(&c, &s);
	t_write_all(c, "abc", 3);
	ev.data.fd = s;
	t_ok(epoll_ctl(epfd, EPOLL_CTL_ADD, s, &ev));
	t_assert(epfd_readable(epfd, false), "poll: bytes before the ADD");
	t_assert(epfd_readable(epfd, true), "select: bytes before the ADD");
	t_assert(epoll_wait(epfd, &out, 1, 0) == 1 && out.data.fd == s);
	t_read_all(s, b, 3);
	t_assert(!epfd_readable(epfd, false), "readable after the bytes were read");
	/* The ADD first, then the bytes. */
	t_pair_smc(&c2, &s2);
	ev.data.fd = s2;
	t_ok(epoll_ctl(epfd, EPOLL_CTL_ADD, s2, &ev));
	t_assert(!epfd_readable(epfd, true), "select: readable before any byte");
	t_write_all(c2, "xy", 2);
	t_assert(epfd_readable(epfd, false), "poll: bytes after the ADD");
	t_assert(epoll_wait(epfd, &out, 1, 0) == 1 && out.data.fd == s2);
	t_read_all(s2, b, 2);
	close(c);
	close(s);
	close(c2);
	close(s2);
	close(epfd);
}

static void close_edge(bool after)
{
	uint32_t want = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
	struct epoll_event ev[8];
	int c, s, ep = ep_new(), n;

	t_pair_smc(&c, &s);
	t_xfer(s, c, "x");
	if (!after)
		ep_add(ep, c, want | EPOLLET, 1);
	close(s);
	usleep(100 * 1000);	/* the FIN is in c's kernel socket */
	if (after)
		ep_add(ep, c, want | EPOLLET, 1);
	n = ep_wait_plain(ep, ev, 8, EV_MS);
	t_assert(n == 1 && (ev[0].events & want) == want, "the close: %d events, first %#x", n,
		 n ? ev[0].events : 0);
	expect_none(ep);
	expect_none(ep);
	close(c);
	close(ep);
}

static void check_close_edge_after(void)
{
	close_edge(true);
}

static void check_close_edge_before(void)
{
	close_edge(false);
}

static void check_killed_edge(void)
{
	struct epoll_event ev[8];
	uint16_t port;
	int lfd = t_listen(&port), ep = ep_new(), s, n;
	pid_t pid;
	char b[8];

	pid = t_fork_helper();
	if (pid == 0) {
		int c = t_connect(port);

		t_write_all(c, "x", 1);
		pause();
		_exit(0);
	}
	s = t_ok(accept4(lfd, NULL, NULL, SOCK_NONBLOCK));
	ep_add(ep, s, EPOLLIN | EPOLLOUT | EPOLLET, 1);
	/* Writable first, then the byte, or both at once. */
	do
		n = ep_wait_plain(ep, ev, 8, EV_MS);
	while (n == 1 && !(ev[0].events & EPOLLIN));
	t_assert(n == 1 && (ev[0].events & EPOLLIN), "the byte: %d events", n);
	t_assert(read(s, b, sizeof(b)) == 1, "read the byte");
	t_assert(read(s, b, sizeof(b)) < 0 && errno == EAGAIN, "drained");
	t_assert_smc(s);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	n = ep_wait_plain(ep, ev, 8, EV_MS);
	t_assert(n == 1 && (ev[0].events & EPOLLIN), "the peer's death: %d events", n);
	t_assert(read(s, b, sizeof(b)) == 0, "EOF after the peer's death");
	t_smc_pairs++;
	close(s);
	close(lfd);
	close(ep);
}

static const struct t_check checks[] = {
	{ "killed_edge", check_killed_edge },
	{ "close_edge_after", check_close_edge_after },
	{ "close_edge_before", check_close_edge_before },
	{ "connect_edge", check_connect_edge },
	{ "full_edge", check_full_edge },
	{ "order", check_order },
	{ "peer_moved", check_peer_moved },
	{ "poll_epfd", check_poll_epfd },
	{ "undecided", check_undecided },
	{ "undecided_et", check_undecided_et },
};

int main(int argc, char **argv)
{
	t_name = "t_epoll_ready";
	if (argc == 4 && !strcmp(argv[1], "late-client"))
		return late_client_main(argv[2], argv[3]);
	signal(SIGPIPE, SIG_IGN);
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
