/* SPDX-License-Identifier: MIT */
/*
 * t_util.h - helpers shared by the standalone usmc test programs.
 *
 * Every program is one feature: exit 0 pass, 1 fail, 77 skip.  Programs
 * run with LD_PRELOAD=libusmc.so (tests/test_unit.py sets it, a fresh
 * USMC_RUNDIR per run), so every TCP socket below goes through usmc unless
 * USMC_DISABLE=1.  Helpers here only use plain libc; the counters come from
 * `usmc stat --json` (path in USMC_CLI, else guessed next to the program;
 * those helpers are in t_stat.h, included at the end of this header).
 *
 * A failed check prints file:line and the reason, then exits 1 (in a child
 * too: the parent sees the status).  Everything is static: each program
 * includes this header once.
 */
#ifndef T_UTIL_H
#define T_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define T_EXIT_PASS	0
#define T_EXIT_FAIL	1
#define T_EXIT_SKIP	77

#define T_UNUSED	__attribute__((unused))
#ifndef ARRAY_LEN
#define ARRAY_LEN(a)	(sizeof(a) / sizeof((a)[0]))
#endif
#ifndef MIN
#define MIN(a, b)	((a) < (b) ? (a) : (b))
#endif

static const char *t_name = "t";

/* ---- failing ----------------------------------------------------------- */

#define t_fail(...)	t_fail_at(__FILE__, __LINE__, __VA_ARGS__)
#define t_assert(cond, ...)						\
	do {								\
		if (!(cond))						\
			t_fail_at(__FILE__, __LINE__, "assert(" #cond ") " __VA_ARGS__); \
	} while (0)
/* A call that must succeed (returns >= 0); prints errno otherwise. */
#define t_ok(expr)							\
	({								\
		__typeof__(expr) t_r_ = (expr);				\
		if (t_r_ < 0)						\
			t_fail_at(__FILE__, __LINE__, "%s: %s", #expr,	\
				  strerror(errno));			\
		t_r_;							\
	})

static T_UNUSED __attribute__((noreturn, format(printf, 3, 4)))
void t_fail_at(const char *file, int line, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	int n;

	n = snprintf(buf, sizeof(buf), "%s[%d]: FAIL %s:%d: ", t_name, (int)getpid(), file, line);
	va_start(ap, fmt);
	vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", buf);
	fflush(NULL);
	_exit(T_EXIT_FAIL);
}

static T_UNUSED __attribute__((format(printf, 1, 2))) void t_info(const char *fmt, ...)
{
	va_list ap;

	if (!getenv("T_VERBOSE"))
		return;
	fprintf(stderr, "%s[%d]: ", t_name, (int)getpid());
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static T_UNUSED __attribute__((noreturn)) void t_skip(const char *why)
{
	fprintf(stderr, "%s: SKIP: %s\n", t_name, why);
	exit(T_EXIT_SKIP);
}

/* errno as its symbolic name ("EAGAIN"), stable across transports. */
static T_UNUSED const char *t_errname(int e)
{
	const char *n = e ? strerrorname_np(e) : "0";

	return n ? n : "E?";
}

static T_UNUSED long t_env_long(const char *name, long def)
{
	const char *s = getenv(name);

	return s && *s ? strtol(s, NULL, 0) : def;
}

static T_UNUSED void t_msleep(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static T_UNUSED uint64_t t_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A process's or a thread's scheduler state ('S' asleep, 'T' stopped), from /proc. */
static T_UNUSED char t_proc_state(pid_t pid)
{
	char path[64], buf[256], *p;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	t_assert(f, "%s: %s", path, strerror(errno));
	p = fgets(buf, sizeof(buf), f);
	fclose(f);
	p = p ? strrchr(buf, ')') : NULL;
	t_assert(p && p[1] == ' ', "%s: %s", path, buf);
	return p[2];
}

/* pid (a process, or a thread of ours) in state want, times looks in a
 * row; 20 s at most, and never a zombie. */
static T_UNUSED void t_wait_state(pid_t pid, char want, int times)
{
	uint64_t until = t_now_ms() + 20000;
	int seen = 0;
	char st;

	while (seen < times) {
		st = t_proc_state(pid);
		t_assert(st != 'Z' && t_now_ms() < until, "%d: state %c, waited for %c", (int)pid,
			 st, want);
		seen = st == want ? seen + 1 : 0;
		t_msleep(2);
	}
}

/* ---- randomness and patterns ------------------------------------------ */

static T_UNUSED uint64_t t_rand(uint64_t *s)
{
	uint64_t x = (*s += 0x9e3779b97f4a7c15ULL);

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* Uniform-ish in [lo, hi]. */
static T_UNUSED uint64_t t_rand_range(uint64_t *s, uint64_t lo, uint64_t hi)
{
	return lo + t_rand(s) % (hi - lo + 1);
}

/* Word g (bytes 8g..8g+7) of stream id. */
static inline uint64_t t_pat_word(uint32_t id, uint64_t g)
{
	uint64_t x = g * 0x9e3779b97f4a7c15ULL + (uint64_t)id * 0xc2b2ae3d27d4eb4fULL;

	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 32;
	return x;
}

/* Byte number off of stream id: every byte derivable from (id, offset). */
static inline uint8_t t_pat(uint32_t id, uint64_t off)
{
	return (uint8_t)(t_pat_word(id, off >> 3) >> ((off & 7) * 8));
}

static T_UNUSED void t_pat_fill(uint32_t id, uint64_t off, void *buf, size_t len)
{
	uint8_t *p = buf;
	size_t i = 0;

	for (; i < len && ((off + i) & 7); i++)
		p[i] = t_pat(id, off + i);
	for (; i + 8 <= len; i += 8) {
		uint64_t w = t_pat_word(id, (off + i) >> 3);

		memcpy(p + i, &w, 8);	/* little-endian: byte k is bits 8k.. */
	}
	for (; i < len; i++)
		p[i] = t_pat(id, off + i);
}

/* Index of the first wrong byte, or -1. */
static T_UNUSED long t_pat_check(uint32_t id, uint64_t off, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	size_t i = 0;

	for (; i < len && ((off + i) & 7); i++)
		if (p[i] != t_pat(id, off + i))
			return (long)i;
	for (; i + 8 <= len; i += 8) {
		uint64_t w = t_pat_word(id, (off + i) >> 3);

		if (memcmp(p + i, &w, 8))
			break;
	}
	for (; i < len; i++)
		if (p[i] != t_pat(id, off + i))
			return (long)i;
	return -1;
}

/* ---- sockets ------------------------------------------------------------ */

static T_UNUSED struct sockaddr_in t_addr(uint16_t port)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

static T_UNUSED uint16_t t_sock_port(int fd, bool peer)
{
	struct sockaddr_in a;
	socklen_t l = sizeof(a);

	if (peer ? getpeername(fd, (struct sockaddr *)&a, &l) : getsockname(fd, (struct sockaddr *)&a, &l))
		t_fail("get%sname(%d): %s", peer ? "peer" : "sock", fd, strerror(errno));
	return ntohs(a.sin_port);
}

/* A listening TCP socket on 127.0.0.1, ephemeral port in *port. */
static T_UNUSED int t_listen(uint16_t *port)
{
	struct sockaddr_in a = t_addr(0);
	int fd = t_ok(socket(AF_INET, SOCK_STREAM, 0)), on = 1;

	t_ok(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)));
	t_ok(bind(fd, (struct sockaddr *)&a, sizeof(a)));
	t_ok(listen(fd, 512));
	*port = t_sock_port(fd, false);
	return fd;
}

/* Blocking connect to 127.0.0.1:port; flags: SOCK_NONBLOCK | SOCK_CLOEXEC after connect. */
static T_UNUSED int t_connect(uint16_t port)
{
	struct sockaddr_in a = t_addr(port);
	int fd = t_ok(socket(AF_INET, SOCK_STREAM, 0));

	if (connect(fd, (struct sockaddr *)&a, sizeof(a)))
		t_fail("connect 127.0.0.1:%u: %s", port, strerror(errno));
	return fd;
}

static T_UNUSED int t_accept(int lfd)
{
	int fd;

	do
		fd = accept(lfd, NULL, NULL);
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		t_fail("accept: %s", strerror(errno));
	return fd;
}

/* A connected pair inside this process: *c client end, *s server end. */
/* The runtime directory this run uses (USMC_RUNDIR, else usmc's default). */
static T_UNUSED const char *t_rundir(void)
{
	static char buf[PATH_MAX];
	const char *e = getenv("USMC_RUNDIR");

	if (e && *e)
		return e;
	snprintf(buf, sizeof(buf), "/dev/shm/usmc-%u", (unsigned int)geteuid());
	return buf;
}

static T_UNUSED void t_pair_on(int lfd, uint16_t port, int *c, int *s)
{
	*c = t_connect(port);
	*s = t_accept(lfd);
}

static T_UNUSED void t_pair(int *c, int *s)
{
	uint16_t port;
	int lfd = t_listen(&port);

	t_pair_on(lfd, port, c, s);
	close(lfd);
}

/* The next read says EOF. */
static T_UNUSED void t_expect_eof(int fd)
{
	char b[8];
	ssize_t n = read(fd, b, sizeof(b));

	if (n != 0)
		t_fail("expected EOF on fd %d, read %zd (%s)", fd, n, n < 0 ? strerror(errno) : "data");
}

static T_UNUSED void t_set_nonblock(int fd, bool on)
{
	int fl = t_ok(fcntl(fd, F_GETFL));

	t_ok(fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK));
}

/* Write all of buf (blocking socket, or polls a non-blocking one). */
static T_UNUSED void t_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EAGAIN) {
			struct pollfd pf = { .fd = fd, .events = POLLOUT };

			poll(&pf, 1, 1000);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			t_fail("write(%d, %zu): %zd %s", fd, len, n, strerror(errno));
		p += n;
		len -= (size_t)n;
	}
}

/* Read exactly len bytes; fails on EOF or error. */
static T_UNUSED void t_read_all(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n < 0 && errno == EAGAIN) {
			struct pollfd pf = { .fd = fd, .events = POLLIN };

			poll(&pf, 1, 1000);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			t_fail("read(%d, %zu): %zd %s", fd, len, n, n ? strerror(errno) : "EOF");
		p += n;
		len -= (size_t)n;
	}
}

/* One byte on UNIX socket chan carrying descriptor fd (SCM_RIGHTS). */
static T_UNUSED void t_send_fd(int chan, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))], b = 'f';
	struct iovec v = { &b, 1 };
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c;

	memset(cbuf, 0, sizeof(cbuf));
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	if (sendmsg(chan, &m, 0) != 1)
		t_fail("sendmsg(SCM_RIGHTS): %s", strerror(errno));
}

/* The descriptor t_send_fd sent on chan; flags: recvmsg's
 * (MSG_CMSG_CLOEXEC or 0). */
static T_UNUSED int t_recv_fd(int chan, int flags)
{
	char cbuf[CMSG_SPACE(sizeof(int))], b;
	struct iovec v = { &b, 1 };
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c;
	ssize_t n;
	int fd;

	do
		n = recvmsg(chan, &m, flags);
	while (n < 0 && errno == EINTR);
	c = CMSG_FIRSTHDR(&m);
	if (n != 1 || !c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int)))
		t_fail("recvmsg: %zd %s", n, n < 0 ? strerror(errno) : "no descriptor");
	memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

/* Send len pattern bytes of stream id from offset 0 / read and verify them. */
static T_UNUSED void t_send_pat(int fd, uint32_t id, size_t len)
{
	char buf[16384];
	size_t off = 0;

	while (off < len) {
		size_t n = len - off < sizeof(buf) ? len - off : sizeof(buf);

		t_pat_fill(id, off, buf, n);
		t_write_all(fd, buf, n);
		off += n;
	}
}

static T_UNUSED void t_recv_pat(int fd, uint32_t id, size_t len)
{
	char buf[16384];
	size_t off = 0;

	while (off < len) {
		size_t n = len - off < sizeof(buf) ? len - off : sizeof(buf);
		long bad;

		t_read_all(fd, buf, n);
		bad = t_pat_check(id, off, buf, n);
		if (bad >= 0)
			t_fail("stream %u: wrong byte at offset %zu", id, off + (size_t)bad);
		off += n;
	}
}

/* Read exactly n bytes from fd and compare them with want. */
static T_UNUSED void t_recv_exact(int fd, const char *want, size_t n)
{
	char buf[256];

	if (n > sizeof(buf))
		t_fail("t_recv_exact: %zu bytes is more than it compares", n);
	t_read_all(fd, buf, n);
	if (memcmp(buf, want, n))
		t_fail("fd %d: received \"%.*s\", expected \"%.*s\"", fd, (int)n, buf, (int)n,
		       want);
}

/* msg written on from arrives whole on to. */
static T_UNUSED void t_xfer(int from, int to, const char *msg)
{
	t_write_all(from, msg, strlen(msg));
	t_recv_exact(to, msg, strlen(msg));
}

/*
 * A child that serves an inherited connection: greet, echo four bytes, send
 * 300000 bytes of pattern pat, then expect EOF.  Returns main's status.
 */
static T_UNUSED int t_serve_child(int fd, const char *hello, uint32_t pat)
{
	char buf[64];
	ssize_t n;

	t_write_all(fd, hello, strlen(hello));
	n = recv(fd, buf, 4, MSG_WAITALL);
	if (n != 4)
		t_fail("child: recv %zd (%s)", n, n < 0 ? strerror(errno) : "short");
	t_write_all(fd, buf, 4);
	t_send_pat(fd, pat, 300000);
	n = read(fd, buf, sizeof(buf));
	if (n != 0)
		t_fail("child: expected EOF, read %zd", n);
	close(fd);
	return 0;
}

/* Wait for fd to show events (or fail after ms). Returns revents. */
static T_UNUSED short t_wait_fd(int fd, short events, int ms)
{
	struct pollfd p = { .fd = fd, .events = events };
	int r;

	do
		r = poll(&p, 1, ms);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		t_fail("poll: %s", strerror(errno));
	return r ? p.revents : 0;
}

/* ---- processes ---------------------------------------------------------- */

/* Wait for pid; fail unless it exited 0. */
static T_UNUSED void t_wait_child(pid_t pid, const char *what)
{
	int st;

	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			t_fail("waitpid %s: %s", what, strerror(errno));
	if (WIFSIGNALED(st))
		t_fail("%s: killed by signal %d", what, WTERMSIG(st));
	if (WEXITSTATUS(st))
		t_fail("%s: exit status %d", what, WEXITSTATUS(st));
}

/*
 * fork() for a helper process that must not outlive the process that
 * forked it (a failed test must not leave a server behind holding the
 * runner's pipes open): the child gets SIGKILL when its parent exits.
 */
static T_UNUSED pid_t t_fork_helper(void)
{
	pid_t parent = getpid(), pid = fork();

	if (pid < 0)
		t_fail("fork: %s", strerror(errno));
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(T_EXIT_FAIL);
	}
	return pid;
}

/* Sync channel between two processes: any non-TCP byte pipe (socketpair). */
static T_UNUSED void t_sync_pair(int sv[2])
{
	t_ok(socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
}

static T_UNUSED void t_sync_send(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			t_fail("sync write: %s", strerror(errno));
		p += n;
		len -= (size_t)n;
	}
}

/* Returns false on EOF before the first byte. */
static T_UNUSED bool t_sync_recv(int fd, void *buf, size_t len)
{
	char *p = buf;
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, p + got, len - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 && got == 0)
			return false;
		if (n <= 0)
			t_fail("sync read: %s", n ? strerror(errno) : "EOF");
		got += (size_t)n;
	}
	return true;
}

static T_UNUSED void t_sync_post(int fd)
{
	char c = 'k';

	t_sync_send(fd, &c, 1);
}

static T_UNUSED void t_sync_wait(int fd)
{
	char c;

	if (!t_sync_recv(fd, &c, 1))
		t_fail("sync: peer process went away");
}

/*
 * This program again as role "late-client PORT FD" under USMC_FAULT=late
 * (a client whose proposal comes after the server's accept, which returns
 * undecided): the program's main() runs the role; FD is the child's end
 * of a t_sync_pair whose other end goes to *sync.  Returns the child.
 */
static T_UNUSED pid_t t_spawn_late_client(uint16_t port, int *sync)
{
	char p[16], f[16];
	int sv[2];
	pid_t pid;

	t_sync_pair(sv);
	snprintf(p, sizeof(p), "%u", port);
	snprintf(f, sizeof(f), "%d", sv[1]);
	pid = t_fork_helper();
	if (pid == 0) {
		char *argv[] = { (char *)t_name, (char *)"late-client", p, f, NULL };

		close(sv[0]);
		setenv("USMC_FAULT", "late", 1);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	close(sv[1]);
	*sync = sv[0];
	return pid;
}

/*
 * Start this very program again (argv[1] = role) without libusmc: its
 * sockets are plain kernel TCP, the "peer that is not usmc" case.
 */
static T_UNUSED pid_t t_spawn_plain(const char *role, const char *arg)
{
	pid_t pid = t_fork_helper();

	if (pid == 0) {
		char *argv[] = { (char *)"t_plain", (char *)role, (char *)arg, NULL };

		/* Nothing of ours goes along: the helper is a stranger. */
		closefrom(3);
		unsetenv("LD_PRELOAD");
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	return pid;
}

/*
 * Start this very program again in a role: argv = { name, role, a, b }
 * with a and b in decimal; plain: without libusmc.  Descriptors without
 * FD_CLOEXEC go along.
 */
static T_UNUSED pid_t t_start_role(const char *role, long a, long b, bool plain)
{
	pid_t pid = t_fork_helper();

	if (pid == 0) {
		char x[24], y[24];
		char *argv[] = { (char *)t_name, (char *)role, x, y, NULL };

		snprintf(x, sizeof(x), "%ld", a);
		snprintf(y, sizeof(y), "%ld", b);
		if (plain)
			unsetenv("LD_PRELOAD");
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	return pid;
}

/*
 * A peer that is not a usmc process: this program again, exec'ed without
 * LD_PRELOAD as "t_x plain-echo FILE"; it listens, writes its port into
 * FILE, echoes one connection until EOF.  Returns its port.
 */
static T_UNUSED int t_plain_echo_main(const char *portfile)
{
	uint16_t port;
	int lfd = t_listen(&port), fd;
	char buf[4096], tmp[PATH_MAX];
	ssize_t n;
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", portfile);
	f = fopen(tmp, "w");
	if (!f)
		return 1;
	fprintf(f, "%u\n", port);
	fclose(f);
	rename(tmp, portfile);
	fd = t_accept(lfd);
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		t_write_all(fd, buf, (size_t)n);
	close(fd);
	close(lfd);
	return 0;
}

static T_UNUSED uint16_t t_start_plain_echo(pid_t *pid)
{
	char path[64];
	unsigned int port = 0;
	int tries;

	snprintf(path, sizeof(path), "/tmp/t_plain_port.%d.%u", (int)getpid(),
		 (unsigned int)t_now_ms());
	*pid = t_spawn_plain("plain-echo", path);
	for (tries = 0; tries < 1000 && !port; tries++) {
		FILE *f = fopen(path, "r");

		if (f) {
			if (fscanf(f, "%u", &port) != 1)
				port = 0;
			fclose(f);
		}
		if (!port)
			t_msleep(10);
	}
	unlink(path);
	if (!port)
		t_fail("plain echo server did not start");
	return (uint16_t)port;
}

/*
 * USMC_T_SKIP="a,b": checks this build cannot run, named by test_unit.py
 * with the reason (a device without sharing: checks that assert a
 * connection stays on shared memory in two processes).  Said on stderr.
 */
static T_UNUSED bool t_check_skipped(const char *name)
{
	const char *l = getenv("USMC_T_SKIP"), *p;
	size_t n = strlen(name);

	for (p = l; p && (p = strstr(p, name)); p += n)
		if ((p == l || p[-1] == ',') && (p[n] == ',' || !p[n])) {
			fprintf(stderr, "%s: check %s skipped in this build (USMC_T_SKIP)\n", t_name,
				name);
			return true;
		}
	return false;
}

/* usmc counters (`usmc stat --json`) and the check runner. */
#include "t_stat.h"

#endif /* T_UTIL_H */
