/* SPDX-License-Identifier: MIT */
/*
 * options.h - the one table of USMC_* settings.
 *
 * Each setting has a default, may be set for the whole runtime directory
 * with `usmc ctl KEY=VALUE` (the controls file, OPTF_CTL settings only) and
 * per program in the environment; the environment wins.  The environment
 * is read once when the library or CLI starts.  The controls file is read
 * again, at most every USMC_CTL_CHECK_NS, when a connection or listener is
 * made (usmc_options_refresh), so a change applies to new connections of
 * running programs.  Scalars are then stored in place (a reader sees the
 * old or the new value); the string rules are read by usmc_policy_check()
 * only, under a sequence count.
 */
#ifndef USMC_OPTIONS_H
#define USMC_OPTIONS_H

#include "usmc.h"

enum usmc_opt_type { OPT_BOOL, OPT_INT, OPT_SIZE, OPT_STR };

#define OPTF_CTL	0x1	/* `usmc ctl` may set it (new connections) */
#define OPTF_PORTS	0x2	/* a port list: 6379,8000-8100 */
#define OPTF_NAMES	0x4	/* a list of names or numbers: a,b,c */

/* Where an option's value came from. */
enum usmc_opt_src { USMC_SRC_DEFAULT, USMC_SRC_CTL, USMC_SRC_ENV };

/* The controls file in the runtime directory (`usmc ctl`): KEY=VALUE lines. */
#define USMC_CTL_FILE		"controls"
#define USMC_CTL_MAX		8192		/* bytes; a larger file is refused */
#define USMC_CTL_CHECK_NS	(100 * 1000000ull)

struct usmc_opt_desc {
	const char *env;	/* environment variable */
	enum usmc_opt_type type;
	const char *def;	/* default, as text */
	const char *doc;	/* one line for `usmc help env` and usmc(7) */
	size_t off;		/* offset in struct usmc_options */
	size_t size;		/* field size (OPT_STR capacity) */
	long min, max;		/* bounds for OPT_INT / OPT_SIZE */
	unsigned int flags;	/* OPTF_* */
	const char *choices;	/* OPT_STR: "a|b" the only values allowed, or NULL */
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
	bool loopback;		/* USMC_LOOPBACK: the loopback device is on */
	char programs[256];	/* USMC_PROGRAMS: only these programs (empty = all) */
	char exclude_programs[256];	/* USMC_EXCLUDE_PROGRAMS */
	char off_netns[256];	/* USMC_OFF_NETNS: network namespace inodes switched off */
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
	USMC_FAULT_BODY_LATE	= 1u << 10,	/* client: an in-band body 1.5 s after its
						 * proposal (clc_inband.h) */
};
extern unsigned int usmc_fault_mask;

static inline bool usmc_fault(unsigned int point)
{
	return unlikely(usmc_fault_mask & point);
}

extern struct usmc_options usmc_opt;
extern const struct usmc_opt_desc usmc_opt_table[];
extern const unsigned int usmc_opt_count;
#define USMC_OPT_MAX	32
extern uint8_t usmc_opt_src[USMC_OPT_MAX];	/* enum usmc_opt_src, by table index */

/* Parse the environment into usmc_opt; safe to call more than once. */
void usmc_options_load(void);
/* Set one option from text (unchecked: see usmc_opt_check). */
void usmc_opt_set(const struct usmc_opt_desc *d, const char *val);
/* Apply the controls file if it changed since the last look (rate limited,
 * never blocks; a file that is not ours is ignored). */
void usmc_options_refresh(void);
/* Apply controls text (KEY=VALUE lines) to every OPTF_CTL setting not set
 * in the environment; what it does not name goes back to the default.
 * Returns the number of lines refused. */
int usmc_options_apply_ctl(const char *text);
/* Which version of the controls file this process applied: 16 bits, 0
 * when none (a listener's decline carries it, clc.c). */
uint32_t usmc_ctl_gen(void);
/* Read the controls file (checked open, size bounded) into buf, NUL
 * terminated; length, or -ENOENT, -EFBIG, -EPERM, -EINVAL, ... */
int usmc_ctl_read(char *buf, size_t len);
/* "ring_size", "RING_SIZE" or "USMC_RING_SIZE": the descriptor, or NULL. */
const struct usmc_opt_desc *usmc_opt_find(const char *key);
/* The `usmc ctl` name of a setting: USMC_RING_SIZE -> ring_size. */
const char *usmc_opt_key(const struct usmc_opt_desc *d, char *buf, size_t len);
/* Is val acceptable for d?  0, or -EINVAL with *why saying what is wrong. */
int usmc_opt_check(const struct usmc_opt_desc *d, const char *val, const char **why);
/* The current value of d as text. */
const char *usmc_opt_value(const struct usmc_opt_desc *d, char *buf, size_t len);
/*
 * May a connection on this port be accelerated here and now?  0, or the
 * reason (disabled, no_common_device, policy); *fixed (may be NULL): the
 * refusal comes from the environment, so it holds for the process's life.
 * Refreshes the controls first.
 */
int usmc_policy_check(uint16_t port, bool *fixed);
/* Parse "64k", "1M", "4096" into bytes; -EINVAL on junk. */
int usmc_parse_size(const char *s, long *out);

/* Fork child: the module's lock afresh (atfork.c). */
void usmc_ctl_after_fork(void);

#endif
