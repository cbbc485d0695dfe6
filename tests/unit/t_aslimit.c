// SPDX-License-Identifier: MIT
/*
 * t_aslimit.c - RLIMIT_AS and usmc's mappings.  Every mapping counts
 * against the limit, and a link group reserves its slots' rings whether
 * they are used or not (512 MiB with the defaults).
 *
 *   session   vsftpd's session process: a server accepts a connection on
 *             shared memory and forks; the child puts it on descriptors 0
 *             and 1 (stdio: TCP), lowers RLIMIT_AS below what it has
 *             mapped and maps 32 MiB of its own, which must succeed (usmc
 *             gave the link group back); the conversation goes on.  With
 *             the old library every vsftpd login failed ("500 OOPS: mmap").
 *   budget    under a finite limit usmc keeps its link groups within an
 *             eighth of it, each with slots for a quarter of that (a default
 *             one, 512 MiB, sent every connection to TCP: Dovecot's
 *             vsz_limit): the connection runs on shared memory and the
 *             program can still map nearly all the limit leaves it; once
 *             the eighth is spent the next connection stays TCP
 *             (limit_reached); with the limit raised again the next
 *             connection runs on shared memory.
 *   server_limited  Dovecot's login process: only the accepting process
 *             runs under a limit (vsz_limit, 256 MiB), lowered before the
 *             first client: every connection on shared memory, in a link
 *             group sized to what the server published
 *   server_limited_late  the same, the first client racing the server's
 *             setrlimit: that one may be TCP (limit_reached), no other
 *
 *   index_budget  a listener's CLC index (16 MiB) counts in the same
 *             eighth: under a limit whose eighth is smaller, a client does
 *             not map the index of the listener it connects to, nor a
 *             server the one of its new listener; both connections are
 *             TCP (limit_reached at the end that is limited).  Before, each
 *             index took 16 MiB of a program's address space on top of the
 *             eighth, whatever the limit.
 *
 * Not under sanitizers: their shadow memory is far beyond any limit.
 */
#include "t_util.h"

#include <sys/mman.h>
#include <sys/resource.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define T_SANITIZER	1
#endif

/* kB of a "Name:" line of /proc/self/status. */
static unsigned long long status_kb(const char *name)
{
	char line[256];
	unsigned long long v = 0;
	size_t n = strlen(name);
	FILE *f = fopen("/proc/self/status", "r");

	t_assert(f, "/proc/self/status: %s", t_errname(errno));
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, name, n) && line[n] == ':')
			v = strtoull(line + n + 1, NULL, 10);
	fclose(f);
	return v << 10;
}

/* Bytes of our mappings of link group files (".../lg-<id>/mem"). */
static unsigned long long lgr_mapped(void)
{
	char line[512];
	unsigned long long sum = 0, a, b;
	FILE *f = fopen("/proc/self/maps", "r");

	t_assert(f, "/proc/self/maps: %s", t_errname(errno));
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "/lg-") && sscanf(line, "%llx-%llx", &a, &b) == 2)
			sum += b - a;
	fclose(f);
	return sum;
}

static void set_as(rlim_t cur)
{
	struct rlimit rl;

	t_ok(getrlimit(RLIMIT_AS, &rl));
	rl.rlim_cur = cur;
	t_ok(setrlimit(RLIMIT_AS, &rl));
}

static void map_own(size_t len, const char *when)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	t_assert(p != MAP_FAILED, "%s: mmap of %zu MiB: %s", when, len >> 20, t_errname(errno));
	memset(p, 1, 4096);
	munmap(p, len);
}

/* The client: a line out, a line back, then EOF. */
static void session_client(uint16_t port)
{
	char b[6];
	int c = t_connect(port);

	t_write_all(c, "hello\n", 6);
	t_read_all(c, b, 6);
	t_assert(!memcmp(b, "reply\n", 6), "client got [%.6s]", b);
	t_write_all(c, "again\n", 6);
	t_read_all(c, b, 6);
	t_assert(!memcmp(b, "bye..\n", 6), "client got [%.6s]", b);
	t_assert(read(c, b, 1) == 0, "client: EOF expected");
	close(c);
	_exit(0);
}

static void check_session(void)
{
	unsigned long long vm, lg;
	pid_t cli, kid;
	uint16_t port;
	int lfd, s;
	char b[6];

	lfd = t_listen(&port);
	cli = t_fork_helper();
	if (cli == 0)
		session_client(port);
	s = t_ok(accept(lfd, NULL, NULL));
	t_read_all(s, b, 6);
	t_assert_smc(s);
	kid = t_fork_helper();
	if (kid == 0) {
		close(lfd);
		t_ok(dup2(s, 0));
		t_ok(dup2(s, 1));
		close(s);
		t_write_all(1, "reply\n", 6);
		vm = status_kb("VmSize");
		lg = lgr_mapped();
		if (t_accel())
			t_assert(lg > 64 << 20, "session: only %llu bytes of link groups mapped", lg);
		/* vsftpd: 200 MB, less than usmc alone had mapped. */
		set_as((rlim_t)(vm - lg + (64 << 20)));
		map_own(32 << 20, "session after RLIMIT_AS");
		t_assert(lgr_mapped() == 0, "%llu bytes of link groups still mapped", lgr_mapped());
		t_read_all(0, b, 6);
		t_assert(!memcmp(b, "again\n", 6), "session got [%.6s]", b);
		t_write_all(1, "bye..\n", 6);
		_exit(0);
	}
	close(s);
	close(lfd);
	t_wait_child(kid, "session");
	t_wait_child(cli, "client");
	t_tcp_conns = -1;	/* moved to TCP (stdio), counted by the move */
}

static void check_budget(void)
{
	long long before = t_fallbacks("limit_reached");
	unsigned long long vm = status_kb("VmSize"), lim = vm + (600ull << 20), lg;
	int c[64], s[64], n, i, lfd;
	char mode[32], why[64];
	uint16_t port;

	/* A default link group (512 MiB) is more than an eighth of this
	 * limit: one with fewer slots, sized to a quarter of it, instead. */
	set_as((rlim_t)lim);
	lfd = t_listen(&port);		/* one: each index maps 16 MiB */
	t_pair_on(lfd, port, &c[0], &s[0]);
	t_send_pat(c[0], 1, 1 << 20);
	t_recv_pat(s[0], 1, 1 << 20);
	t_send_pat(s[0], 2, 1 << 20);
	t_recv_pat(c[0], 2, 1 << 20);
	if (t_accel()) {
		t_assert_smc(c[0]);
		t_assert_smc(s[0]);
		lg = lgr_mapped();
		t_assert(lg && lg <= lim / 8, "link groups map %llu KiB under a %llu MiB limit",
			 lg >> 10, lim >> 20);
		t_info("under a %llu MiB limit, a connection's link group maps %llu KiB twice",
		       lim >> 20, lg >> 11);
	}
	/* What TCP leaves it, less the eighth and usmc's own mappings: the
	 * listener's index (16 MiB, mapped by both ends here), the
	 * statistics, the family. */
	map_own(400 << 20, "under the limit");
	/* Link groups until the eighth is spent: then TCP (limit_reached). */
	for (n = 1; n < 64; n++) {
		t_pair_on(lfd, port, &c[n], &s[n]);
		t_xfer(c[n], s[n], "more");
		t_xfer(s[n], c[n], "back");
		t_fd_state(c[n], mode, why, sizeof(mode));
		if (!strcmp(mode, "TCP"))
			break;
	}
	if (t_accel()) {
		t_assert(n < 64 && !strcmp(why, "limit_reached"),
			 "%d connections under a %llu MiB limit, the last one %s (%s)", n,
			 lim >> 20, mode, why);
		t_assert(lgr_mapped() <= lim / 8, "link groups map %llu MiB, more than an eighth "
			 "of %llu MiB", lgr_mapped() >> 20, lim >> 20);
		t_assert(t_fallbacks("limit_reached") > before, "no limit_reached counted");
		t_info("%d connections fit (%llu MiB of link groups), the next one is TCP "
		       "(limit_reached)", n, lgr_mapped() >> 20);
	}
	map_own(400 << 20, "with the link groups' share spent");
	for (i = 0; i <= n && i < 64; i++) {
		close(c[i]);
		close(s[i]);
	}
	close(lfd);
	set_as(RLIM_INFINITY);
	t_pair_smc(&c[0], &s[0]);
	t_xfer(c[0], s[0], "limit raised");
	close(c[0]);
	close(s[0]);
	t_tcp_conns = -1;
}

/* The limited server: accepts CONNS connections, echoes one line each. */
#define CONNS	4
static void limited_server(int lfd, unsigned long long lim, int ready)
{
	char b[5];
	int i, s;

	set_as((rlim_t)lim);
	if (ready >= 0) {
		t_write_all(ready, "r", 1);
		close(ready);
	}
	for (i = 0; i < CONNS; i++) {
		s = t_accept(lfd);
		t_read_all(s, b, 5);
		t_write_all(s, b, 5);
		t_assert(read(s, b, 1) == 0, "server: EOF expected");	/* after the client looked */
		close(s);
	}
	_exit(0);
}

/*
 * Dovecot: the process that accepts runs under vsz_limit (256 MiB by
 * default), the clients and the process that listens do not.  A default
 * link group (512 MiB) does not fit: the limited process says what fits
 * in its listener's index when it lowers its limit, listens, joins or
 * inherits the listener, or accepts, and every connection after that runs
 * on shared memory in a link group of one slot.  ready: the server lowered
 * its limit before the first client connects; else the first connection
 * may come first (its link group, made before the server said anything,
 * does not fit: TCP, limit_reached).
 */
static void server_limited(bool ready)
{
	unsigned long long lim = status_kb("VmSize") + (256ull << 20);
	char mode[32], why[64], b[5];
	int lfd, c, i, p[2] = { -1, -1 };
	uint16_t port;
	pid_t srv;

	lfd = t_listen(&port);
	if (ready)
		t_ok(pipe(p));
	srv = t_fork_helper();
	if (srv == 0) {
		if (p[0] >= 0)
			close(p[0]);
		limited_server(lfd, lim, p[1]);
	}
	close(lfd);
	if (ready) {
		close(p[1]);
		t_read_all(p[0], b, 1);
		close(p[0]);
	}
	for (i = 0; i < CONNS; i++) {
		c = t_connect(port);
		t_write_all(c, "line\n", 5);
		t_read_all(c, b, 5);
		t_assert(!memcmp(b, "line\n", 5), "echo: [%.5s]", b);
		t_fd_state(c, mode, why, sizeof(mode));
		t_info("connection %d: %s (%s)", i, mode, why);
		if (t_accel() && i == 0 && !ready && strcmp(mode, "SMCD"))
			t_assert(!strcmp(mode, "TCP") && !strcmp(why, "limit_reached"),
				 "the first connection is %s (%s), expected SMCD or TCP "
				 "(limit_reached)", mode, why);
		else if (t_accel())
			t_assert(!strcmp(mode, "SMCD"), "connection %d is %s (%s)%s", i, mode, why,
				 ready ? " with the server's limit lowered before" :
					 " after the server said what fits");
		close(c);
	}
	t_wait_child(srv, "limited server");
	t_tcp_conns = -1;
}

static void check_server_limited(void)
{
	server_limited(true);
}

static void check_server_limited_late(void)
{
	server_limited(false);
}

#define INDEX_BYTES	((16ull << 20) + 4096)	/* sizeof(struct usmc_clc_index) */

/* A line echoed on s, then EOF. */
static void echo_once(int s)
{
	char b[5];

	t_read_all(s, b, 5);
	t_write_all(s, b, 5);
	t_assert(read(s, b, 1) == 0, "EOF expected");
}

static void line_back(int c)
{
	char b[5];

	t_write_all(c, "line\n", 5);
	t_read_all(c, b, 5);
	t_assert(!memcmp(b, "line\n", 5), "echo: [%.5s]", b);
}

static void check_index_budget(void)
{
	unsigned long long lim, v0, v1;
	int lfd, c, s;
	uint16_t port;
	pid_t kid;

	/* An unlimited server, on a listener it inherits. */
	lfd = t_listen(&port);
	kid = t_fork_helper();
	if (kid == 0) {
		s = t_accept(lfd);
		echo_once(s);
		_exit(0);
	}
	close(lfd);
	lim = status_kb("VmSize") + (64ull << 20);
	if (lim / 8 >= INDEX_BYTES)
		t_skip("this process maps too much for a limit whose eighth is below an index");
	set_as((rlim_t)lim);
	v0 = status_kb("VmSize");
	c = t_connect(port);
	line_back(c);
	v1 = status_kb("VmSize");
	if (t_accel()) {
		t_expect_moved(c, "limit_reached");
		t_assert(v1 - v0 < INDEX_BYTES, "the client's connect mapped %llu KiB under a "
			 "%llu MiB limit", (v1 - v0) >> 10, lim >> 20);
	}
	close(c);
	t_wait_child(kid, "unlimited server");

	/* A limited server: its listener is not published; an unlimited
	 * client. */
	v0 = status_kb("VmSize");
	lfd = t_listen(&port);
	v1 = status_kb("VmSize");
	kid = t_fork_helper();
	if (kid == 0) {
		set_as(RLIM_INFINITY);
		c = t_connect(port);
		line_back(c);
		t_expect_moved(c, "peer_not_usmc");
		close(c);
		_exit(0);
	}
	s = t_accept(lfd);
	echo_once(s);
	if (t_accel()) {
		t_expect_moved(s, "limit_reached");
		t_assert(v1 - v0 < INDEX_BYTES, "listen mapped %llu KiB under a %llu MiB limit",
			 (v1 - v0) >> 10, lim >> 20);
	}
	close(s);
	close(lfd);
	t_wait_child(kid, "unlimited client");
	set_as(RLIM_INFINITY);
	t_tcp_conns = -1;
}

static const struct t_check checks[] = {
	{ "session", check_session },
	{ "budget", check_budget },
	{ "server_limited", check_server_limited },
	{ "server_limited_late", check_server_limited_late },
	{ "index_budget", check_index_budget },
};

int main(int argc, char **argv)
{
	t_name = "t_aslimit";
#ifdef T_SANITIZER
	t_skip("sanitizer shadow memory exceeds any RLIMIT_AS");
#endif
	return t_run_checks(checks, ARRAY_LEN(checks), argc, argv, NULL);
}
