// SPDX-License-Identifier: MIT
/*
 * t_hostile.c - a peer that corrupts the shared memory of a live connection.
 *
 * The victim is this process (libusmc preloaded).  It keeps four
 * connections with an honest peer process (two it connected, two it
 * accepted), each carrying a pattern-stamped stream both ways for the whole
 * run, and meanwhile plays ROUNDS rounds against a hostile peer: each round
 * a fresh hostile process (forked from a single-threaded factory) opens one
 * connection with the victim, as its server (the victim owns the link
 * group) or as its client (the hostile process owns it), exchanges a byte
 * each way so both ends are on shared memory, then maps the connection's
 * link group itself (plain open(2) + mmap(2) of lg-<id>/mem, found through
 * `usmc stat --json`) and corrupts it while the victim keeps reading and
 * writing (non-blocking, poll(2) between calls):
 *
 *   protocol violations (the victim must reset the connection: its first
 *   error is ECONNRESET and the connection's abort reason is
 *   protocol_violation):
 *     rx_prod_ahead   the peer's prod more than a ring ahead of our cons
 *     rx_prod_behind  the peer's prod behind our cons
 *     tx_cons_ahead   the peer's cons ahead of our prod
 *     tx_cons_behind  the peer's cons more than a ring behind our prod
 *     skip_to         a rewind point that makes prod - head > size
 *     huge            prod beyond 2^63
 *     truncate        the link group file cut to one page or nothing
 *                     (SIGBUS on our next access: guard.c)
 *     tcp_bytes       bytes on the TCP connection under shared memory
 *   other corruption (anything but a crash or a hang; the connection ends
 *   with ECONNRESET, EOF or EPIPE once the peer resets and closes):
 *     own_prod        our own producer cursor rewritten far away
 *     own_cons        our own consumer cursor rewritten past prod
 *                     (we keep our own copies and never read these
 *                     back: only the peer's view of the stream suffers)
 *     garbage         random bytes in our receive ring, prod moved within
 *                     the rules
 *     flags           random DONE/ABORT/CLOSED/MIGRATE/unknown flag bits
 *     ctrl            slot state, generation, answer, released generation,
 *                     4-tuple, pids
 *     hints           doorbell arm counters, CPU and waiting hints
 *     header          the link group header
 *   and one after-the-reset check:
 *     reset_then_bad_prod  the peer resets; once the victim has seen
 *                     ECONNRESET the peer moves prod two rings ahead; a
 *                     read larger than the ring must deliver nothing.
 *
 * The hostile process rewrites its corruption in a loop (the victim
 * overwrites its own lines as it works) and rings the victim's doorbell,
 * until the victim reports its outcome.  Every process this test starts is
 * killed with it (PR_SET_PDEATHSIG) and reaped; alarm() bounds the whole
 * run and says which round hung.
 *
 * usage: t_hostile [SEED [ROUNDS]]   (the seed is printed; rounds default
 * to two per corruption, one per side)
 */
#include "cdc.h"
#include "lgr.h"

#include "t_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#if defined(__SANITIZE_THREAD__)
#define ALARM_S		270
#elif defined(__SANITIZE_ADDRESS__)
#define ALARM_S		210
#else
#define ALARM_S		100
#endif

/* The corruption classes, struct hostile and corrupt(). */
#include "hostile_corrupt.h"

/* Round orders between the victim (V), the factory (F) and a hostile (X),
 * all on one socketpair: V -> F: a struct round; X -> V: its port (when it
 * is the server); V -> X: struct ready, 'P' probe, 'D' done; X -> V: 'S' set;
 * F -> V: X's wait status. */
struct round {
	int32_t num, cls;
	int32_t hostile_is_server;
	uint16_t vport;
	uint16_t __pad;
	uint64_t seed;
};

static uint64_t seed0 = 0x4057113eULL;
static int nrounds = 2 * C_COUNT;

/* What the alarm handler reports. */
static volatile sig_atomic_t cur_round = -1, cur_phase;
static const char *const phase_names[] = { "setup", "connect", "attack", "checks",
					    "hostile exit", "honest streams" };

static void on_alarm(int sig)
{
	char msg[256];
	int n;

	(void)sig;
	if (cur_round >= 0)
		n = snprintf(msg, sizeof(msg),
			     "t_hostile: FAIL: hang in round %d (%s), phase %s (seed %#llx)\n",
			     (int)cur_round, classes[(cur_round + seed0) % C_COUNT].name,
			     phase_names[cur_phase], (unsigned long long)seed0);
	else
		n = snprintf(msg, sizeof(msg), "t_hostile: FAIL: hang in phase %s\n",
			     phase_names[cur_phase]);
	if (write(2, msg, (size_t)n) < 0)
		_exit(1);
	_exit(1);
}

static int round_class(int r)
{
	return (int)(((uint64_t)r + seed0) % C_COUNT);
}

/* ---- the hostile process ------------------------------------------------- */

/* A connection's link group and slot, from `usmc stat --json` (lgr 0:
 * not listed, or listed without one). */
static void find_conn(pid_t pid, int fd, uint64_t *lgr, uint32_t *slot)
{
	char *j = t_stats_json(), pat[64];
	const char *p, *end, *l, *s;

	*lgr = 0;
	*slot = 0;
	snprintf(pat, sizeof(pat), "\"pid\": %d, \"fd\": %d,", (int)pid, fd);
	p = strstr(j, pat);
	if (p) {
		end = strchr(p, '}');
		l = strstr(p, "\"lgr\": \"");
		s = strstr(p, "\"slot\": ");
		if (!end || !l || !s || l > end || s > end)
			t_fail("cannot parse the connection entry: %.200s", p);
		*lgr = strtoull(l + 8, NULL, 16);
		*slot = (uint32_t)strtoul(s + 8, NULL, 10);
	}
	free(j);
}

static void hostile_map(struct hostile *h)
{
	const struct usmc_lgr_hdr *hdr;
	char path[PATH_MAX];
	uint64_t lgr;
	uint32_t slot;
	struct stat st;
	uint8_t *ctl_base;
	size_t tail;

	/* Our own entry; a server that decided after accept() lists no
	 * link group (af_usmc.c), then the victim's entry says it. */
	find_conn(getpid(), h->fd, &lgr, &slot);
	if (!lgr)
		find_conn(h->victim.pid, h->victim.fd, &lgr, &slot);
	if (!lgr)
		t_fail("hostile: neither end lists a link group for the connection");
	snprintf(path, sizeof(path), "%s/lg-%016llx/mem", t_rundir(), (unsigned long long)lgr);
	h->mem_fd = t_ok(open(path, O_RDWR | O_CLOEXEC));
	t_ok(fstat(h->mem_fd, &st));
	h->len = (size_t)st.st_size;
	h->base = mmap(NULL, h->len, PROT_READ | PROT_WRITE, MAP_SHARED, h->mem_fd, 0);
	if (h->base == MAP_FAILED)
		t_fail("hostile: mmap %s: %s", path, strerror(errno));
	hdr = (const struct usmc_lgr_hdr *)h->base;
	/* dev_copy (build/copy): the server's view of the control blocks
	 * follows the file's link group, and its lines there are the ones a
	 * server victim reads (src/dev_copy.c). */
	tail = t_unshared() ? (size_t)hdr->nslots * sizeof(struct usmc_cdc_ctrl) : 0;
	if (hdr->magic != USMC_LGR_MAGIC || slot >= hdr->nslots || hdr->size + tail != h->len)
		t_fail("hostile: %s is not a link group with slot %u", path, slot);
	h->size = hdr->ring_size;
	ctl_base = h->base + (tail && !h->server ? hdr->size : hdr->ctrl_off);
	h->c = (struct usmc_cdc_ctrl *)(ctl_base + (size_t)slot * sizeof(struct usmc_cdc_ctrl));
	if (h->server) {	/* the victim is the client */
		h->v_tx_p = &h->c->c2s_p;
		h->v_tx_c = &h->c->c2s_c;
		h->v_rx_p = &h->c->s2c_p;
		h->v_rx_c = &h->c->s2c_c;
		h->v_rx_ring = h->base + hdr->dmb_off + ((size_t)slot * 2 + 1) * h->size;
	} else {
		h->v_tx_p = &h->c->s2c_p;
		h->v_tx_c = &h->c->s2c_c;
		h->v_rx_p = &h->c->c2s_p;
		h->v_rx_c = &h->c->c2s_c;
		h->v_rx_ring = h->base + hdr->dmb_off + (size_t)slot * 2 * h->size;
	}
	/* The victim watches its side's doorbell: c as the client, s as the
	 * server, one per link group (dev_loopback.c). */
	snprintf(path, sizeof(path), "%s/lg-%016llx/%c", t_rundir(), (unsigned long long)lgr,
		 h->server ? 'c' : 's');
	h->bell = t_ok(open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC));
}

static void ring_bell(struct hostile *h)
{
	char b = 1;

	if (write(h->bell, &b, 1) < 0 && errno != EAGAIN)
		t_fail("hostile: doorbell: %s", strerror(errno));
}

/* The end every round comes to: a reset in both directions. */
static void hostile_reset(struct hostile *h)
{
	if (h->truncated)
		return;
	atomic_fetch_or(&h->v_rx_p->flags, CDC_F_ABORT);
	atomic_fetch_or(&h->v_tx_c->flags, CDC_F_ABORT | CDC_F_CLOSED);
	ring_bell(h);
}

static bool victim_spoke(int sv)
{
	return t_wait_fd(sv, POLLIN, 0) != 0;
}

static void hostile_main(int sv, const struct round *r)
{
	struct hostile h = { .sv = sv, .server = r->hostile_is_server, .mem_fd = -1, .bell = -1 };
	int iter = 0;
	char b;

	h.rng = r->seed;
	if (h.server) {
		uint16_t port;
		int lfd = t_listen(&port);

		t_sync_send(sv, &port, sizeof(port));
		h.fd = t_accept(lfd);
		close(lfd);
		t_read_all(h.fd, &b, 1);
		t_write_all(h.fd, "h", 1);
	} else {
		h.fd = t_connect(r->vport);
		t_write_all(h.fd, "h", 1);
		t_read_all(h.fd, &b, 1);
	}
	/* The victim saw shared memory. */
	if (!t_sync_recv(sv, &h.victim, sizeof(h.victim)))
		t_fail("hostile: victim gone");
	hostile_map(&h);

	if (classes[r->cls].protocol) {
		/* Until the victim has seen it. */
		while (!victim_spoke(sv)) {
			corrupt(&h, r->cls, iter++);
			ring_bell(&h);
			usleep(100);
		}
		t_sync_wait(sv);	/* 'D' */
		hostile_reset(&h);
		close(h.fd);
		_exit(0);
	}
	if (r->cls == C_RESET_PROBE) {
		corrupt(&h, r->cls, 0);
		ring_bell(&h);
		t_sync_wait(sv);	/* 'P': the victim got ECONNRESET */
		ST(&h.v_rx_p->prod, LD(&h.v_rx_c->cons) + 2ULL * h.size + 4096 + rnd(&h, h.size));
		t_sync_send(sv, "S", 1);
		t_sync_wait(sv);	/* 'D' */
		close(h.fd);
		_exit(0);
	}
	for (iter = 0; iter < 300 && !victim_spoke(sv); iter++) {
		corrupt(&h, r->cls, iter);
		ring_bell(&h);
		usleep(100);
	}
	/* Then reset, and close the TCP connection too (a victim that
	 * followed a MIGRATE flag onto TCP learns it there). */
	hostile_reset(&h);
	close(h.fd);
	t_sync_wait(sv);		/* 'D' */
	_exit(0);
}

/* Single-threaded: forks one hostile process per round, reports its status. */
static void factory_main(int sv)
{
	struct round r;

	while (t_sync_recv(sv, &r, sizeof(r))) {
		pid_t pid = t_fork_helper();
		int st;

		if (pid == 0)
			hostile_main(sv, &r);
		while (waitpid(pid, &st, 0) < 0)
			if (errno != EINTR)
				t_fail("factory: waitpid: %s", strerror(errno));
		t_sync_send(sv, &st, sizeof(st));
	}
	_exit(0);
}

/* ---- honest streams (victim and honest peer) ----------------------------- */

#define NGOOD		4

struct good {
	int fd;
	uint32_t id;			/* we send stream 2 id (+1 on the peer's side) */
	bool peer_side;
	_Atomic uint64_t tx, rx;
	_Atomic bool rx_done;
	pthread_t tt, rt;
};

static _Atomic bool stop_tx;
static struct good vconn[NGOOD];	/* the victim's honest connections */

static void *good_tx(void *arg)
{
	struct good *g = arg;
	uint32_t stream = 2 * g->id + g->peer_side;
	uint64_t rng = seed0 ^ stream, off = 0;
	uint8_t *buf = malloc(65536);

	/* The victim sends until told to stop; the peer until the victim's
	 * stream ended (it stops after the victim did). */
	while (!(g->peer_side ? atomic_load(&g->rx_done) : atomic_load(&stop_tx))) {
		size_t n = 1 + t_rand(&rng) % 65536;

		t_pat_fill(stream, off, buf, n);
		t_write_all(g->fd, buf, n);
		off += n;
		atomic_store(&g->tx, off);
	}
	t_ok(shutdown(g->fd, SHUT_WR));
	free(buf);
	return NULL;
}

static void *good_rx(void *arg)
{
	struct good *g = arg;
	uint32_t stream = 2 * g->id + !g->peer_side;
	uint8_t *buf = malloc(65536);
	uint64_t off = 0;
	ssize_t n;

	while ((n = read(g->fd, buf, 65536)) != 0) {
		long bad;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			t_fail("good conn %u (%s): read after %llu bytes: %s", g->id,
			       g->peer_side ? "peer" : "victim", (unsigned long long)off,
			       strerror(errno));
		bad = t_pat_check(stream, off, buf, (size_t)n);
		if (bad >= 0)
			t_fail("good conn %u (%s): wrong byte at stream offset %llu", g->id,
			       g->peer_side ? "peer" : "victim", (unsigned long long)(off + bad));
		off += (uint64_t)n;
		atomic_store(&g->rx, off);
	}
	atomic_store(&g->rx_done, true);
	free(buf);
	return NULL;
}

static void good_start(struct good *g)
{
	if (pthread_create(&g->rt, NULL, good_rx, g) || pthread_create(&g->tt, NULL, good_tx, g))
		t_fail("pthread_create");
}

static void good_join(struct good *g)
{
	pthread_join(g->tt, NULL);
	pthread_join(g->rt, NULL);
}

struct good_report {
	uint32_t id;
	uint32_t __pad;
	uint64_t rx, tx;
};

/*
 * The honest peer: listens (port to the victim), accepts two connections,
 * connects two to the victim's listener (port from the victim), streams on
 * all four until the victim's streams end, then reports what it moved.
 */
static void honest_main(int sv)
{
	struct good pg[NGOOD];
	struct good_report rep[NGOOD];
	uint16_t port, vport;
	int lfd = t_listen(&port), i;

	t_sync_send(sv, &port, sizeof(port));
	memset(pg, 0, sizeof(pg));
	for (i = 0; i < 2; i++) {
		uint32_t id;

		pg[i].fd = t_accept(lfd);
		t_read_all(pg[i].fd, &id, sizeof(id));
		pg[i].id = id;
		pg[i].peer_side = true;
	}
	close(lfd);
	if (!t_sync_recv(sv, &vport, sizeof(vport)))
		t_fail("honest peer: no port from the victim");
	for (i = 2; i < NGOOD; i++) {
		pg[i].fd = t_connect(vport);
		pg[i].id = (uint32_t)i;
		pg[i].peer_side = true;
		t_write_all(pg[i].fd, &pg[i].id, sizeof(pg[i].id));
	}
	for (i = 0; i < NGOOD; i++)
		good_start(&pg[i]);
	for (i = 0; i < NGOOD; i++) {
		good_join(&pg[i]);
		rep[i] = (struct good_report){ pg[i].id, 0, atomic_load(&pg[i].rx),
						atomic_load(&pg[i].tx) };
		close(pg[i].fd);
	}
	t_sync_send(sv, rep, sizeof(rep));
	_exit(0);
}

/* ---- the victim ----------------------------------------------------------- */

/* A field of one of our connections in `usmc stat --json` ("" if absent). */
static const char *conn_field(int fd, const char *key, char *out, size_t len)
{
	char *j = t_stats_json(), pat[80];
	const char *p, *end, *v;

	out[0] = '\0';
	snprintf(pat, sizeof(pat), "\"pid\": %d, \"fd\": %d,", (int)getpid(), fd);
	p = strstr(j, pat);
	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	if (p && (end = strchr(p, '}')) && (v = strstr(p, pat)) && v < end) {
		v += strlen(pat);
		if (*v == '"')
			v++;
		snprintf(out, len, "%.*s", (int)strcspn(v, "\",}"), v);
	}
	free(j);
	return out;
}

/* aborts.<name> from `usmc stat --json` (0 when absent). */
static long long aborts_of(const char *name)
{
	char *j = t_stats_json(), pat[80];
	const char *a = strstr(j, "\"aborts\": {"), *end, *v;
	long long n = 0;

	snprintf(pat, sizeof(pat), "\"%s\": ", name);
	if (a && (end = strchr(a, '}')) && (v = strstr(a, pat)) && v < end)
		n = strtoll(v + strlen(pat), NULL, 10);
	free(j);
	return n;
}

#define OUT_EOF		(-1)

static const char *outcome_name(int o)
{
	return o == OUT_EOF ? "EOF" : t_errname(o);
}

/*
 * Read and write (non-blocking) until the connection ends: EOF, or an
 * error other than EAGAIN from either direction.  Returns OUT_EOF or the
 * errno.
 */
static int victim_drive(int fd, uint8_t *buf, uint64_t *rx_bytes)
{
	for (unsigned int i = 0;; i++) {
		ssize_t n;

		/* Every other turn wait for input only, so that poll reaches
		 * the kernel (and looks at the TCP socket) even while there is
		 * room to write. */
		t_wait_fd(fd, i & 1 ? POLLIN | POLLOUT : POLLIN, 20);
		n = recv(fd, buf, 65536, 0);
		if (n > 0)
			*rx_bytes += (uint64_t)n;
		else if (n == 0)
			return OUT_EOF;
		else if (errno != EAGAIN && errno != EINTR)
			return errno;
		n = send(fd, buf, 1024, MSG_NOSIGNAL);
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return errno;
	}
}

/*
 * Liveness of the honest connections: each moves bytes both ways after the
 * round began (waiting for it is bounded by the alarm, not timed).
 */
static void honest_progress(const uint64_t (*at)[2], int num)
{
	int i;

	for (i = 0; i < NGOOD; i++)
		while (atomic_load(&vconn[i].tx) == at[i][0] || atomic_load(&vconn[i].rx) == at[i][1])
			t_msleep(1);
	t_info("round %d: honest connections moving", num);
}

static void victim_round(int sv, int vlfd, uint16_t vport, int num, uint8_t *buf, uint8_t *big,
			 int *protocol_rounds)
{
	uint64_t at[NGOOD][2];
	int i;

	/* Each pass over the corruptions swaps the sides. */
	struct round r = { .num = num, .cls = round_class(num),
			   .hostile_is_server = !((num + num / C_COUNT) & 1), .vport = vport };
	uint64_t rx = 0;
	char m[64], b;
	int fd, out, st;

	r.seed = seed0 * 0x9e3779b97f4a7c15ULL + (uint64_t)num;
	cur_round = num;
	cur_phase = 1;
	for (i = 0; i < NGOOD; i++) {
		at[i][0] = atomic_load(&vconn[i].tx);
		at[i][1] = atomic_load(&vconn[i].rx);
	}
	t_sync_send(sv, &r, sizeof(r));
	if (r.hostile_is_server) {
		uint16_t port;

		if (!t_sync_recv(sv, &port, sizeof(port)))
			t_fail("round %d: hostile process gone", num);
		fd = t_connect(port);
		t_write_all(fd, "v", 1);
		t_read_all(fd, &b, 1);
	} else {
		fd = t_accept(vlfd);
		t_read_all(fd, &b, 1);
		t_write_all(fd, "v", 1);
	}
	t_assert_smc(fd);
	t_set_nonblock(fd, true);
	{
		struct ready rd = { (int32_t)getpid(), fd };

		t_sync_send(sv, &rd, sizeof(rd));
	}

	cur_phase = 2;
	out = victim_drive(fd, buf, &rx);
	t_info("round %d %s (victim %s): %s after %llu bytes read", num, classes[r.cls].name,
	       r.hostile_is_server ? "client" : "server", outcome_name(out),
	       (unsigned long long)rx);

	cur_phase = 3;
	if (classes[r.cls].protocol) {
		if (out != ECONNRESET)
			t_fail("round %d (%s): the connection ended with %s, expected ECONNRESET", num,
			       classes[r.cls].name, outcome_name(out));
		if (strcmp(conn_field(fd, "abort", m, sizeof(m)), "protocol_violation"))
			t_fail("round %d (%s): abort reason \"%s\", expected protocol_violation", num,
			       classes[r.cls].name, m);
		(*protocol_rounds)++;
	} else if (out != ECONNRESET && out != OUT_EOF && out != EPIPE) {
		t_fail("round %d (%s): the connection ended with %s", num, classes[r.cls].name,
		       outcome_name(out));
	}
	/* Our own lines are never read back: writes there are no violation
	 * of ours to find (it is the peer's reset that ends the round). */
	if ((r.cls == C_OWN_PROD || r.cls == C_OWN_CONS) &&
	    !strcmp(conn_field(fd, "abort", m, sizeof(m)), "protocol_violation"))
		t_fail("round %d (%s): reset as a protocol violation: our own cursors were read "
		       "back from shared memory", num, classes[r.cls].name);
	if (r.cls == C_RESET_PROBE) {
		ssize_t n;

		if (out != ECONNRESET)
			t_fail("round %d (%s): ended with %s before the probe", num,
			       classes[r.cls].name, outcome_name(out));
		t_sync_send(sv, "P", 1);
		t_sync_wait(sv);	/* 'S': prod is two rings ahead now */
		n = recv(fd, big, (8u << 20) + 65536, 0);
		if (n > 0)
			t_fail("round %d (%s): after ECONNRESET, a read delivered %zd bytes from a "
			       "cursor two rings ahead (a ring is %s bytes)", num, classes[r.cls].name,
			       n, conn_field(fd, "dmb_size", m, sizeof(m)));
	}
	t_sync_send(sv, "D", 1);
	cur_phase = 4;
	if (!t_sync_recv(sv, &st, sizeof(st)))
		t_fail("round %d: factory gone", num);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		t_fail("round %d (%s): hostile process %s %d", num, classes[r.cls].name,
		       WIFSIGNALED(st) ? "killed by signal" : "exit status",
		       WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	close(fd);
	cur_phase = 5;
	honest_progress((const uint64_t (*)[2])at, num);
}

int main(int argc, char **argv)
{
	int hsv[2], fsv[2], vlfd, i, protocol_rounds = 0;
	struct good_report rep[NGOOD];
	long long prot0, prot1;
	uint16_t gport, vport;
	uint8_t *buf, *big;
	pid_t honest, factory;
	char m[64];

	t_name = "t_hostile";
	if (argc > 1)
		seed0 = strtoull(argv[1], NULL, 0);
	if (argc > 2)
		nrounds = atoi(argv[2]);
	if (!t_accel())
		t_skip("needs libusmc preloaded and enabled");
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	alarm(ALARM_S);
	fprintf(stderr, "t_hostile: seed %#llx, %d rounds (rerun: t_hostile %#llx %d)\n",
		(unsigned long long)seed0, nrounds, (unsigned long long)seed0, nrounds);
	prot0 = aborts_of("protocol_violation");

	/* Both helpers are forked before any thread exists. */
	t_sync_pair(hsv);
	honest = t_fork_helper();
	if (honest == 0) {
		close(hsv[0]);
		honest_main(hsv[1]);
	}
	close(hsv[1]);
	t_sync_pair(fsv);
	factory = t_fork_helper();
	if (factory == 0) {
		close(fsv[0]);
		close(hsv[0]);
		factory_main(fsv[1]);
	}
	close(fsv[1]);

	/* Honest connections: two we connect, two we accept. */
	if (!t_sync_recv(hsv[0], &gport, sizeof(gport)))
		t_fail("honest peer died before listening");
	memset(vconn, 0, sizeof(vconn));
	for (i = 0; i < 2; i++) {
		vconn[i].fd = t_connect(gport);
		vconn[i].id = (uint32_t)i;
		t_write_all(vconn[i].fd, &vconn[i].id, sizeof(vconn[i].id));
	}
	vlfd = t_listen(&vport);
	t_sync_send(hsv[0], &vport, sizeof(vport));
	for (i = 2; i < NGOOD; i++) {
		int fd = t_accept(vlfd);
		uint32_t id;

		t_read_all(fd, &id, sizeof(id));
		if (id < 2 || id >= NGOOD || vconn[id].fd)
			t_fail("honest connection with id %u", id);
		vconn[id].fd = fd;
		vconn[id].id = id;
	}
	for (i = 0; i < NGOOD; i++)
		good_start(&vconn[i]);

	/* The attack, while the honest streams run. */
	buf = malloc(65536);
	big = malloc((8u << 20) + 65536);
	if (!buf || !big)
		t_fail("malloc");
	for (i = 0; i < nrounds; i++)
		victim_round(fsv[0], vlfd, vport, i, buf, big, &protocol_rounds);
	cur_round = -1;
	cur_phase = 5;

	/* The honest connections are still on shared memory, never reset. */
	for (i = 0; i < NGOOD; i++) {
		if (strcmp(conn_field(vconn[i].fd, "mode", m, sizeof(m)), "SMCD"))
			t_fail("honest conn %d: mode %s after the attack", i, m);
		if (strcmp(conn_field(vconn[i].fd, "abort", m, sizeof(m)), "null"))
			t_fail("honest conn %d: reset (%s)", i, m);
	}
	atomic_store(&stop_tx, true);
	for (i = 0; i < NGOOD; i++)
		good_join(&vconn[i]);
	if (!t_sync_recv(hsv[0], rep, sizeof(rep)))
		t_fail("honest peer died before reporting");
	for (i = 0; i < NGOOD; i++) {
		struct good *v = &vconn[rep[i].id < NGOOD ? rep[i].id : 0];

		if (rep[i].id >= NGOOD || rep[i].rx != atomic_load(&v->tx) ||
		    rep[i].tx != atomic_load(&v->rx))
			t_fail("honest conn %u: victim sent %llu, peer got %llu; peer sent %llu, "
			       "victim got %llu", rep[i].id, (unsigned long long)atomic_load(&v->tx),
			       (unsigned long long)rep[i].rx, (unsigned long long)rep[i].tx,
			       (unsigned long long)atomic_load(&v->rx));
		t_info("honest conn %u: %llu bytes out, %llu in, verified", rep[i].id,
		       (unsigned long long)rep[i].rx, (unsigned long long)rep[i].tx);
	}
	for (i = 0; i < NGOOD; i++)
		close(vconn[i].fd);
	close(vlfd);
	close(fsv[0]);
	close(hsv[0]);
	t_wait_child(honest, "honest peer");
	t_wait_child(factory, "hostile factory");
	prot1 = aborts_of("protocol_violation");
	if (prot1 - prot0 < protocol_rounds)
		t_fail("usmc stat counts %lld protocol_violation aborts, %d rounds violated the "
		       "protocol", prot1 - prot0, protocol_rounds);
	fprintf(stderr, "t_hostile: %d rounds (%d protocol violations detected), honest streams "
		"verified\n", nrounds, protocol_rounds);
	free(buf);
	free(big);
	return T_EXIT_PASS;
}
