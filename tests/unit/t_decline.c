// SPDX-License-Identifier: MIT
/*
 * t_decline.c - a proposal the server declines after the client queued
 * bytes (a late decline): the server (this program exec'ed, role server,
 * with USMC_FAULT=attach, so that it cannot attach the client's link
 * group) declines at accept; the client's queued bytes move to TCP, in
 * order, and the server's one decline byte is never the client's.
 *
 *   write_close    the client only writes (an upload: lftp's data
 *                  connection to vsftpd), then closes: the server reads
 *                  every byte, then EOF (the client closed with the
 *                  decline byte unread, and its kernel reset the
 *                  connection: the server's read said ECONNRESET after the
 *                  whole upload, vsftpd answered 426)
 *   write_exit     the same from a client process that exits without
 *                  closing (_exit: its last copy, closed by the kernel)
 *   server_writes  the reverse: a client whose proposal comes after the
 *                  server's accept waits to read (it sent its wake byte),
 *                  the server declines, writes and closes without reading:
 *                  the client reads every byte, then EOF
 *
 * usage: t_decline [check...]
 */
#include "t_util.h"

#define FIRST	(64u << 10)
#define REST	(1u << 20)

/* Pattern bytes [from, from + len) of stream id. */
static void send_pat(int fd, uint32_t id, size_t from, size_t len)
{
	char buf[16384];
	size_t off = from;

	while (off < from + len) {
		size_t n = MIN(from + len - off, sizeof(buf));

		t_pat_fill(id, off, buf, n);
		t_write_all(fd, buf, n);
		off += n;
	}
}

/* Role "server FD": listen, say the port on FD, accept, say so, read to
 * the end; then say how many bytes came and how it ended (0: EOF, else
 * the errno). */
static int server_main(int sync)
{
	uint16_t port;
	int lfd = t_listen(&port), s;
	uint64_t got = 0, res[2];
	char buf[65536];
	ssize_t n;

	t_sync_send(sync, &port, sizeof(port));
	s = t_accept(lfd);
	t_sync_post(sync);
	while ((n = read(s, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		if (t_pat_check(1, got, buf, (size_t)n) >= 0)
			t_fail("server: wrong byte after %llu", (unsigned long long)got);
		got += (uint64_t)n;
	}
	res[0] = got;
	res[1] = n < 0 ? (uint64_t)errno : 0;
	t_sync_send(sync, res, sizeof(res));
	close(s);
	close(lfd);
	return 0;
}

/* Role "push FD": listen, say the port, accept, wait until told, write
 * REST pattern bytes and close without reading. */
static int push_main(int sync)
{
	uint16_t port;
	int lfd = t_listen(&port), s;

	t_sync_send(sync, &port, sizeof(port));
	s = t_accept(lfd);
	t_sync_wait(sync);
	t_msleep(100);		/* the client waits in read(): its wake byte */
	send_pat(s, 2, 0, REST);
	t_ok(close(s));
	close(lfd);
	return 0;
}

static pid_t start_role(const char *role, int *sync, uint16_t *port)
{
	char f[16];
	int sv[2];
	pid_t pid;

	t_sync_pair(sv);
	snprintf(f, sizeof(f), "%d", sv[1]);
	pid = t_fork_helper();
	if (pid == 0) {
		char *argv[] = { (char *)t_name, (char *)role, f, NULL };

		close(sv[0]);
		setenv("USMC_FAULT", "attach", 1);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	close(sv[1]);
	t_assert(t_sync_recv(sv[0], port, sizeof(*port)), "no port from the server");
	*sync = sv[0];
	return pid;
}

static void write_then(bool leave)
{
	uint64_t res[2];
	uint16_t port;
	int sync, c;
	pid_t srv = start_role("server", &sync, &port), cl = 0;

	if (leave)
		cl = t_fork_helper();
	if (cl == 0) {
		c = t_connect(port);
		send_pat(c, 1, 0, FIRST);	/* queued in the ring: proposed */
		t_sync_wait(sync);		/* accepted, and declined */
		send_pat(c, 1, FIRST, REST);	/* finds the decline, moves */
		if (leave)
			_exit(0);
		t_ok(close(c));
	} else {
		t_wait_child(cl, "client leaving by _exit");
	}
	t_assert(t_sync_recv(sync, res, sizeof(res)), "no result from the server");
	t_assert(res[0] == FIRST + REST && res[1] == 0,
		 "server read %llu of %u bytes, then %s", (unsigned long long)res[0],
		 FIRST + REST, res[1] ? strerror((int)res[1]) : "EOF");
	t_wait_child(srv, "server");
	close(sync);
	t_tcp_conns = -1;	/* the reasons are the fault's (t_stdio, t_handover) */
}

static void check_write_close(void)
{
	write_then(false);
}

static void check_write_exit(void)
{
	write_then(true);
}

/* Role "pull PORT FD" (USMC_FAULT=late: its proposal comes after the
 * server's accept, so it sends the CLC wake byte while it waits): tell
 * the server, read REST pattern bytes, then EOF. */
static int pull_main(uint16_t port, int sync)
{
	int c = t_connect(port);

	t_sync_post(sync);
	t_recv_pat(c, 2, REST);
	t_expect_eof(c);
	t_ok(close(c));
	return 0;
}

static void check_server_writes(void)
{
	uint16_t port;
	int sync, from;
	pid_t srv = start_role("push", &sync, &port), cl;

	cl = t_spawn_late_client(port, &from);
	t_sync_wait(from);
	t_sync_post(sync);
	t_wait_child(cl, "client");
	t_wait_child(srv, "server");
	close(from);
	close(sync);
	t_tcp_conns = -1;
}

static const struct t_check checks[] = {
	{ "write_close", check_write_close },
	{ "write_exit", check_write_exit },
	{ "server_writes", check_server_writes },
};

int main(int argc, char **argv)
{
	t_name = "t_decline";
	signal(SIGPIPE, SIG_IGN);
	if (argc == 3 && !strcmp(argv[1], "server")) {
		alarm(60);	/* a role: never outlive a hang */
		return server_main(atoi(argv[2]));
	}
	if (argc == 4 && !strcmp(argv[1], "late-client")) {
		alarm(60);
		return pull_main((uint16_t)atoi(argv[2]), atoi(argv[3]));
	}
	if (argc == 3 && !strcmp(argv[1], "push")) {
		alarm(60);
		return push_main(atoi(argv[2]));
	}
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
