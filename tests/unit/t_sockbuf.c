// SPDX-License-Identifier: MIT
/*
 * t_sockbuf.c - SO_SNDBUF / SO_RCVBUF as TCP honours them: getsockopt
 * answers what the kernel would (twice the value set), and a sender never
 * has much more in flight than TCP would hold with those sizes, so a peer
 * that closes in the middle of receiving makes the sender fail as over TCP
 * (asyncio's sendfile test).
 *
 * Differential (t_selfdiff.h): the transcript under usmc equals the one
 * with USMC_DISABLE=1; under usmc the connections are on shared memory.
 */
#include "t_util.h"
#include "t_selfdiff.h"

#include <sys/epoll.h>

#define BUF_SET		16384			/* what the program asks for */
#define BIG		(3u << 20)		/* less than a ring, far more than the buffers */

static void setbuf_opt(int fd, int name, int v)
{
	t_ok(setsockopt(fd, SOL_SOCKET, name, &v, sizeof(v)));
}

static int getbuf_opt(int fd, int name)
{
	socklen_t l = sizeof(int);
	int v = -1;

	t_ok(getsockopt(fd, SOL_SOCKET, name, &v, &l));
	return v;
}

/* A pair whose client asked for SO_SNDBUF and whose listener for
 * SO_RCVBUF before connecting (accepted sockets inherit it, as in TCP). */
static void small_pair(int *c, int *s)
{
	struct sockaddr_in a = t_addr(0);
	int lfd = t_ok(socket(AF_INET, SOCK_STREAM, 0));
	char b;

	setbuf_opt(lfd, SO_RCVBUF, BUF_SET);
	t_ok(bind(lfd, (struct sockaddr *)&a, sizeof(a)));
	t_ok(listen(lfd, 8));
	a = t_addr(t_sock_port(lfd, false));
	*c = t_ok(socket(AF_INET, SOCK_STREAM, 0));
	setbuf_opt(*c, SO_SNDBUF, BUF_SET);
	t_ok(connect(*c, (struct sockaddr *)&a, sizeof(a)));
	*s = t_accept(lfd);
	close(lfd);
	t_write_all(*c, "c", 1);
	t_read_all(*s, &b, 1);
	t_write_all(*s, "s", 1);
	t_read_all(*c, &b, 1);
	t_assert_smc(*c);
	t_assert_smc(*s);
}

static void sc_getsockopt(void)
{
	int c, s;

	small_pair(&c, &s);
	T_OBS("client SO_SNDBUF %d, server SO_RCVBUF %d\n", getbuf_opt(c, SO_SNDBUF),
	      getbuf_opt(s, SO_RCVBUF));
	setbuf_opt(c, SO_RCVBUF, 40000);
	setbuf_opt(s, SO_SNDBUF, 50000);
	T_OBS("set on the connection: client SO_RCVBUF %d, server SO_SNDBUF %d\n",
	      getbuf_opt(c, SO_RCVBUF), getbuf_opt(s, SO_SNDBUF));
	t_assert_smc(c);
	close(c);
	close(s);
}

/* What a non-blocking sender gets in before EAGAIN, the reader asleep. */
static void sc_inflight(void)
{
	static char buf[65536];
	size_t total = 0;
	int c, s;

	small_pair(&c, &s);
	t_set_nonblock(c, true);
	for (;;) {
		ssize_t n;

		t_pat_fill(3, total, buf, sizeof(buf));
		n = write(c, buf, sizeof(buf));
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0)
			t_fail("write: %s", strerror(errno));
		total += (size_t)n;
		if (total > BIG)
			break;
	}
	T_OBS("in flight before EAGAIN: under 1 MiB: %d\n", total < (1u << 20));
	t_recv_pat(s, 3, total);
	T_OBS("all of it arrives: ok\n");
	{
		struct pollfd p = { .fd = c, .events = POLLOUT };

		T_OBS("writable again: %d\n", poll(&p, 1, 5000) == 1 && (p.revents & POLLOUT));
	}
	t_assert_smc(c);
	close(c);
	close(s);
}

/* The reader closes after a little: the blocked sender fails, as over TCP. */
static void sc_peer_closes(void)
{
	int c, s, lp[2];
	char msg[128] = "";
	pid_t pid;

	small_pair(&c, &s);
	t_ok(pipe(lp));
	pid = t_fork_helper();
	if (pid == 0) {
		static char buf[65536];
		size_t off = 0;
		int e = 0;

		signal(SIGPIPE, SIG_IGN);
		close(lp[0]);
		close(s);
		while (off < BIG) {
			ssize_t n;

			t_pat_fill(4, off, buf, sizeof(buf));
			n = write(c, buf, MIN(sizeof(buf), BIG - off));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				e = errno;
				break;
			}
			off += (size_t)n;
		}
		snprintf(msg, sizeof(msg), "sender: %s\n", off == BIG ? "all sent, no error" :
			 e == EPIPE || e == ECONNRESET ? "failed (EPIPE/ECONNRESET)" : t_errname(e));
		t_ok(write(lp[1], msg, strlen(msg)));
		_exit(0);
	}
	close(lp[1]);
	close(c);
	/* Give the sender time to get stuck (or, with no limit, done): the
	 * outcome must not depend on it. */
	t_msleep(200);
	t_recv_pat(s, 4, 100000);
	close(s);
	{
		ssize_t n = read(lp[0], msg, sizeof(msg) - 1);

		msg[n > 0 ? n : 0] = '\0';
	}
	t_ok(waitpid(pid, NULL, 0));
	close(lp[0]);
	T_OBS("%s", msg);
}

/*
 * An edge-triggered writer with both buffer sizes set: every time a write
 * finds no room, an EPOLLOUT edge follows once the reader makes room.
 * (The room a writer may use is then far below the ring's size; an edge
 * rule that waited for a whole ring to go out never fired: a hang.)
 */
static void sc_et_writer(void)
{
	static char buf[65536];
	struct epoll_event ev = { .events = EPOLLOUT | EPOLLET };
	size_t off = 0;
	int c, s, ep, lost = 0;
	pid_t pid;

	small_pair(&c, &s);
	pid = t_fork_helper();
	if (pid == 0) {
		close(c);
		t_recv_pat(s, 5, BIG);
		_exit(0);
	}
	close(s);
	t_set_nonblock(c, true);
	ep = t_ok(epoll_create1(0));
	t_ok(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
	while (off < BIG) {
		ssize_t n;

		t_pat_fill(5, off, buf, sizeof(buf));
		n = write(c, buf, MIN(sizeof(buf), BIG - off));
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN)
			t_fail("write: %s", strerror(errno));
		if (epoll_wait(ep, &ev, 1, 10000) != 1) {
			lost = 1;
			break;
		}
	}
	T_OBS("edge-triggered writer: all sent: %d, an edge lost: %d\n", off == BIG, lost);
	if (lost)
		kill(pid, SIGKILL);
	t_ok(waitpid(pid, NULL, 0));
	close(ep);
	close(c);
}

static const struct t_scenario scenarios[] = {
	{ "getsockopt", sc_getsockopt },
	{ "inflight", sc_inflight },
	{ "peer_closes", sc_peer_closes },
	{ "et_writer", sc_et_writer },
};

int main(int argc, char **argv)
{
	t_name = "t_sockbuf";
	return t_selfdiff_main(argc, argv, scenarios, ARRAY_LEN(scenarios));
}
