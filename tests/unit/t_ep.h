/* SPDX-License-Identifier: MIT */
/*
 * t_ep.h - the epoll calls the epoll checks make, failing the check on
 * any error (t_epoll.c, t_epoll_ready.c, t_epoll_data.c, t_epoll_mt.c).
 */
#ifndef T_EP_H
#define T_EP_H

#include "t_util.h"

#include <sys/epoll.h>

static T_UNUSED int ep_new(void)
{
	return t_ok(epoll_create1(EPOLL_CLOEXEC));
}

static T_UNUSED void ep_add(int ep, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event ev = { .events = events, .data.u64 = data };

	if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev))
		t_fail("EPOLL_CTL_ADD fd %d events %#x: %s", fd, events, strerror(errno));
}

static T_UNUSED void ep_mod(int ep, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event ev = { .events = events, .data.u64 = data };

	if (epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev))
		t_fail("EPOLL_CTL_MOD fd %d events %#x: %s", fd, events, strerror(errno));
}

/* epoll_wait, EINTR retried: the number of events in ev[]. */
static T_UNUSED int ep_wait_plain(int ep, struct epoll_event *ev, int max, int ms)
{
	int n;

	do
		n = epoll_wait(ep, ev, max, ms);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		t_fail("epoll_wait: %s", strerror(errno));
	return n;
}

#endif
