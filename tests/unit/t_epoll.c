// SPDX-License-Identifier: MIT
/*
 * t_epoll.c - epoll over shared-memory connections, one check per feature,
 * each against the kernel's rules for TCP sockets:
 *
 *   level        EPOLLIN/EPOLLOUT reported while the condition holds
 *   edge         EPOLLET: one event per arrival, none without new data
 *   oneshot      EPOLLONESHOT disables after one event; EPOLL_CTL_MOD re-arms
 *   rdhup        peer shutdown(SHUT_WR): EPOLLIN|EPOLLRDHUP, no EPOLLHUP
 *   exclusive    EPOLLEXCLUSIVE accepted on ADD (and refused on MOD)
 *   events0      events=0: nothing but EPOLLERR|EPOLLHUP (after a reset)
 *   mixed        accelerated socket + pipe + timerfd + plain TCP to a
 *                non-usmc process, each reported with its own data
 *   two_sets     one connection in two epoll instances
 *   nested       an epoll fd inside another: inner readiness shows outside
 *   early        registered before connect(): EPOLLOUT on completion, then
 *                data, and the connection ends up on shared memory
 *   fork         an epoll fd inherited by a child that waits on it
 *   fork_close   a child closes its copies of a connection the parent's
 *                (shared) epoll instance watches: the parent still wakes
 *   dup_close    close of one of two descriptors of a registered socket:
 *                the registration stays with the open description
 *   del_add      EPOLL_CTL_DEL then ADD, over and over (event loops do it
 *                per request): deleted means no events, MOD/DEL say ENOENT,
 *                re-adding reports what is pending, with the new data
 *   pwait        epoll_pwait / epoll_pwait2 with a signal mask
 *   eintr        a signal interrupts epoll_wait (EINTR even with SA_RESTART)
 *   shut_edge    EPOLLET: our own shutdown(SHUT_RD / SHUT_WR / SHUT_RDWR) is
 *                an edge with what the socket says then, as the kernel's
 *                state change (mio's and tokio's shutdown events)
 *
 * Connections are made inside this process (connect, then accept) and
 * exchange one byte each way before the check, so that both ends are known
 * to be on shared memory (t_assert_smc) when the check starts.  Each check
 * runs in its own process; after it the counters must show exactly its
 * shared-memory endpoints and, for "mixed" only, one fallback: the client
 * end of the deliberate plain TCP connection.
 *
 * usage: t_epoll [check...]     a child role "plain-echo" serves the mixed check
 */
#include "t_ep.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>

#define NOEV_MS		50	/* "no event" means none within this long */
#define EV_MS		5000	/* an expected event comes within this long */

static int dup_reports;		/* one call reported one registration twice */

/*
 * Wait; returns the number of events (EINTR retried), events in ev[].  The
 * kernel never reports a registration twice in one call; if that happens it
 * is counted (the check fails at its end) and the copies are merged, so the
 * rest of the check still says what else is right or wrong.
 */
static int ep_wait(int ep, struct epoll_event *ev, int max, int ms)
{
	int n = ep_wait_plain(ep, ev, max, ms), i, j, k;

	for (i = 0; i < n; i++)
		for (j = i + 1; j < n; j++)
			if (ev[j].data.u64 == ev[i].data.u64) {
				if (!dup_reports++)
					fprintf(stderr, "t_epoll: one epoll_wait reported data %llu "
						"twice (events %#x and %#x)\n",
						(unsigned long long)ev[i].data.u64, ev[i].events,
						ev[j].events);
				ev[i].events |= ev[j].events;
				for (k = j; k + 1 < n; k++)
					ev[k] = ev[k + 1];
				n--;
				j--;
			}
	return n;
}

/* Exactly one event, for data, with exactly these events. */
#define expect_one(ep, ms, data, events) expect_one_at(__LINE__, ep, ms, data, events)
static void expect_one_at(int line, int ep, int ms, uint64_t data, uint32_t events)
{
	struct epoll_event ev[8];
	int n = ep_wait(ep, ev, 8, ms);

	if (n != 1 || ev[0].data.u64 != data || ev[0].events != events)
		t_fail("line %d: expected one event %#x for %llu, got %d (first: %#x for %llu%s)",
		       line, events, (unsigned long long)data, n, n > 0 ? ev[0].events : 0,
		       n > 0 ? (unsigned long long)ev[0].data.u64 : 0ULL,
		       n > 1 ? ", and more" : "");
}

#define expect_none(ep) expect_none_at(__LINE__, ep)
static void expect_none_at(int line, int ep)
{
	struct epoll_event ev[8];
	int n = ep_wait(ep, ev, 8, NOEV_MS);

	if (n)
		t_fail("line %d: expected no event, got %d (first: %#x for %llu)", line, n,
		       ev[0].events, (unsigned long long)ev[0].data.u64);
}

/* epoll_ctl(op, fd, events) fails with exactly errno want. */
#define expect_errno(ep, op, fd, events, want) expect_errno_at(__LINE__, ep, op, fd, events, want)
static void expect_errno_at(int line, int ep, int op, int fd, uint32_t events, int want)
{
	struct epoll_event ev = { .events = events, .data.u64 = 1 };

	errno = 0;
	if (epoll_ctl(ep, op, fd, &ev) != -1 || errno != want)
		t_fail("line %d: epoll_ctl op %d events %#x: errno %s, expected %s", line, op,
		       events, t_errname(errno), t_errname(want));
}

static void drain(int fd, size_t len)
{
	char buf[256];

	while (len) {
		size_t n = len < sizeof(buf) ? len : sizeof(buf);

		t_read_all(fd, buf, n);
		len -= n;
	}
}

/* ---- checks ------------------------------------------------------------- */

static void check_level(void)
{
	int c, s, ep = ep_new();

	t_pair_smc(&c, &s);
	ep_add(ep, c, EPOLLIN | EPOLLOUT, 1);
	expect_one(ep, EV_MS, 1, EPOLLOUT);
	expect_one(ep, EV_MS, 1, EPOLLOUT);	/* still writable: reported again */
	t_write_all(s, "0123456789", 10);
	expect_one(ep, EV_MS, 1, EPOLLIN | EPOLLOUT);
	expect_one(ep, EV_MS, 1, EPOLLIN | EPOLLOUT);	/* not read: still readable */
	drain(c, 4);
	expect_one(ep, EV_MS, 1, EPOLLIN | EPOLLOUT);
	drain(c, 6);
	expect_one(ep, EV_MS, 1, EPOLLOUT);
	ep_mod(ep, c, EPOLLIN, 1);
	expect_none(ep);
	t_write_all(s, "x", 1);
	expect_one(ep, EV_MS, 1, EPOLLIN);
	drain(c, 1);
	expect_none(ep);
	close(ep);
	close(c);
	close(s);
}

static void check_edge(void)
{
	int c, s, ep = ep_new();

	t_pair_smc(&c, &s);
	ep_add(ep, c, EPOLLIN | EPOLLET, 2);
	expect_none(ep);
	t_write_all(s, "abc", 3);
	expect_one(ep, EV_MS, 2, EPOLLIN);
	expect_none(ep);			/* no new data: no new event */
	t_write_all(s, "def", 3);
	expect_one(ep, EV_MS, 2, EPOLLIN);	/* new arrival, even though not drained */
	expect_none(ep);
	drain(c, 2);
	expect_none(ep);			/* reading is not an arrival */
	drain(c, 4);
	expect_none(ep);
	t_write_all(s, "g", 1);
	expect_one(ep, EV_MS, 2, EPOLLIN);
	drain(c, 1);

	/* EPOLLOUT edge: writable once at registration, then only on change. */
	ep_mod(ep, c, EPOLLIN | EPOLLOUT | EPOLLET, 2);
	expect_one(ep, EV_MS, 2, EPOLLOUT);
	expect_none(ep);
	close(ep);
	close(c);
	close(s);
}

static void check_oneshot(void)
{
	int c, s, ep = ep_new();

	t_pair_smc(&c, &s);
	ep_add(ep, c, EPOLLIN | EPOLLONESHOT, 3);
	t_write_all(s, "a", 1);
	expect_one(ep, EV_MS, 3, EPOLLIN);
	expect_none(ep);			/* disabled, though still readable */
	t_write_all(s, "b", 1);
	expect_none(ep);			/* new data does not re-enable it */
	ep_mod(ep, c, EPOLLIN | EPOLLONESHOT, 4);
	expect_one(ep, EV_MS, 4, EPOLLIN);	/* re-armed: data is pending */
	expect_none(ep);
	drain(c, 2);
	ep_mod(ep, c, EPOLLIN | EPOLLONESHOT, 5);
	expect_none(ep);
	t_write_all(s, "c", 1);
	expect_one(ep, EV_MS, 5, EPOLLIN);
	expect_none(ep);
	close(ep);
	close(c);
	close(s);
}

static void check_rdhup(void)
{
	int c, s, ep = ep_new();

	t_pair_smc(&c, &s);
	ep_add(ep, c, EPOLLIN | EPOLLRDHUP, 6);
	expect_none(ep);
	t_write_all(s, "bye", 3);
	t_ok(shutdown(s, SHUT_WR));
	expect_one(ep, EV_MS, 6, EPOLLIN | EPOLLRDHUP);
	drain(c, 3);
	expect_one(ep, EV_MS, 6, EPOLLIN | EPOLLRDHUP);	/* EOF stays readable */
	t_assert(read(c, (char[4]){ 0 }, 4) == 0);
	/* Our side still writes: the peer only shut down its direction. */
	t_write_all(c, "ok", 2);
	{
		char b[2];

		t_read_all(s, b, 2);
	}
	close(ep);
	close(c);
	close(s);
}

static void check_exclusive(void)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLEXCLUSIVE, .data.u64 = 7 };
	int c, s, ep = ep_new();

	t_pair_smc(&c, &s);
	if (epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev))
		t_fail("EPOLLEXCLUSIVE add: %s", strerror(errno));
	t_write_all(s, "x", 1);
	expect_one(ep, EV_MS, 7, EPOLLIN);
	/* The kernel refuses EPOLL_CTL_MOD of an exclusive entry. */
	expect_errno(ep, EPOLL_CTL_MOD, c, ev.events, EINVAL);
	drain(c, 1);
	close(ep);
	close(c);
	close(s);
}

static void check_events0(void)
{
	int c, s, ep = ep_new();

	t_pair_smc(&c, &s);
	ep_add(ep, c, 0, 8);
	t_write_all(s, "data", 4);		/* readable and writable: not asked */
	expect_none(ep);
	/* The server closes with our bytes unread: reset, ERR|HUP always reported. */
	t_write_all(c, "unread", 6);
	t_msleep(20);
	close(s);
	expect_one(ep, EV_MS, 8, EPOLLERR | EPOLLHUP);
	close(ep);
	close(c);
}

static void check_mixed(void)
{
	struct itimerspec its = { .it_value = { 0, 100 * 1000000L } };
	struct epoll_event ev[8];
	int c, s, p[2], tfd, tcp, ep = ep_new(), i, n, seen = 0;
	uint16_t port;
	pid_t pid;
	char m[16], buf[8];

	t_pair_smc(&c, &s);
	t_ok(pipe(p));
	tfd = t_ok(timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC));
	port = t_start_plain_echo(&pid);
	tcp = t_connect(port);
	t_tcp_conns++;
	t_fd_mode(tcp, m, sizeof(m));
	if (t_accel() && strcmp(m, "TCP"))
		t_fail("connection to a process without usmc: mode \"%s\", expected TCP", m);

	ep_add(ep, c, EPOLLIN, 10);
	ep_add(ep, p[0], EPOLLIN, 11);
	ep_add(ep, tfd, EPOLLIN, 12);
	ep_add(ep, tcp, EPOLLIN, 13);
	expect_none(ep);

	/* Each one alone, then all at once. */
	t_write_all(s, "1", 1);
	expect_one(ep, EV_MS, 10, EPOLLIN);
	drain(c, 1);
	t_write_all(p[1], "2", 1);
	expect_one(ep, EV_MS, 11, EPOLLIN);
	drain(p[0], 1);
	t_write_all(tcp, "3", 1);
	expect_one(ep, EV_MS, 13, EPOLLIN);
	drain(tcp, 1);
	t_ok(timerfd_settime(tfd, 0, &its, NULL));
	expect_one(ep, EV_MS, 12, EPOLLIN);
	t_assert(read(tfd, buf, 8) == 8);
	expect_none(ep);

	t_write_all(s, "a", 1);
	t_write_all(p[1], "b", 1);
	t_write_all(tcp, "c", 1);
	its.it_value.tv_nsec = 1000000;
	t_ok(timerfd_settime(tfd, 0, &its, NULL));
	/* Level-triggered: a later call may repeat earlier ones; one call never
	 * holds the same registration twice. */
	while (seen != 0xf) {
		int once = 0;

		n = ep_wait(ep, ev, 8, EV_MS);
		if (!n)
			t_fail("mixed: only saw %#x of 0xf", seen);
		for (i = 0; i < n; i++) {
			int bit = (int)ev[i].data.u64 - 10;

			t_assert(bit >= 0 && bit < 4 && ev[i].events == EPOLLIN,
				 "event %#x for %llu", ev[i].events,
				 (unsigned long long)ev[i].data.u64);
			t_assert(!(once & (1 << bit)), "data %llu twice in one epoll_wait",
				 (unsigned long long)ev[i].data.u64);
			once |= 1 << bit;
		}
		seen |= once;
	}
	drain(c, 1);
	drain(p[0], 1);
	drain(tcp, 1);
	t_assert(read(tfd, buf, 8) == 8);
	expect_none(ep);
	close(ep);
	close(tcp);
	t_wait_child(pid, "plain echo server");
	close(tfd);
	close(p[0]);
	close(p[1]);
	close(c);
	close(s);
}

static void check_two_sets(void)
{
	int c, s, e1 = ep_new(), e2 = ep_new();

	t_pair_smc(&c, &s);
	ep_add(e1, c, EPOLLIN, 21);
	ep_add(e2, c, EPOLLIN | EPOLLET, 22);
	t_write_all(s, "x", 1);
	expect_one(e1, EV_MS, 21, EPOLLIN);
	expect_one(e2, EV_MS, 22, EPOLLIN);
	expect_one(e1, EV_MS, 21, EPOLLIN);	/* level */
	expect_none(e2);			/* edge */
	t_ok(epoll_ctl(e1, EPOLL_CTL_DEL, c, NULL));
	expect_none(e1);
	t_write_all(s, "y", 1);
	expect_one(e2, EV_MS, 22, EPOLLIN);	/* the other set is unaffected */
	drain(c, 2);
	close(e1);
	close(e2);
	close(c);
	close(s);
}

/* Writes one byte after a delay, from another thread. */
struct writer {
	int fd, ms;
	const char *byte;
};

static void *late_write(void *arg)
{
	struct writer *w = arg;

	t_msleep(w->ms);
	t_write_all(w->fd, w->byte, 1);
	return NULL;
}

static void check_nested(void)
{
	struct epoll_event ev[4];
	int c, s, inner = ep_new(), outer = ep_new();

	t_pair_smc(&c, &s);
	ep_add(inner, c, EPOLLIN, 31);
	ep_add(outer, inner, EPOLLIN, 32);
	expect_none(outer);
	t_write_all(s, "n", 1);
	expect_one(outer, EV_MS, 32, EPOLLIN);
	t_assert(ep_wait(inner, ev, 4, 0) == 1 && ev[0].data.u64 == 31 && ev[0].events == EPOLLIN,
		 "inner set after the outer reported it");
	drain(c, 1);
	expect_none(outer);

	/* And when the outer waits first (the wake-up must cross both levels). */
	{
		struct writer w = { s, 100, "m" };
		pthread_t th;

		if (pthread_create(&th, NULL, late_write, &w))
			t_fail("pthread_create");
		expect_one(outer, EV_MS, 32, EPOLLIN);
		pthread_join(th, NULL);
	}
	drain(c, 1);
	close(outer);
	close(inner);
	close(c);
	close(s);
}

static void check_early(void)
{
	struct sockaddr_in a;
	struct epoll_event ev[4];
	uint16_t port;
	int lfd = t_listen(&port), ep = ep_new(), c, s, n, r;
	char b[4];

	a = t_addr(port);
	c = t_ok(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
	ep_add(ep, c, EPOLLIN | EPOLLOUT | EPOLLRDHUP, 41);
	r = connect(c, (struct sockaddr *)&a, sizeof(a));
	t_assert(r == 0 || errno == EINPROGRESS, "connect: %s", strerror(errno));
	n = ep_wait(ep, ev, 4, EV_MS);
	t_assert(n == 1 && ev[0].data.u64 == 41 && ev[0].events == EPOLLOUT,
		 "after connect: %d events, first %#x", n, n ? ev[0].events : 0);
	s = t_accept(lfd);
	t_write_all(s, "hi", 2);
	expect_one(ep, EV_MS, 41, EPOLLIN | EPOLLOUT);
	t_read_all(c, b, 2);
	t_write_all(c, "yo", 2);
	t_read_all(s, b, 2);
	t_assert_smc(c);
	t_assert_smc(s);
	t_smc_pairs++;
	expect_one(ep, EV_MS, 41, EPOLLOUT);
	close(ep);
	close(lfd);
	close(c);
	close(s);
}

static void check_fork(void)
{
	int c, s, ep = ep_new();
	pid_t pid;

	t_pair_smc(&c, &s);
	ep_add(ep, c, EPOLLIN, 51);
	pid = t_fork_helper();
	if (pid == 0) {
		char b[5];

		close(s);
		expect_one(ep, EV_MS, 51, EPOLLIN);
		t_read_all(c, b, 5);
		t_assert(!memcmp(b, "child", 5));
		expect_none(ep);
		t_write_all(c, "done", 4);
		_exit(0);
	}
	t_msleep(50);	/* the child is (probably) asleep in epoll_wait */
	t_write_all(s, "child", 5);
	{
		char b[4];

		t_read_all(s, b, 4);
	}
	t_wait_child(pid, "epoll child");
	close(ep);
	close(c);
	close(s);
}

/* A child of the process closes its copy of a connection the parent's
 * epoll instance watches, and exits: the parent, asleep in epoll_wait on
 * the instance (one kernel instance, shared with the child), still wakes
 * for the peer's bytes.  The child's close must not take entries of that
 * instance away from the parent: the kernel removes a file's entry only
 * when its last descriptor closes. */
static void check_fork_close(void)
{
	int c, s, ep = ep_new();
	struct writer w;
	pthread_t t;
	pid_t pid;
	char b;

	t_pair_smc(&c, &s);
	w = (struct writer){ .fd = c, .ms = 200, .byte = "L" };
	ep_add(ep, s, EPOLLIN, 52);
	expect_none(ep);
	pid = t_fork_helper();
	if (pid == 0) {
		close(s);
		close(c);
		_exit(0);
	}
	t_wait_child(pid, "closing child");
	t_assert(!pthread_create(&t, NULL, late_write, &w));
	expect_one(ep, EV_MS, 52, EPOLLIN);
	t_assert(!pthread_join(t, NULL));
	t_read_all(s, &b, 1);
	t_assert(b == 'L', "read %#x", b);
	close(ep);
	close(c);
	close(s);
}

static void check_dup_close(void)
{
	int c, s, d, ep = ep_new();

	t_pair_smc(&c, &s);
	ep_add(ep, c, EPOLLIN, 61);
	d = t_ok(dup(c));
	t_ok(close(c));
	/* The description is still open through d: events keep coming. */
	t_write_all(s, "d", 1);
	expect_one(ep, EV_MS, 61, EPOLLIN);
	drain(d, 1);
	expect_none(ep);
	t_write_all(s, "e", 1);
	expect_one(ep, EV_MS, 61, EPOLLIN);
	drain(d, 1);
	/* The entry is keyed by the old number: d is not registered. */
	expect_errno(ep, EPOLL_CTL_MOD, d, EPOLLIN, ENOENT);
	/* Closing the last descriptor drops the registration. */
	t_ok(close(d));
	t_write_all(s, "f", 1);
	expect_none(ep);
	close(ep);
	close(s);
}

static void check_del_add(void)
{
	int c, s, c2, s2, i, ep = ep_new();

	t_pair_smc(&c, &s);
	ep_add(ep, c, EPOLLIN, 71);
	t_write_all(s, "a", 1);
	expect_one(ep, EV_MS, 71, EPOLLIN);
	t_ok(epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL));
	expect_none(ep);			/* pending data, but not registered */
	expect_errno(ep, EPOLL_CTL_MOD, c, EPOLLIN, ENOENT);
	expect_errno(ep, EPOLL_CTL_DEL, c, EPOLLIN, ENOENT);
	t_write_all(s, "b", 1);
	expect_none(ep);
	ep_add(ep, c, EPOLLIN | EPOLLET, 72);	/* ADD reports what is pending, ET too */
	expect_one(ep, EV_MS, 72, EPOLLIN);
	expect_none(ep);
	expect_errno(ep, EPOLL_CTL_ADD, c, EPOLLIN, EEXIST);
	drain(c, 2);

	/* The event-loop cycle: write interest, then read interest, each a
	 * fresh ADD after a DEL, with new data every time. */
	for (i = 0; i < 1000; i++) {
		char b;

		ep_mod(ep, c, EPOLLIN | EPOLLET, 72);
		t_ok(epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL));
		ep_add(ep, c, EPOLLOUT, 1000 + (uint64_t)i);
		expect_one(ep, EV_MS, 1000 + (uint64_t)i, EPOLLOUT);
		t_ok(epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL));
		t_write_all(c, "q", 1);
		t_read_all(s, &b, 1);
		t_write_all(s, "r", 1);
		ep_add(ep, c, EPOLLIN, 5000 + (uint64_t)i);
		expect_one(ep, EV_MS, 5000 + (uint64_t)i, EPOLLIN);
		t_read_all(c, &b, 1);
		t_assert(b == 'r', "cycle %d: read %#x", i, b);
	}

	/* The peer closes while we are deleted: seen on re-ADD. */
	t_ok(epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL));
	t_ok(shutdown(s, SHUT_WR));
	expect_none(ep);
	ep_add(ep, c, EPOLLIN | EPOLLRDHUP, 73);
	expect_one(ep, EV_MS, 73, EPOLLIN | EPOLLRDHUP);

	/* Deleted, closed, the number reused by a new connection: only the
	 * new one is registered, with its own data. */
	t_ok(epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL));
	t_ok(close(c));
	close(s);
	t_pair_smc(&c2, &s2);
	if (c2 != c)
		t_assert(dup2(c2, c) == c && close(c2) == 0, "move to %d", c);
	expect_errno(ep, EPOLL_CTL_MOD, c, EPOLLIN, ENOENT);
	ep_add(ep, c, EPOLLIN, 74);
	expect_none(ep);
	t_write_all(s2, "n", 1);
	expect_one(ep, EV_MS, 74, EPOLLIN);
	drain(c, 1);
	close(ep);
	close(c);
	close(s2);
}

static volatile sig_atomic_t sigs;

static void on_sig(int sig)
{
	(void)sig;
	sigs++;
}

static void check_pwait(void)
{
	struct sigaction sa = { .sa_handler = on_sig };
	struct epoll_event ev[4];
	struct timespec ts = { 5, 0 };
	sigset_t block, empty, old;
	int c, s, ep = ep_new(), n;

	t_pair_smc(&c, &s);
	ep_add(ep, c, EPOLLIN, 71);
	sigaction(SIGUSR1, &sa, NULL);
	sigemptyset(&empty);
	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &block, &old);

	/* A pending blocked signal is delivered by the wait's mask: EINTR. */
	sigs = 0;
	raise(SIGUSR1);
	t_assert(sigs == 0);
	errno = 0;
	n = epoll_pwait(ep, ev, 4, EV_MS, &empty);
	t_assert(n == -1 && errno == EINTR && sigs == 1, "epoll_pwait: %d %s sigs %d", n,
		 t_errname(errno), (int)sigs);
	raise(SIGUSR1);
	errno = 0;
	n = epoll_pwait2(ep, ev, 4, &ts, &empty);
	t_assert(n == -1 && errno == EINTR && sigs == 2, "epoll_pwait2: %d %s sigs %d", n,
		 t_errname(errno), (int)sigs);

	/* A mask that blocks it keeps it pending: a plain timeout. */
	raise(SIGUSR1);
	n = epoll_pwait(ep, ev, 4, NOEV_MS, &block);
	t_assert(n == 0 && sigs == 2, "epoll_pwait with the signal blocked: %d sigs %d", n,
		 (int)sigs);
	ts.tv_sec = 0;
	ts.tv_nsec = NOEV_MS * 1000000L;
	n = epoll_pwait2(ep, ev, 4, &ts, &block);
	t_assert(n == 0 && sigs == 2, "epoll_pwait2 with the signal blocked: %d sigs %d", n,
		 (int)sigs);

	/* Ready data wins without waiting; the mask is restored after. */
	t_write_all(s, "p", 1);
	ts.tv_sec = 5;
	n = epoll_pwait2(ep, ev, 4, &ts, &block);
	t_assert(n == 1 && ev[0].data.u64 == 71 && ev[0].events == EPOLLIN, "epoll_pwait2 ready: %d",
		 n);
	n = epoll_pwait(ep, ev, 4, EV_MS, &block);
	t_assert(n == 1 && ev[0].data.u64 == 71, "epoll_pwait ready: %d", n);
	drain(c, 1);
	t_assert(sigs == 2);
	pthread_sigmask(SIG_SETMASK, &old, NULL);	/* the pending one arrives now */
	t_assert(sigs == 3, "sigs %d", (int)sigs);
	signal(SIGUSR1, SIG_DFL);
	close(ep);
	close(c);
	close(s);
}

struct kicker {
	pthread_t target;
	int ms;
};

static void *kick(void *arg)
{
	struct kicker *k = arg;

	t_msleep(k->ms);
	pthread_kill(k->target, SIGUSR2);
	return NULL;
}

static void check_eintr(void)
{
	struct epoll_event ev[4];
	struct kicker k = { pthread_self(), 100 };
	int c, s, ep = ep_new(), n, round;
	pthread_t th;

	t_pair_smc(&c, &s);
	ep_add(ep, c, EPOLLIN, 81);
	/* epoll_wait is never restarted, SA_RESTART or not (signal(7)). */
	for (round = 0; round < 2; round++) {
		struct sigaction sa = { .sa_handler = on_sig, .sa_flags = round ? SA_RESTART : 0 };

		sigaction(SIGUSR2, &sa, NULL);
		sigs = 0;
		if (pthread_create(&th, NULL, kick, &k))
			t_fail("pthread_create");
		errno = 0;
		n = epoll_wait(ep, ev, 4, 20000);
		pthread_join(th, NULL);
		t_assert(n == -1 && errno == EINTR && sigs == 1,
			 "%s: epoll_wait returned %d (%s), %d signals",
			 round ? "SA_RESTART" : "no SA_RESTART", n, t_errname(errno), (int)sigs);
	}
	signal(SIGUSR2, SIG_DFL);
	/* Still works after the interruptions. */
	t_write_all(s, "z", 1);
	expect_one(ep, EV_MS, 81, EPOLLIN);
	drain(c, 1);
	close(ep);
	close(c);
	close(s);
}

static void check_shut_edge(void)
{
	static const struct {
		int how;
		uint32_t events;
	} cases[] = {
		{ SHUT_RD, EPOLLIN | EPOLLOUT | EPOLLRDHUP },
		{ SHUT_RDWR, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLHUP },
		{ SHUT_WR, EPOLLOUT },
	};
	unsigned int i;

	for (i = 0; i < ARRAY_LEN(cases); i++) {
		int c, s, ep = ep_new();

		t_pair_smc(&c, &s);
		ep_add(ep, c, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, 7);
		expect_one(ep, EV_MS, 7, EPOLLOUT);
		expect_none(ep);
		t_ok(shutdown(c, cases[i].how));
		/* (The kernel may add another when the peer acknowledges
		 * the FIN: not checked.) */
		expect_one(ep, EV_MS, 7, cases[i].events);
		close(ep);
		close(c);
		close(s);
	}
}

static const struct t_check checks[] = {
	{ "level", check_level },
	{ "edge", check_edge },
	{ "oneshot", check_oneshot },
	{ "rdhup", check_rdhup },
	{ "exclusive", check_exclusive },
	{ "events0", check_events0 },
	{ "mixed", check_mixed },
	{ "two_sets", check_two_sets },
	{ "nested", check_nested },
	{ "early", check_early },
	{ "fork", check_fork },
	{ "fork_close", check_fork_close },
	{ "dup_close", check_dup_close },
	{ "del_add", check_del_add },
	{ "pwait", check_pwait },
	{ "eintr", check_eintr },
	{ "shut_edge", check_shut_edge },
};

static void no_dups(void)
{
	if (dup_reports)
		t_fail("%d epoll_wait calls reported a registration twice", dup_reports);
}

int main(int argc, char **argv)
{
	t_name = "t_epoll";
	if (argc == 3 && !strcmp(argv[1], "plain-echo"))
		return t_plain_echo_main(argv[2]);
	signal(SIGPIPE, SIG_IGN);
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, no_dups);
}
