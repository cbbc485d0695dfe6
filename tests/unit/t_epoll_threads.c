// SPDX-License-Identifier: MIT
/*
 * t_epoll_threads.c - epoll from many threads at once, each with its own
 * instance, while descriptors (sockets and epoll instances) are closed,
 * dup'ed and their numbers reused, and while the process forks: the
 * locking of the epoll layer (ep_lock, taken on every registration and by
 * close() of an epoll descriptor only; ep_known looks without it) and of
 * the listener index cache (clc_ln.c: the liveness look outside
 * ln_cache_lock) under contention.
 *
 *   churn        6 threads, each with its own epoll instance, connect one
 *                connection after another to an echo server (a forked
 *                process), register it (level-triggered, edge-triggered,
 *                one-shot, or before a non-blocking connect), send a few
 *                bytes, wait for the echo in epoll_wait, check every byte
 *                and close it (plain, after EPOLL_CTL_DEL, after a
 *                delete and re-add, or after shutdown and the peer's FIN);
 *                now and then a thread closes its instance and makes a
 *                new one, or dup()s it and closes the original, or dup()s
 *                it and closes the copy, so that epoll descriptor numbers
 *                pass between threads' sockets and instances.  Every event
 *                carries the data of the thread's one registration, an
 *                instance is empty whenever no connection is registered,
 *                no call fails, nothing waits past WAIT_MS.
 *   cross_close  a socket registered in two threads' instances (A, B) is
 *                closed by the main thread while both wait in epoll_wait;
 *                its number is then reused (by a new socket registered in
 *                both, or by a new epoll instance registered in both,
 *                holding a new connection): no event for the closed
 *                registration's data, and the new registrations report
 *                exactly their own news.
 *   fork_during  4 threads churn as above while the main thread forks a
 *                child now and then; the child (one thread, whatever
 *                locks the others held at the fork) makes its own epoll
 *                instance, dups and closes one, uses a connection through
 *                epoll_wait and exits.  A child that does not finish
 *                within its alarm (a lock held by a thread that does not
 *                exist in it) fails the check.
 *
 * Every check holds for plain TCP (USMC_DISABLE=1) as well; accelerated,
 * t_run_checks verifies that every connection had both ends on shared
 * memory and none fell back.  The echo server counts the connections it
 * accepted, which must be the ones made.
 *
 * Sizes: T_ITERS (connections per churn thread), T_ROUNDS (cross_close),
 * T_FORKS (fork_during).
 */
#include "t_echo.h"
#include "t_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/epoll.h>

#if defined(__SANITIZE_THREAD__)
#define DEF_ITERS	40
#define DEF_ROUNDS	24
#define DEF_FORKS	4
#define CHECK_ALARM	240
#elif defined(__SANITIZE_ADDRESS__)
#define DEF_ITERS	80
#define DEF_ROUNDS	40
#define DEF_FORKS	6
#define CHECK_ALARM	120
#else
#define DEF_ITERS	150
#define DEF_ROUNDS	60
#define DEF_FORKS	8
#define CHECK_ALARM	50
#endif

#define WAIT_MS		10000	/* an expected event comes within this long */
#define CHILD_ALARM	30	/* a fork child that takes longer hangs */
#define NCHURN		6
#define NCHURN_FORK	4
#define DATA_CHURN	0x4348000000000000ULL	/* "CH": thread << 32 | iteration */

static const char *cur_check = "?";
/* fork_during: 2k + 1 while child k lives, 2k + 2 after (messages). */
static _Atomic int fork_phase;

static void on_alarm(int sig)
{
	char msg[160];
	int n = snprintf(msg, sizeof(msg), "%s[%d]: FAIL check %s: deadline passed (hang?)\n",
			 t_name, (int)getpid(), cur_check);

	(void)sig;
	if (write(2, msg, (size_t)n) < 0)
		_exit(T_EXIT_FAIL);
	_exit(T_EXIT_FAIL);
}

static void deadline(const char *check, unsigned int secs)
{
	cur_check = check;
	signal(SIGALRM, on_alarm);
	alarm(secs);
}

/* ---- one connection through epoll ----------------------------------------- */

struct worker {
	pthread_t th;
	int id;
	uint16_t port;
	uint64_t seed;
	long iters;		/* connections; 0: until *stop */
	atomic_bool *stop;
	_Atomic int ep;		/* the current instance (read by fork children) */
	long conns, recreated, dups, dupclose, nbconn, shut, readd, events, stale;
	int mode;		/* the current connection's (messages) */
};

/*
 * An event for one of this thread's earlier connections, closed here but
 * open in a fork child (fork_during): the kernel keeps a file's entries
 * while any process holds the file, so plain TCP reports them (LT: the
 * FIN's EPOLLHUP, again and again); usmc drops a record with the last
 * descriptor of this process (design.md section 7), so it must not.
 */
static bool stale_tag(struct worker *w, uint64_t d, uint64_t tag)
{
	if (!w->stop || (d & ~0xffffffffULL) != (tag & ~0xffffffffULL) ||
	    (d & 0xffffffffULL) >= (tag & 0xffffffffULL))
		return false;
	if (t_accel() && !t_unshared())
		return false;	/* never from usmc's own records */
	w->stale++;
	return true;
}

/*
 * Wait for an event for tag (the one registration in ep); returns its
 * events.  Every other event fails, but stale ones (above).
 */
static uint32_t wait_tag(struct worker *w, int ep, int fd, uint64_t tag, const char *what)
{
	struct epoll_event ev[8];
	uint64_t t0 = t_now_ms();
	int n, i, mine, ph0 = atomic_load(&fork_phase);
	uint32_t got;

	for (;;) {
		n = epoll_wait(ep, ev, (int)ARRAY_LEN(ev), WAIT_MS);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			t_fail("thread %d: epoll_wait(%d): %s", w->id, ep, strerror(errno));
		if (n == 0 || t_now_ms() - t0 > WAIT_MS) {
			/* What the socket itself says (poll), and the instance again. */
			char b[8];
			ssize_t pk = recv(fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
			int pe = errno;
			short pr = t_wait_fd(fd, POLLIN | POLLOUT | POLLRDHUP, 0);
			int n2 = epoll_wait(ep, ev, (int)ARRAY_LEN(ev), 0);

			t_fail("thread %d: no event for %s within %d ms (ep %d, fd %d, data %#llx); "
			       "mode %d; now: peek %zd (%s), poll %#x, epoll_wait again %d; fork "
			       "phase %d -> %d", w->id, what, WAIT_MS, ep, fd,
			       (unsigned long long)tag, w->mode, pk, pk < 0 ? strerror(pe) : "", pr,
			       n2, ph0, atomic_load(&fork_phase));
		}
		for (i = 0, mine = 0, got = 0; i < n; i++) {
			if (ev[i].data.u64 == tag) {
				mine++;
				got = ev[i].events;
			} else if (!stale_tag(w, ev[i].data.u64, tag)) {
				t_fail("thread %d, %s: event %#x with data %#llx; the only "
				       "registration in ep %d has %#llx", w->id, what, ev[i].events,
				       (unsigned long long)ev[i].data.u64, ep,
				       (unsigned long long)tag);
			}
		}
		if (mine > 1)
			t_fail("thread %d, %s: one registration reported %d times in one call",
			       w->id, what, mine);
		if (!mine)
			continue;
		w->events++;
		return got;
	}
}

/* A connected socket: blocking connect, or (nb) registered first, then a
 * non-blocking connect completed through epoll.  Returns the fd, with
 * the registration (events, tag) in place. */
static int conn_open(struct worker *w, int ep, bool nb, uint32_t events, uint64_t tag)
{
	struct sockaddr_in a = t_addr(w->port);
	socklen_t l = sizeof(int);
	uint32_t got;
	int fd, err = 0;

	if (!nb) {
		fd = t_connect(w->port);
		t_set_nonblock(fd, true);
		ep_ctl(ep, EPOLL_CTL_ADD, fd, events, tag);
		return fd;
	}
	fd = t_ok(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	ep_ctl(ep, EPOLL_CTL_ADD, fd, EPOLLOUT | EPOLLIN | EPOLLRDHUP, tag);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) && errno != EINPROGRESS)
		t_fail("thread %d: non-blocking connect: %s", w->id, strerror(errno));
	got = wait_tag(w, ep, fd, tag, "connect completion");
	if (got != EPOLLOUT)
		t_fail("thread %d: connect completion reported as %#x (expected EPOLLOUT)", w->id,
		       got);
	t_ok(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l));
	if (err)
		t_fail("thread %d: non-blocking connect: %s", w->id, strerror(err));
	ep_ctl(ep, EPOLL_CTL_MOD, fd, events, tag);
	w->nbconn++;
	return fd;
}

/* Read what is there (to EAGAIN) into buf at *got (room: cap); false on EOF. */
static bool drain(struct worker *w, int fd, char *buf, size_t *got, size_t cap)
{
	for (;;) {
		ssize_t n = read(fd, buf + *got, cap - *got);

		if (n > 0) {
			*got += (size_t)n;
			if (*got == cap)
				t_fail("thread %d: more bytes than were sent", w->id);
			continue;
		}
		if (n == 0)
			return false;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN)
			return true;
		t_fail("thread %d: read(%d): %s", w->id, fd, strerror(errno));
	}
}

static void one_conn(struct worker *w, int ep, long i)
{
	static const uint32_t modes[] = {
		EPOLLIN,				/* level-triggered */
		EPOLLIN | EPOLLET | EPOLLRDHUP,		/* edge-triggered */
		EPOLLIN | EPOLLONESHOT | EPOLLRDHUP,	/* one-shot */
		EPOLLIN | EPOLLRDHUP,			/* level, after a non-blocking connect */
	};
	uint64_t tag = DATA_CHURN | (uint64_t)w->id << 32 | (uint64_t)i;
	uint32_t pat = (uint32_t)w->id << 24 | (uint32_t)(i & 0xffffff);
	int m = (int)(t_rand(&w->seed) % ARRAY_LEN(modes)), how, fd;
	uint32_t events = modes[m], got;
	size_t len = 1 + (size_t)(t_rand(&w->seed) % 64), have = 0;
	char out[64], in[256];
	long bad;

	w->mode = m;
	fd = conn_open(w, ep, m == 3, events, tag);
	w->conns++;
	t_pat_fill(pat, 0, out, len);
	t_write_all(fd, out, len);
	while (have < len) {
		size_t before = have;

		got = wait_tag(w, ep, fd, tag, "the echo");
		if (got != EPOLLIN)
			t_fail("thread %d: echo reported as %#x (expected EPOLLIN; mode %d)", w->id,
			       got, m);
		if (!drain(w, fd, in, &have, sizeof(in)))
			t_fail("thread %d: EOF after %zu of %zu echoed bytes", w->id, have, len);
		/* Level-triggered: reported, so readable (as TCP reports). */
		if (have == before && !(events & (EPOLLET | EPOLLONESHOT)))
			t_fail("thread %d: EPOLLIN reported, nothing to read (mode %d)", w->id, m);
		if (events & EPOLLONESHOT)
			ep_ctl(ep, EPOLL_CTL_MOD, fd, events, tag);
	}
	if (have != len)
		t_fail("thread %d: %zu bytes echoed, %zu sent", w->id, have, len);
	bad = t_pat_check(pat, 0, in, len);
	if (bad >= 0)
		t_fail("thread %d connection %ld: wrong byte at %ld of %zu", w->id, i, bad, len);

	how = (int)(t_rand(&w->seed) % 4);
	if (how == 1) {
		ep_ctl(ep, EPOLL_CTL_DEL, fd, 0, 0);
	} else if (how == 2) {
		/* Deleted and added again (usmc parks and revives), then
		 * closed registered. */
		ep_ctl(ep, EPOLL_CTL_DEL, fd, 0, 0);
		ep_ctl(ep, EPOLL_CTL_ADD, fd, events, tag);
		w->readd++;
	} else if (how == 3) {
		/* Our FIN; the server closes; its FIN comes as an event. */
		t_ok(shutdown(fd, SHUT_WR));
		for (;;) {
			got = wait_tag(w, ep, fd, tag, "the peer's FIN");
			if (!(got & EPOLLIN))
				t_fail("thread %d: FIN reported as %#x", w->id, got);
			if (!drain(w, fd, in, &have, sizeof(in)))
				break;
			if (!(events & (EPOLLET | EPOLLONESHOT)))
				t_fail("thread %d: %#x reported before the FIN, nothing to read",
				       w->id, got);
			if (events & EPOLLONESHOT)
				ep_ctl(ep, EPOLL_CTL_MOD, fd, events, tag);
		}
		if (have != len)
			t_fail("thread %d: %zu bytes before the FIN, %zu expected", w->id, have,
			       len);
		w->shut++;
	}
	close(fd);
}

/* Nothing registered: the instance reports nothing. */
static void expect_empty(struct worker *w, int ep, long next, const char *after)
{
	uint64_t tag = DATA_CHURN | (uint64_t)w->id << 32 | (uint64_t)next;
	struct epoll_event ev[4];
	int n, i;

	do
		n = epoll_wait(ep, ev, (int)ARRAY_LEN(ev), 0);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		t_fail("thread %d: epoll_wait(%d) %s: %s", w->id, ep, after, strerror(errno));
	for (i = 0; i < n; i++)
		if (stale_tag(w, ev[i].data.u64, tag))
			ev[i--] = ev[--n];
	if (n > 0)
		t_fail("thread %d: instance %d without registrations (%s) reported %d event(s), "
		       "first %#x data %#llx", w->id, ep, after, n, ev[0].events,
		       (unsigned long long)ev[0].data.u64);
}

static void *churn_thread(void *arg)
{
	struct worker *w = arg;
	int ep = t_ok(epoll_create1(EPOLL_CLOEXEC)), nep;
	long i;

	atomic_store(&w->ep, ep);
	for (i = 0; w->iters ? i < w->iters : !atomic_load(w->stop); i++) {
		one_conn(w, ep, i);
		expect_empty(w, ep, i + 1, "after a close");
		switch (t_rand(&w->seed) % 8) {
		case 0:		/* a new instance; the old number goes to anyone */
			close(ep);
			ep = t_ok(epoll_create1(i & 1 ? EPOLL_CLOEXEC : 0));
			w->recreated++;
			break;
		case 1:		/* the instance under a new number */
			nep = t_ok(dup(ep));
			close(ep);
			ep = nep;
			w->dups++;
			break;
		case 2:		/* a copy, closed again */
			nep = t_ok(fcntl(ep, F_DUPFD_CLOEXEC, 0));
			close(nep);
			w->dupclose++;
			break;
		default:
			break;
		}
		atomic_store(&w->ep, ep);
		expect_empty(w, ep, i + 1, "after recreate/dup");
	}
	close(ep);
	return NULL;
}

static void workers_start(struct worker *w, int n, uint16_t port, long iters, atomic_bool *stop)
{
	int i;

	for (i = 0; i < n; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].id = i + 1;
		w[i].port = port;
		w[i].seed = 0x7e57ULL * (uint64_t)(i + 1) + (uint64_t)t_env_long("T_SEED", 1);
		w[i].iters = iters;
		w[i].stop = stop;
		atomic_store(&w[i].ep, -1);
		if (pthread_create(&w[i].th, NULL, churn_thread, &w[i]))
			t_fail("pthread_create");
	}
}

static long workers_join(struct worker *w, int n)
{
	long conns = 0;
	int i;

	for (i = 0; i < n; i++) {
		pthread_join(w[i].th, NULL);
		t_info("thread %d: %ld connections (%ld non-blocking connects, %ld shutdowns, "
		       "%ld re-adds), %ld events (%ld stale), %ld new instances, %ld dups, "
		       "%ld dup+close", w[i].id, w[i].conns, w[i].nbconn, w[i].shut, w[i].readd,
		       w[i].events, w[i].stale, w[i].recreated, w[i].dups, w[i].dupclose);
		conns += w[i].conns;
	}
	return conns;
}

/* ---- churn ------------------------------------------------------------------ */

static void check_churn(void)
{
	struct worker w[NCHURN];
	struct echo e;
	long conns;

	deadline("churn", CHECK_ALARM);
	echo_start(&e);
	workers_start(w, NCHURN, e.port, t_env_long("T_ITERS", DEF_ITERS), NULL);
	conns = workers_join(w, NCHURN);
	echo_stop(&e, conns);
	t_smc_pairs += (int)conns;
}

/* ---- cross_close ------------------------------------------------------------ */

/* data: side (A/B) << 32 | round; bit 62: a registered epoll instance. */
#define DATA_X		0x5800000000000000ULL	/* "X" */
#define DATA_X_EP	(1ULL << 48)
#define DATA_IN_E	0x4545ULL		/* S's registration inside E */

static uint64_t xdata(int side, int round, bool isep)
{
	return DATA_X | (isep ? DATA_X_EP : 0) | (uint64_t)side << 32 | (uint64_t)round;
}

struct xwaiter {
	pthread_t th;
	int side;		/* 'A' or 'B' */
	int ep;
	atomic_bool stop;
	_Atomic long entered;	/* epoll_wait calls begun */
	_Atomic int saw;	/* latest round whose registration reported */
	_Atomic long saw_at;	/* ... in the epoll_wait call numbered so */
	_Atomic int *cur;	/* the round registered now (main's) */
	_Atomic int *closed;	/* the latest round closed, or -1 (main's) */
	_Atomic long bad;
	_Atomic uint64_t bad_data;
	_Atomic uint32_t bad_ev;
	_Atomic int bad_closed;
	long events;
};

static void x_bad(struct xwaiter *x, uint64_t d, uint32_t ev, int closed)
{
	if (atomic_fetch_add(&x->bad, 1) == 0) {
		atomic_store(&x->bad_data, d);
		atomic_store(&x->bad_ev, ev);
		atomic_store(&x->bad_closed, closed);
	}
}

/* The echo: EPOLLIN.  A round that shuts down before its close (round % 3
 * == 1) may see the peer's FIN before the close: EPOLLRDHUP and EPOLLHUP
 * (both ways shut) too. */
static bool x_events_ok(int round, uint32_t ev)
{
	if (round % 3 == 1)
		return (ev & EPOLLIN) && !(ev & ~(EPOLLIN | EPOLLRDHUP | EPOLLHUP));
	return ev == EPOLLIN;
}

static void *x_wait(void *arg)
{
	struct xwaiter *x = arg;
	struct epoll_event ev[16];
	int n, i;

	while (!atomic_load(&x->stop)) {
		/* Any event for a round closed before this call began is stale. */
		int closed = atomic_load(x->closed);

		atomic_fetch_add(&x->entered, 1);
		n = epoll_wait(x->ep, ev, (int)ARRAY_LEN(ev), 50);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			t_fail("waiter %c: epoll_wait: %s", x->side, strerror(errno));
		for (i = 0; i < n; i++) {
			uint64_t d = ev[i].data.u64;
			int round = (int)(d & 0xffffffffULL);

			x->events++;
			if ((d & ~(DATA_X_EP | 0xffffffffffULL)) != DATA_X ||
			    (int)((d >> 32) & 0xff) != x->side || round <= closed ||
			    round > atomic_load(x->cur) || !x_events_ok(round, ev[i].events)) {
				x_bad(x, d, ev[i].events, closed);
				continue;
			}
			atomic_store(&x->saw_at, atomic_load(&x->entered));
			atomic_store(&x->saw, round);
		}
	}
	return NULL;
}

static void x_wait_saw(struct xwaiter *x, int round)
{
	uint64_t t0 = t_now_ms();

	while (atomic_load(&x->saw) < round) {
		if (t_now_ms() - t0 > WAIT_MS)
			t_fail("waiter %c: no event for round %d's registration within %d ms "
			       "(%ld stale events)", x->side, round, WAIT_MS, atomic_load(&x->bad));
		t_msleep(1);
	}
}

/* Both waiters have begun a new epoll_wait since the one that reported
 * (after_saw), or since now. */
static void x_wait_entered(struct xwaiter *x, bool after_saw)
{
	long a0 = after_saw ? atomic_load(&x[0].saw_at) : atomic_load(&x[0].entered);
	long b0 = after_saw ? atomic_load(&x[1].saw_at) : atomic_load(&x[1].entered);
	uint64_t t0 = t_now_ms();

	while (atomic_load(&x[0].entered) <= a0 || atomic_load(&x[1].entered) <= b0) {
		if (t_now_ms() - t0 > WAIT_MS)
			t_fail("waiters stopped calling epoll_wait");
		sched_yield();
	}
}

/* fd onto number want if that is free (so that the number is reused). */
static int x_onto(int fd, int want, long *reused)
{
	if (want < 0 || fd == want) {
		*reused += fd == want;
		return fd;
	}
	if (fcntl(want, F_GETFD) < 0 && errno == EBADF) {
		t_ok(dup2(fd, want));
		close(fd);
		(*reused)++;
		return want;
	}
	return fd;
}

static void x_echo(int fd, uint32_t pat)
{
	char out[16], in[16];

	t_pat_fill(pat, 0, out, sizeof(out));
	t_write_all(fd, out, sizeof(out));
	t_read_all(fd, in, sizeof(in));
	if (memcmp(in, out, sizeof(in)))
		t_fail("round %u: wrong echo", pat);
}

static void check_cross_close(void)
{
	int rounds = (int)t_env_long("T_ROUNDS", DEF_ROUNDS), r, i, old = -1;
	_Atomic int cur, closed;
	struct xwaiter x[2];
	long conns = 0, reused = 0;
	struct echo e;

	deadline("cross_close", CHECK_ALARM);
	echo_start(&e);
	atomic_store(&cur, -1);
	atomic_store(&closed, -1);
	for (i = 0; i < 2; i++) {
		memset(&x[i], 0, sizeof(x[i]));
		x[i].side = 'A' + i;
		x[i].ep = t_ok(epoll_create1(EPOLL_CLOEXEC));
		x[i].cur = &cur;
		x[i].closed = &closed;
		atomic_store(&x[i].saw, -1);
		if (pthread_create(&x[i].th, NULL, x_wait, &x[i]))
			t_fail("pthread_create");
	}
	for (r = 0; r < rounds; r++) {
		bool isep = r % 2;	/* the reused number: a socket, or an instance */
		int s, ep_e = -1, shut = r % 3;

		atomic_store(&cur, r);
		if (!isep) {
			s = x_onto(t_connect(e.port), old, &reused);
			conns++;
			if (r == 0)
				x_echo(s, 0xf000);
			for (i = 0; i < 2; i++)
				ep_ctl(x[i].ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLRDHUP | EPOLLET,
				       xdata(x[i].side, r, false));
			if (r == 0)
				t_assert_smc(s);
			t_write_all(s, "0123456789abcdef", 16);
			old = s;
		} else {
			/* A new instance E on the old number, registered in both,
			 * with a new connection S in it. */
			struct epoll_event ev[4];
			int n;

			ep_e = x_onto(t_ok(epoll_create1(EPOLL_CLOEXEC)), old, &reused);
			s = t_connect(e.port);
			conns++;
			for (i = 0; i < 2; i++)
				ep_ctl(x[i].ep, EPOLL_CTL_ADD, ep_e, EPOLLIN | EPOLLET,
				       xdata(x[i].side, r, true));
			ep_ctl(ep_e, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLRDHUP, DATA_IN_E);
			t_write_all(s, "0123456789abcdef", 16);
			n = epoll_wait(ep_e, ev, (int)ARRAY_LEN(ev), WAIT_MS);
			if (n != 1 || ev[0].data.u64 != DATA_IN_E || ev[0].events != EPOLLIN)
				t_fail("round %d: inner instance: %d events, first %#x data %#llx",
				       r, n, n > 0 ? ev[0].events : 0,
				       n > 0 ? (unsigned long long)ev[0].data.u64 : 0ULL);
			old = ep_e;
		}
		/* Both waiters saw the new registration's news. */
		x_wait_saw(&x[0], r);
		x_wait_saw(&x[1], r);
		t_recv_exact(s, "0123456789abcdef", 16);
		/* Close while both wait: the registrations go with it.  Nothing
		 * more can come for round r from here on (the echo is read, the
		 * peer sees EOF only after the close), but after a shutdown
		 * (shut == 1), whose FIN the peer answers: then only from the
		 * close on. */
		x_wait_entered(x, true);
		t_msleep(1);
		if (shut == 1) {
			t_ok(shutdown(s, SHUT_WR));
		} else {
			atomic_store(&closed, r);
		}
		if (isep) {
			close(ep_e);
			close(s);
		} else {
			close(s);
		}
		atomic_store(&closed, r);
		/* The number is not registered any more (unless reused). */
		if (fcntl(old, F_GETFD) < 0) {
			struct epoll_event ev = { 0 };

			if (epoll_ctl(x[0].ep, EPOLL_CTL_DEL, old, &ev) == 0 || errno != EBADF)
				t_fail("round %d: EPOLL_CTL_DEL of closed %d: %s", r, old,
				       strerror(errno));
		}
	}
	/* Two more calls each after the last close, then the verdict. */
	x_wait_entered(x, false);
	x_wait_entered(x, false);
	for (i = 0; i < 2; i++) {
		atomic_store(&x[i].stop, true);
		pthread_join(x[i].th, NULL);
	}
	for (i = 0; i < 2; i++) {
		t_info("waiter %c: %ld events, %ld waits", x[i].side, x[i].events,
		       atomic_load(&x[i].entered));
		if (atomic_load(&x[i].bad))
			t_fail("waiter %c: %ld event(s) not of the live registration; first: "
			       "data %#llx events %#x (rounds closed then: up to %d)", x[i].side,
			       atomic_load(&x[i].bad), (unsigned long long)atomic_load(&x[i].bad_data),
			       atomic_load(&x[i].bad_ev), atomic_load(&x[i].bad_closed));
		close(x[i].ep);
	}
	t_info("cross_close: %d rounds, number reused %ld times", rounds, reused);
	echo_stop(&e, conns);
	t_smc_pairs += (int)conns;
}

/* ---- fork_during ------------------------------------------------------------ */

/* In the child: one thread, the others' locks as they were at the fork. */
static __attribute__((noreturn)) void fork_child(struct worker *w, int nw, uint16_t port, int k)
{
	struct worker me;
	int ep, ep2, i, n = 0;

	deadline("fork_during (child)", CHILD_ALARM);
	memset(&me, 0, sizeof(me));
	me.id = 100 + k;
	me.port = port;
	me.seed = 0xf0f0ULL + (uint64_t)k;
	ep = t_ok(epoll_create1(EPOLL_CLOEXEC));
	ep2 = t_ok(dup(ep));
	close(ep);
	ep = ep2;
	for (i = 0; i < 2; i++) {
		one_conn(&me, ep, i);
		expect_empty(&me, ep, i + 1, "after a close (child)");
		n++;
	}
	/* Close the instances the threads had (copies: theirs live on). */
	for (i = 0; i < nw; i++) {
		int wep = atomic_load(&w[i].ep);

		if (wep > 2 && wep != ep)
			close(wep);
	}
	close(ep);
	(void)n;
	_exit(0);
}

static void check_fork_during(void)
{
	int forks = (int)t_env_long("T_FORKS", DEF_FORKS), k;
	int nw = (int)MIN(t_env_long("T_FORK_THREADS", NCHURN_FORK), NCHURN_FORK);
	struct worker w[NCHURN_FORK];
	atomic_bool stop;
	struct echo e;
	uint64_t seed = 0xf02cULL;
	long conns;

	deadline("fork_during", CHECK_ALARM);
	echo_start(&e);
	atomic_store(&stop, false);
	workers_start(w, nw, e.port, 0, &stop);
	for (k = 0; k < forks; k++) {
		pid_t pid;

		t_msleep(5 + (int)(t_rand(&seed) % 40));	/* sequencing only */
		atomic_store(&fork_phase, 2 * k + 1);
		pid = t_fork_helper();
		if (pid == 0)
			fork_child(w, nw, e.port, k);
		t_wait_child(pid, "fork child");
		atomic_store(&fork_phase, 2 * k + 2);
	}
	atomic_store(&stop, true);
	conns = workers_join(w, nw);
	t_info("fork_during: %d forks, %ld connections in the threads", forks, conns);
	conns += 2L * forks;
	echo_stop(&e, conns);
	t_smc_pairs += (int)conns;
}

static const struct t_check checks[] = {
	{ "churn", check_churn },
	{ "cross_close", check_cross_close },
	{ "fork_during", check_fork_during },
};

int main(int argc, char **argv)
{
	t_name = "t_epoll_threads";
	signal(SIGPIPE, SIG_IGN);
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
