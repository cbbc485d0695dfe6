/* SPDX-License-Identifier: MIT */
/*
 * t_echo.h - an echo server in a forked process, on its own epoll loop,
 * that counts the connections it accepted (echo_stop checks the count),
 * and a failing epoll_ctl.  For the threaded tests (t_epoll_threads.c).
 */
#ifndef T_ECHO_H
#define T_ECHO_H

#include "t_util.h"

#include <sys/epoll.h>

#define ECHO_LISTEN	(1ULL << 40)
#define ECHO_CTL	(2ULL << 40)

static T_UNUSED void ep_ctl(int ep, int op, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event ev = { .events = events, .data.u64 = data };

	if (epoll_ctl(ep, op, fd, &ev))
		t_fail("epoll_ctl(%d, op %d, fd %d, events %#x): %s", ep, op, fd, events,
		       strerror(errno));
}

struct echo {
	pid_t pid;
	int ctl;
	uint16_t port;
};

static T_UNUSED void echo_conn(int fd)
{
	char buf[4096];

	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));

		if (n > 0) {
			t_write_all(fd, buf, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n < 0 && errno != ECONNRESET)
			t_fail("echo: read(%d): %s", fd, strerror(errno));
		close(fd);	/* EOF (or reset): its entry goes with it */
		return;
	}
}

static T_UNUSED __attribute__((noreturn)) void echo_serve(int lfd, int ctl)
{
	struct epoll_event ev[64];
	int ep = t_ok(epoll_create1(EPOLL_CLOEXEC)), n, i;
	long accepted = 0;

	t_set_nonblock(lfd, true);
	ep_ctl(ep, EPOLL_CTL_ADD, lfd, EPOLLIN, ECHO_LISTEN);
	ep_ctl(ep, EPOLL_CTL_ADD, ctl, EPOLLIN, ECHO_CTL);
	for (;;) {
		n = epoll_wait(ep, ev, (int)ARRAY_LEN(ev), -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			t_fail("echo: epoll_wait: %s", strerror(errno));
		for (i = 0; i < n; i++) {
			uint64_t d = ev[i].data.u64;

			if (d == ECHO_LISTEN) {
				for (;;) {
					int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

					if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
						continue;
					if (fd < 0 && errno == EAGAIN)
						break;
					if (fd < 0)
						t_fail("echo: accept: %s", strerror(errno));
					accepted++;
					ep_ctl(ep, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLRDHUP,
					       (uint64_t)fd);
				}
			} else if (d == ECHO_CTL) {
				t_sync_wait(ctl);
				t_sync_send(ctl, &accepted, sizeof(accepted));
				_exit(0);
			} else if (d < ECHO_LISTEN) {
				echo_conn((int)d);
			} else {
				t_fail("echo: event %#x with data %#llx", ev[i].events,
				       (unsigned long long)d);
			}
		}
	}
}

static T_UNUSED void echo_start(struct echo *e)
{
	int sv[2];

	t_sync_pair(sv);
	e->pid = t_fork_helper();
	if (e->pid == 0) {
		uint16_t port;
		int lfd;

		close(sv[0]);
		lfd = t_listen(&port);
		t_sync_send(sv[1], &port, sizeof(port));
		echo_serve(lfd, sv[1]);
	}
	close(sv[1]);
	e->ctl = sv[0];
	if (!t_sync_recv(e->ctl, &e->port, sizeof(e->port)))
		t_fail("echo server died before listening");
}

/* Stop it; it must have accepted exactly conns connections. */
static T_UNUSED void echo_stop(struct echo *e, long conns)
{
	long accepted = -1;

	t_sync_post(e->ctl);
	if (!t_sync_recv(e->ctl, &accepted, sizeof(accepted)))
		t_fail("echo server went away");
	t_wait_child(e->pid, "echo server");
	close(e->ctl);
	if (accepted != conns)
		t_fail("echo server accepted %ld connections, %ld were made", accepted, conns);
}

#endif
