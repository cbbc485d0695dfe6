// SPDX-License-Identifier: MIT
/*
 * t_devcopy.c - dev_copy, the test device without shared mapping
 * (src/dev_copy.c, build/copy): what a device without USMC_DEV_F_MAPPED,
 * _FORK and _EXEC must give.  Skips in the other builds.
 *
 *   stream      1 MiB each way at once, byte for byte, on shared memory;
 *               the peer's DMBs (our outgoing rings) are mapped PROT_NONE
 *               in this process: the core never wrote them, move_data did.
 *   fork        the server is another process; the client forks while
 *               its connection is live: the connection moved to TCP first
 *               (device_unshared here, peer_moved_to_tcp at the server),
 *               and the child's bytes and then the parent's arrive, in
 *               order, whole.
 *   shut_fork   the client shuts its side down (shutdown(SHUT_WR): the FIN
 *               only in its ring while on shared memory), then forks
 *               before the server looked: the connection moves to TCP,
 *               and the FIN must follow the ring's bytes there (before:
 *               the move sent the bytes, never the FIN, and the server,
 *               gone to TCP after it, waited for EOF forever).
 *   peer_closed a connection whose peer closed stays as it is at a fork
 *               (nothing of ours can reach the peer again): the parent's
 *               and the child's writes fail with EPIPE, as TCP's after
 *               its RST.
 *   scm         a connection sent to another process (SCM_RIGHTS) moves
 *               to TCP first; the receiver reads every byte the peer
 *               writes, before and after the send.
 *   vfork_exec  vfork + exec (what subprocess, posix_spawn-like helpers
 *               and shells do): a close-on-exec connection, which the new
 *               image never gets, stays on shared memory; an inheritable
 *               one moves to TCP first (the new image takes it over).

 *   rearm       the device's doorbell edges once per re-arm (dev.h
 *               progress, a CQ notification's rule): a server process
 *               asleep in epoll_wait on two connections of one link group
 *               is stopped (SIGSTOP) and gets a byte on each; the second
 *               kick finds the doorbell not re-armed and is dropped
 *               (doorbells_unarmed, once per round), and the server, let
 *               go, reads both bytes.
 *   inband      proposals travel on TCP (clc_inband.h): connections made
 *               both ways round (connect before accept, and a server
 *               already inside accept()) are accepted from bodies that
 *               came on TCP (clc_inband_tx/_rx count each once), their
 *               bytes arrive whole, and no entry of any listener index in
 *               the runtime directory names a link group: a process that
 *               reads the index learns nothing to answer with.
 *   body_late   the client's in-band body comes 1.5 s after its proposal
 *               (USMC_FAULT=body_late); the server writes first meanwhile:
 *               it waits for the body as for a client inside connect(),
 *               declines it (server_chose_tcp, both ends), writes on TCP,
 *               and skips the PROPOSAL when it comes: each end reads the
 *               other's bytes exactly.
 *   two_sleepers two threads asleep in epoll_wait on one instance, over
 *               two connections of one link group: a byte on the first
 *               wakes one thread, which keeps it (blocks elsewhere); a
 *               byte on the second must wake the other (before: the edge
 *               the first took left the doorbell unarmed, and the second
 *               slept through the ring until the first came back).
 */
#include "clc.h"

#include "t_util.h"

#include <dirent.h>
#include <fcntl.h>

#include <pthread.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#define STREAM	(1u << 20)
#define PART	(64u * 1024)

static void expect_state(int fd, const char *mode, const char *reason)
{
	char m[32], r[64];

	t_fd_state(fd, m, r, sizeof(m));
	t_assert(!strcmp(m, mode) && !strcmp(r, reason), "fd %d: mode %s reason \"%s\", "
		 "expected %s (%s)", fd, m, r, mode, reason);
}

/* PROT_NONE mappings of a link group's memory file in this process. */
static int none_mappings(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	t_assert(f != NULL, "/proc/self/maps: %s", strerror(errno));
	while (fgets(line, sizeof(line), f))
		if (strstr(line, " ---s ") && strstr(line, "/lg-") && strstr(line, "/mem"))
			n++;
	fclose(f);
	return n;
}

struct sender {
	int fd;
	uint32_t id;
};

static void *send_thread(void *p)
{
	struct sender *s = p;

	t_send_pat(s->fd, s->id, STREAM);
	return NULL;
}

static void check_stream(void)
{
	struct sender a, b;
	pthread_t ta, tb;
	int c, s;

	t_pair_smc(&c, &s);
	a = (struct sender){ c, 1 };
	b = (struct sender){ s, 2 };
	t_assert(!pthread_create(&ta, NULL, send_thread, &a));
	t_assert(!pthread_create(&tb, NULL, send_thread, &b));
	t_recv_pat(s, 1, STREAM);
	t_recv_pat(c, 2, STREAM);
	t_assert(!pthread_join(ta, NULL));
	t_assert(!pthread_join(tb, NULL));
	t_assert_smc(c);
	t_assert_smc(s);
	t_assert(none_mappings() >= 2, "%d PROT_NONE link group mappings: the outgoing rings "
		 "of both ends are not protected", none_mappings());
	close(c);
	close(s);
}

/* A server in its own process (forked before any connection): reads 2 *
 * PART bytes, pattern 3 then 4, answers "ok", expects EOF. */
static pid_t start_reader(int lfd)
{
	pid_t pid = t_fork_helper();

	if (pid == 0) {
		int s = t_accept(lfd);
		char b;

		t_recv_pat(s, 3, PART);
		t_recv_pat(s, 4, PART);
		t_write_all(s, "ok", 2);
		t_assert(read(s, &b, 1) == 0, "no EOF after the last byte");
		expect_state(s, "TCP", "peer_moved_to_tcp");
		_exit(0);
	}
	return pid;
}

static void check_fork(void)
{
	long long moved = t_fallbacks("device_unshared");
	uint16_t port;
	int lfd = t_listen(&port), c;
	pid_t srv, kid;
	char ok[2];

	srv = start_reader(lfd);
	close(lfd);
	c = t_connect(port);
	t_write_all(c, "", 0);
	kid = t_fork_helper();
	if (kid == 0) {
		t_send_pat(c, 3, PART);
		_exit(0);
	}
	t_wait_child(kid, "writing child");
	expect_state(c, "TCP", "device_unshared");
	t_send_pat(c, 4, PART);
	t_read_all(c, ok, 2);
	t_assert(!memcmp(ok, "ok", 2), "the server's answer");
	close(c);
	t_wait_child(srv, "server");
	t_assert(t_fallbacks("device_unshared") == moved + 1, "device_unshared %lld -> %lld",
		 moved, t_fallbacks("device_unshared"));
	t_smc_pairs++;
}

/* A server in its own process: waits for the go on sync, then must read
 * "abc" and EOF within a bound (poll, not a hang), answers "ok". */
static pid_t start_shut_reader(int lfd, int sync)
{
	pid_t pid = t_fork_helper();

	if (pid == 0) {
		struct pollfd p = { .events = POLLIN };
		char b[4];
		ssize_t n;
		int got = 0;

		p.fd = t_accept(lfd);
		t_sync_wait(sync);
		for (;;) {
			t_assert(poll(&p, 1, 5000) == 1, "no EOF 5 s after the client's "
				 "shutdown(SHUT_WR) and fork (%d bytes read)", got);
			n = read(p.fd, b + got, sizeof(b) - (size_t)got);
			t_assert(n >= 0, "read: %s", t_errname(errno));
			if (!n)
				break;
			got += (int)n;
		}
		t_assert(got == 3 && !memcmp(b, "abc", 3), "%d bytes before EOF", got);
		t_write_all(p.fd, "ok", 2);
		expect_state(p.fd, "TCP", "peer_moved_to_tcp");
		close(p.fd);
		_exit(0);
	}
	return pid;
}

static void check_shut_fork(void)
{
	uint16_t port;
	int lfd = t_listen(&port), sv[2], c;
	pid_t srv, kid;
	char ok[3];

	t_sync_pair(sv);
	srv = start_shut_reader(lfd, sv[1]);
	close(lfd);
	close(sv[1]);
	c = t_connect(port);
	t_write_all(c, "abc", 3);
	t_ok(shutdown(c, SHUT_WR));
	kid = t_fork_helper();
	if (kid == 0)
		_exit(0);
	t_wait_child(kid, "child");
	expect_state(c, "TCP", "device_unshared");
	t_sync_post(sv[0]);
	t_read_all(c, ok, 2);
	t_assert(!memcmp(ok, "ok", 2), "the server's answer");
	t_assert(read(c, ok, 1) == 0, "no EOF after the server's answer");
	close(c);
	close(sv[0]);
	t_wait_child(srv, "server");
	t_smc_pairs++;
}

static void check_peer_closed(void)
{
	int c, s;
	pid_t kid;

	signal(SIGPIPE, SIG_IGN);
	t_pair_smc(&c, &s);
	close(s);
	/* As over TCP: the first write after the peer's close draws its RST
	 * (or EPIPE already), every later one fails with EPIPE. */
	(void)write(c, "x", 1);
	t_msleep(50);
	errno = 0;
	t_assert(write(c, "x", 1) < 0 && errno == EPIPE, "write after the peer's close: %s",
		 t_errname(errno));
	kid = t_fork_helper();
	if (kid == 0) {
		errno = 0;
		t_assert(write(c, "y", 1) < 0 && errno == EPIPE, "child: write: %s",
			 t_errname(errno));
		_exit(0);
	}
	t_wait_child(kid, "child");
	t_assert_smc(c);
	errno = 0;
	t_assert(write(c, "z", 1) < 0 && errno == EPIPE, "write after the fork: %s",
		 t_errname(errno));
	close(c);
}

static void check_scm(void)
{
	long long moved = t_fallbacks("device_unshared");
	int sv[2], c, s;
	pid_t kid;

	t_sync_pair(sv);
	kid = t_fork_helper();	/* before any connection: nothing to move */
	if (kid == 0) {
		int fd;

		close(sv[0]);
		fd = t_recv_fd(sv[1], 0);
		t_recv_pat(fd, 5, PART);
		t_recv_pat(fd, 6, PART);
		expect_state(fd, "TCP", "device_unshared");
		_exit(0);
	}
	close(sv[1]);
	t_pair_smc(&c, &s);
	t_send_pat(c, 5, PART);
	t_send_fd(sv[0], s);
	close(s);
	t_send_pat(c, 6, PART);
	t_wait_child(kid, "receiver");
	expect_state(c, "TCP", "peer_moved_to_tcp");
	close(c);
	close(sv[0]);
	t_assert(t_fallbacks("device_unshared") == moved + 1, "device_unshared %lld -> %lld",
		 moved, t_fallbacks("device_unshared"));
}

static void check_vfork_exec(void)
{
	long long moved = t_fallbacks("device_unshared");
	int c, s, ci, si, st;
	pid_t kid;

	t_pair_smc(&c, &s);
	t_pair_smc(&ci, &si);
	t_ok(fcntl(c, F_SETFD, FD_CLOEXEC));
	t_ok(fcntl(s, F_SETFD, FD_CLOEXEC));
	t_ok(fcntl(si, F_SETFD, FD_CLOEXEC));	/* ci alone goes to the new image */
	kid = vfork();
	if (kid == 0) {
		execl("/bin/true", "true", (char *)NULL);
		_exit(127);
	}
	t_assert(kid > 0, "vfork: %s", strerror(errno));
	t_ok(waitpid(kid, &st, 0));
	t_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "/bin/true: status %#x", st);
	t_assert_smc(c);
	t_xfer(c, s, "close-on-exec, after the exec");
	t_xfer(s, c, "and back");
	expect_state(ci, "TCP", "device_unshared");
	t_xfer(ci, si, "inherited, after the exec");
	t_xfer(si, ci, "and back");
	expect_state(si, "TCP", "peer_moved_to_tcp");
	t_assert(t_fallbacks("device_unshared") == moved + 1, "device_unshared %lld -> %lld",
		 moved, t_fallbacks("device_unshared"));
	close(c);
	close(s);
	close(ci);
	close(si);
}

#define REARM_ROUNDS	5


/* Two connections in one epoll instance; each round: say "about to
 * sleep", then read a byte of the round's value on each.  Then EOF. */
static pid_t start_epoll_reader(int lfd, int sync)
{
	pid_t pid = t_fork_helper();
	struct epoll_event ev, got[2];
	int fds[2], ep, r, i, n, done;
	char b;

	if (pid)
		return pid;
	ep = epoll_create1(0);
	t_assert(ep >= 0, "epoll_create1: %s", strerror(errno));
	for (i = 0; i < 2; i++) {
		fds[i] = t_accept(lfd);
		ev = (struct epoll_event){ .events = EPOLLIN, .data.u32 = (uint32_t)i };
		t_assert(!epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev), "epoll_ctl: %s", strerror(errno));
	}
	for (r = 0; r < REARM_ROUNDS; r++) {
		t_sync_post(sync);
		for (done = 0; done != 3;) {
			n = epoll_wait(ep, got, 2, -1);
			if (n < 0 && errno == EINTR)	/* stopped: signal(7) */
				continue;
			t_assert(n > 0, "epoll_wait: %d %s", n, strerror(errno));
			for (i = 0; i < n; i++) {
				int k = (int)got[i].data.u32;

				t_assert(read(fds[k], &b, 1) == 1 && b == 'a' + r,
					 "round %d, connection %d: %s", r, k, strerror(errno));
				done |= 1 << k;
			}
		}
	}
	for (i = 0; i < 2; i++) {
		t_assert_smc(fds[i]);
		t_expect_eof(fds[i]);
	}
	_exit(0);
}

static void check_rearm(void)
{
	long long before = t_stat_counter("doorbells_unarmed");
	int lfd, c[2], sv[2], r, i;
	uint16_t port;
	pid_t srv;

	lfd = t_listen(&port);
	t_sync_pair(sv);
	srv = start_epoll_reader(lfd, sv[1]);
	close(lfd);
	for (i = 0; i < 2; i++) {
		c[i] = t_connect(port);
		t_write_all(c[i], "", 0);
	}
	for (r = 0; r < REARM_ROUNDS; r++) {
		char b = (char)('a' + r);

		t_sync_wait(sv[0]);
		t_wait_state(srv, 'S', 3);	/* asleep in epoll_wait, both armed */
		t_assert(!kill(srv, SIGSTOP), "SIGSTOP: %s", strerror(errno));
		t_wait_state(srv, 'T', 1);
		for (i = 0; i < 2; i++)
			t_write_all(c[i], &b, 1);
		t_assert(!kill(srv, SIGCONT), "SIGCONT: %s", strerror(errno));
	}
	t_assert(t_stat_counter("doorbells_unarmed") >= before + REARM_ROUNDS,
		 "doorbells_unarmed %lld -> %lld: the second kick of a round rang", before,
		 t_stat_counter("doorbells_unarmed"));
	for (i = 0; i < 2; i++) {
		t_assert_smc(c[i]);
		close(c[i]);
	}
	t_wait_child(srv, "epoll server");
	close(sv[0]);
	close(sv[1]);
	t_smc_pairs += 2;
}

struct sleeper {
	int ep, fds[2], report, gate;
	_Atomic pid_t tid;
};

/* epoll_wait for one event; report which connection; the first one's
 * taker waits at the gate.  'q' ends the thread. */
static void *sleeper_main(void *arg)
{
	struct sleeper *s = arg;
	struct epoll_event ev;
	char b, k;
	int n;

	atomic_store(&s->tid, (pid_t)syscall(SYS_gettid));
	for (;;) {
		n = epoll_wait(s->ep, &ev, 1, -1);
		if (n < 0 && errno == EINTR)
			continue;
		t_assert(n == 1, "epoll_wait: %d %s", n, strerror(errno));
		k = (char)ev.data.u32;
		t_assert(read(s->fds[(int)k], &b, 1) == 1, "read: %s", strerror(errno));
		if (b == 'q')
			return NULL;
		t_write_all(s->report, &k, 1);
		if (k == 0)
			t_read_all(s->gate, &b, 1);
	}
}

static char next_report(int fd, const char *what)
{
	char k;

	t_assert(t_wait_fd(fd, POLLIN, 20000) & POLLIN, "%s: no thread woke in 20 s", what);
	t_read_all(fd, &k, 1);
	return k;
}

static void check_two_sleepers(void)
{
	struct sleeper s[2];
	int lfd, c[2], srv[2], rp[2], gp[2], ep, i;
	struct epoll_event ev;
	pthread_t th[2];
	uint16_t port;

	lfd = t_listen(&port);
	for (i = 0; i < 2; i++) {	/* one listener: one link group */
		c[i] = t_connect(port);
		srv[i] = t_accept(lfd);
		t_ping_smc(c[i], srv[i]);
	}
	t_ok(pipe(rp));
	t_ok(pipe(gp));
	ep = t_ok(epoll_create1(0));
	for (i = 0; i < 2; i++) {
		ev = (struct epoll_event){ .events = EPOLLIN, .data.u32 = (uint32_t)i };
		t_ok(epoll_ctl(ep, EPOLL_CTL_ADD, srv[i], &ev));
	}
	for (i = 0; i < 2; i++) {
		s[i] = (struct sleeper){ ep, { srv[0], srv[1] }, rp[1], gp[0], 0 };
		t_assert(!pthread_create(&th[i], NULL, sleeper_main, &s[i]));
	}
	for (i = 0; i < 2; i++) {
		while (!atomic_load(&s[i].tid))
			t_msleep(1);
		t_wait_state(atomic_load(&s[i].tid), 'S', 3);
	}
	t_write_all(c[0], "x", 1);
	t_assert(next_report(rp[0], "first byte") == 0, "the first byte's connection");
	t_write_all(c[1], "y", 1);
	t_assert(next_report(rp[0], "second byte, one thread kept busy") == 1,
		 "the second byte's connection");
	t_write_all(gp[1], "g", 1);
	for (i = 0; i < 2; i++)
		t_write_all(c[i], "q", 1);
	for (i = 0; i < 2; i++)
		t_assert(!pthread_join(th[i], NULL));
	for (i = 0; i < 2; i++) {
		t_assert_smc(c[i]);
		close(c[i]);
		close(srv[i]);
	}
	close(ep);
	close(lfd);
	close(rp[0]);
	close(rp[1]);
	close(gp[0]);
	close(gp[1]);
	t_smc_pairs += 2;
}

/* Entries of the listener indexes in the runtime directory that name a
 * link group (only the parts backed are read: SEEK_DATA), and how many
 * entries were read. */
static long long named_entries(long long *read_entries)
{
	DIR *d = opendir(t_rundir());
	long long named = 0;
	struct dirent *de;

	t_assert(d != NULL, "%s: %s", t_rundir(), strerror(errno));
	*read_entries = 0;
	while ((de = readdir(d))) {
		const off_t base = (off_t)offsetof(struct usmc_clc_index, e);
		struct usmc_clc_entry e;
		char path[PATH_MAX + 256];
		off_t at = base, hole;
		int fd;

		if (strncmp(de->d_name, "ln-", 3))
			continue;
		snprintf(path, sizeof(path), "%s/%s", t_rundir(), de->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;	/* closed meanwhile */
		while ((at = lseek(fd, at, SEEK_DATA)) >= 0) {
			hole = lseek(fd, at, SEEK_HOLE);
			if (at < base)
				at = base;
			at -= (at - base) % (off_t)sizeof(e);
			for (; at < hole; at += (off_t)sizeof(e)) {
				if (pread(fd, &e, sizeof(e), at) != (ssize_t)sizeof(e))
					break;
				++*read_entries;
				if (e.lgr_id || e.slot || e.gen || e.uid || e.pid)
					named++;
			}
		}
		close(fd);
	}
	closedir(d);
	return named;
}

struct acceptor {
	int lfd, fd;
};

static void *accept_thread(void *p)
{
	struct acceptor *a = p;

	a->fd = t_accept(a->lfd);
	return NULL;
}

#define INBAND_PAIRS	8

/* body_late's client: "t_devcopy late-client PORT 0" (USMC_FAULT=body_late). */
static int late_client_main(uint16_t port)
{
	int c = t_connect(port);	/* returns after the late body went */

	t_recv_exact(c, "hello", 5);
	t_write_all(c, "world", 5);
	t_expect_eof(c);
	expect_state(c, "TCP", "server_chose_tcp");
	close(c);
	return 0;
}

static void check_body_late(void)
{
	long long srv0 = t_fallbacks("server_chose_tcp");
	uint16_t port;
	int lfd = t_listen(&port), s;
	pid_t pid;

	setenv("USMC_FAULT", "body_late", 1);
	pid = t_start_role("late-client", port, 0, false);
	unsetenv("USMC_FAULT");
	s = t_accept(lfd);
	/* Acting first: a body on its way is waited for, then declined. */
	t_write_all(s, "hello", 5);
	t_recv_exact(s, "world", 5);	/* the PROPOSAL before it is skipped */
	expect_state(s, "TCP", "server_chose_tcp");
	close(s);
	t_wait_child(pid, "late client");
	t_assert(t_fallbacks("server_chose_tcp") - srv0 == 2,
		 "server_chose_tcp counted %lld times, expected both ends",
		 t_fallbacks("server_chose_tcp") - srv0);
	close(lfd);
}

static void check_inband(void)
{
	long long tx0 = t_stat_counter("clc_inband_tx"), rx0 = t_stat_counter("clc_inband_rx");
	long long entries, named;
	struct acceptor a;
	pthread_t t;
	uint16_t port;
	int lfd = t_listen(&port), c[INBAND_PAIRS + 1], s[INBAND_PAIRS + 1], i;

	for (i = 0; i < INBAND_PAIRS; i++) {
		t_pair_on(lfd, port, &c[i], &s[i]);
		t_xfer(c[i], s[i], "in-band, connect first");
	}
	/* The server waits inside accept() before the client connects: the
	 * client's proposal lands on its WAIT mark. */
	a.lfd = lfd;
	t_assert(!pthread_create(&t, NULL, accept_thread, &a));
	t_msleep(50);
	c[i] = t_connect(port);
	t_assert(!pthread_join(t, NULL));
	s[i] = a.fd;
	t_xfer(c[i], s[i], "in-band, accept first");
	for (i = 0; i <= INBAND_PAIRS; i++) {
		t_xfer(s[i], c[i], "in-band, back");
		t_assert_smc(c[i]);
		t_assert_smc(s[i]);
	}
	named = named_entries(&entries);
	t_assert(entries >= INBAND_PAIRS && named == 0,
		 "%lld of %lld index entries read name a link group", named, entries);
	t_assert(t_stat_counter("clc_inband_tx") - tx0 == INBAND_PAIRS + 1 &&
		 t_stat_counter("clc_inband_rx") - rx0 == INBAND_PAIRS + 1,
		 "in-band proposals: %lld sent, %lld taken, of %d connections",
		 t_stat_counter("clc_inband_tx") - tx0, t_stat_counter("clc_inband_rx") - rx0,
		 INBAND_PAIRS + 1);
	for (i = 0; i <= INBAND_PAIRS; i++) {
		close(c[i]);
		close(s[i]);
	}
	close(lfd);
}

static const struct t_check checks[] = {
	{ "stream", check_stream },
	{ "fork", check_fork },
	{ "shut_fork", check_shut_fork },
	{ "peer_closed", check_peer_closed },
	{ "scm", check_scm },
	{ "vfork_exec", check_vfork_exec },
	{ "rearm", check_rearm },
	{ "two_sleepers", check_two_sleepers },
	{ "inband", check_inband },
	{ "body_late", check_body_late },
};

int main(int argc, char **argv)
{
	t_name = "t_devcopy";
	if (argc == 4 && !strcmp(argv[1], "late-client"))
		return late_client_main((uint16_t)atoi(argv[2]));
	if (!t_unshared())
		t_skip("not the dev_copy build (make copy)");
	t_require_usmc();
	t_tcp_conns = -1;	/* each check reads the counters it expects */
	return t_run_checks(checks, ARRAY_LEN(checks), argc, argv, NULL);
}
