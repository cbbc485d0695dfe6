// SPDX-License-Identifier: MIT
/*
 * t_oob.c - what shared-memory rings cannot carry: urgent data (MSG_OOB,
 * SIOCATMARK, SO_OOBINLINE, POLLPRI), O_ASYNC signals (SIGIO, F_SETSIG) and
 * zero-copy completions (SO_ZEROCOPY + MSG_ZEROCOPY: the error queue), the
 * error queue itself (MSG_ERRQUEUE), and receive options that need the
 * kernel's receive queue (SO_PEEK_OFF, SO_TIMESTAMP; TCP_INQ is the
 * ring's: t_inq).
 * Under usmc such a connection moves to TCP first, every byte in order,
 * with a named reason (oob, async_io, unsupported_option), and then
 * behaves as TCP.
 *
 * Differential: every scenario writes what it observes into a transcript.
 * Accelerated, the program runs itself again with USMC_DISABLE=1 (plain
 * TCP through the same interposition) and the two transcripts must be
 * identical; the accelerated run also checks with the counters that each
 * connection was on shared memory before and moved with its reason after.
 */
#include "t_util.h"
#include "t_selfdiff.h"

#include <linux/errqueue.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>

#define OBS	T_OBS

/* ---- observations ------------------------------------------------------- */

static void obs_rc(const char *what, ssize_t rc)
{
	OBS("%s: %zd %s\n", what, rc, rc < 0 ? t_errname(errno) : "");
}

static int atmark(int fd)
{
	int v = -1;

	t_ok(ioctl(fd, SIOCATMARK, &v));
	return v;
}

/* Wait (bounded) for urgent data: POLLPRI as the kernel reports it. */
static void obs_pollpri(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLPRI };
	int rc = poll(&p, 1, 5000);

	OBS("poll POLLPRI: %d revents %s\n", rc, p.revents & POLLPRI ? "PRI" : "-");
}

static void obs_recv_oob(int fd)
{
	char c = 0;
	ssize_t n = recv(fd, &c, 1, MSG_OOB | MSG_DONTWAIT);

	OBS("recv MSG_OOB: %zd %s '%c'\n", n, n < 0 ? t_errname(errno) : "", n == 1 ? c : '-');
}

/* Read up to the urgent mark, whatever the chunks: what came before it. */
static void obs_until_mark(int fd)
{
	char all[256], buf[64];
	size_t len = 0;
	int i;

	for (i = 0; i < 64 && !atmark(fd); i++) {
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (n <= 0)
			break;
		if (len + (size_t)n < sizeof(all)) {
			memcpy(all + len, buf, (size_t)n);
			len += (size_t)n;
		}
	}
	OBS("before the mark: \"%.*s\", at mark %d\n", (int)len, all, atmark(fd));
}

static void obs_read(int fd, size_t n, const char *who)
{
	char buf[256];

	t_assert(n < sizeof(buf));
	t_read_all(fd, buf, n);
	OBS("%s read \"%.*s\"\n", who, (int)n, buf);
}

/* ---- scenarios -------------------------------------------------------- */

/* Bytes, then urgent data, then bytes; the receiver also has bytes of its
 * own queued for the sender, which has not read them when it moves. */
static void sc_oob(void)
{
	long long before = t_fallbacks("oob");
	int c, s;

	t_pair_smc(&c, &s);
	obs_recv_oob(s);
	OBS("at mark before: %d\n", atmark(s));
	t_write_all(s, "pending", 7);
	t_write_all(c, "hello", 5);
	obs_rc("send abc! MSG_OOB", send(c, "abc!", 4, MSG_OOB));
	t_write_all(c, "world", 5);
	t_expect_moved(c, "oob");
	obs_pollpri(s);
	obs_until_mark(s);
	obs_recv_oob(s);
	obs_recv_oob(s);
	obs_read(s, 5, "server");
	obs_read(c, 7, "client");
	t_xfer(s, c, "after");
	t_xfer(c, s, "back");
	OBS("exchange after the move: ok\n");
	if (t_accel())
		t_assert(t_fallbacks("oob") == before + 1, "oob fallbacks %lld -> %lld", before,
			 t_fallbacks("oob"));
	close(c);
	close(s);
}

static void sc_oobinline(void)
{
	int c, s, on = 1, v = 0;
	socklen_t l = sizeof(v);

	t_pair_smc(&c, &s);
	t_ok(setsockopt(s, SOL_SOCKET, SO_OOBINLINE, &on, sizeof(on)));
	t_ok(getsockopt(s, SOL_SOCKET, SO_OOBINLINE, &v, &l));
	OBS("SO_OOBINLINE: %d\n", !!v);
	t_write_all(c, "hello", 5);
	obs_rc("send ! MSG_OOB", send(c, "!", 1, MSG_OOB));
	t_write_all(c, "world", 5);
	t_expect_moved(c, "oob");
	obs_pollpri(s);
	obs_until_mark(s);
	obs_recv_oob(s);
	obs_read(s, 6, "server");
	t_xfer(s, c, "reply");
	close(c);
	close(s);
}

static volatile sig_atomic_t sig_n, sig_fd, sig_code;

static void on_sig(int sig, siginfo_t *si, void *uc)
{
	sig_n++;
	sig_fd = si->si_fd;
	sig_code = si->si_code;
}

static void catch(int sig)
{
	struct sigaction sa = { .sa_sigaction = on_sig, .sa_flags = SA_SIGINFO | SA_RESTART };

	sigemptyset(&sa.sa_mask);
	t_ok(sigaction(sig, &sa, NULL));
}

/* Wait (bounded) for the signal the kernel raises for fd's data. */
static void obs_signal(const char *what, int fd, bool siginfo)
{
	int i;

	for (i = 0; i < 500 && !sig_n; i++)
		t_msleep(10);
	OBS("%s: %s", what, sig_n ? "raised" : "none");
	if (siginfo)
		OBS(", si_fd is the socket %d, si_code POLL_IN %d", sig_fd == fd, sig_code == POLL_IN);
	OBS("\n");
}

/* O_ASYNC with SIGIO on an established connection (fcntl F_SETFL). */
static void sc_sigio(void)
{
	long long before = t_fallbacks("async_io");
	int c, s, fl;

	catch(SIGIO);
	t_pair_smc(&c, &s);
	t_write_all(c, "early", 5);	/* in the ring when s moves */
	t_ok(fcntl(s, F_SETOWN, getpid()));
	fl = t_ok(fcntl(s, F_GETFL));
	t_ok(fcntl(s, F_SETFL, fl | O_ASYNC));
	OBS("F_GETOWN is us: %d, O_ASYNC: %d\n", fcntl(s, F_GETOWN) == getpid(),
	    !!(fcntl(s, F_GETFL) & O_ASYNC));
	t_expect_moved(s, "async_io");
	sig_n = 0;
	t_write_all(c, "ping", 4);
	obs_signal("SIGIO", s, false);
	obs_read(s, 9, "server");
	t_xfer(s, c, "pong");
	if (t_accel())
		t_assert(t_fallbacks("async_io") == before + 1);
	close(c);
	close(s);
	signal(SIGIO, SIG_DFL);
}

/* F_SETSIG: a real-time signal with the descriptor in si_fd (FIOASYNC). */
static void sc_setsig(void)
{
	int c, s, on = 1;

	catch(SIGRTMIN);
	t_pair_smc(&c, &s);
	t_ok(fcntl(s, F_SETOWN, getpid()));
	t_ok(fcntl(s, F_SETSIG, SIGRTMIN));
	t_ok(ioctl(s, FIOASYNC, &on));
	OBS("F_GETSIG: %d\n", fcntl(s, F_GETSIG) == SIGRTMIN);
	t_expect_moved(s, "async_io");
	sig_n = 0;
	t_write_all(c, "x", 1);
	obs_signal("F_SETSIG", s, true);
	obs_read(s, 1, "server");
	close(c);
	close(s);
	signal(SIGRTMIN, SIG_DFL);
}

/* O_ASYNC set before connect: that connection never goes to shared memory. */
static void sc_async_connect(void)
{
	long long before = t_fallbacks("async_io");
	struct sockaddr_in a;
	uint16_t port;
	int lfd = t_listen(&port), c, s, fl;

	catch(SIGIO);
	a = t_addr(port);
	c = t_ok(socket(AF_INET, SOCK_STREAM, 0));
	t_ok(fcntl(c, F_SETOWN, getpid()));
	fl = t_ok(fcntl(c, F_GETFL));
	t_ok(fcntl(c, F_SETFL, fl | O_ASYNC));
	t_ok(connect(c, (struct sockaddr *)&a, sizeof(a)));
	s = t_accept(lfd);
	close(lfd);
	sig_n = 0;
	t_write_all(s, "hi", 2);
	obs_signal("SIGIO (set before connect)", c, false);
	obs_read(c, 2, "client");
	t_expect_moved(c, "async_io");
	if (t_accel())
		t_assert(t_fallbacks("async_io") == before + 1);
	close(c);
	close(s);
	signal(SIGIO, SIG_DFL);
}

/*
 * FIONREAD and SIOCOUTQ on a server's connection before it acted, from a
 * client that stays TCP (O_ASYNC before connect): undecided, with no rings
 * yet (postfix's smtpd asks FIONREAD first: it crashed in usmc).
 */
static void sc_fionread_undecided(void)
{
	struct sockaddr_in a;
	uint16_t port;
	int lfd = t_listen(&port), c, s, fl, q;

	a = t_addr(port);
	c = t_ok(socket(AF_INET, SOCK_STREAM, 0));
	fl = t_ok(fcntl(c, F_GETFL));
	t_ok(fcntl(c, F_SETFL, fl | O_ASYNC));
	t_ok(connect(c, (struct sockaddr *)&a, sizeof(a)));
	s = t_accept(lfd);
	close(lfd);
	q = -1;
	OBS("server FIONREAD before any byte: %d, %d\n", ioctl(s, FIONREAD, &q), q);
	q = -1;
	OBS("server SIOCOUTQ: %d, %d\n", ioctl(s, SIOCOUTQ, &q), q);
	t_write_all(c, "hello", 5);
	OBS("server readable: %d\n", !!(t_wait_fd(s, POLLIN, 5000) & POLLIN));
	q = -1;
	OBS("server FIONREAD after 5 bytes: %d, %d\n", ioctl(s, FIONREAD, &q), q);
	obs_read(s, 5, "server");
	t_expect_moved(c, "async_io");
	close(c);
	close(s);
}

#define MIDSEND_LEN	(8u << 20)	/* more than a ring: the sender blocks */
#define MIDSEND_FIRST	100000u

/*
 * The peer is blocked in send() with its ring full when the receiver sends
 * urgent data: it finishes on TCP, every byte in order, and gets the
 * urgent byte.
 */
static void sc_midsend(void)
{
	int c, s, lp[2];
	char *log;
	pid_t pid;

	t_pair_smc(&c, &s);
	t_ok(pipe(lp));
	pid = t_fork_helper();
	if (pid == 0) {
		FILE *f = fdopen(lp[1], "w");
		struct pollfd p = { .fd = c, .events = POLLPRI };
		char u = 0;
		int rc;

		close(lp[0]);
		close(s);
		t_send_pat(c, 7, MIDSEND_LEN);
		fprintf(f, "sender: all %u bytes sent\n", MIDSEND_LEN);
		rc = poll(&p, 1, 5000);
		fprintf(f, "sender: poll POLLPRI %d %s\n", rc, p.revents & POLLPRI ? "PRI" : "-");
		fprintf(f, "sender: at mark %d\n", atmark(c));
		rc = (int)recv(c, &u, 1, MSG_OOB);
		fprintf(f, "sender: recv MSG_OOB %d '%c'\n", rc, rc == 1 ? u : '-');
		t_write_all(c, "bye", 3);
		/* Until the receiver is done: our close with the urgent byte's
		 * segment unread would reset the connection (as TCP does). */
		rc = (int)read(c, &u, 1);
		fprintf(f, "sender: then %d\n", rc);
		fclose(f);
		close(c);	/* the last reference: its `usmc stat` entry goes */
		_exit(0);
	}
	close(lp[1]);
	close(c);
	t_recv_pat(s, 7, MIDSEND_FIRST);
	obs_rc("receiver: send U MSG_OOB", send(s, "U", 1, MSG_OOB));
	t_expect_moved(s, "oob");
	{
		char buf[16384];
		size_t off = MIDSEND_FIRST;

		while (off < MIDSEND_LEN) {
			size_t n = MIN(sizeof(buf), MIDSEND_LEN - off);
			long bad;

			t_read_all(s, buf, n);
			bad = t_pat_check(7, off, buf, n);
			if (bad >= 0) {
				size_t at = ((size_t)bad + 7 + 64) & ~(size_t)7;
				uint64_t w, g;

				memcpy(&w, buf + at, 8);
				for (g = 0; g < MIDSEND_LEN / 8 && t_pat_word(7, g) != w; g++)
					;
				t_fail("midsend: wrong byte at offset %zu (chunk at %zu, %zu bytes); "
				       "byte %zu is stream offset %llu", off + (size_t)bad, off, n,
				       off + at, (unsigned long long)g * 8);
			}
			off += n;
		}
	}
	OBS("receiver: all %u bytes intact\n", MIDSEND_LEN);
	obs_read(s, 3, "receiver");
	close(s);
	log = NULL;
	{
		char buf[1024];
		ssize_t n;
		size_t len = 0;

		while ((n = read(lp[0], buf + len, sizeof(buf) - 1 - len)) > 0)
			len += (size_t)n;
		buf[len] = '\0';
		log = strdup(buf);
	}
	close(lp[0]);
	{
		int st;

		t_ok(waitpid(pid, &st, 0));
		t_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "sender status %d", st);
	}
	OBS("%s", log);
	free(log);
}

/*
 * The peer is blocked in recv() when the sender sends urgent data: it
 * wakes with the bytes before the mark, then finds the urgent byte.
 */
static void sc_midrecv(void)
{
	int c, s, lp[2], st;
	char log[512];
	ssize_t n;
	pid_t pid;

	t_pair_smc(&c, &s);
	t_ok(pipe(lp));
	pid = t_fork_helper();
	if (pid == 0) {
		char all[64], u = 0;
		size_t len = 0;
		int i;

		close(lp[0]);
		close(c);
		n = recv(s, all, 3, MSG_WAITALL);	/* asleep until the bytes come */
		len = n > 0 ? (size_t)n : 0;
		{
			struct pollfd p = { .fd = s, .events = POLLPRI };

			t_assert(poll(&p, 1, 5000) == 1);
		}
		for (i = 0; i < 64 && !atmark(s) && len < sizeof(all); i++) {
			n = recv(s, all + len, sizeof(all) - len, MSG_DONTWAIT);
			if (n <= 0)
				break;
			len += (size_t)n;
		}
		n = recv(s, &u, 1, MSG_OOB);
		snprintf(log, sizeof(log), "receiver: \"%.*s\" before the mark, at mark %d, "
			 "urgent %zd '%c'\n", (int)len, all, atmark(s), n, n == 1 ? u : '-');
		t_ok(write(lp[1], log, strlen(log)));
		t_write_all(s, "k", 1);
		close(s);
		_exit(0);
	}
	close(lp[1]);
	t_msleep(50);	/* the receiver most likely asleep in recv: either way the same */
	t_write_all(c, "xyz", 3);
	obs_rc("sender: send ab! MSG_OOB", send(c, "ab!", 3, MSG_OOB));
	t_expect_moved(c, "oob");
	obs_read(c, 1, "sender");
	n = read(lp[0], log, sizeof(log) - 1);
	log[n > 0 ? n : 0] = '\0';
	t_ok(waitpid(pid, &st, 0));
	t_assert(WIFEXITED(st) && !WEXITSTATUS(st));
	OBS("%s", log);
	close(lp[0]);
	close(c);
	close(s);
}

/* The zero-copy completion a send should have queued (the error queue). */
static void obs_zc_completion(int fd)
{
	struct pollfd p = { .fd = fd, .events = 0 };
	char control[256];
	struct msghdr m = { .msg_control = control, .msg_controllen = sizeof(control) };
	struct cmsghdr *cm;
	int n = poll(&p, 1, 1000);

	OBS("poll: %d revents %#x\n", n, n > 0 ? p.revents : 0);
	if (recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) {
		OBS("error queue: %s\n", t_errname(errno));
		return;
	}
	for (cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
		struct sock_extended_err ee;

		memcpy(&ee, CMSG_DATA(cm), sizeof(ee));
		OBS("error queue: level %d type %d origin %u errno %u range %u..%u\n",
		    cm->cmsg_level, cm->cmsg_type, ee.ee_origin, ee.ee_errno, ee.ee_info,
		    ee.ee_data);
	}
}

static void read_big(int fd, const char *want, size_t n)
{
	static char got[100000];

	t_assert(n <= sizeof(got));
	t_read_all(fd, got, n);
	OBS("server read %zu bytes: %s\n", n, memcmp(got, want, n) ? "DIFFERENT" : "same");
}

static void sc_zerocopy(void)
{
	static char big[100000];
	int c, s, on = 1;

	t_pair_smc(&c, &s);
	memset(big, 'z', sizeof(big));
	/* Without SO_ZEROCOPY the kernel ignores the flag: nothing queued. */
	obs_rc("send MSG_ZEROCOPY, option off", send(c, big, sizeof(big), MSG_ZEROCOPY));
	read_big(s, big, sizeof(big));
	obs_zc_completion(c);
	t_ok(setsockopt(c, SOL_SOCKET, SO_ZEROCOPY, &on, sizeof(on)));
	obs_rc("send MSG_ZEROCOPY", send(c, big, sizeof(big), MSG_ZEROCOPY));
	t_expect_moved(c, "unsupported_option");
	read_big(s, big, sizeof(big));
	obs_zc_completion(c);
	t_xfer(s, c, "after");
	t_xfer(c, s, "back");
	OBS("exchange after the move: ok\n");
	close(c);
	close(s);
}

/* The error queue is not the stream: MSG_ERRQUEUE on a connection on
 * shared memory with bytes in its ring (it read them and lost them). */
static void sc_errqueue(void)
{
	char b[16];
	int c, s;

	t_pair_smc(&c, &s);
	t_write_all(c, "stream", 6);
	t_assert(t_wait_fd(s, POLLIN, 5000) & POLLIN, "nothing came");
	obs_rc("recv MSG_ERRQUEUE|MSG_DONTWAIT", recv(s, b, sizeof(b), MSG_ERRQUEUE | MSG_DONTWAIT));
	t_assert_smc(s);
	obs_read(s, 6, "server");
	close(c);
	close(s);
}

/* Receive options a ring cannot honour: a peek offset, control messages
 * with every read.  Set on a connection on shared memory: it moves to TCP
 * (unsupported_option), and the option works as TCP's. */
static void sc_rxopts(void)
{
	static const struct { int level, name; const char *what; } opt[] = {
		{ SOL_SOCKET, SO_PEEK_OFF, "SO_PEEK_OFF" },
		{ SOL_SOCKET, SO_TIMESTAMP, "SO_TIMESTAMP" },
	};
	char b[8], cbuf[256];
	size_t i;
	int c, s, v;

	for (i = 0; i < ARRAY_LEN(opt); i++) {
		struct iovec iov = { b, 4 };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
				    .msg_controllen = sizeof(cbuf) };
		struct cmsghdr *cm;

		t_pair_smc(&c, &s);
		v = opt[i].name == SO_PEEK_OFF ? 0 : 1;
		t_ok(setsockopt(s, opt[i].level, opt[i].name, &v, sizeof(v)));
		t_expect_moved(s, "unsupported_option");
		t_write_all(c, "ABCDEFGH", 8);
		t_assert(t_wait_fd(s, POLLIN, 5000) & POLLIN, "nothing came");
		obs_rc(opt[i].what, recvmsg(s, &m, opt[i].name == SO_PEEK_OFF ? MSG_PEEK : 0));
		/* The first timestamps after SO_TIMESTAMP is turned on may be
		 * missing even over TCP (the kernel enables them lazily). */
		for (cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm))
			if (opt[i].name != SO_TIMESTAMP)
				OBS("%s: cmsg level %d type %d\n", opt[i].what, cm->cmsg_level,
				    cm->cmsg_type);
		OBS("%s: [%.4s]\n", opt[i].what, b);
		obs_rc("then recv 4", recv(s, b, 4, opt[i].name == SO_PEEK_OFF ? MSG_PEEK : 0));
		OBS("%s: [%.4s]\n", opt[i].what, b);
		close(c);
		close(s);
	}
}

/* The same options set before the connection: on the client's socket
 * before connect(), on the listener before accept() (the kernel copies
 * them to the accepted socket): that connection stays TCP. */
static void sc_rxopts_before(void)
{
	struct sockaddr_in a;
	struct msghdr m = { 0 };
	struct iovec iov;
	char b[8], cbuf[256];
	uint16_t port;
	int lfd, c, s, on = 1, zero = 0;

	lfd = t_listen(&port);
	a = t_addr(port);
	c = t_ok(socket(AF_INET, SOCK_STREAM, 0));
	t_ok(setsockopt(c, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on)));
	t_ok(connect(c, (struct sockaddr *)&a, sizeof(a)));
	s = t_accept(lfd);
	t_expect_moved(c, "unsupported_option");
	t_write_all(s, "ABCD", 4);
	t_assert(t_wait_fd(c, POLLIN, 5000) & POLLIN, "nothing came");
	iov = (struct iovec){ b, 4 };
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = cbuf;
	m.msg_controllen = sizeof(cbuf);
	obs_rc("SO_TIMESTAMPNS before connect", recvmsg(c, &m, 0));
	OBS("SO_TIMESTAMPNS before connect: [%.4s]\n", b);
	close(c);
	close(s);
	t_ok(setsockopt(lfd, SOL_SOCKET, SO_PEEK_OFF, &zero, sizeof(zero)));
	c = t_connect(port);
	s = t_accept(lfd);
	t_write_all(c, "ABCDEFGH", 8);
	t_assert(t_wait_fd(s, POLLIN, 5000) & POLLIN, "nothing came");
	obs_rc("SO_PEEK_OFF on the listener, peek 4", recv(s, b, 4, MSG_PEEK));
	obs_rc("then peek 4", recv(s, b, 4, MSG_PEEK));
	OBS("peeked [%.4s]\n", b);
	t_expect_moved(c, "unsupported_option");
	close(c);
	close(s);
	close(lfd);
}

static const struct t_scenario scenarios[] = {
	{ "oob", sc_oob },
	{ "oobinline", sc_oobinline },
	{ "sigio", sc_sigio },
	{ "setsig", sc_setsig },
	{ "async_connect", sc_async_connect },
	{ "fionread_undecided", sc_fionread_undecided },
	{ "midsend", sc_midsend },
	{ "midrecv", sc_midrecv },
	{ "zerocopy", sc_zerocopy },
	{ "errqueue", sc_errqueue },
	{ "rxopts", sc_rxopts },
	{ "rxopts_before", sc_rxopts_before },
};

int main(int argc, char **argv)
{
	t_name = "t_oob";
	return t_selfdiff_main(argc, argv, scenarios, ARRAY_LEN(scenarios));
}
