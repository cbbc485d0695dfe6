// SPDX-License-Identifier: MIT
/*
 * t_lsnopts.c - socket options a listening socket hands to the connections
 * it accepts, as the kernel copies them (Varnish sets its session options
 * on the listener and only checks them on each accepted socket).
 *
 *   linger0      SO_LINGER {1, 0} on the listener: closing an accepted
 *                connection resets it, the client's read fails with
 *                ECONNRESET (before: a clean EOF under usmc)
 *   rcvtimeo     SO_RCVTIMEO on the listener: a blocking read on an
 *                accepted connection with nothing to read times out with
 *                EAGAIN
 *
 * Every connection must be on shared memory (checked with the counters).
 *
 * usage: t_lsnopts [check...]
 */
#include "t_util.h"

static void pair_from(int lfd, uint16_t port, int *c, int *s)
{
	char b;

	t_pair_on(lfd, port, c, s);
	/* A byte each way: both ends have settled their handshake. */
	t_write_all(*c, "c", 1);
	t_read_all(*s, &b, 1);
	t_write_all(*s, "s", 1);
	t_read_all(*c, &b, 1);
	t_assert_smc(*c);
	t_assert_smc(*s);
	t_smc_pairs++;
}

static void check_linger0(void)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	uint16_t port;
	int lfd = t_listen(&port), c, s;
	ssize_t n;
	char b;

	t_ok(setsockopt(lfd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)));
	pair_from(lfd, port, &c, &s);
	memset(&lg, 0xff, sizeof(lg));
	t_ok(getsockopt(s, SOL_SOCKET, SO_LINGER, &lg, &(socklen_t){ sizeof(lg) }));
	t_assert(lg.l_onoff && !lg.l_linger, "the kernel copies SO_LINGER at accept");
	close(s);
	n = read(c, &b, 1);
	t_assert(n < 0 && errno == ECONNRESET, "read after the server's close: %zd (%s)", n,
		 n < 0 ? t_errname(errno) : "no error");
	close(c);
	close(lfd);
}

static void check_rcvtimeo(void)
{
	struct timeval tv = { .tv_sec = 0, .tv_usec = 50000 };
	uint16_t port;
	int lfd = t_listen(&port), c, s;
	ssize_t n;
	char b;

	t_ok(setsockopt(lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	pair_from(lfd, port, &c, &s);
	n = read(s, &b, 1);
	t_assert(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK),
		 "blocking read with nothing to read: %zd (%s)", n, n < 0 ? t_errname(errno) : "data");
	t_write_all(c, "x", 1);
	t_read_all(s, &b, 1);
	t_assert(b == 'x');
	close(s);
	close(c);
	close(lfd);
}

static const struct t_check checks[] = {
	{ "linger0", check_linger0 },
	{ "rcvtimeo", check_rcvtimeo },
};

int main(int argc, char **argv)
{
	t_name = "t_lsnopts";
	signal(SIGPIPE, SIG_IGN);
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
