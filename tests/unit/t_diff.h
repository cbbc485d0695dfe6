// SPDX-License-Identifier: MIT
/*
 * t_diff.h - the harness of the differential programs (t_semantics,
 * t_signals): each scenario runs a server and a client side in two forked
 * processes, whose transcripts (server's, then client's) go to stdout;
 * tests/test_unit.py compares the transcript of a USMC_DISABLE=1 run with
 * that of an accelerated run.  Accelerated, a scenario also fails unless it
 * put exactly its expected number of endpoints on shared memory, with no
 * fallback.
 *
 * Included by exactly one .c file per program: its functions are static
 * on purpose.  Messages are prefixed with t_name.
 */
#ifndef T_DIFF_H
#define T_DIFF_H

#include "t_util.h"

/* One side of a scenario, in its own process: never returns. */
typedef void (*t_diff_side_fn)(const void *sc, char side, int sync, int logfd);

/* Everything up to EOF, as a string (empty on error). */
static char *t_diff_slurp(int fd)
{
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);
	ssize_t n;

	if (!buf)
		t_fail("out of memory");
	while ((n = read(fd, buf + len, cap - len - 1)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		len += (size_t)n;
		if (cap - len < 2 && !(buf = realloc(buf, cap *= 2)))
			t_fail("out of memory");
	}
	buf[len] = '\0';
	return buf;
}

static pid_t t_diff_spawn(const void *sc, t_diff_side_fn fn, char side, int sv[2], int lp[2])
{
	pid_t pid = t_fork_helper();

	if (pid == 0) {
		close(lp[0]);
		close(side == 'S' ? sv[0] : sv[1]);
		fn(sc, side, side == 'S' ? sv[1] : sv[0], lp[1]);
	}
	close(lp[1]);
	return pid;
}

static bool t_diff_side_ok(pid_t pid, const char *scen, char side)
{
	int st;

	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return false;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return true;
	fprintf(stderr, "%s: %s %c: %s %d\n", t_name, scen, side,
		WIFSIGNALED(st) ? "killed by signal" : "exit status",
		WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	return false;
}

/* One scenario; false on failure (reported on stderr).  server: false
 * for a scenario without a server process. */
static bool t_diff_run(const char *name, int smc, const void *sc, t_diff_side_fn fn,
		       bool server)
{
	int sv[2], lps[2], lpc[2];
	pid_t ps = -1, pc;
	struct t_stats before, now;
	char *logc, *logs = NULL;
	bool ok = true;

	if (t_accel())
		t_stats_get(&before);
	t_sync_pair(sv);
	t_ok(pipe(lps));
	t_ok(pipe(lpc));
	if (server)
		ps = t_diff_spawn(sc, fn, 'S', sv, lps);
	else
		close(lps[1]);
	pc = t_diff_spawn(sc, fn, 'C', sv, lpc);
	close(sv[0]);
	close(sv[1]);
	logc = t_diff_slurp(lpc[0]);
	if (ps > 0)
		logs = t_diff_slurp(lps[0]);
	close(lpc[0]);
	close(lps[0]);
	ok &= t_diff_side_ok(pc, name, 'C');
	if (ps > 0)
		ok &= t_diff_side_ok(ps, name, 'S');
	printf("%s%s", logs ? logs : "", logc);
	fflush(stdout);
	free(logs);
	free(logc);

	if (t_accel()) {
		t_stats_get(&now);
		if (now.smc_conns - before.smc_conns != smc || now.fallback != before.fallback) {
			fprintf(stderr, "%s: %s: expected %d shared-memory endpoints and no "
				"fallback, got %lld and %lld fallbacks (reasons so far: {%s})\n",
				t_name, name, smc, now.smc_conns - before.smc_conns,
				now.fallback - before.fallback, now.fallback_names);
			ok = false;
		}
	}
	return ok;
}

/*
 * main(): the scenarios named on the command line, or all that
 * by_default() accepts; run(i) runs scenario i.  Exit 0 when all passed.
 */
static int t_diff_main(int argc, char **argv, int n, const char *(*name_of)(int),
		       bool (*by_default)(int), bool (*run)(int))
{
	int failed = 0, ran = 0, i, j;

	signal(SIGPIPE, SIG_IGN);	/* the harness itself never writes to a socket */
	setvbuf(stdout, NULL, _IOFBF, 1 << 16);
	for (i = 0; i < n; i++) {
		bool want = argc < 2 && by_default(i);

		for (j = 1; j < argc; j++)
			want |= !strcmp(argv[j], name_of(i));
		if (!want || t_check_skipped(name_of(i)))
			continue;
		ran++;
		if (!run(i)) {
			failed++;
			fprintf(stderr, "%s: %s: FAILED\n", t_name, name_of(i));
		}
	}
	if (!ran)
		t_fail("no such scenario");
	fprintf(stderr, "%s: %d scenarios, %d failed (%s)\n", t_name, ran, failed,
		t_accel() ? "shared memory" : "TCP");
	return failed ? T_EXIT_FAIL : T_EXIT_PASS;
}

#endif
