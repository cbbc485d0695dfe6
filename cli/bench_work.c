// SPDX-License-Identifier: MIT
/*
 * bench_work.c - the workloads, client and server side.
 *
 * Every client runs warm-up, then a measured window of --duration seconds:
 *   ops    operations completed inside the window (round trips, transactions,
 *          bytes, messages, connections)
 *   secs   window length, from its start to the completion of the last op
 *          (for one-way workloads: until the receiver confirmed every byte)
 *   cpu    this process's user+system CPU (getrusage) over the window
 *   total  operations over the whole run, warm-up included
 * A server reports total (what it actually received and checked) and its CPU
 * from listen to exit; the parent requires client total == server total and
 * charges CPU per op as client cpu/ops + server cpu/total.
 *
 * Payloads are checked so a broken transport cannot report a rate: echoes
 * compare every byte, requests and responses carry a sequence number per
 * connection and a fixed body compared with memcmp, streams carry each
 * byte's offset within the sender's buffer (sampled twice per read),
 * messages carry their sequence number.  The RR workers also count
 * epoll_wait results the kernel would never give (dup: a connection twice
 * in one call; stale: an event after EPOLL_CTL_DEL and close).
 *
 * TCP_NODELAY is set on TCP sockets of the request/response workloads
 * (ping-pong, RR, connection setup), as sockperf and netperf do; the one-way
 * workloads keep Nagle, as ipc-bench and iperf do.
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAGIC_REQ	0x51455242u	/* "BREQ" */
#define MAGIC_RESP	0x53455242u	/* "BRES" */
#define MAGIC_QUIT	0x54495551u	/* "QUIT": connection-setup server, stop */

/* Request/response header; the rest of the message is a fixed body. */
struct msg_hdr {
	uint64_t seq;		/* per connection, from 0 */
	uint32_t conn;		/* client's connection index */
	uint32_t magic;
};

struct wctx {
	const struct bench_wargs *a;
	const struct bench_wl *wl;
	double t_warm_end, t0, t_stop, cpu0;
	uint64_t ops0;
	bool measuring;
	uint8_t req_tpl[BENCH_REQ_SIZE], resp_tpl[BENCH_REQ_SIZE];
};

static int fail(struct wctx *w, const char *what, int rc)
{
	bench_report(w->a->report_fd, "error %s %s: %s: %s", w->wl->name,
		     w->a->role == 's' ? "server" : "client", what,
		     rc ? strerror(rc < 0 ? -rc : rc) : "bad data");
	return 1;
}

/*
 * Advance the client's phase at time t with ops done; true once the window
 * is over.  The window starts at the first op completed after warm-up.
 */
static bool phase(struct wctx *w, double t, uint64_t ops)
{
	if (w->measuring)
		return t >= w->t_stop;
	if (t < w->t_warm_end)
		return false;
	w->measuring = true;
	w->ops0 = ops;
	w->cpu0 = bench_cpu_self();
	w->t0 = bench_now();
	w->t_stop = w->t0 + w->a->duration;
	return false;
}

/* Client result; extra is appended (latency fields). */
static int client_done(struct wctx *w, uint64_t total, const char *extra)
{
	double t1 = bench_now(), cpu = bench_cpu_self() - w->cpu0;

	if (!w->measuring)
		return fail(w, "finished before the window started", -EIO);
	bench_report(w->a->report_fd, "ok ops=%llu total=%llu secs=%.9f cpu=%.9f%s",
		     (unsigned long long)(total - w->ops0), (unsigned long long)total,
		     t1 - w->t0, cpu, extra ? extra : "");
	return 0;
}

static int server_done(struct wctx *w, uint64_t total)
{
	bench_report(w->a->report_fd, "ok total=%llu cpu=%.9f", (unsigned long long)total,
		     bench_cpu_self() - w->cpu0);
	return 0;
}

static void fill_tpl(uint8_t *t, size_t n, unsigned int mul, unsigned int add)
{
	size_t i;

	for (i = 0; i < n; i++)
		t[i] = (uint8_t)(i * mul + add);
}

static void make_msg(uint8_t *buf, const uint8_t *tpl, size_t n, uint64_t seq, uint32_t conn,
		     uint32_t magic)
{
	struct msg_hdr h = { .seq = seq, .conn = conn, .magic = magic };

	memcpy(buf + sizeof(h), tpl + sizeof(h), n - sizeof(h));
	memcpy(buf, &h, sizeof(h));
}

static bool msg_ok(const uint8_t *buf, const uint8_t *tpl, size_t n, uint64_t seq, uint32_t magic)
{
	struct msg_hdr h;

	memcpy(&h, buf, sizeof(h));
	return h.seq == seq && h.magic == magic &&
	       !memcmp(buf + sizeof(h), tpl + sizeof(h), n - sizeof(h));
}

/* ---- (a) ping-pong: the server echoes, the client times each round trip ---- */

static int pp_server(struct wctx *w, int lfd)
{
	size_t n = w->wl->size;
	uint64_t msgs = 0;
	uint8_t buf[BENCH_REQ_SIZE];
	int fd, rc;

	fd = bench_accept(w->a, lfd, true, 0);
	if (fd < 0)
		return fail(w, "accept", fd);
	while ((rc = bench_read_full(fd, buf, n)) > 0) {
		if ((rc = bench_write_full(fd, buf, n)) < 0)
			break;
		msgs++;
	}
	close(fd);
	return rc < 0 ? fail(w, "echo", rc) : server_done(w, msgs);
}

static int pp_client(struct wctx *w)
{
	size_t n = w->wl->size;
	uint8_t tx[BENCH_REQ_SIZE], rx[BENCH_REQ_SIZE];
	struct bench_hist h;
	char extra[200];
	double t, t_prev;
	uint64_t seq = 0;
	int fd, rc;

	if (bench_hist_init(&h))
		return fail(w, "histogram", -ENOMEM);
	fd = bench_connect(w->a, true);
	if (fd < 0) {
		rc = fail(w, "connect", fd);
		goto out;
	}
	fill_tpl(tx, n, 7, 1);
	t_prev = bench_now();
	for (;;) {
		bool was = w->measuring;

		memcpy(tx, &seq, sizeof(seq) < n ? sizeof(seq) : n);
		if ((rc = bench_write_full(fd, tx, n)) < 0 ||
		    (rc = bench_read_full(fd, rx, n)) <= 0) {
			rc = fail(w, "round trip", rc ? rc : -EPIPE);
			goto out_fd;
		}
		if (memcmp(tx, rx, n)) {
			rc = fail(w, "echo differs", 0);
			goto out_fd;
		}
		seq++;
		t = bench_now();
		if (was)
			bench_hist_add(&h, (t - t_prev) * 1e9);
		if (phase(w, t, seq))
			break;
		t_prev = was == w->measuring ? t : bench_now();
	}
	/* One-way latency = RTT / 2, in microseconds. */
	snprintf(extra, sizeof(extra), " mean=%.4f p50=%.4f p99=%.4f p999=%.4f",
		 h.sum / (double)h.n / 2e3, bench_hist_quantile(&h, 0.5) / 2e3,
		 bench_hist_quantile(&h, 0.99) / 2e3, bench_hist_quantile(&h, 0.999) / 2e3);
	rc = client_done(w, seq, extra);
out_fd:
	close(fd);
out:
	bench_hist_free(&h);
	return rc;
}

/* ---- (b) request/response over N connections, both sides on epoll ---- */

struct rr_conn {
	int fd;
	uint32_t got;		/* bytes of the current message so far */
	uint64_t seq;		/* next request expected / to send */
	uint64_t batch;		/* last epoll_wait call that reported it */
	uint8_t buf[BENCH_REQ_SIZE];
};

static int rr_server(struct wctx *w, int lfd)
{
	uint32_t want = w->wl->conns, accepted = 0, closed = 0, i, idx;
	struct rr_conn *c = calloc(want, sizeof(*c));
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = UINT32_MAX }, evs[64];
	uint8_t resp[BENCH_REQ_SIZE];
	uint64_t txn = 0, batch = 0, dup = 0, stale = 0;
	int ep = -1, rc = 0, n, k;

	if (!c)
		return fail(w, "memory", -ENOMEM);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0 || fcntl(lfd, F_SETFL, O_NONBLOCK) || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev)) {
		rc = fail(w, "epoll", -errno);
		goto out;
	}
	while (closed < want) {
		batch++;
		n = epoll_wait(ep, evs, 64, 10000);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = fail(w, "epoll_wait", n ? -errno : -ETIMEDOUT);
			goto out;
		}
		for (k = 0; k < n; k++) {
			struct rr_conn *cc;
			ssize_t r;

			if (evs[k].data.u32 == UINT32_MAX) {
				int fd;

				while ((fd = bench_accept(w->a, lfd, true, SOCK_NONBLOCK)) >= 0) {
					if (accepted == want) {
						close(fd);
						rc = fail(w, "more connections than expected", -EPROTO);
						goto out;
					}
					c[accepted].fd = fd;
					ev.data.u32 = accepted++;
					if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)) {
						rc = fail(w, "epoll_ctl", -errno);
						goto out;
					}
				}
				if (fd != -EAGAIN) {
					rc = fail(w, "accept", fd);
					goto out;
				}
				continue;
			}
			cc = &c[evs[k].data.u32];
			/* The kernel reports a descriptor at most once per call and
			 * never after EPOLL_CTL_DEL; count it when that is not so. */
			dup += cc->batch == batch;
			cc->batch = batch;
			if (cc->fd < 0) {
				stale++;
				continue;
			}
			r = read(cc->fd, cc->buf + cc->got, BENCH_REQ_SIZE - cc->got);
			if (r < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (r < 0) {
				rc = fail(w, "read", -errno);
				goto out;
			}
			if (r == 0) {
				if (cc->got) {
					rc = fail(w, "EOF inside a request", -EPIPE);
					goto out;
				}
				epoll_ctl(ep, EPOLL_CTL_DEL, cc->fd, NULL);
				close(cc->fd);
				cc->fd = -1;
				closed++;
				continue;
			}
			cc->got += (uint32_t)r;
			if (cc->got < BENCH_REQ_SIZE)
				continue;
			if (!msg_ok(cc->buf, w->req_tpl, BENCH_REQ_SIZE, cc->seq, MAGIC_REQ)) {
				rc = fail(w, "request differs", 0);
				goto out;
			}
			memcpy(&idx, cc->buf + 8, sizeof(idx));	/* echo the client's index */
			make_msg(resp, w->resp_tpl, BENCH_REQ_SIZE, cc->seq, idx, MAGIC_RESP);
			if ((rc = bench_write_full(cc->fd, resp, BENCH_REQ_SIZE)) < 0) {
				rc = fail(w, "write", rc);
				goto out;
			}
			cc->got = 0;
			cc->seq++;
			txn++;
		}
	}
	bench_report(w->a->report_fd, "ok total=%llu cpu=%.9f dup=%llu stale=%llu",
		     (unsigned long long)txn, bench_cpu_self() - w->cpu0, (unsigned long long)dup,
		     (unsigned long long)stale);
	rc = 0;
out:
	for (i = 0; i < accepted; i++)
		if (c[i].fd >= 0)
			close(c[i].fd);
	if (ep >= 0)
		close(ep);
	free(c);
	return rc;
}

static int rr_send(struct wctx *w, struct rr_conn *c, uint32_t idx)
{
	uint8_t req[BENCH_REQ_SIZE];

	make_msg(req, w->req_tpl, BENCH_REQ_SIZE, c->seq, idx, MAGIC_REQ);
	return bench_write_full(c->fd, req, BENCH_REQ_SIZE);
}

static int rr_client(struct wctx *w)
{
	uint32_t nc = w->wl->conns, busy = 0, i;
	struct rr_conn *c = calloc(nc, sizeof(*c));
	struct epoll_event ev = { .events = EPOLLIN }, evs[64];
	bool stopping = false;
	uint64_t txn = 0, batch = 0, dup = 0;
	char extra[64];
	int ep, rc = 0, n, k;

	if (!c)
		return fail(w, "memory", -ENOMEM);
	for (i = 0; i < nc; i++)
		c[i].fd = -1;
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0) {
		rc = fail(w, "epoll", -errno);
		goto out;
	}
	for (i = 0; i < nc; i++) {
		c[i].fd = bench_connect(w->a, true);
		if (c[i].fd < 0) {
			rc = fail(w, "connect", c[i].fd);
			goto out;
		}
		ev.data.u32 = i;
		if (fcntl(c[i].fd, F_SETFL, O_NONBLOCK) ||
		    epoll_ctl(ep, EPOLL_CTL_ADD, c[i].fd, &ev)) {
			rc = fail(w, "epoll_ctl", -errno);
			goto out;
		}
	}
	for (i = 0; i < nc; i++, busy++)
		if ((rc = rr_send(w, &c[i], i)) < 0) {
			rc = fail(w, "write", rc);
			goto out;
		}
	while (busy) {
		n = epoll_wait(ep, evs, 64, 10000);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = fail(w, "epoll_wait", n ? -errno : -ETIMEDOUT);
			goto out;
		}
		batch++;
		for (k = 0; k < n; k++) {
			struct rr_conn *cc = &c[evs[k].data.u32];
			ssize_t r;

			dup += cc->batch == batch;
			cc->batch = batch;
			r = read(cc->fd, cc->buf + cc->got, BENCH_REQ_SIZE - cc->got);

			if (r < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (r <= 0) {
				rc = fail(w, "read", r ? -errno : -EPIPE);
				goto out;
			}
			cc->got += (uint32_t)r;
			if (cc->got < BENCH_REQ_SIZE)
				continue;
			if (!msg_ok(cc->buf, w->resp_tpl, BENCH_REQ_SIZE, cc->seq, MAGIC_RESP) ||
			    memcmp(cc->buf + 8, &evs[k].data.u32, 4)) {
				rc = fail(w, "response differs", 0);
				goto out;
			}
			cc->got = 0;
			cc->seq++;
			txn++;
			if (!stopping)
				stopping = phase(w, bench_now(), txn);
			if (stopping) {
				busy--;
				continue;
			}
			if ((rc = rr_send(w, cc, evs[k].data.u32)) < 0) {
				rc = fail(w, "write", rc);
				goto out;
			}
		}
	}
	snprintf(extra, sizeof(extra), " dup=%llu", (unsigned long long)dup);
	rc = client_done(w, txn, extra);
out:
	for (i = 0; i < nc; i++)
		if (c[i].fd >= 0)
			close(c[i].fd);
	if (ep >= 0)
		close(ep);
	free(c);
	return rc;
}

/* ---- (c) streaming and (d) one-way messages: client sends, server receives ---- */

/* Word j of the sender's buffer holds its byte offset 8j; check the first
 * and last whole words of a read that starts at stream offset off. */
static bool stream_ok(const uint8_t *buf, uint64_t off, size_t n, uint64_t wsize)
{
	uint64_t a = (off + 7) & ~7ULL, b = ((off + n) & ~7ULL) - 8, v;

	if (a + 8 > off + n)
		return true;
	memcpy(&v, buf + (a - off), 8);
	if (v != a % wsize)
		return false;
	memcpy(&v, buf + (b - off), 8);
	return v == b % wsize;
}

static int oneway_server(struct wctx *w, int lfd)
{
	bool msg = w->wl->kind == WK_MSG;
	size_t rsize = msg ? w->wl->size : BENCH_READ_SIZE, got = 0;
	uint64_t bytes = 0, msgs = 0, seq;
	uint8_t *buf = aligned_alloc(4096, BENCH_READ_SIZE), tpl[BENCH_REQ_SIZE];
	int fd, rc;

	if (!buf)
		return fail(w, "memory", -ENOMEM);
	fill_tpl(tpl, w->wl->size < sizeof(tpl) ? w->wl->size : sizeof(tpl), 11, 5);
	fd = bench_accept(w->a, lfd, false, 0);
	if (fd < 0) {
		rc = fail(w, "accept", fd);
		goto out;
	}
	for (;;) {
		ssize_t r = read(fd, buf + got, rsize - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = fail(w, "read", -errno);
			goto out_fd;
		}
		if (r == 0)
			break;
		if (!msg) {
			if (!stream_ok(buf, bytes, (size_t)r, w->wl->size)) {
				rc = fail(w, "stream data differs", 0);
				goto out_fd;
			}
			bytes += (uint64_t)r;
			continue;
		}
		/* Exactly one message per completed read: check its number,
		 * and the whole body of every 1024th. */
		got += (size_t)r;
		if (got < rsize)
			continue;
		memcpy(&seq, buf, sizeof(seq));
		if (seq != msgs || (!(msgs & 1023) && memcmp(buf + 8, tpl + 8, rsize - 8))) {
			rc = fail(w, "message differs", 0);
			goto out_fd;
		}
		msgs++;
		got = 0;
	}
	if (got) {
		rc = fail(w, "EOF inside a message", -EPIPE);
		goto out_fd;
	}
	/* Tell the sender what arrived: its clock stops on this answer. */
	bytes = msg ? msgs : bytes;
	if ((rc = bench_write_full(fd, &bytes, sizeof(bytes))) < 0) {
		rc = fail(w, "write", rc);
		goto out_fd;
	}
	rc = server_done(w, bytes);
out_fd:
	close(fd);
out:
	free(buf);
	return rc;
}

static int oneway_client(struct wctx *w)
{
	bool msg = w->wl->kind == WK_MSG;
	size_t wsize = w->wl->size, off = 0, j;
	uint8_t *buf = aligned_alloc(4096, (wsize + 4095) & ~(size_t)4095);
	uint64_t done = 0, echo = 0;
	int fd, rc;

	if (!buf)
		return fail(w, "memory", -ENOMEM);
	if (msg)
		fill_tpl(buf, wsize, 11, 5);
	else
		for (j = 0; j < wsize / 8; j++)
			((uint64_t *)buf)[j] = j * 8;
	fd = bench_connect(w->a, false);
	if (fd < 0) {
		rc = fail(w, "connect", fd);
		goto out;
	}
	for (;;) {
		ssize_t r;

		if (msg) {
			memcpy(buf, &done, sizeof(done));
			if ((rc = bench_write_full(fd, buf, wsize)) < 0) {
				rc = fail(w, "write", rc);
				goto out_fd;
			}
			/* Read the clock every 64 messages only. */
			if (!(++done & 63) && phase(w, bench_now(), done))
				break;
			continue;
		}
		r = write(fd, buf + off, wsize - off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			rc = fail(w, "write", r ? -errno : -EIO);
			goto out_fd;
		}
		off = (off + (size_t)r) % wsize;
		done += (uint64_t)r;
		if (phase(w, bench_now(), done))
			break;
	}
	rc = shutdown(fd, SHUT_WR) ? -errno : bench_read_full(fd, &echo, sizeof(echo));
	if (rc <= 0) {
		rc = fail(w, "waiting for the receiver's count", rc ? rc : -EPIPE);
		goto out_fd;
	}
	if (echo != done) {
		bench_report(w->a->report_fd, "error %s client: receiver got %llu, sent %llu",
			     w->wl->name, (unsigned long long)echo, (unsigned long long)done);
		rc = 1;
		goto out_fd;
	}
	rc = client_done(w, done, NULL);
out_fd:
	close(fd);
out:
	free(buf);
	return rc;
}

/* ---- (e) connection setup: connect, one 1 KB request/response, close ---- */

static int conn_server(struct wctx *w, int lfd)
{
	uint8_t buf[BENCH_REQ_SIZE];
	uint64_t served = 0;
	struct msg_hdr h;
	int fd, rc;

	for (;;) {
		fd = bench_accept(w->a, lfd, true, 0);
		if (fd < 0)
			return fail(w, "accept", fd);
		rc = bench_read_full(fd, buf, BENCH_REQ_SIZE);
		if (rc <= 0) {
			close(fd);
			return fail(w, "read request", rc ? rc : -EPIPE);
		}
		memcpy(&h, buf, sizeof(h));
		if (h.magic == MAGIC_QUIT) {
			close(fd);
			return server_done(w, served);
		}
		if (!msg_ok(buf, w->req_tpl, BENCH_REQ_SIZE, served, MAGIC_REQ)) {
			close(fd);
			return fail(w, "request differs", 0);
		}
		make_msg(buf, w->resp_tpl, BENCH_REQ_SIZE, served, 0, MAGIC_RESP);
		rc = bench_write_full(fd, buf, BENCH_REQ_SIZE);
		close(fd);		/* the server closes first, like HTTP/1.0 */
		if (rc < 0)
			return fail(w, "write", rc);
		served++;
	}
}

static int conn_client(struct wctx *w)
{
	uint8_t buf[BENCH_REQ_SIZE];
	uint64_t n = 0;
	int fd, rc;

	for (;;) {
		fd = bench_connect(w->a, true);
		if (fd < 0)
			return fail(w, "connect", fd);
		make_msg(buf, w->req_tpl, BENCH_REQ_SIZE, n, 0, MAGIC_REQ);
		rc = bench_write_full(fd, buf, BENCH_REQ_SIZE);
		if (rc < 0) {
			close(fd);
			return fail(w, "write request", rc);
		}
		rc = bench_read_full(fd, buf, BENCH_REQ_SIZE);
		close(fd);
		if (rc <= 0) {
			char what[128];

			snprintf(what, sizeof(what), "connection %llu: read response%s",
				 (unsigned long long)n, rc == 0 ? ": EOF before any byte" :
				 rc == -EPIPE ? ": EOF within the response" : "");
			return fail(w, what, rc ? rc : -EPIPE);
		}
		if (!msg_ok(buf, w->resp_tpl, BENCH_REQ_SIZE, n, MAGIC_RESP))
			return fail(w, "response differs", 0);
		if (phase(w, bench_now(), ++n))
			break;
	}
	rc = client_done(w, n, NULL);
	/* Stop the server: a request it recognises, answered by EOF. */
	fd = bench_connect(w->a, true);
	if (fd < 0)
		return fail(w, "connect (quit)", fd);
	make_msg(buf, w->req_tpl, BENCH_REQ_SIZE, n, 0, MAGIC_QUIT);
	if (bench_write_full(fd, buf, BENCH_REQ_SIZE) == 0)
		bench_read_full(fd, buf, BENCH_REQ_SIZE);
	close(fd);
	return rc;
}

/* ---- dispatch ---- */

int bench_worker(const struct bench_wargs *a)
{
	struct wctx *w = calloc(1, sizeof(*w));
	int lfd, port, rc;

	if (!w)
		return 1;
	w->a = a;
	w->wl = &bench_wls[a->wl];
	fill_tpl(w->req_tpl, BENCH_REQ_SIZE, 13, 7);
	fill_tpl(w->resp_tpl, BENCH_REQ_SIZE, 29, 3);
	signal(SIGPIPE, SIG_IGN);
	if ((rc = bench_pin(a->cpu)) < 0) {
		rc = fail(w, "sched_setaffinity", rc);
		goto out;
	}
	if (a->role == 'c') {
		w->t_warm_end = bench_now() + a->warmup;
		switch (w->wl->kind) {
		case WK_PINGPONG: rc = pp_client(w); break;
		case WK_RR: rc = rr_client(w); break;
		case WK_STREAM:
		case WK_MSG: rc = oneway_client(w); break;
		case WK_CONN: rc = conn_client(w); break;
		default: rc = fail(w, "workload", -EINVAL); break;
		}
		goto out;
	}
	lfd = bench_listen(a, &port);
	if (lfd < 0) {
		rc = fail(w, "listen", lfd);
		goto out;
	}
	bench_report(a->report_fd, "ready port=%d", port);
	w->cpu0 = bench_cpu_self();
	switch (w->wl->kind) {
	case WK_PINGPONG: rc = pp_server(w, lfd); break;
	case WK_RR: rc = rr_server(w, lfd); break;
	case WK_STREAM:
	case WK_MSG: rc = oneway_server(w, lfd); break;
	case WK_CONN: rc = conn_server(w, lfd); break;
	default: rc = fail(w, "workload", -EINVAL); break;
	}
	close(lfd);
out:
	free(w);
	return rc;
}
