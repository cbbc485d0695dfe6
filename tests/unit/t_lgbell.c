// SPDX-License-Identifier: MIT
/*
 * t_lgbell.c - one doorbell per link group, many waiters behind it.
 *
 * All connections of a client process to one listener share a link group
 * and with it one doorbell per side; every thread and process that sleeps
 * for one of them watches that doorbell.  A ring taken by the wrong
 * sleeper would leave the right one asleep: here that is a hang.  The
 * client sends to connections picked at random, one at a time and in
 * bursts, and reads each echo; the server side sleeps:
 *
 *   threads      one thread per connection, blocked in recv()
 *   poll         four threads, each in poll() over a quarter of them
 *   workers      four forked processes, each in epoll_wait() over a quarter
 *   epoll        one epoll instance over all (most of them idle, armed)
 *   order        the same, stopped (SIGSTOP) while the client writes to
 *                connections in a random order: one ring of the shared
 *                doorbell wakes it, and epoll_wait must report them in
 *                the order they turned readable, as the kernel's ready
 *                list would (redis relies on it: test_redis_order.py)
 *
 * and fds: this process, holding both ends of all NCONN connections before
 * the fork, has four doorbell descriptors (two per side of the one link
 * group, counted in /proc/self/fd), not two per end of every connection.
 */
#include "t_util.h"
#include "t_stat.h"

#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/wait.h>

#define NCONN	48		/* within one link group (USMC_LGR_SLOTS 64) */
#define ROUNDS	1500
#define BURST	12
#define NWORK	4
#define MSG	16

static int cs[NCONN], ss[NCONN];
static uint64_t seed = 0x1b311;
static long long doorbells, doorbells_spared;

/* Echo whatever one message brings. */
static bool echo_one(int fd)
{
	char buf[MSG];
	ssize_t n = recv(fd, buf, sizeof(buf), MSG_WAITALL);

	if (n == 0)
		return false;
	t_assert(n == MSG, "server recv: %zd (%s)", n, strerror(errno));
	t_write_all(fd, buf, MSG);
	return true;
}

static void msg_for(char *m, int i, int round)
{
	char tmp[64];

	snprintf(tmp, sizeof(tmp), "c%02d r%06d................", i, round);
	memcpy(m, tmp, MSG);
}

/* The client's side of every scenario: singles, then bursts. */
static void client_rounds(const char *what)
{
	char m[MSG], got[MSG];
	int r, k, picks[BURST];

	for (r = 0; r < ROUNDS; r++) {
		int n = r % 3 == 2 ? BURST : 1;

		/* Now and then long past any spin (USMC_SPIN_US, 50 us): the
		 * other side sleeps, and only a ring wakes it.  A side that is
		 * awake gets none (wait.c: doorbells_spared). */
		if (r % 100 == 50)
			t_msleep(2);

		for (k = 0; k < n; k++) {
			int i, j;

			do {	/* distinct connections within a burst */
				i = (int)t_rand_range(&seed, 0, NCONN - 1);
				for (j = 0; j < k && picks[j] != i; j++)
					;
			} while (j < k);
			picks[k] = i;
			msg_for(m, i, r);
			t_write_all(cs[i], m, MSG);
		}
		for (k = 0; k < n; k++) {
			msg_for(m, picks[k], r);
			t_read_all(cs[picks[k]], got, MSG);
			t_assert(!memcmp(m, got, MSG), "%s: round %d conn %d: wrong echo", what, r,
				 picks[k]);
		}
	}
}

static void close_all(int *fds)
{
	int i;

	for (i = 0; i < NCONN; i++)
		close(fds[i]);
}

static void setup(void)
{
	uint16_t port;
	int lfd = t_listen(&port), i;

	for (i = 0; i < NCONN; i++)
		t_pair_on(lfd, port, &cs[i], &ss[i]);
	close(lfd);
}

/* The server's sleepers run in a child; the client stays here. */
static pid_t server_child(void (*serve)(void))
{
	pid_t pid = fork();

	t_assert(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		close_all(cs);
		serve();
		_exit(0);
	}
	close_all(ss);
	return pid;
}

static void *thread_one(void *arg)
{
	int fd = (int)(intptr_t)arg;

	while (echo_one(fd))
		;
	return NULL;
}

static void serve_threads(void)
{
	pthread_t th[NCONN];
	int i;

	for (i = 0; i < NCONN; i++)
		t_assert(!pthread_create(&th[i], NULL, thread_one, (void *)(intptr_t)ss[i]), "thread");
	for (i = 0; i < NCONN; i++)
		pthread_join(th[i], NULL);
}

static void *thread_poll(void *arg)
{
	int q = (int)(intptr_t)arg, n = NCONN / NWORK, open = n, i;
	struct pollfd p[NCONN / NWORK];

	for (i = 0; i < n; i++) {
		p[i].fd = ss[q * n + i];
		p[i].events = POLLIN;
	}
	while (open) {
		t_assert(poll(p, (nfds_t)n, -1) > 0, "poll: %s", strerror(errno));
		for (i = 0; i < n; i++)
			if (p[i].fd >= 0 && p[i].revents && !echo_one(p[i].fd)) {
				p[i].fd = -1;
				open--;
			}
	}
	return NULL;
}

static void serve_poll(void)
{
	pthread_t th[NWORK];
	int i;

	for (i = 0; i < NWORK; i++)
		t_assert(!pthread_create(&th[i], NULL, thread_poll, (void *)(intptr_t)i), "thread");
	for (i = 0; i < NWORK; i++)
		pthread_join(th[i], NULL);
}

/* An epoll loop over the connections i with i % step == first. */
static void epoll_loop(int first, int step)
{
	struct epoll_event ev, out[NCONN];
	int ep = epoll_create1(0), open = 0, i, n;

	t_assert(ep >= 0, "epoll_create1");
	for (i = first; i < NCONN; i += step) {
		ev.events = EPOLLIN;
		ev.data.u32 = (uint32_t)i;
		t_ok(epoll_ctl(ep, EPOLL_CTL_ADD, ss[i], &ev));
		open++;
	}
	while (open) {
		n = epoll_wait(ep, out, NCONN, -1);
		t_assert(n > 0, "epoll_wait: %d (%s)", n, strerror(errno));
		for (i = 0; i < n; i++) {
			int fd = ss[out[i].data.u32];

			if (!echo_one(fd)) {
				t_ok(epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL));
				open--;
			}
		}
	}
	close(ep);
}

static void serve_workers(void)
{
	pid_t w[NWORK];
	int i;

	for (i = 0; i < NWORK; i++) {
		w[i] = fork();
		t_assert(w[i] >= 0, "fork");
		if (w[i] == 0) {
			epoll_loop(i, NWORK);
			_exit(0);
		}
	}
	close_all(ss);
	for (i = 0; i < NWORK; i++)
		t_wait_child(w[i], "worker");
}

static void serve_epoll(void)
{
	epoll_loop(0, 1);
}

#define ORDER_ROUNDS	40
#define ORDER_K		8

static int order_sv[2];

/* Each round: ORDER_K messages; their positions must come in order. */
static void serve_order(void)
{
	struct epoll_event ev, out[NCONN];
	int ep = epoll_create1(0), r, i, got, n;

	t_assert(ep >= 0, "epoll_create1");
	close(order_sv[0]);
	for (i = 0; i < NCONN; i++) {
		ev.events = EPOLLIN;
		ev.data.u32 = (uint32_t)i;
		t_ok(epoll_ctl(ep, EPOLL_CTL_ADD, ss[i], &ev));
	}
	for (r = 0; r < ORDER_ROUNDS; r++) {
		char line[256] = "", m[MSG + 1] = "";
		int bad = 0;

		for (got = 0; got < ORDER_K;) {
			n = epoll_wait(ep, out, NCONN, -1);
			if (n < 0 && errno == EINTR)
				continue;	/* stopped and continued */
			t_assert(n > 0, "epoll_wait: %s", strerror(errno));
			for (i = 0; i < n; i++, got++) {
				t_read_all(ss[out[i].data.u32], m, MSG);
				if (m[0] - 'A' != got)
					bad = 1;
				snprintf(line + strlen(line), sizeof(line) - strlen(line), "%c",
					 m[0]);
			}
		}
		snprintf(m, sizeof(m), "%.16s", bad ? line : "ok");
		t_sync_send(order_sv[1], m, MSG);
	}
	close(ep);
	for (i = 0; i < NCONN; i++)
		close(ss[i]);
}

/* Until pid sleeps in the kernel's epoll_wait (its wchan says so). */
static void asleep_in_epoll(pid_t pid)
{
	char path[64], wchan[64];
	int i;

	snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
	for (i = 0; i < 5000; i++) {
		FILE *f = fopen(path, "r");
		size_t n = f ? fread(wchan, 1, sizeof(wchan) - 1, f) : 0;

		if (f)
			fclose(f);
		wchan[n] = 0;
		if (strstr(wchan, "epoll_wait") || strstr(wchan, "ep_poll"))
			break;
		t_msleep(1);
	}
	t_msleep(2);
}

/* The client's side: the server asleep, then stopped while we write. */
static void order_rounds(pid_t srv)
{
	char m[MSG], res[MSG + 1];
	int r, k, perm[NCONN], i;

	close(order_sv[1]);
	for (r = 0; r < ORDER_ROUNDS; r++) {
		for (i = 0; i < NCONN; i++)
			perm[i] = i;
		for (i = NCONN - 1; i > 0; i--) {
			int j = (int)t_rand_range(&seed, 0, (uint64_t)i), x = perm[i];

			perm[i] = perm[j];
			perm[j] = x;
		}
		asleep_in_epoll(srv);	/* past its spin: all armed */
		t_ok(kill(srv, SIGSTOP));
		for (k = 0; k < ORDER_K; k++) {
			memset(m, 'A' + k, MSG);
			t_write_all(cs[perm[k]], m, MSG);
		}
		t_ok(kill(srv, SIGCONT));
		t_assert(t_sync_recv(order_sv[0], res, MSG), "order: server gone");
		res[MSG] = 0;
		t_assert(!strcmp(res, "ok"), "order: round %d reported %s, written ABCDEFGH", r, res);
	}
}

/* Our doorbell descriptors: FIFOs named lg-<id>/c or lg-<id>/s. */
static int count_bells(int *lgs)
{
	char path[300], target[512], seen[8][512];
	int nseen = 0, n = 0, i;
	struct dirent *de;
	DIR *d = opendir("/proc/self/fd");

	t_assert(d != NULL, "opendir /proc/self/fd");
	while ((de = readdir(d))) {
		ssize_t len;
		char *lg;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
		len = readlink(path, target, sizeof(target) - 1);
		if (len <= 2)
			continue;
		target[len] = 0;
		lg = strstr(target, "/lg-");
		if (!lg || target[len - 2] != '/' || (target[len - 1] != 'c' && target[len - 1] != 's'))
			continue;
		n++;
		target[len - 2] = 0;
		for (i = 0; i < nseen && strcmp(seen[i], lg); i++)
			;
		if (i == nseen && nseen < 8)
			snprintf(seen[nseen++], sizeof(seen[0]), "%s", lg);
	}
	closedir(d);
	*lgs = nseen;
	return n;
}

static void scenario(const char *name, void (*serve)(void))
{
	struct t_stats before;
	pid_t pid;

	if (t_accel())
		t_stats_get(&before);
	setup();
	t_stats_expect(&before, 2 * NCONN, 0);
	if (!strcmp(name, "threads") && t_accel()) {
		int lgs, bells = count_bells(&lgs);

		/* Both ends are ours until the fork: two per side. */
		t_assert(lgs == 1 && bells == 4, "%d connections, both ends here: %d doorbell "
			 "descriptors in %d link groups (want 4 in 1)", NCONN, bells, lgs);
		t_info("fds: %d connections, both ends, %d doorbell descriptors", NCONN, bells);
	}
	if (serve == serve_order)
		t_sync_pair(order_sv);
	pid = server_child(serve);
	if (serve == serve_order)
		order_rounds(pid);
	else
		client_rounds(name);
	close_all(cs);
	t_wait_child(pid, name);
	if (t_accel()) {
		char *j = t_stats_json();
		long long bells = t_json_int(j, "doorbells");
		long long spared = t_json_int(j, "doorbells_spared");

		free(j);
		/* Sleepers were woken by rings, not only found by spinning. */
		t_assert(bells > doorbells, "%s: no doorbell rung", name);
		/* One epoll instance, its idle records armed since its last
		 * sleep: a message for one while it is awake costs no ring. */
		if (serve == serve_epoll)
			t_assert(spared > doorbells_spared, "%s: every kick rang (%lld spared)", name,
				 spared);
		doorbells_spared = spared;
		t_info("%s: %d rounds over %d connections, %lld doorbells", name,
		       serve == serve_order ? ORDER_ROUNDS : ROUNDS, NCONN, bells - doorbells);
		doorbells = bells;
	}
}

int main(int argc, char **argv)
{
	t_name = "t_lgbell";
	(void)argc;
	(void)argv;
	signal(SIGPIPE, SIG_IGN);
	scenario("threads", serve_threads);
	scenario("poll", serve_poll);
	scenario("workers", serve_workers);
	scenario("epoll", serve_epoll);
	scenario("order", serve_order);
	return T_EXIT_PASS;
}
