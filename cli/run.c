// SPDX-License-Identifier: MIT
/*
 * run.c - `usmc run [options] -- CMD ARGS`: start CMD with libusmc preloaded.
 *
 * Like smc_run: the settings become USMC_* variables, libusmc.so goes in
 * front of any existing LD_PRELOAD entries, and everything CMD starts
 * (shell wrappers, forked and exec'ed children) inherits both.
 */
#include "options.h"
#include "usmc.h"

#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void run_usage(FILE *f)
{
	fprintf(f,
		"usage: usmc run [options] [--] CMD [ARGS...]\n"
		"  -d, --debug          say why each connection was (not) accelerated (repeat: more)\n"
		"  -r, --ring SIZE      DMB ring per direction (USMC_RING_SIZE, e.g. 1M)\n"
		"  -b, --busy-poll US   busy-poll this long before sleeping (USMC_BUSY_POLL)\n"
		"  -s, --spin US        adaptive spin ceiling (USMC_SPIN_US)\n"
		"  -R, --rundir DIR     runtime directory shared by peers (USMC_RUNDIR)\n"
		"  -a, --allow POLICY   user | all | uid,uid... (USMC_ALLOW)\n"
		"  -p, --ports LIST     accelerate only these ports (USMC_PORTS)\n"
		"  -t, --tcp            track but never accelerate (USMC_DISABLE=1)\n"
		"  -l, --lib PATH       libusmc.so to preload\n");
}

/* libusmc.so beside this binary, or in ../lib/usmc/. */
static int find_lib(char *out, size_t len)
{
	char exe[PATH_MAX], *dir;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	const char *env = getenv("USMC_LIB");

	if (env && *env && !access(env, R_OK)) {
		snprintf(out, len, "%s", env);
		return 0;
	}
	if (n <= 0)
		return -1;
	exe[n] = '\0';
	dir = dirname(exe);
	snprintf(out, len, "%s/libusmc.so", dir);
	if (!access(out, R_OK))
		return 0;
	snprintf(out, len, "%s/../lib/usmc/libusmc.so", dir);
	return access(out, R_OK);
}

int cmd_run(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "debug", no_argument, NULL, 'd' },
		{ "ring", required_argument, NULL, 'r' },
		{ "busy-poll", required_argument, NULL, 'b' },
		{ "spin", required_argument, NULL, 's' },
		{ "rundir", required_argument, NULL, 'R' },
		{ "allow", required_argument, NULL, 'a' },
		{ "ports", required_argument, NULL, 'p' },
		{ "tcp", no_argument, NULL, 't' },
		{ "lib", required_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char lib[PATH_MAX] = "", preload[8192], num[16];
	const char *old;
	int c, debug = 0;
	long v;

	while ((c = getopt_long(argc, argv, "+dr:b:s:R:a:p:tl:h", opts, NULL)) != -1) {
		switch (c) {
		case 'd':
			debug++;
			break;
		case 'r':
			if (usmc_parse_size(optarg, &v)) {
				fprintf(stderr, "usmc run: bad size '%s'\n", optarg);
				return 2;
			}
			setenv("USMC_RING_SIZE", optarg, 1);
			break;
		case 'b':
			setenv("USMC_BUSY_POLL", optarg, 1);
			break;
		case 's':
			setenv("USMC_SPIN_US", optarg, 1);
			break;
		case 'R':
			setenv("USMC_RUNDIR", optarg, 1);
			break;
		case 'a':
			setenv("USMC_ALLOW", optarg, 1);
			break;
		case 'p':
			setenv("USMC_PORTS", optarg, 1);
			break;
		case 't':
			setenv("USMC_DISABLE", "1", 1);
			break;
		case 'l':
			snprintf(lib, sizeof(lib), "%s", optarg);
			break;
		case 'h':
			run_usage(stdout);
			return 0;
		default:
			run_usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		run_usage(stderr);
		return 2;
	}
	if (debug) {
		snprintf(num, sizeof(num), "%d", debug);
		setenv("USMC_DEBUG", num, 1);
	}
	if (!lib[0] && find_lib(lib, sizeof(lib))) {
		fprintf(stderr, "usmc run: cannot find libusmc.so (set USMC_LIB)\n");
		return 127;
	}
	if (lib[0] != '/' || strstr(lib, "/../")) {
		char abs[PATH_MAX];

		if (realpath(lib, abs))
			snprintf(lib, sizeof(lib), "%s", abs);
	}
	old = getenv("LD_PRELOAD");
	if (old && *old && !strstr(old, lib))
		snprintf(preload, sizeof(preload), "%s:%s", lib, old);
	else if (old && *old)
		snprintf(preload, sizeof(preload), "%s", old);
	else
		snprintf(preload, sizeof(preload), "%s", lib);
	setenv("LD_PRELOAD", preload, 1);
	execvp(argv[optind], &argv[optind]);
	fprintf(stderr, "usmc run: %s: %s\n", argv[optind], strerror(errno));
	return errno == ENOENT ? 127 : 126;
}
