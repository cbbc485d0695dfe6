// SPDX-License-Identifier: MIT
/*
 * t_spawn.c - starting children while holding connections: vfork(), and
 * glibc's posix_spawn() (its file actions and exec run inside glibc,
 * without libusmc); and poll() on a connection whose peer moves it to TCP.
 *
 *   vfork_spawn    what a spawning library does between vfork() and exec
 *                  (Python's subprocess): the child closes every descriptor
 *                  above 2 with close_range() and exits; then one closes the
 *                  server end and execs a peer (role peer) that serves the
 *                  client end, which the parent closed at once.  The child
 *                  used to run in the parent's memory, and what it did
 *                  through libusmc happened to the parent: every connection
 *                  reset.  All of it stays on shared memory
 *   spawn_dup2     a connection handed to a posix_spawn child by a dup2
 *                  file action (this program, role peer, serves it) while
 *                  the parent closes its copy at once: it moves to TCP
 *                  before the spawn (spawned_child at our end,
 *                  peer_moved_to_tcp at the other), every byte in order,
 *                  nothing lost, EOF only when the child closes
 *   spawn_stdio    the same with the connection as the child's stdin and
 *                  stdout (role stdio: it writes, then copies 9 bytes from
 *                  stdin to stderr), a close-on-exec one
 *   spawn_keep     connections without a file action stay on shared
 *                  memory around a spawn: close-on-exec ones, one merely
 *                  inherited (the child adopts it and leaves), one whose
 *                  dup2 was recorded for a destroyed file-actions object
 *   spawn_inherit  a connection merely inherited (no file action) by a
 *                  posix_spawn child that serves it by number (role peer)
 *                  while we close our copy at once: the child adopts it,
 *                  on shared memory (it used to read nothing: the child
 *                  had no rings, the peer wrote there)
 *   listener_spawn a listening socket handed to a posix_spawn child by a
 *                  dup2 action (role acceptor: accepts one connection,
 *                  reads "ping", answers "pong") while we keep our copy:
 *                  our client, speaking first, must get its answer; the
 *                  child cannot answer a proposal, so the listener is
 *                  unpublished and the client goes over TCP (it used to
 *                  propose and wait forever)
 *   listener_exec_plain  the same handed across an exec without libusmc
 *   poll_follow    poll() asleep on a connection when its peer moves it
 *                  to TCP (exec of a program without libusmc): the TCP
 *                  bytes that follow must wake it (poll kept computing
 *                  the connection's readiness from the rings, and timed
 *                  out with the bytes waiting)
 *   epoll_follow   the same with epoll_wait(), level-triggered
 *   epoll_follow_et  and edge-triggered
 *
 * usage: t_spawn [check...]
 */
#include "t_util.h"

#include <spawn.h>
#include <sys/epoll.h>

extern char **environ;

/* The child's side: greet, echo four bytes, send a pattern, wait for EOF. */
static int peer(int fd)
{
	return t_serve_child(fd, "hello from child", 42);
}

/* Role stdio: greet on stdout, copy 9 bytes of stdin to stderr. */
static int stdio_peer(void)
{
	char b[9];

	t_write_all(1, "from the child", 14);
	t_read_all(0, b, sizeof(b));
	t_write_all(2, b, sizeof(b));
	return 0;
}

/* An epoll instance talk() waits on instead of poll(), or -1, and
 * whether it is edge-triggered. */
static int talk_ep = -1;
static bool talk_et;

/* Role acceptor: one connection on the listener at lfd, "ping" -> "pong";
 * first a byte on readyfd (if >= 0): the new image runs. */
static int acceptor(int lfd, int readyfd)
{
	char b[4];
	int fd;

	if (readyfd >= 0) {
		t_write_all(readyfd, "r", 1);
		close(readyfd);
	}
	fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		t_fail("acceptor: accept: %s", strerror(errno));
	t_read_all(fd, b, 4);
	if (memcmp(b, "ping", 4))
		t_fail("acceptor: read \"%.4s\"", b);
	t_write_all(fd, "pong", 4);
	close(fd);
	return 0;
}

/* Our client against a listener a child serves: we speak first. */
static void client_to_child(uint16_t port, pid_t kid)
{
	int c = t_connect(port);
	char b[4];

	t_write_all(c, "ping", 4);
	t_read_all(c, b, 4);
	t_assert(!memcmp(b, "pong", 4), "answer \"%.4s\"", b);
	t_wait_child(kid, "acceptor");
	close(c);
}

/* Wait for fd to be readable as the application would: poll(), or
 * epoll_wait() on talk_ep. */
static void poll_in(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	struct epoll_event ev;
	int rc;

	if (talk_ep >= 0) {
		char b;

		/* Edge-triggered: what already arrived raises no new edge, so
		 * an application drains first, as here. */
		if (talk_et && recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 1)
			return;
		rc = epoll_wait(talk_ep, &ev, 1, 10000);
		if (rc != 1 || !(ev.events & EPOLLIN))
			t_fail("epoll_wait for fd %d: rc %d events 0x%x (bytes are on their way)",
			       fd, rc, rc == 1 ? ev.events : 0);
		return;
	}
	rc = poll(&p, 1, 10000);
	if (rc != 1 || !(p.revents & POLLIN))
		t_fail("poll on fd %d: rc %d revents 0x%x (bytes are on their way)", fd, rc,
		       p.revents);
}

/* Our side of the conversation with peer(); polls before every read;
 * our end ends in mode want ("TCP" after a move, "SMCD"). */
static void talk_mode(int s, pid_t kid, const char *want)
{
	char b[16], mode[16];

	poll_in(s);
	t_read_all(s, b, 16);
	t_assert(!memcmp(b, "hello from child", 16), "greeting");
	t_write_all(s, "ping", 4);
	poll_in(s);
	t_read_all(s, b, 4);
	t_assert(!memcmp(b, "ping", 4), "echo");
	poll_in(s);
	t_recv_pat(s, 42, 300000);
	if (t_accel())
		t_assert(!strcmp(t_fd_mode(s, mode, sizeof(mode)), want),
			 "our end in mode %s (mode \"%s\")", want, mode);
	shutdown(s, SHUT_WR);
	t_wait_child(kid, "child");
	close(s);
}

static void talk(int s, pid_t kid)
{
	talk_mode(s, kid, "TCP");
}

static pid_t spawn_peer(int child_fd, const posix_spawn_file_actions_t *fa)
{
	char fdstr[16];
	char *argv[] = { (char *)"t_spawn", (char *)"peer", fdstr, NULL };
	pid_t pid;
	int rc;

	snprintf(fdstr, sizeof(fdstr), "%d", child_fd);
	rc = posix_spawn(&pid, "/proc/self/exe", fa, NULL, argv, environ);
	if (rc)
		t_fail("posix_spawn: %s", strerror(rc));
	return pid;
}

static void check_vfork_spawn(void)
{
	int c, s, c2, s2;
	pid_t kid;

	t_pair_smc(&c, &s);
	t_pair_smc(&c2, &s2);
	kid = vfork();
	if (kid < 0)
		t_fail("vfork: %s", strerror(errno));
	if (kid == 0) {
		close_range(3, ~0U, 0);
		_exit(0);
	}
	t_wait_child(kid, "vfork child (close_range)");
	t_xfer(c2, s2, "after the vfork child");
	t_xfer(s2, c2, "and back");
	t_assert_smc(c2);
	t_assert_smc(s2);
	close(c2);
	t_assert(read(s2, &kid, 1) == 0, "EOF");
	close(s2);

	kid = vfork();
	if (kid < 0)
		t_fail("vfork: %s", strerror(errno));
	if (kid == 0) {
		char fdstr[16];
		char *argv[] = { (char *)"t_spawn", (char *)"peer", fdstr, NULL };

		close(s);
		snprintf(fdstr, sizeof(fdstr), "%d", c);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	close(c);	/* as spawners do */
	talk_mode(s, kid, "SMCD");
}

static void check_spawn_dup2(void)
{
	posix_spawn_file_actions_t fa;
	int c, s;
	pid_t kid;

	t_pair_smc(&c, &s);
	t_ok(fcntl(s, F_SETFD, FD_CLOEXEC));
	t_assert(!posix_spawn_file_actions_init(&fa), "file actions");
	t_assert(!posix_spawn_file_actions_adddup2(&fa, c, 77), "adddup2");
	kid = spawn_peer(77, &fa);
	posix_spawn_file_actions_destroy(&fa);
	close(c);	/* the child's copy keeps the connection */
	talk(s, kid);
	t_tcp_conns = 2;	/* spawned_child here, peer_moved_to_tcp there */
}

static void check_spawn_stdio(void)
{
	char *argv[] = { (char *)"t_spawn", (char *)"stdio", NULL };
	posix_spawn_file_actions_t fa;
	int c, s, err[2];
	char b[16];
	pid_t kid;

	t_pair_smc(&c, &s);
	t_ok(fcntl(c, F_SETFD, FD_CLOEXEC));
	t_ok(fcntl(s, F_SETFD, FD_CLOEXEC));
	t_ok(pipe2(err, O_CLOEXEC));
	t_assert(!posix_spawn_file_actions_init(&fa), "file actions");
	t_assert(!posix_spawn_file_actions_adddup2(&fa, c, 0) &&
		 !posix_spawn_file_actions_adddup2(&fa, c, 1) &&
		 !posix_spawn_file_actions_adddup2(&fa, err[1], 2), "adddup2");
	t_assert(!posix_spawn(&kid, "/proc/self/exe", &fa, NULL, argv, environ), "posix_spawn");
	posix_spawn_file_actions_destroy(&fa);
	close(c);
	close(err[1]);
	poll_in(s);
	t_recv_exact(s, "from the child", 14);
	t_write_all(s, "to the ch", 9);	/* all of it: unread bytes would make its close an RST */
	t_read_all(err[0], b, 9);
	t_assert(!memcmp(b, "to the ch", 9), "the child read \"%.9s\"", b);
	t_wait_child(kid, "stdio child");
	close(err[0]);
	t_assert(read(s, b, 1) == 0, "EOF once the child is gone");
	close(s);
	t_tcp_conns = 2;
}

static void check_spawn_keep(void)
{
	char *argv[] = { (char *)"t_spawn", (char *)"nop", NULL };
	posix_spawn_file_actions_t fa;
	int c, s, c2, s2;
	pid_t kid;

	t_pair_smc(&c, &s);
	t_pair_smc(&c2, &s2);
	t_ok(fcntl(c, F_SETFD, 0));	/* inherited, unused by the child */
	t_ok(fcntl(s, F_SETFD, FD_CLOEXEC));
	t_ok(fcntl(c2, F_SETFD, FD_CLOEXEC));
	t_ok(fcntl(s2, F_SETFD, FD_CLOEXEC));
	/* A dup2 action recorded for another object, and one destroyed. */
	t_assert(!posix_spawn_file_actions_init(&fa), "file actions");
	t_assert(!posix_spawn_file_actions_adddup2(&fa, c2, 60), "adddup2");
	posix_spawn_file_actions_destroy(&fa);
	t_assert(!posix_spawn_file_actions_init(&fa), "file actions");
	t_assert(!posix_spawn_file_actions_addclose(&fa, 60), "addclose");
	t_assert(!posix_spawnp(&kid, "/proc/self/exe", &fa, NULL, argv, environ), "posix_spawnp");
	posix_spawn_file_actions_destroy(&fa);
	t_wait_child(kid, "nop child");
	t_xfer(c, s, "after the spawn");
	t_xfer(s2, c2, "and here");
	t_assert_smc(c);
	t_assert_smc(s);
	t_assert_smc(c2);
	t_assert_smc(s2);
	close(c);
	close(s);
	close(c2);
	close(s2);
}

/* A child (role peer) given the connection at c only by inheritance, in
 * environment env; our copy closed at once. */
static void inherit(char *const env[], const char *want)
{
	posix_spawn_file_actions_t fa;
	char fdstr[16];
	char *argv[] = { (char *)"t_spawn", (char *)"peer", fdstr, NULL };
	int c, s, rc;
	pid_t kid;

	t_pair_smc(&c, &s);
	t_ok(fcntl(c, F_SETFD, 0));
	t_ok(fcntl(s, F_SETFD, FD_CLOEXEC));
	snprintf(fdstr, sizeof(fdstr), "%d", c);
	/* A close action for another number: recorded, not ours. */
	t_assert(!posix_spawn_file_actions_init(&fa), "file actions");
	t_assert(!posix_spawn_file_actions_addclose(&fa, 99), "addclose");
	rc = posix_spawn(&kid, "/proc/self/exe", &fa, NULL, argv, env);
	posix_spawn_file_actions_destroy(&fa);
	if (rc)
		t_fail("posix_spawn: %s", strerror(rc));
	close(c);	/* the child's copy keeps the connection */
	talk_mode(s, kid, want);
}

static void check_spawn_inherit(void)
{
	inherit(environ, "SMCD");
}


static void check_listener_spawn(void)
{
	char *argv[] = { (char *)"t_spawn", (char *)"acceptor", (char *)"40", NULL };
	posix_spawn_file_actions_t fa;
	uint16_t port;
	int lfd = t_listen(&port);
	pid_t kid;

	t_ok(fcntl(lfd, F_SETFD, FD_CLOEXEC));
	t_assert(!posix_spawn_file_actions_init(&fa), "file actions");
	t_assert(!posix_spawn_file_actions_adddup2(&fa, lfd, 40), "adddup2");
	t_assert(!posix_spawn(&kid, "/proc/self/exe", &fa, NULL, argv, environ), "posix_spawn");
	posix_spawn_file_actions_destroy(&fa);
	client_to_child(port, kid);	/* our copy stays open meanwhile */
	close(lfd);
	t_tcp_conns = 1;	/* our client: peer_not_usmc */
}

static void check_listener_exec_plain(void)
{
	uint16_t port;
	int lfd = t_listen(&port), ready[2];
	pid_t kid;
	char b;

	t_ok(pipe(ready));
	kid = t_fork_helper();
	if (kid == 0) {
		char fdstr[16], readystr[16];
		char *argv[] = { (char *)"t_spawn", (char *)"acceptor", fdstr, readystr, NULL };

		close(ready[0]);
		snprintf(fdstr, sizeof(fdstr), "%d", lfd);
		snprintf(readystr, sizeof(readystr), "%d", ready[1]);
		unsetenv("LD_PRELOAD");
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	/* The new image runs: the exec (and the unpublishing in it) is done. */
	close(ready[1]);
	t_read_all(ready[0], &b, 1);
	close(ready[0]);
	client_to_child(port, kid);
	close(lfd);
	t_tcp_conns = 1;
}

static void follow(uint32_t epoll_events)
{
	int c, s;
	pid_t kid;

	t_pair_smc(&c, &s);
	if (epoll_events) {
		struct epoll_event ev = { .events = epoll_events, .data.fd = s };

		talk_ep = t_ok(epoll_create1(EPOLL_CLOEXEC));
		talk_et = epoll_events & EPOLLET;
		t_ok(epoll_ctl(talk_ep, EPOLL_CTL_ADD, s, &ev));
	}
	kid = t_fork_helper();
	if (kid == 0) {
		char fdstr[16];
		char *argv[] = { (char *)"t_spawn", (char *)"peer", fdstr, NULL };

		close(s);
		snprintf(fdstr, sizeof(fdstr), "%d", c);
		unsetenv("LD_PRELOAD");
		/* Let the parent fall asleep in poll() first: the move to
		 * TCP happens inside execv() (exec.c). */
		usleep(100000);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	close(c);
	talk(s, kid);
	t_tcp_conns = 2;	/* exec_without_usmc there, peer_moved_to_tcp here */
	if (talk_ep >= 0)
		close(talk_ep);
	talk_ep = -1;
}

static void check_poll_follow(void)
{
	follow(0);
}

static void check_epoll_follow(void)
{
	follow(EPOLLIN);
}

static void check_epoll_follow_et(void)
{
	follow(EPOLLIN | EPOLLET);
}

static const struct t_check checks[] = {
	{ "vfork_spawn", check_vfork_spawn },
	{ "spawn_dup2", check_spawn_dup2 },
	{ "spawn_stdio", check_spawn_stdio },
	{ "spawn_keep", check_spawn_keep },
	{ "spawn_inherit", check_spawn_inherit },
	{ "listener_spawn", check_listener_spawn },
	{ "listener_exec_plain", check_listener_exec_plain },
	{ "poll_follow", check_poll_follow },
	{ "epoll_follow", check_epoll_follow },
	{ "epoll_follow_et", check_epoll_follow_et },
};

int main(int argc, char **argv)
{
	t_name = "t_spawn";
	if (argc == 3 && !strcmp(argv[1], "peer"))
		return peer(atoi(argv[2]));
	if ((argc == 3 || argc == 4) && !strcmp(argv[1], "acceptor"))
		return acceptor(atoi(argv[2]), argc == 4 ? atoi(argv[3]) : -1);
	if (argc == 2 && !strcmp(argv[1], "stdio"))
		return stdio_peer();
	if (argc == 2 && !strcmp(argv[1], "nop"))
		return 0;
	signal(SIGPIPE, SIG_IGN);
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
