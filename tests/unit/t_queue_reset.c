// SPDX-License-Identifier: MIT
/*
 * t_queue_reset.c - clients queued on a listener that closes before
 * accepting them.  The kernel resets every connection still in the accept
 * queue; each client must see that reset as TCP shows it: poll and epoll
 * readiness, SO_ERROR, and the results of the reads and writes after it.
 * Under usmc such a client has a proposal posted that no server will take.
 *
 * Variants: blocking or non-blocking connect (its completion seen before
 * the reset, or not looked at until after), with or without bytes sent
 * before the reset, observed through poll, epoll or plain calls, with
 * SO_ERROR read first or not, and with the first client accepted before
 * the listener closes (it stays connected).
 *
 * Differential (t_selfdiff.h): accelerated, the program runs itself again
 * with USMC_DISABLE=1 and the two transcripts must be identical.
 */
#include "t_util.h"
#include "t_selfdiff.h"

#include <sys/epoll.h>

#define OBS	T_OBS
#define NCLI	4

enum how { H_PLAIN, H_POLL, H_EPOLL };

struct variant {
	bool nonblock, seen, data, soerr, accept_one;
	enum how how;
};

static void obs_res(const char *what, ssize_t n)
{
	if (n < 0)
		OBS(" %s=%s", what, t_errname(errno));
	else
		OBS(" %s=%zd", what, n);
}

static void obs_client(int c, const struct variant *v)
{
	char buf[64];
	socklen_t l;
	int e = 0;

	if (v->how == H_POLL) {
		struct pollfd p = { .fd = c, .events = POLLIN | POLLOUT | POLLRDHUP };
		int n = poll(&p, 1, 2000);

		OBS(" poll=%d/%#x", n, (unsigned int)p.revents);
	} else if (v->how == H_EPOLL) {
		struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP };
		int ep = epoll_create1(0), n;

		t_ok(ep);
		t_ok(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
		ev.events = 0;
		n = epoll_wait(ep, &ev, 1, 2000);
		OBS(" epoll=%d/%#x", n, ev.events);
		close(ep);
	}
	if (v->soerr) {
		l = sizeof(e);
		t_ok(getsockopt(c, SOL_SOCKET, SO_ERROR, &e, &l));
		OBS(" so_error=%s", e ? t_errname(e) : "0");
	}
	obs_res("recv", recv(c, buf, sizeof(buf), MSG_DONTWAIT));
	obs_res("send", send(c, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT));
	obs_res("recv", recv(c, buf, sizeof(buf), MSG_DONTWAIT));
	l = sizeof(e);
	t_ok(getsockopt(c, SOL_SOCKET, SO_ERROR, &e, &l));
	OBS(" so_error=%s", e ? t_errname(e) : "0");
}

static void run(const struct variant *v)
{
	int c[NCLI], s = -1, lfd, i;
	uint16_t port;

	lfd = t_listen(&port);
	for (i = 0; i < NCLI; i++) {
		struct sockaddr_in a = t_addr(port);

		c[i] = socket(AF_INET, SOCK_STREAM | (v->nonblock ? SOCK_NONBLOCK : 0), 0);
		t_ok(c[i]);
		if (connect(c[i], (struct sockaddr *)&a, sizeof(a)) && errno != EINPROGRESS)
			t_fail("connect: %s", t_errname(errno));
		if (v->nonblock && v->seen) {
			int e = 0;
			socklen_t l = sizeof(e);

			t_wait_fd(c[i], POLLOUT, 5000);
			t_ok(getsockopt(c[i], SOL_SOCKET, SO_ERROR, &e, &l));
			OBS("c%d connected so_error=%s\n", i, e ? t_errname(e) : "0");
		}
		if (v->data)
			obs_res("c_send", send(c[i], "hello", 5, MSG_NOSIGNAL));
	}
	if (v->data)
		OBS("\n");
	if (v->accept_one) {
		s = t_accept(lfd);
		OBS("accepted one\n");
	}
	close(lfd);
	/* The resets are sent within close() on loopback; let them land. */
	t_msleep(50);
	for (i = 0; i < NCLI; i++) {
		OBS("c%d:", i);
		obs_client(c[i], v);
		OBS("\n");
		close(c[i]);
	}
	if (s >= 0)
		close(s);
}

static void sweep(enum how how, bool accept_one)
{
	static const struct { bool nonblock, seen; } modes[] = {
		{ false, false }, { true, true }, { true, false },
	};
	unsigned int m;
	int d, so;

	for (m = 0; m < ARRAY_LEN(modes); m++)
		for (d = 0; d < 2; d++)
			for (so = 0; so < 2; so++) {
				struct variant v = {
					.nonblock = modes[m].nonblock, .seen = modes[m].seen,
					.data = d, .soerr = so, .accept_one = accept_one,
					.how = how,
				};

				OBS("-- nonblock=%d seen=%d data=%d soerr=%d\n", v.nonblock,
				    v.seen, v.data, v.soerr);
				run(&v);
			}
}

static void sc_plain(void) { sweep(H_PLAIN, false); }
static void sc_poll(void) { sweep(H_POLL, false); }
static void sc_epoll(void) { sweep(H_EPOLL, false); }
static void sc_plain_acc(void) { sweep(H_PLAIN, true); }
static void sc_poll_acc(void) { sweep(H_POLL, true); }
static void sc_epoll_acc(void) { sweep(H_EPOLL, true); }

/*
 * The order epoll reports a listener and the non-blocking connects that
 * made it readable (tornado's TCPServer test stops its server from the
 * first accept and expects the clients reported after it to see resets).
 */
static void sc_epoll_order(void)
{
	struct epoll_event ev[NCLI + 1];
	int c[NCLI], lfd, ep, i, n;
	uint16_t port;

	lfd = t_listen(&port);
	ep = epoll_create1(0);
	t_ok(ep);
	ev[0].events = EPOLLIN;
	ev[0].data.u32 = 100;
	t_ok(epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev[0]));
	for (i = 0; i < NCLI; i++) {
		struct sockaddr_in a = t_addr(port);

		c[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		t_ok(c[i]);
		if (connect(c[i], (struct sockaddr *)&a, sizeof(a)) && errno != EINPROGRESS)
			t_fail("connect: %s", t_errname(errno));
		ev[0].events = EPOLLOUT;
		ev[0].data.u32 = (uint32_t)i;
		t_ok(epoll_ctl(ep, EPOLL_CTL_ADD, c[i], &ev[0]));
	}
	/* Where the listener comes: the clients' order among themselves is
	 * not compared (usmc's ready list reports them newest first). */
	n = epoll_wait(ep, ev, NCLI + 1, 2000);
	OBS("epoll_wait=%d:", n);
	for (i = 0; i < n; i++)
		OBS(" %s", ev[i].data.u32 == 100 ? "L" : "c");
	OBS("\n");
	close(lfd);
	t_msleep(50);
	for (i = 0; i < NCLI; i++) {
		int e = 0;
		socklen_t l = sizeof(e);

		t_ok(getsockopt(c[i], SOL_SOCKET, SO_ERROR, &e, &l));
		OBS("c%d so_error=%s\n", i, e ? t_errname(e) : "0");
		close(c[i]);
	}
	close(ep);
}

static const struct t_scenario scenarios[] = {
	{ "epoll_order", sc_epoll_order },
	{ "plain", sc_plain },
	{ "poll", sc_poll },
	{ "epoll", sc_epoll },
	{ "plain_accepted", sc_plain_acc },
	{ "poll_accepted", sc_poll_acc },
	{ "epoll_accepted", sc_epoll_acc },
};

int main(int argc, char **argv)
{
	return t_selfdiff_main(argc, argv, scenarios, ARRAY_LEN(scenarios));
}
