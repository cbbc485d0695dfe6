// SPDX-License-Identifier: MIT
/*
 * options.c - USMC_* settings: one descriptor table, parsed from environ.
 *
 * Uses no malloc and no stdio so it can run from the library constructor.
 */
#include "options.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

struct usmc_options usmc_opt;
unsigned int usmc_fault_mask;

static const struct {
	const char *name;
	unsigned int bit;
} fault_names[] = {
	{ "memfd", USMC_FAULT_MEMFD }, { "mmap", USMC_FAULT_MMAP }, { "lgr", USMC_FAULT_LGR },
	{ "dmb", USMC_FAULT_DMB }, { "reserve", USMC_FAULT_RESERVE }, { "bell", USMC_FAULT_BELL },
	{ "attach", USMC_FAULT_ATTACH }, { "clc", USMC_FAULT_CLC }, { "fds", USMC_FAULT_FDS },
	{ "late", USMC_FAULT_LATE },
};

/* "memfd,mmap": unknown names are ignored. */
static unsigned int fault_parse(const char *list)
{
	unsigned int mask = 0, i;
	const char *p = list;

	while (*p) {
		size_t n = strcspn(p, ",");

		for (i = 0; i < ARRAY_SIZE(fault_names); i++)
			if (strlen(fault_names[i].name) == n && !strncmp(p, fault_names[i].name, n))
				mask |= fault_names[i].bit;
		p += n;
		if (*p == ',')
			p++;
	}
	return mask;
}

#define O(f) offsetof(struct usmc_options, f), sizeof(((struct usmc_options *)0)->f)
const struct usmc_opt_desc usmc_opt_table[] = {
	{ "USMC_DEBUG", OPT_INT, "0",
	  "1: say on stderr why each connection was or was not accelerated; 2: more", O(debug), 0, 9 },
	{ "USMC_DISABLE", OPT_BOOL, "0",
	  "1: never accelerate; every connection is plain TCP (reason 'disabled')", O(disable), 0, 1 },
	{ "USMC_RUNDIR", OPT_STR, "",
	  "runtime directory shared by cooperating processes (default /dev/shm/usmc-UID)", O(rundir), 0, 0 },
	{ "USMC_RING_SIZE", OPT_SIZE, "4M",
	  "DMB ring per direction and connection, power of two 16k..64M (TCP holds ~4 MB in flight)", O(ring_size), 16384, 64L << 20 },
	{ "USMC_SPIN_US", OPT_INT, "50",
	  "adaptive mode: longest spin in microseconds before sleeping on the doorbell", O(spin_us), 0, 1000000 },
	{ "USMC_BUSY_POLL", OPT_INT, "0",
	  "busy-poll mode: always spin this many microseconds before sleeping (0 = adaptive)", O(busy_poll_us), 0, 10000000 },
	{ "USMC_LGR_SLOTS", OPT_INT, "64",
	  "connections per link group before a new link group is created", O(lgr_slots), 1, 1024 },
	{ "USMC_ALLOW", OPT_STR, "user",
	  "who may accelerate with this process: user (same uid), all, or uid list 1000,1001", O(allow), 0, 0 },
	{ "USMC_PORTS", OPT_STR, "",
	  "accelerate only these TCP ports, e.g. 6379,8000-8100 (empty = all)", O(ports), 0, 0 },
	{ "USMC_EXCLUDE_PORTS", OPT_STR, "",
	  "never accelerate these TCP ports", O(exclude_ports), 0, 0 },
	{ "USMC_DMB_COPY", OPT_BOOL, "0",
	  "1: stage sends in a private buffer and copy into the peer's DMB (seed 'dmb_copy')", O(dmb_copy), 0, 1 },
	{ "USMC_DMB_TYPE", OPT_STR, "regular",
	  "memory behind DMBs: regular or huge (transparent huge pages)", O(dmb_type), 0, 0 },
	{ "USMC_FAULT", OPT_STR, "",
	  "testing: make allocation points fail (memfd,mmap,lgr,dmb,reserve,bell,attach,clc,fds)", O(fault), 0, 0 },
	{ "USMC_TRUST_SECCOMP", OPT_BOOL, "0",
	  "1: a seccomp filter the program starts under (a container's) allows usmc; by default usmc then stays out of the way", O(trust_seccomp), 0, 1 },
};
#undef O
const unsigned int usmc_opt_count = ARRAY_SIZE(usmc_opt_table);

int usmc_parse_size(const char *s, long *out)
{
	char *end;
	long v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtol(s, &end, 0);
	if (errno || v < 0 || end == s)
		return -EINVAL;
	switch (tolower((unsigned char)*end)) {
	case 'k': v <<= 10; end++; break;
	case 'm': v <<= 20; end++; break;
	case 'g': v <<= 30; end++; break;
	case '\0': break;
	default: return -EINVAL;
	}
	if (*end == 'b' || *end == 'B')
		end++;
	if (*end)
		return -EINVAL;
	*out = v;
	return 0;
}

static void opt_set(const struct usmc_opt_desc *d, const char *val)
{
	char *p = (char *)&usmc_opt + d->off;
	long v;

	switch (d->type) {
	case OPT_BOOL:
		*(bool *)p = val[0] == '1' || val[0] == 'y' || val[0] == 'Y' ||
			     val[0] == 't' || val[0] == 'T';
		return;
	case OPT_INT:
	case OPT_SIZE:
		if (d->type == OPT_SIZE) {
			if (usmc_parse_size(val, &v))
				return;
		} else {
			char *end;

			v = strtol(val, &end, 10);
			if (end == val)
				return;
		}
		if (v < d->min)
			v = d->min;
		if (v > d->max)
			v = d->max;
		*(long *)p = v;
		return;
	case OPT_STR:
		{
			size_t n = strlen(val);

			if (n >= d->size)
				n = d->size - 1;
			memcpy(p, val, n);
			p[n] = '\0';
		}
		return;
	}
}

static long round_pow2(long v)
{
	long r = 1;

	while (r < v)
		r <<= 1;
	return r;
}

void usmc_options_load(void)
{
	unsigned int i;

	memset(&usmc_opt, 0, sizeof(usmc_opt));
	for (i = 0; i < usmc_opt_count; i++) {
		const struct usmc_opt_desc *d = &usmc_opt_table[i];
		const char *env = getenv(d->env);

		opt_set(d, d->def);
		if (env && *env)
			opt_set(d, env);
	}
	usmc_opt.ring_size = round_pow2(usmc_opt.ring_size);
	usmc_fault_mask = fault_parse(usmc_opt.fault);
}

/* "6379,8000-8100": is port in the list? */
static bool port_in_list(const char *list, uint16_t port)
{
	const char *p = list;

	while (*p) {
		char *end;
		long lo = strtol(p, &end, 10), hi;

		if (end == p)
			return false;
		hi = lo;
		if (*end == '-') {
			p = end + 1;
			hi = strtol(p, &end, 10);
			if (end == p)
				return false;
		}
		if (port >= lo && port <= hi)
			return true;
		p = end;
		while (*p == ',' || *p == ' ')
			p++;
	}
	return false;
}

bool usmc_port_allowed(uint16_t port)
{
	if (usmc_opt.ports[0] && !port_in_list(usmc_opt.ports, port))
		return false;
	if (usmc_opt.exclude_ports[0] && port_in_list(usmc_opt.exclude_ports, port))
		return false;
	return true;
}
