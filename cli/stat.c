// SPDX-License-Identifier: MIT
/*
 * stat.c - `usmc stat`: live connections (like smcss: -a all, -d details,
 * -l listeners) and the cumulative counters of every process that used
 * this runtime directory, each fallback reason explained with what to do.
 * `usmc stat summary` (summary.c) is the smcd-stats view.
 *
 * --json prints one object; tests rely on its fields: smc_conns,
 * handshake_errors, tx_bytes, rx_bytes, tcp_fallback{reason:n}, aborts{},
 * connections[] (with -d: cursors), listeners[] (with -l or -a).
 */
#include "cdc.h"
#include "lgr.h"
#include "options.h"
#include "registry.h"
#include "rundir.h"
#include "show.h"
#include "counters.h"
#include "usmc.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CTR(field)	{ #field, offsetof(struct usmc_counters, field) / 8 }
const struct stat_ctr stat_ctrs[] = {
	CTR(smc_conns), CTR(smc_client), CTR(smc_server), CTR(tcp_conns), CTR(handshake_errors),
	CTR(tx_bytes), CTR(rx_bytes), CTR(tcp_tx_bytes), CTR(tcp_rx_bytes), CTR(tx_calls),
	CTR(rx_calls), CTR(tx_fast), CTR(rx_fast), CTR(doorbells), CTR(sleeps), CTR(spin_hits),
	CTR(lgr_created), CTR(lgr_attached), CTR(dmbs_registered), CTR(dmbs_reused),
	CTR(late_declines), CTR(wake_bytes),
};
#undef CTR
const unsigned int stat_nctrs = ARRAY_SIZE(stat_ctrs);
BUILD_BUG_ON(ARRAY_SIZE(stat_ctrs) * 8 != offsetof(struct usmc_counters, aborts));

static const char *mode_name(int m)
{
	static const char *const n[] = { "-", "SMCD", "TCP", "PROPOSED", "MIGRATING", "UNDECIDED" };

	return m >= 0 && m < (int)ARRAY_SIZE(n) ? n[m] : "?";
}

bool stat_conn_live(const struct usmc_stats_file *f, const struct usmc_stats_conn *c)
{
	uint16_t proc = LOAD_RELAXED(&c->proc);

	return LOAD_ACQUIRE(&c->state) == 1 && proc < USMC_STATS_PROCS &&
	       LOAD_ACQUIRE(&f->procs[proc].state) == 1;
}

/* One direction of a connection's ring as this end sees it. */
struct ring_view {
	uint64_t prod, cons;
	uint32_t pflags, cflags;
};

struct conn_view {
	const struct usmc_stats_conn *e;
	int mode, reason, abort;
	bool details;			/* cursors read from the link group */
	struct ring_view tx, rx;
};

static void conn_view(const struct usmc_stats_conn *e, bool details, struct conn_view *v)
{
	struct usmc_cdc_ctrl c;
	struct usmc_lgr_hdr h;

	memset(v, 0, sizeof(*v));
	v->e = e;
	v->mode = LOAD_RELAXED(&e->mode);
	v->reason = LOAD_RELAXED(&e->reason);
	v->abort = LOAD_RELAXED(&e->abort);
	if (!details || (v->mode != USMC_MODE_SMCD && v->mode != USMC_MODE_PROPOSED) || !e->lgr_id ||
	    cli_lg_ctrl(e->lgr_id, e->slot, &h, &c))
		return;
	v->details = true;
	/* Client: tx is the client->server ring; server: the other one. */
	v->tx.prod = LOAD_RELAXED(e->role == 'C' ? &c.c2s_p.prod : &c.s2c_p.prod);
	v->tx.cons = LOAD_RELAXED(e->role == 'C' ? &c.c2s_c.cons : &c.s2c_c.cons);
	v->tx.pflags = LOAD_RELAXED(e->role == 'C' ? &c.c2s_p.flags : &c.s2c_p.flags);
	v->tx.cflags = LOAD_RELAXED(e->role == 'C' ? &c.c2s_c.flags : &c.s2c_c.flags);
	v->rx.prod = LOAD_RELAXED(e->role == 'C' ? &c.s2c_p.prod : &c.c2s_p.prod);
	v->rx.cons = LOAD_RELAXED(e->role == 'C' ? &c.s2c_c.cons : &c.c2s_c.cons);
	v->rx.pflags = LOAD_RELAXED(e->role == 'C' ? &c.s2c_p.flags : &c.c2s_p.flags);
	v->rx.cflags = LOAD_RELAXED(e->role == 'C' ? &c.s2c_c.flags : &c.c2s_c.flags);
}

/* "done,abort" from CDC_F_* bits. */
static const char *flag_names(uint32_t f, char *buf, size_t len)
{
	static const struct { uint32_t bit; const char *name; } n[] = {
		{ CDC_F_DONE, "fin" }, { CDC_F_ABORT, "reset" }, { CDC_F_CLOSED, "closed" },
		{ CDC_F_MIGRATE, "to_tcp" }, { CDC_F_RCVLIM, "rcvbuf" }, { CDC_F_MIGFROM, "cut" },
	};
	size_t o = 0, i;

	buf[0] = '\0';
	for (i = 0; i < ARRAY_SIZE(n) && o < len; i++)
		if (f & n[i].bit)
			o += (size_t)snprintf(buf + o, len - o, "%s%s", o ? "," : "", n[i].name);
	if (!o)
		snprintf(buf, len, "-");
	return buf;
}

/* Bytes in a ring not yet read (0 when the cursors make no sense). */
static uint64_t ring_queued(const struct ring_view *r)
{
	return r->prod >= r->cons ? r->prod - r->cons : 0;
}

static void ring_json(const char *name, const struct ring_view *r, bool comma)
{
	char pf[64], cf[64];

	printf("\"%s\": {\"prod\": %llu, \"cons\": %llu, \"queued\": %llu, \"prod_flags\": \"%s\", "
	       "\"cons_flags\": \"%s\"}%s", name, (unsigned long long)r->prod,
	       (unsigned long long)r->cons, (unsigned long long)ring_queued(r),
	       flag_names(r->pflags, pf, sizeof(pf)), flag_names(r->cflags, cf, sizeof(cf)),
	       comma ? ", " : "");
}

static void conn_json(const struct conn_view *v, bool first)
{
	const struct usmc_stats_conn *c = v->e;
	char a[64], b[64];

	printf("%s\n    {\"pid\": %u, \"fd\": %d, \"role\": \"%s\", \"local\": ", first ? "" : ",",
	       c->pid, c->fd, c->role == 'C' ? "client" : "server");
	json_str(usmc_addr_str(&c->local, a, sizeof(a)));
	printf(", \"peer\": ");
	json_str(usmc_addr_str(&c->peer, b, sizeof(b)));
	printf(", \"mode\": \"%s\", \"reason\": ", mode_name(v->mode));
	if (v->mode == USMC_MODE_TCP) {
		json_str(usmc_reason_name(v->reason));
		printf(", \"reason_text\": ");
		json_str(usmc_reason_desc(v->reason));
		printf(", \"what_to_do\": ");
		json_str(usmc_reason_hint(v->reason));
	} else {
		printf("null");
	}
	printf(", \"abort\": ");
	if (v->abort)
		json_str(usmc_abort_name(v->abort));
	else
		printf("null");
	printf(", \"closing\": %s, \"lgr\": \"%016llx\", \"slot\": %u, \"dmb_size\": %u, "
	       "\"tx_bytes\": %llu, \"rx_bytes\": %llu",
	       LOAD_RELAXED(&c->closing) ? "true" : "false", (unsigned long long)c->lgr_id,
	       c->slot, c->ring_size, (unsigned long long)LOAD_RELAXED(&c->tx_bytes),
	       (unsigned long long)LOAD_RELAXED(&c->rx_bytes));
	if (v->details) {
		printf(", \"cursors\": {");
		ring_json("tx", &v->tx, true);
		ring_json("rx", &v->rx, false);
		printf("}");
	}
	printf("}");
}

static const char *conn_reason(const struct conn_view *v)
{
	return v->abort ? usmc_abort_name(v->abort) :
	       v->mode == USMC_MODE_TCP ? usmc_reason_name(v->reason) : "-";
}

static void conn_row(struct tbl *t, const struct conn_view *v, bool details)
{
	const struct usmc_stats_conn *c = v->e;
	char pid[12], fd[12], a[64], b[64], tx[16], rx[16], ring[16] = "-", lg[20] = "-",
	     slot[12] = "-", txq[16] = "-", rxq[16] = "-", fl[48] = "-";

	snprintf(pid, sizeof(pid), "%u", c->pid);
	snprintf(fd, sizeof(fd), "%d", c->fd);
	fmt_bytes(LOAD_RELAXED(&c->tx_bytes), tx, sizeof(tx));
	fmt_bytes(LOAD_RELAXED(&c->rx_bytes), rx, sizeof(rx));
	usmc_addr_str(&c->local, a, sizeof(a));
	usmc_addr_str(&c->peer, b, sizeof(b));
	if (!details) {
		tbl_row(t, pid, fd, c->role == 'C' ? "C" : "S", a, b, mode_name(v->mode),
			conn_reason(v), tx, rx);
		return;
	}
	if (c->lgr_id) {
		snprintf(lg, sizeof(lg), "%016llx", (unsigned long long)c->lgr_id);
		snprintf(slot, sizeof(slot), "%u", c->slot);
		fmt_bytes(c->ring_size, ring, sizeof(ring));
	}
	if (v->details) {
		char f1[24], f2[24];

		fmt_bytes(ring_queued(&v->tx), txq, sizeof(txq));
		fmt_bytes(ring_queued(&v->rx), rxq, sizeof(rxq));
		snprintf(fl, sizeof(fl), "%s/%s", flag_names(v->tx.pflags | v->tx.cflags, f1, sizeof(f1)),
			 flag_names(v->rx.pflags | v->rx.cflags, f2, sizeof(f2)));
	}
	tbl_row(t, pid, fd, c->role == 'C' ? "C" : "S", a, b, mode_name(v->mode), conn_reason(v),
		tx, rx, lg, slot, ring, txq, rxq, fl);
}

/* -d: for every connection not on shared memory, why and what to do. */
static void explain_conns(const struct conn_view *v, unsigned int n)
{
	unsigned int i;
	bool any = false;

	for (i = 0; i < n; i++) {
		char a[64], b[64];

		if (v[i].mode != USMC_MODE_TCP && !v[i].abort)
			continue;
		if (!any)
			printf("\n%sWhy not on shared memory%s\n", col_bold(), col_off());
		any = true;
		printf("  pid %u fd %d %s %s %s: ", v[i].e->pid, v[i].e->fd,
		       usmc_addr_str(&v[i].e->local, a, sizeof(a)), v[i].e->role == 'C' ? "->" : "<-",
		       usmc_addr_str(&v[i].e->peer, b, sizeof(b)));
		if (v[i].abort) {
			printf("%sreset (%s)%s\n", col_red(), usmc_abort_name(v[i].abort), col_off());
			continue;
		}
		printf("%s%s%s: %s.\n      what to do: %s\n", col_yellow(),
		       usmc_reason_name(v[i].reason), col_off(), usmc_reason_desc(v[i].reason),
		       usmc_reason_hint(v[i].reason));
	}
}

struct lst_view {
	struct usmc_reg_listener r;
	enum usmc_owner owner;
	int off;			/* the listener's controls decline: reason */
};

/* Live listeners of the registry (of every namespace). */
static unsigned int listeners(struct lst_view **out)
{
	struct usmc_registry *r;
	struct lst_view *v;
	unsigned int n = 0, i;

	*out = NULL;
	usmc_options_refresh();
	if (usmc_registry_attach() || !(r = usmc_registry_get()))
		return 0;
	v = calloc(USMC_REG_LISTENERS, sizeof(*v));
	if (!v)
		return 0;
	for (i = 0; i < USMC_REG_LISTENERS; i++) {
		char name[40];

		if (!usmc_registry_listener_read(&r->l[i], &v[n].r))
			continue;
		snprintf(name, sizeof(name), "ln-%016llx", (unsigned long long)v[n].r.id);
		v[n].owner = usmc_rundir_owner_alive(name);
		if (v[n].owner == USMC_OWNER_DEAD)
			continue;
		v[n].off = stat_listener_off(v[n].r.id);
		n++;
	}
	*out = v;
	return n;
}

static const char *lst_state(const struct lst_view *l)
{
	if (l->owner == USMC_OWNER_PLANTED || l->owner == USMC_OWNER_UNKNOWN)
		return "refused";
	if (l->r.version != USMC_PROTO_VERSION)
		return "other-version";
	return l->off ? usmc_reason_name(l->off) : "listening";
}

static void listeners_json(const struct lst_view *v, unsigned int n)
{
	unsigned int i;
	char a[64];

	printf(",\n  \"listeners\": [");
	for (i = 0; i < n; i++) {
		printf("%s\n    {\"pid\": %u, \"uid\": %u, \"local\": ", i ? "," : "", v[i].r.pid,
		       v[i].r.uid);
		json_str(usmc_addr_str(&v[i].r.addr, a, sizeof(a)));
		printf(", \"netns\": \"%016llx\", \"index\": \"%016llx\", \"reuseport\": %s, "
		       "\"v6only\": %s, \"allow_all\": %s, \"state\": \"%s\"}",
		       (unsigned long long)v[i].r.netns, (unsigned long long)v[i].r.id,
		       v[i].r.flags & USMC_REG_F_REUSEPORT ? "true" : "false",
		       v[i].r.flags & USMC_REG_F_V6ONLY ? "true" : "false",
		       v[i].r.allow_all ? "true" : "false", lst_state(&v[i]));
	}
	printf("%s]", n ? "\n  " : "");
}

static void listeners_text(const struct lst_view *v, unsigned int n)
{
	static const char *const hdr[] = { ">PID", ">UID", "LOCAL", "NETNS", "FLAGS", "STATE" };
	unsigned int i;
	struct tbl t;

	tbl_init(&t, ARRAY_SIZE(hdr), hdr);
	for (i = 0; i < n; i++) {
		char pid[12], uid[12], a[64], ns[20], fl[32];

		snprintf(pid, sizeof(pid), "%u", v[i].r.pid);
		snprintf(uid, sizeof(uid), "%u", v[i].r.uid);
		snprintf(ns, sizeof(ns), "%016llx", (unsigned long long)v[i].r.netns);
		snprintf(fl, sizeof(fl), "%s%s%s",
			 v[i].r.flags & USMC_REG_F_REUSEPORT ? "reuseport " : "",
			 v[i].r.flags & USMC_REG_F_V6ONLY ? "v6only " : "",
			 v[i].r.allow_all ? "allow-all" : "");
		tbl_row(&t, pid, uid, usmc_addr_str(&v[i].r.addr, a, sizeof(a)), ns,
			fl[0] ? fl : "-", lst_state(&v[i]));
	}
	tbl_print(&t);
	tbl_free(&t);
	if (!n)
		printf("(no usmc listener)\n");
}

/* "a=1 b=2" of the non-zero entries of counters base..base+n, or "none". */
static void counts_line(const char *label, const struct usmc_counters_snapshot *s, size_t base,
			int n, const char *(*name)(int))
{
	bool first = true;
	int i;

	printf("%s", label);
	for (i = 1; i < n; i++)
		if (s->v[base + i]) {
			printf(" %s=%llu", name(i), (unsigned long long)s->v[base + i]);
			first = false;
		}
	printf("%s\n", first ? " none" : "");
}

/* Every fallback reason counted, in words, with what to do. */
void stat_explain_reasons(const struct usmc_counters_snapshot *s)
{
	int i;

	for (i = 1; i < USMC_R_MAX; i++) {
		unsigned long long n = s->v[STAT_FALLBACK + i];

		if (!n)
			continue;
		printf("  %s%s%s (%llu): %s.\n      what to do: %s\n", col_yellow(),
		       usmc_reason_name(i), col_off(), n, usmc_reason_desc(i), usmc_reason_hint(i));
	}
}

static void counters_json(const struct usmc_counters_snapshot *s)
{
	unsigned int i;
	bool first;

	printf("{\n  \"rundir\": ");
	json_str(usmc_rundir_path());
	for (i = 0; i < stat_nctrs; i++)
		printf(",\n  \"%s\": %llu", stat_ctrs[i].name, (unsigned long long)s->v[stat_ctrs[i].idx]);
	printf(",\n  \"tx_full\": %llu", (unsigned long long)s->v[STAT_IDX(tx_full)]);
	printf(",\n  \"ring_given_back\": %llu",
	       (unsigned long long)s->v[STAT_IDX(ring_given_back)]);
	printf(",\n  \"doorbells_spared\": %llu",
	       (unsigned long long)s->v[STAT_IDX(doorbells_spared)]);
	printf(",\n  \"doorbells_unarmed\": %llu",
	       (unsigned long long)s->v[STAT_IDX(doorbells_unarmed)]);
	printf(",\n  \"clc_msgs_tx\": %llu,\n  \"clc_msgs_rx\": %llu",
	       (unsigned long long)s->v[STAT_IDX(clc_msgs_tx)],
	       (unsigned long long)s->v[STAT_IDX(clc_msgs_rx)]);
	printf(",\n  \"clc_inband_tx\": %llu,\n  \"clc_inband_rx\": %llu",
	       (unsigned long long)s->v[STAT_IDX(clc_inband_tx)],
	       (unsigned long long)s->v[STAT_IDX(clc_inband_rx)]);
	printf(",\n  \"tcp_fallback\": {");
	for (i = 1, first = true; i < USMC_R_MAX; i++) {
		if (!s->v[STAT_FALLBACK + i])
			continue;
		printf("%s\"%s\": %llu", first ? "" : ", ", usmc_reason_name((int)i),
		       (unsigned long long)s->v[STAT_FALLBACK + i]);
		first = false;
	}
	printf("},\n  \"aborts\": {");
	for (i = 1, first = true; i < USMC_A_MAX; i++) {
		if (!s->v[STAT_ABORT + i])
			continue;
		printf("%s\"%s\": %llu", first ? "" : ", ", usmc_abort_name((int)i),
		       (unsigned long long)s->v[STAT_ABORT + i]);
		first = false;
	}
	printf("}");
}

static void counters_text(const struct usmc_counters_snapshot *s)
{
#define V(field)	((unsigned long long)s->v[STAT_IDX(field)])
	printf("connections: %llu on shared memory (%llu client, %llu server), %llu on TCP, "
	       "%llu handshake errors\n",
	       V(smc_conns), V(smc_client), V(smc_server), V(tcp_conns), V(handshake_errors));
	printf("shared memory: %llu bytes sent, %llu received, %llu doorbells, %llu sleeps, "
	       "%llu spin hits\n", V(tx_bytes), V(rx_bytes), V(doorbells), V(sleeps), V(spin_hits));
	printf("calls: %llu send, %llu receive (%llu send, %llu receive on the fast path)\n",
	       V(tx_calls), V(rx_calls), V(tx_fast), V(rx_fast));
	printf("tcp mode: %llu bytes sent, %llu received\n", V(tcp_tx_bytes), V(tcp_rx_bytes));
	printf("link groups: %llu created, %llu attached; dmbs: %llu registered, %llu reused\n",
	       V(lgr_created), V(lgr_attached), V(dmbs_registered), V(dmbs_reused));
	printf("handshake: %llu late declines, %llu wake bytes\n", V(late_declines), V(wake_bytes));
	printf("rings: %llu bytes given back by idle connections\n", V(ring_given_back));
	printf("doorbells: %llu spared (the peer was awake), %llu dropped (not re-armed)\n",
	       V(doorbells_spared), V(doorbells_unarmed));
	printf("clc messages on tcp: %llu sent, %llu taken; in-band proposals: %llu sent, "
	       "%llu taken\n", V(clc_msgs_tx), V(clc_msgs_rx), V(clc_inband_tx), V(clc_inband_rx));
#undef V
	counts_line("tcp fallback:", s, STAT_FALLBACK, USMC_R_MAX, usmc_reason_name);
	counts_line("resets:", s, STAT_ABORT, USMC_A_MAX, usmc_abort_name);
}

int cmd_stat(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "all", no_argument, NULL, 'a' },
		{ "details", no_argument, NULL, 'd' },
		{ "listening", no_argument, NULL, 'l' },
		{ "json", no_argument, NULL, 'j' },
		{ "reset", no_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const char *const hdr[] = { "PID", ">FD", "ROLE", "LOCAL", "PEER", "MODE", "REASON",
					   ">SENT", ">RECEIVED", "LINK_GROUP", ">SLOT", ">RING",
					   ">TX_QUEUED", ">RX_QUEUED", "FLAGS(TX/RX)" };
	bool json = false, reset = false, all = false, details = false, lonly = false;
	struct usmc_counters_snapshot s;
	struct usmc_stats_file *f;
	struct lst_view *lv = NULL;
	struct conn_view *cv;
	unsigned int i, n = 0, nl = 0;
	struct tbl t;
	int c;

	if (argc > 1 && !strcmp(argv[1], "summary"))
		return cmd_summary(argc - 1, argv + 1);
	while ((c = getopt_long(argc, argv, "adljrh", opts, NULL)) != -1) {
		switch (c) {
		case 'a':
			all = true;
			break;
		case 'd':
			details = true;
			break;
		case 'l':
			lonly = true;
			break;
		case 'j':
			json = true;
			break;
		case 'r':
			reset = true;
			break;
		case 'h':
			printf("usage: usmc stat [-a|--all] [-d|--details] [-l|--listening] [--json] "
			       "[--reset]\n"
			       "       usmc stat summary [--json] [--reset]\n"
			       "  -a  also connections being closed, and the listeners\n"
			       "  -d  link group, slot, ring size, bytes queued each way, ring flags;\n"
			       "      why each connection is not on shared memory and what to do\n"
			       "  -l  the listeners only\n");
			return 0;
		default:
			fprintf(stderr, "usmc stat: see usmc stat --help\n");
			return 2;
		}
	}
	f = cli_stats_open("stat");
	if (!f)
		return 1;
	if (reset) {
		usmc_stats_reset(f);
		if (!json) {
			printf("counters reset\n");
			return 0;
		}
	}
	usmc_stats_sum(f, &s);
	cv = calloc(USMC_STATS_CONNS, sizeof(*cv));
	if (!cv)
		return 1;
	for (i = 0; i < USMC_STATS_CONNS; i++) {
		const struct usmc_stats_conn *e = &f->conns[i];

		if (!stat_conn_live(f, e) || (!all && LOAD_RELAXED(&e->closing)))
			continue;
		conn_view(e, details, &cv[n++]);
	}
	if (all || lonly)
		nl = listeners(&lv);

	if (json) {
		counters_json(&s);
		printf(",\n  \"connections\": [");
		for (i = 0; i < n && !lonly; i++)
			conn_json(&cv[i], !i);
		printf("%s]", n && !lonly ? "\n  " : "");
		if (all || lonly)
			listeners_json(lv, nl);
		printf("\n}\n");
		goto out;
	}
	if (lonly) {
		listeners_text(lv, nl);
		goto out;
	}
	tbl_init(&t, details ? ARRAY_SIZE(hdr) : 9, hdr);
	for (i = 0; i < n; i++)
		conn_row(&t, &cv[i], details);
	tbl_print(&t);
	tbl_free(&t);
	if (details)
		explain_conns(cv, n);
	if (all) {
		printf("\n");
		listeners_text(lv, nl);
	}
	printf("\nrundir %s\n", usmc_rundir_path());
	counters_text(&s);
	for (i = 1; i < USMC_R_MAX && !s.v[STAT_FALLBACK + i]; i++)
		;
	if (i < USMC_R_MAX) {
		printf("\n%sFallback reasons%s\n", col_bold(), col_off());
		stat_explain_reasons(&s);
	}
out:
	free(cv);
	free(lv);
	return 0;
}
