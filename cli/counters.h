/* SPDX-License-Identifier: MIT */
/*
 * counters.h (cli) - the counters of struct usmc_counters by name, and what
 * `usmc stat`, `usmc stat summary`, `usmc dev` and `usmc chk` share.
 */
#ifndef USMC_CLI_COUNTERS_H
#define USMC_CLI_COUNTERS_H

#include "stats.h"

/* Index of a counter in struct usmc_counters_snapshot.v. */
#define STAT_IDX(field)		(offsetof(struct usmc_counters, field) / 8)
#define STAT_ABORT		STAT_IDX(aborts)
#define STAT_FALLBACK		STAT_IDX(fallback)
#define STAT_FALLBACK_SERVER	STAT_IDX(fallback_server)
#define STAT_RING_HIST		STAT_IDX(ring_hist)
#define STAT_TX_SIZE_HIST	STAT_IDX(tx_size_hist)
#define STAT_RX_SIZE_HIST	STAT_IDX(rx_size_hist)

/* The scalar counters by field name, in struct usmc_counters order. */
struct stat_ctr {
	const char *name;
	unsigned int idx;
};
extern const struct stat_ctr stat_ctrs[];
extern const unsigned int stat_nctrs;

bool stat_conn_live(const struct usmc_stats_file *f, const struct usmc_stats_conn *c);
/* Every fallback reason counted in s, in words, with what to do. */
void stat_explain_reasons(const struct usmc_counters_snapshot *s);
/* The reason listener index id declines for now (usmc ctl), or 0. */
int stat_listener_off(uint64_t id);

#endif
