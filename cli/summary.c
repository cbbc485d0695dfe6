// SPDX-License-Identifier: MIT
/*
 * summary.c - `usmc stat summary` (like `smcd stats`): totals, the top
 * fallback reasons split into client and server side with what to do,
 * buffer usage (link groups, committed memory, "buffer full" counts, a
 * histogram of ring sizes) and handshake errors.  --reset shows the
 * counters, then zeroes them (smcd stats reset).
 */
#include "counters.h"
#include "rundir.h"
#include "show.h"
#include "usmc.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct top {
	int reason;
	uint64_t client, server;
};

static int top_cmp(const void *a, const void *b)
{
	const struct top *x = a, *y = b;
	uint64_t tx = x->client + x->server, ty = y->client + y->server;

	return tx != ty ? (tx < ty ? 1 : -1) : x->reason - y->reason;
}

/* The fallback reasons counted, most frequent first; returns how many. */
static unsigned int top_reasons(const struct usmc_counters_snapshot *s, struct top *t)
{
	unsigned int n = 0;
	int i;

	for (i = 1; i < USMC_R_MAX; i++) {
		uint64_t all = s->v[STAT_FALLBACK + i], srv = s->v[STAT_FALLBACK_SERVER + i];

		if (!all)
			continue;
		t[n].reason = i;
		t[n].server = MIN(srv, all);
		t[n].client = all - t[n].server;
		n++;
	}
	qsort(t, n, sizeof(*t), top_cmp);
	return n;
}

static uint64_t tcp_server(const struct usmc_counters_snapshot *s)
{
	uint64_t n = 0;
	int i;

	for (i = 1; i < USMC_R_MAX; i++)
		n += s->v[STAT_FALLBACK_SERVER + i];
	return n;
}

static uint64_t aborts(const struct usmc_counters_snapshot *s)
{
	uint64_t n = 0;
	int i;

	for (i = 1; i < USMC_A_MAX; i++)
		n += s->v[STAT_ABORT + i];
	return n;
}

#define V(field)	((unsigned long long)s->v[STAT_IDX(field)])

/* Bucket i of the call size histogram as its upper bound ("<=64", ... ">256K"). */
static const char *size_label(unsigned int i, char *buf, size_t len)
{
	static const char *const unit[] = { "", "K" };
	uint64_t top = 64ull << (2 * (i < USMC_SIZE_HIST - 1 ? i : i - 1));
	unsigned int u = top >= 1024;

	snprintf(buf, len, "%s%llu%s", i < USMC_SIZE_HIST - 1 ? "<=" : ">",
		 (unsigned long long)(u ? top / 1024 : top), unit[u]);
	return buf;
}

/* A bar of k against hmax, width wide at most (buf holds width + 1). */
static const char *bar(uint64_t k, uint64_t hmax, unsigned int width, char *buf)
{
	unsigned int n = hmax ? (unsigned int)((k * width + hmax - 1) / hmax) : 0;

	memset(buf, '#', n);
	buf[n] = '\0';
	return buf;
}

/* Sends and receives by size, side by side, with bars on one scale. */
static void call_sizes_text(const struct usmc_counters_snapshot *s)
{
	char lb[16], b1[24], b2[24];
	uint64_t hmax = 0;
	unsigned int i;

	printf("  call sizes (sends, receives on shared memory):\n");
	for (i = 0; i < USMC_SIZE_HIST; i++)
		hmax = MAX(hmax, MAX(s->v[STAT_TX_SIZE_HIST + i], s->v[STAT_RX_SIZE_HIST + i]));
	if (!hmax) {
		printf("  %10s\n", "none");
		return;
	}
	for (i = 0; i < USMC_SIZE_HIST; i++) {
		uint64_t tx = s->v[STAT_TX_SIZE_HIST + i], rx = s->v[STAT_RX_SIZE_HIST + i];

		if (tx || rx)
			printf("  %10s %10llu %-20s %10llu%s%s\n", size_label(i, lb, sizeof(lb)),
			       (unsigned long long)tx, bar(tx, hmax, 20, b1), (unsigned long long)rx,
			       rx ? " " : "", bar(rx, hmax, 20, b2));
	}
}

static void summary_json(const struct usmc_stats_file *f, const struct usmc_counters_snapshot *s,
			 unsigned int lgrs, uint64_t committed)
{
	struct top t[USMC_R_MAX];
	unsigned int n = top_reasons(s, t), i, d;
	char lb[16];
	uint64_t srv = tcp_server(s);

	printf("{\n  \"rundir\": ");
	json_str(usmc_rundir_path());
	printf(",\n  \"created_ns\": %llu, \"resets\": %llu,\n",
	       (unsigned long long)f->created_ns, (unsigned long long)LOAD_RELAXED(&f->resets));
	printf("  \"connections\": {\"smc\": %llu, \"smc_client\": %llu, \"smc_server\": %llu, "
	       "\"tcp\": %llu, \"tcp_client\": %llu, \"tcp_server\": %llu, "
	       "\"handshake_errors\": %llu, \"late_declines\": %llu, \"resets\": %llu},\n",
	       V(smc_conns), V(smc_client), V(smc_server), V(tcp_conns),
	       V(tcp_conns) >= srv ? V(tcp_conns) - (unsigned long long)srv : 0,
	       (unsigned long long)srv, V(handshake_errors), V(late_declines),
	       (unsigned long long)aborts(s));
	printf("  \"smc_data\": {\"tx_bytes\": %llu, \"rx_bytes\": %llu, \"tx_calls\": %llu, "
	       "\"rx_calls\": %llu, \"tx_fast\": %llu, \"rx_fast\": %llu, \"doorbells\": %llu, "
	       "\"sleeps\": %llu, \"spin_hits\": %llu},\n",
	       V(tx_bytes), V(rx_bytes), V(tx_calls), V(rx_calls), V(tx_fast), V(rx_fast),
	       V(doorbells), V(sleeps), V(spin_hits));
	printf("  \"tcp_data\": {\"tx_bytes\": %llu, \"rx_bytes\": %llu},\n", V(tcp_tx_bytes),
	       V(tcp_rx_bytes));
	printf("  \"buffers\": {\"link_groups\": %u, \"lgr_created\": %llu, \"lgr_attached\": %llu, "
	       "\"committed_bytes\": %llu, \"dmbs_registered\": %llu, \"dmbs_reused\": %llu, "
	       "\"tx_full\": %llu, \"ring_sizes\": {", lgrs, V(lgr_created), V(lgr_attached),
	       (unsigned long long)committed, V(dmbs_registered), V(dmbs_reused), V(tx_full));
	for (i = 0; i < USMC_RING_HIST; i++)
		printf("%s\"%u\": %llu", i ? ", " : "", USMC_RING_HIST_MIN << i,
		       (unsigned long long)s->v[STAT_RING_HIST + i]);
	printf("}},\n  \"call_sizes\": {");
	for (d = 0; d < 2; d++) {
		printf("%s\"%s\": {", d ? ", " : "", d ? "rx" : "tx");
		for (i = 0; i < USMC_SIZE_HIST; i++)
			printf("%s\"%s\": %llu", i ? ", " : "", size_label(i, lb, sizeof(lb)),
			       (unsigned long long)s->v[(d ? STAT_RX_SIZE_HIST : STAT_TX_SIZE_HIST) + i]);
		printf("}");
	}
	printf("},\n  \"fallback\": [");
	for (i = 0; i < n; i++) {
		uint64_t tot = t[i].client + t[i].server;

		printf("%s\n    {\"reason\": \"%s\", \"total\": %llu, \"client\": %llu, \"server\": %llu, "
		       "\"text\": ", i ? "," : "", usmc_reason_name(t[i].reason), (unsigned long long)tot,
		       (unsigned long long)t[i].client, (unsigned long long)t[i].server);
		json_str(usmc_reason_desc(t[i].reason));
		printf(", \"what_to_do\": ");
		json_str(usmc_reason_hint(t[i].reason));
		printf("}");
	}
	printf("%s]\n}\n", n ? "\n  " : "");
}

static void line(const char *label, const char *value, const char *note)
{
	printf("  %-22s %12s%s%s\n", label, value, note[0] ? "  " : "", note);
}

static void summary_text(const struct usmc_stats_file *f, const struct usmc_counters_snapshot *s,
			 unsigned int lgrs, uint64_t committed)
{
	static const char *const hdr[] = { "REASON", ">TOTAL", ">CLIENT", ">SERVER", "MEANING" };
	struct top t[USMC_R_MAX];
	unsigned int n = top_reasons(s, t), i;
	uint64_t srv = tcp_server(s), hmax = 0;
	char b1[32], b2[32], b3[32], note[160], bars[48];
	time_t since = (time_t)(f->created_ns / 1000000000ull);
	struct tm tm;
	struct tbl tb;

	localtime_r(&since, &tm);
	strftime(b1, sizeof(b1), "%Y-%m-%d %H:%M:%S", &tm);
	printf("%sSummary%s of %s (counting since %s, %llu reset(s))\n\n", col_bold(), col_off(),
	       usmc_rundir_path(), b1, (unsigned long long)LOAD_RELAXED(&f->resets));

	printf("%sConnections%s\n", col_bold(), col_off());
	snprintf(note, sizeof(note), "client %llu, server %llu", V(smc_client), V(smc_server));
	line("on shared memory", fmt_count(V(smc_conns), b1, sizeof(b1)), note);
	snprintf(note, sizeof(note), "client %llu, server %llu",
		 V(tcp_conns) >= srv ? V(tcp_conns) - (unsigned long long)srv : 0,
		 (unsigned long long)srv);
	line("on TCP (fallback)", fmt_count(V(tcp_conns), b1, sizeof(b1)), note);
	line("handshake errors", fmt_count(V(handshake_errors), b1, sizeof(b1)),
	     V(handshake_errors) ? "CLC steps that failed unexpectedly: USMC_DEBUG=2 shows them" : "");
	line("late declines", fmt_count(V(late_declines), b1, sizeof(b1)),
	     "declined after data was queued (moved to TCP)");
	line("resets", fmt_count(aborts(s), b1, sizeof(b1)), "usmc stat names them");

	printf("\n%sData%s\n", col_bold(), col_off());
	snprintf(note, sizeof(note), "in %s send calls (%s on the fast path)",
		 fmt_count(V(tx_calls), b2, sizeof(b2)),
		 fmt_count(V(tx_fast), b3, sizeof(b3)));
	line("sent, shared memory", fmt_bytes(V(tx_bytes), b1, sizeof(b1)), note);
	snprintf(note, sizeof(note), "in %s receive calls", fmt_count(V(rx_calls), b2, sizeof(b2)));
	line("received, shared mem.", fmt_bytes(V(rx_bytes), b1, sizeof(b1)), note);
	line("sent, TCP mode", fmt_bytes(V(tcp_tx_bytes), b1, sizeof(b1)), "");
	line("received, TCP mode", fmt_bytes(V(tcp_rx_bytes), b1, sizeof(b1)), "");
	snprintf(note, sizeof(note), "%llu sleeps, %llu waits ended spinning", V(sleeps),
		 V(spin_hits));
	line("doorbells", fmt_count(V(doorbells), b1, sizeof(b1)), note);

	printf("\n%sBuffers%s\n", col_bold(), col_off());
	snprintf(note, sizeof(note), "%llu created, %llu attached", V(lgr_created), V(lgr_attached));
	snprintf(b2, sizeof(b2), "%u", lgrs);
	line("link groups live", b2, note);
	line("memory committed", fmt_bytes(committed, b1, sizeof(b1)), "behind the live link groups");
	snprintf(note, sizeof(note), "%llu reused", V(dmbs_reused));
	line("DMBs registered", fmt_count(V(dmbs_registered), b1, sizeof(b1)), note);
	line("buffer full", fmt_count(V(tx_full), b1, sizeof(b1)),
	     "sends that found the peer's ring full (a bigger ring: usmc ctl ring_size=)");
	printf("  ring sizes (endpoints):\n");
	for (i = 0; i < USMC_RING_HIST; i++)
		hmax = MAX(hmax, s->v[STAT_RING_HIST + i]);
	for (i = 0; i < USMC_RING_HIST; i++) {
		uint64_t k = s->v[STAT_RING_HIST + i];

		if (k)
			printf("  %10s %10llu  %s\n",
			       fmt_bytes((uint64_t)USMC_RING_HIST_MIN << i, b1, sizeof(b1)),
			       (unsigned long long)k, bar(k, hmax, 40, bars));
	}
	if (!hmax)
		printf("  %10s\n", "none");
	call_sizes_text(s);

	printf("\n%sTop fallback reasons%s\n", col_bold(), col_off());
	if (!n) {
		printf("  none\n");
		return;
	}
	tbl_init(&tb, ARRAY_SIZE(hdr), hdr);
	for (i = 0; i < n; i++) {
		char tot[24], cl[24], sv[24];

		fmt_count(t[i].client + t[i].server, tot, sizeof(tot));
		fmt_count(t[i].client, cl, sizeof(cl));
		fmt_count(t[i].server, sv, sizeof(sv));
		tbl_row(&tb, usmc_reason_name(t[i].reason), tot, cl, sv,
			usmc_reason_desc(t[i].reason));
	}
	tbl_print(&tb);
	tbl_free(&tb);
	printf("\n%sWhat to do%s\n", col_bold(), col_off());
	for (i = 0; i < n; i++)
		printf("  %-22s %s\n", usmc_reason_name(t[i].reason), usmc_reason_hint(t[i].reason));
}
#undef V

int cmd_summary(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "reset", no_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct usmc_counters_snapshot s;
	struct usmc_stats_file *f;
	bool json = false, reset = false;
	unsigned int lgrs, refused;
	uint64_t committed;
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
			printf("usage: usmc stat summary [--json] [--reset]\n"
			       "  totals, top fallback reasons (client and server side), buffers;\n"
			       "  --reset: show them, then zero the counters\n");
			return 0;
		default:
			return 2;
		}
	}
	f = cli_stats_open("stat summary");
	if (!f)
		return 1;
	usmc_stats_sum(f, &s);
	lgrs = cli_lg_count(&refused, &committed);
	if (json)
		summary_json(f, &s, lgrs, committed);
	else
		summary_text(f, &s, lgrs, committed);
	if (reset) {
		usmc_stats_reset(f);
		if (!json)
			printf("\ncounters reset\n");
	}
	return 0;
}
