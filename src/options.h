/* SPDX-License-Identifier: MIT */
/*
 * options.h - the one table of USMC_* settings.
 *
 * Read once from the environment when the library or CLI starts; afterwards
 * read-only, so every thread may use usmc_opt without locking.
 */
#ifndef USMC_OPTIONS_H
#define USMC_OPTIONS_H

#include "usmc.h"

enum usmc_opt_type { OPT_BOOL, OPT_INT, OPT_SIZE, OPT_STR };

struct usmc_opt_desc {
	const char *env;	/* environment variable */
	enum usmc_opt_type type;
	const char *def;	/* default, as text */
	const char *doc;	/* one line for `usmc help env` and usmc(7) */
	size_t off;		/* offset in struct usmc_options */
	size_t size;		/* field size (OPT_STR capacity) */
	long min, max;		/* bounds for OPT_INT / OPT_SIZE */
};

struct usmc_options {
	long debug;		/* USMC_DEBUG */
	bool disable;		/* USMC_DISABLE */
	char rundir[256];	/* USMC_RUNDIR (resolved by rundir.c when empty) */
	long ring_size;		/* USMC_RING_SIZE, bytes per direction, power of two */
	long spin_us;		/* USMC_SPIN_US, adaptive spin ceiling */
	long busy_poll_us;	/* USMC_BUSY_POLL, 0 = adaptive */
	long lgr_slots;		/* USMC_LGR_SLOTS, connections per link group */
	char allow[256];	/* USMC_ALLOW: user | all | uid list */
	char ports[256];	/* USMC_PORTS: only these ports (empty = all) */
	char exclude_ports[256];/* USMC_EXCLUDE_PORTS */
	bool dmb_copy;		/* USMC_DMB_COPY: stage writes in a private sndbuf */
	char dmb_type[16];	/* USMC_DMB_TYPE: regular | huge */
};

extern struct usmc_options usmc_opt;
extern const struct usmc_opt_desc usmc_opt_table[];
extern const unsigned int usmc_opt_count;

/* Parse the environment into usmc_opt; safe to call more than once. */
void usmc_options_load(void);
/* Does USMC_PORTS / USMC_EXCLUDE_PORTS allow acceleration on this port? */
bool usmc_port_allowed(uint16_t port);
/* Parse "64k", "1M", "4096" into bytes; -EINVAL on junk. */
int usmc_parse_size(const char *s, long *out);

#endif
