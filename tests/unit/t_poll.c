// SPDX-License-Identifier: MIT
/*
 * t_poll.c - poll, ppoll, select and pselect over shared-memory
 * connections, alone and mixed with pipes, listeners and plain TCP, each
 * check against the kernel's rules for TCP sockets:
 *
 *   levels      POLLIN/POLLOUT follow the data; timeout 0 never waits
 *   timeout     nothing ready: 0 after the timeout; a late write wakes it
 *   hup         peer SHUT_WR: IN|RDHUP; both directions shut: HUP too;
 *               peer reset: ERR|HUP; POLLHUP/ERR reported even if not asked
 *   special     fd -1 ignored (revents 0), a closed fd gives POLLNVAL
 *   mixed       accelerated socket, pipe, listener and a plain TCP
 *               connection to a non-usmc process in one set; a sleeping
 *               poll is woken by each kind
 *   many        more descriptors than fit a small stack array (64 pairs):
 *               only the one written to reports
 *   ppoll       timeout, NULL timeout, and a signal mask (EINTR)
 *   select      fds >= 3 in read/write/except sets, a high fd (dup2 to
 *               200), count = bits set, timeout 0, expiry zeroes the
 *               timeval, invalid fd EBADF
 *   pselect     signal mask, EINTR
 *   wake_close  a poll blocked on an idle connection wakes when the peer
 *               closes
 *
 * Each check runs in its own process and must leave the counters with its
 * connections on shared memory ("mixed": plus one fallback, the client end
 * of the plain TCP connection).
 *
 * usage: t_poll [check...]
 */
#include "t_util.h"

#include <pthread.h>
#include <sys/select.h>

#define NOEV_MS		50
#define EV_MS		5000

static short poll1(int fd, short events, int ms)
{
	struct pollfd p = { .fd = fd, .events = events, .revents = 0x7fff };
	int n = poll(&p, 1, ms);

	if (n < 0)
		t_fail("poll: %s", strerror(errno));
	if (n == 0 && p.revents)
		t_fail("poll returned 0 with revents %#x", p.revents);
	return n ? p.revents : 0;
}

#define expect_rev(fd, events, ms, want)					\
	do {									\
		short r_ = poll1(fd, events, ms);				\
		if (r_ != (short)(want))					\
			t_fail("poll(%s): revents %#x, expected %#x", #events, r_, \
			       (unsigned int)(want));				\
	} while (0)

struct writer {
	int fd, ms;
};

static void *late_write(void *arg)
{
	struct writer *w = arg;

	t_msleep(w->ms);
	t_write_all(w->fd, "w", 1);
	return NULL;
}

static pthread_t write_later(struct writer *w)
{
	pthread_t th;

	if (pthread_create(&th, NULL, late_write, w))
		t_fail("pthread_create");
	return th;
}

static void drain(int fd, size_t n)
{
	char b[64];

	t_read_all(fd, b, n);
}

/* ---- checks ------------------------------------------------------------- */

static void check_levels(void)
{
	int c, s;

	t_pair_smc(&c, &s);
	expect_rev(c, POLLIN | POLLOUT, 0, POLLOUT);
	expect_rev(c, POLLIN, 0, 0);
	t_write_all(s, "abc", 3);
	expect_rev(c, POLLIN | POLLOUT, 0, POLLIN | POLLOUT);
	expect_rev(c, POLLIN | POLLRDNORM, 0, POLLIN | POLLRDNORM);
	expect_rev(c, POLLOUT | POLLWRNORM, 0, POLLOUT | POLLWRNORM);
	drain(c, 2);
	expect_rev(c, POLLIN, 0, POLLIN);
	drain(c, 1);
	expect_rev(c, POLLIN, 0, 0);
	expect_rev(s, POLLIN | POLLOUT | POLLRDHUP, 0, POLLOUT);
	close(c);
	close(s);
}

static void check_timeout(void)
{
	struct writer w;
	pthread_t th;
	int c, s;

	t_pair_smc(&c, &s);
	expect_rev(c, POLLIN, 100, 0);
	w = (struct writer){ s, 100 };
	th = write_later(&w);
	expect_rev(c, POLLIN, EV_MS, POLLIN);
	pthread_join(th, NULL);
	drain(c, 1);
	th = write_later(&w);
	expect_rev(c, POLLIN, -1, POLLIN);	/* infinite */
	pthread_join(th, NULL);
	drain(c, 1);
	close(c);
	close(s);
}

static void check_hup(void)
{
	int c, s;
	char b[8];

	/* Peer shuts down its direction: readable EOF, RDHUP, no HUP. */
	t_pair_smc(&c, &s);
	t_ok(shutdown(s, SHUT_WR));
	expect_rev(c, POLLIN | POLLOUT | POLLRDHUP, EV_MS, POLLIN | POLLOUT | POLLRDHUP);
	expect_rev(c, POLLOUT, 0, POLLOUT);		/* no HUP without asking for IN */
	t_assert(read(c, b, sizeof(b)) == 0);
	/* Both directions shut: HUP, reported even when not asked for. */
	t_ok(shutdown(c, SHUT_WR));
	expect_rev(c, POLLIN | POLLOUT | POLLRDHUP, 0, POLLIN | POLLOUT | POLLRDHUP | POLLHUP);
	expect_rev(c, 0, 0, POLLHUP);
	expect_rev(s, POLLIN | POLLRDHUP, EV_MS, POLLIN | POLLRDHUP | POLLHUP);
	close(c);
	close(s);

	/* Peer closes, nothing unread: like SHUT_WR (CLOSE_WAIT), no HUP. */
	t_pair_smc(&c, &s);
	close(s);
	expect_rev(c, POLLIN | POLLOUT | POLLRDHUP, EV_MS, POLLIN | POLLOUT | POLLRDHUP);
	close(c);

	/* Peer closes with our bytes unread: reset, ERR|HUP even for events 0. */
	t_pair_smc(&c, &s);
	t_write_all(c, "unread", 6);
	t_msleep(20);
	close(s);
	t_msleep(20);
	expect_rev(c, 0, EV_MS, POLLERR | POLLHUP);
	expect_rev(c, POLLIN | POLLOUT | POLLRDHUP, 0,
		   POLLIN | POLLOUT | POLLRDHUP | POLLERR | POLLHUP);
	close(c);
}

static void check_special(void)
{
	struct pollfd p[3];
	int c, s, bad;

	t_pair_smc(&c, &s);
	bad = t_ok(dup(c));
	close(bad);
	t_write_all(s, "x", 1);
	p[0] = (struct pollfd){ .fd = -1, .events = POLLIN, .revents = 0x7fff };
	p[1] = (struct pollfd){ .fd = c, .events = POLLIN };
	p[2] = (struct pollfd){ .fd = bad, .events = POLLIN };
	t_assert(poll(p, 3, EV_MS) == 2, "poll count");
	t_assert(p[0].revents == 0, "fd -1: revents %#x", p[0].revents);
	t_assert(p[1].revents == POLLIN, "socket: revents %#x", p[1].revents);
	t_assert(p[2].revents == POLLNVAL, "closed fd: revents %#x", p[2].revents);
	/* Negative fd: the events are ignored, the socket still works. */
	p[1].fd = -c;
	t_assert(poll(p, 2, 0) == 0, "negative fds");
	drain(c, 1);
	close(c);
	close(s);
}

static void check_mixed(void)
{
	struct pollfd p[4];
	struct writer w;
	pthread_t th;
	int c, s, pp[2], lfd, tcp, i, n;
	uint16_t lport, eport;
	pid_t pid;
	char m[16];

	t_pair_smc(&c, &s);
	t_ok(pipe(pp));
	lfd = t_listen(&lport);
	eport = t_start_plain_echo(&pid);
	tcp = t_connect(eport);
	t_tcp_conns++;
	t_fd_mode(tcp, m, sizeof(m));
	if (t_accel() && strcmp(m, "TCP"))
		t_fail("connection to a process without usmc: mode \"%s\", expected TCP", m);

	p[0] = (struct pollfd){ .fd = c, .events = POLLIN };
	p[1] = (struct pollfd){ .fd = pp[0], .events = POLLIN };
	p[2] = (struct pollfd){ .fd = lfd, .events = POLLIN };
	p[3] = (struct pollfd){ .fd = tcp, .events = POLLIN };
	t_assert(poll(p, 4, NOEV_MS) == 0, "nothing ready yet");

	/* Wake a sleeping poll with each kind in turn. */
	for (i = 0; i < 4; i++) {
		int k;

		if (i == 2) {
			/* A connection arriving at the listener. */
			int cc = t_connect(lport);

			n = poll(p, 4, EV_MS);
			t_assert(n == 1 && p[2].revents == POLLIN, "listener: n %d revents %#x", n,
				 p[2].revents);
			k = t_accept(lfd);
			/* Used once, so that both ends settle on shared memory. */
			t_write_all(cc, "l", 1);
			drain(k, 1);
			t_write_all(k, "l", 1);
			drain(cc, 1);
			t_smc_pairs++;
			close(k);
			close(cc);
			continue;
		}
		w = (struct writer){ i == 0 ? s : i == 1 ? pp[1] : tcp, 100 };
		th = write_later(&w);
		n = poll(p, 4, EV_MS);
		pthread_join(th, NULL);
		if (i == 3)	/* the echo comes back: wait for it, the write is not enough */
			n = poll(p, 4, EV_MS);
		t_assert(n == 1 && p[i].revents == POLLIN, "kind %d: n %d revents %#x %#x %#x %#x",
			 i, n, p[0].revents, p[1].revents, p[2].revents, p[3].revents);
		for (k = 0; k < 4; k++)
			t_assert(k == i || !p[k].revents, "kind %d: %d also reported", i, k);
		drain(i == 0 ? c : i == 1 ? pp[0] : tcp, 1);
	}
	/* All at once. */
	t_write_all(s, "a", 1);
	t_write_all(pp[1], "b", 1);
	t_write_all(tcp, "c", 1);
	t_msleep(20);
	n = poll(p, 4, EV_MS);
	t_assert(n == 3 && p[0].revents == POLLIN && p[1].revents == POLLIN && !p[2].revents &&
		 p[3].revents == POLLIN, "all: n %d", n);
	drain(c, 1);
	drain(pp[0], 1);
	drain(tcp, 1);
	close(tcp);
	t_wait_child(pid, "plain echo server");
	close(lfd);
	close(pp[0]);
	close(pp[1]);
	close(c);
	close(s);
}

#define MANY 64

static void check_many(void)
{
	struct pollfd p[MANY];
	int c[MANY], s[MANY], i, n;

	for (i = 0; i < MANY; i++) {
		t_pair_smc(&c[i], &s[i]);
		p[i] = (struct pollfd){ .fd = c[i], .events = POLLIN };
	}
	t_assert(poll(p, MANY, 0) == 0, "idle set");
	t_write_all(s[37], "x", 1);
	n = poll(p, MANY, EV_MS);
	t_assert(n == 1 && p[37].revents == POLLIN, "n %d revents[37] %#x", n, p[37].revents);
	for (i = 0; i < MANY; i++)
		t_assert(i == 37 || !p[i].revents, "%d reported %#x", i, p[i].revents);
	drain(c[37], 1);
	/* Writable: all of them. */
	for (i = 0; i < MANY; i++)
		p[i].events = POLLOUT;
	t_assert(poll(p, MANY, 0) == MANY, "all writable");
	for (i = 0; i < MANY; i++) {
		close(c[i]);
		close(s[i]);
	}
}

static volatile sig_atomic_t sigs;

static void on_sig(int sig)
{
	(void)sig;
	sigs++;
}

static void check_ppoll(void)
{
	struct sigaction sa = { .sa_handler = on_sig };
	struct timespec ts = { 0, NOEV_MS * 1000000L };
	struct pollfd p;
	sigset_t block, empty, old;
	struct writer w;
	pthread_t th;
	int c, s, n;

	t_pair_smc(&c, &s);
	p = (struct pollfd){ .fd = c, .events = POLLIN };
	t_assert(ppoll(&p, 1, &ts, NULL) == 0, "ppoll timeout");
	ts.tv_nsec = 0;
	t_assert(ppoll(&p, 1, &ts, NULL) == 0, "ppoll zero timeout");
	w = (struct writer){ s, 100 };
	th = write_later(&w);
	t_assert(ppoll(&p, 1, NULL, NULL) == 1 && p.revents == POLLIN, "ppoll NULL timeout");
	pthread_join(th, NULL);
	drain(c, 1);

	sigaction(SIGUSR1, &sa, NULL);
	sigemptyset(&empty);
	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	sigs = 0;
	raise(SIGUSR1);
	errno = 0;
	n = ppoll(&p, 1, NULL, &empty);
	t_assert(n == -1 && errno == EINTR && sigs == 1, "ppoll mask: %d %s sigs %d", n,
		 t_errname(errno), (int)sigs);
	raise(SIGUSR1);
	ts.tv_nsec = NOEV_MS * 1000000L;
	n = ppoll(&p, 1, &ts, &block);
	t_assert(n == 0 && sigs == 1, "ppoll with the signal blocked: %d sigs %d", n, (int)sigs);
	t_write_all(s, "r", 1);
	n = ppoll(&p, 1, &ts, &block);
	t_assert(n == 1 && p.revents == POLLIN && sigs == 1, "ppoll ready: %d", n);
	drain(c, 1);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	t_assert(sigs == 2, "sigs %d", (int)sigs);
	signal(SIGUSR1, SIG_DFL);
	close(c);
	close(s);
}

static void check_select(void)
{
	fd_set r, w, e;
	struct timeval tv;
	int c, s, pp[2], hi, n, maxfd;

	t_pair_smc(&c, &s);
	t_ok(pipe(pp));
	hi = t_ok(dup2(c, 200));
	t_assert(c >= 3 && pp[0] >= 3);
	maxfd = 201;

	/* Timeout 0, nothing readable; writable: the socket (both numbers). */
	FD_ZERO(&r);
	FD_ZERO(&w);
	FD_ZERO(&e);
	FD_SET(c, &r);
	FD_SET(hi, &r);
	FD_SET(pp[0], &r);
	FD_SET(c, &w);
	FD_SET(hi, &w);
	FD_SET(c, &e);
	tv = (struct timeval){ 0, 0 };
	n = select(maxfd, &r, &w, &e, &tv);
	t_assert(n == 2 && FD_ISSET(c, &w) && FD_ISSET(hi, &w) && !FD_ISSET(c, &r) &&
		 !FD_ISSET(hi, &r) && !FD_ISSET(pp[0], &r) && !FD_ISSET(c, &e),
		 "select timeout 0: %d", n);

	/* Data on the socket and the pipe: every bit counts. */
	t_write_all(s, "x", 1);
	t_write_all(pp[1], "y", 1);
	FD_ZERO(&r);
	FD_ZERO(&w);
	FD_ZERO(&e);
	FD_SET(c, &r);
	FD_SET(hi, &r);
	FD_SET(pp[0], &r);
	FD_SET(hi, &w);
	FD_SET(hi, &e);
	tv = (struct timeval){ 5, 0 };
	n = select(maxfd, &r, &w, &e, &tv);
	t_assert(n == 4 && FD_ISSET(c, &r) && FD_ISSET(hi, &r) && FD_ISSET(pp[0], &r) &&
		 FD_ISSET(hi, &w) && !FD_ISSET(hi, &e), "select ready: %d", n);
	drain(hi, 1);
	drain(pp[0], 1);

	/* Expiry: 0 and the timeval zeroed (Linux writes back the time left). */
	FD_ZERO(&r);
	FD_SET(hi, &r);
	FD_SET(pp[0], &r);
	tv = (struct timeval){ 0, NOEV_MS * 1000 };
	n = select(maxfd, &r, NULL, NULL, &tv);
	t_assert(n == 0 && !FD_ISSET(hi, &r) && !FD_ISSET(pp[0], &r), "select expiry: %d", n);
	t_assert(tv.tv_sec == 0 && tv.tv_usec == 0, "timeval after expiry %ld.%06ld",
		 (long)tv.tv_sec, (long)tv.tv_usec);

	/* A sleeping select woken by the peer. */
	{
		struct writer wr = { s, 100 };
		pthread_t th = write_later(&wr);

		FD_ZERO(&r);
		FD_SET(c, &r);
		FD_SET(pp[0], &r);
		n = select(maxfd, &r, NULL, NULL, NULL);
		pthread_join(th, NULL);
		t_assert(n == 1 && FD_ISSET(c, &r), "select wake: %d", n);
		drain(c, 1);
	}

	/* A closed descriptor in the set: EBADF. */
	close(hi);
	FD_ZERO(&r);
	FD_SET(c, &r);
	FD_SET(hi, &r);
	tv = (struct timeval){ 0, 0 };
	errno = 0;
	n = select(maxfd, &r, NULL, NULL, &tv);
	t_assert(n == -1 && errno == EBADF, "select with a closed fd: %d %s", n, t_errname(errno));
	close(pp[0]);
	close(pp[1]);
	close(c);
	close(s);
}

static void check_pselect(void)
{
	struct sigaction sa = { .sa_handler = on_sig };
	struct timespec ts = { 0, NOEV_MS * 1000000L };
	sigset_t block, empty, old;
	fd_set r;
	int c, s, n;

	t_pair_smc(&c, &s);
	sigaction(SIGUSR1, &sa, NULL);
	sigemptyset(&empty);
	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	sigs = 0;
	raise(SIGUSR1);
	FD_ZERO(&r);
	FD_SET(c, &r);
	errno = 0;
	n = pselect(c + 1, &r, NULL, NULL, NULL, &empty);
	t_assert(n == -1 && errno == EINTR && sigs == 1, "pselect mask: %d %s sigs %d", n,
		 t_errname(errno), (int)sigs);
	raise(SIGUSR1);
	FD_ZERO(&r);
	FD_SET(c, &r);
	n = pselect(c + 1, &r, NULL, NULL, &ts, &block);
	t_assert(n == 0 && sigs == 1, "pselect with the signal blocked: %d", n);
	t_write_all(s, "q", 1);
	FD_ZERO(&r);
	FD_SET(c, &r);
	n = pselect(c + 1, &r, NULL, NULL, &ts, &block);
	t_assert(n == 1 && FD_ISSET(c, &r), "pselect ready: %d", n);
	drain(c, 1);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	t_assert(sigs == 2, "sigs %d", (int)sigs);
	signal(SIGUSR1, SIG_DFL);
	close(c);
	close(s);
}

struct closer {
	int fd, ms;
};

static void *late_close(void *arg)
{
	struct closer *k = arg;

	t_msleep(k->ms);
	close(k->fd);
	return NULL;
}

static void check_wake_close(void)
{
	struct closer k;
	pthread_t th;
	int c, s;

	t_pair_smc(&c, &s);
	k = (struct closer){ s, 100 };
	if (pthread_create(&th, NULL, late_close, &k))
		t_fail("pthread_create");
	expect_rev(c, POLLIN | POLLRDHUP, EV_MS, POLLIN | POLLRDHUP);
	pthread_join(th, NULL);
	t_assert(read(c, (char[4]){ 0 }, 4) == 0);
	close(c);
}

static const struct t_check checks[] = {
	{ "levels", check_levels },
	{ "timeout", check_timeout },
	{ "hup", check_hup },
	{ "special", check_special },
	{ "mixed", check_mixed },
	{ "many", check_many },
	{ "ppoll", check_ppoll },
	{ "select", check_select },
	{ "pselect", check_pselect },
	{ "wake_close", check_wake_close },
};

int main(int argc, char **argv)
{
	t_name = "t_poll";
	if (argc == 3 && !strcmp(argv[1], "plain-echo"))
		return t_plain_echo_main(argv[2]);
	signal(SIGPIPE, SIG_IGN);
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
