// SPDX-License-Identifier: MIT
/*
 * t_inherit.c - sockets that other processes inherit (fork, exec) while
 * this one goes on using its own.
 *
 *   thread_client  a forking server whose client is another thread of the
 *                  same process (Python's ForkingTCPServer with a client
 *                  thread): every child inherits the client's connection
 *                  too, serves its request and leaves with _exit(); every
 *                  request is answered, nothing crashes (children used to
 *                  die in their first call on the inherited connection:
 *                  its counters pointed into a mapping the child had
 *                  replaced); and each connection is let go by whichever
 *                  process holds it last, the child's _exit() included:
 *                  slots are used again (one link group for 100
 *                  connections) and no connection is left listed (the
 *                  child's share used to stay counted forever)
 *   thread_client_late  the same with every proposal 50 ms late
 *                  (USMC_FAULT=late, in a process of its own): a child is
 *                  forked before its connection is listed, and when that
 *                  child leaves last the entry still goes (it stayed
 *                  listed: the child's copy did not know it; one run in
 *                  hundreds of thread_client)
 *   exit_child_last  the parent closes its copy first, the child leaves
 *                  with _exit() without closing: the peer reads EOF and
 *                  the connection is no longer listed
 *   exit_child_last_tcp  the same for 70 connections of one listener
 *                  (more than a link group's 64 slots) whose server end
 *                  moved to TCP first (SO_TIMESTAMP): the child's exit,
 *                  the last close, gives the slot back, and one link group
 *                  serves them all (a moved connection's slot used to stay
 *                  busy while the server lived: a new link group every 64
 *                  connections, and forks slowed to a crawl, 7 ms each
 *                  after 2,000, on the device that moves at a fork)
 *   killed_holder  a fork-per-connection server whose child, holding the
 *                  connection alone, is killed (SIGKILL), 70 times on one
 *                  listener: the client reads EOF, and one link group
 *                  serves them all (nobody let go of a killed child's slot:
 *                  the client's slot stayed busy while the server lived, a
 *                  link group every 64 kills; now the client asks the
 *                  kernel whether any process still holds the server end)
 *   fork_churn     a fork per connection while the client thread closes
 *                  it and connects again: every child leaves cleanly, by
 *                  exit() or _exit() (exit() crashed now and then, in
 *                  about one run in three of this check, on the socket
 *                  the other thread was connecting: its copy had no slot
 *                  yet while the shared mode said proposed)
 *   backend_closes_listener  a forking server whose children close their
 *                  copy of the listener first, then serve and exit
 *                  (PostgreSQL's backends): connections after the first
 *                  child is gone are still accelerated (the master
 *                  waits in epoll, which the children close too)
 *   master_closes_listener  the reverse: the master serves through children
 *                  that exit holding the listener, then closes its copy;
 *                  a worker forked before, which kept it, goes on serving,
 *                  accelerated
 *   exec_cloexec   a child forked while we hold a connection (close-on-exec)
 *   exec_cloexec_plain  execs another program (with libusmc, or without):
 *                  the exec closes the child's copy, so our close is the
 *                  last one: the peer reads EOF and the connection is no
 *                  longer listed (the child's share, counted at the fork,
 *                  used to stay: no close protocol, the slot never freed)
 *   exec_stdio     inetd: a connection on descriptors 0 and 1 of a program
 *                  exec'ed under usmc (this one, role inetd), which does
 *                  what sshd does: dup(0), then /dev/null over 0 and 1.
 *                  stdio could use descriptors 0-2 past usmc, so the dup2
 *                  onto them moves the connection to TCP (stdio, here
 *                  peer_moved_to_tcp) and every byte arrives in order,
 *                  none twice, through the closes of the inherited copies
 *                  (each used to become a socket of its own: the first
 *                  close was the last, and reset the connection)
 *   exec_stdio_unread  the same with our bytes still unread at the move
 *
 * usage: t_inherit [check...]
 */
#include "t_util.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/mman.h>

/*
 * A process that leaves while holding the last reference to a connection
 * lets it go (close protocol, slot) only if it has one thread; under
 * TSan every process has the runtime's own thread as well, and the
 * connection is left to the kernel's FIN, as in any process with threads.
 */
#if defined(__SANITIZE_THREAD__)
#define EXIT_RELEASES	false
#else
#define EXIT_RELEASES	true
#endif

#define THREAD_REQS 100	/* more than a link group's 64 slots */

struct client_arg {
	uint16_t port;
	int n;
};

static void line_request(char *buf, size_t len, int i)
{
	snprintf(buf, len, "request %d from the client thread\n", i);
}

/* Read up to and including '\n' (one byte at a time: nothing past it). */
static size_t read_line(int fd, char *buf, size_t len)
{
	size_t got = 0;

	while (got + 1 < len) {
		ssize_t n = read(fd, buf + got, 1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			t_fail("read line: %zd (%s) after %zu bytes", n, n ? strerror(errno) : "EOF",
			       got);
		if (buf[got++] == '\n')
			break;
	}
	buf[got] = '\0';
	return got;
}

static void *client_thread(void *p)
{
	struct client_arg *a = p;
	char req[64], resp[64];
	int i;

	for (i = 0; i < a->n; i++) {
		int fd = t_connect(a->port);

		line_request(req, sizeof(req), i);
		t_write_all(fd, req, strlen(req));
		read_line(fd, resp, sizeof(resp));
		if (strcmp(req, resp))
			t_fail("request %d: answer \"%s\"", i, resp);
		t_ok(close(fd));
	}
	return NULL;
}

/*
 * A forked child maps usmc's counters again (it must not share the
 * parent's file description); connections it inherits keep pointers into
 * the old mapping.  Where the new mapping lands is up to the kernel: in
 * the old one's place when that hole is the highest that fits (usually,
 * on tmpfs), elsewhere when the hole is too tight for the alignment the
 * file system asks for, or when a higher one opened since.  This makes
 * the last case certain: a reservation taken before the counters are
 * mapped (top-down, they land below it) and freed after.
 */
#define ROOM_LEN	(64ul << 20)

static void *room_take(void)
{
	void *p = mmap(NULL, ROOM_LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static void room_free(void *room)
{
	unsigned long lo, hi, stats = 0;
	char line[512];
	FILE *f = fopen("/proc/self/maps", "r");

	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, "/stats-v") && sscanf(line, "%lx-%lx", &lo, &hi) == 2)
			stats = lo;
	if (f)
		fclose(f);
	t_info("counters mapped at %#lx, room at %p", stats, room);
	if (room)
		munmap(room, ROOM_LEN);
}

static long long lgr_created(void)
{
	char *j;
	long long n;

	if (!t_accel())
		return 0;
	j = t_stats_json();
	n = t_json_int(j, "lgr_created");
	free(j);
	return n;
}

static void check_thread_client(void)
{
	struct client_arg a = { .n = THREAD_REQS };
	pid_t kids[THREAD_REQS];
	long long lgrs = 0;
	pthread_t th;
	int lfd, c, s, i;
	char *json;

	void *room = room_take();

	/* The counters are mapped with the first connection. */
	t_pair_smc(&c, &s);
	close(c);
	close(s);
	room_free(room);
	lfd = t_listen(&a.port);
	lgrs = lgr_created();
	t_assert(!pthread_create(&th, NULL, client_thread, &a));
	for (i = 0; i < THREAD_REQS; i++) {
		char line[64];

		s = t_accept(lfd);
		kids[i] = t_fork_helper();
		if (kids[i] == 0) {
			/* The child also holds the client thread's connection
			 * (and the listener), and leaves without closing them. */
			read_line(s, line, sizeof(line));
			t_write_all(s, line, strlen(line));
			close(s);
			_exit(0);
		}
		t_ok(close(s));
	}
	t_assert(!pthread_join(th, NULL));
	for (i = 0; i < THREAD_REQS; i++)
		t_wait_child(kids[i], "server child");
	close(lfd);
	t_smc_pairs += THREAD_REQS;
	if (!t_accel() || !EXIT_RELEASES)
		return;
	/* Every connection was let go where it was last held, so its slot
	 * was used again: one link group; and none is still listed.  (A
	 * device that cannot share moved each to TCP at its fork, and a
	 * slot waits for the server child's exit: a second link group may
	 * serve meanwhile.) */
	t_assert(t_unshared() || lgr_created() - lgrs == 1, "%lld link groups for %d connections",
		 lgr_created() - lgrs, THREAD_REQS);
	json = t_stats_json();
	t_assert(strstr(json, "\"connections\": []"), "connections still listed: %.600s",
		 strstr(json, "\"connections\"") ? strstr(json, "\"connections\"") : json);
	free(json);
}

static void check_thread_client_late(void)
{
	char *argv[] = { (char *)t_name, "thread-client", NULL };
	pid_t pid = t_fork_helper();

	if (pid == 0) {
		setenv("USMC_FAULT", "late", 1);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	t_wait_child(pid, "thread_client with late proposals");
	t_tcp_conns = -1;	/* its connections are its own check's */
}

/*
 * The parent closes its copy first; the child, the last holder, leaves
 * with _exit() without closing: that is the connection's last close (the
 * peer reads EOF, the entry is no longer listed), as the kernel's close
 * of the child's descriptor is TCP's.
 */
static void check_exit_child_last(void)
{
	int c, s, sv[2];
	char m[32], b[4];
	pid_t kid;

	t_pair_smc(&c, &s);
	t_sync_pair(sv);
	kid = t_fork_helper();
	if (kid == 0) {
		close(s);
		close(sv[0]);
		t_sync_wait(sv[1]);
		_exit(0);
	}
	close(sv[1]);
	t_ok(close(c));
	t_assert(t_wait_fd(s, POLLIN, 50) == 0, "EOF while the child holds the connection");
	t_sync_post(sv[0]);
	t_wait_child(kid, "child");
	t_assert(read(s, b, sizeof(b)) == 0, "EOF after the child's _exit");
	t_assert(!EXIT_RELEASES || !strcmp(t_fd_mode(c, m, sizeof(m)), ""),
		 "client end still listed: %s", m);
	close(s);
	close(sv[0]);
}

#define MOVED_CONNS	70	/* more than a link group's 64 slots */

/* A connection on lfd with a byte through it, on shared memory. */
static void pair_smc_on(int lfd, uint16_t port, int *c, int *s)
{
	char b = 'x';

	t_pair_on(lfd, port, c, s);
	t_write_all(*c, &b, 1);
	t_read_all(*s, &b, 1);
	t_assert_smc(*s);
}

/* One link group served all MOVED_CONNS connections since before. */
static void assert_one_lgr(long long before, const char *what)
{
	if (t_accel())
		t_assert(lgr_created() - before == 1, "%lld link groups for %d connections %s",
			 lgr_created() - before, MOVED_CONNS, what);
}

static void check_exit_child_last_tcp(void)
{
	long long before;
	uint16_t port;
	int lfd, i, one = 1;

	/* Under TSan every process has a second thread, and a process with
	 * threads leaves its last copy to the kernel's FIN: nothing of the
	 * connection is let go, not even its listing (which the next
	 * connection on the same descriptor number would be taken for). */
	if (!EXIT_RELEASES) {
		t_info("exit_child_last_tcp: not under TSan");
		return;
	}
	before = lgr_created();
	lfd = t_listen(&port);

	for (i = 0; i < MOVED_CONNS; i++) {
		int c, s, sv[2];
		char b = 'x';
		pid_t kid;

		pair_smc_on(lfd, port, &c, &s);
		t_ok(setsockopt(s, SOL_SOCKET, SO_TIMESTAMP, &one, sizeof(one)));
		t_write_all(s, &b, 1);
		t_read_all(c, &b, 1);	/* the client follows it to TCP */
		t_sync_pair(sv);
		kid = t_fork_helper();
		if (kid == 0) {
			close(c);
			close(sv[0]);
			t_sync_wait(sv[1]);
			if (i & 1)
				_exit(0);
			exit(0);
		}
		close(sv[1]);
		t_ok(close(s));
		t_sync_post(sv[0]);
		t_wait_child(kid, i & 1 ? "child leaving by _exit" : "child leaving by exit");
		t_assert(read(c, &b, 1) == 0, "EOF after the child left");
		t_ok(close(c));
		close(sv[0]);
	}
	close(lfd);
	t_smc_pairs += MOVED_CONNS;
	t_tcp_conns = 2 * MOVED_CONNS;	/* unsupported_option, peer_moved_to_tcp */
	assert_one_lgr(before, "moved to TCP: slots not given back");
}

static void check_killed_holder(void)
{
	long long before = lgr_created();
	uint16_t port;
	int lfd = t_listen(&port), i;

	for (i = 0; i < MOVED_CONNS; i++) {
		int c, s, sv[2], st;
		pid_t kid;

		pair_smc_on(lfd, port, &c, &s);
		t_sync_pair(sv);
		kid = t_fork_helper();
		if (kid == 0) {
			close(c);
			close(sv[0]);
			t_sync_post(sv[1]);
			for (;;)
				pause();
		}
		close(sv[1]);
		t_sync_wait(sv[0]);
		t_ok(close(s));
		t_ok(kill(kid, SIGKILL));
		t_assert(waitpid(kid, &st, 0) == kid && WIFSIGNALED(st), "the child killed");
		t_expect_eof(c);
		t_ok(close(c));
		close(sv[0]);
	}
	close(lfd);
	t_smc_pairs += MOVED_CONNS;
	assert_one_lgr(before, "whose holders were killed");
}

static void exec_cloexec(bool plain)
{
	int c, s;
	char m[32], b[4];
	pid_t kid;

	t_pair_smc(&c, &s);
	t_ok(fcntl(c, F_SETFD, FD_CLOEXEC));
	t_ok(fcntl(s, F_SETFD, FD_CLOEXEC));
	kid = t_fork_helper();
	if (kid == 0) {
		/* This program again (a sanitizer's runtime is in it), which
		 * exits at once: with our environment, or with none. */
		char *const argv[] = { (char *)"t_inherit", (char *)"exit0", NULL };
		char *const env[] = { (char *)"PATH=/usr/bin:/bin", NULL };

		if (plain)
			execve("/proc/self/exe", argv, env);
		else
			execv("/proc/self/exe", argv);
		_exit(127);
	}
	t_wait_child(kid, "child exec'ing a program that exits");
	t_ok(close(c));
	t_assert(read(s, b, sizeof(b)) == 0, "EOF after our close");
	t_assert(!strcmp(t_fd_mode(c, m, sizeof(m)), ""), "client end still listed: %s", m);
	close(s);
}

static void check_exec_cloexec(void)
{
	exec_cloexec(false);
}

static void check_exec_cloexec_plain(void)
{
	exec_cloexec(true);
}

/*
 * Forks while another thread closes and connects:
 * every child must be able to leave, by exit() or _exit(), without
 * touching what it only has half of (its copy of a socket another thread
 * was connecting has the slot missing while the shared mode already
 * says proposed: exit() crashed looking at the answer).
 */
#define CHURN_CONNS	2000

static void *churn_client(void *p)
{
	uint16_t port = *(uint16_t *)p;
	char b = 'x';
	int i;

	for (i = 0; i < CHURN_CONNS; i++) {
		int fd = t_connect(port);

		t_write_all(fd, &b, 1);
		t_read_all(fd, &b, 1);
		t_ok(close(fd));
	}
	return NULL;
}

static void check_fork_churn(void)
{
	uint16_t port;
	int lfd, i;
	pthread_t cl;

	/* Not under TSan: the library's process-private locks are set up
	 * again in a fork child (lgr.c, epoll, the descriptor table), which
	 * TSan reports as a race with the parent's other threads, and exit()
	 * sleeps a second there. */
#if defined(__SANITIZE_THREAD__)
	if (true) {
		t_info("fork_churn: not under TSan");
		return;
	}
#endif
	lfd = t_listen(&port);
	t_assert(!pthread_create(&cl, NULL, churn_client, &port));
	for (i = 0; i < CHURN_CONNS; i++) {
		int s = t_accept(lfd);
		pid_t kid;
		char b;

		t_read_all(s, &b, 1);
		t_write_all(s, &b, 1);
		/* The client closes and connects again while we fork. */
		kid = fork();
		if (kid < 0)
			t_fail("fork: %s", strerror(errno));
		if (kid == 0) {
			if (i & 1)
				_exit(0);
			exit(0);
		}
		t_ok(close(s));
		t_wait_child(kid, i & 1 ? "child leaving by _exit" : "child leaving by exit");
	}
	t_assert(!pthread_join(cl, NULL));
	close(lfd);
	t_smc_pairs += CHURN_CONNS;
}

/* ---- listeners ------------------------------------------------------------- */

#define BACKENDS 3

/*
 * One connection to lfd, served by a forked child; close_listener: the
 * child closes its copy of the listener first (PostgreSQL's backends).
 */
static void backend_conn(int lfd, uint16_t port, bool close_listener)
{
	int c = t_connect(port), s = t_accept(lfd);
	pid_t kid = t_fork_helper();
	char b[4];

	if (kid == 0) {
		if (close_listener)
			close(lfd);
		close(c);
		t_read_all(s, b, 4);
		t_write_all(s, b, 4);
		close(s);
		exit(0);	/* destructors run, as at a backend's proc_exit */
	}
	close(s);
	t_write_all(c, "ping", 4);
	t_read_all(c, b, 4);
	t_assert(!memcmp(b, "ping", 4), "echo");
	t_assert_smc(c);
	t_wait_child(kid, "backend");
	close(c);
	t_smc_pairs++;
}

static void check_backend_closes_listener(void)
{
	struct epoll_event ev = { .events = EPOLLIN };
	uint16_t port;
	int lfd = t_listen(&port), ep = t_ok(epoll_create1(EPOLL_CLOEXEC)), i;

	/* The postmaster waits in epoll (PostgreSQL 16 on); its children
	 * close that too. */
	ev.data.fd = lfd;
	t_ok(epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev));
	for (i = 0; i < BACKENDS; i++) {
		int c = t_connect(port), s, n;
		pid_t kid;
		char b[4];

		n = epoll_wait(ep, &ev, 1, 10000);
		t_assert(n == 1 && ev.data.fd == lfd, "listener ready: %d", n);
		s = t_accept(lfd);
		kid = t_fork_helper();
		if (kid == 0) {
			close(ep);
			close(lfd);
			close(c);
			t_read_all(s, b, 4);
			t_write_all(s, b, 4);
			close(s);
			exit(0);	/* destructors run, as at a backend's proc_exit */
		}
		close(s);
		t_write_all(c, "ping", 4);
		t_read_all(c, b, 4);
		t_assert(!memcmp(b, "ping", 4), "echo");
		t_assert_smc(c);
		t_wait_child(kid, "backend");
		close(c);
		t_smc_pairs++;
	}
	close(ep);
	close(lfd);
}

static void check_master_closes_listener(void)
{
	uint16_t port;
	int lfd = t_listen(&port), sv[2], i;
	pid_t worker;
	char b[4];

	t_sync_pair(sv);
	worker = t_fork_helper();
	if (worker == 0) {
		close(sv[0]);
		t_sync_wait(sv[1]);
		for (i = 0; i < BACKENDS; i++) {
			int s = t_accept(lfd);

			t_read_all(s, b, 4);
			t_write_all(s, b, 4);
			close(s);
		}
		close(lfd);
		exit(0);
	}
	close(sv[1]);
	/* Served here first, by children that leave with the listener. */
	for (i = 0; i < BACKENDS; i++)
		backend_conn(lfd, port, false);
	close(lfd);
	t_sync_post(sv[0]);
	for (i = 0; i < BACKENDS; i++) {
		int c = t_connect(port);

		t_write_all(c, "pong", 4);
		t_read_all(c, b, 4);
		t_assert(!memcmp(b, "pong", 4), "echo from the worker");
		t_assert_smc(c);
		close(c);
		t_smc_pairs++;
	}
	t_wait_child(worker, "worker");
	close(sv[0]);
}

/* ---- exec ---------------------------------------------------------------- */

/* Role inetd: the connection is on 0 and 1; unread: "hello" waits in it. */
static int inetd_peer(bool unread)
{
	int fd = t_ok(dup(0)), null = t_ok(open("/dev/null", O_RDWR));
	char b[8];

	t_ok(dup2(null, 0));
	t_ok(dup2(null, 1));
	close(null);
	if (unread) {
		t_read_all(fd, b, 5);
		t_assert(!memcmp(b, "hello", 5), "inetd: greeting");
	}
	t_write_all(fd, "world", 5);
	t_read_all(fd, b, 4);
	t_assert(!memcmp(b, "bye!", 4), "inetd: last words");
	t_assert(read(fd, b, sizeof(b)) == 0, "inetd: EOF");
	close(fd);
	return 0;
}

static void exec_stdio(bool unread)
{
	pid_t kid;
	int c, s;
	char b[8];

	t_pair_smc(&c, &s);
	if (unread)
		t_write_all(s, "hello", 5);
	kid = t_fork_helper();
	if (kid == 0) {
		char *argv[] = { (char *)"t_inherit", (char *)"inetd", (char *)(unread ? "1" : "0"),
				 NULL };

		t_ok(dup2(c, 0));
		t_ok(dup2(c, 1));
		close(c);
		close(s);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	close(c);
	t_read_all(s, b, 5);
	t_assert(!memcmp(b, "world", 5), "answer");
	t_expect_moved(s, "peer_moved_to_tcp");
	t_tcp_conns = 2;	/* stdio there, peer_moved_to_tcp here */
	t_write_all(s, "bye!", 4);
	t_ok(shutdown(s, SHUT_WR));
	t_assert(read(s, b, sizeof(b)) == 0, "EOF after the exec'ed peer closed");
	t_wait_child(kid, "exec'ed inetd peer");
	close(s);
}

static void check_exec_stdio(void)
{
	exec_stdio(false);
}

static void check_exec_stdio_unread(void)
{
	exec_stdio(true);
}

static const struct t_check checks[] = {
	{ "thread_client", check_thread_client },
	{ "thread_client_late", check_thread_client_late },
	{ "exit_child_last", check_exit_child_last },
	{ "exit_child_last_tcp", check_exit_child_last_tcp },
	{ "killed_holder", check_killed_holder },
	{ "exec_cloexec", check_exec_cloexec },
	{ "exec_cloexec_plain", check_exec_cloexec_plain },
	{ "fork_churn", check_fork_churn },
	{ "backend_closes_listener", check_backend_closes_listener },
	{ "master_closes_listener", check_master_closes_listener },
	{ "exec_stdio", check_exec_stdio },
	{ "exec_stdio_unread", check_exec_stdio_unread },
};

int main(int argc, char **argv)
{
	t_name = "t_inherit";
	if (argc == 2 && !strcmp(argv[1], "exit0"))
		return 0;
	if (argc == 2 && !strcmp(argv[1], "thread-client")) {
		signal(SIGPIPE, SIG_IGN);
		check_thread_client();
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "inetd"))
		return inetd_peer(atoi(argv[2]));
	signal(SIGPIPE, SIG_IGN);
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
