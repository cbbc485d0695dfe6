// SPDX-License-Identifier: MIT
/*
 * t_relisten.c - a listening address that outlives the process serving it:
 * a parent binds, a forked child listens and serves, the child dies, and
 * the parent forks a new child that calls listen() again on the same,
 * inherited socket.  (Varnish's manager does the same with a socket it
 * binds again to the address for each new cache child; both leave the
 * dead child's listener record next to the new one.)
 *
 *   after_kill   the first child is killed (SIGKILL: no destructor runs,
 *                its listener record stays in the registry); connections
 *                to the second child are on shared memory (before: every
 *                client saw two records for the address and stayed on TCP,
 *                uncertain_route, and the server said peer_not_usmc)
 *   after_kill_rebind  the same, but the parent closes the socket once the
 *                child is gone and binds a new one to the same address for
 *                the second child (Varnish's manager)
 *   after_exit   the same with a first child that exits normally with the
 *                listener open (it unregisters on its way out)
 *   churn        one listener per connection, each closed after one
 *                exchange on shared memory (FTP data connections, test
 *                suites): the descriptors usmc keeps do not grow with the
 *                number of listeners (before: one per listener connected
 *                to, EMFILE where TCP ran on)
 *   shut_listener  shutdown(SHUT_RD) stops a listener (the kernel
 *                refuses its address, the socket stays bound); a new
 *                listener bound to the address next to it serves on shared
 *                memory (before: the stopped one's record stayed, and every
 *                client saw two listeners, uncertain_route)
 *
 * Each check runs in its own process; the counters must show exactly the
 * expected connections on shared memory and no fallback.
 *
 * usage: t_relisten [check...]
 */
#include "t_util.h"

#include <dirent.h>

#define CONNS 3

/* Bound (to *port, or a free one if 0), not listening: what the parent
 * hands to each child. */
static int bound_socket(uint16_t *port)
{
	struct sockaddr_in a = t_addr(*port);
	int fd = t_ok(socket(AF_INET, SOCK_STREAM, 0)), on = 1;

	t_ok(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)));
	t_ok(bind(fd, (struct sockaddr *)&a, sizeof(a)));
	*port = t_sock_port(fd, false);
	return fd;
}

/*
 * The child: listen() on the inherited socket, tell the parent, echo one
 * 4-byte message on each of n connections, then either wait on the sync
 * channel (*sync, kept open by the parent until it kills the child) or
 * exit.
 */
static pid_t serve_child(int lfd, int n, bool linger, int *sync)
{
	int sv[2], i;
	pid_t pid;

	t_sync_pair(sv);
	pid = t_fork_helper();
	if (pid == 0) {
		close(sv[0]);
		t_ok(listen(lfd, 64));
		t_sync_post(sv[1]);
		for (i = 0; i < n; i++) {
			int fd = t_accept(lfd);
			char b[4];

			t_read_all(fd, b, sizeof(b));
			t_write_all(fd, b, sizeof(b));
			close(fd);
		}
		if (linger)
			t_sync_wait(sv[1]);	/* until killed */
		exit(0);			/* the listener still open */
	}
	close(sv[1]);
	t_sync_wait(sv[0]);
	*sync = sv[0];
	return pid;
}

static void echo_on_smc(uint16_t port)
{
	int c = t_connect(port);
	char b[4];

	t_write_all(c, "ping", 4);
	t_read_all(c, b, 4);
	t_assert(!memcmp(b, "ping", 4));
	t_assert_smc(c);
	close(c);
	t_smc_pairs++;
}

static void restart(bool kill_first, bool rebind)
{
	uint16_t port = 0;
	int lfd = bound_socket(&port), st, i, sync[2];
	pid_t first, second;

	first = serve_child(lfd, 1, kill_first, &sync[0]);
	echo_on_smc(port);
	if (kill_first)
		t_ok(kill(first, SIGKILL));
	while (waitpid(first, &st, 0) < 0)
		t_assert(errno == EINTR, "waitpid: %s", strerror(errno));
	t_assert(kill_first ? WIFSIGNALED(st) : WIFEXITED(st) && !WEXITSTATUS(st));
	close(sync[0]);
	if (rebind) {
		close(lfd);
		lfd = bound_socket(&port);
	}

	second = serve_child(lfd, CONNS, false, &sync[1]);
	for (i = 0; i < CONNS; i++)
		echo_on_smc(port);
	t_wait_child(second, "second child");
	close(sync[1]);
	close(lfd);
}

static void check_after_kill(void)
{
	restart(true, false);
}

static void check_after_kill_rebind(void)
{
	restart(true, true);
}

static void check_after_exit(void)
{
	restart(false, false);
}

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	t_assert(d, "opendir /proc/self/fd: %s", t_errname(errno));
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static void churn(int rounds)
{
	int i;

	for (i = 0; i < rounds; i++) {
		int c, s;

		t_pair_smc(&c, &s);	/* a listener of its own, closed */
		close(c);
		close(s);
	}
}

static void check_churn(void)
{
	int before, after;

	churn(40);
	before = open_fds();
	churn(300);
	after = open_fds();
	t_assert(after - before < 16, "open descriptors %d after 40 listeners, %d after 340",
		 before, after);
}

static void check_shut_listener(void)
{
	struct sockaddr_in a;
	uint16_t port = 0;
	int old = bound_socket(&port), lfd, c, s;

	t_ok(listen(old, 16));
	t_ok(shutdown(old, SHUT_RD));
	a = t_addr(port);
	c = t_ok(socket(AF_INET, SOCK_STREAM, 0));
	t_assert(connect(c, (struct sockaddr *)&a, sizeof(a)) && errno == ECONNREFUSED,
		 "connect to a listener shut down: %s", t_errname(errno));
	close(c);
	lfd = bound_socket(&port);
	t_ok(listen(lfd, 16));
	c = t_connect(port);
	s = t_accept(lfd);
	t_ping_smc(c, s);
	t_smc_pairs++;
	close(c);
	close(s);
	close(lfd);
	close(old);
}

static const struct t_check checks[] = {
	{ "after_kill", check_after_kill },
	{ "after_kill_rebind", check_after_kill_rebind },
	{ "after_exit", check_after_exit },
	{ "churn", check_churn },
	{ "shut_listener", check_shut_listener },
};

int main(int argc, char **argv)
{
	t_name = "t_relisten";
	signal(SIGPIPE, SIG_IGN);
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
