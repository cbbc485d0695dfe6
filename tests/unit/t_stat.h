/* SPDX-License-Identifier: MIT */
/*
 * t_stat.h - the usmc-aware part of the test helpers: is libusmc preloaded
 * and accelerating, `usmc stat --json` and its parsing, counter and
 * per-connection checks, and t_run_checks() (one program, many checks,
 * each verified against the counters).
 *
 * Included at the end of t_util.h, whose helpers it uses; test programs
 * include t_util.h only.  Everything is static, T_UNUSED like the rest.
 */
#ifndef T_STAT_H
#define T_STAT_H

#include "t_util.h"

/* ---- usmc counters ---------------------------------------------------- */

/* Is this process running with libusmc accelerating (preloaded, enabled)? */
static T_UNUSED bool t_usmc_loaded(void)
{
	const char *p = getenv("LD_PRELOAD");

	return p && strstr(p, "libusmc");
}

static T_UNUSED bool t_accel(void)
{
	const char *d = getenv("USMC_DISABLE");

	return t_usmc_loaded() && !(d && (d[0] == '1' || d[0] == 'y' || d[0] == 'Y' ||
					  d[0] == 't' || d[0] == 'T'));
}

static T_UNUSED const char *t_cli(void)
{
	static char path[PATH_MAX];
	const char *e = getenv("USMC_CLI");
	char *slash;
	ssize_t n;

	if (e && *e)
		return e;
	if (path[0])
		return path;
	/* build[/asan]/tests/t_x -> build[/asan]/usmc */
	n = readlink("/proc/self/exe", path, sizeof(path) - 16);
	if (n <= 0)
		return "usmc";
	path[n] = '\0';
	slash = strrchr(path, '/');
	if (slash)
		*slash = '\0';
	slash = strrchr(path, '/');
	if (slash)
		strcpy(slash, "/usmc");
	return path;
}

#define T_STATS_JSON_MAX (1 << 20)

/*
 * `usmc stat --json` into a malloc'ed string (NUL-terminated).  The CLI
 * runs without LD_PRELOAD (it needs no interposition, and no shell is
 * involved: a sanitizer build's library cannot be preloaded into /bin/sh).
 */
static T_UNUSED char *t_stats_json(void)
{
	extern char **environ;
	char *buf = malloc(T_STATS_JSON_MAX), **envp;
	const char *cli = t_cli();
	char *argv[] = { (char *)cli, (char *)"stat", (char *)"--json", NULL };
	posix_spawn_file_actions_t fa;
	size_t len = 0, n = 0, i;
	int pfd[2], st, rc;
	pid_t pid;
	ssize_t r;

	if (!buf)
		t_fail("malloc");
	while (environ[n])
		n++;
	envp = calloc(n + 1, sizeof(*envp));
	for (i = 0, n = 0; environ[i]; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11))
			envp[n++] = environ[i];
	if (pipe2(pfd, O_CLOEXEC))
		t_fail("pipe: %s", strerror(errno));
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
	rc = posix_spawn(&pid, cli, &fa, NULL, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	free(envp);
	close(pfd[1]);
	if (rc)
		t_fail("spawn %s: %s", cli, strerror(rc));
	while ((r = read(pfd[0], buf + len, T_STATS_JSON_MAX - 1 - len)) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			t_fail("read from %s: %s", cli, strerror(errno));
		len += (size_t)r;
	}
	buf[len] = '\0';
	close(pfd[0]);
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			t_fail("waitpid %s: %s", cli, strerror(errno));
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		t_fail("%s stat --json: status %#x (output: %.200s)", cli, st, buf);
	return buf;
}

/* A top-level integer field ("smc_conns"), -1 if absent. */
static T_UNUSED long long t_json_int(const char *json, const char *key)
{
	char pat[96];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(json, pat);
	return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* Sum of the values of a flat object field ("tcp_fallback": {"a": 1, ...}). */
static T_UNUSED long long t_json_obj_sum(const char *json, const char *key, char *names, size_t nlen)
{
	char pat[96];
	const char *p, *end;
	long long sum = 0;

	if (names && nlen)
		names[0] = '\0';
	snprintf(pat, sizeof(pat), "\"%s\": {", key);
	p = strstr(json, pat);
	if (!p)
		return -1;
	p += strlen(pat);
	end = strchr(p, '}');
	if (!end)
		return -1;
	if (names && nlen)
		snprintf(names, nlen, "%.*s", (int)(end - p), p);
	while (p < end) {
		const char *colon = memchr(p, ':', (size_t)(end - p));

		if (!colon)
			break;
		sum += strtoll(colon + 1, (char **)&p, 10);
	}
	return sum;
}

struct t_stats {
	long long smc_conns, tcp_conns, tx_bytes, rx_bytes, fallback, aborts;
	long long handshake_errors, unshared, peer_moved;
	char fallback_names[256], abort_names[256];
};

static T_UNUSED void t_stats_get(struct t_stats *s)
{
	char *j = t_stats_json();

	s->smc_conns = t_json_int(j, "smc_conns");
	s->tcp_conns = t_json_int(j, "tcp_conns");
	s->tx_bytes = t_json_int(j, "tx_bytes");
	s->rx_bytes = t_json_int(j, "rx_bytes");
	s->handshake_errors = t_json_int(j, "handshake_errors");
	s->fallback = t_json_obj_sum(j, "tcp_fallback", s->fallback_names, sizeof(s->fallback_names));
	s->unshared = t_json_int(j, "device_unshared");
	s->peer_moved = t_json_int(j, "peer_moved_to_tcp");
	s->aborts = t_json_obj_sum(j, "aborts", s->abort_names, sizeof(s->abort_names));
	if (s->smc_conns < 0 || s->fallback < 0 || s->aborts < 0)
		t_fail("cannot parse usmc stat --json: %.300s", j);
	free(j);
}

/*
 * Since *before: exactly smc more shared-memory endpoints and tcp more
 * fallbacks (each end of a connection counts once).  Without acceleration
 * (USMC_DISABLE=1 or no preload) nothing is checked.
 */
#define t_stats_expect(before, smc, tcp) t_stats_expect_at(__FILE__, __LINE__, before, smc, tcp)
/*
 * A build whose device cannot share a connection between processes
 * (USMC_T_UNSHARED=1: build/copy, src/dev_copy.c): every connection a fork,
 * exec or SCM_RIGHTS shares moves to TCP first (device_unshared), and its
 * peer follows (peer_moved_to_tcp, at most one per move).  Such a move
 * can add a fallback or take the place of the one a check expects (a
 * connection handed to a plain program moved at the hand-over already):
 * a check's count may grow by at most those moves, and by nothing else.
 */
static T_UNUSED bool t_unshared(void)
{
	const char *u = getenv("USMC_T_UNSHARED");

	return u && u[0] == '1';
}

/* The build's device carries the CLC proposal and answer on TCP (no
 * USMC_DEV_F_CLC_INDEX, src/dev.h): the copy device's builds. */
static T_UNUSED bool t_clc_inband(void)
{
	return t_unshared();
}

static T_UNUSED long long t_unshared_moves(const struct t_stats *now, const struct t_stats *before)
{
	long long u, p;

	if (!t_unshared())
		return 0;
	u = (now->unshared < 0 ? 0 : now->unshared) - (before->unshared < 0 ? 0 : before->unshared);
	p = (now->peer_moved < 0 ? 0 : now->peer_moved) -
	    (before->peer_moved < 0 ? 0 : before->peer_moved);
	return u + (p < u ? p : u);
}

static T_UNUSED void t_stats_expect_at(const char *file, int line, const struct t_stats *before,
				       long long smc, long long tcp)
{
	struct t_stats now;
	long long extra;

	if (!t_accel())
		return;
	t_stats_get(&now);
	extra = t_unshared_moves(&now, before);
	if (now.smc_conns - before->smc_conns != smc || now.fallback - before->fallback < tcp ||
	    now.fallback - before->fallback > tcp + extra)
		t_fail_at(file, line, "expected %lld shared-memory endpoints and %lld TCP fallbacks, "
			  "got %lld and %lld (fallback reasons now: {%s}, before: {%s})", smc, tcp,
			  now.smc_conns - before->smc_conns, now.fallback - before->fallback,
			  now.fallback_names, before->fallback_names);
}

/* ---- one connection's mode and reason, fallbacks by reason -------------- */

/*
 * The mode and fallback reason of one of our connections as `usmc stat`
 * lists it, found by its local address: an entry with the same pid and
 * descriptor number can be left from a connection this process handed to
 * a forked child (it stays until the process exits).
 */
static T_UNUSED void t_fd_state(int fd, char *mode, char *reason, size_t len)
{
	char *j = t_stats_json(), pat[96], port[16];
	const char *p, *m, *end, *first = NULL, *hit = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	mode[0] = reason[0] = '\0';
	snprintf(pat, sizeof(pat), "\"pid\": %d, \"fd\": %d, ", (int)getpid(), fd);
	/* A closed descriptor has no address: then the first entry. */
	port[0] = '\0';
	if (!getsockname(fd, (struct sockaddr *)&ss, &sl) &&
	    (ss.ss_family == AF_INET || ss.ss_family == AF_INET6))
		snprintf(port, sizeof(port), ":%u\"",
			 ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port :
				((struct sockaddr_in6 *)&ss)->sin6_port));
	for (p = strstr(j, pat); p && !hit; p = strstr(p + 1, pat)) {
		end = strchr(p, '}');
		if (!first)
			first = p;
		m = strstr(p, "\"local\": \"");
		if (port[0] && m && (!end || m < end)) {
			m += strlen("\"local\": \"");
			m += strcspn(m, "\"");
			if (!strncmp(m - strlen(port) + 1, port, strlen(port)))
				hit = p;
		}
	}
	/* No address matched (a socket getsockname cannot name): the first. */
	p = hit ? hit : first;
	if (p) {
		end = strchr(p, '}');
		if ((m = strstr(p, "\"mode\": \"")) && (!end || m < end)) {
			m += strlen("\"mode\": \"");
			snprintf(mode, len, "%.*s", (int)strcspn(m, "\""), m);
		}
		if ((m = strstr(p, "\"reason\": \"")) && (!end || m < end)) {
			m += strlen("\"reason\": \"");
			snprintf(reason, len, "%.*s", (int)strcspn(m, "\""), m);
		}
	}
	free(j);
}

/* fd is on TCP now, moved there for reason why (if accelerating). */
#define t_expect_moved(fd, why) t_expect_moved_at(__LINE__, fd, why)
static T_UNUSED void t_expect_moved_at(int line, int fd, const char *why)
{
	char m[32], r[64];

	if (!t_accel())
		return;
	t_fd_state(fd, m, r, sizeof(m));
	/* Shared with another process first: moved for that (t_unshared). */
	if (t_unshared() && (!strcmp(r, "device_unshared") || !strcmp(r, "peer_moved_to_tcp")))
		why = r;
	if (strcmp(m, "TCP") || strcmp(r, why)) {
		char *j = t_stats_json();
		const char *conns = strstr(j, "\"connections\"");

		fprintf(stderr, "%s[%d]: usmc stat: %s\n", t_name, (int)getpid(), conns ? conns : j);
		t_fail_at(__FILE__, line, "fd %d: mode %s reason \"%s\", expected TCP (%s)", fd, m,
			  r, why);
	}
}

/* A counter of `usmc stat --json` by name (0 if absent). */
static T_UNUSED long long t_stat_counter(const char *key)
{
	char *j = t_stats_json();
	long long n = t_json_int(j, key);

	free(j);
	return n < 0 ? 0 : n;
}

/* This process family's TCP fallbacks for reason why (0 if not accelerating). */
static T_UNUSED long long t_fallbacks(const char *why)
{
	return t_accel() ? t_stat_counter(why) : 0;
}

/*
 * The mode of one of our own connections as `usmc stat` lists it
 * ("SMCD", "TCP", "UNDECIDED"...), "" if not listed.
 */
static T_UNUSED const char *t_fd_mode(int fd, char *out, size_t len)
{
	char r[64];

	t_fd_state(fd, out, r, MIN(len, sizeof(r)));
	return out;
}

/* Connections `usmc stat` lists as this process's (0 if not accelerating). */
static T_UNUSED int t_listed_here(void)
{
	char pat[32], *j, *p;
	int n = 0;

	if (!t_accel())
		return 0;
	j = t_stats_json();
	snprintf(pat, sizeof(pat), "{\"pid\": %d,", (int)getpid());
	for (p = strstr(j, pat); p; p = strstr(p + 1, pat))
		n++;
	free(j);
	return n;
}

/* Assert that fd is a shared-memory connection right now (if accelerating). */
#define t_assert_smc(fd) t_assert_smc_at(__FILE__, __LINE__, fd)
static T_UNUSED void t_assert_smc_at(const char *file, int line, int fd)
{
	char m[32];

	if (!t_accel())
		return;
	t_fd_mode(fd, m, sizeof(m));
	if (strcmp(m, "SMCD"))
		t_fail_at(file, line, "fd %d: mode \"%s\", expected SMCD", fd, m);
}

/* Skip unless the preload is there (for tests that exist to prove acceleration). */
static T_UNUSED void t_require_usmc(void)
{
	if (!t_usmc_loaded())
		t_skip("libusmc.so is not preloaded");
}

/* ---- one program, many checks ------------------------------------------ */

static int t_smc_pairs;		/* connections this check expects on shared memory */
static int t_tcp_conns;		/* endpoints this check expects to fall back to TCP;
				 * -1: the check verifies the counters itself */

/* A connected pair on shared memory: a byte each way (so both ends have
 * settled their handshake), both ends checked, nothing left pending. */
/* One byte each way, then both ends must be on shared memory. */
static T_UNUSED void t_ping_smc(int c, int s)
{
	char b;

	t_write_all(c, "c", 1);
	t_read_all(s, &b, 1);
	t_write_all(s, "s", 1);
	t_read_all(c, &b, 1);
	t_assert_smc(c);
	t_assert_smc(s);
}

static T_UNUSED void t_pair_smc(int *c, int *s)
{
	t_pair(c, s);
	t_ping_smc(*c, *s);
	t_smc_pairs++;
}

struct t_check {
	const char *name;
	void (*fn)(void);
};

/*
 * Run the checks named in argv (all without arguments), each in its own
 * process under alarm(60): one failure does not hide the others.  After
 * each, post() (if any) may fail it, then the counters must show exactly
 * 2 * t_smc_pairs new shared-memory endpoints and t_tcp_conns fallbacks
 * (unless t_tcp_conns is -1).
 * Returns the exit status for main.
 */
static T_UNUSED int t_run_checks(const struct t_check *checks, int n, int argc, char **argv,
				 void (*post)(void))
{
	int i, j, ran = 0, failed = 0;

	for (i = 0; i < n; i++) {
		bool want = argc < 2;
		pid_t pid;
		int st;

		for (j = 1; j < argc; j++)
			want |= !strcmp(argv[j], checks[i].name);
		if (!want)
			continue;
		if (t_check_skipped(checks[i].name))
			continue;
		ran++;
		fflush(NULL);
		pid = t_fork_helper();
		if (pid == 0) {
			struct t_stats before;

			alarm(60);
			if (t_accel())
				t_stats_get(&before);
			t_info("check %s", checks[i].name);
			checks[i].fn();
			if (post)
				post();
			if (t_tcp_conns >= 0)
				t_stats_expect(&before, 2 * t_smc_pairs, t_tcp_conns);
			_exit(0);
		}
		while (waitpid(pid, &st, 0) < 0)
			if (errno != EINTR)
				t_fail("waitpid: %s", strerror(errno));
		if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
			t_info("ok %s", checks[i].name);
			continue;
		}
		failed++;
		fprintf(stderr, "%s: check %s FAILED (%s %d)\n", t_name, checks[i].name,
			WIFSIGNALED(st) ? "signal" : "exit",
			WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	}
	if (!ran)
		t_fail("no such check");
	if (failed)
		fprintf(stderr, "%s: %d of %d checks failed\n", t_name, failed, ran);
	return failed ? T_EXIT_FAIL : T_EXIT_PASS;
}

#endif /* T_STAT_H */
