// SPDX-License-Identifier: MIT
/*
 * t_semantics.c - differential TCP semantics: what an application observes
 * on a usmc connection must be what it observes on plain TCP.
 *
 * Each scenario runs a server and a client in two forked processes over
 * 127.0.0.1 and logs every observable, transport-independent result
 * (return values, errno names, bytes, poll revents, SO_ERROR, ...) as one
 * transcript line.  tests/test_unit.py runs the program with USMC_DISABLE=1
 * (TCP through the same interposition) and normally (shared memory) and
 * requires identical transcripts.  In the accelerated run every scenario
 * also checks with `usmc stat` that its connections went through shared
 * memory (no fallback), and fails otherwise.
 *
 * Never printed: ports, byte counts that depend on buffer sizes (partial
 * non-blocking writes), timings.  Where an observation depends on the peer
 * having acted, the two processes synchronise over a socketpair and then
 * let things settle with a short sleep; no assertion depends on time.
 *
 * usage: t_semantics [scenario...]   (default: all; T_VERBOSE=1 to trace)
 * Output: the transcript on stdout; failures on stderr; exit 0/1.
 */
#include "t_diff.h"

#include <linux/sockios.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/uio.h>

#define SETTLE_MS	30

struct ctx {
	const char *name;
	char side;			/* 'S' server, 'C' client */
	int fd;				/* the connection (harness-made unless OWN) */
	int lfd;			/* server: listener */
	uint16_t port;			/* listener port */
	int sync;			/* socketpair to the other side */
	char *log;
	size_t len, cap;
};

#define S_OWN_ACCEPT	0x1	/* server function accepts itself */
#define C_OWN_CONNECT	0x2	/* client function connects itself */
#define NO_SERVER	0x4	/* no server process at all */

struct scenario {
	const char *name;
	void (*server)(struct ctx *);
	void (*client)(struct ctx *);
	int flags;
	int smc;		/* endpoints expected on shared memory */
};

static volatile sig_atomic_t sigpipes;

static void on_sigpipe(int sig)
{
	(void)sig;
	sigpipes++;
}

static __attribute__((format(printf, 2, 3))) void say(struct ctx *c, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	n = snprintf(line, sizeof(line), "%s %c: ", c->name, c->side);
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	if (c->len + (size_t)n + 1 > c->cap) {
		c->cap = (c->cap + (size_t)n) * 2 + 4096;
		c->log = realloc(c->log, c->cap);
		if (!c->log)
			t_fail("realloc");
	}
	memcpy(c->log + c->len, line, (size_t)n);
	c->len += (size_t)n;
	c->log[c->len] = '\0';
	t_info("%.*s", n - 1, line);
}

/*
 * "5", or "-1 EAGAIN": a return value and its errno.  RV(call) makes the
 * call and formats at once; RVN(n) formats a value just returned (errno
 * still fresh).  Arguments of one say() are evaluated in any order, so a
 * say() never holds two calls whose order matters.
 */
static const char *fmt_rv(long r, int err)
{
	static char bufs[8][48];
	static unsigned int next;
	char *s = bufs[next++ % 8];

	if (r < 0)
		snprintf(s, 48, "%ld %s", r, t_errname(err));
	else
		snprintf(s, 48, "%ld", r);
	return s;
}

#define RV(call) ({ long r_; errno = 0; r_ = (long)(call); fmt_rv(r_, errno); })
#define RVN(n) fmt_rv((long)(n), errno)

static const char *revents_str(short ev, char *buf, size_t len)
{
	static const struct { short bit; const char *name; } names[] = {
		{ POLLIN, "IN" }, { POLLPRI, "PRI" }, { POLLOUT, "OUT" }, { POLLERR, "ERR" },
		{ POLLHUP, "HUP" }, { POLLNVAL, "NVAL" }, { POLLRDHUP, "RDHUP" },
	};
	size_t i, n = 0;

	buf[0] = '\0';
	for (i = 0; i < ARRAY_LEN(names); i++)
		if (ev & names[i].bit)
			n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? "|" : "", names[i].name);
	if (!n)
		snprintf(buf, len, "0");
	return buf;
}

/* poll once (timeout ms) for IN|OUT|RDHUP and describe what came back. */
static void say_poll(struct ctx *c, const char *what, int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLOUT | POLLRDHUP };
	char b[64];
	int r = poll(&p, 1, ms);

	say(c, "%s poll=%d revents=%s", what, r, r > 0 ? revents_str(p.revents, b, sizeof(b)) : "-");
}

/* Printable form of received bytes (short ones verbatim). */
static const char *shown(const char *buf, long n)
{
	static char out[160];
	long i;

	if (n <= 0)
		return "";
	if (n > 64) {
		snprintf(out, sizeof(out), "<%ld bytes>", n);
		return out;
	}
	out[0] = '\'';
	for (i = 0; i < n; i++)
		out[i + 1] = buf[i] >= 32 && buf[i] < 127 ? buf[i] : '.';
	out[n + 1] = '\'';
	out[n + 2] = '\0';
	return out;
}

static int so_error(int fd)
{
	int e = -1;
	socklen_t l = sizeof(e);

	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l))
		return -errno;
	return e;
}

static void settle(void)
{
	t_msleep(SETTLE_MS);
}

/*
 * Drain until EOF, checking pattern id from offset 0; returns the count.
 * A wrong byte fails the process, or clears *intact when given.
 */
static size_t drain_pat_ok(int fd, uint32_t id, size_t bufsz, bool *intact)
{
	char *buf = malloc(bufsz);
	size_t off = 0;

	for (;;) {
		ssize_t n = read(fd, buf, bufsz);
		long bad;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			t_fail("drain: %s after %zu bytes", strerror(errno), off);
		if (n == 0)
			break;
		bad = t_pat_check(id, off, buf, (size_t)n);
		if (bad >= 0 && !intact)
			t_fail("stream %u: wrong byte at %zu", id, off + (size_t)bad);
		if (bad >= 0)
			*intact = false;
		off += (size_t)n;
	}
	free(buf);
	return off;
}

static size_t drain_pat(int fd, uint32_t id, size_t bufsz)
{
	return drain_pat_ok(fd, id, bufsz, NULL);
}

/* ---- scenarios ---------------------------------------------------------- */

/* The scenario functions live in two topic headers (this file only). */
#include "semantics_io.h"
#include "semantics_close.h"
#include "semantics_conn.h"
#include "semantics_opts.h"

static const struct scenario scenarios[] = {
	{ "basic_io", basic_io_s, basic_io_c, 0, 2 },
	{ "nonblock_io", nonblock_io_s, nonblock_io_c, 0, 2 },
	{ "peek", peek_s, peek_c, 0, 2 },
	{ "waitall", waitall_s, waitall_c, 0, 2 },
	{ "partial_write", partial_write_s, partial_write_c, 0, 2 },
	{ "dontwait_full", dontwait_full_s, dontwait_full_c, 0, 2 },
	{ "big_write", big_write_s, big_write_c, 0, 2 },
	{ "eof", eof_s, eof_c, 0, 2 },
	{ "rdhup_data", rdhup_data_s, rdhup_data_c, 0, 2 },
	{ "read_after_close", read_after_close_s, read_after_close_c, 0, 2 },
	{ "close_wakes_reader", close_wakes_reader_s, close_wakes_reader_c, 0, 2 },
	{ "close_in_call", close_in_call_s, close_in_call_c, 0, 2 },
	{ "write_after_close", write_after_close_s, write_after_close_c, 0, 2 },
	{ "big_write_after_close", write_after_close_s, big_write_after_close_c, 0, 2 },
	{ "write_gone_state", write_after_close_s, write_gone_state_c, 0, 2 },
	{ "close_unread_state", close_unread_state_s, close_unread_state_c, 0, 2 },
	{ "fin_then_rst", fin_then_rst_s, fin_then_rst_c, 0, 2 },
	{ "reset", reset_s, reset_c, 0, 2 },
	{ "reset_soerror", reset_s, reset_soerror_c, 0, 2 },
	{ "reset_writer", reset_s, reset_writer_c, 0, 2 },
	{ "fin_reset_writer", fin_reset_s, fin_reset_writer_c, 0, 2 },
	{ "fin_reset_soerror", fin_reset_s, fin_reset_soerror_c, 0, 2 },
	{ "linger0", linger0_s, linger0_c, 0, 2 },
	{ "fionread", fionread_s, fionread_c, 0, 2 },
	{ "addresses", addresses_s, addresses_c, 0, 2 },
	{ "nonblock_toggle", nonblock_toggle_s, nonblock_toggle_c, 0, 2 },
	{ "accept4", accept4_s, accept4_c, S_OWN_ACCEPT | C_OWN_CONNECT, 2 },
	{ "connect_nonblock", connect_nb_s, connect_nb_c, C_OWN_CONNECT, 2 },
	{ "client_first", client_first_s, client_first_c, 0, 2 },
	{ "server_first", server_first_s, server_first_c, S_OWN_ACCEPT | C_OWN_CONNECT,
	  2 * SERVER_FIRST_N },
	{ "write_close", write_close_s, write_close_c, S_OWN_ACCEPT | C_OWN_CONNECT,
	  2 * WRITE_CLOSE_N },
	{ "early_data", early_data_s, early_data_c, S_OWN_ACCEPT, 2 },
	{ "inet_opts", inet_opts_s, inet_opts_c, S_OWN_ACCEPT | C_OWN_CONNECT, 2 },
	{ "inet_opts_early", inet_opts_early_s, inet_opts_early_c, S_OWN_ACCEPT | C_OWN_CONNECT, 2 },
	{ "refused", refused_s, refused_c, S_OWN_ACCEPT | C_OWN_CONNECT, 2 },
	/* Refused: never a connection, on shared memory or TCP (its
	 * proposal was counted once, and stayed counted). */
	{ "refused_registered", refused_reg_s, refused_reg_c, S_OWN_ACCEPT | C_OWN_CONNECT, 0 },
	{ "refused_unlooked", refused_reg_s, refused_unlooked_c, S_OWN_ACCEPT | C_OWN_CONNECT, 0 },
	{ "exit_unanswered", exit_unanswered_s, exit_unanswered_c, S_OWN_ACCEPT | C_OWN_CONNECT, 2 },
	{ "exit_threads", gone_idle_s, exit_threads_c, S_OWN_ACCEPT | C_OWN_CONNECT, 2 },
	{ "killed_idle", gone_idle_s, killed_idle_c, S_OWN_ACCEPT | C_OWN_CONNECT, 2 },
	{ "unconnected", NULL, unconnected_c, NO_SERVER | C_OWN_CONNECT, 0 },
	{ "timeo", timeo_s, timeo_c, 0, 2 },
	{ "shut_rd", shut_rd_s, shut_rd_c, 0, 2 },
	{ "shut_rdwr", shut_rdwr_s, shut_rdwr_c, 0, 2 },
	{ "writev_many", writev_many_s, writev_many_c, 0, 2 },
	{ "pollout", pollout_s, pollout_c, 0, 2 },
};

/* ---- harness -------------------------------------------------------------- */

static void side_main(const void *sc_, char side, int sync, int logfd)
{
	const struct scenario *sc = sc_;
	struct ctx c = { .name = sc->name, .side = side, .fd = -1, .lfd = -1, .sync = sync };
	struct sigaction sa = { .sa_handler = on_sigpipe, .sa_flags = SA_RESTART };

	alarm(30);	/* a hang kills this side; the harness reports it */
	sigaction(SIGPIPE, &sa, NULL);
	if (side == 'S') {
		c.lfd = t_listen(&c.port);
		t_sync_send(sync, &c.port, sizeof(c.port));
		if (!(sc->flags & S_OWN_ACCEPT))
			c.fd = t_accept(c.lfd);
		sc->server(&c);
	} else {
		if (!(sc->flags & NO_SERVER) && !t_sync_recv(sync, &c.port, sizeof(c.port)))
			t_fail("no port from the server");
		if (!(sc->flags & C_OWN_CONNECT))
			c.fd = t_connect(c.port);
		sc->client(&c);
	}
	/* Both sides stay (sockets open) until both are done. */
	if (!(sc->flags & NO_SERVER)) {
		char d = 'D';

		t_sync_send(sync, &d, 1);
		do
			if (!t_sync_recv(sync, &d, 1))
				t_fail("barrier: the other side went away");
		while (d != 'D');
	}
	if (c.len)
		t_sync_send(logfd, c.log, c.len);
	_exit(0);
}

static const char *scenario_name(int i)
{
	return scenarios[i].name;
}

static bool all_scenarios(int i)
{
	(void)i;
	return true;
}

static bool run_scenario(int i)
{
	const struct scenario *sc = &scenarios[i];

	return t_diff_run(sc->name, sc->smc, sc, side_main, !(sc->flags & NO_SERVER));
}

int main(int argc, char **argv)
{
	t_name = "t_semantics";
	return t_diff_main(argc, argv, (int)ARRAY_LEN(scenarios), scenario_name, all_scenarios,
			   run_scenario);
}
