/* SPDX-License-Identifier: MIT */
/*
 * poll.h - readiness for poll/ppoll/select/pselect (poll.c).
 */
#ifndef USMC_POLL_H
#define USMC_POLL_H

#include "sock.h"

#include <poll.h>
#include <signal.h>
#include <sys/select.h>

int usmc_poll(struct pollfd *fds, nfds_t n, int timeout_ms, const sigset_t *mask, bool use_mask);
/* *handled is false when no shared-memory connection is in the sets. */
int usmc_select(int nfds, fd_set *r, fd_set *w, fd_set *e, int timeout_ms,
		const sigset_t *mask, bool use_mask, bool *handled);
bool usmc_poll_translated(struct usmc_sock *sk);
short usmc_poll_revents(struct usmc_sock *sk, int fd, short events);

#endif
