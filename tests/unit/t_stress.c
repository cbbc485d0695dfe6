// SPDX-License-Identifier: MIT
/*
 * t_stress.c - many connections, both directions, every byte verified.
 *
 * A server process and a client process (forked); the client runs THREADS
 * threads that each open CONNS connections at once.  Every connection
 * carries one stream each way; byte k of the stream of connection i in
 * direction d is t_pat(2i + d, k), stream lengths are derived from the seed
 * and i, and I/O sizes are random (1 byte .. 128 KiB, mostly small).
 * Connections cycle through four ways of doing I/O, the same on both ends:
 *   0, 1  blocking, one sender and one receiver thread on the same fd
 *   2     non-blocking, epoll level-triggered (one call per event)
 *   3     non-blocking, epoll edge-triggered (drain to EAGAIN per event)
 * Each end sends its stream, shuts down SHUT_WR, reads the other stream to
 * EOF (checking each byte) and closes.  At the end the client checks with
 * `usmc stat` that every endpoint was on shared memory, that nothing fell
 * back or was reset, and that the rings carried the bytes.
 *
 * usage: t_stress [THREADS [CONNS [BYTES [SEED]]]]
 *   BYTES: largest stream per direction (streams are BYTES/2..BYTES).
 *   Defaults: 4 8, 8 MiB (ASan 4 MiB, TSan 2 MiB), fixed seed.
 */
#include "t_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/epoll.h>

/* Streams longer than a ring (4 MiB by default) so that writers fill it,
 * block and are woken; smaller under the sanitizers. */
#if defined(__SANITIZE_THREAD__)
#define DEF_BYTES	(2u << 20)
#elif defined(__SANITIZE_ADDRESS__)
#define DEF_BYTES	(4u << 20)
#else
#define DEF_BYTES	(8u << 20)
#endif

#define MAX_IO		(128u << 10)

static int nthreads = 4, nconns = 8;
static _Atomic int dup_events;
static uint64_t max_bytes = DEF_BYTES, seed0 = 0x57e55ULL;

enum { M_BLOCK_A, M_BLOCK_B, M_EPOLL_LT, M_EPOLL_ET, M_COUNT };

struct conn {
	uint32_t id;
	int fd, mode;
	bool server;
	uint64_t tx_len, rx_len;	/* stream lengths */
	uint64_t tx_off, rx_off;
	uint64_t rng_tx, rng_rx;
	bool tx_done, rx_done;
	uint8_t *buf;			/* MAX_IO scratch */
};

static uint64_t stream_len(uint32_t id, int dir)
{
	uint64_t s = seed0 ^ ((uint64_t)id << 8) ^ (uint64_t)dir;

	return max_bytes / 2 + t_rand(&s) % (max_bytes / 2 + 1);
}

/* Mostly small I/O, sometimes large. */
static size_t io_size(uint64_t *rng)
{
	switch (t_rand(rng) % 8) {
	case 0:
		return 1 + t_rand(rng) % 16;
	case 1:
	case 2:
	case 3:
		return 1 + t_rand(rng) % 1500;
	case 4:
	case 5:
		return 1 + t_rand(rng) % 16384;
	default:
		return 1 + t_rand(rng) % MAX_IO;
	}
}

static void conn_init(struct conn *c, uint32_t id, int fd, bool server)
{
	memset(c, 0, sizeof(*c));
	c->id = id;
	c->fd = fd;
	c->server = server;
	c->mode = (int)(id % M_COUNT);
	c->tx_len = stream_len(id, server);
	c->rx_len = stream_len(id, !server);
	c->rng_tx = seed0 ^ id ^ (server ? 0x1000 : 0x2000);
	c->rng_rx = seed0 ^ id ^ (server ? 0x3000 : 0x4000);
	c->buf = malloc(MAX_IO);
	if (!c->buf)
		t_fail("malloc");
}

static uint32_t tx_stream(const struct conn *c)
{
	return 2 * c->id + (c->server ? 1 : 0);
}

static uint32_t rx_stream(const struct conn *c)
{
	return 2 * c->id + (c->server ? 0 : 1);
}

/*
 * One send step: returns bytes written, 0 when finished, -1 on EAGAIN.
 * The sender shuts down SHUT_WR after its last byte.
 */
static ssize_t tx_step(struct conn *c, uint8_t *buf)
{
	size_t n;
	ssize_t w;

	if (c->tx_done)
		return 0;
	if (c->tx_off == c->tx_len) {
		if (shutdown(c->fd, SHUT_WR))
			t_fail("conn %u: shutdown: %s", c->id, strerror(errno));
		c->tx_done = true;
		return 0;
	}
	n = io_size(&c->rng_tx);
	if (n > c->tx_len - c->tx_off)
		n = (size_t)(c->tx_len - c->tx_off);
	t_pat_fill(tx_stream(c), c->tx_off, buf, n);
	switch (t_rand(&c->rng_tx) % 3) {
	case 0:
		w = write(c->fd, buf, n);
		break;
	case 1:
		w = send(c->fd, buf, n, MSG_NOSIGNAL);
		break;
	default: {
		struct iovec iov[3];
		size_t a = n / 3, b = n / 2;

		iov[0] = (struct iovec){ buf, a };
		iov[1] = (struct iovec){ buf + a, b - a };
		iov[2] = (struct iovec){ buf + b, n - b };
		w = writev(c->fd, iov, 3);
		break;
	}
	}
	if (w < 0 && (errno == EAGAIN || errno == EINTR))
		return -1;
	if (w <= 0)
		t_fail("conn %u (%s, mode %d): write at %llu: %zd %s", c->id,
		       c->server ? "server" : "client", c->mode, (unsigned long long)c->tx_off, w,
		       strerror(errno));
	c->tx_off += (uint64_t)w;
	return w;
}

/* One receive step: bytes read (checked), 0 at EOF, -1 on EAGAIN. */
static ssize_t rx_step(struct conn *c, uint8_t *buf)
{
	size_t n = io_size(&c->rng_rx);
	ssize_t r;
	long bad;

	if (c->rx_done)
		return 0;
	switch (t_rand(&c->rng_rx) % 3) {
	case 0:
		r = read(c->fd, buf, n);
		break;
	case 1:
		r = recv(c->fd, buf, n, 0);
		break;
	default: {
		struct iovec iov[2] = { { buf, n / 2 }, { buf + n / 2, n - n / 2 } };

		r = readv(c->fd, iov, 2);
		break;
	}
	}
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return -1;
	if (r < 0)
		t_fail("conn %u (%s, mode %d): read at %llu: %s", c->id,
		       c->server ? "server" : "client", c->mode, (unsigned long long)c->rx_off,
		       strerror(errno));
	if (r == 0) {
		if (c->rx_off != c->rx_len)
			t_fail("conn %u (%s, mode %d): EOF after %llu of %llu bytes", c->id,
			       c->server ? "server" : "client", c->mode,
			       (unsigned long long)c->rx_off, (unsigned long long)c->rx_len);
		c->rx_done = true;
		return 0;
	}
	if (c->rx_off + (uint64_t)r > c->rx_len)
		t_fail("conn %u: %llu bytes past the end of the stream", c->id,
		       (unsigned long long)(c->rx_off + (uint64_t)r - c->rx_len));
	bad = t_pat_check(rx_stream(c), c->rx_off, buf, (size_t)r);
	if (bad >= 0)
		t_fail("conn %u (%s, mode %d): wrong byte at stream offset %llu (got %#x want %#x)",
		       c->id, c->server ? "server" : "client", c->mode,
		       (unsigned long long)(c->rx_off + (uint64_t)bad), buf[bad],
		       t_pat(rx_stream(c), c->rx_off + (uint64_t)bad));
	c->rx_off += (uint64_t)r;
	return r;
}

/* ---- blocking connections: a sender and a receiver thread ------------- */

static void *block_sender(void *arg)
{
	struct conn *c = arg;
	uint8_t *buf = malloc(MAX_IO);

	while (!c->tx_done)
		tx_step(c, buf);
	free(buf);
	return NULL;
}

static void *block_conn(void *arg)
{
	struct conn *c = arg;
	pthread_t tx;

	if (pthread_create(&tx, NULL, block_sender, c))
		t_fail("pthread_create");
	while (!c->rx_done)
		rx_step(c, c->buf);
	pthread_join(tx, NULL);
	close(c->fd);
	return NULL;
}

/* ---- non-blocking connections: one epoll loop per thread -------------- */

struct loop {
	int ep;
	struct conn **conns;
	int n, live;
};

static void loop_add(struct loop *l, struct conn *c)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.ptr = c };

	t_set_nonblock(c->fd, true);
	if (c->mode == M_EPOLL_ET)
		ev.events |= EPOLLET;
	t_ok(epoll_ctl(l->ep, EPOLL_CTL_ADD, c->fd, &ev));
	l->live++;
}

static void conn_event(struct loop *l, struct conn *c, uint32_t events)
{
	bool et = c->mode == M_EPOLL_ET;

	if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
		if (et) {
			while (rx_step(c, c->buf) > 0)
				;
		} else {
			rx_step(c, c->buf);
			if (c->rx_done && !c->tx_done) {
				/* Level-triggered EOF stays readable: stop asking. */
				struct epoll_event ev = { .events = EPOLLOUT, .data.ptr = c };

				t_ok(epoll_ctl(l->ep, EPOLL_CTL_MOD, c->fd, &ev));
			}
		}
	}
	if (events & (EPOLLOUT | EPOLLERR)) {
		if (et) {
			while (!c->tx_done && tx_step(c, c->buf) >= 0)
				;
		} else {
			tx_step(c, c->buf);
			if (c->tx_off == c->tx_len)
				tx_step(c, c->buf);	/* shutdown */
		}
		if (c->tx_done && !et) {
			/* Level-triggered: stop asking for EPOLLOUT. */
			struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };

			t_ok(epoll_ctl(l->ep, EPOLL_CTL_MOD, c->fd, &ev));
		}
	}
	if (c->rx_done && c->tx_done) {
		t_ok(epoll_ctl(l->ep, EPOLL_CTL_DEL, c->fd, NULL));
		close(c->fd);
		c->fd = -1;
		l->live--;
	}
}

static void loop_run(struct loop *l)
{
	struct epoll_event evs[64];

	while (l->live) {
		int n = epoll_wait(l->ep, evs, 64, 20000), i;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			t_fail("epoll_wait: %s", strerror(errno));
		if (n == 0) {
			/* Not an assertion: say what is pending; the runner's timeout decides. */
			for (i = 0; i < l->n; i++) {
				struct conn *c = l->conns[i];

				if (c->fd >= 0)
					fprintf(stderr, "t_stress: still waiting: conn %u %s mode %d "
						"tx %llu/%llu rx %llu/%llu\n", c->id,
						c->server ? "server" : "client", c->mode,
						(unsigned long long)c->tx_off,
						(unsigned long long)c->tx_len,
						(unsigned long long)c->rx_off,
						(unsigned long long)c->rx_len);
			}
			continue;
		}
		for (i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;
			int j;

			/* The kernel reports a registration at most once per call.
			 * Count a repeat (it fails the run at the end) and skip it so
			 * the data checks go on. */
			for (j = 0; j < i; j++)
				if (evs[j].data.ptr == c)
					break;
			if (j < i) {
				if (!atomic_fetch_add(&dup_events, 1))
					fprintf(stderr, "t_stress: epoll_wait reported conn %u (%s, "
						"mode %d) twice in one call (events %#x and %#x)\n",
						c->id, c->server ? "server" : "client", c->mode,
						evs[j].events, evs[i].events);
				continue;
			}
			if (c->fd < 0)
				t_fail("epoll_wait: event %#x for conn %u after EPOLL_CTL_DEL + close",
				       evs[i].events, c->id);
			conn_event(l, c, evs[i].events);
		}
	}
}

/* Run a set of connections to completion: blocking ones in thread pairs,
 * the rest in one epoll loop in this thread. */
static void run_conns(struct conn *cs, int n)
{
	pthread_t *th = calloc((size_t)n, sizeof(*th));
	bool *started = calloc((size_t)n, sizeof(*started));
	struct loop l = { .ep = t_ok(epoll_create1(EPOLL_CLOEXEC)) };
	int i;

	l.conns = calloc((size_t)n, sizeof(*l.conns));
	for (i = 0; i < n; i++) {
		struct conn *c = &cs[i];

		if (c->mode == M_BLOCK_A || c->mode == M_BLOCK_B) {
			if (pthread_create(&th[i], NULL, block_conn, c))
				t_fail("pthread_create");
			started[i] = true;
		} else {
			l.conns[l.n++] = c;
			loop_add(&l, c);
		}
	}
	loop_run(&l);
	for (i = 0; i < n; i++)
		if (started[i])
			pthread_join(th[i], NULL);
	for (i = 0; i < n; i++)
		free(cs[i].buf);
	close(l.ep);
	free(l.conns);
	free(started);
	free(th);
}

/* ---- client --------------------------------------------------------------- */

static uint16_t server_port;

static void *client_thread(void *arg)
{
	int t = (int)(intptr_t)arg, i;
	struct conn *cs = calloc((size_t)nconns, sizeof(*cs));

	for (i = 0; i < nconns; i++) {
		uint32_t id = (uint32_t)(t * nconns + i);
		int fd = t_connect(server_port);

		conn_init(&cs[i], id, fd, false);
		/* Header: the server learns the connection id. */
		t_write_all(fd, &id, sizeof(id));
	}
	run_conns(cs, nconns);
	free(cs);
	return NULL;
}

/* ---- server --------------------------------------------------------------- */

struct srv_group {
	struct conn *cs;
	int n;
};

static void *server_group(void *arg)
{
	struct srv_group *g = arg;

	run_conns(g->cs, g->n);
	return NULL;
}

static void server_main(int lfd, int total)
{
	struct srv_group *groups = calloc((size_t)nthreads, sizeof(*groups));
	pthread_t *th = calloc((size_t)nthreads, sizeof(*th));
	int i;

	for (i = 0; i < nthreads; i++)
		groups[i].cs = calloc((size_t)total, sizeof(struct conn));
	/* Accept everything first (so the handshakes happen in a storm). */
	for (i = 0; i < total; i++) {
		int fd = t_accept(lfd);
		uint32_t id;
		struct srv_group *g;

		t_read_all(fd, &id, sizeof(id));
		if (id >= (uint32_t)total)
			t_fail("bad connection id %u", id);
		g = &groups[id % (uint32_t)nthreads];
		conn_init(&g->cs[g->n++], id, fd, true);
	}
	close(lfd);
	for (i = 0; i < nthreads; i++)
		if (pthread_create(&th[i], NULL, server_group, &groups[i]))
			t_fail("pthread_create");
	for (i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	for (i = 0; i < nthreads; i++)
		free(groups[i].cs);
	free(groups);
	free(th);
}

int main(int argc, char **argv)
{
	struct t_stats before;
	pthread_t *th;
	int sv[2], total, i;
	uint64_t bytes = 0;
	pid_t srv;

	t_name = "t_stress";
	if (argc > 1)
		nthreads = atoi(argv[1]);
	if (argc > 2)
		nconns = atoi(argv[2]);
	if (argc > 3)
		max_bytes = strtoull(argv[3], NULL, 0);
	if (argc > 4)
		seed0 = strtoull(argv[4], NULL, 0);
	if (nthreads < 1 || nconns < 1 || max_bytes < 2)
		t_fail("usage: t_stress [THREADS [CONNS [BYTES [SEED]]]]");
	total = nthreads * nconns;
	signal(SIGPIPE, SIG_IGN);
	if (t_accel())
		t_stats_get(&before);

	t_sync_pair(sv);
	srv = t_fork_helper();
	if (srv == 0) {
		uint16_t port;
		int lfd;

		close(sv[0]);
		lfd = t_listen(&port);
		t_sync_send(sv[1], &port, sizeof(port));
		server_main(lfd, total);
		if (dup_events)
			t_fail("server: %d duplicate epoll events", (int)dup_events);
		_exit(0);
	}
	close(sv[1]);
	if (!t_sync_recv(sv[0], &server_port, sizeof(server_port)))
		t_fail("server died before listening");

	th = calloc((size_t)nthreads, sizeof(*th));
	for (i = 0; i < nthreads; i++)
		if (pthread_create(&th[i], NULL, client_thread, (void *)(intptr_t)i))
			t_fail("pthread_create");
	for (i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	free(th);
	t_wait_child(srv, "server");
	if (dup_events)
		t_fail("client: %d duplicate epoll events", (int)dup_events);

	for (i = 0; i < total; i++)
		bytes += stream_len((uint32_t)i, 0) + stream_len((uint32_t)i, 1);
	t_info("%d connections, %llu bytes verified", total, (unsigned long long)bytes);
	if (t_accel()) {
		struct t_stats now;

		t_stats_get(&now);
		if (now.smc_conns - before.smc_conns != 2 * total ||
		    now.fallback != before.fallback || now.aborts != before.aborts)
			t_fail("expected %d shared-memory endpoints, no fallback, no reset; got %lld, "
			       "fallbacks {%s}, resets {%s}", 2 * total,
			       now.smc_conns - before.smc_conns, now.fallback_names, now.abort_names);
		if ((uint64_t)(now.tx_bytes - before.tx_bytes) < bytes ||
		    (uint64_t)(now.rx_bytes - before.rx_bytes) < bytes)
			t_fail("rings carried %lld/%lld bytes, the streams %llu",
			       now.tx_bytes - before.tx_bytes, now.rx_bytes - before.rx_bytes,
			       (unsigned long long)bytes);
	}
	return T_EXIT_PASS;
}
