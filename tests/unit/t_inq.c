// SPDX-License-Identifier: MIT
/*
 * t_inq.c - TCP_INQ on shared memory: with the option on, every recvmsg()
 * carries a TCP_CM_INQ control message saying how many bytes are left to
 * read (1 at the peer's FIN with none left), as tcp_recvmsg() writes it:
 * truncated with MSG_CTRUNC when the control buffer is short, MSG_CTRUNC
 * alone without one.  gRPC turns it on for every connection; it used to
 * move each to TCP (unsupported_option), so gRPC was never accelerated.
 *
 *   conn         set on a connection: reads of 3 and 5 of 8 bytes, then
 *                the EOF after the peer's shutdown
 *   peek         MSG_PEEK leaves everything counted
 *   short_cbuf   control buffers of 0, 16, 18, 20 and 24 bytes, and none
 *   off          turned on, then off: no control message
 *   listener     set on the listener, inherited by what it accepts
 *   before       set before connect()
 *   mmsg         recvmmsg() fills each message's control buffer
 *
 * Differential (t_selfdiff.h): the transcript under usmc must equal the
 * one over TCP, and every connection stays on shared memory.
 */
#include "t_util.h"
#include "t_selfdiff.h"

#include <netinet/tcp.h>

#define OBS	T_OBS

/* One recvmsg of up to len bytes with a control buffer of clen bytes
 * (-1: none), and what came back. */
static void obs_recv(const char *what, int fd, size_t len, int flags, ssize_t clen)
{
	char b[64], cbuf[64];
	struct iovec iov = { b, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = clen >= 0 ? cbuf : NULL,
			    .msg_controllen = clen >= 0 ? (size_t)clen : 0 };
	struct cmsghdr *cm;
	ssize_t r;

	memset(cbuf, 0xee, sizeof(cbuf));
	r = recvmsg(fd, &m, flags);
	OBS("%s: %zd %s [%.*s] flags %#x controllen %zu\n", what, r,
	    r < 0 ? t_errname(errno) : "", r > 0 ? (int)r : 0, b, m.msg_flags, m.msg_controllen);
	if (r < 0 || m.msg_controllen < sizeof(struct cmsghdr))
		return;
	cm = (struct cmsghdr *)cbuf;
	OBS("%s: cmsg level %d type %d len %zu", what, cm->cmsg_level, cm->cmsg_type,
	    (size_t)cm->cmsg_len);
	if (cm->cmsg_len >= CMSG_LEN(sizeof(int))) {
		int inq;

		memcpy(&inq, CMSG_DATA(cm), sizeof(inq));
		OBS(" inq %d", inq);
	}
	OBS(" tail %02x\n", (unsigned char)cbuf[m.msg_controllen < sizeof(cbuf) ?
						   m.msg_controllen : sizeof(cbuf) - 1]);
}

static void set_inq(int fd, int on)
{
	int v = -1;
	socklen_t l = sizeof(v);

	t_ok(setsockopt(fd, IPPROTO_TCP, TCP_INQ, &on, sizeof(on)));
	t_ok(getsockopt(fd, IPPROTO_TCP, TCP_INQ, &v, &l));
	OBS("TCP_INQ now %d\n", v);
}

static void wait_in(int fd)
{
	t_assert(t_wait_fd(fd, POLLIN, 5000) & POLLIN, "nothing came");
}

static void sc_conn(void)
{
	int c, s;

	t_pair_smc(&c, &s);
	set_inq(s, 1);
	t_write_all(c, "ABCDEFGH", 8);
	wait_in(s);
	obs_recv("read 3", s, 3, 0, 64);
	obs_recv("read 5", s, 5, 0, 64);
	obs_recv("nothing there", s, 5, MSG_DONTWAIT, 64);
	t_ok(shutdown(c, SHUT_WR));
	wait_in(s);
	obs_recv("at the FIN", s, 5, 0, 64);
	obs_recv("again", s, 5, 0, 64);
	t_assert_smc(s);
	t_assert_smc(c);
	close(c);
	close(s);
}

static void sc_peek(void)
{
	int c, s;

	t_pair_smc(&c, &s);
	set_inq(s, 1);
	t_write_all(c, "ABCDEFGH", 8);
	wait_in(s);
	obs_recv("peek 4", s, 4, MSG_PEEK, 64);
	obs_recv("read 8", s, 8, 0, 64);
	t_assert_smc(s);
	close(c);
	close(s);
}

static void sc_short_cbuf(void)
{
	static const ssize_t len[] = { 0, 16, 18, 20, 24, -1 };
	char what[32];
	size_t i;
	int c, s;

	t_pair_smc(&c, &s);
	set_inq(s, 1);
	for (i = 0; i < ARRAY_LEN(len); i++) {
		t_write_all(c, "ABCD", 4);
		wait_in(s);
		snprintf(what, sizeof(what), "control %zd", len[i]);
		obs_recv(what, s, 2, 0, len[i]);
		obs_recv(what, s, 2, 0, len[i]);
	}
	t_assert_smc(s);
	close(c);
	close(s);
}

static void sc_off(void)
{
	int c, s;

	t_pair_smc(&c, &s);
	set_inq(s, 1);
	set_inq(s, 0);
	t_write_all(c, "ABCD", 4);
	wait_in(s);
	obs_recv("off", s, 4, 0, 64);
	t_assert_smc(s);
	close(c);
	close(s);
}

static void sc_listener(void)
{
	uint16_t port;
	int lfd = t_listen(&port), c, s, on = 1;

	t_ok(setsockopt(lfd, IPPROTO_TCP, TCP_INQ, &on, sizeof(on)));
	c = t_connect(port);
	s = t_accept(lfd);
	t_write_all(c, "ABCD", 4);
	wait_in(s);
	obs_recv("accepted", s, 3, 0, 64);
	t_write_all(s, "xy", 2);
	wait_in(c);
	obs_recv("client, option off", c, 2, 0, 64);
	t_assert_smc(s);
	close(c);
	close(s);
	close(lfd);
}

static void sc_before(void)
{
	struct sockaddr_in a;
	uint16_t port;
	int lfd = t_listen(&port), c, s, on = 1;

	a = t_addr(port);
	c = t_ok(socket(AF_INET, SOCK_STREAM, 0));
	t_ok(setsockopt(c, IPPROTO_TCP, TCP_INQ, &on, sizeof(on)));
	t_ok(connect(c, (struct sockaddr *)&a, sizeof(a)));
	s = t_accept(lfd);
	t_write_all(s, "ABCD", 4);
	wait_in(c);
	obs_recv("client", c, 1, 0, 64);
	t_assert_smc(c);
	close(c);
	close(s);
	close(lfd);
}

static void sc_mmsg(void)
{
	char b[2][4], cbuf[2][32];
	struct iovec iov[2] = { { b[0], 4 }, { b[1], 4 } };
	struct mmsghdr v[2];
	int c, s, i, n, inq;

	t_pair_smc(&c, &s);
	set_inq(s, 1);
	t_write_all(c, "ABCDEFGHIJ", 10);
	wait_in(s);
	memset(v, 0, sizeof(v));
	for (i = 0; i < 2; i++) {
		v[i].msg_hdr.msg_iov = &iov[i];
		v[i].msg_hdr.msg_iovlen = 1;
		v[i].msg_hdr.msg_control = cbuf[i];
		v[i].msg_hdr.msg_controllen = sizeof(cbuf[i]);
	}
	n = recvmmsg(s, v, 2, MSG_DONTWAIT, NULL);
	OBS("recvmmsg: %d\n", n);
	for (i = 0; i < n; i++) {
		struct cmsghdr *cm = CMSG_FIRSTHDR(&v[i].msg_hdr);

		inq = -1;
		if (cm)
			memcpy(&inq, CMSG_DATA(cm), sizeof(inq));
		OBS("message %d: %u bytes, controllen %zu, inq %d\n", i, v[i].msg_len,
		    v[i].msg_hdr.msg_controllen, inq);
	}
	t_assert_smc(s);
	close(c);
	close(s);
}

static const struct t_scenario scenarios[] = {
	{ "conn", sc_conn },
	{ "peek", sc_peek },
	{ "short_cbuf", sc_short_cbuf },
	{ "off", sc_off },
	{ "listener", sc_listener },
	{ "before", sc_before },
	{ "mmsg", sc_mmsg },
};

int main(int argc, char **argv)
{
	t_name = "t_inq";
	return t_selfdiff_main(argc, argv, scenarios, ARRAY_LEN(scenarios));
}
