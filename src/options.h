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
	char fault[128];	/* USMC_FAULT: testing, allocation points made to fail */
	bool trust_seccomp;	/* USMC_TRUST_SECCOMP: an inherited filter allows usmc */
};

/*
 * Fault injection for the exhaustion tests (USMC_FAULT=memfd,mmap,...):
 * each named point fails as if the resource were exhausted.  Parsed once
 * into usmc_fault_mask; zero in production, so the checks cost a load.
 */
enum usmc_fault_point {
	USMC_FAULT_MEMFD	= 1u << 0,	/* memfd_create (fork-shared socket state) */
	USMC_FAULT_MMAP		= 1u << 1,	/* mapping any shared file */
	USMC_FAULT_LGR		= 1u << 2,	/* creating a link group */
	USMC_FAULT_DMB		= 1u << 3,	/* registering a connection's DMBs */
	USMC_FAULT_RESERVE	= 1u << 4,	/* backing more of a ring (tmpfs full) */
	USMC_FAULT_BELL		= 1u << 5,	/* opening a doorbell */
	USMC_FAULT_ATTACH	= 1u << 6,	/* attaching the peer's link group */
	USMC_FAULT_CLC		= 1u << 7,	/* backing a CLC index page */
	USMC_FAULT_FDS		= 1u << 8,	/* descriptor headroom exhausted */
	USMC_FAULT_LATE		= 1u << 9,	/* client: proposal 50 ms after the SYN */
};
extern unsigned int usmc_fault_mask;

static inline bool usmc_fault(unsigned int point)
{
	return unlikely(usmc_fault_mask & point);
}

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
