/* SPDX-License-Identifier: MIT */
/*
 * interpose.h - what the libc wrappers (interpose*.c) share.
 *
 * Wrappers are the only place errno is set: everything below them
 * returns a count or -errno, and USMC_PASS hands the call to libc.
 */
#ifndef USMC_INTERPOSE_H
#define USMC_INTERPOSE_H

#include "real.h"
#include "sock.h"

#include <errno.h>
#include <sys/types.h>

#define EXPORT __attribute__((visibility("default")))

#define ENSURE_REAL(f)							\
	do {								\
		if (unlikely(!real.f))					\
			usmc_real_init();				\
	} while (0)

static inline ssize_t ret(ssize_t r)
{
	if (r < 0) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

/* Account n bytes that went through the kernel on a tracked socket. */
void usmc_tcp_count(struct usmc_sock *sk, ssize_t n, bool tx);

#endif
