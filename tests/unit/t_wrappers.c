// SPDX-License-Identifier: MIT
/*
 * t_wrappers.c - entry points that other entry points used to call:
 * recvmmsg/sendmmsg with the kernel's flag and timeout rules, and the
 * fortified __read_chk/__recv_chk/__recvfrom_chk/__poll_chk, which must
 * reach usmc even when another library (here: this program) defines
 * read/recv/recvfrom/poll.
 *
 * jdk_close_read, jdk_close_poll: how the JDK wakes a thread blocked on a
 * socket it closes: dup2 of a dead socketpair end over the descriptor, then
 * a signal without SA_RESTART; the call returns (EINTR, or poll's answer
 * for the new file) and the retry finds the socketpair's EOF.
 *
 * raw_nonblock: O_NONBLOCK set past libc (a raw ioctl(FIONBIO) system
 * call, as Rust's rustix does for async-io and smol) on an accelerated
 * connection: recv and send say EAGAIN, as TCP's, instead of waiting.
 *
 * Differential (t_selfdiff.h): the transcript under usmc equals the one
 * with USMC_DISABLE=1; under usmc every connection stays on shared memory.
 */
#include "t_util.h"
#include "t_selfdiff.h"

#include <dlfcn.h>
#include <signal.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>

/*
 * This program defines read, recv, recvfrom and poll: being the executable,
 * it comes first in the global scope, before every preloaded library, so
 * it stands for "another preloaded library that defines read".  Normally
 * each forwards to the next definition (usmc's); with hook_raw set it goes
 * straight to the kernel, as such a library's own code path would.
 */
static int hook_raw, hook_calls;

#define HOOK_NEXT(name)							\
	({								\
		static __typeof__(&name) next_;				\
		if (!next_)						\
			next_ = (__typeof__(&name))dlsym(RTLD_NEXT, #name); \
		next_;							\
	})

ssize_t read(int fd, void *buf, size_t n)
{
	if (hook_raw) {
		hook_calls++;
		return syscall(SYS_read, fd, buf, n);
	}
	return HOOK_NEXT(read)(fd, buf, n);
}

ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	if (hook_raw) {
		hook_calls++;
		return syscall(SYS_recvfrom, fd, buf, n, flags, NULL, NULL);
	}
	return HOOK_NEXT(recv)(fd, buf, n, flags);
}

ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *sa, socklen_t *salen)
{
	if (hook_raw) {
		hook_calls++;
		return syscall(SYS_recvfrom, fd, buf, n, flags, sa, salen);
	}
	return HOOK_NEXT(recvfrom)(fd, buf, n, flags, sa, salen);
}

int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	if (hook_raw) {
		hook_calls++;
		return (int)syscall(SYS_poll, fds, n, timeout);
	}
	return HOOK_NEXT(poll)(fds, n, timeout);
}

/* Written to by the execve and fork stand-ins when usmc's exec or vfork
 * reach them (they must not): the exec'd child's memory is gone. */
static int hook_pipe = -1;
static volatile int fork_hooked;

int execve(const char *path, char *const argv[], char *const envp[])
{
	if (hook_raw && hook_pipe >= 0) {
		if (write(hook_pipe, "E", 1) != 1)
			_exit(3);
		return (int)syscall(SYS_execve, path, argv, envp);
	}
	return HOOK_NEXT(execve)(path, argv, envp);
}

pid_t fork(void)
{
	if (hook_raw)
		fork_hooked = 1;
	return HOOK_NEXT(fork)();
}

ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
		       struct sockaddr *sa, socklen_t *salen);
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);

/* ---- helpers ----------------------------------------------------------- */

#define NMSG	3

/* NMSG one-byte receive buffers: each message takes one byte. */
struct mm {
	struct mmsghdr v[NMSG];
	struct iovec iov[NMSG];
	char b[NMSG];
};

static struct mmsghdr *mm_init(struct mm *m)
{
	int i;

	memset(m, 0, sizeof(*m));
	for (i = 0; i < NMSG; i++) {
		m->b[i] = '.';
		m->iov[i].iov_base = &m->b[i];
		m->iov[i].iov_len = 1;
		m->v[i].msg_hdr.msg_iov = &m->iov[i];
		m->v[i].msg_hdr.msg_iovlen = 1;
	}
	return m->v;
}

static void obs_mm(const char *what, int rc, const struct mm *m)
{
	int i;

	T_OBS("%s: %d %s", what, rc, rc < 0 ? t_errname(errno) : "");
	for (i = 0; i < rc && i < NMSG; i++)
		T_OBS(" [%u '%c']", m->v[i].msg_len, m->v[i].msg_len ? m->b[i] : '-');
	T_OBS("\n");
}

static void end_pair(int c, int s)
{
	/* A device that cannot share moved both at the vfork check's fork. */
	if (!t_unshared()) {
		t_assert_smc(c);
		t_assert_smc(s);
	}
	close(c);
	close(s);
}

/* ---- recvmmsg / sendmmsg --------------------------------------------- */

/* Blocking: every message waits (the kernel's rule), not only the first. */
static void sc_mmsg_blocking(void)
{
	int c, s, sv[2], rc;
	struct mm m;
	pid_t pid;
	char b;

	t_pair_smc(&c, &s);
	t_sync_pair(sv);
	pid = t_fork_helper();
	if (pid == 0) {
		close(sv[0]);
		t_write_all(c, "ab", 2);
		/* The third byte comes later: the reader is waiting for it
		 * by then (or not: either way it must get all three). */
		t_msleep(100);
		t_write_all(c, "c", 1);
		t_ok(read(sv[1], &b, 1));
		_exit(0);
	}
	close(sv[1]);
	rc = recvmmsg(s, mm_init(&m), NMSG, 0, NULL);
	obs_mm("recvmmsg blocking", rc, &m);
	t_write_all(sv[0], "x", 1);
	t_ok(waitpid(pid, NULL, 0));
	close(sv[0]);
	end_pair(c, s);
}

/* MSG_WAITFORONE: the first message waits, the others do not. */
static void sc_mmsg_waitforone(void)
{
	struct mm m;
	int c, s;

	t_pair_smc(&c, &s);
	t_write_all(c, "ab", 2);
	obs_mm("recvmmsg WAITFORONE, 2 there", recvmmsg(s, mm_init(&m), NMSG, MSG_WAITFORONE, NULL),
	       &m);
	t_write_all(c, "c", 1);
	obs_mm("recvmmsg WAITFORONE, 1 there", recvmmsg(s, mm_init(&m), NMSG, MSG_WAITFORONE, NULL),
	       &m);
	obs_mm("recvmmsg DONTWAIT, none there", recvmmsg(s, mm_init(&m), NMSG, MSG_DONTWAIT, NULL),
	       &m);
	end_pair(c, s);
}

/* The timeout is looked at after each message and updated to what is left. */
static void sc_mmsg_timeout(void)
{
	struct timespec t;
	struct mm m;
	int c, s;
	char b[8];
	ssize_t n;

	t_pair_smc(&c, &s);
	t_write_all(c, "abc", 3);
	t.tv_sec = 0;
	t.tv_nsec = 0;
	obs_mm("recvmmsg timeout 0", recvmmsg(s, mm_init(&m), NMSG, 0, &t), &m);
	T_OBS("timeout left: %lld.%09ld\n", (long long)t.tv_sec, t.tv_nsec);
	n = recv(s, b, sizeof(b), MSG_DONTWAIT);
	T_OBS("then: %zd \"%.*s\"\n", n, n > 0 ? (int)n : 0, b);
	t_write_all(c, "def", 3);
	t.tv_sec = 100;
	t.tv_nsec = 0;
	obs_mm("recvmmsg timeout 100 s", recvmmsg(s, mm_init(&m), NMSG, 0, &t), &m);
	T_OBS("timeout left: between 90 and 100 s: %d\n",
	      t.tv_sec >= 90 && (t.tv_sec < 100 || (t.tv_sec == 100 && !t.tv_nsec)));
	t.tv_sec = 0;
	t.tv_nsec = 2000000000L;
	obs_mm("recvmmsg timeout invalid", recvmmsg(s, mm_init(&m), NMSG, MSG_DONTWAIT, &t), &m);
	end_pair(c, s);
}

/* The end of the stream: every further message is empty. */
static void sc_mmsg_eof(void)
{
	struct mm m;
	int c, s;

	t_pair_smc(&c, &s);
	t_write_all(c, "a", 1);
	t_ok(shutdown(c, SHUT_WR));
	obs_mm("recvmmsg at EOF", recvmmsg(s, mm_init(&m), NMSG, 0, NULL), &m);
	end_pair(c, s);
}

static void sc_sendmmsg(void)
{
	static const char *const part[] = { "one", "two", "three" };
	struct mmsghdr v[3];
	struct iovec iov[3];
	char got[16] = "";
	int c, s, i, rc;

	t_pair_smc(&c, &s);
	memset(v, 0, sizeof(v));
	for (i = 0; i < 3; i++) {
		iov[i].iov_base = (void *)part[i];
		iov[i].iov_len = strlen(part[i]);
		v[i].msg_hdr.msg_iov = &iov[i];
		v[i].msg_hdr.msg_iovlen = 1;
	}
	rc = sendmmsg(c, v, 3, 0);
	T_OBS("sendmmsg: %d lens %u %u %u\n", rc, v[0].msg_len, v[1].msg_len, v[2].msg_len);
	t_read_all(s, got, 11);
	T_OBS("received \"%s\"\n", got);
	end_pair(c, s);
}

/* ---- fortified entry points ------------------------------------------ */

/*
 * Each fortified call on a non-blocking accelerated socket with a byte
 * waiting in its ring: through usmc it gets the byte; through the raw
 * definitions above it would ask the kernel's TCP socket, which has none.
 */
/* One byte from c, readable at s (through usmc: poll is not raw yet). */
static void send_wait(int c, int s, const char *b)
{
	struct pollfd p = { .fd = s, .events = POLLIN };

	t_write_all(c, b, 1);
	t_assert(poll(&p, 1, 5000) == 1);
}

static void sc_chk(void)
{
	struct pollfd p;
	char b = 0;
	ssize_t n;
	int c, s;

	t_pair_smc(&c, &s);
	t_set_nonblock(s, true);
	hook_calls = 0;

	send_wait(c, s, "r");
	hook_raw = 1;
	n = __read_chk(s, &b, 1, 1);
	hook_raw = 0;
	T_OBS("__read_chk: %zd %s '%c'\n", n, n < 0 ? t_errname(errno) : "", n == 1 ? b : '-');

	send_wait(c, s, "v");
	hook_raw = 1;
	n = __recv_chk(s, &b, 1, 1, 0);
	hook_raw = 0;
	T_OBS("__recv_chk: %zd %s '%c'\n", n, n < 0 ? t_errname(errno) : "", n == 1 ? b : '-');

	send_wait(c, s, "f");
	hook_raw = 1;
	n = __recvfrom_chk(s, &b, 1, 1, 0, NULL, NULL);
	hook_raw = 0;
	T_OBS("__recvfrom_chk: %zd %s '%c'\n", n, n < 0 ? t_errname(errno) : "",
	      n == 1 ? b : '-');

	send_wait(c, s, "p");
	p.fd = s;
	p.events = POLLIN;
	p.revents = 0;
	hook_raw = 1;
	n = __poll_chk(&p, 1, 0, sizeof(p));
	hook_raw = 0;
	T_OBS("__poll_chk: %zd revents %s\n", n, p.revents & POLLIN ? "IN" : "-");
	t_read_all(s, &b, 1);

	T_OBS("the other library's definitions were called: %d times\n", hook_calls);
	t_assert(!t_usmc_loaded() || !hook_calls, "a fortified call went through the PLT");
	end_pair(c, s);
}

/* A system call no wrapper sees (not even libc's syscall()). */
static long raw_syscall3(long n, long a, long b, long c)
{
#if defined(__x86_64__)
	long ret;

	__asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c)
			 : "rcx", "r11", "memory");
	return ret;
#elif defined(__aarch64__)
	register long x8 __asm__("x8") = n, x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b, x2 __asm__("x2") = c;

	__asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
	return x0;
#else
	return syscall(n, a, b, c);
#endif
}

static void sc_raw_nonblock(void)
{
	static char buf[1 << 16];
	int c, s, one = 1;
	ssize_t n;

	t_pair_smc(&c, &s);
	t_assert(raw_syscall3(SYS_ioctl, s, FIONBIO, (long)&one) == 0, "raw ioctl");
	t_assert(raw_syscall3(SYS_ioctl, c, FIONBIO, (long)&one) == 0, "raw ioctl");
	n = recv(s, buf, 1, 0);
	T_OBS("recv on an empty connection: %zd %s\n", n, n < 0 ? t_errname(errno) : "");
	do
		n = send(c, buf, sizeof(buf), 0);
	while (n > 0);
	T_OBS("send until full: %zd %s\n", n, n < 0 ? t_errname(errno) : "");
	end_pair(c, s);
}

static int jdk_fd;
static bool jdk_poll;
static char jdk_out[256];

static void jdk_handler(int sig)
{
	(void)sig;
}

static void *jdk_blocker(void *arg)
{
	size_t o = 0;
	char b[64];
	int i;

	(void)arg;
	for (i = 0; i < 2; i++) {
		ssize_t n;

		if (jdk_poll) {
			struct pollfd p = { .fd = jdk_fd, .events = POLLIN };

			n = poll(&p, 1, -1);
			o += (size_t)snprintf(jdk_out + o, sizeof(jdk_out) - o, "poll %zd %s revents %#x; ",
					      n, n < 0 ? t_errname(errno) : "", n > 0 ? p.revents : 0);
			if (n > 0)
				break;
			continue;
		}
		n = read(jdk_fd, b, sizeof(b));
		o += (size_t)snprintf(jdk_out + o, sizeof(jdk_out) - o, "read %zd %s; ", n,
				      n < 0 ? t_errname(errno) : "");
		if (n >= 0)
			break;
	}
	return NULL;
}

static void jdk_close(bool use_poll)
{
	struct sigaction sa;
	pthread_t th;
	int c, s, sp[2];

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = jdk_handler;	/* no SA_RESTART, as the JDK's */
	t_ok(sigaction(SIGUSR1, &sa, NULL));
	t_pair_smc(&c, &s);
	t_ok(socketpair(AF_UNIX, SOCK_STREAM, 0, sp));
	close(sp[1]);
	jdk_fd = c;
	jdk_poll = use_poll;
	jdk_out[0] = '\0';
	t_assert(!pthread_create(&th, NULL, jdk_blocker, NULL), "pthread_create");
	t_msleep(200);		/* let it block */
	t_ok(dup2(sp[0], c));
	t_assert(!pthread_kill(th, SIGUSR1), "pthread_kill");
	pthread_join(th, NULL);
	T_OBS("%s: %s\n", use_poll ? "jdk_close_poll" : "jdk_close_read", jdk_out);
	close(sp[0]);
	close(c);
	close(s);
}

static void sc_jdk_close_read(void)
{
	jdk_close(false);
}

static void sc_jdk_close_poll(void)
{
	jdk_close(true);
}

/* execv, execl and vfork reach usmc's own exec and fork, not these. */
static void sc_exec_fork(void)
{
	static const char *const how[] = { "execv", "execl", "execle" };
	unsigned int i;

	for (i = 0; i < ARRAY_LEN(how); i++) {
		char *const argv[] = { (char *)"true", NULL };
		char *const envp[] = { NULL };
		int lp[2], st;
		char b = 0;
		pid_t pid;

		t_ok(pipe(lp));
		pid = t_fork_helper();
		if (pid == 0) {
			close(lp[0]);
			hook_pipe = lp[1];
			hook_raw = 1;
			if (i == 0)
				execv("/bin/true", argv);
			else if (i == 1)
				execl("/bin/true", "true", (char *)NULL);
			else
				execle("/bin/true", "true", (char *)NULL, envp);
			_exit(2);
		}
		close(lp[1]);
		T_OBS("%s: reached the other execve: %d", how[i], read(lp[0], &b, 1) == 1);
		t_assert(!t_usmc_loaded() || b != 'E', "usmc's %s called execve through the PLT", how[i]);
		close(lp[0]);
		t_ok(waitpid(pid, &st, 0));
		T_OBS(", exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	}
	{
		pid_t pid;
		int st;

		fork_hooked = 0;
		hook_raw = 1;
		pid = vfork();
		if (pid == 0)
			_exit(0);
		hook_raw = 0;
		t_ok(pid);
		t_ok(waitpid(pid, &st, 0));
		T_OBS("vfork: reached the other fork: %d\n", fork_hooked);
		t_assert(!t_usmc_loaded() || !fork_hooked, "usmc's vfork called fork through the PLT");
	}
}

static const struct t_scenario scenarios[] = {
	{ "mmsg_blocking", sc_mmsg_blocking },
	{ "mmsg_waitforone", sc_mmsg_waitforone },
	{ "mmsg_timeout", sc_mmsg_timeout },
	{ "mmsg_eof", sc_mmsg_eof },
	{ "sendmmsg", sc_sendmmsg },
	{ "chk", sc_chk },
	{ "raw_nonblock", sc_raw_nonblock },
	{ "jdk_close_read", sc_jdk_close_read },
	{ "jdk_close_poll", sc_jdk_close_poll },
	{ "exec_fork", sc_exec_fork },
};

int main(int argc, char **argv)
{
	t_name = "t_wrappers";
	return t_selfdiff_main(argc, argv, scenarios, ARRAY_LEN(scenarios));
}
