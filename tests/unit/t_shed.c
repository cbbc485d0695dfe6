// SPDX-License-Identifier: MIT
/*
 * t_shed.c - descriptor shedding (src/shed.c) never hands the application a
 * doorbell number that a call in progress may still use.
 *
 *   busy_bells  both ends of a shared-memory pair have a thread blocked in
 *               recv (in usmc's wait, the doorbell loaded); the table is
 *               then filled to RLIMIT_NOFILE and socket() runs into
 *               EMFILE.  Before, usmc moved a connection to TCP and closed
 *               its doorbells, and socket() got one of those numbers: the
 *               blocked thread's next drain read the new socket's bytes, a
 *               signal wrote 0x01 into it.  Now socket() may fail (EMFILE)
 *               or succeed, but never with a number that was a doorbell;
 *               then both blocked reads get their byte.
 *
 *   queued_after_close  a client sends "hello" and closes before the
 *               server accepts; the client process then runs out of
 *               descriptors (open() until EMFILE).  The shed freed the
 *               client's link group, whose slot still held the unread
 *               bytes: the server's accept found it gone and read
 *               ECONNRESET.  Now an owned link group goes only once the
 *               server side let go of every slot: "hello", then EOF.
 *   signal_open  a signal handler calls open() at EMFILE (async-signal-
 *               safe) while the thread it interrupted is in socket() and
 *               close() holding usmc's descriptor-table lock: the shed
 *               waited for that lock forever.  Now it gives up (bounded).
 *
 *   fopen       libc's fopen() and opendir() open inside libc, past the
 *               open() wrapper: they are wrapped whole.  A process with a
 *               connection on shared memory fills its table with fopen()
 *               until EMFILE: by then usmc gave back its doorbells (the
 *               connection moved to TCP, limit_reached), and the
 *               connection still carries bytes both ways.  Before, fopen()
 *               met EMFILE with usmc's descriptors still open (slapd's
 *               libwrap check of /etc/hosts.allow denied clients).
 *
 * Run plain, under ASan and TSan.
 */
#include "t_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>

#define LIMIT	128

struct reader {
	pthread_t t;
	int fd;
	char got;
	ssize_t r;
};

static void *read_one(void *arg)
{
	struct reader *rd = arg;

	rd->r = recv(rd->fd, &rd->got, 1, 0);
	return NULL;
}

/* Is fd one of usmc's doorbells (a FIFO in a link group's directory)? */
static bool is_bell(int fd)
{
	char p[64], target[PATH_MAX];
	ssize_t n;

	snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
	n = readlink(p, target, sizeof(target) - 1);
	if (n <= 0)
		return false;
	target[n] = 0;
	return strstr(target, "/lg-") && (target[n - 1] == 'c' || target[n - 1] == 's');
}

static void set_nofile(rlim_t n)
{
	struct rlimit rl;

	t_ok(getrlimit(RLIMIT_NOFILE, &rl));
	if (rl.rlim_max < n)
		t_skip("RLIMIT_NOFILE hard limit too low");
	rl.rlim_cur = n;
	t_ok(setrlimit(RLIMIT_NOFILE, &rl));
}

/* dup(0) until the table is full (RLIMIT_NOFILE LIMIT): how many; errno
 * is the last dup's. */
static int fill_table(int fill[LIMIT])
{
	int n = 0, fd;

	while ((fd = dup(0)) >= 0) {
		t_assert(n < LIMIT, "dup beyond RLIMIT_NOFILE");
		fill[n++] = fd;
	}
	return n;
}

static void check_busy_bells(void)
{
	struct reader rd[2];
	bool bell[LIMIT] = { false };
	int c, s, fill[LIMIT], nfill, fd, i, nbells = 0;

	if (!t_accel())
		t_skip("not accelerated");
	set_nofile(LIMIT);
	t_pair_smc(&c, &s);
	rd[0].fd = c;
	rd[1].fd = s;
	for (i = 0; i < 2; i++)
		t_assert(!pthread_create(&rd[i].t, NULL, read_one, &rd[i]), "pthread_create");
	t_msleep(200);	/* both asleep in recv */
	for (fd = 0; fd < LIMIT; fd++)
		if ((bell[fd] = is_bell(fd)))
			nbells++;
	t_assert(nbells >= 4, "%d doorbells open, expected the pair's 4", nbells);
	nfill = fill_table(fill);
	t_assert(errno == EMFILE, "dup: %s", strerror(errno));
	fd = socket(AF_INET, SOCK_STREAM, 0);
	t_info("table full after %d dups; socket() -> %d (%s)", nfill, fd,
	       fd < 0 ? strerror(errno) : "ok");
	if (fd >= 0) {
		t_assert(fd >= LIMIT || !bell[fd],
			 "socket() got %d: a doorbell of a connection a thread is blocked on", fd);
		close(fd);
	} else {
		t_assert(errno == EMFILE, "socket: %s", strerror(errno));
	}
	for (i = 0; i < nfill; i++)
		close(fill[i]);
	t_write_all(c, "x", 1);
	t_write_all(s, "y", 1);
	for (i = 0; i < 2; i++)
		t_assert(!pthread_join(rd[i].t, NULL), "pthread_join");
	t_assert(rd[0].r == 1 && rd[0].got == 'y', "client read %zd '%c'", rd[0].r, rd[0].got);
	t_assert(rd[1].r == 1 && rd[1].got == 'x', "server read %zd '%c'", rd[1].r, rd[1].got);
	close(c);
	close(s);
}

static void check_queued_after_close(void)
{
	uint16_t port;
	int lfd = t_listen(&port), sv[2], s, n, got = 0;
	char buf[64];
	pid_t pid;

	t_sync_pair(sv);
	pid = fork();
	t_assert(pid >= 0, "fork: %s", strerror(errno));
	if (!pid) {
		int c;

		close(sv[0]);
		set_nofile(64);
		c = t_connect(port);
		t_write_all(c, "hello", 5);
		close(c);
		while (open("/dev/null", O_RDONLY) >= 0)
			;
		if (errno != EMFILE)
			_exit(3);
		t_sync_post(sv[1]);
		t_sync_wait(sv[1]);	/* alive until the server read */
		_exit(0);
	}
	close(sv[1]);
	t_sync_wait(sv[0]);
	s = t_accept(lfd);
	while ((n = (int)recv(s, buf + got, sizeof(buf) - (size_t)got, 0)) > 0)
		got += n;
	t_assert(got == 5 && !memcmp(buf, "hello", 5) && n == 0,
		 "server read %d bytes '%.*s', then %d (%s): TCP gives 'hello' and EOF",
		 got, got, buf, n, n < 0 ? strerror(errno) : "EOF");
	t_sync_post(sv[0]);
	t_wait_child(pid, "client child");
	close(s);
	close(lfd);
	close(sv[0]);
}

static volatile sig_atomic_t h_emfile, h_ok;

static void open_in_handler(int sig)
{
	int e = errno, fd = open("/dev/null", O_RDONLY);

	(void)sig;
	if (fd >= 0) {
		close(fd);
		h_ok++;
	} else if (errno == EMFILE) {
		h_emfile++;
	}
	errno = e;
}

static void check_signal_open(void)
{
	struct sigaction sa = { .sa_handler = open_in_handler };
	struct itimerval it = { { 0, 200 }, { 0, 200 } }, off = { { 0, 0 }, { 0, 0 } };
	int fill[LIMIT], nfill, i;

	set_nofile(LIMIT);
	nfill = fill_table(fill);
	/* Room for one socket: the handler's open() finds none while the
	 * loop holds it. */
	t_assert(nfill >= 2, "table too full to start");
	close(fill[--nfill]);
	t_ok(sigaction(SIGALRM, &sa, NULL));
	t_ok(setitimer(ITIMER_REAL, &it, NULL));
	for (i = 0; i < 50000; i++) {
		int s = socket(AF_INET, SOCK_STREAM, 0);

		if (s >= 0)
			close(s);
	}
	t_ok(setitimer(ITIMER_REAL, &off, NULL));
	signal(SIGALRM, SIG_DFL);
	t_info("handler: %d opens at EMFILE, %d opened", (int)h_emfile, (int)h_ok);
	t_assert(h_emfile > 0, "the handler never met EMFILE");
	for (i = 0; i < nfill; i++)
		close(fill[i]);
}

/* Our descriptors on link-group doorbells (lg-<id>/c, lg-<id>/s). */
static int lg_bells(void)
{
	char path[64], target[512];
	int fd, n = 0;
	ssize_t len;

	for (fd = 0; fd < LIMIT; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		len = readlink(path, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = 0;
		n += strstr(target, "/lg-") && len > 2 && target[len - 2] == '/' &&
		     (target[len - 1] == 'c' || target[len - 1] == 's');
	}
	return n;
}

static void fill_with(bool dirs)
{
	int before, n = 0;

	before = lg_bells();
	if (t_accel())
		t_assert(before > 0, "no doorbells open before the fill");
	for (;;) {
		if (dirs ? !opendir("/") : !fopen("/dev/null", "r"))
			break;
		n++;
	}
	t_assert(errno == EMFILE, "%s failed with %s", dirs ? "opendir" : "fopen",
		 strerror(errno));
	t_assert(lg_bells() == 0, "%s met EMFILE after %d with %d of usmc's doorbells open",
		 dirs ? "opendir" : "fopen", n, lg_bells());
}

static void check_fopen_fill(bool dirs)
{
	pid_t pid = t_fork_helper();

	if (!pid) {
		int c, s;

		set_nofile(LIMIT);
		t_pair_smc(&c, &s);
		fill_with(dirs);
		/* Room for nothing else: the pair carries bytes as TCP. */
		t_xfer(c, s, "after");
		t_xfer(s, c, "back");
		_exit(0);
	}
	t_wait_child(pid, dirs ? "opendir filler" : "fopen filler");
}

static void check_fopen(void)
{
	check_fopen_fill(false);
	check_fopen_fill(true);
	t_tcp_conns = -1;	/* moved to TCP by the shed, counted by the move */
}

static const struct t_check checks[] = {
	{ "busy_bells", check_busy_bells },
	{ "queued_after_close", check_queued_after_close },
	{ "signal_open", check_signal_open },
	{ "fopen", check_fopen },
};

int main(int argc, char **argv)
{
	t_name = "t_shed";
	t_tcp_conns = -1;	/* a connection moved to TCP is not a failure here */
	return t_run_checks(checks, ARRAY_LEN(checks), argc, argv, NULL);
}
