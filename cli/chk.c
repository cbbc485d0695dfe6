// SPDX-License-Identifier: MIT
/*
 * chk.c - `usmc chk HOST:PORT` (like smc_chk): would a connection from
 * here, with this environment and the runtime directory's controls, be
 * accelerated, and if not, why and what to do.
 *
 * It decides as a client's connect() would, from the runtime directory
 * alone: the policy, the registry's match for the destination, the
 * listener's liveness, version, user and controls.  It never connects, so
 * the listener's traffic and counters are untouched.  Exit status 0: it
 * would be accelerated; 1: it would not; 2: bad arguments.
 */
#include "clc.h"
#include "counters.h"
#include "options.h"
#include "registry.h"
#include "rundir.h"
#include "show.h"
#include "sys.h"
#include "usmc.h"

#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int stat_listener_off(uint64_t id)
{
	/* The header's words up to degraded: read, never mapped. */
	uint8_t h[offsetof(struct usmc_clc_index, epoch)];
	uint64_t magic;
	char name[40];
	uint32_t d;
	int fd;

	snprintf(name, sizeof(name), "ln-%016llx", (unsigned long long)id);
	fd = usmc_rundir_open(name, O_RDONLY, 0);
	if (fd < 0)
		return 0;
	if (pread(fd, h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		usmc_ifd_close(fd);
		return 0;
	}
	usmc_ifd_close(fd);
	memcpy(&magic, h + offsetof(struct usmc_clc_index, magic), sizeof(magic));
	memcpy(&d, h + offsetof(struct usmc_clc_index, degraded), sizeof(d));
	if (magic != USMC_CLC_MAGIC)
		return 0;
	/* A decline made under other controls than ours is stale (clc.h). */
	if ((d & CLC_LN_OFF) && CLC_LN_OFF_GEN(d) != usmc_ctl_gen())
		d &= ~CLC_LN_OFF_BITS;
	if (d & CLC_LN_OFF)
		return CLC_LN_OFF_REASON(d) && CLC_LN_OFF_REASON(d) < USMC_R_MAX ?
		       (int)CLC_LN_OFF_REASON(d) : USMC_R_POLICY;
	if (d & CLC_LN_NOMARK)
		return USMC_R_MEM;
	return d ? USMC_R_LIMIT : 0;
}

/* "host:port", "[v6]:port": split in place. */
static int split(char *arg, char **host, char **port)
{
	char *colon;

	if (arg[0] == '[') {
		colon = strstr(arg, "]:");
		if (!colon)
			return -EINVAL;
		*colon = '\0';
		*host = arg + 1;
		*port = colon + 2;
	} else {
		colon = strrchr(arg, ':');
		if (!colon)
			return -EINVAL;
		*colon = '\0';
		*host = arg;
		*port = colon + 1;
	}
	return **host && **port ? 0 : -EINVAL;
}

struct verdict {
	int reason;			/* 0: accelerated */
	const char *detail;		/* more words on the reason, or "" */
	bool listener;			/* rec is the listener found */
	struct usmc_reg_listener rec;
};

static void decide(const struct usmc_addr *dst, struct verdict *v)
{
	char name[40];

	memset(v, 0, sizeof(*v));
	v->detail = "";
	v->reason = usmc_policy_check(dst->port, NULL);
	if (v->reason) {
		v->detail = "this side's settings (usmc ctl shows them)";
		return;
	}
	if (usmc_registry_attach()) {
		v->reason = USMC_R_RUNDIR;
		v->detail = usmc_rundir_problem();
		return;
	}
	v->reason = usmc_registry_match(dst, &v->rec);
	if (v->reason == USMC_R_PEER_NOT_USMC)
		v->detail = "no usmc listener is registered for this address and port";
	/* match fills rec on version and permission refusals too */
	v->listener = !v->reason || v->reason == USMC_R_VERSION || v->reason == USMC_R_PERMISSION;
	if (v->reason)
		return;
	snprintf(name, sizeof(name), "ln-%016llx", (unsigned long long)v->rec.id);
	switch (usmc_rundir_owner_alive(name)) {
	case USMC_OWNER_ALIVE:
		break;
	case USMC_OWNER_DEAD:
		v->reason = USMC_R_PEER_GONE;
		v->detail = "the listener's process is gone";
		return;
	default:
		v->reason = USMC_R_RUNDIR;
		v->detail = "the listener's index is not an object of ours";
		return;
	}
	/* What a client here would pick (dev.c). */
	if (!usmc_dev_pick(v->rec.devs)) {
		v->reason = USMC_R_NO_DEVICE;
		return;
	}
	v->reason = stat_listener_off(v->rec.id);
	if (v->reason)
		v->detail = "the listener's own settings decline for now";
}

int cmd_chk(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
	char *host, *port, a[64];
	struct usmc_addr dst;
	struct verdict v;
	bool json = false;
	int c, rc;

	while ((c = getopt_long(argc, argv, "jh", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case 'h':
			printf("usage: usmc chk [--json] HOST:PORT\n"
			       "  would a connection from here to HOST:PORT be accelerated?  If not,\n"
			       "  which reason and what to do.  Nothing is sent to the listener.\n"
			       "  Exit status 0: yes, 1: no.\n");
			return 0;
		default:
			return 2;
		}
	}
	if (optind + 1 != argc || split(argv[optind], &host, &port)) {
		fprintf(stderr, "usmc chk: expected one HOST:PORT (e.g. 127.0.0.1:6379, "
			"[::1]:80, localhost:8080)\n");
		return 2;
	}
	rc = getaddrinfo(host, port, &hints, &res);
	if (rc) {
		fprintf(stderr, "usmc chk: %s:%s: %s; give an address or a name this host "
			"resolves\n", host, port, gai_strerror(rc));
		return 2;
	}
	rc = usmc_addr_from_sa(&dst, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	if (rc) {
		fprintf(stderr, "usmc chk: %s: not an IPv4 or IPv6 address\n", host);
		return 2;
	}
	decide(&dst, &v);
	usmc_addr_str(&dst, a, sizeof(a));
	if (json) {
		char l[64];

		printf("{\"destination\": \"%s\", \"accelerated\": %s, \"reason\": ", a,
		       v.reason ? "false" : "true");
		if (v.reason)
			json_str(usmc_reason_name(v.reason));
		else
			printf("null");
		printf(", \"reason_text\": ");
		json_str(v.reason ? usmc_reason_desc(v.reason) : "");
		printf(", \"detail\": ");
		json_str(v.detail);
		printf(", \"what_to_do\": ");
		json_str(v.reason ? usmc_reason_hint(v.reason) : "");
		printf(", \"listener\": ");
		if (v.listener) {
			printf("{\"pid\": %u, \"uid\": %u, \"local\": \"%s\", \"index\": \"%016llx\", "
			       "\"same_netns\": %s}", v.rec.pid, v.rec.uid,
			       usmc_addr_str(&v.rec.addr, l, sizeof(l)),
			       (unsigned long long)v.rec.id,
			       v.rec.netns == usmc_netns_self() ? "true" : "false");
		} else {
			printf("null");
		}
		printf(", \"rundir\": ");
		json_str(usmc_rundir_path());
		printf("}\n");
		return v.reason ? 1 : 0;
	}
	printf("destination  %s\n", a);
	if (v.listener) {
		char l[64];

		printf("listener     pid %u, uid %u, bound to %s, %s\n", v.rec.pid, v.rec.uid,
		       usmc_addr_str(&v.rec.addr, l, sizeof(l)),
		       v.rec.netns == usmc_netns_self() ? "this network namespace" :
		       "another network namespace (reached by route)");
	}
	if (!v.reason) {
		printf("result       %saccelerated%s: SMC-D loopback through %s\n", col_green(),
		       col_off(), usmc_rundir_path());
		return 0;
	}
	printf("result       %sTCP%s: %s: %s%s%s\n", col_yellow(), col_off(),
	       usmc_reason_name(v.reason), usmc_reason_desc(v.reason), v.detail[0] ? "; " : "",
	       v.detail);
	printf("what to do   %s\n", usmc_reason_hint(v.reason));
	return 1;
}
