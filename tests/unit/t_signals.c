// SPDX-License-Identifier: MIT
/*
 * t_signals.c - differential signal semantics: blocking calls interrupted
 * by a handler, SIGPIPE, and handlers that write to accelerated sockets
 * must behave on a usmc connection as they do on plain TCP.
 *
 * As t_semantics.c: a server and a client process per scenario log
 * transport-independent observations; tests/test_unit.py requires the
 * same transcript with USMC_DISABLE=1 and accelerated (where `usmc stat`
 * must show every connection on shared memory).
 *
 * Interrupting a call: the victim posts 'r' on the sync socketpair, sets
 * in_call and makes the call; the signaller waits for 'r', lets it block,
 * then kill()s it until the handler reports 'h' (ran while in_call; 'e':
 * too early, signal again).  Then it either waits for 'R' (the call came
 * back) or, for a call that must restart, sends what the call waits for.
 * No assertion depends on time; sleeps only let a peer block.
 *
 * usage: t_signals [scenario...]   (default: all; T_VERBOSE=1 to trace)
 */
#include "t_diff.h"

#include <sys/epoll.h>
#include <sys/select.h>

#define SETTLE_MS	50
#define BIG_SEND	(32u << 20)	/* more than any TCP buffer or usmc ring holds */
#define CHUNK		65536

struct ctx {
	const char *name;
	char side;			/* 'S' server, 'C' client */
	int fd, lfd;			/* connection, server's listener */
	uint16_t port;
	int sync;			/* socketpair to the other side */
	pid_t peer;			/* the other side's pid (to signal it) */
	FILE *log;			/* transcript lines (open_memstream) */
	int arg;			/* the scenario's A_* */
};

#define S_OWN_ACCEPT	0x1
#define C_OWN_CONNECT	0x2
#define KNOWN_BUG	0x4	/* known difference: runs only when named, or T_SIGNALS_ALL=1 */
/* TSan queues a signal that lands in a blocked system call and runs the
 * handler only when the call returns; with SA_RESTART the kernel restarts
 * the call, so on TCP it never returns.  Not run under TSan (unless named). */
#define NO_TSAN		0x8
#ifdef __SANITIZE_THREAD__
#define T_TSAN		1
#else
#define T_TSAN		0
#endif

struct scenario {
	const char *name;
	void (*server)(struct ctx *);
	void (*client)(struct ctx *);
	int flags;
	int smc;		/* endpoints expected on shared memory */
	int arg;		/* A_*: variant of the victim's call */
};

#define A_RESTART	0x01	/* the handler has SA_RESTART */
#define A_TIMEO		0x02	/* SO_RCVTIMEO / SO_SNDTIMEO set: EINTR all the same */
#define A_WAITALL	0x04	/* recv MSG_WAITALL, part of it there: the part */
#define A_MIXED		0x08	/* another signal's handler lacks SA_RESTART */
#define A_OTHER		0x10	/* the handler sends on a second connection */

/* Does the interrupted call come back (rather than restart, as TCP)? */
#define returns(c)	(!((c)->arg & A_RESTART) || ((c)->arg & (A_TIMEO | A_WAITALL)))
#define restart_str(c)	((c)->arg & A_RESTART ? "SA_RESTART" : "no SA_RESTART")

/* ---- the handler ----------------------------------------------------------- */

static volatile sig_atomic_t sigs, in_call, sigpipes;
static int h_sync = -1;			/* handler posts 'h' / 'e' here */
static int h_fd = -1;			/* handler sends h_msg on h_fd (if >= 0) */
static const char *h_msg;
static size_t h_len;
static volatile long h_rv, h_sent;	/* last handler send, bytes sent in all */
static volatile int h_err;

static void on_sig(int sig)
{
	int e = errno;
	char b = in_call ? 'h' : 'e';

	(void)sig;
	sigs++;
	if (h_sync >= 0 && write(h_sync, &b, 1) < 0)
		h_err = errno;
	if (h_fd >= 0 && in_call) {
		h_rv = send(h_fd, h_msg, h_len, MSG_NOSIGNAL);
		if (h_rv > 0)
			h_sent += h_rv;
		else
			h_err = errno;
	}
	errno = e;
}

static void on_sigpipe(int sig)
{
	(void)sig;
	sigpipes++;
}

static void handle(int sig, void (*fn)(int), int flags)
{
	struct sigaction sa = { .sa_handler = fn, .sa_flags = flags };

	sigemptyset(&sa.sa_mask);
	t_ok(sigaction(sig, &sa, NULL));
}

/* SIGUSR1 (SA_RESTART) will send msg on fd when it lands in a CALL. */
static void handler_sends(int fd, const char *msg, size_t len)
{
	handle(SIGUSR1, on_sig, SA_RESTART);
	h_msg = msg;
	h_len = len;
	h_fd = fd;
}

/* ---- transcript ------------------------------------------------------------ */

static __attribute__((format(printf, 2, 3))) void say(struct ctx *c, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(c->log, "%s %c: %s\n", c->name, c->side, line);
	t_info("%s", line);
}

/* "5", "-1 EINTR"; want > 0: "full" / "partial" (counts that depend on
 * buffer sizes are never printed). */
static const char *rvs(long r, int err, long want)
{
	static char bufs[4][48];
	static unsigned int next;
	char *s = bufs[next++ % 4];

	if (r < 0)
		snprintf(s, 48, "%ld %s", r, t_errname(err));
	else if (want > 0)
		snprintf(s, 48, "%s", r == want ? "full" : r ? "partial" : "0");
	else
		snprintf(s, 48, "%ld", r);
	return s;
}

static void settle(void)
{
	t_msleep(SETTLE_MS);
}

/* ---- synchronisation ----------------------------------------------------- */

static void post(struct ctx *c, char b)
{
	t_sync_send(c->sync, &b, 1);
}

/* Next byte from the other side within ms, -1 on timeout. */
static int next_byte(struct ctx *c, int ms)
{
	unsigned char b;

	if (!(t_wait_fd(c->sync, POLLIN, ms) & (POLLIN | POLLHUP)))
		return -1;
	if (!t_sync_recv(c->sync, &b, 1))
		t_fail("sync: the other side went away");
	return b;
}

/* Wait for byte want, dropping the handler's reports on the way. */
static void sync_get(struct ctx *c, char want)
{
	int b;

	while ((b = next_byte(c, 30000)) != want)
		if (b < 0)
			t_fail("sync: no '%c'", want);
}

/* Victim: a blocking call the other side is going to interrupt. */
#define CALL(c, expr) ({						\
	long r_; int e_;						\
	post(c, 'r');							\
	in_call = 1;							\
	errno = 0;							\
	r_ = (long)(expr);						\
	e_ = errno;							\
	in_call = 0;							\
	post(c, 'R');							\
	errno = e_;							\
	r_; })

/* Is pid asleep (in the kernel, state S), not still running towards it? */
static bool asleep(pid_t pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY);
	n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = '\0';
	p = strrchr(buf, ')');
	return !p || p[1] != ' ' || p[2] == 'S';
}

/* Signaller: interrupt the other side's next CALL once (the handler ran in it). */
static void interrupt(struct ctx *c, int sig)
{
	int b, i;

	sync_get(c, 'r');
	settle();
	for (i = 0; i < 200 && !(asleep(c->peer) && (t_msleep(5), asleep(c->peer))); i++)
		t_msleep(5);	/* a shared-memory wait may spin first */
	for (;;) {
		if (kill(c->peer, sig))
			t_fail("kill: %s", strerror(errno));
		while ((b = next_byte(c, 5000)) == 'R' || b == 'r')
			;
		if (b == 'h')
			return;
		settle();	/* 'e' (not in the call yet) or silence: again */
	}
}

/* ---- helpers --------------------------------------------------------------- */

/* Fill the connection without blocking until it takes nothing more;
 * returns the bytes written (all of byte b). */
static size_t fill(int fd, char b)
{
	static char buf[CHUNK];
	size_t total = 0;
	ssize_t n;
	int round;

	memset(buf, b, sizeof(buf));
	for (round = 0; round < 3; round++, settle())	/* the last bytes move on: again */
		while ((n = send(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0 || (n < 0 && errno == EINTR))
			total += n > 0 ? (size_t)n : 0;
	return total;
}

/*
 * Read to EOF and log the stream as runs of equal bytes.  The first run's
 * length depends on buffer sizes: the other side sends it over sync, and
 * the line only says whether it matched.
 */
static void drain_runs(struct ctx *c)
{
	static char buf[CHUNK];
	struct { size_t runs[8]; char what[8]; int n; } tl, *t = &tl;
	char line[256] = " empty";
	ssize_t n, i;
	size_t first;
	int k = 0;

	memset(t, 0, sizeof(*t));
	while ((n = read(c->fd, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			t_fail("drain: %s", strerror(errno));
		for (i = 0; i < n; i++) {
			if (!t->n || t->what[t->n - 1] != buf[i]) {
				if (t->n == (int)ARRAY_LEN(t->runs))
					t_fail("drain: too many runs");
				t->what[t->n++] = buf[i];
			}
			t->runs[t->n - 1]++;
		}
	}
	sync_get(c, 'R');	/* the sender's call is over ... */
	if (!t_sync_recv(c->sync, &first, sizeof(first)))	/* ... and this follows */
		t_fail("sync: no size");
	for (i = 0; i < t->n; i++)
		if (i)
			k += snprintf(line + k, sizeof(line) - (size_t)k, ", '%c' x %zu", t->what[i],
				      t->runs[i]);
		else
			k = snprintf(line, sizeof(line), " '%c' x %s", t->what[0],
				     t->runs[0] == first ? "as sent" : "NOT as sent");
	say(c, "stream:%s", line);
}

#define send_size(c, n) do { size_t n_ = (n); t_sync_send((c)->sync, &n_, sizeof(n_)); } while (0)

/* ---- blocking recv --------------------------------------------------------- */

/* Signaller + data source: interrupt, then (after the call came back, or
 * while it restarted) send "data". */
static void recv_s(struct ctx *c)
{
	if (c->arg & A_WAITALL)
		t_write_all(c->fd, "abc", 3);
	interrupt(c, SIGUSR1);
	if (returns(c))
		sync_get(c, 'R');
	else
		settle();	/* the handler returned, the call waits again */
	t_write_all(c->fd, "data", 4);
}

/* signal(7): a socket call with a timeout never restarts.  A_MIXED: which
 * signal interrupted matters, not whether some handler lacks SA_RESTART. */
static void recv_c(struct ctx *c)
{
	struct timeval tv = { 30, 0 };
	char buf[16];
	long n;

	handle(SIGUSR1, on_sig, c->arg & A_RESTART ? SA_RESTART : 0);
	if (c->arg & A_MIXED)
		handle(SIGUSR2, on_sig, 0);	/* never sent */
	if (c->arg & A_TIMEO)
		t_ok(setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	n = CALL(c, recv(c->fd, buf, sizeof(buf), c->arg & A_WAITALL ? MSG_WAITALL : 0));
	say(c, "%s recv=%s '%.*s' sigs>0=%d", restart_str(c), rvs(n, errno, 0), n > 0 ? (int)n : 0,
	    buf, sigs > 0);
	if (n < 0) {
		do
			n = recv(c->fd, buf, sizeof(buf), 0);
		while (n < 0 && errno == EINTR);
		say(c, "then recv=%s '%.*s'", rvs(n, errno, 0), n > 0 ? (int)n : 0, buf);
	}
}

/* ---- blocking send ----------------------------------------------------------- */

/* A send bigger than any buffer: interrupted after some bytes, it returns
 * the partial count, SA_RESTART or not; every byte sent arrives. */
static void send_partial_s(struct ctx *c)
{
	interrupt(c, SIGUSR1);
	drain_runs(c);
}

static void send_partial_c(struct ctx *c)
{
	char *buf = malloc(BIG_SEND);
	long n;

	memset(buf, 'p', BIG_SEND);
	handle(SIGUSR1, on_sig, SA_RESTART);
	n = CALL(c, send(c->fd, buf, BIG_SEND, 0));
	say(c, "send=%s", rvs(n, errno, BIG_SEND));
	shutdown(c->fd, SHUT_WR);
	send_size(c, n > 0 ? (size_t)n : 0);
	free(buf);
}

/* A send on a full connection that has sent nothing yet: EINTR without
 * SA_RESTART; with it, it restarts and completes once the peer reads. */
static void send_s(struct ctx *c)
{
	interrupt(c, SIGUSR1);
	if (!returns(c))
		settle();	/* the handler returned, the send waits again */
	drain_runs(c);
}

static void send_c(struct ctx *c)
{
	static char buf[CHUNK];
	struct timeval tv = { 30, 0 };
	size_t filled = fill(c->fd, 'f');
	long n;

	memset(buf, 'm', sizeof(buf));
	handle(SIGUSR1, on_sig, c->arg & A_RESTART ? SA_RESTART : 0);
	if (c->arg & A_TIMEO)
		t_ok(setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)));
	n = CALL(c, send(c->fd, buf, sizeof(buf), 0));
	say(c, "%s send=%s", restart_str(c), rvs(n, errno, sizeof(buf)));
	shutdown(c->fd, SHUT_WR);
	send_size(c, filled);
}

/* ---- blocking accept ------------------------------------------------------- */

static void accept_s(struct ctx *c)
{
	struct timeval tv = { 30, 0 };
	char b;
	long n;

	handle(SIGUSR1, on_sig, c->arg & A_RESTART ? SA_RESTART : 0);
	if (c->arg & A_TIMEO)
		t_ok(setsockopt(c->lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	n = CALL(c, accept(c->lfd, NULL, NULL));
	say(c, "%s accept=%s", restart_str(c), n < 0 ? rvs(n, errno, 0) : "fd");
	c->fd = n >= 0 ? (int)n : t_accept(c->lfd);
	t_read_all(c->fd, &b, 1);
	t_write_all(c->fd, "s", 1);
	say(c, "got '%c'", b);
}

static void accept_c(struct ctx *c)
{
	char b;

	interrupt(c, SIGUSR1);
	if (returns(c))
		sync_get(c, 'R');
	else
		settle();
	c->fd = t_connect(c->port);
	t_write_all(c->fd, "c", 1);
	t_read_all(c->fd, &b, 1);
	t_assert_smc(c->fd);
	say(c, "got '%c'", b);
}


/* ---- poll, select, epoll: EINTR whatever SA_RESTART says --------------------- */

#define WAITERS 5

static void waits_s(struct ctx *c)
{
	int i;

	for (i = 0; i < WAITERS; i++) {
		interrupt(c, SIGUSR1);
		sync_get(c, 'R');
	}
	t_write_all(c->fd, "x", 1);
}

static void waits_c(struct ctx *c)
{
	static const char *names[WAITERS] = { "poll", "ppoll", "select", "pselect", "epoll_wait" };
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	struct epoll_event ev = { .events = EPOLLIN }, out;
	int ep = t_ok(epoll_create1(0)), i;
	char b;
	long n = 0;

	t_ok(epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev));
	handle(SIGUSR1, on_sig, SA_RESTART);
	for (i = 0; i < WAITERS; i++) {
		fd_set r;

		FD_ZERO(&r);
		FD_SET(c->fd, &r);
		switch (i) {
		case 0: n = CALL(c, poll(&p, 1, -1)); break;
		case 1: n = CALL(c, ppoll(&p, 1, NULL, NULL)); break;
		case 2: n = CALL(c, select(c->fd + 1, &r, NULL, NULL, NULL)); break;
		case 3: n = CALL(c, pselect(c->fd + 1, &r, NULL, NULL, NULL, NULL)); break;
		case 4: n = CALL(c, epoll_wait(ep, &out, 1, -1)); break;
		}
		say(c, "%s=%s", names[i], rvs(n, errno, 0));
	}
	n = poll(&p, 1, 30000);
	say(c, "poll=%ld revents=%s", n, p.revents == POLLIN ? "IN" : "?");
	n = epoll_wait(ep, &out, 1, 30000);
	say(c, "epoll_wait=%ld", n);
	t_read_all(c->fd, &b, 1);
	close(ep);
}

/* ---- SIGPIPE vs MSG_NOSIGNAL ------------------------------------------------- */

static void sigpipe_s(struct ctx *c)
{
	close(c->fd);
	post(c, 'x');
}

static void sigpipe_c(struct ctx *c)
{
	sigset_t set, old;
	long n;
	pid_t pid;
	int st;

#define PIPE(what, call) do {						\
		n = (long)(call);					\
		say(c, what "=%s sigpipes=%d", rvs(n, errno, 0), (int)sigpipes);	\
	} while (0)
	handle(SIGPIPE, on_sigpipe, SA_RESTART);
	sync_get(c, 'x');
	settle();
	PIPE("send", send(c->fd, "x", 1, 0));	/* "succeeds": TCP sends it, draws an RST */
	settle();
	PIPE("send", send(c->fd, "hello", 5, 0));
	PIPE("send(NOSIGNAL)", send(c->fd, "hello", 5, MSG_NOSIGNAL));
	PIPE("write", write(c->fd, "hello", 5));
	PIPE("sendto(NOSIGNAL)", sendto(c->fd, "hello", 5, MSG_NOSIGNAL, NULL, 0));
	/* Blocked: it stays pending (for the calling thread). */
	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	sigprocmask(SIG_BLOCK, &set, &old);
	n = send(c->fd, "hello", 5, 0);
	sigpending(&set);
	say(c, "blocked: send=%s pending=%d sigpipes=%d", rvs(n, errno, 0),
	    sigismember(&set, SIGPIPE), (int)sigpipes);
	sigprocmask(SIG_SETMASK, &old, NULL);
	say(c, "unblocked: sigpipes=%d", (int)sigpipes);
	/* SIG_IGN: just EPIPE.  SIG_DFL: the process dies of it. */
	signal(SIGPIPE, SIG_IGN);
	n = write(c->fd, "hello", 5);
	say(c, "ignored: write=%s", rvs(n, errno, 0));
	fflush(NULL);
	pid = t_fork_helper();
	if (pid == 0) {
		signal(SIGPIPE, SIG_DFL);
		n = write(c->fd, "hello", 5);
		_exit(n < 0 && errno == EPIPE ? 3 : 4);
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			t_fail("waitpid: %s", strerror(errno));
	say(c, "default: child %s %d", WIFSIGNALED(st) ? "killed by signal" : "exit",
	    WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

/* ---- handlers that write ----------------------------------------------------- */

/* The main code blocks in recv on fd; the handler sends on fd (same) or
 * on a second connection; the peer gets exactly those bytes. */
static void hsend_s(struct ctx *c)
{
	bool other = c->arg & A_OTHER;
	int fd2 = other ? t_accept(c->lfd) : c->fd;
	char buf[8];

	interrupt(c, SIGUSR1);
	t_read_all(fd2, buf, 5);
	say(c, "got '%.5s' on the %s connection", buf, other ? "other" : "same");
	t_write_all(c->fd, "reply", 5);
	if (other)
		close(fd2);
}

static void hsend_c(struct ctx *c)
{
	bool other = c->arg & A_OTHER;
	int fd2 = other ? t_connect(c->port) : c->fd;
	char buf[16];
	long n;

	handler_sends(fd2, "hello", 5);
	n = CALL(c, recv(c->fd, buf, sizeof(buf), 0));
	h_fd = -1;
	say(c, "recv=%s '%.*s' handler send=%s", rvs(n, errno, 0), n > 0 ? (int)n : 0, buf,
	    rvs(h_rv, h_err, 0));
	if (other) {
		t_assert_smc(fd2);
		close(fd2);
	}
}


/*
 * The main code blocks in send on a full connection; the handler sends on
 * the same socket (and blocks too, until the peer reads).  TCP: the fill,
 * the handler's bytes, then the restarted send's.  No deadlock.
 */
static void hsend_full_s(struct ctx *c)
{
	interrupt(c, SIGUSR1);
	settle();	/* the handler's send blocks */
	drain_runs(c);
}

static void hsend_full_c(struct ctx *c)
{
	static char buf[CHUNK], mark[100];
	size_t filled = fill(c->fd, 'f');
	long n;

	memset(buf, 'm', sizeof(buf));
	memset(mark, 'H', sizeof(mark));
	handler_sends(c->fd, mark, sizeof(mark));
	n = CALL(c, send(c->fd, buf, sizeof(buf), 0));
	h_fd = -1;
	say(c, "send=%s handler send=%s", rvs(n, errno, sizeof(buf)), rvs(h_rv, h_err, 0));
	shutdown(c->fd, SHUT_WR);
	send_size(c, filled);
}

/*
 * Signals land at random points of a stream of sends (also while the
 * library is in the middle of one); each handler sends one 'H' on the same
 * socket.  The peer gets every byte of both, none lost, none doubled.
 */
#define STORM_BYTES	(64u << 20)

static void storm_s(struct ctx *c)
{
	static char buf[CHUNK];
	size_t a = 0, h = 0, hs, total = 0;
	ssize_t n, i;

	sync_get(c, 'r');
	while ((n = read(c->fd, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			t_fail("storm: %s", strerror(errno));
		total += (size_t)n;
		for (i = 0; i < n; i++) {
			a += buf[i] == 'a';
			h += buf[i] == 'H';
		}
		if (kill(c->peer, SIGUSR1))	/* a signal per read, till EOF */
			t_fail("kill: %s", strerror(errno));
	}
	sync_get(c, 'R');
	if (!t_sync_recv(c->sync, &hs, sizeof(hs)))
		t_fail("sync: no count");
	say(c, "'a' bytes=%zu, 'H' bytes as the handler sent=%d, other bytes=%zu", a, h == hs,
	    total - a - h);
}

static void storm_c(struct ctx *c)
{
	static char buf[CHUNK];
	size_t done = 0;
	ssize_t n;

	memset(buf, 'a', sizeof(buf));
	h_sync = -1;	/* no reports: a thousand signals */
	handler_sends(c->fd, "H", 1);
	in_call = 1;
	post(c, 'r');
	while (done < STORM_BYTES) {
		n = send(c->fd, buf, MIN(sizeof(buf), STORM_BYTES - done), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			t_fail("storm send: %s", strerror(errno));
		done += (size_t)n;
	}
	in_call = 0;
	post(c, 'R');
	h_fd = -1;
	shutdown(c->fd, SHUT_WR);
	send_size(c, (size_t)h_sent);
	say(c, "sent %zu, handler sends ok=%d", done, h_err == 0);
}

#define OWN	(S_OWN_ACCEPT | C_OWN_CONNECT)
static const struct scenario scenarios[] = {
	{ "recv_eintr", recv_s, recv_c, 0, 2, 0 },
	{ "recv_restart", recv_s, recv_c, NO_TSAN, 2, A_RESTART },
	{ "recv_timeo", recv_s, recv_c, 0, 2, A_RESTART | A_TIMEO },
	{ "recv_waitall", recv_s, recv_c, 0, 2, A_RESTART | A_WAITALL },
	/* libusmc restarts only if no handler at all lacks SA_RESTART
	 * (interpose.c, usmc_sig_should_eintr): it cannot tell which signal
	 * interrupted.  TCP restarts here; usmc returns EINTR. */
	{ "restart_mixed", recv_s, recv_c, KNOWN_BUG | NO_TSAN, 2, A_RESTART | A_MIXED },
	{ "send_partial", send_partial_s, send_partial_c, 0, 2, A_RESTART },
	{ "send_eintr", send_s, send_c, 0, 2, 0 },
	{ "send_restart", send_s, send_c, NO_TSAN, 2, A_RESTART },
	{ "send_timeo", send_s, send_c, 0, 2, A_RESTART | A_TIMEO },
	{ "accept_eintr", accept_s, accept_c, OWN, 2, 0 },
	{ "accept_restart", accept_s, accept_c, OWN | NO_TSAN, 2, A_RESTART },
	{ "accept_timeo", accept_s, accept_c, OWN, 2, A_RESTART | A_TIMEO },
	{ "waits", waits_s, waits_c, NO_TSAN, 2, 0 },
	{ "sigpipe", sigpipe_s, sigpipe_c, 0, 2, 0 },
	{ "hsend_same", hsend_s, hsend_c, NO_TSAN, 2, 0 },
	{ "hsend_other", hsend_s, hsend_c, NO_TSAN, 4, A_OTHER },
	{ "hsend_full", hsend_full_s, hsend_full_c, NO_TSAN, 2, 0 },
	{ "storm", storm_s, storm_c, 0, 2, 0 },
};

/* ---- harness -------------------------------------------------------------- */

static void side_main(const void *sc_, char side, int sync, int logfd)
{
	const struct scenario *sc = sc_;
	struct ctx c = { .name = sc->name, .side = side, .fd = -1, .lfd = -1, .sync = sync,
			 .arg = sc->arg };
	pid_t me = getpid();
	char d = 'D', b, *text = NULL;
	size_t len = 0;

	alarm(60);	/* a hang (a deadlock) kills this side; the harness reports it */
	c.log = open_memstream(&text, &len);
	if (!c.log)
		t_fail("open_memstream");
	h_sync = sync;
	if (side == 'S') {
		c.lfd = t_listen(&c.port);
		t_sync_send(sync, &c.port, sizeof(c.port));
		t_sync_send(sync, &me, sizeof(me));
		if (!t_sync_recv(sync, &c.peer, sizeof(c.peer)))
			t_fail("no pid from the client");
		if (!(sc->flags & S_OWN_ACCEPT)) {
			c.fd = t_accept(c.lfd);
			t_read_all(c.fd, &b, 1);
			t_write_all(c.fd, "s", 1);
		}
		sc->server(&c);
	} else {
		if (!t_sync_recv(sync, &c.port, sizeof(c.port)) ||
		    !t_sync_recv(sync, &c.peer, sizeof(c.peer)))
			t_fail("no port from the server");
		t_sync_send(sync, &me, sizeof(me));
		if (!(sc->flags & C_OWN_CONNECT)) {
			/* A byte each way: both ends settled on shared memory. */
			c.fd = t_connect(c.port);
			t_write_all(c.fd, "c", 1);
			t_read_all(c.fd, &b, 1);
			t_assert_smc(c.fd);
		}
		sc->client(&c);
	}
	/* Both sides stay (sockets open) until both are done. */
	signal(SIGUSR1, SIG_IGN);
	h_sync = -1;
	t_sync_send(sync, &d, 1);
	do
		if (!t_sync_recv(sync, &d, 1))
			t_fail("barrier: the other side went away");
	while (d != 'D');
	fclose(c.log);
	if (len)
		t_sync_send(logfd, text, len);
	_exit(0);
}

static const char *scenario_name(int i)
{
	return scenarios[i].name;
}

/* Known library bugs only when asked; what TSan cannot run only by name. */
static bool by_default(int i)
{
	return (!(scenarios[i].flags & KNOWN_BUG) || getenv("T_SIGNALS_ALL")) &&
	       !(T_TSAN && (scenarios[i].flags & NO_TSAN));
}

static bool run_scenario(int i)
{
	return t_diff_run(scenarios[i].name, scenarios[i].smc, &scenarios[i], side_main, true);
}

int main(int argc, char **argv)
{
	t_name = "t_signals";
	return t_diff_main(argc, argv, (int)ARRAY_LEN(scenarios), scenario_name, by_default,
			   run_scenario);
}
