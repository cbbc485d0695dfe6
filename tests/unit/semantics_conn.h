// SPDX-License-Identifier: MIT
/*
 * semantics_conn.h - t_semantics scenarios about the connection itself:
 * resets and SO_LINGER, addresses and socket options, O_NONBLOCK toggling,
 * accept4, connect (non-blocking, refused, never connected), who speaks
 * first, early data, SO_RCVTIMEO/SO_SNDTIMEO, shutdown.
 *
 * Not a general header: it is included by t_semantics.c alone, after that
 * file's helpers (struct ctx, say(), RV(), settle(), drain_pat()...) and
 * before its scenario table.  Its functions are static on purpose: exactly
 * one translation unit includes it, and every one of them is used there.
 */
#ifndef SEMANTICS_CONN_H
#define SEMANTICS_CONN_H

/* Closing with unread data resets the connection: ECONNRESET once. */
static void reset_c(struct ctx *c)
{
	char buf[16];

	say(c, "write=%s", RV(write(c->fd, "unread data", 11)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	settle();
	say_poll(c, "after reset", c->fd, 0);
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	say(c, "send(NOSIGNAL)=%s", RV(send(c->fd, "x", 1, MSG_NOSIGNAL)));
	say(c, "so_error=%d", so_error(c->fd));
}

static void reset_s(struct ctx *c)
{
	t_sync_wait(c->sync);
	settle();
	say(c, "close with unread=%s", RV(close(c->fd)));
	t_sync_post(c->sync);
}

/* ... and SO_ERROR takes the error first. */
static void reset_soerror_c(struct ctx *c)
{
	char buf[16];

	say(c, "write=%s", RV(write(c->fd, "unread data", 11)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	settle();
	say_poll(c, "reset", c->fd, 0);
	say(c, "so_error=%s", t_errname(so_error(c->fd)));
	/* The error was taken: no POLLERR any more, the hang-up stays. */
	say_poll(c, "error taken", c->fd, 0);
	say(c, "so_error=%s", t_errname(so_error(c->fd)));
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	say(c, "send(NOSIGNAL)=%s", RV(send(c->fd, "x", 1, MSG_NOSIGNAL)));
}

/* ... and a writer learns it too. */
static void reset_writer_c(struct ctx *c)
{
	say(c, "write=%s", RV(write(c->fd, "unread data", 11)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	settle();
	say(c, "send(NOSIGNAL)=%s", RV(send(c->fd, "x", 1, MSG_NOSIGNAL)));
	say(c, "send(NOSIGNAL)=%s", RV(send(c->fd, "x", 1, MSG_NOSIGNAL)));
	say(c, "read=%s", RV(read(c->fd, (char[8]){ 0 }, 8)));
	say(c, "sigpipes=%d", (int)sigpipes);
}

/* The peer shuts down first, then closes with our bytes unread: its
 * FIN came before its reset, which TCP reports to a sender as EPIPE, not
 * ECONNRESET (socat tearing down after a curl abort: the backend's write
 * said ECONNRESET under usmc, EPIPE plain); reads end at the FIN. */
static void fin_reset_s(struct ctx *c)
{
	t_sync_wait(c->sync);
	settle();
	say(c, "shutdown(SHUT_WR)=%s", RV(shutdown(c->fd, SHUT_WR)));
	settle();
	say(c, "close with unread=%s", RV(close(c->fd)));
	t_sync_post(c->sync);
}

static void fin_reset_writer_c(struct ctx *c)
{
	reset_writer_c(c);
}

static void fin_reset_soerror_c(struct ctx *c)
{
	say(c, "write=%s", RV(write(c->fd, "unread data", 11)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	settle();
	say(c, "so_error=%s", t_errname(so_error(c->fd)));
	say(c, "so_error=%s", t_errname(so_error(c->fd)));
	say(c, "send(NOSIGNAL)=%s", RV(send(c->fd, "x", 1, MSG_NOSIGNAL)));
	say(c, "read=%s", RV(read(c->fd, (char[8]){ 0 }, 8)));
}

/* SO_LINGER {1, 0}: close sends RST even with nothing unread. */
static void linger0_c(struct ctx *c)
{
	t_sync_wait(c->sync);
	settle();
	say(c, "read=%s", RV(read(c->fd, (char[8]){ 0 }, 8)));
	say(c, "read=%s", RV(read(c->fd, (char[8]){ 0 }, 8)));
}

static void linger0_s(struct ctx *c)
{
	struct linger l = { 1, 0 };

	say(c, "SO_LINGER=%s", RV(setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l))));
	say(c, "close=%s", RV(close(c->fd)));
	t_sync_post(c->sync);
}

/* Addresses and socket options are those of the TCP connection. */
struct addrs {
	struct sockaddr_in local, peer;
	socklen_t llen, plen;
};

static void get_addrs(int fd, struct addrs *a)
{
	a->llen = a->plen = sizeof(a->local);
	if (getsockname(fd, (struct sockaddr *)&a->local, &a->llen) ||
	    getpeername(fd, (struct sockaddr *)&a->peer, &a->plen))
		t_fail("getsockname/getpeername: %s", strerror(errno));
}

static bool sa_eq(const struct sockaddr_in *x, const struct sockaddr_in *y)
{
	return x->sin_family == y->sin_family && x->sin_port == y->sin_port &&
	       x->sin_addr.s_addr == y->sin_addr.s_addr;
}

static void sockopts(struct ctx *c)
{
	int v = -1, on = 1;
	socklen_t l = sizeof(v);

	say(c, "so_error=%d", so_error(c->fd));
	getsockopt(c->fd, SOL_SOCKET, SO_TYPE, &v, &l);
	say(c, "so_type=%d", v);
	l = sizeof(v);
	getsockopt(c->fd, SOL_SOCKET, SO_DOMAIN, &v, &l);
	say(c, "so_domain=%d", v);
	l = sizeof(v);
	getsockopt(c->fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l);
	say(c, "so_acceptconn=%d", v);
	say(c, "TCP_NODELAY set=%s", RV(setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on))));
	l = sizeof(v);
	getsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &v, &l);
	say(c, "TCP_NODELAY=%d", v != 0);
}

static void addresses_c(struct ctx *c)
{
	struct addrs me, srv;

	get_addrs(c->fd, &me);
	t_sync_recv(c->sync, &srv, sizeof(srv));
	say(c, "family=%d len=%u/%u", me.local.sin_family, me.llen, me.plen);
	say(c, "local==server.peer:%d peer==server.local:%d peer.port==listen port:%d",
	    sa_eq(&me.local, &srv.peer), sa_eq(&me.peer, &srv.local),
	    ntohs(me.peer.sin_port) == c->port);
	say(c, "local addr loopback:%d", me.local.sin_addr.s_addr == htonl(INADDR_LOOPBACK));
	sockopts(c);
}

static void addresses_s(struct ctx *c)
{
	struct addrs me;
	struct sockaddr_in a;
	socklen_t al = sizeof(a);

	get_addrs(c->fd, &me);
	t_sync_send(c->sync, &me, sizeof(me));
	say(c, "family=%d len=%u/%u local.port==listen port:%d", me.local.sin_family, me.llen,
	    me.plen, ntohs(me.local.sin_port) == c->port);
	getsockname(c->lfd, (struct sockaddr *)&a, &al);
	say(c, "listener so_error=%d", so_error(c->lfd));
	sockopts(c);
}

/* O_NONBLOCK (fcntl and FIONBIO) switches a connection both ways. */
static void nonblock_toggle_c(struct ctx *c)
{
	char buf[16];
	int on = 1, off = 0;
	long n;

	say(c, "nonblock=%d", !!(fcntl(c->fd, F_GETFL) & O_NONBLOCK));
	t_set_nonblock(c->fd, true);
	say(c, "nonblock=%d", !!(fcntl(c->fd, F_GETFL) & O_NONBLOCK));
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	t_set_nonblock(c->fd, false);
	say(c, "FIONBIO=%s", RV(ioctl(c->fd, FIONBIO, &on)));
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	say(c, "nonblock=%d", !!(fcntl(c->fd, F_GETFL) & O_NONBLOCK));
	say(c, "FIONBIO=%s", RV(ioctl(c->fd, FIONBIO, &off)));
	say(c, "nonblock=%d", !!(fcntl(c->fd, F_GETFL) & O_NONBLOCK));
	t_sync_post(c->sync);
	n = read(c->fd, buf, sizeof(buf));
	say(c, "blocking read=%s %s", RVN(n), shown(buf, n));
}

static void nonblock_toggle_s(struct ctx *c)
{
	t_sync_wait(c->sync);
	t_msleep(100);
	say(c, "write=%s", RV(write(c->fd, "late", 4)));
}

/* accept4 flags, and EAGAIN from a non-blocking listener. */
static void accept4_s(struct ctx *c)
{
	char buf[16];
	long n;
	int fd;

	t_set_nonblock(c->lfd, true);
	say(c, "accept4(empty)=%s", RV(accept4(c->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)));
	t_sync_post(c->sync);
	say(c, "listener poll=%#x", t_wait_fd(c->lfd, POLLIN, 5000));
	fd = accept4(c->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		t_fail("accept4: %s", strerror(errno));
	say(c, "accept4 ok");
	say(c, "nonblock=%d cloexec=%d", !!(fcntl(fd, F_GETFL) & O_NONBLOCK),
	    !!(fcntl(fd, F_GETFD) & FD_CLOEXEC));
	say(c, "read=%s", RV(read(fd, buf, sizeof(buf))));
	t_sync_post(c->sync);
	say(c, "poll=%#x", t_wait_fd(fd, POLLIN, 5000));
	n = read(fd, buf, sizeof(buf));
	say(c, "read=%s %s", RVN(n), shown(buf, n));
	close(fd);
}

static void accept4_c(struct ctx *c)
{
	t_sync_wait(c->sync);
	c->fd = t_connect(c->port);
	t_sync_wait(c->sync);
	say(c, "write=%s", RV(write(c->fd, "data", 4)));
}

/* Non-blocking connect: EINPROGRESS, writable, SO_ERROR 0. */
static void connect_nb_c(struct ctx *c)
{
	struct sockaddr_in a = t_addr(c->port);
	struct pollfd p;
	char buf[8];
	long n;
	int r;

	c->fd = t_ok(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
	say(c, "connect=%s", RV(connect(c->fd, (struct sockaddr *)&a, sizeof(a))));
	p.fd = c->fd;
	p.events = POLLOUT;
	r = poll(&p, 1, 5000);
	say(c, "poll=%d revents=%#x", r, p.revents);
	say(c, "so_error=%d", so_error(c->fd));
	say(c, "connect again=%s", RV(connect(c->fd, (struct sockaddr *)&a, sizeof(a))));
	say(c, "write=%s", RV(write(c->fd, "hi", 2)));
	t_set_nonblock(c->fd, false);
	n = read(c->fd, buf, sizeof(buf));
	say(c, "read=%s %s", RVN(n), shown(buf, n));
}

static void connect_nb_s(struct ctx *c)
{
	char buf[8];
	long n;

	n = recv(c->fd, buf, 2, MSG_WAITALL);
	say(c, "read=%s %s", RVN(n), shown(buf, n));
	say(c, "write=%s", RV(write(c->fd, "ok", 2)));
	t_msleep(20);
}

/* Request/response, the client speaking first. */
static void client_first_c(struct ctx *c)
{
	say(c, "request=%s", RV(write(c->fd, "GET / HTTP/1.0\r\n\r\n", 18)));
	say(c, "response bytes=%zu", drain_pat(c->fd, 6, 5000));
}

static void client_first_s(struct ctx *c)
{
	char buf[18];
	long n;

	n = recv(c->fd, buf, sizeof(buf), MSG_WAITALL);
	say(c, "request=%s %s", RVN(n), shown(buf, n));
	t_send_pat(c->fd, 6, 100000);
	say(c, "close=%s", RV(close(c->fd)));
}

/* The server speaks first (SMTP, MySQL...): the greeting goes out right
 * after accept, racing the client's connect(). Repeated: every one of
 * these connections must be accelerated. */
#define SERVER_FIRST_N 12

static void server_first_s(struct ctx *c)
{
	char buf[16];
	long n;
	int i;

	for (i = 0; i < SERVER_FIRST_N; i++) {
		int fd = t_accept(c->lfd);

		n = write(fd, "220 welcome\r\n", 13);
		if (i == 0)
			say(c, "greeting=%s", fmt_rv(n, errno));
		n = recv(fd, buf, 6, MSG_WAITALL);
		if (i == 0)
			say(c, "command=%s %s", fmt_rv(n, errno), shown(buf, n));
		n = write(fd, "221 bye\r\n", 9);
		close(fd);
	}
}

static void server_first_c(struct ctx *c)
{
	char buf[32];
	long n;
	int i;

	for (i = 0; i < SERVER_FIRST_N; i++) {
		int fd = t_connect(c->port);

		n = recv(fd, buf, 13, MSG_WAITALL);
		if (i == 0)
			say(c, "greeting=%s %s", fmt_rv(n, errno), shown(buf, n));
		write(fd, "QUIT\r\n", 6);
		n = recv(fd, buf, sizeof(buf), MSG_WAITALL);
		if (i == 0)
			say(c, "until EOF=%s %s", fmt_rv(n, errno), shown(buf, n));
		close(fd);
	}
}

/* Data written before the server accept()ed. */
static void early_data_c(struct ctx *c)
{
	char buf[8];
	long n;

	t_send_pat(c->fd, 7, 16000);
	say(c, "wrote 16000 before accept");
	t_sync_post(c->sync);
	n = recv(c->fd, buf, 2, MSG_WAITALL);
	say(c, "reply=%s %s", RVN(n), shown(buf, n));
}

static void early_data_s(struct ctx *c)
{
	t_sync_wait(c->sync);
	settle();
	c->fd = t_accept(c->lfd);
	t_recv_pat(c->fd, 7, 16000);
	say(c, "received 16000 intact");
	say(c, "write=%s", RV(write(c->fd, "ok", 2)));
	close(c->fd);
}

/* ECONNREFUSED, blocking and not; then the same socket connects for real. */
static uint16_t closed_port(void)
{
	struct sockaddr_in a = t_addr(0);
	int fd = t_ok(socket(AF_INET, SOCK_STREAM, 0));
	uint16_t port;

	t_ok(bind(fd, (struct sockaddr *)&a, sizeof(a)));
	port = t_sock_port(fd, false);
	close(fd);
	return port;
}

static void refused_c(struct ctx *c)
{
	struct sockaddr_in a = t_addr(closed_port()), good = t_addr(c->port);
	char buf[8];
	int fd = t_ok(socket(AF_INET, SOCK_STREAM, 0));
	int nb = t_ok(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
	long n;

	say(c, "connect=%s", RV(connect(fd, (struct sockaddr *)&a, sizeof(a))));
	say(c, "so_error=%d", so_error(fd));
	say(c, "connect=%s", RV(connect(nb, (struct sockaddr *)&a, sizeof(a))));
	say_poll(c, "refused", nb, 5000);
	say(c, "so_error=%s", t_errname(so_error(nb)));
	say(c, "so_error=%s", t_errname(so_error(nb)));
	say(c, "read=%s", RV(read(nb, buf, sizeof(buf))));
	close(nb);
	/* A refused socket may connect again. */
	say(c, "connect to listener=%s", RV(connect(fd, (struct sockaddr *)&good, sizeof(good))));
	say(c, "write=%s", RV(write(fd, "again", 5)));
	n = recv(fd, buf, 2, MSG_WAITALL);
	say(c, "read=%s %s", RVN(n), shown(buf, n));
	close(fd);
}

static void refused_s(struct ctx *c)
{
	char buf[8];
	long n;

	c->fd = t_accept(c->lfd);
	n = recv(c->fd, buf, 5, MSG_WAITALL);
	say(c, "read=%s %s", RVN(n), shown(buf, n));
	say(c, "write=%s", RV(write(c->fd, "ok", 2)));
	close(c->fd);
}

/*
 * Refused while a usmc listener is registered for the port: the listener
 * shuts its socket down (Linux then refuses connections; the registration
 * stays), so the client proposes and the kernel refuses.  epoll reports
 * it, and SO_ERROR must still tell ECONNREFUSED, once.
 */
static void refused_reg_s(struct ctx *c)
{
	say(c, "shutdown listener=%s", RV(shutdown(c->lfd, SHUT_RDWR)));
	t_sync_send(c->sync, "R", 1);
}

static void refused_reg_c(struct ctx *c)
{
	struct sockaddr_in a = t_addr(c->port);
	struct epoll_event ev = { .events = EPOLLOUT | EPOLLIN }, out = { 0 };
	int ep = t_ok(epoll_create1(0));
	int fd = t_ok(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
	int n;

	t_sync_wait(c->sync);
	say(c, "connect=%s", RV(connect(fd, (struct sockaddr *)&a, sizeof(a))));
	t_ok(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));
	n = epoll_wait(ep, &out, 1, 5000);
	say(c, "epoll_wait=%d events=%#x", n, n == 1 ? out.events : 0);
	say(c, "so_error=%s", t_errname(so_error(fd)));
	say(c, "so_error=%s", t_errname(so_error(fd)));
	close(fd);
	close(ep);
}

/* The same, closed without a look: 70 non-blocking connects refused and
 * closed at once.  None was a connection: none counted, no link group
 * slot kept for a proposal no server can take (each used to keep one:
 * 64 of them filled a link group, and the next one was made). */
static void refused_unlooked_c(struct ctx *c)
{
	struct sockaddr_in a = t_addr(c->port);
	int i, fd, refused = 0;

	t_sync_wait(c->sync);
	for (i = 0; i < 70; i++) {
		fd = t_ok(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) && errno == ECONNREFUSED)
			refused++;
		t_msleep(1);	/* the RST came */
		close(fd);
	}
	say(c, "70 connects, %d refused at once, closed unlooked", refused);
}

/* Calls on a socket that never connected. */
static void unconnected_c(struct ctx *c)
{
	int fd = t_ok(socket(AF_INET, SOCK_STREAM, 0));
	struct sockaddr_in a;
	socklen_t l = sizeof(a);
	char buf[4];

	say(c, "read=%s", RV(read(fd, buf, sizeof(buf))));
	say(c, "send(NOSIGNAL)=%s", RV(send(fd, "x", 1, MSG_NOSIGNAL)));
	say(c, "shutdown=%s", RV(shutdown(fd, SHUT_RDWR)));
	say(c, "getpeername=%s", RV(getpeername(fd, (struct sockaddr *)&a, &l)));
	say(c, "so_error=%d", so_error(fd));
	say_poll(c, "unconnected", fd, 0);
	close(fd);
}

/* SO_RCVTIMEO / SO_SNDTIMEO: EAGAIN after the timeout.  The first read
 * waits without one (usmc remembers the timeouts until a setsockopt): the
 * timeout set next must still apply, not block forever. */
static void timeo_c(struct ctx *c)
{
	struct timeval tv = { 0, 150000 };
	static char buf[65536];
	uint64_t total = 0;
	long n;

	say(c, "first=%s", RV(recv(c->fd, buf, 1, 0)));
	say(c, "SO_RCVTIMEO=%s", RV(setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv))));
	say(c, "read=%s", RV(read(c->fd, buf, 16)));
	say(c, "recv=%s", RV(recv(c->fd, buf, 16, 0)));
	say(c, "recv(WAITALL)=%s", RV(recv(c->fd, buf, 16, MSG_WAITALL)));
	tv.tv_usec = 100000;
	say(c, "SO_SNDTIMEO=%s", RV(setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv))));
	for (;;) {
		t_pat_fill(8, total, buf, sizeof(buf));
		n = write(c->fd, buf, sizeof(buf));
		if (n < 0)
			break;
		total += (uint64_t)n;
	}
	say(c, "write until timeout: -1 %s", t_errname(errno));
	t_sync_send(c->sync, &total, sizeof(total));
	say(c, "shutdown(WR)=%s", RV(shutdown(c->fd, SHUT_WR)));
	tv.tv_sec = 5;
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	n = recv(c->fd, buf, 2, MSG_WAITALL);
	say(c, "reply=%s %s", RVN(n), shown(buf, n));
}

static void timeo_s(struct ctx *c)
{
	uint64_t total;
	size_t got;

	usleep(30000);	/* most likely the client waits for it by now */
	say(c, "first=%s", RV(write(c->fd, "g", 1)));
	t_sync_recv(c->sync, &total, sizeof(total));
	got = drain_pat(c->fd, 8, 65536);
	say(c, "all accepted bytes arrived=%d", got == total);
	say(c, "write=%s", RV(write(c->fd, "ok", 2)));
}

/* shutdown(SHUT_RD): queued data is still read, then 0; writing goes on. */
static void shut_rd_c(struct ctx *c)
{
	char buf[32];
	long n;

	say(c, "write=%s", RV(write(c->fd, "before", 6)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	n = recv(c->fd, buf, 15, MSG_WAITALL);
	say(c, "read=%s %s", RVN(n), shown(buf, n));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
}

static void shut_rd_s(struct ctx *c)
{
	char buf[32];
	long n;

	t_sync_wait(c->sync);
	settle();
	say(c, "shutdown(RD)=%s", RV(shutdown(c->fd, SHUT_RD)));
	say_poll(c, "after SHUT_RD", c->fd, 0);
	n = read(c->fd, buf, sizeof(buf));
	say(c, "read=%s %s", RVN(n), shown(buf, n));
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	say(c, "write=%s", RV(write(c->fd, "still can write", 15)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	say(c, "shutdown(WR)=%s", RV(shutdown(c->fd, SHUT_WR)));
	say_poll(c, "after SHUT_RD+WR", c->fd, 0);
	t_sync_post(c->sync);
}

/* shutdown(SHUT_RDWR) on one side. */
static void shut_rdwr_c(struct ctx *c)
{
	char buf[8];

	say(c, "shutdown(RDWR)=%s", RV(shutdown(c->fd, SHUT_RDWR)));
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	say(c, "send(NOSIGNAL)=%s", RV(send(c->fd, "x", 1, MSG_NOSIGNAL)));
	say_poll(c, "self", c->fd, 0);
	say(c, "shutdown(RDWR) again=%s", RV(shutdown(c->fd, SHUT_RDWR)));
	say(c, "shutdown(bad how)=%s", RV(shutdown(c->fd, 7)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
}

static void shut_rdwr_s(struct ctx *c)
{
	char buf[8];

	t_sync_wait(c->sync);
	settle();
	say_poll(c, "peer shut", c->fd, 0);
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	t_sync_post(c->sync);
}

/* The client's process leaves without closing (a crash, kill -9,
 * os._exit) after the server accepted, before the server looked: the
 * kernel's FIN.  The server's first send draws the RST, the next ones say
 * EPIPE, reads say EOF (under usmc the sends used to fill a ring nobody
 * would read, and the read said ECONNRESET). */
static void exit_unanswered_c(struct ctx *c)
{
	int sv[2];
	pid_t kid;

	t_sync_pair(sv);
	kid = t_fork_helper();
	if (kid == 0) {
		int fd;

		close(sv[0]);
		fd = t_connect(c->port);
		t_sync_post(sv[1]);
		t_sync_wait(sv[1]);
		/* A process with threads (TSan's) leaves its last copy to the
		 * kernel's FIN, which the server's sends do not look at. */
#if defined(__SANITIZE_THREAD__)
		close(fd);
#endif
		(void)fd;
		_exit(0);
	}
	close(sv[1]);
	t_sync_wait(sv[0]);	/* connected */
	t_sync_wait(c->sync);	/* accepted */
	t_sync_post(sv[0]);
	t_wait_child(kid, "client leaving by _exit");
	close(sv[0]);
	t_sync_post(c->sync);
}

/* The server's sends and reads once its client went away, then its close. */
static void say_sends_to_gone(struct ctx *c, int fd)
{
	int i;

	settle();
	for (i = 0; i < 3; i++) {
		say(c, "send=%s", RV(send(fd, "x", 1, MSG_NOSIGNAL)));
		settle();
	}
	say(c, "read=%s", RV(read(fd, (char[8]){ 0 }, 8)));
	say(c, "read=%s", RV(read(fd, (char[8]){ 0 }, 8)));
	close(fd);
}

static void exit_unanswered_s(struct ctx *c)
{
	int fd = t_accept(c->lfd);

	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	say_sends_to_gone(c, fd);
}

/* An established connection whose client process goes away idle without
 * a usmc close: one with a thread still running when it exits (a JVM's
 * System.exit: its last copy is left to the kernel's FIN), or killed
 * (SIGKILL).  Over TCP the server's first send after the FIN draws the
 * RST, the next ones say EPIPE, reads say EOF.  Under usmc nothing in the
 * ring says so: every send succeeded, up to the ring's size, and the
 * read said ECONNRESET; a send now looks at TCP first when the peer was
 * last seen long enough ago (tx_int.h tx_look_due). */
static void *idle_thread(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

static void gone_idle_c(struct ctx *c, bool kill_it)
{
	int sv[2];
	pid_t kid;

	t_sync_pair(sv);
	kid = t_fork_helper();
	if (kid == 0) {
		pthread_t th;
		int fd;

		close(sv[0]);
		fd = t_connect(c->port);
		t_write_all(fd, "c", 1);
		t_recv_exact(fd, "s", 1);
		if (!kill_it && pthread_create(&th, NULL, idle_thread, NULL))
			_exit(3);
		t_sync_post(sv[1]);
		if (kill_it)
			for (;;)
				pause();
		_exit(0);
	}
	close(sv[1]);
	t_sync_wait(sv[0]);
	if (kill_it) {
		int st;

		kill(kid, SIGKILL);
		while (waitpid(kid, &st, 0) < 0)
			if (errno != EINTR)
				t_fail("waitpid: %s", strerror(errno));
	} else {
		t_wait_child(kid, "client leaving idle with a thread");
	}
	close(sv[0]);
	t_sync_post(c->sync);
}

static void gone_idle_s(struct ctx *c)
{
	int fd = t_accept(c->lfd);

	t_recv_exact(fd, "c", 1);
	t_write_all(fd, "s", 1);
	t_sync_wait(c->sync);
	say_sends_to_gone(c, fd);
}

static void exit_threads_c(struct ctx *c)
{
	gone_idle_c(c, false);
}

static void killed_idle_c(struct ctx *c)
{
	gone_idle_c(c, true);
}

#endif /* SEMANTICS_CONN_H */
