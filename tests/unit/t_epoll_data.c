// SPDX-License-Identifier: MIT
/*
 * t_epoll_data.c - the program's epoll_data is its own, whatever its value.
 *
 * usmc's kernel entries carry tags (addresses in an arena of its records)
 * as their data; the program's own entries carry whatever the program
 * chose, and nothing stops that from looking like a tag: CPython sets only
 * data.fd, so the upper half is stack garbage, often the upper half of a
 * mapping's address.  Each check registers pipes whose data are exactly
 * the values the kernel shows for usmc's own entries (read from
 * /proc/self/fdinfo: live tags, the same with the generation cleared or
 * another kind, the upper half of one with an fd below) beside a
 * connection on shared memory, and every event must come back with the
 * program's data (the same program passes without usmc: then the values
 * are only the program's own):
 *
 *   exact      pipes with tag-like data in an instance that holds the
 *              connection: each reported with its data, the connection too;
 *              MOD to other tag-like and plain data, DEL, ADD again
 *   first      tag-like pipes registered before the instance knew any
 *              connection (CPython's listener before its first accept);
 *              then the connection is added: nothing lost, nothing foreign
 *   inplace    an instance holding only tag-like pipes (no connection)
 *   sleeper    a thread asleep in epoll_wait on an instance with a tag-like
 *              pipe while another adds a connection and writes the pipe
 *   forked     the instance inherited by a child: the same data there
 */
#include "t_ep.h"

#include <pthread.h>
#include <sys/epoll.h>

#define EV_MS	5000
#define NOEV_MS	50
#define NVAL	12

static void ep_ctl(int ep, int op, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event ev = { .events = events, .data.u64 = data };

	if (epoll_ctl(ep, op, fd, &ev))
		t_fail("epoll_ctl op %d fd %d data %#llx: %s", op, fd, (unsigned long long)data,
		       strerror(errno));
}

/* Every data value /proc shows for ep's kernel entries. */
static int kernel_data(int ep, uint64_t *out, int max)
{
	char path[64], line[512];
	FILE *f;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", ep);
	f = fopen(path, "re");
	if (!f)
		t_fail("%s: %s", path, strerror(errno));
	while (n < max && fgets(line, sizeof(line), f)) {
		char *p = strstr(line, "data:");

		if (p)
			out[n++] = strtoull(p + 5, NULL, 16);
	}
	fclose(f);
	return n;
}

/*
 * Values that look like usmc's tags: those of a connection registered in a
 * helper instance (none without usmc), varied as CPython's garbage and a
 * freed record's would be, and a few plain ones.  The helper's connection
 * stays registered in *helper until the caller closes it.
 */
static int tag_like(int conn, int *helper, uint64_t *v)
{
	uint64_t k[8];
	int n = 0, nk, i;

	*helper = ep_new();
	ep_ctl(*helper, EPOLL_CTL_ADD, conn, EPOLLIN, 0x1111);
	nk = kernel_data(*helper, k, 8);
	for (i = 0; i < nk && n + 4 <= NVAL - 2; i++) {
		if (k[i] == 0x1111)
			continue;	/* the program's own entry (no usmc) */
		v[n++] = k[i];
		v[n++] = k[i] & ((1ULL << 48) - 1);
		v[n++] = k[i] ^ 1;
		v[n++] = (k[i] & ~0xffffffffULL) | 7;
	}
	v[n++] = 7;
	v[n++] = 0;
	return n;
}

struct pipes {
	int n;
	int rd[NVAL], wr[NVAL];
	uint64_t data[NVAL];
};

static void pipes_open(struct pipes *p, const uint64_t *v, int n)
{
	int i, fds[2];

	p->n = n;
	for (i = 0; i < n; i++) {
		t_ok(pipe2(fds, O_CLOEXEC | O_NONBLOCK));
		p->rd[i] = fds[0];
		p->wr[i] = fds[1];
		p->data[i] = v[i];
	}
}

static void pipes_close(struct pipes *p)
{
	int i;

	for (i = 0; i < p->n; i++) {
		close(p->rd[i]);
		close(p->wr[i]);
	}
}

static void pipes_add(struct pipes *p, int ep)
{
	int i;

	for (i = 0; i < p->n; i++)
		ep_ctl(ep, EPOLL_CTL_ADD, p->rd[i], EPOLLIN, p->data[i]);
}

static void pipes_fill(struct pipes *p)
{
	int i;

	for (i = 0; i < p->n; i++)
		t_write_all(p->wr[i], "p", 1);
}

/*
 * Collect events until every one of want[0..n) came (each exactly once, no
 * other value), within EV_MS; then nothing else for NOEV_MS.
 */
static void expect_set_at(int line, int ep, const uint64_t *want, int n)
{
	bool seen[NVAL + 2] = { false };
	uint64_t t0 = t_now_ms();
	int got = 0, i, k;

	while (got < n && t_now_ms() - t0 < EV_MS) {
		struct epoll_event ev[NVAL + 4];

		k = epoll_wait(ep, ev, NVAL + 4, 100);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			t_fail("line %d: epoll_wait: %s", line, strerror(errno));
		for (i = 0; i < k; i++) {
			int j;

			for (j = 0; j < n; j++)
				if (!seen[j] && want[j] == ev[i].data.u64)
					break;
			if (j == n) {
				/* Level-triggered: a value already seen may come round again. */
				for (j = 0; j < n && want[j] != ev[i].data.u64; j++)
					;
				if (j == n)
					t_fail("line %d: event %#x with data %#llx, which the program never registered",
					       line, ev[i].events, (unsigned long long)ev[i].data.u64);
				continue;
			}
			seen[j] = true;
			got++;
		}
	}
	for (i = 0; i < n; i++)
		if (!seen[i])
			t_fail("line %d: no event with data %#llx (%d of %d came)", line,
			       (unsigned long long)want[i], got, n);
}
#define expect_set(ep, want, n) expect_set_at(__LINE__, ep, want, n)

/* The pipes' data, then extra values. */
static int want_of(const struct pipes *p, uint64_t *w, uint64_t extra)
{
	int i;

	for (i = 0; i < p->n; i++)
		w[i] = p->data[i];
	w[i++] = extra;
	return i;
}

static void drain_pipes(struct pipes *p)
{
	char b[16];
	int i;

	for (i = 0; i < p->n; i++)
		while (read(p->rd[i], b, sizeof(b)) > 0)
			;
}

/* ---- the checks' common set-up ---------------------------------------------- */

/* A connection on shared memory, tag-like values, a pipe for each, and a
 * fresh instance. */
struct fix {
	int c, s, helper, ep, n;
	uint64_t v[NVAL];
	struct pipes p;
};

static void fix_open(struct fix *f)
{
	t_pair_smc(&f->c, &f->s);
	f->n = tag_like(f->s, &f->helper, f->v);
	pipes_open(&f->p, f->v, f->n);
	f->ep = ep_new();
}

/* The connection still carries bytes both ways; everything closed. */
static void fix_close(struct fix *f)
{
	drain_pipes(&f->p);
	t_xfer(f->c, f->s, "z");
	t_xfer(f->s, f->c, "y");
	close(f->ep);
	close(f->helper);
	pipes_close(&f->p);
	close(f->c);
	close(f->s);
}

/* ---- exact ---------------------------------------------------------------- */

static void check_exact(void)
{
	uint64_t w[NVAL + 2];
	struct fix f;
	int i;
	char b;

	fix_open(&f);
	ep_ctl(f.ep, EPOLL_CTL_ADD, f.s, EPOLLIN, 0x5151);
	pipes_add(&f.p, f.ep);
	pipes_fill(&f.p);
	t_write_all(f.c, "x", 1);
	expect_set(f.ep, w, want_of(&f.p, w, 0x5151));
	t_read_all(f.s, &b, 1);
	drain_pipes(&f.p);

	/* MOD: every pipe gets another pipe's tag-like value, or a plain one. */
	for (i = 0; i < f.p.n; i++) {
		f.p.data[i] = i % 2 ? f.v[(i + 1) % f.n] + 0x100 : f.v[(i + 1) % f.n];
		ep_ctl(f.ep, EPOLL_CTL_MOD, f.p.rd[i], EPOLLIN, f.p.data[i]);
	}
	pipes_fill(&f.p);
	t_write_all(f.c, "y", 1);
	expect_set(f.ep, w, want_of(&f.p, w, 0x5151));
	t_read_all(f.s, &b, 1);
	drain_pipes(&f.p);

	/* DEL: no event; ADD again: reported with its data. */
	for (i = 0; i < f.p.n; i++)
		ep_ctl(f.ep, EPOLL_CTL_DEL, f.p.rd[i], 0, 0);
	pipes_fill(&f.p);
	{
		struct epoll_event ev[4];
		int k = epoll_wait(f.ep, ev, 4, NOEV_MS);

		t_assert(k == 0, "after DEL: %d events, first data %#llx", k,
			 k > 0 ? (unsigned long long)ev[0].data.u64 : 0ULL);
	}
	pipes_add(&f.p, f.ep);
	expect_set(f.ep, w, want_of(&f.p, w, 0) - 1);
	fix_close(&f);
}

/* ---- first / inplace -------------------------------------------------------- */

static void check_first(void)
{
	uint64_t w[NVAL + 2];
	struct fix f;
	char b;

	fix_open(&f);
	pipes_add(&f.p, f.ep);
	pipes_fill(&f.p);
	expect_set(f.ep, w, want_of(&f.p, w, 0) - 1);
	ep_ctl(f.ep, EPOLL_CTL_ADD, f.s, EPOLLIN, 0x5151);
	t_write_all(f.c, "x", 1);
	expect_set(f.ep, w, want_of(&f.p, w, 0x5151));
	t_read_all(f.s, &b, 1);
	fix_close(&f);
}

static void check_inplace(void)
{
	uint64_t w[NVAL + 2];
	struct fix f;

	fix_open(&f);
	pipes_add(&f.p, f.ep);
	pipes_fill(&f.p);
	expect_set(f.ep, w, want_of(&f.p, w, 0) - 1);
	drain_pipes(&f.p);
	pipes_fill(&f.p);
	expect_set(f.ep, w, want_of(&f.p, w, 0) - 1);
	fix_close(&f);
}

/* ---- sleeper ---------------------------------------------------------------- */

struct sleeper {
	int ep;
	uint64_t want;
	int got;
	uint64_t data[8];
};

static void *sleeper_main(void *arg)
{
	struct sleeper *sl = arg;
	struct epoll_event ev[8];
	int k;

	do
		k = epoll_wait(sl->ep, ev, 8, EV_MS);
	while (k < 0 && errno == EINTR);
	sl->got = k;
	for (int i = 0; i < k; i++)
		sl->data[i] = ev[i].data.u64;
	return NULL;
}

static void check_sleeper(void)
{
	uint64_t v[NVAL];
	struct sleeper sl = { 0 };
	pthread_t th;
	int c, s, helper, ep, fds[2], n, i;
	char b;

	t_pair_smc(&c, &s);
	n = tag_like(s, &helper, v);
	for (i = 0; i < n; i++) {
		ep = ep_new();
		t_ok(pipe2(fds, O_CLOEXEC | O_NONBLOCK));
		ep_ctl(ep, EPOLL_CTL_ADD, fds[0], EPOLLIN, v[i]);
		memset(&sl, 0, sizeof(sl));
		sl.ep = ep;
		t_ok(-pthread_create(&th, NULL, sleeper_main, &sl));
		t_msleep(10);
		ep_ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 0x5151);
		t_write_all(fds[1], "p", 1);
		t_ok(-pthread_join(th, NULL));
		t_assert(sl.got >= 1, "value %#llx: the sleeper got %d events",
			 (unsigned long long)v[i], sl.got);
		for (int j = 0; j < sl.got; j++)
			t_assert(sl.data[j] == v[i], "value %#llx: the sleeper got data %#llx",
				 (unsigned long long)v[i], (unsigned long long)sl.data[j]);
		close(ep);
		close(fds[0]);
		close(fds[1]);
	}
	t_write_all(c, "x", 1);
	t_read_all(s, &b, 1);
	close(helper);
	close(c);
	close(s);
}

/* ---- forked ----------------------------------------------------------------- */

static void check_forked(void)
{
	uint64_t w[NVAL + 2];
	struct fix f;
	pid_t pid;

	fix_open(&f);
	ep_ctl(f.ep, EPOLL_CTL_ADD, f.s, EPOLLIN, 0x5151);
	pipes_add(&f.p, f.ep);
	pid = t_fork_helper();
	if (pid == 0) {
		pipes_fill(&f.p);
		expect_set(f.ep, w, want_of(&f.p, w, 0) - 1);
		_exit(0);
	}
	t_wait_child(pid, "forked waiter");
	fix_close(&f);
}

static const struct t_check checks[] = {
	{ "exact", check_exact },
	{ "first", check_first },
	{ "inplace", check_inplace },
	{ "sleeper", check_sleeper },
	{ "forked", check_forked },
};

int main(int argc, char **argv)
{
	t_name = "t_epoll_data";
	signal(SIGPIPE, SIG_IGN);
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
