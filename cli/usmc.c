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
		"  run [opts] -- CMD ARGS   run CMD with libusmc preloaded (like smc_run)\n"
		"  stat [--json] [--reset]  live connections and counters (like smcss + smcd stats)\n"
		"  dev [--json]             devices and their statistics (like smcd device)\n"
		"  bench [opts]             TCP vs UNIX socket vs usmc, side by side\n"
		"  env                      the USMC_* environment variables\n"
		"  version\n"
		"\n"
		"See usmc(1) and usmc(7).\n");
}

void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

int cmd_env(int argc, char **argv)
{
	unsigned int i;

	(void)argc;
	(void)argv;
	for (i = 0; i < usmc_opt_count; i++)
		printf("%-20s default %-8s  %s\n", usmc_opt_table[i].env,
		       usmc_opt_table[i].def[0] ? usmc_opt_table[i].def : "\"\"",
		       usmc_opt_table[i].doc);
	return 0;
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
	fprintf(stderr, "usmc: unknown command '%s'\n", cmd);
	usage(stderr);
	return 2;
}
