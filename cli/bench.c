// SPDX-License-Identifier: MIT
/*
 * bench.c - `usmc bench`: TCP loopback vs UNIX socket vs usmc, side by side.
 *
 * Options, the workload table, and the run: for each repetition, for each
 * workload, the transports in turn (TCP, UNIX, usmc, TCP, UNIX, usmc, ...),
 * each one a fresh server and client process (bench_proc.c, bench_work.c);
 * then the machine's floor (bench_floor.c).  Every usmc run gets its own
 * runtime directory, checked with `usmc stat --json` afterwards and removed.
 * bench_report.c prints the results.
 */
#include "../src/usmc.h"	/* ARRAY_SIZE, MIN, MAX, USMC_VERSION_STR */
#include "bench.h"
#include "usmc.h"

#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

const struct bench_wl bench_wls[] = {
	{ "pp14", 'a', WK_PINGPONG, 14, 1, "ping-pong, 14 B messages (one-way latency = RTT/2)" },
	{ "pp1k", 'a', WK_PINGPONG, 1024, 1, "ping-pong, 1 KB messages (one-way latency = RTT/2)" },
	{ "rr1", 'b', WK_RR, BENCH_REQ_SIZE, 1, "request/response 1 KB/1 KB, 1 connection" },
	{ "rr16", 'b', WK_RR, BENCH_REQ_SIZE, 16, "request/response 1 KB/1 KB, 16 connections (epoll)" },
	{ "stream64k", 'c', WK_STREAM, 64u << 10, 1, "streaming, 64 KB writes, 1 MB reads" },
	{ "stream1m", 'c', WK_STREAM, 1u << 20, 1, "streaming, 1 MB writes, 1 MB reads" },
	{ "msg100", 'd', WK_MSG, 100, 1, "one-way 100 B messages (write 100 B, read exactly 100 B)" },
	{ "conn", 'e', WK_CONN, BENCH_REQ_SIZE, 1, "connection setup: connect, 1 KB request/response, close" },
	{ "floor", 'f', WK_FLOOR, 0, 0, "machine floor: cache-line ping-pong, cross-core copy pipe" },
};
const unsigned int bench_nwls = ARRAY_SIZE(bench_wls);
BUILD_BUG_ON(ARRAY_SIZE(bench_wls) > 16);

const char *const bench_tr_name[TR_MAX] = { "tcp", "unix", "usmc" };
const char *const bench_tr_label[TR_MAX] = { "TCP", "UNIX", "usmc" };

static const struct bench_metric m_pp[] = {
	{ "lat_mean_us", "one-way mean (us)", true, false },
	{ "lat_p50_us", "one-way p50 (us)", true, false },
	{ "lat_p99_us", "one-way p99 (us)", true, false },
	{ "lat_p999_us", "one-way p99.9 (us)", true, false },
	{ "cpu_us_per_rtt", "CPU per round trip (us)", true, true },
};
static const struct bench_metric m_rr[] = {
	{ "txn_per_s", "transactions/s", false, false },
	{ "cpu_us_per_txn", "CPU per transaction (us)", true, true },
};
static const struct bench_metric m_stream[] = {
	{ "gb_per_s", "throughput (GB/s)", false, false },
	{ "cpu_s_per_gb", "CPU per GB (s)", true, true },
};
static const struct bench_metric m_msg[] = {
	{ "msg_per_s", "messages/s", false, false },
	{ "cpu_us_per_msg", "CPU per message (us)", true, true },
};
static const struct bench_metric m_conn[] = {
	{ "conn_per_s", "connections/s", false, false },
	{ "cpu_us_per_conn", "CPU per connection (us)", true, true },
};
static const struct bench_metric m_floor[] = {
	{ "shm_pingpong_oneway_p50_us", "cache-line ping-pong one-way p50 (us)", true, false },
	{ "shm_pingpong_oneway_mean_us", "cache-line ping-pong one-way mean (us)", true, false },
	{ "copy_pipe_64k_gb_per_s", "copy pipe, 64 KB chunks (GB/s)", false, false },
	{ "copy_pipe_1m_gb_per_s", "copy pipe, 1 MB chunks (GB/s)", false, false },
};

unsigned int bench_metrics(enum bench_kind kind, const struct bench_metric **out)
{
	switch (kind) {
	case WK_PINGPONG: *out = m_pp; return ARRAY_SIZE(m_pp);
	case WK_RR: *out = m_rr; return ARRAY_SIZE(m_rr);
	case WK_STREAM: *out = m_stream; return ARRAY_SIZE(m_stream);
	case WK_MSG: *out = m_msg; return ARRAY_SIZE(m_msg);
	case WK_CONN: *out = m_conn; return ARRAY_SIZE(m_conn);
	case WK_FLOOR: *out = m_floor; return ARRAY_SIZE(m_floor);
	}
	*out = NULL;
	return 0;
}

int bench_wl_find(const char *name)
{
	unsigned int i;

	for (i = 0; i < bench_nwls; i++)
		if (!strcmp(bench_wls[i].name, name))
			return (int)i;
	return -1;
}

static void bench_usage(FILE *f)
{
	unsigned int i;

	fprintf(f,
		"usage: usmc bench [options]\n"
		"  Runs its own client and server over TCP loopback, a UNIX socket and usmc\n"
		"  (TCP with libusmc.so preloaded), and prints one row per metric:\n"
		"  median [min..max] over the repetitions, and the ratios against TCP.\n"
		"\n"
		"  --quick               the default suite (about a minute on 2 CPUs)\n"
		"  --workloads LIST      names or groups a-f, comma separated (default: all)\n"
		"  --transports LIST     tcp,unix,usmc (default: all three)\n"
		"  --reps N              repetitions (default 3)\n"
		"  --duration S          measured seconds per run (default 0.5)\n"
		"  --warmup S            warm-up seconds per run (default duration/5)\n"
		"  --cpus C,S            pin client to CPU C, server to CPU S (default 0,1;\n"
		"                        'none' leaves them unpinned)\n"
		"  --busy-poll US        USMC_BUSY_POLL for the usmc workers\n"
		"  --tmpdir DIR          runtime directories under DIR (default /dev/shm), e.g.\n"
		"                        a tmpfs mounted huge=always for USMC_DMB_TYPE=huge\n"
		"  --env K=V             extra environment for the usmc workers (repeatable)\n"
		"  --json                print one JSON object instead of the table\n"
		"  --plot FILE.png       also draw the ratios to TCP (bench/plot.py)\n"
		"\n"
		"workloads:\n");
	for (i = 0; i < bench_nwls; i++)
		fprintf(f, "  %c %-10s %s\n", bench_wls[i].group, bench_wls[i].name,
			bench_wls[i].desc);
}

/* libusmc.so: $USMC_LIB, beside this binary, or ../lib/usmc/ (as `usmc run`). */
static int find_lib(char *out, size_t len)
{
	char exe[PATH_MAX], *dir;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	const char *env = getenv("USMC_LIB");

	if (env && *env)
		return realpath(env, out) ? 0 : -errno;
	if (n <= 0)
		return -ENOENT;
	exe[n] = '\0';
	dir = dirname(exe);
	snprintf(out, len, "%s/libusmc.so", dir);
	if (!access(out, R_OK))
		return 0;
	snprintf(out, len, "%s/../lib/usmc/libusmc.so", dir);
	return access(out, R_OK) ? -ENOENT : 0;
}

/* The first two CPUs we may run on: client and server default. */
static void default_cpus(struct bench_cfg *c)
{
	cpu_set_t set;
	int i, k = 0, cpus[2] = { -1, -1 };

	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		for (i = 0; i < CPU_SETSIZE && k < 2; i++)
			if (CPU_ISSET(i, &set))
				cpus[k++] = i;
	if (k < 2)
		cpus[0] = cpus[1] = -1;
	c->cpu_client = cpus[0];
	c->cpu_server = cpus[1];
}

static int parse_list(const char *s, bool wl, struct bench_cfg *c)
{
	char *dup = strdup(s), *tok, *save = NULL;
	unsigned int i;
	int rc = 0;

	if (!dup)
		return -ENOMEM;
	for (tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		bool hit = false;

		if (wl) {
			for (i = 0; i < bench_nwls; i++)
				if (!strcmp(tok, bench_wls[i].name) || !strcmp(tok, "all") ||
				    (!tok[1] && tok[0] == bench_wls[i].group)) {
					c->wl_on[i] = true;
					hit = true;
				}
		} else {
			for (i = 0; i < TR_MAX; i++)
				if (!strcmp(tok, bench_tr_name[i])) {
					c->tr_on[i] = true;
					hit = true;
				}
		}
		if (!hit) {
			fprintf(stderr, "usmc bench: unknown %s '%s'\n", wl ? "workload" : "transport",
				tok);
			rc = -EINVAL;
		}
	}
	free(dup);
	return rc;
}

/* ---- one measurement ---- */

struct bench {
	struct bench_cfg *cfg;
	struct bench_results *res;
	char tmpdir[64];
};

static void failf(struct bench *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failf(struct bench *b, const char *fmt, ...)
{
	char msg[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "usmc bench: %s\n", msg);
	if (b->res->nfail < ARRAY_SIZE(b->res->fail))
		snprintf(b->res->fail[b->res->nfail], sizeof(b->res->fail[0]), "%s", msg);
	b->res->nfail++;
}

static void notef(struct bench *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void notef(struct bench *b, const char *fmt, ...)
{
	va_list ap;

	if (b->res->nnote >= ARRAY_SIZE(b->res->note)) {
		b->res->nnote++;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(b->res->note[b->res->nnote++], sizeof(b->res->note[0]), fmt, ap);
	va_end(ap);
}

static bool exited_ok(int st)
{
	return st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static const char *st_str(int st, char *buf, size_t len)
{
	if (st == -ETIMEDOUT)
		snprintf(buf, len, "killed after the time limit");
	else if (st < 0)
		snprintf(buf, len, "%s", strerror(-st));
	else if (WIFSIGNALED(st))
		snprintf(buf, len, "killed by signal %d", WTERMSIG(st));
	else
		snprintf(buf, len, "exit status %d", WEXITSTATUS(st));
	return buf;
}

/* Metric values of one run from the client's and the server's records. */
static int derive(struct bench *b, const struct bench_wl *wl, const char *tag,
		  const struct bench_rec *c, const struct bench_rec *s, double *m)
{
	double ops = c->v[K_OPS], secs = c->v[K_SECS], cpu;
	int k;

	for (k = 0; k < BENCH_MAX_METRICS; k++)
		m[k] = NAN;	/* metrics a workload does not have */

	if (!c->has[K_OPS] || !c->has[K_TOTAL] || !s->has[K_TOTAL] || ops <= 0 || secs <= 0) {
		failf(b, "%s: incomplete worker records", tag);
		return -EPROTO;
	}
	if (c->v[K_TOTAL] != s->v[K_TOTAL]) {
		failf(b, "%s: server counted %.0f, client %.0f", tag, s->v[K_TOTAL],
		      c->v[K_TOTAL]);
		return -EPROTO;
	}
	if (s->v[K_STALE] > 0)
		failf(b, "%s: epoll_wait reported %.0f event(s) for connections already removed "
		      "with EPOLL_CTL_DEL and closed", tag, s->v[K_STALE]);
	if (c->v[K_DUP] + s->v[K_DUP] > 0)
		notef(b, "%s: epoll_wait returned the same connection twice in one batch %.0f "
		      "time(s)", tag, c->v[K_DUP] + s->v[K_DUP]);
	/* CPU per op: client over its window + server over its whole run. */
	cpu = c->v[K_CPU] / ops + s->v[K_CPU] / s->v[K_TOTAL];
	switch (wl->kind) {
	case WK_PINGPONG:
		m[0] = c->v[K_MEAN];
		m[1] = c->v[K_P50];
		m[2] = c->v[K_P99];
		m[3] = c->v[K_P999];
		m[4] = cpu * 1e6;
		break;
	case WK_STREAM:
		m[0] = ops / secs / 1e9;
		m[1] = cpu * 1e9;
		break;
	default:
		m[0] = ops / secs;
		m[1] = cpu * 1e6;
		break;
	}
	return 0;
}

static void num_arg(char **av, int *n, const char *opt, char *buf, size_t len, double v)
{
	snprintf(buf, len, "%.6f", v);
	av[(*n)++] = (char *)opt;
	av[(*n)++] = buf;
}

static int run_one(struct bench *b, int wi, int tr, unsigned int rep)
{
	const struct bench_wl *wl = &bench_wls[wi];
	struct bench_cfg *c = b->cfg;
	struct bench_env env = { .lib = c->lib, .busy_poll = c->busy_poll, .extra = c->extra_env };
	struct bench_proc srv = { .pid = -1, .fd = -1 }, cli = { .pid = -1, .fd = -1 };
	struct bench_rec rs, rc_, rr;
	char rundir[128], path[128], tag[64], line[1024], d[32], w[32], cpu[16], port[16], sb[64];
	char *av[24];
	double limit = c->warmup + c->duration + 15, m[BENCH_MAX_METRICS];
	int n = 0, rc, st_c, st_s, ports;
	unsigned int k;

	snprintf(tag, sizeof(tag), "%s %s rep %u", wl->name, bench_tr_name[tr], rep + 1);
	snprintf(path, sizeof(path), "%s/unix.sock", b->tmpdir);
	snprintf(rundir, sizeof(rundir), "%s/usmc-%s-%u", b->tmpdir, wl->name, rep + 1);
	env.rundir = rundir;
	if (tr == TR_USMC && mkdir(rundir, 0700)) {
		failf(b, "%s: mkdir %s: %s", tag, rundir, strerror(errno));
		return -errno;
	}
	av[n++] = "bench";
	av[n++] = "--worker";
	av[n++] = "server";
	av[n++] = "--wl";
	av[n++] = (char *)wl->name;
	av[n++] = "--tr";
	av[n++] = (char *)bench_tr_name[tr];
	av[n++] = "--path";
	av[n++] = path;
	num_arg(av, &n, "--duration", d, sizeof(d), c->duration);
	num_arg(av, &n, "--warmup", w, sizeof(w), c->warmup);
	snprintf(cpu, sizeof(cpu), "%d", c->cpu_server);
	av[n++] = "--cpu";
	av[n++] = cpu;
	av[n] = NULL;

	rc = bench_spawn(&srv, av, &env, tr, false);
	if (rc < 0) {
		failf(b, "%s: starting the server: %s", tag, strerror(-rc));
		goto out;
	}
	rc = bench_read_line(&srv, line, sizeof(line), bench_now() + 10);
	if (rc <= 0 || bench_parse_rec(line, &rr) || !rr.has[K_PORT]) {
		failf(b, "%s: server did not start: %s", tag,
		      rc < 0 ? strerror(-rc) : rc == 0 ? "exited" : rr.error);
		rc = -EIO;
		goto out;
	}
	av[2] = "client";
	snprintf(cpu, sizeof(cpu), "%d", c->cpu_client);
	ports = (int)rr.v[K_PORT];
	snprintf(port, sizeof(port), "%d", ports);
	av[n++] = "--port";
	av[n++] = port;
	av[n] = NULL;
	rc = bench_spawn(&cli, av, &env, tr, false);
	if (rc < 0) {
		failf(b, "%s: starting the client: %s", tag, strerror(-rc));
		goto out;
	}
	/* The client reports after its window; the server after the client's
	 * last byte.  A client failure may leave the server waiting: give it
	 * a moment to say what it saw, then kill it. */
	rc = bench_read_line(&cli, line, sizeof(line), bench_now() + limit);
	if (rc <= 0 || bench_parse_rec(line, &rc_)) {
		failf(b, "%s: client: %s", tag,
		      rc == -ETIMEDOUT ? "no result within the time limit (hang?)" :
		      rc < 0 ? strerror(-rc) : rc == 0 ? "exited without a result" : rc_.error);
		if (bench_read_line(&srv, line, sizeof(line), bench_now() + 0.3) > 0 &&
		    bench_parse_rec(line, &rs))
			failf(b, "%s: server: %s", tag, rs.error);
		rc = -EIO;
		goto out;
	}
	rc = bench_read_line(&srv, line, sizeof(line), bench_now() + 10);
	if (rc <= 0 || bench_parse_rec(line, &rs)) {
		failf(b, "%s: server: %s", tag,
		      rc == -ETIMEDOUT ? "no result within the time limit (hang?)" :
		      rc < 0 ? strerror(-rc) : rc == 0 ? "exited without a result" : rs.error);
		rc = -EIO;
		goto out;
	}
	st_c = bench_reap(&cli, bench_now() + 5);
	st_s = bench_reap(&srv, bench_now() + 5);
	if (!exited_ok(st_c) || !exited_ok(st_s)) {
		failf(b, "%s: client %s, server %s", tag, st_str(st_c, sb, 32),
		      st_str(st_s, sb + 32, 32));
		rc = -EIO;
		goto out;
	}
	rc = derive(b, wl, tag, &rc_, &rs, m);
	if (rc == 0)
		for (k = 0; k < BENCH_MAX_METRICS; k++)
			b->res->s[wi][tr][rep][k] = m[k];
out:
	bench_kill(&cli);
	bench_kill(&srv);
	if (cli.pid > 0)
		bench_reap(&cli, bench_now() + 5);
	if (srv.pid > 0)
		bench_reap(&srv, bench_now() + 5);
	if (tr == TR_USMC) {
		struct bench_check *ck = &b->res->check[wi][rep];

		if (rc == 0 && !bench_interrupted()) {
			int e = bench_usmc_check(rundir, ck);

			if (e < 0)
				failf(b, "%s: usmc stat: %s", tag, strerror(-e));
			else if (!ck->ok)
				failf(b, "%s: not on shared memory: smc_conns %llu, tcp_conns %llu, "
				      "fallback {%s}", tag, (unsigned long long)ck->smc_conns,
				      (unsigned long long)ck->tcp_conns, ck->fallback);
		}
		bench_rmtree(rundir);
	}
	return rc;
}

static int run_floor(struct bench *b, int wi, unsigned int rep)
{
	struct bench_cfg *c = b->cfg;
	struct bench_env env = { .lib = c->lib };
	struct bench_proc p;
	struct bench_rec r;
	char d[32], w[32], c1[16], c2[16], line[1024], sb[64];
	double dur = MIN(c->duration, 0.2), warm = 0.05;
	char *av[16];
	int n = 0, rc, st;

	av[n++] = "bench";
	av[n++] = "--worker";
	av[n++] = "floor";
	num_arg(av, &n, "--duration", d, sizeof(d), dur);
	num_arg(av, &n, "--warmup", w, sizeof(w), warm);
	snprintf(c1, sizeof(c1), "%d", c->cpu_client);
	snprintf(c2, sizeof(c2), "%d", c->cpu_server);
	av[n++] = "--cpu";
	av[n++] = c1;
	av[n++] = "--cpu2";
	av[n++] = c2;
	av[n] = NULL;
	rc = bench_spawn(&p, av, &env, TR_TCP, false);
	if (rc < 0) {
		failf(b, "floor: %s", strerror(-rc));
		return rc;
	}
	rc = bench_read_line(&p, line, sizeof(line), bench_now() + 3 * (dur + warm) + 15);
	st = bench_reap(&p, bench_now() + 5);
	if (rc <= 0 || bench_parse_rec(line, &r) || !exited_ok(st)) {
		failf(b, "floor rep %u: %s", rep + 1,
		      rc < 0 ? strerror(-rc) : rc == 0 ? st_str(st, sb, sizeof(sb)) : r.error[0] ?
		      r.error : st_str(st, sb, sizeof(sb)));
		return -EIO;
	}
	b->res->s[wi][0][rep][0] = r.v[K_FLOOR_PP];
	b->res->s[wi][0][rep][1] = r.v[K_FLOOR_PP_MEAN];
	b->res->s[wi][0][rep][2] = r.v[K_PIPE_64K];
	b->res->s[wi][0][rep][3] = r.v[K_PIPE_1M];
	return 0;
}

static void progress(const char *what, unsigned int rep, unsigned int reps)
{
	if (isatty(STDERR_FILENO))
		fprintf(stderr, "\r\033[Kusmc bench: rep %u/%u %s", rep + 1, reps, what);
}

static int bench_run(struct bench *b)
{
	struct bench_cfg *c = b->cfg;
	unsigned int rep, wi, tr;
	char what[64];

	for (rep = 0; rep < c->reps; rep++)
		for (wi = 0; wi < bench_nwls; wi++) {
			if (!c->wl_on[wi])
				continue;
			if (bench_wls[wi].kind == WK_FLOOR) {
				progress("floor", rep, c->reps);
				run_floor(b, (int)wi, rep);
			}
			for (tr = 0; tr < TR_MAX && bench_wls[wi].kind != WK_FLOOR; tr++) {
				if (!c->tr_on[tr])
					continue;
				snprintf(what, sizeof(what), "%s %s", bench_wls[wi].name,
					 bench_tr_name[tr]);
				progress(what, rep, c->reps);
				run_one(b, (int)wi, (int)tr, rep);
				if (bench_interrupted())
					return -EINTR;
			}
		}
	if (isatty(STDERR_FILENO))
		fprintf(stderr, "\r\033[K");
	return 0;
}

/* ---- options ---- */

enum { O_WORKER = 256, O_WL, O_TR, O_PATH, O_PORT, O_CPU, O_CPU2, O_REPORT, O_WARMUP };

static int worker_main(struct bench_wargs *a)
{
	/* Backstop for the parent's deadline, in case the parent is stopped. */
	alarm((unsigned int)(a->warmup + a->duration) + 30);
	if (a->report_fd < 0 || (a->role != 'f' && a->wl < 0))
		return 2;
	return a->role == 'f' ? bench_floor(a) : bench_worker(a);
}

static int parse_cpus(const char *s, struct bench_cfg *c)
{
	char *end;

	if (!strcmp(s, "none")) {
		c->cpu_client = c->cpu_server = -1;
		return 0;
	}
	c->cpu_client = (int)strtol(s, &end, 10);
	if (*end != ',')
		return -EINVAL;
	c->cpu_server = (int)strtol(end + 1, &end, 10);
	if (*end || c->cpu_client < -1 || c->cpu_server < -1 || c->cpu_client >= CPU_SETSIZE ||
	    c->cpu_server >= CPU_SETSIZE)
		return -EINVAL;
	return 0;
}

int cmd_bench(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "quick", no_argument, NULL, 'q' },
		{ "workloads", required_argument, NULL, 'w' },
		{ "transports", required_argument, NULL, 't' },
		{ "reps", required_argument, NULL, 'n' },
		{ "duration", required_argument, NULL, 'd' },
		{ "warmup", required_argument, NULL, O_WARMUP },
		{ "cpus", required_argument, NULL, 'c' },
		{ "busy-poll", required_argument, NULL, 'b' },
		{ "tmpdir", required_argument, NULL, 'T' },
		{ "env", required_argument, NULL, 'e' },
		{ "json", no_argument, NULL, 'j' },
		{ "plot", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		/* workers only */
		{ "worker", required_argument, NULL, O_WORKER },
		{ "wl", required_argument, NULL, O_WL },
		{ "tr", required_argument, NULL, O_TR },
		{ "path", required_argument, NULL, O_PATH },
		{ "port", required_argument, NULL, O_PORT },
		{ "cpu", required_argument, NULL, O_CPU },
		{ "cpu2", required_argument, NULL, O_CPU2 },
		{ "report-fd", required_argument, NULL, O_REPORT },
		{ NULL, 0, NULL, 0 },
	};
	struct bench_wargs wa = { .wl = -1, .cpu = -1, .cpu2 = -1, .report_fd = -1 };
	struct bench_cfg *cfg = calloc(1, sizeof(*cfg));
	struct bench_results *res = NULL;
	struct bench b = { .cfg = cfg };
	bool wl_set = false, tr_set = false, worker = false, warm_set = false;
	char **extra = calloc((size_t)argc + 1, sizeof(char *));
	unsigned int nextra = 0, i, j, k, r;
	int opt, rc = 2, e;
	char *end;
	long v;

	if (!cfg || !extra)
		goto out;
	cfg->reps = 3;
	cfg->duration = 0.5;
	cfg->extra_env = extra;
	default_cpus(cfg);
	while ((opt = getopt_long(argc, argv, "qw:t:n:d:c:b:T:e:jp:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'q':
			break;
		case 'w':
			wl_set = true;
			if (parse_list(optarg, true, cfg))
				goto out;
			break;
		case 't':
			tr_set = true;
			if (parse_list(optarg, false, cfg))
				goto out;
			break;
		case 'n':
			v = strtol(optarg, NULL, 10);
			if (v < 1 || v > BENCH_MAX_REPS) {
				fprintf(stderr, "usmc bench: --reps 1..%d\n", BENCH_MAX_REPS);
				goto out;
			}
			cfg->reps = (unsigned int)v;
			break;
		case 'd':
			cfg->duration = wa.duration = strtod(optarg, NULL);
			if (!(cfg->duration > 0 && cfg->duration <= 3600)) {
				fprintf(stderr, "usmc bench: bad --duration '%s'\n", optarg);
				goto out;
			}
			break;
		case O_WARMUP:
			warm_set = true;
			cfg->warmup = wa.warmup = strtod(optarg, NULL);
			if (!(cfg->warmup >= 0 && cfg->warmup <= 3600)) {
				fprintf(stderr, "usmc bench: bad --warmup '%s'\n", optarg);
				goto out;
			}
			break;
		case 'c':
			if (parse_cpus(optarg, cfg)) {
				fprintf(stderr, "usmc bench: --cpus C,S (CPU numbers) or none\n");
				goto out;
			}
			break;
		case 'b':
			v = strtol(optarg, &end, 10);
			if (*end || end == optarg || v < 0) {
				fprintf(stderr, "usmc bench: --busy-poll US (microseconds)\n");
				goto out;
			}
			cfg->busy_poll = optarg;
			break;
		case 'T':
			cfg->tmpbase = optarg;
			break;
		case 'e':
			if (!strchr(optarg, '=') || optarg[0] == '=') {
				fprintf(stderr, "usmc bench: --env K=V\n");
				goto out;
			}
			extra[nextra++] = optarg;
			break;
		case 'j':
			cfg->json = true;
			break;
		case 'p':
			cfg->plot = optarg;
			break;
		case 'h':
			bench_usage(stdout);
			rc = 0;
			goto out;
		case O_WORKER:
			worker = true;
			wa.role = optarg[0];
			break;
		case O_WL:
			wa.wl = bench_wl_find(optarg);
			break;
		case O_TR:
			for (e = 0; e < TR_MAX; e++)
				if (!strcmp(optarg, bench_tr_name[e]))
					wa.tr = e;
			break;
		case O_PATH:
			snprintf(wa.path, sizeof(wa.path), "%s", optarg);
			break;
		case O_PORT:
			wa.port = atoi(optarg);
			break;
		case O_CPU:
			wa.cpu = atoi(optarg);
			break;
		case O_CPU2:
			wa.cpu2 = atoi(optarg);
			break;
		case O_REPORT:
			wa.report_fd = atoi(optarg);
			break;
		default:
			bench_usage(stderr);
			goto out;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "usmc bench: unexpected argument '%s'\n", argv[optind]);
		goto out;
	}
	if (worker) {
		rc = worker_main(&wa);
		goto out;
	}
	if (!wl_set)
		for (i = 0; i < bench_nwls; i++)
			cfg->wl_on[i] = true;
	if (!tr_set)
		for (i = 0; i < TR_MAX; i++)
			cfg->tr_on[i] = true;
	if (!warm_set)
		cfg->warmup = MIN(MAX(cfg->duration / 5, 0.05), 1.0);
	if (cfg->tr_on[TR_USMC] && (e = find_lib(cfg->lib, sizeof(cfg->lib))) < 0) {
		fprintf(stderr, "usmc bench: cannot find libusmc.so (set USMC_LIB): %s\n",
			strerror(-e));
		goto out;
	}
	res = calloc(1, sizeof(*res));
	if (!res)
		goto out;
	for (i = 0; i < bench_nwls; i++)
		for (j = 0; j < TR_MAX; j++)
			for (r = 0; r < BENCH_MAX_REPS; r++)
				for (k = 0; k < BENCH_MAX_METRICS; k++)
					res->s[i][j][r][k] = NAN;
	b.res = res;
	e = bench_tmpdir_create(cfg->tmpbase ? cfg->tmpbase :
				access("/dev/shm", W_OK) ? "/tmp" : "/dev/shm", b.tmpdir,
				sizeof(b.tmpdir));
	if (e < 0) {
		fprintf(stderr, "usmc bench: %s: %s\n", b.tmpdir, strerror(-e));
		goto out;
	}
	bench_signals_init();
	bench_run(&b);
	if (bench_interrupted()) {
		fprintf(stderr, "\nusmc bench: interrupted\n");
		rc = 130;
		goto out_rm;
	}
	if (cfg->json)
		bench_print_json(stdout, cfg, res);
	else
		bench_print_table(cfg, res);
	if (cfg->plot && bench_plot(cfg, res, b.tmpdir) < 0)
		res->nfail++;
	rc = res->nfail ? 1 : 0;
out_rm:
	bench_rmtree(b.tmpdir);
out:
	free(res);
	free(extra);
	free(cfg);
	return rc;
}
