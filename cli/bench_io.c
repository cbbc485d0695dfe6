// SPDX-License-Identifier: MIT
/*
 * bench_io.c - what every bench worker needs: clocks, CPU accounting,
 * pinning, the report line, sockets for the three transports, whole-buffer
 * reads and writes, and the latency histogram.
 *
 * Workers use plain read(2)/write(2) on blocking or non-blocking sockets, as
 * an application would, so the usmc transport goes through libusmc's
 * interposed entry points exactly like TCP goes through the kernel.
 */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

double bench_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* User + system CPU of this process (all threads) in seconds. */
double bench_cpu_self(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

int bench_pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return 0;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		return -errno;
	return 0;
}

/* One line, one write(2): the parent never sees half a record. */
void bench_report(int fd, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	if (write(fd, line, (size_t)n) < 0)
		_exit(3);
}

/* ---- sockets ---- */

static int tcp_nodelay(int fd)
{
	int one = 1;

	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)))
		return -errno;
	return 0;
}

/* Listen on 127.0.0.1:0 (TCP, usmc) or a->path (UNIX); *port gets the port. */
int bench_listen(const struct bench_wargs *a, int *port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	socklen_t len = sizeof(sin);
	int fd, one = 1, rc;

	fd = socket(a->tr == TR_UNIX ? AF_UNIX : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (a->tr == TR_UNIX) {
		snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", a->path);
		unlink(a->path);
		if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)))
			goto err;
		*port = 0;
	} else {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)))
			goto err;
		if (getsockname(fd, (struct sockaddr *)&sin, &len))
			goto err;
		*port = ntohs(sin.sin_port);
	}
	if (listen(fd, 1024))
		goto err;
	return fd;
err:
	rc = -errno;
	close(fd);
	return rc;
}

/* A connected blocking socket; TCP_NODELAY on TCP when nodelay. */
int bench_connect(const struct bench_wargs *a, bool nodelay)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd, rc;

	fd = socket(a->tr == TR_UNIX ? AF_UNIX : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (a->tr == TR_UNIX) {
		snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", a->path);
		rc = connect(fd, (struct sockaddr *)&sun, sizeof(sun));
	} else {
		if (nodelay && (rc = tcp_nodelay(fd)) < 0)
			goto err_rc;
		sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		sin.sin_port = htons((uint16_t)a->port);
		rc = connect(fd, (struct sockaddr *)&sin, sizeof(sin));
	}
	if (rc) {
		rc = -errno;
		goto err_rc;
	}
	return fd;
err_rc:
	close(fd);
	return rc;
}

/* accept(2) with TCP_NODELAY on TCP when nodelay; flags as accept4. */
int bench_accept(const struct bench_wargs *a, int lfd, bool nodelay, int flags)
{
	int fd;

	do
		fd = accept4(lfd, NULL, NULL, flags | SOCK_CLOEXEC);
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		return -errno;
	if (a->tr != TR_UNIX && nodelay)
		tcp_nodelay(fd);
	return fd;
}

static int wait_fd(int fd, short ev)
{
	struct pollfd p = { .fd = fd, .events = ev };
	int n;

	do
		n = poll(&p, 1, 10000);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return n ? 0 : -ETIMEDOUT;
}

/* All n bytes, also on a non-blocking socket; 0 or -errno. */
int bench_write_full(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	int rc;

	while (n) {
		ssize_t w = write(fd, p, n);

		if (w > 0) {
			p += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			if ((rc = wait_fd(fd, POLLOUT)) < 0)
				return rc;
			continue;
		}
		return w < 0 ? -errno : -EIO;
	}
	return 0;
}

/* Exactly n bytes: 1 done, 0 EOF before the first byte, -EPIPE EOF within. */
int bench_read_full(int fd, void *buf, size_t n)
{
	char *p = buf;
	size_t got = 0;
	int rc;

	while (got < n) {
		ssize_t r = read(fd, p + got, n - got);

		if (r > 0) {
			got += (size_t)r;
			continue;
		}
		if (r == 0)
			return got ? -EPIPE : 0;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN) {
			if ((rc = wait_fd(fd, POLLIN)) < 0)
				return rc;
			continue;
		}
		return -errno;
	}
	return 1;
}

/* ---- latency histogram: 4 ns buckets up to 256 us, exact values beyond ---- */

#define HIST_NS		4.0
#define HIST_BUCKETS	65536

int bench_hist_init(struct bench_hist *h)
{
	memset(h, 0, sizeof(*h));
	h->b = calloc(HIST_BUCKETS, sizeof(*h->b));
	h->cap = 1 << 16;
	h->over = malloc(h->cap * sizeof(*h->over));
	if (!h->b || !h->over) {
		bench_hist_free(h);
		return -ENOMEM;
	}
	return 0;
}

void bench_hist_free(struct bench_hist *h)
{
	free(h->b);
	free(h->over);
	h->b = NULL;
	h->over = NULL;
}

void bench_hist_add(struct bench_hist *h, double ns)
{
	size_t i = (size_t)(ns / HIST_NS);

	h->n++;
	h->sum += ns;
	if (i < HIST_BUCKETS) {
		h->b[i]++;
		return;
	}
	if (h->nover == h->cap) {
		double *o = realloc(h->over, 2 * h->cap * sizeof(*o));

		if (!o) {		/* keep the count; the tail stays approximate */
			h->b[HIST_BUCKETS - 1]++;
			return;
		}
		h->over = o;
		h->cap *= 2;
	}
	h->over[h->nover++] = ns;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

/* The q-quantile (0 < q <= 1) by rank ceil(q*n); call after the last add. */
double bench_hist_quantile(struct bench_hist *h, double q)
{
	uint64_t rank = (uint64_t)ceil(q * (double)h->n), seen = 0;
	size_t i;

	if (!h->n)
		return NAN;
	if (rank < 1)
		rank = 1;
	for (i = 0; i < HIST_BUCKETS; i++) {
		seen += h->b[i];
		if (seen >= rank)
			return ((double)i + 0.5) * HIST_NS;
	}
	if (!h->sorted) {
		qsort(h->over, h->nover, sizeof(*h->over), cmp_double);
		h->sorted = true;
	}
	i = (size_t)(rank - seen - 1);
	return h->over[i < h->nover ? i : h->nover - 1];
}
