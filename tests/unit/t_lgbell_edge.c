// SPDX-License-Identifier: MIT
/*
 * t_lgbell_edge.c - corners of the shared doorbell (one per side of a link
 * group) that a review found; each hung or misbehaved before its fix.
 *
 *   excl      two epoll instances, each with EPOLLEXCLUSIVE on another
 *             connection of one link group: the doorbell entry was
 *             exclusive too, so the kernel woke only the first instance
 *             and the second slept through its connection's data.
 *   rcvtimeo  SO_RCVTIMEO on an idle connection while a sibling of the
 *             same link group is busy, for as long as the recv lasts: every
 *             ring woke the idle reader, which waited again with the whole
 *             timeout, so the recv never returned.  It must end in EAGAIN.
 *   reattach  the server side's link group is freed by a shed (EMFILE)
 *             and attached again: a thread's waitset remembered the old
 *             doorbell by link group id, a generation that started over
 *             and a descriptor number that came back, so it never watched
 *             the new one and the recv slept through the peer's byte.
 *
 *   pollprune an application's poll() over both sides of a link group,
 *             a blocking recv on one, a shed that closes the doorbells and
 *             a new pair that reopens them under the same numbers, then
 *             poll() over the new pair: registering one doorbell deleted
 *             the other's registration (a stale entry's number), and the
 *             poll, then every recv on that connection, slept through its
 *             byte.
 *   keyexit   a thread whose own key destructor waits on a connection
 *             after usmc's destructor closed its waitset: the waitset made
 *             then must go too (it leaked, one descriptor per thread).
 *
 * Each failure is a hang here (the harness's timeout), never a time limit
 * of the test's own.
 */
#include "t_util.h"
#include "t_stat.h"

#include <dirent.h>
#include <poll.h>
#include <stdatomic.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/time.h>

static int cs[2], ss[2];
static _Atomic int stop;

static void pairs(void)
{
	uint16_t port;
	int lfd = t_listen(&port), i;

	for (i = 0; i < 2; i++)
		t_pair_on(lfd, port, &cs[i], &ss[i]);
	close(lfd);
	if (t_accel()) {
		t_assert_smc(ss[0]);
		t_assert_smc(ss[1]);
	}
}

static void unpair(void)
{
	int i;

	for (i = 0; i < 2; i++) {
		close(cs[i]);
		close(ss[i]);
	}
}

static void *excl_waiter(void *arg)
{
	int i = (int)(intptr_t)arg, ep = epoll_create1(0), n;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLEXCLUSIVE, .data.u32 = (uint32_t)i };
	struct epoll_event out[4];
	char c;

	t_assert(ep >= 0, "epoll_create1");
	t_ok(epoll_ctl(ep, EPOLL_CTL_ADD, ss[i], &ev));
	do
		n = epoll_wait(ep, out, 4, -1);
	while (n < 0 && errno == EINTR);
	t_assert(n == 1 && out[0].data.u32 == (uint32_t)i, "excl: waiter %d: %d events", i, n);
	t_read_all(ss[i], &c, 1);
	close(ep);
	return NULL;
}

static void excl(void)
{
	pthread_t th[2];

	pairs();
	t_ok(pthread_create(&th[0], NULL, excl_waiter, (void *)0));
	t_msleep(50);
	t_ok(pthread_create(&th[1], NULL, excl_waiter, (void *)1));
	t_msleep(200);		/* both asleep in the kernel */
	t_write_all(cs[1], "x", 1);
	t_ok(pthread_join(th[1], NULL));
	t_write_all(cs[0], "x", 1);
	t_ok(pthread_join(th[0], NULL));
	unpair();
	t_info("excl: each instance woke for its own connection");
}

static void *sibling_reader(void *arg)
{
	char c;

	(void)arg;
	while (recv(ss[1], &c, 1, 0) == 1 && c == 'z')
		;
	return NULL;
}

static void *sibling_writer(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		t_write_all(cs[1], "z", 1);
		t_msleep(20);
	}
	t_write_all(cs[1], "q", 1);
	return NULL;
}

static void rcvtimeo(void)
{
	struct timeval tv = { .tv_sec = 0, .tv_usec = 300000 };
	pthread_t r, w;
	ssize_t n;
	char c;

	pairs();
	t_ok(setsockopt(ss[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	atomic_store(&stop, 0);
	t_ok(pthread_create(&r, NULL, sibling_reader, NULL));
	t_ok(pthread_create(&w, NULL, sibling_writer, NULL));
	n = recv(ss[0], &c, 1, 0);
	t_assert(n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK),
		 "rcvtimeo: recv %zd (%s)", n, n < 0 ? strerror(errno) : "a byte");
	atomic_store(&stop, 1);
	t_ok(pthread_join(w, NULL));
	t_ok(pthread_join(r, NULL));
	unpair();
	t_info("rcvtimeo: EAGAIN while the sibling connection was busy");
}

static int cmd[2], done[2], target;

static void *reattach_waiter(void *arg)
{
	char c, b;

	(void)arg;
	while (read(cmd[0], &c, 1) == 1) {
		c = recv(target, &b, 1, 0) == 1 && b == 'y' ? 'k' : 'e';
		t_write_all(done[1], &c, 1);
	}
	return NULL;
}

/* The waiter thread, asleep in recv, must wake for the peer's byte. */
static void round_trip(int c, int s)
{
	char k = 'x';

	target = s;
	t_write_all(cmd[1], &k, 1);
	t_msleep(100);
	t_write_all(c, "y", 1);
	t_read_all(done[0], &k, 1);
	t_assert(k == 'k', "reattach: recv failed");
}

static void reattach(void)
{
	int i, nfill = 0, fill[65536];
	pthread_t th;
	struct rlimit rl;
	uint16_t port;
	int lfd = t_listen(&port), c1, s1, c2, s2;

	t_ok(pipe(cmd));
	t_ok(pipe(done));
	t_ok(pthread_create(&th, NULL, reattach_waiter, NULL));
	t_pair_on(lfd, port, &c1, &s1);
	round_trip(c1, s1);
	close(s1);
	close(c1);
	/* Fill the table: the open at EMFILE sheds, freeing the server
	 * side's idle link group (its file and doorbells). */
	t_ok(getrlimit(RLIMIT_NOFILE, &rl));
	t_assert(rl.rlim_cur <= 65536, "RLIMIT_NOFILE %llu", (unsigned long long)rl.rlim_cur);
	while ((fill[nfill] = open("/dev/null", O_RDONLY)) >= 0)
		nfill++;
	t_assert(errno == EMFILE, "open: %s", strerror(errno));
	for (i = 0; i < nfill; i++)
		close(fill[i]);
	t_pair_on(lfd, port, &c2, &s2);
	if (t_accel())
		t_assert_smc(s2);
	round_trip(c2, s2);
	close(c2);
	close(s2);
	close(cmd[1]);
	t_ok(pthread_join(th, NULL));
	close(cmd[0]);
	close(done[0]);
	close(done[1]);
	close(lfd);
	t_info("reattach: %d descriptors filled, the new doorbell watched", nfill);
}

static int late_fd;

static void *late_writer(void *arg)
{
	(void)arg;
	t_msleep(100);
	t_write_all(late_fd, "w", 1);
	return NULL;
}

/* One byte written to w after 100 ms must wake a poll on a and b. */
static void poll_two(int a, int b, int w)
{
	struct pollfd p[2] = { { .fd = a, .events = POLLIN }, { .fd = b, .events = POLLIN } };
	pthread_t th;
	int n;

	late_fd = w;
	t_ok(pthread_create(&th, NULL, late_writer, NULL));
	do
		n = poll(p, 2, -1);
	while (n < 0 && errno == EINTR);
	t_assert(n == 1, "pollprune: poll %d", n);
	t_ok(pthread_join(th, NULL));
}

/* recv on r wakes for a byte written to w after 100 ms. */
static void late_recv(int r, int w)
{
	pthread_t th;
	char b;

	late_fd = w;
	t_ok(pthread_create(&th, NULL, late_writer, NULL));
	t_read_all(r, &b, 1);
	t_ok(pthread_join(th, NULL));
}

static void *fill_and_free(void *arg)
{
	static int fill[65536];
	int i, n = 0;

	(void)arg;
	while (n < 65536 && (fill[n] = open("/dev/null", O_RDONLY)) >= 0)
		n++;
	t_assert(errno == EMFILE, "open: %s", strerror(errno));
	for (i = 0; i < n; i++)
		close(fill[i]);
	return NULL;
}

static void pollprune(void)
{
	uint16_t port;
	int lfd = t_listen(&port), c1, s1, c2, s2;
	pthread_t th;
	char b;

	t_pair_on(lfd, port, &c1, &s1);
	poll_two(s1, c1, c1);		/* watches both sides' doorbells */
	t_read_all(s1, &b, 1);
	late_recv(c1, s1);		/* watches one */
	close(c1);
	close(s1);
	/* Another thread sheds: our own idle waitset would go with ours. */
	t_ok(pthread_create(&th, NULL, fill_and_free, NULL));
	t_ok(pthread_join(th, NULL));
	t_pair_on(lfd, port, &c2, &s2);
	if (t_accel())
		t_assert_smc(s2);
	poll_two(c2, s2, s2);
	t_read_all(c2, &b, 1);
	late_recv(c2, s2);
	close(c2);
	close(s2);
	close(lfd);
	t_info("pollprune: the doorbells reopened under old numbers were watched");
}

static pthread_key_t app_key;
static int kc, ks;

static void app_dtor(void *v)
{
	(void)v;
	late_recv(kc, ks);	/* a wait after usmc's key destructor ran */
}

static void *dtor_thread(void *arg)
{
	(void)arg;
	late_recv(kc, ks);
	t_ok(pthread_setspecific(app_key, (void *)1));
	return NULL;
}

/* Our epoll descriptors (waitsets) in this process. */
static int count_eventpoll(void)
{
	char path[300], link[64];
	struct dirent *de;
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	t_assert(d != NULL, "opendir");
	while ((de = readdir(d))) {
		ssize_t len;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
		len = readlink(path, link, sizeof(link) - 1);
		if (len > 0) {
			link[len] = 0;
			n += !!strstr(link, "eventpoll");
		}
	}
	closedir(d);
	return n;
}

static void keyexit(void)
{
	pthread_t th;
	int before, i;

	t_pair(&kc, &ks);
	t_ok(pthread_key_create(&app_key, app_dtor));
	before = count_eventpoll();
	for (i = 0; i < 10; i++) {
		t_ok(pthread_create(&th, NULL, dtor_thread, NULL));
		t_ok(pthread_join(th, NULL));
	}
	t_assert(count_eventpoll() == before, "keyexit: %d epoll descriptors, %d before 10 threads",
		 count_eventpoll(), before);
	close(kc);
	close(ks);
	t_info("keyexit: no waitset left behind by 10 threads");
}

int main(void)
{
	t_name = "t_lgbell_edge";
	signal(SIGPIPE, SIG_IGN);
	pollprune();	/* first: on a fresh table the numbers come back as it needs */
	excl();
	rcvtimeo();
	reattach();
	keyexit();
	return T_EXIT_PASS;
}
