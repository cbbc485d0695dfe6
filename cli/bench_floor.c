// SPDX-License-Identifier: MIT
/*
 * bench_floor.c - this machine's limits for a shared-memory transport
 * (`usmc bench --worker floor`): no sockets, no system calls, no library.
 *
 * Two threads of one process, pinned like the client (main thread, --cpus C)
 * and the server (second thread, --cpus S):
 *
 *   floor_pp   cache-line ping-pong: the main thread stores a sequence
 *              number into one cache line, the other spins until it sees it
 *              and stores it into a second line, which the main thread spins
 *              on.  Every round trip is timed like the ping-pong workload
 *              times its messages (one clock read each); one-way latency is
 *              the median round trip / 2 (us), so a preempted thread on a
 *              busy machine does not move it.  No transport between two
 *              processes on these CPUs can beat it.
 *   pipe64k    cross-core copy pipe: the main thread memcpy()s W-byte chunks
 *   pipe1m     (W = 64 KB or 1 MB, like the stream workloads' writes) from its
 *              own W-byte buffer into a 4 MB ring (the size of a usmc DMB), the
 *              other thread memcpy()s whatever is there, up to 1 MB at a time
 *              (the stream receiver's read size), into its own buffer.  Like
 *              a usmc sender, the producer rewinds to the start of the ring
 *              whenever it finds the ring empty, so the hot part of the ring
 *              can stay in cache.  That is usmc's data path (sender copy in,
 *              receiver copy out, on two cores, pipelined) without wake-ups,
 *              locks or system calls.  The rate of bytes copied out is taken
 *              over 2 ms windows, and the 90th percentile window is the
 *              ceiling for streaming (GB/s): what the machine sustains while
 *              both threads actually run.
 *
 * When both threads share a CPU (--cpus 0,0, or one CPU) every wait yields
 * the CPU instead of spinning, so the numbers stay finite (and show the
 * cost of a context switch instead of a cache-line transfer).
 */
#include "bench.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FLOOR_LINE 64

struct floor_sh {
	_Alignas(FLOOR_LINE) _Atomic uint64_t ping;	/* main -> peer */
	_Alignas(FLOOR_LINE) _Atomic uint64_t pong;	/* peer -> main */
	_Alignas(FLOOR_LINE) _Atomic uint64_t prod;	/* ring cursor: written up to (main) */
	_Atomic uint64_t skip;				/* last rewind: data resumes here */
	_Alignas(FLOOR_LINE) _Atomic uint64_t cons;	/* ring cursor: read up to (peer) */
	_Atomic uint64_t got;				/* bytes copied out (peer) */
	_Alignas(FLOOR_LINE) _Atomic int stop;
	int mode;			/* 0 ping-pong, 1 copy pipe */
	int cpu;			/* the peer thread's CPU */
	bool yield;
	uint8_t *ring, *dst;
};

static inline void relax(const struct floor_sh *s)
{
	if (s->yield)
		sched_yield();
	else
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#else
		atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* The peer thread: echo ping into pong, or drain the ring. */
static void *floor_peer(void *arg)
{
	struct floor_sh *s = arg;
	uint64_t last = 0, v, c;

	bench_pin(s->cpu);
	if (s->mode == 0) {
		for (;;) {
			/* acquire pairs with the main thread's release store of ping */
			while ((v = atomic_load_explicit(&s->ping, memory_order_acquire)) == last)
				relax(s);
			if (v == UINT64_MAX)
				return NULL;
			atomic_store_explicit(&s->pong, v, memory_order_release);
			last = v;
		}
	}
	c = 0;
	for (;;) {
		uint64_t p, n, at;

		/* acquire pairs with the producer's release of prod: chunk bytes
		 * and the skip written before it are visible */
		while ((p = atomic_load_explicit(&s->prod, memory_order_acquire)) == c) {
			if (atomic_load_explicit(&s->stop, memory_order_relaxed))
				return NULL;
			relax(s);
		}
		v = atomic_load_explicit(&s->skip, memory_order_relaxed);
		if (v > c)
			c = v;		/* the producer rewound: nothing lies in between */
		at = c % BENCH_PIPE_RING;
		n = p - c;
		if (n > BENCH_READ_SIZE)
			n = BENCH_READ_SIZE;
		if (n > BENCH_PIPE_RING - at)
			n = BENCH_PIPE_RING - at;
		memcpy(s->dst, s->ring + at, n);
		c += n;
		atomic_store_explicit(&s->got, atomic_load_explicit(&s->got, memory_order_relaxed) + n,
				      memory_order_relaxed);
		/* release pairs with the producer's acquire of cons: space reusable */
		atomic_store_explicit(&s->cons, c, memory_order_release);
	}
}

/* Round trips over warm-up + duration; one-way p50 and mean in microseconds. */
static int floor_pingpong(struct floor_sh *s, const struct bench_wargs *a, double *p50,
			  double *mean)
{
	double t = bench_now(), t_prev = t, t_warm = t + a->warmup, t_stop = 0;
	struct bench_hist h;
	uint64_t i;

	if (bench_hist_init(&h))
		return -ENOMEM;
	for (i = 1;; i++) {
		atomic_store_explicit(&s->ping, i, memory_order_release);
		while (atomic_load_explicit(&s->pong, memory_order_acquire) != i)
			relax(s);
		t = bench_now();
		if (t_stop)
			bench_hist_add(&h, (t - t_prev) * 1e9);
		t_prev = t;
		if (!t_stop && t >= t_warm)
			t_stop = t + a->duration;
		else if (t_stop && t >= t_stop)
			break;
	}
	atomic_store_explicit(&s->ping, UINT64_MAX, memory_order_release);
	*p50 = bench_hist_quantile(&h, 0.5) / 2e3;
	*mean = h.sum / (double)h.n / 2e3;
	bench_hist_free(&h);
	return 0;
}

static int cmp_d(const void *x, const void *y)
{
	double u = *(const double *)x, v = *(const double *)y;

	return u < v ? -1 : u > v;
}

#define PIPE_WINDOW 0.002	/* seconds */

/* Producer side of the copy pipe with W-byte chunks; returns GB/s consumed
 * (90th percentile of the 2 ms windows), or a negative errno. */
static double floor_pipe(struct floor_sh *s, const struct bench_wargs *a, size_t wsize,
			 const uint8_t *src)
{
	size_t nwin = 0, cap = (size_t)(a->duration / PIPE_WINDOW) + 16;
	double t = bench_now(), t_warm = t + a->warmup, t_win = 0, t_stop = 0, r;
	double *win = malloc(cap * sizeof(*win));
	uint64_t p = 0, skip = 0, c, g, g_win = 0;

	if (!win)
		return -ENOMEM;
	for (;;) {
		/* acquire pairs with the consumer's release of cons */
		c = atomic_load_explicit(&s->cons, memory_order_acquire);
		if (c == p && p % BENCH_PIPE_RING) {
			/* Empty: rewind to the ring's start, like a usmc sender. */
			p = skip = (p / BENCH_PIPE_RING + 1) * BENCH_PIPE_RING;
			atomic_store_explicit(&s->skip, skip, memory_order_relaxed);
		}
		/* Bytes before the rewind point are consumed even if cons lags. */
		while (p - (c > skip ? c : skip) > BENCH_PIPE_RING - wsize) {
			relax(s);
			c = atomic_load_explicit(&s->cons, memory_order_acquire);
		}
		memcpy(s->ring + p % BENCH_PIPE_RING, src, wsize);
		p += wsize;
		atomic_store_explicit(&s->prod, p, memory_order_release);
		t = bench_now();
		if (t < t_warm || t - t_win < PIPE_WINDOW)
			continue;
		g = atomic_load_explicit(&s->got, memory_order_relaxed);
		if (t_stop && nwin < cap)
			win[nwin++] = (double)(g - g_win) / (t - t_win);
		if (!t_stop)
			t_stop = t + a->duration;
		else if (t >= t_stop)
			break;
		t_win = t;
		g_win = g;
	}
	atomic_store_explicit(&s->stop, 1, memory_order_relaxed);
	qsort(win, nwin, sizeof(*win), cmp_d);
	r = nwin ? win[(size_t)(0.9 * (double)(nwin - 1))] / 1e9 : 0;
	free(win);
	return r;
}

static int floor_run(struct floor_sh *s, const struct bench_wargs *a, int mode, size_t wsize,
		     const uint8_t *src, double *out, double *out2)
{
	pthread_t th;
	int rc;

	atomic_store(&s->ping, 0);
	atomic_store(&s->pong, 0);
	atomic_store(&s->prod, 0);
	atomic_store(&s->cons, 0);
	atomic_store(&s->skip, 0);
	atomic_store(&s->got, 0);
	atomic_store(&s->stop, 0);
	s->mode = mode;
	rc = pthread_create(&th, NULL, floor_peer, s);
	if (rc)
		return -rc;
	if (mode == 0)
		rc = floor_pingpong(s, a, out, out2);
	else if ((*out = floor_pipe(s, a, wsize, src)) < 0)
		rc = (int)*out;
	if (rc) {	/* let the peer go */
		atomic_store_explicit(&s->ping, UINT64_MAX, memory_order_release);
		atomic_store_explicit(&s->stop, 1, memory_order_relaxed);
	}
	pthread_join(th, NULL);
	return rc;
}

int bench_floor(const struct bench_wargs *a)
{
	struct floor_sh *s = aligned_alloc(FLOOR_LINE, sizeof(*s));
	uint8_t *src = aligned_alloc(4096, 1u << 20);
	double pp = 0, ppm = 0, p64 = 0, p1m = 0;
	int rc = -ENOMEM;

	if (!s || !src)
		goto out;
	memset(s, 0, sizeof(*s));
	s->ring = aligned_alloc(4096, BENCH_PIPE_RING);
	s->dst = aligned_alloc(4096, BENCH_READ_SIZE);
	if (!s->ring || !s->dst)
		goto out;
	/* Touch every page now so the warm-up measures copies, not faults. */
	memset(s->ring, 1, BENCH_PIPE_RING);
	memset(s->dst, 2, BENCH_READ_SIZE);
	memset(src, 3, 1u << 20);
	s->cpu = a->cpu2;
	s->yield = (a->cpu >= 0 && a->cpu == a->cpu2) || sysconf(_SC_NPROCESSORS_ONLN) < 2;
	if ((rc = bench_pin(a->cpu)) < 0)
		goto out;
	if ((rc = floor_run(s, a, 0, 0, src, &pp, &ppm)) < 0 ||
	    (rc = floor_run(s, a, 1, 64u << 10, src, &p64, NULL)) < 0 ||
	    (rc = floor_run(s, a, 1, 1u << 20, src, &p1m, NULL)) < 0)
		goto out;
	bench_report(a->report_fd, "ok floor_pp=%.5f floor_pp_mean=%.5f pipe64k=%.4f pipe1m=%.4f",
		     pp, ppm, p64, p1m);
out:
	if (rc < 0)
		bench_report(a->report_fd, "error floor: %s", strerror(-rc));
	if (s) {
		free(s->ring);
		free(s->dst);
	}
	free(s);
	free(src);
	return rc < 0;
}
