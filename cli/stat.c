// SPDX-License-Identifier: MIT
/*
 * stat.c - `usmc stat`: live connections (like smcss) and the cumulative
 * counters of every process that used this runtime directory (like
 * `smcd stats`).  --json prints one object; tests rely on its fields:
 * smc_conns, handshake_errors, tx_bytes, rx_bytes, tcp_fallback{reason:n},
 * connections[].
 */
#include "registry.h"
#include "guard.h"
#include "rundir.h"
#include "stats.h"
#include "usmc.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* The scalar counters by field name, in struct usmc_counters order. */
#define CTR(field)	{ #field, offsetof(struct usmc_counters, field) / 8 }
static const struct {
	const char *name;
	unsigned int idx;	/* index into usmc_counters_snapshot.v */
} ctrs[] = {
	CTR(smc_conns), CTR(smc_client), CTR(smc_server), CTR(tcp_conns), CTR(handshake_errors),
	CTR(tx_bytes), CTR(rx_bytes), CTR(tcp_tx_bytes), CTR(tcp_rx_bytes), CTR(tx_calls),
	CTR(rx_calls), CTR(tx_fast), CTR(rx_fast), CTR(doorbells), CTR(sleeps), CTR(spin_hits),
	CTR(lgr_created), CTR(lgr_attached), CTR(dmbs_registered), CTR(dmbs_reused),
	CTR(late_declines), CTR(wake_bytes),
};
#undef CTR
#define NSCALAR ARRAY_SIZE(ctrs)
BUILD_BUG_ON(NSCALAR * 8 != offsetof(struct usmc_counters, aborts));
/* The value of one counter of a snapshot, named by its field. */
#define V(s, field)	((unsigned long long)(s).v[offsetof(struct usmc_counters, field) / 8])
#define ABORT_BASE (offsetof(struct usmc_counters, aborts) / 8)
#define FALLBACK_BASE (offsetof(struct usmc_counters, fallback) / 8)

static const char *mode_name(int m)
{
	static const char *const n[] = { "-", "SMCD", "TCP", "PROPOSED", "MIGRATING", "UNDECIDED" };

	return m >= 0 && m < (int)ARRAY_SIZE(n) ? n[m] : "?";
}

static void conn_json(const struct usmc_stats_conn *c, bool first)
{
	char a[64], b[64];
	int mode = LOAD_RELAXED(&c->mode), reason = LOAD_RELAXED(&c->reason);
	int ab = LOAD_RELAXED(&c->abort);

	printf("%s\n    {\"pid\": %u, \"fd\": %d, \"role\": \"%s\", \"local\": ", first ? "" : ",",
	       c->pid, c->fd, c->role == 'C' ? "client" : "server");
	json_str(usmc_addr_str(&c->local, a, sizeof(a)));
	printf(", \"peer\": ");
	json_str(usmc_addr_str(&c->peer, b, sizeof(b)));
	printf(", \"mode\": \"%s\", \"reason\": ", mode_name(mode));
	if (mode == USMC_MODE_TCP)
		json_str(usmc_reason_name(reason));
	else
		printf("null");
	printf(", \"abort\": ");
	if (ab)
		json_str(usmc_abort_name(ab));
	else
		printf("null");
	printf(", \"lgr\": \"%016llx\", \"slot\": %u, \"dmb_size\": %u, \"tx_bytes\": %llu, \"rx_bytes\": %llu}",
	       (unsigned long long)c->lgr_id, c->slot, c->ring_size,
	       (unsigned long long)LOAD_RELAXED(&c->tx_bytes),
	       (unsigned long long)LOAD_RELAXED(&c->rx_bytes));
}

static void conn_text(const struct usmc_stats_conn *c)
{
	char a[64], b[64];
	int mode = LOAD_RELAXED(&c->mode), reason = LOAD_RELAXED(&c->reason);
	int ab = LOAD_RELAXED(&c->abort);

	printf("%-7u %-4d %-4s %-24s %-24s %-9s %-22s %12llu %12llu\n", c->pid, c->fd,
	       c->role == 'C' ? "C" : "S", usmc_addr_str(&c->local, a, sizeof(a)),
	       usmc_addr_str(&c->peer, b, sizeof(b)), mode_name(mode),
	       ab ? usmc_abort_name(ab) : mode == USMC_MODE_TCP ? usmc_reason_name(reason) : "-",
	       (unsigned long long)LOAD_RELAXED(&c->tx_bytes),
	       (unsigned long long)LOAD_RELAXED(&c->rx_bytes));
}

static bool conn_live(const struct usmc_stats_file *f, const struct usmc_stats_conn *c)
{
	return LOAD_ACQUIRE(&c->state) == 1 && c->proc < USMC_STATS_PROCS &&
	       LOAD_ACQUIRE(&f->procs[c->proc].state) == 1;
}

int cmd_stat(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "reset", no_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct usmc_counters_snapshot s;
	struct usmc_stats_file *f;
	bool json = false, reset = false, first = true;
	unsigned int i;
	int c;

	while ((c = getopt_long(argc, argv, "jrh", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case 'r':
			reset = true;
			break;
		case 'h':
			printf("usage: usmc stat [--json] [--reset]\n");
			return 0;
		default:
			return 2;
		}
	}
	/* The files we map may be truncated under us: guard.c's handler. */
	usmc_real_sigaction = sigaction;
	f = usmc_stats_map();
	if (!f && usmc_rundir_problem()[0]) {
		/* Every connection of this user falls back (rundir_unusable)
		 * and no counter can be kept: say why and what to do. */
		fprintf(stderr, "usmc stat: runtime directory %s %s\n"
			"usmc stat: acceleration is off (rundir_unusable); remove it, or use a "
			"directory of your own: usmc run -R DIR, or USMC_RUNDIR=DIR\n",
			usmc_rundir_path(), usmc_rundir_problem());
		return 1;
	}
	if (!f) {
		fprintf(stderr, "usmc stat: %s: %s\n",
			usmc_rundir_path()[0] ? usmc_rundir_path() : "runtime directory",
			strerror(errno));
		return 1;
	}
	/* Fold processes that died, drop their link groups and listeners. */
	usmc_stats_gc(f, usmc_stats_fd());
	usmc_registry_repair();
	usmc_registry_gc();
	usmc_rundir_gc();
	if (reset) {
		usmc_stats_reset(f);
		if (!json) {
			printf("counters reset\n");
			return 0;
		}
	}
	usmc_stats_sum(f, &s);

	if (json) {
		printf("{\n  \"rundir\": ");
		json_str(usmc_rundir_path());
		for (i = 0; i < NSCALAR; i++)
			printf(",\n  \"%s\": %llu", ctrs[i].name,
			       (unsigned long long)s.v[ctrs[i].idx]);
		printf(",\n  \"tcp_fallback\": {");
		for (i = 1, first = true; i < USMC_R_MAX; i++) {
			if (!s.v[FALLBACK_BASE + i])
				continue;
			printf("%s\"%s\": %llu", first ? "" : ", ", usmc_reason_name((int)i),
			       (unsigned long long)s.v[FALLBACK_BASE + i]);
			first = false;
		}
		printf("},\n  \"aborts\": {");
		for (i = 1, first = true; i < USMC_A_MAX; i++) {
			if (!s.v[ABORT_BASE + i])
				continue;
			printf("%s\"%s\": %llu", first ? "" : ", ", usmc_abort_name((int)i),
			       (unsigned long long)s.v[ABORT_BASE + i]);
			first = false;
		}
		printf("},\n  \"connections\": [");
		for (i = 0, first = true; i < USMC_STATS_CONNS; i++) {
			if (!conn_live(f, &f->conns[i]))
				continue;
			conn_json(&f->conns[i], first);
			first = false;
		}
		printf("%s]\n}\n", first ? "" : "\n  ");
		return 0;
	}

	printf("%-7s %-4s %-4s %-24s %-24s %-9s %-22s %12s %12s\n", "PID", "FD", "ROLE",
	       "LOCAL", "PEER", "MODE", "REASON", "TX_BYTES", "RX_BYTES");
	for (i = 0; i < USMC_STATS_CONNS; i++)
		if (conn_live(f, &f->conns[i]))
			conn_text(&f->conns[i]);
	printf("\nrundir %s\n", usmc_rundir_path());
	printf("connections: %llu on shared memory (%llu client, %llu server), %llu on TCP, "
	       "%llu handshake errors\n",
	       V(s, smc_conns), V(s, smc_client), V(s, smc_server), V(s, tcp_conns),
	       V(s, handshake_errors));
	printf("shared memory: %llu bytes sent, %llu received, %llu doorbells, %llu sleeps, "
	       "%llu spin hits\n",
	       V(s, tx_bytes), V(s, rx_bytes), V(s, doorbells), V(s, sleeps), V(s, spin_hits));
	printf("calls: %llu send, %llu receive (%llu send, %llu receive on the fast path)\n",
	       V(s, tx_calls), V(s, rx_calls), V(s, tx_fast), V(s, rx_fast));
	printf("tcp mode: %llu bytes sent, %llu received\n", V(s, tcp_tx_bytes),
	       V(s, tcp_rx_bytes));
	printf("link groups: %llu created, %llu attached; dmbs: %llu registered, %llu reused\n",
	       V(s, lgr_created), V(s, lgr_attached), V(s, dmbs_registered), V(s, dmbs_reused));
	printf("handshake: %llu late declines, %llu wake bytes\n", V(s, late_declines),
	       V(s, wake_bytes));
	printf("tcp fallback:");
	for (i = 1, first = true; i < USMC_R_MAX; i++)
		if (s.v[FALLBACK_BASE + i]) {
			printf(" %s=%llu", usmc_reason_name((int)i),
			       (unsigned long long)s.v[FALLBACK_BASE + i]);
			first = false;
		}
	printf("%s\n", first ? " none" : "");
	printf("resets:");
	for (i = 1, first = true; i < USMC_A_MAX; i++)
		if (s.v[ABORT_BASE + i]) {
			printf(" %s=%llu", usmc_abort_name((int)i),
			       (unsigned long long)s.v[ABORT_BASE + i]);
			first = false;
		}
	printf("%s\n", first ? " none" : "");
	return 0;
}
