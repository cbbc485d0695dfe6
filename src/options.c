// SPDX-License-Identifier: MIT
/*
 * options.c - USMC_* settings: one descriptor table, parsed from environ,
 * and the checks and names `usmc ctl` and the controls file use
 * (controls.c applies them at run time).
 *
 * Loading uses no malloc and no stdio so it can run from the library
 * constructor.
 */
#include "options.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct usmc_options usmc_opt;
unsigned int usmc_fault_mask;

static const struct {
	const char *name;
	unsigned int bit;
} fault_names[] = {
	{ "memfd", USMC_FAULT_MEMFD }, { "mmap", USMC_FAULT_MMAP }, { "lgr", USMC_FAULT_LGR },
	{ "dmb", USMC_FAULT_DMB }, { "reserve", USMC_FAULT_RESERVE }, { "bell", USMC_FAULT_BELL },
	{ "attach", USMC_FAULT_ATTACH }, { "clc", USMC_FAULT_CLC }, { "fds", USMC_FAULT_FDS },
	{ "late", USMC_FAULT_LATE }, { "body_late", USMC_FAULT_BODY_LATE },
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
#define CTL		OPTF_CTL
const struct usmc_opt_desc usmc_opt_table[] = {
	{ "USMC_DEBUG", OPT_INT, "0",
	  "1: say on stderr why each connection was or was not accelerated; 2: more", O(debug), 0, 9, CTL, NULL },
	{ "USMC_DISABLE", OPT_BOOL, "0",
	  "1: never accelerate; every connection is plain TCP (reason 'disabled')", O(disable), 0, 1, CTL, NULL },
	{ "USMC_LOOPBACK", OPT_BOOL, "1",
	  "the loopback device (same host, any namespace); 0: off, connections fall back (no_common_device)", O(loopback), 0, 1, CTL, NULL },
	{ "USMC_RUNDIR", OPT_STR, "",
	  "runtime directory shared by cooperating processes (default /dev/shm/usmc-UID)", O(rundir), 0, 0, 0, NULL },
	{ "USMC_RING_SIZE", OPT_SIZE, "4M",
	  "DMB ring per direction and connection, power of two 16k..64M (TCP holds ~4 MB in flight)", O(ring_size), 16384, 64L << 20, CTL, NULL },
	{ "USMC_SPIN_US", OPT_INT, "50",
	  "adaptive mode: longest spin in microseconds before sleeping on the doorbell (with the peer on our CPU: up to four sched_yield hand-overs instead; 0 = neither)", O(spin_us), 0, 1000000, CTL, NULL },
	{ "USMC_BUSY_POLL", OPT_INT, "0",
	  "busy-poll mode: always spin this many microseconds before sleeping (0 = adaptive)", O(busy_poll_us), 0, 10000000, CTL, NULL },
	{ "USMC_LGR_SLOTS", OPT_INT, "64",
	  "connections per link group before a new link group is created", O(lgr_slots), 1, 1024, CTL, NULL },
	{ "USMC_ALLOW", OPT_STR, "user",
	  "whose runtime objects this process trusts (the runtime directory's owner too): user (same uid), all, or uid list 1000,1001; objects stay private to their user, so two users never accelerate with each other", O(allow), 0, 0, 0, NULL },
	{ "USMC_PORTS", OPT_STR, "",
	  "accelerate only these TCP ports, e.g. 6379,8000-8100 (empty = all; others: reason 'policy')", O(ports), 0, 0, CTL | OPTF_PORTS, NULL },
	{ "USMC_EXCLUDE_PORTS", OPT_STR, "",
	  "never accelerate these TCP ports (reason 'policy')", O(exclude_ports), 0, 0, CTL | OPTF_PORTS, NULL },
	{ "USMC_PROGRAMS", OPT_STR, "",
	  "accelerate only in these programs, by name as ps shows it, e.g. redis-server,nginx (empty = all)", O(programs), 0, 0, CTL | OPTF_NAMES, NULL },
	{ "USMC_EXCLUDE_PROGRAMS", OPT_STR, "",
	  "never accelerate in these programs (reason 'policy')", O(exclude_programs), 0, 0, CTL | OPTF_NAMES, NULL },
	{ "USMC_OFF_NETNS", OPT_STR, "",
	  "network namespaces switched off, by inode (stat -L -c %i /proc/PID/ns/net): a per-container off switch", O(off_netns), 0, 0, CTL | OPTF_NAMES, NULL },
	{ "USMC_DMB_COPY", OPT_BOOL, "0",
	  "1: stage sends in a private buffer and copy into the peer's DMB (seed 'dmb_copy')", O(dmb_copy), 0, 1, CTL, NULL },
	{ "USMC_DMB_TYPE", OPT_STR, "regular",
	  "memory behind DMBs: regular or huge (2 MB aligned, for a tmpfs mounted huge=)", O(dmb_type), 0, 0, CTL, "regular|huge" },
	{ "USMC_FAULT", OPT_STR, "",
	  "testing: make allocation points fail (memfd,mmap,lgr,dmb,reserve,bell,attach,clc,fds,late)", O(fault), 0, 0, 0, NULL },
	{ "USMC_TRUST_SECCOMP", OPT_BOOL, "0",
	  "1: a seccomp filter the program starts under (a container's) allows usmc; by default usmc then stays out of the way", O(trust_seccomp), 0, 1, 0, NULL },
};
#undef CTL
#undef O
const unsigned int usmc_opt_count = ARRAY_SIZE(usmc_opt_table);
BUILD_BUG_ON(ARRAY_SIZE(usmc_opt_table) > USMC_OPT_MAX);
uint8_t usmc_opt_src[USMC_OPT_MAX];

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

static long round_pow2(long v)
{
	long r = 1;

	while (r < v)
		r <<= 1;
	return r;
}

static void opt_set(const struct usmc_opt_desc *d, const char *val)
{
	char *p = (char *)&usmc_opt + d->off;
	long v;

	switch (d->type) {
	case OPT_BOOL:
		*(bool *)p = val[0] == '1' || val[0] == 'y' || val[0] == 'Y' ||
			     val[0] == 't' || val[0] == 'T' || !strcasecmp(val, "on");
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
			size_t n = strlen(val), i;

			if (n >= d->size)
				n = d->size - 1;
			/* In place while others may read it (the controls are
			 * applied to a running process): the first byte last,
			 * so a reader sees the old value, "" or the new one. */
			__atomic_store_n(&p[0], '\0', __ATOMIC_RELEASE);
			for (i = 1; i < n; i++)
				__atomic_store_n(&p[i], val[i], __ATOMIC_RELAXED);
			if (n)
				__atomic_store_n(&p[n], '\0', __ATOMIC_RELAXED);
			__atomic_store_n(&p[0], n ? val[0] : '\0', __ATOMIC_RELEASE);
		}
		return;
	}
}

void usmc_opt_set(const struct usmc_opt_desc *d, const char *val)
{
	opt_set(d, val);
	if (d->off == offsetof(struct usmc_options, ring_size))
		usmc_opt.ring_size = round_pow2(usmc_opt.ring_size);
}

void usmc_options_load(void)
{
	unsigned int i;

	memset(&usmc_opt, 0, sizeof(usmc_opt));
	for (i = 0; i < usmc_opt_count; i++) {
		const struct usmc_opt_desc *d = &usmc_opt_table[i];
		const char *env = getenv(d->env);

		opt_set(d, d->def);
		usmc_opt_src[i] = USMC_SRC_DEFAULT;
		if (env && *env) {
			opt_set(d, env);
			usmc_opt_src[i] = USMC_SRC_ENV;
		}
	}
	usmc_opt.ring_size = round_pow2(usmc_opt.ring_size);
	usmc_fault_mask = fault_parse(usmc_opt.fault);
}

const struct usmc_opt_desc *usmc_opt_find(const char *key)
{
	unsigned int i;

	if (!strncasecmp(key, "USMC_", 5))
		key += 5;
	for (i = 0; i < usmc_opt_count; i++)
		if (!strcasecmp(usmc_opt_table[i].env + 5, key))
			return &usmc_opt_table[i];
	return NULL;
}

const char *usmc_opt_key(const struct usmc_opt_desc *d, char *buf, size_t len)
{
	size_t i;

	for (i = 0; i + 1 < len && d->env[5 + i]; i++)
		buf[i] = (char)tolower((unsigned char)d->env[5 + i]);
	buf[i] = '\0';
	return buf;
}

static bool is_bool(const char *v)
{
	static const char *const ok[] = { "0", "1", "yes", "no", "true", "false", "on", "off" };
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(ok); i++)
		if (!strcasecmp(v, ok[i]))
			return true;
	return false;
}

/* "6379,8000-8100": ports 1..65535, ranges low-high. */
static bool is_port_list(const char *v)
{
	while (*v) {
		char *end;
		long lo = strtol(v, &end, 10);

		if (end == v || !isdigit((unsigned char)*v) || lo < 1 || lo > 65535)
			return false;
		if (*end == '-') {
			long hi;

			v = end + 1;
			hi = strtol(v, &end, 10);
			if (end == v || !isdigit((unsigned char)*v) || hi < lo || hi > 65535)
				return false;
		}
		v = end;
		if (*v == ',' && v[1])
			v++;
		else if (*v)
			return false;
	}
	return true;
}

/* "a,b-c,1234": names of letters, digits and ._- separated by commas. */
static bool is_name_list(const char *v)
{
	bool empty = true;

	for (; *v; v++) {
		if (*v == ',') {
			if (empty)
				return false;
			empty = true;
		} else if (isalnum((unsigned char)*v) || strchr("._-", *v)) {
			empty = false;
		} else {
			return false;
		}
	}
	return !empty;
}

int usmc_opt_check(const struct usmc_opt_desc *d, const char *val, const char **why)
{
	char *end;
	long v = 0;

	*why = "";
	switch (d->type) {
	case OPT_BOOL:
		if (is_bool(val))
			return 0;
		*why = "expected 0 or 1 (also yes/no, true/false, on/off)";
		return -EINVAL;
	case OPT_INT:
		errno = 0;
		v = strtol(val, &end, 10);
		if (errno || end == val || *end) {
			*why = "expected a whole number";
			return -EINVAL;
		}
		break;
	case OPT_SIZE:
		if (usmc_parse_size(val, &v)) {
			*why = "expected a size such as 65536, 64k, 4M";
			return -EINVAL;
		}
		break;
	case OPT_STR:
		if (strlen(val) >= d->size) {
			*why = "too long";
			return -EINVAL;
		}
		if (!*val)
			return 0;
		if ((d->flags & OPTF_PORTS) && !is_port_list(val)) {
			*why = "expected ports and ranges, e.g. 6379,8000-8100";
			return -EINVAL;
		}
		if ((d->flags & OPTF_NAMES) && !is_name_list(val)) {
			*why = "expected names separated by commas (letters, digits, . _ -)";
			return -EINVAL;
		}
		if (d->choices) {
			size_t n = strlen(val);
			const char *c = d->choices;

			while (*c) {
				size_t k = strcspn(c, "|");

				if (k == n && !strncmp(c, val, n))
					return 0;
				c += k + (c[k] == '|');
			}
			*why = "not one of the allowed values";
			return -EINVAL;
		}
		return 0;
	}
	if (v < d->min || v > d->max) {
		*why = "out of range";
		return -ERANGE;
	}
	return 0;
}

const char *usmc_opt_value(const struct usmc_opt_desc *d, char *buf, size_t len)
{
	const char *p = (const char *)&usmc_opt + d->off;
	long v;

	switch (d->type) {
	case OPT_BOOL:
		snprintf(buf, len, "%d", *(const bool *)p ? 1 : 0);
		break;
	case OPT_INT:
		snprintf(buf, len, "%ld", *(const long *)p);
		break;
	case OPT_SIZE:
		v = *(const long *)p;
		if (v && !(v & ((1L << 20) - 1)))
			snprintf(buf, len, "%ldM", v >> 20);
		else if (v && !(v & ((1L << 10) - 1)))
			snprintf(buf, len, "%ldK", v >> 10);
		else
			snprintf(buf, len, "%ld", v);
		break;
	case OPT_STR:
		snprintf(buf, len, "%s", p);
		break;
	}
	return buf;
}
