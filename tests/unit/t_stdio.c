// SPDX-License-Identifier: MIT
/*
 * t_stdio.c - connections a stdio stream reads or writes.  glibc's FILE
 * streams use libc's internal read and write, which no wrapper sees, so
 * under usmc such a connection moves to TCP first (reason stdio) and the
 * stream's bytes interleave with the program's own write()s exactly as
 * over TCP (git daemon's upload-pack printf()s its ref advertisement to a
 * socket on descriptor 1).  dprintf() is formatted by usmc and stays on
 * shared memory.
 *
 *   exec_stdio   inetd: a child gets the connection as fds 0-2 and execs
 *                a program that reads with fgets(stdin), writes with
 *                printf, fputs(stderr) and write(1) interleaved, and
 *                leaves its last line in stdout's buffer for exit();
 *                with USMC_DEBUG=2, whose lines must not reach the socket
 *   dup2_stdout  the same without exec: dup2 onto 1, then printf
 *   fdopen       fdopen() of a connection: fprintf, write, fgets
 *   dprintf      dprintf() into a connection: on shared memory throughout
 *   connect_fd0  a socket that is descriptor 0 connects: TCP from the start
 *   accept_fd0   accept() returns descriptor 0: declined, TCP
 *   late_exec_plain   inetd, systemd-socket-activate --inetd: the client's
 *                proposal comes after accept() (USMC_FAULT=late: it owes
 *                the server one CLC wake byte); a child moves the
 *                connection onto 0 and 1 and execs cat without libusmc,
 *                which must not read that byte
 *   late_stdio_read   the same, the child reading with fgets(stdin) under
 *                usmc (glibc's own reads: tcpserver + sed)
 *   late_accept_fd0   accept() returns descriptor 0 before the client
 *                proposed; fgets(stdin) reads it
 *
 * Differential (t_selfdiff.h): the program runs itself again with
 * USMC_DISABLE=1 and the transcripts (every byte each end received, in
 * order, and every return code) must be equal; the accelerated run also
 * checks each connection's mode and reason with the counters.
 */
#include "t_util.h"
#include "t_selfdiff.h"

#define OBS	T_OBS

/* Read until EOF on fd and log what came, as one transcript line. */
static void obs_until_eof(int fd, const char *who)
{
	char buf[4096];
	size_t len = 0;
	ssize_t n;

	while ((n = read(fd, buf + len, sizeof(buf) - 1 - len)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		t_assert(n > 0, "%s: read: %s", who, t_errname(errno));
		len += (size_t)n;
		t_assert(len < sizeof(buf) - 1, "%s: too much", who);
	}
	buf[len] = '\0';
	OBS("%s got %zu bytes: [%s]\n", who, len, buf);
}

/* ---- the exec'd program: the connection is stdin, stdout, stderr ------- */

static int stdio_child(void)
{
	char line[64];

	if (!fgets(line, sizeof(line), stdin))
		return 2;
	printf("printf saw: %s", line);		/* buffered: stdout is a socket */
	t_write_all(1, "write(1) first\n", 15);	/* so this goes out before it */
	fputs("stderr unbuffered\n", stderr);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 3;
	printf("second: %s", line);
	printf("left for exit()\n");		/* flushed by exit's cleanup */
	exit(0);
}

static void sc_exec_stdio(void)
{
	long long before = t_fallbacks("stdio");
	pid_t kid;
	int c, s;

	t_pair_smc(&c, &s);
	kid = t_fork_helper();
	if (kid == 0) {
		char *argv[] = { (char *)"t_stdio", (char *)"--stdio-child", NULL };

		t_ok(dup2(c, 0));
		t_ok(dup2(c, 1));
		t_ok(dup2(c, 2));
		close(c);
		close(s);
		/* usmc's diagnostics must not land in the stream either. */
		setenv("USMC_DEBUG", "2", 1);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	close(c);
	t_write_all(s, "hello\n", 6);
	t_write_all(s, "again\n", 6);
	obs_until_eof(s, "server");
	t_wait_child(kid, "exec'ed stdio program");
	t_expect_moved(s, "peer_moved_to_tcp");
	/* A device that cannot share moved it at the fork, before stdio. */
	if (t_accel() && !t_unshared())
		t_assert(t_fallbacks("stdio") == before + 1, "stdio fallbacks %lld -> %lld",
			 before, t_fallbacks("stdio"));
	close(s);
}

static void sc_dup2_stdout(void)
{
	pid_t kid;
	int c, s;

	t_pair_smc(&c, &s);
	fflush(stdout);
	kid = t_fork_helper();
	if (kid == 0) {
		t_ok(dup2(c, 1));
		close(c);
		close(s);
		printf("x=%d\n", 42);
		t_write_all(1, "raw\n", 4);
		printf("y=%s\n", "last");
		exit(0);	/* stdout flushed here */
	}
	close(c);
	obs_until_eof(s, "server");
	t_wait_child(kid, "dup2 child");
	t_expect_moved(s, "peer_moved_to_tcp");
	close(s);
}

static void sc_fdopen(void)
{
	char line[32];
	FILE *f;
	int c, s;

	t_pair_smc(&c, &s);
	f = fdopen(c, "r+");
	t_assert(f, "fdopen: %s", t_errname(errno));
	t_expect_moved(c, "stdio");
	fprintf(f, "fprintf %d\n", 1);
	t_write_all(c, "write\n", 6);
	t_ok(fflush(f));
	t_write_all(s, "reply line\n", 11);
	t_assert(fgets(line, sizeof(line), f), "fgets");
	OBS("client fgets: [%s]\n", line);
	t_ok(shutdown(c, SHUT_WR));
	obs_until_eof(s, "server");
	t_ok(fclose(f));
	close(s);
}

static void sc_dprintf(void)
{
	char buf[64];
	int c, s, n;

	t_pair_smc(&c, &s);
	n = dprintf(c, "n=%d %s %0*d\n", 7, "seven", 5, 3);
	OBS("dprintf: %d\n", n);
	memset(buf, 0, sizeof(buf));
	t_read_all(s, buf, (size_t)n);
	OBS("server read: [%s]\n", buf);
	t_assert_smc(c);
	t_assert_smc(s);
	close(c);
	close(s);
}

/* Descriptor 0 given up for a while (stdin put back by fd0_back). */
static int fd0_free(void)
{
	int saved = dup(0);

	t_ok(saved);
	close(0);
	return saved;
}

static void fd0_back(int saved)
{
	t_ok(dup2(saved, 0));
	close(saved);
}

static void sc_connect_fd0(void)
{
	uint16_t port;
	int l = t_listen(&port), saved = fd0_free(), c, s;

	c = t_connect(port);
	t_assert(c == 0, "connect got descriptor %d, not 0", c);
	s = t_accept(l);
	t_xfer(c, s, "to server");
	t_xfer(s, c, "to client");
	t_expect_moved(c, "stdio");
	OBS("fd 0 client: exchange ok\n");
	close(c);
	close(s);
	close(l);
	fd0_back(saved);
}

static void sc_accept_fd0(void)
{
	uint16_t port;
	int l = t_listen(&port), c = t_connect(port), saved = fd0_free(), s;

	s = t_accept(l);
	t_assert(s == 0, "accept got descriptor %d, not 0", s);
	t_xfer(c, s, "to server");
	t_xfer(s, c, "to client");
	t_expect_moved(s, "stdio");
	OBS("fd 0 server: exchange ok\n");
	close(c);
	close(s);
	close(l);
	fd0_back(saved);
}

/* ---- a client whose proposal comes after accept() ----------------------- */

/* Role "late-client PORT FD" (USMC_FAULT=late): send a line, end, read
 * the echo until EOF and hand it to the test through FD. */
static int late_client_main(const char *port, const char *fd)
{
	int sync = atoi(fd), c = t_connect((uint16_t)atoi(port));
	char buf[256];
	size_t len = 0;
	ssize_t n;

	t_write_all(c, "hello\n", 6);
	t_ok(shutdown(c, SHUT_WR));
	while ((n = read(c, buf + len, sizeof(buf) - len)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		t_assert(n > 0, "late client: read: %s", t_errname(errno));
		len += (size_t)n;
		t_assert(len < sizeof(buf), "late client: too much");
	}
	t_write_all(sync, buf, len);
	close(c);
	return 0;
}


/* What the late client got back, byte for byte (a NUL shows as \0). */
static void late_obs(int from, pid_t pid, const char *how)
{
	char buf[256], out[1024];
	size_t len = 0, o = 0, i;
	ssize_t n;

	while ((n = read(from, buf + len, sizeof(buf) - len)) > 0)
		len += (size_t)n;
	for (i = 0; i < len && o < sizeof(out) - 8; i++)
		o += (size_t)snprintf(out + o, sizeof(out) - o, buf[i] >= ' ' && buf[i] < 127 ?
				      "%c" : "\\%o", buf[i]);
	out[o] = '\0';
	OBS("%s: client got %zu bytes: [%s]\n", how, len, out);
	close(from);
	t_wait_child(pid, "late client");
}

/* The child: the connection on 0 and 1, then exec cat without libusmc,
 * or echo one line with stdio. */
static void late_serve(int s, bool exec_plain)
{
	char line[64];

	t_ok(dup2(s, 0));
	t_ok(dup2(s, 1));
	close(s);
	if (exec_plain) {
		char *argv[] = { (char *)"cat", NULL };

		unsetenv("LD_PRELOAD");
		execv("/bin/cat", argv);
		_exit(127);
	}
	while (fgets(line, sizeof(line), stdin))
		fputs(line, stdout);
	fflush(stdout);
	_exit(0);
}

static void late_child(bool exec_plain, const char *how)
{
	uint16_t port;
	int l = t_listen(&port), from, s;
	pid_t cl = t_spawn_late_client(port, &from), kid;

	s = t_accept(l);
	fflush(stdout);
	kid = t_fork_helper();
	if (kid == 0) {
		close(l);
		close(from);
		late_serve(s, exec_plain);
	}
	close(s);
	late_obs(from, cl, how);
	t_wait_child(kid, how);
	close(l);
}

static void sc_late_exec_plain(void)
{
	late_child(true, "exec cat without usmc");
}

static void sc_late_stdio_read(void)
{
	late_child(false, "fgets(stdin)");
}

static void sc_late_accept_fd0(void)
{
	uint16_t port;
	int l = t_listen(&port), from;
	pid_t cl = t_spawn_late_client(port, &from), kid;

	fflush(stdout);
	kid = t_fork_helper();
	if (kid == 0) {
		char line[64];
		int s;

		close(from);
		close(0);
		s = t_accept(l);
		t_assert(s == 0, "accept got descriptor %d, not 0", s);
		while (fgets(line, sizeof(line), stdin))
			t_write_all(0, line, strlen(line));
		_exit(0);
	}
	late_obs(from, cl, "accepted as fd 0");
	t_wait_child(kid, "fd 0 server");
	close(l);
}

static const struct t_scenario scenarios[] = {
	{ "exec_stdio", sc_exec_stdio },
	{ "dup2_stdout", sc_dup2_stdout },
	{ "fdopen", sc_fdopen },
	{ "dprintf", sc_dprintf },
	{ "connect_fd0", sc_connect_fd0 },
	{ "accept_fd0", sc_accept_fd0 },
	{ "late_exec_plain", sc_late_exec_plain },
	{ "late_stdio_read", sc_late_stdio_read },
	{ "late_accept_fd0", sc_late_accept_fd0 },
};

int main(int argc, char **argv)
{
	t_name = "t_stdio";
	if (argc == 2 && !strcmp(argv[1], "--stdio-child"))
		return stdio_child();
	if (argc == 4 && !strcmp(argv[1], "late-client"))
		return late_client_main(argv[2], argv[3]);
	return t_selfdiff_main(argc, argv, scenarios, ARRAY_LEN(scenarios));
}
