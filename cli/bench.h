/* SPDX-License-Identifier: MIT */
/*
 * bench.h (cli) - `usmc bench`: what the parent, the workers and the report
 * share.
 *
 * The parent (bench.c) runs every measurement as two processes of this very
 * binary, `usmc bench --worker server|client ...` (bench_work.c), started
 * by bench_proc.c with or without libusmc preloaded.  Workers report one
 * line of key=value pairs on an inherited pipe.  The machine's own limits
 * (cache-line ping-pong, cross-core copy pipe) come from a third worker
 * kind, `--worker floor` (bench_floor.c).  bench_report.c turns samples into
 * the terminal table, the JSON object and the plot.
 */
#ifndef USMC_BENCH_H
#define USMC_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum bench_tr { TR_TCP, TR_UNIX, TR_USMC, TR_MAX };

enum bench_kind {
	WK_PINGPONG,	/* one message each way, RTT/2 per message */
	WK_RR,		/* 1 KB request, 1 KB response, N connections over epoll */
	WK_STREAM,	/* one-way bulk writes, 1 MB reads */
	WK_MSG,		/* one-way fixed-size messages, exact-size reads */
	WK_CONN,	/* connect, one request/response, close */
	WK_FLOOR,	/* the machine's limits, no sockets at all */
};

struct bench_wl {
	const char *name;	/* "pp14": what --workloads and the JSON use */
	char group;		/* 'a'..'e' as in the issue, 'f' for the floor */
	enum bench_kind kind;
	uint32_t size;		/* message, request or write size in bytes */
	uint32_t conns;		/* concurrent connections (RR) */
	const char *desc;
};

/* A metric of a workload; each is one row of the table. */
struct bench_metric {
	const char *key;	/* JSON key, unit in the name */
	const char *label;	/* table label */
	bool lower_better;
	bool cpu;		/* CPU cost per operation */
};

#define BENCH_MAX_METRICS	5
#define BENCH_MAX_REPS		100
#define BENCH_REQ_SIZE		1024	/* RR and connection-setup payloads */
#define BENCH_READ_SIZE		(1u << 20)	/* stream receiver's read size */
#define BENCH_PIPE_RING		(4u << 20)	/* floor copy pipe = USMC_RING_SIZE default */

extern const struct bench_wl bench_wls[];
extern const unsigned int bench_nwls;
extern const char *const bench_tr_name[TR_MAX];	/* "tcp", "unix", "usmc" */
extern const char *const bench_tr_label[TR_MAX];	/* "TCP", "UNIX", "usmc" */

/* Metrics of a workload kind; returns how many (at most BENCH_MAX_METRICS). */
unsigned int bench_metrics(enum bench_kind kind, const struct bench_metric **out);
int bench_wl_find(const char *name);

/* ---- worker side (bench_work.c, bench_floor.c) ---- */

struct bench_wargs {
	char role;		/* 's' server, 'c' client, 'f' floor */
	int wl;			/* index in bench_wls */
	int tr;			/* enum bench_tr */
	char path[108];		/* UNIX socket path */
	int port;		/* TCP port (client) */
	double duration, warmup;	/* seconds */
	int cpu, cpu2;		/* pin to (-1: don't); floor: cpu2 = second thread */
	int report_fd;		/* the pipe to the parent */
};

/* Run one worker; its result (or "error ...") is one line on report_fd. */
int bench_worker(const struct bench_wargs *a);
int bench_floor(const struct bench_wargs *a);

/* Worker helpers shared by bench_work.c and bench_floor.c. */
double bench_now(void);				/* CLOCK_MONOTONIC seconds */
double bench_cpu_self(void);			/* getrusage user+system seconds */
int bench_pin(int cpu);				/* sched_setaffinity; -1 = no-op */
void bench_report(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Sockets of a->tr (bench_io.c): fds, or -errno. */
int bench_listen(const struct bench_wargs *a, int *port);
int bench_connect(const struct bench_wargs *a, bool nodelay);
int bench_accept(const struct bench_wargs *a, int lfd, bool nodelay, int flags);
int bench_write_full(int fd, const void *buf, size_t n);
int bench_read_full(int fd, void *buf, size_t n);

/* Round-trip times in ns: fixed 4 ns buckets below 256 us, exact above. */
struct bench_hist {
	uint32_t *b;
	double *over;
	size_t nover, cap;
	uint64_t n;
	double sum;
	bool sorted;
};
int bench_hist_init(struct bench_hist *h);
void bench_hist_free(struct bench_hist *h);
void bench_hist_add(struct bench_hist *h, double ns);
double bench_hist_quantile(struct bench_hist *h, double q);

/* ---- parent side ---- */

/* One worker's line, parsed: known keys only. */
enum bench_key {
	K_OPS, K_TOTAL, K_SECS, K_CPU, K_MEAN, K_P50, K_P99, K_P999, K_PORT,
	K_FLOOR_PP, K_FLOOR_PP_MEAN, K_PIPE_64K, K_PIPE_1M, K_DUP, K_STALE, K_MAX
};
struct bench_rec {
	double v[K_MAX];
	bool has[K_MAX];
	char error[256];	/* non-empty: the worker said "error ..." */
};
int bench_parse_rec(const char *line, struct bench_rec *r);

struct bench_proc {
	int pid;
	int fd;			/* read end of the report pipe (or stdout pipe) */
	char buf[4096];
	size_t len;
	bool eof;
};

struct bench_env {
	const char *lib;	/* libusmc.so for the usmc transport */
	const char *rundir;	/* USMC_RUNDIR for the usmc transport */
	const char *busy_poll;	/* USMC_BUSY_POLL or NULL */
	char **extra;		/* --env K=V entries, NULL-terminated */
};

/* Start `/proc/self/exe ARGV...`; usmc: preload lib with rundir, else no
 * preload.  capture_stdout: the pipe carries stdout instead of a report fd
 * (whose number is appended to argv as "--report-fd N" otherwise). */
int bench_spawn(struct bench_proc *p, char **argv, const struct bench_env *env, int tr,
		bool capture_stdout);
/* Next line from p before deadline (bench_now() seconds): 1 line, 0 EOF,
 * -ETIMEDOUT, -EINTR (bench interrupted) or -errno. */
int bench_read_line(struct bench_proc *p, char *line, size_t len, double deadline);
/* Wait for exit before deadline, else SIGKILL; returns the wait status or -errno. */
int bench_reap(struct bench_proc *p, double deadline);
void bench_kill(struct bench_proc *p);
void bench_signals_init(void);
bool bench_interrupted(void);

/* usmc counters of a finished run (`usmc stat --json` on its rundir). */
struct bench_check {
	bool ran, ok;
	uint64_t smc_conns, tcp_conns, handshake_errors, tx_bytes, rx_bytes;
	uint64_t tx_calls, rx_calls, tx_fast, rx_fast, doorbells, sleeps, spin_hits;	/* where waits went */
	char fallback[256], aborts[256];	/* the JSON objects' contents */
};
int bench_usmc_check(const char *rundir, struct bench_check *c);
int bench_rmtree(const char *path);
/* base/usmc-bench-XXXXXX, locked while we live; removes dead benches' ones. */
int bench_tmpdir_create(const char *base, char *dir, size_t len);

/* ---- results and report (bench_report.c) ---- */

struct bench_cfg {
	unsigned int reps;
	double duration, warmup;
	int cpu_client, cpu_server;
	bool tr_on[TR_MAX];
	bool wl_on[16];
	bool json;
	const char *plot;
	const char *busy_poll;
	const char *tmpbase;		/* where run directories go (--tmpdir) */
	char **extra_env;
	char lib[4096];
};

struct bench_results {
	/* [workload][transport][rep][metric]; NaN = no sample */
	double s[16][TR_MAX][BENCH_MAX_REPS][BENCH_MAX_METRICS];
	struct bench_check check[16][BENCH_MAX_REPS];	/* usmc runs */
	char fail[64][200];	/* what went wrong, for the report */
	unsigned int nfail;
	char note[16][200];	/* oddities that do not invalidate a number */
	unsigned int nnote;
};

void bench_print_table(const struct bench_cfg *c, const struct bench_results *r);
void bench_print_json(FILE *f, const struct bench_cfg *c, const struct bench_results *r);
int bench_plot(const struct bench_cfg *c, const struct bench_results *r, const char *tmpdir);

#endif
