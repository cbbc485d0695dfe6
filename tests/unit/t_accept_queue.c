// SPDX-License-Identifier: MIT
/*
 * t_accept_queue.c - connections that wait in a listener's accept queue,
 * as TCP keeps them (issue 16 item 5).  t_queue_reset covers a listener
 * closed with clients queued, t_lshare and t_fork listeners shared by
 * forked workers, t_reuseport SO_REUSEPORT groups; this program covers:
 *
 *   early_close  clients (another process) connect, send 0 B to 200 KB,
 *                then close, half-close (and wait for an answer) or reset
 *                (SO_LINGER 0), all before the server accepts.  The server
 *                then accepts each, reads to the end and says what it got
 *                (length, checksum, EOF or error), answers the half-closed
 *                ones, which read the answer and EOF.
 *   client_gone  the same, but the client process exits before the server
 *                accepts: TCP's kernel keeps its bytes for the server; so
 *                must usmc (the exiting client used to remove the names of
 *                its link group, the unaccepted slots' doorbells with them:
 *                the server declined and read 0 bytes, then ECONNRESET).
 *   burst        a client process starts 2,000 non-blocking connects at
 *                once (the listener's backlog holds them all) while the
 *                server accepts and answers each (an id each way): every
 *                connection completes, every answer is right, and all
 *                of them went through shared memory.
 *
 *   overflow     20 clients at once to a listener with backlog 4 that
 *                starts accepting 300 ms later: every connection completes
 *                and is answered, as over TCP; those the queue could not
 *                hold go on TCP (see sc_overflow).  A burst
 *                of thousands into a small backlog takes TCP itself more
 *                than 100 s: not compared.
 *
 * Differential (t_selfdiff.h): the transcripts of usmc and of the same
 * program under USMC_DISABLE=1 must be identical; under usmc each scenario
 * also shows (counters) that connections went through shared memory.
 */
#include "t_util.h"
#include "t_selfdiff.h"

#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>

#define OBS	T_OBS
#define NEARLY	9
#define NBURST	2000	/* under the CI limits: 20,000 descriptors, somaxconn 4096 */

/* Endpoints on shared memory so far (both ends of a pair count). */
static long long smc_ends(void)
{
	struct t_stats st;

	if (!t_accel())
		return 0;
	t_stats_get(&st);
	return st.smc_conns;
}

static uint32_t sum32(const unsigned char *p, size_t n, uint32_t h)
{
	while (n--)
		h = h * 31 + *p++;
	return h;
}

/* ---- early_close ---------------------------------------------------- */

enum end { E_CLOSE, E_HALF, E_RESET };

static size_t early_size(int i)
{
	static const size_t sz[] = { 0, 1, 4096, 70000, 200000 };

	return sz[i % 5];
}

static enum end early_end(int i)
{
	return (enum end)(i % 3);
}

static void early_client(uint16_t port, int sync, bool stay)
{
	static unsigned char buf[200000];
	int c[NEARLY], i;

	for (i = 0; i < (int)sizeof(buf); i++)
		buf[i] = (unsigned char)(i * 7 + 3);
	for (i = 0; i < NEARLY; i++) {
		c[i] = t_connect(port);
		t_write_all(c[i], buf, early_size(i));
		if (early_end(i) == E_CLOSE) {
			close(c[i]);
		} else if (early_end(i) == E_HALF) {
			t_ok(shutdown(c[i], SHUT_WR));
		} else {
			struct linger lg = { 1, 0 };

			t_ok(setsockopt(c[i], SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)));
			close(c[i]);
		}
	}
	t_sync_post(sync);	/* all queued and ended */
	if (!stay)
		_exit(0);	/* the half-closed ones close with the process */
	for (i = 0; i < NEARLY; i++) {
		char ans[16];
		ssize_t n;

		if (early_end(i) != E_HALF)
			continue;
		t_read_all(c[i], ans, 4);
		n = recv(c[i], ans, sizeof(ans), 0);
		if (memcmp(ans, "bye", 4) || n != 0)
			_exit(2);
		close(c[i]);
	}
	/* early_close: alive until the server accepted every connection. */
	t_sync_wait(sync);
	_exit(0);
}

static void early(bool gone)
{
	static unsigned char buf[256 << 10];
	long long before = smc_ends();
	uint16_t port;
	int lfd = t_listen(&port), sv[2], i;
	pid_t pid;

	t_sync_pair(sv);
	pid = t_fork_helper();
	if (!pid) {
		close(sv[0]);
		close(lfd);
		early_client(port, sv[1], !gone);
	}
	close(sv[1]);
	t_sync_wait(sv[0]);
	if (gone)
		t_wait_child(pid, "early client (gone)");
	t_msleep(100);		/* the last FIN or RST is in */
	for (i = 0; i < NEARLY; i++) {
		int s = t_accept(lfd);
		size_t got = 0;
		ssize_t n;

		while ((n = recv(s, buf + got, sizeof(buf) - got, 0)) > 0)
			got += (size_t)n;
		OBS("accepted %d: %zu bytes sum %08x, then %s\n", i, got, sum32(buf, got, 0),
		    n == 0 ? "EOF" : t_errname(errno));
		if (n == 0 && early_end(i) == E_HALF && !gone)
			t_write_all(s, "bye", 4);
		close(s);
	}
	if (!gone) {
		t_sync_post(sv[0]);
		t_wait_child(pid, "early client");
	}
	close(sv[0]);
	close(lfd);
	if (t_accel())
		t_assert(smc_ends() - before >= 2,
			 "no connection queued before accept went through shared memory");
}

static void sc_early_close(void)
{
	early(false);
}

static void sc_client_gone(void)
{
	early(true);
}

/* ---- burst ---------------------------------------------------------- */

/* n non-blocking connects at once, then an id each way on each; sync, if
 * not -1, hears when all of them started. */
static void burst_client(uint16_t port, int n, int sync)
{
	struct sockaddr_in a = t_addr(port);
	struct pollfd pf[NBURST];
	uint32_t id[NBURST];
	int i, left = n, ok = 0;

	for (i = 0; i < n; i++) {
		pf[i].fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		if (pf[i].fd < 0)
			_exit(3);
		if (connect(pf[i].fd, (struct sockaddr *)&a, sizeof(a)) && errno != EINPROGRESS)
			_exit(4);
		pf[i].events = POLLOUT;
		id[i] = (uint32_t)i * 2654435761u;
	}
	if (sync >= 0)
		t_sync_post(sync);
	while (left) {
		if (poll(pf, (nfds_t)n, 20000) <= 0)
			_exit(5);
		for (i = 0; i < n; i++) {
			uint32_t back;

			if (pf[i].fd < 0 || !pf[i].revents)
				continue;
			if (pf[i].events == POLLOUT) {
				if (pf[i].revents & (POLLERR | POLLHUP) ||
				    send(pf[i].fd, &id[i], 4, 0) != 4)
					_exit(6);
				pf[i].events = POLLIN;
				continue;
			}
			if (recv(pf[i].fd, &back, 4, MSG_WAITALL) == 4 && back == ~id[i])
				ok++;
			close(pf[i].fd);
			pf[i].fd = -1;
			left--;
		}
	}
	_exit(ok == n ? 0 : 7);
}

static void sc_burst(void)
{
	long long before = smc_ends();
	uint16_t port;
	int lfd = t_listen(&port), i, answered = 0;
	struct rlimit rl;
	pid_t pid;

	/* The backlog holds them all; the client holds them all open. */
	t_ok(listen(lfd, NBURST + 64));
	t_ok(getrlimit(RLIMIT_NOFILE, &rl));
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < NBURST * 2)
		t_skip("RLIMIT_NOFILE's hard limit is below twice the burst");
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < NBURST * 2) {
		rl.rlim_cur = NBURST * 2;
		t_ok(setrlimit(RLIMIT_NOFILE, &rl));
	}

	pid = t_fork_helper();
	if (!pid) {
		close(lfd);
		burst_client(port, NBURST, -1);
	}
	for (i = 0; i < NBURST; i++) {
		int s = t_accept(lfd);
		uint32_t v;

		if (recv(s, &v, 4, MSG_WAITALL) == 4) {
			v = ~v;
			t_write_all(s, &v, 4);
			answered++;
		}
		close(s);
	}
	t_wait_child(pid, "burst client");
	OBS("%d connects at once: %d accepted, %d answered, every answer right\n",
	    NBURST, i, answered);
	close(lfd);
	if (t_accel())
		t_assert(smc_ends() - before == 2 * NBURST,
			 "%lld of the %d burst connections' ends went through shared memory",
			 smc_ends() - before, 2 * NBURST);
}

/* ---- overflow ------------------------------------------------------- */

/*
 * A backlog that overflows, at a small scale TCP gets through in a few
 * seconds: NOVER clients connect at once to a listener with backlog 4
 * that starts accepting only later.  The kernel drops what does not fit
 * (SYNs; final ACKs, leaving the server's end in SYN_RECV while the
 * client's is established) and the connections complete as their
 * segments are sent again; a TCP client's request is such a segment.  A
 * proposed client sends its request into the ring, nothing on TCP: the
 * server's end never completed, was never accepted, and the client waited
 * for ever (a proxy's backend with listen(5): curl -Z hung, replies
 * lost).  A client that finds its connection not established on the
 * server's side now goes on TCP (backlog_full, clc_proof.c), and its
 * request completes it; the others stay on shared memory.  On a device
 * whose proposals travel on TCP (clc_inband.h) the proposal is that
 * segment: every connection completes and stays on shared memory.
 */
#define NOVER	20

static void sc_overflow(void)
{
	long long before = smc_ends(), full0 = t_fallbacks("backlog_full"), moved;
	long long plain0 = t_fallbacks("peer_not_usmc");
	uint16_t port;
	int lfd = t_listen(&port), i, answered = 0, sv[2];
	pid_t pid;

	t_ok(listen(lfd, 4));
	t_sync_pair(sv);
	pid = t_fork_helper();
	if (!pid) {
		close(lfd);
		close(sv[0]);
		burst_client(port, NOVER, sv[1]);
	}
	close(sv[1]);
	t_sync_wait(sv[0]);
	usleep(300 * 1000);	/* the queue overflows meanwhile */
	for (i = 0; i < NOVER; i++) {
		int s;
		uint32_t v;

		if (t_wait_fd(lfd, POLLIN, 30000) <= 0)
			break;
		s = t_accept(lfd);
		if (recv(s, &v, 4, MSG_WAITALL) == 4) {
			v = ~v;
			t_write_all(s, &v, 4);
			answered++;
		}
		close(s);
	}
	t_wait_child(pid, "overflow client");
	close(sv[0]);
	OBS("%d connects to a backlog of 4: %d accepted, %d answered, every answer right\n",
	    NOVER, i, answered);
	close(lfd);
	if (!t_accel())
		return;
	moved = t_fallbacks("backlog_full") - full0;
	if (t_clc_inband()) {
		t_assert(moved == 0 && smc_ends() - before == 2 * NOVER,
			 "in-band proposals: %lld moved to TCP, %lld ends on shared memory of %d",
			 moved, smc_ends() - before, 2 * NOVER);
		return;
	}
	t_assert(moved >= 1 && t_fallbacks("peer_not_usmc") - plain0 == moved,
		 "%lld clients moved to TCP (backlog_full), %lld servers found no proposal",
		 moved, t_fallbacks("peer_not_usmc") - plain0);
	t_assert(smc_ends() - before == 2 * (NOVER - moved),
		 "%lld ends on shared memory for the %lld connections the queue held",
		 smc_ends() - before, NOVER - moved);
}

static const struct t_scenario scenarios[] = {
	{ "early_close", sc_early_close },
	{ "client_gone", sc_client_gone },
	{ "burst", sc_burst },
	{ "overflow", sc_overflow },
};

int main(int argc, char **argv)
{
	t_name = "t_accept_queue";
	return t_selfdiff_main(argc, argv, scenarios, ARRAY_LEN(scenarios));
}
