// SPDX-License-Identifier: MIT
/*
 * onecpu_floor.c - what one hop costs when two processes share a CPU:
 * the floor under usmc's one-CPU latency (docs/perf/floor-gap.md).
 *
 *   cc -O2 -Wall -o /tmp/onecpu_floor bench/onecpu_floor.c
 *   /tmp/onecpu_floor MODE [SERVER_CPU]     (client on CPU 0; default 0)
 *
 * Two processes ping-pong a counter in shared memory 200,000 times and
 * print the one-way time (half a round trip).  MODE is how the waiting
 * side waits:
 *   tcp     14 B over TCP loopback, blocking read (the reference)
 *   futex   a flag, then FUTEX_WAIT; the other side FUTEX_WAKEs it
 *   pipeep  a flag, then epoll_wait on a pipe it watches edge-triggered;
 *           the other side writes a byte (usmc's doorbell and waitset)
 *   yield   sched_yield() until the counter moves (usmc's hand-over)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N 200000

struct shared {
	_Atomic int v[2];	/* v[i]: the last message for side i */
	_Atomic int waiting[2];	/* side i is about to sleep */
};

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void pin(int cpu)
{
	cpu_set_t s;

	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	if (sched_setaffinity(0, sizeof(s), &s))
		perror("sched_setaffinity");
}

static int tcp_pair(int *lfd)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001) };
	socklen_t len = sizeof(a);

	*lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (*lfd < 0 || bind(*lfd, (void *)&a, sizeof(a)) || listen(*lfd, 1) ||
	    getsockname(*lfd, (void *)&a, &len))
		return -1;
	return ntohs(a.sin_port);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	int cpu2 = argc > 2 ? atoi(argv[2]) : 0, pipes[2][2], lfd = -1, port = 0, fd = -1;
	int one = 1, me, ep, i;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET };
	struct shared *s;
	char buf[64] = { 0 };
	double t0;
	pid_t pid;

	if (strcmp(mode, "tcp") && strcmp(mode, "futex") && strcmp(mode, "pipeep") &&
	    strcmp(mode, "yield")) {
		fprintf(stderr, "usage: %s tcp|futex|pipeep|yield [SERVER_CPU]\n", argv[0]);
		return 2;
	}
	s = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (s == MAP_FAILED || pipe2(pipes[0], O_NONBLOCK) || pipe2(pipes[1], O_NONBLOCK))
		return 1;
	if (!strcmp(mode, "tcp") && (port = tcp_pair(&lfd)) < 0)
		return 1;
	pid = fork();
	if (pid < 0)
		return 1;
	me = pid == 0;
	pin(me ? cpu2 : 0);
	if (lfd >= 0) {
		if (me) {
			struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
						 .sin_addr.s_addr = htonl(0x7f000001) };

			fd = socket(AF_INET, SOCK_STREAM, 0);
			if (connect(fd, (void *)&a, sizeof(a)))
				return 1;
		} else {
			fd = accept(lfd, NULL, NULL);
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	ep = epoll_create1(0);
	epoll_ctl(ep, EPOLL_CTL_ADD, pipes[me][0], &ev);
	t0 = now();
	for (i = 0; i < N; i++) {
		if ((i & 1) == me) {		/* our turn to send */
			if (fd >= 0) {
				if (write(fd, buf, 14) != 14)
					return 1;
				continue;
			}
			atomic_store(&s->v[!me], i + 1);
			if (!strcmp(mode, "yield") || !atomic_load(&s->waiting[!me]))
				continue;
			if (!strcmp(mode, "futex"))
				syscall(SYS_futex, &s->v[!me], FUTEX_WAKE, 1, NULL, NULL, 0);
			else if (write(pipes[!me][1], "x", 1) < 0) {
				/* full: empty it and ring again, as usmc's lo_signal */
				while (read(pipes[!me][0], buf, sizeof(buf)) > 0)
					;
				if (write(pipes[!me][1], "x", 1) < 0)
					return 1;
			}
			continue;
		}
		if (fd >= 0) {
			if (read(fd, buf, sizeof(buf)) <= 0)
				return 1;
			continue;
		}
		while (atomic_load(&s->v[me]) != i + 1) {
			if (!strcmp(mode, "yield")) {
				sched_yield();
				continue;
			}
			atomic_store(&s->waiting[me], 1);
			if (atomic_load(&s->v[me]) != i + 1) {
				if (!strcmp(mode, "futex"))
					syscall(SYS_futex, &s->v[me], FUTEX_WAIT, i < 2 ? 0 : i - 1,
						NULL, NULL, 0);
				else
					epoll_wait(ep, &ev, 1, -1);
			}
			atomic_store(&s->waiting[me], 0);
		}
	}
	if (pid) {
		double t = now() - t0;

		wait(NULL);
		printf("%-7s client CPU 0, server CPU %d: one-way %.2f us\n", mode, cpu2,
		       t / N * 1e6);
	}
	return 0;
}
