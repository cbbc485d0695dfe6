// SPDX-License-Identifier: MIT
/*
 * t_rawclose.c - closes that do not go through close(): libuv closes with
 * syscall(SYS_close), others with syscall(SYS_close_range).  The peer must
 * see the close as after close() (EOF), and a new connection that gets the
 * same descriptor numbers must be a new connection: accelerated, its own
 * bytes, nothing of the old one (before, usmc kept the old record for the
 * number and took the new socket for the old one).
 *
 * Each check is its own process; the counters must show exactly the
 * shared-memory connections it made.  Run plain, under ASan and TSan.
 */
#include "t_util.h"

#include <sys/syscall.h>

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

static void raw_close(int fd, bool range)
{
	long r = range ? syscall(SYS_close_range, fd, fd, 0) : syscall(SYS_close, fd);

	t_assert(r == 0, "raw close of %d: %s", fd, strerror(errno));
}

/* One connection closed raw on both ends, then a new one on the same
 * numbers: EOF for the first, the second a working shared-memory pair. */
static void reuse(bool range)
{
	int c, s, c2, s2;
	char b[8];

	t_pair_smc(&c, &s);
	t_xfer(c, s, "first");
	raw_close(s, range);
	/* The peer sees the close: EOF, as after close(). */
	t_assert(t_wait_fd(c, POLLIN, 5000) & POLLIN, "no EOF after a raw close");
	t_assert(read(c, b, sizeof(b)) == 0, "read after the peer's raw close");
	raw_close(c, range);

	t_pair_smc(&c2, &s2);
	t_assert((c2 == c || c2 == s) && (s2 == c || s2 == s),
		 "new pair %d/%d does not reuse %d/%d", c2, s2, c, s);
	t_xfer(c2, s2, "second");
	t_xfer(s2, c2, "answer");
	t_send_pat(c2, 7, 300000);
	t_recv_pat(s2, 7, 300000);
	close(c2);
	close(s2);
}

static void close_syscall(void)
{
	reuse(false);
}

static void close_range_syscall(void)
{
	reuse(true);
}

/* The number of a raw-closed connection reused by a pipe: reads and
 * writes on it are the pipe's, not the old connection's. */
static void pipe_reuse(void)
{
	int c, s, p[2];
	char b[16];

	t_pair_smc(&c, &s);
	t_xfer(c, s, "old");
	t_send_pat(c, 3, 1000);		/* unread bytes in s's ring */
	raw_close(s, false);
	/* Lower free numbers first: open pipes until one end gets s. */
	for (;;) {
		t_ok(pipe(p));
		if (p[0] == s || p[1] == s)
			break;
		t_assert(p[0] < s && p[1] < s, "pipe %d/%d skipped %d", p[0], p[1], s);
	}
	/* s is the pipe's read or write end: both must be the pipe's. */
	t_write_all(p[1], "pipe", 4);
	t_assert(read(p[0], b, sizeof(b)) == 4 && !memcmp(b, "pipe", 4),
		 "the pipe on the reused number %d does not carry the pipe's bytes", s);
	close(c);
}

/* A listener closed raw is gone: a new listener on its port accelerates
 * its clients (before, the old registration stayed). */
static void listener_reuse(void)
{
	uint16_t port = 0;
	int l = t_listen(&port), l2, c, s, one = 1;
	struct sockaddr_in a = t_addr(port);

	raw_close(l, false);
	l2 = t_ok(socket(AF_INET, SOCK_STREAM, 0));
	t_ok(setsockopt(l2, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
	t_ok(bind(l2, (struct sockaddr *)&a, sizeof(a)));
	t_ok(listen(l2, 8));
	t_pair_on(l2, port, &c, &s);
	t_xfer(c, s, "new listener");
	t_xfer(s, c, "answer");
	t_assert_smc(c);
	t_assert_smc(s);
	t_smc_pairs++;
	close(c);
	close(s);
	close(l2);
}

/* Other system calls through syscall() still reach the kernel, with
 * errno as glibc's syscall() sets it. */
static void passthrough(void)
{
	int c, s;

	t_assert(syscall(SYS_getpid) == getpid(), "getpid through syscall()");
	errno = 0;
	t_assert(syscall(SYS_close, -1) == -1 && errno == EBADF, "close(-1): %s",
		 strerror(errno));
	errno = 0;
	t_assert(syscall(SYS_close_range, 5, 4, 0) == -1 && errno == EINVAL,
		 "close_range(5, 4): %s", strerror(errno));
	t_pair_smc(&c, &s);
	t_xfer(c, s, "x");
	close(c);
	close(s);
}

static const struct t_check checks[] = {
	{ "close_syscall", close_syscall },
	{ "close_range_syscall", close_range_syscall },
	{ "pipe_reuse", pipe_reuse },
	{ "listener_reuse", listener_reuse },
	{ "passthrough", passthrough },
};

int main(int argc, char **argv)
{
	t_name = "t_rawclose";
	return t_run_checks(checks, ARRAY_LEN(checks), argc, argv, NULL);
}
