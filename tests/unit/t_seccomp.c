// SPDX-License-Identifier: MIT
/*
 * t_seccomp.c - processes under a seccomp filter (OpenSSH's privilege-
 * separated child): libusmc must make no system call the program would
 * not have made itself, or the filter kills the process with SIGSYS.
 *
 * The filtered process (always a child, so that this program can look at
 * how it ended and read the counters) allows what a plain program needs
 * for its socket calls and exit: read, write, send/recv and their vector
 * and message forms, poll, shutdown, close, exit; anything else traps
 * (SIGSYS: a handler names the call and exits 3).
 *
 *   fork_child   a shared-memory connection made before fork(); the child
 *                keeps one end, installs the filter with prctl() (as sshd
 *                does) with 100000 bytes of ours still unread in its ring,
 *                then reads them, answers 200000, peeks and reads 50000
 *                more after poll(), shuts down, reads EOF and exit()s.
 *                Every byte intact; the connection moved to TCP first
 *                (reason sandboxed, and peer_moved_to_tcp at our end)
 *   own_seccomp  the same with a connection the child made itself and a
 *                filter installed with syscall(SYS_seccomp) (libseccomp's
 *                way)
 *   own_epoll    the same, waiting with epoll_wait() on an epoll instance
 *                the connection was registered with on shared memory: the
 *                events carry the program's own data
 *   fork_under_filter  the filtered child forks (its filter allows
 *                clone and wait4) and its child, filtered too, talks: the
 *                fork handlers and the child's exit make no call of ours
 *   listener     a listener made before the filter, accept()ed on under
 *                it: unpublished first, so that our client does not
 *                propose a handshake nobody will answer; plain TCP
 *   disabled     a child exec'ed with USMC_DISABLE=1 (usmc run -t): a
 *                tracked TCP connection, then the filter, then exit (the
 *                statistics slot was released with fcntl(F_OFD_SETLK))
 *   inherited    a program exec'ed under a filter (it traps the calls
 *                usmc makes to set up: memfd_create, fcntl, fallocate,
 *                ftruncate, mknodat, flock): libusmc stays out of the way
 *                from its constructor on; its connection is plain TCP
 *   trusted      the same under a filter that allows what usmc does (a
 *                container's), with USMC_TRUST_SECCOMP=1: accelerated
 *
 * usage: t_seccomp [check...]
 */
#include "t_util.h"

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/syscall.h>

extern char **environ;

#if defined(__x86_64__)
#define T_AUDIT_ARCH	AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define T_AUDIT_ARCH	AUDIT_ARCH_AARCH64
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define T_SANITIZER	1
#endif

/* What a plain program calls for its socket calls (poll, epoll, accept
 * included) and to exit.  The sanitizer builds add their runtimes' own. */
static const int plain_calls[] = {
	SYS_read, SYS_write, SYS_readv, SYS_writev, SYS_recvfrom, SYS_sendto,
	SYS_recvmsg, SYS_sendmsg, SYS_ppoll, SYS_shutdown, SYS_close,
	SYS_exit, SYS_exit_group, SYS_rt_sigreturn,
#ifdef SYS_poll
	SYS_poll,
#endif
	SYS_epoll_wait, SYS_epoll_pwait, SYS_accept, SYS_accept4,
#ifdef T_SANITIZER
	/* The sanitizer runtime's own (allocator, locks, reports). */
	SYS_mmap, SYS_munmap, SYS_madvise, SYS_futex, SYS_sched_yield, SYS_getpid,
	SYS_gettid, SYS_rt_sigprocmask, SYS_sigaltstack, SYS_mprotect, SYS_prctl,
	SYS_openat, SYS_fstat, SYS_newfstatat, SYS_lseek, SYS_getrlimit, SYS_prlimit64,
	/* TSan: its background thread, started again in a fork child */
	SYS_clone3, SYS_rseq, SYS_set_robust_list, SYS_gettimeofday, SYS_clock_gettime,
	SYS_nanosleep, SYS_clock_nanosleep, SYS_getrusage, SYS_sched_getaffinity,
#endif
};

/* What usmc calls to set itself up and a plain program at startup does not. */
static const int setup_calls[] = {
	SYS_memfd_create, SYS_fcntl, SYS_fallocate, SYS_ftruncate, SYS_mknodat, SYS_flock,
};

/* LeakSanitizer's exit check cannot run under the filter (ptrace). */
static volatile int filtered;
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void)
{
	return filtered;
}

static void on_sigsys(int sig, siginfo_t *si, void *uc)
{
	char msg[96];
	int n;

	(void)sig;
	(void)uc;
	n = snprintf(msg, sizeof(msg), "t_seccomp[%d]: SIGSYS: system call %d not allowed\n",
		     (int)getpid(), si->si_syscall);
	if (write(2, msg, (size_t)n) < 0)
		_exit(4);
	_exit(3);
}

/* allow: the listed calls pass, others trap; else the listed ones trap. */
static struct sock_fprog make_filter(const int *nrs, int n, bool allow)
{
	static struct sock_filter f[256];
	struct sock_fprog prog;
	int i, k = 0;

	t_assert(2 * n + 5 <= (int)ARRAY_LEN(f), "%d calls: filter too long", n);

#ifdef T_AUDIT_ARCH
	f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
					      offsetof(struct seccomp_data, arch));
	f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, T_AUDIT_ARCH, 1, 0);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
#endif
	f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
					      offsetof(struct seccomp_data, nr));
	for (i = 0; i < n; i++) {
		f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned int)nrs[i], 0, 1);
		f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K,
						      allow ? SECCOMP_RET_ALLOW : SECCOMP_RET_TRAP);
	}
	f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K,
					      allow ? SECCOMP_RET_TRAP : SECCOMP_RET_ALLOW);
	prog.len = (unsigned short)k;
	prog.filter = f;
	return prog;
}

static void sigsys_handler(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigsys;
	sa.sa_flags = SA_SIGINFO;
	t_ok(sigaction(SIGSYS, &sa, NULL));
}

/* The plain allow-list, installed the way sshd (prctl) or libseccomp
 * (syscall) does. */
static void enter_filter(bool via_syscall)
{
	struct sock_fprog prog = make_filter(plain_calls, (int)ARRAY_LEN(plain_calls), true);

	sigsys_handler();
	t_ok(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
	filtered = 1;
	if (via_syscall)
		t_ok(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog));
	else
		t_ok(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0));
}

/* An epoll instance the filtered side waits on instead of poll(), or -1. */
static int side_ep = -1;

static void wait_in(int fd)
{
	struct epoll_event ev;

	if (side_ep < 0) {
		t_assert(t_wait_fd(fd, POLLIN, 10000) & POLLIN, "poll for the last bytes");
		return;
	}
	t_assert(epoll_wait(side_ep, &ev, 1, 10000) == 1, "epoll_wait: %s", strerror(errno));
	t_assert(ev.data.u64 == 0x5eccull && (ev.events & EPOLLIN),
		 "epoll event data 0x%llx events 0x%x: not the program's",
		 (unsigned long long)ev.data.u64, ev.events);
}

/* The filtered side's conversation (id 1 in, 2 out, 3 in, EOF), exit(). */
static __attribute__((noreturn)) void filtered_talk(int fd)
{
	char b[16];

	t_recv_pat(fd, 1, 100000);
	t_send_pat(fd, 2, 200000);
	wait_in(fd);
	t_assert(recv(fd, b, sizeof(b), MSG_PEEK) > 0, "peek: %s", strerror(errno));
	t_recv_pat(fd, 3, 50000);
	t_ok(shutdown(fd, SHUT_WR));
	t_assert(read(fd, b, 1) == 0, "EOF");
	close(fd);
	exit(0);	/* through the destructors, under the filter */
}

/* The filtered side: our bytes (id 1) wait unread, then the filter. */
static void sandboxed_side(int fd, bool via_syscall)
{
	enter_filter(via_syscall);
	filtered_talk(fd);
}

/* The other side: 100000 bytes before the child is filtered, then talk. */
static void other_side(int fd, int sync)
{
	char b;

	t_send_pat(fd, 1, 100000);
	t_sync_post(sync);	/* the child enters the filter with them unread */
	t_recv_pat(fd, 2, 200000);
	t_send_pat(fd, 3, 50000);
	t_assert(read(fd, &b, 1) == 0, "EOF from the filtered child");
	close(fd);
}

/* How many connections `usmc stat` counts as moved for reason name. */
static long long reason_count(const char *name)
{
	char *j = t_stats_json(), pat[64];
	const char *fb = strstr(j, "\"tcp_fallback\""), *p;
	long long n = 0;

	snprintf(pat, sizeof(pat), "\"%s\": ", name);
	p = fb ? strstr(fb, pat) : NULL;
	if (p && p < strchr(fb, '}'))
		n = strtoll(p + strlen(pat), NULL, 10);
	free(j);
	return n;
}

static void expect_reasons(long long sandboxed0, long long moved0)
{
	if (!t_accel())
		return;
	t_assert(reason_count("sandboxed") == sandboxed0 + 1, "one connection moved (sandboxed)");
	t_assert(reason_count("peer_moved_to_tcp") == moved0 + 1, "its peer followed");
}

static void check_fork_child(void)
{
	long long sb = reason_count("sandboxed"), mv = reason_count("peer_moved_to_tcp");
	int c, s, sync[2];
	pid_t kid;

	t_pair_smc(&c, &s);
	t_sync_pair(sync);
	kid = t_fork_helper();
	if (kid == 0) {
		close(c);
		close(sync[0]);
		t_sync_wait(sync[1]);
		sandboxed_side(s, false);
	}
	close(s);
	close(sync[1]);
	other_side(c, sync[0]);
	t_wait_child(kid, "filtered child");
	expect_reasons(sb, mv);
	t_tcp_conns = 2;
}

static void own_connection(bool epoll)
{
	long long sb = reason_count("sandboxed"), mv = reason_count("peer_moved_to_tcp");
	uint16_t port;
	int l = t_listen(&port), sync[2], s;
	pid_t kid;

	t_sync_pair(sync);
	kid = t_fork_helper();
	if (kid == 0) {
		int c = t_connect(port);
		char b;

		close(l);
		close(sync[0]);
		t_write_all(c, "c", 1);
		t_read_all(c, &b, 1);
		t_assert_smc(c);
		if (epoll) {
			struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0x5ecc };

			side_ep = t_ok(epoll_create1(0));
			t_ok(epoll_ctl(side_ep, EPOLL_CTL_ADD, c, &ev));
		}
		t_sync_wait(sync[1]);
		sandboxed_side(c, true);
	}
	close(sync[1]);
	s = t_accept(l);
	close(l);
	{
		char b;

		t_read_all(s, &b, 1);
		t_write_all(s, "s", 1);
	}
	t_assert_smc(s);
	t_smc_pairs = 1;
	other_side(s, sync[0]);
	t_wait_child(kid, "filtered child");
	expect_reasons(sb, mv);
	t_tcp_conns = 2;
}

static void check_own_seccomp(void)
{
	own_connection(false);
}

static void check_own_epoll(void)
{
	own_connection(true);
}

/* What a program that forks under its filter adds to the list. */
static const int fork_calls[] = { SYS_clone, SYS_wait4, SYS_set_robust_list };

static void check_fork_under_filter(void)
{
	long long sb = reason_count("sandboxed"), mv = reason_count("peer_moved_to_tcp");
	int c, s, sync[2];
	pid_t kid;

	t_pair_smc(&c, &s);
	t_sync_pair(sync);
	kid = t_fork_helper();
	if (kid == 0) {
		int calls[ARRAY_LEN(plain_calls) + ARRAY_LEN(fork_calls)];
		struct sock_fprog prog;
		pid_t g;

		close(c);
		close(sync[0]);
		memcpy(calls, plain_calls, sizeof(plain_calls));
		memcpy(calls + ARRAY_LEN(plain_calls), fork_calls, sizeof(fork_calls));
		prog = make_filter(calls, (int)ARRAY_LEN(calls), true);
		t_sync_wait(sync[1]);
		sigsys_handler();
		t_ok(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
		filtered = 1;
		t_ok(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0));
		g = fork();
		t_assert(g >= 0, "fork under the filter: %s", strerror(errno));
		if (g == 0)
			filtered_talk(s);
		close(s);
		t_wait_child(g, "grandchild");
		exit(0);
	}
	close(s);
	close(sync[1]);
	other_side(c, sync[0]);
	t_wait_child(kid, "filtered child");
	expect_reasons(sb, mv);
	t_tcp_conns = 2;
}

static void check_listener(void)
{
	uint16_t port;
	int sync[2], c;
	pid_t kid;

	t_sync_pair(sync);
	kid = t_fork_helper();
	if (kid == 0) {
		int l = t_listen(&port);

		close(sync[0]);
		enter_filter(false);
		t_sync_send(sync[1], &port, sizeof(port));
		filtered_talk(t_accept(l));
	}
	close(sync[1]);
	t_assert(t_sync_recv(sync[0], &port, sizeof(port)), "the child's port");
	c = t_connect(port);
	other_side(c, sync[0]);
	t_wait_child(kid, "filtered child");
	t_tcp_conns = 1;	/* peer_not_usmc here; the child tracks nothing */
}

/* Role "child PORT MODE": this program again (exec'ed), connects to PORT,
 * then as sandboxed_side; MODE "filter" installs the filter, "inherited"
 * runs under the one its parent installed. */
static int child_role(uint16_t port, const char *mode)
{
	int fd = t_connect(port);

	if (!strcmp(mode, "filter"))
		sandboxed_side(fd, false);
	filtered = 1;
	sigsys_handler();
	filtered_talk(fd);
}

/* A filter that refuses only what no test program calls: a container's. */
static const int container_calls[] = { SYS_kexec_load };

/* This program again as "child PORT MODE" with env (NAME=1) set, exec'ed
 * under a filter that traps the ndeny calls in deny (none if !deny). */
static pid_t exec_child(uint16_t port, const char *mode, const char *env, const int *deny,
			int ndeny)
{
	pid_t kid = t_fork_helper();

	if (kid == 0) {
		char ps[16];
		char *argv[] = { (char *)"t_seccomp", (char *)"child", ps, (char *)mode, NULL };

		snprintf(ps, sizeof(ps), "%u", port);
		if (env)
			setenv(env, "1", 1);
		if (deny) {
			struct sock_fprog prog = make_filter(deny, ndeny, false);

			t_ok(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
			t_ok(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0));
		}
		execve("/proc/self/exe", argv, environ);
		_exit(127);
	}
	return kid;
}

/* We serve the exec'ed child's connection. */
static void serve_child(int l, pid_t kid)
{
	int s = t_accept(l), sync[2];

	close(l);
	/* other_side()'s sync is only for a child we forked; here the child
	 * reads our first bytes whenever it likes. */
	t_sync_pair(sync);
	other_side(s, sync[0]);
	close(sync[0]);
	close(sync[1]);
	t_wait_child(kid, "exec'ed child");
}

static void check_disabled(void)
{
	uint16_t port;
	int l = t_listen(&port);

	serve_child(l, exec_child(port, "filter", "USMC_DISABLE", NULL, 0));
	t_tcp_conns = 2;	/* disabled there, peer_not_usmc here */
}

static void check_inherited(void)
{
	uint16_t port;
	int l = t_listen(&port);

	serve_child(l, exec_child(port, "inherited", NULL, setup_calls, (int)ARRAY_LEN(setup_calls)));
	t_tcp_conns = 1;	/* peer_not_usmc here; the child tracks nothing */
}

static void check_trusted(void)
{
	uint16_t port;
	int l = t_listen(&port);

	serve_child(l, exec_child(port, "inherited", "USMC_TRUST_SECCOMP", container_calls,
				  (int)ARRAY_LEN(container_calls)));
	t_smc_pairs = 1;	/* the filter is trusted: shared memory */
}

static const struct t_check checks[] = {
	{ "fork_child", check_fork_child },
	{ "own_seccomp", check_own_seccomp },
	{ "own_epoll", check_own_epoll },
	{ "fork_under_filter", check_fork_under_filter },
	{ "listener", check_listener },
	{ "disabled", check_disabled },
	{ "inherited", check_inherited },
	{ "trusted", check_trusted },
};

int main(int argc, char **argv)
{
	t_name = "t_seccomp";
	if (argc == 4 && !strcmp(argv[1], "child"))
		return child_role((uint16_t)atoi(argv[2]), argv[3]);
#ifndef T_AUDIT_ARCH
	t_skip("no seccomp architecture constant for this CPU");
#endif
	if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) != 0)
		t_skip("already under a seccomp filter");
	signal(SIGPIPE, SIG_IGN);
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
