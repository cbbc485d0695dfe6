/* SPDX-License-Identifier: MIT */
/*
 * semantics_opts.h - t_semantics scenarios: the socket options usmc uses
 * itself, as a program sees and sets them.
 */

/*
 * The inet options usmc uses as marks on its sockets (clc_bind.c:
 * IP_BIND_ADDRESS_NO_PORT, IP_RECVERR_RFC4884): a program sees the values
 * it set itself, on the listener, on what it accepts (inherited from the
 * listener, as the kernel copies it) and on its client socket; one byte
 * when it asks for less than an int, as the kernel answers.
 */
static void say_inet_opts(struct ctx *c, const char *what, int fd)
{
	int a = -1, b = -1;
	unsigned char byte = 0xff;
	socklen_t la = sizeof(a), lb = sizeof(b), l1 = 1;
	int ra = getsockopt(fd, SOL_IP, IP_BIND_ADDRESS_NO_PORT, &a, &la);
	int rb = getsockopt(fd, SOL_IP, 26 /* IP_RECVERR_RFC4884 */, &b, &lb);
	int r1 = getsockopt(fd, SOL_IP, IP_BIND_ADDRESS_NO_PORT, &byte, &l1);

	say(c, "%s: no_port=%d/%d(len %u) rfc4884=%d/%d(len %u) byte=%d/%u(len %u)", what, ra, a,
	    (unsigned int)la, rb, b, (unsigned int)lb, r1, byte, (unsigned int)l1);
}

static void set_inet_opt(struct ctx *c, int fd, int name, int v)
{
	say(c, "setsockopt(%s, %d)=%s", name == IP_BIND_ADDRESS_NO_PORT ? "no_port" : "rfc4884", v,
	    RV(setsockopt(fd, SOL_IP, name, &v, sizeof(v))));
}

static void inet_opts_s(struct ctx *c)
{
	int fd;

	say_inet_opts(c, "listener", c->lfd);
	set_inet_opt(c, c->lfd, IP_BIND_ADDRESS_NO_PORT, 1);
	set_inet_opt(c, c->lfd, 26, 1);
	say_inet_opts(c, "listener set", c->lfd);
	t_sync_post(c->sync);		/* now connect */
	fd = t_accept(c->lfd);
	say_inet_opts(c, "accepted", fd);
	t_recv_exact(fd, "c", 1);
	t_write_all(fd, "s", 1);
	say_inet_opts(c, "accepted, after a byte each way", fd);
	set_inet_opt(c, fd, IP_BIND_ADDRESS_NO_PORT, 0);
	set_inet_opt(c, fd, 26, 0);
	say_inet_opts(c, "accepted cleared", fd);
	set_inet_opt(c, c->lfd, IP_BIND_ADDRESS_NO_PORT, 0);
	set_inet_opt(c, c->lfd, 26, 0);
	say_inet_opts(c, "listener cleared", c->lfd);
	t_sync_wait(c->sync);
	close(fd);
}

static void inet_opts_c(struct ctx *c)
{
	int fd;

	t_sync_wait(c->sync);
	fd = t_connect(c->port);
	say_inet_opts(c, "client", fd);
	t_write_all(fd, "c", 1);
	t_recv_exact(fd, "s", 1);
	say_inet_opts(c, "client, after a byte each way", fd);
	set_inet_opt(c, fd, 26, 1);
	set_inet_opt(c, fd, IP_BIND_ADDRESS_NO_PORT, 1);
	say_inet_opts(c, "client set", fd);
	set_inet_opt(c, fd, 26, 0);
	say_inet_opts(c, "client cleared", fd);
	t_sync_post(c->sync);
	close(fd);
}

/*
 * A server that sets the mark options on what it accepted before the
 * client looked at its connect (non-blocking: the client's first look is
 * its poll): no value the program gives ever takes usmc's mark off the
 * kernel's socket, even for an instant, so the connection stays on shared
 * memory (a client checking the server's end in that instant used to
 * move to TCP, "unbound", while the server read the ring: both hung).
 */
static void inet_opts_early_s(struct ctx *c)
{
	int fd = t_accept(c->lfd);

	set_inet_opt(c, fd, IP_BIND_ADDRESS_NO_PORT, 0);
	set_inet_opt(c, fd, 26, 0);
	set_inet_opt(c, fd, 26, 1);
	set_inet_opt(c, fd, 26, 0);
	say_inet_opts(c, "accepted, set before the client looked", fd);
	t_sync_post(c->sync);		/* now look */
	t_recv_exact(fd, "c", 1);
	set_inet_opt(c, fd, 26, 0);
	set_inet_opt(c, fd, IP_BIND_ADDRESS_NO_PORT, 0);
	t_write_all(fd, "s", 1);
	say_inet_opts(c, "accepted, after a byte each way", fd);
	t_sync_wait(c->sync);
	close(fd);
}

static void inet_opts_early_c(struct ctx *c)
{
	struct sockaddr_in a = t_addr(c->port);
	int fd = t_ok(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0)), rc;
	struct pollfd p = { .fd = -1, .events = POLLOUT };
	char b[64];

	rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
	say(c, "connect=%s", rc && errno == EINPROGRESS ? "EINPROGRESS" : RV(rc));
	t_sync_post(c->sync);		/* accept and set */
	t_sync_wait(c->sync);
	p.fd = fd;
	rc = poll(&p, 1, 5000);
	say(c, "poll=%d revents=%s", rc, revents_str(p.revents, b, sizeof(b)));
	t_set_nonblock(fd, false);
	set_inet_opt(c, fd, 26, 0);
	/* The kernel's rules for the program's pointer and length. */
	say(c, "setsockopt(rfc4884, NULL, 4)=%s", RV(setsockopt(fd, SOL_IP, 26, NULL, 4)));
	say(c, "setsockopt(no_port, NULL, 4)=%s",
	    RV(setsockopt(fd, SOL_IP, IP_BIND_ADDRESS_NO_PORT, NULL, 4)));
	say(c, "setsockopt(no_port, 0x101, 1)=%s",
	    RV(setsockopt(fd, SOL_IP, IP_BIND_ADDRESS_NO_PORT, &(int){ 0x101 }, 1)));
	say_inet_opts(c, "client, one byte set", fd);
	say(c, "setsockopt(no_port, 1, 0)=%s",
	    RV(setsockopt(fd, SOL_IP, IP_BIND_ADDRESS_NO_PORT, &(int){ 1 }, 0)));
	say(c, "setsockopt(rfc4884, 2, 8)=%s", RV(setsockopt(fd, SOL_IP, 26, &(long){ 2 }, 8)));
	say_inet_opts(c, "client, lengths 0 and 8", fd);
	set_inet_opt(c, fd, IP_BIND_ADDRESS_NO_PORT, 0);
	set_inet_opt(c, fd, 26, 0);
	t_write_all(fd, "c", 1);
	t_recv_exact(fd, "s", 1);
	say_inet_opts(c, "client, after a byte each way", fd);
	t_sync_post(c->sync);
	close(fd);
}
