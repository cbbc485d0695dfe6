// SPDX-License-Identifier: MIT
/*
 * t_fork.c - one accelerated connection seen through several descriptors,
 * processes and threads.
 *
 *   dup            dup(): data flows through either copy; closing one copy
 *                  keeps the connection; the peer sees EOF only after the last
 *   dup2_dup3      dup2/dup3 onto a used number (and onto itself), O_CLOEXEC
 *   fdupfd         fcntl F_DUPFD / F_DUPFD_CLOEXEC with a minimum number
 *   replace        dup2 of a pipe over the only descriptor of a connection
 *                  closes it: the peer reads EOF
 *   fork_server    the classic fork-per-connection server: the parent
 *                  accepts, forks, closes its copy at once; the child (which
 *                  closes the listener) serves; repeated, every connection
 *                  on shared memory
 *   prefork        the listener created before fork(), the parent closes its
 *                  copy at once, the child accepts: still a usmc listener
 *   exit_unregister  a forking server (master and two workers, all holding
 *                  the listener) whose processes exit without closing it:
 *                  the last one out unregisters it (its CLC index file is
 *                  gone at once, not at the next garbage collection)
 *   exit_closing   exit() while another thread closes the process's
 *                  listeners and connections (libzmq's reaper thread
 *                  closes its sockets as Python's main thread exits): the
 *                  process exits 0, 20 times (the exit and the close
 *                  released one listener at once: SIGSEGV every time)
 *   shared_writer  parent and child write to one connection in turns
 *                  (serialised by the application); the peer sees the order
 *   exec_usmc      exec of a program (this one, role exec-peer) that keeps
 *                  using an inherited accelerated descriptor
 *   exec_plain     the same program exec'ed without libusmc: the transfer
 *                  must complete (the connection works or was kept on TCP),
 *                  never hang
 *   atfork_close   fork handlers of the program that close descriptors
 *                  (gRPC's), with fork() and vfork(): no deadlock, and the
 *                  connection works on after them
 *   numbers        the application's descriptor numbers stay what TCP gives:
 *                  16 more connections (32 sockets) take the 32 lowest free
 *                  numbers; usmc's own descriptors (doorbells, link groups,
 *                  runtime files) live in the upper half of RLIMIT_NOFILE
 *                  (event loops size their tables by connection count)
 *   rlimit         RLIMIT_NOFILE raised after the first connection: a socket
 *                  numbered above the old limit's half still accelerates
 *                  (usmc caches the limit, but asks again before refusing)
 *
 * Each check runs in its own process and must leave the counters with its
 * connections on shared memory (exec_plain: whatever it is, it must work).
 *
 * usage: t_fork [check...]
 */
#include "t_util.h"

#include <dirent.h>
#include <pthread.h>
#include <sys/resource.h>

/* Nothing to read now (and not EOF): the connection is still open. */
static void expect_open(int fd)
{
	t_assert(t_wait_fd(fd, POLLIN, 50) == 0, "fd %d readable (EOF?) while a copy is open", fd);
}

/* ---- descriptors ------------------------------------------------------- */

static void check_dup(void)
{
	int c, s, d;

	t_pair_smc(&c, &s);
	d = t_ok(dup(c));
	t_xfer(d, s, "via dup");
	t_xfer(c, s, "via original");
	t_xfer(s, d, "to dup");
	t_xfer(s, c, "to original");
	t_ok(close(c));
	expect_open(s);
	t_xfer(d, s, "after closing the original");
	t_xfer(s, d, "back");
	t_ok(close(d));
	t_expect_eof(s);
	close(s);
}

static void check_dup2_dup3(void)
{
	int c, s, p[2], n;

	t_pair_smc(&c, &s);
	t_ok(pipe(p));
	/* dup2 onto the pipe's read end: that pipe end is replaced. */
	n = t_ok(dup2(c, p[0]));
	t_assert(n == p[0]);
	t_xfer(p[0], s, "dup2");
	t_xfer(s, p[0], "dup2 back");
	t_assert(dup2(c, c) == c, "dup2 onto itself");
	t_xfer(c, s, "dup2 self");
	/* dup3 with O_CLOEXEC onto the pipe's write end. */
	n = t_ok(dup3(c, p[1], O_CLOEXEC));
	t_assert(n == p[1] && (fcntl(p[1], F_GETFD) & FD_CLOEXEC), "dup3 O_CLOEXEC");
	t_assert(!(fcntl(c, F_GETFD) & FD_CLOEXEC), "original stays inheritable");
	t_xfer(p[1], s, "dup3");
	errno = 0;
	t_assert(dup3(c, c, 0) == -1 && errno == EINVAL, "dup3 onto itself: %s", t_errname(errno));
	/* Three descriptors; the connection ends with the last one. */
	close(c);
	close(p[0]);
	expect_open(s);
	t_xfer(p[1], s, "last copy");
	close(p[1]);
	t_expect_eof(s);
	close(s);
}

static void check_fdupfd(void)
{
	int c, s, a, b;

	t_pair_smc(&c, &s);
	a = t_ok(fcntl(c, F_DUPFD, 100));
	b = t_ok(fcntl(c, F_DUPFD_CLOEXEC, 150));
	t_assert(a >= 100 && b >= 150, "F_DUPFD numbers %d %d", a, b);
	t_assert(!(fcntl(a, F_GETFD) & FD_CLOEXEC) && (fcntl(b, F_GETFD) & FD_CLOEXEC));
	t_xfer(a, s, "F_DUPFD");
	t_xfer(b, s, "F_DUPFD_CLOEXEC");
	t_xfer(s, b, "back");
	close(c);
	close(b);
	expect_open(s);
	t_xfer(a, s, "last");
	close(a);
	t_expect_eof(s);
	close(s);
}

static void check_replace(void)
{
	int c, s, p[2];

	t_pair_smc(&c, &s);
	t_ok(pipe(p));
	t_ok(dup2(p[0], c));	/* the connection's only descriptor is gone */
	t_expect_eof(s);
	/* c is a pipe now. */
	t_write_all(p[1], "p", 1);
	{
		char b;

		t_read_all(c, &b, 1);
		t_assert(b == 'p');
	}
	close(p[0]);
	close(p[1]);
	close(c);
	close(s);
}

/* ---- processes ----------------------------------------------------------- */

#define FORK_CONNS 8

/* Client for the fork server: a separate process, one request each. */
static void fork_client(uint16_t port)
{
	int i;

	for (i = 0; i < FORK_CONNS; i++) {
		char req[32], resp[64];
		int fd = t_connect(port);
		ssize_t n;

		snprintf(req, sizeof(req), "request %d", i);
		t_write_all(fd, req, strlen(req) + 1);
		n = recv(fd, resp, sizeof(resp), MSG_WAITALL);
		if (n <= 0 || strncmp(resp, "response to request ", 20) || atoi(resp + 20) != i)
			t_fail("connection %d: response %zd \"%.*s\"", i, n, n > 0 ? (int)n : 0, resp);
		close(fd);
	}
	_exit(0);
}

static void check_fork_server(void)
{
	uint16_t port;
	int lfd = t_listen(&port), i;
	pid_t client, kids[FORK_CONNS];

	client = t_fork_helper();
	if (client == 0)
		fork_client(port);
	for (i = 0; i < FORK_CONNS; i++) {
		int fd = t_accept(lfd);

		kids[i] = t_fork_helper();
		if (kids[i] == 0) {
			char req[32], resp[64];
			size_t len = 0;

			close(lfd);
			/* The parent closed its copy at once: we still serve. */
			while (len < sizeof(req)) {
				ssize_t n = read(fd, req + len, sizeof(req) - len);

				if (n <= 0)
					t_fail("child %d: read %zd (%s) after %zu bytes", i, n,
					       n ? strerror(errno) : "EOF", len);
				len += (size_t)n;
				if (memchr(req, 0, len))
					break;
			}
			t_msleep(10);
			snprintf(resp, sizeof(resp), "response to %s", req);
			t_write_all(fd, resp, strlen(resp) + 1);
			close(fd);
			_exit(0);
		}
		close(fd);	/* the fork-per-connection parent */
	}
	for (i = 0; i < FORK_CONNS; i++)
		t_wait_child(kids[i], "server child");
	t_wait_child(client, "client");
	close(lfd);
	t_smc_pairs += FORK_CONNS;
}

static void check_prefork(void)
{
	uint16_t port;
	int lfd = t_listen(&port), sv[2], c;
	pid_t kid;

	t_sync_pair(sv);
	kid = t_fork_helper();
	if (kid == 0) {
		int fd = t_accept(lfd);
		char b[16];

		close(sv[0]);
		t_read_all(fd, b, 7);
		t_assert_smc(fd);
		t_write_all(fd, "served", 6);
		t_sync_wait(sv[1]);
		close(fd);
		_exit(0);
	}
	close(lfd);	/* the parent lets go at once; the child still listens */
	close(sv[1]);
	t_msleep(20);
	c = t_connect(port);
	{
		char b[6];

		t_write_all(c, "prefork", 7);
		t_read_all(c, b, 6);
	}
	t_assert_smc(c);
	t_sync_post(sv[0]);
	t_wait_child(kid, "prefork child");
	close(c);
	close(sv[0]);
	t_smc_pairs++;
}

/* Runtime-directory entries named ln-* (listener CLC indexes). */
static int count_ln_files(void)
{
	const char *dir = getenv("USMC_RUNDIR");
	struct dirent *de;
	int n = 0;
	DIR *d;

	if (!dir || !(d = opendir(dir)))
		return 0;
	while ((de = readdir(d)))
		n += !strncmp(de->d_name, "ln-", 3);
	closedir(d);
	return n;
}

static void check_exit_unregister(void)
{
	int before = count_ln_files(), sv[2], i, c;
	uint16_t port;
	pid_t master;
	char b[8];

	t_sync_pair(sv);
	master = t_fork_helper();
	if (master == 0) {
		int lfd = t_listen(&port);
		pid_t w[2];

		close(sv[0]);
		t_write_all(sv[1], &port, sizeof(port));
		for (i = 0; i < 2; i++) {
			w[i] = t_fork_helper();
			if (w[i] == 0) {
				int fd = t_accept(lfd);

				t_read_all(fd, b, 4);
				t_write_all(fd, b, 4);
				close(fd);
				exit(0);	/* the listener still open */
			}
		}
		for (i = 0; i < 2; i++)
			t_wait_child(w[i], "worker");
		exit(0);
	}
	close(sv[1]);
	t_read_all(sv[0], &port, sizeof(port));
	if (t_accel() && !getenv("USMC_RUNDIR"))
		t_fail("exit_unregister needs USMC_RUNDIR to look into");
	if (t_accel())
		t_assert(count_ln_files() == before + 1, "the listener's index file (%d new)",
			 count_ln_files() - before);
	for (i = 0; i < 2; i++) {
		c = t_connect(port);
		t_write_all(c, "ping", 4);
		t_read_all(c, b, 4);
		t_assert_smc(c);
		close(c);
		t_smc_pairs++;
	}
	t_wait_child(master, "master");
	close(sv[0]);
	if (t_accel())
		t_assert(count_ln_files() == before, "%d listener index files left behind",
			 count_ln_files() - before);
}

static void check_shared_writer(void)
{
	int c, s, sv[2], i;
	pid_t kid;
	char buf[64];

	t_pair_smc(&c, &s);
	t_sync_pair(sv);
	kid = t_fork_helper();
	if (kid == 0) {
		close(s);
		close(sv[0]);
		for (i = 0; i < 20; i++) {
			t_sync_wait(sv[1]);
			snprintf(buf, sizeof(buf), "child %02d;", i);
			t_write_all(c, buf, strlen(buf));
			t_sync_post(sv[1]);
		}
		close(c);
		_exit(0);
	}
	close(sv[1]);
	for (i = 0; i < 20; i++) {
		snprintf(buf, sizeof(buf), "parent %02d;", i);
		t_write_all(c, buf, strlen(buf));
		t_sync_post(sv[0]);
		t_sync_wait(sv[0]);
	}
	t_wait_child(kid, "writer child");
	close(c);	/* the last copy: now the peer sees EOF */
	for (i = 0; i < 20; i++) {
		char want[64];

		snprintf(want, sizeof(want), "parent %02d;child %02d;", i, i);
		t_read_all(s, buf, strlen(want));
		if (memcmp(buf, want, strlen(want)))
			t_fail("turn %d: \"%.*s\", expected \"%s\"", i, (int)strlen(want), buf, want);
	}
	t_expect_eof(s);
	close(s);
	close(sv[0]);
}

/* The exec'ed side: greet, echo one message, then wait for EOF. */
static int exec_peer(int fd)
{
	return t_serve_child(fd, "hello from exec", 99);
}

static void exec_check(bool with_usmc)
{
	int c, s;
	pid_t kid;
	char b[16];

	t_pair_smc(&c, &s);
	kid = t_fork_helper();
	if (kid == 0) {
		char fdstr[16];
		char *argv[] = { (char *)"t_fork", (char *)"exec-peer", fdstr, NULL };

		close(s);
		snprintf(fdstr, sizeof(fdstr), "%d", c);
		if (!with_usmc)
			unsetenv("LD_PRELOAD");
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	close(c);
	t_read_all(s, b, 15);
	t_assert(!memcmp(b, "hello from exec", 15), "greeting");
	t_write_all(s, "ping", 4);
	t_read_all(s, b, 4);
	t_assert(!memcmp(b, "ping", 4), "echo");
	t_recv_pat(s, 99, 300000);
	shutdown(s, SHUT_WR);
	t_wait_child(kid, "exec'ed peer");
	close(s);
}

static void check_exec_usmc(void)
{
	exec_check(true);
}

static void check_exec_plain(void)
{
	struct t_stats before = { 0 };

	/* This check asks only that it works: whatever the counters say. */
	if (t_accel())
		t_stats_get(&before);
	exec_check(false);
	t_smc_pairs = 0;
	if (t_accel()) {
		/* Re-base the per-check counter check on what happened. */
		struct t_stats now;

		t_stats_get(&now);
		t_smc_pairs = (int)(now.smc_conns - before.smc_conns) / 2;
		t_tcp_conns = (int)(now.fallback - before.fallback);
	}
}

/*
 * The program's fork handlers close descriptors (gRPC's does, after every
 * fork): glibc runs them inside fork(), and a close must not wait for a
 * lock that the same thread holds across the fork.  vfork() too (usmc
 * makes it a fork).  The connection still works in both processes after.
 */
static int atfork_fd[3] = { -1, -1, -1 };
static int atfork_ran;

static void atfork_close_one(int i)
{
	if (atfork_fd[i] >= 0) {
		close(atfork_fd[i]);
		atfork_fd[i] = -1;
		atfork_ran++;
	}
}

static void atfork_prepare_h(void) { atfork_close_one(0); }
static void atfork_parent_h(void) { atfork_close_one(1); }
static void atfork_child_h(void) { atfork_close_one(2); }

static void check_atfork_close(void)
{
	int c, s, round;
	char b;

	t_pair_smc(&c, &s);
	t_ok(pthread_atfork(atfork_prepare_h, atfork_parent_h, atfork_child_h));
	for (round = 0; round < 2; round++) {
		pid_t kid;
		int i;

		for (i = 0; i < 3; i++)
			atfork_fd[i] = t_ok(dup(0));
		atfork_ran = 0;
		kid = round ? vfork() : fork();
		t_assert(kid >= 0, "fork: %s", t_errname(errno));
		if (kid == 0)
			_exit(round || atfork_fd[2] == -1 ? 0 : 3);
		t_wait_child(kid, round ? "vfork child" : "fork child");
		/* (vfork runs no handlers; usmc's, a fork, runs them.) */
		t_assert(round || (atfork_fd[0] == -1 && atfork_fd[1] == -1),
			 "the parent's prepare and parent handlers closed nothing");
		for (i = 0; i < 3; i++)
			if (atfork_fd[i] >= 0)
				close(atfork_fd[i]);
	}
	t_write_all(c, "c", 1);
	t_read_all(s, &b, 1);
	t_write_all(s, "s", 1);
	t_read_all(c, &b, 1);
	/* (A device that cannot share moved it to TCP at the fork.) */
	if (!t_unshared()) {
		t_assert_smc(c);
		t_assert_smc(s);
	}
	close(c);
	close(s);
}

#define NUM_PAIRS	16

/* The highest of the n lowest free descriptor numbers (what TCP would
 * hand out next, n sockets). */
static int nth_free(int n)
{
	int fds[2 * NUM_PAIRS], i, top;

	for (i = 0; i < n; i++)
		fds[i] = t_ok(dup(0));
	top = fds[n - 1];
	for (i = 0; i < n; i++)
		close(fds[i]);
	return top;
}

static void check_numbers(void)
{
	int c[NUM_PAIRS + 1], s[NUM_PAIRS + 1], lfd, top = -1, i;
	uint16_t port;

	lfd = t_listen(&port);
	/* The first connection opens what a process needs once (runtime
	 * directory, link group, counters); count from after it. */
	for (i = 0; i <= NUM_PAIRS; i++) {
		if (i == 1)
			top = nth_free(2 * NUM_PAIRS);
		t_pair_on(lfd, port, &c[i], &s[i]);
		t_ping_smc(c[i], s[i]);
		t_smc_pairs++;
	}
	for (i = 1; i <= NUM_PAIRS; i++)
		t_assert(c[i] <= top && s[i] <= top,
			 "pair %d got descriptors %d and %d; TCP gives numbers up to %d", i, c[i],
			 s[i], top);
	for (i = 0; i <= NUM_PAIRS; i++) {
		close(c[i]);
		close(s[i]);
	}
	close(lfd);
}

static void check_rlimit(void)
{
	int c0, s0, c1, s1, lfd, pad[40], i;
	struct rlimit old, rl;
	uint16_t port;

	t_ok(getrlimit(RLIMIT_NOFILE, &old));
	t_assert(old.rlim_max >= 1024, "hard limit %lu", (unsigned long)old.rlim_max);
	rl = old;
	rl.rlim_cur = 64;
	t_ok(setrlimit(RLIMIT_NOFILE, &rl));
	lfd = t_listen(&port);
	t_pair_on(lfd, port, &c0, &s0);
	t_ping_smc(c0, s0);
	rl.rlim_cur = 1024;
	t_ok(setrlimit(RLIMIT_NOFILE, &rl));
	for (i = 0; i < (int)ARRAY_LEN(pad); i++)
		pad[i] = t_ok(dup(0));
	t_pair_on(lfd, port, &c1, &s1);
	t_assert(c1 >= 32 && s1 >= 32, "sockets %d %d below the old half", c1, s1);
	t_ping_smc(c1, s1);
	t_smc_pairs += 2;
	for (i = 0; i < (int)ARRAY_LEN(pad); i++)
		close(pad[i]);
	close(c0);
	close(s0);
	close(c1);
	close(s1);
	close(lfd);
	t_ok(setrlimit(RLIMIT_NOFILE, &old));
}

#define EXIT_LISTENERS	32
#define EXIT_PAIRS	4

static int exit_fds[EXIT_LISTENERS + 2 * EXIT_PAIRS];

static void *exit_closer(void *arg)
{
	size_t i;

	(void)arg;
	for (i = 0; i < ARRAY_LEN(exit_fds); i++)
		close(exit_fds[i]);
	return NULL;
}

static void check_exit_closing(void)
{
	int round;

	for (round = 0; round < 20; round++) {
		pid_t pid = t_fork_helper();

		if (pid == 0) {
			pthread_t th;
			uint16_t port;
			int i;

			for (i = 0; i < EXIT_LISTENERS; i++)
				exit_fds[i] = t_listen(&port);
			for (i = 0; i < EXIT_PAIRS; i++) {
				t_pair_smc(&exit_fds[EXIT_LISTENERS + 2 * i],
					   &exit_fds[EXIT_LISTENERS + 2 * i + 1]);
				t_xfer(exit_fds[EXIT_LISTENERS + 2 * i],
				       exit_fds[EXIT_LISTENERS + 2 * i + 1], "x");
			}
			if (pthread_create(&th, NULL, exit_closer, NULL) || pthread_detach(th))
				_exit(T_EXIT_FAIL);
			exit(0);
		}
		t_wait_child(pid, "a process exiting while a thread closes its sockets");
		if (t_accel())
			t_smc_pairs += EXIT_PAIRS;
	}
}

static const struct t_check checks[] = {
	{ "dup", check_dup },
	{ "dup2_dup3", check_dup2_dup3 },
	{ "fdupfd", check_fdupfd },
	{ "replace", check_replace },
	{ "fork_server", check_fork_server },
	{ "prefork", check_prefork },
	{ "exit_unregister", check_exit_unregister },
	{ "exit_closing", check_exit_closing },
	{ "shared_writer", check_shared_writer },
	{ "exec_usmc", check_exec_usmc },
	{ "exec_plain", check_exec_plain },
	{ "atfork_close", check_atfork_close },
	{ "numbers", check_numbers },
	{ "rlimit", check_rlimit },
};

int main(int argc, char **argv)
{
	t_name = "t_fork";
	if (argc == 3 && !strcmp(argv[1], "exec-peer"))
		return exec_peer(atoi(argv[2]));
	signal(SIGPIPE, SIG_IGN);
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
