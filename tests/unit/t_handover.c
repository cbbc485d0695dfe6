// SPDX-License-Identifier: MIT
/*
 * t_handover.c - sockets handed between processes with SCM_RIGHTS: an
 * acceptor (this process) passes what it accepted, or its listener, to a
 * worker (this program exec'ed, role worker, with or without libusmc) over
 * a UNIX socket; a client (this program exec'ed, role client, under usmc)
 * sends a request of REQ pattern bytes and checks every byte of the RESP
 * pattern bytes of the answer, then EOF.  The worker checks every byte of
 * the request from where the acceptor left off.
 *
 *   now            passed as soon as accept() returns (the proposal found
 *                  there, or still undecided), the acceptor closes its copy
 *   close          passed once the request has begun (on shared memory,
 *                  bytes in the ring), the acceptor closes its copy at once
 *                  (the client used to get ECONNRESET: our close protocol
 *                  ran although the socket lived on in the worker)
 *   close_plain    the same, the worker without libusmc
 *   mmsg           close, passed with sendmmsg() and taken with recvmmsg()
 *   twice          close, the descriptor passed twice: the worker reads
 *                  half of the request on each copy (one socket)
 *   keep           the acceptor keeps its copy until the worker is done
 *                  (the client used to wait forever: nobody read the ring)
 *   late           the client's proposal arrives after accept() returned
 *                  (USMC_FAULT=late): undecided at the hand-over (the
 *                  worker used to read the client's wake byte, 0x00, as
 *                  data)
 *   late_plain     the same, the worker without libusmc
 *   in_ring        the client's request is (partly) in the ring, the
 *                  acceptor read its first 1000 bytes itself; the rest
 *                  reaches the worker in order
 *   shut           the client wrote its request and shut down its side
 *                  before the hand-over: the worker reads it all, then EOF
 *   closed         the client wrote its request and closed before the
 *                  hand-over: the worker reads all of it then EOF (TCP), or
 *                  ECONNRESET (usmc: bytes still in shared memory whose
 *                  sender closed cannot be handed over), never a clean EOF
 *                  short of it (it used to be one)
 *   gone           closed, and the client process exited before the
 *                  hand-over (its link group's names went with it): a
 *                  worker under usmc reads it all, then EOF, from the ring
 *                  through the acceptor's copy of the link group's file
 *                  (it got ECONNRESET: the link group was unreachable)
 *   client_side    the acceptor connects to a server (this program, role
 *                  server, under usmc) and passes its client end to the
 *                  worker, which sends the request and reads the answer
 *   client_connecting  the same, passed while its non-blocking connect
 *                  is in progress (the proposal posted, not yet answered)
 *   decline        the acceptor cannot attach the client's link group
 *                  (USMC_FAULT=attach) and declines the proposal it found
 *                  at accept: the client's queued bytes move to TCP, the
 *                  decline byte is not the worker's
 *   listener       the listener is passed (kept open here) to a worker that
 *                  accepts the client's connection and serves it
 *   listener_plain the same, the worker without libusmc
 *   listener_shared  the listener is passed to a worker (under usmc) that
 *                  calls listen() on it again, as node's cluster workers do
 *                  with schedulingPolicy = none, while the acceptor keeps
 *                  accepting and serves the client itself: the worker must
 *                  not publish it (the client proposed to the worker and
 *                  waited forever for an answer the acceptor never gave)
 *   listener_queued  the client connected, proposed and wrote its request
 *                  (into the ring) before the listener is passed to a
 *                  worker without libusmc: its proposal is declined, its
 *                  bytes move to TCP (it used to wait forever)
 *
 *   lost           the worker (under usmc) dies before it takes the
 *                  descriptor: the message is destroyed, the kernel closes
 *                  the socket, the client reads ECONNRESET (its request
 *                  unread), as with TCP
 *   lost_stopped   the same with the client stopped (SIGSTOP) from before
 *                  the hand-over until the socket is gone: with a worker
 *                  without usmc, the client's request moves to TCP only once
 *                  it runs again, after the kernel closed the socket with a
 *                  FIN (nothing unread there yet); the reset it gets for it
 *                  is reported first, as TCP's (it read EOF)
 *   ctrunc         the descriptor is passed twice in one message to a
 *                  worker whose control buffer holds one: it gets the
 *                  first, MSG_CTRUNC and the kernel's cmsg layout, and
 *                  serves the connection on it
 *   dgram_name     close, passed as squid's coordinator passes sockets to
 *                  its kids: sendmsg() with the worker's bound name on a
 *                  datagram socket connected to nobody (the reader is the
 *                  socket bound there; it was moved to TCP, handed_over)
 *
 * A worker under usmc adopts what it is passed (SCM_RIGHTS with usmc's
 * ticket): the connection stays on shared memory (the worker checks its
 * mode with `usmc stat`), nothing moves to TCP (handed_over unchanged).
 * For a worker without usmc, connections on shared memory move to TCP
 * first (handed_over at the acceptor, peer_moved_to_tcp at the client).
 *
 * usage: t_handover [check...]
 *
 * Wherever the acceptor passes what it accepted, it ends with nothing
 * listed as its own in `usmc stat` (a passed connection's entry used to
 * stay until the acceptor exited).
 */
#include "t_handover.h"
#include "t_util.h"

extern char **environ;

#define REQ	200000
#define REQ_SHUT 20000	/* fits in a ring and in the socket buffers */
#define RESP	150000
#define PAT_REQ	11
#define PAT_RESP 12

static uint32_t req_len(int flags)
{
	return flags & (H_SHUT | H_QUEUED | H_CLOSED) ? REQ_SHUT : REQ;
}

/* Read the request from off to its end, every byte checked. */
static void recv_req(int fd, uint32_t off, uint32_t len)
{
	char buf[16384];

	while (off < len) {
		size_t n = MIN(sizeof(buf), (size_t)(len - off));
		long bad;

		t_read_all(fd, buf, n);
		bad = t_pat_check(PAT_REQ, off, buf, n);
		if (bad >= 0)
			t_fail("request: wrong byte at offset %u: 0x%02x, sent 0x%02x",
			       off + (uint32_t)bad, (uint8_t)buf[bad], t_pat(PAT_REQ, off + (uint64_t)bad));
		off += (uint32_t)n;
	}
}

#define W_RESET	3	/* worker's exit status: the connection was reset */

/*
 * The request from off on, every byte checked, up to a clean EOF after all
 * of it, or a reset: usmc cannot hand over bytes still in shared memory
 * whose sender has closed, and resets rather than end the stream short.
 */
static int recv_req_or_reset(int fd, uint32_t off, uint32_t len)
{
	char buf[16384];
	ssize_t n;

	for (;;) {
		n = read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == ECONNRESET)
			return W_RESET;
		if (n < 0)
			t_fail("read: %s", strerror(errno));
		if (n == 0)
			break;
		if (off + (size_t)n > len || t_pat_check(PAT_REQ, off, buf, (size_t)n) >= 0)
			t_fail("request: wrong bytes at %u..%zu", off, off + (size_t)n);
		off += (uint32_t)n;
	}
	t_assert(off == len, "a clean EOF after %u of %u bytes", off, len);
	return 0;
}

static bool want_smc(int flags);

static void talk_client(int fd, int flags)
{
	char b;

	t_send_pat(fd, PAT_REQ, req_len(flags));
	t_recv_pat(fd, PAT_RESP, RESP);
	if (want_smc(flags))
		t_assert_smc(fd);	/* adopted: still on shared memory */
	t_wait_fd(fd, POLLIN, 10000);	/* non-blocking (client_connecting) */
	t_assert(read(fd, &b, 1) == 0, "EOF after the answer");
	close(fd);
}

/* Role server (for H_CLIENT): its port goes out on T_READY_FD; serves one
 * connection. */
static int server(int flags)
{
	int ready = atoi(getenv("T_READY_FD")), fd;
	uint16_t port;
	int lfd = t_listen(&port);

	t_sync_send(ready, &port, sizeof(port));
	fd = t_accept(lfd);
	recv_req(fd, 0, req_len(flags));
	t_send_pat(fd, PAT_RESP, RESP);
	close(fd);
	close(lfd);
	return 0;
}

/* Role worker: serve the connection the acceptor passes (or one accepted
 * on the listener it passes). */
/* Does the worker's connection stay on shared memory (both under usmc)? */
static bool want_smc(int flags)
{
	return t_accel() && !(flags & (H_PLAIN | H_LATE | H_DECLINE | H_NOW | H_CLOSED));
}

static int worker(int chan, int flags)
{
	uint32_t off;
	char b;
	int fd;

	hello_recv(chan);
	if (flags & H_LOST) {
		pause();	/* killed with the message unread */
		return 1;
	}
	if (flags & H_DGRAM) {
		recv_announce(DGRAM_FD, &b);
		t_sync_post(chan);
		fd = take_fd(DGRAM_FD, &off);
	} else {
		fd = take_fd(chan, &off);
	}

	if (flags & H_CLIENT) {
		talk_client(fd, flags);
		return 0;
	}
	if (flags & H_RELISTEN) {
		t_ok(listen(fd, 16));
		t_sync_post(chan);
		t_sync_wait(chan);	/* the acceptor served the client */
		close(fd);
		return 0;
	}
	if (flags & H_LISTEN) {
		int lfd = fd;

		t_sync_post(chan);	/* got it: the client may come */
		fd = t_accept(lfd);
		close(lfd);
	}
	if (flags & H_TWICE) {
		uint32_t off2;
		int fd2 = take_fd(chan, &off2);

		/* Two descriptors, one socket: half of it on each. */
		recv_req(fd, off, off2);
		if (want_smc(flags))
			t_assert_smc(fd);
		close(fd);
		fd = fd2;
		off = off2;
	}
	if (flags & H_CLOSED) {
		int rc = recv_req_or_reset(fd, off, req_len(flags));

		close(fd);
		return rc;
	}
	recv_req(fd, off, req_len(flags));
	if (flags & H_SHUT)
		t_assert(read(fd, &b, 1) == 0, "EOF after the request");
	/* Adopted (or accepted on an adopted listener); `usmc stat` lists a
	 * socket under the descriptor it was adopted on (twice: the first). */
	if (want_smc(flags) && !(flags & H_TWICE))
		t_assert_smc(fd);
	t_send_pat(fd, PAT_RESP, RESP);
	close(fd);
	return 0;
}

/* Role client. */
static int client(uint16_t port, int flags)
{
	int fd = t_connect(port);
	char b;

	if (flags & H_LOST) {
		/* The socket nobody takes is closed by the kernel, with the
		 * request unread: a reset, whether the client is still
		 * writing (ECONNRESET or EPIPE, as with TCP) or reading. */
		char buf[16384];
		uint32_t off = 0;
		ssize_t n = 0;

		while (off < REQ) {
			size_t k = MIN(sizeof(buf), (size_t)(REQ - off));

			t_pat_fill(PAT_REQ, off, buf, k);
			n = write(fd, buf, k);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				break;
			off += (uint32_t)n;
		}
		if (n >= 0)
			while ((n = read(fd, &b, 1)) < 0 && errno == EINTR)
				;
		t_assert(n < 0 && (errno == ECONNRESET || errno == EPIPE),
			 "%zd (%s) at %u, expected a reset", n, n < 0 ? strerror(errno) : "data/EOF", off);
		close(fd);
		return 0;
	}
	t_send_pat(fd, PAT_REQ, req_len(flags));
	if (flags & H_SHUT)
		t_ok(shutdown(fd, SHUT_WR));
	if (flags & H_CLOSED) {
		close(fd);
		t_sync_post(atoi(getenv("T_READY_FD")));
		if (!(flags & H_GONE))
			t_sync_wait(atoi(getenv("T_READY_FD")));	/* alive until the worker is done */
		return 0;
	}
	if (getenv("T_READY_FD"))
		t_sync_post(atoi(getenv("T_READY_FD")));	/* request sent */
	t_recv_pat(fd, PAT_RESP, RESP);
	t_assert(read(fd, &b, 1) == 0, "EOF after the answer");
	close(fd);
	return 0;
}

static pid_t start_ready(const char *role, int arg, int flags, bool plain, const char *fault,
			 int ready)
{
	pid_t pid = t_fork_helper();

	if (pid == 0) {
		char a[16], f[16];
		char *argv[] = { (char *)"t_handover", (char *)role, a, f, NULL };

		if (ready >= 0) {
			snprintf(a, sizeof(a), "%d", ready);
			setenv("T_READY_FD", a, 1);
			fcntl(ready, F_SETFD, 0);
		}
		snprintf(a, sizeof(a), "%d", arg);
		snprintf(f, sizeof(f), "%d", flags);
		if (plain)
			unsetenv("LD_PRELOAD");
		if (fault)
			setenv("USMC_FAULT", fault, 1);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	return pid;
}

static pid_t start(const char *role, int arg, int flags, bool plain, const char *fault)
{
	return start_ready(role, arg, flags, plain, fault, -1);
}

static long long handed_over(void)
{
	char *j;
	long long n;

	if (!t_accel())
		return 0;
	j = t_stats_json();
	n = t_json_int(j, "handed_over");
	free(j);
	return n < 0 ? 0 : n;
}

/* Role acceptor: one check. */
static int acceptor(int flags)
{
	long long before = handed_over();
	int sv[2], lfd, fd;
	pid_t wk, cl;
	uint16_t port;
	uint32_t off = 0;

	lfd = t_listen(&port);
	t_ok(fcntl(lfd, F_SETFD, FD_CLOEXEC));
	t_ok(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	t_ok(fcntl(sv[1], F_SETFD, 0));
	if (flags & H_DGRAM) {
		/* squid's coordinator: sendmsg() to each kid's bound name on
		 * a socket connected to nobody.  The worker's socket is bound
		 * there, connected to nobody either, at DGRAM_FD. */
		int w = t_ok(socket(AF_UNIX, SOCK_DGRAM, 0));

		g_dest.sun_family = AF_UNIX;
		snprintf(g_dest.sun_path, sizeof(g_dest.sun_path), "/tmp/t_handover-%d.sock",
			 (int)getpid());
		unlink(g_dest.sun_path);
		t_ok(bind(w, (struct sockaddr *)&g_dest, sizeof(g_dest)));
		t_ok(dup2(w, DGRAM_FD));
		close(w);
		g_tx = t_ok(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
	}
	wk = start("worker", sv[1], flags, flags & H_PLAIN, NULL);
	close(sv[1]);
	hello_send(sv[0]);
	if (flags & H_DGRAM) {
		close(DGRAM_FD);
		/* A first datagram: the worker reads it as it reads its
		 * descriptors, then says so (squid's kid waits in recvmsg). */
		t_assert(sendto(g_tx, "h", 1, 0, (struct sockaddr *)&g_dest, sizeof(g_dest)) == 1,
			 "sendto: %s", strerror(errno));
		t_sync_wait(sv[0]);
	}
	if (flags & H_CLIENT) {
		struct sockaddr_in a;
		int rd[2];
		pid_t sv_pid;

		t_ok(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, rd));
		sv_pid = start_ready("server", 0, flags, false, NULL, rd[1]);
		close(rd[1]);
		if (!t_sync_recv(rd[0], &port, sizeof(port)))
			t_fail("server did not start");
		a = t_addr(port);
		fd = t_ok(socket(AF_INET, SOCK_STREAM | (flags & H_CONNECTING ? SOCK_NONBLOCK : 0), 0));
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) && errno != EINPROGRESS)
			t_fail("connect: %s", strerror(errno));
		pass_fd(sv[0], fd, 0);
		close(fd);
		t_wait_child(wk, "worker");
		t_wait_child(sv_pid, "server");
		close(rd[0]);
		close(lfd);
		close(sv[0]);
		return 0;
	}
	if (flags & H_CLOSED) {
		int rd[2], st;

		t_ok(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, rd));
		cl = start_ready("client", port, flags, false, NULL, rd[1]);
		close(rd[1]);
		fd = t_accept(lfd);
		t_sync_wait(rd[0]);	/* the client wrote its request and closed */
		t_wait_fd(fd, POLLRDHUP, 10000);
		if (flags & H_GONE)
			t_wait_child(cl, "client");	/* its link group's names are gone */
		pass_fd(sv[0], fd, 0);
		close(fd);
		while (waitpid(wk, &st, 0) < 0)
			t_assert(errno == EINTR, "waitpid");
		/* TCP delivers it all; usmc may only reset, never cut it short
		 * (a worker under usmc that adopts it gets it all, on a device
		 * that lets a connection travel). */
		t_assert(WIFEXITED(st) && (!WEXITSTATUS(st) ||
					   (WEXITSTATUS(st) == W_RESET && t_accel() &&
					    ((flags & (H_PLAIN | H_GONE)) != H_GONE || t_unshared()))),
			 "worker: status %#x", st);
		if (!(flags & H_GONE)) {
			t_sync_post(rd[0]);
			t_wait_child(cl, "client");
		}
		close(rd[0]);
		close(lfd);
		close(sv[0]);
		return 0;
	}
	if (flags & H_QUEUED) {
		int rd[2];

		t_ok(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, rd));
		cl = start_ready("client", port, flags, false, NULL, rd[1]);
		close(rd[1]);
		t_sync_wait(rd[0]);	/* connected, proposed, request in the ring */
		close(rd[0]);
		pass_fd(sv[0], lfd, 0);
		t_sync_wait(sv[0]);
		t_wait_child(wk, "worker");
		t_wait_child(cl, "client");
		close(lfd);
		close(sv[0]);
		return 0;
	}
	if (flags & H_LOST) {
		cl = start("client", port, flags, false, NULL);
		fd = t_accept(lfd);
		t_wait_fd(fd, POLLIN, 10000);
		if (flags & H_STOP) {
			/* The client wrote (or writes) its request; it
			 * notices nothing until the socket is gone. */
			t_msleep(100);
			t_ok(kill(cl, SIGSTOP));
			while (waitpid(cl, NULL, WUNTRACED) < 0)
				t_assert(errno == EINTR, "waitpid");
		}
		pass_fd(sv[0], fd, 0);
		close(fd);
		kill(wk, SIGKILL);
		while (waitpid(wk, NULL, 0) < 0)
			t_assert(errno == EINTR, "waitpid");
		close(sv[0]);	/* the message goes with the socket pair */
		if (flags & H_STOP)
			t_ok(kill(cl, SIGCONT));
		t_wait_child(cl, "client");
		close(lfd);
		return 0;
	}
	if (flags & H_RELISTEN) {
		pass_fd(sv[0], lfd, 0);
		t_sync_wait(sv[0]);	/* the worker listens on it too */
		cl = start("client", port, flags, false, NULL);
		fd = t_accept(lfd);
		recv_req(fd, 0, req_len(flags));
		t_assert_smc(fd);	/* the worker's adoption left it published */
		t_send_pat(fd, PAT_RESP, RESP);
		close(fd);
		t_wait_child(cl, "client");
		t_sync_post(sv[0]);
		t_wait_child(wk, "worker");
		close(lfd);
		close(sv[0]);
		return 0;
	}
	if (flags & H_LISTEN) {
		pass_fd(sv[0], lfd, 0);
		t_sync_wait(sv[0]);
		cl = start("client", port, flags, false, NULL);
		t_wait_child(wk, "worker");
		t_wait_child(cl, "client");
		close(lfd);
		close(sv[0]);
		return 0;
	}
	cl = start("client", port, flags, false, flags & H_LATE ? "late" : NULL);
	fd = t_accept(lfd);
	/* The request has begun: a proposal made in time was found, and
	 * the connection is on shared memory with bytes in the ring. */
	if (!(flags & (H_LATE | H_NOW)))
		t_wait_fd(fd, POLLIN, 10000);
	if (flags & H_RING) {
		char buf[1000];

		t_read_all(fd, buf, sizeof(buf));
		t_assert(t_pat_check(PAT_REQ, 0, buf, sizeof(buf)) < 0, "first bytes of the request");
		off = sizeof(buf);
	}
	if (flags & H_SHUT)
		t_wait_fd(fd, POLLRDHUP, 10000);
	if (!(flags & (H_LATE | H_DECLINE | H_NOW)))
		t_assert_smc(fd);
	pass_fd(sv[0], fd, off);
	if (flags & H_TWICE)
		pass_fd(sv[0], fd, off + (REQ - off) / 2);
	if (!(flags & H_KEEP))
		close(fd);
	t_wait_child(wk, "worker");
	if (flags & H_KEEP)
		close(fd);	/* the client's EOF: the last copy closes */
	t_wait_child(cl, "client");
	close(lfd);
	close(sv[0]);
	if (g_tx >= 0) {
		close(g_tx);
		unlink(g_dest.sun_path);
	}
	/* Moved to TCP before it left for a worker without usmc: counted
	 * (not for a declined one, which was never on shared memory);
	 * adopted by one under usmc: not. */
	if (!(flags & (H_LATE | H_DECLINE | H_NOW)) && t_accel())
		t_assert(handed_over() == before + !!(flags & H_PLAIN), "handed_over %lld, was %lld",
			 handed_over(), before);
	/* Every copy is closed: nothing is listed as ours (the entry of a
	 * connection passed to a worker that adopted it used to stay until
	 * we exited: a node cluster's primary listed thousands). */
	t_assert(t_listed_here() == 0, "%d connections still listed as this process's",
		 t_listed_here());
	return 0;
}

/* A check: the acceptor in its own image (its faults are its own). */
static void run(int flags)
{
	t_wait_child(start("acceptor", 0, flags, false, flags & H_DECLINE ? "attach" : NULL),
		     "acceptor");
}

static void check_now(void) { run(H_NOW); }
static void check_now_plain(void) { run(H_NOW | H_PLAIN); }
static void check_close(void) { run(0); }
static void check_close_plain(void) { run(H_PLAIN); }
static void check_mmsg(void) { run(H_MMSG); }
static void check_mmsg_plain(void) { run(H_MMSG | H_PLAIN); }
static void check_twice(void) { run(H_TWICE); }
static void check_twice_plain(void) { run(H_TWICE | H_PLAIN | H_KEEP); }
static void check_keep(void) { run(H_KEEP); }
static void check_keep_plain(void) { run(H_KEEP | H_PLAIN); }
static void check_late(void) { run(H_LATE); }
static void check_late_plain(void) { run(H_LATE | H_PLAIN); }
static void check_late_keep(void) { run(H_LATE | H_KEEP); }
static void check_in_ring(void) { run(H_RING); }
static void check_in_ring_plain(void) { run(H_RING | H_PLAIN | H_KEEP); }
static void check_shut(void) { run(H_SHUT); }
static void check_closed(void) { run(H_CLOSED); }
static void check_client_side(void) { run(H_CLIENT); }
static void check_client_side_plain(void) { run(H_CLIENT | H_PLAIN); }
static void check_client_connecting(void) { run(H_CLIENT | H_CONNECTING); }
static void check_client_connecting_plain(void) { run(H_CLIENT | H_CONNECTING | H_PLAIN); }
static void check_closed_plain(void) { run(H_CLOSED | H_PLAIN); }
static void check_gone(void) { run(H_CLOSED | H_GONE); }
static void check_decline(void) { run(H_DECLINE); }
static void check_decline_plain(void) { run(H_DECLINE | H_PLAIN); }
static void check_listener(void) { run(H_LISTEN); }
static void check_listener_plain(void) { run(H_LISTEN | H_PLAIN); }
static void check_listener_shared(void) { run(H_LISTEN | H_RELISTEN); }
static void check_listener_queued(void) { run(H_LISTEN | H_QUEUED | H_PLAIN); }
static void check_lost(void) { run(H_LOST); }
static void check_lost_plain(void) { run(H_LOST | H_PLAIN); }
static void check_lost_stopped(void) { run(H_LOST | H_STOP); }
static void check_lost_stopped_plain(void) { run(H_LOST | H_STOP | H_PLAIN); }
static void check_ctrunc(void) { run(H_CTRUNC); }
static void check_dgram_name(void) { run(H_DGRAM); }
static void check_dgram_name_plain(void) { run(H_DGRAM | H_PLAIN); }
static void check_ctrunc_plain(void) { run(H_CTRUNC | H_PLAIN | H_KEEP); }

static const struct t_check checks[] = {
	{ "now", check_now },
	{ "now_plain", check_now_plain },
	{ "close", check_close },
	{ "close_plain", check_close_plain },
	{ "dgram_name", check_dgram_name },
	{ "dgram_name_plain", check_dgram_name_plain },
	{ "mmsg", check_mmsg },
	{ "mmsg_plain", check_mmsg_plain },
	{ "twice", check_twice },
	{ "twice_plain", check_twice_plain },
	{ "keep", check_keep },
	{ "keep_plain", check_keep_plain },
	{ "late", check_late },
	{ "late_plain", check_late_plain },
	{ "late_keep", check_late_keep },
	{ "in_ring", check_in_ring },
	{ "in_ring_plain", check_in_ring_plain },
	{ "shut", check_shut },
	{ "closed", check_closed },
	{ "client_side", check_client_side },
	{ "client_side_plain", check_client_side_plain },
	{ "client_connecting", check_client_connecting },
	{ "client_connecting_plain", check_client_connecting_plain },
	{ "closed_plain", check_closed_plain },
	{ "gone", check_gone },
	{ "decline", check_decline },
	{ "decline_plain", check_decline_plain },
	{ "listener", check_listener },
	{ "listener_plain", check_listener_plain },
	{ "listener_shared", check_listener_shared },
	{ "listener_queued", check_listener_queued },
	{ "lost", check_lost },
	{ "lost_plain", check_lost_plain },
	{ "lost_stopped", check_lost_stopped },
	{ "lost_stopped_plain", check_lost_stopped_plain },
	{ "ctrunc", check_ctrunc },
	{ "ctrunc_plain", check_ctrunc_plain },
};

/* Each check in its own process under alarm(60); the counters are the
 * checks' own business (how a late proposal ends depends on timing). */
static int run_checks(int argc, char **argv)
{
	unsigned int i;
	int j, ran = 0, failed = 0;

	for (i = 0; i < ARRAY_LEN(checks); i++) {
		bool want = argc < 2;
		pid_t pid;
		int st;

		for (j = 1; j < argc; j++)
			want |= !strcmp(argv[j], checks[i].name);
		if (!want || t_check_skipped(checks[i].name))
			continue;
		ran++;
		fflush(NULL);
		pid = t_fork_helper();
		if (pid == 0) {
			alarm(60);
			checks[i].fn();
			_exit(0);
		}
		while (waitpid(pid, &st, 0) < 0)
			if (errno != EINTR)
				t_fail("waitpid: %s", strerror(errno));
		if (WIFEXITED(st) && !WEXITSTATUS(st))
			continue;
		failed++;
		fprintf(stderr, "t_handover: check %s FAILED (status %#x)\n", checks[i].name, st);
	}
	if (!ran)
		t_fail("no such check");
	return failed ? T_EXIT_FAIL : T_EXIT_PASS;
}

int main(int argc, char **argv)
{
	t_name = "t_handover";
	signal(SIGPIPE, SIG_IGN);
	if (argc == 4) {
		alarm(60);	/* a role: never outlive a hang */
		g_flags = atoi(argv[3]);
	}
	if (argc == 4 && !strcmp(argv[1], "acceptor"))
		return acceptor(atoi(argv[3]));
	if (argc == 4 && !strcmp(argv[1], "worker"))
		return worker(atoi(argv[2]), atoi(argv[3]));
	if (argc == 4 && !strcmp(argv[1], "server"))
		return server(atoi(argv[3]));
	if (argc == 4 && !strcmp(argv[1], "client"))
		return client((uint16_t)atoi(argv[2]), atoi(argv[3]));
	return run_checks(argc, argv);
}
