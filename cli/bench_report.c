// SPDX-License-Identifier: MIT
/*
 * bench_report.c - `usmc bench` results: the terminal table, the JSON
 * object, and the plot (bench/plot.py run on the JSON).
 *
 * Every number is the median over the repetitions with [min..max] beside
 * it; a ratio is median(transport) / median(TCP), so below 1 is better for
 * latency and CPU, above 1 is better for rates.
 */
#include "../src/usmc.h"	/* ARRAY_SIZE, MIN, MAX, USMC_VERSION_STR */
#include "bench.h"
#include "usmc.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct bstat {
	double med, min, max;
	unsigned int n;
	double v[BENCH_MAX_REPS];	/* samples in repetition order */
};

static int cmp_d(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

static void stat_of(const struct bench_cfg *c, const struct bench_results *r, int wi, int tr,
		    int mi, struct bstat *st)
{
	double s[BENCH_MAX_REPS];
	unsigned int i;

	memset(st, 0, sizeof(*st));
	st->med = st->min = st->max = NAN;
	for (i = 0; i < c->reps; i++) {
		double v = r->s[wi][tr][i][mi];

		if (!isnan(v))
			s[st->n] = st->v[st->n] = v, st->n++;
	}
	if (!st->n)
		return;
	qsort(s, st->n, sizeof(s[0]), cmp_d);
	st->min = s[0];
	st->max = s[st->n - 1];
	st->med = st->n & 1 ? s[st->n / 2] : (s[st->n / 2 - 1] + s[st->n / 2]) / 2;
}

static double median(const struct bench_cfg *c, const struct bench_results *r, int wi, int tr,
		     int mi)
{
	struct bstat st;

	stat_of(c, r, wi, tr, mi, &st);
	return st.med;
}

/* 4 significant digits or so, k/M for rates. */
static char *fmt(double v, char *buf, size_t len)
{
	double a = fabs(v);

	if (isnan(v))
		snprintf(buf, len, "-");
	else if (a >= 1e6)
		snprintf(buf, len, "%.3gM", v / 1e6);
	else if (a >= 1e4)
		snprintf(buf, len, "%.1fk", v / 1e3);
	else if (a >= 100)
		snprintf(buf, len, "%.0f", v);
	else if (a >= 10)
		snprintf(buf, len, "%.1f", v);
	else if (a >= 1)
		snprintf(buf, len, "%.2f", v);
	else
		snprintf(buf, len, "%.3f", v);
	return buf;
}

static void machine(char *model, size_t mlen, char *kernel, size_t klen)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	struct utsname u;
	char line[512];

	snprintf(model, mlen, "unknown CPU");
	while (f && fgets(line, sizeof(line), f)) {
		char *p = strchr(line, ':');

		if (p && !strncmp(line, "model name", 10)) {
			p += 1 + strspn(p + 1, " \t");
			p[strcspn(p, "\n")] = '\0';
			snprintf(model, mlen, "%s", p);
			break;
		}
	}
	if (f)
		fclose(f);
	if (uname(&u) == 0)
		snprintf(kernel, klen, "%s %s %s", u.sysname, u.release, u.machine);
	else
		snprintf(kernel, klen, "unknown");
}

static int floor_index(void)
{
	return bench_wl_find("floor");
}

/* Did any usmc run of this workload fail its shared-memory check? */
static bool check_failed(const struct bench_cfg *c, const struct bench_results *r, int wi)
{
	unsigned int i;

	for (i = 0; i < c->reps; i++)
		if (r->check[wi][i].ran && !r->check[wi][i].ok)
			return true;
	return false;
}

/* usmc against the machine's floor: latency ratio and throughput fraction. */
struct vs_floor {
	const char *wl, *key;
	int metric, floor_metric;
};
static const struct vs_floor vs[] = {
	{ "pp14", "pp14_p50_vs_floor", 1, 0 },
	{ "pp1k", "pp1k_p50_vs_floor", 1, 0 },
	{ "stream64k", "stream64k_fraction_of_ceiling", 0, 2 },
	{ "stream1m", "stream1m_fraction_of_ceiling", 0, 3 },
};

static double vs_value(const struct bench_cfg *c, const struct bench_results *r,
		       const struct vs_floor *x, double *usmc, double *fl)
{
	int wi = bench_wl_find(x->wl), fi = floor_index();

	if (wi < 0 || fi < 0 || !c->wl_on[wi] || !c->wl_on[fi] || !c->tr_on[TR_USMC])
		return NAN;
	*usmc = median(c, r, wi, TR_USMC, x->metric);
	*fl = median(c, r, fi, 0, x->floor_metric);
	return *usmc / *fl;
}

/* ---- the terminal table ---- */

#define COLW 24

static void cell(const struct bench_cfg *c, const struct bench_results *r, int wi, int tr,
		 int mi, const char *mark)
{
	char a[32], b[32], m[32], s[96];
	struct bstat st;

	stat_of(c, r, wi, tr, mi, &st);
	if (!c->tr_on[tr] || !st.n)
		snprintf(s, sizeof(s), "-");
	else if (c->reps == 1)
		snprintf(s, sizeof(s), "%s%s", fmt(st.med, m, sizeof(m)), mark);
	else
		snprintf(s, sizeof(s), "%s [%s..%s]%s", fmt(st.med, m, sizeof(m)),
			 fmt(st.min, a, sizeof(a)), fmt(st.max, b, sizeof(b)), mark);
	printf(" %-*s", COLW - 1, s);
}

static void ratio_cell(const struct bench_cfg *c, const struct bench_results *r, int wi, int tr,
		       int mi)
{
	double t = median(c, r, wi, TR_TCP, mi), x = median(c, r, wi, tr, mi);
	char s[32];

	if (!c->tr_on[tr] || !c->tr_on[TR_TCP] || isnan(t) || isnan(x) || t == 0)
		snprintf(s, sizeof(s), "-");
	else
		snprintf(s, sizeof(s), "%.2fx", x / t);
	printf(" %9s", s);
}

void bench_print_table(const struct bench_cfg *c, const struct bench_results *r)
{
	char model[256], kernel[256], a[32], lbl[64];
	const struct bench_metric *m;
	unsigned int wi, mi, nm, i, runs = 0, bad = 0;
	uint64_t conns = 0;
	int fi = floor_index();
	bool any_mark = false;

	machine(model, sizeof(model), kernel, sizeof(kernel));
	printf("usmc bench: TCP loopback vs UNIX socket vs usmc (TCP + libusmc.so)\n");
	printf("%u rep%s x %.2f s (+%.2f s warm-up) per transport; client CPU %d, server CPU %d; "
	       "%ld CPUs %s; %s\n", c->reps, c->reps == 1 ? "" : "s", c->duration, c->warmup,
	       c->cpu_client, c->cpu_server, sysconf(_SC_NPROCESSORS_ONLN), model, kernel);
	printf("median [min..max]; ratio = median / TCP median (latency, CPU: lower is better)\n\n");
	printf("%-30s", "");
	for (i = 0; i < TR_MAX; i++)
		printf(" %-*s", COLW - 1, bench_tr_label[i]);
	printf(" %9s %9s\n", "UNIX/TCP", "usmc/TCP");
	for (wi = 0; wi < bench_nwls; wi++) {
		const struct bench_wl *wl = &bench_wls[wi];
		const char *mark;

		if (!c->wl_on[wi] || wl->kind == WK_FLOOR)
			continue;
		mark = check_failed(c, r, (int)wi) ? " !" : "";
		any_mark |= mark[0] != 0;
		printf("(%c) %s: %s\n", wl->group, wl->name, wl->desc);
		nm = bench_metrics(wl->kind, &m);
		for (mi = 0; mi < nm; mi++) {
			snprintf(lbl, sizeof(lbl), "  %s", m[mi].label);
			printf("%-30s", lbl);
			for (i = 0; i < TR_MAX; i++)
				cell(c, r, (int)wi, (int)i, (int)mi, i == TR_USMC ? mark : "");
			ratio_cell(c, r, (int)wi, TR_UNIX, (int)mi);
			ratio_cell(c, r, (int)wi, TR_USMC, (int)mi);
			printf("\n");
		}
	}
	if (fi >= 0 && c->wl_on[fi]) {
		printf("\nmachine limits (two threads pinned to CPUs %d and %d, shared memory, no "
		       "system calls):\n", c->cpu_client, c->cpu_server);
		nm = bench_metrics(WK_FLOOR, &m);
		for (mi = 0; mi < nm; mi++) {
			bool first = true;

			snprintf(lbl, sizeof(lbl), "  %s", m[mi].label);
			printf("%-40s", lbl);
			cell(c, r, fi, 0, (int)mi, "");
			for (i = 0; i < ARRAY_SIZE(vs); i++) {
				double u = NAN, f = NAN, x;

				if (vs[i].floor_metric != (int)mi)
					continue;
				x = vs_value(c, r, &vs[i], &u, &f);
				if (isnan(x))
					continue;
				if (!first)
					printf("\n%-40s %-*s", "", COLW - 1, "");
				if (vs[i].floor_metric < 2)
					printf(" usmc vs floor: %s p50 %s us = %.1fx", vs[i].wl,
					       fmt(u, a, sizeof(a)), x);
				else
					printf(" usmc vs ceiling: %s %s GB/s = %.0f%%", vs[i].wl,
					       fmt(u, a, sizeof(a)), 100 * x);
				first = false;
			}
			printf("\n");
		}
	}
	for (wi = 0; wi < bench_nwls; wi++)
		for (i = 0; i < c->reps; i++)
			if (r->check[wi][i].ran) {
				runs++;
				bad += !r->check[wi][i].ok;
				conns += r->check[wi][i].smc_conns;
			}
	if (runs)
		printf("\nusmc check (usmc stat): %u of %u usmc runs entirely on shared memory "
		       "(%llu shared-memory endpoints)%s\n", runs - bad, runs,
		       (unsigned long long)conns, bad ? "; '!' marks workloads that were not" : "");
	else if (any_mark)
		printf("\n'!': usmc fell back to TCP\n");
	if (r->nnote) {
		printf("\nnotes:\n");
		for (i = 0; i < r->nnote && i < ARRAY_SIZE(r->note); i++)
			printf("  %s\n", r->note[i]);
	}
	if (r->nfail) {
		printf("\n%u failure%s:\n", r->nfail, r->nfail == 1 ? "" : "s");
		for (i = 0; i < r->nfail && i < ARRAY_SIZE(r->fail); i++)
			printf("  %s\n", r->fail[i]);
	}
}

/* ---- JSON ---- */

static void jstr(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static void jnum(FILE *f, double v)
{
	if (isnan(v) || isinf(v))
		fprintf(f, "null");
	else
		fprintf(f, "%.6g", v);
}

static void jstat(FILE *f, const struct bstat *st)
{
	unsigned int i;

	fprintf(f, "{\"median\": ");
	jnum(f, st->med);
	fprintf(f, ", \"min\": ");
	jnum(f, st->min);
	fprintf(f, ", \"max\": ");
	jnum(f, st->max);
	fprintf(f, ", \"samples\": [");
	for (i = 0; i < st->n; i++) {
		fprintf(f, "%s", i ? ", " : "");
		jnum(f, st->v[i]);
	}
	fprintf(f, "]}");
}

static void json_checks(FILE *f, const struct bench_cfg *c, const struct bench_results *r,
			int wi)
{
	unsigned int i;
	bool first = true;

	fprintf(f, ",\n      \"usmc_check\": {\"ok\": %s, \"runs\": [",
		check_failed(c, r, wi) ? "false" : "true");
	for (i = 0; i < c->reps; i++) {
		const struct bench_check *k = &r->check[wi][i];

		if (!k->ran)
			continue;
		fprintf(f, "%s\n        {\"rep\": %u, \"ok\": %s, \"smc_conns\": %llu, "
			"\"tcp_conns\": %llu, \"handshake_errors\": %llu, \"tx_bytes\": %llu, "
			"\"rx_bytes\": %llu, \"tx_calls\": %llu, \"rx_calls\": %llu, "
			"\"tx_fast\": %llu, \"rx_fast\": %llu, "
			"\"doorbells\": %llu, \"sleeps\": %llu, \"spin_hits\": %llu, "
			"\"tcp_fallback\": {%s}, \"aborts\": {%s}}",
			first ? "" : ",", i + 1, k->ok ? "true" : "false",
			(unsigned long long)k->smc_conns, (unsigned long long)k->tcp_conns,
			(unsigned long long)k->handshake_errors, (unsigned long long)k->tx_bytes,
			(unsigned long long)k->rx_bytes, (unsigned long long)k->tx_calls,
			(unsigned long long)k->rx_calls, (unsigned long long)k->tx_fast,
			(unsigned long long)k->rx_fast, (unsigned long long)k->doorbells,
			(unsigned long long)k->sleeps, (unsigned long long)k->spin_hits,
			k->fallback, k->aborts);
		first = false;
	}
	fprintf(f, "%s]}", first ? "" : "\n      ");
}

void bench_print_json(FILE *f, const struct bench_cfg *c, const struct bench_results *r)
{
	char model[256], kernel[256];
	const struct bench_metric *m;
	unsigned int wi, mi, nm, i;
	bool first = true;
	struct bstat st;

	machine(model, sizeof(model), kernel, sizeof(kernel));
	fprintf(f, "{\n  \"tool\": \"usmc bench\",\n  \"version\": \"%s\",\n", USMC_VERSION_STR);
	fprintf(f, "  \"machine\": {\"cpus\": %ld, \"cpu_model\": ", sysconf(_SC_NPROCESSORS_ONLN));
	jstr(f, model);
	fprintf(f, ", \"kernel\": ");
	jstr(f, kernel);
	fprintf(f, ", \"cpu_client\": %d, \"cpu_server\": %d},\n", c->cpu_client, c->cpu_server);
	fprintf(f, "  \"config\": {\"reps\": %u, \"duration_s\": %g, \"warmup_s\": %g, "
		"\"transports\": [", c->reps, c->duration, c->warmup);
	for (i = 0, first = true; i < TR_MAX; i++)
		if (c->tr_on[i]) {
			fprintf(f, "%s\"%s\"", first ? "" : ", ", bench_tr_name[i]);
			first = false;
		}
	fprintf(f, "], \"busy_poll_us\": ");
	if (c->busy_poll)
		jnum(f, strtod(c->busy_poll, NULL));
	else
		fprintf(f, "null");
	fprintf(f, ", \"env\": [");
	for (i = 0; c->extra_env[i]; i++) {
		fprintf(f, "%s", i ? ", " : "");
		jstr(f, c->extra_env[i]);
	}
	fprintf(f, "], \"lib\": ");
	jstr(f, c->lib);
	fprintf(f, "},\n  \"workloads\": {");
	for (wi = 0, first = true; wi < bench_nwls; wi++) {
		const struct bench_wl *wl = &bench_wls[wi];
		bool fl = wl->kind == WK_FLOOR;

		if (!c->wl_on[wi])
			continue;
		fprintf(f, "%s\n    \"%s\": {\"group\": \"%c\", \"description\": ", first ? "" : ",",
			wl->name, wl->group);
		jstr(f, wl->desc);
		fprintf(f, ", \"size\": %u, \"conns\": %u,\n      \"metrics\": {", wl->size,
			wl->conns);
		first = false;
		nm = bench_metrics(wl->kind, &m);
		for (mi = 0; mi < nm; mi++) {
			double t = median(c, r, (int)wi, TR_TCP, (int)mi);

			fprintf(f, "%s\n        \"%s\": {\"label\": ", mi ? "," : "", m[mi].key);
			jstr(f, m[mi].label);
			fprintf(f, ", \"better\": \"%s\", \"cpu\": %s", m[mi].lower_better ?
				"lower" : "higher", m[mi].cpu ? "true" : "false");
			if (fl) {
				stat_of(c, r, (int)wi, 0, (int)mi, &st);
				fprintf(f, ", \"machine\": ");
				jstat(f, &st);
				fprintf(f, "}");
				continue;
			}
			for (i = 0; i < TR_MAX; i++) {
				if (!c->tr_on[i])
					continue;
				stat_of(c, r, (int)wi, (int)i, (int)mi, &st);
				fprintf(f, ",\n          \"%s\": ", bench_tr_name[i]);
				jstat(f, &st);
			}
			fprintf(f, ",\n          \"ratio_vs_tcp\": {");
			for (i = 1; i < TR_MAX; i++) {
				fprintf(f, "%s\"%s\": ", i > 1 ? ", " : "", bench_tr_name[i]);
				jnum(f, c->tr_on[i] && c->tr_on[TR_TCP] ?
				     median(c, r, (int)wi, (int)i, (int)mi) / t : NAN);
			}
			fprintf(f, "}}");
		}
		fprintf(f, "}");
		if (!fl && c->tr_on[TR_USMC])
			json_checks(f, c, r, (int)wi);
		fprintf(f, "}");
	}
	fprintf(f, "\n  },\n  \"vs_floor\": {");
	for (i = 0; i < ARRAY_SIZE(vs); i++) {
		double u, fl;

		fprintf(f, "%s\"%s\": ", i ? ", " : "", vs[i].key);
		jnum(f, vs_value(c, r, &vs[i], &u, &fl));
	}
	fprintf(f, "},\n  \"failures\": [");
	for (i = 0; i < r->nfail && i < ARRAY_SIZE(r->fail); i++) {
		fprintf(f, "%s\n    ", i ? "," : "");
		jstr(f, r->fail[i]);
	}
	fprintf(f, "%s],\n  \"notes\": [", r->nfail ? "\n  " : "");
	for (i = 0; i < r->nnote && i < ARRAY_SIZE(r->note); i++) {
		fprintf(f, "%s\n    ", i ? "," : "");
		jstr(f, r->note[i]);
	}
	fprintf(f, "%s],\n  \"ok\": %s\n}\n", r->nnote ? "\n  " : "", r->nfail ? "false" : "true");
}

/* ---- plot: /usr/bin/python3 bench/plot.py RESULTS.json OUT.png ---- */

static int plot_script(char *out, size_t len)
{
	char exe[PATH_MAX];
	const char *env = getenv("USMC_BENCH_PLOT");
	ssize_t n;

	if (env && *env) {
		snprintf(out, len, "%s", env);
		return access(out, R_OK) ? -errno : 0;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return -ENOENT;
	exe[n] = '\0';
	/* The source tree (build/usmc), or an installed tree (bin/usmc). */
	snprintf(out, len, "%s/../bench/plot.py", dirname(exe));
	if (!access(out, R_OK))
		return 0;
	snprintf(out, len, "%s/../share/usmc/plot.py", exe);
	return access(out, R_OK) ? -errno : 0;
}

int bench_plot(const struct bench_cfg *c, const struct bench_results *r, const char *tmpdir)
{
	char script[PATH_MAX + 32], json[256];
	struct timespec ms = { 0, 10000000 };
	double deadline = bench_now() + 120;
	int rc, st;
	pid_t pid;
	FILE *f;

	if ((rc = plot_script(script, sizeof(script))) < 0) {
		fprintf(stderr, "usmc bench: plot script %s: %s (set USMC_BENCH_PLOT)\n", script,
			strerror(-rc));
		return rc;
	}
	snprintf(json, sizeof(json), "%s/results.json", tmpdir);
	f = fopen(json, "w");
	if (!f)
		return -errno;
	bench_print_json(f, c, r);
	if (fclose(f))
		return -EIO;
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		dup2(STDERR_FILENO, STDOUT_FILENO);
		execl("/usr/bin/python3", "python3", script, json, c->plot, (char *)NULL);
		_exit(127);
	}
	while ((rc = waitpid(pid, &st, WNOHANG)) == 0 && bench_now() < deadline)
		nanosleep(&ms, NULL);
	if (rc == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		fprintf(stderr, "usmc bench: plot took too long\n");
		return -ETIMEDOUT;
	}
	if (rc < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "usmc bench: %s failed\n", script);
		return -EIO;
	}
	if (!c->json)
		printf("\nplot: %s\n", c->plot);
	return 0;
}
