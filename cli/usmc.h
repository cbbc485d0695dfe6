/* SPDX-License-Identifier: MIT */
/*
 * usmc.h (cli) - subcommands of the usmc tool.
 */
#ifndef USMC_CLI_H
#define USMC_CLI_H

#include <stdint.h>

int cmd_run(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_summary(int argc, char **argv);	/* usmc stat summary */
int cmd_dev(int argc, char **argv);
int cmd_lg(int argc, char **argv);
int cmd_ctl(int argc, char **argv);
int cmd_chk(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_env(int argc, char **argv);

struct usmc_lgr_hdr;
struct usmc_cdc_ctrl;
/* One control block of link group id (pread, checked): 0 or -errno. */
int cli_lg_ctrl(uint64_t id, uint32_t slot, struct usmc_lgr_hdr *h, struct usmc_cdc_ctrl *c);
/* Live link groups, the lg- entries refused, the memory behind the live ones. */
unsigned int cli_lg_count(unsigned int *refused, uint64_t *committed);

#endif
