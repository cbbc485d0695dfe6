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
 *             eighth of it: a connection whose link group would not fit
 *             stays TCP (limit_reached), the program can still map nearly
 *             all the limit leaves it, and with the limit raised again the
 *             next connection runs on shared memory.
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
	unsigned long long vm = status_kb("VmSize");
	int c, s;

	/* A link group (512 MiB) is more than an eighth of this limit. */
	set_as((rlim_t)(vm + (600ull << 20)));
	t_pair(&c, &s);
	t_xfer(c, s, "under the limit");
	t_xfer(s, c, "under the limit, back");
	t_expect_moved(c, "limit_reached");
	if (t_accel())
		t_assert(t_fallbacks("limit_reached") == before + 1, "limit_reached %lld -> %lld",
			 before, t_fallbacks("limit_reached"));
	map_own(480 << 20, "under the limit");	/* what TCP leaves it, nearly all */
	close(c);
	close(s);
	set_as(RLIM_INFINITY);
	t_pair_smc(&c, &s);
	t_xfer(c, s, "limit raised");
	close(c);
	close(s);
	t_tcp_conns = -1;
}

static const struct t_check checks[] = {
	{ "session", check_session },
	{ "budget", check_budget },
};

int main(int argc, char **argv)
{
	t_name = "t_aslimit";
#ifdef T_SANITIZER
	t_skip("sanitizer shadow memory exceeds any RLIMIT_AS");
#endif
	return t_run_checks(checks, ARRAY_LEN(checks), argc, argv, NULL);
}
