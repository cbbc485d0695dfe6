/* SPDX-License-Identifier: MIT */
/*
 * t_selfdiff.h - a differential program that compares itself: the
 * scenarios write what they observe into a transcript (T_OBS); run under
 * usmc, the program runs itself again with USMC_DISABLE=1 (plain TCP
 * through the same interposition) and the two transcripts must be equal.
 * Used by t_oob and t_wrappers (tests/test_unit.py runs them as ordinary
 * programs: plain, ASan, TSan).
 *
 * Included by exactly one .c file per program, after t_util.h.
 */
#ifndef T_SELFDIFF_H
#define T_SELFDIFF_H

#include "t_util.h"

static FILE *t_tr;		/* this run's transcript */

#define T_OBS(...)	fprintf(t_tr, __VA_ARGS__)

struct t_scenario {
	const char *name;
	void (*fn)(void);
};

/* The transcript of this program run with USMC_DISABLE=1. */
static char *t_selfdiff_plain(char **argv)
{
	static char buf[1 << 16];
	size_t len = 0;
	int pfd[2], st;
	ssize_t n;
	pid_t pid;

	t_ok(pipe(pfd));
	pid = t_fork_helper();
	if (pid == 0) {
		dup2(pfd[1], 1);
		close(pfd[0]);
		close(pfd[1]);
		setenv("USMC_DISABLE", "1", 1);
		setenv("T_SELFDIFF_PLAIN", "1", 1);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	close(pfd[1]);
	while ((n = read(pfd[0], buf + len, sizeof(buf) - 1 - len)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	close(pfd[0]);
	t_ok(waitpid(pid, &st, 0));
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		t_fail("the plain run failed (status %d)", st);
	return buf;
}

/* main(): the scenarios named on the command line, or all of them. */
static int t_selfdiff_main(int argc, char **argv, const struct t_scenario *sc, unsigned int n)
{
	char *mine = NULL, *plain;
	size_t len = 0;
	unsigned int i;
	int j;

	signal(SIGPIPE, SIG_IGN);
	t_tr = open_memstream(&mine, &len);
	if (!t_tr)
		t_fail("open_memstream");
	for (i = 0; i < n; i++) {
		bool want = argc < 2;

		for (j = 1; j < argc; j++)
			want |= !strcmp(argv[j], sc[i].name);
		if (!want)
			continue;
		T_OBS("== %s\n", sc[i].name);
		sc[i].fn();
		fflush(t_tr);
	}
	fclose(t_tr);
	if (getenv("T_SELFDIFF_PLAIN")) {
		fputs(mine, stdout);
		free(mine);
		return T_EXIT_PASS;
	}
	t_info("transcript:\n%s", mine);
	if (!t_accel()) {
		free(mine);
		return T_EXIT_PASS;
	}
	plain = t_selfdiff_plain(argv);
	if (strcmp(plain, mine)) {
		fprintf(stderr, "%s: transcripts differ\n--- TCP\n%s--- usmc\n%s", t_name, plain,
			mine);
		free(mine);
		return T_EXIT_FAIL;
	}
	free(mine);
	fprintf(stderr, "%s: TCP and usmc agree\n", t_name);
	return T_EXIT_PASS;
}

#endif
