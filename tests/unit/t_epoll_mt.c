// SPDX-License-Identifier: MIT
/*
 * t_epoll_mt.c - epoll with one thread waiting while another changes the
 * set: the waiter sees only the data the program registered, and is woken
 * as the kernel would wake it.
 *
 *   late_add        the waiter sleeps on a set with no accelerated
 *                   connection; another thread adds one, its peer closes:
 *                   the waiter gets the program's data with EPOLLIN|RDHUP
 *   late_add_data   the same, the peer writes a byte after the add
 *   late_add_ready  the same, the byte was there before the add
 *   mod_rearm       EPOLLONESHOT fired; the waiter sleeps; another thread
 *                   re-arms with EPOLL_CTL_MOD while data is pending
 *   churn           one thread opens, registers, uses and closes
 *                   connections one after another, another thread waits
 *                   on the set all along: every event it gets carries data
 *                   the program registered (records freed while the
 *                   waiter is in the kernel)
 *   churn_busy      the same with one more connection registered all along
 *                   (the set is never without an accelerated connection)
 *   busy_fin        one connection stays readable (never read), the peer
 *                   process of it and of another is killed and reaped: the
 *                   next epoll_wait reports both with EPOLLRDHUP (usmc may
 *                   leave the kernel unasked while records are ready,
 *                   epoll_kernel.c, but not past a peer's death)
 *   close_inflight  another thread is blocked in send() on a connection
 *                   when the program closes it; its peer then half-closes:
 *                   no event for the closed number (usmc only, below)
 *
 * Every check holds for plain TCP (USMC_DISABLE=1) as well, but for
 * close_inflight's last assertion: there the kernel's in-flight send()
 * holds the file, and a file's epoll entries live as long as the file, so
 * the kernel does report the stale number; usmc's record goes with the
 * application's last descriptor (haproxy took such a stale EPOLLRDHUP for
 * the fresh client that had the number meanwhile, tests/tools/haproxy_eof.sh).
 */
#include "t_ep.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/epoll.h>

#define WAIT_MS		10000	/* an expected wake-up comes within this long */
#define DATA_MINE	0x4d494e4500000000ULL	/* "MINE": churn data, index below */
#define DATA_FIXED	0x77
#define DATA_PIPE	0x99

static void ep_ctl(int ep, int op, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event ev = { .events = events, .data.u64 = data };

	if (epoll_ctl(ep, op, fd, &ev))
		t_fail("epoll_ctl op %d fd %d events %#x: %s", op, fd, events, strerror(errno));
}

/* ---- one waiter, one change --------------------------------------------- */

struct waiter {
	int ep;
	pthread_barrier_t go;
	int n;			/* events of the first non-empty wait, or 0 */
	struct epoll_event ev[8];
	uint64_t waited_ms;
};

/* Wait once (long): the result is what the program would see. */
static void *wait_once(void *arg)
{
	struct waiter *w = arg;
	uint64_t t0;
	int n;

	pthread_barrier_wait(&w->go);
	t0 = t_now_ms();
	do
		n = epoll_wait(w->ep, w->ev, (int)ARRAY_LEN(w->ev), WAIT_MS);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		t_fail("epoll_wait: %s", strerror(errno));
	w->waited_ms = t_now_ms() - t0;
	w->n = n;
	return NULL;
}

static void waiter_start(struct waiter *w, pthread_t *th, int ep)
{
	memset(w, 0, sizeof(*w));
	w->ep = ep;
	pthread_barrier_init(&w->go, NULL, 2);
	if (pthread_create(th, NULL, wait_once, w))
		t_fail("pthread_create");
	pthread_barrier_wait(&w->go);
	/* Let it get into the kernel: if it has not yet, the check is only
	 * easier, never wrong. */
	t_msleep(100);
}

/* The waiter got exactly one event: data, events. */
static void waiter_expect(struct waiter *w, pthread_t th, uint64_t data, uint32_t events)
{
	pthread_join(th, NULL);
	pthread_barrier_destroy(&w->go);
	if (w->n != 1 || w->ev[0].data.u64 != data || w->ev[0].events != events)
		t_fail("waiter: expected one event %#x for %#llx, got %d after %llu ms "
		       "(first: %#x for %#llx)", events, (unsigned long long)data, w->n,
		       (unsigned long long)w->waited_ms, w->n > 0 ? w->ev[0].events : 0,
		       w->n > 0 ? (unsigned long long)w->ev[0].data.u64 : 0ULL);
}

/* A set with one pipe in it (never readable): no accelerated connection. */
static int set_without_conn(int pfd[2])
{
	int ep = ep_new();

	t_ok(pipe2(pfd, O_CLOEXEC));
	ep_ctl(ep, EPOLL_CTL_ADD, pfd[0], EPOLLIN, DATA_PIPE);
	return ep;
}

enum late_what { LATE_CLOSE, LATE_DATA, LATE_READY };

static void late_add(enum late_what what)
{
	struct waiter w;
	pthread_t th;
	int pfd[2], ep = set_without_conn(pfd), c, s;
	char b;

	t_pair_smc(&c, &s);
	if (what == LATE_READY)
		t_write_all(c, "r", 1);
	waiter_start(&w, &th, ep);
	ep_ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLRDHUP, 0x1234);
	if (what == LATE_CLOSE)
		close(c);
	else if (what == LATE_DATA)
		t_write_all(c, "d", 1);
	waiter_expect(&w, th, 0x1234, what == LATE_CLOSE ? EPOLLIN | EPOLLRDHUP : EPOLLIN);
	if (what != LATE_CLOSE) {
		t_read_all(s, &b, 1);
		close(c);
	}
	close(s);
	close(ep);
	close(pfd[0]);
	close(pfd[1]);
}

static void check_late_add(void)
{
	late_add(LATE_CLOSE);
}

static void check_late_add_data(void)
{
	late_add(LATE_DATA);
}

static void check_late_add_ready(void)
{
	late_add(LATE_READY);
}

static void check_mod_rearm(void)
{
	struct epoll_event ev[4];
	struct waiter w;
	pthread_t th;
	int ep = ep_new(), c, s, n;
	char b[2];

	t_pair_smc(&c, &s);
	ep_ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLONESHOT, 0x51);
	t_write_all(c, "a", 1);
	n = epoll_wait(ep, ev, 4, WAIT_MS);
	t_assert(n == 1 && ev[0].data.u64 == 0x51, "first event: %d", n);
	t_write_all(c, "b", 1);
	waiter_start(&w, &th, ep);
	ep_ctl(ep, EPOLL_CTL_MOD, s, EPOLLIN | EPOLLONESHOT, 0x52);
	waiter_expect(&w, th, 0x52, EPOLLIN);
	t_read_all(s, b, 2);
	close(c);
	close(s);
	close(ep);
}

/* ---- churn -------------------------------------------------------------- */

struct churn {
	int ep;
	atomic_bool stop;
	atomic_long events, foreign;
	_Atomic uint64_t first_foreign;
	_Atomic uint32_t first_foreign_ev;
};

static bool data_mine(uint64_t d)
{
	return (d & 0xffffffff00000000ULL) == DATA_MINE || d == DATA_FIXED || d == DATA_PIPE;
}

static void *churn_wait(void *arg)
{
	struct churn *ch = arg;
	struct epoll_event ev[64];
	int n, i;

	while (!atomic_load(&ch->stop)) {
		n = epoll_wait(ch->ep, ev, (int)ARRAY_LEN(ev), 20);
		if (n < 0 && errno != EINTR)
			t_fail("epoll_wait: %s", strerror(errno));
		for (i = 0; i < n; i++) {
			atomic_fetch_add(&ch->events, 1);
			if (data_mine(ev[i].data.u64))
				continue;
			if (atomic_fetch_add(&ch->foreign, 1) == 0) {
				atomic_store(&ch->first_foreign, ev[i].data.u64);
				atomic_store(&ch->first_foreign_ev, ev[i].events);
			}
		}
		/* Level-triggered and never read here: give the other thread
		 * the lock instead of reporting the same bytes again. */
		if (n > 0)
			sched_yield();
	}
	return NULL;
}

static void churn(bool busy)
{
	long i, conns = t_env_long("T_CHURN", 400);
	struct churn ch;
	pthread_t th;
	int fc = -1, fs = -1, lfd;
	uint16_t port;
	char b;

	memset(&ch, 0, sizeof(ch));
	ch.ep = ep_new();
	if (busy) {
		t_pair_smc(&fc, &fs);
		ep_ctl(ch.ep, EPOLL_CTL_ADD, fs, EPOLLIN, DATA_FIXED);
	}
	lfd = t_listen(&port);
	if (pthread_create(&th, NULL, churn_wait, &ch))
		t_fail("pthread_create");
	for (i = 0; i < conns; i++) {
		int c, s;

		t_pair_on(lfd, port, &c, &s);
		ep_ctl(ch.ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLRDHUP, DATA_MINE | (uint64_t)i);
		t_write_all(c, "q", 1);
		t_read_all(s, &b, 1);
		t_write_all(s, "a", 1);
		t_read_all(c, &b, 1);
		t_smc_pairs++;
		if (busy && i % 16 == 0)
			t_write_all(fc, "f", 1);	/* news on the fixed one too */
		close(c);
		if (i & 1)
			ep_ctl(ch.ep, EPOLL_CTL_DEL, s, 0, 0);
		close(s);
	}
	atomic_store(&ch.stop, true);
	pthread_join(th, NULL);
	t_info("churn: %ld events, %ld foreign", atomic_load(&ch.events), atomic_load(&ch.foreign));
	if (atomic_load(&ch.foreign))
		t_fail("%ld of %ld events carried data the program never registered "
		       "(first: %#llx events %#x)", atomic_load(&ch.foreign), atomic_load(&ch.events),
		       (unsigned long long)atomic_load(&ch.first_foreign),
		       atomic_load(&ch.first_foreign_ev));
	if (busy) {
		close(fc);
		close(fs);
	}
	close(lfd);
	close(ch.ep);
}

static void check_churn(void)
{
	churn(false);
}

static void check_churn_busy(void)
{
	churn(true);
}

/* ---- a peer's death while another connection keeps the set busy --------- */

static void check_busy_fin(void)
{
	struct epoll_event ev[8];
	int ep = ep_new(), ca, sa, cb, sb, n, i, st;
	uint32_t got_a = 0, got_b = 0;
	pid_t pid;
	char b;

	t_pair_smc(&ca, &sa);
	t_pair_smc(&cb, &sb);
	t_write_all(cb, "b", 1);
	t_read_all(sb, &b, 1);
	ep_ctl(ep, EPOLL_CTL_ADD, sa, EPOLLIN | EPOLLRDHUP, 0xa);
	ep_ctl(ep, EPOLL_CTL_ADD, sb, EPOLLIN | EPOLLRDHUP, 0xb);
	/* A wait with nothing ready: settled connections only (usmc
	 * decides then whether the kernel must order this set). */
	n = epoll_wait(ep, ev, 8, 20);
	t_assert(n == 0, "idle wait: %d events", n);
	t_write_all(ca, "a", 1);	/* sa stays readable: never read */
	pid = fork();
	if (pid < 0)
		t_fail("fork: %s", strerror(errno));
	if (pid == 0) {
		for (;;)
			pause();	/* holds ca and cb until killed */
	}
	close(ca);
	close(cb);
	/* Busy: sa is reported by every call, sb by none. */
	for (i = 0; i < 100; i++) {
		n = epoll_wait(ep, ev, 8, 0);
		t_assert(n == 1 && ev[0].data.u64 == 0xa, "busy call %d: %d events", i, n);
	}
	t_ok(kill(pid, SIGKILL));
	while (waitpid(pid, &st, 0) < 0)
		t_assert(errno == EINTR, "waitpid: %s", strerror(errno));
	n = epoll_wait(ep, ev, 8, 0);
	for (i = 0; i < n; i++) {
		if (ev[i].data.u64 == 0xa)
			got_a = ev[i].events;
		else if (ev[i].data.u64 == 0xb)
			got_b = ev[i].events;
	}
	t_assert(n == 2 && got_a == (EPOLLIN | EPOLLRDHUP) && got_b == (EPOLLIN | EPOLLRDHUP),
		 "after the peer died: %d events, a %#x b %#x", n, got_a, got_b);
	close(sa);
	close(sb);
	close(ep);
}

/* ---- a close while another thread is inside a call ------------------------ */

struct inflight {
	int fd;
	atomic_bool entering;
	ssize_t rc;
	int err;
};

static void *send_blocked(void *arg)
{
	struct inflight *in = arg;

	atomic_store(&in->entering, true);
	in->rc = send(in->fd, "x", 1, MSG_NOSIGNAL);
	in->err = errno;
	return NULL;
}

static void check_close_inflight(void)
{
	struct epoll_event ev[8];
	struct inflight in = { 0 };
	char buf[65536];
	pthread_t th;
	int ep = ep_new(), c, s, n;

	t_pair_smc(&c, &s);
	ep_ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLRDHUP, 0xc105ed);
	/* Fill s's way to c (c reads nothing): the next send blocks. */
	t_set_nonblock(s, true);
	while (send(s, buf, sizeof(buf), MSG_NOSIGNAL) > 0)
		;
	t_assert(errno == EAGAIN, "filling: %s", strerror(errno));
	t_set_nonblock(s, false);
	in.fd = s;
	if (pthread_create(&th, NULL, send_blocked, &in))
		t_fail("pthread_create");
	while (!atomic_load(&in.entering))
		sched_yield();
	usleep(100 * 1000);	/* inside send(), asleep (sequencing only) */
	close(s);
	t_ok(shutdown(c, SHUT_WR));	/* s's record would turn IN|RDHUP */
	n = epoll_wait(ep, ev, 8, 200);
	t_assert(n >= 0, "epoll_wait: %s", strerror(errno));
	if (t_accel())
		t_assert(n == 0, "%d event(s) after close: data %#llx events %#x", n,
			 (unsigned long long)ev[0].data.u64, ev[0].events);
	else
		t_info("close_inflight: the kernel reported %d event(s)", n);
	close(c);	/* the blocked send fails: the peer is gone */
	pthread_join(th, NULL);
	t_assert(in.rc < 0 && (in.err == EPIPE || in.err == ECONNRESET),
		 "blocked send: %zd %s", in.rc, strerror(in.err));
	close(ep);
}

static const struct t_check checks[] = {
	{ "late_add", check_late_add },
	{ "late_add_data", check_late_add_data },
	{ "late_add_ready", check_late_add_ready },
	{ "mod_rearm", check_mod_rearm },
	{ "churn", check_churn },
	{ "churn_busy", check_churn_busy },
	{ "busy_fin", check_busy_fin },
	{ "close_inflight", check_close_inflight },
};

int main(int argc, char **argv)
{
	t_name = "t_epoll_mt";
	signal(SIGPIPE, SIG_IGN);
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
