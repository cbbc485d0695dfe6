// SPDX-License-Identifier: MIT
/*
 * t_sockbuf.c - SO_SNDBUF / SO_RCVBUF / SO_RCVLOWAT as TCP honours them: getsockopt
 * answers what the kernel would (twice the value set), and a sender never
 * has much more in flight than TCP would hold with those sizes, so a peer
 * that closes in the middle of receiving makes the sender fail as over TCP
 * (asyncio's sendfile test).  SO_RCVLOWAT (rcvlowat): poll and epoll
 * report readable only from that many bytes on, a non-blocking read takes
 * what is there, a blocking one waits for that many; an accepted socket
 * has its listener's.
 *
 * Differential (t_selfdiff.h): the transcript under usmc equals the one
 * with USMC_DISABLE=1; under usmc the connections are on shared memory.
 */
#include "t_util.h"
#include "t_selfdiff.h"

#include <poll.h>
#include <pthread.h>
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

struct later {
	int fd;
	size_t n;
};

static void *send_later(void *arg)
{
	struct later *l = arg;
	char buf[64];

	usleep(100 * 1000);	/* the reader is asleep by then (sequencing only) */
	memset(buf, 'z', sizeof(buf));
	t_write_all(l->fd, buf, l->n);
	return NULL;
}

static void lowat_look(int c, int s, const char *what)
{
	struct pollfd p = { .fd = s, .events = POLLIN };
	struct epoll_event ev;
	int ep = t_ok(epoll_create1(0)), n;

	ev.events = EPOLLIN;
	ev.data.u64 = 7;
	t_ok(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
	n = poll(&p, 1, 50);
	T_OBS("%s: poll %d revents %#x,", what, n, n > 0 ? p.revents : 0);
	n = epoll_wait(ep, &ev, 1, 50);
	T_OBS(" epoll %d events %#x\n", n, n > 0 ? ev.events : 0);
	close(ep);
	(void)c;
}

static void sc_rcvlowat(void)
{
	struct sockaddr_in a = t_addr(0);
	int lfd = t_ok(socket(AF_INET, SOCK_STREAM, 0)), c, s, v = 10;
	struct later l;
	char buf[100];
	pthread_t th;
	ssize_t n;

	/* Set on the listener: the accepted socket has it, as in TCP. */
	t_ok(setsockopt(lfd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)));
	t_ok(bind(lfd, (struct sockaddr *)&a, sizeof(a)));
	t_ok(listen(lfd, 8));
	a = t_addr(t_sock_port(lfd, false));
	c = t_ok(socket(AF_INET, SOCK_STREAM, 0));
	t_ok(connect(c, (struct sockaddr *)&a, sizeof(a)));
	s = t_accept(lfd);
	close(lfd);
	T_OBS("accepted SO_RCVLOWAT %d\n", getbuf_opt(s, SO_RCVLOWAT));
	t_write_all(c, "xxxxx", 5);
	usleep(20 * 1000);
	lowat_look(c, s, "5 of 10 bytes");
	t_set_nonblock(s, true);
	n = recv(s, buf, sizeof(buf), 0);
	T_OBS("non-blocking read: %zd\n", n);
	t_set_nonblock(s, false);
	t_write_all(c, "yyy", 3);
	l.fd = c;
	l.n = 20;
	if (pthread_create(&th, NULL, send_later, &l))
		t_fail("pthread_create");
	n = recv(s, buf, sizeof(buf), 0);
	T_OBS("blocking read: %zd (3 there, 20 more later)\n", n);
	pthread_join(th, NULL);
	t_write_all(c, "0123456789ab", 12);
	usleep(20 * 1000);
	lowat_look(c, s, "12 of 10 bytes");
	n = recv(s, buf, 4, MSG_PEEK);
	T_OBS("peek 4: %zd\n", n);
	n = recv(s, buf, sizeof(buf), 0);
	T_OBS("read: %zd\n", n);
	v = 1;
	t_ok(setsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)));
	t_write_all(c, "q", 1);
	usleep(20 * 1000);
	lowat_look(c, s, "lowat 1, 1 byte");
	n = recv(s, buf, sizeof(buf), 0);
	T_OBS("read: %zd\n", n);
	t_write_all(c, "ab", 2);
	shutdown(c, SHUT_WR);
	v = 50;
	t_ok(setsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)));
	usleep(20 * 1000);
	lowat_look(c, s, "2 of 50 bytes, then EOF");
	n = recv(s, buf, sizeof(buf), 0);
	T_OBS("read: %zd, then %zd\n", n, recv(s, buf, sizeof(buf), 0));
	t_assert_smc(s);
	close(c);
	close(s);
}

static const struct t_scenario scenarios[] = {
	{ "getsockopt", sc_getsockopt },
	{ "inflight", sc_inflight },
	{ "peer_closes", sc_peer_closes },
	{ "et_writer", sc_et_writer },
	{ "rcvlowat", sc_rcvlowat },
};

int main(int argc, char **argv)
{
	t_name = "t_sockbuf";
	return t_selfdiff_main(argc, argv, scenarios, ARRAY_LEN(scenarios));
}
