// SPDX-License-Identifier: MIT
/*
 * t_lshare.c - one listening socket, several processes that each listen on
 * it (src/listener.c): an acceptor (this process) binds a socket and hands
 * it, bound but not listening, to workers (this program exec'ed, role
 * worker, with or without libusmc) with SCM_RIGHTS, as node's cluster does
 * with schedulingPolicy = none, or forks them.  Every worker calls listen()
 * on it and serves what it accepts; the kernel gives each connection to
 * whichever accepts first.  A client (role client, under usmc) makes
 * CONNS connections one after the other, each a request of REQ pattern
 * bytes answered by RESP pattern bytes, every byte checked, then EOF.
 *
 *   passed         two workers under usmc, passed the bound socket as
 *                  their first message once they are up (they never read
 *                  their channel before: announced at exec, as node's
 *                  workers are); the acceptor keeps its copy.  Every
 *                  connection on shared memory (it used to be TCP: the
 *                  workers never published the socket)
 *   passed_close   the same, the acceptor closes its copy once passed
 *   forked         two workers forked after the bind (a pre-fork server
 *                  that listens in each child): every connection on
 *                  shared memory (each child used to publish its own
 *                  index, two records for one address: TCP)
 *   exec_inherit   two workers inherit the bound socket across fork and
 *                  exec, a third is passed it: all three on one publication
 *   acceptor_too   one worker listens, then the acceptor, which never
 *                  called listen(), accepts on the socket too: both serve
 *                  on shared memory
 *   plain_holder   one worker under usmc, one without: nothing may be
 *                  published (a client proposing to a connection the plain
 *                  worker takes would wait forever), every connection on
 *                  TCP and served
 *   plain_later    a worker under usmc listens and serves on shared
 *                  memory; then the socket goes to a worker without usmc:
 *                  the publication is taken down, later connections are
 *                  TCP, whoever takes them
 *
 * The counters must show exactly the connections expected on shared
 * memory, and no reset.
 *
 * usage: t_lshare [check...]
 */
#include "t_util.h"

#define CONNS	8
#define REQ	50000
#define RESP	70000
#define PAT_REQ	21
#define PAT_RESP 22

#define W_PLAIN	0x1	/* worker without libusmc */
#define W_EXEC	0x2	/* the socket inherited across exec (T_LFD), not passed */

/* A socket bound to 127.0.0.1 (free port in *port), not listening; non-
 * blocking, as event loops make it: every holder polls, then accepts. */
static int bound_socket(uint16_t *port)
{
	struct sockaddr_in a = t_addr(0);
	int fd = t_ok(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0)), on = 1;

	t_ok(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)));
	t_ok(bind(fd, (struct sockaddr *)&a, sizeof(a)));
	*port = t_sock_port(fd, false);
	return fd;
}

/* One connection accepted on lfd, if the kernel had one for us: served. */
static bool serve_one(int lfd, bool smc)
{
	int fd = accept(lfd, NULL, NULL);

	if (fd < 0) {
		t_assert(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR,
			 "accept: %s", strerror(errno));
		return false;
	}
	t_recv_pat(fd, PAT_REQ, REQ);
	if (smc)
		t_assert_smc(fd);
	t_send_pat(fd, PAT_RESP, RESP);
	close(fd);
	return true;
}

/*
 * Serve connections on lfd until a byte comes on chan, then answer with
 * how many were served.  smc: each must be on shared memory.
 */
static void serve_until_told(int lfd, int chan, bool smc)
{
	uint32_t served = 0;
	char b;

	for (;;) {
		struct pollfd p[2] = { { .fd = lfd, .events = POLLIN }, { .fd = chan, .events = POLLIN } };

		if (poll(p, 2, -1) < 0) {
			t_assert(errno == EINTR, "poll: %s", strerror(errno));
			continue;
		}
		if (p[0].revents & POLLIN)
			served += serve_one(lfd, smc);
		else if (p[1].revents)
			break;
	}
	t_sync_recv(chan, &b, 1);
	t_sync_send(chan, &served, sizeof(served));
}

/* Role worker: the socket comes as the first message on chan (or is
 * lfd already, forked); listen, say so, serve until told. */
static int worker(int chan, int lfd, int flags)
{
	if (flags & W_EXEC) {
		t_sync_post(chan);
		lfd = atoi(getenv("T_LFD"));
	} else if (lfd < 0) {
		/* Up: the acceptor may pass it (node's worker asks for it). */
		t_sync_post(chan);
		lfd = t_recv_fd(chan, MSG_CMSG_CLOEXEC);
	}
	t_ok(listen(lfd, 64));
	t_sync_post(chan);
	serve_until_told(lfd, chan, !(flags & W_PLAIN) && getenv("T_SMC"));
	close(lfd);
	return 0;
}

/* Role client: n connections, one after the other. */
static int client(uint16_t port, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		int fd = t_connect(port);
		char b;

		t_send_pat(fd, PAT_REQ, REQ);
		t_recv_pat(fd, PAT_RESP, RESP);
		t_assert(read(fd, &b, 1) == 0, "EOF after the answer");
		close(fd);
	}
	return 0;
}

struct wk {
	pid_t pid;
	int chan;
};

/* A worker exec'ed with its end of a new channel; flags W_*. */
static struct wk worker_start(int flags)
{
	struct wk w;
	int sv[2];

	t_ok(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	t_ok(fcntl(sv[1], F_SETFD, 0));
	w.pid = t_start_role("worker", sv[1], flags, flags & W_PLAIN);
	close(sv[1]);
	w.chan = sv[0];
	t_sync_wait(w.chan);
	return w;
}

/* A worker forked with lfd, serving on it. */
static struct wk worker_fork(int lfd, bool smc)
{
	struct wk w;
	int sv[2];

	t_ok(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	w.pid = t_fork_helper();
	if (w.pid == 0) {
		close(sv[0]);
		if (smc)
			setenv("T_SMC", "1", 1);
		_exit(worker(sv[1], lfd, 0));
	}
	close(sv[1]);
	w.chan = sv[0];
	return w;
}

static uint32_t worker_stop(struct wk *w)
{
	uint32_t served;

	t_sync_post(w->chan);
	if (!t_sync_recv(w->chan, &served, sizeof(served)))
		t_fail("worker went away");
	t_wait_child(w->pid, "worker");
	close(w->chan);
	return served;
}

static void run_client(uint16_t port, int n)
{
	t_wait_child(t_start_role("client", port, n, false), "client");
}

/* The n workers listen; CONNS connections; every one served once. */
static void serve_all(struct wk *w, int n, uint16_t port)
{
	uint32_t served = 0;
	int i;

	for (i = 0; i < n; i++)
		t_sync_wait(w[i].chan);
	run_client(port, CONNS);
	for (i = 0; i < n; i++)
		served += worker_stop(&w[i]);
	t_assert(served == CONNS, "served %u of %d", served, CONNS);
}

/* Counters since before: smc connections on shared memory, the rest not
 * (n in all), and nothing reset. */
static void expect(const struct t_stats *before, int n, int smc)
{
	struct t_stats now;

	t_stats_expect(before, 2 * smc, 2 * (n - smc));
	if (!t_accel())
		return;
	t_stats_get(&now);
	t_assert(now.aborts == before->aborts, "connections reset: {%s}", now.abort_names);
}

static void check_passed_common(bool close_ours)
{
	struct t_stats before;
	struct wk w[2];
	uint16_t port;
	int lfd = bound_socket(&port), i;

	t_stats_get(&before);
	setenv("T_SMC", "1", 1);
	for (i = 0; i < 2; i++) {
		w[i] = worker_start(0);
		t_send_fd(w[i].chan, lfd);
	}
	if (close_ours)
		close(lfd);
	serve_all(w, 2, port);
	expect(&before, CONNS, CONNS);
	if (!close_ours)
		close(lfd);
}

static void check_passed(void) { check_passed_common(false); }
static void check_passed_close(void) { check_passed_common(true); }

static void check_forked(void)
{
	struct t_stats before;
	struct wk w[2];
	uint16_t port;
	int lfd = bound_socket(&port), i;

	t_stats_get(&before);
	for (i = 0; i < 2; i++)
		w[i] = worker_fork(lfd, true);
	close(lfd);
	serve_all(w, 2, port);
	expect(&before, CONNS, CONNS);
}

/* Two workers inherit the bound socket across fork and exec (a launcher
 * that binds, then starts its servers), one more gets it passed: all
 * three listen, one publication. */
static void check_exec_inherit(void)
{
	struct t_stats before;
	struct wk w[3];
	uint16_t port;
	int lfd = bound_socket(&port), i;
	char v[16];

	t_stats_get(&before);
	setenv("T_SMC", "1", 1);
	snprintf(v, sizeof(v), "%d", lfd);
	setenv("T_LFD", v, 1);
	for (i = 0; i < 2; i++)
		w[i] = worker_start(W_EXEC);
	w[2] = worker_start(0);
	t_send_fd(w[2].chan, lfd);
	close(lfd);
	serve_all(w, 3, port);
	expect(&before, CONNS, CONNS);
}

static void check_acceptor_too(void)
{
	struct t_stats before;
	struct wk w;
	uint16_t port;
	int lfd = bound_socket(&port);
	uint32_t served = 0;
	pid_t cl;
	int st;

	t_stats_get(&before);
	setenv("T_SMC", "1", 1);
	w = worker_start(0);
	t_send_fd(w.chan, lfd);
	t_sync_wait(w.chan);
	/* We never listen(): the worker made it a listener. */
	cl = t_start_role("client", port, CONNS, false);
	for (;;) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };

		if (poll(&p, 1, 20) > 0)
			served += serve_one(lfd, true);
		if (waitpid(cl, &st, WNOHANG) == cl)
			break;
	}
	t_assert(WIFEXITED(st) && !WEXITSTATUS(st), "client: status %#x", st);
	served += worker_stop(&w);
	t_assert(served == CONNS, "served %u of %d", served, CONNS);
	expect(&before, CONNS, CONNS);
	close(lfd);
}

static void check_plain_holder(void)
{
	struct t_stats before;
	struct wk w[2];
	uint16_t port;
	int lfd = bound_socket(&port), i;

	t_stats_get(&before);
	unsetenv("T_SMC");
	w[0] = worker_start(0);
	w[1] = worker_start(W_PLAIN);
	for (i = 0; i < 2; i++)
		t_send_fd(w[i].chan, lfd);
	serve_all(w, 2, port);
	/* The plain worker's ends are not counted: only the client's and
	 * the usmc worker's, all TCP. */
	if (t_accel()) {
		struct t_stats now;

		t_stats_get(&now);
		t_assert(now.smc_conns == before.smc_conns, "%lld on shared memory",
			 now.smc_conns - before.smc_conns);
		t_assert(now.fallback - before.fallback >= CONNS, "fallbacks {%s}", now.fallback_names);
		t_assert(now.aborts == before.aborts, "connections reset: {%s}", now.abort_names);
	}
	close(lfd);
}

static void check_plain_later(void)
{
	struct t_stats before, mid;
	struct wk w[2];
	uint16_t port;
	int lfd = bound_socket(&port);
	uint32_t served;

	t_stats_get(&before);
	setenv("T_SMC", "1", 1);
	w[0] = worker_start(0);
	t_send_fd(w[0].chan, lfd);
	t_sync_wait(w[0].chan);
	run_client(port, CONNS / 2);
	expect(&before, CONNS / 2, CONNS / 2);
	t_stats_get(&mid);
	/* Now a holder without usmc: the usmc worker's accepts stay TCP. */
	served = worker_stop(&w[0]);
	unsetenv("T_SMC");
	w[0] = worker_start(0);
	t_send_fd(w[0].chan, lfd);
	t_sync_wait(w[0].chan);
	w[1] = worker_start(W_PLAIN);
	t_send_fd(w[1].chan, lfd);
	t_sync_wait(w[1].chan);
	run_client(port, CONNS);
	served += worker_stop(&w[0]) + worker_stop(&w[1]);
	t_assert(served == CONNS + CONNS / 2, "served %u of %d", served, CONNS + CONNS / 2);
	if (t_accel()) {
		struct t_stats now;

		t_stats_get(&now);
		t_assert(now.smc_conns == mid.smc_conns, "%lld more on shared memory",
			 now.smc_conns - mid.smc_conns);
		t_assert(now.aborts == before.aborts, "connections reset: {%s}", now.abort_names);
	}
	close(lfd);
}

static const struct t_check checks[] = {
	{ "passed", check_passed },
	{ "passed_close", check_passed_close },
	{ "forked", check_forked },
	{ "exec_inherit", check_exec_inherit },
	{ "acceptor_too", check_acceptor_too },
	{ "plain_holder", check_plain_holder },
	{ "plain_later", check_plain_later },
};

int main(int argc, char **argv)
{
	t_name = "t_lshare";
	signal(SIGPIPE, SIG_IGN);
	if (argc == 4) {
		alarm(60);	/* a role: never outlive a hang */
		if (!strcmp(argv[1], "worker"))
			return worker(atoi(argv[2]), -1, atoi(argv[3]));
		if (!strcmp(argv[1], "client"))
			return client((uint16_t)atoi(argv[2]), atoi(argv[3]));
	}
	/* Each check verifies its own counters. */
	t_tcp_conns = -1;
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
