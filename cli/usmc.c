// SPDX-License-Identifier: MIT
/*
 * usmc.c - the usmc command: dispatch to one file per subcommand.
 */
#include "usmc.h"
#include "options.h"
#include "usmc.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
	fprintf(f,
		"usage: usmc <command> [options]\n"
		"\n"
		"  run [opts] -- CMD ARGS     run CMD with libusmc preloaded (like smc_run)\n"
		"  stat [-a] [-d] [-l] [--json] [--reset]\n"
		"                             live connections and counters (like smcss)\n"
		"  stat summary [--json] [--reset]\n"
		"                             totals, top fallback reasons, buffers (like smcd stats)\n"
		"  dev [--json]               devices and their statistics (like smcd device)\n"
		"  lg [-a] [--json]           link groups (like smcd linkgroup)\n"
		"  ctl [KEY=VALUE...]         runtime controls: list, or set for new connections\n"
		"  chk [--json] HOST:PORT     would a connection there be accelerated? (like smc_chk)\n"
		"  bench [opts]               TCP vs UNIX socket vs usmc, side by side\n"
		"  env [--man]                the USMC_* settings and their defaults\n"
		"  version\n"
		"\n"
		"See usmc(1) and usmc(7).\n");
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "help";

	usmc_options_load();
	usmc_fault_mask = 0;	/* USMC_FAULT is for the library under test */
	if (!strcmp(cmd, "run"))
		return cmd_run(argc - 1, argv + 1);
	if (!strcmp(cmd, "stat") || !strcmp(cmd, "stats"))
		return cmd_stat(argc - 1, argv + 1);
	if (!strcmp(cmd, "dev") || !strcmp(cmd, "device"))
		return cmd_dev(argc - 1, argv + 1);
	if (!strcmp(cmd, "lg") || !strcmp(cmd, "linkgroup"))
		return cmd_lg(argc - 1, argv + 1);
	if (!strcmp(cmd, "ctl"))
		return cmd_ctl(argc - 1, argv + 1);
	if (!strcmp(cmd, "chk") || !strcmp(cmd, "check"))
		return cmd_chk(argc - 1, argv + 1);
	if (!strcmp(cmd, "bench"))
		return cmd_bench(argc - 1, argv + 1);
	if (!strcmp(cmd, "env"))
		return cmd_env(argc - 1, argv + 1);
	if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
		printf("usmc %s (shared-memory format %d)\n", USMC_VERSION_STR, USMC_PROTO_VERSION);
		return 0;
	}
	if (!strcmp(cmd, "help") || !strcmp(cmd, "-h") || !strcmp(cmd, "--help")) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "usmc: unknown command '%s' (usmc help lists them)\n", cmd);
	usage(stderr);
	return 2;
}
