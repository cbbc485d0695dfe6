/* SPDX-License-Identifier: MIT */
/*
 * usmc.h (cli) - subcommands of the usmc tool.
 */
#ifndef USMC_CLI_H
#define USMC_CLI_H

int cmd_run(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_dev(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_env(int argc, char **argv);

/* JSON string escaping for the subcommands' --json output. */
void json_str(const char *s);

#endif
