// SPDX-License-Identifier: MIT
/*
 * bench.c - `usmc bench` (issue 4 builds the full suite here).
 */
#include "usmc.h"

#include <stdio.h>

int cmd_bench(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "usmc bench: not built yet\n");
	return 1;
}
