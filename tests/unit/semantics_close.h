// SPDX-License-Identifier: MIT
/*
 * semantics_close.h - t_semantics scenarios about the ends of a
 * connection: reads and writes around the peer's close, a close while
 * another thread reads, resets and what the socket shows after them, a
 * shutdown with data queued, writes right before a close.
 *
 * Not a general header: it is included by t_semantics.c alone, after that
 * file's helpers (struct ctx, say(), RV(), settle(), drain_pat()...) and
 * before its scenario table.  Its functions are static on purpose: exactly
 * one translation unit includes it, and every one of them is used there.
 */
#ifndef SEMANTICS_CLOSE_H
#define SEMANTICS_CLOSE_H

/* Read after the peer closed: the data, then 0; a blocked reader wakes. */
static void read_after_close_c(struct ctx *c)
{
	say(c, "write=%s", RV(write(c->fd, "last words", 10)));
	say(c, "close=%s", RV(close(c->fd)));
	t_sync_post(c->sync);
}

static void read_after_close_s(struct ctx *c)
{
	char buf[64];
	long n;

	t_sync_wait(c->sync);
	settle();
	say_poll(c, "peer closed", c->fd, 0);
	n = read(c->fd, buf, sizeof(buf));
	say(c, "read=%s %s", RVN(n), shown(buf, n));
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	say(c, "so_error=%d", so_error(c->fd));
}

static void close_wakes_reader_c(struct ctx *c)
{
	char buf[8];

	t_sync_post(c->sync);
	say(c, "blocked read=%s", RV(read(c->fd, buf, sizeof(buf))));
}

static void close_wakes_reader_s(struct ctx *c)
{
	t_sync_wait(c->sync);
	t_msleep(100);
	say(c, "close=%s", RV(close(c->fd)));
}

/*
 * A descriptor closed while another thread reads from it: the kernel keeps
 * the socket for that read, which still returns what arrives, but the
 * number is free at once, and the program's next open() gets the lowest
 * free one, as always (usmc's own duplicate for the call in progress
 * stays out of the program's numbers).
 */
struct close_in_call {
	int fd;
	_Atomic pid_t tid;
	long n;
	char buf[8];
};

static void *close_in_call_read(void *arg)
{
	struct close_in_call *r = arg;

	atomic_store(&r->tid, gettid());
	r->n = read(r->fd, r->buf, sizeof(r->buf));
	return NULL;
}

static void close_in_call_c(struct ctx *c)
{
	struct close_in_call r = { .fd = c->fd };
	int in = dup(0), hole = 0, got;
	pthread_t th;

	close(hole);		/* a free number below the connection's */
	if (pthread_create(&th, NULL, close_in_call_read, &r))
		t_fail("pthread_create");
	while (!atomic_load(&r.tid))
		t_msleep(1);
	/* Asleep in the read (or in usmc's wait under it). */
	t_wait_state(atomic_load(&r.tid), 'S', 3);
	t_msleep(SETTLE_MS);
	say(c, "close=%s", RV(close(c->fd)));
	got = open("/dev/null", O_RDONLY);
	say(c, "open then took the lowest free number: %s", got == hole ? "yes" : "no");
	/* What the kernel does, in both runs (USMC_DISABLE=1 interposes too). */
	if (got != hole)
		t_fail("open() took %d, not the lowest free number %d", got, hole);
	t_sync_post(c->sync);
	pthread_join(th, NULL);
	say(c, "blocked read=%s %s", RVN(r.n), shown(r.buf, r.n));
	close(got);
	dup2(in, 0);
	close(in);
}

static void close_in_call_s(struct ctx *c)
{
	t_sync_wait(c->sync);
	say(c, "write=%s", RV(write(c->fd, "late", 4)));
}

/* Write after the peer closed: first write "succeeds", then EPIPE + SIGPIPE. */
static void write_after_close_c(struct ctx *c)
{
	long n;

	t_sync_wait(c->sync);
	settle();
	say_poll(c, "peer closed", c->fd, 0);
	n = write(c->fd, "hello", 5);
	say(c, "write=%s sigpipes=%d", RVN(n), (int)sigpipes);
	settle();
	n = write(c->fd, "hello", 5);
	say(c, "write=%s sigpipes=%d", RVN(n), (int)sigpipes);
	n = send(c->fd, "hello", 5, MSG_NOSIGNAL);
	say(c, "send(NOSIGNAL)=%s sigpipes=%d", RVN(n), (int)sigpipes);
	n = send(c->fd, "hello", 5, 0);
	say(c, "send=%s sigpipes=%d", RVN(n), (int)sigpipes);
	n = writev(c->fd, &(struct iovec){ (char *)"v", 1 }, 1);
	say(c, "writev=%s sigpipes=%d", RVN(n), (int)sigpipes);
	say(c, "read=%s", RV(read(c->fd, (char[8]){ 0 }, 8)));
	say(c, "so_error=%d", so_error(c->fd));
}

/* A write far larger than any send buffer after the peer closed: TCP
 * queues what its buffer takes and returns that (the RST that comes back
 * fails the next one); it never reports the whole write done (tornado's
 * test_write_bytearray_resizable_after_error). */
static void big_write_after_close_c(struct ctx *c)
{
	static char big[32 << 20];
	long n;

	t_sync_wait(c->sync);
	settle();
	n = send(c->fd, big, sizeof(big), MSG_NOSIGNAL);
	say(c, "first send: %s", n > 0 && n < (long)sizeof(big) ? "part of it" : RVN(n));
	settle();
	n = send(c->fd, big, sizeof(big), MSG_NOSIGNAL);
	say(c, "second send=%s", RVN(n));
}

/* What the socket shows once a reset came: TCP_INFO's state, the peer's
 * address, poll, SO_ERROR (the kernel's, which usmc's must match). */
static void say_gone(struct ctx *c, const char *what)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct tcp_info ti;
	socklen_t tl = sizeof(ti);

	memset(&ti, 0, sizeof(ti));
	say_poll(c, what, c->fd, 0);
	say(c, "%s: tcp state=%d getpeername=%s", what,
	    getsockopt(c->fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) ? -1 : (int)ti.tcpi_state,
	    RV(getpeername(c->fd, (struct sockaddr *)&ss, &len)));
}

/* Our write to a peer that closed draws its RST: then as TCP. */
static void write_gone_state_c(struct ctx *c)
{
	long n;

	t_sync_wait(c->sync);
	settle();
	n = send(c->fd, "x", 1, MSG_NOSIGNAL);
	say(c, "send=%s", RVN(n));
	settle();
	say_gone(c, "after the RST");
	say(c, "so_error=%d", so_error(c->fd));
	say_poll(c, "error taken", c->fd, 0);
	n = send(c->fd, "x", 1, MSG_NOSIGNAL);
	say(c, "send=%s", RVN(n));
}

/* The peer closes with our bytes unread: its RST. */
static void close_unread_state_c(struct ctx *c)
{
	t_write_all(c->fd, "unread", 6);
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	settle();
	say_gone(c, "peer closed with our bytes unread");
}

static void close_unread_state_s(struct ctx *c)
{
	t_sync_wait(c->sync);
	settle();
	say(c, "close=%s", RV(close(c->fd)));
	t_sync_post(c->sync);
}

/* The peer shuts down, then closes with our request unread (the JDK's
 * close): its FIN, then its RST.  The reader sees the response, then EOF. */
static void fin_then_rst_c(struct ctx *c)
{
	char buf[32];
	long n;

	t_write_all(c->fd, "request", 7);
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
	settle();
	n = read(c->fd, buf, sizeof(buf));
	say(c, "read=%s", n > 0 ? "response" : RVN(n));
	n = read(c->fd, buf, sizeof(buf));
	say(c, "read=%s", RVN(n));
}

static void fin_then_rst_s(struct ctx *c)
{
	t_sync_wait(c->sync);
	t_write_all(c->fd, "response", 8);
	say(c, "shutdown=%s", RV(shutdown(c->fd, SHUT_WR)));
	settle();
	say(c, "close=%s", RV(close(c->fd)));
	t_sync_post(c->sync);
}

static void write_after_close_s(struct ctx *c)
{
	say(c, "close=%s", RV(close(c->fd)));
	t_sync_post(c->sync);
}


/* The peer shut down with a little data queued: readable, RDHUP at once. */
static void rdhup_data_c(struct ctx *c)
{
	say(c, "write=%s", RV(write(c->fd, "0123456789", 10)));
	say(c, "shutdown(WR)=%s", RV(shutdown(c->fd, SHUT_WR)));
	t_sync_post(c->sync);
	t_sync_wait(c->sync);
}

static void rdhup_data_s(struct ctx *c)
{
	char buf[32];
	long n;
	int q = -1;

	t_sync_wait(c->sync);
	settle();
	say_poll(c, "data+FIN queued", c->fd, 0);
	ioctl(c->fd, FIONREAD, &q);
	say(c, "fionread=%d", q);
	n = read(c->fd, buf, sizeof(buf));
	say(c, "read=%s %s", RVN(n), shown(buf, n));
	say_poll(c, "drained", c->fd, 0);
	say(c, "read=%s", RV(read(c->fd, buf, sizeof(buf))));
	t_sync_post(c->sync);
}

/*
 * The client writes and closes at once, the server reads only afterwards
 * (echo data | nc; a request followed by close).  Repeated, since whether
 * the server's accept() saw the client's proposal yet varies: every byte
 * must arrive, on shared memory each time.
 */
#define WRITE_CLOSE_N 16

static void write_close_c(struct ctx *c)
{
	int i;

	for (i = 0; i < WRITE_CLOSE_N; i++) {
		int fd = t_connect(c->port);

		t_send_pat(fd, 11 + (uint32_t)i, 1000 + (size_t)i * 1000);
		close(fd);
		t_sync_post(c->sync);
	}
	say(c, "%d connections written and closed", WRITE_CLOSE_N);
}

static void write_close_s(struct ctx *c)
{
	int i, bad = 0;

	for (i = 0; i < WRITE_CLOSE_N; i++) {
		int fd = t_accept(c->lfd);
		bool intact = true;
		size_t got;

		t_sync_wait(c->sync);
		settle();
		got = drain_pat_ok(fd, 11 + (uint32_t)i, 4096, &intact);
		if (got != 1000 + (size_t)i * 1000 || !intact) {
			fprintf(stderr, "t_semantics: write_close: connection %d: %zu bytes "
				"arrived (%s), %zu were written\n", i, got,
				intact ? "intact" : "CORRUPT", 1000 + (size_t)i * 1000);
			bad++;
		}
		close(fd);
	}
	say(c, "connections with every byte intact: %d of %d", WRITE_CLOSE_N - bad,
	    WRITE_CLOSE_N);
}


#endif /* SEMANTICS_CLOSE_H */
