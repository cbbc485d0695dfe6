// SPDX-License-Identifier: MIT
/*
 * t_marks.c - usmc's marks stay on the kernel's sockets while a program
 * writes the options that carry them.
 *
 * usmc proves which process holds a connection's other end by two inet
 * options it sets on its sockets (clc_bind.c: IP_BIND_ADDRESS_NO_PORT on a
 * listener and what it accepts, IP_RECVERR_RFC4884 on a client and on a
 * server end that decided), and a program that sets them sees its own
 * values.  A program writing 0 must never take a mark off, not even for
 * the instant between the kernel taking its value and usmc putting the
 * mark back: a client proving the server's end in that instant moved to
 * TCP ("unbound") while the server read the ring, and both hung
 * (t_semantics inet_opts, one run in a few hundred).
 *
 * One thread writes 0 to both options on the listener, the accepted socket
 * and the client, and 1 to the listener's RFC4884, over and over; the main
 * thread asks the kernel (sock_diag, as usmc asks) for the three sockets'
 * marks meanwhile, and counts every answer without them, and every one
 * with the decided mark on the listener (what it accepts would carry it
 * before any decision).  Then the connection must still be on
 * shared memory, carry bytes both ways, and show the program its 0s.
 *
 * Then the same writer against connect(): a thread writes 0 to RFC4884 on
 * whatever socket the main thread is connecting, over and over, while it
 * makes CONNECTS connections one after the other; every one must be on
 * shared memory (a write that read the socket as not yet a client must
 * not land after connect() marked it: the server would see an unmarked
 * client end and decline, unbound; that window, a few instructions wide
 * before connect() took the socket's lock to become a client, was not seen
 * here in 1200 connections, and what this asserts is that no write of
 * the program's during connect() costs a connection its acceleration).
 * Skips (77) when not accelerating.
 */
#include "t_util.h"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <pthread.h>
#include <stdatomic.h>

#ifndef IP_RECVERR_RFC4884
#define IP_RECVERR_RFC4884	26
#endif

#define WRITES		20000

struct writer {
	int lfd, sfd, cfd;
	volatile int done;
};

static void set(int fd, int name, int v)
{
	t_ok(setsockopt(fd, SOL_IP, name, &v, sizeof(v)));
}

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	int i;

	for (i = 0; i < WRITES; i++) {
		set(w->lfd, IP_BIND_ADDRESS_NO_PORT, 0);
		set(w->lfd, IP_RECVERR_RFC4884, 1);	/* never to the kernel */
		set(w->lfd, IP_RECVERR_RFC4884, 0);
		set(w->sfd, IP_BIND_ADDRESS_NO_PORT, 0);
		set(w->sfd, IP_RECVERR_RFC4884, 0);
		set(w->cfd, IP_RECVERR_RFC4884, 0);
	}
	__atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* The kernel's INET_DIAG_SOCKOPT of the socket 127.0.0.1:sport whose
 * peer is 127.0.0.1:dport (0: the listener): 1 NO_PORT, 2 RFC4884. */
static int marks(int nl, uint16_t sport, uint16_t dport)
{
	struct {
		struct nlmsghdr h;
		struct inet_diag_req_v2 r;
	} q;
	static uint32_t seq;
	char buf[8192] __attribute__((aligned(8)));
	struct sockaddr_nl k = { .nl_family = AF_NETLINK };
	struct nlmsghdr *h;
	ssize_t n;

	memset(&q, 0, sizeof(q));
	q.h.nlmsg_len = sizeof(q);
	q.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	q.h.nlmsg_flags = NLM_F_REQUEST;
	q.h.nlmsg_seq = ++seq;
	q.r.sdiag_family = AF_INET;
	q.r.sdiag_protocol = IPPROTO_TCP;
	q.r.idiag_states = ~0u;
	q.r.id.idiag_sport = htons(sport);
	q.r.id.idiag_dport = htons(dport);
	q.r.id.idiag_src[0] = htonl(INADDR_LOOPBACK);
	if (dport)
		q.r.id.idiag_dst[0] = htonl(INADDR_LOOPBACK);
	q.r.id.idiag_cookie[0] = q.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
	t_ok((int)sendto(nl, &q, sizeof(q), 0, (struct sockaddr *)&k, sizeof(k)));
	for (;;) {
		n = recv(nl, buf, sizeof(buf), 0);
		if (n <= 0)
			t_fail("sock_diag: %s", n ? strerror(errno) : "EOF");
		for (h = (struct nlmsghdr *)buf; NLMSG_OK(h, (unsigned long)n); h = NLMSG_NEXT(h, n)) {
			const struct inet_diag_msg *m = NLMSG_DATA(h);
			const struct rtattr *a;
			long len;

			if (h->nlmsg_seq != seq)
				continue;
			if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY)
				t_fail("sock_diag: no socket 127.0.0.1:%u -> %u", sport, dport);
			len = (long)(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
			for (a = (const struct rtattr *)(m + 1); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
				const struct inet_diag_sockopt *o = RTA_DATA(a);

				if (a->rta_type == INET_DIAG_SOCKOPT)
					return (o->bind_address_no_port ? 1 : 0) |
					       (o->recverr_rfc4884 ? 2 : 0);
			}
			t_skip("the kernel reports no INET_DIAG_SOCKOPT (before 5.10)");
		}
	}
}

#define CONNECTS	150

static _Atomic int connecting_fd = -1;
static _Atomic int connects_done;

/* Errors are expected: the descriptor may be closed under us. */
static void *connect_writer(void *arg)
{
	int v = 0, fd;

	(void)arg;
	while (!atomic_load(&connects_done)) {
		fd = atomic_load(&connecting_fd);
		if (fd >= 0)
			(void)setsockopt(fd, SOL_IP, IP_RECVERR_RFC4884, &v, sizeof(v));
	}
	return NULL;
}

static void check_connects(void)
{
	struct sockaddr_in a;
	char mode[32], why[64];
	int lfd, i, c, sfd, off = 0;
	uint16_t port;
	pthread_t th;

	lfd = t_listen(&port);
	a = t_addr(port);
	if (pthread_create(&th, NULL, connect_writer, NULL))
		t_fail("pthread_create");
	for (i = 0; i < CONNECTS; i++) {
		c = t_ok(socket(AF_INET, SOCK_STREAM, 0));
		atomic_store(&connecting_fd, c);
		if (connect(c, (struct sockaddr *)&a, sizeof(a)))
			t_fail("connect: %s", strerror(errno));
		sfd = t_accept(lfd);
		atomic_store(&connecting_fd, -1);
		t_xfer(c, sfd, "c");
		t_xfer(sfd, c, "s");
		t_fd_state(c, mode, why, sizeof(mode));
		if (strcmp(mode, "SMCD")) {
			printf("connection %d: %s (%s)\n", i, mode, why);
			off++;
		}
		close(c);
		close(sfd);
	}
	atomic_store(&connects_done, 1);
	pthread_join(th, NULL);
	close(lfd);
	printf("%d connections made while a thread wrote RFC4884 0s: %d not on shared memory\n",
	       CONNECTS, off);
	if (off)
		t_fail("a program's write during connect() sent %d of %d connections to TCP", off,
		       CONNECTS);
}

static void say_value(int fd, const char *what, int name, int want)
{
	int v = -1;
	socklen_t l = sizeof(v);

	t_ok(getsockopt(fd, SOL_IP, name, &v, &l));
	if (v != want)
		t_fail("%s: the program reads %d, it set %d", what, v, want);
}

int main(void)
{
	struct writer w;
	pthread_t th;
	uint16_t port, cport;
	long asks = 0, lost_l = 0, lost_s = 0, lost_c = 0, extra_l = 0;
	char mode[32], why[64];
	int nl, done;

	t_name = "t_marks";
	if (!t_accel())
		t_skip("not accelerating");
	alarm(60);
	w.lfd = t_listen(&port);
	w.cfd = t_connect(port);
	w.sfd = t_accept(w.lfd);
	cport = t_sock_port(w.cfd, false);
	t_xfer(w.cfd, w.sfd, "c");
	t_xfer(w.sfd, w.cfd, "s");
	t_fd_state(w.sfd, mode, why, sizeof(mode));
	if (strcmp(mode, "SMCD"))
		t_fail("the connection is %s (%s) before the test, expected SMCD", mode, why);
	w.done = 0;
	nl = t_ok(socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
	if (marks(nl, port, 0) != 1 || marks(nl, port, cport) != 3 || !(marks(nl, cport, port) & 2))
		t_fail("usmc's marks are not on the sockets: listener %d, server end %d, client %d",
		       marks(nl, port, 0), marks(nl, port, cport), marks(nl, cport, port));

	if (pthread_create(&th, NULL, writer_main, &w))
		t_fail("pthread_create");
	do {
		int ml;

		done = __atomic_load_n(&w.done, __ATOMIC_ACQUIRE);
		ml = marks(nl, port, 0);
		lost_l += !(ml & 1);
		extra_l += !!(ml & 2);
		lost_s += marks(nl, port, cport) != 3;
		lost_c += !(marks(nl, cport, port) & 2);
		asks++;
	} while (!done);
	pthread_join(th, NULL);
	close(nl);
	printf("%ld looks during %d writes: listener's mark off %ld times, server end's %ld, "
	       "client's %ld; the listener said decided %ld times\n", asks, WRITES, lost_l, lost_s,
	       lost_c, extra_l);
	if (lost_l || lost_s || lost_c)
		t_fail("a program's 0 took usmc's mark off the kernel's socket");
	if (extra_l)
		t_fail("a program's 1 put the decided mark on a listener (copied to what it accepts)");

	say_value(w.lfd, "listener", IP_BIND_ADDRESS_NO_PORT, 0);
	say_value(w.sfd, "server end", IP_RECVERR_RFC4884, 0);
	say_value(w.cfd, "client", IP_RECVERR_RFC4884, 0);
	t_send_pat(w.cfd, 1, 100000);
	t_recv_pat(w.sfd, 1, 100000);
	t_send_pat(w.sfd, 2, 100000);
	t_recv_pat(w.cfd, 2, 100000);
	t_fd_state(w.cfd, mode, why, sizeof(mode));
	if (strcmp(mode, "SMCD"))
		t_fail("the client is %s (%s) after the writes, expected SMCD", mode, why);
	close(w.cfd);
	close(w.sfd);
	close(w.lfd);
	check_connects();
	return T_EXIT_PASS;
}
