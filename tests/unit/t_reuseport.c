// SPDX-License-Identifier: MIT
/*
 * t_reuseport.c - SO_REUSEPORT listeners (haproxy sets it by default).
 *
 *   sole         one listening socket with SO_REUSEPORT: accelerated.
 *   group_usmc   two usmc sockets in one group: the kernel picks one by a
 *                hash, so clients stay on TCP (reason reuseport), every
 *                byte right.
 *   group_plain  a usmc socket and a plain process's socket in one group:
 *                TCP (reuseport), never a client waiting on a listener
 *                that cannot answer, every connection echoed.
 *
 * Each check is its own process; the counters must show exactly the
 * connections it expects on shared memory and on TCP.
 */
#include "t_util.h"

#include <poll.h>

#define CONNS 8

static int rp_listener(uint16_t port, uint16_t *out)
{
	struct sockaddr_in a = t_addr(port);
	int fd = t_ok(socket(AF_INET, SOCK_STREAM, 0)), on = 1;

	t_ok(setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on)));
	t_ok(bind(fd, (struct sockaddr *)&a, sizeof(a)));
	t_ok(listen(fd, 64));
	if (out)
		*out = t_sock_port(fd, false);
	return fd;
}

static bool reason_counted(const char *name)
{
	char *j, key[64];
	bool found;

	if (!t_accel())
		return true;
	j = t_stats_json();
	snprintf(key, sizeof(key), "\"%s\"", name);
	found = strstr(j, key) != NULL;
	free(j);
	return found;
}

/* CONNS clients to port; whichever of our listeners gets one echoes it
 * (others, in another process, echo their own).  Returns how many our
 * listeners accepted. */
static int serve_group(uint16_t port, const int *ls, int nls)
{
	int i, ours = 0;

	for (i = 0; i < CONNS; i++) {
		char msg[32], got[32];
		int c = t_connect(port), n = snprintf(msg, sizeof(msg), "ping-%d", i);
		size_t have = 0;

		t_write_all(c, msg, (size_t)n);
		while (have < (size_t)n) {
			struct pollfd p[3] = { { .fd = c, .events = POLLIN } };
			int k;

			for (k = 0; k < nls; k++)
				p[1 + k] = (struct pollfd){ .fd = ls[k], .events = POLLIN };
			t_assert(poll(p, (nfds_t)(1 + nls), 10000) > 0, "connection %d: no answer", i);
			for (k = 0; k < nls; k++) {
				if (p[1 + k].revents & POLLIN) {
					int s = t_accept(ls[k]);
					char b[32];
					ssize_t r = read(s, b, sizeof(b));

					t_assert(r > 0, "accepted connection: read %zd", r);
					t_write_all(s, b, (size_t)r);
					close(s);
					ours++;
				}
			}
			if (p[0].revents & POLLIN) {
				ssize_t r = read(c, got + have, sizeof(got) - have);

				t_assert(r > 0, "connection %d: read %zd (%s)", i, r, strerror(errno));
				have += (size_t)r;
			}
		}
		t_assert(!memcmp(got, msg, (size_t)n), "connection %d: wrong echo", i);
		close(c);
	}
	return ours;
}

static void sole(void)
{
	uint16_t port;
	int l = rp_listener(0, &port), c, s;

	t_pair_on(l, port, &c, &s);
	t_xfer(c, s, "request");
	t_xfer(s, c, "response");
	t_send_pat(c, 9, 200000);
	t_recv_pat(s, 9, 200000);
	t_assert_smc(c);
	t_assert_smc(s);
	t_smc_pairs++;
	close(c);
	close(s);
	close(l);
}

static void group_usmc(void)
{
	uint16_t port;
	int ls[2];

	ls[0] = rp_listener(0, &port);
	ls[1] = rp_listener(port, NULL);
	t_assert(serve_group(port, ls, 2) == CONNS, "our listeners missed connections");
	t_tcp_conns += 2 * CONNS;	/* both ends of each connection */
	t_assert(reason_counted("reuseport"), "no reuseport reason counted");
	close(ls[0]);
	close(ls[1]);
}

/* Role "plain-rp PORT": (without libusmc) join PORT's group, say so on
 * stdout, echo every connection until killed. */
static __attribute__((noreturn)) int plain_rp_main(const char *arg)
{
	int l = rp_listener((uint16_t)atoi(arg), NULL);

	t_write_all(1, "r", 1);
	for (;;) {
		int s = accept(l, NULL, NULL);
		char b[64];
		ssize_t n;

		if (s < 0)
			continue;
		n = read(s, b, sizeof(b));
		if (n > 0)
			t_write_all(s, b, (size_t)n);
		close(s);
	}
}

static void group_plain(void)
{
	uint16_t port;
	int l = rp_listener(0, &port), ours, p[2], st;
	char portstr[16], b;
	pid_t pid;

	t_ok(pipe(p));
	snprintf(portstr, sizeof(portstr), "%u", port);
	pid = t_fork_helper();
	if (pid == 0) {
		char *argv[] = { (char *)"t_plain", (char *)"plain-rp", portstr, NULL };

		dup2(p[1], 1);
		closefrom(3);
		unsetenv("LD_PRELOAD");
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	close(p[1]);
	t_assert(read(p[0], &b, 1) == 1, "plain group member did not start");
	ours = serve_group(port, &l, 1);
	t_tcp_conns += CONNS + ours;	/* our clients, and what our listener took */
	t_assert(reason_counted("reuseport"), "no reuseport reason counted");
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	close(p[0]);
	close(l);
}

static const struct t_check checks[] = {
	{ "sole", sole },
	{ "group_usmc", group_usmc },
	{ "group_plain", group_plain },
};

int main(int argc, char **argv)
{
	t_name = "t_reuseport";
	if (argc == 3 && !strcmp(argv[1], "plain-rp"))
		return plain_rp_main(argv[2]);
	return t_run_checks(checks, ARRAY_LEN(checks), argc, argv, NULL);
}
